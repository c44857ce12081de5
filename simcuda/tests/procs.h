/*
 * procs.h - helper processes for the multi-process tests: the test binary
 * re-executes itself with a role, talking over two pipes (one byte commands).
 */
#ifndef SIMCUDA_TEST_PROCS_H
#define SIMCUDA_TEST_PROCS_H

#include "harness.h"

#include <signal.h>
#include <sys/wait.h>

struct child {
    pid_t pid;
    int to, from;       /* our ends: commands out, answers in */
};

/* Run "/proc/self/exe role arg" with the pipes on fds 3 (in) and 4 (out). */
static inline struct child spawn_role(const char *role, const char *arg)
{
    int down[2], up[2];
    struct child c;

    CHECK_TRUE(pipe(down) == 0 && pipe(up) == 0);
    c.pid = fork();
    CHECK_TRUE(c.pid >= 0);
    if (c.pid == 0) {
        dup2(down[0], 3);
        dup2(up[1], 4);
        for (int fd = 5; fd < 64; fd++)
            close(fd);
        execl("/proc/self/exe", "simcuda-test-child", role, arg, (char *)NULL);
        _exit(127);
    }
    close(down[0]);
    close(up[1]);
    c.to = down[1];
    c.from = up[0];
    return c;
}

static inline void send_byte(int fd, char b)
{
    CHECK_EQ(write(fd, &b, 1), 1);
}

static inline char recv_byte(int fd)
{
    char b = 0;

    if (read(fd, &b, 1) != 1)
        T_FAIL("peer closed the pipe");
    return b;
}

static inline int wait_child(pid_t pid)
{
    int st;

    CHECK_EQ(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#endif
