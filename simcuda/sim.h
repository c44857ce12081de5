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
 *   launch.c     cuLaunchKernelEx and its launch attributes, cooperative launches
 *   library.c    context-independent loading: cuLibrary*, cuKernel*
 *   capture.c    stream capture: the capture sequences and what is illegal during them
 *   graph.c      graphs and their nodes (graph.h)
 *   graph_exec.c instantiation, update and launch of executable graphs
 *   graph_mem.c  graph memory: allocation/free nodes, addresses fixed per node
 *   managed.c    managed memory: residency, cuMemAdvise, cuMemPrefetchAsync, range attributes
 *   peer.c       peer access between devices, peer copies
 *   share.c      memory and events other processes open (shareable handles, legacy IPC)
 *   occupancy.c  occupancy queries
 *   coredump.c   coredump attributes and the dump written on a device fault
 *   profiler.c   cuProfilerStart/Stop
 *   procaddr.c   cuGetProcAddress from a table generated out of cuda.h/cudaTypedefs.h
 *   checkpoint.c the driver checkpoint API and the per-process service thread
 *   engine.c     the device's compute engine, which the processes' kernels take turns on
 *   pidns.c      who a process is across pid namespaces (the driver knows host pids)
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

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "simcuda_kernel.h"

#define SIM_DRIVER_VERSION 13000
#define SIM_DEVICE_NAME "simcuda H100 (simulated)"   /* cuDeviceGetName, simcuda-smi */
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
/* SIM_PARTIAL(fn, "what is missing") after SIM_EXPORT(fn): fn is simulated in
 * part. It expands to nothing; codegen/gen_coverage.py reads it for the
 * coverage table of docs/simcuda.md. */
#define SIM_PARTIAL(fn, what) _Static_assert(1, what)
/* SIM_AS_DRIVER(fn, "what it answers"): fn answers as the real driver does an
 * error it always gives (deprecated calls): the coverage test expects it. */
#define SIM_AS_DRIVER(fn, what) _Static_assert(1, what)
/* SIM_NOT_SIMULATED(fn, "CUDA_ERROR_X ..."): fn is exported (programs that
 * call it load) but not simulated: it always answers that error. */
#define SIM_NOT_SIMULATED(fn, what) _Static_assert(1, what)
#define SIM_EXPORT(fn) SIM_EXPORT_(fn)
#define SIM_EXPORT_(fn)                                                          \
    static const struct sim_api_entry sim_api_##fn                              \
        __attribute__((used, section("simcuda_api"), aligned(16))) = {          \
            #fn, (void (*)(void))fn }

/* Per-thread-stream flavours simcuda calls itself (cuda.h declares them only
 * for per-thread builds). */
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);

/* Whether n bytes at p are all zero (the reserved fields of argument structs). */
static inline bool sim_zeroed(const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        if (b[i])
            return false;
    return true;
}

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

/*
 * Who a process is, as every observer can check it from its own /proc
 * (pidns.c). A slot is in use when nspid is not 0.
 */
struct sim_ident {
    int32_t hostpid;             /* pid in the initial namespace; 0 until someone there looked */
    int32_t nspid;               /* pid in its own namespace (its getpid()) */
    uint64_t ns;                 /* inode of its pid namespace; 0: unknown */
    uint64_t start;              /* start time in clock ticks since boot: tells a reused or a
                                    restored pid apart */
};

struct sim_shm_proc {
    struct sim_ident id;         /* id.nspid 0: free slot */
    int32_t restore_tid;         /* the service thread, in the process's own namespace */
    int32_t state;               /* CUprocessState */
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
    char move_to[NAME_MAX + 1];
    int32_t npairs;
    int32_t _pad3;
    uint8_t pairs[SIM_MAX_DEVICES][2][16];
    /* The compute engine (engine.c): */
    uint64_t kernel_ns[SIM_MAX_DEVICES];  /* time its kernels held the device's engine */
    int32_t engine_waiting[SIM_MAX_DEVICES];  /* its kernels waiting for their turn */
    /* CPU time its stream threads spent on what a GPU's copy and compute
     * engines do (copies, memsets, kernels, graphs): host CPU here, not on
     * a real GPU (stream.c). */
    uint64_t device_cpu_ns[SIM_MAX_DEVICES];
};

/* One device's compute engine: the process whose kernels run on it now. */
struct sim_engine {
    int32_t owner;               /* its slot's number + 1 (pids differ across namespaces), 0: idle */
    int32_t running;             /* the owner's kernels running (its streams overlap) */
    int32_t last;                /* the owner before (slot + 1): it lets a waiting process go first */
    int32_t waiters;             /* kernels of all processes waiting for a turn */
    uint32_t seq;                /* futex word: bumped whenever the engine is given up */
    uint32_t _pad;
    uint64_t since_ns;           /* the owner took it */
    uint64_t handoff_until_ns;   /* the last owner stands back until then */
};

/*
 * Device memory that several processes map (share.c): a POSIX
 * file-descriptor allocation (cuMemCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
 * or a cuMemAlloc buffer exported by cuIpcGetMemHandle. Its bytes are
 * charged here once, machine-wide, not to any process: the memory lives
 * while any process holds it, whoever created it.
 */
#define SIM_MAX_SHARES 256
struct sim_shm_share {
    uint64_t id;                 /* 0: free entry */
    uint64_t holders;            /* bit i: procs[i] maps it or holds a handle to it */
    uint64_t ino, fsdev;         /* the backing object (memfd or /dev/shm object) */
    uint64_t size;               /* bytes charged to dev */
    int32_t dev;                 /* physical device */
    uint32_t legacy;             /* legacy IPC: the object's name is made of token */
    uint8_t token[16];
    struct sim_ident exporter;   /* legacy IPC: the process that exported it */
};

/* An interprocess event (CU_EVENT_INTERPROCESS): its records, counted. */
#define SIM_MAX_IPC_EVENTS 256
struct sim_shm_ipcev {
    uint64_t id;                 /* 0: free entry */
    uint64_t holders;            /* bit i: procs[i] has a handle to it */
    uint32_t recorded;           /* ticket of the last record enqueued */
    uint32_t done;               /* futex word: highest ticket completed */
    uint8_t token[16];
};

struct sim_shm {
    uint32_t magic;
    uint32_t layout;             /* sizeof(struct sim_shm): refuse a foreign layout */
    pthread_mutex_t lock;        /* robust, process-shared: guards everything below */
    int32_t ndev;
    int32_t _pad;
    uint64_t capacity[SIM_MAX_DEVICES];
    uint64_t used[SIM_MAX_DEVICES];
    struct sim_engine engine[SIM_MAX_DEVICES];
    struct sim_shm_proc procs[SIM_MAX_PROCS];
    uint64_t next_id;            /* ids of shares and IPC events */
    struct sim_shm_share shares[SIM_MAX_SHARES];
    struct sim_shm_ipcev ipcevs[SIM_MAX_IPC_EVENTS];
};
_Static_assert(SIM_MAX_PROCS <= 64, "holders masks are 64 bits");

/* Open (creating and initialising if needed) the shm named by SIMCUDA_SHM,
 * or by name. Returns 0 or -errno; the mapping lives until process exit. */
int sim_shm_open(struct sim_shm **out, const char **name_out);
int sim_shm_open_name(const char *name, struct sim_shm **out, const char **name_out);
/* The nth (from 0, in address order) simulated machine pid maps (a simcuda
 * shm): its name into name. A process that moved between machines maps each
 * it was on, its slot on the last only. 0, -ENOENT (no nth), or -errno
 * reading /proc/pid/maps. */
int sim_shm_of_pid(pid_t pid, unsigned nth, char *name, size_t len);
void sim_shm_lock(struct sim_shm *s);
void sim_shm_unlock(struct sim_shm *s);
/* Free the slots of dead processes and their device bytes. Lock held. */
void sim_shm_reap(struct sim_shm *s);
/* The slot of the process the caller calls pid (lock held), or NULL. */
struct sim_shm_proc *sim_shm_find(struct sim_shm *s, pid_t pid);
/* Claim a slot for the process `id` (lock held); NULL if the table is full. */
struct sim_shm_proc *sim_shm_claim(struct sim_shm *s, const struct sim_ident *id, const char *comm);
/* Give a slot back, releasing its device bytes (lock held). */
void sim_shm_release(struct sim_shm *s, struct sim_shm_proc *p);
/* Slot `slot` no longer holds share / IPC event entry e (lock held): an
 * entry nobody holds is freed, its bytes given back (a legacy object's
 * name removed). */
void sim_shm_share_drop(struct sim_shm *s, struct sim_shm_share *e, int slot);
void sim_shm_ipcev_drop(struct sim_shm *s, struct sim_shm_ipcev *e, int slot);
/* The name of a legacy IPC object made of token ("/simcuda-ipc-<hex>"). */
void sim_share_name(const uint8_t token[16], char *name, size_t len);
static inline bool sim_slot_used(const struct sim_shm_proc *p)
{
    return __atomic_load_n(&p->id.nspid, __ATOMIC_ACQUIRE) != 0;
}
const char *sim_state_name(int state);
/* A stable UUID per (shm name, device): every process of the same simulated
 * machine sees the same one, as for a real GPU (cuDeviceGetUuid, simcuda-smi). */
void sim_device_uuid(const char *shm_name, int dev, unsigned char out[16]);
uint64_t sim_parse_size(const char *s, uint64_t dflt);

/* --- processes across pid namespaces (pidns.c) ------------------------------
 * Pids given to the API are read as the caller's /proc shows them. Each
 * returns 0 or -errno (-ESRCH: no such process, or a zombie). */
int sim_ident_self(struct sim_ident *id);
int sim_ident_of(pid_t pid, struct sim_ident *id);
bool sim_ident_same(const struct sim_ident *a, const struct sim_ident *b);
/* 1 alive, 0 gone, -1 in a namespace the caller cannot see. Fills id->hostpid
 * when it finds it. */
int sim_ident_alive(struct sim_ident *id);
/* The pid the caller would use for id (host pid from the host), 0 if none. */
pid_t sim_ident_visible_pid(const struct sim_ident *id);
/* The caller's tid for the thread `nstid` (its own namespace's) of process pid; 0 if none. */
int sim_ident_visible_tid(pid_t pid, int32_t nstid);
/* Whether process pid has the simulated device (shm object `shm`) mapped. */
bool sim_pid_maps_device(pid_t pid, const char *shm);

/* --- this process's attachment (init.c / checkpoint.c) --------------------- */
extern struct sim_shm *sim_shm;          /* NULL until cuInit */
extern struct sim_shm_proc *sim_self;    /* our slot */
int sim_attach_resources(void);          /* io_uring etc.: 0 or -errno */
void sim_detach_resources(void);
int sim_service_start(void);             /* 0 or -errno */
const char *sim_shm_name(void);          /* the SIMCUDA_SHM in use, NULL before cuInit */
/* Claim this process's slot under its identity (lock held); NULL if full. */
struct sim_shm_proc *sim_ckpt_claim(const char *comm);
/* Whether slot p is this process's (not a fork parent's, not an earlier life's). */
bool sim_ckpt_owns(const struct sim_shm_proc *p);

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
    SIM_MAGIC_GRAPH = 0x47525048,
    SIM_MAGIC_GNODE = 0x474e4f44,
    SIM_MAGIC_GEXEC = 0x47455845,
    SIM_MAGIC_UOBJ = 0x554f424a,
    SIM_MAGIC_LIBRARY = 0x4c494252,
    SIM_MAGIC_KERNEL = 0x4b45524e,
};
void sim_handle_add(void *p);
void sim_handle_del(void *p);
/* True if p is a live handle whose first uint32_t is magic. */
bool sim_handle_ok(const void *p, uint32_t magic);

/* --- devices and contexts (init.c) ----------------------------------------- */
struct sim_stream;

/* Coredump attributes (coredump.c): global ones, copied into each new context. */
struct sim_coredump {
    bool on_exception;
    bool trigger_host;
    bool lightweight;
    bool user_trigger;
    int flags;                   /* CUCoredumpGenerationFlags */
    char file[1024];
    char pipe[1024];
};

#define SIM_MAX_PEERS 8

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
    int capturing;               /* streams of the context in capture (atomic) */
    int capturing_blocking;      /* ... of which blocking: the legacy stream is unusable */
    struct sim_ctx *peers[SIM_MAX_PEERS];   /* contexts whose memory it may access (peer.c) */
    int npeers;                  /* guarded by lock */
    struct sim_coredump coredump;
};

/* --- devices this process sees (visible.c) ---------------------------------
 * A CUdevice is the process's ordinal among the devices CUDA_VISIBLE_DEVICES
 * lets it see; the machine (shm) counts by physical index. */
int sim_visible_init(int ndev);          /* at cuInit: the number visible */
int sim_device_count(void);              /* visible devices */
int sim_device_phys(CUdevice dev);       /* a valid ordinal's physical index */
void sim_device_uuid_phys(int phys, CUuuid *u);   /* of this machine */
void sim_device_uuid_phys_of(const char *machine, int phys, CUuuid *u);
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
    SIM_R_GRAPH,      /* a graph allocation, while allocated (graph_mem.c) */
};

struct sim_phys;
struct sim_pool;
struct sim_gmem;
struct sim_managed;

struct sim_range {
    uint64_t va, size;           /* what translation covers */
    unsigned char *host;         /* host view of va */
    enum sim_range_kind kind;
    struct sim_ctx *ctx;
    int dev;
    bool access;                 /* VMM: cuMemSetAccess gave read/write */
    unsigned access_flags;
    unsigned access_mask;        /* VMM: devices given any access (peer devices too) */
    uint64_t id;                 /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
    uint64_t charged;            /* capacity charged for this range (0 for VMM/host) */
    size_t map_len;              /* host mmap length owned by the range (0: not owned) */
    struct sim_phys *phys;       /* VMM */
    uint64_t phys_off;
    uint64_t resv_va, resv_size; /* VMM: the reservation the mapping is in */
    uint64_t block_id;           /* VMM: the physical allocation's id (MEMORY_BLOCK_ID) */
    uint64_t handle_types;       /* VMM: the handle types it may be exported as */
    int share;                   /* DEVICE: shares[share - 1] backs it (exported or opened), 0: none */
    int ipc_refs;                /* DEVICE: opened by cuIpcOpenMemHandle this many times, 0: not */
    bool ipc_peer_any;           /* DEVICE: opened with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */
    bool rdma;                   /* VMM: created GPUDirect RDMA capable */
    struct sim_pool *pool;       /* POOL */
    unsigned host_flags;         /* HOST: cuMemHostAlloc flags */
    bool host_registered;        /* HOST: cuMemHostRegister (memory not ours) */
    bool free_pending;           /* POOL: cuMemFreeAsync queued */
    struct sim_gmem *gmem;       /* GRAPH: the graph allocation */
    struct sim_managed *managed; /* MANAGED: residency and advice per page (managed.c) */
    int pins;                    /* device work holding its host view (vmem.c, pin_lock) */
    void (*release)(struct sim_range *);  /* out of the map while pinned: at the last unpin */
};

int sim_vmem_init(void);                 /* reserve the device VA region: 0 or -errno */
bool sim_va_in_device_region(uint64_t va, uint64_t size);
/* Device VA allocator. fixed: exact address wanted (0 if any). Returns 0 if none. */
uint64_t sim_va_alloc(uint64_t size, uint64_t align, uint64_t fixed);
void sim_va_free(uint64_t va);

/* Translation map. Caller holds the read lock while using a host view it
 * translated itself; device work (kernels, copies, memsets) pins instead. */
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
/* The same for device work of context c: memory of another device needs peer
 * access (cuCtxEnablePeerAccess, or a VMM mapping's access for c's device);
 * host-resident managed pages it touches move to c's device. */
void *sim_map_view_ctx(struct sim_ctx *c, uint64_t va, uint64_t len);
/* Bytes from va that one translation covers, with its view; 0 if va is not mapped+accessible. */
uint64_t sim_map_span(uint64_t va, unsigned char **view);
/* Is [va, va+len) fully covered by mapped ranges (accessible or not)? */
bool sim_map_covered(uint64_t va, uint64_t len);
/* Remove and return every range owned by ctx (or all if ctx NULL) of the given kinds mask. */
size_t sim_map_take(struct sim_ctx *ctx, unsigned kinds, struct sim_range ***out);
/* Iterate all ranges under the read lock. */
void sim_map_foreach(void (*fn)(struct sim_range *, void *), void *arg);

/*
 * Pins. Device work holds the host views it translated for as long as it
 * runs without holding the map lock: each range it touches is pinned (a
 * count on the range). A range taken out of the map while pinned keeps its
 * host view; what frees it runs at its last unpin (sim_range_defer). So a
 * running kernel blocks no allocation, free or mapping of other memory, and
 * a free of memory it uses does not pull the view from under it.
 */
struct sim_pins {                /* the ranges one operation pinned */
    struct sim_range *inl[8];
    struct sim_range **v;        /* inl, or grown */
    size_t n, cap;
};
void sim_pins_init(struct sim_pins *p);
/* sim_map_view_ctx / sim_map_span, pinned in p (the map lock is taken
 * inside, not held by the caller): NULL / 0 if not mapped, nothing pinned. */
void *sim_pins_view_ctx(struct sim_pins *p, struct sim_ctx *c, uint64_t va, uint64_t len);
uint64_t sim_pins_span(struct sim_pins *p, uint64_t va, unsigned char **view);
/* Unpin every range of p (running the releases that waited for it). */
void sim_pins_release(struct sim_pins *p);
/* r is out of the map. true: r is pinned and release(r) runs at its last
 * unpin, on the unpinning thread; false: nothing holds r, the caller frees it. */
bool sim_range_defer(struct sim_range *r, void (*release)(struct sim_range *));
/* Wait until nothing pins r (r out of the map, so no new pin can come). */
void sim_range_wait_unpinned(struct sim_range *r);
bool sim_range_pinned(struct sim_range *r);

uint64_t sim_next_buffer_id(void);
/* Whether device memory asks for transparent huge pages (SIMCUDA_DEVICE_THP,
 * else unless the guest hands free pages back to its hypervisor). */
bool sim_device_wants_thp(void);
void *sim_backing_alloc(size_t len);                 /* zeroed anonymous memory or NULL */
void sim_backing_free(void *p, size_t len);
uint64_t sim_round_up(uint64_t v, uint64_t a);

/* Device allocation with capacity charge; the range goes in the map. */
CUresult sim_dev_alloc(struct sim_ctx *c, uint64_t size, enum sim_range_kind kind,
                       struct sim_range **out);
/* Range already out of the map: freed now, or at its last unpin (its bytes
 * are given back to the capacity then, when its host memory goes). */
void sim_dev_free_range(struct sim_range *r);
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
    SIM_OP_GRAPH,          /* one graph launch: its nodes' operations, in order */
    SIM_OP_GMEM_MAP,       /* a graph allocation node: the allocation appears */
    SIM_OP_GMEM_UNMAP,     /* a graph free node, or cuMemFreeAsync of a graph allocation */
    SIM_OP_PREFETCH,       /* cuMemPrefetchAsync: managed pages move */
    SIM_OP_NOP,
    SIM_OP_IPC_WAIT,       /* cuStreamWaitEvent on an interprocess event */
    SIM_OP_EXIT,
    SIM_OP_PARK,                            /* the worker stops; the stream stays */
};

struct sim_dep {
    struct sim_stream *s;
    uint64_t seq;
};

struct sim_event;

struct sim_exec;

struct sim_op {
    struct sim_op *next;
    struct sim_op *parent;                  /* the graph launch it is part of, or NULL */
    enum sim_op_kind kind;
    uint64_t seq;
    int ndeps;
    struct sim_dep *deps;                   /* malloc'd; streams referenced */
    int *result;                            /* sync callers: where to store the outcome */
    uint32_t ticket;                        /* SIM_OP_EVENT of an interprocess event */
    union {
        struct sim_copy {                   /* 3D copy; 2D is depth 1, 1D height 1 too */
            uint64_t dst, src;
            bool dst_dev, src_dev;          /* device (translated) or host address */
            uint64_t width, height, dpitch, spitch;
            uint64_t depth, dheight, sheight;   /* slices, rows per slice (depth > 1) */
        } copy;
        struct {
            uint64_t dst;
            uint32_t value;
            unsigned elem;                  /* 1, 2, 4 */
            uint64_t width, height, pitch;  /* width in elements, pitch in bytes */
        } set;
        struct {
            simcuda_kernel_fn fn;
            CUfunction func;                /* the handle launched (CUfunction or CUkernel) */
            const uint32_t *meta;           /* argument sizes (SIMCUDA_KERNEL_PARAMS) or NULL */
            struct sim_ctx *ctx;            /* the function's context */
            const char *name;
            unsigned grid[3], block[3], shared;
            int priority;                   /* CU_LAUNCH_ATTRIBUTE_PRIORITY */
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
            struct sim_shm_ipcev *ev;       /* wait until it completes ticket */
            uint64_t id;
            uint32_t ticket;
        } ipcwait;
        struct {
            struct sim_range *range;
        } pool_free;
        struct {
            struct sim_op **ops;            /* the nodes' operations, a topological order */
            size_t n;
            struct sim_gmem **mems;         /* graph allocations it uses (referenced) */
            size_t nmems;
        } graph;
        struct sim_gmem *gmem;
        struct {
            uint64_t va, size;
            int dev;                        /* destination device, or -1 for the host */
        } prefetch;
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
    bool parked;                    /* no worker: the process is checkpointed */
    pthread_t worker;               /* joinable; it detaches itself when the stream goes */
    pid_t worker_tid;               /* its task, written by the worker as it starts */
    /* Stream capture (capture.c, under its lock): the sequence the stream
     * belongs to and the nodes its next captured operation depends on. */
    struct sim_capture *cap;
    struct sim_gnode **cdeps;
    CUgraphEdgeData *cedges;
    size_t ncdeps, cdeps_cap;
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
    struct sim_shm_ipcev *ipc;      /* CU_EVENT_INTERPROCESS: its records across processes */
    uint64_t ipc_id;
    /* Last recorded in a capturing stream (capture.c, under its lock): the
     * capture sequence and the nodes the record stands for. */
    struct sim_capture *cap;
    struct sim_gnode **cnodes;
    size_t ncnodes;
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
/* Runs one operation as s's worker does (graph launches run their nodes' operations). */
int sim_exec_op(struct sim_op *op, struct sim_stream *s);
/* The event's last record as (stream, seq), referenced; s NULL if never recorded. */
void sim_event_target(struct sim_event *e, struct sim_dep *d);
void sim_event_ref(struct sim_event *e);
void sim_event_unref(struct sim_event *e);
CUresult sim_event_get(CUevent h, struct sim_event **out);
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
/* The GPU's engines: every stream's worker stops (queues drained: the checkpoint
 * lock waited for the work) and starts again at restore. 0 or -errno. */
void sim_streams_park(void);
int sim_streams_unpark(void);

/* --- work executed by the workers (memory.c, module.c, pool.c) --------------- */
int sim_exec_copy(struct sim_op *op);           /* 0 or CUresult of the fault */
int sim_exec_kernel(struct sim_op *op, struct sim_ctx *c);
void sim_modules_release_ctx(struct sim_ctx *c);

/* The settable attributes of a function (CUfunction or CUkernel), module.c. */
struct sim_fattrs {
    int max_dyn_shared;          /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    int carveout;
    int cluster_must_be_set;
    int req_cluster[3];
    int non_portable_cluster;
    int cluster_policy;
};
void sim_fattrs_init(struct sim_fattrs *a);
CUresult sim_fattr_get(const struct sim_fattrs *a, CUfunction_attribute attrib, int *out);
CUresult sim_fattr_set(struct sim_fattrs *a, CUfunction_attribute attrib, int value);
#define SIM_REGS_PER_THREAD 32      /* CU_FUNC_ATTRIBUTE_NUM_REGS of every kernel */
#define SIM_SMS 132                 /* multiprocessors per device */

/* A launchable function: a CUfunction, or a CUkernel resolved for a context. */
struct sim_kfn {
    simcuda_kernel_fn fn;
    const uint32_t *meta;        /* argument sizes, or NULL */
    struct sim_ctx *ctx;
    const char *name;
    const struct sim_fattrs *attrs;
};
/* Occupancy (occupancy.c): resident blocks of blockSize threads per SM, 0 if none fit. */
int sim_occupancy_blocks(const struct sim_fattrs *a, int block_size, size_t dyn_smem);
/* Resolves f (CUfunction, or CUkernel for context c, loading it there). */
CUresult sim_func_resolve(CUfunction f, struct sim_ctx *c, struct sim_kfn *out);
/* Copies argument values (sizes in meta) into one owned buffer: 0 or -1 (ENOMEM). */
int sim_args_copy(const uint32_t *meta, void **params, void **argbuf, void ***pv);
CUresult sim_check_dims(const unsigned grid[3], const unsigned block[3], unsigned shared);
/* Fills op (a SIM_OP_KERNEL) for a launch of k, copying the arguments. */
CUresult sim_kernel_op_fill(struct sim_op *op, CUfunction h, const struct sim_kfn *k,
                            const unsigned grid[3], const unsigned block[3], unsigned shared,
                            void **params);
/* A kernel launch of hf on s, checked, its arguments copied: the op to submit. */
CUresult sim_launch_prepare(CUfunction hf, struct sim_stream *s, const unsigned grid[3],
                            const unsigned block[3], unsigned shared, void **params, void **extra,
                            struct sim_op **out);
/* Queues the launch (synchronous for kernels without argument sizes). Takes op. */
CUresult sim_launch_submit(struct sim_stream *s, struct sim_op *op);
/* Module of a library for a context (library.c shares the dl handle). */
CUresult sim_module_add_shared(struct sim_ctx *c, void *dl, void *lib, CUmodule *out);
CUresult sim_module_function(CUmodule mod, const char *name, CUfunction *out);
void sim_module_unload(CUmodule mod);
/* The library a shared module belongs to heard that it went (context teardown). */
void sim_library_module_gone(void *lib, CUmodule mod);
bool sim_is_kernel(const void *h);
CUresult sim_kernel_resolve(const void *kern, struct sim_ctx *c, struct sim_kfn *out, CUfunction *fout);
/* Names of the kernels an ELF image declares (SIMCUDA_KERNEL_PARAMS symbols):
 * a malloc'd array of malloc'd strings, or -1. */
int sim_elf_kernel_names(const unsigned char *img, size_t len, char ***names, size_t *n);
size_t sim_elf_size(const unsigned char *img);
/* Loads an ELF image in memory for API function `call` (a memfd of that
 * name, dlopen'ed through /proc/self/fd): *dl and its length.
 * CUDA_ERROR_INVALID_IMAGE for anything not ELF or that does not load (said
 * on stderr), CUDA_ERROR_OPERATING_SYSTEM. */
CUresult sim_elf_dlopen(const void *image, const char *call, void **dl, size_t *len);
/* Says on stderr why `call` could not load the ELF image `name` (its `len`
 * bytes at `image`, or NULL): CUDA device code simcuda cannot run, or
 * dlerror(). */
void sim_load_failed(const char *call, const char *name, const void *image, size_t len);
int sim_exec_memset(struct sim_op *op);
/* A copy described by CUDA_MEMCPY3D (host/device/unified sides; arrays are not simulated). */
CUresult sim_copy_from_3d(const CUDA_MEMCPY3D *p, struct sim_copy *out);
/* Queues (sync: and waits for) a copy on hs, its arguments checked first. */
CUresult sim_copy_submit(const struct sim_copy *a, CUstream hs, bool sync, bool pt);
/* Arguments of a copy checked as at the call: device sides must be allocated. */
CUresult sim_copy_check(const struct sim_copy *c);
/* Is [va, va+len) covered by device memory (allocated or a graph allocation's range)? */
bool sim_rows_covered(uint64_t a, uint64_t width, uint64_t height, uint64_t pitch);
bool sim_is_device_address(uint64_t addr);
void sim_pool_free_exec(struct sim_range *r);
/* cuMemFree of stream-ordered memory: back to its pool now, with no implicit
 * synchronisation (the driver's rule). CUDA_ERROR_NOT_FOUND if dptr is not
 * the base of live pool memory. */
CUresult sim_pool_free_now(uint64_t dptr);
/* Release pool memory above the thresholds (at synchronisation points). */
void sim_pools_trim(void);
void sim_pools_release_ctx(struct sim_ctx *c);

/* --- the compute engine (engine.c) ----------------------------------------
 * A GPU without MPS runs one context's kernels at a time and time-slices
 * between the processes that have work. simcuda does the same at kernel
 * boundaries: a kernel waits for its process's turn on the device; a
 * process's own kernels on several streams overlap; when another process
 * waits, the owner's new kernels wait too, and the engine passes to the
 * waiter once the owner's running kernels end. Each process's kernel time
 * (the engine held with a kernel of it running) is counted in the shm. */
void sim_engine_acquire(int dev);
void sim_engine_release(int dev);
/* --- capture, graphs, graph memory: see graph.h ----------------------------- */
struct sim_capture;
struct sim_gnode;
/* Is s capturing, or the legacy stream while a blocking stream of its context is? */
static inline bool sim_capture_pending(struct sim_stream *s)
{
    return __atomic_load_n(&s->cap, __ATOMIC_ACQUIRE) ||
           (s->type == SIM_STREAM_LEGACY && __atomic_load_n(&s->ctx->capturing_blocking, __ATOMIC_ACQUIRE));
}
/* The operation of a capturing stream becomes a node (capture.c). Takes op. */
CUresult sim_capture_op(struct sim_stream *s, struct sim_op *op);
/* A synchronous call on s (synchronize, query, a synchronous copy): the error
 * it is during capture, after invalidating what it must; CUDA_SUCCESS if none. */
CUresult sim_capture_sync_call(struct sim_stream *s);
/* A potentially unsafe call (cuThreadExchangeStreamCaptureMode's rule). */
CUresult sim_capture_unsafe_call(void);
/* cuCtxSynchronize of a context one of whose streams captures. */
CUresult sim_capture_ctx_sync(struct sim_ctx *c);
/* Event record / wait on a capturing stream. *handled: the capture took it. */
CUresult sim_capture_event_record(struct sim_event *e, struct sim_stream *s, unsigned flags, bool *handled);
CUresult sim_capture_wait_event(struct sim_stream *s, struct sim_event *e, unsigned flags, bool *handled);
/* Query/synchronize on an event last recorded in a capture: CUDA_ERROR_CAPTURED_EVENT. */
CUresult sim_capture_event_check(struct sim_event *e);
void sim_capture_event_gone(struct sim_event *e);
void sim_capture_stream_gone(struct sim_stream *s);
/* Stream-ordered allocation and free on a capturing stream: graph memory nodes. */
CUresult sim_capture_alloc(struct sim_stream *s, const CUmemPoolProps *props, size_t size, CUdeviceptr *out);
CUresult sim_capture_free(struct sim_stream *s, CUdeviceptr p);
bool sim_captures_active(void);

/* Graph memory seen from the other allocators (graph_mem.c). */
bool sim_gmem_covered(uint64_t va, uint64_t len);
/* cuMemFree / cuMemFreeAsync of a graph allocation: CUDA_ERROR_NOT_FOUND if p is not one. */
CUresult sim_gmem_free_sync(struct sim_ctx *c, uint64_t p);
CUresult sim_gmem_free_async(struct sim_stream *s, uint64_t p);
void sim_gmem_exec_map(struct sim_gmem *m);
void sim_gmem_exec_unmap(struct sim_gmem *m);
void sim_gmem_unref(struct sim_gmem *m);
void sim_gmem_launch_done(struct sim_gmem *m);
void sim_gmem_release_ctx(struct sim_ctx *c);

/* Managed memory (managed.c). */
int sim_managed_init(struct sim_range *r);           /* 0 or -ENOMEM */
void sim_managed_free(struct sim_range *r);     /* releases the pages' charges too */
void sim_managed_drop(struct sim_range *r);     /* the bookkeeping only */
/* Device dev touches [va, va+len) of managed range r: pages move to it, as
 * the advice allows (map lock held). */
void sim_managed_touch(struct sim_range *r, uint64_t va, uint64_t len, int dev);
void sim_exec_prefetch(struct sim_op *op);

/* Peer access (peer.c): may work of context c touch memory of range r? (map lock held) */
bool sim_peer_can_access(struct sim_ctx *c, const struct sim_range *r);
/* ... memory on device dev of another process: c has peer access to a context there. */
bool sim_peer_can_access_dev(struct sim_ctx *c, int dev);

/* --- memory and events shared between processes (share.c) -------------------
 * This process's references to machine-wide share entries. Each returns a
 * CUresult; index is the entry's (shares[index]). */
/* A new entry for the object fd of size bytes on device dev (ordinal),
 * charged to the machine; legacy: token names it. *index. */
CUresult sim_share_new(int fd, int dev, uint64_t size, bool legacy, const uint8_t *token,
                       bool charge, int *index);
/* The entry of the object fd (by inode), held once more by this process.
 * None: INVALID_VALUE, or (dev >= 0) a new one of size bytes on dev. */
CUresult sim_share_find(int fd, int dev, uint64_t size, int *index);
/* One reference of this process to shares[index] goes. */
void sim_share_put(int index);
/* One more reference to shares[index] (already held). */
void sim_share_get(int index);
/* Maps len bytes of fd shared: the host view, or NULL. */
void *sim_share_map(int fd, uint64_t len);
/* The same, every page faulted in now (a file whose pages are warm). */
void *sim_share_map_warm(int fd, uint64_t len);

/* Device memory the device keeps after a free (keep.c, SIMCUDA_DEVICE_KEEP).
 * Whether it is on (after cuInit). */
bool sim_keep_enabled(void);
/* A kept file of at least bytes on physical device phys, claimed and cut to
 * file_len: an open descriptor (its bytes are the last holder's: zero them),
 * or -1 (none; the oldest kept files then make room for fresh bytes). */
int sim_keep_take(int phys, uint64_t bytes, uint64_t file_len);
/* A fresh file of file_len bytes that can be kept, or -1. */
int sim_keep_create(uint64_t file_len);
/* The allocation fd (bytes of device phys, capacity already released) is
 * freed: kept when `keep` (nobody else can hold it), the oldest kept making
 * room; otherwise any name it has goes. fd stays the caller's to close. */
void sim_keep_release(int fd, int phys, uint64_t bytes, bool keep);
/* The ordinal this process sees the physical device phys as, or -1. */
int sim_device_ordinal_of_phys(int phys);
/* Interprocess events: a new entry (held by us), or entry index opened
 * (id and token from the handle: INVALID_VALUE if they do not match). */
CUresult sim_ipcev_new(struct sim_shm_ipcev **out, uint64_t *id);
CUresult sim_ipcev_open(uint32_t index, uint64_t id, const uint8_t token[16],
                        struct sim_shm_ipcev **out);
void sim_ipcev_put(struct sim_shm_ipcev *e, uint64_t id);
/* A record is enqueued: its ticket. It completes: done moves up to it. */
uint32_t sim_ipcev_record(struct sim_shm_ipcev *e);
void sim_ipcev_complete(struct sim_shm_ipcev *e, uint32_t ticket);
/* The ticket of the last record enqueued; whether ticket has completed. */
uint32_t sim_ipcev_last(struct sim_shm_ipcev *e);
bool sim_ipcev_reached(struct sim_shm_ipcev *e, uint32_t ticket);
/* Block until ticket completed (or the entry is gone). */
void sim_ipcev_wait(struct sim_shm_ipcev *e, uint64_t id, uint32_t ticket);
void sim_peer_forget_ctx(struct sim_ctx *c);

/* Coredumps (coredump.c). */
void sim_coredump_ctx_init(struct sim_ctx *c);
/* A device fault in c: writes a coredump if enabled there, and aborts unless told not to. */
void sim_coredump_on_fault(struct sim_ctx *c, CUresult err, const char *what);

/* --- checkpoint (checkpoint.c) --------------------------------------------- */
void sim_ckpt_park_all(void);       /* checkpoint: release capacity */
CUresult sim_ckpt_unpark_all(void); /* restore: re-acquire capacity */

#endif
