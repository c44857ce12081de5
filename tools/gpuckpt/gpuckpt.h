/* gpuckpt's parts, shared between its files. */
#ifndef GPUCKPT_H
#define GPUCKPT_H

#include <stdio.h>
#include <sys/types.h>

/* Prints `cmd`'s --help on stdout. */
void gpuckpt_command_help(const char *cmd);
/*
 * Runs one request ("suspend", "resume", "status") on process pid over its
 * control socket, with no progress display and no summary line; errors are
 * printed ("gpuckpt: suspend 4242: ..."). dir may be NULL. st (may be NULL)
 * receives the status fields of the reply. Returns an exit code (ctl_exit).
 * No driver step: callers do that themselves (driver.h).
 */
struct tcgpu_status;
int gpuckpt_call(const char *cmd, pid_t pid, const char *dir, struct tcgpu_status *st);

/* save.c, restore.c: whole process trees (docs/save-restore.md). */
int gpuckpt_cmd_save(int argc, char **argv);
int gpuckpt_cmd_restore(int argc, char **argv);
/* inspect/verify of a save directory (one holding a tree manifest). */
int gpuckpt_tree_inspect(const char *dir, int json);
int gpuckpt_tree_verify(const char *dir);

/* image.c: inspect and verify. argv[0] is the command name. */
int gpuckpt_cmd_inspect(int argc, char **argv);
int gpuckpt_cmd_verify(int argc, char **argv);

#endif
