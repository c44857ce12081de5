/*
 * stream.c - streams, the default streams, and events.
 *
 * Each stream has a worker thread that runs its operations in order. An
 * operation may carry dependencies (stream, seq): it starts only when those
 * streams have completed seq. That one mechanism gives:
 *   - the legacy default stream: an op on it depends on the last op submitted
 *     to every blocking stream of the context, and an op on a blocking stream
 *     depends on the last op of the legacy stream (non-blocking streams are
 *     exempt); per-thread default streams are blocking streams;
 *   - cuStreamWaitEvent: a no-op that depends on the event's record.
 * Submission takes the context lock, so the set of "last ops" is consistent.
 * Lock order: event -> context -> stream.
 */
#include "sim.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t stream_ids;

struct sim_op *sim_op_new(enum sim_op_kind kind)
{
    struct sim_op *op = calloc(1, sizeof(*op));

    if (op)
        op->kind = kind;
    return op;
}

static void graph_op_free(struct sim_op *op)
{
    for (size_t i = 0; i < op->u.graph.n; i++)
        sim_op_free(op->u.graph.ops[i]);
    free(op->u.graph.ops);
    for (size_t i = 0; i < op->u.graph.nmems; i++)
        sim_gmem_launch_done(op->u.graph.mems[i]);
    free(op->u.graph.mems);
}

void sim_op_free(struct sim_op *op)
{
    if (!op)
        return;
    for (int i = 0; i < op->ndeps; i++)
        sim_stream_unref(op->deps[i].s);
    free(op->deps);
    switch (op->kind) {
    case SIM_OP_KERNEL:
        free(op->u.kernel.argbuf);
        break;
    case SIM_OP_EVENT:
        sim_event_unref(op->u.event);
        break;
    case SIM_OP_GRAPH:
        graph_op_free(op);
        break;
    case SIM_OP_GMEM_UNMAP:
        /* A free outside a graph holds the allocation busy (graph_mem.c). */
        if (!op->parent)
            sim_gmem_launch_done(op->u.gmem);
        break;
    default:
        break;
    }
    free(op);
}

void sim_stream_ref(struct sim_stream *s)
{
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
}

void sim_stream_unref(struct sim_stream *s)
{
    if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL))
        return;
    free(s->cdeps);
    free(s->cedges);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    free(s);
}

static uint64_t stream_done(struct sim_stream *s)
{
    return __atomic_load_n(&s->done, __ATOMIC_ACQUIRE);
}

void sim_stream_wait_seq(struct sim_stream *s, uint64_t seq)
{
    if (stream_done(s) >= seq)
        return;
    pthread_mutex_lock(&s->lock);
    while (s->done < seq)
        pthread_cond_wait(&s->done_cv, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

/* ---- execution ------------------------------------------------------------ */

/* The record's time is kept if it is still the event's last record (a graph's
 * record node stands for the graph launch's op). */
static void exec_event(struct sim_op *op, struct sim_stream *s)
{
    struct sim_event *e = op->u.event;
    uint64_t seq = op->parent ? op->parent->seq : op->seq;

    pthread_mutex_lock(&e->lock);
    if (e->s == s && e->seq == seq)
        clock_gettime(CLOCK_MONOTONIC, &e->when);
    pthread_mutex_unlock(&e->lock);
    if (e->ipc && op->ticket)
        sim_ipcev_complete(e->ipc, op->ticket);     /* other processes see it */
}

/* A graph launch: its nodes' operations in order; a fault stops the device
 * work (the context's sticky error), host nodes after it are skipped too. */
static int exec_graph(struct sim_op *op, struct sim_stream *s)
{
    int first = 0;

    for (size_t i = 0; i < op->u.graph.n; i++) {
        int res = sim_exec_op(op->u.graph.ops[i], s);

        if (res && !first) {
            first = res;
            sim_ctx_fault(s->ctx, (CUresult)res);
        }
    }
    return first;
}

int sim_exec_op(struct sim_op *op, struct sim_stream *s)
{
    struct sim_ctx *c = s->ctx;
    int dead = __atomic_load_n(&c->sticky, __ATOMIC_ACQUIRE);

    switch (op->kind) {
    case SIM_OP_COPY:
        return dead ? dead : sim_exec_copy(op);
    case SIM_OP_MEMSET:
        return dead ? dead : sim_exec_memset(op);
    case SIM_OP_KERNEL:
        return dead ? dead : sim_exec_kernel(op, c);
    case SIM_OP_HOSTFN:
        if (!dead)
            op->u.hostfn.fn(op->u.hostfn.data);
        return dead;
    case SIM_OP_CALLBACK:
        op->u.callback.fn(op->u.callback.handle, (CUresult)dead, op->u.callback.data);
        return dead;
    case SIM_OP_EVENT:
        exec_event(op, s);
        return 0;
    case SIM_OP_POOL_FREE:
        sim_pool_free_exec(op->u.pool_free.range);
        return 0;
    case SIM_OP_GRAPH:
        return exec_graph(op, s);
    case SIM_OP_GMEM_MAP:
        sim_gmem_exec_map(op->u.gmem);
        return 0;
    case SIM_OP_GMEM_UNMAP:
        sim_gmem_exec_unmap(op->u.gmem);
        return 0;
    case SIM_OP_PREFETCH:
        if (!dead)
            sim_exec_prefetch(op);
        return 0;
    case SIM_OP_IPC_WAIT:
        sim_ipcev_wait(op->u.ipcwait.ev, op->u.ipcwait.id, op->u.ipcwait.ticket);
        return 0;
    case SIM_OP_NOP:
    case SIM_OP_EXIT:
    case SIM_OP_PARK:
        return 0;
    }
    return 0;
}

static struct sim_op *next_op(struct sim_stream *s)
{
    struct sim_op *op;

    pthread_mutex_lock(&s->lock);
    while (!s->head)
        pthread_cond_wait(&s->work_cv, &s->lock);
    op = s->head;
    s->head = op->next;
    if (!s->head)
        s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    return op;
}

static void stream_leave_ctx(struct sim_stream *s)
{
    struct sim_ctx *c = s->ctx;

    pthread_mutex_lock(&c->lock);
    for (struct sim_stream **pp = &c->streams; *pp; pp = &(*pp)->next_in_ctx)
        if (*pp == s) {
            *pp = s->next_in_ctx;
            break;
        }
    c->live_workers--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->lock);
}

/* Whether an operation is the device's work (a GPU's engines do it), not
 * the host's (host functions, callbacks, bookkeeping). */
static bool is_device_work(enum sim_op_kind k)
{
    return k == SIM_OP_COPY || k == SIM_OP_MEMSET || k == SIM_OP_KERNEL || k == SIM_OP_GRAPH ||
           k == SIM_OP_PREFETCH;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Runs op, charging the CPU time of device work to the process's slot
 * (simcuda-smi's device_cpu_ns), so that a benchmark can tell the host's
 * CPU from the simulated GPU's. Threads a kernel starts it charges itself
 * (simcuda_kernel_ctx.charge_cpu). */
static int exec_accounted(struct sim_op *op, struct sim_stream *s)
{
    int dev = s->ctx ? s->ctx->dev : -1;
    uint64_t t0;
    int res;

    if (!sim_self || dev < 0 || dev >= SIM_MAX_DEVICES || !is_device_work(op->kind))
        return sim_exec_op(op, s);
    t0 = thread_cpu_ns();
    res = sim_exec_op(op, s);
    __atomic_add_fetch(&sim_self->device_cpu_ns[sim_device_phys(dev)], thread_cpu_ns() - t0,
                       __ATOMIC_RELAXED);
    return res;
}

static void *worker(void *arg)
{
    struct sim_stream *s = arg;
    bool exit_ = false;

    __atomic_store_n(&s->worker_tid, gettid(), __ATOMIC_RELEASE);
    for (;;) {
        struct sim_op *op = next_op(s);
        int res;

        for (int i = 0; i < op->ndeps; i++)
            sim_stream_wait_seq(op->deps[i].s, op->deps[i].seq);
        res = exec_accounted(op, s);
        if (res && op->kind != SIM_OP_CALLBACK && op->kind != SIM_OP_HOSTFN)
            sim_ctx_fault(s->ctx, (CUresult)res);
        if (op->result)
            *op->result = res;
        exit_ = op->kind == SIM_OP_EXIT;
        pthread_mutex_lock(&s->lock);
        if (op->kind == SIM_OP_PARK)
            s->parked = true;   /* the parker joins us; our reference stays with the stream */
        __atomic_store_n(&s->done, op->seq, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&s->done_cv);
        pthread_mutex_unlock(&s->lock);
        if (op->kind == SIM_OP_PARK) {
            sim_op_free(op);
            return NULL;
        }
        sim_op_free(op);
        if (exit_)
            break;
    }
    pthread_detach(pthread_self());
    stream_leave_ctx(s);
    sim_stream_unref(s);
    return NULL;
}

static int start_worker(struct sim_stream *s)
{
    return pthread_create(&s->worker, NULL, worker, s);
}

/* ---- parking: the checkpointed process holds no engine ---------------------- */

/*
 * pthread_join returns when the kernel clears the thread's tid, early in its
 * exit; the task is listed in /proc/self/task until the exit is over. A
 * checkpoint that returned in between would hand CRIU a thread that vanishes
 * while it is seized ("Can't dump threads"): wait until it is out of the
 * list too (tgkill's signal 0 looks without sending), at most a second.
 */
static void wait_task_gone(pid_t tid)
{
    struct timespec nap = { 0, 50000 };

    for (int i = 0; tid > 0 && i < 20000; i++) {
        if (syscall(SYS_tgkill, getpid(), tid, 0) != 0 && errno == ESRCH)
            return;
        if (i < 64)
            sched_yield();
        else
            nanosleep(&nap, NULL);
    }
}

struct park_list {
    struct sim_stream **s;
    int n, cap;
};

/* Collect c's streams that have a worker (ctx lock taken here). */
static void collect_streams(struct sim_ctx *c, void *arg)
{
    struct park_list *l = arg;

    pthread_mutex_lock(&c->lock);
    for (struct sim_stream *t = c->streams; t; t = t->next_in_ctx) {
        if (l->n == l->cap) {
            int cap = l->cap ? 2 * l->cap : 16;
            struct sim_stream **m = realloc(l->s, (size_t)cap * sizeof(*m));
            if (!m)
                break;
            l->s = m;
            l->cap = cap;
        }
        sim_stream_ref(t);
        l->s[l->n++] = t;
    }
    pthread_mutex_unlock(&c->lock);
}

static void release_list(struct park_list *l)
{
    for (int i = 0; i < l->n; i++)
        sim_stream_unref(l->s[i]);
    free(l->s);
}

void sim_streams_park(void)
{
    struct park_list l = { 0 };

    sim_ctx_foreach(collect_streams, &l);
    for (int i = 0; i < l.n; i++) {
        struct sim_stream *s = l.s[i];
        struct sim_op *op;
        bool parked;

        pthread_mutex_lock(&s->lock);
        parked = s->parked;
        pthread_mutex_unlock(&s->lock);
        if (parked || s->dying || !(op = sim_op_new(SIM_OP_PARK)))
            continue;
        if (sim_submit(s, op, NULL, 0, NULL) == CUDA_SUCCESS) {
            /* gone before CRIU looks at our threads */
            pthread_join(s->worker, NULL);
            wait_task_gone(__atomic_load_n(&s->worker_tid, __ATOMIC_ACQUIRE));
        }
    }
    release_list(&l);
}

int sim_streams_unpark(void)
{
    struct park_list l = { 0 };
    int rc = 0;

    sim_ctx_foreach(collect_streams, &l);
    for (int i = 0; i < l.n; i++) {
        struct sim_stream *s = l.s[i];

        pthread_mutex_lock(&s->lock);
        if (s->parked && !rc) {
            if ((rc = start_worker(s)) == 0)
                s->parked = false;
        }
        pthread_mutex_unlock(&s->lock);
    }
    release_list(&l);
    return -rc;
}

/* ---- submission ------------------------------------------------------------ */

static void add_dep(struct sim_op *op, struct sim_stream *t, uint64_t seq)
{
    if (stream_done(t) >= seq)
        return;
    sim_stream_ref(t);
    op->deps[op->ndeps++] = (struct sim_dep){ t, seq };
}

/* The implicit dependencies of the default-stream rules (ctx lock held). */
static void implicit_deps(struct sim_stream *s, struct sim_op *op)
{
    struct sim_ctx *c = s->ctx;

    if (s->type == SIM_STREAM_LEGACY) {
        for (struct sim_stream *t = c->streams; t; t = t->next_in_ctx)
            if (t != s && !(t->flags & CU_STREAM_NON_BLOCKING))
                add_dep(op, t, t->submitted);
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING) && c->legacy && c->legacy != s) {
        add_dep(op, c->legacy, c->legacy->submitted);
    }
}

CUresult sim_submit(struct sim_stream *s, struct sim_op *op, const struct sim_dep *extra,
                    int nextra, uint64_t *seq)
{
    struct sim_ctx *c = s->ctx;
    size_t n = (size_t)nextra;

    /* A capturing stream records the operation instead (capture.c). */
    if (op->kind != SIM_OP_EXIT && sim_capture_pending(s))
        return sim_capture_op(s, op);
    pthread_mutex_lock(&c->lock);
    for (struct sim_stream *t = c->streams; t; t = t->next_in_ctx)
        n++;
    op->deps = n ? calloc(n, sizeof(*op->deps)) : NULL;
    if (n && !op->deps) {
        pthread_mutex_unlock(&c->lock);
        sim_op_free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    implicit_deps(s, op);
    for (int i = 0; i < nextra; i++)
        add_dep(op, extra[i].s, extra[i].seq);
    op->seq = ++s->submitted;
    if (seq)
        *seq = op->seq;
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&c->lock);
    return CUDA_SUCCESS;
}

CUresult sim_submit_sync(struct sim_stream *s, struct sim_op *op)
{
    int res = 0;
    uint64_t seq;
    CUresult r;

    if ((r = sim_capture_sync_call(s))) {
        sim_op_free(op);
        return r;
    }
    op->result = &res;
    if ((r = sim_submit(s, op, NULL, 0, &seq)))
        return r;
    sim_stream_wait_seq(s, seq);
    if (res)
        return (CUresult)res;
    return (CUresult)__atomic_load_n(&s->ctx->sticky, __ATOMIC_ACQUIRE);
}

/* ---- creation and destruction ------------------------------------------- */

CUresult sim_stream_create(struct sim_ctx *c, int type, unsigned flags, int prio,
                           struct sim_stream **out)
{
    struct sim_stream *s = calloc(1, sizeof(*s));
    int rc;

    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = SIM_MAGIC_STREAM;
    s->id = __atomic_add_fetch(&stream_ids, 1, __ATOMIC_RELAXED) + 2;  /* 1, 2: legacy, per-thread */
    s->ctx = c;
    s->type = type;
    s->flags = flags;
    s->priority = prio;
    s->refs = 2;            /* the handle and the worker */
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);

    pthread_mutex_lock(&c->lock);
    rc = start_worker(s);
    if (rc) {
        pthread_mutex_unlock(&c->lock);
        s->refs = 1;
        sim_stream_unref(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->next_in_ctx = c->streams;
    c->streams = s;
    c->live_workers++;
    pthread_mutex_unlock(&c->lock);
    if (type == SIM_STREAM_USER)
        sim_handle_add(s);
    *out = s;
    return CUDA_SUCCESS;
}

/* The stream stops taking work; its worker finishes what is queued and
 * leaves. The caller's reference is dropped. */
void sim_stream_destroy(struct sim_stream *s)
{
    struct sim_ctx *c = s->ctx;
    struct sim_op *op;
    bool already;

    pthread_mutex_lock(&c->lock);
    already = s->dying;
    s->dying = true;
    pthread_mutex_unlock(&c->lock);
    if (already) {
        sim_stream_unref(s);
        return;
    }
    sim_capture_stream_gone(s);
    if (s->type == SIM_STREAM_USER)
        sim_handle_del(s);
    /* The exit op cannot be lost: retry its allocation rather than leak a
     * worker that would keep the context alive forever. */
    while (!(op = sim_op_new(SIM_OP_EXIT))) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    while (sim_submit(s, op, NULL, 0, NULL)) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
        while (!(op = sim_op_new(SIM_OP_EXIT)))
            nanosleep(&ts, NULL);
    }
    sim_stream_unref(s);
}

/* Snapshot of (stream, submitted) for every stream of c, referenced. */
static size_t ctx_snapshot(struct sim_ctx *c, struct sim_dep **out)
{
    size_t n = 0, k = 0;
    struct sim_dep *v;

    pthread_mutex_lock(&c->lock);
    for (struct sim_stream *t = c->streams; t; t = t->next_in_ctx)
        n++;
    v = calloc(n ? n : 1, sizeof(*v));
    if (v)
        for (struct sim_stream *t = c->streams; t; t = t->next_in_ctx) {
            sim_stream_ref(t);
            v[k++] = (struct sim_dep){ t, t->submitted };
        }
    pthread_mutex_unlock(&c->lock);
    *out = v;
    return k;
}

CUresult sim_ctx_sync(struct sim_ctx *c)
{
    struct sim_dep *v;
    size_t n = ctx_snapshot(c, &v);

    if (!v)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++) {
        sim_stream_wait_seq(v[i].s, v[i].seq);
        sim_stream_unref(v[i].s);
    }
    free(v);
    sim_pools_trim();
    return (CUresult)__atomic_load_n(&c->sticky, __ATOMIC_ACQUIRE);
}

bool sim_ctx_idle(struct sim_ctx *c)
{
    bool idle = true;

    pthread_mutex_lock(&c->lock);
    for (struct sim_stream *t = c->streams; t; t = t->next_in_ctx)
        if (stream_done(t) < t->submitted && !(t->dying && stream_done(t) + 1 == t->submitted))
            idle = false;
    pthread_mutex_unlock(&c->lock);
    return idle;
}

void sim_ctx_streams_teardown(struct sim_ctx *c)
{
    struct sim_dep *v;
    size_t n;

    sim_ctx_sync(c);
    n = ctx_snapshot(c, &v);
    for (size_t i = 0; v && i < n; i++) {
        struct sim_stream *s = v[i].s;
        bool dying;

        pthread_mutex_lock(&c->lock);
        dying = s->dying;
        pthread_mutex_unlock(&c->lock);
        if (!dying) {
            sim_stream_ref(s);          /* sim_stream_destroy drops one */
            sim_stream_destroy(s);
            /* The handle's own reference goes too (user and legacy streams;
             * a per-thread stream's is held by its thread). */
            if (s->type != SIM_STREAM_PERTHREAD)
                sim_stream_unref(s);
        }
        sim_stream_unref(s);
    }
    free(v);
    pthread_mutex_lock(&c->lock);
    while (c->live_workers)
        pthread_cond_wait(&c->cv, &c->lock);
    pthread_mutex_unlock(&c->lock);
}

/* ---- per-thread default streams ------------------------------------------ */

#define PTDS_MAX 16
struct ptds_entry {
    uint64_t ctx_id;
    struct sim_stream *s;
};
static __thread struct ptds_entry ptds[PTDS_MAX];
static __thread int nptds;
static pthread_key_t ptds_key;
static pthread_once_t ptds_once = PTHREAD_ONCE_INIT;

/* Thread exit: its per-thread default streams go away. */
static void ptds_cleanup(void *unused)
{
    (void)unused;
    for (int i = 0; i < nptds; i++) {
        struct sim_stream *s = ptds[i].s;

        sim_stream_ref(s);
        sim_stream_destroy(s);      /* no-op if the context already tore it down */
        sim_stream_unref(s);
    }
    nptds = 0;
}

static void ptds_key_init(void)
{
    pthread_key_create(&ptds_key, ptds_cleanup);
}

static CUresult ptds_get(struct sim_ctx *c, struct sim_stream **out)
{
    CUresult r;
    int j = 0;

    /* Drop entries of contexts that are gone. */
    for (int i = 0; i < nptds; i++) {
        struct sim_stream *s = ptds[i].s;
        bool dead = __atomic_load_n(&s->dying, __ATOMIC_ACQUIRE);

        if (!dead && ptds[i].ctx_id == c->id && s->ctx == c) {
            *out = s;
            return CUDA_SUCCESS;
        }
        if (dead)
            sim_stream_unref(s);
        else
            ptds[j++] = ptds[i];
    }
    nptds = j;
    if (nptds == PTDS_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_once(&ptds_once, ptds_key_init);
    if ((r = sim_stream_create(c, SIM_STREAM_PERTHREAD, 0, 0, out)))
        return r;
    ptds[nptds++] = (struct ptds_entry){ c->id, *out };
    pthread_setspecific(ptds_key, (void *)1);
    return CUDA_SUCCESS;
}

CUresult sim_stream_get(CUstream h, bool per_thread, struct sim_stream **out)
{
    struct sim_ctx *c;
    struct sim_stream *s;
    CUresult r;

    if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        if ((r = sim_ctx_current(&c)))
            return r;
        if (h == CU_STREAM_PER_THREAD || (!h && per_thread))
            return ptds_get(c, out);
        *out = c->legacy;
        return CUDA_SUCCESS;
    }
    s = (struct sim_stream *)h;
    if (!sim_handle_ok(s, SIM_MAGIC_STREAM))
        return CUDA_ERROR_INVALID_HANDLE;
    if ((r = (CUresult)__atomic_load_n(&s->ctx->sticky, __ATOMIC_ACQUIRE)))
        return r;
    *out = s;
    return CUDA_SUCCESS;
}

/* ---- stream API ---------------------------------------------------------------- */

static CUresult stream_create(CUstream *ph, unsigned flags, int prio)
{
    struct sim_ctx *c;
    struct sim_stream *s;
    CUresult r;

    SIM_BEGIN();
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_ctx_current(&c)))
        return r;
    /* Priorities outside [greatest, least] = [-5, 0] are clamped, as documented. */
    prio = prio < -5 ? -5 : prio > 0 ? 0 : prio;
    if ((r = sim_stream_create(c, SIM_STREAM_USER, flags, prio, &s)))
        return r;
    *ph = (CUstream)s;
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return stream_create(phStream, Flags, 0);
}
SIM_EXPORT(cuStreamCreate);

CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    return stream_create(phStream, flags, priority);
}
SIM_EXPORT(cuStreamCreateWithPriority);

CUresult cuStreamDestroy_v2(CUstream hStream)
{
    struct sim_stream *s = (struct sim_stream *)hStream;

    SIM_BEGIN();
    if (!sim_handle_ok(s, SIM_MAGIC_STREAM))
        return CUDA_ERROR_INVALID_HANDLE;
    sim_stream_destroy(s);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuStreamDestroy_v2);

CUresult cuStreamDestroy(CUstream hStream)
{
    return cuStreamDestroy_v2(hStream);
}
SIM_EXPORT(cuStreamDestroy);

CUresult sim_stream_sync(struct sim_stream *s)
{
    uint64_t target;

    pthread_mutex_lock(&s->ctx->lock);
    target = s->submitted;
    pthread_mutex_unlock(&s->ctx->lock);
    sim_stream_wait_seq(s, target);
    sim_pools_trim();
    return (CUresult)__atomic_load_n(&s->ctx->sticky, __ATOMIC_ACQUIRE);
}

static CUresult stream_sync(CUstream h, bool pt)
{
    struct sim_stream *s;
    CUresult r;

    SIM_BEGIN();
    if ((r = sim_stream_get(h, pt, &s)) || (r = sim_capture_sync_call(s)) ||
        (r = sim_capture_unsafe_call()))
        return r;
    return sim_stream_sync(s);
}

CUresult cuStreamSynchronize(CUstream hStream) { return stream_sync(hStream, false); }
SIM_EXPORT(cuStreamSynchronize);
CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return stream_sync(hStream, true); }
SIM_EXPORT(cuStreamSynchronize_ptsz);

static CUresult stream_query(CUstream h, bool pt)
{
    struct sim_stream *s;
    uint64_t target;
    CUresult r;

    SIM_BEGIN();
    if ((r = sim_stream_get(h, pt, &s)) || (r = sim_capture_sync_call(s)) ||
        (r = sim_capture_unsafe_call()))
        return r;
    pthread_mutex_lock(&s->ctx->lock);
    target = s->submitted;
    pthread_mutex_unlock(&s->ctx->lock);
    return stream_done(s) >= target ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuStreamQuery(CUstream hStream) { return stream_query(hStream, false); }
SIM_EXPORT(cuStreamQuery);
CUresult cuStreamQuery_ptsz(CUstream hStream) { return stream_query(hStream, true); }
SIM_EXPORT(cuStreamQuery_ptsz);

static CUresult stream_get_flags(CUstream h, unsigned *flags, bool pt)
{
    struct sim_stream *s;
    CUresult r;

    SIM_BEGIN();
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_stream_get(h, pt, &s)))
        return r;
    *flags = s->flags;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags) { return stream_get_flags(hStream, flags, false); }
SIM_EXPORT(cuStreamGetFlags);
CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags) { return stream_get_flags(hStream, flags, true); }
SIM_EXPORT(cuStreamGetFlags_ptsz);

static CUresult stream_get_priority(CUstream h, int *prio, bool pt)
{
    struct sim_stream *s;
    CUresult r;

    SIM_BEGIN();
    if (!prio)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_stream_get(h, pt, &s)))
        return r;
    *prio = s->priority;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetPriority(CUstream hStream, int *priority) { return stream_get_priority(hStream, priority, false); }
SIM_EXPORT(cuStreamGetPriority);
CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority) { return stream_get_priority(hStream, priority, true); }
SIM_EXPORT(cuStreamGetPriority_ptsz);

static CUresult stream_get_ctx(CUstream h, CUcontext *pctx, bool pt)
{
    struct sim_stream *s;
    CUresult r;

    SIM_BEGIN();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_stream_get(h, pt, &s)))
        return r;
    *pctx = (CUcontext)s->ctx;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx) { return stream_get_ctx(hStream, pctx, false); }
SIM_EXPORT(cuStreamGetCtx);
CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx) { return stream_get_ctx(hStream, pctx, true); }
SIM_EXPORT(cuStreamGetCtx_ptsz);

/* CUDA 12.5: with the stream's green context, which simcuda never has. */
static CUresult stream_get_ctx_v2(CUstream h, CUcontext *pctx, CUgreenCtx *pgreen, bool pt)
{
    CUresult r;

    if (!pgreen)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = stream_get_ctx(h, pctx, pt)))
        return r;
    *pgreen = NULL;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    return stream_get_ctx_v2(hStream, pCtx, pGreenCtx, false);
}
SIM_EXPORT(cuStreamGetCtx_v2);
CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    return stream_get_ctx_v2(hStream, pCtx, pGreenCtx, true);
}
SIM_EXPORT(cuStreamGetCtx_v2_ptsz);

static CUresult stream_get_id(CUstream h, unsigned long long *id, bool pt)
{
    struct sim_stream *s;
    CUresult r;

    SIM_BEGIN();
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_stream_get(h, pt, &s)))
        return r;
    *id = s->type == SIM_STREAM_LEGACY ? 1 : s->id;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId) { return stream_get_id(hStream, streamId, false); }
SIM_EXPORT(cuStreamGetId);
CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId) { return stream_get_id(hStream, streamId, true); }
SIM_EXPORT(cuStreamGetId_ptsz);

static CUresult stream_get_device(CUstream h, CUdevice *dev, bool pt)
{
    struct sim_stream *s;
    CUresult r;

    SIM_BEGIN();
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_stream_get(h, pt, &s)))
        return r;
    *dev = s->ctx->dev;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device) { return stream_get_device(hStream, device, false); }
SIM_EXPORT(cuStreamGetDevice);
CUresult cuStreamGetDevice_ptsz(CUstream hStream, CUdevice *device) { return stream_get_device(hStream, device, true); }
SIM_EXPORT(cuStreamGetDevice_ptsz);

static CUresult launch_host(CUstream h, struct sim_op *op, bool pt)
{
    struct sim_stream *s;
    CUresult r;

    if ((r = sim_stream_get(h, pt, &s))) {
        sim_op_free(op);
        return r;
    }
    if (op->kind == SIM_OP_CALLBACK)
        op->u.callback.handle = h;
    return sim_submit(s, op, NULL, 0, NULL);
}

static CUresult add_callback(CUstream h, CUstreamCallback cb, void *data, unsigned flags, bool pt)
{
    struct sim_op *op;

    SIM_BEGIN();
    if (!cb || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(op = sim_op_new(SIM_OP_CALLBACK)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.callback.fn = cb;
    op->u.callback.data = data;
    return launch_host(h, op, pt);
}

CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags)
{
    return add_callback(hStream, callback, userData, flags, false);
}
SIM_EXPORT(cuStreamAddCallback);
CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags)
{
    return add_callback(hStream, callback, userData, flags, true);
}
SIM_EXPORT(cuStreamAddCallback_ptsz);

static CUresult launch_host_func(CUstream h, CUhostFn fn, void *data, bool pt)
{
    struct sim_op *op;

    SIM_BEGIN();
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(op = sim_op_new(SIM_OP_HOSTFN)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.hostfn.fn = fn;
    op->u.hostfn.data = data;
    return launch_host(h, op, pt);
}

CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) { return launch_host_func(hStream, fn, userData, false); }
SIM_EXPORT(cuLaunchHostFunc);
CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData) { return launch_host_func(hStream, fn, userData, true); }
SIM_EXPORT(cuLaunchHostFunc_ptsz);

/* ---- events ---------------------------------------------------------------- */

void sim_event_ref(struct sim_event *e)
{
    __atomic_add_fetch(&e->refs, 1, __ATOMIC_RELAXED);
}

void sim_event_unref(struct sim_event *e)
{
    if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL))
        return;
    if (e->s)
        sim_stream_unref(e->s);
    if (e->ipc)
        sim_ipcev_put(e->ipc, e->ipc_id);
    free(e->cnodes);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

CUresult sim_event_get(CUevent h, struct sim_event **out)
{
    struct sim_event *e = (struct sim_event *)h;

    if (!sim_handle_ok(e, SIM_MAGIC_EVENT))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = e;
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    struct sim_ctx *c;
    struct sim_event *e;
    CUresult r;

    SIM_BEGIN();
    if (!phEvent || (Flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_ctx_current(&c)))
        return r;
    if (!(e = calloc(1, sizeof(*e))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((Flags & CU_EVENT_INTERPROCESS) && (r = sim_ipcev_new(&e->ipc, &e->ipc_id))) {
        free(e);
        return r;
    }
    e->magic = SIM_MAGIC_EVENT;
    e->flags = Flags;
    e->refs = 1;
    e->ctx = c;
    pthread_mutex_init(&e->lock, NULL);
    sim_handle_add(e);
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuEventCreate);

/*
 * IPC event handles (interprocess events only: CUDA_ERROR_INVALID_VALUE
 * for others). The event's records live in the machine-wide shm (share.c):
 * the handle names its entry (index, id, and 16 random bytes), and every
 * process that opens it sees the records any of them makes, through
 * cuEventQuery, cuEventSynchronize and cuStreamWaitEvent.
 */
#define IPC_EVENT_MAGIC "simIPCe1"
struct ipc_event_handle {
    char magic[8];
    uint32_t index;
    int32_t pid;             /* the exporter (for people reading a handle) */
    uint64_t id;
    uint8_t token[16];
    uint8_t _zero[24];
};
_Static_assert(sizeof(struct ipc_event_handle) == sizeof(CUipcEventHandle), "a handle is 64 bytes");

CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    struct ipc_event_handle h = { .pid = (int32_t)getpid() };
    struct sim_event *e;
    CUresult r;

    SIM_BEGIN();
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_event_get(event, &e)))
        return r;
    if (!(e->flags & CU_EVENT_INTERPROCESS) || !e->ipc)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(h.magic, IPC_EVENT_MAGIC, sizeof(h.magic));
    h.index = (uint32_t)(e->ipc - sim_shm->ipcevs);
    h.id = e->ipc_id;
    memcpy(h.token, e->ipc->token, sizeof(h.token));
    memcpy(pHandle, &h, sizeof(h));
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuIpcGetEventHandle);

/* A handle that is not one, or whose event every process has destroyed:
 * CUDA_ERROR_INVALID_VALUE. The opened event belongs to the current context. */
CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    struct ipc_event_handle h;
    struct sim_ctx *c;
    struct sim_event *e;
    CUresult r;

    SIM_BEGIN();
    if (!phEvent)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_ctx_current(&c)))
        return r;
    memcpy(&h, &handle, sizeof(h));
    if (memcmp(h.magic, IPC_EVENT_MAGIC, sizeof(h.magic)))
        return CUDA_ERROR_INVALID_VALUE;
    if (!(e = calloc(1, sizeof(*e))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = sim_ipcev_open(h.index, h.id, h.token, &e->ipc))) {
        free(e);
        return r;
    }
    e->ipc_id = h.id;
    e->magic = SIM_MAGIC_EVENT;
    e->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
    e->refs = 1;
    e->ctx = c;
    pthread_mutex_init(&e->lock, NULL);
    sim_handle_add(e);
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuIpcOpenEventHandle);

static CUresult event_destroy(CUevent h)
{
    struct sim_event *e;
    CUresult r;

    SIM_BEGIN();
    if ((r = sim_event_get(h, &e)))
        return r;
    sim_handle_del(e);
    sim_capture_event_gone(e);
    sim_event_unref(e);     /* pending records keep it alive until they run */
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent hEvent) { return event_destroy(hEvent); }
SIM_EXPORT(cuEventDestroy_v2);
CUresult cuEventDestroy(CUevent hEvent) { return event_destroy(hEvent); }
SIM_EXPORT(cuEventDestroy);

static CUresult event_record(CUevent h, CUstream hs, unsigned flags, bool pt)
{
    struct sim_event *e;
    struct sim_stream *s;
    struct sim_op *op;
    uint64_t seq;
    uint32_t ticket = 0;
    CUresult r;

    SIM_BEGIN();
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_event_get(h, &e)) || (r = sim_stream_get(hs, pt, &s)))
        return r;
    if (s->ctx != e->ctx)
        return CUDA_ERROR_INVALID_HANDLE;
    if (sim_capture_pending(s) || __atomic_load_n(&e->cap, __ATOMIC_ACQUIRE)) {
        bool handled;

        if ((r = sim_capture_event_record(e, s, flags, &handled)) || handled)
            return r;
    }
    if (!(op = sim_op_new(SIM_OP_EVENT)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    __atomic_add_fetch(&e->refs, 1, __ATOMIC_RELAXED);
    op->u.event = e;
    pthread_mutex_lock(&e->lock);
    if (e->ipc)
        op->ticket = ticket = sim_ipcev_record(e->ipc);
    if ((r = sim_submit(s, op, NULL, 0, &seq)) == CUDA_SUCCESS) {
        sim_stream_ref(s);
        if (e->s)
            sim_stream_unref(e->s);
        e->s = s;
        e->seq = seq;
    } else if (e->ipc) {
        sim_ipcev_complete(e->ipc, ticket);     /* no record: nobody waits for it */
    }
    pthread_mutex_unlock(&e->lock);
    return r;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream, 0, false); }
SIM_EXPORT(cuEventRecord);
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream, 0, true); }
SIM_EXPORT(cuEventRecord_ptsz);
CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return event_record(hEvent, hStream, flags, false);
}
SIM_EXPORT(cuEventRecordWithFlags);
CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return event_record(hEvent, hStream, flags, true);
}
SIM_EXPORT(cuEventRecordWithFlags_ptsz);

void sim_event_target(struct sim_event *e, struct sim_dep *d)
{
    pthread_mutex_lock(&e->lock);
    d->s = e->s;
    d->seq = e->seq;
    if (d->s)
        sim_stream_ref(d->s);
    pthread_mutex_unlock(&e->lock);
}

CUresult cuEventQuery(CUevent hEvent)
{
    struct sim_event *e;
    struct sim_dep d;
    CUresult r;

    SIM_BEGIN();
    if ((r = sim_event_get(hEvent, &e)) || (r = sim_capture_event_check(e)) ||
        (r = sim_capture_unsafe_call()))
        return r;
    if (e->ipc) {           /* the last record, whichever process made it */
        r = sim_ipcev_reached(e->ipc, sim_ipcev_last(e->ipc)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
        return r ? r : (CUresult)__atomic_load_n(&e->ctx->sticky, __ATOMIC_ACQUIRE);
    }
    sim_event_target(e, &d);
    if (!d.s)
        return CUDA_SUCCESS;
    r = stream_done(d.s) >= d.seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    sim_stream_unref(d.s);
    if (!r)
        r = (CUresult)__atomic_load_n(&e->ctx->sticky, __ATOMIC_ACQUIRE);
    return r;
}
SIM_EXPORT(cuEventQuery);

CUresult cuEventSynchronize(CUevent hEvent)
{
    struct sim_event *e;
    struct sim_dep d;
    CUresult r;

    SIM_BEGIN();
    if ((r = sim_event_get(hEvent, &e)) || (r = sim_capture_event_check(e)) ||
        (r = sim_capture_unsafe_call()))
        return r;
    if (e->ipc) {
        sim_ipcev_wait(e->ipc, e->ipc_id, sim_ipcev_last(e->ipc));
        return (CUresult)__atomic_load_n(&e->ctx->sticky, __ATOMIC_ACQUIRE);
    }
    sim_event_target(e, &d);
    if (d.s) {
        sim_stream_wait_seq(d.s, d.seq);
        sim_stream_unref(d.s);
    }
    sim_pools_trim();
    return (CUresult)__atomic_load_n(&e->ctx->sticky, __ATOMIC_ACQUIRE);
}
SIM_EXPORT(cuEventSynchronize);

static CUresult elapsed(float *ms, CUevent hs, CUevent he)
{
    struct sim_event *a, *b;
    struct sim_dep da, db;
    CUresult r;

    SIM_BEGIN();
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_event_get(hs, &a)) || (r = sim_event_get(he, &b)) ||
        (r = sim_capture_event_check(a)) || (r = sim_capture_event_check(b)))
        return r;
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_HANDLE;
    sim_event_target(a, &da);
    sim_event_target(b, &db);
    if (!da.s || !db.s)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (stream_done(da.s) < da.seq || stream_done(db.s) < db.seq)
        r = CUDA_ERROR_NOT_READY;
    if (da.s)
        sim_stream_unref(da.s);
    if (db.s)
        sim_stream_unref(db.s);
    if (r)
        return r;
    pthread_mutex_lock(&a->lock);
    struct timespec ta = a->when;
    pthread_mutex_unlock(&a->lock);
    pthread_mutex_lock(&b->lock);
    struct timespec tb = b->when;
    pthread_mutex_unlock(&b->lock);
    *ms = (float)((double)(tb.tv_sec - ta.tv_sec) * 1e3 + (double)(tb.tv_nsec - ta.tv_nsec) / 1e6);
    return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) { return elapsed(pMilliseconds, hStart, hEnd); }
SIM_EXPORT(cuEventElapsedTime);
CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd) { return elapsed(pMilliseconds, hStart, hEnd); }
SIM_EXPORT(cuEventElapsedTime_v2);

static CUresult wait_event(CUstream hs, CUevent he, unsigned flags, bool pt)
{
    struct sim_stream *s;
    struct sim_event *e;
    struct sim_dep d;
    struct sim_op *op;
    CUresult r;

    SIM_BEGIN();
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_stream_get(hs, pt, &s)) || (r = sim_event_get(he, &e)))
        return r;
    if (sim_capture_pending(s) || __atomic_load_n(&e->cap, __ATOMIC_ACQUIRE)) {
        bool handled;

        if ((r = sim_capture_wait_event(s, e, flags, &handled)) || handled)
            return r;
    }
    if (e->ipc) {           /* the worker waits for the last record seen now */
        uint32_t t = sim_ipcev_last(e->ipc);

        if (sim_ipcev_reached(e->ipc, t))
            return CUDA_SUCCESS;
        if (!(op = sim_op_new(SIM_OP_IPC_WAIT)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        op->u.ipcwait.ev = e->ipc;
        op->u.ipcwait.id = e->ipc_id;
        op->u.ipcwait.ticket = t;
        return sim_submit(s, op, NULL, 0, NULL);
    }
    sim_event_target(e, &d);
    if (!d.s)
        return CUDA_SUCCESS;    /* never recorded: nothing to wait for */
    if (!(op = sim_op_new(SIM_OP_NOP))) {
        sim_stream_unref(d.s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r = sim_submit(s, op, &d, 1, NULL);
    sim_stream_unref(d.s);
    return r;
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) { return wait_event(hStream, hEvent, Flags, false); }
SIM_EXPORT(cuStreamWaitEvent);
CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) { return wait_event(hStream, hEvent, Flags, true); }
SIM_EXPORT(cuStreamWaitEvent_ptsz);
