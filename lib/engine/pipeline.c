/*
 * pipeline.c - the pipelined drain/refill engine (see pipeline.h): the pipe
 * itself (pipe_new/free, its message and statistics), the device it works
 * on (context, copy stream, device-side helpers), the staging ring, and the
 * pieces an extent is cut into. The mechanisms are in pool.c, store.c,
 * drain.c and refill.c.
 *
 * One thread (the operation's) drives everything that touches the driver:
 * it issues copies on the pipe's own stream, records and polls events, hands
 * chunks to the workers, appends their results to the chunk sink in order,
 * and uploads what they decoded. Workers only encode and decode.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "driver/driver.h"
#include "dev.h"
#include "internal.h"
#include "common/bigbuf.h"
#include "common/xxh.h"

void pipe_say(struct pipe *p, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(p->msg, sizeof(p->msg), fmt, ap);
    va_end(ap);
}

const char *pipe_error(const struct pipe *p)
{
    return p->msg;
}

void pipe_set_progress(struct pipe *p, void (*progress)(uint64_t bytes, void *arg), void *arg)
{
    p->o.progress = progress;
    p->o.progress_arg = arg;
}

CUcontext pipe_ring_context(const struct pipe *p)
{
    return p->ring_ctx;
}

void pipe_get_stats(const struct pipe *p, struct pipe_stats *st)
{
    *st = p->st;
}

void pipe_add_progress(struct pipe *p, uint64_t bytes)
{
    p->progress += bytes;
    if (p->o.progress)
        p->o.progress(p->progress, p->o.progress_arg);
}

unsigned pipe_worker_count(unsigned wanted)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned n = wanted ? wanted : cpus > 0 ? (unsigned)cpus : 1;

    return n > MAX_WORKERS ? MAX_WORKERS : n;
}

static void free_ring(struct pipe *p);

int pipe_new(struct pipe **out, const struct pipe_opts *o)
{
    struct pipe *p = calloc(1, sizeof(*p));
    int rc = -ENOMEM;

    if (!p)
        return -ENOMEM;
    p->o = *o;
    p->chunk = o->chunk_size ? o->chunk_size : DEFAULT_CHUNK;
    p->slot_size = o->slot_size ? o->slot_size : DEFAULT_SLOT;
    if (p->slot_size < p->chunk)
        p->slot_size = p->chunk;
    p->nslots = o->slots ? o->slots : DEFAULT_SLOTS;
    if (p->nslots < 2)
        p->nslots = 2;
    p->nw = pipe_worker_count(o->workers);
    p->cur_dev = -1;
    p->block = pipe_block_size(o->block_size, p->chunk);
    if (p->chunk > TCGPU_IMG_MAX_CHUNK) {
        free(p);
        return -EINVAL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    p->w = calloc(p->nw, sizeof(*p->w));
    if (!p->w)
        goto err;
    p->nw_alloc = p->nw;
    for (unsigned i = 0; i < p->nw; i++) {
        p->w[i].p = p;
        if (codec_ctx_new(&p->w[i].ctx, NULL)) {
            p->nw = 0;            /* no thread started: pipe_free joins none */
            goto err;
        }
    }
    for (unsigned i = 0; i < p->nw; i++) {
        if (helper_thread_start(&p->w[i].th, pool_worker_main, &p->w[i])) {
            rc = -EAGAIN;
            p->nw = i;
            goto err;
        }
    }
    *out = p;
    return 0;
err:
    pipe_free(p);
    return rc;
}

void pipe_free(struct pipe *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; p->w && i < p->nw; i++)
        helper_thread_join(&p->w[i].th);
    for (unsigned i = 0; p->w && i < p->nw_alloc; i++) {
        codec_ctx_free(p->w[i].ctx);
        bigbuf_free(p->w[i].buf, p->w[i].buf_cap);
        free(p->w[i].base);
        free(p->w[i].xor_buf);
    }
    free(p->w);
    free_ring(p);
    if (p->zeros)
        munmap(p->zeros, p->chunk);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p);
}

/* --- contexts, stream, ring, helpers ----------------------------------------- */

/* The events of the ring belong to the context they were made in. */
static void free_events(struct pipe *p)
{
    for (unsigned i = 0; p->slots && i < p->nslots; i++) {
        if (p->slots[i].ev)
            TCGPU_REAL(cuEventDestroy)(p->slots[i].ev);
        p->slots[i].ev = NULL;
    }
}

/* Slot memory: pinned (cuMemHostAlloc), or registered plain memory, or
 * plain memory at the driver's staging speed; freed the way it was made.
 * Without its context (`have_ctx` 0: destroyed by the program) pinned
 * memory and registrations are gone already. */
static void free_slot_mem(struct slot *s, int have_ctx)
{
    if (have_ctx && s->mem_kind == SLOT_PINNED)
        TCGPU_REAL(cuMemFreeHost)(s->mem);
    else if (have_ctx && s->mem_kind == SLOT_REGISTERED)
        TCGPU_REAL(cuMemHostUnregister)(s->mem);
    if (s->mem_kind == SLOT_REGISTERED || s->mem_kind == SLOT_PLAIN)
        free(s->mem);
    s->mem = NULL;
    s->mem_kind = SLOT_NONE;
}

/* The whole ring (pipe_free): kept between operations until then, freed in
 * the context its pinned memory was made in. */
static void free_ring(struct pipe *p)
{
    CUcontext ignored;
    int pushed = p->ring_ctx && TCGPU_REAL(cuCtxPushCurrent)(p->ring_ctx) == CUDA_SUCCESS;

    for (unsigned i = 0; p->slots && i < p->nslots; i++) {
        free_slot_mem(&p->slots[i], pushed || !p->ring_ctx);
        free(p->slots[i].enc);
    }
    if (pushed)
        TCGPU_REAL(cuCtxPopCurrent)(&ignored);
    free(p->slots);
    p->slots = NULL;
    free(p->jobs);
    p->jobs = NULL;
}

/* Leaves the current device: waits for the stream, drops the helpers. */
int pipe_leave_device(struct pipe *p)
{
    CUresult rc = CUDA_SUCCESS;

    if (p->cur_dev < 0)
        return 0;
    if (p->stream) {
        rc = TCGPU_REAL(cuStreamSynchronize)(p->stream);
        TCGPU_REAL(cuStreamDestroy)(p->stream);
        p->stream = NULL;
    }
    pdev_unload(p->dev);
    p->dev = NULL;
    free_events(p);
    p->o.ctx_leave(p->o.ctx_arg);
    p->cur_dev = -1;
    if (rc != CUDA_SUCCESS) {
        pipe_say(p, "cuStreamSynchronize of the copy stream: %s", cu_error_name(rc));
        return -EIO;
    }
    return 0;
}

int pipe_use_device(struct pipe *p, int device, int helpers)
{
    CUresult cr;
    int rc;

    if (p->cur_dev == device)
        return 0;
    if ((rc = pipe_leave_device(p)) != 0)
        return rc;
    if ((rc = p->o.ctx_enter(device, p->o.ctx_arg)) != 0) {
        pipe_say(p, "cannot make a context of device %d current", device);
        return rc;
    }
    p->cur_dev = device;
    cr = TCGPU_REAL(cuStreamCreate)(&p->stream, CU_STREAM_NON_BLOCKING);
    if (cr != CUDA_SUCCESS) {
        p->stream = NULL;
        pipe_say(p, "cuStreamCreate on device %d: %s", device, cu_error_name(cr));
        return -EIO;
    }
    /* helpers 2: the simcuda twin too (its scan saves copies here) */
    int twin = p->o.no_helpers < 0 || helpers == 2;

    if (helpers && p->o.no_helpers <= 0) {
        if (pdev_load(&p->dev, SCAN_BATCH, twin) != 0)
            p->dev = NULL;
        p->st.helpers = p->dev ? pdev_kind(p->dev) : 0;
    }
    return 0;
}

/* Pinned memory for slot s in the current context; 0 or -ENOMEM. */
static int alloc_slot_mem(struct pipe *p, struct slot *s)
{
    void *m = NULL;

    if (TCGPU_REAL(cuMemHostAlloc)(&m, p->slot_size, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS) {
        s->mem = m;
        s->mem_kind = SLOT_PINNED;
        return 0;
    }
    /* Unpinned still works, at the driver's staging speed. */
    if (posix_memalign(&m, 4096, p->slot_size))
        return -ENOMEM;
    s->mem = m;
    s->mem_kind = TCGPU_REAL(cuMemHostRegister)(m, p->slot_size, CU_MEMHOSTREGISTER_PORTABLE) ==
                          CUDA_SUCCESS
                      ? SLOT_REGISTERED
                      : SLOT_PLAIN;
    return 0;
}

/* The slots and the job ring, without memory yet: kept until pipe_free. */
static int alloc_ring(struct pipe *p)
{
    if (p->slots)
        return 0;
    /* Chunks without bytes to copy (zero, parent) take job entries too. */
    p->njobs = (size_t)p->nslots * (p->slot_size / p->chunk + 64) + 256;
    p->slots = calloc(p->nslots, sizeof(*p->slots));
    p->jobs = calloc(p->njobs, sizeof(*p->jobs));
    if (p->slots && p->jobs)
        return 0;
    free(p->slots);
    free(p->jobs);
    p->slots = NULL;
    p->jobs = NULL;
    return -ENOMEM;
}

int pipe_make_ring(struct pipe *p, int with_enc, int with_mem)
{
    CUresult cr;

    if (alloc_ring(p))
        goto oom;
    if (with_mem && !p->ring_ctx && TCGPU_REAL(cuCtxGetCurrent)(&p->ring_ctx) != CUDA_SUCCESS)
        p->ring_ctx = NULL;
    for (unsigned i = 0; i < p->nslots; i++) {
        struct slot *s = &p->slots[i];

        s->state = S_FREE;
        s->fill = s->pending = 0;
        s->io_ticket = 0;
        if (with_mem && !s->mem && alloc_slot_mem(p, s))
            goto oom;
        if (with_enc && !s->enc && !(s->enc = aligned_alloc(ENC_ALIGN, ENC_SIZE(p->slot_size))))
            goto oom;
        if (with_mem && !s->ev) {
            cr = TCGPU_REAL(cuEventCreate)(&s->ev, CU_EVENT_DISABLE_TIMING);
            if (cr != CUDA_SUCCESS) {
                s->ev = NULL;
                pipe_say(p, "cuEventCreate: %s", cu_error_name(cr));
                return -EIO;
            }
        }
    }
    return 0;
oom:
    pipe_say(p, "out of host memory for the staging ring (%u x %zu bytes)", p->nslots,
             p->slot_size);
    return -ENOMEM;
}

int pipe_zeros_init(struct pipe *p)
{
    if (p->zeros)
        return 0;
    p->zeros = mmap(NULL, p->chunk, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p->zeros == MAP_FAILED) {
        p->zeros = NULL;
        return -ENOMEM;
    }
    p->zero_csum = XXH3_64bits(p->zeros, p->chunk);
    return 0;
}

uint64_t pipe_zero_csum(struct pipe *p, size_t len)
{
    return len == p->chunk ? p->zero_csum : XXH3_64bits(p->zeros, len);
}

/* --- pieces ------------------------------------------------------------------ */

int pipe_make_pieces(struct pipe *p, const struct pipe_ext *e, size_t n, struct piece **out,
                     size_t *nout)
{
    size_t cnt = 0, k = 0;
    struct piece *pc;

    for (size_t i = 0; i < n; i++) {
        uint64_t first = e[i].offset / p->chunk, last;

        if (!e[i].len)
            continue;
        last = (e[i].offset + e[i].len - 1) / p->chunk;
        cnt += (size_t)(last - first + 1);
    }
    pc = calloc(cnt ? cnt : 1, sizeof(*pc));
    if (!pc) {
        pipe_say(p, "out of host memory for %zu chunk records", cnt);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t off = e[i].offset, end = e[i].offset + e[i].len;

        while (off < end) {
            uint64_t cend = (off / p->chunk + 1) * p->chunk;
            struct piece *q = &pc[k++];

            if (cend > end)
                cend = end;
            q->va = e[i].va + (off - e[i].offset);
            q->len = (size_t)(cend - off);
            q->alloc_id = e[i].alloc_id;
            q->offset = off;
            q->dtype = e[i].dtype;
            q->device = e[i].device;
            off = cend;
        }
    }
    *out = pc;
    *nout = k;
    return 0;
}

/* Runs the device-side scan over the pieces of the current device in
 * [from, to): zero flags, and device hashes when `hash`. No helpers: nothing
 * to do. */
int pipe_scan_buffers(struct pdev_desc **d, struct pdev_result **r)
{
    *d = malloc(SCAN_BATCH * sizeof(**d));
    *r = malloc(SCAN_BATCH * sizeof(**r));
    if (*d && *r)
        return 0;
    free(*d);
    free(*r);
    return -ENOMEM;
}

int pipe_scan_pieces(struct pipe *p, struct piece *pc, size_t from, size_t to, int hash)
{
    struct pdev_desc *d;
    struct pdev_result *r;
    char err[256] = "";
    int rc = 0;

    if (!p->dev || from >= to || pipe_scan_buffers(&d, &r))
        return 0;                 /* the helpers are an optimisation */
    for (size_t i = from; i < to && rc == 0; i += SCAN_BATCH) {
        size_t n = to - i < SCAN_BATCH ? to - i : SCAN_BATCH;

        for (size_t k = 0; k < n; k++)
            d[k] = (struct pdev_desc){ pc[i + k].va, pc[i + k].len };
        rc = pdev_scan(p->dev, p->stream, d, n, hash ? PDEV_SCAN_HASH : 0, r, err, sizeof(err));
        for (size_t k = 0; k < n && rc == 0; k++) {
            pc[i + k].scan = hash ? SCAN_DEVHASH : SCAN_ZERO_FLAG;
            pc[i + k].nonzero = r[k].nonzero != 0;
            pc[i + k].devhash = r[k].hash;
        }
    }
    free(d);
    free(r);
    if (rc)
        pipe_say(p, "device-side scan: %s", err);
    return rc;
}

/* End index of the run of pieces on the same device as pc[i]. */
size_t pipe_device_run(const struct piece *pc, size_t n, size_t i)
{
    size_t j = i + 1;

    while (j < n && pc[j].device == pc[i].device)
        j++;
    return j;
}

int pipe_copy_issued(struct pipe *p, CUresult rc, const char *call, CUdeviceptr va, size_t len)
{
    if (rc != CUDA_SUCCESS) {
        pipe_say(p, "%s of %zu bytes at %#llx: %s", call, len, (unsigned long long)va,
                 cu_error_name(rc));
        return -EIO;
    }
    p->st.copied_bytes += len;
    return 0;
}

int pipe_stream_sync(struct pipe *p)
{
    CUresult rc = TCGPU_REAL(cuStreamSynchronize)(p->stream);

    if (rc != CUDA_SUCCESS) {
        pipe_say(p, "cuStreamSynchronize of the copy stream: %s", cu_error_name(rc));
        return -EIO;
    }
    return 0;
}
