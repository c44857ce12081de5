/* Sizes and durations; see units.h. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "units.h"

static const char *skip_space(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

/*
 * A plain decimal number at s: digits, optionally a '.' and more digits.
 * Not strtod's wider grammar: "0x10", "1e3", "inf" are not sizes people
 * mean. *end is set after it. 0, or -EINVAL.
 */
static int parse_decimal(const char *s, double *v, const char **end)
{
    const char *p = s;
    char buf[64];

    while (isdigit((unsigned char)*p))
        p++;
    if (p == s)
        return -EINVAL;
    if (*p == '.') {
        const char *f = ++p;
        while (isdigit((unsigned char)*p))
            p++;
        if (p == f)
            return -EINVAL;
    }
    if ((size_t)(p - s) >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, (size_t)(p - s));
    buf[p - s] = '\0';
    errno = 0;
    *v = strtod(buf, NULL);
    if (errno)
        return -EINVAL;
    *end = p;
    return 0;
}

int units_parse_size(const char *s, uint64_t *bytes)
{
    const char *end;
    double v;
    int shift = 0;

    s = skip_space(s);
    if (parse_decimal(s, &v, &end) < 0)
        return -EINVAL;
    end = skip_space(end);
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    case 'B': case '\0': break;
    default: return -EINVAL;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*skip_space(end))
        return -EINVAL;
    v = ldexp(v, shift);
    if (v >= 18446744073709551615.0 || v != floor(v))
        return -EINVAL;           /* overflow, or a fraction of a byte */
    *bytes = (uint64_t)v;
    return 0;
}

int units_parse_percent(const char *s, uint32_t *ppm)
{
    const char *end;
    double v;

    const char *dot;

    s = skip_space(s);
    if (parse_decimal(s, &v, &end) < 0)
        return -EINVAL;
    dot = memchr(s, '.', (size_t)(end - s));
    if (dot && end - dot - 1 > 4)
        return -EINVAL;           /* finer than a millionth of the whole */
    end = skip_space(end);
    if (*end != '%' || *skip_space(end + 1))
        return -EINVAL;
    v = round(v * 10000.0);       /* exact: at most 4 decimals */
    if (v < 1.0 || v > 1000000.0)
        return -EINVAL;
    *ppm = (uint32_t)v;
    return 0;
}

int units_parse_duration(const char *s, uint64_t *ns)
{
    const char *end;
    double v, mult = 1e9;

    s = skip_space(s);
    if (parse_decimal(s, &v, &end) < 0)
        return -EINVAL;
    end = skip_space(end);
    if (!strcmp(end, "ms"))
        mult = 1e6;
    else if (!strcmp(end, "s") || !*end)
        mult = 1e9;
    else if (!strcmp(end, "m") || !strcmp(end, "min"))
        mult = 60e9;
    else if (!strcmp(end, "h"))
        mult = 3600e9;
    else
        return -EINVAL;
    if (v * mult > 1e18)
        return -EINVAL;
    *ns = (uint64_t)(v * mult + 0.5);
    return 0;
}

const char *units_format_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char *const names[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    double v = (double)bytes;
    unsigned u = 0;

    while (v >= 1024 && u + 1 < sizeof(names) / sizeof(names[0])) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, names[u]);
    return buf;
}

const char *units_format_ns(uint64_t ns, char *buf, size_t len)
{
    if (ns == 0)
        snprintf(buf, len, "-");
    else if (ns >= 1000000000ull)
        snprintf(buf, len, "%.2f s", (double)ns / 1e9);
    else if (ns >= 1000000ull)
        snprintf(buf, len, "%.1f ms", (double)ns / 1e6);
    else
        snprintf(buf, len, "%.1f us", (double)ns / 1e3);
    return buf;
}
