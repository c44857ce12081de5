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

/* What simcuda-smi says process pid holds on GPU 0 (bytes), or -1; its
 * MiB (nvidia-smi's used_memory) must agree with the bytes. */
static long long smi_used(pid_t pid)
{
    char line[512];
    long long used = -1;
    FILE *f = t_smi_query("--query-compute-apps=pid,gpu_index,used_memory_bytes,used_memory "
                          "--format=csv,noheader,nounits");

    while (fgets(line, sizeof(line), f)) {
        int p, dev;
        long long u, m;
        if (sscanf(line, "%d, %d, %lld, %lld", &p, &dev, &u, &m) == 4 && p == pid && dev == 0) {
            used = u;
            CHECK_EQ(m, u >> 20);
        }
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
