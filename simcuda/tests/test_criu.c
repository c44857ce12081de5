/*
 * test_criu.c - CRIU refuses a process attached to the simulated GPU (it holds
 * an io_uring, as a real one holds /dev/nvidia*), and dumps and restores it
 * once its driver state is checkpointed. The checkpointed state travels in
 * the process, as with a real driver: the dumped process is unknown to the
 * driver, the restored copy is known again (checkpointed, with its restore
 * thread) and after restore + unlock it computes correctly. Needs root and
 * criu (CRIU env, else /usr/local/sbin/criu): skips (77) otherwise.
 *
 * The worker talks through files in a directory (pipes to us would be
 * external resources for CRIU): it writes "ready", waits for "verify",
 * answers in "result".
 */
#include "harness.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define MiB (1ull << 20)

static char dir[64];

static bool exists(const char *name)
{
    char p[128];

    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void touch_file(const char *name, const char *text)
{
    char p[128], tmp[140];
    FILE *f;

    snprintf(p, sizeof(p), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    CHECK_TRUE((f = fopen(tmp, "w")) != NULL);
    fputs(text, f);
    fclose(f);
    CHECK_EQ(rename(tmp, p), 0);
}

static bool wait_file(const char *name, unsigned ms)
{
    for (unsigned i = 0; i < ms / 10; i++) {
        if (exists(name))
            return true;
        t_sleep_ms(10);
    }
    return false;
}

static int worker(void)
{
    enum { N = 64 * MiB / 4 };
    CUdeviceptr d;
    CUmodule m;
    CUfunction add;
    uint64_t n = N;
    uint32_t v[2];
    void *args[] = { &d, &n };

    t_init();
    CHECK(cuModuleLoad(&m, t_module_path()));
    CHECK(cuModuleGetFunction(&add, m, "add_one"));
    CHECK(cuMemAlloc(&d, N * 4));
    CHECK(cuMemsetD32(d, 41, N));
    touch_file("ready", "");
    while (!exists("verify"))
        t_sleep_ms(10);
    CHECK(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(&v[0], d, 4));
    CHECK(cuMemcpyDtoH(&v[1], d + (N - 1) * 4ull, 4));
    touch_file("result", v[0] == 42 && v[1] == 42 ? "ok" : "bad");
    return 0;
}

static pid_t spawn_worker(const char *module)
{
    pid_t pid = fork();

    CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);

        setsid();
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        for (int fd = 3; fd < 256; fd++)
            close(fd);
        setenv("SIMCUDA_TEST_MODULE", module, 1);
        execl("/proc/self/exe", "simcuda-criu-worker", "worker", dir, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    int st;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(int argc, char **argv)
{
    const char *criu = getenv("CRIU") ? getenv("CRIU") : "/usr/local/sbin/criu";
    char buf[128] = "";
    pid_t pid;
    FILE *f;
    int st;

    if (argc == 3 && !strcmp(argv[1], "worker")) {
        snprintf(dir, sizeof(dir), "%s", argv[2]);
        return worker();
    }
    if (getuid() != 0 || access(criu, X_OK)) {
        printf("criu: skipped (needs root and %s)\n", criu);
        return 77;
    }
    sim_test_setup("criu");
    t_init();
    snprintf(dir, sizeof(dir), "/tmp/simcuda-criu-XXXXXX");
    CHECK_TRUE(mkdtemp(dir) != NULL);
    prctl(PR_SET_CHILD_SUBREAPER, 1);   /* the restored worker comes back to us */
    pid = spawn_worker(t_module_path());
    CHECK_TRUE(wait_file("ready", 20000));

    /* Attached: CRIU must refuse. */
    CHECK_TRUE(run("%s dump -t %d -D %s -o dump1.log --leave-running >/dev/null 2>&1", criu, (int)pid, dir) != 0);
    CHECK_EQ(kill(pid, 0), 0);
    CHECK(cuCheckpointProcessLock(pid, NULL));
    CHECK(cuCheckpointProcessCheckpoint(pid, NULL));
    if (run("mkdir -p %s/img && %s dump -t %d -D %s/img -o dump.log >/dev/null 2>&1", dir, criu, (int)pid, dir)) {
        run("tail -20 %s/img/dump.log >&2", dir);
        T_FAIL("criu dump of a checkpointed process failed");
    }
    CHECK_EQ(waitpid(pid, &st, 0), pid);      /* dumped and killed: reap, the pid is reused */
    CUprocessState s;
    int tid = 0;
    /* its state went with it: the driver no longer knows the pid */
    CHECK_EQ(cuCheckpointProcessGetState(pid, &s), CUDA_ERROR_INVALID_VALUE);
    if (run("%s restore -d -D %s/img -o restore.log >/dev/null 2>&1", criu, dir)) {
        run("tail -20 %s/img/restore.log >&2", dir);
        T_FAIL("criu restore failed");
    }
    /* the restored copy carries it: checkpointed, its restore thread one of its own */
    CHECK(cuCheckpointProcessGetState(pid, &s));
    CHECK_EQ(s, CU_PROCESS_STATE_CHECKPOINTED);
    CHECK(cuCheckpointProcessGetRestoreThreadId(pid, &tid));
    snprintf(buf, sizeof(buf), "/proc/%d/task/%d", (int)pid, tid);
    CHECK_TRUE(tid != (int)pid && access(buf, F_OK) == 0);
    CHECK(cuCheckpointProcessRestore(pid, NULL));
    CHECK(cuCheckpointProcessUnlock(pid, NULL));
    touch_file("verify", "");
    CHECK_TRUE(wait_file("result", 20000));
    snprintf(buf, sizeof(buf), "%s/result", dir);
    CHECK_TRUE((f = fopen(buf, "r")) != NULL);
    CHECK_TRUE(fgets(buf, sizeof(buf), f) != NULL);
    fclose(f);
    CHECK_TRUE(!strcmp(buf, "ok"));
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    run("rm -rf %s", dir);
    printf("criu: ok\n");
    return 0;
}
