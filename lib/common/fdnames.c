/* Descriptor paths named as their user knows them. Contract in fdnames.h. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "fdnames.h"

void tcgpu_fdnames_show(char *text, size_t len, const char *at, const char *shown)
{
    size_t atlen = strlen(at), shownlen = strlen(shown), n = 0;
    char *out;

    if (!len || !atlen || !strcmp(at, shown) || !strstr(text, at) || !(out = malloc(len)))
        return;
    for (const char *p = text; *p && n + 1 < len;) {
        if (!strncmp(p, at, atlen) && !isdigit((unsigned char)p[atlen])) {
            size_t k = shownlen < len - 1 - n ? shownlen : len - 1 - n;
            memcpy(out + n, shown, k);
            n += k;
            p += atlen;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    memcpy(text, out, n + 1);
    free(out);
}
