/*
 * test_keep.c - SIMCUDA_DEVICE_KEEP: freed shareable device memory stays
 * with the device, warm, for the next process that allocates it; zeroed
 * for it, bounded by the device's capacity and by time, never an exported
 * allocation, never a file planted under a kept name.
 */
#include "harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define MIB (1ull << 20)

static CUmemAllocationProp prop(void)
{
    CUmemAllocationProp p = { 0 };

    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* "<machine>.keep.0." in /dev/shm: our machine's kept files of device 0. */
static const char *kept_prefix(void)
{
    static char prefix[160];

    snprintf(prefix, sizeof(prefix), "%s.keep.0.", getenv("SIMCUDA_SHM") + 1);
    return prefix;
}

/* How many files of `bytes` (0: any size) device 0 keeps; the first's name. */
static int kept_count(uint64_t bytes, char *first, size_t len)
{
    char want[200];
    struct dirent *d;
    DIR *dir = opendir("/dev/shm");
    int n = 0;

    CHECK_TRUE(dir != NULL);
    snprintf(want, sizeof(want), "%s%llu.", kept_prefix(), (unsigned long long)bytes);
    while ((d = readdir(dir)))
        if (!strncmp(d->d_name, bytes ? want : kept_prefix(), strlen(bytes ? want : kept_prefix())) &&
            !strstr(d->d_name, ".claimed.") && n++ == 0 && first)
            snprintf(first, len, "/dev/shm/%s", d->d_name);
    closedir(dir);
    return n;
}

static void remove_kept(void)
{
    char path[300];

    while (kept_count(0, path, sizeof(path)) > 0)
        CHECK_TRUE(unlink(path) == 0);
}

/* Create, map and fill (or check zero) bytes; then unmap and release. */
static void use_once(uint64_t bytes, int fill, int expect_zero)
{
    CUmemAllocationProp p = prop();
    CUmemGenericAllocationHandle h;
    CUmemAccessDesc d = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CUdeviceptr va;
    unsigned char *buf = malloc(bytes);

    CHECK_TRUE(buf != NULL);
    CHECK(cuMemCreate(&h, bytes, &p, 0));
    CHECK(cuMemAddressReserve(&va, bytes, 0, 0, 0));
    CHECK(cuMemMap(va, bytes, 0, h, 0));
    CHECK(cuMemSetAccess(va, bytes, &d, 1));
    if (expect_zero) {
        memset(buf, 0x5a, bytes);
        CHECK(cuMemcpyDtoH(buf, va, bytes));
        for (uint64_t i = 0; i < bytes; i++)
            if (buf[i])
                T_FAIL("byte %llu of a kept allocation is 0x%02x: another process's bytes",
                       (unsigned long long)i, buf[i]);
    }
    if (fill) {
        memset(buf, fill, bytes);
        CHECK(cuMemcpyHtoD(va, buf, bytes));
    }
    CHECK(cuMemUnmap(va, bytes));
    CHECK(cuMemAddressFree(va, bytes));
    CHECK(cuMemRelease(h));
    free(buf);
}

/* The child: fills 8 MiB with 0xab and frees it, in a process of its own. */
static int role_fill(void)
{
    t_init();
    use_once(8 * MIB, 0xab, 0);
    return 0;
}

static void run_child(const char *keep)
{
    pid_t pid = fork();
    int st;

    CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        setenv("SIMCUDA_DEVICE_KEEP", keep, 1);
        execl("/proc/self/exe", "simcuda-test-child", "fill", (char *)NULL);
        _exit(127);
    }
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(int argc, char **argv)
{
    char path[300], planted[300];
    struct stat st;
    struct timespec old[2] = { { time(NULL) - 3600, 0 }, { time(NULL) - 3600, 0 } };
    size_t free0, free1, total;

    if (argc > 1 && !strcmp(argv[1], "fill"))
        return role_fill();
    setenv("SIMCUDA_DEVICE_MEM", "64M", 1);
    sim_test_setup("keep");
    atexit(remove_kept);
    setenv("SIMCUDA_DEVICE_KEEP", "600", 1);
    t_init();

    /* Off: a process that frees leaves nothing behind. */
    run_child("0");
    CHECK_EQ(kept_count(0, NULL, 0), 0);

    /* On: what a process freed is kept, private to its user... */
    run_child("600");
    CHECK_EQ(kept_count(8 * MIB, path, sizeof(path)), 1);
    CHECK_TRUE(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600 &&
               st.st_uid == geteuid());
    /* ... not charged to the device: it is free memory the device holds */
    CHECK(cuMemGetInfo(&free0, &total));
    CHECK_EQ(free0, total);
    /* ... and the next allocation of that size, in another process, gets it
     * zeroed; freed, it is kept again */
    use_once(8 * MIB, 0xcd, 1);
    CHECK_EQ(kept_count(8 * MIB, NULL, 0), 1);

    /* Kept + allocated never exceed the device: 58 MiB fresh on a 64 MiB
     * device drops the 8 MiB kept. */
    use_once(58 * MIB, 0, 0);
    CHECK_EQ(kept_count(8 * MIB, NULL, 0), 0);
    CHECK_EQ(kept_count(58 * MIB, NULL, 0), 1);
    remove_kept();

    /* An exported allocation may still be mapped elsewhere: never kept. */
    {
        CUmemAllocationProp p = prop();
        CUmemGenericAllocationHandle h;
        int fd = -1;

        CHECK(cuMemCreate(&h, 4 * MIB, &p, 0));
        CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CHECK(cuMemRelease(h));
        close(fd);
        CHECK_EQ(kept_count(0, NULL, 0), 0);
    }

    /* Kept past SIMCUDA_DEVICE_KEEP seconds: removed by the next process
     * that frees or allocates. */
    use_once(2 * MIB, 0, 0);
    CHECK_EQ(kept_count(2 * MIB, path, sizeof(path)), 1);
    CHECK_TRUE(utimensat(AT_FDCWD, path, old, 0) == 0);
    use_once(6 * MIB, 0, 0);
    CHECK_EQ(kept_count(2 * MIB, NULL, 0), 0);
    remove_kept();

    /* Planted under kept names: a file too short for the size its name
     * says, and a link. Neither is claimed nor followed; the allocations
     * come fresh, zeroed. */
    snprintf(planted, sizeof(planted), "/dev/shm/%s%llu.00000000000000aa", kept_prefix(),
             (unsigned long long)(10 * MIB));
    {
        int fd = open(planted, O_CREAT | O_EXCL | O_WRONLY, 0600);
        unsigned char junk[4096];

        CHECK_TRUE(fd >= 0);
        memset(junk, 0xee, sizeof(junk));
        CHECK_EQ(write(fd, junk, sizeof(junk)), sizeof(junk));
        close(fd);
    }
    use_once(10 * MIB, 0, 1);
    snprintf(path, sizeof(path), "/dev/shm/%s%llu.00000000000000bb", kept_prefix(),
             (unsigned long long)(12 * MIB));
    CHECK_TRUE(symlink("/etc/hostname", path) == 0);
    use_once(12 * MIB, 0, 1);
    CHECK_TRUE(lstat(path, &st) == 0 && S_ISLNK(st.st_mode));
    unlink(path);
    unlink(planted);
    CHECK(cuMemGetInfo(&free1, &total));
    CHECK_EQ(free1, total);
    printf("ok\n");
    return 0;
}
