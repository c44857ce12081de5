/*
 * sim.h - simcuda's internal interfaces (not installed, not exported).
 *
 * simcuda is a libcuda.so.1 that runs on the CPU (docs/simcuda.md). The pieces:
 *   shm.c        machine-wide device state shared by all processes (capacity, process table)
 *   handle.c     registry of live handles, so stale or foreign handles are refused
 *   vmem.c       device virtual address space, translation map, capacity charging
 *   init.c       cuInit, devices, contexts, the API gate used by the checkpoint lock
 *   stream.c     streams (a worker thread each), legacy/per-thread default streams, events
 *   memory.c     allocations, copies, memsets, host memory, pointer attributes
 *   vmm.c        cuMemCreate/cuMemMap & co.
 *   pool.c       stream-ordered allocation
 *   module.c     modules (shared objects of host functions) and kernel launches
 *   procaddr.c   cuGetProcAddress from a table generated out of cuda.h/cudaTypedefs.h
 *   checkpoint.c the driver checkpoint API and the per-process service thread
 *
 * The whole library is compiled with __CUDA_API_VERSION_INTERNAL, so cuda.h
 * declares every exported ABI name (cuMemAlloc is the 32-bit v1, cuMemAlloc_v2
 * the current one): each function is defined under its exact ABI name.
 */
#ifndef SIMCUDA_SIM_H
#define SIMCUDA_SIM_H

#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "simcuda_kernel.h"

#define SIM_DRIVER_VERSION 13000
#define SIM_MAX_DEVICES 8
#define SIM_MAX_PROCS 64
#define SIM_GRANULARITY (2ull << 20)     /* VMM granularity, as on real GPUs */
#define SIM_ALLOC_ALIGN 256ull           /* cuMemAlloc alignment guarantee */

/* --- API registry (procaddr.c) --------------------------------------------
 * SIM_EXPORT(fn) after a definition records ("fn", fn) in the simcuda_api
 * section; cuGetProcAddress resolves names through it, never through dlsym
 * (an interposer that overrides dlsym lives in the same process). */
struct sim_api_entry {
    const char *name;
    void (*fn)(void);
};
#define SIM_EXPORT(fn) SIM_EXPORT_(fn)
#define SIM_EXPORT_(fn)                                                          \
    static const struct sim_api_entry sim_api_##fn                              \
        __attribute__((used, section("simcuda_api"), aligned(16))) = {          \
            #fn, (void (*)(void))fn }

/* --- logging -------------------------------------------------------------- */
void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *sim_result_name(CUresult r);

/* --- shared machine state (shm.c) ----------------------------------------- */
enum sim_cmd {
    SIM_CMD_NONE = 0,
    SIM_CMD_LOCK,
    SIM_CMD_CHECKPOINT,
    SIM_CMD_RESTORE,
    SIM_CMD_UNLOCK,
};

struct sim_shm_proc {
    int32_t pid;                 /* 0: free slot */
    int32_t restore_tid;         /* the service thread */
    int32_t state;               /* CUprocessState */
    int32_t _pad;
    uint64_t used[SIM_MAX_DEVICES];   /* device bytes charged to this process */
    uint64_t parked[SIM_MAX_DEVICES]; /* bytes held in host memory while checkpointed */
    char comm[64];
    /* Command channel: the caller holds cmd_lock, writes cmd/arg, bumps
     * cmd_seq and wakes; the service thread answers in result, bumps ack_seq. */
    pthread_mutex_t cmd_lock;
    uint32_t cmd_seq;            /* futex word */
    uint32_t ack_seq;            /* futex word */
    uint32_t cmd;
    uint32_t arg;                /* lock timeout in ms */
    int32_t result;              /* CUresult of the last command */
    int32_t _pad2;
    /* Restore onto another simulated machine (a restore on another node):
     * its shm name, and the GPUs remapped (old UUID -> new UUID). */
    char move_to[64];
    int32_t npairs;
    int32_t _pad3;
    uint8_t pairs[SIM_MAX_DEVICES][2][16];
};

struct sim_shm {
    uint32_t magic;
    uint32_t layout;             /* sizeof(struct sim_shm): refuse a foreign layout */
    pthread_mutex_t lock;        /* robust, process-shared: guards everything below */
    int32_t ndev;
    int32_t _pad;
    uint64_t capacity[SIM_MAX_DEVICES];
    uint64_t used[SIM_MAX_DEVICES];
    struct sim_shm_proc procs[SIM_MAX_PROCS];
};

/* Open (creating and initialising if needed) the shm named by SIMCUDA_SHM,
 * or by name. Returns 0 or -errno; the mapping lives until process exit. */
int sim_shm_open(struct sim_shm **out, const char **name_out);
int sim_shm_open_name(const char *name, struct sim_shm **out, const char **name_out);
/* The simulated machine pid is attached to (its mapping of a simcuda shm):
 * its name into name. 0, -ENOENT, or -errno reading /proc/pid/maps. */
int sim_shm_of_pid(pid_t pid, char *name, size_t len);
void sim_shm_lock(struct sim_shm *s);
void sim_shm_unlock(struct sim_shm *s);
/* Free the slots of dead processes and their device bytes. Lock held. */
void sim_shm_reap(struct sim_shm *s);
struct sim_shm_proc *sim_shm_find(struct sim_shm *s, pid_t pid);   /* lock held */
/* Claim a slot for pid (lock held); NULL if the table is full. */
struct sim_shm_proc *sim_shm_claim(struct sim_shm *s, pid_t pid, const char *comm);
/* Give a slot back, releasing its device bytes (lock held). */
void sim_shm_release(struct sim_shm *s, struct sim_shm_proc *p);
bool sim_pid_alive(pid_t pid);
const char *sim_state_name(int state);
uint64_t sim_parse_size(const char *s, uint64_t dflt);

/* --- this process's attachment (init.c / checkpoint.c) --------------------- */
extern struct sim_shm *sim_shm;          /* NULL until cuInit */
extern struct sim_shm_proc *sim_self;    /* our slot */
int sim_attach_resources(void);          /* io_uring etc.: 0 or -errno */
void sim_detach_resources(void);
int sim_service_start(void);             /* 0 or -errno */

/* Charge/release device capacity for this process (machine-wide). */
CUresult sim_capacity_charge(int dev, uint64_t bytes);
void sim_capacity_release(int dev, uint64_t bytes);

/* --- API gate (init.c) -----------------------------------------------------
 * Every API entry passes the gate; the checkpoint lock closes it and waits
 * for the calls in flight to leave. Nested entries of a thread never block. */
int sim_gate_enter(void);
void sim_gate_leave(int *token);
#define SIM_GATE() \
    int sim_gate_token __attribute__((cleanup(sim_gate_leave), unused)) = sim_gate_enter()
/* Entry of an API function that needs cuInit. */
#define SIM_BEGIN()                          \
    SIM_GATE();                              \
    if (!sim_initialized())                  \
        return CUDA_ERROR_NOT_INITIALIZED
bool sim_initialized(void);
/* Close the gate and drain (timeout_ms 0 = forever): CUDA_SUCCESS or NOT_READY. */
CUresult sim_gate_close(unsigned timeout_ms);
void sim_gate_open(void);

/* --- handles (handle.c) ---------------------------------------------------- */
enum sim_magic {
    SIM_MAGIC_CTX = 0x43545831,
    SIM_MAGIC_STREAM = 0x5354524d,
    SIM_MAGIC_EVENT = 0x45564e54,
    SIM_MAGIC_MODULE = 0x4d4f444c,
    SIM_MAGIC_FUNC = 0x46554e43,
    SIM_MAGIC_POOL = 0x504f4f4c,
    SIM_MAGIC_PHYS = 0x50485953,
};
void sim_handle_add(void *p);
void sim_handle_del(void *p);
/* True if p is a live handle whose first uint32_t is magic. */
bool sim_handle_ok(const void *p, uint32_t magic);

/* --- devices and contexts (init.c) ----------------------------------------- */
struct sim_stream;

struct sim_ctx {
    uint32_t magic;
    uint64_t id;
    int dev;
    unsigned flags;
    bool primary;
    bool active;                 /* primary: retained at least once since reset */
    int retain;                  /* primary: retain count */
    uint64_t charged;            /* device memory the context itself takes (SIMCUDA_CONTEXT_MEM) */
    pthread_mutex_t lock;        /* guards streams list, submit counters, live_workers */
    pthread_cond_t cv;           /* live_workers changes */
    struct sim_stream *streams;  /* every stream of the context (legacy and per-thread too) */
    struct sim_stream *legacy;
    int live_workers;
    int sticky;                  /* CUresult of a device fault, 0 if none */
};

/* --- devices this process sees (visible.c) ---------------------------------
 * A CUdevice is the process's ordinal among the devices CUDA_VISIBLE_DEVICES
 * lets it see; the machine (shm) counts by physical index. */
int sim_visible_init(int ndev);          /* at cuInit: the number visible */
int sim_device_count(void);              /* visible devices */
int sim_device_phys(CUdevice dev);       /* a valid ordinal's physical index */
void sim_device_uuid_phys(int phys, CUuuid *u);   /* of this machine */
void sim_device_uuid_phys_of(const char *machine, int phys, CUuuid *u);
const char *sim_shm_name(void);          /* the machine (SIMCUDA_SHM) */
/* The process moves to another machine (checkpoint.c, at Restore): its
 * mapping, name and the new physical index of each visible ordinal. */
void sim_set_machine(struct sim_shm *s, const char *name);
void sim_visible_remap(const int *phys_of_ordinal);
uint64_t sim_device_capacity(int dev);
/* Current context of the thread, checked: CUDA_SUCCESS, INVALID_CONTEXT, or the sticky error. */
CUresult sim_ctx_current(struct sim_ctx **out);
struct sim_ctx *sim_ctx_current_raw(void);
CUresult sim_ctx_check(CUcontext c, struct sim_ctx **out);
void sim_ctx_fault(struct sim_ctx *c, CUresult err);
/* Every context that exists (for the checkpoint drain). Callback under a global lock. */
void sim_ctx_foreach(void (*fn)(struct sim_ctx *, void *), void *arg);

/* --- device memory (vmem.c) ------------------------------------------------ */
enum sim_range_kind {
    SIM_R_DEVICE,     /* cuMemAlloc */
    SIM_R_POOL,       /* cuMemAllocAsync */
    SIM_R_VMM,        /* one cuMemMap mapping */
    SIM_R_HOST,       /* pinned/registered host memory (UVA: va == host address) */
    SIM_R_MANAGED,    /* cuMemAllocManaged (host-accessible, charged to the device) */
};

struct sim_phys;
struct sim_pool;

struct sim_range {
    uint64_t va, size;           /* what translation covers */
    unsigned char *host;         /* host view of va */
    enum sim_range_kind kind;
    struct sim_ctx *ctx;
    int dev;
    bool access;                 /* VMM: cuMemSetAccess gave read/write */
    unsigned access_flags;
    uint64_t id;                 /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
    uint64_t charged;            /* capacity charged for this range (0 for VMM/host) */
    size_t map_len;              /* host mmap length owned by the range (0: not owned) */
    struct sim_phys *phys;       /* VMM */
    uint64_t phys_off;
    struct sim_pool *pool;       /* POOL */
    unsigned host_flags;         /* HOST: cuMemHostAlloc flags */
    bool host_registered;        /* HOST: cuMemHostRegister (memory not ours) */
    bool free_pending;           /* POOL: cuMemFreeAsync queued */
};

int sim_vmem_init(void);                 /* reserve the device VA region: 0 or -errno */
bool sim_va_in_device_region(uint64_t va, uint64_t size);
/* Device VA allocator. fixed: exact address wanted (0 if any). Returns 0 if none. */
uint64_t sim_va_alloc(uint64_t size, uint64_t align, uint64_t fixed);
void sim_va_free(uint64_t va);

/* Translation map. Caller holds the read lock while using a host view. */
void sim_map_rdlock(void);
void sim_map_wrlock(void);
void sim_map_unlock(void);
int sim_map_insert(struct sim_range *r);             /* write lock held: 0 or -EEXIST/-ENOMEM */
void sim_map_remove(struct sim_range *r);            /* write lock held */
struct sim_range *sim_map_find(uint64_t va);         /* lock held: range containing va */
struct sim_range *sim_map_next(uint64_t va);         /* lock held: first range ending after va */
bool sim_map_overlaps(uint64_t va, uint64_t len);    /* lock held */
/* Host view of [va, va+len) if inside one accessible range (lock held). */
void *sim_map_view(uint64_t va, uint64_t len);
/* Bytes from va that one translation covers, with its view; 0 if va is not mapped+accessible. */
uint64_t sim_map_span(uint64_t va, unsigned char **view);
/* Is [va, va+len) fully covered by mapped ranges (accessible or not)? */
bool sim_map_covered(uint64_t va, uint64_t len);
/* Remove and return every range owned by ctx (or all if ctx NULL) of the given kinds mask. */
size_t sim_map_take(struct sim_ctx *ctx, unsigned kinds, struct sim_range ***out);
/* Iterate all ranges under the read lock. */
void sim_map_foreach(void (*fn)(struct sim_range *, void *), void *arg);

uint64_t sim_next_buffer_id(void);
void *sim_backing_alloc(size_t len);                 /* zeroed anonymous memory or NULL */
void sim_backing_free(void *p, size_t len);
uint64_t sim_round_up(uint64_t v, uint64_t a);

/* Device allocation with capacity charge; the range goes in the map. */
CUresult sim_dev_alloc(struct sim_ctx *c, uint64_t size, enum sim_range_kind kind,
                       struct sim_range **out);
void sim_dev_free_range(struct sim_range *r);        /* range already out of the map */
/* Free everything a context owns (context destruction). */
void sim_mem_release_ctx(struct sim_ctx *c);

/* --- streams (stream.c) ---------------------------------------------------- */
enum sim_op_kind {
    SIM_OP_COPY,
    SIM_OP_MEMSET,
    SIM_OP_KERNEL,
    SIM_OP_HOSTFN,
    SIM_OP_CALLBACK,
    SIM_OP_EVENT,
    SIM_OP_POOL_FREE,
    SIM_OP_NOP,
    SIM_OP_EXIT,
};

struct sim_dep {
    struct sim_stream *s;
    uint64_t seq;
};

struct sim_event;

struct sim_op {
    struct sim_op *next;
    enum sim_op_kind kind;
    uint64_t seq;
    int ndeps;
    struct sim_dep *deps;                   /* malloc'd; streams referenced */
    int *result;                            /* sync callers: where to store the outcome */
    union {
        struct {                            /* 2D copy; 1D is height 1 */
            uint64_t dst, src;
            bool dst_dev, src_dev;          /* device (translated) or host address */
            uint64_t width, height, dpitch, spitch;
        } copy;
        struct {
            uint64_t dst;
            uint32_t value;
            unsigned elem;                  /* 1, 2, 4 */
            uint64_t width, height, pitch;  /* width in elements, pitch in bytes */
        } set;
        struct {
            simcuda_kernel_fn fn;
            unsigned grid[3], block[3], shared;
            void **params;                  /* owned copy (or the caller's, if sync) */
            void *argbuf;
        } kernel;
        struct {
            CUhostFn fn;
            void *data;
        } hostfn;
        struct {
            CUstreamCallback fn;
            void *data;
            CUstream handle;
        } callback;
        struct sim_event *event;
        struct {
            struct sim_range *range;
        } pool_free;
    } u;
};

struct sim_stream {
    uint32_t magic;
    uint64_t id;
    struct sim_ctx *ctx;
    struct sim_stream *next_in_ctx;
    unsigned flags;                 /* CU_STREAM_NON_BLOCKING */
    int priority;
    enum { SIM_STREAM_USER, SIM_STREAM_LEGACY, SIM_STREAM_PERTHREAD } type;
    int refs;                       /* atomic */
    pthread_mutex_t lock;           /* queue and done */
    pthread_cond_t work_cv, done_cv;
    struct sim_op *head, *tail;
    uint64_t submitted;             /* guarded by ctx->lock */
    uint64_t done;                  /* guarded by lock; read atomically elsewhere */
    bool dying;
    pthread_t worker;
};

struct sim_event {
    uint32_t magic;
    unsigned flags;
    int refs;                       /* atomic: the handle and pending record ops */
    pthread_mutex_t lock;           /* guards the fields below */
    struct sim_stream *s;           /* last record's stream (referenced) or NULL */
    uint64_t seq;                   /* ... and its op's seq */
    struct timespec when;           /* time the last record completed */
    struct sim_ctx *ctx;
};

/* Resolve a stream handle: 0 (legacy or, if per_thread, the thread's default),
 * CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, or a created stream. Checks the
 * context (current one for the special handles). */
CUresult sim_stream_get(CUstream h, bool per_thread, struct sim_stream **out);
struct sim_op *sim_op_new(enum sim_op_kind kind);
void sim_op_free(struct sim_op *op);
/* Queue op on s with the implicit default-stream dependencies (+ extra). Takes
 * op (freed on error too); *seq (if not NULL) receives the op's sequence number. */
CUresult sim_submit(struct sim_stream *s, struct sim_op *op, const struct sim_dep *extra,
                    int nextra, uint64_t *seq);
/* Queue op and wait for it: returns the op's own result or the sticky error. */
CUresult sim_submit_sync(struct sim_stream *s, struct sim_op *op);
void sim_stream_wait_seq(struct sim_stream *s, uint64_t seq);
CUresult sim_stream_sync(struct sim_stream *s);
void sim_stream_ref(struct sim_stream *s);
void sim_stream_unref(struct sim_stream *s);
CUresult sim_stream_create(struct sim_ctx *c, int type, unsigned flags, int prio,
                           struct sim_stream **out);
void sim_stream_destroy(struct sim_stream *s);
/* Wait until every stream of c has finished what was submitted. */
CUresult sim_ctx_sync(struct sim_ctx *c);
bool sim_ctx_idle(struct sim_ctx *c);
/* Destroy every stream of c and wait for their workers (context teardown). */
void sim_ctx_streams_teardown(struct sim_ctx *c);

/* --- work executed by the workers (memory.c, module.c, pool.c) --------------- */
int sim_exec_copy(struct sim_op *op);           /* 0 or CUresult of the fault */
int sim_exec_kernel(struct sim_op *op, struct sim_ctx *c);
void sim_modules_release_ctx(struct sim_ctx *c);
int sim_exec_memset(struct sim_op *op);
void sim_pool_free_exec(struct sim_range *r);
/* Release pool memory above the thresholds (at synchronisation points). */
void sim_pools_trim(void);
void sim_pools_release_ctx(struct sim_ctx *c);

/* --- checkpoint (checkpoint.c) --------------------------------------------- */
void sim_ckpt_park_all(void);       /* checkpoint: release capacity */
CUresult sim_ckpt_unpark_all(void); /* restore: re-acquire capacity */

#endif
