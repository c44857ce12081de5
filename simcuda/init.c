/*
 * init.c - cuInit, devices, contexts, and the API gate.
 */
#include "sim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct sim_shm *sim_shm;
struct sim_shm_proc *sim_self;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
static bool initialized;
static bool forked;          /* a fork child cannot use its parent's device state */
static const char *shm_name;

const char *sim_shm_name(void)
{
    return shm_name;
}

/* ---- the gate ------------------------------------------------------------ */

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_closed;
static int gate_inflight;
static __thread int gate_depth;

int sim_gate_enter(void)
{
    if (gate_depth++ > 0)
        return 1;
    pthread_mutex_lock(&gate_lock);
    while (gate_closed)
        pthread_cond_wait(&gate_cv, &gate_lock);
    gate_inflight++;
    pthread_mutex_unlock(&gate_lock);
    return 1;
}

void sim_gate_leave(int *token)
{
    (void)token;
    if (--gate_depth > 0)
        return;
    pthread_mutex_lock(&gate_lock);
    gate_inflight--;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_lock);
}

static void idle_one(struct sim_ctx *c, void *arg)
{
    if (!sim_ctx_idle(c))
        *(bool *)arg = false;
}

static bool device_idle(void)
{
    bool idle = true;

    sim_ctx_foreach(idle_one, &idle);
    return idle;
}

/* Close the gate and wait until no API call is in flight and all submitted
 * work is done. On timeout the gate opens again (the process stays RUNNING). */
CUresult sim_gate_close(unsigned timeout_ms)
{
    struct timespec deadline;

    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&gate_lock);
    gate_closed = true;
    for (;;) {
        if (!gate_inflight) {
            pthread_mutex_unlock(&gate_lock);
            if (device_idle())
                return CUDA_SUCCESS;
            pthread_mutex_lock(&gate_lock);
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (timeout_ms && (now.tv_sec > deadline.tv_sec ||
                           (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec)))
            break;
        /* Stream completions do not signal gate_cv: poll every millisecond. */
        now.tv_nsec += 1000000L;
        if (now.tv_nsec >= 1000000000L) {
            now.tv_sec++;
            now.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&gate_cv, &gate_lock, &now);
    }
    gate_closed = false;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_lock);
    return CUDA_ERROR_NOT_READY;
}

void sim_gate_open(void)
{
    pthread_mutex_lock(&gate_lock);
    gate_closed = false;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_lock);
}

/* ---- cuInit -------------------------------------------------------------- */

bool sim_initialized(void)
{
    return initialized && !forked;
}

static void comm_of_self(char *buf, size_t len)
{
    FILE *f = fopen("/proc/self/comm", "re");

    buf[0] = 0;
    if (f) {
        if (fgets(buf, (int)len, f))
            buf[strcspn(buf, "\n")] = 0;
        fclose(f);
    }
}

static void at_fork_child(void)
{
    forked = true;
}

/* Leave the device when the process exits normally (a killed process is
 * reaped by the others instead). Forked children never owned the slot. */
__attribute__((destructor)) static void sim_exit(void)
{
    if (!sim_self || forked)
        return;
    sim_shm_lock(sim_shm);
    if (sim_ckpt_owns(sim_self))
        sim_shm_release(sim_shm, sim_self);
    sim_shm_unlock(sim_shm);
}

static CUresult attach(void)
{
    char comm[64];
    int rc;

    if ((rc = sim_shm_open(&sim_shm, &shm_name))) {
        const char *name = getenv("SIMCUDA_SHM") ? getenv("SIMCUDA_SHM") : "/simcuda";
        sim_log("cannot open shm %s: %s%s%s%s", name, strerror(-rc),
                rc == -EPROTO ? ": a machine of another simcuda build, which a process still maps "
                                "(stop it, or name another SIMCUDA_SHM than " : "",
                rc == -EPROTO ? name : "", rc == -EPROTO ? ")" : "");
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    if (sim_visible_init(sim_shm->ndev) == 0)
        return CUDA_ERROR_NO_DEVICE;        /* CUDA_VISIBLE_DEVICES hides them all */
    if ((rc = sim_vmem_init())) {
        sim_log("cannot reserve the device address space: %s", strerror(-rc));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    comm_of_self(comm, sizeof(comm));
    sim_shm_lock(sim_shm);
    sim_shm_reap(sim_shm);
    sim_self = sim_ckpt_claim(comm);
    sim_shm_unlock(sim_shm);
    if (!sim_self) {
        sim_log("too many processes attached to %s (max %d)", shm_name, SIM_MAX_PROCS);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if ((rc = sim_attach_resources())) {
        sim_log("cannot open the device: %s", strerror(-rc));
        goto err;
    }
    if ((rc = sim_service_start())) {
        sim_log("cannot start the service thread: %s", strerror(-rc));
        sim_detach_resources();
        goto err;
    }
    return CUDA_SUCCESS;
err:
    sim_shm_lock(sim_shm);
    sim_shm_release(sim_shm, sim_self);
    sim_shm_unlock(sim_shm);
    sim_self = NULL;
    return CUDA_ERROR_OPERATING_SYSTEM;
}

static void do_init(void)
{
    pthread_atfork(NULL, NULL, at_fork_child);
    init_result = attach();
    if (init_result == CUDA_SUCCESS)
        __atomic_store_n(&initialized, true, __ATOMIC_RELEASE);
}

CUresult cuInit(unsigned int Flags)
{
    SIM_GATE();
    if (Flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (forked)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_once(&init_once, do_init);
    return init_result;
}
SIM_EXPORT(cuInit);

CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDriverGetVersion);

/* ---- devices ------------------------------------------------------------- */

void sim_set_machine(struct sim_shm *s, const char *name)
{
    static char moved[64];

    snprintf(moved, sizeof(moved), "%s", name);
    sim_shm = s;
    shm_name = moved;
}

/* The machine's capacity of the device this process calls dev. */
uint64_t sim_device_capacity(int dev)
{
    return sim_shm->capacity[sim_device_phys(dev)];
}

static bool dev_ok(CUdevice d)
{
    return d >= 0 && d < sim_device_count();
}

CUresult cuDeviceGetCount(int *count)
{
    SIM_BEGIN();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim_device_count();
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceGetCount);

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    SIM_BEGIN();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceGet);

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    SIM_BEGIN();
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", SIM_DEVICE_NAME);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceGetName);

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    SIM_BEGIN();
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = sim_device_capacity(dev);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceTotalMem_v2);

/* H100-like values; anything not listed answers 0 (feature absent). */
static int attribute_value(CUdevice_attribute a, CUdevice dev)
{
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 52428800;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: return 0;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x10 + sim_device_phys(dev);
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: return 0;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: return sim_device_phys(dev);
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: return 2;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: return 0;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: return 0;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    /* shareable allocations and IPC events (share.c); fabric and Windows handles: no */
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return 32505856;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: return 134213632;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return 0;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: return 4;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: return 0;
    default: return 0;
    }
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    SIM_BEGIN();
    if (!pi || (int)attrib < 1 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *pi = attribute_value(attrib, dev);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceGetAttribute);

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    SIM_BEGIN();
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_device_uuid_phys(sim_device_phys(dev), uuid);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceGetUuid);

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid(uuid, dev);
}
SIM_EXPORT(cuDeviceGetUuid_v2);

CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    SIM_BEGIN();
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", 0x10 + sim_device_phys(dev));
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceGetPCIBusId);

CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    unsigned dom, bus, slot, fn;

    SIM_BEGIN();
    if (!dev || !pciBusId)
        return CUDA_ERROR_INVALID_VALUE;
    if (sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &slot, &fn) != 4 &&
        (dom = 0, sscanf(pciBusId, "%x:%x.%x", &bus, &slot, &fn) != 3))
        return CUDA_ERROR_INVALID_VALUE;
    if (dom || slot || fn)
        return CUDA_ERROR_INVALID_DEVICE;
    /* the bus id is the physical device's: a hidden one is not found */
    for (int d = 0; d < sim_device_count(); d++)
        if (sim_device_phys(d) == (int)bus - 0x10) {
            *dev = d;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_DEVICE;
}
SIM_EXPORT(cuDeviceGetByPCIBusId);

CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    SIM_BEGIN();
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *major = 9;
    *minor = 0;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceComputeCapability);

/* ---- contexts -------------------------------------------------------------- */

#define CTX_STACK 64
static __thread struct sim_ctx *ctx_stack[CTX_STACK];
static __thread int ctx_depth;

static pthread_mutex_t ctx_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_ctx *primaries[SIM_MAX_DEVICES];
struct ctx_node {
    struct sim_ctx *c;
    struct ctx_node *next;
};
static struct ctx_node *user_ctxs;
static uint64_t ctx_ids;

void sim_ctx_foreach(void (*fn)(struct sim_ctx *, void *), void *arg)
{
    pthread_mutex_lock(&ctx_list_lock);
    for (int i = 0; i < SIM_MAX_DEVICES; i++)
        if (primaries[i] && primaries[i]->active)
            fn(primaries[i], arg);
    for (struct ctx_node *n = user_ctxs; n; n = n->next)
        fn(n->c, arg);
    pthread_mutex_unlock(&ctx_list_lock);
}

static void ctx_init_sync(struct sim_ctx *c)
{
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cv, NULL);
}

/* Bring a context to life: its legacy default stream. */
/*
 * Device memory a context itself takes (code, stacks, driver heaps: a few
 * hundred MiB on a real GPU), from SIMCUDA_CONTEXT_MEM, default 0. Tests set
 * it to tell "the program's memory was released" from "the context was
 * released too" (the driver checkpoint API releases both).
 */
static uint64_t context_bytes(void)
{
    return sim_parse_size(getenv("SIMCUDA_CONTEXT_MEM"), 0);
}

static CUresult ctx_activate(struct sim_ctx *c, unsigned flags)
{
    CUresult r;

    c->charged = context_bytes();
    if (c->charged && (r = sim_capacity_charge(c->dev, c->charged)))
        return r;
    c->id = __atomic_add_fetch(&ctx_ids, 1, __ATOMIC_RELAXED);
    c->flags = flags;
    c->sticky = 0;
    c->streams = NULL;
    c->live_workers = 0;
    c->npeers = 0;
    c->capturing = c->capturing_blocking = 0;
    sim_coredump_ctx_init(c);
    r = sim_stream_create(c, SIM_STREAM_LEGACY, 0, 0, &c->legacy);
    if (r) {
        if (c->charged)
            sim_capacity_release(c->dev, c->charged);
        return r;
    }
    c->active = true;
    return CUDA_SUCCESS;
}

/* Everything a context owns goes: work drains, streams, memory, modules. */
static void ctx_deactivate(struct sim_ctx *c)
{
    if (c->charged)
        sim_capacity_release(c->dev, c->charged);
    c->charged = 0;
    c->active = false;
    sim_ctx_streams_teardown(c);
    c->legacy = NULL;
    sim_pools_release_ctx(c);
    sim_gmem_release_ctx(c);
    sim_mem_release_ctx(c);
    sim_modules_release_ctx(c);
    sim_peer_forget_ctx(c);
}

struct sim_ctx *sim_ctx_current_raw(void)
{
    return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
}

CUresult sim_ctx_check(CUcontext h, struct sim_ctx **out)
{
    struct sim_ctx *c = (struct sim_ctx *)h;

    if (!sim_handle_ok(c, SIM_MAGIC_CTX) || !c->active)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

CUresult sim_ctx_current(struct sim_ctx **out)
{
    struct sim_ctx *c = sim_ctx_current_raw();
    CUresult r;

    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if ((r = sim_ctx_check((CUcontext)c, out)))
        return r;
    r = (CUresult)__atomic_load_n(&c->sticky, __ATOMIC_ACQUIRE);
    return r;
}

void sim_ctx_fault(struct sim_ctx *c, CUresult err)
{
    int zero = 0;

    __atomic_compare_exchange_n(&c->sticky, &zero, (int)err, false,
                                __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

static struct sim_ctx *ctx_alloc(int dev, bool primary)
{
    struct sim_ctx *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->magic = SIM_MAGIC_CTX;
    c->dev = dev;
    c->primary = primary;
    ctx_init_sync(c);
    sim_handle_add(c);
    return c;
}

static void ctx_free(struct sim_ctx *c)
{
    sim_handle_del(c);
    c->magic = 0;
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cv);
    free(c);
}

static CUresult primary_get(CUdevice dev, struct sim_ctx **out)
{
    CUresult r = CUDA_SUCCESS;

    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&ctx_list_lock);
    if (!primaries[dev] && !(primaries[dev] = ctx_alloc(dev, true)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    *out = primaries[dev];
    pthread_mutex_unlock(&ctx_list_lock);
    return r;
}

/* Primary context state changes are serialised by this lock. */
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned primary_flags[SIM_MAX_DEVICES];

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = primary_get(dev, &c)))
        return r;
    pthread_mutex_lock(&primary_lock);
    if (!c->active)
        r = ctx_activate(c, primary_flags[dev]);
    if (!r) {
        c->retain++;
        *pctx = (CUcontext)c;
    }
    pthread_mutex_unlock(&primary_lock);
    return r;
}
SIM_EXPORT(cuDevicePrimaryCtxRetain);

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if ((r = primary_get(dev, &c)))
        return r;
    pthread_mutex_lock(&primary_lock);
    if (c->retain <= 0) {
        r = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--c->retain == 0) {
        ctx_deactivate(c);
    }
    pthread_mutex_unlock(&primary_lock);
    return r;
}
SIM_EXPORT(cuDevicePrimaryCtxRelease_v2);

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}
SIM_EXPORT(cuDevicePrimaryCtxRelease);

/* Reset destroys the primary context's resources now; retains stay counted. */
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if ((r = primary_get(dev, &c)))
        return r;
    pthread_mutex_lock(&primary_lock);
    if (c->active) {
        ctx_deactivate(c);
        if (c->retain > 0)
            r = ctx_activate(c, primary_flags[dev]);
    }
    pthread_mutex_unlock(&primary_lock);
    return r;
}
SIM_EXPORT(cuDevicePrimaryCtxReset_v2);

CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}
SIM_EXPORT(cuDevicePrimaryCtxReset);

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = primary_get(dev, &c)))
        return r;
    pthread_mutex_lock(&primary_lock);
    *flags = primary_flags[dev];
    *active = c->active;
    pthread_mutex_unlock(&primary_lock);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDevicePrimaryCtxGetState);

#define CTX_FLAGS_MASK (CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX | \
                        CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS)

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    SIM_BEGIN();
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (flags & ~(unsigned)CTX_FLAGS_MASK)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&primary_lock);
    primary_flags[dev] = flags;
    if (primaries[dev] && primaries[dev]->active)
        primaries[dev]->flags = flags;
    pthread_mutex_unlock(&primary_lock);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDevicePrimaryCtxSetFlags_v2);

CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}
SIM_EXPORT(cuDevicePrimaryCtxSetFlags);

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    struct sim_ctx *c;
    struct ctx_node *n;
    CUresult r;

    SIM_BEGIN();
    if (!pctx || (flags & ~(unsigned)CTX_FLAGS_MASK))
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (ctx_depth == CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n = malloc(sizeof(*n));
    c = ctx_alloc(dev, false);
    if (!n || !c) {
        free(n);
        if (c)
            ctx_free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if ((r = ctx_activate(c, flags))) {
        free(n);
        ctx_free(c);
        return r;
    }
    n->c = c;
    pthread_mutex_lock(&ctx_list_lock);
    n->next = user_ctxs;
    user_ctxs = n;
    pthread_mutex_unlock(&ctx_list_lock);
    ctx_stack[ctx_depth++] = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}
SIM_EXPORT(cuCtxCreate);

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}
SIM_EXPORT(cuCtxCreate_v2);

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                        unsigned int flags, CUdevice dev)
{
    /* Execution affinity (SM partitioning) is not simulated. */
    if (numParams > 0 && paramsArray)
        return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    return ctx_create(pctx, flags, dev);
}
SIM_EXPORT(cuCtxCreate_v3);

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                        unsigned int flags, CUdevice dev)
{
    /* Execution affinity as for cuCtxCreate_v3; graphics interop (CIG) is
     * not simulated. */
    if (ctxCreateParams && ctxCreateParams->numExecAffinityParams > 0 && ctxCreateParams->execAffinityParams)
        return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    if (ctxCreateParams && ctxCreateParams->cigParams)
        return CUDA_ERROR_NOT_SUPPORTED;
    return ctx_create(pctx, flags, dev);
}
SIM_EXPORT(cuCtxCreate_v4);
SIM_PARTIAL(cuCtxCreate_v4,
    "graphics-interop (CIG) contexts: CUDA_ERROR_NOT_SUPPORTED; execution affinity: "
    "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY");

/* Pop every occurrence of c from this thread's stack. */
static void ctx_unstack(struct sim_ctx *c)
{
    int j = 0;

    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] != c)
            ctx_stack[j++] = ctx_stack[i];
    ctx_depth = j;
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    struct sim_ctx *c;
    struct ctx_node **pp, *n = NULL;

    SIM_BEGIN();
    if (!sim_handle_ok(ctx, SIM_MAGIC_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    c = (struct sim_ctx *)ctx;
    if (c->primary)
        return CUDA_ERROR_INVALID_CONTEXT;   /* primary contexts are released, not destroyed */
    pthread_mutex_lock(&ctx_list_lock);
    for (pp = &user_ctxs; *pp; pp = &(*pp)->next)
        if ((*pp)->c == c) {
            n = *pp;
            *pp = n->next;
            break;
        }
    pthread_mutex_unlock(&ctx_list_lock);
    if (!n)
        return CUDA_ERROR_INVALID_CONTEXT;
    free(n);
    ctx_unstack(c);
    ctx_deactivate(c);
    ctx_free(c);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxDestroy_v2);

CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}
SIM_EXPORT(cuCtxDestroy);

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    SIM_BEGIN();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)sim_ctx_current_raw();
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxGetCurrent);

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    struct sim_ctx *c = NULL;

    SIM_BEGIN();
    if (ctx && sim_ctx_check(ctx, &c))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx) {
        if (ctx_depth)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!ctx_depth)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = c;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxSetCurrent);

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    struct sim_ctx *c;

    SIM_BEGIN();
    if (sim_ctx_check(ctx, &c))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = c;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxPushCurrent_v2);

CUresult cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}
SIM_EXPORT(cuCtxPushCurrent);

CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    SIM_BEGIN();
    if (!ctx_depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    ctx_depth--;
    if (pctx)
        *pctx = (CUcontext)ctx_stack[ctx_depth];
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxPopCurrent_v2);

CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}
SIM_EXPORT(cuCtxPopCurrent);

/* The current context, valid even if it has a sticky error. */
static CUresult current_valid(struct sim_ctx **c)
{
    CUresult r = sim_ctx_current(c);

    return r == CUDA_ERROR_INVALID_CONTEXT ? r : CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = current_valid(&c)))
        return r;
    *device = c->dev;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxGetDevice);

/* CUDA 13: the device of ctx, or of the current context where ctx is NULL. */
CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = ctx ? sim_ctx_check(ctx, &c) : current_valid(&c)))
        return r;
    *device = c->dev;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxGetDevice_v2);

CUresult cuCtxGetFlags(unsigned int *flags)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = current_valid(&c)))
        return r;
    *flags = c->flags;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxGetFlags);

CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (!ctxId)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx)
        r = sim_ctx_check(ctx, &c);
    else
        r = current_valid(&c);
    if (r)
        return r;
    *ctxId = c->id;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxGetId);

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    r = ctx ? sim_ctx_check(ctx, &c) : current_valid(&c);
    if (r)
        return r;
    *version = 3020;    /* what a context made through the _v2 ABI reports */
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxGetApiVersion);

/* Not while a stream of the context captures: it would wait for work that
 * only exists in a graph (the captures are invalidated). */
static CUresult ctx_synchronize(struct sim_ctx *c)
{
    CUresult r;

    if ((r = sim_capture_ctx_sync(c)) || (r = sim_capture_unsafe_call()))
        return r;
    return sim_ctx_sync(c);
}

CUresult cuCtxSynchronize(void)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if ((r = sim_ctx_current(&c)))
        return r;
    return ctx_synchronize(c);
}
SIM_EXPORT(cuCtxSynchronize);

/* CUDA 13: ctx, or the current context where ctx is NULL. A sticky error
 * of the context is its answer, as for cuCtxSynchronize. */
CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (!ctx)
        r = sim_ctx_current(&c);
    else if (!(r = sim_ctx_check(ctx, &c)))
        r = (CUresult)__atomic_load_n(&c->sticky, __ATOMIC_ACQUIRE);
    if (r)
        return r;
    return ctx_synchronize(c);
}
SIM_EXPORT(cuCtxSynchronize_v2);

CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    SIM_BEGIN();
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxGetStreamPriorityRange);

static size_t limits[CU_LIMIT_MAX] = {
    [CU_LIMIT_STACK_SIZE] = 1024,
    [CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20,
    [CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20,
    [CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2,
    [CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048,
    [CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64,
    [CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0,
};

CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (!pvalue || (unsigned)limit >= CU_LIMIT_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = current_valid(&c)))
        return r;
    *pvalue = limits[limit];
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxGetLimit);

CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if ((unsigned)limit >= CU_LIMIT_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = current_valid(&c)))
        return r;
    limits[limit] = value;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxSetLimit);

CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    SIM_BEGIN();
    if (!pconfig)
        return CUDA_ERROR_INVALID_VALUE;
    *pconfig = CU_FUNC_CACHE_PREFER_NONE;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxGetCacheConfig);

CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    SIM_BEGIN();
    (void)config;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCtxSetCacheConfig);

