/*
 * util.h - gpuckpt's small helpers, shared by its command files: messages
 * on stderr, usage errors, JSON output and parsing of arguments.
 *
 * gpuckpt is single-threaded; none of these keeps state between calls.
 */
#ifndef GPUCKPT_UTIL_H
#define GPUCKPT_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

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

/* "gpuckpt: <message>\n" on stderr. */
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

/* s as a JSON string literal, quotes included, control characters escaped. */
void gpuckpt_json_string(FILE *f, const char *s);

/*
 * Whether s may be written as a bare JSON number: a decimal integer with an
 * optional '-', no leading zero and at most 19 digits. Anything else (longer
 * numbers included) stays a JSON string.
 */
int gpuckpt_is_integer(const char *s);

/* A process id (1 to INT_MAX, decimal, nothing after it) into *pid. 0 or -EINVAL. */
int gpuckpt_parse_pid(const char *s, pid_t *pid);

/* Seconds, fractions allowed (0 to 2000000), as milliseconds rounded; -EINVAL if not. */
int gpuckpt_parse_seconds_ms(const char *s);

/*
 * dir as an absolute path, from gpuckpt's working directory (a process
 * resolves a relative path from its own), trailing slashes removed, into out
 * (len bytes). 0, -EINVAL (empty dir), -ENAMETOOLONG, or getcwd's -errno.
 */
int gpuckpt_absolute_dir(const char *dir, char *out, size_t len);

#endif
