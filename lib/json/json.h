/*
 * json.h - JSON output of the tools and tcgpud, through jansson.
 *
 * jansson refuses strings that are not UTF-8 (json_string() returns NULL),
 * and a path or a process name may hold any byte but NUL. Such a string is
 * written with every byte that is not part of valid UTF-8 replaced by
 * U+FFFD (docs/cli.md, "JSON output"): the output is always valid JSON,
 * and a valid string is written unchanged.
 *
 * All functions are thread-safe (no state of their own); jansson's objects
 * are not shared between threads here.
 */
#ifndef TCGPU_JSON_H
#define TCGPU_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* 1 when the len bytes at s are valid UTF-8 (no NUL, no overlong forms, no surrogates). */
int tc_json_utf8_valid(const char *s, size_t len);

/*
 * s (NUL-terminated; NULL gives JSON null) as a new JSON string, invalid
 * bytes replaced by U+FFFD. Returns a new reference, or NULL without memory.
 */
json_t *tc_json_string(const char *s);

/* obj[key] = tc_json_string(s). 0, or -ENOMEM. */
int tc_json_set_string(json_t *obj, const char *key, const char *s);

/* obj[key] = integer v (v above INT64_MAX is clamped: no size here comes close). 0 or -ENOMEM. */
int tc_json_set_int(json_t *obj, const char *key, int64_t v);
int tc_json_set_uint(json_t *obj, const char *key, uint64_t v);
int tc_json_set_real(json_t *obj, const char *key, double v);
int tc_json_set_bool(json_t *obj, const char *key, int v);
/* obj[key] = v, taking the caller's reference to v (NULL: -ENOMEM, for chains). */
int tc_json_set_new(json_t *obj, const char *key, json_t *v);

/*
 * Writes v compactly on one line, then a newline, to f, and flushes.
 * Object keys keep their insertion order; reals are written with up to 12
 * significant digits. Takes the caller's reference to v (NULL is refused
 * with -ENOMEM). 0, or -EIO when f could not be written (errno says why;
 * 0 when jansson refused v itself).
 */
int tc_json_print(json_t *v, FILE *f);

/* v as a compact string (the caller frees it); takes the reference. NULL without memory. */
char *tc_json_dumps(json_t *v);

#endif
