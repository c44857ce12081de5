/*
 * ipcmem.c - legacy CUDA IPC of the memory tcgpu serves (ipcmem.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "ipcmem.h"
#include "devmem.h"
#include "registry.h"
#include "settings.h"
#include "ctl/client.h"
#include "ctl/proto.h"
#include "driver/driver.h"
#include "driver/gate.h"
#include "driver/unsupported.h"
#include "common/hex.h"
#include "common/log.h"

#define IPC_MAGIC   "tcgpuIPC"
#define IPC_VERSION 1u
#define CALL_TIMEOUT_MS 10000

/* The 64 bytes of a CUipcMemHandle that tcgpu made. */
struct ipc_wire {
    char magic[8];              /* IPC_MAGIC, no NUL */
    uint32_t version;           /* IPC_VERSION */
    int32_t pid;                /* the exporter, in its opener's pid namespace as well */
    uint64_t id;                /* the export, in the exporter */
    uint64_t size;              /* the allocation's size */
    uint8_t token[16];          /* random: proves the handle was given */
    uint8_t reserved[16];       /* zero */
};
_Static_assert(sizeof(struct ipc_wire) == CU_IPC_HANDLE_SIZE, "an IPC handle is 64 bytes");

static const char exporter_what[] =
    "memory of this process is mapped by another process (CUDA IPC), and processes that share "
    "memory cannot be suspended or checkpointed apart yet";
static const char opener_what[] =
    "memory opened from another process's IPC handle cannot be checkpointed, and processes that "
    "share memory cannot be suspended apart yet";

/* --- the exporter's side ------------------------------------------------- */

struct export {
    uint64_t id;
    uint8_t token[16];
    CUdeviceptr va;
    size_t size;
    uint64_t alloc_id;          /* devmem's: a later allocation at va is another */
};

struct peer {
    pid_t pid;
    int conns;                  /* its open ipc_export connections */
};

static pthread_mutex_t ex_lock = PTHREAD_MUTEX_INITIALIZER;
static struct export *exports;
static size_t n_exports, cap_exports;
static uint64_t next_export_id;
static struct peer *peers;
static size_t n_peers, cap_peers;

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    void *p;
    size_t c = *cap ? *cap * 2 : 8;

    if (n < *cap)
        return 0;
    if (!(p = realloc(*arr, c * elem)))
        return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

/* The export of allocation alloc_id at va, made now if there is none (lock
 * held); NULL without memory or randomness. */
static struct export *export_of(CUdeviceptr va, size_t size, uint64_t alloc_id)
{
    struct export *e = NULL;
    uint8_t token[16];

    for (size_t i = 0; i < n_exports; i++)
        if (exports[i].va == va && exports[i].alloc_id == alloc_id)
            return &exports[i];
    if (getrandom(token, sizeof(token), 0) != (ssize_t)sizeof(token))
        return NULL;
    for (size_t i = 0; i < n_exports && !e; i++)     /* an export of freed memory: reused */
        if (exports[i].va == va)
            e = &exports[i];
    if (!e) {
        if (grow((void **)&exports, &cap_exports, n_exports, sizeof(*exports)) < 0)
            return NULL;
        e = &exports[n_exports++];
    }
    memcpy(e->token, token, sizeof(token));
    e->id = ++next_export_id;
    e->va = va;
    e->size = size;
    e->alloc_id = alloc_id;
    return e;
}

int ipcmem_capable(CUdeviceptr va)
{
    struct tc_map *m;
    int r;

    reg_lock();
    m = reg_map_containing(va);
    r = m && (m->phys->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    reg_unlock();
    return r;
}

CUresult ipcmem_get_handle(CUipcMemHandle *h, CUdeviceptr dptr)
{
    struct devmem_alloc a;
    struct ipc_wire w;
    struct export *e;

    switch (devmem_lookup(dptr, &a)) {
    case 0:
        break;
    case -EFAULT:
        return CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_NOT_FOUND;
    }
    if (!h || a.va != dptr || a.kind == TC_ALLOC_GRAPH)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ipcmem_capable(dptr))
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&ex_lock);
    e = export_of(a.va, a.size, a.id);
    if (e) {
        memset(&w, 0, sizeof(w));
        memcpy(w.magic, IPC_MAGIC, sizeof(w.magic));
        w.version = IPC_VERSION;
        w.pid = (int32_t)getpid();
        w.id = e->id;
        w.size = e->size;
        memcpy(w.token, e->token, sizeof(w.token));
    }
    pthread_mutex_unlock(&ex_lock);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(h, &w, sizeof(w));
    return CUDA_SUCCESS;
}

/* Count one more connection of `pid`; its first gets the note (ex_lock held). */
static int peer_add(pid_t pid)
{
    for (size_t i = 0; i < n_peers; i++)
        if (peers[i].pid == pid) {
            peers[i].conns++;
            return 0;
        }
    if (grow((void **)&peers, &cap_peers, n_peers, sizeof(*peers)) < 0)
        return -ENOMEM;
    peers[n_peers++] = (struct peer){ .pid = pid, .conns = 1 };
    tcgpu_note_unsupported_held("cuIpcGetMemHandle", exporter_what, TCGPU_HELD_BY_IPC_IMPORTER,
                                (uint64_t)pid);
    return 0;
}

void ipcmem_peer_closed(pid_t pid)
{
    pthread_mutex_lock(&ex_lock);
    for (size_t i = 0; i < n_peers; i++) {
        if (peers[i].pid != pid)
            continue;
        if (--peers[i].conns == 0) {
            peers[i] = peers[--n_peers];
            tcgpu_unsupported_release(TCGPU_HELD_BY_IPC_IMPORTER, (uint64_t)pid);
            log_info("process %d no longer maps memory of ours (IPC)", (int)pid);
        }
        break;
    }
    pthread_mutex_unlock(&ex_lock);
}

static int token_equal(const uint8_t *a, const uint8_t *b)
{
    uint8_t d = 0;

    for (size_t i = 0; i < 16; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

/* The export named by req, copied out: 0, or -ENOENT (no such id, or a token
 * that is not its own: the same answer, so that ids cannot be probed). */
static int find_export(const struct ctl_msg *req, struct export *out)
{
    const char *tok = ctl_get(req, "token");
    uint8_t token[16];
    uint64_t id;
    int r = -ENOENT;

    if (ctl_get_u64(req, "id", &id) < 0 || !tok || hex_get16(tok, token) < 0)
        return -EINVAL;
    pthread_mutex_lock(&ex_lock);
    for (size_t i = 0; i < n_exports; i++)
        if (exports[i].id == id && token_equal(exports[i].token, token)) {
            *out = exports[i];
            r = 0;
            break;
        }
    pthread_mutex_unlock(&ex_lock);
    return r;
}

static size_t round_down(size_t x, size_t g)
{
    return x / g * g;
}

/*
 * Export the physical allocation behind e: its descriptor, and the pages of
 * it that hold the allocation. -EBUSY while the memory is off the device
 * (suspended), -ENOENT when it was freed, -EIO when the driver refuses.
 */
static int export_fd(const struct export *e, uint64_t *win_off, uint64_t *win_size, uint64_t *offset,
                     char *why, size_t len)
{
    struct devmem_alloc a;
    struct tc_map *m;
    size_t gran = 0, start, end;
    int fd = -1, r = 0;
    CUresult rc;

    if (devmem_lookup(e->va, &a) != 0 || a.va != e->va || a.id != e->alloc_id) {
        snprintf(why, len, "the memory of that IPC handle was freed");
        return -ENOENT;
    }
    reg_lock();
    m = reg_map_containing(e->va);
    if (!m || !m->phys->real || m->unmapped) {
        snprintf(why, len, "the process's memory is off the device (suspended)");
        r = -EBUSY;
        goto out;
    }
    rc = TCGPU_REAL(cuMemGetAllocationGranularity)(&gran, &m->phys->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (rc == CUDA_SUCCESS && gran)
        rc = TCGPU_REAL(cuMemExportToShareableHandle)(&fd, m->phys->real,
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (rc != CUDA_SUCCESS || !gran) {
        snprintf(why, len, "the driver did not export the memory (%d)", (int)rc);
        r = -EIO;
        goto out;
    }
    start = round_down(e->va - m->va + m->offset, gran);
    end = round_down(e->va - m->va + m->offset + e->size + gran - 1, gran);
    *win_off = start;
    *win_size = end - start;
    *offset = e->va - m->va + m->offset - start;
out:
    reg_unlock();
    return r < 0 ? r : fd;
}

int ipcmem_serve(const struct ctl_msg *req, pid_t pid, struct ctl_buf *reply)
{
    uint64_t win_off = 0, win_size = 0, offset = 0;
    struct export e;
    char why[128];
    int fd, r;

    if ((r = find_export(req, &e)) < 0) {
        ctl_buf_error(reply, r, r == -EINVAL ? "ipc_export needs id= and token="
                                             : "no such IPC export (a wrong or forged handle)");
        return -1;
    }
    /* Counted before the gate is looked at: an operation that closes the
     * gate after this sees the note and refuses, and one that closed it
     * before is seen here, and we refuse. */
    pthread_mutex_lock(&ex_lock);
    r = peer_add(pid);
    pthread_mutex_unlock(&ex_lock);
    if (r < 0) {
        ctl_buf_error(reply, r, "out of memory");
        return -1;
    }
    atomic_thread_fence(memory_order_seq_cst);
    if (tcgpu_gate_is_closed()) {
        ipcmem_peer_closed(pid);
        ctl_buf_error(reply, -EBUSY, "the process is suspended or an operation is running: try again");
        return -1;
    }
    fd = export_fd(&e, &win_off, &win_size, &offset, why, sizeof(why));
    if (fd < 0) {
        ipcmem_peer_closed(pid);
        ctl_buf_error(reply, fd, why);
        return -1;
    }
    log_info("process %d maps %zu bytes of ours at 0x%llx (IPC)", (int)pid, e.size,
             (unsigned long long)e.va);
    ctl_buf_ok(reply);
    ctl_buf_put_u64(reply, "window_offset", win_off);
    ctl_buf_put_u64(reply, "window_size", win_size);
    ctl_buf_put_u64(reply, "offset", offset);
    ctl_buf_put_u64(reply, "size", e.size);
    return fd;
}

/* --- the opener's side --------------------------------------------------- */

struct opened {
    pid_t pid;                  /* the exporter */
    uint64_t id;                /* its export */
    CUcontext ctx;              /* opened in */
    CUdeviceptr va;             /* our reservation */
    size_t win_size;
    size_t offset;              /* of the allocation in it */
    size_t size;
    CUmemGenericAllocationHandle handle;
    int conn;                   /* to the exporter, open while mapped */
    int refs;
    struct opened *next;
};

static pthread_mutex_t op_lock = PTHREAD_MUTEX_INITIALIZER;
static struct opened *opened;

static int wire_of(const CUipcMemHandle *h, struct ipc_wire *w)
{
    memcpy(w, h, sizeof(*w));
    return !memcmp(w->magic, IPC_MAGIC, sizeof(w->magic)) && w->version == IPC_VERSION ? 0 : -ENOENT;
}

static int pid_opened(pid_t pid)
{
    for (struct opened *o = opened; o; o = o->next)
        if (o->pid == pid)
            return 1;
    return 0;
}

/* Ask the exporter for the memory: 0 with the connection, the descriptor and
 * the window, or CUresult's error (logged). */
static CUresult ask_exporter(const struct ipc_wire *w, struct opened *o, int *fd, uint64_t *win_off)
{
    struct ctl_conn c;
    struct ctl_buf *b = malloc(sizeof(*b));
    struct ctl_msg *m = malloc(sizeof(*m));
    char err[256], tok[33];
    uint64_t win_size, offset, size;
    long len;
    int r;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;

    if (!b || !m) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    r = ctl_connect((pid_t)w->pid, settings_get()->run_dir, &c, err, sizeof(err));
    if (r < 0) {
        log_err("cuIpcOpenMemHandle: cannot reach process %d, which made the handle: %s", (int)w->pid, err);
        goto out;
    }
    hex_put16(w->token, tok);
    ctl_buf_request(b, "ipc_export");
    ctl_buf_put_u64(b, "id", w->id);
    ctl_buf_put(b, "token", tok);
    len = ctl_buf_finish(b);
    r = len < 0 ? (int)len : ctl_call(&c, b->data, (size_t)len, m, CALL_TIMEOUT_MS, NULL, NULL);
    if (r == 0 && m->err)
        log_err("cuIpcOpenMemHandle: process %d refused the handle: %s", (int)w->pid, m->err_text);
    else if (r < 0)
        log_err("cuIpcOpenMemHandle: process %d did not answer: %s", (int)w->pid, strerror(-r));
    else if (c.recv_fd < 0 || ctl_get_u64(m, "window_offset", win_off) < 0 ||
             ctl_get_u64(m, "window_size", &win_size) < 0 || ctl_get_u64(m, "offset", &offset) < 0 ||
             ctl_get_u64(m, "size", &size) < 0 || !win_size || offset + size > win_size)
        log_err("cuIpcOpenMemHandle: process %d answered nonsense", (int)w->pid);
    else {
        *fd = c.recv_fd;
        c.recv_fd = -1;
        o->conn = c.fd;
        c.fd = -1;
        o->win_size = win_size;
        o->offset = offset;
        o->size = size;
        rc = CUDA_SUCCESS;
    }
    ctl_close(&c);
out:
    free(b);
    free(m);
    return rc;
}

/* Import, reserve, map, grant: undone in reverse on failure. */
static CUresult map_imported(struct opened *o, int fd, uint64_t win_off)
{
    CUmemAllocationProp prop;
    CUmemAccessDesc acc[2];
    CUdevice dev;
    size_t gran = 0, nacc = 0;
    CUresult rc;

    if ((rc = TCGPU_REAL(cuCtxGetDevice)(&dev)) != CUDA_SUCCESS)
        return rc;
    rc = TCGPU_REAL(cuMemImportFromShareableHandle)(&o->handle, (void *)(intptr_t)fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = TCGPU_REAL(cuMemGetAllocationPropertiesFromHandle)(&prop, o->handle)) != CUDA_SUCCESS ||
        (rc = TCGPU_REAL(cuMemGetAllocationGranularity)(&gran, &prop,
                                                        CU_MEM_ALLOC_GRANULARITY_MINIMUM)) != CUDA_SUCCESS)
        goto err_handle;
    if ((rc = TCGPU_REAL(cuMemAddressReserve)(&o->va, o->win_size, gran, 0, 0)) != CUDA_SUCCESS)
        goto err_handle;
    if ((rc = TCGPU_REAL(cuMemMap)(o->va, o->win_size, win_off, o->handle, 0)) != CUDA_SUCCESS)
        goto err_va;
    memset(acc, 0, sizeof(acc));
    acc[nacc].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc[nacc].location.id = (int)dev;
    acc[nacc++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop.location.id != (int)dev) {
        acc[nacc].location = prop.location;
        acc[nacc++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    if ((rc = TCGPU_REAL(cuMemSetAccess)(o->va, o->win_size, acc, nacc)) != CUDA_SUCCESS)
        goto err_map;
    return CUDA_SUCCESS;

err_map:
    TCGPU_REAL(cuMemUnmap)(o->va, o->win_size);
err_va:
    TCGPU_REAL(cuMemAddressFree)(o->va, o->win_size);
err_handle:
    TCGPU_REAL(cuMemRelease)(o->handle);
    return rc;
}

CUresult ipcmem_open(CUdeviceptr *dptr, const CUipcMemHandle *h)
{
    struct ipc_wire w;
    struct opened *o;
    uint64_t win_off = 0;
    CUcontext ctx = NULL;
    CUresult rc;
    int fd = -1;

    if (!h || wire_of(h, &w) < 0)
        return CUDA_ERROR_NOT_FOUND;
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    if (w.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT;      /* the driver's "invalid device context" */
    if ((rc = TCGPU_REAL(cuCtxGetCurrent)(&ctx)) != CUDA_SUCCESS)
        return rc;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&op_lock);
    for (o = opened; o; o = o->next)
        if (o->pid == w.pid && o->id == w.id && o->ctx == ctx) {
            o->refs++;
            *dptr = o->va + o->offset;
            pthread_mutex_unlock(&op_lock);
            return CUDA_SUCCESS;
        }
    if (!(o = calloc(1, sizeof(*o)))) {
        pthread_mutex_unlock(&op_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    o->conn = -1;
    rc = ask_exporter(&w, o, &fd, &win_off);
    if (rc == CUDA_SUCCESS) {
        rc = map_imported(o, fd, win_off);
        close(fd);
    }
    if (rc != CUDA_SUCCESS) {
        if (o->conn >= 0)
            close(o->conn);                     /* the exporter forgets us */
        free(o);
        pthread_mutex_unlock(&op_lock);
        return rc;
    }
    o->pid = w.pid;
    o->id = w.id;
    o->ctx = ctx;
    o->refs = 1;
    if (!pid_opened(o->pid))
        tcgpu_note_unsupported_held("cuIpcOpenMemHandle", opener_what, TCGPU_HELD_BY_IPC_EXPORTER,
                                    (uint64_t)o->pid);
    o->next = opened;
    opened = o;
    *dptr = o->va + o->offset;
    pthread_mutex_unlock(&op_lock);
    return CUDA_SUCCESS;
}

CUresult ipcmem_close(CUdeviceptr dptr)
{
    struct opened **pp, *o;

    pthread_mutex_lock(&op_lock);
    for (pp = &opened; (o = *pp); pp = &o->next)
        if (o->va + o->offset == dptr)
            break;
    if (!o) {
        pthread_mutex_unlock(&op_lock);
        return CUDA_ERROR_NOT_FOUND;
    }
    if (--o->refs > 0) {
        pthread_mutex_unlock(&op_lock);
        return CUDA_SUCCESS;
    }
    *pp = o->next;
    /* The driver's close waits for work that may use the memory: so do we,
     * before the exporter learns it is no longer mapped here. */
    TCGPU_REAL(cuCtxSynchronize)();
    TCGPU_REAL(cuMemUnmap)(o->va, o->win_size);
    TCGPU_REAL(cuMemAddressFree)(o->va, o->win_size);
    TCGPU_REAL(cuMemRelease)(o->handle);
    close(o->conn);
    if (!pid_opened(o->pid))
        tcgpu_unsupported_release(TCGPU_HELD_BY_IPC_EXPORTER, (uint64_t)o->pid);
    pthread_mutex_unlock(&op_lock);
    free(o);
    return CUDA_SUCCESS;
}

int ipcmem_range(CUdeviceptr p, CUdeviceptr *base, size_t *size)
{
    int r = -ENOENT;

    pthread_mutex_lock(&op_lock);
    for (struct opened *o = opened; o; o = o->next)
        if (p >= o->va + o->offset && p - (o->va + o->offset) < o->size) {
            *base = o->va + o->offset;
            *size = o->size;
            r = 0;
            break;
        }
    pthread_mutex_unlock(&op_lock);
    return r;
}
