/*
 * test_pidns.c - the simulated driver knows processes by their host pid, as
 * the real one does, also inside pid namespaces (containers).
 *
 * Two workers run as pid 1 of their own pid and mount namespaces, each with
 * its own /proc (as in a container: it cannot see its host pid). From the
 * host, this test checks that simcuda-smi lists both under distinct host pids
 * with their own memory, that the checkpoint API reached by host pid
 * releases exactly one of them and gives it back, that the restore thread id
 * is a host tid, that pid 1 on the host is not mistaken for either, and that
 * a worker killed inside its namespace is reaped from the host. Needs root
 * (unshare): skips (77) otherwise.
 */
#include "procs.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#define MiB (1ull << 20)

/* pid 1 of a new namespace: allocate, report, wait for 'v', compute, answer. */
static int worker(uint64_t mib)
{
    uint64_t n = mib * MiB / 4;
    CUdeviceptr d;
    CUmodule m;
    CUfunction add;
    uint32_t v[2];
    int32_t me = (int32_t)getpid();
    void *args[] = { &d, &n };

    t_init();
    CHECK(cuModuleLoad(&m, t_module_path()));
    CHECK(cuModuleGetFunction(&add, m, "add_one"));
    CHECK(cuMemAlloc(&d, n * 4));
    CHECK(cuMemsetD32(d, 41, n));
    CHECK_EQ(write(4, &me, sizeof(me)), sizeof(me));
    if (recv_byte(3) != 'v')
        return 1;
    CHECK(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(&v[0], d, 4));
    CHECK(cuMemcpyDtoH(&v[1], d + (n - 1) * 4, 4));
    send_byte(4, v[0] == 42 && v[1] == 42 ? 'o' : 'b');
    return 0;
}

struct boxed {
    pid_t host;                 /* the worker's pid seen from here */
    pid_t outer;                /* the process that made its namespaces */
    int to, from;
};

/*
 * A worker in new pid and mount namespaces with its own /proc. The outer
 * child unshares, forks the worker (pid 1 inside) and tells us its host pid.
 */
static struct boxed spawn_boxed(uint64_t mib)
{
    int down[2], up[2];
    struct boxed b;
    char arg[32];

    CHECK_TRUE(pipe(down) == 0 && pipe(up) == 0);
    snprintf(arg, sizeof(arg), "%llu", (unsigned long long)mib);
    b.outer = fork();
    CHECK_TRUE(b.outer >= 0);
    if (b.outer == 0) {
        pid_t w;
        int st;

        if (unshare(CLONE_NEWPID | CLONE_NEWNS) < 0)
            _exit(126);
        w = fork();
        if (w == 0) {
            /* our own /proc, as a container has: the host pid is not visible */
            if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
                mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                _exit(125);
            dup2(down[0], 3);
            dup2(up[1], 4);
            for (int fd = 5; fd < 64; fd++)
                close(fd);
            execl("/proc/self/exe", "simcuda-test-boxed", "worker", arg, (char *)NULL);
            _exit(127);
        }
        if (w < 0 || write(up[1], &w, sizeof(w)) != sizeof(w))
            _exit(124);
        close(up[1]);
        while (waitpid(w, &st, 0) < 0 && errno == EINTR)
            ;
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
    close(down[0]);
    close(up[1]);
    b.to = down[1];
    b.from = up[0];
    CHECK_EQ(read(b.from, &b.host, sizeof(b.host)), sizeof(b.host));
    return b;
}

/* The worker's own pid (written once it holds its memory). */
static int32_t ready(const struct boxed *b)
{
    int32_t nspid = 0;

    CHECK_EQ(read(b->from, &nspid, sizeof(nspid)), sizeof(nspid));
    return nspid;
}

/* simcuda-smi's used and parked bytes and nspid of host pid `pid` on device 0 (-1: not listed). */
static void smi_of(pid_t pid, long long *used, long long *parked, int *nspid)
{
    char cmd[512], line[512];
    FILE *f;

    *used = *parked = -1;
    *nspid = 0;
    snprintf(cmd, sizeof(cmd), "%s --query-compute-apps=pid,gpu_index,used_memory_bytes,"
             "parked_memory_bytes,nspid --format=csv,noheader", getenv("SIMCUDA_SMI"));
    CHECK_TRUE((f = popen(cmd, "r")) != NULL);
    while (fgets(line, sizeof(line), f)) {
        long long u, pk;
        int p, d, ns;
        if (sscanf(line, "%d, %d, %lld, %lld, %d", &p, &d, &u, &pk, &ns) == 5 && p == pid && d == 0) {
            *used = u;
            *parked = pk;
            *nspid = ns;
        }
    }
    pclose(f);
}

static size_t free_bytes(void)
{
    size_t fr, total;

    CHECK(cuMemGetInfo(&fr, &total));
    return fr;
}

int main(int argc, char **argv)
{
    struct boxed a, b;
    long long used, parked;
    CUprocessState st;
    char path[64];
    int nspid, tid = 0;
    size_t before;

    if (argc == 3 && !strcmp(argv[1], "worker"))
        return worker(strtoull(argv[2], NULL, 10));
    if (getuid() != 0) {
        printf("pidns: skipped (needs root for pid namespaces)\n");
        return 77;
    }
    sim_test_setup("pidns");
    t_init();
    a = spawn_boxed(64);
    b = spawn_boxed(32);
    /* both are pid 1 where they live, two processes here */
    CHECK_EQ(ready(&a), 1);
    CHECK_EQ(ready(&b), 1);
    CHECK_TRUE(a.host != b.host && a.host != 1 && b.host != 1);

    /* listed by host pid, each with its own memory */
    smi_of(a.host, &used, &parked, &nspid);
    CHECK_EQ(used, 64 * MiB);
    CHECK_EQ(nspid, 1);
    smi_of(b.host, &used, &parked, &nspid);
    CHECK_EQ(used, 32 * MiB);
    CHECK_EQ(nspid, 1);

    /* the checkpoint API by host pid; pid 1 here is init, not a CUDA process */
    CHECK_RES(cuCheckpointProcessGetState(1, &st), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuCheckpointProcessGetState(a.host, &st));
    CHECK_EQ(st, CU_PROCESS_STATE_RUNNING);
    CHECK(cuCheckpointProcessGetRestoreThreadId(a.host, &tid));
    snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)a.host, tid);
    CHECK_TRUE(tid != a.host && access(path, F_OK) == 0);

    /* releasing a frees exactly its memory; b keeps its own */
    before = free_bytes();
    CHECK(cuCheckpointProcessLock(a.host, NULL));
    CHECK(cuCheckpointProcessCheckpoint(a.host, NULL));
    CHECK_EQ(free_bytes() - before, 64 * MiB);
    smi_of(a.host, &used, &parked, &nspid);
    CHECK_EQ(used, 0);
    CHECK_EQ(parked, 64 * MiB);
    smi_of(b.host, &used, &parked, &nspid);
    CHECK_EQ(used, 32 * MiB);
    CHECK(cuCheckpointProcessRestore(a.host, NULL));
    CHECK(cuCheckpointProcessUnlock(a.host, NULL));
    CHECK_EQ(before - free_bytes(), 0);

    /* a computes right afterwards */
    send_byte(a.to, 'v');
    CHECK_EQ(recv_byte(a.from), 'o');
    CHECK_EQ(wait_child(a.outer), 0);

    /* b, killed where it lives, is reaped from here: its memory is free */
    before = free_bytes();
    CHECK_EQ(kill(b.host, SIGKILL), 0);
    CHECK_EQ(wait_child(b.outer), 128 + SIGKILL);
    CHECK_EQ(free_bytes() - before, 32 * MiB);
    smi_of(b.host, &used, &parked, &nspid);
    CHECK_EQ(used, -1);
    printf("pidns: ok\n");
    return 0;
}
