/*
 * kernels_sim.c - the training kernels as a simcuda module (train_kernels.so).
 *
 * On simcuda a kernel is a host function run once per launch on the stream's
 * worker; it loops over all elements itself and reaches device memory only
 * through k->dev() (device pointers are not host addresses). The arithmetic is
 * in kernels_body.h, shared with kernels.cu. Parameter lists match kernels.cu
 * and the launches in train_common.c exactly.
 */
#include <stddef.h>
#include <stdint.h>

#include "simcuda_kernel.h"
#include "kernels_body.h"

/* Host view of `count` elements of type T at device address `ptr`, or NULL. */
#define DEV(T, ptr, count) ((T *)k->dev(k, (ptr), (size_t)(count) * sizeof(T)))
#define ARG_I(i) SIMCUDA_ARG(int, i)
#define ARG_U64(i) SIMCUDA_ARG(uint64_t, i)
#define ARG_F(i) SIMCUDA_ARG(float, i)

/*
 * Argument sizes (SIMCUDA_KERNEL_PARAMS), as a real driver reads them from the
 * kernel image: simcuda copies the values at launch, so launches are
 * asynchronous like on a GPU. I = int, P = device pointer or 64-bit count,
 * F = float; they must match kernels.cu's parameter lists.
 */
#define I sizeof(int)
#define P sizeof(uint64_t)
#define F sizeof(float)
SIMCUDA_KERNEL_PARAMS(init_uniform, P, P, P, F);
SIMCUDA_KERNEL_PARAMS(fwd_hidden, I, I, I, I, P, P, P, P, P, P, P, P);
SIMCUDA_KERNEL_PARAMS(fwd_out, I, I, I, P, P, P, P, P, P);
SIMCUDA_KERNEL_PARAMS(loss_reduce, I, P, P);
SIMCUDA_KERNEL_PARAMS(bwd_out, I, I, I, P, P, P, P, P, P, P);
SIMCUDA_KERNEL_PARAMS(bwd_hidden, I, I, I, P, P, P, P);
SIMCUDA_KERNEL_PARAMS(adam, P, P, P, P, P, F, F, F, F, F, F);
SIMCUDA_KERNEL_PARAMS(dedupe, I, P, P, P);
SIMCUDA_KERNEL_PARAMS(adam_rows, I, I, I, P, P, P, P, P, P, P, F, F, F, F, F, F);
SIMCUDA_KERNEL_PARAMS(ring_mix, I, P, P, P);
#undef I
#undef P
#undef F

/* init_uniform(p, n, seed, scale) */
SIMCUDA_KERNEL(init_uniform)
{
    uint64_t n = ARG_U64(1), seed = ARG_U64(2);
    float scale = ARG_F(3);
    float *p = DEV(float, ARG_U64(0), n);
    if (!p)
        return;
    for (uint64_t i = 0; i < n; i++)
        tk_init_uniform(i, p, seed, scale);
}

/* fwd_hidden(B, D, H, V, x, tok, W1, b1, E, extra, hpre, h); extra may be 0 */
SIMCUDA_KERNEL(fwd_hidden)
{
    int B = ARG_I(0), D = ARG_I(1), H = ARG_I(2), V = ARG_I(3);
    const float *x = DEV(float, ARG_U64(4), (size_t)B * D);
    const int32_t *tok = DEV(int32_t, ARG_U64(5), B);
    const float *W1 = DEV(float, ARG_U64(6), (size_t)H * D);
    const float *b1 = DEV(float, ARG_U64(7), H);
    const float *E = DEV(float, ARG_U64(8), (size_t)V * H);
    const float *extra = ARG_U64(9) ? DEV(float, ARG_U64(9), H) : NULL;
    float *hpre = DEV(float, ARG_U64(10), (size_t)B * H);
    float *h = DEV(float, ARG_U64(11), (size_t)B * H);
    if (!x || !tok || !W1 || !b1 || !E || (ARG_U64(9) && !extra) || !hpre || !h)
        return;
    for (uint64_t idx = 0; idx < (uint64_t)B * H; idx++)
        tk_fwd_hidden(idx, D, H, V, x, tok, W1, b1, E, extra, hpre, h);
}

/* fwd_out(B, H, O, h, W2, b2, y, dy, ploss) */
SIMCUDA_KERNEL(fwd_out)
{
    int B = ARG_I(0), H = ARG_I(1), O = ARG_I(2);
    const float *h = DEV(float, ARG_U64(3), (size_t)B * H);
    const float *W2 = DEV(float, ARG_U64(4), (size_t)O * H);
    const float *b2 = DEV(float, ARG_U64(5), O);
    const float *y = DEV(float, ARG_U64(6), (size_t)B * O);
    float *dy = DEV(float, ARG_U64(7), (size_t)B * O);
    float *ploss = DEV(float, ARG_U64(8), B);
    if (!h || !W2 || !b2 || !y || !dy || !ploss)
        return;
    for (uint64_t i = 0; i < (uint64_t)B; i++)
        tk_fwd_out(i, B, H, O, h, W2, b2, y, dy, ploss);
}

/* loss_reduce(B, ploss, loss) */
SIMCUDA_KERNEL(loss_reduce)
{
    int B = ARG_I(0);
    const float *ploss = DEV(float, ARG_U64(1), B);
    float *loss = DEV(float, ARG_U64(2), 1);
    if (!ploss || !loss)
        return;
    tk_loss_reduce(B, ploss, loss);
}

/* bwd_out(B, H, O, h, hpre, dy, W2, gW2, gb2, dh) */
SIMCUDA_KERNEL(bwd_out)
{
    int B = ARG_I(0), H = ARG_I(1), O = ARG_I(2);
    const float *h = DEV(float, ARG_U64(3), (size_t)B * H);
    const float *hpre = DEV(float, ARG_U64(4), (size_t)B * H);
    const float *dy = DEV(float, ARG_U64(5), (size_t)B * O);
    const float *W2 = DEV(float, ARG_U64(6), (size_t)O * H);
    float *gW2 = DEV(float, ARG_U64(7), (size_t)O * H);
    float *gb2 = DEV(float, ARG_U64(8), O);
    float *dh = DEV(float, ARG_U64(9), (size_t)B * H);
    if (!h || !hpre || !dy || !W2 || !gW2 || !gb2 || !dh)
        return;
    uint64_t n = (uint64_t)O * H + (uint64_t)O + (uint64_t)B * H;
    for (uint64_t idx = 0; idx < n; idx++)
        tk_bwd_out(idx, B, H, O, h, hpre, dy, W2, gW2, gb2, dh);
}

/* bwd_hidden(B, D, H, x, dh, gW1, gb1) */
SIMCUDA_KERNEL(bwd_hidden)
{
    int B = ARG_I(0), D = ARG_I(1), H = ARG_I(2);
    const float *x = DEV(float, ARG_U64(3), (size_t)B * D);
    const float *dh = DEV(float, ARG_U64(4), (size_t)B * H);
    float *gW1 = DEV(float, ARG_U64(5), (size_t)H * D);
    float *gb1 = DEV(float, ARG_U64(6), H);
    if (!x || !dh || !gW1 || !gb1)
        return;
    uint64_t n = (uint64_t)H * D + (uint64_t)H;
    for (uint64_t idx = 0; idx < n; idx++)
        tk_bwd_hidden(idx, B, D, H, x, dh, gW1, gb1);
}

/* adam(n, p, g, m, v, lr, beta1, beta2, eps, bc1, bc2) */
SIMCUDA_KERNEL(adam)
{
    uint64_t n = ARG_U64(0);
    float *p = DEV(float, ARG_U64(1), n);
    const float *g = DEV(float, ARG_U64(2), n);
    float *m = DEV(float, ARG_U64(3), n);
    float *v = DEV(float, ARG_U64(4), n);
    if (!p || !g || !m || !v)
        return;
    float lr = ARG_F(5), b1 = ARG_F(6), b2 = ARG_F(7), eps = ARG_F(8), bc1 = ARG_F(9), bc2 = ARG_F(10);
    for (uint64_t i = 0; i < n; i++)
        tk_adam(i, p, g, m, v, lr, b1, b2, eps, bc1, bc2);
}

/* dedupe(B, tok, first, next) */
SIMCUDA_KERNEL(dedupe)
{
    int B = ARG_I(0);
    const int32_t *tok = DEV(int32_t, ARG_U64(1), B);
    int32_t *first = DEV(int32_t, ARG_U64(2), B);
    int32_t *next = DEV(int32_t, ARG_U64(3), B);
    if (!tok || !first || !next)
        return;
    for (uint64_t i = 0; i < (uint64_t)B; i++)
        tk_dedupe(i, B, tok, first, next);
}

/* adam_rows(B, H, V, tok, first, next, dh, E, mE, vE, lr, beta1, beta2, eps, bc1, bc2) */
SIMCUDA_KERNEL(adam_rows)
{
    int B = ARG_I(0), H = ARG_I(1), V = ARG_I(2);
    const int32_t *tok = DEV(int32_t, ARG_U64(3), B);
    const int32_t *first = DEV(int32_t, ARG_U64(4), B);
    const int32_t *next = DEV(int32_t, ARG_U64(5), B);
    const float *dh = DEV(float, ARG_U64(6), (size_t)B * H);
    float *E = DEV(float, ARG_U64(7), (size_t)V * H);
    float *mE = DEV(float, ARG_U64(8), (size_t)V * H);
    float *vE = DEV(float, ARG_U64(9), (size_t)V * H);
    if (!tok || !first || !next || !dh || !E || !mE || !vE)
        return;
    float lr = ARG_F(10), b1 = ARG_F(11), b2 = ARG_F(12), eps = ARG_F(13), bc1 = ARG_F(14),
          bc2 = ARG_F(15);
    for (uint64_t idx = 0; idx < (uint64_t)B * H; idx++)
        tk_adam_rows(idx, H, V, tok, first, next, dh, E, mE, vE, lr, b1, b2, eps, bc1, bc2);
}

/* ring_mix(H, ring, b1, priv) */
SIMCUDA_KERNEL(ring_mix)
{
    int H = ARG_I(0);
    float *ring = DEV(float, ARG_U64(1), H);
    const float *b1 = DEV(float, ARG_U64(2), H);
    float *priv = DEV(float, ARG_U64(3), H);
    if (!ring || !b1 || !priv)
        return;
    for (uint64_t j = 0; j < (uint64_t)H; j++)
        tk_ring_mix(j, ring, b1, priv);
}
