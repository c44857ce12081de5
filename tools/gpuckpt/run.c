/*
 * run.c - gpuckpt run: a command with libtcgpu.so preloaded (docs/cli.md).
 *
 * The options become the library's environment (TCGPU_*), checked here so
 * that a mistake is a usage error rather than a program that starts without
 * what was asked; then gpuckpt execs the command, which keeps gpuckpt's pid.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "library.h"
#include "tcgpud.h"
#include "util.h"
#include "ctl/client.h"
#include "common/macros.h"
#include "common/signals.h"

/* LD_PRELOAD with lib first; the existing entries (space- or colon-separated) kept. */
static int preload_with(const char *lib)
{
    const char *old = getenv("LD_PRELOAD");
    char *v;
    int r;

    if (strpbrk(lib, " :")) {
        gpuckpt_error("%s: LD_PRELOAD cannot hold a path with a space or colon; "
                      "move the library or set TCGPU_LIB to a link without them", lib);
        return -1;
    }
    if (old && *old) {
        /* already there? then leave LD_PRELOAD alone */
        char *copy = strdup(old), *save = NULL;
        for (char *t = copy ? strtok_r(copy, " :", &save) : NULL; t; t = strtok_r(NULL, " :", &save)) {
            if (!strcmp(t, lib)) {
                free(copy);
                return 0;
            }
        }
        free(copy);
        if (asprintf(&v, "%s:%s", lib, old) < 0)
            return -1;
    } else if (!(v = strdup(lib))) {
        return -1;
    }
    r = setenv("LD_PRELOAD", v, 1);
    free(v);
    return r;
}

int gpuckpt_cmd_run(const struct gpuckpt_command *self, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "signal", required_argument, NULL, 's' },
        { "signal-action", required_argument, NULL, 'a' },
        { "checkpoint-dir", required_argument, NULL, 'D' },
        { "run-dir", required_argument, NULL, 'R' },
        { "log", required_argument, NULL, 'l' },
        GPUCKPT_TCGPUD_RUN_LONGOPTS,
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    char lib[PATH_MAX], dir[PATH_MAX], err[5 * PATH_MAX];
    int ch;

    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "+hs:a:D:R:l:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            gpuckpt_command_help(self);
            return CTL_EXIT_OK;
        case 's':
            /* "0" is no signal: off is said as off, not as a number */
            if (!strcmp(optarg, "0") || tcgpu_signal_parse(optarg) < 0)
                return gpuckpt_usage_error("run", "--signal %s: unknown or unusable signal "
                                           "(try RTMIN+4, USR2, 38, or off for none)", optarg);
            setenv("TCGPU_SIGNAL", optarg, 1);
            break;
        case 'a':
            if (tcgpu_sigaction_parse(optarg) < 0)
                return gpuckpt_usage_error("run", "--signal-action %s: one of toggle, suspend, "
                                           "resume, checkpoint", optarg);
            setenv("TCGPU_SIGNAL_ACTION", optarg, 1);
            break;
        case 'D':
            if (gpuckpt_absolute_dir(optarg, dir, sizeof(dir)) < 0)
                return gpuckpt_usage_error("run", "bad directory '%s'", optarg);
            setenv("TCGPU_CHECKPOINT_DIR", dir, 1);
            break;
        case 'R':
            if (gpuckpt_absolute_dir(optarg, dir, sizeof(dir)) < 0)
                return gpuckpt_usage_error("run", "bad directory '%s'", optarg);
            setenv("TCGPU_RUN_DIR", dir, 1);
            break;
        case 'l':
            if (strcmp(optarg, "quiet") && strcmp(optarg, "info") && strcmp(optarg, "debug"))
                return gpuckpt_usage_error("run", "--log is quiet, info or debug");
            setenv("TCGPU_LOG", optarg, 1);
            break;
        case GPUCKPT_OPT_PROJECT ... GPUCKPT_OPT_TCGPUD_LAST - 1: {
            int e = gpuckpt_tcgpud_run_option(ch, optarg);   /* tcgpud's: sets TCGPU_* */
            if (e)
                return e;
            break;
        }
        default:
            return gpuckpt_option_error("run", argc, argv, "+hs:a:D:R:l:", longopts);
        }
    }
    if (optind >= argc)
        return gpuckpt_usage_error("run", "which command?");
    if (gpuckpt_find_library(lib, err, sizeof(err)) < 0) {
        gpuckpt_error("%s", err);
        return CTL_EXIT_FAILED;
    }
    if (preload_with(lib) < 0) {
        gpuckpt_error("cannot set LD_PRELOAD");
        return CTL_EXIT_FAILED;
    }
    execvp(argv[optind], argv + optind);
    gpuckpt_error("cannot run %s: %s", argv[optind], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
