/*
 * refill.c - an image or a host store back to the device: zero chunks by
 * memset, raw host chunks by direct uploads, the rest decoded by the
 * workers into the staging slots and uploaded while the next ones decode.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "internal.h"
#include "common/bigbuf.h"

/* --- refill ---------------------------------------------------------------- */

static void decode_job(struct pipe *p, struct worker *w, struct task *t)
{
    struct job *j = (struct job *)t;
    int rc;

    (void)p;
    if (j->kind == R_DECODE_STORE) {
        struct piece *q = j->pc;
        rc = codec_decode(w->ctx, q->codec, q->enc, q->enc_len, j->dst, q->len);
        if (rc)
            snprintf(j->err, sizeof(j->err), "in-memory chunk at %#llx does not decode: %s",
                     (unsigned long long)q->va, strerror(-rc));
        t->rc = rc;
        return;
    }
    unsigned codec;
    uint32_t stored_len;

    chunk_source_resolved(j->source, j->index, &codec, &stored_len);
    if (codec == TCGPU_CODEC_RAW) {
        /* Stored bytes are the raw bytes: read them where they go. */
        t->rc = chunk_source_read(j->source, j->index, j->dst, j->err, sizeof(j->err));
        return;
    }
    if (w->buf_cap < stored_len) {
        uint8_t *b = bigbuf_grow(w->buf, w->buf_cap, stored_len);

        if (!b) {
            snprintf(j->err, sizeof(j->err), "out of memory");
            t->rc = -ENOMEM;
            return;
        }
        w->buf = b;
        w->buf_cap = stored_len;
    }
    rc = chunk_source_read(j->source, j->index, w->buf, j->err, sizeof(j->err));
    if (rc == 0)
        rc = chunk_source_decode(j->source, j->index, w->ctx, w->buf, j->dst, j->err,
                                 sizeof(j->err));
    t->rc = rc;
}

struct refill {
    struct pipe *p;
    struct job *items;            /* what to put back, in order */
    size_t n, next;
    int err;
    /* run_refill's ring: slots are filled, uploaded and freed in ring order */
    size_t *slot_first, *slot_last;   /* items [first, last) went into slot k */
    unsigned fill, next_up, oldest;   /* to fill, to upload, to free next */
};

/* Issues one async H2D copy (the stream orders them). */
static int upload(struct pipe *p, CUdeviceptr va, const void *src, size_t len)
{
    return pipe_copy_issued(p, TCGPU_REAL(cuMemcpyHtoDAsync)(va, src, len, p->stream),
                            "cuMemcpyHtoDAsync", va, len);
}

static int memset_dev(struct pipe *p, CUdeviceptr va, size_t len)
{
    CUresult rc = TCGPU_REAL(cuMemsetD8Async)(va, 0, len, p->stream);

    if (rc != CUDA_SUCCESS) {
        pipe_say(p, "cuMemsetD8Async of %zu bytes at %#llx: %s", len, (unsigned long long)va,
                 cu_error_name(rc));
        return -EIO;
    }
    return 0;
}

/* Uploads a slot whose chunks are all decoded. */
static int upload_slot(struct refill *r, unsigned si)
{
    struct pipe *p = r->p;
    struct slot *s = &p->slots[si];
    int rc = 0;

    for (size_t i = r->slot_first[si]; i < r->slot_last[si] && rc == 0; i++) {
        struct job *j = &r->items[i];

        if (j->slot != (int)si)
            continue;
        if (j->t.rc && !r->err) {
            pipe_say(p, "%s", j->err[0] ? j->err : strerror(-j->t.rc));
            r->err = j->t.rc;
        }
        if (!r->err) {
            rc = upload(p, j->va, j->dst, j->len);
            pipe_add_progress(p, j->len);
        }
    }
    if (rc == 0 && !r->err) {
        CUresult cr = TCGPU_REAL(cuEventRecord)(s->ev, p->stream);

        if (cr != CUDA_SUCCESS) {
            pipe_say(p, "cuEventRecord: %s", cu_error_name(cr));
            rc = -EIO;
        }
    }
    s->state = S_UPLOADING;
    return rc;
}

static int slots_busy(const struct pipe *p)
{
    for (unsigned k = 0; k < p->nslots; k++)
        if (p->slots[k].state != S_FREE)
            return 1;
    return 0;
}

/* A zero chunk by memset, a raw host chunk by a direct upload. */
static int put_back_now(struct pipe *p, const struct job *job)
{
    int rc = job->kind == R_ZERO ? memset_dev(p, job->va, job->len)
                                 : upload(p, job->va, job->src, job->len);

    if (rc == 0)
        pipe_add_progress(p, job->len);
    return rc;
}

/* Hands the job to a worker, to decode into the next bytes of slot r->fill. */
static void queue_decode(struct refill *r, struct slot *slot, struct job *job)
{
    job->slot = (int)r->fill;
    job->dst = slot->mem + slot->fill;
    job->t.fn = decode_job;
    pool_submit(r->p, &job->t);
    slot->fill += job->len;
    slot->pending++;
}

/* Takes items into slot r->fill until it is full: zero and direct chunks go
 * to the device at once, the others to the workers. Returns whether any
 * went at once. */
static int take_items(struct refill *r, struct slot *slot)
{
    struct pipe *p = r->p;
    int progressed = 0;

    slot->fill = 0;
    slot->pending = 0;
    while (r->next < r->n && !r->err) {
        struct job *job = &r->items[r->next];

        if (job->kind == R_ZERO || job->kind == R_DIRECT) {
            if ((r->err = put_back_now(p, job)) != 0)
                break;
            progressed = 1;
        } else if (slot->fill + job->len > p->slot_size) {
            break;                /* the next slot takes it */
        } else {
            queue_decode(r, slot, job);
        }
        r->next++;
    }
    return progressed;
}

/* Step 1: fills the free slots, in ring order. Returns whether anything moved. */
static int fill_slots(struct refill *r)
{
    struct pipe *p = r->p;
    int progressed = 0;

    while (!r->err && r->next < r->n && p->slots[r->fill].state == S_FREE) {
        struct slot *slot = &p->slots[r->fill];
        size_t first = r->next;

        progressed |= take_items(r, slot);
        if (!slot->pending)
            break;
        r->slot_first[r->fill] = first;
        r->slot_last[r->fill] = r->next;
        slot->state = S_WORKING;
        r->fill = (r->fill + 1) % p->nslots;
        progressed = 1;
    }
    return progressed;
}

/* Whether the workers decoded every chunk of slot `si`. */
static int slot_decoded(const struct refill *r, unsigned si)
{
    for (size_t i = r->slot_first[si]; i < r->slot_last[si]; i++)
        if (r->items[i].slot == (int)si && !pool_task_done(r->p, &r->items[i].t))
            return 0;
    return 1;
}

/* Step 2: uploads the decoded slots, in the order they were filled.
 * Returns whether any was. */
static int upload_decoded_slots(struct refill *r)
{
    struct pipe *p = r->p;
    int progressed = 0;

    while (p->slots[r->next_up].state == S_WORKING && slot_decoded(r, r->next_up)) {
        int rc = upload_slot(r, r->next_up);

        if (rc && !r->err)
            r->err = rc;
        r->next_up = (r->next_up + 1) % p->nslots;
        progressed = 1;
    }
    return progressed;
}

/* Step 3: frees the slots whose uploads are done (after an error, without
 * asking), in the order they were filled. Returns whether any was. */
static int free_uploaded_slots(struct refill *r)
{
    struct pipe *p = r->p;
    int progressed = 0;

    while (p->slots[r->oldest].state == S_UPLOADING) {
        if (!r->err && TCGPU_REAL(cuEventQuery)(p->slots[r->oldest].ev) == CUDA_ERROR_NOT_READY)
            break;
        p->slots[r->oldest].state = S_FREE;
        r->oldest = (r->oldest + 1) % p->nslots;
        progressed = 1;
    }
    return progressed;
}

/* When nothing moved: waits for the next slot's decoding, else for the
 * oldest upload. */
static void wait_for_ring(struct refill *r)
{
    struct pipe *p = r->p;
    unsigned si = r->next_up;

    if (p->slots[si].state == S_WORKING) {
        for (size_t i = r->slot_first[si]; i < r->slot_last[si]; i++)
            if (r->items[i].slot == (int)si)
                pool_task_wait(p, &r->items[i].t);
    } else if (p->slots[r->oldest].state == S_UPLOADING) {
        TCGPU_REAL(cuEventSynchronize)(p->slots[r->oldest].ev);
    }
}

/* Puts r->items back on the current device: zero chunks by memset, raw
 * host chunks by direct uploads, the rest decoded by the workers into the
 * staging slots and uploaded slot by slot while the next ones decode. */
static int run_refill(struct refill *r)
{
    struct pipe *p = r->p;
    int rc = -ENOMEM;

    r->slot_first = calloc(p->nslots, sizeof(size_t));
    r->slot_last = calloc(p->nslots, sizeof(size_t));
    if (!r->slot_first || !r->slot_last) {
        pipe_say(p, "out of memory");
        goto out;
    }
    for (;;) {
        int progressed = fill_slots(r);

        progressed |= upload_decoded_slots(r);
        progressed |= free_uploaded_slots(r);
        if (!slots_busy(p) && (r->next == r->n || r->err))
            break;
        if (!progressed)
            wait_for_ring(r);
    }
    if (!r->err)
        r->err = pipe_stream_sync(p);
    rc = r->err;
out:
    free(r->slot_first);
    free(r->slot_last);
    return rc;
}

static int item_cmp_device(const void *a, const void *b)
{
    const struct job *x = a, *y = b;

    if (x->pc->device != y->pc->device)
        return x->pc->device < y->pc->device ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Runs the items device by device (stable: sorted by device, then order). */
static int refill_all(struct pipe *p, struct refill *all)
{
    int rc = 0;

    for (size_t i = 0; i < all->n; i++)
        all->items[i].index = all->items[i].source ? all->items[i].index : i;
    qsort(all->items, all->n, sizeof(*all->items), item_cmp_device);
    for (size_t i = 0, end; i < all->n && rc == 0; i = end) {
        struct refill r = { .p = p, .items = all->items + i };

        for (end = i + 1; end < all->n && all->items[end].pc->device == all->items[i].pc->device;)
            end++;
        r.n = end - i;
        rc = pipe_use_device(p, all->items[i].pc->device, 0);
        if (rc == 0)
            rc = pipe_make_ring(p, 0, 1);
        if (rc == 0)
            rc = run_refill(&r);
        if (rc)
            break;
        rc = pipe_leave_device(p);
    }
    pipe_leave_device(p);
    return rc;
}

static void refill_setup(struct pipe *p)
{
    p->msg[0] = '\0';
    memset(&p->st, 0, sizeof(p->st));
    p->progress = 0;
}

int pipe_refill_host(struct pipe *p, struct pipe_store *s)
{
    struct refill r = { .p = p };
    int rc;

    pipe_store_compress_stop(s);
    refill_setup(p);
    if (!s->n)
        return 0;
    r.items = calloc(s->n, sizeof(*r.items));
    if (!r.items) {
        pipe_say(p, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < s->n; i++) {
        struct piece *q = &s->pc[i];
        struct job *j = &r.items[r.n++];

        j->pc = q;
        j->va = q->va;
        j->len = q->len;
        j->slot = -1;
        j->kind = q->state == P_ZERO ? R_ZERO : q->state == P_RAW ? R_DIRECT : R_DECODE_STORE;
        j->src = q->host;
        /* Merge adjacent raw chunks of one allocation into one upload. */
        while (j->kind == R_DIRECT && i + 1 < s->n && s->pc[i + 1].state == P_RAW &&
               s->pc[i + 1].va == j->va + j->len && s->pc[i + 1].host == j->src + j->len &&
               s->pc[i + 1].alloc_id == q->alloc_id &&
               s->pc[i + 1].device == q->device && j->len < HOST_COPY_MAX)
            j->len += s->pc[++i].len;
    }
    p->st.raw_bytes = s->raw_bytes;
    rc = refill_all(p, &r);
    free(r.items);
    return rc;
}

struct alloc_key {
    uint64_t id;
    size_t index;
};

static int key_cmp(const void *a, const void *b)
{
    const struct alloc_key *x = a, *y = b;

    return x->id < y->id ? -1 : x->id > y->id;
}

int pipe_refill_image(struct pipe *p, const struct chunk_source *src,
                      const struct pipe_ext *allocs, size_t n)
{
    struct refill r = { .p = p };
    struct alloc_key *keys = calloc(n ? n : 1, sizeof(*keys));
    struct piece *dev = calloc(n ? n : 1, sizeof(*dev));   /* device of each alloc */
    size_t nch = chunk_source_count(src);
    int rc = 0;

    refill_setup(p);
    r.items = calloc(nch ? nch : 1, sizeof(*r.items));
    if (!keys || !dev || !r.items) {
        pipe_say(p, "out of memory");
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        keys[i] = (struct alloc_key){ allocs[i].alloc_id, i };
        dev[i].device = allocs[i].device;
    }
    qsort(keys, n, sizeof(*keys), key_cmp);
    for (size_t i = 0; i < nch; i++) {
        const struct image_chunk *c = chunk_source_at(src, i);
        struct alloc_key k = { c->alloc_id, 0 }, *f;
        unsigned codec;
        struct job *j;

        f = n ? bsearch(&k, keys, n, sizeof(*keys), key_cmp) : NULL;
        if (!f)
            continue;             /* not one of the allocations asked for */
        if (c->alloc_offset + c->raw_len > allocs[f->index].len) {
            pipe_say(p, "chunk at offset %#llx of allocation %llu runs past its %zu bytes",
                     (unsigned long long)c->alloc_offset, (unsigned long long)c->alloc_id,
                     allocs[f->index].len);
            rc = -EBADMSG;
            goto out;
        }
        if (c->raw_len > p->slot_size) {
            pipe_say(p, "chunk of %u bytes is larger than a staging slot", c->raw_len);
            rc = -EINVAL;
            goto out;
        }
        chunk_source_resolved(src, i, &codec, NULL);
        j = &r.items[r.n++];
        j->pc = &dev[f->index];
        j->va = allocs[f->index].va + c->alloc_offset;
        j->len = c->raw_len;
        j->slot = -1;
        j->source = src;
        j->index = i;
        j->kind = codec == TCGPU_CODEC_ZERO ? R_ZERO : R_DECODE_IMAGE;
        p->st.raw_bytes += c->raw_len;
    }
    rc = refill_all(p, &r);
out:
    free(r.items);
    free(keys);
    free(dev);
    return rc;
}
