/*
 * kernels_sim.c - the kernels of ddp.c as a simcuda module (ddp_kernels.so).
 *
 * On simcuda a kernel is a host function run once per launch on the stream's
 * worker (simcuda_kernel.h): it loops over the elements itself and reaches
 * device memory only through k->dev(). Every element's value depends on its
 * index and the arguments alone, so the result is the same however a GPU
 * would split the work.
 */
#include <stddef.h>
#include <stdint.h>

#include "simcuda_kernel.h"

#define DEV(T, ptr, count) ((T *)k->dev(k, (ptr), (size_t)(count) * sizeof(T)))
#define ARG_I(i) SIMCUDA_ARG(int, i)
#define ARG_U64(i) SIMCUDA_ARG(uint64_t, i)
#define ARG_F(i) SIMCUDA_ARG(float, i)

#define I sizeof(int)
#define P sizeof(uint64_t)
#define F sizeof(float)
SIMCUDA_KERNEL_PARAMS(ddp_init, P, P, P);
SIMCUDA_KERNEL_PARAMS(ddp_grad, P, P, P, I, I, P, F);
SIMCUDA_KERNEL_PARAMS(ddp_apply, P, P, P, F);
#undef I
#undef P
#undef F

/* splitmix64's finaliser: a well-mixed 64-bit value of x */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* uniform in [-1, 1), from 24 bits of h */
static float unit(uint64_t h)
{
    return (float)(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* ddp_init(w, n, seed): the same weights on every rank */
SIMCUDA_KERNEL(ddp_init)
{
    uint64_t n = ARG_U64(1), seed = ARG_U64(2);
    float *w = DEV(float, ARG_U64(0), n);
    if (!w)
        return;
    for (uint64_t i = 0; i < n; i++)
        w[i] = 0.5f * unit(mix64(seed * 0x100000001b3ull + i));
}

/*
 * ddp_grad(g, w, n, rank, step, seed, flag): the pseudo-gradient of the
 * rank's data x (a function of seed, rank, step and i) for the loss
 * (w - x)^2 / 2, plus a curvature term; g[n] = flag, the rank's vote to
 * pause after this step (summed by the all-reduce with the gradients).
 */
SIMCUDA_KERNEL(ddp_grad)
{
    uint64_t n = ARG_U64(2), seed = ARG_U64(5);
    int rank = ARG_I(3), step = ARG_I(4);
    float flag = ARG_F(6);
    float *g = DEV(float, ARG_U64(0), n + 1);
    const float *w = DEV(float, ARG_U64(1), n);
    if (!g || !w)
        return;
    uint64_t base = mix64(seed ^ ((uint64_t)rank << 40) ^ ((uint64_t)step << 8));
    for (uint64_t i = 0; i < n; i++) {
        float x = unit(mix64(base + i));
        g[i] = (w[i] - x) + 0.1f * w[i] * w[i] * w[i];
    }
    g[n] = flag;
}

/* ddp_apply(w, g, n, scale): w -= scale * g (scale = lr / nranks) */
SIMCUDA_KERNEL(ddp_apply)
{
    uint64_t n = ARG_U64(2);
    float scale = ARG_F(3);
    float *w = DEV(float, ARG_U64(0), n);
    const float *g = DEV(float, ARG_U64(1), n);
    if (!w || !g)
        return;
    for (uint64_t i = 0; i < n; i++)
        w[i] -= scale * g[i];
}
