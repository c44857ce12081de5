/*
 * snapshot.c - collect, save, release and rebuild device memory; see
 * snapshot.h. The bytes move through the pipelined engine (pipeline.h:
 * pinned staging ring, chunk workers, io_uring writer, parallel refill);
 * this file decides what is saved, where, and when memory is released.
 * The contexts the copies run in and the wait for the device are devsync.c's;
 * the windows onto memory the program cannot reach are windows.c's.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devmem.h"
#include "devsync.h"
#include "driver/driver.h"
#include "image/image.h"
#include "common/hex.h"
#include "common/log.h"
#include "engine/pipeline.h"
#include "hostkeep.h"
#include "registry.h"
#include "settings.h"
#include "blockers.h"
#include "snapshot.h"
#include "snap_internal.h"
#include "common/errmsg.h"
#include "common/helper_thread.h"
#include "common/proc.h"
#include "driver/gate.h"

/* --- progress ------------------------------------------------------------ */

struct progress {
    tcgpu_progress_fn fn;
    void *arg;
    uint64_t done, total;
    enum tcgpu_phase phase;
};

/* The phase starts: said at once, so that a client shows it from the start. */
static void progress_start(struct progress *p, enum tcgpu_phase phase, uint64_t total)
{
    p->phase = phase;
    p->done = 0;
    p->total = total;
    if (p->fn)
        p->fn(phase, 0, total, p->arg);
}

/* --- collecting regions -------------------------------------------------- */

static int snap_add(struct snap *s, const struct region *r)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct region *n = realloc(s->r, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        s->r = n;
        s->cap = cap;
    }
    s->r[s->n++] = *r;
    s->bytes += r->size;
    return 0;
}

static uint32_t image_kind(enum tc_alloc_kind k)
{
    switch (k) {
    case TC_ALLOC_PITCH: return TCGPU_ALLOC_PITCH;
    case TC_ALLOC_ASYNC: return TCGPU_ALLOC_POOL;
    case TC_ALLOC_GRAPH: return TCGPU_ALLOC_POOL;   /* stream-ordered, in a graph */
    case TC_ALLOC_VMM:   return TCGPU_ALLOC_VMM_MAPPING;
    case TC_ALLOC_DEVICE:
    default:             return TCGPU_ALLOC_DEVICE;
    }
}

static int add_devmem(const struct devmem_alloc *a, void *arg)
{
    if (a->contents_dead)
        return 0;                     /* graph memory between launches (graphmem.h) */
    struct region r = {
        .va = a->va, .size = a->size, .id = a->id, .kind = image_kind(a->kind),
        .dtype = reg_hint_dtype_at(a->va), .device = a->device, .site = a->site,
        .copy_va = a->va,
    };
    return snap_add(arg, &r);
}

/* Whether mapping m gives p's own device read and write access. */
static int map_rw_for(const struct tc_map *m, const struct tc_phys *p)
{
    for (int i = 0; i < m->naccess; i++)
        if (m->access[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
            m->access[i].location.id == p->prop.location.id)
            return m->access[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return 0;
}

/* A mapping that shows all of p, readable and writable (the copies go
 * through it), else a mapping at its start, else NULL. *whole says which. */
static struct tc_map *view_of(const struct tc_phys *p, int *whole)
{
    struct tc_map *start = NULL;

    for (struct tc_map *m = reg_map_first(); m; m = m->next) {
        if (m->phys != p || m->offset != 0)
            continue;
        if (m->size == p->size && map_rw_for(m, p)) {
            *whole = 1;
            return m;
        }
        if (!start)
            start = m;
    }
    *whole = 0;
    return start;
}

/*
 * The program's own physical allocations (cuMemCreate), each saved whole:
 * through a mapping that shows it all with access, else through a window of
 * our own, so that memory mapped without access yet (PyTorch maps, then sets
 * access) or held unmapped (between cuMemCreate and cuMemMap, page pools)
 * is saved too, and the program's mappings keep the access they had. Ids are
 * the program's handles: stable from one checkpoint to the next, apart from
 * devmem's small ids and managed memory's.
 */
static int add_user_memory(struct snap *s)
{
    int rc = 0;

    reg_lock();
    for (struct tc_phys *p = reg_phys_first(); p && rc == 0; p = p->next) {
        struct tc_map *m;
        int whole;

        if (p->owner != TC_OWNER_USER)
            continue;
        m = view_of(p, &whole);
        struct region r = {
            .va = m ? m->va : 0, .size = p->size, .id = p->id, .kind = TCGPU_ALLOC_VMM_MAPPING,
            .dtype = m ? reg_hint_dtype_at(m->va) : TCGPU_DTYPE_UNKNOWN,
            .device = p->prop.location.id, .phys = p, .copy_va = whole ? m->va : 0,
            .windowed = !whole,
        };
        rc = snap_add(s, &r);
    }
    reg_unlock();
    return rc;
}

/* Managed memory, for checkpoints: never released (the driver owns its pages). */
static int add_managed(struct snap *s)
{
    uint64_t id = 3ull << 61;         /* apart from devmem's and user maps' ids */
    int rc = 0;

    reg_lock();
    for (struct tc_managed *m = reg_managed_first(); m && rc == 0; m = m->next) {
        struct region r = {
            .va = m->va, .size = m->size, .id = id++, .kind = TCGPU_ALLOC_MANAGED,
            .dtype = reg_hint_dtype_at(m->va), .device = m->device, .copy_va = m->va,
        };
        rc = snap_add(s, &r);
    }
    reg_unlock();
    return rc;
}

int snap_collect(struct snap **out, unsigned flags)
{
    char why[512];
    struct snap *s;
    int rc;

    if ((flags & SNAP_SUSPEND) ? blockers_first_suspend(why, sizeof(why)) : blockers_first(why, sizeof(why))) {
        errmsg_set("%s", why);
        return -ENOTSUP;
    }
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    devmem_trim();                    /* frees the streams have reached are not saved */
    rc = devmem_for_each(add_devmem, s);
    if (rc == 0)
        rc = add_user_memory(s);
    if (rc == 0 && (flags & SNAP_MANAGED))
        rc = add_managed(s);
    if (rc) {
        if (rc == -ENOMEM)
            errmsg_set("out of host memory listing %zu regions", s->n);
        snap_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* --- saving -------------------------------------------------------------- */

static void pipe_progress(uint64_t bytes, void *arg)
{
    struct progress *p = arg;

    p->done = bytes;
    if (p->fn)
        p->fn(p->phase, p->done, p->total, p->arg);
}

/* Whether the kept pipe's staging ring is still good: the context its
 * pinned memory was made in is one of the program's live contexts. */
static int pipe_still_good(const struct pipe *p)
{
    CUcontext ring = pipe_ring_context(p);

    return ring == NULL || devsync_ctx_live(ring);
}

/* A pipe for one operation: the one kept from the last (its workers,
 * staging ring and buffers), else a new one. close_pipe gives it back. */
static int open_pipe(struct pipe **out, struct progress *prog)
{
    struct pipe_opts o = {
        .ctx_enter = devsync_ctx_enter, .ctx_leave = devsync_ctx_leave,
        .progress = pipe_progress, .progress_arg = prog,
    };
    struct pipe *p = hostkeep_take_pipe();
    int rc;

    if (p && pipe_still_good(p)) {
        pipe_set_progress(p, pipe_progress, prog);
        *out = p;
        return 0;
    }
    pipe_free(p);
    settings_pipe_opts(&o);
    rc = pipe_new(out, &o);
    if (rc)
        errmsg_set("cannot start the copy engine: %s", strerror(-rc));
    return rc;
}

/* Keeps the pipe for the next operation when this one went well. */
static void close_pipe(struct pipe *p, int rc)
{
    if (rc)
        pipe_free(p);
    else
        hostkeep_offer_pipe(p);
}

struct ext_list {
    struct pipe_ext *e;
    size_t n, cap;
    const struct region *r;
};

static int add_ext(CUdeviceptr va, size_t len, void *arg)
{
    struct ext_list *l = arg;

    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct pipe_ext *n = realloc(l->e, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        l->e = n;
        l->cap = cap;
    }
    l->e[l->n++] = (struct pipe_ext){
        .va = l->r->copy_va + (va - l->r->va), .len = len, .alloc_id = l->r->id,
        .offset = va - l->r->va, .dtype = l->r->dtype, .device = l->r->device,
    };
    return 0;
}

static int ext_by_device(const void *a, const void *b)
{
    const struct pipe_ext *x = a, *y = b;

    if (x->device != y->device)
        return x->device < y->device ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The parts of every region to save (hinted skips left out), grouped by
 * device for the engine. */
static int list_extents(struct snap *s, struct ext_list *l)
{
    int rc = 0;

    memset(l, 0, sizeof(*l));
    for (size_t i = 0; i < s->n && rc == 0; i++) {
        l->r = &s->r[i];
        /* hints are by the program's addresses: none without one */
        rc = s->r[i].va ? reg_for_each_unskipped(s->r[i].va, s->r[i].size, add_ext, l)
                        : add_ext(0, s->r[i].size, l);
    }
    if (rc) {
        free(l->e);
        errmsg_set("out of host memory listing the regions' extents");
        return rc;
    }
    /* Stable enough: extents of one device keep their order (qsort is not
     * stable, but ties only happen between identical elements' addresses). */
    for (size_t i = 1; i < l->n; i++) {
        if (l->e[i].device != l->e[0].device) {
            qsort(l->e, l->n, sizeof(*l->e), ext_by_device);
            break;
        }
    }
    return 0;
}

/* The host copy is no longer needed: after a resume from it, its memory
 * is kept for the next suspend (hostkeep.h); otherwise it is freed. */
static void free_host_copies(struct snap *s)
{
    if (s->keep_store)
        hostkeep_offer_store(s->store);
    else
        pipe_store_free(s->store);
    s->store = NULL;
    s->keep_store = 0;
}

int snap_save_host(struct snap *s, tcgpu_progress_fn fn, void *arg)
{
    struct progress prog = { fn, arg, 0, s->bytes, TCGPU_PHASE_DRAIN };
    struct ext_list l;
    struct pipe *p = NULL;
    int rc;

    free_host_copies(s);
    if ((rc = windows_open(s)) != 0)
        return rc;
    if ((rc = list_extents(s, &l)) != 0) {
        windows_close(s);
        return rc;
    }
    progress_start(&prog, TCGPU_PHASE_DRAIN, s->bytes);
    if ((rc = open_pipe(&p, &prog)) == 0) {
        /* Into the pages the last suspend used, when they are kept. */
        rc = pipe_drain_host_reuse(p, l.e, l.n, hostkeep_take_store(), &s->store);
        if (rc)
            errmsg_set("%s", pipe_error(p));
        pipe_get_stats(p, &s->stats);
        close_pipe(p, rc);
    }
    free(l.e);
    windows_close(s);
    if (rc)
        return rc;
    s->stored = pipe_store_bytes(s->store);
    log_debug("host copy of %llu bytes %s", (unsigned long long)s->stats.raw_bytes,
              s->stats.store_reused ? "into the pages kept from the last suspend"
                                    : "into fresh host memory");
    return 0;
}

static void fill_process(struct image_process *p)
{
    memset(p, 0, sizeof(*p));
    p->pid = (uint32_t)getpid();
    gethostname(p->hostname, sizeof(p->hostname) - 1);
    tcgpu_proc_self_exe(p->exe, sizeof(p->exe));
}

static int describe_device(int ordinal, struct image_device *d)
{
    CUuuid uuid;
    int version = 0;

    memset(d, 0, sizeof(*d));
    d->ordinal = ordinal;
    if (TCGPU_REAL(cuDeviceGetName)(d->name, (int)sizeof(d->name) - 1, ordinal) != CUDA_SUCCESS ||
        TCGPU_REAL(cuDeviceTotalMem)((size_t *)&d->total_mem, ordinal) != CUDA_SUCCESS ||
        TCGPU_REAL(cuDeviceGetUuid)(&uuid, ordinal) != CUDA_SUCCESS) {
        errmsg_set("cannot query device %d for the image's identity", ordinal);
        return -EIO;
    }
    memcpy(d->uuid, uuid.bytes, sizeof(d->uuid));
    if (TCGPU_REAL(cuDriverGetVersion)(&version) == CUDA_SUCCESS)
        d->driver_version = (uint32_t)version;
    return 0;
}

/* Device ordinal -> index in the image's device table. */
static int add_devices(struct snap *s, struct image_writer *w, uint32_t *index, int max)
{
    struct image_device d;
    int rc;

    for (int i = 0; i < max; i++)
        index[i] = UINT32_MAX;
    for (size_t i = 0; i < s->n; i++) {
        int dev = s->r[i].device;
        if (dev < 0 || dev >= max) {
            errmsg_set("device ordinal %d out of range", dev);
            return -EINVAL;
        }
        if (index[dev] != UINT32_MAX)
            continue;
        if ((rc = describe_device(dev, &d)) != 0)
            return rc;
        if ((rc = image_writer_add_device(w, &d, &index[dev])) != 0) {
            errmsg_set("%s", image_writer_error(w));
            return rc;
        }
    }
    return 0;
}

static int write_regions(struct snap *s, struct image_writer *w, struct pipe *p,
                         const struct image *parent)
{
    uint32_t devindex[TCGPU_IMG_MAX_DEVICES];
    struct image_process proc;
    struct chunk_sink sink;
    int rc;

    fill_process(&proc);
    if ((rc = image_writer_set_process(w, &proc)) != 0 ||
        (rc = add_devices(s, w, devindex, TCGPU_IMG_MAX_DEVICES)) != 0)
        return rc;
    for (size_t i = 0; i < s->n; i++) {
        const struct region *r = &s->r[i];
        struct image_alloc a = {
            .id = r->id, .addr = r->va, .size = r->size, .kind = r->kind,
            .dtype = r->dtype, .device = devindex[r->device], .callsite = r->site,
        };
        if ((rc = image_writer_add_allocation(w, &a)) != 0) {
            errmsg_set("%s", image_writer_error(w));
            return rc;
        }
    }
    chunk_sink_init(&sink, w, parent);
    if (s->store) {
        /* The bytes are in host memory already (suspend: the device was
         * released before compressing). */
        rc = pipe_write_store(p, s->store, &sink);
    } else {
        struct ext_list l;

        if ((rc = windows_open(s)) != 0)
            return rc;
        if ((rc = list_extents(s, &l)) == 0) {
            rc = pipe_drain_image(p, l.e, l.n, &sink);
            free(l.e);
        }
        windows_close(s);
    }
    pipe_get_stats(p, &s->stats);
    /* The pipe's message when it has one, else the one already set (the
     * extents could not be listed). */
    if (rc && pipe_error(p)[0])
        errmsg_set("%s", pipe_error(p));
    return rc;
}

/* Opens the parent of an incremental image and names it in the writer. */
static int open_parent(struct snap *s, struct image_writer *w, struct image **out)
{
    char err[512] = "", *abs;
    uint8_t csum[16];
    int rc;

    *out = NULL;
    if (!s->parent_dir)
        return 0;
    rc = image_open(out, s->parent_dir, 0, err, sizeof(err));
    if (rc) {
        errmsg_set("parent image %s: %s", s->parent_dir, err[0] ? err : strerror(-rc));
        return rc == -ENOENT ? -ENOENT : rc == -ENOMEM ? rc : -EBADMSG;
    }
    abs = realpath(s->parent_dir, NULL);
    image_manifest_csum(*out, csum);
    rc = image_writer_set_parent(w, abs ? abs : s->parent_dir, csum);
    free(abs);
    if (rc) {
        errmsg_set("parent image path too long: %s", s->parent_dir);
        image_close(*out);
        *out = NULL;
    }
    return rc;
}

int snap_set_parent(struct snap *s, const char *parent_dir)
{
    char *d = NULL;

    if (parent_dir && *parent_dir && !(d = strdup(parent_dir)))
        return -ENOMEM;
    free(s->parent_dir);
    s->parent_dir = d;
    return 0;
}

/* The image just committed: its identity, so that a resume in place takes
 * this image and no other (an older checkpoint of the same process has the
 * same allocations, and would resume silently onto stale memory). */
static int remember_identity(struct snap *s)
{
    char err[512] = "";
    struct image *img = NULL;
    int rc = image_open(&img, s->image_dir, IMAGE_OPEN_MANIFEST_ONLY, err, sizeof(err));

    if (rc) {
        errmsg_set("image written but cannot be read back: %s", err[0] ? err : strerror(-rc));
        return rc;
    }
    image_manifest_csum(img, s->image_id);
    s->image_created_ns = image_process_info(img)->created_ns;
    image_close(img);
    return 0;
}

static int save_image(struct snap *s, const char *dir, tcgpu_progress_fn fn, void *arg)
{
    struct progress prog = { fn, arg, 0, s->bytes, TCGPU_PHASE_WRITE };
    struct image_writer_opts wo = { .flags = settings_image_flags() };
    struct image_writer *w = NULL;
    struct image *parent = NULL;
    struct pipe *p = NULL;
    char err[512] = "";
    uint64_t raw, stored, chunks;
    int rc;

    rc = image_writer_begin(&w, dir, &wo, err, sizeof(err));
    if (rc) {
        errmsg_set("%s", err[0] ? err : strerror(-rc));
        image_writer_free(w);
        return rc;
    }
    errmsg_clear();
    progress_start(&prog, TCGPU_PHASE_WRITE, s->bytes);
    rc = open_parent(s, w, &parent);
    if (rc == 0)
        rc = open_pipe(&p, &prog);
    if (rc == 0)
        rc = write_regions(s, w, p, parent);
    if (p)
        close_pipe(p, rc);
    image_close(parent);
    if (rc == 0 && (rc = image_writer_commit(w)) != 0)
        errmsg_set("%s", image_writer_error(w));
    if (rc == 0) {
        image_writer_stats(w, &raw, &stored, &chunks);
        s->stored = stored;
        free(s->image_dir);
        free(s->written_dir);
        s->written_dir = NULL;
        /* a directory passed to us as a descriptor (/proc/self/fd/N/...: a CRIU
         * plugin outside our mount namespace) has no path in our root: keep the
         * one we were given */
        s->image_dir = realpath(dir, NULL);
        if (!s->image_dir)
            s->image_dir = strdup(dir);
        if (!s->image_dir) {
            errmsg_set("out of host memory");
            rc = -ENOMEM;
        } else if (!(s->written_dir = strdup(s->image_dir))) {
            errmsg_set("out of host memory");
            rc = -ENOMEM;
        } else {
            rc = remember_identity(s);
        }
    }
    image_writer_free(w);             /* removes the temporary directory on failure */
    if (rc == 0)
        free_host_copies(s);          /* the image holds the bytes now */
    return rc;
}

/*
 * The image is written on a thread of its own, gone before the operation
 * ends. The kernel gives an io_uring submitter worker threads (iou-wrk, in
 * our thread group) for the writes it cannot do without blocking (a file
 * that grows, a buffered one); they end on their own, some time later.
 * CRIU cannot dump a process while one ends: it vanishes when seized
 * ("Can't dump threads"), and the CRIU plugin's checkpoint comes right
 * before the dump (a third to a half of the saves of a mostly idle job
 * failed). A submitter's exit waits for its workers to end.
 */
struct save_job {
    struct snap *s;
    const char *dir;
    tcgpu_progress_fn fn;
    void *arg;
    struct errmsg_record *err;        /* the operation's: result and message land there */
};

static void *save_image_main(void *arg)
{
    struct save_job *j = arg;

    tcgpu_gate_set_exempt(true);
    errmsg_carry(j->err);
    errmsg_result(save_image(j->s, j->dir, j->fn, j->arg));
    return NULL;
}

int snap_save_image(struct snap *s, const char *dir, tcgpu_progress_fn fn, void *arg)
{
    struct save_job j = { .s = s, .dir = dir, .fn = fn, .arg = arg, .err = errmsg_record() };
    struct helper_thread h;

    if (helper_thread_start(&h, save_image_main, &j) != 0)
        return errmsg_result(save_image(s, dir, fn, arg));  /* on this thread, workers and all */
    helper_thread_join(&h);
    return j.err->rc;
}

/* --- taking memory down and putting it back ------------------------------ */

static void managed_prefetch(int to_host);

/* Which physical allocations and mappings one rebuild pass created. */
struct pass {
    struct tc_phys **phys;
    size_t nphys;
    struct tc_map **maps;
    size_t nmaps;
};

static void pass_undo(struct pass *p)
{
    for (size_t i = 0; i < p->nmaps; i++) {
        TCGPU_REAL(cuMemUnmap)(p->maps[i]->va, p->maps[i]->size);
        p->maps[i]->unmapped = 1;
    }
    for (size_t i = 0; i < p->nphys; i++) {
        TCGPU_REAL(cuMemRelease)(p->phys[i]->real);
        p->phys[i]->real = 0;
    }
    p->nmaps = p->nphys = 0;
}

static int create_missing_phys(struct pass *p)
{
    for (struct tc_phys *ph = reg_phys_first(); ph; ph = ph->next) {
        if (ph->real || ph->owner == TC_OWNER_IMPORTED)     /* ipcmem imports it again */
            continue;
        CUresult rc = TCGPU_REAL(cuMemCreate)(&ph->real, ph->size, &ph->prop, ph->flags);
        if (rc != CUDA_SUCCESS) {
            ph->real = 0;
            errmsg_set("cuMemCreate of %zu bytes on device %d: %s", ph->size,
                               ph->prop.location.id, cu_error_name(rc));
            return rc == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
        }
        p->phys[p->nphys++] = ph;
    }
    return 0;
}

static int map_missing(struct pass *p)
{
    for (struct tc_map *m = reg_map_first(); m; m = m->next) {
        if (!m->unmapped || m->phys->owner == TC_OWNER_IMPORTED)   /* and maps it */
            continue;
        CUresult rc = TCGPU_REAL(cuMemMap)(m->va, m->size, m->offset, m->phys->real, 0);
        if (rc == CUDA_SUCCESS && m->naccess)
            rc = TCGPU_REAL(cuMemSetAccess)(m->va, m->size, m->access, (size_t)m->naccess);
        if (rc != CUDA_SUCCESS) {
            errmsg_set("cuMemMap/cuMemSetAccess at %#llx (%zu bytes): %s",
                               (unsigned long long)m->va, m->size, cu_error_name(rc));
            if (rc == CUDA_SUCCESS || m->naccess)
                TCGPU_REAL(cuMemUnmap)(m->va, m->size);
            return -EIO;
        }
        m->unmapped = 0;
        p->maps[p->nmaps++] = m;
    }
    return 0;
}

static int refill_from_host(struct snap *s, struct progress *prog)
{
    struct pipe *p = NULL;
    int rc = open_pipe(&p, prog);

    if (rc == 0) {
        rc = pipe_refill_host(p, s->store);
        if (rc)
            errmsg_set("%s", pipe_error(p));
        pipe_get_stats(p, &s->stats);
        close_pipe(p, rc);
    }
    /* Back on the device: the store's memory serves the next suspend. */
    s->keep_store = rc == 0;
    return rc;
}

static int refill_from_image(struct snap *s, struct image *img, struct progress *prog)
{
    struct pipe_ext *e = calloc(s->n ? s->n : 1, sizeof(*e));
    struct chunk_source src;
    struct pipe *p = NULL;
    int rc;

    if (!e) {
        errmsg_set("out of host memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < s->n; i++)
        e[i] = (struct pipe_ext){ .va = s->r[i].copy_va, .len = s->r[i].size,
                                  .alloc_id = s->r[i].id, .dtype = s->r[i].dtype,
                                  .device = s->r[i].device };
    chunk_source_init_verified(&src, img);   /* open_verified checked the stored bytes */
    rc = open_pipe(&p, prog);
    if (rc == 0) {
        rc = pipe_refill_image(p, &src, e, s->n);
        if (rc)
            errmsg_set("%s", pipe_error(p));
        pipe_get_stats(p, &s->stats);
        close_pipe(p, rc);
    }
    free(e);
    return rc;
}

static void format_time(uint64_t ns, char *buf, size_t len)
{
    time_t t = (time_t)(ns / 1000000000u);
    struct tm tm;

    if (!ns || !localtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(buf, len, "an unknown time");
}

/* The image found must be the one this process's suspend wrote (its
 * manifest checksum); naming both when it is not. */
static int check_identity(const struct snap *s, const struct image *img)
{
    const struct image_process *p = image_process_info(img);
    char want[33], got[33], t_want[32], t_got[32];
    uint8_t id[16];

    image_manifest_csum(img, id);
    if (!memcmp(id, s->image_id, 16))
        return 0;
    hex_put16(s->image_id, want);
    hex_put16(id, got);
    format_time(s->image_created_ns, t_want, sizeof(t_want));
    format_time(p->created_ns, t_got, sizeof(t_got));
    errmsg_set("%s is not the image this process was suspended to: it is image %s, written %s "
               "by pid %u; the suspend wrote image %s at %s, %s (gpuckpt inspect shows an "
               "image's id)", s->image_dir, got, t_got, p->pid, want, s->written_dir, t_want);
    return -EBADMSG;
}

/* The image holds exactly this process's allocations, each at its address
 * with its size; checked before any data is read, so the data's size is
 * bounded by what the process holds. */
static int check_allocations(const struct snap *s, const struct image *img)
{
    for (size_t i = 0; i < s->n; i++) {
        const struct image_alloc *a = image_find_alloc(img, s->r[i].id);
        if (!a || a->addr != s->r[i].va || a->size != s->r[i].size) {
            errmsg_set("image %s does not hold allocation %#llx (%zu bytes) of this process",
                       s->image_dir, (unsigned long long)s->r[i].va, s->r[i].size);
            return -EBADMSG;
        }
    }
    if (image_alloc_count(img) != s->n) {
        errmsg_set("image %s holds %zu allocations, this process %zu", s->image_dir,
                   image_alloc_count(img), s->n);
        return -EBADMSG;
    }
    return 0;
}

/*
 * Opens the image and checks, before anything is touched: that it is the
 * suspend's own, that it holds this process's allocations, then every
 * chunk's stored bytes (a damaged file is refused here); the raw checksums
 * are checked as the refill decodes, and a mismatch there undoes the
 * rebuild.
 */
static int open_verified(struct snap *s, struct image **out)
{
    char err[512] = "";
    struct image *img = NULL;
    int rc = image_open(&img, s->image_dir, 0, err, sizeof(err));

    if (rc) {
        errmsg_set("%s", err[0] ? err : strerror(-rc));
        return rc == -EBADMSG ? -EBADMSG : rc;
    }
    if ((rc = check_identity(s, img)) != 0 || (rc = check_allocations(s, img)) != 0) {
        image_close(img);
        return rc;
    }
    rc = image_verify_stored(img, pipe_worker_count(settings_get()->workers), err, sizeof(err));
    if (rc) {
        errmsg_set("%s", err[0] ? err : strerror(-rc));
        image_close(img);
        return rc == -EIO || rc == -ENOMEM ? rc : -EBADMSG;
    }
    *out = img;
    return 0;
}

int snap_rebuild(struct snap *s, tcgpu_progress_fn fn, void *arg)
{
    struct progress prog = { fn, arg, 0, s->bytes, TCGPU_PHASE_REFILL };
    struct image *img = NULL;
    struct reg_counts held;
    struct pass p = { 0 };
    int rc;

    if (s->image_dir) {
        progress_start(&prog, TCGPU_PHASE_VERIFY, 0);
        if ((rc = open_verified(s, &img)) != 0)
            return rc;
    }
    progress_start(&prog, TCGPU_PHASE_REFILL, s->bytes);
    reg_lock();
    reg_counts(&held);
    p.phys = calloc(held.phys + 1, sizeof(*p.phys));
    p.maps = calloc(held.maps + 1, sizeof(*p.maps));
    if (!p.phys || !p.maps) {
        errmsg_set("out of host memory");
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = create_missing_phys(&p)) != 0 || (rc = map_missing(&p)) != 0 ||
        (rc = windows_open(s)) != 0)
        goto undo;
    reg_unlock();
    rc = img ? refill_from_image(s, img, &prog) : refill_from_host(s, &prog);
    reg_lock();
    windows_close(s);
    if (rc)
        goto undo;
    reg_unlock();
    managed_prefetch(0);
    reg_lock();
    goto out;
undo:
    pass_undo(&p);
out:
    reg_unlock();
    free(p.phys);
    free(p.maps);
    image_close(img);
    return rc;
}

/* --- managed memory off the device while suspended ---------------------- */

/*
 * Prefetches every managed allocation to the host (to_host) or back to its
 * device, and waits. The driver owns managed pages and cannot be made to
 * release them, but it migrates them on request: on the host they take no
 * device memory. A failure costs only that memory, never the program's
 * data, so it is logged and the operation goes on.
 */
static void managed_prefetch(int to_host)
{
    struct tc_managed *v = NULL, *m;
    size_t n = 0, k = 0;

    reg_lock();
    for (m = reg_managed_first(); m; m = m->next)
        n++;
    if (n && (v = calloc(n, sizeof(*v))))
        for (m = reg_managed_first(); m; m = m->next)
            v[k++] = *m;
    reg_unlock();
    for (size_t i = 0; i < k; i++) {
        CUmemLocation loc = { to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE,
                              to_host ? 0 : v[i].device };
        CUresult rc;

        if (devsync_ctx_enter(v[i].device, NULL) != 0)
            continue;
        rc = TCGPU_REAL(cuMemPrefetchAsync)(v[i].va, v[i].size, loc, 0, NULL);
        if (rc == CUDA_ERROR_NOT_FOUND)       /* a driver older than 12.2 */
            rc = TCGPU_REAL_ABI(cuMemPrefetchAsync)(v[i].va, v[i].size,
                                                    to_host ? CU_DEVICE_CPU : v[i].device, NULL);
        if (rc == CUDA_SUCCESS)
            rc = TCGPU_REAL(cuCtxSynchronize)();
        if (rc != CUDA_SUCCESS)
            log_info("managed memory at %#llx (%zu bytes) stays where it is: prefetch to %s: %s",
                     (unsigned long long)v[i].va, v[i].size, to_host ? "the host" : "its device",
                     cu_error_name(rc));
        devsync_ctx_leave(NULL);
    }
    if (n && !v)
        log_info("out of host memory: managed memory is not prefetched");
    free(v);
}

int snap_release(struct snap *s)
{
    (void)s;                          /* the registry holds what is released */
    int rc = 0;

    /* Memory imported from another process is not ours to release here:
     * ipcmem_release_opened let it go before. */
    reg_lock();
    for (struct tc_map *m = reg_map_first(); m; m = m->next) {
        if (m->unmapped || m->phys->owner == TC_OWNER_IMPORTED)
            continue;
        CUresult cr = TCGPU_REAL(cuMemUnmap)(m->va, m->size);
        if (cr != CUDA_SUCCESS) {
            errmsg_set("cuMemUnmap at %#llx (%zu bytes): %s",
                               (unsigned long long)m->va, m->size, cu_error_name(cr));
            rc = -EIO;
            break;
        }
        m->unmapped = 1;
    }
    for (struct tc_phys *p = reg_phys_first(); p && rc == 0; p = p->next) {
        if (!p->real || p->owner == TC_OWNER_IMPORTED)
            continue;
        CUresult cr = TCGPU_REAL(cuMemRelease)(p->real);
        if (cr != CUDA_SUCCESS) {
            errmsg_set("cuMemRelease of %zu bytes: %s", p->size, cu_error_name(cr));
            rc = -EIO;
            break;
        }
        p->real = 0;
    }
    reg_unlock();
    if (rc == 0)
        managed_prefetch(1);
    return rc;
}

const char *snap_image_dir(const struct snap *s)
{
    return s->image_dir;
}

int snap_set_image_dir(struct snap *s, const char *dir)
{
    char *copy;

    if (!s->image_dir || !dir || dir[0] != '/')
        return -EINVAL;
    if (!(copy = strdup(dir)))
        return -ENOMEM;
    free(s->image_dir);
    s->image_dir = copy;
    return 0;
}

void snap_compress_host(struct snap *s)
{
    unsigned threads = pipe_worker_count(settings_get()->workers);

    if (s->store && pipe_store_compress_start(s->store, threads) != 0)
        log_info("host copy stays uncompressed (cannot start the compression threads)");
}

uint64_t snap_bytes(const struct snap *s)
{
    return s->bytes;
}

uint64_t snap_stored_bytes(const struct snap *s)
{
    return s->stored;
}

int snap_discard_image(struct snap *s)
{
    char err[512] = "";
    int rc;

    if (!s->image_dir || !s->written_dir || strcmp(s->image_dir, s->written_dir))
        return 0;                     /* host memory, or moved: another owner's now */
    rc = image_remove(s->image_dir, err, sizeof(err));
    if (rc)
        log_info("the suspend's image %s stays: %s", s->image_dir, err);
    return rc;
}

void snap_free(struct snap *s)
{
    if (!s)
        return;
    windows_free(s);
    free_host_copies(s);
    free(s->r);
    free(s->image_dir);
    free(s->written_dir);
    free(s->parent_dir);
    free(s);
}
