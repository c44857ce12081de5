/*
 * threads.c - letting a few threads of a task run while CRIU holds it.
 *
 * When CRIU calls RESUME_DEVICES_LATE, the restored tasks are complete but
 * stopped under ptrace (CRIU is their tracer, and so are we: the plugin runs
 * in CRIU's process); they run only once CRIU detaches. At fini(DUMP) after
 * a failure or with --leave-running they are stopped the same way. A tcgpu
 * resume needs threads of the task itself: the driver's restore thread (for
 * Restore and Unlock) and the service threads libtcgpu lists in its status
 * (its control thread, which takes the request, the operation threads,
 * which refill, and the ones whose locks those may wait for). None of them
 * ends by itself: one that ended while it ran here would fail CRIU's
 * detach, and the restore with it. That is why the list comes from the
 * library, not from the threads' names, which the threads they start
 * inherit. The application's threads must stay stopped: the memory is not
 * back yet. So, as NVIDIA's cuda_plugin does
 * for the driver's restore thread, we let exactly those threads go (their
 * signals blocked, so that nothing is delivered under CRIU's feet; seccomp
 * no longer suspended), and afterwards interrupt them and put back the
 * mask and ptrace options CRIU set. Threads they create (the engine's
 * workers, the simulated GPU's engines) are not traced and simply run.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "common/proc.h"

pid_t tp_tid_ns(pid_t pid, pid_t tid)
{
    struct tcgpu_proc_status st;

    return tcgpu_proc_status(pid, tid, &st) == 0 ? st.nspid : 0;
}

struct find_ns {
    pid_t want, found;
};

static int match_ns(pid_t pid, pid_t tid, void *arg)
{
    struct find_ns *f = arg;

    if (!f->found && tp_tid_ns(pid, tid) == f->want)
        f->found = tid;
    return 0;
}

struct collect {
    pid_t *tids;
    int n, max;
};

static int add_tcgpu(pid_t pid, pid_t tid, void *arg)
{
    struct collect *c = arg;
    char comm[32] = "";
    pid_t ns;

    if (tcgpu_proc_comm(pid, tid, comm, sizeof(comm)) < 0 || strncmp(comm, "tcgpu-", 6) ||
        c->n >= c->max || !(ns = tp_tid_ns(pid, tid)))
        return 0;
    for (int i = 0; i < c->n; i++)
        if (c->tids[i] == ns)
            return 0;
    c->tids[c->n++] = ns;
    return 0;
}

int tp_tids_parse(const char *s, pid_t *tids, int *n, int max)
{
    if (!s)
        return -1;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        int seen = 0;

        if (end == s || v <= 0 || v > INT32_MAX || (*end && *end != ','))
            return -1;
        for (int i = 0; i < *n; i++)
            seen |= tids[i] == (pid_t)v;
        if (!seen) {
            if (*n >= max)
                return -1;
            tids[(*n)++] = (pid_t)v;
        }
        s = *end ? end + 1 : end;
    }
    return 0;
}

int tp_threads_tcgpu(pid_t pid, pid_t *tids, int n, int max)
{
    struct collect c = { .tids = tids, .n = n, .max = max };

    tcgpu_proc_each_thread(pid, add_tcgpu, &c);
    return c.n;
}

static int let_go(pid_t tid, uint64_t *saved)
{
    uint64_t block = ~0ull & ~(1ull << (SIGTRAP - 1));

    if (ptrace(PTRACE_GETSIGMASK, tid, sizeof(*saved), saved) < 0 ||
        ptrace(PTRACE_SETSIGMASK, tid, sizeof(block), &block) < 0 ||
        ptrace(PTRACE_SETOPTIONS, tid, NULL, 0) < 0 || ptrace(PTRACE_CONT, tid, NULL, 0) < 0)
        return -errno;
    return 0;
}

int tp_threads_run(pid_t pid, const pid_t *tids, int n, struct tp_running *run)
{
    memset(run, 0, sizeof(*run));
    run->pid = pid;
    for (int i = 0; i < n && run->n < TP_MAX_TIDS; i++) {
        struct find_ns f = { .want = tids[i] };
        struct tcgpu_proc_status st;
        int r;

        tcgpu_proc_each_thread(pid, match_ns, &f);
        if (!f.found || tcgpu_proc_status(pid, f.found, &st) < 0)
            continue;           /* gone: whatever needed it will say so */
        if (st.tracer != getpid())
            continue;           /* not held by us: it runs already */
        if ((r = let_go(f.found, &run->sigmask[run->n])) < 0) {
            log_err("process %d: cannot let thread %d run: %s", (int)pid, (int)f.found, strerror(-r));
            tp_threads_hold(run);
            return r;
        }
        run->tid[run->n++] = f.found;
    }
    return 0;
}

/* Stops tid again where CRIU can go on with it: in a ptrace stop, with
 * CRIU's signal mask and options back. */
static int hold_one(pid_t tid, uint64_t mask)
{
    int st;

    if (ptrace(PTRACE_INTERRUPT, tid, NULL, 0) < 0)
        return -errno;
    while (waitpid(tid, &st, __WALL) < 0)
        if (errno != EINTR)
            return -errno;
    if (!WIFSTOPPED(st))
        return -ESRCH;          /* it died */
    if (ptrace(PTRACE_SETOPTIONS, tid, NULL, PTRACE_O_SUSPEND_SECCOMP | PTRACE_O_TRACESYSGOOD) < 0 ||
        ptrace(PTRACE_SETSIGMASK, tid, sizeof(mask), &mask) < 0)
        return -errno;
    return 0;
}

int tp_threads_hold(struct tp_running *run)
{
    int bad = 0;

    for (int i = 0; i < run->n; i++) {
        int r = hold_one(run->tid[i], run->sigmask[i]);
        if (r < 0) {
            log_err("process %d: thread %d: cannot stop it again for CRIU: %s", (int)run->pid,
                    (int)run->tid[i], strerror(-r));
            bad = r;
        }
    }
    run->n = 0;
    return bad;
}
