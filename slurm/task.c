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
 *   - the SIGTERM of a requeue (`scontrol requeue`, how admins drain nodes):
 *     saved the same way, within KillWait (Slurm's SIGKILL follows); the
 *     job is requeued already, and the wrapper ends once saved.
 *   - any other SIGTERM (scancel, the time limit), SIGINT, SIGHUP: the
 *     program gets it as it would have (the release signal); nothing is saved.
 *     A job cancelled while it is being saved ends: the save is dropped (the
 *     epilog, which waits for it, removes it) and the log says so; a save
 *     still running KillWait - 3 s after the cancel is ended (Slurm's SIGKILL
 *     of the whole step follows), so that the wrapper is there to say it.
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
#include <sys/mman.h>
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
#define KILL_MARGIN_S      3    /* a save of a job Slurm ends is ended this long before its SIGKILL */

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
    int requeued;               /* slurmctld took our requeue, or requeued the job itself */
    int release_sig;
    int child_reaped;           /* child reaped during a gpuckpt call, its status child_st */
    int child_st;
    int held_sig;               /* a SIGTERM that came while the restore had no root yet */
    int save_ended;             /* the job ended during the save, which we ended before Slurm's SIGKILL */
    int leave;                  /* done: the wrapper ends, with leave_status */
    int leave_status;
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

static void signal_tree(pid_t root, int sig);

/*
 * During a save: Slurm ends the job (scancel, the time limit) when a SIGTERM
 * is pending and slurmctld says the job ends. Slurm's SIGKILL follows
 * KillWait later, for every process of the step, this wrapper and its
 * gpuckpt save included: the save may go on until KILL_MARGIN_S before,
 * then it is ended (its caller gone, tcgpud ends root's save), so that the
 * wrapper lives to say what happened and the epilog finds the save over.
 */
static void watch_job_end(struct task *t, pid_t save, uint64_t *next_ask, uint64_t *deadline)
{
    uint64_t now = now_ms();
    unsigned kill_wait = 30;    /* Slurm's default, should slurmctld not say */
    sigset_t pending;
    char state[64];

    if (t->save_ended)
        return;
    if (*deadline) {
        if (now >= *deadline) {
            signal_tree(save, SIGKILL);
            t->save_ended = 1;
        }
        return;
    }
    if (now < *next_ask || sigpending(&pending) < 0 || !sigismember(&pending, SIGTERM))
        return;
    *next_ask = now + 1000;
    if (ts_job_why_signalled(t->job->job_id, t->job->restarts, state, sizeof(state)) != TS_ENDING)
        return;
    ts_kill_wait(&kill_wait);
    *deadline = now + 1000ull * (kill_wait > KILL_MARGIN_S + 1 ? kill_wait - KILL_MARGIN_S : 1);
}

/* Run gpuckpt ARGS... and wait; its output goes to `out`. Its exit code, or
 * -errno. `save`: it is a save, ended before Slurm's SIGKILL when the job
 * ends meanwhile (watch_job_end). */
static int gpuckpt_to(struct task *t, const char *const args[], int out, int save)
{
    uint64_t next_ask = 0, deadline = 0;
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
        if (out != 2)
            dup2(out, 2);
        dup2(2, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    /* the program, our child, ends during a save (CRIU kills it): reaped
     * meanwhile, or its pid stays taken and the save waits for it */
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR)
            return -errno;
        if (t->child > 0 && !t->child_reaped && waitpid(t->child, &t->child_st, WNOHANG) == t->child)
            t->child_reaped = 1;
        if (save)
            watch_job_end(t, pid, &next_ask, &deadline);
        usleep(5000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* gpuckpt ARGS..., its output on our stderr. */
static int gpuckpt(struct task *t, const char *const args[])
{
    return gpuckpt_to(t, args, 2, 0);
}

/* What a file holds, from its start, to our stderr; the file is closed. */
static void show_and_close(int fd)
{
    char buf[8192];
    ssize_t n;

    if (fd < 0)
        return;
    if (lseek(fd, 0, SEEK_SET) == 0)
        while ((n = read(fd, buf, sizeof(buf))) > 0)
            if (write(2, buf, (size_t)n) != n)
                break;
    close(fd);
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

/* The program's output file, for it to write; we relay from its end: the
 * runs before us relayed what is there (a restarted job's log does not say
 * the first run's lines again). */
static int open_output(struct task *t)
{
    int fd;

    ts_output_path(t->job, t->job->task, t->out_path, sizeof(t->out_path));
    fd = open(t->out_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        log_err("cannot open %s: %s", t->out_path, strerror(errno));
        return -errno;
    }
    t->out_fd = open(t->out_path, O_RDONLY | O_CLOEXEC);
    if (t->out_fd >= 0)
        lseek(t->out_fd, 0, SEEK_END);
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
    int out = open_output(t), argc = 0;
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
    int errp[2], out = open_output(t);

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
        /* Slurm's signals stay blocked: a SIGTERM would end the restore
         * half-way (tcgpud ends a restore whose caller left); the wrapper
         * passes them on to the restored tree */
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

/* ---------------------------------------------------------------------------
 * Saving: at a preemption, at a requeue
 * ------------------------------------------------------------------------- */

/*
 * gpuckpt save of the program's tree into this run's save, marked for the
 * epilog while it runs (saves.c); `why` starts the line that says so.
 * gpuckpt's exit code (0: saved, and CRIU ended the program), or -errno.
 * gpuckpt's lines are kept aside until it ends: a save that worked shows
 * them; one that failed hands them to the caller in *failed_log (a file to
 * show_and_close, or -1), which shows them only when they matter: a job
 * cancelled in the middle of its save had its program signalled by Slurm
 * under CRIU ("stopped by 5 unexpectedly"), and that failure is no news.
 */
static int save_program(struct task *t, const char *why, int *failed_log)
{
    char path[PATH_MAX], pid[16];
    uint64_t t0 = now_ms();
    int r, mark, out = memfd_create("gpuckpt-save", MFD_CLOEXEC);

    ts_save_path(t->job, t->job->task, t->job->restarts, path, sizeof(path));
    snprintf(pid, sizeof(pid), "%d", (int)t->root);
    log_info("%s: saving the program (pid %d) to %s", why, (int)t->root, path);
    mark = ts_saving_begin(t->job);
    r = gpuckpt_to(t, (const char *const[]){ "save", pid, "-D", path, NULL }, out < 0 ? 2 : out, 1);
    ts_saving_end(t->job, mark);
    relay_output(t);
    *failed_log = -1;
    if (r != 0) {
        *failed_log = out;
        return r;
    }
    show_and_close(out);
    log_info("saved in %.2f s", (double)(now_ms() - t0) / 1e3);
    return 0;
}

/*
 * 1 when slurmctld says the job ends for good (scancel during the save):
 * the save is dropped, said in true words, and the wrapper leaves. A save
 * that worked ended the program; one that did not left it running, and it
 * gets the cancel's SIGTERM.
 */
static int cancelled_during_save(struct task *t, int saved, int gpuckpt_exit)
{
    char state[64];

    if (ts_job_why_signalled(t->job->job_id, t->job->restarts, state, sizeof(state)) != TS_ENDING)
        return 0;
    if (saved) {
        log_info("save dropped: job %u is %s; the save ended the program, and the epilog "
                 "removes the save with the job's directory", t->job->job_id, state);
        t->leave = 1;
        t->leave_status = 128 + SIGTERM;
        return 1;
    }
    if (t->save_ended)
        log_info("save dropped: job %u is %s; its save was still running %d s before Slurm's "
                 "KillWait ends the job, and was ended; nothing of it is kept; the program gets "
                 "the SIGTERM", t->job->job_id, state, KILL_MARGIN_S);
    else
        log_info("save dropped: job %u is %s; its save did not complete (gpuckpt exit %d; Slurm "
                 "signals the program of a job it ends, under CRIU too), and nothing of it is "
                 "kept; the program gets the SIGTERM", t->job->job_id, state, gpuckpt_exit);
    t->state = T_SAVE_FAILED;
    pass_on(t, SIGTERM);
    return 1;
}

/* Every task of the step saved: requeue now rather than at the end of the
 * grace time. Given up when the job is cancelled meanwhile. */
static void wait_whole_and_requeue(struct task *t)
{
    uint64_t until = now_ms() + WHOLE_SET_WAIT_MS;

    for (unsigned tick = 1; !ts_set_whole(t->job, t->job->restarts); tick++) {
        if (now_ms() > until) {
            log_err("other tasks of the step did not save in time; Slurm requeues the job at "
                    "the end of its grace time, and it will not come back from this save");
            return;
        }
        if (tick % 5 == 0 && cancelled_during_save(t, 1, 0))
            return;
        usleep(TICK_MS * 1000);
    }
    if (ts_job_requeue(t->job->job_id) == 0) {
        t->requeued = 1;
        log_info("every task saved: requeued job %u", t->job->job_id);
    }
}

/*
 * Save at a preemption (why TS_PREEMPTED: the job runs on in its grace time
 * until every task has saved, then the wrapper requeues it) or at a requeue
 * (TS_REQUEUED: slurmctld requeued it already, and kills the step KillWait
 * after its SIGTERM: the wrapper ends once saved). A save that fails leaves
 * the program running: at a preemption until Slurm ends it at the end of the
 * grace time, at a requeue it gets the SIGTERM at once.
 */
static void save_for(struct task *t, enum ts_why why)
{
    int preempted = why == TS_PREEMPTED, log;
    int r = save_program(t, preempted ? "preempted" : "requeued", &log);

    if (r != 0) {
        if (cancelled_during_save(t, 0, r)) {
            if (log >= 0)
                close(log);     /* CRIU's complaint about the cancel's signals: not news */
            return;
        }
        show_and_close(log);
        t->state = T_SAVE_FAILED;
        if (preempted) {
            log_err("the save failed (gpuckpt exit %d, above): the program runs on until Slurm "
                    "ends it at the end of the grace time; nothing of it is kept", r);
        } else {
            log_err("the save failed (gpuckpt exit %d, above): the program gets the SIGTERM, "
                    "and the job does not come back from a save of this run", r);
            pass_on(t, SIGTERM);
        }
        return;
    }
    t->state = T_SAVED;
    t->requeued = !preempted;
    if (cancelled_during_save(t, 1, 0))
        return;
    if (preempted) {
        wait_whole_and_requeue(t);
        return;
    }
    log_info("job %u comes back from its save when Slurm runs it again: ending",
             t->job->job_id);
    t->leave = 1;
}

/* SIGTERM, or the --signal one of a preemption: slurmctld says which. */
static void on_term(struct task *t, int sig)
{
    char state[64];
    int why = ts_job_why_signalled(t->job->job_id, t->job->restarts, state, sizeof(state));

    if (why == TS_PREEMPTED) {
        save_for(t, TS_PREEMPTED);
        return;
    }
    if (sig != SIGTERM)
        return;                 /* the --signal warning of a time limit: the program's to hear */
    if (why == TS_REQUEUED) {
        save_for(t, TS_REQUEUED);
        return;
    }
    if (why < 0)
        log_info("SIGTERM, and slurmctld does not say why (above): the program gets it");
    else
        log_info("SIGTERM: job %u is %s, neither preempted nor requeued: the program gets it",
                 t->job->job_id, state);
    pass_on(t, sig);
}

static void on_signal(struct task *t, int sig)
{
    if (t->state == T_SAVED && t->requeued && sig == SIGTERM) {
        /* the requeue ends the job's steps: going now spares it the KillWait */
        log_info("ending for the requeue");
        t->leave = 1;
        return;
    }
    if (t->state != T_RUNNING || sig == SIGCHLD)
        return;                 /* saved (Slurm ends us) or failed (it runs on to the end) */
    if (!t->root && (sig == SIGTERM || sig == SIGUSR1 || sig == SIGUSR2)) {
        t->held_sig = sig;      /* restoring: decided once the tree is back */
        return;
    }
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
        on_term(t, sig);
        return;
    default:
        log_info("signal %d: the program gets it", sig);
        pass_on(t, sig);
        return;
    }
}

/* ---------------------------------------------------------------------------
 * The loop
 * ------------------------------------------------------------------------- */

static int child_status(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* 1 when the child has ended (now, or during a gpuckpt call), its status in st. */
static int child_done(struct task *t, int *st)
{
    if (t->child_reaped) {
        t->child_reaped = 0;
        *st = t->child_st;
        return 1;
    }
    return waitpid(t->child, st, WNOHANG) == t->child;
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
        if (t->held_sig && t->root > 0) {
            int sig = t->held_sig;
            t->held_sig = 0;
            log_info("restored: now to the signal %d that came during the restore", sig);
            on_signal(t, sig);
        }
        if (t->leave)
            return t->leave_status;
        if (t->child > 0 && (child_done(t, &st))) {
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

/*
 * srun turns the SIGTERM of scancel or `scontrol requeue` into a SIGKILL of
 * the task's process group at once ("srun: forcing job termination"), while
 * the rest of the step lives until KillWait: a wrapper in that group dies in
 * the middle of the save of a requeue, and its program, not reaped, holds
 * its pid (the save waits for it). So the wrapper works in a child in a
 * process group of its own; the task's process only waits for it, Slurm's
 * signals blocked, and ends with its status. Returns in the child; the
 * parent does not return.
 */
static void work_apart(void)
{
    pid_t pid = fork();
    int st;

    if (pid == 0) {
        setpgid(0, 0);
        return;
    }
    if (pid < 0) {
        log_err("fork: %s: working in the task's own process", strerror(errno));
        return;
    }
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            _exit(1);
    _exit(child_status(st));
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
    work_apart();
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
        /* a restored program keeps the limits it was saved with */
        if (ts_shard_limits() < 0)
            return 1;
        r = start_fresh(&t, argv);
    }
    if (r < 0) {
        log_err("cannot start: %s", strerror(-r));
        return 1;
    }
    return loop(&t, sfd);
}
