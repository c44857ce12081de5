/*
 * gpuckpt - checkpoint, suspend and resume GPU programs running under tcgpu
 * (docs/cli.md).
 *
 * This file is the command table: one row per command (name, handler,
 * one-line summary, arguments, help), the dispatch by it, and gpuckpt --help
 * made from it. The commands are in their own files (commands.h). Exit codes
 * (scripts rely on them): enum ctl_exit in lib/ctl/client.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "tcgpud.h"
#include "util.h"
#include "ckptapi/ckptapi.h"
#include "ctl/client.h"
#include "common/log.h"
#include "common/macros.h"
#include "tcgpu.h"

static int cmd_help(const struct gpuckpt_command *self, int argc, char **argv);

/*
 * The commands, in the order gpuckpt --help lists them. help is the
 * description and then the options, each line ending in a newline.
 */
static const struct gpuckpt_command commands[] = {
    { "run", gpuckpt_cmd_run,
      "run CMD with libtcgpu.so preloaded",
      "[OPTIONS] [--] CMD [ARG...]",
      "Run CMD with libtcgpu.so preloaded (prepended to LD_PRELOAD); gpuckpt is replaced by\n"
      "CMD, so its pid is CMD's pid and its exit status CMD's (127/126 if it cannot be run).\n"
      "The library is $TCGPU_LIB, else found next to gpuckpt.\n"
      "\n"
      "  -s, --signal SIG          trigger signal (TCGPU_SIGNAL): RTMIN+4 (default), USR2, 38, off\n"
      "  -a, --signal-action ACT   toggle (default), suspend, resume, checkpoint (TCGPU_SIGNAL_ACTION)\n"
      "  -D, --checkpoint-dir DIR  where the checkpoint action writes (TCGPU_CHECKPOINT_DIR)\n"
      "  -R, --run-dir DIR         where the control socket goes (TCGPU_RUN_DIR)\n"
      "  -l, --log LEVEL           quiet, info (default), debug (TCGPU_LOG)\n"
      GPUCKPT_TCGPUD_RUN_HELP },
    { "status", gpuckpt_cmd_status,
      "state, memory and last operation of PID",
      "PID [--json|-o json] [--wait SEC] [--timeout SEC]",
      "Show PID's state, GPU memory, tracked objects, last operation and its timings.\n"
      "\n"
      "  --json, -o json one JSON object on stdout, typed as docs/cli.md says\n"
      "  --wait SEC      retry for up to SEC seconds while PID has no socket yet\n"
      "  --timeout SEC   give up waiting for the reply after SEC seconds (exit 5)\n" },
    { "checkpoint", gpuckpt_cmd_checkpoint,
      "write an image of PID's GPU state to DIR (or what changed); PID goes on",
      "PID -D DIR [--parent DIR|auto] [--timeout SEC] [--wait SEC] [-q] [--json]",
      "Write an image of PID's GPU state to DIR (which must not exist); PID carries on.\n"
      "\n"
      "  -D, --dir DIR   the image directory (relative paths are made absolute here)\n"
      "  --parent DIR    incremental: only what changed since the image DIR; auto: since\n"
      "                  PID's previous checkpoint\n"
      "  --timeout SEC   stop waiting after SEC seconds (exit 5; the operation goes on)\n"
      "  --wait SEC      retry for up to SEC seconds while PID has no socket yet\n"
      "  -q, --quiet     no progress and no summary line\n"
      "  --json, -o json the result as one JSON object on stdout\n" },
    { "suspend", gpuckpt_cmd_suspend,
      "take PID off the GPU (to host memory, or to DIR)",
      "PID [-D DIR] [--keep-context] [--auto-resume] [--timeout SEC] [--wait SEC] [-q] [--json]",
      "Take PID off the GPU: drain its device memory to host memory (or to the image DIR),\n"
      "release it, and park PID's CUDA calls until gpuckpt resume. Where the driver has the\n"
      "checkpoint API (CUDA 12.8+), PID's context is then handed to the driver and released\n"
      "too (Lock + Checkpoint): PID holds nothing on the GPU. If that step fails, PID stays\n"
      "suspended with its context and gpuckpt says so (exit 1, or 5 for a lock timeout).\n"
      "Resume such a process with gpuckpt resume (not the signal): it takes the context back.\n"
      "\n"
      "  -D, --dir DIR   drain to an image directory instead of host memory\n"
      "  --keep-context  leave the CUDA context with the process (device memory only)\n"
      "  --auto-resume   a job tcgpud manages: tcgpud may resume it when memory fits\n"
      "  --timeout SEC   stop waiting after SEC seconds (exit 5; the operation goes on)\n"
      "  --wait SEC      retry for up to SEC seconds while PID has no socket yet\n"
      "  -q, --quiet     no progress and no summary line\n"
      "  --json, -o json the result as one JSON object on stdout\n" },
    { "resume", gpuckpt_cmd_resume,
      "put PID back on the GPU",
      "PID [-D DIR] [--timeout SEC] [--wait SEC] [-q] [--json]",
      "Put PID back on the GPU at the same device addresses and release its threads.\n"
      "A context released to the driver is taken back first (Restore + Unlock).\n"
      "Exit 8 when the device has no room now (PID stays suspended, safely).\n"
      "\n"
      "  -D, --dir DIR   the suspend's image now lives at DIR (moved, e.g. by gpuckpt save)\n"
      "  --timeout SEC   stop waiting after SEC seconds (exit 5; the operation goes on)\n"
      "  --wait SEC      retry for up to SEC seconds while PID has no socket yet\n"
      "  -q, --quiet     no progress and no summary line\n"
      "  --json, -o json the result as one JSON object on stdout\n" },
    { "save", gpuckpt_cmd_save,
      "save the process tree under PID with CRIU",
      "PID -D DIR [--leave-running] [--tcp-established] [--shell-job] [--owner UID] [--json]",
      "Save the whole process tree under PID to DIR (which must not exist) with CRIU: every\n"
      "process under tcgpu is suspended to an image in DIR/gpu/<pid> and its CUDA context\n"
      "released to the driver, then CRIU dumps the tree into DIR/criu. DIR is written as\n"
      "DIR.tmp-XXXXXX and renamed only when everything succeeded; on failure every process\n"
      "is resumed and nothing is left behind. Refused before anything is touched: a process\n"
      "in the tree that uses the GPU without tcgpu, a tcgpu process that is not running.\n"
      "CRIU is $TCGPU_CRIU, else criu on PATH or in /usr/local/sbin, /usr/sbin.\n"
      "CRIU needs root: for another user, tcgpud (root) saves the user's own trees.\n"
      "\n"
      "  -D, --dir DIR       the save directory\n"
      "  --leave-running     resume the tree after the dump (default: CRIU ends it)\n"
      "  --tcp-established   dump established TCP connections (CRIU's option)\n"
      "  --shell-job         the tree is a shell job (CRIU's option; restore repeats it)\n"
      "  --owner UID         (root) refuse unless every process is UID's; record it (tcgpud)\n"
      "  --json, -o json     the result as one JSON object on stdout\n" },
    { "restore", gpuckpt_cmd_restore,
      "restore a saved tree and put it back on the GPU",
      "-D DIR [-d] [--owner UID] [--json]",
      "Restore a tree saved by gpuckpt save: verify the whole save first (every checksum, the\n"
      "GPU model, the pids free), then CRIU restores the tree, and every tcgpu process takes\n"
      "its context back and is resumed from DIR/gpu/<pid> at the same device addresses.\n"
      "Without -d, gpuckpt stays the tree's parent and exits with the root's exit status.\n"
      "Another user than root restores through tcgpud, which restores only saves it made\n"
      "for that user; without -d, ending gpuckpt then ends the restored tree.\n"
      "\n"
      "  -D, --dir DIR   the save directory\n"
      "  -d, --detach    return once the tree runs\n"
      "  --owner UID     (root) refuse unless the save is UID's alone (tcgpud)\n"
      "  --json, -o json the result as one JSON object on stdout (once the tree runs)\n" },
    { "inspect", gpuckpt_cmd_inspect,
      "show an image's manifest",
      "DIR [--json]",
      "Show an image's manifest: process, devices, allocations, chunks and compression.\n"
      "For a save directory: every process, its GPU image's sizes and compression, CRIU's images.\n"
      "\n"
      "  --json, -o json   one JSON object on stdout\n" },
    { "verify", gpuckpt_cmd_verify,
      "check every checksum of an image",
      "DIR [--json]",
      "Read every chunk of the image at DIR and check its checksums (for a save directory:\n"
      "the tree manifest, every GPU image, and that CRIU's images are there).\n"
      "Exit 0 when the image is whole, 7 when it is corrupt or truncated.\n"
      "\n"
      "  --json, -o json   the result as one JSON object on stdout\n" },
    { "ps", gpuckpt_cmd_ps,
      "jobs tcgpud manages, or the tcgpu processes you can see",
      "[--local|--daemon] [--json]",
      "The jobs tcgpud manages: pid, user, project, priority, state, GPU, memory, limit,\n"
      "run time, preemptions, and who suspended a suspended job and why. When tcgpud does\n"
      "not answer: every tcgpu process you can see (all of them as root), with its state,\n"
      "GPU memory and last operation, as nvidia-smi lists GPU processes.\n"
      "\n"
      "  -l, --local       the tcgpu processes, even when tcgpud runs\n"
      "  -d, --daemon      tcgpud's jobs only: exit 3 when tcgpud does not answer\n"
      "  --json, -o json   one JSON object on stdout\n" },
    { "events", gpuckpt_cmd_events,
      "tcgpud's events",
      "[--follow] [--json]",
      "tcgpud's recent events (registered, request, suspending, suspended, resumed,\n"
      "granted, denied, exited, refused...), with the date, who, why, sizes and latencies.\n"
      "\n"
      "  -f, --follow      keep printing events as they happen\n"
      "  --json, -o json   one JSON object a line\n" },
    { "check", gpuckpt_cmd_check,
      "is this machine ready for tcgpu? (driver, library, run dir, CRIU, tcgpud)",
      "[--json]",
      "Check what tcgpu needs, each with what was found and, when it is not right, how to fix\n"
      "it: the CUDA driver loads, its checkpoint API is present, libtcgpu.so is found, the run\n"
      "dir is safe, CRIU is there and works (criu check, as root), tcgpud answers.\n"
      "Exit 0 when nothing failed (warnings are for what only some commands need), 1 otherwise.\n"
      "\n"
      "  --json, -o json   one JSON object on stdout\n" },
    { "help", cmd_help,
      "a command's usage and options, or this list",
      "[COMMAND]",
      "Show COMMAND's usage and options (as gpuckpt COMMAND --help), or without COMMAND\n"
      "the list of commands.\n" },
};

static const struct gpuckpt_command *find_command(const char *name)
{
    for (size_t i = 0; i < NELEM(commands); i++)
        if (!strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

/* gpuckpt --help: every row's synopsis and summary. */
static void print_usage(FILE *f)
{
    fprintf(f, "usage: gpuckpt COMMAND [ARGS]\n"
               "\n"
               "Checkpoint, suspend and resume GPU programs running under tcgpu.\n"
               "\n"
               "commands:\n");
    for (size_t i = 0; i < NELEM(commands); i++) {
        gpuckpt_print_synopsis(f, "  ", &commands[i]);
        fprintf(f, "      %s\n", commands[i].summary);
    }
    fprintf(f, "\n"
               "gpuckpt COMMAND --help shows a command's options; gpuckpt --version its version.\n"
               "Exit codes: 0 ok, 1 failed, 2 usage, 3 no such (tcgpu) process, 4 refused in this\n"
               "state, 5 timeout, 6 permission denied, 7 corrupt image, 8 not enough memory now.\n");
}

/* gpuckpt help [COMMAND]: an unknown COMMAND is a usage error, with the list. */
static int cmd_help(const struct gpuckpt_command *self, int argc, char **argv)
{
    const struct gpuckpt_command *c = argc > 1 ? find_command(argv[1]) : NULL;

    (void)self;
    if (c) {
        gpuckpt_command_help(c);
        return CTL_EXIT_OK;
    }
    print_usage(stdout);
    return argc > 1 ? CTL_EXIT_USAGE : CTL_EXIT_OK;
}

/* JSON output asked anywhere among a command's options: a usage error that
 * getopt meets before it reaches --json is a failure object too (docs/cli.md,
 * "JSON output"). Only commands that offer --json; nothing after "--". */
static void ask_json_early(const struct gpuckpt_command *c, int argc, char **argv)
{
    if (!c->args || !strstr(c->args, "--json"))
        return;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : "";

        if (!strcmp(a, "--json") || !strcmp(a, "-j") || !strcmp(a, "-ojson") ||
            !strcmp(a, "--output=json") ||
            ((!strcmp(a, "-o") || !strcmp(a, "--output")) && !strcmp(next, "json"))) {
            gpuckpt_set_json();
            return;
        }
    }
}

int main(int argc, char **argv)
{
    const struct gpuckpt_command *c;
    int r;

    /* a program reads its environment; the libraries take what it read */
    tcgpu_log_setup(&(struct tcgpu_log_style){ .name = "gpuckpt",
                                              .level = tcgpu_log_level_named(getenv("TCGPU_LOG")) });
    gdrv_set_library(getenv("TCGPU_REAL_LIBCUDA"));
    if (argc < 2) {
        print_usage(stderr);
        return CTL_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("gpuckpt %s\n", TCGPU_VERSION_STRING);
        return CTL_EXIT_OK;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        print_usage(stdout);
        return CTL_EXIT_OK;
    }
    c = find_command(argv[1]);
    if (!c) {
        gpuckpt_error("unknown command '%s'", argv[1]);
        print_usage(stderr);
        return CTL_EXIT_USAGE;
    }
    ask_json_early(c, argc - 1, argv + 1);
    r = c->run(c, argc - 1, argv + 1);
    gpuckpt_json_failure(r);
    return r;
}
