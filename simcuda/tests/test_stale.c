/*
 * test_stale.c - a machine left in /dev/shm by another simcuda build (its
 * layout differs, as after a build directory is reused): replaced when no
 * process maps it, refused with an error while one does (two machines
 * under one name would split the processes that share it).
 */
#include "harness.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define STALE_SIZE (64u << 20)

/* An object with simcuda's magic and a layout no build has. */
static void plant_stale(const char *name)
{
    uint32_t head[2] = { 0x53494d43u /* "SIMC" */, 12345 };
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);

    CHECK_TRUE(fd >= 0);
    CHECK_TRUE(ftruncate(fd, STALE_SIZE) == 0);
    CHECK_TRUE(pwrite(fd, head, sizeof(head), 0) == (ssize_t)sizeof(head));
    close(fd);
}

/* cuInit in a child process: its result (exit codes are 8 bits). */
static CUresult init_in_child(void)
{
    int st;
    pid_t pid = fork();

    CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        CUresult r = cuInit(0);
        _exit(r == CUDA_SUCCESS ? 0 : r == CUDA_ERROR_OPERATING_SYSTEM ? 1 : 2);
    }
    CHECK_TRUE(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    return WEXITSTATUS(st) == 0   ? CUDA_SUCCESS
           : WEXITSTATUS(st) == 1 ? CUDA_ERROR_OPERATING_SYSTEM
                                  : CUDA_ERROR_UNKNOWN;
}

static off_t size_of(const char *name)
{
    struct stat st;
    int fd = shm_open(name, O_RDONLY, 0);

    CHECK_TRUE(fd >= 0 && fstat(fd, &st) == 0);
    close(fd);
    return st.st_size;
}

int main(void)
{
    const char *name;
    void *m;
    int fd;

    sim_test_setup("stale");
    name = getenv("SIMCUDA_SHM");
    plant_stale(name);

    /* mapped by a process (this one): refused, left alone */
    CHECK_TRUE((fd = shm_open(name, O_RDONLY, 0)) >= 0);
    CHECK_TRUE((m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0)) != MAP_FAILED);
    close(fd);
    CHECK_RES(init_in_child(), CUDA_ERROR_OPERATING_SYSTEM);
    CHECK_EQ(size_of(name), STALE_SIZE);

    /* mapped by nobody: replaced by a machine of this build */
    munmap(m, 4096);
    CHECK(init_in_child());
    CHECK_TRUE(size_of(name) != STALE_SIZE);
    CHECK(cuInit(0));
    printf("ok\n");
    return 0;
}
