/*
 * graph_kernels.c - the kernels of graph_train's training step (a simcuda
 * module): a batch made on the device from a step counter kept there, a
 * forward pass, its gradient, a loss, and momentum SGD. Deterministic, so
 * that every way of running the step gives the same bits.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "simcuda_kernel.h"

#define DEV(T, ptr, count) ((T *)k->dev(k, (ptr), (size_t)(count) * sizeof(T)))
#define P sizeof(uint64_t)
#define F sizeof(float)
SIMCUDA_KERNEL_PARAMS(init, P, P, P, P);
SIMCUDA_KERNEL_PARAMS(gen_batch, P, P, P, P);
SIMCUDA_KERNEL_PARAMS(forward, P, P, P, P);
SIMCUDA_KERNEL_PARAMS(backward, P, P, P, P, P);
SIMCUDA_KERNEL_PARAMS(loss, P, P, P);
SIMCUDA_KERNEL_PARAMS(sgd, P, P, P, P, F);
SIMCUDA_KERNEL_PARAMS(step_inc, P);
#undef P
#undef F

static uint64_t mix(uint64_t v)
{
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdull;
    v ^= v >> 33;
    v *= 0xc4ceb9fe1a85ec53ull;
    return v ^ (v >> 33);
}

static float unit(uint64_t h)
{
    return (float)((h >> 40) / 16777216.0) * 2.0f - 1.0f;
}

/* init(W, M, n, seed): W uniform in [-0.5, 0.5], M zero */
SIMCUDA_KERNEL(init)
{
    uint64_t n = SIMCUDA_ARG(uint64_t, 2), seed = SIMCUDA_ARG(uint64_t, 3);
    float *w = DEV(float, SIMCUDA_ARG(uint64_t, 0), n), *m = DEV(float, SIMCUDA_ARG(uint64_t, 1), n);

    if (!w || !m)
        return;
    for (uint64_t i = 0; i < n; i++) {
        w[i] = 0.5f * unit(mix(seed * 0x9e3779b97f4a7c15ull + i));
        m[i] = 0.0f;
    }
}

/* gen_batch(x, n, step, seed): the batch of step *step */
SIMCUDA_KERNEL(gen_batch)
{
    uint64_t n = SIMCUDA_ARG(uint64_t, 1), seed = SIMCUDA_ARG(uint64_t, 3);
    float *x = DEV(float, SIMCUDA_ARG(uint64_t, 0), n);
    uint64_t *step = DEV(uint64_t, SIMCUDA_ARG(uint64_t, 2), 1);

    if (!x || !step)
        return;
    for (uint64_t i = 0; i < n; i++)
        x[i] = unit(mix(seed ^ (*step * 0x100000001b3ull) ^ (i << 20)));
}

/* forward(W, x, act, n) */
SIMCUDA_KERNEL(forward)
{
    uint64_t n = SIMCUDA_ARG(uint64_t, 3);
    float *w = DEV(float, SIMCUDA_ARG(uint64_t, 0), n), *x = DEV(float, SIMCUDA_ARG(uint64_t, 1), n);
    float *a = DEV(float, SIMCUDA_ARG(uint64_t, 2), n);

    if (!w || !x || !a)
        return;
    for (uint64_t i = 0; i < n; i++)
        a[i] = tanhf(w[i] * x[i] + 0.5f * w[(i + 1) % n] * x[(i + 7) % n]);
}

/* backward(act, x, grad, ws, n): grad += dL/dW, ws = squared errors */
SIMCUDA_KERNEL(backward)
{
    uint64_t n = SIMCUDA_ARG(uint64_t, 4);
    float *a = DEV(float, SIMCUDA_ARG(uint64_t, 0), n), *x = DEV(float, SIMCUDA_ARG(uint64_t, 1), n);
    float *g = DEV(float, SIMCUDA_ARG(uint64_t, 2), n), *ws = DEV(float, SIMCUDA_ARG(uint64_t, 3), n);

    if (!a || !x || !g || !ws)
        return;
    for (uint64_t i = 0; i < n; i++) {
        float e = a[i] - sinf(3.0f * x[i]);

        g[i] += e * (1.0f - a[i] * a[i]) * x[i];
        ws[i] = e * e;
    }
}

/* loss(ws, out, n): out[0] = mean of ws */
SIMCUDA_KERNEL(loss)
{
    uint64_t n = SIMCUDA_ARG(uint64_t, 2);
    float *ws = DEV(float, SIMCUDA_ARG(uint64_t, 0), n), *out = DEV(float, SIMCUDA_ARG(uint64_t, 1), 1);
    double sum = 0;

    if (!ws || !out)
        return;
    for (uint64_t i = 0; i < n; i++)
        sum += ws[i];
    out[0] = (float)(sum / (double)n);
}

/* sgd(W, M, grad, n, lr): momentum 0.9 */
SIMCUDA_KERNEL(sgd)
{
    uint64_t n = SIMCUDA_ARG(uint64_t, 3);
    float lr = SIMCUDA_ARG(float, 4);
    float *w = DEV(float, SIMCUDA_ARG(uint64_t, 0), n), *m = DEV(float, SIMCUDA_ARG(uint64_t, 1), n);
    float *g = DEV(float, SIMCUDA_ARG(uint64_t, 2), n);

    if (!w || !m || !g)
        return;
    for (uint64_t i = 0; i < n; i++) {
        m[i] = 0.9f * m[i] + g[i];
        w[i] -= lr * m[i];
    }
}

/* step_inc(step) */
SIMCUDA_KERNEL(step_inc)
{
    uint64_t *step = DEV(uint64_t, SIMCUDA_ARG(uint64_t, 0), 1);

    if (step)
        (*step)++;
}
