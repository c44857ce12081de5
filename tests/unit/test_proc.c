/*
 * lib/common/proc.c: what /proc says about a process, on this process, its
 * threads, children and descriptors; above all the tree walk, which must
 * list a child that a thread other than the main one forked (the kernel
 * lists it under that thread, /proc/PID/task/TID/children) and its children
 * after it.
 *
 * meson runs it with TCGPU_PROC_TEST=present in its environment.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/proc.h"
#include "../common/check.h"

static int index_of(const pid_t *v, int n, pid_t pid)
{
    for (int i = 0; i < n; i++)
        if (v[i] == pid)
            return i;
    return -1;
}

/* A thread that forks a child, which forks a grandchild; the thread then
 * stays alive until `release` is closed (a thread that exits hands its
 * children to the main thread). Both descendants sleep until killed. */
struct forker {
    pthread_t thread;
    pid_t tid, child, grandchild;
    int ready[2], release[2];
};

static void sleep_forever(void)
{
    for (;;)
        pause();
}

static void *fork_from_thread(void *arg)
{
    struct forker *f = arg;
    int pids[2];
    char c;

    f->tid = gettid();
    if (pipe(pids) < 0)
        return NULL;
    if ((f->child = fork()) == 0) {
        pid_t g = fork();
        if (g == 0)
            sleep_forever();
        (void)!write(pids[1], &g, sizeof(g));
        sleep_forever();
    }
    if (f->child < 0 || read(pids[0], &f->grandchild, sizeof(f->grandchild)) != sizeof(pid_t))
        f->grandchild = -1;
    close(pids[0]);
    close(pids[1]);
    (void)!write(f->ready[1], "r", 1);
    (void)!read(f->release[0], &c, 1);
    return NULL;
}

static int forker_start(struct forker *f)
{
    char c;

    memset(f, 0, sizeof(*f));
    if (pipe(f->ready) < 0 || pipe(f->release) < 0 ||
        pthread_create(&f->thread, NULL, fork_from_thread, f) != 0)
        return -1;
    return read(f->ready[0], &c, 1) == 1 && f->child > 0 && f->grandchild > 0 ? 0 : -1;
}

/* main() made this process a subreaper: the grandchild comes back to it. */
static void forker_end(struct forker *f)
{
    if (f->child > 0) {
        kill(f->child, SIGKILL);
        waitpid(f->child, NULL, 0);
    }
    if (f->grandchild > 0) {
        kill(f->grandchild, SIGKILL);
        waitpid(f->grandchild, NULL, 0);
    }
    close(f->release[1]);
    pthread_join(f->thread, NULL);
    close(f->release[0]);
    close(f->ready[0]);
    close(f->ready[1]);
}

static int test_tree_sees_a_threads_children(void)
{
    struct forker f;
    pid_t pids[16], main_child;
    int n, c, g, m;

    REQUIRE(forker_start(&f) == 0, "cannot fork from a thread: %s", strerror(errno));
    if ((main_child = fork()) == 0)
        sleep_forever();
    n = tcgpu_proc_tree(getpid(), pids, 16);
    CHECK(n == 4, "%d processes listed, want 4 (this, two children, a grandchild)", n);
    c = index_of(pids, n, f.child);
    g = index_of(pids, n, f.grandchild);
    m = index_of(pids, n, main_child);
    CHECK(n > 0 && pids[0] == getpid(), "the root is not first");
    CHECK(c > 0, "the child forked by thread %d is not listed", (int)f.tid);
    CHECK(g > c, "its grandchild is not listed after it (%d, %d)", c, g);
    CHECK(m > 0, "the child forked by the main thread is not listed");
    /* more than max: the first max, root's side */
    CHECK(tcgpu_proc_tree(getpid(), pids, 1) == -E2BIG && pids[0] == getpid());
    CHECK(tcgpu_proc_tree(f.grandchild, pids, 16) == 1 && pids[0] == f.grandchild);
    kill(main_child, SIGKILL);
    waitpid(main_child, NULL, 0);
    forker_end(&f);
    return 0;
}

static int test_tree_of_nobody(void)
{
    pid_t pids[4];

    CHECK(tcgpu_proc_tree(0, pids, 4) == -ESRCH);
    CHECK(tcgpu_proc_tree(INT_MAX, pids, 4) == -ESRCH);
    return 0;
}

static int count_thread(pid_t pid, pid_t tid, void *arg)
{
    (void)pid;
    (void)tid;
    ++*(int *)arg;
    return 0;
}

static int stop_at(pid_t pid, pid_t tid, void *arg)
{
    (void)pid;
    return tid == *(pid_t *)arg ? 7 : 0;
}

static int test_threads(void)
{
    struct forker f;
    char comm[64] = "";
    int n = 0;

    REQUIRE(forker_start(&f) == 0);
    pthread_setname_np(f.thread, "proc-thread");
    CHECK(tcgpu_proc_each_thread(getpid(), count_thread, &n) == 0 && n == 2, "%d threads", n);
    CHECK(tcgpu_proc_each_thread(getpid(), stop_at, &f.tid) == 7);
    CHECK(tcgpu_proc_comm(getpid(), f.tid, comm, sizeof(comm)) == 0 &&
          !strcmp(comm, "proc-thread"), "thread's comm '%s'", comm);
    CHECK(tcgpu_proc_each_thread(INT_MAX, count_thread, &n) == -ESRCH);
    forker_end(&f);
    return 0;
}

static int test_stat_and_live(void)
{
    struct tcgpu_proc_stat st;
    pid_t z;

    REQUIRE(tcgpu_proc_stat(getpid(), &st) == 0);
    CHECK(st.state == 'R', "state %c", st.state);
    CHECK(st.ppid == getppid() && st.start_ticks > 0);
    CHECK(tcgpu_proc_live(getpid()));
    CHECK(tcgpu_proc_stat(INT_MAX, &st) == -ESRCH && !tcgpu_proc_live(INT_MAX));
    CHECK(tcgpu_proc_stat(0, &st) == -ESRCH);
    /* a zombie is not live */
    if ((z = fork()) == 0)
        _exit(0);
    REQUIRE(z > 0);
    for (int i = 0; i < 2000 && tcgpu_proc_stat(z, &st) == 0 && st.state != 'Z'; i++)
        usleep(1000);
    CHECK(st.state == 'Z' && !tcgpu_proc_live(z), "child state %c", st.state);
    waitpid(z, NULL, 0);
    return 0;
}

static int test_status_and_comm(void)
{
    struct tcgpu_proc_status st, self;
    char comm[64] = "unchanged";
    uid_t uid = 12345;

    REQUIRE(tcgpu_proc_status(getpid(), 0, &st) == 0);
    CHECK(st.uid[0] == getuid() && st.uid[1] == geteuid());
    CHECK(st.nspid == getpid(), "NSpid %d", (int)st.nspid);
    CHECK(tcgpu_proc_status(0, 0, &self) == 0 && self.cap_eff == st.cap_eff);
    CHECK(tcgpu_proc_status(INT_MAX, 0, &st) == -ESRCH);
    CHECK(tcgpu_proc_uid(getpid(), &uid) == 0 && uid == geteuid());
    CHECK(tcgpu_proc_uid(0, &uid) == -ESRCH);
    CHECK(tcgpu_proc_uid(INT_MAX, &uid) == -ESRCH);
    CHECK(tcgpu_proc_comm(getpid(), 0, comm, sizeof(comm)) == 0 && !strcmp(comm, "test_proc"),
          "comm '%s'", comm);
    strcpy(comm, "unchanged");
    CHECK(tcgpu_proc_comm(INT_MAX, 0, comm, sizeof(comm)) == -ESRCH && !strcmp(comm, "unchanged"));
    return 0;
}

static int test_environ_maps_files(void)
{
    static char env[1 << 16];
    size_t n = tcgpu_proc_environ(getpid(), env, sizeof(env));
    int found = 0, fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

    for (size_t i = 0; i < n; i += strlen(env + i) + 1)
        found |= !strcmp(env + i, "TCGPU_PROC_TEST=present");
    CHECK(found, "TCGPU_PROC_TEST=present not in the %zu bytes of /proc/self/environ", n);
    CHECK(tcgpu_proc_environ(INT_MAX, env, sizeof(env)) == 0);
    CHECK(tcgpu_proc_maps_file(getpid(), "libc.so"));
    CHECK(!tcgpu_proc_maps_file(getpid(), "libtcgpu.so"));
    REQUIRE(fd >= 0);
    CHECK(tcgpu_proc_holds_file(getpid(), "/dev/null"));
    CHECK(!tcgpu_proc_holds_file(getpid(), "/nonexistent/"));
    close(fd);
    return 0;
}

static int test_cmdline_and_fds(void)
{
    char buf[4096], want[64], small[8];
    size_t n = tcgpu_proc_cmdline(0, buf, sizeof(buf));
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

    CHECK(n > 9 && !strcmp(buf + strlen(buf) - 9, "test_proc"), "argv[0] '%s'", buf);
    CHECK(tcgpu_proc_cmdline(getpid(), buf, sizeof(buf)) == n);
    CHECK(tcgpu_proc_cmdline(INT_MAX, buf, sizeof(buf)) == 0);
    REQUIRE(fd >= 0);
    snprintf(want, sizeof(want), "/proc/self/fd/%d", fd);
    CHECK(tcgpu_proc_fd_path(fd, NULL, buf, sizeof(buf)) == 0 && !strcmp(buf, want), "%s", buf);
    CHECK(tcgpu_proc_fd_path(fd, ".", buf, sizeof(buf)) == 0 && !strcmp(buf, want), "%s", buf);
    snprintf(want, sizeof(want), "/proc/self/fd/%d/x", fd);
    CHECK(tcgpu_proc_fd_path(fd, "x", buf, sizeof(buf)) == 0 && !strcmp(buf, want), "%s", buf);
    CHECK(tcgpu_proc_fd_path(fd, NULL, small, sizeof(small)) == -ENAMETOOLONG);
    CHECK(tcgpu_proc_fd_target(fd, buf, sizeof(buf)) == 9 && !strcmp(buf, "/dev/null"), "%s", buf);
    close(fd);
    CHECK(tcgpu_proc_fd_target(fd, buf, sizeof(buf)) < 0 && buf[0] == '\0');
    return 0;
}

static int find_pid(pid_t pid, void *arg)
{
    return pid == *(pid_t *)arg;
}

static int test_self_and_each(void)
{
    char exe[PATH_MAX], dir[PATH_MAX];
    pid_t me = getpid(), nobody = INT_MAX;
    struct tcgpu_proc_ns ns;
    int fd;

    REQUIRE(tcgpu_proc_self_exe(exe, sizeof(exe)) > 0);
    CHECK(strlen(exe) > 10 && !strcmp(exe + strlen(exe) - 10, "/test_proc"), "exe %s", exe);
    REQUIRE(tcgpu_proc_self_dir(dir, sizeof(dir)) == 0);
    CHECK(!strncmp(exe, dir, strlen(dir)) && !strcmp(exe + strlen(dir), "/test_proc"));
    CHECK(tcgpu_proc_each(find_pid, &me) == 1);
    CHECK(tcgpu_proc_each(find_pid, &nobody) == 0);
    CHECK(tcgpu_proc_ns(me, &ns) == 0 && ns.nspid == me && !ns.foreign_mounts);
    CHECK(tcgpu_proc_ns(INT_MAX, &ns) == -ESRCH);
    fd = tcgpu_proc_open_in_root(me, "/", O_DIRECTORY);
    CHECK(fd >= 0, "%s", strerror(-fd));
    if (fd >= 0)
        close(fd);
    return 0;
}

int main(void)
{
    /* orphans come back to this process, which reaps them (init may not) */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    RUN(test_tree_sees_a_threads_children);
    RUN(test_tree_of_nobody);
    RUN(test_threads);
    RUN(test_stat_and_live);
    RUN(test_status_and_comm);
    RUN(test_environ_maps_files);
    RUN(test_cmdline_and_fds);
    RUN(test_self_and_each);
    return T_EXIT_STATUS();
}
