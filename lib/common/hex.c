/* Bytes as hexadecimal and back; see hex.h. */
#include <errno.h>
#include <string.h>

#include "hex.h"

void hex_put(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

void hex_put16(const uint8_t in[16], char out[33])
{
    hex_put(in, 16, out);
}

int hex_digit_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Every character checked: sscanf's %2x would take a sign or a space. */
int hex_get16(const char *s, uint8_t out[16])
{
    if (!s || strlen(s) != 32)
        return -EINVAL;
    for (int i = 0; i < 16; i++) {
        int hi = hex_digit_value(s[2 * i]), lo = hex_digit_value(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}
