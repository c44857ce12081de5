/*
 * kernels.cu - the training kernels for real GPUs (nvcc -arch=sm_90 -cubin).
 *
 * Same names and parameter lists as kernels_sim.c; the arithmetic is shared in
 * kernels_body.h. Every kernel is a grid-stride loop over its elements, so any
 * launch shape gives the same result. Device pointers arrive as CUdeviceptr
 * (unsigned long long) because train_common.c passes them that way.
 */
#include <stdint.h>

#include "kernels_body.h"

typedef unsigned long long dptr;

#define GRID_STRIDE(idx, n) \
    for (uint64_t idx = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < (uint64_t)(n); \
         idx += (uint64_t)gridDim.x * blockDim.x)

#define F(p) ((float *)(uintptr_t)(p))
#define CF(p) ((const float *)(uintptr_t)(p))
#define CI(p) ((const int32_t *)(uintptr_t)(p))
#define I(p) ((int32_t *)(uintptr_t)(p))

extern "C" __global__ void init_uniform(dptr p, unsigned long long n, unsigned long long seed,
                                        float scale)
{
    GRID_STRIDE(i, n)
        tk_init_uniform(i, F(p), seed, scale);
}

extern "C" __global__ void fwd_hidden(int B, int D, int H, int V, dptr x, dptr tok, dptr W1,
                                      dptr b1, dptr E, dptr extra, dptr hpre, dptr h)
{
    GRID_STRIDE(idx, (uint64_t)B * H)
        tk_fwd_hidden(idx, D, H, V, CF(x), CI(tok), CF(W1), CF(b1), CF(E), CF(extra), F(hpre),
                      F(h));
}

extern "C" __global__ void fwd_out(int B, int H, int O, dptr h, dptr W2, dptr b2, dptr y,
                                   dptr dy, dptr ploss)
{
    GRID_STRIDE(i, B)
        tk_fwd_out(i, B, H, O, CF(h), CF(W2), CF(b2), CF(y), F(dy), F(ploss));
}

extern "C" __global__ void loss_reduce(int B, dptr ploss, dptr loss)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        tk_loss_reduce(B, CF(ploss), F(loss));
}

extern "C" __global__ void bwd_out(int B, int H, int O, dptr h, dptr hpre, dptr dy, dptr W2,
                                   dptr gW2, dptr gb2, dptr dh)
{
    GRID_STRIDE(idx, (uint64_t)O * H + (uint64_t)O + (uint64_t)B * H)
        tk_bwd_out(idx, B, H, O, CF(h), CF(hpre), CF(dy), CF(W2), F(gW2), F(gb2), F(dh));
}

extern "C" __global__ void bwd_hidden(int B, int D, int H, dptr x, dptr dh, dptr gW1, dptr gb1)
{
    GRID_STRIDE(idx, (uint64_t)H * D + (uint64_t)H)
        tk_bwd_hidden(idx, B, D, H, CF(x), CF(dh), F(gW1), F(gb1));
}

extern "C" __global__ void adam(unsigned long long n, dptr p, dptr g, dptr m, dptr v, float lr,
                                float beta1, float beta2, float eps, float bc1, float bc2)
{
    GRID_STRIDE(i, n)
        tk_adam(i, F(p), CF(g), F(m), F(v), lr, beta1, beta2, eps, bc1, bc2);
}

extern "C" __global__ void dedupe(int B, dptr tok, dptr first, dptr next)
{
    GRID_STRIDE(i, B)
        tk_dedupe(i, B, CI(tok), I(first), I(next));
}

extern "C" __global__ void adam_rows(int B, int H, int V, dptr tok, dptr first, dptr next,
                                     dptr dh, dptr E, dptr mE, dptr vE, float lr, float beta1,
                                     float beta2, float eps, float bc1, float bc2)
{
    GRID_STRIDE(idx, (uint64_t)B * H)
        tk_adam_rows(idx, H, V, CI(tok), CI(first), CI(next), CF(dh), F(E), F(mE), F(vE), lr,
                     beta1, beta2, eps, bc1, bc2);
}

extern "C" __global__ void ring_mix(int H, dptr ring, dptr b1, dptr priv)
{
    GRID_STRIDE(j, H)
        tk_ring_mix(j, F(ring), CF(b1), F(priv));
}
