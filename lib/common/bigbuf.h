/*
 * bigbuf.h - large scratch buffers that go back to the system when freed.
 *
 * glibc serves a large malloc from a thread's arena once its dynamic mmap
 * threshold has risen (after the first large free), and keeps what is freed
 * there: a drain's or a refill's chunk buffers would stay resident for the
 * life of the process, and a process that CRIU dumps afterwards (how the
 * CRIU plugin takes a job off: docs/kubernetes.md) carries them in its
 * images. These are anonymous mappings of their own instead.
 *
 * Thread-safe (no shared state). NULL and 0 are fine to free.
 */
#ifndef TCGPU_COMMON_BIGBUF_H
#define TCGPU_COMMON_BIGBUF_H

#include <stddef.h>

/* len bytes, zeroed, or NULL. */
void *bigbuf_alloc(size_t len);

/* p (from bigbuf_alloc or bigbuf_grow, of `len` bytes) to the system. */
void bigbuf_free(void *p, size_t len);

/* p of old bytes grown to len (contents kept), or NULL with p untouched. */
void *bigbuf_grow(void *p, size_t old, size_t len);

#endif
