/*
 * signals.h - the signal trigger's names: which signals may be used, how
 * they are written ("SIGRTMIN+4"), and the actions a signal can ask for.
 * Pure functions, thread-safe; shared by the trigger in the process
 * (core/signal_trigger.h) and by gpuckpt run's option checks.
 */
#ifndef TCGPU_COMMON_SIGNALS_H
#define TCGPU_COMMON_SIGNALS_H

#include <stddef.h>

enum tcgpu_sigaction_kind {
    TCGPU_SIGACT_TOGGLE = 0,    /* suspend (to host memory) if running, resume if suspended */
    TCGPU_SIGACT_SUSPEND,       /* suspend to host memory */
    TCGPU_SIGACT_RESUME,
    TCGPU_SIGACT_CHECKPOINT,    /* checkpoint into $TCGPU_CHECKPOINT_DIR/ckpt-<pid>-<n> */
};

/*
 * Parse a signal spec: "USR2", "SIGUSR2", "RTMIN+4", "SIGRTMAX-1", "38"
 * (case-insensitive). Returns the signal number, 0 for "off", "none", "0"
 * or "", or -EINVAL for an unknown signal or one that must not be used
 * (KILL, STOP, the fault signals, the ones glibc reserves below SIGRTMIN).
 */
int tcgpu_signal_parse(const char *spec);

/* "SIGRTMIN+4", "SIGUSR2"...; writes into buf and returns it. */
const char *tcgpu_signal_name(int sig, char *buf, size_t len);

/* "toggle" | "suspend" | "resume" | "checkpoint" -> kind, or -EINVAL. */
int tcgpu_sigaction_parse(const char *s);
const char *tcgpu_sigaction_name(int kind);

#endif
