/* Sizes and durations; see units.h. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "units.h"

static const char *skip_space(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

int tcgpud_parse_size(const char *s, uint64_t *bytes)
{
    char *end;
    double v;
    int shift = 0;

    s = skip_space(s);
    if (!isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || !(v >= 0))
        return -EINVAL;
    end = (char *)skip_space(end);
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

int tcgpud_parse_duration(const char *s, uint64_t *ns)
{
    char *end;
    double v, mult = 1e9;

    s = skip_space(s);
    if (!isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || !(v >= 0))
        return -EINVAL;
    end = (char *)skip_space(end);
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

