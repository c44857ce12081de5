/*
 * test_multiproc.c - one device shared by real processes: out of memory
 * across processes, memory given back by a free and by a killed process,
 * simcuda-smi's view.
 */
#include "procs.h"

#define MiB (1ull << 20)

/* Child: hold `mib` MiB; 'F' frees, 'H' holds again, 'X' exits. */
static int hog(const char *mib)
{
    size_t size = strtoull(mib, NULL, 10) * MiB;
    CUdeviceptr d = 0;

    t_init();
    CHECK(cuMemAlloc(&d, size));
    CHECK(cuMemsetD8(d, 0xab, size));
    send_byte(4, 'A');
    for (;;) {
        char c = recv_byte(3);

        if (c == 'F') {
            CHECK(cuMemFree(d));
            send_byte(4, 'f');
        } else if (c == 'H') {
            CHECK(cuMemAlloc(&d, size));
            send_byte(4, 'A');
        } else {
            return 0;
        }
    }
}

/* simcuda-smi -q's "used=" of process pid, or -1. */
static long long smi_used(pid_t pid)
{
    char line[512];
    long long used = -1;
    FILE *f = t_smi_query();

    while (fgets(line, sizeof(line), f)) {
        int p;
        long long u;
        if (sscanf(line, "process pid=%d device=0 used=%lld", &p, &u) == 2 && p == pid)
            used = u;
    }
    CHECK_EQ(pclose(f), 0);
    return used;
}

int main(int argc, char **argv)
{
    CUdeviceptr d;
    size_t free_, total;
    struct child c;

    if (argc == 3 && !strcmp(argv[1], "hog"))
        return hog(argv[2]);
    sim_test_setup("multiproc");
    t_init();

    c = spawn_role("hog", "900");
    CHECK_EQ(recv_byte(c.from), 'A');
    CHECK(cuMemGetInfo(&free_, &total));
    CHECK_EQ(total - free_, 900 * MiB);
    CHECK_EQ(smi_used(c.pid), 900 * MiB);
    CHECK_RES(cuMemAlloc(&d, 200 * MiB), CUDA_ERROR_OUT_OF_MEMORY);

    send_byte(c.to, 'F');
    CHECK_EQ(recv_byte(c.from), 'f');
    CHECK(cuMemAlloc(&d, 200 * MiB));
    CHECK_EQ(smi_used(getpid()), 200 * MiB);
    CHECK(cuMemFree(d));

    /* A killed process's memory is free again once it is gone. */
    send_byte(c.to, 'H');
    CHECK_EQ(recv_byte(c.from), 'A');
    CHECK_RES(cuMemAlloc(&d, 200 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    kill(c.pid, SIGKILL);
    CHECK_EQ(wait_child(c.pid), 128 + SIGKILL);
    CHECK(cuMemAlloc(&d, 200 * MiB));
    CHECK_EQ(smi_used(c.pid), -1);
    CHECK(cuMemGetInfo(&free_, &total));
    CHECK_EQ(total - free_, 200 * MiB);
    printf("multiproc: ok\n");
    return 0;
}
