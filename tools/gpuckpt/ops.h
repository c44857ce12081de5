/*
 * ops.h - ops.c's one request to a process, for save.c and restore.c, which
 * suspend and resume every process of a tree without the commands' output.
 */
#ifndef GPUCKPT_OPS_H
#define GPUCKPT_OPS_H

#include <sys/types.h>

struct tcgpu_status;

/*
 * Runs one request ("suspend", "resume", "status") on process pid over its
 * control socket, with no progress display and no summary line; errors are
 * printed ("gpuckpt: suspend 4242: ..."). dir may be NULL. st (may be NULL)
 * receives the status fields of a reply, "ok" or an error (zeroes when the
 * reply has none), and is left alone when there was no reply. Returns an
 * exit code (enum ctl_exit). No driver step and no tcgpud: callers do those
 * themselves (driver.h).
 */
int gpuckpt_call(const char *cmd, pid_t pid, const char *dir, struct tcgpu_status *st);

#endif
