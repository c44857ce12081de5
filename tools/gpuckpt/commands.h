/*
 * commands.h - gpuckpt's commands: the handlers of main.c's table.
 *
 * Each gets its own table row (self: its name, and its --help), argc/argv
 * with argv[0] the command's name, and returns gpuckpt's exit code (enum
 * ctl_exit in ctl/client.h; docs/cli.md), having said on stderr what went
 * wrong. gpuckpt run returns only when the command could not be run.
 */
#ifndef GPUCKPT_COMMANDS_H
#define GPUCKPT_COMMANDS_H

#include "util.h"

/* run.c */
int gpuckpt_cmd_run(const struct gpuckpt_command *self, int argc, char **argv);

/* ops.c: over the process's control socket */
int gpuckpt_cmd_status(const struct gpuckpt_command *self, int argc, char **argv);
int gpuckpt_cmd_checkpoint(const struct gpuckpt_command *self, int argc, char **argv);
int gpuckpt_cmd_suspend(const struct gpuckpt_command *self, int argc, char **argv);
int gpuckpt_cmd_resume(const struct gpuckpt_command *self, int argc, char **argv);

/* save.c, restore.c: whole process trees with CRIU (docs/save-restore.md) */
int gpuckpt_cmd_save(const struct gpuckpt_command *self, int argc, char **argv);
int gpuckpt_cmd_restore(const struct gpuckpt_command *self, int argc, char **argv);

/* image.c: an image, or a save directory */
int gpuckpt_cmd_inspect(const struct gpuckpt_command *self, int argc, char **argv);
int gpuckpt_cmd_verify(const struct gpuckpt_command *self, int argc, char **argv);

/* ps.c: tcgpud's jobs, or the tcgpu processes this user can see */
int gpuckpt_cmd_ps(const struct gpuckpt_command *self, int argc, char **argv);

/* events.c: tcgpud's events (docs/tcgpud.md) */
int gpuckpt_cmd_events(const struct gpuckpt_command *self, int argc, char **argv);

/* check.c: what tcgpu needs on this machine */
int gpuckpt_cmd_check(const struct gpuckpt_command *self, int argc, char **argv);

#endif
