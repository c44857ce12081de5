/*
 * ranks.h - what simnccl's tests share: checks that print where they failed
 * and exit 1, a simulated machine of N GPUs per test (SIMCUDA_SHM), and rank
 * processes (the test binary run again with a role) that talk to the parent
 * over two pipes: fd 3 (commands in), fd 4 (reports out).
 *
 * Nothing outlives a test: ranks die with their parent (PR_SET_PDEATHSIG),
 * and the parent gives up after T_BOUND_S seconds (a rank waiting for a dead
 * peer would wait forever, as with NCCL).
 */
#ifndef SIMNCCL_TEST_RANKS_H
#define SIMNCCL_TEST_RANKS_H

#include "nccl.h"
#include "simnccl.h"     /* struct snccl_id: the rendezvous a failed test leaves */

#include <cuda.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...)                                                            \
    do {                                                                     \
        fprintf(stderr, "%s:%d: FAIL (pid %d): ", __FILE__, __LINE__, (int)getpid()); \
        fprintf(stderr, __VA_ARGS__);                                        \
        fprintf(stderr, "\n");                                               \
        exit(1);                                                             \
    } while (0)

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond))                                                         \
            FAIL("%s is false", #cond);                                      \
    } while (0)

#define CHECK_EQ(a, b)                                                       \
    do {                                                                     \
        long long a_ = (long long)(a), b_ = (long long)(b);                  \
        if (a_ != b_)                                                        \
            FAIL("%s = %lld, expected %s = %lld", #a, a_, #b, b_);           \
    } while (0)

#define NCCL_RES(call, want)                                                 \
    do {                                                                     \
        ncclResult_t r_ = (call), w_ = (want);                               \
        if (r_ != w_)                                                        \
            FAIL("%s = %d (%s), expected %d; last error: %s", #call, (int)r_, \
                 ncclGetErrorString(r_), (int)w_, ncclGetLastError(NULL));   \
    } while (0)
#define NCCL_OK(call) NCCL_RES(call, ncclSuccess)

#define CU_RES(call, want)                                                   \
    do {                                                                     \
        CUresult r_ = (call), w_ = (want);                                   \
        const char *n_ = "?";                                                \
        if (r_ != w_) {                                                      \
            cuGetErrorName(r_, &n_);                                         \
            FAIL("%s = %s (%d), expected %d", #call, n_, (int)r_, (int)w_);  \
        }                                                                    \
    } while (0)
#define CU_OK(call) CU_RES(call, CUDA_SUCCESS)

#define T_BOUND_S 100     /* under meson's timeout for these tests (120 s) */

static char t_shm[96];
static char t_ids[8][64];        /* rendezvous segments of the test's ids */

static inline void t_unlink_shm(void)
{
    if (t_shm[0])
        shm_unlink(t_shm);
    for (int i = 0; i < 8; i++)
        if (t_ids[i][0])
            shm_unlink(t_ids[i]);    /* gone already unless a rank never joined */
}

/* A fresh unique id, whose segment the test removes at its end. */
static inline void t_new_id(ncclUniqueId *id)
{
    struct snccl_id sid;
    ncclResult_t r = ncclGetUniqueId(id);

    if (r != ncclSuccess) {
        fprintf(stderr, "ncclGetUniqueId = %d\n", (int)r);
        exit(1);
    }
    memcpy(&sid, id->internal, sizeof(sid));
    for (int i = 0; i < 8; i++)
        if (!t_ids[i][0]) {
            snprintf(t_ids[i], sizeof(t_ids[i]), "%s", sid.name);
            break;
        }
}

static void t_timed_out(int sig)
{
    static const char msg[] = "FAIL: out of time (its own bound or meson's timeout): does a rank wait for a dead peer?\n";

    (void)sig;
    if (write(2, msg, sizeof(msg) - 1) < 0) {}
    t_unlink_shm();
    _exit(1);                    /* the ranks die with us (PR_SET_PDEATHSIG) */
}

/* This test's own simulated machine of ndev GPUs (its children share it). */
static inline void t_machine(const char *name, int ndev)
{
    char n[16];

    snprintf(t_shm, sizeof(t_shm), "/simnccl-test-%s-%d", name, (int)getpid());
    shm_unlink(t_shm);
    setenv("SIMCUDA_SHM", t_shm, 1);
    snprintf(n, sizeof(n), "%d", ndev);
    setenv("SIMCUDA_DEVICES", n, 1);
    atexit(t_unlink_shm);
    signal(SIGALRM, t_timed_out);
    signal(SIGTERM, t_timed_out);   /* meson's timeout */
    alarm(T_BOUND_S);
}

static inline double t_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline void t_sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts))
        ;
}

/* The unique id as hex, for argv. */
static inline void t_id_hex(const ncclUniqueId *id, char out[2 * NCCL_UNIQUE_ID_BYTES + 1])
{
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        sprintf(out + 2 * i, "%02x", (unsigned char)id->internal[i]);
}

static inline void t_id_parse(const char *hex, ncclUniqueId *id)
{
    CHECK(strlen(hex) == 2 * NCCL_UNIQUE_ID_BYTES);
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
        unsigned v;
        CHECK(sscanf(hex + 2 * i, "%2x", &v) == 1);
        id->internal[i] = (char)v;
    }
}

struct t_rank {
    pid_t pid;
    int to, from;       /* our ends: commands out, reports in */
};

/* Run "/proc/self/exe role rank nranks idhex" with the pipes on fds 3 and 4. */
static inline struct t_rank t_spawn(const char *role, int rank, int nranks, const ncclUniqueId *id)
{
    int down[2], up[2];
    char r[16], n[16], hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
    struct t_rank c;

    pid_t parent = getpid();

    t_id_hex(id, hex);
    snprintf(r, sizeof(r), "%d", rank);
    snprintf(n, sizeof(n), "%d", nranks);
    CHECK(pipe(down) == 0 && pipe(up) == 0);
    c.pid = fork();
    CHECK(c.pid >= 0);
    if (c.pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);          /* the parent is gone already */
        alarm(0);
        dup2(down[0], 3);
        dup2(up[1], 4);
        for (int fd = 5; fd < 64; fd++)
            close(fd);
        execl("/proc/self/exe", "simnccl-test-rank", role, r, n, hex, (char *)NULL);
        _exit(127);
    }
    close(down[0]);
    close(up[1]);
    c.to = down[1];
    c.from = up[0];
    return c;
}

static inline void t_send(int fd, const void *p, size_t n)
{
    CHECK_EQ(write(fd, p, n), (long long)n);
}

static inline void t_recv(int fd, void *p, size_t n)
{
    size_t got = 0;

    while (got < n) {
        ssize_t k = read(fd, (char *)p + got, n - got);
        if (k <= 0)
            FAIL("the other side closed its pipe");
        got += (size_t)k;
    }
}

static inline int t_wait(pid_t pid)
{
    int st;

    CHECK_EQ(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Rank r's process: its GPU r's primary context, current. */
static inline CUcontext t_rank_ctx(int dev)
{
    CUcontext ctx;

    CU_OK(cuInit(0));
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU_OK(cuCtxSetCurrent(ctx));
    return ctx;
}

/* FNV-1a over bytes: what ranks report to compare their results. */
static inline uint64_t t_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define T_HASH0 0xcbf29ce484222325ull

#endif
