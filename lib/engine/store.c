/*
 * store.c - the host store (a drain's raw copy) and its background
 * compression (TCGPU_HOST_COMPRESS: threads of its own, raw pages given back
 * chunk by chunk).
 *
 * A store's bytes live in one *arena*: an anonymous mapping with transparent
 * huge pages (unless the guest reports free pages to its hypervisor:
 * arena_wants_thp), each extent at a 4 KiB-aligned place in it. The arena can
 * outlive the store's contents (pipe_store_empty): its pages are written
 * again without a fault or a page of zeroing by the next drain that reuses
 * the arena (pipe_drain_host_reuse), and when memory grows short they are
 * marked MADV_FREE (pipe_store_make_reclaimable), so the kernel takes them
 * back before it would swap or kill anything.
 * docs/engine.md ("Warm host store") explains why: fresh pages cost more
 * than the copy itself.
 *
 * On a real GPU a copy into pageable memory is staged by the driver at a
 * fraction of the link's speed, so the arena is registered with the driver
 * (cuMemHostRegister, TCGPU_HOST_REGISTER=0 to disable) once and stays
 * registered while it is kept.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dev.h"
#include "driver/driver.h"
#include "driver/gate.h"
#include "internal.h"

#define ARENA_ALIGN (2u << 20)        /* whole huge pages */
#define EXTENT_ALIGN 4096u

/* --- the arena ---------------------------------------------------------------- */

static size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

/* Bytes of arena the extents need: each at a 4 KiB boundary. */
static size_t arena_need(const struct pipe_ext *e, size_t n)
{
    size_t need = 0;

    for (size_t i = 0; i < n; i++)
        if (e[i].len)
            need += round_up(e[i].len, EXTENT_ALIGN);
    return need ? round_up(need, ARENA_ALIGN) : 0;
}

/* Undoes the registration (in the context that made it). */
static void arena_unregister(struct pipe_store *s)
{
    CUcontext ignored;

    if (!s->registered)
        return;
    if (TCGPU_REAL(cuCtxPushCurrent)(s->reg_ctx) == CUDA_SUCCESS) {
        TCGPU_REAL(cuMemHostUnregister)(s->mem);
        TCGPU_REAL(cuCtxPopCurrent)(&ignored);
    }
    /* A context that is gone took its registrations with it. */
    s->registered = 0;
}

static void arena_free(struct pipe_store *s)
{
    arena_unregister(s);
    if (s->mem)
        munmap(s->mem, s->cap);
    s->mem = NULL;
    s->cap = 0;
}

/*
 * Whether the guest gives free memory back to its hypervisor: a virtio
 * balloon with free page reporting (VIRTIO_BALLOON_F_REPORTING, feature
 * bit 5) reports free blocks of page_reporting_order (a huge page's) and
 * up, and the host drops them. A huge page faulted from such a block then
 * costs the hypervisor hundreds of faults of its own: on this project's VMs
 * touching 512 MiB of fresh huge pages took 510-950 ms, the same again at
 * once 75-105 ms, 4 KiB pages (from the guest's recently used ones) 230-260 ms.
 */
static int guest_reports_free_pages(void)
{
    const char *dir = "/sys/bus/virtio/drivers/virtio_balloon";
    char path[PATH_MAX], bits[128] = "";
    struct dirent *d;
    int found = 0;
    DIR *dp;
    FILE *f;

    if (access("/sys/module/page_reporting/parameters/page_reporting_order", F_OK) != 0 ||
        !(dp = opendir(dir)))
        return 0;
    while (!found && (d = readdir(dp))) {
        if (strncmp(d->d_name, "virtio", 6))
            continue;
        snprintf(path, sizeof(path), "%s/%s/features", dir, d->d_name);
        if ((f = fopen(path, "re"))) {
            found = fgets(bits, sizeof(bits), f) && strlen(bits) > 5 && bits[5] == '1';
            fclose(f);
        }
    }
    closedir(dp);
    return found;
}

/* Whether a fresh arena asks for transparent huge pages: pipe_opts.store_thp
 * (1/-1), by default unless the guest reports free pages (above). */
static int arena_wants_thp(const struct pipe *p)
{
    static int wanted = -1;
    int w;

    if (p->o.store_thp)
        return p->o.store_thp > 0;
    if ((w = __atomic_load_n(&wanted, __ATOMIC_RELAXED)) < 0) {
        w = !guest_reports_free_pages();
        __atomic_store_n(&wanted, w, __ATOMIC_RELAXED);
    }
    return w;
}

/* Makes the arena `need` bytes: keeps what it has (its pages stay warm),
 * grows it in place when it can. 0 or -ENOMEM (the arena is then gone). */
static int arena_fit(const struct pipe *p, struct pipe_store *s, size_t need)
{
    void *m;

    if (need <= s->cap)
        return 0;
    arena_unregister(s);          /* it moves or grows: registered again later */
    if (s->mem) {
        m = mremap(s->mem, s->cap, need, MREMAP_MAYMOVE);
        if (m == MAP_FAILED) {
            arena_free(s);
            return -ENOMEM;
        }
    } else {
        m = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return -ENOMEM;
    }
    s->mem = m;
    s->cap = need;
    /* Fewer faults on the way in; zero chunks never touch their pages. */
    if (arena_wants_thp(p))
        madvise(s->mem, s->cap, MADV_HUGEPAGE);
    return 0;
}

/* One thread's slice of the arena, faulted in (MADV_POPULATE_WRITE). */
struct fault_slice {
    uint8_t *at;
    size_t len;
    struct helper_thread th;
};

static void *fault_main(void *arg)
{
    struct fault_slice *f = arg;

    tcgpu_gate_set_exempt(true);
    madvise(f->at, f->len, MADV_POPULATE_WRITE);   /* old kernel: the copies fault them */
    return NULL;
}

/*
 * Faults a fresh arena in on `n` threads: a registration pins the pages,
 * and a driver that faults them itself does it on one thread, at one
 * core's page-zeroing speed (docs/engine.md, the model).
 */
static void fault_in_parallel(struct pipe_store *s, unsigned n)
{
    struct fault_slice f[MAX_WORKERS] = { { 0 } };
    size_t step;

    if (n > MAX_WORKERS)
        n = MAX_WORKERS;
    step = round_up((s->cap + n - 1) / n, ARENA_ALIGN);
    for (unsigned i = 0; i < n && (size_t)i * step < s->cap; i++) {
        f[i].at = s->mem + (size_t)i * step;
        f[i].len = s->cap - (size_t)i * step < step ? s->cap - (size_t)i * step : step;
        if (helper_thread_start(&f[i].th, fault_main, &f[i]) != 0)
            fault_main(&f[i]);
    }
    for (unsigned i = 0; i < n; i++)
        helper_thread_join(&f[i].th);
}

int pipe_store_register(struct pipe *p, struct pipe_store *s)
{
    CUresult cr;

    if (s->registered || !s->mem || p->o.host_register < 0)
        return 0;
    /* A real GPU's registration pins (and so faults) the pages: do it on
     * every core first. simcuda's does not: its copies fault them. */
    if (!s->reused && pdev_kind(p->dev) == PDEV_CUBIN) {
        fault_in_parallel(s, p->nw ? p->nw : 1);
        s->faulted = 1;
    }
    if (TCGPU_REAL(cuCtxGetCurrent)(&s->reg_ctx) != CUDA_SUCCESS || !s->reg_ctx)
        return 0;
    cr = TCGPU_REAL(cuMemHostRegister)(s->mem, s->cap, CU_MEMHOSTREGISTER_PORTABLE);
    /* Unregistered memory still works, at the driver's staging speed. */
    s->registered = cr == CUDA_SUCCESS;
    return 0;
}

/* --- host store ------------------------------------------------------------ */

/* Drops the contents: pieces, encoded forms, the compression threads. */
static void store_clear(struct pipe_store *s)
{
    pipe_store_compress_stop(s);
    for (size_t i = 0; i < s->n; i++)
        free(s->pc[i].enc);
    free(s->pc);
    s->pc = NULL;
    s->n = 0;
    s->raw_bytes = 0;
}

void pipe_store_free(struct pipe_store *s)
{
    if (!s)
        return;
    store_clear(s);
    arena_free(s);
    pthread_cond_destroy(&s->stopping);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

uint64_t pipe_store_empty(struct pipe_store *s)
{
    store_clear(s);
    return s->cap;
}

void pipe_store_make_reclaimable(struct pipe_store *s)
{
    if (!s || !s->mem || s->reclaimable)
        return;
    /* The contents are garbage: pages the kernel takes read as zero, and
     * the next drain writes those of every chunk it keeps (a zero chunk's
     * are never read: a refill clears it on the device). */
    if (madvise(s->mem, s->cap, MADV_FREE) == 0)
        s->reclaimable = 1;
}

int pipe_store_is_reclaimable(const struct pipe_store *s)
{
    return s && s->reclaimable;
}

uint64_t pipe_store_kept_bytes(const struct pipe_store *s)
{
    return s ? s->cap : 0;
}

static struct pipe_store *store_alloc(void)
{
    struct pipe_store *s = calloc(1, sizeof(*s));

    if (s) {
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->stopping, NULL);
    }
    return s;
}

/* Points the pieces at their places in the arena, extent by extent. */
static void store_place(struct pipe_store *s, const struct pipe_ext *e, size_t n)
{
    size_t k = 0, at = 0;

    for (size_t i = 0; i < n; i++) {
        if (!e[i].len)
            continue;
        for (size_t done = 0; done < e[i].len; k++) {
            s->pc[k].host = s->mem + at + done;
            done += s->pc[k].len;
        }
        at += round_up(e[i].len, EXTENT_ALIGN);
        s->raw_bytes += e[i].len;
    }
}

int pipe_store_new(struct pipe *p, const struct pipe_ext *e, size_t n, struct pipe_store *spare,
                   struct pipe_store **out)
{
    struct pipe_store *s = spare;
    size_t need = arena_need(e, n);
    int rc;

    if (s)
        store_clear(s);
    else if (!(s = store_alloc())) {
        pipe_say(p, "out of host memory for the host store");
        return -ENOMEM;
    }
    if ((rc = pipe_make_pieces(p, e, n, &s->pc, &s->n)) != 0) {
        pipe_store_free(s);
        return rc;
    }
    if (arena_fit(p, s, need) != 0) {
        pipe_say(p, "out of host memory for a host store of %zu bytes", need);
        pipe_store_free(s);
        return -ENOMEM;
    }
    s->reused = spare != NULL;
    s->reclaimable = 0;           /* the drain writes its pages now */
    store_place(s, e, n);
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

/* --- background compression of a host store ----------------------------------- */

/* Keeps the encoded form of piece q and gives its raw pages back. */
static void keep_encoded(struct piece *q, const struct codec_out *o)
{
    if (o->codec == TCGPU_CODEC_ZERO) {
        q->state = P_ZERO;
    } else {
        uint8_t *e = malloc(o->stored_len);

        if (!e)
            return;
        memcpy(e, o->data, o->stored_len);
        q->enc = e;
        q->enc_len = (uint32_t)o->stored_len;
        q->codec = o->codec;
        q->state = P_ENC;
    }
    /* The page-aligned inside of the chunk. */
    uintptr_t a = ((uintptr_t)q->host + 4095) & ~(uintptr_t)4095;
    uintptr_t b = ((uintptr_t)q->host + q->len) & ~(uintptr_t)4095;
    if (b > a)
        madvise((void *)a, b - a, MADV_DONTNEED);
}

static void compress_pieces(struct pipe_store *s)
{
    struct codec_ctx *ctx = NULL;
    uint8_t *buf = NULL;
    size_t cap = 0;

    if (codec_ctx_new(&ctx, NULL))
        return;
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
        if (codec_encode(ctx, q->host, q->len, q->dtype, buf, cap, &o) == 0 &&
            o.codec != TCGPU_CODEC_RAW)
            keep_encoded(q, &o);
    }
    free(buf);
    codec_ctx_free(ctx);
}

/* Out of work, a compression thread waits to be stopped: one that ended on
 * its own could be in its exit while a CRIU dump of the suspended process
 * lists the threads. */
static void *compress_main(void *arg)
{
    struct pipe_store *s = arg;

    tcgpu_gate_set_exempt(true);
    compress_pieces(s);
    pthread_mutex_lock(&s->mu);
    while (!s->stop)
        pthread_cond_wait(&s->stopping, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int pipe_store_compress_start(struct pipe_store *s, unsigned threads)
{
    if (s->th)
        return -EALREADY;
    s->nth = threads ? threads : pipe_worker_count(0);
    s->th = calloc(s->nth, sizeof(*s->th));
    if (!s->th)
        return -ENOMEM;
    s->stop = 0;
    s->next = 0;
    for (unsigned i = 0; i < s->nth; i++) {
        if (helper_thread_start(&s->th[i], compress_main, s)) {
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
    pthread_cond_broadcast(&s->stopping);
    pthread_mutex_unlock(&s->mu);
    for (unsigned i = 0; i < s->nth; i++)
        helper_thread_join(&s->th[i]);
    free(s->th);
    s->th = NULL;
    s->nth = 0;
}
