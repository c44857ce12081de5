/*
 * units.h - sizes and durations as people write them ("8G", "30s") and as
 * tcgpu shows them ("1.5 GiB", "12.3 ms"), shared by tcgpud's config,
 * gpuckpt, the control server's log and libtcgpu.so (TCGPU_GPU_MEM). Pure.
 */
#ifndef TCGPU_COMMON_UNITS_H
#define TCGPU_COMMON_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* "8G", "512 MiB", "1.5T", "4096", "0" -> bytes (K, M, G, T are powers of
 * 1024). The number is decimal digits with an optional fraction: 0, or
 * -EINVAL (bad number or unit, "0x10", "1e3", negative, overflow, a fraction
 * of a byte). */
int units_parse_size(const char *s, uint64_t *bytes);

/* "25%", "33.3%", "100%" -> parts per million of a whole (1..1000000): 0, or
 * -EINVAL (no '%', zero, above 100%, or finer than a millionth). */
int units_parse_percent(const char *s, uint32_t *ppm);

/* "30s", "500ms", "2m", "1h", "10" (seconds), "1.5s" -> ns (decimal
 * numbers as for sizes). 0 or -EINVAL. */
int units_parse_duration(const char *s, uint64_t *ns);

/* "512 B", "1.5 GiB" (powers of 1024, up to PiB) into buf; returns buf. */
const char *units_format_bytes(uint64_t bytes, char *buf, size_t len);

/* "-" for 0 (not measured), else "850.0 us", "12.3 ms", "1.25 s"; returns buf. */
const char *units_format_ns(uint64_t ns, char *buf, size_t len);

#endif
