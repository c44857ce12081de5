/* util.c - gpuckpt's messages, JSON output and argument parsing; see util.h. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"
#include "common/log.h"
#include "common/units.h"
#include "ctl/client.h"

static const char *const prog = "gpuckpt";

/* What this run said on stderr, for the failure object of JSON mode. */
static struct {
    int json, printed;
    json_t *messages;
    char errno_name[32];
} run_output;

static void remember(const char *fmt, va_list ap)
{
    char msg[2048];

    if (!run_output.json)
        return;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (!run_output.messages)
        run_output.messages = json_array();
    if (run_output.messages)
        json_array_append_new(run_output.messages, tc_json_string(msg));
}

void gpuckpt_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    tcgpu_vlog(TCGPU_LOG_ERROR, fmt, ap);
    va_end(ap);
    va_start(ap, fmt);
    remember(fmt, ap);
    va_end(ap);
}

void gpuckpt_set_json(void)
{
    run_output.json = 1;
}

int gpuckpt_json(void)
{
    return run_output.json;
}

int gpuckpt_set_format(const char *cmd, const char *format)
{
    if (!strcmp(format, "json")) {
        gpuckpt_set_json();
        return 0;
    }
    if (!strcmp(format, "text"))
        return 0;
    return gpuckpt_usage_error(cmd, "-o wants json or text, not '%s'", format);
}

int gpuckpt_output_option(const struct gpuckpt_command *self, int ch)
{
    switch (ch) {
    case 'h':
        gpuckpt_command_help(self);
        return -1;
    case 'j':
        gpuckpt_set_json();
        return 0;
    case 'o':
        return gpuckpt_set_format(self->name, optarg);
    default:
        return GPUCKPT_NOT_OUTPUT_OPTION;
    }
}

int gpuckpt_print_json(json_t *v)
{
    int r = tc_json_print(v, stdout);

    run_output.printed = 1;
    if (r == -ENOMEM) {
        gpuckpt_error("out of memory writing JSON");
        return CTL_EXIT_FAILED;
    }
    if (r < 0) {
        gpuckpt_error("cannot write to stdout: %s", errno ? strerror(errno) : "jansson could not encode the output");
        return CTL_EXIT_FAILED;
    }
    return CTL_EXIT_OK;
}

void gpuckpt_note_errno(const char *name)
{
    if (name && !run_output.errno_name[0])
        snprintf(run_output.errno_name, sizeof(run_output.errno_name), "%s", name);
}

void gpuckpt_json_failure(int exit_code)
{
    json_t *o, *first;

    if (!run_output.json || run_output.printed || exit_code == CTL_EXIT_OK)
        return;
    o = json_object();
    first = run_output.messages ? json_array_get(run_output.messages, 0) : NULL;
    if (o) {
        tc_json_set_bool(o, "ok", 0);
        tc_json_set_int(o, "exit_code", exit_code);
        tc_json_set_new(o, "error", first ? json_incref(first) : json_string("failed"));
        tc_json_set_new(o, "messages", run_output.messages ? json_incref(run_output.messages) : json_array());
        if (run_output.errno_name[0])
            tc_json_set_string(o, "errno", run_output.errno_name);
    }
    tc_json_print(o, stdout);
    run_output.printed = 1;
}

enum { SYNOPSIS_WIDTH = 79 };

/* The length of the argument group at s: up to the next " [" outside brackets. */
static size_t arg_group_len(const char *s)
{
    int depth = 0;
    size_t i;

    for (i = 0; s[i]; i++) {
        if (i > 0 && depth == 0 && s[i] == ' ' && s[i + 1] == '[')
            break;
        depth += (s[i] == '[') - (s[i] == ']');
    }
    return i;
}

void gpuckpt_print_synopsis(FILE *f, const char *lead, const struct gpuckpt_command *c)
{
    size_t indent = strlen(lead) + strlen(c->name), col = indent;

    fprintf(f, "%s%s", lead, c->name);
    for (const char *p = c->args; *p; ) {
        size_t n = arg_group_len(p);

        if (col + 1 + n > SYNOPSIS_WIDTH && col > indent) {
            fprintf(f, "\n%*s", (int)indent, "");
            col = indent;
        }
        fprintf(f, " %.*s", (int)n, p);
        col += 1 + n;
        for (p += n; *p == ' '; p++)
            ;
    }
    fputc('\n', f);
}

void gpuckpt_command_help(const struct gpuckpt_command *c)
{
    gpuckpt_print_synopsis(stdout, "usage: gpuckpt ", c);
    printf("\n%s", c->help);
}

int gpuckpt_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s %s: ", prog, cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(gpuckpt %s --help shows its usage)\n", cmd);
    va_start(ap, fmt);
    remember(fmt, ap);
    va_end(ap);
    return CTL_EXIT_USAGE;
}

/* The long option of longopts whose val is `val`, or NULL. */
static const struct option *long_option(const struct option *longopts, int val)
{
    for (const struct option *o = longopts; o && o->name; o++)
        if (o->val == val)
            return o;
    return NULL;
}

int gpuckpt_option_error(const char *cmd, int argc, char **argv, const char *shortopts,
                         const struct option *longopts)
{
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    const struct option *lo = optopt ? long_option(longopts, optopt) : NULL;
    const char *sp = optopt > 0 && optopt < 256 && isalnum(optopt) ? strchr(shortopts, optopt) : NULL;

    if (lo && !strncmp(arg, "--", 2)) {
        if (lo->has_arg == no_argument)
            return gpuckpt_usage_error(cmd, "option '--%s' takes no value", lo->name);
        return gpuckpt_usage_error(cmd, "option '--%s' needs a value", lo->name);
    }
    if (sp && sp[1] == ':')
        return gpuckpt_usage_error(cmd, "option '-%c' needs a value", optopt);
    if (optopt > 0 && optopt < 256 && isprint(optopt))
        return gpuckpt_usage_error(cmd, "unknown option '-%c'", optopt);
    return gpuckpt_usage_error(cmd, "unknown option '%s'", arg);
}

int gpuckpt_needs_root(const char *cmd, const char *why)
{
    if (geteuid() == 0)
        return 0;
    gpuckpt_error("%s needs root (uid 0; this is uid %u): %s. Run it as root, e.g. with sudo",
                  cmd, (unsigned)geteuid(), why);
    return CTL_EXIT_PERM;
}

const char *gpuckpt_mib(uint64_t b, char *buf, size_t len)
{
    snprintf(buf, len, "%.0f MiB", (double)b / 1048576.0);
    return buf;
}

int gpuckpt_parse_pid(const char *s, pid_t *pid)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v <= 0 || v > INT_MAX)
        return -EINVAL;
    *pid = (pid_t)v;
    return 0;
}

int gpuckpt_parse_seconds_ms(const char *s)
{
    uint64_t ns;

    /* units' grammar, as every duration gpuckpt takes: strtod took hex
     * and exponents, and refused the "500ms" docs/cli.md offers */
    if (units_parse_duration(s, &ns) < 0 || ns > 2000000 * 1000000000ull)
        return -EINVAL;
    return (int)((ns + 500000) / 1000000);
}

int gpuckpt_absolute_dir(const char *dir, char *out, size_t len)
{
    char cwd[PATH_MAX];
    int n;

    if (!*dir)
        return -EINVAL;
    if (dir[0] == '/')
        n = snprintf(out, len, "%s", dir);
    else if (!getcwd(cwd, sizeof(cwd)))
        return -errno;
    else
        n = snprintf(out, len, "%s/%s", strcmp(cwd, "/") ? cwd : "", dir);
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    while (n > 1 && out[n - 1] == '/')
        out[--n] = '\0';
    return 0;
}
