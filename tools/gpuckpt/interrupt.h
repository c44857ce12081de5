/*
 * interrupt.h - SIGINT, SIGTERM and SIGHUP while gpuckpt has a job stopped
 * or stopping: remembered instead of ending gpuckpt there, so that the
 * command undoes what it did before it exits (docs/cli.md, "Exit codes").
 */
#ifndef GPUCKPT_INTERRUPT_H
#define GPUCKPT_INTERRUPT_H

/*
 * From here on the three signals are caught for the rest of gpuckpt's life:
 * each is remembered (the first one counts), and shuts down the connection
 * gpuckpt_interrupt_cut() named, so that a wait for a reply on it ends at
 * once. Returns 0, or -errno when a handler could not be installed.
 */
int gpuckpt_interrupt_catch(void);

/* The signal caught since gpuckpt_interrupt_catch(), 0 when none. */
int gpuckpt_interrupted(void);

/* The connection a signal shuts down (both ways), -1 for none. */
void gpuckpt_interrupt_cut(int fd);

#endif
