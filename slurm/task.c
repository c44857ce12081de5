/*
 * task.c - one task of a Slurm job step under tcgpu-slurm (docs/slurm.md).
 *
 * Started: when the step has a whole set of saves (saves.c) the task is
 * restored from its own with `gpuckpt restore` (through tcgpud for a user),
 * else its program starts afresh under `gpuckpt run`, in a session of its
 * own (CRIU dumps whole sessions), stdin from /dev/null and its output into
 * a file of the job's directory that the wrapper copies to its own stdout
 * (Slurm's pipe would tie the program to slurmstepd, which CRIU cannot dump).
 *
 * Signals: Slurm sends them to every process of the step; the program's are
 * held back (defer.c) and the wrapper decides, asking slurmctld:
 *   - the grace-time signal of a preemption: `gpuckpt save` of the program's
 *     tree into the job's directory; once every task of the step has saved,
 *     the job is requeued (slurm_requeue) at once instead of at the end of
 *     the grace time, and the wrapper waits to be ended by it. A batch job
 *     whose step ended by itself would be completed, not requeued.
 *   - any other SIGTERM (scancel, the time limit), SIGINT, SIGHUP: the
 *     program gets it as it would have (the release signal); nothing is saved.
 *   - SIGTSTP (scontrol suspend, PreemptMode=SUSPEND,GANG): the program's
 *     GPU memory is taken off the GPU (gpuckpt suspend) before Slurm's
 *     SIGSTOP; SIGCONT puts it back (gpuckpt resume).
 * A save that fails leaves the program running: Slurm requeues the job at
 * the end of the grace time, and it starts again from the beginning (a task
 * alone), or fails (when other tasks did save: saves.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/companion.h"
#include "common/install_dirs.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/signals.h"
#include "tcgpu_slurm.h"

#define TICK_MS            200
#define WHOLE_SET_WAIT_MS  (10 * 60 * 1000)   /* the longest grace time worth waiting */

enum task_state { T_RUNNING, T_SAVED, T_SAVE_FAILED };

struct task {
    const struct ts_job *job;
    char gpuckpt[PATH_MAX];
    char defer[PATH_MAX];
    char out_path[PATH_MAX];
    int out_fd;                 /* the program's output file, read to relay it */
    pid_t child;                /* gpuckpt run (the program itself) or gpuckpt restore */
    pid_t root;                 /* the program's tree: the child, or the restored root */
    int restored;               /* root is not our child: Slurm does not signal it */
    int err_fd;                 /* gpuckpt restore's stderr, parsed for the root */
    char err_buf[4096];
    size_t err_len;
    enum task_state state;
    int suspended;              /* by a SIGTSTP */
    int requeued;               /* slurmctld took our requeue */
    int release_sig;
};

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

static int executable_file(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* A companion of tcgpu-slurm (common/companion.h) into out, or $env when set. */
static int ts_find_companion(const char *env, const char *const *dirs, const char *name,
                             int (*fits)(const char *), char *out, size_t len)
{
    const char *e = getenv(env);
    char looked[2048];

    if (e && *e) {
        snprintf(out, len, "%s", e);
        if (access(out, R_OK) == 0)
            return 0;
        log_err("%s=%s: %s", env, e, strerror(errno));
        return -ENOENT;
    }
    if (tcgpu_companion_find(dirs, name, fits, looked, sizeof(looked)) == 0 &&
        strlen(looked) < len) {
        memcpy(out, looked, strlen(looked) + 1);
        return 0;
    }
    log_err("cannot find %s in %s (set %s)", name, looked, env);
    return -ENOENT;
}

static int find_tools(struct task *t)
{
    /* the build tree's place first, then the install's (common/install_dirs.h) */
    static const char *const gpuckpt_dirs[] = { "../tools/gpuckpt", ".", TCGPU_BINDIR, NULL };
    static const char *const defer_dirs[] = { ".", TCGPU_BINDIR_TO_PKGLIBDIR, TCGPU_PKGLIBDIR,
                                              NULL };

    if (ts_find_companion("TCGPU_GPUCKPT", gpuckpt_dirs, "gpuckpt", executable_file, t->gpuckpt,
                          sizeof(t->gpuckpt)) < 0 ||
        ts_find_companion("TCGPU_SLURM_DEFER_LIB", defer_dirs, "libtcgpu-slurm-defer.so", NULL,
                          t->defer, sizeof(t->defer)) < 0)
        return -ENOENT;
    return 0;
}

/* Copy what the program wrote since the last time to our stdout (Slurm's). */
static void relay_output(struct task *t)
{
    char buf[65536];
    ssize_t n;

    if (t->out_fd < 0)
        return;
    while ((n = read(t->out_fd, buf, sizeof(buf))) > 0)
        if (write(1, buf, (size_t)n) != n)
            break;
}

/* Lines of gpuckpt restore's stderr go to ours; "restored the tree under PID" names the root. */
static void relay_restore_err(struct task *t)
{
    ssize_t n;
    char *nl;

    if (t->err_fd < 0)
        return;
    while ((n = read(t->err_fd, t->err_buf + t->err_len, sizeof(t->err_buf) - 1 - t->err_len)) > 0) {
        t->err_len += (size_t)n;
        t->err_buf[t->err_len] = '\0';
        while ((nl = strchr(t->err_buf, '\n'))) {
            int pid;
            *nl = '\0';
            fprintf(stderr, "%s\n", t->err_buf);
            if (sscanf(t->err_buf, "restored the tree under %d", &pid) == 1 && pid > 0) {
                t->root = pid;
                log_info("restored from its save: the program runs on as pid %d", pid);
            }
            t->err_len -= (size_t)(nl + 1 - t->err_buf);
            memmove(t->err_buf, nl + 1, t->err_len + 1);
        }
        if (t->err_len == sizeof(t->err_buf) - 1)
            t->err_len = 0;     /* a line too long to be the one we look for */
    }
    if (n == 0) {
        close(t->err_fd);
        t->err_fd = -1;
    }
}

/* Run gpuckpt ARGS... and wait; its output goes to our stderr. Its exit code, or -errno. */
static int gpuckpt(struct task *t, const char *const args[])
{
    char *argv[16];
    int n = 0, st;
    pid_t pid;

    argv[n++] = t->gpuckpt;
    for (; *args && n < 15; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    if ((pid = fork()) < 0)
        return -errno;
    if (pid == 0) {
        dup2(2, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -errno;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* pid and its descendants (every thread's children), at most max, parents first. */
static int tree_pids(pid_t root, pid_t *out, int max)
{
    int n = tcgpu_proc_tree(root, out, max);

    return n == -E2BIG ? max : n < 0 ? 0 : n;
}

static void signal_tree(pid_t root, int sig)
{
    pid_t pids[256];
    int n = tree_pids(root, pids, 256);

    for (int i = 0; i < n; i++)
        kill(pids[i], sig);
}

/* ---------------------------------------------------------------------------
 * Starting: afresh, or from the save
 * ------------------------------------------------------------------------- */

static int open_output(struct task *t, int relay_from_end)
{
    int fd;

    ts_output_path(t->job, t->job->task, t->out_path, sizeof(t->out_path));
    fd = open(t->out_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        log_err("cannot open %s: %s", t->out_path, strerror(errno));
        return -errno;
    }
    t->out_fd = open(t->out_path, O_RDONLY | O_CLOEXEC);
    if (t->out_fd >= 0 && relay_from_end)
        lseek(t->out_fd, 0, SEEK_END);  /* the run before us relayed what is there */
    return fd;
}

/* LD_PRELOAD with the defer library first, for the program (gpuckpt run adds libtcgpu.so). */
static int preload_defer(const char *lib)
{
    const char *old = getenv("LD_PRELOAD");
    char *v;
    int r;

    if (asprintf(&v, "%s%s%s", lib, old && *old ? ":" : "", old && *old ? old : "") < 0)
        return -1;
    r = setenv("LD_PRELOAD", v, 1);
    free(v);
    return r;
}

static int start_fresh(struct task *t, char *const argv[])
{
    int out = open_output(t, 0), argc = 0;
    char **av;

    if (out < 0)
        return out;
    while (argv[argc])
        argc++;
    if (!(av = calloc((size_t)argc + 4, sizeof(*av)))) {
        close(out);
        return -ENOMEM;
    }
    av[0] = t->gpuckpt;
    av[1] = "run";
    av[2] = "--";
    memcpy(av + 3, argv, (size_t)argc * sizeof(*av));
    t->child = fork();
    if (t->child == 0) {
        int null = open("/dev/null", O_RDONLY);
        setsid();
        if (null >= 0)
            dup2(null, 0);
        dup2(out, 1);
        dup2(out, 2);
        setenv("TCGPU_SLURM_DEFER", TS_DEFERRED_SIGNALS, 0);
        setenv("TCGPU_SLURM_RELEASE", TS_RELEASE_SIGNAL, 0);
        if (preload_defer(t->defer) < 0)
            _exit(126);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(av[0], av);
        dprintf(2, "tcgpu-slurm: cannot run %s: %s\n", av[0], strerror(errno));
        _exit(127);
    }
    free(av);
    close(out);
    if (t->child < 0)
        return -errno;
    t->root = t->child;
    log_info("started %s as pid %d (output: %s)", argv[0], (int)t->child, t->out_path);
    return 0;
}

static int start_restore(struct task *t, const char *save)
{
    int errp[2], out = open_output(t, 1);

    if (out < 0)
        return out;
    close(out);
    if (pipe2(errp, O_CLOEXEC) < 0)
        return -errno;
    t->child = fork();
    if (t->child == 0) {
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        dup2(errp[1], 2);
        dup2(errp[1], 1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execl(t->gpuckpt, t->gpuckpt, "restore", "-D", save, (char *)NULL);
        dprintf(2, "tcgpu-slurm: cannot run %s: %s\n", t->gpuckpt, strerror(errno));
        _exit(127);
    }
    close(errp[1]);
    if (t->child < 0) {
        close(errp[0]);
        return -errno;
    }
    t->err_fd = errp[0];
    fcntl(t->err_fd, F_SETFL, O_NONBLOCK);
    t->restored = 1;
    log_info("restoring from %s (run %u of job %u)", save, t->job->restarts, t->job->job_id);
    return 0;
}

/* ---------------------------------------------------------------------------
 * What a signal means
 * ------------------------------------------------------------------------- */

static void wait_whole_and_requeue(struct task *t)
{
    uint64_t until = now_ms() + WHOLE_SET_WAIT_MS;

    while (!ts_set_whole(t->job, t->job->restarts)) {
        if (now_ms() > until) {
            log_err("other tasks of the step did not save in time; Slurm requeues the job at "
                    "the end of its grace time, and it will not come back from this save");
            return;
        }
        usleep(TICK_MS * 1000);
    }
    if (ts_job_requeue(t->job->job_id) == 0) {
        t->requeued = 1;
        log_info("every task saved: requeued job %u", t->job->job_id);
    }
}

static void save_for_preemption(struct task *t)
{
    char path[PATH_MAX], pid[16];
    uint64_t t0 = now_ms();
    int r;

    ts_save_path(t->job, t->job->task, t->job->restarts, path, sizeof(path));
    snprintf(pid, sizeof(pid), "%d", (int)t->root);
    log_info("preempted: saving the program (pid %d) to %s", (int)t->root, path);
    r = gpuckpt(t, (const char *const[]){ "save", pid, "-D", path, NULL });
    relay_output(t);
    if (r != 0) {
        t->state = T_SAVE_FAILED;
        log_err("the save failed (gpuckpt exit %d, above): the program runs on until Slurm ends "
                "it at the end of the grace time; nothing of it is kept", r);
        return;
    }
    t->state = T_SAVED;
    log_info("saved in %.2f s", (double)(now_ms() - t0) / 1e3);
    wait_whole_and_requeue(t);
}

/* The program gets what Slurm sent it: restored trees are not Slurm's, so
 * the signal goes to them first; then the release applies it. */
static void pass_on(struct task *t, int sig)
{
    if (t->restored && sig != SIGTSTP)
        signal_tree(t->root, sig);
    signal_tree(t->root, t->release_sig);
}

static void gpu_off(struct task *t)
{
    pid_t pids[256];
    int n = tree_pids(t->root, pids, 256);
    uint64_t t0 = now_ms();

    for (int i = 0; i < n; i++) {
        char pid[16];
        snprintf(pid, sizeof(pid), "%d", (int)pids[i]);
        /* exit 3: not a tcgpu process (a helper of the program); fine */
        if (gpuckpt(t, (const char *const[]){ "suspend", pid, "-q", NULL }) == 0)
            t->suspended = 1;
    }
    if (t->suspended)
        log_info("suspended by Slurm: GPU memory released in %.2f s", (double)(now_ms() - t0) / 1e3);
}

static void gpu_on(struct task *t)
{
    pid_t pids[256];
    int n = tree_pids(t->root, pids, 256);

    for (int i = 0; i < n; i++) {
        char pid[16];
        snprintf(pid, sizeof(pid), "%d", (int)pids[i]);
        gpuckpt(t, (const char *const[]){ "resume", pid, "-q", NULL });
    }
    t->suspended = 0;
    log_info("resumed by Slurm: back on the GPU");
}

static void on_signal(struct task *t, int sig)
{
    int preempted;

    if (t->state == T_SAVED && t->requeued && sig == SIGTERM) {
        /* the requeue ends the job's steps: going now spares it the KillWait */
        log_info("ending for the requeue");
        exit(0);
    }
    if (t->state != T_RUNNING || sig == SIGCHLD)
        return;                 /* saved (Slurm ends us) or failed (it runs on to the end) */
    switch (sig) {
    case SIGTSTP:
        gpu_off(t);
        pass_on(t, sig);
        return;
    case SIGCONT:
        if (t->suspended)
            gpu_on(t);
        return;
    case SIGTERM:
    case SIGUSR1:
    case SIGUSR2:
        preempted = ts_job_preempted(t->job->job_id);
        if (preempted == 1 && t->root > 0) {
            save_for_preemption(t);
            return;
        }
        if (sig != SIGTERM)
            return;             /* the --signal warning of a time limit: the program's to hear */
        log_info("SIGTERM, not a preemption (scancel or the time limit): the program gets it");
        break;
    default:
        log_info("signal %d: the program gets it", sig);
        break;
    }
    pass_on(t, sig);
}

/* ---------------------------------------------------------------------------
 * The loop
 * ------------------------------------------------------------------------- */

static int child_status(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int loop(struct task *t, int sfd)
{
    for (;;) {
        struct pollfd p[2] = { { .fd = sfd, .events = POLLIN }, { .fd = t->err_fd, .events = POLLIN } };
        struct signalfd_siginfo si;
        int st;

        if (poll(p, t->err_fd >= 0 ? 2 : 1, TICK_MS) > 0 && (p[0].revents & POLLIN) &&
            read(sfd, &si, sizeof(si)) == sizeof(si))
            on_signal(t, (int)si.ssi_signo);
        relay_restore_err(t);
        relay_output(t);
        if (t->child > 0 && waitpid(t->child, &st, WNOHANG) == t->child) {
            t->child = 0;
            relay_restore_err(t);
            relay_output(t);
            if (t->state == T_SAVED)
                continue;       /* CRIU ended the program: wait for Slurm to end us */
            if (t->restored && !t->root)
                log_err("the save could not be restored (above): the job fails rather than "
                        "start again from the beginning");
            return child_status(st);
        }
    }
}

int ts_run_task(const struct ts_job *job, char *const argv[])
{
    struct task t = { .job = job, .out_fd = -1, .err_fd = -1 };
    char why[512], save[PATH_MAX];
    sigset_t mask;
    unsigned run;
    int r, sfd;

    t.release_sig = tcgpu_signal_parse(TS_RELEASE_SIGNAL);
    if (find_tools(&t) < 0 || ts_job_dir(job) < 0)
        return 1;
    /* every signal Slurm may send is ours to read before anything starts */
    sigemptyset(&mask);
    for (int s = 0; s < 8; s++)
        sigaddset(&mask, (int[]){ SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT,
                                  SIGCHLD }[s]);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    if ((sfd = signalfd(-1, &mask, SFD_CLOEXEC)) < 0) {
        log_err("signalfd: %s", strerror(errno));
        return 1;
    }
    r = ts_latest_whole_set(job, &run, why, sizeof(why));
    if (r == -EBADMSG) {
        log_err("%s: the job cannot continue from its save, and does not start again from the "
                "beginning", why);
        return 1;
    }
    if (r == 0) {
        ts_save_path(job, job->task, run, save, sizeof(save));
        r = start_restore(&t, save);
    } else {
        if (job->restarts)
            log_info("run %u of job %u: no save to come back from: starting from the beginning",
                     job->restarts, job->job_id);
        r = start_fresh(&t, argv);
    }
    if (r < 0) {
        log_err("cannot start: %s", strerror(-r));
        return 1;
    }
    return loop(&t, sfd);
}
