/*
 * ddp.c - data-parallel training over the NCCL API: N ranks (processes), one
 * GPU each, every step
 *
 *   ddp_grad    pseudo-gradients of the rank's own data (seed, rank, step)
 *               at the current weights, into g[0..n); g[n] = the rank's vote
 *               to pause (its --pause-file exists)
 *   AllReduce   sum of g[0..n] over the ranks, in place, on the same stream
 *   ddp_apply   w -= lr / nranks * g: every rank applies the same average
 *
 * and the stream is synchronised. The weights start equal on every rank and
 * the all-reduce gives every rank the same bytes, so they stay equal: at the
 * end each rank prints "rank R checksum: <16 hex>", FNV-1a 64 of its weights,
 * the same on every rank and in every uninterrupted run with the same flags.
 *
 * Rendezvous: rank 0 makes the NCCL unique id and publishes it in --id-file
 * (written aside, then linked into place: a reader sees all 128 bytes or no
 * file; an existing file is refused, as a stale id would join ranks to a
 * dead rendezvous); the other ranks wait for the file (60 s at most). Once
 * ncclCommInitRank returns on rank 0, every rank has read the id: rank 0
 * removes the file.
 *
 * Pauses between steps, for tests: the sum of the votes is known to every
 * rank after the step, so when any rank saw its pause file, all of them
 * pause after the same step ("rank R paused after step K"), with no
 * collective in flight, until their pause files are gone ("rank R goes on").
 *
 * Without --rank, ddp is a launcher: it runs ranks 0..N-1 as child processes
 * (CUDA_VISIBLE_DEVICES untouched), a temporary id file unless --id-file is
 * given, stops the others when one fails, and exits with the first failure's
 * status (0 when every rank succeeded).
 *
 * --hold-file PATH, for tests too: while PATH exists, a rank that has queued a
 * step waits before synchronising with it ("rank R holds step K"), its
 * all-reduce queued and no CUDA call in flight.
 *
 * --split 1: the ranks also split the communicator by parity
 * (ncclCommSplit: color rank % 2, key rank), and every step each half sums
 * step + 1 over its ranks with an all-reduce on its own communicator,
 * checked once the step is synchronised (a wrong sum: "rank R: the split
 * communicator summed X, want Y", exit 1). The weights are the same bytes
 * as without it.
 *
 * --own-suspend K: every K steps, once the step is synchronised, the ranks
 * release their communicators' memory themselves and take it back
 * (ncclCommSuspend(NCCL_SUSPEND_MEM), ncclCommResume: collective), as vLLM
 * does around its own sleep.
 *
 * --exchange alltoall|gather|scatter: every step, before the sum, the ranks
 * move their gradients between each other with NCCL 2.28's collective of
 * that name, through a buffer X of n floats (b = n / nranks floats, the
 * vote left alone):
 *   alltoall  rank r's block j (g[j b, (j + 1) b)) becomes rank j's block r
 *   gather    rank 0's block j becomes rank j's first block (root: rank 0)
 *   scatter   rank r's first block becomes rank 0's block r (root: rank 0)
 * then the all-reduce sums as before: the same bytes on every rank, and a
 * checksum of the exchange's own (none, the default, leaves every checksum
 * as without the option). The step's first collective is then the
 * exchange, so that a test can catch a rank there.
 *
 * --threads 1: one process, every rank a thread of it driving device R, the
 * communicators made at once by ncclCommInitAll (as PyTorch's DataParallel
 * makes them); no rendezvous, and the same bytes as ranks in processes.
 * Needs as many visible devices as ranks; not with --split or --rank.
 *
 * Output: "rank R step K" once step K is queued, then the line above. A
 * failing CUDA or NCCL call prints "rank R: cuXxx failed: NAME (code)" or
 * "rank R: ncclXxx failed: text" and exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <nccl.h>

#define DDP_KERNELS_FILE "ddp_kernels.so"
#define DDP_ID_WAIT_S 60
#define DDP_LR 0.05f

static const char usage[] =
    "usage: ddp --nranks N [--rank R] [--id-file PATH] [--steps S] [--mb M] [--seed X]\n"
    "           [--sleep-ms T] [--pause-file PATH] [--hold-file PATH] [--device D]\n"
    "           [--kernels PATH] [--p2p 1] [--split 1] [--own-suspend K]\n"
    "           [--exchange alltoall|gather|scatter|none] [--threads 1]\n"
    "  --nranks N         ranks of the job (1..64)\n"
    "  --rank R           this process's rank; without it, run all N ranks as children\n"
    "  --id-file PATH     where rank 0 publishes the NCCL unique id (needed with --rank)\n"
    "  --steps S          training steps (100)\n"
    "  --mb M             MiB of weights per rank (4)\n"
    "  --seed X           data and initialisation seed (1)\n"
    "  --sleep-ms T       sleep T ms after each step (0)\n"
    "  --pause-file PATH  pause all ranks after the step where PATH exists, until it is gone\n"
    "  --hold-file PATH   while PATH exists, wait before synchronising with a queued step\n"
    "  --device D         the GPU (default: rank modulo the visible GPUs)\n"
    "  --kernels PATH     kernel module (default: " DDP_KERNELS_FILE " beside the executable)\n"
    "  --p2p 1            sum the gradients by ncclReduce and a chain of ncclSend/ncclRecv\n"
    "                     (the same bytes as the all-reduce), plus a grouped ring exchange\n"
    "  --split 1          also split the ranks by parity (ncclCommSplit) and all-reduce\n"
    "                     a checked count on each half's communicator every step\n"
    "  --own-suspend K    every K steps, ncclCommSuspend(NCCL_SUSPEND_MEM) and\n"
    "                     ncclCommResume of every communicator, after the step\n"
    "  --exchange KIND    before each step's sum, move the gradients between the ranks\n"
    "                     with ncclAlltoAll, ncclGather or ncclScatter (none)\n"
    "  --threads 1        every rank a thread of one process, on device R, its communicator\n"
    "                     one of ncclCommInitAll's (not with --rank or --split)\n";

/* --exchange */
enum ddp_exchange { EX_NONE, EX_ALLTOALL, EX_GATHER, EX_SCATTER };
static const char *const exchange_names[] = { "none", "alltoall", "gather", "scatter" };

struct ddp_opts {
    int rank, nranks, device;
    long steps, mb, sleep_ms;
    int p2p, split, threads;
    long own_suspend;
    enum ddp_exchange exchange;
    uint64_t seed;
    const char *id_file, *pause_file, *hold_file, *kernels;
};

static __thread int g_rank = -1;

static void cu_check(CUresult r, const char *expr)
{
    const char *name = NULL;

    if (r == CUDA_SUCCESS)
        return;
    if (cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "unknown CUresult";
    fprintf(stderr, "rank %d: %.*s failed: %s (%d)\n", g_rank, (int)strcspn(expr, "( "), expr,
            name, (int)r);
    exit(1);
}

static void nccl_check(ncclResult_t r, const char *expr)
{
    if (r == ncclSuccess)
        return;
    fprintf(stderr, "rank %d: %.*s failed: %s (%d)\n", g_rank, (int)strcspn(expr, "( "), expr,
            ncclGetErrorString(r), (int)r);
    exit(1);
}

#define CK(call) cu_check((call), #call)
#define NK(call) nccl_check((call), #call)

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

/* "ddp: <what> <flag>" and the usage, exit 2 */
static void die_usage(const char *what, const char *flag)
{
    fprintf(stderr, "ddp: %s %s\n%s", what, flag, usage);
    exit(2);
}

static long parse_long(const char *flag, const char *s, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 0);
    if (errno || end == s || *end || v < min || v > max)
        die_usage("bad value for", flag);
    return v;
}

static enum ddp_exchange parse_exchange(const char *flag, const char *s)
{
    for (size_t i = 0; i < sizeof(exchange_names) / sizeof(exchange_names[0]); i++)
        if (!strcmp(s, exchange_names[i]))
            return (enum ddp_exchange)i;
    die_usage("bad value for", flag);
    return EX_NONE;
}

static void parse_opts(int argc, char **argv, struct ddp_opts *o)
{
    *o = (struct ddp_opts){ .rank = -1, .nranks = 0, .device = -1, .steps = 100, .mb = 4,
                            .sleep_ms = 0, .seed = 1 };
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            fputs(usage, stdout);
            exit(0);
        }
        if (i + 1 >= argc)
            die_usage("needs a value (or is unknown):", f);
        const char *v = argv[++i];
        if (!strcmp(f, "--rank"))
            o->rank = (int)parse_long(f, v, 0, 63);
        else if (!strcmp(f, "--nranks"))
            o->nranks = (int)parse_long(f, v, 1, 64);
        else if (!strcmp(f, "--id-file"))
            o->id_file = v;
        else if (!strcmp(f, "--steps"))
            o->steps = parse_long(f, v, 1, 100000000);
        else if (!strcmp(f, "--mb"))
            o->mb = parse_long(f, v, 1, 1 << 16);
        else if (!strcmp(f, "--seed"))
            o->seed = (uint64_t)parse_long(f, v, 0, (1L << 62));
        else if (!strcmp(f, "--sleep-ms"))
            o->sleep_ms = parse_long(f, v, 0, 3600000);
        else if (!strcmp(f, "--pause-file"))
            o->pause_file = v;
        else if (!strcmp(f, "--hold-file"))
            o->hold_file = v;
        else if (!strcmp(f, "--device"))
            o->device = (int)parse_long(f, v, 0, 1023);
        else if (!strcmp(f, "--kernels"))
            o->kernels = v;
        else if (!strcmp(f, "--p2p"))
            o->p2p = (int)parse_long(f, v, 0, 1);
        else if (!strcmp(f, "--split"))
            o->split = (int)parse_long(f, v, 0, 1);
        else if (!strcmp(f, "--own-suspend"))
            o->own_suspend = parse_long(f, v, 0, 1000000);
        else if (!strcmp(f, "--exchange"))
            o->exchange = parse_exchange(f, v);
        else if (!strcmp(f, "--threads"))
            o->threads = (int)parse_long(f, v, 0, 1);
        else
            die_usage("unknown option", f);
    }
    if (!o->nranks)
        die_usage("missing", "--nranks");
    if (o->rank >= o->nranks)
        die_usage("--nranks must be above", "--rank");
    if (o->rank >= 0 && !o->id_file)
        die_usage("--rank needs", "--id-file");
    if (o->threads && (o->rank >= 0 || o->split))
        die_usage("--threads 1 goes without", o->split ? "--split" : "--rank");
}

/* Rank 0: publish the id at path, refusing an existing file. */
static void id_publish(const char *path, const ncclUniqueId *id)
{
    char tmp[4200];
    int fd;

    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || write(fd, id, sizeof(*id)) != (ssize_t)sizeof(*id) || close(fd)) {
        fprintf(stderr, "rank 0: cannot write %s: %s\n", tmp, strerror(errno));
        unlink(tmp);
        exit(1);
    }
    if (link(tmp, path)) {
        int e = errno;
        unlink(tmp);
        fprintf(stderr, "rank 0: cannot publish the unique id at %s: %s%s\n", path, strerror(e),
                e == EEXIST ? " (a stale id file? remove it, or give a fresh path)" : "");
        exit(1);
    }
    unlink(tmp);
}

/* Ranks 1..N-1: wait for the id at path (DDP_ID_WAIT_S at most). */
static void id_wait(const char *path, int rank, ncclUniqueId *id)
{
    for (int i = 0; i < DDP_ID_WAIT_S * 100; i++) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            ssize_t n = read(fd, id, sizeof(*id));
            close(fd);
            if (n == (ssize_t)sizeof(*id))
                return;
            fprintf(stderr, "rank %d: %s holds %zd bytes, not a unique id\n", rank, path, n);
            exit(1);
        }
        if (errno != ENOENT) {
            fprintf(stderr, "rank %d: cannot open %s: %s\n", rank, path, strerror(errno));
            exit(1);
        }
        sleep_ms(10);
    }
    fprintf(stderr, "rank %d: no unique id at %s after %d s (is rank 0 running?)\n", rank, path,
            DDP_ID_WAIT_S);
    exit(1);
}

static void kernels_path(char *out, size_t size, const char *given)
{
    char exe[4096];
    ssize_t n;

    if (given) {
        snprintf(out, size, "%s", given);
        return;
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n < 0) {
        perror("readlink /proc/self/exe");
        exit(1);
    }
    exe[n] = 0;
    *strrchr(exe, '/') = 0;
    if (snprintf(out, size, "%s/%s", exe, DDP_KERNELS_FILE) >= (int)size) {
        fprintf(stderr, "kernel module path too long\n");
        exit(1);
    }
}

static void launch(CUfunction f, CUstream s, void **args)
{
    CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

/*
 * --p2p: the all-reduce's sum by other roads, so that a test sees sends and
 * receives whose counts differ from rank to rank: ncclReduce to rank 0
 * (summed in rank order, the same bytes as ncclAllReduce), then down a
 * chain, rank r receiving from r - 1 and passing it on to r + 1, and a ring
 * exchange of the vote in a group (into scratch, unused).
 */
static void sum_p2p(CUdeviceptr g, size_t count, CUdeviceptr scratch, const struct ddp_opts *o,
                    ncclComm_t comm, CUstream s)
{
    int rank = o->rank, nranks = o->nranks;

    NK(ncclReduce((void *)g, (void *)g, count, ncclFloat, ncclSum, 0, comm, s));
    if (rank > 0)
        NK(ncclRecv((void *)g, count, ncclFloat, rank - 1, comm, s));
    if (rank < nranks - 1)
        NK(ncclSend((void *)g, count, ncclFloat, rank + 1, comm, s));
    NK(ncclGroupStart());
    NK(ncclSend((void *)(g + (count - 1) * sizeof(float)), 1, ncclFloat, (rank + 1) % nranks, comm, s));
    NK(ncclRecv((void *)scratch, 1, ncclFloat, (rank + nranks - 1) % nranks, comm, s));
    NK(ncclGroupEnd());
}

/*
 * --exchange: g's first nranks blocks of b floats moved between the ranks
 * through x (n floats) and copied back into g, on stream s, as the top of
 * this file says. Rank 0 is the root of a gather or scatter.
 */
static void exchange(CUdeviceptr g, CUdeviceptr x, uint64_t n, const struct ddp_opts *o,
                     ncclComm_t comm, CUstream s)
{
    size_t b = n / (uint64_t)o->nranks, block = b * sizeof(float);

    switch (o->exchange) {
    case EX_NONE:
        return;
    case EX_ALLTOALL:
        NK(ncclAlltoAll((void *)g, (void *)x, b, ncclFloat, comm, s));
        CK(cuMemcpyDtoDAsync(g, x, block * o->nranks, s));
        break;
    case EX_GATHER:
        NK(ncclGather((void *)g, o->rank == 0 ? (void *)x : NULL, b, ncclFloat, 0, comm, s));
        if (o->rank == 0)
            CK(cuMemcpyDtoDAsync(g, x, block * o->nranks, s));
        break;
    case EX_SCATTER:
        NK(ncclScatter(o->rank == 0 ? (void *)g : NULL, (void *)x, b, ncclFloat, 0, comm, s));
        CK(cuMemcpyDtoDAsync(g, x, block, s));
        break;
    }
}

/* One rank: with comm NULL a process of its own that joins the job through
 * the id file, else a thread given its communicator (--threads). */
static int rank_main(const struct ddp_opts *o, ncclComm_t given)
{
    int rank = o->rank, ndev = 0;
    ncclUniqueId id;
    ncclComm_t comm, half = NULL;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f_init, f_grad, f_apply;
    CUstream s;
    CUdeviceptr w, g, scratch, counted, x = 0;
    char kpath[4200];
    uint64_t n = ((uint64_t)o->mb << 20) / sizeof(float);

    g_rank = rank;
    if (!given)
        setvbuf(stdout, NULL, _IOLBF, 0);   /* threads: threads_main did, before any output */
    if (given) {
        comm = given;
    } else if (rank == 0) {
        NK(ncclGetUniqueId(&id));
        id_publish(o->id_file, &id);
    } else {
        id_wait(o->id_file, rank, &id);
    }

    CK(cuInit(0));
    CK(cuDeviceGetCount(&ndev));
    CK(cuDeviceGet(&dev, o->device >= 0 ? o->device : rank % ndev));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    kernels_path(kpath, sizeof(kpath), o->kernels);
    CK(cuModuleLoad(&mod, kpath));
    CK(cuModuleGetFunction(&f_init, mod, "ddp_init"));
    CK(cuModuleGetFunction(&f_grad, mod, "ddp_grad"));
    CK(cuModuleGetFunction(&f_apply, mod, "ddp_apply"));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&w, n * sizeof(float)));
    CK(cuMemAlloc(&g, (n + 1) * sizeof(float)));
    CK(cuMemAlloc(&scratch, sizeof(float)));
    CK(cuMemAlloc(&counted, sizeof(float)));
    if (o->exchange != EX_NONE)
        CK(cuMemAlloc(&x, n * sizeof(float)));

    if (!given) {
        NK(ncclCommInitRank(&comm, o->nranks, id, rank));
        if (rank == 0)
            unlink(o->id_file);      /* every rank has joined, so read it */
    }
    int half_size = (o->nranks + 1 - rank % 2) / 2;
    if (o->split)
        NK(ncclCommSplit(comm, rank % 2, rank, &half, NULL));
    printf("rank %d of %d: device %d, %.1f MiB of weights, %ld steps%s%s\n", rank, o->nranks,
           (int)dev, n * sizeof(float) / 1048576.0, o->steps, o->exchange ? ", exchange " : "",
           o->exchange ? exchange_names[o->exchange] : "");

    uint64_t seed = o->seed;
    void *init_args[] = { &w, &n, &seed };
    launch(f_init, s, init_args);
    float scale = DDP_LR / (float)o->nranks;
    for (long step = 0; step < o->steps; step++) {
        int st = (int)step;
        float vote = o->pause_file && access(o->pause_file, F_OK) == 0 ? 1.0f : 0.0f, votes;
        void *grad_args[] = { &g, &w, &n, &rank, &st, &seed, &vote };
        void *apply_args[] = { &w, &g, &n, &scale };

        launch(f_grad, s, grad_args);
        exchange(g, x, n, o, comm, s);
        if (o->p2p)
            sum_p2p(g, n + 1, scratch, o, comm, s);
        else
            NK(ncclAllReduce((void *)g, (void *)g, n + 1, ncclFloat, ncclSum, comm, s));
        launch(f_apply, s, apply_args);
        if (half) {
            float one = (float)(step + 1);
            uint32_t bits;
            memcpy(&bits, &one, sizeof(bits));
            CK(cuMemsetD32Async(counted, bits, 1, s));
            NK(ncclAllReduce((void *)counted, (void *)counted, 1, ncclFloat, ncclSum, half, s));
        }
        printf("rank %d step %ld\n", rank, step);
        if (o->hold_file && access(o->hold_file, F_OK) == 0) {
            printf("rank %d holds step %ld\n", rank, step);
            while (access(o->hold_file, F_OK) == 0)
                sleep_ms(5);
        }
        CK(cuStreamSynchronize(s));
        CK(cuMemcpyDtoH(&votes, g + n * sizeof(float), sizeof(votes)));
        if (half) {
            float sum, want = (float)(step + 1) * (float)half_size;
            CK(cuMemcpyDtoH(&sum, counted, sizeof(sum)));
            if (sum != want) {
                fprintf(stderr, "rank %d: the split communicator summed %g, want %g\n", rank,
                        (double)sum, (double)want);
                return 1;
            }
        }
        if (o->own_suspend && (step + 1) % o->own_suspend == 0) {
            NK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
            if (half)
                NK(ncclCommSuspend(half, NCCL_SUSPEND_MEM));
            NK(ncclCommResume(comm));
            if (half)
                NK(ncclCommResume(half));
        }
        if (votes > 0 && o->pause_file) {
            printf("rank %d paused after step %ld\n", rank, step);
            while (access(o->pause_file, F_OK) == 0)
                sleep_ms(5);
            printf("rank %d goes on\n", rank);
        }
        if (o->sleep_ms)
            sleep_ms(o->sleep_ms);
    }

    float *h = malloc(n * sizeof(float));
    if (!h) {
        fprintf(stderr, "rank %d: out of host memory\n", rank);
        return 1;
    }
    CK(cuMemcpyDtoH(h, w, n * sizeof(float)));
    uint64_t hash = 0xcbf29ce484222325ull;     /* FNV-1a 64 */
    const unsigned char *b = (const unsigned char *)h;
    for (size_t i = 0; i < n * sizeof(float); i++)
        hash = (hash ^ b[i]) * 0x100000001b3ull;
    free(h);

    if (half)
        NK(ncclCommDestroy(half));
    NK(ncclCommDestroy(comm));
    if (x)
        CK(cuMemFree(x));
    CK(cuMemFree(counted));
    CK(cuMemFree(scratch));
    CK(cuMemFree(g));
    CK(cuMemFree(w));
    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("rank %d checksum: %016" PRIx64 "\n", rank, hash);
    return 0;
}

struct rank_thread {
    struct ddp_opts o;
    ncclComm_t comm;
    pthread_t thread;
    int rc;
};

static void *rank_thread_main(void *arg)
{
    struct rank_thread *t = arg;

    t->rc = rank_main(&t->o, t->comm);
    return NULL;
}

/* --threads 1: ncclCommInitAll over devices 0..N-1, a thread per rank. */
static int threads_main(const struct ddp_opts *o)
{
    static struct rank_thread t[64];
    ncclComm_t comms[64];
    int rc = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    CK(cuInit(0));
    NK(ncclCommInitAll(comms, o->nranks, NULL));
    for (int r = 0; r < o->nranks; r++) {
        t[r].o = *o;
        t[r].o.rank = r;
        t[r].o.device = r;
        t[r].comm = comms[r];
        if (pthread_create(&t[r].thread, NULL, rank_thread_main, &t[r])) {
            fprintf(stderr, "ddp: pthread_create failed\n");
            exit(1);
        }
    }
    for (int r = 0; r < o->nranks; r++) {
        pthread_join(t[r].thread, NULL);
        if (t[r].rc && !rc)
            rc = t[r].rc;
    }
    return rc;
}

/* The launcher: ranks 0..N-1 as children, argv passed on with --rank R. */
static int launcher_main(int argc, char **argv, const struct ddp_opts *o)
{
    char dir[] = "/tmp/ddp-id-XXXXXX", idpath[sizeof(dir) + 8];
    const char *id_file = o->id_file;
    pid_t pids[64];
    int rc = 0, left = o->nranks;

    if (!id_file) {
        if (!mkdtemp(dir)) {
            perror("ddp: mkdtemp");
            return 1;
        }
        snprintf(idpath, sizeof(idpath), "%s/id", dir);
        id_file = idpath;
    }
    for (int r = 0; r < o->nranks; r++) {
        pids[r] = fork();
        if (pids[r] < 0) {
            perror("ddp: fork");
            exit(1);
        }
        if (pids[r] == 0) {
            char **av = calloc((size_t)argc + 5, sizeof(char *)), rs[16];
            int k = 0;
            snprintf(rs, sizeof(rs), "%d", r);
            av[k++] = argv[0];
            av[k++] = "--rank";
            av[k++] = rs;
            if (!o->id_file) {
                av[k++] = "--id-file";
                av[k++] = (char *)id_file;
            }
            for (int i = 1; i < argc; i++)
                av[k++] = argv[i];
            execv("/proc/self/exe", av);
            perror("ddp: exec");
            _exit(127);
        }
    }
    while (left > 0) {
        int st, code;
        pid_t p = wait(&st);
        if (p < 0)
            break;
        left--;
        code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (code && !rc) {
            rc = code;
            fprintf(stderr, "ddp: a rank (pid %d) failed (%d): stopping the others\n", (int)p, code);
            for (int r = 0; r < o->nranks; r++)
                if (pids[r] != p)
                    kill(pids[r], SIGTERM);
        }
    }
    if (!o->id_file) {
        unlink(idpath);
        rmdir(dir);
    }
    return rc;
}

int main(int argc, char **argv)
{
    struct ddp_opts o;

    parse_opts(argc, argv, &o);
    if (o.threads)
        return threads_main(&o);
    if (o.rank < 0)
        return launcher_main(argc, argv, &o);
    return rank_main(&o, NULL);
}
