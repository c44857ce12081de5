/*
 * graph_train - a training step captured once into a CUDA graph and replayed,
 * as torch.cuda.graphs and vLLM's decode graphs do.
 *
 * The step allocates its temporaries with cuMemAllocAsync and frees them
 * (graph memory owned by the graph), allocates the loss and leaves it
 * allocated (the program reads it after each replay and frees it), forks a
 * side stream for the loss, and calls a host function. A workspace is
 * allocated with cuMemAlloc during the capture in relaxed mode, as PyTorch's
 * allocator does. The batch comes from a step counter on the device, so each
 * replay trains on new data. The last line is the checksum of the weights,
 * the momentum, the step counter and every replay's loss (FNV-1a 64): the
 * loss is read after the replay, from memory the graph left allocated.
 *
 *   graph_train [--eager] [--replays N] [--mb M] [--sleep-ms T]
 *               [--capture-pause-ms T] [--self-suspend K] [--pause-at R:T]
 *               [--explicit-mem-node DIR] [--print-every K] [--kernels PATH]
 *
 * --eager runs the same step without a graph: it must give the same
 * checksum. --sleep-ms: host time between a launch and reading its loss, so
 * that a suspend may land while the replay runs. --capture-pause-ms: a pause
 * in the middle of the capture (prints "capturing" first). --self-suspend K:
 * under tcgpu, every K replays the program suspends and resumes itself
 * (tcgpu_suspend/tcgpu_resume) right after launching, while the replay runs
 * and before it reads the loss the replay leaves in graph memory.
 * --pause-at R:T: after launching replay R, prints "paused R" and waits T ms
 * before reading its loss (a save or suspend can land there for sure).
 * --explicit-mem-node DIR: before the capture, holds state a checkpoint
 * cannot restore and lets it go in three stages, each waiting (at most 60 s)
 * for a file DIR/N its driver creates: "holding" an IPC event handle
 * (cuIpcGetEventHandle) and a graph whose memory node was added explicitly
 * (cuGraphAddMemAllocNode: the driver's memory, which tcgpu leaves to it),
 * launched once and leaving its 1 MiB allocated; after DIR/1, "released":
 * the event and the graphs destroyed, the graph's memory still allocated;
 * after DIR/2, "freed": the memory freed with cuMemFree, then training goes on.
 */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

struct opts {
    int eager, replays, print_every, self_suspend, pause_at;
    unsigned mb, sleep_ms, capture_pause_ms, pause_ms;
    const char *kernels, *explicit_dir;
};

struct model {
    CUfunction init, gen, fwd, bwd, loss, sgd, inc;
    CUdeviceptr w, m, step, ws;
    uint64_t n;
    CUstream s, side;
    CUevent fork, join;
    int host_steps;
};

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    while (ms && nanosleep(&ts, &ts))
        ;
}

static void launch(CUfunction f, CUstream s, void **args, const char *what)
{
    cu(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), what);
}

static void count_step(void *arg)
{
    __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST);
}

/* One training step on md->s (and md->side); *loss_out: where its loss is. */
static void step(struct model *md, const struct opts *o, CUdeviceptr *loss_out)
{
    CUdeviceptr x, act, grad, loss;
    uint64_t n = md->n, seed = 7;
    float lr = 0.01f;
    size_t bytes = n * sizeof(float);

    cu(cuMemAllocAsync(&x, bytes, md->s), "cuMemAllocAsync(x)");
    cu(cuMemAllocAsync(&act, bytes, md->s), "cuMemAllocAsync(act)");
    cu(cuMemAllocAsync(&grad, bytes, md->s), "cuMemAllocAsync(grad)");
    cu(cuMemAllocAsync(&loss, sizeof(float), md->s), "cuMemAllocAsync(loss)");
    void *ga[] = { &x, &n, &md->step, &seed };
    launch(md->gen, md->s, ga, "gen_batch");
    cu(cuMemsetD32Async(grad, 0, n, md->s), "cuMemsetD32Async");
    void *fa[] = { &md->w, &x, &act, &n };
    launch(md->fwd, md->s, fa, "forward");
    void *ba[] = { &act, &x, &grad, &md->ws, &n };
    launch(md->bwd, md->s, ba, "backward");
    if (o->capture_pause_ms && !o->eager) {
        printf("capturing\n");
        fflush(stdout);
        sleep_ms(o->capture_pause_ms);
    }
    cu(cuEventRecord(md->fork, md->s), "cuEventRecord(fork)");
    cu(cuStreamWaitEvent(md->side, md->fork, 0), "cuStreamWaitEvent(side)");
    void *la[] = { &md->ws, &loss, &n };
    launch(md->loss, md->side, la, "loss");
    cu(cuEventRecord(md->join, md->side), "cuEventRecord(join)");
    void *sa[] = { &md->w, &md->m, &grad, &n, &lr };
    launch(md->sgd, md->s, sa, "sgd");
    void *ia[] = { &md->step };
    launch(md->inc, md->s, ia, "step_inc");
    cu(cuLaunchHostFunc(md->s, count_step, &md->host_steps), "cuLaunchHostFunc");
    cu(cuStreamWaitEvent(md->s, md->join, 0), "cuStreamWaitEvent(join)");
    cu(cuMemFreeAsync(x, md->s), "cuMemFreeAsync(x)");
    cu(cuMemFreeAsync(act, md->s), "cuMemFreeAsync(act)");
    cu(cuMemFreeAsync(grad, md->s), "cuMemFreeAsync(grad)");
    *loss_out = loss;
}

/* The step captured once; the workspace allocated inside, in relaxed mode. */
static void capture(struct model *md, const struct opts *o, CUgraphExec *x, CUgraph *g, CUdeviceptr *loss)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;

    cu(cuStreamBeginCapture(md->s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    cu(cuThreadExchangeStreamCaptureMode(&mode), "cuThreadExchangeStreamCaptureMode");
    cu(cuMemAlloc(&md->ws, md->n * sizeof(float)), "cuMemAlloc(workspace) in capture");
    cu(cuThreadExchangeStreamCaptureMode(&mode), "cuThreadExchangeStreamCaptureMode");
    step(md, o, loss);
    cu(cuStreamEndCapture(md->s, g), "cuStreamEndCapture");
    cu(cuGraphInstantiate(x, *g, 0), "cuGraphInstantiate");
}

/* Prints `what` and waits until the file dir/n exists (at most 60 s). */
static void stage(const char *what, const char *dir, int n)
{
    char path[PATH_MAX];

    printf("%s\n", what);
    fflush(stdout);
    snprintf(path, sizeof(path), "%s/%d", dir, n);
    for (int waited = 0; access(path, F_OK) != 0; waited += 10) {
        if (waited >= 60000) {
            fprintf(stderr, "graph_train: %s never appeared\n", path);
            exit(1);
        }
        sleep_ms(10);
    }
}

/*
 * An IPC event handle and a graph with a memory node of the driver's
 * (allocation node only: its 1 MiB outlives the launch), each held, then
 * destroyed, then the graph's memory freed (--explicit-mem-node DIR).
 */
static void explicit_mem_node(CUstream s, const char *dir)
{
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    CUipcEventHandle eh;
    CUgraphNode an;
    CUgraphExec x;
    CUevent ev;
    CUgraph g;

    cu(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING), "cuEventCreate(interprocess)");
    cu(cuIpcGetEventHandle(&eh, ev), "cuIpcGetEventHandle");
    memset(&p, 0, sizeof(p));
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = 0;
    p.bytesize = 1 << 20;
    cu(cuGraphCreate(&g, 0), "cuGraphCreate");
    cu(cuGraphAddMemAllocNode(&an, g, NULL, 0, &p), "cuGraphAddMemAllocNode");
    cu(cuGraphInstantiate(&x, g, 0), "cuGraphInstantiate");
    cu(cuGraphLaunch(x, s), "cuGraphLaunch(explicit)");
    cu(cuMemsetD8Async(p.dptr, 7, p.bytesize, s), "cuMemsetD8Async(graph memory)");
    cu(cuStreamSynchronize(s), "cuStreamSynchronize(explicit)");
    stage("holding an IPC event and a graph with an explicit memory node", dir, 1);
    cu(cuEventDestroy(ev), "cuEventDestroy(interprocess)");
    cu(cuGraphExecDestroy(x), "cuGraphExecDestroy(explicit)");
    cu(cuGraphDestroy(g), "cuGraphDestroy(explicit)");
    stage("released the event and the graph, its memory still allocated", dir, 2);
    cu(cuMemFree(p.dptr), "cuMemFree(graph memory)");
    printf("freed the graph memory\n");
    fflush(stdout);
}

/* tcgpu_suspend(NULL) + tcgpu_resume() when libtcgpu.so is loaded. */
static void self_suspend(int replay)
{
    int (*suspend)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "tcgpu_suspend");
    int (*resume)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "tcgpu_resume");
    int rc;

    if (!suspend || !resume) {
        fprintf(stderr, "graph_train: --self-suspend needs libtcgpu.so\n");
        exit(2);
    }
    if ((rc = suspend(NULL)) || (rc = resume())) {
        fprintf(stderr, "graph_train: self-suspend at replay %d: %d\n", replay, rc);
        exit(1);
    }
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t checksum(struct model *md, uint64_t losses)
{
    size_t bytes = md->n * sizeof(float);
    unsigned char *buf = malloc(bytes);
    uint64_t h = 14695981039346656037ull, steps;

    if (!buf) {
        fprintf(stderr, "graph_train: out of memory\n");
        exit(1);
    }
    cu(cuMemcpyDtoH(buf, md->w, bytes), "cuMemcpyDtoH(w)");
    h = fnv(h, buf, bytes);
    cu(cuMemcpyDtoH(buf, md->m, bytes), "cuMemcpyDtoH(m)");
    h = fnv(h, buf, bytes);
    cu(cuMemcpyDtoH(&steps, md->step, sizeof(steps)), "cuMemcpyDtoH(step)");
    free(buf);
    h = fnv(h, &steps, sizeof(steps));
    return fnv(h, &losses, sizeof(losses));
}

static void load(struct model *md, const char *path)
{
    CUmodule mod;

    cu(cuModuleLoad(&mod, path), "cuModuleLoad");
    cu(cuModuleGetFunction(&md->init, mod, "init"), "init");
    cu(cuModuleGetFunction(&md->gen, mod, "gen_batch"), "gen_batch");
    cu(cuModuleGetFunction(&md->fwd, mod, "forward"), "forward");
    cu(cuModuleGetFunction(&md->bwd, mod, "backward"), "backward");
    cu(cuModuleGetFunction(&md->loss, mod, "loss"), "loss");
    cu(cuModuleGetFunction(&md->sgd, mod, "sgd"), "sgd");
    cu(cuModuleGetFunction(&md->inc, mod, "step_inc"), "step_inc");
}

static void parse(int argc, char **argv, struct opts *o, char *kpath, size_t len)
{
    *o = (struct opts){ .replays = 100, .print_every = 10, .mb = 16 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!strcmp(a, "--eager"))
            o->eager = 1;
        else if (!strcmp(a, "--replays") && v)
            o->replays = atoi(argv[++i]);
        else if (!strcmp(a, "--mb") && v)
            o->mb = (unsigned)atoi(argv[++i]);
        else if (!strcmp(a, "--sleep-ms") && v)
            o->sleep_ms = (unsigned)atoi(argv[++i]);
        else if (!strcmp(a, "--capture-pause-ms") && v)
            o->capture_pause_ms = (unsigned)atoi(argv[++i]);
        else if (!strcmp(a, "--self-suspend") && v)
            o->self_suspend = atoi(argv[++i]);
        else if (!strcmp(a, "--pause-at") && v && sscanf(v, "%d:%u", &o->pause_at, &o->pause_ms) == 2)
            i++;
        else if (!strcmp(a, "--explicit-mem-node") && v)
            o->explicit_dir = argv[++i];
        else if (!strcmp(a, "--print-every") && v)
            o->print_every = atoi(argv[++i]);
        else if (!strcmp(a, "--kernels") && v)
            o->kernels = argv[++i];
        else {
            fprintf(stderr, "graph_train: bad argument %s\n", a);
            exit(2);
        }
    }
    if (!o->kernels) {
        char self[PATH_MAX];

        snprintf(self, sizeof(self), "%s", argv[0]);
        snprintf(kpath, len, "%s/graph_kernels.so", dirname(self));
        o->kernels = kpath;
    }
    if (o->replays <= 0 || !o->mb) {
        fprintf(stderr, "graph_train: --replays and --mb must be positive\n");
        exit(2);
    }
}

int main(int argc, char **argv)
{
    char kpath[PATH_MAX];
    struct opts o;
    struct model md = { 0 };
    CUgraphExec x = NULL;
    CUgraph g = NULL;
    CUdeviceptr loss = 0;
    CUcontext ctx;
    uint64_t seed = 1, losses = 14695981039346656037ull;

    parse(argc, argv, &o, kpath, sizeof(kpath));
    md.n = ((uint64_t)o.mb << 20) / 4 / sizeof(float);
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    load(&md, o.kernels);
    cu(cuStreamCreate(&md.s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    cu(cuStreamCreate(&md.side, CU_STREAM_NON_BLOCKING), "cuStreamCreate(side)");
    cu(cuEventCreate(&md.fork, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    cu(cuEventCreate(&md.join, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    cu(cuMemAlloc(&md.w, md.n * sizeof(float)), "cuMemAlloc(w)");
    cu(cuMemAlloc(&md.m, md.n * sizeof(float)), "cuMemAlloc(m)");
    cu(cuMemAlloc(&md.step, sizeof(uint64_t)), "cuMemAlloc(step)");
    cu(cuMemsetD32(md.step, 0, 2), "cuMemsetD32(step)");
    void *ia[] = { &md.w, &md.m, &md.n, &seed };
    launch(md.init, md.s, ia, "init");
    printf("graph_train: %s, %u MiB, %d replays\n", o.eager ? "eager" : "graph", o.mb, o.replays);
    if (o.explicit_dir)
        explicit_mem_node(md.s, o.explicit_dir);
    if (o.eager)
        cu(cuMemAlloc(&md.ws, md.n * sizeof(float)), "cuMemAlloc(workspace)");
    else
        capture(&md, &o, &x, &g, &loss);
    printf("captured\n");
    fflush(stdout);

    for (int i = 0; i < o.replays; i++) {
        float lv = 0;

        if (o.eager)
            step(&md, &o, &loss);
        else
            cu(cuGraphLaunch(x, md.s), "cuGraphLaunch");
        if (o.self_suspend && i % o.self_suspend == o.self_suspend / 2)
            self_suspend(i);
        if (o.pause_ms && i == o.pause_at) {
            printf("paused %d\n", i);
            fflush(stdout);
            sleep_ms(o.pause_ms);
        }
        sleep_ms(o.sleep_ms);                  /* host work while the step runs */
        cu(cuMemcpyDtoHAsync(&lv, loss, sizeof(lv), md.s), "cuMemcpyDtoHAsync(loss)");
        cu(cuStreamSynchronize(md.s), "cuStreamSynchronize");
        cu(cuMemFreeAsync(loss, md.s), "cuMemFreeAsync(loss)");
        losses = fnv(losses, &lv, sizeof(lv));
        if (o.print_every && (i % o.print_every == 0 || i == o.replays - 1)) {
            printf("replay %d loss %.6f\n", i, lv);
            fflush(stdout);
        }
    }
    cu(cuStreamSynchronize(md.s), "cuStreamSynchronize");
    if (md.host_steps != o.replays) {
        fprintf(stderr, "graph_train: the host function ran %d times for %d steps\n", md.host_steps, o.replays);
        return 1;
    }
    printf("checksum: %016llx\n", (unsigned long long)checksum(&md, losses));
    if (x) {
        cu(cuGraphExecDestroy(x), "cuGraphExecDestroy");
        cu(cuGraphDestroy(g), "cuGraphDestroy");
    }
    cu(cuMemFree(md.ws), "cuMemFree(workspace)");
    return 0;
}
