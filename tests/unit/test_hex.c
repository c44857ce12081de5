/*
 * Bytes as hex and back (lib/common/hex.c): the 16-byte identities that
 * images, records and the control protocol carry. A record that names a
 * UUID with a sign, a space or one digit too few is refused, not read as
 * another UUID.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "../common/check.h"
#include "common/hex.h"

static int test_round_trip(void)
{
    uint8_t in[16], back[16];
    char text[33];

    for (int i = 0; i < 16; i++)
        in[i] = (uint8_t)(i * 17 + 0x0f);
    hex_put16(in, text);
    CHECK(!strcmp(text, "0f2031425364758697a8b9cadbecfd0e"), "%s", text);
    REQUIRE(hex_get16(text, back) == 0);
    CHECK(!memcmp(in, back, 16));
    CHECK(hex_get16("0F2031425364758697A8B9CADBECFD0E", back) == 0 && !memcmp(in, back, 16),
          "upper case reads too");
    return T_EXIT_PASS;
}

static int test_refused(void)
{
    uint8_t out[16];

    CHECK(hex_get16(NULL, out) == -EINVAL);
    CHECK(hex_get16("", out) == -EINVAL);
    CHECK(hex_get16("0f2031425364758697a8b9cadbecfd0", out) == -EINVAL, "31 digits");
    CHECK(hex_get16("0f2031425364758697a8b9cadbecfd0e0", out) == -EINVAL, "33 digits");
    CHECK(hex_get16("+f2031425364758697a8b9cadbecfd0e", out) == -EINVAL, "a sign");
    CHECK(hex_get16(" f2031425364758697a8b9cadbecfd0e", out) == -EINVAL, "a space");
    CHECK(hex_get16("0f2031425364758697a8b9cadbecfd0g", out) == -EINVAL, "not a digit");
    return T_EXIT_PASS;
}

static int test_any_length(void)
{
    const uint8_t in[3] = { 0x00, 0xab, 0xff };
    char out[7] = "xxxxxx";

    hex_put(in, 3, out);
    CHECK(!strcmp(out, "00abff"), "%s", out);
    hex_put(in, 0, out);
    CHECK(out[0] == '\0');
    return T_EXIT_PASS;
}

int main(void)
{
    RUN(test_round_trip);
    RUN(test_refused);
    RUN(test_any_length);
    return T_EXIT_STATUS();
}
