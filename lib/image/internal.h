/*
 * internal.h - helpers shared by the image writer, reader and
 * describer; not for other modules.
 */
#ifndef TCGPU_IMAGE_INTERNAL_H
#define TCGPU_IMAGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "image.h"

/* id -> index map (open addressing). Index values are stored +1 (0 = empty). */
struct idmap {
    uint64_t *keys;
    size_t *vals;
    size_t cap; /* power of two */
    size_t used;
};

/* 0 or -ENOMEM. */
int idmap_put(struct idmap *m, uint64_t key, size_t index);
/* 1 and *index when found, else 0. */
int idmap_get(const struct idmap *m, uint64_t key, size_t *index);
void idmap_free(struct idmap *m);

/* Sorts chunks by (allocation id, offset); `by_alloc` is image_chunk order. */
void image_sort_chunks(struct image_chunk *c, size_t n);

/*
 * After image_sort_chunks: the index of the first chunk that overlaps its
 * predecessor of the same allocation, or n when none does.
 */
size_t image_find_overlap(const struct image_chunk *c, size_t n);

/* Removes `path` and everything under it without following symlinks.
 * 0 or -errno. */
int image_remove_tree(const char *path);

/* Whether `path` is a directory a writer may replace: empty, or holding a
 * manifest that starts with the image magic. 1 yes, 0 no, -errno. */
int image_dir_replaceable(const char *path);

uint64_t image_xxh64(const void *p, size_t len);

/* The n low bytes at p as a little-endian number (n <= 8), and back. */
static inline uint64_t le_load(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;

    for (unsigned b = 0; b < n; b++)
        v |= (uint64_t)p[b] << (8 * b);
    return v;
}

static inline void le_store(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned b = 0; b < n; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

struct stat;
/* Opens `name` in the directory dfd for reading without blocking and
 * without following a link, only when it is a regular file (a FIFO named
 * "manifest" must not wedge a reader): the fd, -EBADMSG for anything else
 * (st says what), or -errno. */
int image_open_regular(int dfd, const char *name, struct stat *st);

#endif /* TCGPU_IMAGE_INTERNAL_H */
