/*
 * rt_train.cu - a training loop on the CUDA *runtime* API, for the real-GPU
 * suite (tests/gpu/README.md).
 *
 * Where examples/train calls the driver directly, this program reaches it the
 * way PyTorch does: libcudart (linked statically by nvcc) loads libcuda.so.1
 * and takes every entry point from cuGetProcAddress_v2, so under tcgpu all of
 * them must come back as libtcgpu.so's wrappers.
 *
 * The model: S shards (one per compute stream), each a tanh layer
 * y = tanh(W x) with W of H x D floats, trained with Adam towards targets
 * made from a fixed "teacher". What it exercises:
 *   - cudaMalloc for weights and Adam moments (long-lived, most of --mb);
 *   - cudaMallocAsync/cudaFreeAsync for per-step gradients and activations,
 *     from the device's default pool with a release threshold (so the pool
 *     really keeps memory between steps, as PyTorch's would);
 *   - a copy stream uploading the next batch from pinned host memory
 *     (cudaMallocHost, cudaMemcpyAsync) while the compute streams work;
 *   - events ordering the streams: batch ready -> compute; compute done ->
 *     buffer reusable; shard k's fold into a shared buffer after shard k-1's
 *     (non-commutative, so a lost cross-stream order changes the checksum).
 * Every output element is computed by one thread with sums in a fixed order:
 * no atomics, so the same flags give the same checksum run after run.
 *
 * Output: "step N loss X" lines, "time: X ms/step (excluding sleep)" and, last,
 * "checksum: <16 hex digits>" (FNV-1a 64 over every shard's W, m, v and the
 * shared buffer). A failing call prints "file:line: call: error" and exits 1;
 * bad flags exit 2.
 */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                                 \
    do {                                                                            \
        cudaError_t err_ = (call);                                                  \
        if (err_ != cudaSuccess) {                                                  \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,      \
                    cudaGetErrorName(err_), cudaGetErrorString(err_));              \
            exit(1);                                                                \
        }                                                                           \
    } while (0)
#define CHECK_LAUNCH() CHECK(cudaGetLastError())

enum { D = 1024, BATCH = 16, MAX_SHARDS = 8 };

struct opts {
    int steps, mb, shards, print_every, sleep_ms;
    unsigned seed;
};

struct shard {
    cudaStream_t stream;
    cudaEvent_t done[2];          /* done with batch buffer 0/1 (recorded each use) */
    cudaEvent_t folded;           /* this shard's fold into `shared` is done */
    float *w, *m, *v;             /* H x D */
    float *loss;                  /* one slot per step */
    size_t h;
};

/* --- kernels ------------------------------------------------------------- */

/* y[b,h] = tanh(sum_d w[h,d] x[b,d]); err[b,h] = y - target(b,h). */
__global__ void forward(const float *w, const float *x, float *y, float *err, size_t h_rows,
                        unsigned step)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= h_rows * BATCH)
        return;
    size_t b = i / h_rows, h = i % h_rows;
    const float *wr = w + h * D, *xr = x + b * D;
    float s = 0.f;
    for (int d = 0; d < D; d++)
        s = fmaf(wr[d], xr[d], s);
    float yv = tanhf(s);
    /* The teacher: a fixed sparse pattern of the inputs. */
    float t = tanhf(0.5f * xr[h % D] - 0.25f * xr[(h * 7 + 3) % D]);
    y[i] = yv;
    err[i] = yv - t;
}

/* g[h,d] = sum_b 2 err[b,h] (1 - y^2) x[b,d] / (B H) */
__global__ void backward(const float *x, const float *y, const float *err, float *g,
                         size_t h_rows)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= h_rows * D)
        return;
    size_t h = i / D, d = i % D;
    float s = 0.f;
    for (int b = 0; b < BATCH; b++) {
        float yv = y[b * h_rows + h];
        s = fmaf(2.f * err[b * h_rows + h] * (1.f - yv * yv), x[b * D + d], s);
    }
    g[i] = s / (float)(BATCH * h_rows);
}

__global__ void adam(float *w, float *m, float *v, const float *g, size_t n, float lr,
                     float bc1, float bc2)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float gi = g[i];
    float mi = 0.9f * m[i] + 0.1f * gi;
    float vi = 0.999f * v[i] + 0.001f * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] -= lr * (mi / bc1) / (sqrtf(vi / bc2) + 1e-8f);
}

/* One block: a fixed-order sum of squared errors (deterministic). */
__global__ void loss_sum(const float *err, size_t n, float *out)
{
    __shared__ float part[256];
    float s = 0.f;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        s = fmaf(err[i], err[i], s);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k)
            part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *out = part[0] / (float)n;
}

/* shared = 0.5 shared + w[0, :] (order matters: not commutative across shards) */
__global__ void fold(float *shared, const float *w)
{
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d < D)
        shared[d] = 0.5f * shared[d] + w[d];
}

__global__ void init_weights(float *w, size_t n, unsigned seed)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    uint32_t x = (uint32_t)(i * 2654435761u) ^ (seed * 0x9e3779b9u);
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    w[i] = ((float)(x & 0xffffff) / 16777216.f - 0.5f) * 0.06f;
}

/* --- host side ----------------------------------------------------------- */

static unsigned grid(size_t n, unsigned block)
{
    return (unsigned)((n + block - 1) / block);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A batch drawn from (seed, step) alone, so it does not depend on timing. */
static void make_batch(float *x, unsigned seed, int step)
{
    uint64_t s = ((uint64_t)seed << 32) ^ (uint64_t)(step + 1) * 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < BATCH * D; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) & 0xffffff) / 8388608.f - 1.f;
    }
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t hash_device(uint64_t h, const float *dev, size_t n, float *host)
{
    CHECK(cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    return fnv1a(h, host, n * sizeof(float));
}

static void usage(void)
{
    fprintf(stderr, "usage: rt_train [--steps N] [--mb M] [--shards S] [--seed S] "
                    "[--print-every K] [--sleep-ms T]\n");
    exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){ .steps = 200, .mb = 1024, .shards = 2, .print_every = 20, .seed = 1 };
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        long v = strtol(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--steps")) o->steps = (int)v;
        else if (!strcmp(argv[i], "--mb")) o->mb = (int)v;
        else if (!strcmp(argv[i], "--shards")) o->shards = (int)v;
        else if (!strcmp(argv[i], "--seed")) o->seed = (unsigned)v;
        else if (!strcmp(argv[i], "--print-every")) o->print_every = (int)v;
        else if (!strcmp(argv[i], "--sleep-ms")) o->sleep_ms = (int)v;
        else usage();
        i++;
    }
    if (o->steps < 1 || o->mb < 16 || o->shards < 1 || o->shards > MAX_SHARDS ||
        o->print_every < 0 || o->sleep_ms < 0)
        usage();
}

int main(int argc, char **argv)
{
    struct opts o;
    struct shard sh[MAX_SHARDS];
    cudaStream_t copy;
    cudaEvent_t uploaded[2];
    cudaMemPool_t pool;
    float *hx[2], *dx[2], *shared, *host;
    int dev = 0;

    parse(argc, argv, &o);
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(cudaSetDevice(dev));

    /* W, m, v: 12 bytes a parameter, --mb split between the shards. */
    size_t h_rows = ((size_t)o.mb << 20) / 12 / D / o.shards;
    size_t n = h_rows * D;
    printf("rt_train: %d MiB (%d shards of %zu x %d), %d steps, seed %u\n",
           o.mb, o.shards, h_rows, D, o.steps, o.seed);

    /* The default pool keeps up to 1 GiB between steps (PyTorch-like). */
    uint64_t threshold = 1ull << 30;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));

    CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
    for (int b = 0; b < 2; b++) {
        CHECK(cudaMallocHost((void **)&hx[b], BATCH * D * sizeof(float)));
        CHECK(cudaMalloc((void **)&dx[b], BATCH * D * sizeof(float)));
        CHECK(cudaEventCreateWithFlags(&uploaded[b], cudaEventDisableTiming));
    }
    CHECK(cudaMalloc((void **)&shared, D * sizeof(float)));
    CHECK(cudaMemset(shared, 0, D * sizeof(float)));
    for (int k = 0; k < o.shards; k++) {
        struct shard *s = &sh[k];
        s->h = h_rows;
        CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&s->done[0], cudaEventDisableTiming));
        CHECK(cudaEventCreateWithFlags(&s->done[1], cudaEventDisableTiming));
        CHECK(cudaEventCreateWithFlags(&s->folded, cudaEventDisableTiming));
        CHECK(cudaMalloc((void **)&s->w, n * sizeof(float)));
        CHECK(cudaMalloc((void **)&s->m, n * sizeof(float)));
        CHECK(cudaMalloc((void **)&s->v, n * sizeof(float)));
        CHECK(cudaMalloc((void **)&s->loss, (size_t)o.steps * sizeof(float)));
        init_weights<<<grid(n, 256), 256, 0, s->stream>>>(s->w, n, o.seed * 31 + k);
        CHECK_LAUNCH();
        CHECK(cudaMemsetAsync(s->m, 0, n * sizeof(float), s->stream));
        CHECK(cudaMemsetAsync(s->v, 0, n * sizeof(float), s->stream));
    }
    CHECK(cudaDeviceSynchronize());

    /* The first batch. */
    make_batch(hx[0], o.seed, 0);
    CHECK(cudaMemcpyAsync(dx[0], hx[0], BATCH * D * sizeof(float), cudaMemcpyHostToDevice, copy));
    CHECK(cudaEventRecord(uploaded[0], copy));

    double busy = 0, t_start = now_s();
    for (int step = 0; step < o.steps; step++) {
        double t0 = now_s();
        int cur = step & 1, nxt = cur ^ 1;
        float bc1 = 1.f - powf(0.9f, (float)(step + 1));
        float bc2 = 1.f - powf(0.999f, (float)(step + 1));

        for (int k = 0; k < o.shards; k++) {
            struct shard *s = &sh[k];
            float *y, *err, *g;
            CHECK(cudaStreamWaitEvent(s->stream, uploaded[cur], 0));
            CHECK(cudaMallocAsync((void **)&y, h_rows * BATCH * sizeof(float), s->stream));
            CHECK(cudaMallocAsync((void **)&err, h_rows * BATCH * sizeof(float), s->stream));
            CHECK(cudaMallocAsync((void **)&g, n * sizeof(float), s->stream));
            forward<<<grid(h_rows * BATCH, 256), 256, 0, s->stream>>>(s->w, dx[cur], y, err,
                                                                       h_rows, step);
            CHECK_LAUNCH();
            loss_sum<<<1, 256, 0, s->stream>>>(err, h_rows * BATCH, s->loss + step);
            CHECK_LAUNCH();
            backward<<<grid(n, 256), 256, 0, s->stream>>>(dx[cur], y, err, g, h_rows);
            CHECK_LAUNCH();
            CHECK(cudaEventRecord(s->done[cur], s->stream));    /* dx[cur] is free again */
            adam<<<grid(n, 256), 256, 0, s->stream>>>(s->w, s->m, s->v, g, n, 1e-3f, bc1, bc2);
            CHECK_LAUNCH();
            CHECK(cudaFreeAsync(g, s->stream));
            CHECK(cudaFreeAsync(err, s->stream));
            CHECK(cudaFreeAsync(y, s->stream));
            /* Shard k folds after shard k-1 (ordered by the event alone). */
            if (k > 0)
                CHECK(cudaStreamWaitEvent(s->stream, sh[k - 1].folded, 0));
            fold<<<grid(D, 256), 256, 0, s->stream>>>(shared, s->w);
            CHECK_LAUNCH();
            CHECK(cudaEventRecord(s->folded, s->stream));
        }
        /* The next step's first fold waits for this step's last one. */
        CHECK(cudaStreamWaitEvent(sh[0].stream, sh[o.shards - 1].folded, 0));

        /* Upload the next batch while the shards compute: the pinned buffer
         * is free once its previous upload is done, the device buffer once
         * every shard has used it. */
        if (step + 1 < o.steps) {
            CHECK(cudaEventSynchronize(uploaded[nxt]));
            make_batch(hx[nxt], o.seed, step + 1);
            for (int k = 0; k < o.shards && step > 0; k++)
                CHECK(cudaStreamWaitEvent(copy, sh[k].done[nxt], 0));   /* step-1's use */
            CHECK(cudaMemcpyAsync(dx[nxt], hx[nxt], BATCH * D * sizeof(float),
                                  cudaMemcpyHostToDevice, copy));
            CHECK(cudaEventRecord(uploaded[nxt], copy));
        }

        if (o.print_every && (step % o.print_every == 0 || step == o.steps - 1)) {
            float l = 0, sum = 0;
            for (int k = 0; k < o.shards; k++) {
                CHECK(cudaMemcpyAsync(&l, sh[k].loss + step, sizeof(l), cudaMemcpyDeviceToHost,
                                      sh[k].stream));
                CHECK(cudaStreamSynchronize(sh[k].stream));
                sum += l;
            }
            printf("step %d loss %.6f\n", step, sum / o.shards);
        }
        if (o.sleep_ms) {
            CHECK(cudaDeviceSynchronize());
            busy += now_s() - t0;
            usleep((useconds_t)o.sleep_ms * 1000);
        }
    }
    CHECK(cudaDeviceSynchronize());
    double elapsed = now_s() - t_start;
    if (!o.sleep_ms)
        busy = elapsed;
    printf("time: %.3f ms/step (excluding sleep)\n", busy * 1e3 / o.steps);

    host = (float *)malloc(n * sizeof(float));
    if (!host) {
        fprintf(stderr, "out of host memory\n");
        return 1;
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (int k = 0; k < o.shards; k++) {
        h = hash_device(h, sh[k].w, n, host);
        h = hash_device(h, sh[k].m, n, host);
        h = hash_device(h, sh[k].v, n, host);
    }
    h = hash_device(h, shared, D, host);
    free(host);

    for (int k = 0; k < o.shards; k++) {
        CHECK(cudaFree(sh[k].w));
        CHECK(cudaFree(sh[k].m));
        CHECK(cudaFree(sh[k].v));
        CHECK(cudaFree(sh[k].loss));
        CHECK(cudaEventDestroy(sh[k].done[0]));
        CHECK(cudaEventDestroy(sh[k].done[1]));
        CHECK(cudaEventDestroy(sh[k].folded));
        CHECK(cudaStreamDestroy(sh[k].stream));
    }
    for (int b = 0; b < 2; b++) {
        CHECK(cudaFreeHost(hx[b]));
        CHECK(cudaFree(dx[b]));
        CHECK(cudaEventDestroy(uploaded[b]));
    }
    CHECK(cudaFree(shared));
    CHECK(cudaStreamDestroy(copy));
    printf("checksum: %016llx\n", (unsigned long long)h);
    return 0;
}
