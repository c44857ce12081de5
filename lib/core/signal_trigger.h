/*
 * signal_trigger.h - a signal that asks the service thread to act.
 *
 * The handler does one thing, which is async-signal-safe: it adds 1 to an
 * eventfd (saving and restoring errno). The service thread (control.c) polls
 * that eventfd and runs TCGPU_SIGNAL_ACTION. Signals that arrive before the
 * service thread picks them up merge into one action; a signal that arrives
 * while an action runs causes one more action after it.
 *
 * The default signal is SIGRTMIN+4 (38 with glibc): SIGUSR1 and SIGUSR2 are
 * commonly taken by schedulers and launchers (Slurm's --signal recipes,
 * PyTorch Lightning's auto-requeue, submitit, JVMs); real-time signals are
 * rarely used by programs, are never sent by terminals or job controllers on
 * their own, and queue instead of being lost. SIGRTMIN and SIGRTMIN+1..3 are
 * left alone because threading libraries and timers most often pick those.
 *
 * If the program installs its own handler for the signal after us, ours is
 * gone (sigaction replaces it): the trigger then silently stops working, and
 * `gpuckpt status` reports trigger_installed=0. We never replace a handler
 * the program installed before us; the trigger is disabled with a log line.
 */
#ifndef TCGPU_SIGNAL_TRIGGER_H
#define TCGPU_SIGNAL_TRIGGER_H

#include <stddef.h>
#include <stdint.h>

#include "common/signals.h"

/*
 * Install the handler for sig (SA_RESTART). Returns 0, or -EBUSY when the
 * program already has a handler for it (left in place), or -errno. Installing
 * for a new signal uninstalls the old one first.
 */
int tcgpu_signal_trigger_install(int sig);

/* Put back the disposition found at install time. */
void tcgpu_signal_trigger_uninstall(void);

/* The signal whose handler we installed, or 0. */
int tcgpu_signal_trigger_signal(void);

/* 1 when our handler is still the one installed for our signal. */
int tcgpu_signal_trigger_in_place(void);

/* The eventfd the handler writes to (nonblocking, close-on-exec), created on
 * first call and kept for the life of the process; -errno on failure. */
int tcgpu_signal_trigger_fd(void);

/* Read and reset the eventfd's count: how many signals since the last call. */
uint64_t tcgpu_signal_trigger_take(void);

/* In a forked child: give it its own eventfd at the same descriptor number,
 * so the parent's service thread never sees the child's signals. */
void tcgpu_signal_trigger_atfork_child(void);

#endif
