/*
 * test_engine.c - the device's compute engine is shared by processes in
 * turns, as a GPU time-slices between contexts: two processes that both
 * keep the device busy never run kernels at the same time and get about
 * half of it each; one process's own streams still overlap; simcuda-smi
 * reports each process's kernel time, and the CPU time its stream threads
 * spent on device work (copies: yes; host functions: no). A process killed
 * while its kernel waits for the engine, or while one runs, leaves no claim
 * on it: the other processes' kernels go on at full speed.
 */
#include "procs.h"

#include <signal.h>
#include <sys/resource.h>
#include <time.h>

#define KERNEL_MS 5
#define SECONDS 1

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* simcuda-smi's `field` (a count) of pid on device 0 (-1 if absent). */
static long long smi_app_value(pid_t pid, const char *field)
{
    char cmd[512], line[512];
    long long k = -1;
    FILE *f;

    snprintf(cmd, sizeof(cmd), "%s --query-compute-apps=pid,gpu_index,%s "
             "--format=csv,noheader", getenv("SIMCUDA_SMI"), field);
    CHECK_TRUE((f = popen(cmd, "r")) != NULL);
    while (fgets(line, sizeof(line), f)) {
        int p, d;
        long long v;
        if (sscanf(line, "%d, %d, %lld", &p, &d, &v) == 3 && p == pid && d == 0)
            k = v;
    }
    CHECK_EQ(pclose(f), 0);
    return k;
}

static long long smi_kernel_ns(pid_t pid)
{
    return smi_app_value(pid, "kernel_time_ns");
}

static uint64_t process_cpu_ns(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ull +
           ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ull;
}

static void burn_cpu(void *arg)
{
    uint64_t until = process_cpu_ns() + *(uint64_t *)arg;
    volatile uint64_t x = 0;

    while (process_cpu_ns() < until)
        x++;
}

/*
 * device_cpu_ns: 5 async D2H copies of 256 MiB on a stream are the device's
 * work (charged, at most the process's CPU time); 100 ms of CPU in a host
 * function on the stream is the host's (not charged).
 */
static void device_cpu_accounting(void)
{
    const size_t len = 256u << 20;
    uint64_t burn = 100000000ull, c0, c1;
    long long d0, d1, d2;
    CUdeviceptr dev;
    CUstream s;
    void *host;

    CHECK(cuMemAlloc(&dev, len));
    CHECK(cuMemsetD8(dev, 7, len));
    CHECK(cuMemHostAlloc(&host, len, 0));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    d0 = smi_app_value(getpid(), "device_cpu_ns");
    c0 = process_cpu_ns();
    for (int i = 0; i < 5; i++)
        CHECK(cuMemcpyDtoHAsync(host, dev, len, s));
    CHECK(cuStreamSynchronize(s));
    c1 = process_cpu_ns();
    d1 = smi_app_value(getpid(), "device_cpu_ns");
    CHECK(cuLaunchHostFunc(s, burn_cpu, &burn));
    CHECK(cuStreamSynchronize(s));
    d2 = smi_app_value(getpid(), "device_cpu_ns");
    printf("device CPU: 1.25 GiB of copies %.1f ms (process %.1f ms), a 100 ms host function "
           "%.1f ms\n", (d1 - d0) / 1e6, (c1 - c0) / 1e6, (d2 - d1) / 1e6);
    CHECK_TRUE(d0 >= 0 && d1 - d0 >= 10000000);           /* a memmove is not 125 GB/s */
    CHECK_TRUE((uint64_t)(d1 - d0) <= c1 - c0 + 2000000);  /* part of the process's CPU */
    CHECK_TRUE(d2 - d1 < 50000000);                        /* a host function is the host's */
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFreeHost(host));
    CHECK(cuMemFree(dev));
}

/* A kernel's own threads: charged to the device when it says so
 * (charge_cpu), the host's otherwise. */
static void kernel_threads_accounting(void)
{
    CUmodule m;
    CUfunction f;
    CUstream s;
    long long d0, d1 = 0, d2 = 0;

    CHECK(cuModuleLoad(&m, t_module_path()));
    CHECK(cuModuleGetFunction(&f, m, "burn_threaded"));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (uint32_t charge = 0; charge < 2; charge++) {
        uint32_t ms = 100;
        void *args[] = { &ms, &charge };

        d0 = smi_app_value(getpid(), "device_cpu_ns");
        CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
        CHECK(cuStreamSynchronize(s));
        *(charge ? &d2 : &d1) = smi_app_value(getpid(), "device_cpu_ns") - d0;
    }
    printf("device CPU: a kernel's 100 ms thread %.1f ms uncharged, %.1f ms charged\n", d1 / 1e6,
           d2 / 1e6);
    CHECK_TRUE(d1 < 50000000);                     /* its thread is not the launch's */
    CHECK_TRUE(d2 >= 100000000 && d2 < 150000000); /* charged: all of it, once */
    CHECK(cuStreamDestroy(s));
    CHECK(cuModuleUnload(m));
}

/* Launch `mark` kernels of ms on `nstreams` streams until `until_ns`. */
static void keep_busy(CUfunction f, CUdeviceptr log, int nstreams, uint32_t ms, uint64_t until_ns)
{
    CUstream s[4];

    for (int i = 0; i < nstreams; i++)
        CHECK(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
    while (mono_ns() < until_ns) {
        for (int i = 0; i < nstreams; i++) {
            uint32_t id = 1;
            void *args[] = { &log, &id, &ms };
            CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s[i], args, NULL));
        }
        for (int i = 0; i < nstreams; i++)
            CHECK(cuStreamSynchronize(s[i]));
    }
}

static CUfunction mark_kernel(CUdeviceptr *log)
{
    CUmodule m;
    CUfunction f;

    CHECK(cuModuleLoad(&m, t_module_path()));
    CHECK(cuModuleGetFunction(&f, m, "mark"));
    CHECK(cuMemAlloc(log, 64 * sizeof(uint32_t)));
    return f;
}

/* Child: on 'G', keep the device busy for SECONDS, answer 'D', wait for 'X'. */
static int hog(void)
{
    CUdeviceptr log;
    CUfunction f;

    t_init();
    f = mark_kernel(&log);
    send_byte(4, 'R');
    CHECK_EQ(recv_byte(3), 'G');
    keep_busy(f, log, 1, KERNEL_MS, mono_ns() + SECONDS * 1000000000ull);
    send_byte(4, 'D');
    recv_byte(3);
    return 0;
}

/* Child: on 'G', launch a kernel of the ms in arg (it waits for the engine
 * while the parent holds it, or holds it itself), answer 'L', then wait to
 * be killed. */
static int doomed(const char *arg)
{
    uint32_t ms = (uint32_t)atoi(arg), id = 2;
    CUdeviceptr log;
    CUfunction f;
    CUstream s;

    t_init();
    f = mark_kernel(&log);
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    send_byte(4, 'R');
    CHECK_EQ(recv_byte(3), 'G');
    void *args[] = { &log, &id, &ms };
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    send_byte(4, 'L');
    for (;;)
        pause();
}

/* ms for n empty kernels in a row, each waited for. */
static double kernels_ms(CUfunction f, CUdeviceptr log, CUstream s, int n)
{
    uint32_t ms = 0, id = 1;
    void *args[] = { &log, &id, &ms };
    uint64_t t0 = mono_ns();

    for (int i = 0; i < n; i++) {
        CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
        CHECK(cuStreamSynchronize(s));
    }
    return (mono_ns() - t0) / 1e6;
}

/*
 * A process SIGKILLed with a kernel waiting for the engine (the parent's
 * 400 ms kernel holds it), and one killed while its own 10 s kernel holds
 * it: nothing reaps their slots (no process attaches or allocates), yet the
 * parent's next 50 kernels take their turns at once. A dead waiter that
 * still counted would make each stand back for the handoff (20 ms, engine.c),
 * 1 s in all.
 */
static void killed_claims(CUfunction f, CUdeviceptr log)
{
    uint32_t hold_ms = 400, id = 1;
    void *args[] = { &log, &id, &hold_ms };
    const char *what[] = { "waiting for the engine", "holding the engine" };
    CUstream s;

    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int holds = 0; holds < 2; holds++) {
        struct child c = spawn_role("doomed", holds ? "10000" : "0");
        double ms;

        CHECK_EQ(recv_byte(c.from), 'R');
        if (!holds)
            CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
        t_sleep_ms(50);                 /* ours runs (or the engine is free) */
        send_byte(c.to, 'G');
        CHECK_EQ(recv_byte(c.from), 'L');
        t_sleep_ms(100);                /* its kernel waits (or runs) by now */
        kill(c.pid, SIGKILL);
        CHECK_EQ(wait_child(c.pid), 128 + SIGKILL);
        CHECK(cuStreamSynchronize(s));
        ms = kernels_ms(f, log, s, 50);
        printf("a process killed %s: 50 kernels after it in %.1f ms\n", what[holds], ms);
        CHECK_TRUE(ms < 500);
    }
    CHECK(cuStreamDestroy(s));
}

int main(int argc, char **argv)
{
    struct child a, b;
    CUdeviceptr log;
    CUfunction f;
    uint64_t t0, wall;
    long long ka, kb, k0, k1;

    if (argc == 3 && !strcmp(argv[1], "hog"))
        return hog();
    if (argc == 3 && !strcmp(argv[1], "doomed"))
        return doomed(argv[2]);
    sim_test_setup("engine");
    t_init();

    /* two processes, each always with work queued */
    a = spawn_role("hog", "-");
    b = spawn_role("hog", "-");
    CHECK_EQ(recv_byte(a.from), 'R');
    CHECK_EQ(recv_byte(b.from), 'R');
    t0 = mono_ns();
    send_byte(a.to, 'G');
    send_byte(b.to, 'G');
    CHECK_EQ(recv_byte(a.from), 'D');
    CHECK_EQ(recv_byte(b.from), 'D');
    wall = mono_ns() - t0;
    ka = smi_kernel_ns(a.pid);
    kb = smi_kernel_ns(b.pid);
    printf("two processes over %.0f ms: %.0f ms and %.0f ms of kernels\n", wall / 1e6, ka / 1e6,
           kb / 1e6);
    CHECK_TRUE(ka > 0 && kb > 0);
    CHECK_TRUE((uint64_t)(ka + kb) <= wall + wall / 50);          /* never both at once */
    CHECK_TRUE(ka > (ka + kb) * 3 / 10 && kb > (ka + kb) * 3 / 10); /* in turns */
    send_byte(a.to, 'X');
    send_byte(b.to, 'X');
    CHECK_EQ(wait_child(a.pid), 0);
    CHECK_EQ(wait_child(b.pid), 0);

    /* one process, two streams of 20 ms kernels: they overlap */
    f = mark_kernel(&log);
    k0 = smi_kernel_ns(getpid());
    t0 = mono_ns();
    keep_busy(f, log, 2, 20, t0 + 400000000ull);
    k1 = smi_kernel_ns(getpid());
    wall = mono_ns() - t0;
    printf("one process, two streams over %.0f ms: %.0f ms of kernels\n", wall / 1e6, (k1 - k0) / 1e6);
    CHECK_TRUE(k1 - k0 > 0 && (uint64_t)(k1 - k0) <= wall + wall / 50);

    killed_claims(f, log);
    device_cpu_accounting();
    kernel_threads_accounting();
    printf("ok\n");
    return 0;
}
