/* json.c - strings that may not be UTF-8, setters and printing; see json.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

#define DUMP_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12))

/*
 * The length of the UTF-8 sequence at s (at most n bytes), or 0 when it is
 * not one: a stray continuation byte, a truncated or overlong sequence, a
 * surrogate, a code point above U+10FFFF, or NUL (RFC 3629, table 3-7 of
 * the Unicode standard).
 */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;

    if (c == 0)
        return 0;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;          /* overlong */
        else if (c == 0xed)
            hi = 0x9f;          /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;          /* overlong */
        else if (c == 0xf4)
            hi = 0x8f;          /* above U+10FFFF */
    } else {
        return 0;
    }
    if (len > n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

int tc_json_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;

    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq_len(p + i, len - i);
        if (!k)
            return 0;
        i += k;
    }
    return 1;
}

/* s with every invalid byte replaced by U+FFFD (3 bytes): a new string, or NULL. */
static char *utf8_lossy(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    char *out = malloc(3 * len + 1), *o = out;

    if (!out)
        return NULL;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq_len(p + i, len - i);
        if (k) {
            memcpy(o, p + i, k);
            o += k;
            i += k;
        } else {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    *o = '\0';
    return out;
}

json_t *tc_json_string(const char *s)
{
    size_t len;
    char *fixed;
    json_t *v;

    if (!s)
        return json_null();
    len = strlen(s);
    if (tc_json_utf8_valid(s, len))
        return json_stringn(s, len);
    if (!(fixed = utf8_lossy(s, len)))
        return NULL;
    v = json_string(fixed);
    free(fixed);
    return v;
}

int tc_json_set_new(json_t *obj, const char *key, json_t *v)
{
    if (!v)
        return -ENOMEM;
    return json_object_set_new(obj, key, v) == 0 ? 0 : -ENOMEM;
}

int tc_json_set_string(json_t *obj, const char *key, const char *s)
{
    return tc_json_set_new(obj, key, tc_json_string(s));
}

int tc_json_set_int(json_t *obj, const char *key, int64_t v)
{
    return tc_json_set_new(obj, key, json_integer((json_int_t)v));
}

int tc_json_set_uint(json_t *obj, const char *key, uint64_t v)
{
    return tc_json_set_int(obj, key, v > INT64_MAX ? INT64_MAX : (int64_t)v);
}

int tc_json_set_real(json_t *obj, const char *key, double v)
{
    return tc_json_set_new(obj, key, json_real(v));
}

int tc_json_set_bool(json_t *obj, const char *key, int v)
{
    return tc_json_set_new(obj, key, json_boolean(v));
}

int tc_json_print(json_t *v, FILE *f)
{
    int r;

    if (!v)
        return -ENOMEM;
    errno = 0;                  /* jansson refusing v (a bug) sets none */
    r = json_dumpf(v, f, DUMP_FLAGS);
    json_decref(v);
    if (r < 0 || fputc('\n', f) == EOF || fflush(f) != 0)
        return -EIO;
    return 0;
}

char *tc_json_dumps(json_t *v)
{
    char *s;

    if (!v)
        return NULL;
    s = json_dumps(v, DUMP_FLAGS);
    json_decref(v);
    return s;
}
