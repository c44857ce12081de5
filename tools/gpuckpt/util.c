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
#include "ctl/client.h"

static const char *const prog = "gpuckpt";

void gpuckpt_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
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

void gpuckpt_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

int gpuckpt_is_integer(const char *s)
{
    if (*s == '-')
        s++;
    if (!*s || strlen(s) > 19 || (s[0] == '0' && s[1]))
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
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
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0) || v > 2000000)
        return -EINVAL;
    return (int)(v * 1000 + 0.5);
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
