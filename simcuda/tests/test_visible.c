/*
 * test_visible.c - CUDA_VISIBLE_DEVICES as the real driver reads it: the
 * process's ordinals are remapped, a device's UUID and PCI bus id stay its
 * own, memory is charged to the physical device, and a list that hides
 * every device makes cuInit fail with CUDA_ERROR_NO_DEVICE.
 *
 * cuInit reads the variable once, so each case runs in a child process
 * (forked before this process touches the driver).
 */
#include "harness.h"

#include <sys/wait.h>

#define MiB (1ull << 20)

static void uuid_hex(CUdevice dev, char out[33])
{
    CUuuid u;

    CHECK(cuDeviceGetUuid(&u, dev));
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", (unsigned char)u.bytes[i]);
}

/* The machine as a process that sees everything: UUIDs by physical index. */
static char phys_uuid[3][33];

/* Run fn in a child with CUDA_VISIBLE_DEVICES=cvd (NULL: unset); it must exit 0. */
static void in_child(const char *cvd, void (*fn)(void))
{
    pid_t pid = fork();
    int st;

    CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        if (cvd)
            setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
        else
            unsetenv("CUDA_VISIBLE_DEVICES");
        fn();
        exit(0);
    }
    CHECK_TRUE(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        T_FAIL("case CUDA_VISIBLE_DEVICES=%s failed (status 0x%x)", cvd ? cvd : "(unset)", st);
}

static void learn_all(void)
{
    int n;

    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&n));
    CHECK_EQ(n, 3);
    for (int d = 0; d < 3; d++) {
        char hex[33];
        uuid_hex(d, hex);
        /* a pipe would do; the parent re-derives them the same way instead */
        printf("uuid %d %s\n", d, hex);
    }
}

/* "2,0": ordinal 0 is physical 2, ordinal 1 physical 0; physical 1 is hidden. */
static void remapped(void)
{
    char hex[33], bus[32];
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    size_t free_, total;
    int n;

    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&n));
    CHECK_EQ(n, 2);
    uuid_hex(0, hex);
    CHECK_TRUE(!strcmp(hex, phys_uuid[2]));
    uuid_hex(1, hex);
    CHECK_TRUE(!strcmp(hex, phys_uuid[0]));
    CHECK_RES(cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
    /* the bus id is the physical device's, and leads back to the ordinal */
    CHECK(cuDeviceGetPCIBusId(bus, sizeof(bus), 0));
    CHECK_TRUE(!strcmp(bus, "0000:12:00.0"));
    CHECK(cuDeviceGetByPCIBusId(&dev, "0000:12:00.0"));
    CHECK_EQ(dev, 0);
    CHECK_RES(cuDeviceGetByPCIBusId(&dev, "0000:11:00.0"), CUDA_ERROR_INVALID_DEVICE);
    /* memory on ordinal 0 is charged to physical device 2 */
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemAlloc(&p, 64 * MiB));
    CHECK(cuMemGetInfo(&free_, &total));
    CHECK_EQ(total - free_, 64 * MiB);
    /* the parent looks at the machine through a process that sees everything */
    {
        pid_t w = fork();
        int st;
        CHECK_TRUE(w >= 0);
        if (w == 0) {
            char line[512];
            long long used[3] = { -1, -1, -1 };
            FILE *f = t_smi_query("--query-gpu=index,memory.used_bytes --format=csv,noheader,nounits");
            while (fgets(line, sizeof(line), f)) {
                int idx;
                long long u;
                if (sscanf(line, "%d, %lld", &idx, &u) == 2 && idx >= 0 && idx < 3)
                    used[idx] = u;
            }
            pclose(f);
            if (used[2] != (long long)(64 * MiB) || used[0] != 0 || used[1] != 0)
                T_FAIL("machine usage %lld %lld %lld, want 0 0 64 MiB", used[0], used[1], used[2]);
            _exit(0);
        }
        CHECK_TRUE(waitpid(w, &st, 0) == w);
        CHECK_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    CHECK(cuMemFree(p));
}

/* By UUID: a full one with dashes, then a unique prefix without; then an
 * entry naming no device ends the list. */
static void by_uuid(void)
{
    char hex[33];
    int n;

    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&n));
    CHECK_EQ(n, 2);
    uuid_hex(0, hex);
    CHECK_TRUE(!strcmp(hex, phys_uuid[1]));
    uuid_hex(1, hex);
    CHECK_TRUE(!strcmp(hex, phys_uuid[2]));
}

static void one_valid(void)
{
    int n;

    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&n));
    CHECK_EQ(n, 1);
}

static void none_visible(void)
{
    int n = -1;

    CHECK_RES(cuInit(0), CUDA_ERROR_NO_DEVICE);
    CHECK_RES(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
}

/* Physical UUIDs from a child that sees everything (its stdout through a pipe). */
static void read_physical_uuids(void)
{
    int fds[2], st;
    pid_t pid;
    FILE *f;
    char line[128];
    int got = 0;

    CHECK_TRUE(pipe(fds) == 0);
    pid = fork();
    CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        unsetenv("CUDA_VISIBLE_DEVICES");
        learn_all();
        fflush(stdout);
        _exit(0);
    }
    close(fds[1]);
    CHECK_TRUE((f = fdopen(fds[0], "r")) != NULL);
    while (fgets(line, sizeof(line), f)) {
        int d;
        char hex[64];
        if (sscanf(line, "uuid %d %63s", &d, hex) == 2 && d >= 0 && d < 3 && strlen(hex) == 32) {
            snprintf(phys_uuid[d], sizeof(phys_uuid[d]), "%s", hex);
            got++;
        }
    }
    fclose(f);
    CHECK_TRUE(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(got, 3);
    CHECK_TRUE(strcmp(phys_uuid[0], phys_uuid[1]) && strcmp(phys_uuid[1], phys_uuid[2]));
}

int main(void)
{
    char cvd[160];

    sim_test_setup("visible");
    setenv("SIMCUDA_DEVICES", "3", 1);
    read_physical_uuids();
    in_child("2,0", remapped);
    /* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx for physical 1, a prefix for 2 */
    snprintf(cvd, sizeof(cvd), "GPU-%.8s-%.4s-%.4s-%.4s-%.12s,GPU-%.10s", phys_uuid[1],
             phys_uuid[1] + 8, phys_uuid[1] + 12, phys_uuid[1] + 16, phys_uuid[1] + 20,
             phys_uuid[2]);
    in_child(cvd, by_uuid);
    /* the list ends at the first entry that names no device, or a repeated one */
    in_child("1,7,0", one_valid);
    in_child("1,1,0", one_valid);
    in_child("1,GPU-zz,0", one_valid);
    in_child("", none_visible);
    in_child("-1", none_visible);
    in_child("NoDevFiles", none_visible);
    printf("ok: CUDA_VISIBLE_DEVICES remaps ordinals; UUIDs, bus ids and memory stay physical\n");
    return 0;
}
