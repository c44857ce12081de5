/*
 * util.h - gpuckpt's small helpers, shared by its command files: messages
 * on stderr, usage errors, JSON output and parsing of arguments.
 *
 * gpuckpt is single-threaded; none of these keeps state between calls.
 */
#ifndef GPUCKPT_UTIL_H
#define GPUCKPT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "json/json.h"

/*
 * One row of gpuckpt's command table (main.c). A command's handler gets its
 * own row (for --help), its arguments with argv[0] the command's name, and
 * returns gpuckpt's exit code (enum ctl_exit in ctl/client.h).
 */
struct gpuckpt_command {
    const char *name;
    int (*run)(const struct gpuckpt_command *self, int argc, char **argv);
    const char *summary;        /* one line for gpuckpt --help */
    const char *args;           /* after the name: "PID [--json] [--wait SEC]" */
    const char *help;           /* what it does, then its options */
};

/*
 * "<lead>NAME ARGS\n" on f. Lines that would pass 79 columns are broken
 * before an optional "[...]" group and go on under the first argument.
 */
void gpuckpt_print_synopsis(FILE *f, const char *lead, const struct gpuckpt_command *c);

/* c's --help on stdout: its synopsis, then its help. */
void gpuckpt_command_help(const struct gpuckpt_command *c);

/* "gpuckpt: <message>" on stderr, through the common log (common/log.h,
 * which main() sets up first), and remembered for JSON mode's failure object. */
void gpuckpt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * "gpuckpt CMD: <message>" on stderr, and a line that points to
 * gpuckpt CMD --help. Returns the usage exit code (CTL_EXIT_USAGE), so that
 * a parser can `return gpuckpt_usage_error(...)`.
 */
int gpuckpt_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * After getopt_long() returned '?' (opterr = 0): the usage error that names
 * what was wrong ("unknown option '--jsno'", "option '-D' needs a value",
 * "option '--json' takes no value"), from optopt, optind and the command's
 * shortopts and longopts. Returns CTL_EXIT_USAGE.
 */
struct option;
int gpuckpt_option_error(const char *cmd, int argc, char **argv, const char *shortopts,
                         const struct option *longopts);

/* 0 as root; else says that cmd needs root and why, and returns CTL_EXIT_PERM. */
int gpuckpt_needs_root(const char *cmd, const char *why);

/*
 * Output as JSON (--json, or -o json): the command then writes exactly one
 * JSON object on stdout (events: one a line), also when it fails: main()
 * ends a failed run that printed none with gpuckpt_json_failure(). Schemas
 * in docs/cli.md, "JSON output".
 */
void gpuckpt_set_json(void);
int gpuckpt_json(void);

/*
 * -o FORMAT: "json" sets JSON output, "text" is the default. Returns 0, or
 * a usage exit code (said on stderr) for another FORMAT.
 */
int gpuckpt_set_format(const char *cmd, const char *format);

/* The options of every command that prints: --json, -o/--output, -h/--help
 * (with "hjo:" among the short options). */
#define GPUCKPT_OUTPUT_LONGOPTS                                                                   \
    { "json", no_argument, NULL, 'j' }, { "output", required_argument, NULL, 'o' },              \
    { "help", no_argument, NULL, 'h' }
#define GPUCKPT_NOT_OUTPUT_OPTION 1000

/*
 * getopt's ch (optarg its argument) when it is one of those: 0 (handled),
 * -1 (--help shown), a usage exit code (a bad -o), or
 * GPUCKPT_NOT_OUTPUT_OPTION for the command's own options.
 */
int gpuckpt_output_option(const struct gpuckpt_command *self, int ch);

/*
 * Prints v on stdout as one line of JSON (a reference to v taken; NULL
 * means out of memory) and notes that this run's object is out. Returns
 * CTL_EXIT_OK, or CTL_EXIT_FAILED (said on stderr) when it cannot.
 */
int gpuckpt_print_json(json_t *v);

/*
 * For a run in JSON mode that ends with exit_code and printed no object:
 * {"ok": false, "exit_code": N, "error": first message, "messages": [...]}
 * (and "errno" when gpuckpt_note_errno() was told one),
 * from what gpuckpt_error() and gpuckpt_usage_error() said. No-op otherwise.
 */
void gpuckpt_json_failure(int exit_code);

/* The errno name ("EBUSY") a process or tcgpud gave for the failure, for
 * the failure object's "errno" (the first one given counts). */
void gpuckpt_note_errno(const char *name);

/* b as whole MiB, "602 MiB", as ps and events show sizes; returns buf. */
const char *gpuckpt_mib(uint64_t b, char *buf, size_t len);

/* A process id (1 to INT_MAX, decimal, nothing after it) into *pid. 0 or -EINVAL. */
int gpuckpt_parse_pid(const char *s, pid_t *pid);

/* A duration ("30", "1.5s", "500ms", "2m"; units_parse_duration) of 0 to
 * 2000000 s, as milliseconds rounded; -EINVAL if not. */
int gpuckpt_parse_seconds_ms(const char *s);

/*
 * dir as an absolute path, from gpuckpt's working directory (a process
 * resolves a relative path from its own), trailing slashes removed, into out
 * (len bytes). 0, -EINVAL (empty dir), -ENAMETOOLONG, or getcwd's -errno.
 */
int gpuckpt_absolute_dir(const char *dir, char *out, size_t len);

#endif
