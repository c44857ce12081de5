/*
 * ipcmem.c - legacy CUDA IPC of the memory tcgpu serves, and shareable
 * handles of the program's own allocations (ipcmem.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
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
#include "common/clock.h"
#include "common/errmsg.h"
#include "common/hex.h"
#include "common/log.h"
#include "common/proc.h"

#define IPC_MAGIC   "tcgpuIPC"
#define VMM_MAGIC   "tcgpuVMM"  /* the same 64 bytes, in a descriptor we gave (vmm exports) */
#define IPC_VERSION 1u
#define CALL_TIMEOUT_MS 10000
#define POLL_MS 5               /* between two looks at a peer during a suspend or resume */
#define STATUS_TIMEOUT_MS 1000  /* a peer's status: its service thread answers at once */
#define MIN_CALL_MS 200         /* the least time a question to a live peer is given */
/* How long an opener may stay running while an exporter suspends: a gang's
 * tasks are asked at once, and an opener's own suspend may start a little
 * after ours. Longer than that, nobody is suspending it: refuse. */
#define PEER_GRACE_MS 1000
#define HOLDERS_MAX 16          /* importers one export remembers */
#define FORGET_TIMEOUT_MS 1000  /* ipc_forget: the exporter's service thread answers at once */

/* The 64 bytes of a CUipcMemHandle that tcgpu made, and of a descriptor it
 * gave for an allocation the program created (magic VMM_MAGIC). */
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
    "memory of this process is mapped by another process (CUDA IPC or a shareable handle), which "
    "a checkpoint cannot carry (a suspend waits for that process to suspend too)";
static const char opener_what[] =
    "memory opened from another process's IPC handle cannot be checkpointed (a suspend releases "
    "it and a resume opens it again)";
static const char importer_what[] =
    "memory imported from another process's shareable handle cannot be checkpointed (a suspend "
    "releases it and a resume imports it again)";

static void pause_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

/* --- the exporter's side ------------------------------------------------- */

struct export {
    uint64_t id;
    uint8_t token[16];
    CUdeviceptr va;             /* devmem's allocation; 0: a physical allocation of the program's */
    size_t size;
    uint64_t alloc_id;          /* devmem's: a later allocation at va is another; else the
                                 * registry's handle of the physical allocation */
    /* A physical allocation's: the processes that imported it and have not
     * let it go for good (ipc_forget) nor died. A suspend there closes the
     * connection but keeps the import, so while any is left the allocation
     * stays ours to carry, even after the program let go of it. */
    pid_t holders[HOLDERS_MAX];
    int nholders;
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
/* A resume put our memory back and opened it to importers while its gate
 * is still closed (ipcmem_exports_open), and how many it served since. */
static int exports_open;
static unsigned served_open;
/* An export lost its last holder, or the program let go of an exported
 * allocation: ipcmem_orphans_free has work. */
static int sweep_wanted;

static int token_equal(const uint8_t *a, const uint8_t *b)
{
    uint8_t d = 0;

    for (size_t i = 0; i < 16; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

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
    for (size_t i = 0; i < n_exports && !e && va; i++)   /* an export of freed memory: reused */
        if (exports[i].va == va)
            e = &exports[i];
    if (!e) {
        if (grow((void **)&exports, &cap_exports, n_exports, sizeof(*exports)) < 0)
            return NULL;
        e = &exports[n_exports++];
    }
    memcpy(e->token, token, sizeof(token));
    e->nholders = 0;
    e->id = ++next_export_id;
    e->va = va;
    e->size = size;
    e->alloc_id = alloc_id;
    return e;
}

static void wire_fill(struct ipc_wire *w, const char *magic, const struct export *e)
{
    memset(w, 0, sizeof(*w));
    memcpy(w->magic, magic, sizeof(w->magic));
    w->version = IPC_VERSION;
    w->pid = (int32_t)getpid();
    w->id = e->id;
    w->size = e->size;
    memcpy(w->token, e->token, sizeof(w->token));
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
    if (e)
        wire_fill(&w, IPC_MAGIC, e);
    pthread_mutex_unlock(&ex_lock);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(h, &w, sizeof(w));
    return CUDA_SUCCESS;
}

/*
 * The descriptor we give for an export of a physical allocation: a sealed
 * memfd of the 64 bytes that name it. Whoever holds it can ask for the
 * memory, as whoever holds a legacy handle can; the token proves it was
 * given.
 */
static int token_fd(const struct ipc_wire *w)
{
    int fd = memfd_create("tcgpu-shareable-handle", MFD_CLOEXEC | MFD_ALLOW_SEALING);

    if (fd < 0)
        return -errno;
    if (pwrite(fd, w, sizeof(*w), 0) != (ssize_t)sizeof(*w) ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
        int e = errno ? errno : EIO;
        close(fd);
        return -e;
    }
    return fd;
}

CUresult ipcmem_export_phys(uint64_t phys_id, size_t size, int *fd)
{
    struct ipc_wire w;
    struct export *e;
    int r;

    pthread_mutex_lock(&ex_lock);
    e = export_of(0, size, phys_id);
    if (e)
        wire_fill(&w, VMM_MAGIC, e);
    pthread_mutex_unlock(&ex_lock);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = token_fd(&w)) < 0) {
        log_err("cuMemExportToShareableHandle: no descriptor for the export: %s", strerror(-r));
        return r == -ENOMEM || r == -EMFILE || r == -ENFILE ? CUDA_ERROR_OUT_OF_MEMORY
                                                            : CUDA_ERROR_OPERATING_SYSTEM;
    }
    *fd = r;
    return CUDA_SUCCESS;
}

/* --- who holds an export of a physical allocation ----------------------- */

static struct export *export_by_id(uint64_t id)
{
    for (size_t i = 0; i < n_exports; i++)
        if (exports[i].id == id)
            return &exports[i];
    return NULL;
}

static int holder_add(uint64_t id, pid_t pid)
{
    struct export *e;
    int r = 0;

    pthread_mutex_lock(&ex_lock);
    if ((e = export_by_id(id))) {
        int i;
        for (i = 0; i < e->nholders && e->holders[i] != pid; i++)
            ;
        if (i == e->nholders) {
            if (e->nholders < HOLDERS_MAX)
                e->holders[e->nholders++] = pid;
            else
                r = -EMFILE;
        }
    }
    pthread_mutex_unlock(&ex_lock);
    return r;
}

/* pid no longer holds e (ex_lock held). */
static void holder_drop(struct export *e, pid_t pid)
{
    for (int i = 0; i < e->nholders; i++)
        if (e->holders[i] == pid) {
            e->holders[i] = e->holders[--e->nholders];
            if (!e->nholders)
                __atomic_store_n(&sweep_wanted, 1, __ATOMIC_RELEASE);
            return;
        }
}

/* A holder that died without telling (its connection's end may be seen
 * before it is a zombie) is dropped when next asked about. */
int ipcmem_export_held(uint64_t phys_id)
{
    int held = 0;

    pthread_mutex_lock(&ex_lock);
    for (size_t i = 0; i < n_exports; i++) {
        struct export *e = &exports[i];
        if (e->va || e->alloc_id != phys_id)
            continue;
        for (int k = e->nholders - 1; k >= 0; k--)
            if (tcgpu_proc_leaving(e->holders[k]))
                holder_drop(e, e->holders[k]);
        held = e->nholders > 0;
    }
    pthread_mutex_unlock(&ex_lock);
    return held;
}

void ipcmem_export_forget(uint64_t phys_id)
{
    pthread_mutex_lock(&ex_lock);
    for (size_t i = 0; i < n_exports; i++)
        if (!exports[i].va && exports[i].alloc_id == phys_id) {
            exports[i] = exports[--n_exports];
            break;
        }
    pthread_mutex_unlock(&ex_lock);
}

void ipcmem_orphans_mark(void)
{
    __atomic_store_n(&sweep_wanted, 1, __ATOMIC_RELEASE);
}

void ipcmem_orphans_free(void)
{
    struct tc_phys *p, *next;
    size_t n = 0;

    if (!__atomic_exchange_n(&sweep_wanted, 0, __ATOMIC_ACQ_REL))
        return;
    reg_lock();
    for (p = reg_phys_first(); p; p = next) {
        next = p->next;
        if (!p->exported || p->owner != TC_OWNER_USER || p->refs || p->nmaps ||
            ipcmem_export_held(p->id))
            continue;
        if (p->real)
            TCGPU_REAL(cuMemRelease)(p->real);
        ipcmem_export_forget(p->id);
        reg_phys_remove(p);
        n++;
    }
    reg_unlock();
    if (n)
        log_info("freed %zu exported allocation%s that the program let go of and no process "
                 "imports any longer", n, n > 1 ? "s" : "");
}

int ipcmem_serve_forget(const struct ctl_msg *req, pid_t pid, struct ctl_buf *reply)
{
    const char *tok = ctl_get(req, "token");
    uint8_t token[16];
    struct export *e;
    uint64_t id;

    if (ctl_get_u64(req, "id", &id) < 0 || !tok || hex_get16(tok, token) < 0) {
        ctl_buf_error(reply, -EINVAL, "ipc_forget needs id= and token=");
        return -1;
    }
    pthread_mutex_lock(&ex_lock);
    if ((e = export_by_id(id)) && token_equal(e->token, token))
        holder_drop(e, pid);
    pthread_mutex_unlock(&ex_lock);
    ctl_buf_ok(reply);          /* the same answer either way: ids cannot be probed */
    return 0;
}

/* Count one more connection of `pid`; its first gets the note, named for
 * the call that exported what it maps (ex_lock held). */
static int peer_add(pid_t pid, const char *call)
{
    for (size_t i = 0; i < n_peers; i++)
        if (peers[i].pid == pid) {
            peers[i].conns++;
            return 0;
        }
    if (grow((void **)&peers, &cap_peers, n_peers, sizeof(*peers)) < 0)
        return -ENOMEM;
    peers[n_peers++] = (struct peer){ .pid = pid, .conns = 1 };
    tcgpu_note_unsupported_held(call, exporter_what, TCGPU_HELD_BY_IPC_IMPORTER, (uint64_t)pid);
    return 0;
}

void ipcmem_peer_closed(pid_t pid)
{
    int gone = tcgpu_proc_leaving(pid);    /* its connection may end just before it is a zombie */

    pthread_mutex_lock(&ex_lock);
    for (size_t i = 0; gone && i < n_exports; i++)
        holder_drop(&exports[i], pid);
    for (size_t i = 0; i < n_peers; i++) {
        if (peers[i].pid != pid)
            continue;
        if (--peers[i].conns == 0) {
            peers[i] = peers[--n_peers];
            __atomic_store_n(&sweep_wanted, 1, __ATOMIC_RELEASE);   /* it may have died unseen */
            tcgpu_unsupported_release(TCGPU_HELD_BY_IPC_IMPORTER, (uint64_t)pid);
            log_info("process %d no longer maps memory of ours (IPC)", (int)pid);
        }
        break;
    }
    pthread_mutex_unlock(&ex_lock);
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

/* export_fd of a physical allocation of the program's: all of it. */
static int export_phys_fd(const struct export *e, uint64_t *win_off, uint64_t *win_size,
                          uint64_t *offset, char *why, size_t len)
{
    struct tc_phys *p;
    int fd = -1, r = 0;
    CUresult rc;

    reg_lock();
    p = reg_phys_find(e->alloc_id);
    if (!p || p->owner != TC_OWNER_USER) {
        snprintf(why, len, "the memory of that shareable handle was freed");
        r = -ENOENT;
    } else if (!p->real) {
        snprintf(why, len, "the process's memory is off the device (suspended)");
        r = -EBUSY;
    } else if ((rc = TCGPU_REAL(cuMemExportToShareableHandle)(&fd, p->real,
                                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                              0)) != CUDA_SUCCESS) {
        snprintf(why, len, "the driver did not export the memory (%d)", (int)rc);
        r = -EIO;
    } else {
        *win_off = 0;
        *win_size = p->size;
        *offset = 0;
    }
    reg_unlock();
    return r < 0 ? r : fd;
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

    if (!e->va)
        return export_phys_fd(e, win_off, win_size, offset, why, len);
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

/* Whether ipc_export is served now: while the gate is open, or while a
 * resume that put our memory back holds it closed (counted). */
static int serving_now(void)
{
    int r;

    pthread_mutex_lock(&ex_lock);
    r = !tcgpu_gate_is_closed() || exports_open;
    if (r && exports_open)
        served_open++;
    pthread_mutex_unlock(&ex_lock);
    return r;
}

void ipcmem_exports_open(void)
{
    pthread_mutex_lock(&ex_lock);
    exports_open = 1;
    served_open = 0;
    pthread_mutex_unlock(&ex_lock);
}

unsigned ipcmem_exports_close(void)
{
    unsigned n;

    pthread_mutex_lock(&ex_lock);
    exports_open = 0;
    n = served_open;
    pthread_mutex_unlock(&ex_lock);
    return n;
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
    r = peer_add(pid, e.va ? "cuIpcGetMemHandle" : "cuMemExportToShareableHandle");
    pthread_mutex_unlock(&ex_lock);
    if (r < 0) {
        ctl_buf_error(reply, r, "out of memory");
        return -1;
    }
    atomic_thread_fence(memory_order_seq_cst);
    if (!serving_now()) {
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
    if (e.va) {
        log_info("process %d maps %zu bytes of ours at 0x%llx (IPC)", (int)pid, e.size,
                 (unsigned long long)e.va);
    } else if (holder_add(e.id, pid) < 0) {
        close(fd);
        ipcmem_peer_closed(pid);
        ctl_buf_error(reply, -EMFILE, "too many processes imported that memory");
        return -1;
    } else {
        log_info("process %d imports %zu bytes of ours (shareable handle %#llx)", (int)pid, e.size,
                 (unsigned long long)e.alloc_id);
    }
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
    uint64_t phys_id;           /* imported from a shareable handle: the registry's handle the
                                 * program maps (TC_OWNER_IMPORTED); 0 for legacy IPC */
    uint8_t token[16];          /* its token: a resume asks for the export again */
    CUcontext ctx;              /* opened in */
    CUdeviceptr va;             /* our reservation, kept while suspended */
    size_t res_size;            /* its size */
    size_t win_size;            /* mapped at va */
    size_t offset;              /* of the allocation in it */
    size_t size;
    CUmemGenericAllocationHandle handle;
    int conn;                   /* to the exporter, open while mapped */
    int released;               /* suspended: unmapped, handle released, conn closed */
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

/*
 * Ask exporter pid for export id (token): 0 with o's connection, window
 * and offsets and the descriptor in *fd; else -errno with why set:
 * ctl_connect's (-ESRCH, -ENOENT, -ECONNREFUSED: the exporter is gone or
 * not ours), the exporter's refusal (-EBUSY: suspended or in an operation,
 * -ENOENT: freed or forged), -ETIMEDOUT, or -EPROTO (nonsense).
 */
static int request_export(pid_t pid, uint64_t id, const uint8_t *token, int timeout_ms,
                          struct opened *o, int *fd, uint64_t *win_off, char *why, size_t len)
{
    struct ctl_conn c;
    struct ctl_buf *b = malloc(sizeof(*b));
    struct ctl_msg *m = malloc(sizeof(*m));
    char tok[33];
    uint64_t win_size, offset, size;
    long n;
    int r;

    if (!b || !m) {
        snprintf(why, len, "out of memory");
        r = -ENOMEM;
        goto out;
    }
    if ((r = ctl_connect(pid, settings_get()->run_dir, &c, why, len)) < 0)
        goto out;
    hex_put16(token, tok);
    ctl_buf_request(b, "ipc_export");
    ctl_buf_put_u64(b, "id", id);
    ctl_buf_put(b, "token", tok);
    n = ctl_buf_finish(b);
    r = n < 0 ? (int)n : ctl_call(&c, b->data, (size_t)n, m, timeout_ms, NULL, NULL);
    if (r < 0) {
        snprintf(why, len, "it did not answer: %s", strerror(-r));
    } else if (m->err) {
        snprintf(why, len, "%s", m->err_text);
        r = m->err < 0 ? m->err : -EIO;
    } else if (c.recv_fd < 0 || ctl_get_u64(m, "window_offset", win_off) < 0 ||
               ctl_get_u64(m, "window_size", &win_size) < 0 || ctl_get_u64(m, "offset", &offset) < 0 ||
               ctl_get_u64(m, "size", &size) < 0 || !win_size || offset + size > win_size) {
        snprintf(why, len, "it answered nonsense");
        r = -EPROTO;
    } else {
        *fd = c.recv_fd;
        c.recv_fd = -1;
        o->conn = c.fd;
        c.fd = -1;
        o->win_size = win_size;
        o->offset = offset;
        o->size = size;
    }
    ctl_close(&c);
out:
    free(b);
    free(m);
    return r;
}

/* The program's call's question to the exporter: CUresult's answer, the
 * reason logged. */
static CUresult ask_exporter(const char *call, const struct ipc_wire *w, struct opened *o, int *fd,
                             uint64_t *win_off)
{
    char why[256];
    int r = request_export((pid_t)w->pid, w->id, w->token, CALL_TIMEOUT_MS, o, fd, win_off, why,
                           sizeof(why));

    if (r == 0)
        return CUDA_SUCCESS;
    if (r == -ENOMEM)
        return CUDA_ERROR_OUT_OF_MEMORY;
    log_err("%s: process %d, which made the handle, did not give the memory: %s", call,
            (int)w->pid, why);
    return CUDA_ERROR_INVALID_VALUE;
}

/* Whom o's memory may be used by here: our device, and the device it
 * lives on when that is another (peer access). Returns how many. */
static size_t access_of(const CUmemAllocationProp *prop, CUdevice dev, CUmemAccessDesc acc[2])
{
    size_t n = 0;

    memset(acc, 0, 2 * sizeof(*acc));
    acc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc[n].location.id = (int)dev;
    acc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id != (int)dev) {
        acc[n].location = prop->location;
        acc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    return n;
}

/* Import fd into o->handle, with its properties and granularity; nothing
 * held on failure. */
static CUresult import_fd(struct opened *o, int fd, CUmemAllocationProp *prop, size_t *gran)
{
    CUresult rc = TCGPU_REAL(cuMemImportFromShareableHandle)(&o->handle, (void *)(intptr_t)fd,
                                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);

    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = TCGPU_REAL(cuMemGetAllocationPropertiesFromHandle)(prop, o->handle)) != CUDA_SUCCESS ||
        (rc = TCGPU_REAL(cuMemGetAllocationGranularity)(gran, prop,
                                                        CU_MEM_ALLOC_GRANULARITY_MINIMUM)) != CUDA_SUCCESS)
        TCGPU_REAL(cuMemRelease)(o->handle);
    return rc;
}

/* Map o's window of o->handle at o->va (reserved) and grant access;
 * unmapped again on failure. */
static CUresult map_window(struct opened *o, uint64_t win_off, const CUmemAllocationProp *prop)
{
    CUmemAccessDesc acc[2];
    CUdevice dev;
    size_t nacc;
    CUresult rc;

    if ((rc = TCGPU_REAL(cuCtxGetDevice)(&dev)) != CUDA_SUCCESS)
        return rc;
    if ((rc = TCGPU_REAL(cuMemMap)(o->va, o->win_size, win_off, o->handle, 0)) != CUDA_SUCCESS)
        return rc;
    nacc = access_of(prop, dev, acc);
    if ((rc = TCGPU_REAL(cuMemSetAccess)(o->va, o->win_size, acc, nacc)) != CUDA_SUCCESS)
        TCGPU_REAL(cuMemUnmap)(o->va, o->win_size);
    return rc;
}

/* Import, reserve, map, grant: undone in reverse on failure. */
static CUresult map_imported(struct opened *o, int fd, uint64_t win_off)
{
    CUmemAllocationProp prop;
    size_t gran = 0;
    CUresult rc;

    if ((rc = import_fd(o, fd, &prop, &gran)) != CUDA_SUCCESS)
        return rc;
    if ((rc = TCGPU_REAL(cuMemAddressReserve)(&o->va, o->win_size, gran, 0, 0)) != CUDA_SUCCESS)
        goto err_handle;
    o->res_size = o->win_size;
    if ((rc = map_window(o, win_off, &prop)) != CUDA_SUCCESS)
        goto err_va;
    return CUDA_SUCCESS;

err_va:
    TCGPU_REAL(cuMemAddressFree)(o->va, o->res_size);
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
        if (!o->phys_id && o->pid == w.pid && o->id == w.id && o->ctx == ctx) {
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
    rc = ask_exporter("cuIpcOpenMemHandle", &w, o, &fd, &win_off);
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
    memcpy(o->token, w.token, sizeof(o->token));
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

/* The 64 bytes in a descriptor we gave (token_fd), or -ENOENT: not ours. */
static int token_of(int fd, struct ipc_wire *w)
{
    struct stat st;

    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != (off_t)sizeof(*w) ||
        pread(fd, w, sizeof(*w), 0) != (ssize_t)sizeof(*w))
        return -ENOENT;
    return !memcmp(w->magic, VMM_MAGIC, sizeof(w->magic)) && w->version == IPC_VERSION ? 0 : -ENOENT;
}

/*
 * Our own export imported here: the driver's import of the real allocation,
 * as without tcgpu. Two handles of one allocation in one process cannot be
 * carried across a suspend (the resume would create two), so the import is
 * noted for the process's life.
 */
static CUresult import_own(const struct ipc_wire *w, CUmemGenericAllocationHandle *handle)
{
    uint64_t win_off, win_size, offset;
    struct export e;
    char why[128];
    int fd, found = 0;
    CUresult rc;

    pthread_mutex_lock(&ex_lock);
    for (size_t i = 0; i < n_exports && !found; i++)
        if (exports[i].id == w->id && !exports[i].va && token_equal(exports[i].token, w->token)) {
            e = exports[i];
            found = 1;
        }
    pthread_mutex_unlock(&ex_lock);
    if (!found || (fd = export_phys_fd(&e, &win_off, &win_size, &offset, why, sizeof(why))) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    rc = TCGPU_REAL(cuMemImportFromShareableHandle)(handle, (void *)(intptr_t)fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (rc == CUDA_SUCCESS)
        tcgpu_note_unsupported("cuMemImportFromShareableHandle",
                               "memory imported from a shareable handle of the same process cannot "
                               "be checkpointed");
    return rc;
}

/* Tell o's exporter we let its memory go for good (not a suspend's
 * release), so that it may free what its program let go of: best effort,
 * bounded; an exporter that cannot be told keeps the memory until it
 * learns we died. */
static void tell_forget(const struct opened *o)
{
    struct ctl_conn c;
    struct ctl_buf *b = malloc(sizeof(*b));
    struct ctl_msg *m = malloc(sizeof(*m));
    char tok[33], why[256];
    long n;
    int r = -ENOMEM;

    if (b && m && (r = ctl_connect(o->pid, settings_get()->run_dir, &c, why, sizeof(why))) == 0) {
        hex_put16(o->token, tok);
        ctl_buf_request(b, "ipc_forget");
        ctl_buf_put_u64(b, "id", o->id);
        ctl_buf_put(b, "token", tok);
        n = ctl_buf_finish(b);
        r = n < 0 ? (int)n : ctl_call(&c, b->data, (size_t)n, m, FORGET_TIMEOUT_MS, NULL, NULL);
        ctl_close(&c);
    }
    if (r < 0 && r != -ESRCH && r != -ECONNREFUSED && r != -ENOENT)
        log_info("process %d was not told that its memory is no longer imported here: %s",
                 (int)o->pid, strerror(-r));
    free(b);
    free(m);
}

CUresult ipcmem_import_phys(int fd, CUmemGenericAllocationHandle *handle)
{
    CUmemAllocationProp prop;
    struct ipc_wire w;
    struct opened *o;
    struct tc_phys *p = NULL;
    uint64_t win_off = 0;
    size_t gran = 0;
    CUcontext ctx = NULL;
    CUresult rc;
    int mem = -1;

    if (token_of(fd, &w) < 0)
        return CUDA_ERROR_NOT_FOUND;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (w.pid == (int32_t)getpid())
        return import_own(&w, handle);
    TCGPU_REAL(cuCtxGetCurrent)(&ctx);      /* none is fine: VMM calls need no context */
    if (!(o = calloc(1, sizeof(*o))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->conn = -1;
    o->pid = w.pid;
    o->id = w.id;
    memcpy(o->token, w.token, sizeof(o->token));
    pthread_mutex_lock(&op_lock);
    rc = ask_exporter("cuMemImportFromShareableHandle", &w, o, &mem, &win_off);
    if (rc == CUDA_SUCCESS) {
        rc = import_fd(o, mem, &prop, &gran);
        close(mem);
    }
    if (rc == CUDA_SUCCESS) {
        reg_lock();
        p = reg_phys_add(o->handle, o->size, &prop, 0, TC_OWNER_IMPORTED);
        reg_unlock();
        if (!p) {
            TCGPU_REAL(cuMemRelease)(o->handle);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_unlock(&op_lock);
        if (o->conn >= 0) {                     /* it gave the memory: we never held it */
            tell_forget(o);
            close(o->conn);
        }
        free(o);
        return rc;
    }
    o->phys_id = p->id;
    o->ctx = ctx;
    o->refs = 1;
    if (!pid_opened(o->pid))
        tcgpu_note_unsupported_held("cuMemImportFromShareableHandle", importer_what,
                                    TCGPU_HELD_BY_IPC_EXPORTER, (uint64_t)o->pid);
    o->next = opened;
    opened = o;
    *handle = p->id;
    pthread_mutex_unlock(&op_lock);
    return CUDA_SUCCESS;
}

void ipcmem_import_forget(uint64_t phys_id)
{
    struct opened **pp, *o;

    pthread_mutex_lock(&op_lock);
    for (pp = &opened; (o = *pp); pp = &o->next)
        if (o->phys_id == phys_id)
            break;
    if (o) {
        *pp = o->next;
        if (!pid_opened(o->pid))
            tcgpu_unsupported_release(TCGPU_HELD_BY_IPC_EXPORTER, (uint64_t)o->pid);
    }
    pthread_mutex_unlock(&op_lock);
    if (o) {                                    /* ours alone now: told outside the lock */
        tell_forget(o);
        if (o->conn >= 0)
            close(o->conn);                     /* the exporter learns it at once */
    }
    free(o);
}

CUresult ipcmem_close(CUdeviceptr dptr)
{
    struct opened **pp, *o;

    pthread_mutex_lock(&op_lock);
    for (pp = &opened; (o = *pp); pp = &o->next)
        if (!o->phys_id && o->va + o->offset == dptr)
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
    if (!o->released) {
        TCGPU_REAL(cuMemUnmap)(o->va, o->win_size);
        TCGPU_REAL(cuMemRelease)(o->handle);
        close(o->conn);
    }
    TCGPU_REAL(cuMemAddressFree)(o->va, o->res_size);
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
        if (!o->phys_id && p >= o->va + o->offset && p - (o->va + o->offset) < o->size) {
            *base = o->va + o->offset;
            *size = o->size;
            r = 0;
            break;
        }
    pthread_mutex_unlock(&op_lock);
    return r;
}

/* --- suspend and resume: the exporter's side ---------------------------- */

/* The pids that map our memory now, up to max; how many there are. */
static size_t importers(pid_t *out, size_t max)
{
    size_t n;

    pthread_mutex_lock(&ex_lock);
    n = n_peers;
    for (size_t i = 0; i < n && i < max; i++)
        out[i] = peers[i].pid;
    pthread_mutex_unlock(&ex_lock);
    return n;
}

/* Process pid's state, asked over its control socket: 0, or -errno (it is
 * gone, or does not answer in time). */
static int peer_state(pid_t pid, enum tcgpu_state *st)
{
    struct ctl_conn c;
    struct ctl_buf *b = malloc(sizeof(*b));
    struct ctl_msg *m = malloc(sizeof(*m));
    struct tcgpu_status status;
    char err[256];
    long n;
    int r;

    if (!b || !m) {
        r = -ENOMEM;
        goto out;
    }
    if ((r = ctl_connect(pid, settings_get()->run_dir, &c, err, sizeof(err))) < 0)
        goto out;
    ctl_buf_request(b, "status");
    n = ctl_buf_finish(b);
    r = n < 0 ? (int)n : ctl_call(&c, b->data, (size_t)n, m, STATUS_TIMEOUT_MS, NULL, NULL);
    if (r == 0 && m->err)
        r = m->err < 0 ? m->err : -EIO;
    if (r == 0 && (r = ctl_get_status(m, &status)) == 0)
        *st = status.state;
    ctl_close(&c);
out:
    free(b);
    free(m);
    return r;
}

/* Whether an importer that answered r (0, or ctl_connect's -errno) in
 * state st is on its way to letting our memory go: its own suspend
 * releases it; a resuming one is refused while our gate is closed; one that
 * is gone (no process, nobody behind its socket) closes its connection
 * soon. One that cannot be asked otherwise counts as running. */
static int letting_go(int r, enum tcgpu_state st)
{
    if (r < 0)
        return r == -ESRCH || r == -ECONNREFUSED;
    return st == TCGPU_STATE_SUSPENDING || st == TCGPU_STATE_SUSPENDED || st == TCGPU_STATE_RESUMING;
}

/* "process 12" or "processes 12, 13" into buf. */
static void name_pids(const pid_t *v, size_t n, char *buf, size_t len)
{
    size_t at = (size_t)snprintf(buf, len, "%s", n > 1 ? "processes " : "process ");

    for (size_t i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%d", i ? ", " : "", (int)v[i]);
}

#define IMPORTERS_NAMED 8

/* Of the importers v[0..n), those that are not letting our memory go, into
 * running; how many. */
static size_t still_running(const pid_t *v, size_t n, pid_t *running)
{
    size_t k = 0;

    for (size_t i = 0; i < n && i < IMPORTERS_NAMED; i++) {
        enum tcgpu_state st = TCGPU_STATE_RUNNING;
        int r = peer_state(v[i], &st);
        if (!letting_go(r, st))
            running[k++] = v[i];
    }
    return k;
}

static int refuse_running(const pid_t *running, size_t k)
{
    char who[128];

    name_pids(running, k, who, sizeof(who));
    errmsg_set("%s %s this process's memory (CUDA IPC) and %s running; suspend %s first, or both "
               "together", who, k > 1 ? "map" : "maps", k > 1 ? "are" : "is", k > 1 ? "them" : "it");
    return -ENOTSUP;
}

int ipcmem_wait_importers(unsigned timeout_ms)
{
    uint64_t start = now_ms(), running_since = 0;
    pid_t v[IMPORTERS_NAMED], running[IMPORTERS_NAMED];
    char who[128];
    size_t n, k;

    while ((n = importers(v, IMPORTERS_NAMED)) > 0) {
        /* A running importer gets PEER_GRACE_MS to start its own suspend. */
        if ((k = still_running(v, n, running)) == 0)
            running_since = 0;
        else if (!running_since)
            running_since = now_ms();
        if (k && now_ms() - running_since >= PEER_GRACE_MS)
            return refuse_running(running, k);
        if (now_ms() - start >= timeout_ms) {
            name_pids(v, n < IMPORTERS_NAMED ? n : IMPORTERS_NAMED, who, sizeof(who));
            errmsg_set("%s, which %s this process's memory (CUDA IPC), did not release it within %u ms",
                       who, n > 1 ? "map" : "maps", timeout_ms);
            return -ETIMEDOUT;
        }
        pause_ms(POLL_MS);
    }
    return 0;
}

/* --- suspend and resume: the opener's side ------------------------------ */

/* An imported allocation: the program's mappings of it come down (their
 * addresses stay reserved, the program's) and the handle goes; the
 * program's handle stays valid (op_lock held). */
static void release_imported(struct opened *o)
{
    struct tc_phys *p;

    reg_lock();
    if ((p = reg_phys_find(o->phys_id))) {
        for (struct tc_map *m = reg_map_first(); m; m = m->next)
            if (m->phys == p && !m->unmapped) {
                TCGPU_REAL(cuMemUnmap)(m->va, m->size);
                m->unmapped = 1;
            }
        if (p->real)
            TCGPU_REAL(cuMemRelease)(p->real);
        p->real = 0;
    }
    reg_unlock();
}

/* Let o's memory go, keeping its address reserved (op_lock held). */
static void release_one(struct opened *o)
{
    if (o->phys_id) {
        release_imported(o);
    } else {
        TCGPU_REAL(cuMemUnmap)(o->va, o->win_size);
        TCGPU_REAL(cuMemRelease)(o->handle);
    }
    close(o->conn);             /* the exporter learns it at once */
    o->conn = -1;
    o->released = 1;
}

size_t ipcmem_release_opened(void)
{
    size_t n = 0;

    pthread_mutex_lock(&op_lock);
    for (struct opened *o = opened; o; o = o->next)
        if (!o->released) {
            release_one(o);
            n++;
        }
    pthread_mutex_unlock(&op_lock);
    if (n)
        log_info("released %zu allocation%s opened from other processes (IPC)", n, n > 1 ? "s" : "");
    return n;
}

/* Whether a refusal of request_export may go by if we ask again: the
 * exporter is suspended, suspending or resuming. */
static int retryable(int r)
{
    return r == -EBUSY;
}

/* Import the new descriptor and map it where o was (op_lock held, o's
 * context current). -errno with the message set. */
static int remap(struct opened *o, int fd, uint64_t win_off, size_t old_offset, size_t old_size)
{
    CUmemAllocationProp prop;
    size_t gran = 0;
    CUresult rc;

    if (o->offset != old_offset || o->size != old_size || o->win_size > o->res_size) {
        errmsg_set("the memory opened from process %d (IPC) changed shape while suspended "
                   "(%zu bytes at +%zu, was %zu at +%zu)", (int)o->pid, o->size, o->offset,
                   old_size, old_offset);
        return -EIO;
    }
    if ((rc = import_fd(o, fd, &prop, &gran)) == CUDA_SUCCESS &&
        (rc = map_window(o, win_off, &prop)) != CUDA_SUCCESS)
        TCGPU_REAL(cuMemRelease)(o->handle);
    if (rc != CUDA_SUCCESS) {
        errmsg_set("the memory opened from process %d (IPC) cannot be mapped again at 0x%llx: %s",
                   (int)o->pid, (unsigned long long)(o->va + o->offset), cu_error_name(rc));
        return -EIO;
    }
    return 0;
}

/* An imported allocation again, from the new descriptor: the program's
 * handle now stands for it, and its mappings go back where they were, with
 * the access they had (op_lock held). -errno with the message set. */
static int remap_imported(struct opened *o, int fd, size_t old_size)
{
    CUmemAllocationProp prop;
    struct tc_phys *p;
    size_t gran = 0;
    CUresult rc;

    if (o->size != old_size) {
        errmsg_set("the memory imported from process %d changed size while suspended (%zu bytes, "
                   "was %zu)", (int)o->pid, o->size, old_size);
        return -EIO;
    }
    if ((rc = import_fd(o, fd, &prop, &gran)) != CUDA_SUCCESS) {
        errmsg_set("the memory imported from process %d cannot be imported again: %s", (int)o->pid,
                   cu_error_name(rc));
        return -EIO;
    }
    reg_lock();
    if (!(p = reg_phys_find(o->phys_id))) {
        reg_unlock();
        TCGPU_REAL(cuMemRelease)(o->handle);
        return 0;                       /* the program let it go: nothing to map */
    }
    p->real = o->handle;
    for (struct tc_map *m = reg_map_first(); m && rc == CUDA_SUCCESS; m = m->next) {
        if (m->phys != p || !m->unmapped)
            continue;
        rc = TCGPU_REAL(cuMemMap)(m->va, m->size, m->offset, p->real, 0);
        if (rc == CUDA_SUCCESS && m->naccess &&
            (rc = TCGPU_REAL(cuMemSetAccess)(m->va, m->size, m->access, (size_t)m->naccess)) != CUDA_SUCCESS)
            TCGPU_REAL(cuMemUnmap)(m->va, m->size);
        if (rc == CUDA_SUCCESS)
            m->unmapped = 0;
        else
            errmsg_set("the memory imported from process %d cannot be mapped again at 0x%llx: %s",
                       (int)o->pid, (unsigned long long)m->va, cu_error_name(rc));
    }
    reg_unlock();
    if (rc != CUDA_SUCCESS) {
        release_imported(o);            /* all of it or none */
        return -EIO;
    }
    return 0;
}

/* The refusal of a re-open that will not go by, as a message: -errno. */
static int reopen_refused(const struct opened *o, int r, const char *why, unsigned waited_ms)
{
    if (retryable(r)) {
        errmsg_set("the memory opened from process %d (IPC) is not available: process %d is "
                   "suspended; resume it first (it refused for %u ms: %s)", (int)o->pid, (int)o->pid,
                   waited_ms, why);
        return -EAGAIN;
    }
    if (r == -ESRCH || r == -ECONNREFUSED || r == -ENOENT) {
        errmsg_set("the memory opened from process %d (IPC) is gone: %s", (int)o->pid, why);
        return -ESRCH;
    }
    errmsg_set("the memory opened from process %d (IPC) is not available: %s", (int)o->pid, why);
    return r == -ETIMEDOUT ? -ETIMEDOUT : -EIO;
}

/* Open o again from its exporter, asking while it is suspended until
 * timeout_ms from start_ms (op_lock held). 0, or -errno with the message
 * set. */
static int reopen_one(struct opened *o, uint64_t start_ms, unsigned timeout_ms)
{
    size_t old_offset = o->offset, old_size = o->size, old_win = o->win_size;
    uint64_t win_off = 0, waited;
    char why[256], busy_why[256] = "";
    int fd = -1, r, again;

    for (;;) {
        /* Each question gets what is left of the bound, but never so little
         * that a live exporter cannot answer it. */
        waited = now_ms() - start_ms;
        r = request_export(o->pid, o->id, o->token,
                           (int)(timeout_ms > waited + MIN_CALL_MS ? timeout_ms - waited : MIN_CALL_MS),
                           o, &fd, &win_off, why, sizeof(why));
        if (retryable(r))
            snprintf(busy_why, sizeof(busy_why), "%s", why);
        /* an exporter busy resuming may be slow to answer: ask again too */
        again = retryable(r) || (r == -ETIMEDOUT && busy_why[0]);
        if (r == 0 || !again || now_ms() - start_ms >= timeout_ms)
            break;
        pause_ms(POLL_MS);
    }
    if (r == -ETIMEDOUT && busy_why[0]) {       /* it was refusing as suspended: say that */
        r = -EBUSY;
        snprintf(why, sizeof(why), "%s", busy_why);
    }
    if (r < 0)
        return reopen_refused(o, r, why, (unsigned)(now_ms() - start_ms));
    if (o->phys_id) {
        /* an imported allocation outlives the context it was imported in */
        int pushed = o->ctx && TCGPU_REAL(cuCtxPushCurrent)(o->ctx) == CUDA_SUCCESS;
        r = remap_imported(o, fd, old_size);
        if (pushed)
            TCGPU_REAL(cuCtxPopCurrent)(NULL);
    } else if (TCGPU_REAL(cuCtxPushCurrent)(o->ctx) != CUDA_SUCCESS) {
        errmsg_set("the context that opened memory from process %d (IPC) is gone", (int)o->pid);
        r = -EIO;
    } else {
        r = remap(o, fd, win_off, old_offset, old_size);
        TCGPU_REAL(cuCtxPopCurrent)(NULL);
    }
    close(fd);
    if (r < 0) {
        close(o->conn);
        o->conn = -1;
        o->offset = old_offset;         /* as it was mapped: the next try compares with it */
        o->size = old_size;
        o->win_size = old_win;
        return r;
    }
    o->released = 0;
    return 0;
}

int ipcmem_reopen(unsigned timeout_ms)
{
    uint64_t start = now_ms();
    size_t n = 0;
    int r = 0;

    pthread_mutex_lock(&op_lock);
    for (struct opened *o = opened; o && r == 0; o = o->next)
        if (o->released && (r = reopen_one(o, start, timeout_ms)) == 0)
            n++;
    pthread_mutex_unlock(&op_lock);
    if (r < 0) {
        ipcmem_release_opened();        /* all or none: those opened again go back */
        return r;
    }
    if (n)
        log_info("opened %zu allocation%s of other processes again, at the same addresses (IPC)", n,
                 n > 1 ? "s" : "");
    return 0;
}
