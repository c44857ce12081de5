/*
 * kernels_body.h - the arithmetic of the training kernels, one element at a time.
 *
 * Shared by kernels_sim.c (the simcuda module, plain C on the host) and kernels.cu
 * (nvcc, real GPUs), so that both platforms run the same formulas. Each tk_*()
 * function computes output element `idx` of its kernel and nothing else: every
 * element is written by exactly one call, and every sum runs in a fixed order, so
 * the result does not depend on how the grid is split (no atomics, no races).
 * The simcuda kernels call them for idx = 0..n-1; the CUDA kernels use a
 * grid-stride loop.
 *
 * Model (see train_common.h): B samples of D features and a token id each;
 *   hpre = W1 x + b1 + E[tok] (+ extra), h = relu(hpre), out = W2 h + b2,
 *   loss = mean((out - y)^2).
 * Layouts are row-major: x[B][D], y[B][O], W1[H][D], W2[O][H], E[V][H],
 * hpre/h/dh[B][H], dy[B][O].
 */
#ifndef TRAIN_KERNELS_BODY_H
#define TRAIN_KERNELS_BODY_H

#include <stdint.h>

#ifdef __CUDACC__
#define TK_FN static __device__ __forceinline__
#define TK_SQRTF sqrtf
#else
#include <math.h>
#define TK_FN static inline
#define TK_SQRTF sqrtf
#endif

/* splitmix64: a counter-based generator, so element i's value needs no state. */
TK_FN uint64_t tk_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* p[i] = uniform in [-scale, scale), from (seed, i) only. */
TK_FN void tk_init_uniform(uint64_t i, float *p, uint64_t seed, float scale)
{
    uint64_t r = tk_mix64(seed ^ tk_mix64(i));
    float u = (float)(r >> 40) * (1.0f / 16777216.0f);     /* 24 bits: [0, 1) */
    p[i] = scale * (2.0f * u - 1.0f);
}

/* idx in [0, B*H): hidden unit j of sample i. `extra` (H floats) may be NULL. */
TK_FN void tk_fwd_hidden(uint64_t idx, int D, int H, int V, const float *x, const int32_t *tok,
                         const float *W1, const float *b1, const float *E, const float *extra,
                         float *hpre, float *h)
{
    int i = (int)(idx / (uint64_t)H), j = (int)(idx % (uint64_t)H);
    int32_t t = tok[i];
    float s = b1[j];
    if (t >= 0 && t < V)
        s += E[(uint64_t)t * H + j];
    if (extra)
        s += extra[j];
    for (int k = 0; k < D; k++)
        s += W1[(uint64_t)j * D + k] * x[(uint64_t)i * D + k];
    hpre[idx] = s;
    h[idx] = s > 0.0f ? s : 0.0f;
}

/* idx in [0, B): outputs, loss gradient and loss term of sample idx. */
TK_FN void tk_fwd_out(uint64_t idx, int B, int H, int O, const float *h, const float *W2,
                      const float *b2, const float *y, float *dy, float *ploss)
{
    float scale = 1.0f / (float)(B * O), l = 0.0f;
    for (int o = 0; o < O; o++) {
        float s = b2[o];
        for (int j = 0; j < H; j++)
            s += W2[(uint64_t)o * H + j] * h[idx * H + j];
        float d = s - y[idx * O + o];
        l += d * d;
        dy[idx * O + o] = 2.0f * d * scale;
    }
    ploss[idx] = l * scale;
}

/* One element: loss[0] = sum of ploss[0..B) in index order. */
TK_FN void tk_loss_reduce(int B, const float *ploss, float *loss)
{
    float s = 0.0f;
    for (int i = 0; i < B; i++)
        s += ploss[i];
    loss[0] = s;
}

/* idx in [0, O*H + O + B*H): gW2 (+=), gb2 (+=), then dh = relu'(hpre) * W2^T dy. */
TK_FN void tk_bwd_out(uint64_t idx, int B, int H, int O, const float *h, const float *hpre,
                      const float *dy, const float *W2, float *gW2, float *gb2, float *dh)
{
    uint64_t nW = (uint64_t)O * H;
    if (idx < nW) {
        int o = (int)(idx / (uint64_t)H), j = (int)(idx % (uint64_t)H);
        float s = 0.0f;
        for (int i = 0; i < B; i++)
            s += dy[(uint64_t)i * O + o] * h[(uint64_t)i * H + j];
        gW2[idx] += s;
    } else if (idx < nW + (uint64_t)O) {
        int o = (int)(idx - nW);
        float s = 0.0f;
        for (int i = 0; i < B; i++)
            s += dy[(uint64_t)i * O + o];
        gb2[o] += s;
    } else {
        uint64_t e = idx - nW - (uint64_t)O;
        int i = (int)(e / (uint64_t)H), j = (int)(e % (uint64_t)H);
        float s = 0.0f;
        if (hpre[e] > 0.0f)
            for (int o = 0; o < O; o++)
                s += W2[(uint64_t)o * H + j] * dy[(uint64_t)i * O + o];
        dh[e] = s;
    }
}

/* idx in [0, H*D + H): gW1 (+=) and gb1 (+=). */
TK_FN void tk_bwd_hidden(uint64_t idx, int B, int D, int H, const float *x, const float *dh,
                         float *gW1, float *gb1)
{
    uint64_t nW = (uint64_t)H * D;
    float s = 0.0f;
    if (idx < nW) {
        int j = (int)(idx / (uint64_t)D), k = (int)(idx % (uint64_t)D);
        for (int i = 0; i < B; i++)
            s += dh[(uint64_t)i * H + j] * x[(uint64_t)i * D + k];
        gW1[idx] += s;
    } else {
        int j = (int)(idx - nW);
        for (int i = 0; i < B; i++)
            s += dh[(uint64_t)i * H + j];
        gb1[j] += s;
    }
}

/* One Adam update of p[i] with gradient g; bc1/bc2 = 1 - beta^t (host-computed). */
TK_FN void tk_adam_one(float *p, float g, float *m, float *v, float lr, float beta1,
                       float beta2, float eps, float bc1, float bc2)
{
    float mi = beta1 * *m + (1.0f - beta1) * g;
    float vi = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mi;
    *v = vi;
    *p -= lr * (mi / bc1) / (TK_SQRTF(vi / bc2) + eps);
}

/* idx in [0, n): dense Adam. */
TK_FN void tk_adam(uint64_t idx, float *p, const float *g, float *m, float *v, float lr,
                   float beta1, float beta2, float eps, float bc1, float bc2)
{
    tk_adam_one(&p[idx], g[idx], &m[idx], &v[idx], lr, beta1, beta2, eps, bc1, bc2);
}

/*
 * idx in [0, B): for sample idx, first[idx] = 1 if no earlier sample has its
 * token, next[idx] = the next sample with the same token, or -1. Lets
 * tk_adam_rows sum duplicate tokens' gradients in a fixed order without atomics.
 */
TK_FN void tk_dedupe(uint64_t idx, int B, const int32_t *tok, int32_t *first, int32_t *next)
{
    int i = (int)idx;
    int32_t t = tok[i], f = 1, n = -1;
    for (int j = 0; j < i; j++)
        if (tok[j] == t) {
            f = 0;
            break;
        }
    for (int j = i + 1; j < B; j++)
        if (tok[j] == t) {
            n = j;
            break;
        }
    first[i] = f;
    next[i] = n;
}

/*
 * idx in [0, B*H): lazy ("sparse") Adam on the embedding rows this batch used:
 * the gradient of row tok[i] is the sum of dh over the samples with that token
 * (dh is d loss / d hpre, and E[tok] enters hpre with weight 1). Only the first
 * sample of each token does the update, so each row is written once.
 */
TK_FN void tk_adam_rows(uint64_t idx, int H, int V, const int32_t *tok, const int32_t *first,
                        const int32_t *next, const float *dh, float *E, float *mE, float *vE,
                        float lr, float beta1, float beta2, float eps, float bc1, float bc2)
{
    int i = (int)(idx / (uint64_t)H), j = (int)(idx % (uint64_t)H);
    int32_t t = tok[i];
    if (!first[i] || t < 0 || t >= V)
        return;
    float g = 0.0f;
    for (int s = i; s >= 0; s = next[s])
        g += dh[(uint64_t)s * H + j];
    uint64_t e = (uint64_t)t * H + j;
    tk_adam_one(&E[e], g, &mE[e], &vE[e], lr, beta1, beta2, eps, bc1, bc2);
}

/* idx in [0, H): ring = 0.9 ring + 0.1 b1; priv = ring (train_mt's shared buffer). */
TK_FN void tk_ring_mix(uint64_t idx, float *ring, const float *b1, float *priv)
{
    float r = 0.9f * ring[idx] + 0.1f * b1[idx];
    ring[idx] = r;
    priv[idx] = r;
}

#endif
