/*
 * test_gate_sim.c - the gate under real driver calls (suite 'sim').
 *
 * Linked with the generated wrappers and lib/ statically (the production
 * libtcgpu.so exports no gate controls), and with simcuda: the program's
 * cuMemcpyHtoD calls are the wrappers, which reach simcuda through the driver
 * table. Worker threads copy in a loop while the main thread closes and opens
 * the gate: after each successful close no copy may be in flight or start
 * until the gate opens; at the end every buffer holds what was copied.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cudaProfiler.h>

#include "core/settings.h"
#include "driver/driver.h"
#include "driver/gate.h"
#include "driver/unsupported.h"

#define WORKERS 4
#define BYTES (64 * 1024)

static CUcontext ctx;
static CUdeviceptr dbuf[WORKERS];
static _Atomic unsigned long copies[WORKERS];
static _Atomic int in_copy;
static _Atomic int stop;
static _Atomic int errors;

#define CU(call)                                                                    \
    do {                                                                            \
        CUresult rc_ = (call);                                                      \
        if (rc_ != CUDA_SUCCESS) {                                                  \
            fprintf(stderr, "FAIL %s:%d: %s = %d\n", __FILE__, __LINE__, #call, rc_); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void *worker(void *arg)
{
    int id = (int)(long)arg;
    unsigned char *buf = malloc(BYTES);
    memset(buf, 0x40 + id, BYTES);
    CU(cuCtxSetCurrent(ctx));
    while (!atomic_load(&stop)) {
        atomic_fetch_add(&in_copy, 1);           /* counted outside the gate: */
        CUresult rc = cuMemcpyHtoD(dbuf[id], buf, BYTES);
        atomic_fetch_sub(&in_copy, 1);           /* so only `copies` is checked */
        if (rc != CUDA_SUCCESS)
            atomic_fetch_add(&errors, 1);
        atomic_fetch_add(&copies[id], 1);
    }
    free(buf);
    return NULL;
}

static _Atomic int prof_ready, prof_go, prof_done;
static CUresult prof_rc;

static void *profiler_caller(void *arg)
{
    (void)arg;
    CU(cuCtxSetCurrent(ctx));
    atomic_store(&prof_ready, 1);
    while (!atomic_load(&prof_go))
        sleep_ms(1);
    prof_rc = cuProfilerStart();
    atomic_store(&prof_done, 1);
    return NULL;
}

static unsigned long total(void)
{
    unsigned long s = 0;
    for (int i = 0; i < WORKERS; i++)
        s += atomic_load(&copies[i]);
    return s;
}

int main(void)
{
    CUdevice dev;

    settings_load();              /* TCGPU_REAL_LIBCUDA, as libtcgpu.so's constructor reads it */
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    for (int i = 0; i < WORKERS; i++)
        CU(TCGPU_REAL(cuMemAlloc)(&dbuf[i], BYTES));
    if (!tcgpu_driver_has(TCGPU_FN(cuMemcpyHtoD))) {
        fprintf(stderr, "FAIL: the driver table has no real cuMemcpyHtoD_v2\n");
        return 1;
    }

    pthread_t th[WORKERS];
    for (long i = 0; i < WORKERS; i++)
        pthread_create(&th[i], NULL, worker, (void *)i);
    sleep_ms(20);

    int rounds = 40, parked_rounds = 0, fails = 0;
    for (int r = 0; r < rounds && !fails; r++) {
        struct tcgpu_gate_straggler who;
        int rc = tcgpu_gate_close(5000, &who);
        if (rc != 0) {
            char msg[128];
            tcgpu_gate_format_straggler(&who, msg, sizeof(msg));
            fprintf(stderr, "FAIL round %d: close = %d (%s)\n", r, rc, msg);
            fails++;
            break;
        }
        /* The closing thread still reaches the driver. */
        CU(cuCtxSynchronize());
        unsigned long a = total();
        sleep_ms(5);
        unsigned long b = total();
        if (b > a + WORKERS) {     /* a copy that had returned may still count once */
            fprintf(stderr, "FAIL round %d: %lu copies while closed\n", r, b - a);
            fails++;
        }
        sleep_ms(5);
        if (total() != b) {
            fprintf(stderr, "FAIL round %d: copies went on while closed\n", r);
            fails++;
        }
        if (tcgpu_gate_parked() > 0)
            parked_rounds++;
        tcgpu_gate_open();
        sleep_ms(5);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(th[i], NULL);

    /* The profiler's calls (cudaProfiler.h, not cuda.h) pass the gate too:
     * one made while it is closed returns only after it opens. */
    pthread_t pt;
    pthread_create(&pt, NULL, profiler_caller, NULL);
    while (!atomic_load(&prof_ready))
        sleep_ms(1);
    if (tcgpu_gate_close(5000, NULL) != 0) {
        fprintf(stderr, "FAIL: close for the profiler call\n");
        fails++;
    }
    atomic_store(&prof_go, 1);
    sleep_ms(50);
    if (atomic_load(&prof_done)) {
        fprintf(stderr, "FAIL: cuProfilerStart returned while the gate was closed\n");
        fails++;
    }
    tcgpu_gate_open();
    pthread_join(pt, NULL);
    if (!atomic_load(&prof_done) || prof_rc != CUDA_SUCCESS) {
        fprintf(stderr, "FAIL: cuProfilerStart after the gate opened: done %d, rc %d\n",
                atomic_load(&prof_done), (int)prof_rc);
        fails++;
    }

    /* An unsupported call is noted when it succeeds (and only then). */
    CUevent ipc_ev;
    CUipcEventHandle ipc;
    CU(cuEventCreate(&ipc_ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CUresult irc = cuIpcGetEventHandle(&ipc, ipc_ev);
    struct tcgpu_unsupported_note note;
    bool noted = tcgpu_unsupported_first(&note);
    if (irc == CUDA_SUCCESS) {
        char msg[160];
        if (noted)
            tcgpu_unsupported_format(&note, msg, sizeof(msg));
        if (!noted || strcmp(msg, "cuIpcGetEventHandle: IPC event handles cannot be checkpointed") != 0) {
            fprintf(stderr, "FAIL: cuIpcGetEventHandle succeeded, note: %s\n", noted ? msg : "none");
            fails++;
        }
    } else {
        fprintf(stderr, "FAIL: cuIpcGetEventHandle of an interprocess event failed (%d)\n", irc);
        fails++;
    }
    /* A failing one is not noted. */
    tcgpu_unsupported_reset();
    irc = cuIpcGetEventHandle(NULL, ipc_ev);
    if (irc == CUDA_SUCCESS || tcgpu_unsupported_first(NULL)) {
        fprintf(stderr, "FAIL: a failed cuIpcGetEventHandle (%d) was noted\n", irc);
        fails++;
    }

    unsigned char *back = malloc(BYTES);
    for (int i = 0; i < WORKERS; i++) {
        CU(cuMemcpyDtoH(back, dbuf[i], BYTES));
        for (int j = 0; j < BYTES; j++)
            if (back[j] != 0x40 + i) {
                fprintf(stderr, "FAIL: buffer %d byte %d = %#x\n", i, j, back[j]);
                fails++;
                break;
            }
        CU(TCGPU_REAL(cuMemFree)(dbuf[i]));
    }
    free(back);
    if (atomic_load(&errors)) {
        fprintf(stderr, "FAIL: %d copies failed\n", atomic_load(&errors));
        fails++;
    }
    if (parked_rounds == 0) {
        fprintf(stderr, "FAIL: no worker was parked in %d rounds\n", rounds);
        fails++;
    }
    if (fails)
        return 1;
    printf("ok: %d rounds, %lu copies, workers parked in %d rounds\n", rounds, total(), parked_rounds);
    return 0;
}
