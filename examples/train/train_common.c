/*
 * train_common.c - the model replica of train.c and train_mt.c (see train_common.h).
 */
#include "train_common.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels_body.h" /* tk_mix64, the same generator the init kernel uses */

#define F4 sizeof(float)

/* Adam hyper-parameters: the MLP and the bank. */
static const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
static const float lr_dense = 3e-3f, lr_bank = 1e-2f;

static const size_t batch_floats = (size_t)TR_B * TR_D + (size_t)TR_B * TR_O + TR_B;

void tr_check(CUresult r, const char *expr)
{
    const char *name = NULL;

    if (r == CUDA_SUCCESS)
        return;
    if (cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "unknown CUresult";
    /* expr is the call as written: print the function's name only. */
    fprintf(stderr, "%.*s failed: %s (%d)\n", (int)strcspn(expr, "( "), expr, name, (int)r);
    exit(1);
}

static void usage_exit(const char *usage, int rc)
{
    fputs(usage, rc ? stderr : stdout);
    exit(rc);
}

static long parse_long(const char *flag, const char *s, long min, long max, const char *usage)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 0);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "%s: bad value '%s' (want %ld..%ld)\n", flag, s, min, max);
        usage_exit(usage, 2);
    }
    return v;
}

void tr_parse_opts(int argc, char **argv, struct tr_opts *o, int with_threads, const char *usage)
{
    *o = (struct tr_opts){ .steps = 200, .mb = 256, .seed = 1, .kernels = NULL,
                           .print_every = 10, .sleep_ms = 0, .threads = 4 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        char flag[32];
        const char *eq = strchr(a, '=');
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            usage_exit(usage, 0);
        if (strncmp(a, "--", 2) || (eq ? (size_t)(eq - a) : strlen(a)) >= sizeof(flag)) {
            fprintf(stderr, "unknown argument '%s'\n", a);
            usage_exit(usage, 2);
        }
        if (eq) { /* --flag=value */
            memcpy(flag, a, (size_t)(eq - a));
            flag[eq - a] = 0;
            val = eq + 1;
        } else {
            strcpy(flag, a);
            if (i + 1 >= argc) {
                fprintf(stderr, "%s needs a value\n", flag);
                usage_exit(usage, 2);
            }
            val = argv[++i];
        }
        if (!strcmp(flag, "--steps"))
            o->steps = parse_long(flag, val, 1, 100000000, usage);
        else if (!strcmp(flag, "--mb"))
            o->mb = parse_long(flag, val, 2, 1 << 20, usage);
        else if (!strcmp(flag, "--seed")) {
            char *end;
            errno = 0;
            o->seed = strtoull(val, &end, 0);
            if (errno || end == val || *end) {
                fprintf(stderr, "--seed: bad value '%s'\n", val);
                usage_exit(usage, 2);
            }
        } else if (!strcmp(flag, "--kernels"))
            o->kernels = val;
        else if (!strcmp(flag, "--print-every"))
            o->print_every = parse_long(flag, val, 0, 100000000, usage);
        else if (!strcmp(flag, "--sleep-ms"))
            o->sleep_ms = parse_long(flag, val, 0, 3600000, usage);
        else if (with_threads && !strcmp(flag, "--threads"))
            o->threads = parse_long(flag, val, 1, 64, usage);
        else {
            fprintf(stderr, "unknown option '%s'\n", flag);
            usage_exit(usage, 2);
        }
    }
}

void tr_kernels_load(struct tr_kernels *k, const char *path)
{
    memset(k, 0, sizeof(*k));
    if (path) {
        snprintf(k->path, sizeof(k->path), "%s", path);
    } else {
        /* The module lives beside the executable, as a real program's .cubin would. */
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n < 0) {
            perror("readlink /proc/self/exe");
            exit(1);
        }
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        if (snprintf(k->path, sizeof(k->path), "%s/%s", slash ? exe : ".", TRAIN_KERNELS_FILE) >=
            (int)sizeof(k->path)) {
            fprintf(stderr, "kernel module path too long\n");
            exit(1);
        }
    }
    CK(cuModuleLoad(&k->mod, k->path));
#define GET(name) CK(cuModuleGetFunction(&k->name, k->mod, #name))
    GET(init_uniform);
    GET(fwd_hidden);
    GET(fwd_out);
    GET(loss_reduce);
    GET(bwd_out);
    GET(bwd_hidden);
    GET(adam);
    GET(dedupe);
    GET(adam_rows);
    GET(ring_mix);
#undef GET
}

void tr_launch(CUfunction f, size_t n, CUstream s, void **params)
{
    const unsigned block = 256;
    size_t grid = (n + block - 1) / block;
    if (grid < 1)
        grid = 1;
    if (grid > 1024)
        grid = 1024; /* the kernels are grid-stride loops */
    CK(cuLaunchKernel(f, (unsigned)grid, 1, 1, block, 1, 1, 0, s, params, NULL));
}

/* Per-step temporaries (cuMemAllocAsync): activations, output terms, gradients. */
static size_t acts_bytes(void) { return 3 * (size_t)TR_B * TR_H * F4; }
static size_t outs_bytes(void) { return ((size_t)TR_B * TR_O + TR_B) * F4 + 2 * (size_t)TR_B * 4; }
static size_t dense_floats(void)
{
    return (size_t)TR_H * TR_D + TR_H + (size_t)TR_O * TR_H + TR_O;
}
static size_t fixed_bytes(void)
{
    return 3 * dense_floats() * F4 + 2 * batch_floats * F4 + F4 + acts_bytes() + outs_bytes() +
           dense_floats() * F4;
}

int tr_model_rows_for(size_t budget)
{
    size_t row = 3 * (size_t)TR_H * F4; /* E, Em, Ev */
    size_t rows = budget > fixed_bytes() ? (budget - fixed_bytes()) / row : 0;
    if (rows > 0x7fffffff / TR_H)
        rows = 0x7fffffff / TR_H;
    return (int)rows;
}

/* Random stream for the host-side data: counter-based, from (seed, step). */
struct rng {
    uint64_t base, n;
};
static uint64_t rng_next(struct rng *r) { return tk_mix64(r->base + r->n++); }
static double rng_unit(struct rng *r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

/* Batch `step` into buf: x uniform in [-1, 1), tokens (half from a hot set), teacher targets. */
static void gen_batch(const struct tr_model *m, long step, void *buf)
{
    float *x = buf, *y = x + (size_t)TR_B * TR_D;
    int32_t *tok = (int32_t *)(y + (size_t)TR_B * TR_O);
    struct rng r = { tk_mix64(m->seed ^ 0xda7aull) ^ tk_mix64((uint64_t)step), 0 };
    uint64_t hot = m->V < 1024 ? (uint64_t)m->V : 1024;

    for (int i = 0; i < TR_B; i++) {
        float *xi = x + (size_t)i * TR_D;
        for (int k = 0; k < TR_D; k++)
            xi[k] = (float)(2.0 * rng_unit(&r) - 1.0);
        uint64_t t = rng_next(&r);
        tok[i] = (int32_t)((t & 1) ? (t >> 1) % hot : (t >> 1) % (uint64_t)m->V);
        for (int o = 0; o < TR_O; o++) {
            double a = 0.0;
            for (int k = 0; k < TR_D; k++)
                a += m->teacher[o][k] * xi[k];
            y[(size_t)i * TR_O + o] = (float)(sin(a) + 0.5 * cos(0.37 * (tok[i] % 61) + o));
        }
    }
}

/* Fill pinned staging with batch `step` and upload it on the copy stream. */
static void upload(struct tr_model *m, long step)
{
    int s = (int)(step & 1);
    if (m->uploaded_rec[s]) /* the staging buffer's previous copy must be done */
        CK(cuEventSynchronize(m->uploaded[s]));
    gen_batch(m, step, m->pinned[s]);
    if (m->consumed_rec[s]) /* the device buffer's previous batch must be used up */
        CK(cuStreamWaitEvent(m->copy, m->consumed[s], 0));
    CK(cuMemcpyHtoDAsync(m->batch[s], m->pinned[s], batch_floats * F4, m->copy));
    CK(cuEventRecord(m->uploaded[s], m->copy));
    m->uploaded_rec[s] = 1;
}

static void init_uniform(struct tr_model *m, CUdeviceptr p, size_t n, uint64_t seed, float scale)
{
    unsigned long long nn = n, sd = seed;
    void *params[] = { &p, &nn, &sd, &scale };
    tr_launch(m->k->init_uniform, n, m->compute, params);
}

void tr_model_init(struct tr_model *m, const struct tr_kernels *k, uint64_t seed, int rows)
{
    memset(m, 0, sizeof(*m));
    m->k = k;
    m->seed = seed;
    m->V = rows;
    m->n_dense = dense_floats();
    m->n_bank = (size_t)rows * TR_H;

    struct rng r = { tk_mix64(seed ^ 0x7eac4e5ull), 0 };
    for (int o = 0; o < TR_O; o++)
        for (int i = 0; i < TR_D; i++)
            m->teacher[o][i] = (2.0 * rng_unit(&r) - 1.0) * 2.0 / sqrt((double)TR_D);

    CK(cuStreamCreate(&m->compute, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&m->copy, CU_STREAM_DEFAULT));
    for (int s = 0; s < 2; s++) {
        CK(cuEventCreate(&m->uploaded[s], CU_EVENT_DISABLE_TIMING));
        CK(cuEventCreate(&m->consumed[s], CU_EVENT_DISABLE_TIMING));
        CK(cuMemAlloc(&m->batch[s], batch_floats * F4));
        CK(cuMemAllocHost(&m->pinned[s], batch_floats * F4));
    }
    CK(cuMemAlloc(&m->P, m->n_dense * F4));
    CK(cuMemAlloc(&m->Pm, m->n_dense * F4));
    CK(cuMemAlloc(&m->Pv, m->n_dense * F4));
    CK(cuMemAlloc(&m->E, m->n_bank * F4));
    CK(cuMemAlloc(&m->Em, m->n_bank * F4));
    CK(cuMemAlloc(&m->Ev, m->n_bank * F4));
    CK(cuMemAlloc(&m->loss, F4));
    m->device_bytes = fixed_bytes() + 3 * m->n_bank * F4;

    m->W1 = m->P;
    m->b1 = m->W1 + (size_t)TR_H * TR_D * F4;
    m->W2 = m->b1 + TR_H * F4;
    m->b2 = m->W2 + (size_t)TR_O * TR_H * F4;

    /* Parameters from the seed (a kernel), biases and moments zero (memsets). */
    init_uniform(m, m->W1, (size_t)TR_H * TR_D, seed ^ 1, 1.0f / sqrtf((float)TR_D));
    CK(cuMemsetD32Async(m->b1, 0, TR_H, m->compute));
    init_uniform(m, m->W2, (size_t)TR_O * TR_H, seed ^ 2, 1.0f / sqrtf((float)TR_H));
    CK(cuMemsetD32Async(m->b2, 0, TR_O, m->compute));
    init_uniform(m, m->E, m->n_bank, seed ^ 3, 0.01f);
    CK(cuMemsetD8Async(m->Pm, 0, m->n_dense * F4, m->compute));
    CK(cuMemsetD32Async(m->Pv, 0, m->n_dense, m->compute));
    CK(cuMemsetD8Async(m->Em, 0, m->n_bank * F4, m->compute));
    CK(cuMemsetD32Async(m->Ev, 0, m->n_bank, m->compute));
    CK(cuMemsetD32Async(m->loss, 0, 1, m->compute));

    upload(m, 0);
}

void tr_model_step(struct tr_model *m, long step, long steps, CUdeviceptr extra)
{
    const int s = (int)(step & 1);
    int B = TR_B, D = TR_D, H = TR_H, O = TR_O, V = m->V;
    CUstream cs = m->compute;
    CUdeviceptr x = m->batch[s], y = x + (size_t)B * D * F4, tok = y + (size_t)B * O * F4;
    CUdeviceptr acts, outs, grads;

    CK(cuStreamWaitEvent(cs, m->uploaded[s], 0));

    /* Temporaries of this step, stream-ordered. */
    CK(cuMemAllocAsync(&acts, acts_bytes(), cs));
    CK(cuMemAllocAsync(&outs, outs_bytes(), cs));
    CK(cuMemAllocAsync(&grads, m->n_dense * F4, cs));
    CK(cuMemsetD8Async(acts, 0, acts_bytes(), cs));
    CK(cuMemsetD32Async(grads, 0, m->n_dense, cs)); /* the backward kernels accumulate */
    CUdeviceptr hpre = acts, h = hpre + (size_t)B * H * F4, dh = h + (size_t)B * H * F4;
    CUdeviceptr dy = outs, ploss = dy + (size_t)B * O * F4, first = ploss + (size_t)B * F4,
                next = first + (size_t)B * 4;
    CUdeviceptr gW1 = grads, gb1 = gW1 + (size_t)H * D * F4, gW2 = gb1 + (size_t)H * F4,
                gb2 = gW2 + (size_t)O * H * F4;

    /* Adam's bias corrections for time step t, computed once on the host. */
    double t = (double)step + 1.0;
    float bc1 = (float)(1.0 - pow(beta1, t)), bc2 = (float)(1.0 - pow(beta2, t));
    float b1c = beta1, b2c = beta2, epsc = eps, lrd = lr_dense, lrb = lr_bank;
    unsigned long long nd = m->n_dense;

    void *p_fwd_hidden[] = { &B, &D, &H, &V, &x, &tok, &m->W1, &m->b1, &m->E, &extra, &hpre, &h };
    tr_launch(m->k->fwd_hidden, (size_t)B * H, cs, p_fwd_hidden);
    void *p_fwd_out[] = { &B, &H, &O, &h, &m->W2, &m->b2, &y, &dy, &ploss };
    tr_launch(m->k->fwd_out, (size_t)B, cs, p_fwd_out);
    void *p_loss[] = { &B, &ploss, &m->loss };
    CK(cuLaunchKernel(m->k->loss_reduce, 1, 1, 1, 1, 1, 1, 0, cs, p_loss, NULL));
    void *p_bwd_out[] = { &B, &H, &O, &h, &hpre, &dy, &m->W2, &gW2, &gb2, &dh };
    tr_launch(m->k->bwd_out, (size_t)O * H + O + (size_t)B * H, cs, p_bwd_out);
    void *p_bwd_hidden[] = { &B, &D, &H, &x, &dh, &gW1, &gb1 };
    tr_launch(m->k->bwd_hidden, (size_t)H * D + H, cs, p_bwd_hidden);
    void *p_adam[] = { &nd, &m->P, &grads, &m->Pm, &m->Pv, &lrd, &b1c, &b2c, &epsc, &bc1, &bc2 };
    tr_launch(m->k->adam, m->n_dense, cs, p_adam);
    void *p_dedupe[] = { &B, &tok, &first, &next };
    tr_launch(m->k->dedupe, (size_t)B, cs, p_dedupe);
    void *p_rows[] = { &B, &H, &V, &tok, &first, &next, &dh, &m->E, &m->Em, &m->Ev,
                       &lrb, &b1c, &b2c, &epsc, &bc1, &bc2 };
    tr_launch(m->k->adam_rows, (size_t)B * H, cs, p_rows);

    /* Batch slot s is free for the upload two steps on. */
    CK(cuEventRecord(m->consumed[s], cs));
    m->consumed_rec[s] = 1;
    CK(cuMemFreeAsync(acts, cs));
    CK(cuMemFreeAsync(outs, cs));
    CK(cuMemFreeAsync(grads, cs));

    if (step + 1 < steps)
        upload(m, step + 1);
}

float tr_model_loss(struct tr_model *m)
{
    float l;
    CK(cuStreamSynchronize(m->compute));
    CK(cuMemcpyDtoH(&l, m->loss, sizeof(l)));
    return l;
}

uint64_t tr_fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t tr_hash_device(uint64_t h, CUdeviceptr p, size_t bytes)
{
    static const size_t chunk = 8u << 20;
    unsigned char *buf = malloc(bytes < chunk ? bytes : chunk);
    if (!buf && bytes) {
        perror("malloc");
        exit(1);
    }
    for (size_t off = 0; off < bytes; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        CK(cuMemcpyDtoH(buf, p + off, n));
        h = tr_fnv1a(h, buf, n);
    }
    free(buf);
    return h;
}

uint64_t tr_model_hash(uint64_t h, const struct tr_model *m)
{
    h = tr_hash_device(h, m->P, m->n_dense * F4);
    h = tr_hash_device(h, m->Pm, m->n_dense * F4);
    h = tr_hash_device(h, m->Pv, m->n_dense * F4);
    h = tr_hash_device(h, m->E, m->n_bank * F4);
    h = tr_hash_device(h, m->Em, m->n_bank * F4);
    h = tr_hash_device(h, m->Ev, m->n_bank * F4);
    return h;
}

void tr_model_destroy(struct tr_model *m)
{
    CK(cuStreamSynchronize(m->copy));
    CK(cuStreamSynchronize(m->compute));
    CUdeviceptr bufs[] = { m->P, m->Pm, m->Pv, m->E, m->Em, m->Ev, m->loss, m->batch[0], m->batch[1] };
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        CK(cuMemFree(bufs[i]));
    for (int s = 0; s < 2; s++) {
        CK(cuMemFreeHost(m->pinned[s]));
        CK(cuEventDestroy(m->uploaded[s]));
        CK(cuEventDestroy(m->consumed[s]));
    }
    CK(cuStreamDestroy(m->compute));
    CK(cuStreamDestroy(m->copy));
}

void tr_sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
        ;
}

double tr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
