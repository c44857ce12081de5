/*
 * tcgpud.h - gpuckpt's side of tcgpud, for the other command files: the
 * options of `run --project ...` and suspend/resume of jobs tcgpud manages
 * (docs/tcgpud.md, docs/cli.md). ps and events are in commands.h.
 */
#ifndef GPUCKPT_TCGPUD_H
#define GPUCKPT_TCGPUD_H

#include <sys/types.h>

/* Long options of `run` handled here (values beyond gpuckpt's own). */
enum {
    GPUCKPT_OPT_PROJECT = 2000,
    GPUCKPT_OPT_PRIORITY,
    GPUCKPT_OPT_GPU_MEM,
    GPUCKPT_OPT_WAIT_TIMEOUT,
    GPUCKPT_OPT_DAEMON_SOCKET,
    GPUCKPT_OPT_TCGPUD_LAST,
    GPUCKPT_OPT_AUTO_RESUME = 2100,   /* suspend --auto-resume */
};

#define GPUCKPT_TCGPUD_RUN_LONGOPTS                                                      \
    { "project", required_argument, NULL, GPUCKPT_OPT_PROJECT },                          \
    { "priority", required_argument, NULL, GPUCKPT_OPT_PRIORITY },                        \
    { "gpu-mem", required_argument, NULL, GPUCKPT_OPT_GPU_MEM },                          \
    { "wait-timeout", required_argument, NULL, GPUCKPT_OPT_WAIT_TIMEOUT },                \
    { "daemon-socket", required_argument, NULL, GPUCKPT_OPT_DAEMON_SOCKET }

#define GPUCKPT_TCGPUD_RUN_HELP                                                                  \
    "  --project P               register with tcgpud in project P (TCGPU_PROJECT)\n"             \
    "  --priority N              the job's priority, at most the project's (TCGPU_PRIORITY)\n"    \
    "  --gpu-mem SIZE            the job's GPU memory limit, e.g. 8G (TCGPU_GPU_MEM)\n"           \
    "  --wait-timeout SEC        when tcgpud cannot make room, wait this long (TCGPU_WAIT_TIMEOUT)\n" \
    "  --daemon-socket PATH      tcgpud's socket (TCGPU_DAEMON_SOCKET, default /run/tcgpud.sock)\n"

/* One of the options above: sets the environment. 0, or a usage exit code. */
int gpuckpt_tcgpud_run_option(int opt, const char *arg);

/*
 * suspend/resume of pid through tcgpud, when tcgpud manages it (so that its
 * view stays true and a manual suspension is not undone automatically).
 * dir: the image directory (suspend) or NULL. Returns an exit code, or -1
 * when tcgpud is not there or does not manage pid (the caller goes to the
 * process directly).
 */
int gpuckpt_tcgpud_op(const char *cmd, pid_t pid, const char *dir, int auto_resume, int quiet,
                      int timeout_ms);

/*
 * save/restore through tcgpud, for a user who is not root (CRIU needs root;
 * tcgpud runs gpuckpt save/restore --owner UID for the caller, docs/save-restore.md,
 * "Ordinary users"). word is "save" (pid: the tree's root) or "restore"
 * (detach: return once the tree runs). gpuckpt's output is printed as it
 * comes; an attached restore returns when the restored tree exits, and
 * ending this process ends the tree. Returns gpuckpt's exit code there (the
 * tree's exit status for an attached restore), or ours when tcgpud refused
 * or could not be reached.
 */
int gpuckpt_tcgpud_privileged(const char *word, pid_t pid, const char *dir, int detach);

#endif
