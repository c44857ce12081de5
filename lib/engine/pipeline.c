/*
 * pipeline.c - the pipelined drain/refill engine; see pipeline.h.
 *
 * One thread (the operation's) drives everything that touches the driver:
 * it issues copies on the pipe's own stream, records and polls events, hands
 * chunks to the workers, appends their results to the image writer in order,
 * and uploads what they decoded. Workers only encode and decode.
 */
#include "pipeline.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "driver/driver.h"
#include "driver/gate.h"
#include "dev.h"

#define DEFAULT_CHUNK (4u << 20)
#define DEFAULT_SLOT (16u << 20)
#define DEFAULT_SLOTS 4u
#define MAX_WORKERS 64u
#define HOST_COPY_MAX (64u << 20)      /* one async copy at most (host drain) */
/* Progress granularity of the host drain: a stream sync every 256 MiB costs
 * microseconds against milliseconds of copying at the host link's speed. */
#define HOST_SYNC_EVERY (256ull << 20)
#define MMAP_MIN (1u << 20)            /* store buffers this big are mmap'd */
#define SCAN_BATCH 4096u               /* chunks per device-side scan */

/* --- chunks ---------------------------------------------------------------- */

enum piece_state { P_RAW = 0, P_ZERO, P_ENC };

struct piece {
    CUdeviceptr va;
    size_t len;
    uint64_t alloc_id, offset;
    uint32_t dtype;
    int device;
    uint8_t *host;                /* store: raw copy (NULL once encoded) */
    uint8_t *enc;                 /* store: encoded bytes (P_ENC) */
    uint32_t enc_len;
    uint8_t codec;
    uint8_t state;                /* enum piece_state */
    uint8_t scanned;              /* devhash / nonzero valid (device helpers) */
    uint8_t nonzero;
    uint64_t devhash;
};

struct hbuf {
    uint8_t *mem;
    size_t len;
    int mapped;
};

struct pipe_store {
    struct piece *pc;
    size_t n;
    struct hbuf *bufs;
    size_t nbufs;
    uint64_t raw_bytes;
    /* background compression */
    pthread_t *th;
    unsigned nth;
    size_t next;                  /* guarded by mu */
    int stop;
    pthread_mutex_t mu;
};

/* --- the worker pool --------------------------------------------------------- */

struct pipe;
struct worker;

struct task {
    void (*fn)(struct pipe *p, struct worker *w, struct task *t);
    struct task *next;
    int done;                     /* guarded by the pipe's mutex */
    int rc;
};

struct worker {
    struct pipe *p;
    pthread_t th;
    struct codec_ctx *ctx;
    uint8_t *buf;                 /* stored bytes of a chunk being read */
    size_t buf_cap;
};

/* --- staging ring ------------------------------------------------------------ */

enum slot_state { S_FREE = 0, S_COPYING, S_WORKING, S_UPLOADING };

struct slot {
    uint8_t *mem;                 /* pinned (or plain memory if pinning failed) */
    uint8_t *enc;                 /* encode output, slot_size bytes (drain) */
    CUevent ev;
    int state;
    size_t fill;                  /* bytes used */
    size_t pending;               /* jobs not yet written / uploaded */
    uint64_t last_seq;            /* its last job */
};

/* One chunk on its way: to the writer (drain) or to the device (refill). */
struct job {
    struct task t;
    struct piece *pc;             /* drain: the chunk */
    const uint8_t *src;           /* drain: raw bytes */
    uint8_t *dst;                 /* encode output / decode target */
    int slot;                     /* -1: none */
    int state;                    /* J_* */
    int have_parent;
    uint64_t parent_csum;
    struct image_chunk c;
    const void *stored;
    /* refill */
    const struct image *img;
    size_t img_index;
    CUdeviceptr va;
    size_t len;
    int kind;                     /* R_* */
    char err[200];                /* a failed decode's message */
};

enum { J_EMPTY = 0, J_READY, J_QUEUED, J_WAITING_COPY };
enum { R_ZERO = 1, R_DIRECT, R_DECODE_IMAGE, R_DECODE_STORE };

struct pipe {
    struct pipe_opts o;
    size_t chunk;
    size_t slot_size;
    unsigned nslots;
    struct worker *w;
    unsigned nw, nw_alloc;        /* running, allocated */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    struct task *head, *tail;
    int quit;
    char msg[512];
    struct pipe_stats st;
    uint64_t progress;
    /* per call */
    CUstream stream;
    int cur_dev;                  /* -1: no context entered */
    struct pdev *dev;
    int helpers_tried;
    struct slot *slots;
    struct job *jobs;
    size_t njobs;
    uint8_t *zeros;               /* chunk-sized zero pages (untouched) */
    uint64_t zero_csum;           /* XXH3 of `chunk` zero bytes */
};

static void __attribute__((format(printf, 2, 3))) say(struct pipe *p, const char *fmt, ...)
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

void pipe_get_stats(const struct pipe *p, struct pipe_stats *st)
{
    *st = p->st;
}

static void progress(struct pipe *p, uint64_t bytes)
{
    p->progress += bytes;
    if (p->o.progress)
        p->o.progress(p->progress, p->o.progress_arg);
}

static unsigned env_uint(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    char *end;
    unsigned long n;

    if (!v || !*v)
        return dflt;
    n = strtoul(v, &end, 10);
    return *end || n == 0 ? dflt : (unsigned)n;
}

unsigned pipe_default_workers(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned n = env_uint("TCGPU_WORKERS", cpus > 0 ? (unsigned)cpus : 1);

    return n > MAX_WORKERS ? MAX_WORKERS : n;
}

/* --- pool ------------------------------------------------------------------ */

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct pipe *p = w->p;

    /* Workers never call the driver, but the gate must not wait for them. */
    tcgpu_gate_set_exempt(true);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        struct task *t;

        while (!p->head && !p->quit)
            pthread_cond_wait(&p->work, &p->mu);
        if (!p->head)
            break;
        t = p->head;
        p->head = t->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        t->fn(p, w, t);
        pthread_mutex_lock(&p->mu);
        t->done = 1;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void submit(struct pipe *p, struct task *t)
{
    pthread_mutex_lock(&p->mu);
    t->done = 0;
    t->rc = 0;
    t->next = NULL;
    if (p->tail)
        p->tail->next = t;
    else
        p->head = t;
    p->tail = t;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
}

static int task_done(struct pipe *p, struct task *t)
{
    int d;

    pthread_mutex_lock(&p->mu);
    d = t->done;
    pthread_mutex_unlock(&p->mu);
    return d;
}

static void task_wait(struct pipe *p, struct task *t)
{
    pthread_mutex_lock(&p->mu);
    while (!t->done)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int pipe_new(struct pipe **out, const struct pipe_opts *o)
{
    struct pipe *p = calloc(1, sizeof(*p));
    int rc = -ENOMEM;

    if (!p)
        return -ENOMEM;
    p->o = *o;
    p->chunk = o->chunk_size ? o->chunk_size : (size_t)env_uint("TCGPU_CHUNK_KB", 0) << 10;
    if (!p->chunk)
        p->chunk = DEFAULT_CHUNK;
    p->slot_size = o->slot_size ? o->slot_size : (size_t)env_uint("TCGPU_SLOT_MB", 0) << 20;
    if (!p->slot_size)
        p->slot_size = DEFAULT_SLOT;
    if (p->slot_size < p->chunk)
        p->slot_size = p->chunk;
    p->nslots = o->slots ? o->slots : env_uint("TCGPU_SLOTS", DEFAULT_SLOTS);
    if (p->nslots < 2)
        p->nslots = 2;
    p->nw = o->workers ? o->workers : pipe_default_workers();
    if (p->nw > MAX_WORKERS)
        p->nw = MAX_WORKERS;
    p->cur_dev = -1;
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
        if (codec_ctx_new(&p->w[i].ctx, NULL))
            goto err;
    }
    for (unsigned i = 0; i < p->nw; i++) {
        if (pthread_create(&p->w[i].th, NULL, worker_main, &p->w[i])) {
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
        pthread_join(p->w[i].th, NULL);
    for (unsigned i = 0; p->w && i < p->nw_alloc; i++) {
        codec_ctx_free(p->w[i].ctx);
        free(p->w[i].buf);
    }
    free(p->w);
    if (p->zeros)
        munmap(p->zeros, p->chunk);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p);
}

/* --- contexts, stream, ring, helpers ----------------------------------------- */

static void free_ring(struct pipe *p)
{
    for (unsigned i = 0; p->slots && i < p->nslots; i++) {
        struct slot *s = &p->slots[i];

        if (s->ev)
            TCGPU_REAL(cuEventDestroy)(s->ev);
        if (s->mem && TCGPU_REAL(cuMemFreeHost)(s->mem) != CUDA_SUCCESS)
            free(s->mem);
        free(s->enc);
    }
    free(p->slots);
    p->slots = NULL;
    free(p->jobs);
    p->jobs = NULL;
}

/* Leaves the current device: waits for the stream, drops the helpers. */
static int leave_device(struct pipe *p)
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
    free_ring(p);
    p->o.ctx_leave(p->o.ctx_arg);
    p->cur_dev = -1;
    if (rc != CUDA_SUCCESS) {
        say(p, "cuStreamSynchronize of the copy stream: %s", cu_error_name(rc));
        return -EIO;
    }
    return 0;
}

static int use_device(struct pipe *p, int device, int helpers)
{
    CUresult cr;
    int rc;

    if (p->cur_dev == device)
        return 0;
    if ((rc = leave_device(p)) != 0)
        return rc;
    if ((rc = p->o.ctx_enter(device, p->o.ctx_arg)) != 0) {
        say(p, "cannot make a context of device %d current", device);
        return rc;
    }
    p->cur_dev = device;
    cr = TCGPU_REAL(cuStreamCreate)(&p->stream, CU_STREAM_NON_BLOCKING);
    if (cr != CUDA_SUCCESS) {
        p->stream = NULL;
        say(p, "cuStreamCreate on device %d: %s", device, cu_error_name(cr));
        return -EIO;
    }
    const char *env = getenv("TCGPU_DEVICE_HELPERS");
    int twin = p->o.no_helpers < 0 || (env && !strcmp(env, "1"));

    if (env && !strcmp(env, "0"))
        helpers = 0;
    if (helpers && p->o.no_helpers <= 0) {
        if (pdev_load(&p->dev, SCAN_BATCH, twin) != 0)
            p->dev = NULL;
        p->st.helpers = p->dev ? pdev_kind(p->dev) : 0;
    }
    return 0;
}

/* The staging ring and the job ring (in the current context). */
static int make_ring(struct pipe *p, int with_enc)
{
    if (p->slots)
        return 0;
    p->slots = calloc(p->nslots, sizeof(*p->slots));
    /* Chunks without bytes to copy (zero, parent) take job entries too. */
    p->njobs = (size_t)p->nslots * (p->slot_size / p->chunk + 64) + 256;
    p->jobs = calloc(p->njobs, sizeof(*p->jobs));
    if (!p->slots || !p->jobs)
        goto oom;
    for (unsigned i = 0; i < p->nslots; i++) {
        struct slot *s = &p->slots[i];
        void *m = NULL;

        if (TCGPU_REAL(cuMemHostAlloc)(&m, p->slot_size, CU_MEMHOSTALLOC_PORTABLE) !=
            CUDA_SUCCESS) {
            /* Unpinned still works, at the driver's staging speed. */
            m = NULL;
            if (posix_memalign(&m, 4096, p->slot_size))
                goto oom;
            s->mem = m;
            TCGPU_REAL(cuMemHostRegister)(m, p->slot_size, CU_MEMHOSTREGISTER_PORTABLE);
        }
        s->mem = m;
        if (with_enc && !(s->enc = malloc(p->slot_size)))
            goto oom;
        if (TCGPU_REAL(cuEventCreate)(&s->ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
            s->ev = NULL;
            say(p, "cuEventCreate failed");
            return -EIO;
        }
    }
    return 0;
oom:
    say(p, "out of host memory for the staging ring (%u x %zu bytes)", p->nslots, p->slot_size);
    return -ENOMEM;
}

static int zeros_init(struct pipe *p)
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

static uint64_t zero_csum(struct pipe *p, size_t len)
{
    return len == p->chunk ? p->zero_csum : XXH3_64bits(p->zeros, len);
}

/* --- pieces ------------------------------------------------------------------ */

static int make_pieces(struct pipe *p, const struct pipe_ext *e, size_t n, struct piece **out,
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
        say(p, "out of host memory for %zu chunk records", cnt);
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
static int scan_pieces(struct pipe *p, struct piece *pc, size_t from, size_t to, int hash)
{
    struct pdev_desc *d;
    struct pdev_result *r;
    char err[256] = "";
    int rc = 0;

    if (!p->dev || from >= to)
        return 0;
    d = malloc(SCAN_BATCH * sizeof(*d));
    r = malloc(SCAN_BATCH * sizeof(*r));
    if (!d || !r) {
        free(d);
        free(r);
        return 0;   /* the helpers are an optimisation */
    }
    for (size_t i = from; i < to && rc == 0; i += SCAN_BATCH) {
        size_t n = to - i < SCAN_BATCH ? to - i : SCAN_BATCH;

        for (size_t k = 0; k < n; k++)
            d[k] = (struct pdev_desc){ pc[i + k].va, pc[i + k].len };
        rc = pdev_scan(p->dev, p->stream, d, n, hash ? PDEV_SCAN_HASH : 0, r, err, sizeof(err));
        for (size_t k = 0; k < n && rc == 0; k++) {
            pc[i + k].scanned = 1 + !!hash;     /* 2: devhash valid */
            pc[i + k].nonzero = r[k].nonzero != 0;
            pc[i + k].devhash = r[k].hash;
        }
    }
    free(d);
    free(r);
    if (rc)
        say(p, "device-side scan: %s", err);
    return rc;
}

/* End index of the run of pieces on the same device as pc[i]. */
static size_t device_run(const struct piece *pc, size_t n, size_t i)
{
    size_t j = i + 1;

    while (j < n && pc[j].device == pc[i].device)
        j++;
    return j;
}

/* --- host store ------------------------------------------------------------ */

static uint8_t *store_alloc(struct pipe_store *s, size_t len)
{
    struct hbuf *b = &s->bufs[s->nbufs];

    b->len = len;
    if (len >= MMAP_MIN) {
        b->mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b->mem == MAP_FAILED)
            return NULL;
        b->mapped = 1;
        /* Fewer faults on the way in; zero chunks never touch their pages. */
        madvise(b->mem, len, MADV_HUGEPAGE);
    } else if (!(b->mem = malloc(len ? len : 1))) {
        return NULL;
    }
    s->nbufs++;
    return b->mem;
}

void pipe_store_free(struct pipe_store *s)
{
    if (!s)
        return;
    pipe_store_compress_stop(s);
    for (size_t i = 0; i < s->nbufs; i++) {
        if (s->bufs[i].mapped)
            munmap(s->bufs[i].mem, s->bufs[i].len);
        else
            free(s->bufs[i].mem);
    }
    for (size_t i = 0; i < s->n; i++)
        free(s->pc[i].enc);
    pthread_mutex_destroy(&s->mu);
    free(s->bufs);
    free(s->pc);
    free(s);
}

static int store_new(struct pipe *p, const struct pipe_ext *e, size_t n, struct pipe_store **out)
{
    struct pipe_store *s = calloc(1, sizeof(*s));
    size_t k = 0;
    int rc;

    if (!s)
        return -ENOMEM;
    pthread_mutex_init(&s->mu, NULL);
    s->bufs = calloc(n ? n : 1, sizeof(*s->bufs));
    if (!s->bufs || (rc = make_pieces(p, e, n, &s->pc, &s->n)) != 0) {
        pipe_store_free(s);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t *m;

        if (!e[i].len)
            continue;
        m = store_alloc(s, e[i].len);
        if (!m) {
            say(p, "out of host memory for %zu bytes of device memory at %#llx", e[i].len,
                (unsigned long long)e[i].va);
            pipe_store_free(s);
            return -ENOMEM;
        }
        for (size_t done = 0; done < e[i].len; k++) {
            s->pc[k].host = m + done;
            done += s->pc[k].len;
        }
        s->raw_bytes += e[i].len;
    }
    *out = s;
    return 0;
}

uint64_t pipe_store_raw_bytes(const struct pipe_store *s)
{
    return s->raw_bytes;
}

uint64_t pipe_store_bytes(const struct pipe_store *s)
{
    uint64_t b = 0;

    for (size_t i = 0; i < s->n; i++)
        b += s->pc[i].state == P_RAW ? s->pc[i].len : s->pc[i].state == P_ENC ? s->pc[i].enc_len : 0;
    return b;
}

/* Issues one async D2H copy (the stream orders them). */
static int copy_d2h(struct pipe *p, void *dst, CUdeviceptr src, size_t len)
{
    CUresult rc = TCGPU_REAL(cuMemcpyDtoHAsync)(dst, src, len, p->stream);

    if (rc != CUDA_SUCCESS) {
        say(p, "cuMemcpyDtoHAsync of %zu bytes at %#llx: %s", len, (unsigned long long)src,
            cu_error_name(rc));
        return -EIO;
    }
    p->st.copied_bytes += len;
    return 0;
}

static int stream_sync(struct pipe *p)
{
    CUresult rc = TCGPU_REAL(cuStreamSynchronize)(p->stream);

    if (rc != CUDA_SUCCESS) {
        say(p, "cuStreamSynchronize of the copy stream: %s", cu_error_name(rc));
        return -EIO;
    }
    return 0;
}

/*
 * Faults the store's pages in (MADV_POPULATE_WRITE) on a thread of its own
 * while the stream copies: fresh pages cost a fault and a page of zeroing
 * each, as much as the copy itself on some machines. Chunks the device
 * found zero are left untouched (no memory at all).
 */
struct prefault {
    struct pipe_store *s;
    pthread_t th;
    int started;
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
    struct pipe_store *s = NULL;
    struct prefault pf = { 0 };
    uint64_t since_sync = 0;
    int rc;

    p->msg[0] = '\0';
    memset(&p->st, 0, sizeof(p->st));
    p->progress = 0;
    if ((rc = store_new(p, e, n, &s)) != 0)
        return rc;
    p->st.raw_bytes = s->raw_bytes;
    for (size_t i = 0; i < s->n && rc == 0;) {
        size_t end = device_run(s->pc, s->n, i);

        if ((rc = use_device(p, s->pc[i].device, 1)) != 0 ||
            (rc = scan_pieces(p, s->pc, i, end, 0)) != 0)
            break;
        for (size_t k = i; k < end; k++)
            if (s->pc[k].scanned && !s->pc[k].nonzero)
                s->pc[k].state = P_ZERO;
        if (!pf.started && getenv("TCGPU_PREFAULT") && strcmp(getenv("TCGPU_PREFAULT"), "0")) {
            pf.s = s;
            pf.started = pthread_create(&pf.th, NULL, prefault_main, &pf) == 0;
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
            while (j < end && run < HOST_COPY_MAX && s->pc[j].va == q->va + run &&
                   s->pc[j].host == q->host + run && s->pc[j].state != P_ZERO)
                run += s->pc[j++].len;
            rc = copy_d2h(p, q->host, q->va, run);
            since_sync += run;
            i = j;
            if (rc == 0 && since_sync >= HOST_SYNC_EVERY) {
                rc = stream_sync(p);
                progress(p, since_sync);
                since_sync = 0;
            }
        }
        if (rc == 0)
            rc = stream_sync(p);
    }
    if (rc == 0)
        rc = leave_device(p);
    else
        leave_device(p);
    if (pf.started)
        pthread_join(pf.th, NULL);
    if (rc) {
        pipe_store_free(s);
        return rc;
    }
    progress(p, since_sync);
    p->st.stored_bytes = pipe_store_bytes(s);
    *out = s;
    return 0;
}

int pipe_store_read(struct pipe_store *s, uint64_t alloc_id, uint64_t offset, void *dst,
                    size_t len)
{
    for (size_t i = 0; i < s->n; i++) {
        struct piece *q = &s->pc[i];

        if (q->alloc_id != alloc_id || offset < q->offset || offset + len > q->offset + q->len)
            continue;
        if (q->state == P_ZERO)
            memset(dst, 0, len);
        else if (q->state == P_RAW)
            memcpy(dst, q->host + (offset - q->offset), len);
        else
            return -EOPNOTSUPP;
        return 0;
    }
    return -ENOENT;
}

/* --- encoding: drain to image and write a store ------------------------------ */

static void encode_job(struct pipe *p, struct worker *w, struct task *t)
{
    struct job *j = (struct job *)t;
    struct piece *q = j->pc;
    int rc;

    (void)p;
    if (j->have_parent) {
        uint64_t h = XXH3_64bits(j->src, q->len);

        if (h == j->parent_csum) {
            image_chunk_parent(&j->c, q->len, h);
            j->stored = NULL;
            return;
        }
        rc = image_chunk_encode_hashed(w->ctx, j->src, q->len, q->dtype, h, j->dst, q->len,
                                       &j->c, &j->stored);
    } else {
        rc = image_chunk_encode(w->ctx, j->src, q->len, q->dtype, j->dst, q->len, &j->c,
                                &j->stored);
    }
    t->rc = rc;
}

/* Parent's chunk for this piece: same position and length. */
static const struct image_chunk *parent_chunk(const struct image *parent, const struct piece *q)
{
    const struct image_chunk *c;
    size_t idx;

    if (!parent || !image_find_chunk(parent, q->alloc_id, q->offset, &idx))
        return NULL;
    c = image_chunk_at(parent, idx);
    return c && c->raw_len == q->len ? c : NULL;
}

struct drain {
    struct pipe *p;
    struct piece *pc;
    size_t n;
    size_t next;                  /* next piece to take */
    int from_device;
    const struct image *parent;
    struct image_writer *w;
    uint64_t issued, written;     /* job sequence numbers */
    unsigned fill_slot;
    int err;
};

/* Takes pieces into slot `si` until it is full: copies issued (device) or
 * pointed at (store); zero and unchanged chunks become ready jobs at once. */
static int fill_slot(struct drain *d, unsigned si)
{
    struct pipe *p = d->p;
    struct slot *s = &p->slots[si];
    int rc, copies = 0;

    s->fill = 0;
    s->pending = 0;
    while (d->next < d->n && d->issued - d->written < p->njobs) {
        struct piece *q = &d->pc[d->next];
        struct job *j = &p->jobs[d->issued % p->njobs];
        const struct image_chunk *pcnk;

        memset(j, 0, sizeof(*j));
        j->pc = q;
        j->slot = -1;
        j->c.alloc_id = q->alloc_id;
        j->c.alloc_offset = q->offset;
        if (q->scanned == 2) {
            j->c.dev_hash = q->devhash;
            j->c.has_dev_hash = 1;
        }
        pcnk = parent_chunk(d->parent, q);
        if ((q->scanned && !q->nonzero) || (!d->from_device && q->state == P_ZERO)) {
            j->c.codec = TCGPU_CODEC_ZERO;
            j->c.raw_len = (uint32_t)q->len;
            j->c.raw_csum = zero_csum(p, q->len);
            j->c.stored_csum = XXH3_64bits(NULL, 0);
            j->state = J_READY;
            if (d->from_device)
                p->st.device_skipped++;
        } else if (pcnk && q->scanned == 2 && pcnk->has_dev_hash && pcnk->dev_hash == q->devhash) {
            /* Unchanged by the device hash: stays on the device. */
            image_chunk_parent(&j->c, q->len, pcnk->raw_csum);
            j->c.dev_hash = q->devhash;
            j->c.has_dev_hash = 1;
            j->state = J_READY;
            p->st.device_skipped++;
        } else {
            if (s->fill + q->len > p->slot_size)
                break;
            j->slot = (int)si;
            j->dst = s->enc + s->fill;
            j->have_parent = pcnk != NULL;
            j->parent_csum = pcnk ? pcnk->raw_csum : 0;
            j->t.fn = encode_job;
            if (d->from_device) {
                j->src = s->mem + s->fill;
                if ((rc = copy_d2h(p, s->mem + s->fill, q->va, q->len)) != 0)
                    return rc;
                j->state = J_WAITING_COPY;
                copies++;
            } else {
                j->src = q->host;
                j->state = J_QUEUED;
                submit(p, &j->t);
            }
            s->fill += q->len;
            s->pending++;
            s->last_seq = d->issued;
        }
        d->issued++;
        d->next++;
    }
    if (copies) {
        CUresult cr = TCGPU_REAL(cuEventRecord)(s->ev, p->stream);

        if (cr != CUDA_SUCCESS) {
            say(p, "cuEventRecord: %s", cu_error_name(cr));
            return -EIO;
        }
        s->state = S_COPYING;
    } else if (s->pending) {
        s->state = S_WORKING;
    }
    return 0;
}

/* Hands the chunks of a slot whose copies are done to the workers. */
static void dispatch_slot(struct drain *d, unsigned si)
{
    struct pipe *p = d->p;

    for (uint64_t q = d->written; q < d->issued; q++) {
        struct job *j = &p->jobs[q % p->njobs];

        if (j->slot == (int)si && j->state == J_WAITING_COPY) {
            j->state = J_QUEUED;
            submit(p, &j->t);
        }
    }
    p->slots[si].state = S_WORKING;
}

/* Appends ready jobs in order; frees their slots. Returns 1 if any. */
static int write_ready(struct drain *d)
{
    struct pipe *p = d->p;
    int any = 0;

    while (d->written < d->issued) {
        struct job *j = &p->jobs[d->written % p->njobs];
        int rc;

        if (j->state == J_WAITING_COPY || (j->state == J_QUEUED && !task_done(p, &j->t)))
            break;
        if (j->state == J_QUEUED && j->t.rc && !d->err) {
            say(p, "encoding chunk at %#llx+%#llx of allocation %llu: %s",
                (unsigned long long)j->pc->va, (unsigned long long)j->pc->offset,
                (unsigned long long)j->pc->alloc_id, strerror(-j->t.rc));
            d->err = j->t.rc;
        }
        if (!d->err) {
            rc = image_writer_add_encoded(d->w, &j->c, j->stored);
            if (rc) {
                say(p, "%s", image_writer_error(d->w));
                d->err = rc;
            } else {
                p->st.stored_bytes += j->c.stored_len;
                p->st.zero_chunks += j->c.codec == TCGPU_CODEC_ZERO;
                p->st.parent_chunks += j->c.codec == TCGPU_CODEC_PARENT;
                progress(p, j->c.raw_len);
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
                    say(p, "copy to the staging ring: %s", cu_error_name(cr));
                    d->err = -EIO;
                }
                dispatch_slot(d, (unsigned)j->slot);
            } else if (j->state == J_QUEUED) {
                task_wait(p, &j->t);
            }
        }
    }
    return d->err;
}

static int drain_setup(struct pipe *p)
{
    p->msg[0] = '\0';
    memset(&p->st, 0, sizeof(p->st));
    p->progress = 0;
    if (zeros_init(p)) {
        say(p, "out of memory");
        return -ENOMEM;
    }
    return 0;
}

/*
 * Whether the drain hashes chunks on the device. A GPU hashes at memory
 * speed, so always; the simcuda twin hashes on the CPU, slower than copying
 * and hashing on the host, so only when the parent's device hashes can save
 * the copies.
 */
static int want_device_hash(const struct pipe *p, const struct image *parent)
{
    const char *v = getenv("TCGPU_DEVICE_HASH");
    int mode = v && *v ? (strcmp(v, "0") ? 1 : -1) : p->o.device_hash;

    if (!p->dev || mode < 0)
        return 0;
    if (mode > 0 || pdev_kind(p->dev) == PDEV_CUBIN)
        return 1;
    for (size_t i = 0; parent && i < image_chunk_count(parent); i++)
        if (image_chunk_at(parent, i)->has_dev_hash)
            return 1;
    return 0;
}

static size_t n_pieces_of(const struct drain *d)
{
    return d->n;
}

int pipe_drain_image(struct pipe *p, const struct pipe_ext *e, size_t n,
                     struct image_writer *w, const struct image *parent)
{
    struct drain d = { .p = p, .from_device = 1, .parent = parent, .w = w };
    int rc;

    if ((rc = drain_setup(p)) != 0 || (rc = make_pieces(p, e, n, &d.pc, &d.n)) != 0)
        return rc;
    for (size_t i = 0; i < d.n; i++)
        p->st.raw_bytes += d.pc[i].len;
    /* One device at a time (the caller groups extents by device). */
    for (size_t i = 0, end; i < n_pieces_of(&d) && rc == 0; i = end) {
        struct drain run = d;

        end = device_run(d.pc, d.n, i);
        run.pc = d.pc + i;
        run.n = end - i;
        rc = use_device(p, d.pc[i].device, 1);
        if (rc == 0)
            rc = make_ring(p, 1);
        if (rc == 0)
            rc = scan_pieces(p, d.pc, i, end, want_device_hash(p, parent));
        if (rc == 0)
            rc = run_drain(&run);
    }
    if (rc == 0)
        rc = leave_device(p);
    else
        leave_device(p);
    free(d.pc);
    return rc;
}

int pipe_write_store(struct pipe *p, struct pipe_store *s, struct image_writer *w,
                     const struct image *parent)
{
    struct drain d = { .p = p, .pc = s->pc, .n = s->n, .parent = parent, .w = w };
    int rc;

    pipe_store_compress_stop(s);
    for (size_t i = 0; i < s->n; i++) {
        if (s->pc[i].state == P_ENC) {
            say(p, "the host copy is compressed in memory; cannot write it as an image");
            return -EINVAL;
        }
    }
    if ((rc = drain_setup(p)) != 0)
        return rc;
    p->st.raw_bytes = s->raw_bytes;
    /* No device: the ring is plain memory for the encoders' output. */
    p->slots = calloc(p->nslots, sizeof(*p->slots));
    p->njobs = (size_t)p->nslots * (p->slot_size / p->chunk + 64) + 256;
    p->jobs = calloc(p->njobs, sizeof(*p->jobs));
    for (unsigned i = 0; p->slots && i < p->nslots; i++)
        if (!(p->slots[i].enc = malloc(p->slot_size)))
            break;
    if (!p->slots || !p->jobs || !p->slots[p->nslots - 1].enc) {
        say(p, "out of host memory for the encoders");
        rc = -ENOMEM;
    } else {
        rc = run_drain(&d);
    }
    for (unsigned i = 0; p->slots && i < p->nslots; i++)
        free(p->slots[i].enc);
    free(p->slots);
    free(p->jobs);
    p->slots = NULL;
    p->jobs = NULL;
    return rc;
}

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

    image_chunk_resolved(j->img, j->img_index, &codec, &stored_len);
    if (codec == TCGPU_CODEC_RAW) {
        /* Stored bytes are the raw bytes: read them where they go. */
        t->rc = image_read_stored(j->img, j->img_index, j->dst, j->err, sizeof(j->err));
        return;
    }
    if (w->buf_cap < stored_len) {
        uint8_t *b = realloc(w->buf, stored_len);

        if (!b) {
            snprintf(j->err, sizeof(j->err), "out of memory");
            t->rc = -ENOMEM;
            return;
        }
        w->buf = b;
        w->buf_cap = stored_len;
    }
    rc = image_read_stored(j->img, j->img_index, w->buf, j->err, sizeof(j->err));
    if (rc == 0)
        rc = image_decode_chunk(j->img, j->img_index, w->ctx, w->buf, j->dst, j->err,
                                sizeof(j->err));
    t->rc = rc;
}

struct refill {
    struct pipe *p;
    struct job *items;            /* what to put back, in order */
    size_t n, next;
    int err;
};

static int upload(struct pipe *p, CUdeviceptr va, const void *src, size_t len)
{
    CUresult rc = TCGPU_REAL(cuMemcpyHtoDAsync)(va, src, len, p->stream);

    if (rc != CUDA_SUCCESS) {
        say(p, "cuMemcpyHtoDAsync of %zu bytes at %#llx: %s", len, (unsigned long long)va,
            cu_error_name(rc));
        return -EIO;
    }
    p->st.copied_bytes += len;
    return 0;
}

static int memset_dev(struct pipe *p, CUdeviceptr va, size_t len)
{
    CUresult rc = TCGPU_REAL(cuMemsetD8Async)(va, 0, len, p->stream);

    if (rc != CUDA_SUCCESS) {
        say(p, "cuMemsetD8Async of %zu bytes at %#llx: %s", len, (unsigned long long)va,
            cu_error_name(rc));
        return -EIO;
    }
    return 0;
}

/* Uploads a slot whose chunks are all decoded. */
static int upload_slot(struct refill *r, unsigned si, size_t first, size_t last)
{
    struct pipe *p = r->p;
    struct slot *s = &p->slots[si];
    int rc = 0;

    for (size_t i = first; i < last && rc == 0; i++) {
        struct job *j = &r->items[i];

        if (j->slot != (int)si)
            continue;
        if (j->t.rc && !r->err) {
            say(p, "%s", j->err[0] ? j->err : strerror(-j->t.rc));
            r->err = j->t.rc;
        }
        if (!r->err) {
            rc = upload(p, j->va, j->dst, j->len);
            progress(p, j->len);
        }
    }
    if (rc == 0 && !r->err) {
        CUresult cr = TCGPU_REAL(cuEventRecord)(s->ev, p->stream);

        if (cr != CUDA_SUCCESS) {
            say(p, "cuEventRecord: %s", cu_error_name(cr));
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

/* Puts r->items back on the current device: zero chunks by memset, raw
 * host chunks by direct uploads, the rest decoded by the workers into the
 * staging slots and uploaded slot by slot while the next ones decode. */
static int run_refill(struct refill *r)
{
    struct pipe *p = r->p;
    size_t *slot_first = calloc(p->nslots, sizeof(size_t));
    size_t *slot_last = calloc(p->nslots, sizeof(size_t));
    unsigned fill = 0, next_up = 0, oldest = 0;
    int rc = 0;

    if (!slot_first || !slot_last) {
        free(slot_first);
        free(slot_last);
        say(p, "out of memory");
        return -ENOMEM;
    }
    for (;;) {
        int progressed = 0;

        /* 1. fill the next free slot; zero and direct chunks go now */
        while (!r->err && r->next < r->n && p->slots[fill].state == S_FREE) {
            struct slot *s = &p->slots[fill];
            size_t first = r->next;

            s->fill = 0;
            s->pending = 0;
            while (r->next < r->n && !r->err) {
                struct job *j = &r->items[r->next];

                if (j->kind == R_ZERO || j->kind == R_DIRECT) {
                    rc = j->kind == R_ZERO ? memset_dev(p, j->va, j->len)
                                           : upload(p, j->va, j->src, j->len);
                    if (rc) {
                        r->err = rc;
                        break;
                    }
                    progress(p, j->len);
                    r->next++;
                    progressed = 1;
                    continue;
                }
                if (s->fill + j->len > p->slot_size)
                    break;
                j->slot = (int)fill;
                j->dst = s->mem + s->fill;
                j->t.fn = decode_job;
                submit(p, &j->t);
                s->fill += j->len;
                s->pending++;
                r->next++;
            }
            if (!s->pending)
                break;
            slot_first[fill] = first;
            slot_last[fill] = r->next;
            s->state = S_WORKING;
            fill = (fill + 1) % p->nslots;
            progressed = 1;
        }
        /* 2. in ring order: upload decoded slots (next_up), free uploaded
         * ones (oldest); both follow the order the slots were filled in */
        while (p->slots[next_up].state == S_WORKING) {
            int all = 1;

            for (size_t i = slot_first[next_up]; i < slot_last[next_up] && all; i++)
                if (r->items[i].slot == (int)next_up && !task_done(p, &r->items[i].t))
                    all = 0;
            if (!all)
                break;
            if ((rc = upload_slot(r, next_up, slot_first[next_up], slot_last[next_up])) != 0 &&
                !r->err)
                r->err = rc;
            next_up = (next_up + 1) % p->nslots;
            progressed = 1;
        }
        while (p->slots[oldest].state == S_UPLOADING) {
            if (!r->err && TCGPU_REAL(cuEventQuery)(p->slots[oldest].ev) == CUDA_ERROR_NOT_READY)
                break;
            p->slots[oldest].state = S_FREE;
            oldest = (oldest + 1) % p->nslots;
            progressed = 1;
        }
        if (!slots_busy(p) && (r->next == r->n || r->err))
            break;
        if (progressed)
            continue;
        /* 3. wait: for the next slot's decoding, else the oldest upload */
        if (p->slots[next_up].state == S_WORKING) {
            for (size_t i = slot_first[next_up]; i < slot_last[next_up]; i++)
                if (r->items[i].slot == (int)next_up)
                    task_wait(p, &r->items[i].t);
        } else if (p->slots[oldest].state == S_UPLOADING) {
            TCGPU_REAL(cuEventSynchronize)(p->slots[oldest].ev);
        }
    }
    free(slot_first);
    free(slot_last);
    if (!r->err)
        r->err = stream_sync(p);
    return r->err;
}

static int item_cmp_device(const void *a, const void *b)
{
    const struct job *x = a, *y = b;

    if (x->pc->device != y->pc->device)
        return x->pc->device < y->pc->device ? -1 : 1;
    return x->img_index < y->img_index ? -1 : x->img_index > y->img_index;
}

/* Runs the items device by device (stable: sorted by device, then order). */
static int refill_all(struct pipe *p, struct refill *all)
{
    int rc = 0;

    for (size_t i = 0; i < all->n; i++)
        all->items[i].img_index = all->items[i].img ? all->items[i].img_index : i;
    qsort(all->items, all->n, sizeof(*all->items), item_cmp_device);
    for (size_t i = 0, end; i < all->n && rc == 0; i = end) {
        struct refill r = { .p = p, .items = all->items + i };

        for (end = i + 1; end < all->n && all->items[end].pc->device == all->items[i].pc->device;)
            end++;
        r.n = end - i;
        rc = use_device(p, all->items[i].pc->device, 0);
        if (rc == 0)
            rc = make_ring(p, 0);
        if (rc == 0)
            rc = run_refill(&r);
        if (rc)
            break;
        rc = leave_device(p);
    }
    leave_device(p);
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
    if (!s->n)
        return 0;
    r.items = calloc(s->n, sizeof(*r.items));
    refill_setup(p);
    if (!r.items) {
        say(p, "out of memory");
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
        /* Merge adjacent raw chunks into one upload. */
        while (j->kind == R_DIRECT && i + 1 < s->n && s->pc[i + 1].state == P_RAW &&
               s->pc[i + 1].va == j->va + j->len && s->pc[i + 1].host == j->src + j->len &&
               s->pc[i + 1].device == q->device && j->len < HOST_COPY_MAX)
            j->len += s->pc[++i].len;
    }
    refill_setup(p);
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

int pipe_refill_image(struct pipe *p, const struct image *img, const struct pipe_ext *allocs,
                      size_t n)
{
    struct refill r = { .p = p };
    struct alloc_key *keys = calloc(n ? n : 1, sizeof(*keys));
    struct piece *dev = calloc(n ? n : 1, sizeof(*dev));   /* device of each alloc */
    size_t nch = image_chunk_count(img);
    int rc = 0;

    refill_setup(p);
    r.items = calloc(nch ? nch : 1, sizeof(*r.items));
    if (!keys || !dev || !r.items) {
        say(p, "out of memory");
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        keys[i] = (struct alloc_key){ allocs[i].alloc_id, i };
        dev[i].device = allocs[i].device;
    }
    qsort(keys, n, sizeof(*keys), key_cmp);
    for (size_t i = 0; i < nch; i++) {
        const struct image_chunk *c = image_chunk_at(img, i);
        struct alloc_key k = { c->alloc_id, 0 }, *f;
        unsigned codec;
        struct job *j;

        f = n ? bsearch(&k, keys, n, sizeof(*keys), key_cmp) : NULL;
        if (!f)
            continue;             /* not one of the allocations asked for */
        if (c->alloc_offset + c->raw_len > allocs[f->index].len) {
            say(p, "chunk at offset %#llx of allocation %llu runs past its %zu bytes",
                (unsigned long long)c->alloc_offset, (unsigned long long)c->alloc_id,
                allocs[f->index].len);
            rc = -EBADMSG;
            goto out;
        }
        if (c->raw_len > p->slot_size) {
            say(p, "chunk of %u bytes is larger than a staging slot", c->raw_len);
            rc = -EINVAL;
            goto out;
        }
        image_chunk_resolved(img, i, &codec, NULL);
        j = &r.items[r.n++];
        j->pc = &dev[f->index];
        j->va = allocs[f->index].va + c->alloc_offset;
        j->len = c->raw_len;
        j->slot = -1;
        j->img = img;
        j->img_index = i;
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

/* --- background compression of a host store ----------------------------------- */

static void *compress_main(void *arg)
{
    struct pipe_store *s = arg;
    struct codec_ctx *ctx = NULL;
    uint8_t *buf = NULL;
    size_t cap = 0;

    tcgpu_gate_set_exempt(true);
    if (codec_ctx_new(&ctx, NULL))
        return NULL;
    for (;;) {
        struct piece *q;
        struct codec_out o;
        size_t i;

        pthread_mutex_lock(&s->mu);
        i = s->stop ? s->n : s->next++;
        pthread_mutex_unlock(&s->mu);
        if (i >= s->n)
            break;
        q = &s->pc[i];
        if (q->state != P_RAW)
            continue;
        if (cap < q->len) {
            free(buf);
            cap = q->len;
            if (!(buf = malloc(cap)))
                break;
        }
        if (codec_encode(ctx, q->host, q->len, q->dtype, buf, cap, &o) != 0)
            continue;
        if (o.codec == TCGPU_CODEC_ZERO) {
            q->state = P_ZERO;
        } else if (o.codec != TCGPU_CODEC_RAW) {
            uint8_t *e = malloc(o.stored_len);
            if (!e)
                continue;
            memcpy(e, o.data, o.stored_len);
            q->enc = e;
            q->enc_len = (uint32_t)o.stored_len;
            q->codec = o.codec;
            q->state = P_ENC;
        } else {
            continue;
        }
        /* Give the raw pages back (the page-aligned inside of the chunk). */
        uintptr_t a = ((uintptr_t)q->host + 4095) & ~(uintptr_t)4095;
        uintptr_t b = ((uintptr_t)q->host + q->len) & ~(uintptr_t)4095;
        if (b > a)
            madvise((void *)a, b - a, MADV_DONTNEED);
    }
    free(buf);
    codec_ctx_free(ctx);
    return NULL;
}

int pipe_store_compress_start(struct pipe_store *s, unsigned threads)
{
    if (s->th)
        return -EALREADY;
    s->nth = threads ? threads : pipe_default_workers();
    s->th = calloc(s->nth, sizeof(*s->th));
    if (!s->th)
        return -ENOMEM;
    s->stop = 0;
    s->next = 0;
    for (unsigned i = 0; i < s->nth; i++) {
        if (pthread_create(&s->th[i], NULL, compress_main, s)) {
            s->nth = i;
            pipe_store_compress_stop(s);
            return -EAGAIN;
        }
    }
    return 0;
}

void pipe_store_compress_stop(struct pipe_store *s)
{
    if (!s->th)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    for (unsigned i = 0; i < s->nth; i++)
        pthread_join(s->th[i], NULL);
    free(s->th);
    s->th = NULL;
    s->nth = 0;
}
