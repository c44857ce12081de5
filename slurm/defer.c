/*
 * defer.c - libtcgpu-slurm-defer.so, preloaded by tcgpu-slurm into the
 * program it runs (docs/slurm.md, "Signals").
 *
 * Slurm signals every process of a job step: the grace-time SIGTERM of a
 * preemption, scancel's and the time limit's SIGTERM, the SIGTSTP of
 * `scontrol suspend`. A program that died of the preemption's SIGTERM
 * could not be saved, and only slurmctld knows whether a SIGTERM is a
 * preemption. So this library holds the signals of $TCGPU_SLURM_DEFER
 * (default TERM,TSTP) back: its handler only notes that one arrived, and
 * the program's own disposition (default, ignore, or the handler it
 * installs, which sigaction() and signal() record here instead of
 * installing) waits. tcgpu-slurm asks slurmctld what the signal meant and:
 *   - for a preemption saves the program, which never sees the signal;
 *   - otherwise sends the release signal ($TCGPU_SLURM_RELEASE, default
 *     SIGRTMIN+5), whose handler applies the program's disposition to every
 *     signal held back (a default SIGTERM ends the program as it would have).
 * A signal the program ignored when it started stays ignored. Handlers only
 * set flags, raise and call sigaction: async-signal-safe. The state is in
 * the process's memory, so a restored program keeps it.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/signals.h"

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static sigaction_fn real_sigaction;
static int release_sig;
static volatile sig_atomic_t deferred[NSIG];  /* held back by us */
static volatile sig_atomic_t pending[NSIG];   /* arrived, not yet released */
static struct sigaction program[NSIG];        /* what the program wants for it */

static void on_deferred(int sig)
{
    pending[sig] = 1;
}

/* Every signal held back gets the program's disposition, once. */
static void on_release(int unused)
{
    (void)unused;
    for (int sig = 1; sig < NSIG; sig++) {
        if (!deferred[sig] || !pending[sig])
            continue;
        pending[sig] = 0;
        if (sig == SIGTSTP) {
            /* a suspension: Slurm's SIGSTOP stops the program anyway; a
             * handler of the program's own runs, and we keep holding TSTP */
            if (program[sig].sa_handler != SIG_DFL && program[sig].sa_handler != SIG_IGN) {
                deferred[sig] = 0;
                real_sigaction(sig, &program[sig], NULL);
                raise(sig);
            }
            continue;
        }
        deferred[sig] = 0;
        real_sigaction(sig, &program[sig], NULL);
        raise(sig);             /* delivered when this handler returns */
    }
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (!real_sigaction)
        *(void **)&real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    if (sig > 0 && sig < NSIG && deferred[sig]) {
        if (old)
            *old = program[sig];
        if (act)
            program[sig] = *act;
        return 0;
    }
    if (sig == release_sig && release_sig && act)
        return 0;               /* ours: the program cannot take it over */
    return real_sigaction(sig, act, old);
}

sighandler_t signal(int sig, sighandler_t handler)
{
    struct sigaction act = { .sa_handler = handler, .sa_flags = SA_RESTART }, old;

    sigemptyset(&act.sa_mask);
    if (sigaction(sig, &act, &old) < 0)
        return SIG_ERR;
    return old.sa_handler;
}

__attribute__((constructor)) static void defer_init(void)
{
    const char *list = getenv("TCGPU_SLURM_DEFER"), *rel = getenv("TCGPU_SLURM_RELEASE");
    char buf[256], *save = NULL;
    struct sigaction act = { .sa_handler = on_deferred, .sa_flags = SA_RESTART };

    *(void **)&real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    if (!real_sigaction)
        return;
    release_sig = tcgpu_signal_parse(rel && *rel ? rel : "RTMIN+5");
    if (release_sig <= 0)
        return;
    sigemptyset(&act.sa_mask);
    snprintf(buf, sizeof(buf), "%s", list && *list ? list : "TERM,TSTP");
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int sig = tcgpu_signal_parse(t);
        struct sigaction cur;
        if (sig <= 0 || sig == SIGKILL || sig == SIGSTOP || sig == release_sig ||
            real_sigaction(sig, NULL, &cur) < 0 || cur.sa_handler == SIG_IGN)
            continue;           /* an ignored signal stays ignored, as it would */
        program[sig] = cur;
        if (real_sigaction(sig, &act, NULL) == 0)
            deferred[sig] = 1;
    }
    act.sa_handler = on_release;
    real_sigaction(release_sig, &act, NULL);
}
