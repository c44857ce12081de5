/*
 * drain.c - device memory (or a host store) to the host store or an image:
 * the host drain's direct copies, and the image drain's staging ring
 * (copies issued, chunks encoded by the workers, written in order).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "driver/driver.h"
#include "driver/gate.h"
#include "dev.h"
#include "internal.h"

/* Issues one async D2H copy (the stream orders them). */
static int copy_d2h(struct pipe *p, void *dst, CUdeviceptr src, size_t len)
{
    return pipe_copy_issued(p, TCGPU_REAL(cuMemcpyDtoHAsync)(dst, src, len, p->stream),
                            "cuMemcpyDtoHAsync", src, len);
}

/*
 * Faults the store's pages in (MADV_POPULATE_WRITE) on a thread of its own
 * while the stream copies: fresh pages cost a fault and a page of zeroing
 * each, as much as the copy itself on some machines. Chunks the device
 * found zero are left untouched (no memory at all). For a fresh arena whose
 * pages nothing faulted yet (pipe_opts.prefault -1: never): 512 MiB of the
 * bench mix into 4 KiB pages went from 279 ms to 164 ms, into huge pages
 * from 118 to 102 ms (2 CPUs, medians of 5).
 */
static int prefault_wanted(const struct pipe *p, const struct pipe_store *s)
{
    return !s->reused && !s->faulted && p->o.prefault >= 0;
}

struct prefault {
    struct pipe_store *s;
    struct helper_thread th;
};

static void *prefault_main(void *arg)
{
    struct prefault *f = arg;

    tcgpu_gate_set_exempt(true);
    for (size_t i = 0; i < f->s->n; i++) {
        struct piece *q = &f->s->pc[i];
        uintptr_t a = (uintptr_t)q->host & ~(uintptr_t)4095;
        uintptr_t b = ((uintptr_t)q->host + q->len + 4095) & ~(uintptr_t)4095;

        if (q->state == P_ZERO)
            continue;
        if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) != 0)
            break;            /* old kernel: the copies fault the pages in */
    }
    return NULL;
}

int pipe_drain_host(struct pipe *p, const struct pipe_ext *e, size_t n, struct pipe_store **out)
{
    return pipe_drain_host_reuse(p, e, n, NULL, out);
}

int pipe_drain_host_reuse(struct pipe *p, const struct pipe_ext *e, size_t n,
                          struct pipe_store *spare, struct pipe_store **out)
{
    struct pipe_store *s = NULL;
    struct prefault pf = { 0 };
    uint64_t since_sync = 0;
    int rc;

    p->msg[0] = '\0';
    memset(&p->st, 0, sizeof(p->st));
    p->progress = 0;
    if ((rc = pipe_store_new(p, e, n, spare, &s)) != 0)
        return rc;
    p->st.raw_bytes = s->raw_bytes;
    p->st.store_reused = s->reused;
    for (size_t i = 0; i < s->n && rc == 0;) {
        size_t end = pipe_device_run(s->pc, s->n, i);

        if ((rc = pipe_use_device(p, s->pc[i].device, 1)) != 0 ||
            (rc = pipe_store_register(p, s)) != 0 ||
            (rc = pipe_scan_pieces(p, s->pc, i, end, 0)) != 0)
            break;
        for (size_t k = i; k < end; k++)
            if (piece_found_zero(&s->pc[k]))
                s->pc[k].state = P_ZERO;
        if (!pf.th.started && prefault_wanted(p, s)) {
            pf.s = s;
            helper_thread_start(&pf.th, prefault_main, &pf);
        }
        while (i < end && rc == 0) {
            struct piece *q = &s->pc[i];
            size_t run = q->len, j = i + 1;

            if (q->state == P_ZERO) {
                /* Zero on the device: the store's untouched pages are zero. */
                p->st.zero_chunks++;
                p->st.device_skipped++;
                i++;
                continue;
            }
            /* One copy for a run of adjacent non-zero chunks. */
            /* (Never across allocations: adjacent addresses are not one allocation.) */
            while (j < end && run < HOST_COPY_MAX && s->pc[j].va == q->va + run &&
                   s->pc[j].host == q->host + run && s->pc[j].alloc_id == q->alloc_id &&
                   s->pc[j].state != P_ZERO)
                run += s->pc[j++].len;
            rc = copy_d2h(p, q->host, q->va, run);
            since_sync += run;
            i = j;
            if (rc == 0 && since_sync >= HOST_SYNC_EVERY) {
                rc = pipe_stream_sync(p);
                pipe_add_progress(p, since_sync);
                since_sync = 0;
            }
        }
        if (rc == 0)
            rc = pipe_stream_sync(p);
    }
    if (rc == 0)
        rc = pipe_leave_device(p);
    else
        pipe_leave_device(p);
    helper_thread_join(&pf.th);
    if (rc) {
        pipe_store_free(s);
        return rc;
    }
    pipe_add_progress(p, since_sync);
    p->st.stored_bytes = pipe_store_bytes(s);
    *out = s;
    return 0;
}

/* --- encoding: drain to image and write a store ------------------------------ */

/*
 * Whether a patch stores its blocks as the XOR with the parent's bytes
 * (pipe_opts.patch_xor 1/-1; default: when at least half the blocks changed,
 * a dense update such as an optimizer step, where the XOR keeps sign and
 * exponent zero and decoding the parent's chunk pays for itself).
 */
static int patch_xor_wanted(const struct pipe *p, const struct piece *q)
{
    if (p->o.patch_xor)
        return p->o.patch_xor > 0;
    return 2 * q->nchanged >= q->nblocks;
}

static void encode_patch(struct pipe *p, struct worker *w, struct job *j)
{
    struct piece *q = j->pc;
    struct codec_patch pt = {
        .raw_len = q->len, .block_size = p->block, .k = q->nchanged, .idx = q->changed,
        .blocks = j->src,
    };

    if (patch_xor_wanted(p, q) && w->base && w->xor_buf &&
        chunk_sink_parent_decode(j->sink, j->parent, w->ctx, w->base, NULL, 0) == 0) {
        pt.base = w->base;
        pt.scratch = w->xor_buf;
    }
    j->t.rc = chunk_encode_patch(w->ctx, &pt, q->dtype, j->parent, j->dst, j->dst_cap, &j->c,
                                 &j->stored);
}

static void encode_job(struct pipe *p, struct worker *w, struct task *t)
{
    struct job *j = (struct job *)t;
    struct piece *q = j->pc;

    if (j->patch) {
        if (!w->base && (w->base = malloc(p->chunk)))
            w->xor_buf = malloc(p->chunk);
        encode_patch(p, w, j);
    } else {
        uint64_t xxh;

        /* The next incremental compares blocks: hash them while the bytes
         * are here, and the raw checksum in the same pass. */
        if (pipe_hash_blocks(p, q, j->src, &xxh))
            t->rc = chunk_encode_hashed(w->ctx, j->src, q->len, q->dtype, j->parent, xxh, j->dst,
                                        q->len, &j->c, &j->stored);
        else
            t->rc = chunk_encode(w->ctx, j->src, q->len, q->dtype, j->parent, j->dst, q->len,
                                 &j->c, &j->stored);
    }
    __atomic_add_fetch(&p->st.encoded_chunks, 1, __ATOMIC_RELAXED);
}

struct drain {
    struct pipe *p;
    struct piece *pc;
    size_t n;
    size_t next;                  /* next piece to take */
    int from_device;
    struct chunk_sink *sink;
    uint64_t issued, written;     /* job sequence numbers */
    unsigned fill_slot;
    int err;
};

/* The job ring's next entry, cleared, for `piece`: its chunk's position
 * and, when the device hashed it, its device hash. */
static struct job *next_job(struct drain *d, struct piece *piece)
{
    struct job *job = &d->p->jobs[d->issued % d->p->njobs];

    memset(job, 0, sizeof(*job));
    job->pc = piece;
    job->slot = -1;
    job->c.alloc_id = piece->alloc_id;
    job->c.alloc_offset = piece->offset;
    if (piece->scan == SCAN_DEVHASH) {
        job->c.dev_hash = piece->devhash;
        job->c.has_dev_hash = 1;
    }
    return job;
}

/* Found zero on the device, or held as zero by the store. */
static int is_zero(const struct drain *d, const struct piece *piece)
{
    return piece_found_zero(piece) || (!d->from_device && piece->state == P_ZERO);
}

/* The device hash equals the parent chunk's: unchanged, and never copied. */
static int unchanged_on_device(const struct piece *piece, const struct image_chunk *parent)
{
    return parent && piece->scan == SCAN_DEVHASH && parent->has_dev_hash &&
           parent->dev_hash == piece->devhash;
}

/* A ZERO chunk: ready at once, nothing copied or encoded. */
static void ready_as_zero(struct drain *d, struct job *job)
{
    struct pipe *p = d->p;
    size_t len = job->pc->len;

    chunk_set_zero(&job->c, len, pipe_zero_csum(p, len));
    job->state = J_READY;
    if (d->from_device)
        p->st.device_skipped++;
}

/* A PARENT chunk by the device hash: ready at once, it stays on the device. */
static void ready_as_parent(struct drain *d, struct job *job, const struct image_chunk *parent)
{
    chunk_set_parent(&job->c, parent);
    job->state = J_READY;
    d->p->st.device_skipped++;
}

/*
 * Puts the job's bytes in the slot for a worker to encode: from the device,
 * a copy into the slot's memory (the job waits for the slot's event); from
 * a store, its raw copy where it is (queued now). The encoded form goes to
 * the slot's `enc` buffer.
 */
static int stage_for_encoding(struct drain *d, unsigned slot_index, struct job *job,
                              const struct image_chunk *parent)
{
    struct pipe *p = d->p;
    struct slot *slot = &p->slots[slot_index];
    struct piece *piece = job->pc;
    int rc;

    job->slot = (int)slot_index;
    job->dst = slot->enc + slot->enc_fill;
    job->dst_cap = piece->len;
    job->parent = parent;
    job->t.fn = encode_job;
    if (d->from_device) {
        job->src = slot->mem + slot->fill;
        if ((rc = copy_d2h(p, slot->mem + slot->fill, piece->va, piece->len)) != 0)
            return rc;
        job->state = J_WAITING_COPY;
    } else {
        job->src = piece->host;
        job->state = J_QUEUED;
        pool_submit(p, &job->t);
    }
    slot->fill += piece->len;
    slot->enc_fill += ENC_ROOM(piece->len);
    slot->pending++;
    return 0;
}

/*
 * A patch: only the blocks that changed since the parent's chunk are
 * copied (runs of adjacent ones in one copy), packed into the slot, and
 * encoded as a PATCH chunk against the parent's.
 */
static int stage_patch(struct drain *d, unsigned slot_index, struct job *job,
                       const struct image_chunk *parent, size_t bytes)
{
    struct pipe *p = d->p;
    struct slot *slot = &p->slots[slot_index];
    struct piece *q = job->pc;
    size_t at = 0;
    int rc;

    job->slot = (int)slot_index;
    job->patch = 1;
    job->src = slot->mem + slot->fill;
    job->dst = slot->enc + slot->enc_fill;
    job->dst_cap = codec_patch_bound(q->nchanged, bytes);
    job->parent = parent;
    job->sink = d->sink;
    job->t.fn = encode_job;
    for (uint32_t i = 0; i < q->nchanged;) {
        uint32_t first = q->changed[i], last = first;
        size_t off = (size_t)first * p->block, len;

        while (i + 1 < q->nchanged && q->changed[i + 1] == last + 1)
            last = q->changed[++i];
        i++;
        len = ((size_t)(last + 1) * p->block < q->len ? (size_t)(last + 1) * p->block : q->len) - off;
        if ((rc = copy_d2h(p, slot->mem + slot->fill + at, q->va + off, len)) != 0)
            return rc;
        at += len;
    }
    job->state = J_WAITING_COPY;
    slot->fill += bytes;
    slot->enc_fill += ENC_ROOM(job->dst_cap);
    slot->pending++;
    p->st.patched_chunks++;
    return 0;
}

/* Bytes of the changed blocks of a piece (nchanged set). */
static size_t changed_bytes(const struct pipe *p, const struct piece *q)
{
    size_t n = 0;

    for (uint32_t i = 0; i < q->nchanged; i++) {
        size_t at = (size_t)q->changed[i] * p->block;
        n += q->len - at < p->block ? q->len - at : p->block;
    }
    return n;
}

/* What becomes of a piece in the image. */
enum piece_plan {
    PLAN_WHOLE,                   /* copied and encoded whole */
    PLAN_ZERO,                    /* all zero: a ZERO chunk, never copied */
    PLAN_PARENT,                  /* unchanged since the parent image: a PARENT chunk */
    PLAN_PATCH,                   /* the parent's chunk with its changed blocks patched */
};

/*
 * How a piece with a parent chunk goes, by the block hashes: PLAN_PARENT
 * unchanged, PLAN_PATCH its changed blocks, PLAN_WHOLE (no comparable
 * hashes, or every block changed and no XOR to gain from).
 */
static enum piece_plan patch_plan(struct drain *d, struct piece *q, const struct image_chunk *parent)
{
    uint32_t n = 0, bs = 0;
    const uint64_t *pbh = chunk_sink_parent_blocks(d->sink, parent, &n, &bs);

    if (!d->from_device || !parent || pipe_blocks_changed(d->p, q, pbh, n, bs) != 0)
        return PLAN_WHOLE;
    if (q->nchanged == 0)
        return PLAN_PARENT;
    if (q->nchanged == q->nblocks && d->p->o.patch_xor < 0)
        return PLAN_WHOLE;
    return PLAN_PATCH;
}

/* Zero pieces and pieces the device hash found unchanged are never copied;
 * the others go by the block hashes. */
static enum piece_plan plan_piece(struct drain *d, struct piece *q, const struct image_chunk *parent)
{
    if (is_zero(d, q))
        return PLAN_ZERO;
    if (unchanged_on_device(q, parent))
        return PLAN_PARENT;
    return patch_plan(d, q, parent);
}

/* A filled slot: its copies get the event that tells when they landed
 * (S_COPYING); a store's chunks are with the workers already (S_WORKING). */
static int seal_slot(struct drain *d, struct slot *slot)
{
    CUresult cr;

    if (!slot->pending)
        return 0;
    if (!d->from_device) {
        slot->state = S_WORKING;
        return 0;
    }
    cr = TCGPU_REAL(cuEventRecord)(slot->ev, d->p->stream);
    if (cr != CUDA_SUCCESS) {
        pipe_say(d->p, "cuEventRecord: %s", cu_error_name(cr));
        return -EIO;
    }
    slot->state = S_COPYING;
    return 0;
}

/* A copy into the slot failed: its chunks staged so far will never get an
 * event to wait for, nor be encoded; they are done (the drain has failed,
 * write_ready drops them) once the stream has finished with the slot. */
static void abandon_slot(struct drain *d, unsigned slot_index)
{
    struct pipe *p = d->p;

    for (uint64_t q = d->written; q < d->issued; q++) {
        struct job *j = &p->jobs[q % p->njobs];

        if (j->slot == (int)slot_index && j->state == J_WAITING_COPY)
            j->state = J_READY;
    }
    TCGPU_REAL(cuStreamSynchronize)(p->stream);   /* the failed copy's message stays */
    p->slots[slot_index].state = S_WORKING;
}

/* Takes pieces into slot `slot_index` until it is full (or the job ring
 * is): their bytes are copied (device) or pointed at (store); zero and
 * unchanged chunks become ready jobs at once. */
static int fill_slot(struct drain *d, unsigned slot_index)
{
    struct pipe *p = d->p;
    struct slot *slot = &p->slots[slot_index];
    int rc;

    /* The writer may still be sending the slot's last chunks from it. */
    if (slot->io_ticket && (rc = chunk_sink_wait(d->sink, slot->io_ticket)) != 0) {
        pipe_say(p, "%s", chunk_sink_error(d->sink));
        return rc;
    }
    slot->io_ticket = 0;
    slot->fill = 0;
    slot->enc_fill = 0;
    slot->pending = 0;
    while (d->next < d->n && d->issued - d->written < p->njobs) {
        struct piece *piece = &d->pc[d->next];
        struct job *job = next_job(d, piece);
        const struct image_chunk *parent =
            chunk_sink_parent(d->sink, piece->alloc_id, piece->offset, piece->len);
        enum piece_plan plan = plan_piece(d, piece, parent);

        if (plan == PLAN_ZERO) {
            ready_as_zero(d, job);
        } else if (plan == PLAN_PARENT) {
            ready_as_parent(d, job, parent);
        } else if (plan == PLAN_PATCH) {
            size_t bytes = changed_bytes(p, piece);

            if (slot->fill + bytes > p->slot_size ||
                slot->enc_fill + ENC_ROOM(codec_patch_bound(piece->nchanged, bytes)) >
                    ENC_SIZE(p->slot_size))
                break;            /* the next slot takes it */
            if ((rc = stage_patch(d, slot_index, job, parent, bytes)) != 0) {
                abandon_slot(d, slot_index);
                return rc;
            }
        } else {
            if (slot->fill + piece->len > p->slot_size ||
                slot->enc_fill + ENC_ROOM(piece->len) > ENC_SIZE(p->slot_size))
                break;            /* the next slot takes it */
            if ((rc = stage_for_encoding(d, slot_index, job, parent)) != 0) {
                abandon_slot(d, slot_index);
                return rc;
            }
        }
        d->issued++;
        d->next++;
    }
    return seal_slot(d, slot);
}

/* Hands the chunks of a slot whose copies are done to the workers. */
static void dispatch_slot(struct drain *d, unsigned si)
{
    struct pipe *p = d->p;

    for (uint64_t q = d->written; q < d->issued; q++) {
        struct job *j = &p->jobs[q % p->njobs];

        if (j->slot == (int)si && j->state == J_WAITING_COPY) {
            j->state = J_QUEUED;
            pool_submit(p, &j->t);
        }
    }
    p->slots[si].state = S_WORKING;
}

/*
 * How many bytes at the job's stored bytes the writer may write: to the end
 * of the job's room in the encode buffer, or just them where they are
 * elsewhere (a RAW chunk's stored bytes are its source, and what follows
 * them is the next chunk's).
 */
static size_t stored_room(const struct job *j)
{
    const uint8_t *s = j->stored;

    if (s && j->dst && s >= j->dst && s < j->dst + ENC_ROOM(j->dst_cap))
        return (size_t)(j->dst + ENC_ROOM(j->dst_cap) - s);
    return j->c.stored_len;
}

/* Appends one encoded job to the image: its stored bytes are written from
 * the slot (no copy), which stays the writer's until that write is done. */
static int add_to_sink(struct drain *d, struct job *j)
{
    struct pipe *p = d->p;
    uint64_t ticket = 0;
    int rc;

    /* (The cast: stored bytes are the slot's or the store's memory, and
     * the writer writes only inside stored_room.) */
    rc = chunk_sink_add_ref(d->sink, &j->c, (void *)j->stored, stored_room(j), p->block,
                            j->pc->bh_valid ? j->pc->bh : NULL, &ticket);
    if (rc == 0 && ticket && j->slot >= 0)
        p->slots[j->slot].io_ticket = ticket;
    return rc;
}

/* Appends ready jobs in order; frees their slots. Returns 1 if any. */
static int write_ready(struct drain *d)
{
    struct pipe *p = d->p;
    int any = 0;

    while (d->written < d->issued) {
        struct job *j = &p->jobs[d->written % p->njobs];
        int rc;

        if (j->state == J_WAITING_COPY || (j->state == J_QUEUED && !pool_task_done(p, &j->t)))
            break;
        if (j->state == J_QUEUED && j->t.rc && !d->err) {
            pipe_say(p, "encoding chunk at %#llx+%#llx of allocation %llu: %s",
                     (unsigned long long)j->pc->va, (unsigned long long)j->pc->offset,
                     (unsigned long long)j->pc->alloc_id, strerror(-j->t.rc));
            d->err = j->t.rc;
        }
        if (!d->err) {
            rc = add_to_sink(d, j);
            if (rc) {
                pipe_say(p, "%s", chunk_sink_error(d->sink));
                d->err = rc;
            } else {
                p->st.stored_bytes += j->c.stored_len;
                p->st.zero_chunks += j->c.codec == TCGPU_CODEC_ZERO;
                p->st.parent_chunks += j->c.codec == TCGPU_CODEC_PARENT;
                pipe_add_progress(p, j->c.raw_len);
            }
        }
        if (j->slot >= 0) {
            struct slot *s = &p->slots[j->slot];

            if (--s->pending == 0)
                s->state = S_FREE;
        }
        j->state = J_EMPTY;
        d->written++;
        any = 1;
    }
    return any;
}

static int run_drain(struct drain *d)
{
    struct pipe *p = d->p;
    int rc = 0;

    while (!d->err || d->written < d->issued) {
        int progressed = 0;

        /* 1. fill free slots, in ring order */
        while (!d->err && d->next < d->n && p->slots[d->fill_slot].state == S_FREE) {
            uint64_t before = d->issued;

            if ((rc = fill_slot(d, d->fill_slot)) != 0) {
                d->err = rc;
                break;
            }
            if (p->slots[d->fill_slot].state != S_FREE)
                d->fill_slot = (d->fill_slot + 1) % p->nslots;
            if (d->issued == before)
                break;            /* no room in the job ring, or a device switch waits */
            progressed = 1;
        }
        /* 2. slots whose copies landed go to the workers */
        for (unsigned k = 0; k < p->nslots; k++) {
            struct slot *s = &p->slots[k];

            if (s->state == S_COPYING &&
                TCGPU_REAL(cuEventQuery)(s->ev) != CUDA_ERROR_NOT_READY) {
                dispatch_slot(d, k);
                progressed = 1;
            }
        }
        /* 3. write what is ready, in order */
        progressed |= write_ready(d);
        if (d->written == d->issued && (d->next == d->n || d->err))
            break;
        if (progressed)
            continue;
        /* 4. wait for the oldest job: its copy, or its encoding */
        if (d->written < d->issued) {
            struct job *j = &p->jobs[d->written % p->njobs];

            if (j->state == J_WAITING_COPY) {
                CUresult cr = TCGPU_REAL(cuEventSynchronize)(p->slots[j->slot].ev);

                if (cr != CUDA_SUCCESS && !d->err) {
                    pipe_say(p, "copy to the staging ring: %s", cu_error_name(cr));
                    d->err = -EIO;
                }
                dispatch_slot(d, (unsigned)j->slot);
            } else if (j->state == J_QUEUED) {
                pool_task_wait(p, &j->t);
            }
        }
    }
    /* Nothing reads the slots (or a store) once the drain returns. */
    if ((rc = chunk_sink_wait(d->sink, UINT64_MAX)) != 0 && !d->err) {
        pipe_say(p, "%s", chunk_sink_error(d->sink));
        d->err = rc;
    }
    return d->err;
}

static int drain_setup(struct pipe *p)
{
    p->msg[0] = '\0';
    memset(&p->st, 0, sizeof(p->st));
    p->progress = 0;
    if (pipe_zeros_init(p)) {
        pipe_say(p, "out of memory");
        return -ENOMEM;
    }
    return 0;
}

/* How the device-side scan looks at the chunks before they are copied. */
enum scan_mode { SCAN_ZEROS, SCAN_CHUNKS, SCAN_BLOCK_HASHES };

/*
 * Whether a parent's block hashes can save copies: they are of this pipe's
 * block size. Then the drain hashes blocks on the device (the simcuda twin
 * too: its scan reads the memory once, where copying writes it as well).
 */
static int parent_blocks_usable(const struct pipe *p, const struct chunk_sink *sink)
{
    return p->block && p->o.device_hash >= 0 && chunk_sink_parent_has_blocks(sink, p->block);
}

/*
 * What the scan computes. A GPU hashes at memory speed, so always (block
 * hashes, for the next incremental image); the simcuda twin hashes on the
 * CPU, so only when the parent's hashes can save copies (blocks, or chunks
 * for an older parent); else zero flags alone, and the workers hash the
 * blocks as they encode. "Always" (pipe_opts.device_hash 1) takes the GPU's
 * path on simcuda too.
 */
static enum scan_mode scan_mode(const struct pipe *p, const struct chunk_sink *sink)
{
    int mode = p->o.device_hash;
    int always = mode > 0 || pdev_kind(p->dev) == PDEV_CUBIN;

    if (!p->dev || mode < 0)
        return SCAN_ZEROS;
    if (p->block && (always || parent_blocks_usable(p, sink)))
        return SCAN_BLOCK_HASHES;
    if (always || chunk_sink_parent_has_dev_hash(sink))
        return SCAN_CHUNKS;
    return SCAN_ZEROS;
}

static int scan_run(struct pipe *p, struct piece *pc, size_t from, size_t to, enum scan_mode m)
{
    if (m == SCAN_BLOCK_HASHES)
        return pipe_scan_blocks(p, pc, from, to);
    return pipe_scan_pieces(p, pc, from, to, m == SCAN_CHUNKS);
}

int pipe_drain_image(struct pipe *p, const struct pipe_ext *e, size_t n, struct chunk_sink *sink)
{
    struct drain d = { .p = p, .from_device = 1, .sink = sink };
    uint64_t *bh = NULL;
    uint32_t *idx = NULL;
    int rc;

    if ((rc = drain_setup(p)) != 0 || (rc = pipe_make_pieces(p, e, n, &d.pc, &d.n)) != 0)
        return rc;
    if ((rc = pipe_blocks_alloc(p, d.pc, d.n, &bh, &idx)) != 0) {
        free(d.pc);
        return rc;
    }
    for (size_t i = 0; i < d.n; i++)
        p->st.raw_bytes += d.pc[i].len;
    /* One device at a time (the caller groups extents by device). */
    for (size_t i = 0, end; i < d.n && rc == 0; i = end) {
        struct drain run = d;

        end = pipe_device_run(d.pc, d.n, i);
        run.pc = d.pc + i;
        run.n = end - i;
        rc = pipe_use_device(p, d.pc[i].device, parent_blocks_usable(p, sink) ? 2 : 1);
        if (rc == 0)
            rc = pipe_make_ring(p, 1, 1);
        if (rc == 0)
            rc = scan_run(p, d.pc, i, end, scan_mode(p, sink));
        if (rc == 0)
            rc = run_drain(&run);
    }
    if (rc == 0)
        rc = pipe_leave_device(p);
    else
        pipe_leave_device(p);
    free(d.pc);
    free(bh);
    free(idx);
    return rc;
}

int pipe_write_store(struct pipe *p, struct pipe_store *s, struct chunk_sink *sink)
{
    struct drain d = { .p = p, .pc = s->pc, .n = s->n, .sink = sink };
    int rc;

    pipe_store_compress_stop(s);
    for (size_t i = 0; i < s->n; i++) {
        if (s->pc[i].state == P_ENC) {
            pipe_say(p, "the host copy is compressed in memory; cannot write it as an image");
            return -EINVAL;
        }
    }
    uint64_t *bh = NULL;
    uint32_t *idx = NULL;

    if ((rc = drain_setup(p)) != 0 || (rc = pipe_blocks_alloc(p, s->pc, s->n, &bh, &idx)) != 0)
        return rc;
    p->st.raw_bytes = s->raw_bytes;
    /* No device: the ring's encode buffers only. */
    rc = pipe_make_ring(p, 1, 0);
    if (rc == 0)
        rc = run_drain(&d);
    for (size_t i = 0; i < s->n; i++) {   /* the arrays go now */
        s->pc[i].bh = NULL;
        s->pc[i].changed = NULL;
        s->pc[i].bh_valid = 0;
    }
    free(bh);
    free(idx);
    return rc;
}
