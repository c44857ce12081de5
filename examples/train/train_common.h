/*
 * train_common.h - the model, its device state and one training step, shared by
 * train.c (one host thread) and train_mt.c (several), written against the CUDA
 * driver API only.
 *
 * The model: a 2-layer MLP with a token embedding bank,
 *     hpre = W1 x + b1 + E[tok] (+ extra),  h = relu(hpre),  out = W2 h + b2,
 * trained with Adam on a mean squared error against targets that a fixed
 * "teacher" function (drawn from the seed) gives for synthetic data.
 *
 * Memory: the embedding bank E (V rows of H floats) and its two Adam moments
 * fill the requested size (--mb); V follows from it. The MLP is small.
 *
 * Per-step cost: the MLP trains fully every step, but a dense Adam pass over a
 * few hundred MB each step is far too slow on the CPU simulator (tens of ms per
 * 100 MB), so the bank uses lazy ("sparse") Adam, as PyTorch's SparseAdam does:
 * only the rows this batch used are updated, each once, with the summed
 * gradient of its samples. Untouched rows and their moments stay as they are.
 * The final checksum still covers every byte of the state.
 */
#ifndef TRAIN_COMMON_H
#define TRAIN_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

/* Sizes of the MLP (the bank's row count V comes from the memory budget). */
enum { TR_B = 256, TR_D = 64, TR_H = 128, TR_O = 8 };

/* The kernels file beside the executable unless --kernels says otherwise. */
#ifndef TRAIN_KERNELS_FILE
#define TRAIN_KERNELS_FILE "train_kernels.so"
#endif

/* Call a driver function; on failure print "cuXxx failed: NAME (code)" and exit(1). */
#define CK(call) tr_check((call), #call)
void tr_check(CUresult r, const char *expr);

struct tr_opts {
    long steps;         /* --steps N */
    long mb;            /* --mb M: device memory the model state uses, MiB */
    uint64_t seed;      /* --seed S */
    const char *kernels;/* --kernels PATH, NULL = default beside the executable */
    long print_every;   /* --print-every K (0 = only the last step) */
    long sleep_ms;      /* --sleep-ms T, per step */
    long threads;       /* --threads T (train_mt only) */
};

/* Parse argv into *o (defaults first). with_threads: accept --threads. Exits on error. */
void tr_parse_opts(int argc, char **argv, struct tr_opts *o, int with_threads, const char *usage);

/* The module's kernels. */
struct tr_kernels {
    CUmodule mod;
    CUfunction init_uniform, fwd_hidden, fwd_out, loss_reduce, bwd_out, bwd_hidden, adam,
        dedupe, adam_rows, ring_mix;
    char path[4096];
};

/* cuModuleLoad(path or the default file beside /proc/self/exe) + every cuModuleGetFunction. */
void tr_kernels_load(struct tr_kernels *k, const char *path);

/* Launch f over n elements on stream s (grid-stride on GPUs; simcuda ignores the shape). */
void tr_launch(CUfunction f, size_t n, CUstream s, void **params);

/* One model replica with its streams, events, batches and state. */
struct tr_model {
    const struct tr_kernels *k;
    uint64_t seed;          /* data and init seed of this replica */
    int V;                  /* embedding rows */
    CUstream compute, copy; /* kernels / batch uploads */
    CUevent uploaded[2], consumed[2];
    int uploaded_rec[2], consumed_rec[2];

    /* Dense parameters, one block: W1[H][D] | b1[H] | W2[O][H] | b2[O]; gradients alike. */
    size_t n_dense;
    CUdeviceptr P, Pm, Pv;
    CUdeviceptr W1, b1, W2, b2; /* views into P */
    /* Embedding bank E[V][H] and its moments. */
    size_t n_bank;
    CUdeviceptr E, Em, Ev;
    /* Double-buffered batches (x[B][D] | y[B][O] | tok[B]) and their pinned staging. */
    CUdeviceptr batch[2];
    void *pinned[2];
    CUdeviceptr loss;       /* 1 float, the last step's loss */
    size_t device_bytes;    /* everything above */
    double teacher[TR_O][TR_D];
};

/* Embedding rows such that one replica, temporaries included, fits in `budget` bytes. */
int tr_model_rows_for(size_t budget);

/*
 * Allocate and initialise a replica in the current context: parameters drawn
 * from `seed` by a kernel, moments zeroed, streams and events created, batch 0
 * uploaded. Exits on any error.
 */
void tr_model_init(struct tr_model *m, const struct tr_kernels *k, uint64_t seed, int rows);

/*
 * Enqueue training step `step` (1-based Adam time step = step + 1) on
 * m->compute, then start uploading batch step+1 on m->copy (unless it is the
 * last). `extra` is a device vector of H floats added to the hidden
 * pre-activations, or 0. Returns without waiting for the GPU except to reuse
 * a pinned staging buffer (the host runs at most two steps ahead).
 */
void tr_model_step(struct tr_model *m, long step, long steps, CUdeviceptr extra);

/* Wait for m->compute and read the last step's loss (cuMemcpyDtoH). */
float tr_model_loss(struct tr_model *m);

/* FNV-1a 64 over every byte of the state (P, Pm, Pv, E, Em, Ev), in that order. */
#define TR_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t tr_fnv1a(uint64_t h, const void *data, size_t n);
/* Copy a device buffer back (cuMemcpyDtoH, in chunks) and hash it into h. */
uint64_t tr_hash_device(uint64_t h, CUdeviceptr p, size_t bytes);
uint64_t tr_model_hash(uint64_t h, const struct tr_model *m);

void tr_model_destroy(struct tr_model *m);

/* Sleep ms milliseconds, resuming after signals. */
void tr_sleep_ms(long ms);
double tr_now(void);

#endif
