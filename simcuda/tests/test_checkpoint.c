/*
 * test_checkpoint.c - the driver checkpoint API from another process: the
 * state machine, wrong transitions, the lock timeout, device memory released
 * while checkpointed (seen through cuMemGetInfo here) and its stream workers
 * gone from /proc, restore OOM.
 */
#include "procs.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>

#define MiB (1ull << 20)

static CUfunction k_mark, k_add;

/* Child: 512 MiB of data; 'S' runs a 1.5 s kernel, 'V' verifies and
 * increments the data, 'X' exits. */
static int worker(void)
{
    enum { N = 512 * MiB / 4 };
    CUdeviceptr d, logbuf;
    CUmodule m;
    uint32_t v[2], id = 1, ms = 1500;
    uint64_t n = N;
    void *margs[] = { &logbuf, &id, &ms }, *aargs[] = { &d, &n };
    uint32_t expect = 7;

    t_init();
    CHECK(cuModuleLoad(&m, t_module_path()));
    CHECK(cuModuleGetFunction(&k_mark, m, "mark"));
    CHECK(cuModuleGetFunction(&k_add, m, "add_one"));
    CHECK(cuMemAlloc(&d, N * 4));
    CHECK(cuMemAlloc(&logbuf, 256));
    CHECK(cuMemsetD32(d, expect, N));
    send_byte(4, 'R');
    for (;;) {
        char c = recv_byte(3);

        if (c == 'S') {
            CHECK(cuLaunchKernel(k_mark, 1, 1, 1, 1, 1, 1, 0, NULL, margs, NULL));
            send_byte(4, 's');
        } else if (c == 'V') {
            CHECK(cuLaunchKernel(k_add, 1, 1, 1, 1, 1, 1, 0, NULL, aargs, NULL));
            expect++;
            CHECK(cuMemcpyDtoH(v, d, 4));
            CHECK(cuMemcpyDtoH(v + 1, d + (N - 1) * 4ull, 4));
            CHECK_EQ(v[0], expect);
            CHECK_EQ(v[1], expect);
            send_byte(4, 'v');
        } else {
            return 0;
        }
    }
}

static CUprocessState state(pid_t pid)
{
    CUprocessState s;

    CHECK(cuCheckpointProcessGetState(pid, &s));
    return s;
}

/* Tasks of pid other than its main thread and its restore thread: its
 * streams' workers, which a checkpoint parks (a checkpointed process holds
 * no engine, and CRIU lists its threads next). */
static int other_tasks(pid_t pid, int restore_tid)
{
    char path[64];
    struct dirent *e;
    DIR *d;
    int n = 0;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    if (!(d = opendir(path)))
        return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && atoi(e->d_name) != (int)pid && atoi(e->d_name) != restore_tid)
            n++;
    closedir(d);
    return n;
}

static size_t used_now(void)
{
    size_t free_, total;

    CHECK(cuMemGetInfo(&free_, &total));
    return total - free_;
}

int main(int argc, char **argv)
{
    CUcheckpointLockArgs lock = { 0 };
    struct child c;
    CUdeviceptr hog;
    char path[64];
    struct stat st;
    int tid;

    if (argc >= 2 && !strcmp(argv[1], "worker"))
        return worker();
    sim_test_setup("checkpoint");
    CHECK_RES(cuCheckpointProcessGetState(getpid(), &(CUprocessState){ 0 }), CUDA_ERROR_NOT_INITIALIZED);
    t_init();
    c = spawn_role("worker", "");
    CHECK_EQ(recv_byte(c.from), 'R');

    CHECK_EQ(state(c.pid), CU_PROCESS_STATE_RUNNING);
    CHECK_RES(cuCheckpointProcessGetState(999999, &(CUprocessState){ 0 }), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuCheckpointProcessLock(999999, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuCheckpointProcessGetRestoreThreadId(c.pid, &tid));
    snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)c.pid, tid);
    CHECK_TRUE(stat(path, &st) == 0);

    /* Wrong transitions from RUNNING. */
    CHECK_RES(cuCheckpointProcessCheckpoint(c.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_RES(cuCheckpointProcessRestore(c.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_RES(cuCheckpointProcessUnlock(c.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);

    /* Work in flight longer than the timeout: the lock fails, still RUNNING. */
    send_byte(c.to, 'S');
    CHECK_EQ(recv_byte(c.from), 's');
    lock.timeoutMs = 100;
    CHECK_RES(cuCheckpointProcessLock(c.pid, &lock), CUDA_ERROR_NOT_READY);
    CHECK_EQ(state(c.pid), CU_PROCESS_STATE_RUNNING);
    lock.reserved0 = 1;
    CHECK_RES(cuCheckpointProcessLock(c.pid, &lock), CUDA_ERROR_INVALID_VALUE);
    lock.reserved0 = 0;
    lock.timeoutMs = 0;         /* no timeout: waits for the kernel */
    CHECK(cuCheckpointProcessLock(c.pid, &lock));
    CHECK_EQ(state(c.pid), CU_PROCESS_STATE_LOCKED);
    CHECK_RES(cuCheckpointProcessLock(c.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_RES(cuCheckpointProcessRestore(c.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);

    /* While locked, the worker's calls block: 'V' gets no answer yet. */
    send_byte(c.to, 'V');
    CHECK_EQ(used_now(), 512 * MiB + 4096);

    CHECK_TRUE(other_tasks(c.pid, tid) > 0);  /* its streams' workers */
    CHECK(cuCheckpointProcessCheckpoint(c.pid, NULL));
    CHECK_EQ(state(c.pid), CU_PROCESS_STATE_CHECKPOINTED);
    CHECK_EQ(used_now(), 0);            /* its device memory is released */
    CHECK_EQ(other_tasks(c.pid, tid), 0);     /* and no engine thread is left */
    CHECK_RES(cuCheckpointProcessUnlock(c.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_RES(cuCheckpointProcessCheckpoint(c.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_RES(cuCheckpointProcessLock(c.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);

    /* Someone else takes the memory: restore fails, still CHECKPOINTED. */
    CHECK(cuMemAlloc(&hog, 700 * MiB));
    CHECK_RES(cuCheckpointProcessRestore(c.pid, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(state(c.pid), CU_PROCESS_STATE_CHECKPOINTED);
    CHECK(cuMemFree(hog));

    CHECK(cuCheckpointProcessRestore(c.pid, NULL));
    CHECK_EQ(state(c.pid), CU_PROCESS_STATE_LOCKED);
    CHECK_EQ(used_now(), 512 * MiB + 4096);
    CHECK(cuCheckpointProcessUnlock(c.pid, NULL));
    CHECK_EQ(state(c.pid), CU_PROCESS_STATE_RUNNING);
    CHECK_EQ(recv_byte(c.from), 'v');   /* the blocked call went on; data intact */

    /* A second full cycle, back to back. */
    CHECK(cuCheckpointProcessLock(c.pid, NULL));
    CHECK(cuCheckpointProcessCheckpoint(c.pid, NULL));
    CHECK(cuCheckpointProcessRestore(c.pid, NULL));
    CHECK(cuCheckpointProcessUnlock(c.pid, NULL));
    send_byte(c.to, 'V');
    CHECK_EQ(recv_byte(c.from), 'v');

    send_byte(c.to, 'X');
    CHECK_EQ(wait_child(c.pid), 0);
    CHECK_RES(cuCheckpointProcessGetState(c.pid, &(CUprocessState){ 0 }), CUDA_ERROR_INVALID_VALUE);
    printf("checkpoint: ok\n");
    return 0;
}
