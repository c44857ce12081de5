/*
 * planes.h - byte planes: n elements of `esize` bytes as `esize` planes of
 * n bytes, byte b of every element in plane b, and back. The codec stores
 * the planes (BYTEGROUP, format.h); this is only the reshuffle. With `rot`
 * each element is rotated left one bit on the way into the planes and right
 * one bit on the way back, so that a float's sign moves below its mantissa
 * and its exponent fills a byte of its own.
 *
 * Every form (scalar, and on x86-64 SSE2, SSSE3 or AVX2 as the CPU has
 * them) stores the same bytes. No state: thread-safe.
 */
#ifndef TCGPU_IMAGE_PLANES_H
#define TCGPU_IMAGE_PLANES_H

#include <stddef.h>
#include <stdint.h>

#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t */
#include "common/xxh.h"

#define PLANES_MAX_ESIZE 8u       /* the widest element codec_dtype_esize gives */

/* The forms, narrowest first. */
enum planes_isa { PLANES_SCALAR, PLANES_SSE2, PLANES_SSSE3, PLANES_AVX2 };

/*
 * Lets only forms up to `widest` run (default: all the CPU has), so that a
 * test can check each against the scalar one on a machine that has them
 * all. Process-wide; not for use while other threads split or join.
 */
void planes_limit(enum planes_isa widest);

/* pl[b] = base + b * n: planes of n bytes one after the other. */
void planes_at(uint8_t *base, size_t n, unsigned esize, uint8_t *pl[]);

/* The n elements of esize bytes at src into the planes pl[0..esize), each
 * of n bytes and anywhere (not overlapping src). */
void planes_split(const uint8_t *src, size_t n, unsigned esize, int rot, uint8_t *const pl[]);

/* planes_split, and the n * esize bytes at src into `h` when it is not
 * NULL: each 64 KiB slice is hashed just before it is split, so the two
 * passes read memory once. */
void planes_split_hashing(const uint8_t *src, size_t n, unsigned esize, int rot,
                          uint8_t *const pl[], XXH3_state_t *h);

/* Interleaves the planes pl[0..esize) (n bytes each, anywhere) into the n
 * elements at dst: planes_split's inverse. */
void planes_join(const uint8_t *const pl[], size_t n, unsigned esize, int rot, uint8_t *dst);

#endif /* TCGPU_IMAGE_PLANES_H */
