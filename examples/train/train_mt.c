/*
 * train_mt.c - the training loop of train.c with several host threads.
 *
 * --threads T host threads each make the primary context current, allocate
 * their own model replica (its own streams, events, batches and a 1/T share of
 * --mb) and train it concurrently on their own data (seed + thread).
 *
 * Cross-thread ordering: one shared device buffer `ring` (H floats) and one
 * shared event. Every step, the threads take turns in a fixed order (thread 0,
 * 1, ..., T-1, then the next step): each one makes its compute stream wait for
 * the shared event (recorded by the previous thread), runs ring_mix (ring =
 * 0.9 ring + 0.1 b1 of its replica, copied into its private `extra` vector),
 * and records the event again. The host only orders who records the event
 * when; the GPU ordering comes from the events alone. Every replica's hidden
 * layer adds its `extra`, so a broken order changes the checksum.
 *
 * Output: "step N loss X thread T" lines, then "checksum: <16 hex digits>" over
 * every replica's state (in thread order) and the ring.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "train_common.h"

static const char usage[] =
    "usage: train_mt [--threads T] [--steps N] [--mb M] [--seed S] [--kernels PATH]\n"
    "                [--print-every K] [--sleep-ms T]\n"
    "  --threads T      host threads, each with its own streams and replica (4)\n"
    "  --steps N        training steps per thread (200)\n"
    "  --mb M           device memory for all replicas together, MiB (256)\n"
    "  --seed S         data and initialisation seed (1)\n"
    "  --kernels PATH   kernel module (default: " TRAIN_KERNELS_FILE " beside the executable)\n"
    "  --print-every K  print the loss every K steps, 0 = only the last (10)\n"
    "  --sleep-ms T     sleep T ms after each step, to let tests signal mid-run (0)\n";

struct worker {
    int id;
    pthread_t thread;
    struct tr_model m;
    CUdeviceptr extra; /* this replica's copy of the ring after its turn */
};

static struct {
    struct tr_opts o;
    struct tr_kernels k;
    CUcontext ctx;
    int rows;
    CUdeviceptr ring;
    CUevent ring_ev;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long turn; /* step * threads + thread whose turn at the ring it is */
} g = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void ring_turn(struct worker *w, long step)
{
    int H = TR_H;
    void *params[] = { &H, &g.ring, &w->m.b1, &w->extra };

    pthread_mutex_lock(&g.mu);
    while (g.turn != step * g.o.threads + w->id)
        pthread_cond_wait(&g.cv, &g.mu);
    if (g.turn > 0) /* after the previous thread's ring_mix */
        CK(cuStreamWaitEvent(w->m.compute, g.ring_ev, 0));
    tr_launch(g.k.ring_mix, (size_t)H, w->m.compute, params);
    CK(cuEventRecord(g.ring_ev, w->m.compute));
    g.turn++;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;

    CK(cuCtxSetCurrent(g.ctx));
    tr_model_init(&w->m, &g.k, g.o.seed + 1000003ull * (uint64_t)w->id, g.rows);
    CK(cuMemAlloc(&w->extra, TR_H * sizeof(float)));
    CK(cuMemsetD32Async(w->extra, 0, TR_H, w->m.compute));

    for (long step = 0; step < g.o.steps; step++) {
        ring_turn(w, step);
        tr_model_step(&w->m, step, g.o.steps, w->extra);
        if ((g.o.print_every && step % g.o.print_every == 0) || step + 1 == g.o.steps)
            printf("step %ld loss %.6f thread %d\n", step, tr_model_loss(&w->m), w->id);
        if (g.o.sleep_ms)
            tr_sleep_ms(g.o.sleep_ms);
    }
    CK(cuStreamSynchronize(w->m.compute));
    return NULL;
}

int main(int argc, char **argv)
{
    CUdevice dev;
    struct worker *w;

    setvbuf(stdout, NULL, _IOLBF, 0);
    tr_parse_opts(argc, argv, &g.o, 1, usage);
    size_t share = ((size_t)g.o.mb << 20) / (size_t)g.o.threads - TR_H * sizeof(float);
    g.rows = tr_model_rows_for(share);
    if (g.rows < 1024) {
        fprintf(stderr, "train_mt: --mb %ld is too small for %ld replicas\n", g.o.mb, g.o.threads);
        return 2;
    }
    w = calloc((size_t)g.o.threads, sizeof(*w));
    if (!w) {
        perror("calloc");
        return 1;
    }

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&g.ctx, dev));
    CK(cuCtxSetCurrent(g.ctx));
    tr_kernels_load(&g.k, g.o.kernels);
    CK(cuMemAlloc(&g.ring, TR_H * sizeof(float)));
    CK(cuMemsetD32(g.ring, 0, TR_H));
    CK(cuEventCreate(&g.ring_ev, CU_EVENT_DISABLE_TIMING));
    CK(cuCtxSynchronize()); /* the ring is zero before any thread's stream reads it */

    double t0 = tr_now();
    for (int i = 0; i < g.o.threads; i++) {
        w[i].id = i;
        int rc = pthread_create(&w[i].thread, NULL, worker_main, &w[i]);
        if (rc) {
            fprintf(stderr, "pthread_create: error %d\n", rc);
            return 1;
        }
    }
    for (int i = 0; i < g.o.threads; i++)
        pthread_join(w[i].thread, NULL);
    CK(cuCtxSynchronize());
    double t1 = tr_now();

    uint64_t h = TR_FNV_OFFSET;
    size_t bytes = 0;
    for (int i = 0; i < g.o.threads; i++) {
        h = tr_model_hash(h, &w[i].m);
        h = tr_hash_device(h, w[i].extra, TR_H * sizeof(float));
        bytes += w[i].m.device_bytes + TR_H * sizeof(float);
    }
    h = tr_hash_device(h, g.ring, TR_H * sizeof(float));
    printf("time: %.2f ms/step per thread (%ld threads, %.1f MiB device memory; sleep included), "
           "hash %.0f ms\n",
           (t1 - t0) * 1000.0 / g.o.steps, g.o.threads, bytes / 1048576.0, (tr_now() - t1) * 1000.0);

    for (int i = 0; i < g.o.threads; i++) {
        tr_model_destroy(&w[i].m);
        CK(cuMemFree(w[i].extra));
    }
    CK(cuMemFree(g.ring));
    CK(cuEventDestroy(g.ring_ev));
    CK(cuModuleUnload(g.k.mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    free(w);
    printf("checksum: %016" PRIx64 "\n", h);
    return 0;
}
