/*
 * train.c - a training loop written against the CUDA driver API.
 *
 * A 2-layer MLP with a large embedding bank (train_common.h) trained with Adam
 * on synthetic data from --seed. All state lives in device memory; a copy
 * stream uploads the next batch from pinned host memory while the compute
 * stream runs the current step, ordered by events. Deterministic: the same
 * flags give the same checksum on the same platform, run after run.
 *
 * Output: "step N loss X" every --print-every steps and after the last one,
 * then one line "checksum: <16 hex digits>", FNV-1a 64 over the final weights
 * and Adam moments copied back to the host. Any failing driver call prints
 * "cuXxx failed: NAME (code)" and exits 1.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "train_common.h"

static const char usage[] =
    "usage: train [--steps N] [--mb M] [--seed S] [--kernels PATH] [--print-every K] [--sleep-ms T]\n"
    "  --steps N        training steps (200)\n"
    "  --mb M           device memory for the model state, MiB (256)\n"
    "  --seed S         data and initialisation seed (1)\n"
    "  --kernels PATH   kernel module (default: " TRAIN_KERNELS_FILE " beside the executable)\n"
    "  --print-every K  print the loss every K steps, 0 = only the last (10)\n"
    "  --sleep-ms T     sleep T ms after each step, to let tests signal mid-run (0)\n";

int main(int argc, char **argv)
{
    struct tr_opts o;
    struct tr_kernels k;
    struct tr_model m;
    CUdevice dev;
    CUcontext ctx;

    setvbuf(stdout, NULL, _IOLBF, 0);
    tr_parse_opts(argc, argv, &o, 0, usage);

    int rows = tr_model_rows_for((size_t)o.mb << 20);
    if (rows < 1024) {
        fprintf(stderr, "train: --mb %ld is too small for the model\n", o.mb);
        return 2;
    }

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    tr_kernels_load(&k, o.kernels);
    tr_model_init(&m, &k, o.seed, rows);
    printf("train: %.1f MiB device memory (bank %d x %d), %ld steps, seed %" PRIu64 "\n",
           m.device_bytes / 1048576.0, rows, TR_H, o.steps, o.seed);

    double t0 = tr_now(), slept = 0;
    for (long step = 0; step < o.steps; step++) {
        tr_model_step(&m, step, o.steps, 0);
        if ((o.print_every && step % o.print_every == 0) || step + 1 == o.steps)
            printf("step %ld loss %.6f\n", step, tr_model_loss(&m));
        if (o.sleep_ms) {
            tr_sleep_ms(o.sleep_ms);
            slept += o.sleep_ms / 1000.0;
        }
    }
    CK(cuCtxSynchronize());
    double t1 = tr_now();

    uint64_t h = tr_model_hash(TR_FNV_OFFSET, &m);
    printf("time: %.2f ms/step (excluding sleep), hash %.0f ms\n",
           (t1 - t0 - slept) * 1000.0 / o.steps, (tr_now() - t1) * 1000.0);

    tr_model_destroy(&m);
    CK(cuModuleUnload(k.mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("checksum: %016" PRIx64 "\n", h);
    return 0;
}
