/*
 * blocks.c - finer dirty detection than the chunk: the device hash
 * (kernels/devhash.h) of every 64 KiB block of a chunk, computed on the
 * device by the scan kernel (one descriptor per block) or on the host by a
 * worker that has the bytes anyway, recorded in the image (BLOCKHASH) and
 * compared by the next incremental drain, which then copies and stores only
 * the blocks that changed (a PATCH chunk). docs/engine.md, "Incremental".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "internal.h"
#include "kernels/devhash.h"
#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t on the stack */
#include "common/xxh.h"

#define DEFAULT_BLOCK (64u << 10)

uint32_t pipe_block_size(size_t wanted, size_t chunk)
{
    uint32_t b = DEFAULT_BLOCK;

    if (wanted && wanted <= UINT32_MAX && !(wanted & (wanted - 1)))
        b = (uint32_t)wanted;
    while (b > chunk)
        b >>= 1;
    return b >= TCGPU_PATCH_MIN_BLOCK ? b : 0;
}

static uint32_t blocks_of(const struct pipe *p, size_t len)
{
    return (uint32_t)((len + p->block - 1) / p->block);
}

int pipe_blocks_alloc(struct pipe *p, struct piece *pc, size_t n, uint64_t **bh, uint32_t **idx)
{
    size_t total = 0, at = 0;

    *bh = NULL;
    *idx = NULL;
    if (!p->block)
        return 0;
    for (size_t i = 0; i < n; i++)
        total += blocks_of(p, pc[i].len);
    *bh = malloc((total ? total : 1) * sizeof(**bh));
    *idx = malloc((total ? total : 1) * sizeof(**idx));
    if (!*bh || !*idx) {
        free(*bh);
        free(*idx);
        *bh = NULL;
        *idx = NULL;
        pipe_say(p, "out of host memory for %zu block hashes", total);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        pc[i].nblocks = blocks_of(p, pc[i].len);
        pc[i].bh = *bh + at;
        pc[i].changed = *idx + at;
        at += pc[i].nblocks;
    }
    return 0;
}

int pipe_scan_blocks(struct pipe *p, struct piece *pc, size_t from, size_t to)
{
    struct pdev_desc *d;
    struct pdev_result *r;
    char err[256] = "";
    size_t i = from, b = 0;       /* next block to describe: piece i, block b */
    int rc = 0;

    if (!p->dev || !p->block || from >= to || pipe_scan_buffers(&d, &r))
        return 0;                 /* the helpers are an optimisation */
    while (i < to && rc == 0) {
        size_t n = 0, fi = i, fb = b;

        for (; i < to && n < SCAN_BATCH; n++) {
            size_t at = (size_t)b * p->block, len = pc[i].len - at < p->block ? pc[i].len - at
                                                                             : p->block;
            d[n] = (struct pdev_desc){ pc[i].va + at, len };
            if (++b == pc[i].nblocks)
                i++, b = 0;
        }
        rc = pdev_scan(p->dev, p->stream, d, n, PDEV_SCAN_HASH, r, err, sizeof(err));
        if (rc == 0)
            p->st.device_hashed += n;
        for (size_t k = 0; k < n && rc == 0; k++) {
            struct piece *q = &pc[fi];

            if (fb == 0) {
                q->scan = SCAN_BLOCKS;
                q->nonzero = 0;
                q->bh_valid = 1;
            }
            q->bh[fb] = r[k].hash;
            q->nonzero |= r[k].nonzero != 0;
            if (++fb == q->nblocks)
                fi++, fb = 0;
        }
    }
    free(d);
    free(r);
    if (rc)
        pipe_say(p, "device-side scan: %s", err);
    return rc;
}

int pipe_hash_blocks(const struct pipe *p, struct piece *q, const uint8_t *src, uint64_t *xxh)
{
    XXH3_state_t st;

    if (!p->block || !q->bh || q->bh_valid)
        return 0;
    /* Block by block, both hashes of a block while it is in the cache: one
     * pass over the chunk's memory instead of two. */
    if (XXH3_64bits_reset(&st) != XXH_OK)
        return 0;
    for (uint32_t b = 0; b < q->nblocks; b++) {
        size_t at = (size_t)b * p->block, n = q->len - at < p->block ? q->len - at : p->block;

        q->bh[b] = devhash_fast(src + at, n, NULL);
        XXH3_64bits_update(&st, src + at, n);
    }
    q->bh_valid = 1;
    *xxh = XXH3_64bits_digest(&st);
    return 1;
}

int pipe_blocks_changed(const struct pipe *p, struct piece *q, const uint64_t *parent_bh,
                        uint32_t parent_n, uint32_t parent_bs)
{
    if (!parent_bh || q->scan != SCAN_BLOCKS || parent_bs != p->block || parent_n != q->nblocks)
        return -1;
    q->nchanged = 0;
    for (uint32_t b = 0; b < q->nblocks; b++)
        if (q->bh[b] != parent_bh[b])
            q->changed[q->nchanged++] = b;
    return 0;
}
