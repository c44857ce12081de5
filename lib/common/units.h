/*
 * units.h - sizes and durations as people write them ("8G", "30s"),
 * shared by tcgpud's config, gpuckpt and libtcgpu.so (TCGPU_GPU_MEM). Pure.
 */
#ifndef TCGPU_TCGPUD_UNITS_H
#define TCGPU_TCGPUD_UNITS_H

#include <stdint.h>

/* "8G", "512 MiB", "1.5T", "4096", "0" -> bytes (K, M, G, T are powers of
 * 1024). 0, or -EINVAL (bad number or unit, negative, overflow, a fraction
 * of a byte). */
int tcgpud_parse_size(const char *s, uint64_t *bytes);

/* "30s", "500ms", "2m", "1h", "10" (seconds) -> ns. 0 or -EINVAL. */
int tcgpud_parse_duration(const char *s, uint64_t *ns);

#endif
