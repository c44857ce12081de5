/*
 * tcgpud.h - gpuckpt's side of tcgpud, for the other command files: the
 * options of `run --project ...` and suspend/resume of jobs tcgpud manages
 * (docs/tcgpud.md, docs/cli.md), and the call to tcgpud that ps.c and
 * events.c use.
 */
#ifndef GPUCKPT_TCGPUD_H
#define GPUCKPT_TCGPUD_H

#include <sys/types.h>

#include "ctl/daemon_io.h"

/* Long options of `run` handled here (values beyond gpuckpt's own). */
enum {
    GPUCKPT_OPT_PROJECT = 2000,
    GPUCKPT_OPT_PRIORITY,
    GPUCKPT_OPT_GPU_MEM,
    GPUCKPT_OPT_WAIT_TIMEOUT,
    GPUCKPT_OPT_DAEMON_SOCKET,
    GPUCKPT_OPT_GPU_COMPUTE,
    GPUCKPT_OPT_JOB,
    GPUCKPT_OPT_TCGPUD_LAST,
    GPUCKPT_OPT_AUTO_RESUME = 2100,   /* suspend --auto-resume */
};

#define GPUCKPT_TCGPUD_RUN_LONGOPTS                                                      \
    { "project", required_argument, NULL, GPUCKPT_OPT_PROJECT },                          \
    { "priority", required_argument, NULL, GPUCKPT_OPT_PRIORITY },                        \
    { "gpu-mem", required_argument, NULL, GPUCKPT_OPT_GPU_MEM },                          \
    { "wait-timeout", required_argument, NULL, GPUCKPT_OPT_WAIT_TIMEOUT },                \
    { "daemon-socket", required_argument, NULL, GPUCKPT_OPT_DAEMON_SOCKET },              \
    { "gpu-compute", required_argument, NULL, GPUCKPT_OPT_GPU_COMPUTE },                  \
    { "job", required_argument, NULL, GPUCKPT_OPT_JOB }

#define GPUCKPT_TCGPUD_RUN_HELP                                                                  \
    "  --project P               register with tcgpud in project P (TCGPU_PROJECT)\n"             \
    "  --priority N              the job's priority, at most the project's (TCGPU_PRIORITY)\n"    \
    "  --gpu-mem SIZE            the job's GPU memory limit, e.g. 8G (TCGPU_GPU_MEM)\n"           \
    "  --wait-timeout SEC        when tcgpud cannot make room, wait this long (TCGPU_WAIT_TIMEOUT)\n" \
    "  --daemon-socket PATH      tcgpud's socket (TCGPU_DAEMON_SOCKET, default /run/tcgpud.sock)\n" \
    "  --gpu-compute PCT         the job's share of the GPU's compute when others want it, e.g. 30%\n" \
    "                            (TCGPU_GPU_COMPUTE)\n"                                           \
    "  --job NAME                a task of multi-GPU job NAME: suspended and resumed with its\n"  \
    "                            other tasks (TCGPU_JOB; default: slurm:$SLURM_JOB_ID)\n"

/* tcgpud's socket: $TCGPU_DAEMON_SOCKET, else /run/tcgpud.sock; "" when it
 * says "off". */
const char *gpuckpt_daemon_socket(void);

/*
 * Connects to tcgpud, sends req and waits for the final reply in *rep
 * (check rep->err), giving every message before it to fn (may be NULL).
 * timeout_ms < 0: no limit. Says on stderr what went wrong in the transport
 * (not that there is no tcgpud when quiet_noent). Returns an exit code:
 * CTL_EXIT_NOPROC when tcgpud cannot be reached.
 */
int gpuckpt_daemon_call(const char *cmd, struct ctl_buf *req, struct ctl_msg *rep, int timeout_ms,
                        tcgpud_msg_fn fn, void *arg, int quiet_noent);

/* One of the options above: sets the environment. 0, or a usage exit code. */
int gpuckpt_tcgpud_run_option(int opt, const char *arg);

/*
 * suspend/resume of pid through tcgpud, when tcgpud manages it (so that its
 * view stays true and a manual suspension is not undone automatically).
 * dir: the image directory (suspend) or NULL. Returns an exit code, with
 * tcgpud's reply (the job's status fields after the operation) in *rep; or
 * -1 when tcgpud is not there or does not manage pid (the caller goes to
 * the process directly). Errors are said on stderr; nothing else is printed.
 */
int gpuckpt_tcgpud_op(const char *cmd, pid_t pid, const char *dir, int auto_resume,
                      int timeout_ms, struct ctl_msg *rep);

/*
 * save/restore through tcgpud, for a user who is not root (CRIU needs root;
 * tcgpud runs gpuckpt save/restore --owner UID for the caller, docs/save-restore.md,
 * "Ordinary users"). word is "save" (pid: the tree's root) or "restore".
 * flags (NULL-terminated, or NULL) are the request's fields set to 1, the
 * command's options tcgpud passes on: save's leave_running, tcp_established
 * and shell_job, restore's detach (return once the tree runs). gpuckpt's
 * output is printed as it comes; an attached restore returns when the
 * restored tree exits, and ending this process ends the tree. Returns
 * gpuckpt's exit code there (the tree's exit status for an attached
 * restore), or ours when tcgpud refused or could not be reached (no tcgpud:
 * "needs root", with root_why).
 */
int gpuckpt_tcgpud_privileged(const char *word, pid_t pid, const char *dir,
                              const char *const *flags, const char *root_why);

#endif
