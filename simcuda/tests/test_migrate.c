/*
 * test_migrate.c - a restore on another machine, as after a CRIU restore on
 * another node: a process checkpointed on machine A (its device 0 is A's GPU
 * 1, CUDA_VISIBLE_DEVICES=1) is restored from machine B with the GPU pair
 * (A's GPU 1 -> B's GPU 0) and runs on there: its memory is B's, its data
 * intact, its device's UUID B's GPU 0's, A keeps nothing; it checkpoints
 * again on B, and is restored from a third machine C (still mapping A, where
 * it has no slot any more: a second migration must find it on B). Only a
 * Restore reaches a process of another machine.
 */
#include "procs.h"
#include "sim.h"             /* struct sim_shm: the size of a machine's mapping */

#define MiB (1ull << 20)
#define N (64 * MiB / 4)

static void send_uuid(int fd, CUdevice dev)
{
    CUuuid u;

    CHECK(cuDeviceGetUuid(&u, dev));
    CHECK_EQ(write(fd, u.bytes, 16), 16);
}

static void recv_uuid(int fd, CUuuid *u)
{
    CHECK_EQ(read(fd, u->bytes, 16), 16);
}

static size_t used_now(void)
{
    size_t free_, total;

    CHECK(cuMemGetInfo(&free_, &total));
    return total - free_;
}

/*
 * Attaches to machine A with a hole of its mapping's size just above it,
 * where the next machine's mapping (B's, at the move) lands: /proc/pid/maps
 * then lists A first, as in a restored process that freed memory above it
 * (the cluster run's second restores on a third node failed so). The
 * placeholder takes the highest gap that fits, the machine the one below.
 */
static void hole_above_machine(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t size = (sizeof(struct sim_shm) + page - 1) / page * page;
    void *above = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    CHECK_TRUE(above != MAP_FAILED);
    t_init();
    CHECK_EQ(munmap(above, size), 0);
}

/* On A: 64 MiB of 7s; 'V' checks them and adds one, answering 'v' and its
 * device's UUID; anything else ends it. */
static int worker(void)
{
    CUdeviceptr d;
    uint32_t v[2], expect = 7;

    hole_above_machine();
    CHECK(cuMemAlloc(&d, N * 4));
    CHECK(cuMemsetD32(d, expect, N));
    send_byte(4, 'R');
    send_uuid(4, 0);
    while (recv_byte(3) == 'V') {
        CHECK(cuMemcpyDtoH(v, d, 4));
        CHECK(cuMemcpyDtoH(v + 1, d + (N - 1) * 4ull, 4));
        CHECK_EQ(v[0], expect);
        CHECK_EQ(v[1], expect);
        CHECK(cuMemsetD32(d, ++expect, N));
        send_byte(4, 'v');
        send_uuid(4, 0);
    }
    return 0;
}

/* On A: 'C' locks and checkpoints the worker, 'U' only reports; both answer
 * with what A's GPU 1 holds (8 bytes). */
static int on_a(const char *worker_pid)
{
    pid_t pid = (pid_t)atoi(worker_pid);
    uint64_t used;
    char c;

    t_init();
    while ((c = recv_byte(3)) == 'C' || c == 'U') {
        if (c == 'C') {
            CHECK(cuCheckpointProcessLock(pid, NULL));
            CHECK(cuCheckpointProcessCheckpoint(pid, NULL));
        }
        used = used_now();
        CHECK_EQ(write(4, &used, 8), 8);
    }
    return 0;
}

/* On C: 'R' restores the worker (checkpointed on B) to C's GPU of the same
 * index and unlocks it, answering with what C's GPU 0 holds. */
static int on_c(const char *worker_pid)
{
    pid_t pid = (pid_t)atoi(worker_pid);
    uint64_t used;

    t_init();
    while (recv_byte(3) == 'R') {
        CHECK(cuCheckpointProcessRestore(pid, NULL));
        CHECK(cuCheckpointProcessUnlock(pid, NULL));
        used = used_now();
        CHECK_EQ(write(4, &used, 8), 8);
    }
    return 0;
}

static uint64_t ask_a(struct child *a, char c)
{
    uint64_t used;

    send_byte(a->to, c);
    CHECK_EQ(read(a->from, &used, 8), 8);
    return used;
}

static CUprocessState state(pid_t pid)
{
    CUprocessState s;

    CHECK(cuCheckpointProcessGetState(pid, &s));
    return s;
}

static char machine_a[80], machine_c[80];

static void unlink_a(void)
{
    shm_unlink(machine_a);
    shm_unlink(machine_c);
}

int main(int argc, char **argv)
{
    CUcheckpointGpuPair pair;
    CUcheckpointRestoreArgs ra = { 0 };
    struct child w, a;
    CUuuid was, now, b0;
    char pid[16];

    if (argc >= 2 && !strcmp(argv[1], "worker"))
        return worker();
    if (argc >= 3 && !strcmp(argv[1], "on-a"))
        return on_a(argv[2]);
    if (argc >= 3 && !strcmp(argv[1], "on-c"))
        return on_c(argv[2]);
    setenv("SIMCUDA_DEVICES", "2", 1);
    sim_test_setup("migrate");
    snprintf(machine_a, sizeof(machine_a), "%s-a", getenv("SIMCUDA_SHM"));
    snprintf(machine_c, sizeof(machine_c), "%s-c", getenv("SIMCUDA_SHM"));
    shm_unlink(machine_a);
    shm_unlink(machine_c);
    atexit(unlink_a);

    /* the worker and its checkpointer on A, seeing A's GPU 1 only */
    setenv("SIMCUDA_SHM", machine_a, 1);
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);
    w = spawn_role("worker", "");
    CHECK_EQ(recv_byte(w.from), 'R');
    recv_uuid(w.from, &was);
    snprintf(pid, sizeof(pid), "%d", (int)w.pid);
    a = spawn_role("on-a", pid);
    unsetenv("CUDA_VISIBLE_DEVICES");
    setenv("SIMCUDA_SHM", t_shm_name, 1);
    t_init();                                   /* we are on B */

    CHECK_EQ(ask_a(&a, 'U'), N * 4ull);
    CHECK_EQ(ask_a(&a, 'C'), 0);                /* checkpointed: A's GPU 1 is free */
    CHECK_EQ(used_now(), 0);

    /* only a Restore reaches another machine's process; malformed pairs */
    CHECK_RES(cuCheckpointProcessLock(w.pid, NULL), CUDA_ERROR_INVALID_VALUE);
    ra.gpuPairsCount = 1;
    CHECK_RES(cuCheckpointProcessRestore(w.pid, &ra), CUDA_ERROR_INVALID_VALUE);

    CHECK(cuDeviceGetUuid(&b0, 0));
    CHECK_TRUE(memcmp(b0.bytes, was.bytes, 16) != 0);     /* two machines, two GPUs */
    pair.oldUuid = was;
    pair.newUuid = b0;
    ra.gpuPairs = &pair;
    CHECK(cuCheckpointProcessRestore(w.pid, &ra));
    CHECK_EQ(state(w.pid), CU_PROCESS_STATE_LOCKED);
    CHECK_EQ(used_now(), N * 4ull);             /* on B's GPU 0 now */
    CHECK(cuCheckpointProcessUnlock(w.pid, NULL));
    CHECK_EQ(state(w.pid), CU_PROCESS_STATE_RUNNING);
    send_byte(w.to, 'V');                       /* its data came along */
    CHECK_EQ(recv_byte(w.from), 'v');
    recv_uuid(w.from, &now);
    CHECK_TRUE(memcmp(now.bytes, b0.bytes, 16) == 0);
    CHECK_EQ(ask_a(&a, 'U'), 0);                /* A keeps nothing of it */

    /* a checkpoint cycle on B, where it lives now */
    CHECK(cuCheckpointProcessLock(w.pid, NULL));
    CHECK(cuCheckpointProcessCheckpoint(w.pid, NULL));
    CHECK_EQ(used_now(), 0);
    CHECK(cuCheckpointProcessRestore(w.pid, NULL));
    CHECK(cuCheckpointProcessUnlock(w.pid, NULL));
    send_byte(w.to, 'V');
    CHECK_EQ(recv_byte(w.from), 'v');
    recv_uuid(w.from, &now);

    /* checkpointed on B, restored from C: the second move */
    struct child c;
    setenv("SIMCUDA_SHM", machine_c, 1);
    c = spawn_role("on-c", pid);
    setenv("SIMCUDA_SHM", t_shm_name, 1);
    CHECK(cuCheckpointProcessLock(w.pid, NULL));
    CHECK(cuCheckpointProcessCheckpoint(w.pid, NULL));
    send_byte(c.to, 'R');
    {
        uint64_t used;
        CHECK_EQ(read(c.from, &used, 8), 8);
        CHECK_EQ(used, N * 4ull);               /* on C's GPU 0 now */
    }
    CHECK_EQ(used_now(), 0);                    /* B keeps nothing of it */
    send_byte(w.to, 'V');                       /* its data came along again */
    CHECK_EQ(recv_byte(w.from), 'v');
    recv_uuid(w.from, &now);
    CHECK_TRUE(memcmp(now.bytes, b0.bytes, 16) != 0);     /* C's GPU, not B's */

    send_byte(w.to, 'X');
    send_byte(a.to, 'X');
    send_byte(c.to, 'X');
    CHECK_EQ(wait_child(w.pid), 0);
    CHECK_EQ(wait_child(a.pid), 0);
    CHECK_EQ(wait_child(c.pid), 0);
    printf("migrate: ok\n");
    return 0;
}
