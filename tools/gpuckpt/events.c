/*
 * events.c - gpuckpt events: tcgpud's recent events, and with --follow
 * the new ones as they happen (docs/cli.md, docs/tcgpud.md).
 *
 * The text shows each event on one line: its date, its type, the job, and
 * its fields as people read them (sizes in MiB as gpuckpt ps shows them,
 * "limit none", latencies in ms); --json gives each event's fields typed.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "tcgpud.h"
#include "util.h"
#include "ctl/client.h"
#include "ctl/proto.h"
#include "common/macros.h"
#include "json/schema.h"

/* How an event's field is shown. */
enum shown_as {
    AS_TEXT,                    /* "label value" */
    AS_BYTES,                   /* "label 602 MiB" */
    AS_LIMIT,                   /* "limit none" for 0 */
    AS_MS,                      /* "label 545.0 ms" */
    AS_SECONDS,                 /* milliseconds shown as "label 12.3 s" */
    AS_HIDDEN,                  /* in the line's head already */
};

struct field_view {
    const char *key;
    const char *label;
    enum shown_as as;
};

/* In the order they are shown; fields not listed follow as "key value". */
static const struct field_view fields[] = {
    { "seq", NULL, AS_HIDDEN },
    { "time_ms", NULL, AS_HIDDEN },
    { "type", NULL, AS_HIDDEN },
    { "pid", NULL, AS_HIDDEN },
    { "user", NULL, AS_HIDDEN },
    { "project", NULL, AS_HIDDEN },
    { "priority", NULL, AS_HIDDEN },
    { "what", "refused", AS_TEXT },
    { "uid", "from uid", AS_TEXT },
    { "from_pid", "pid", AS_TEXT },
    { "why", "why", AS_TEXT },
    { "for", "for pid", AS_TEXT },
    { "bytes", "bytes", AS_BYTES },
    { "free", "free", AS_BYTES },
    { "limit", "limit", AS_LIMIT },
    { "priority_given", "priority asked", AS_TEXT },
    { "gpu_bytes", "gpu memory now", AS_BYTES },
    { "latency_ms", "latency", AS_MS },
    { "wait_ms", "waited", AS_MS },
    { "runtime_ms", "ran", AS_SECONDS },
    { "how", "how", AS_TEXT },
    { "state", "state", AS_TEXT },
    { "by", "by", AS_TEXT },
    { "by_uid", "by uid", AS_TEXT },
    { "dir", "dir", AS_TEXT },
    { "error", "error", AS_TEXT },
    { "text", NULL, AS_TEXT },  /* the message itself, in quotes */
};

static const struct field_view *view_of(const char *key)
{
    for (size_t i = 0; i < NELEM(fields); i++)
        if (!strcmp(fields[i].key, key))
            return &fields[i];
    return NULL;
}

/* One field as shown, appended to line; nothing for an empty or hidden one. */
static void show_field(const struct field_view *v, const char *key, const char *value, char *line,
                       size_t len)
{
    size_t used = strlen(line);
    const char *sep = used ? ", " : "";
    const char *label = v ? v->label : key;
    char b[32];
    double x;

    if (!*value || (v && v->as == AS_HIDDEN))
        return;
    switch (v ? v->as : AS_TEXT) {
    case AS_BYTES:
        snprintf(line + used, len - used, "%s%s %s", sep, label,
                 gpuckpt_mib(strtoull(value, NULL, 10), b, sizeof(b)));
        break;
    case AS_LIMIT:
        x = strtod(value, NULL);
        snprintf(line + used, len - used, "%s%s %s", sep, label,
                 x == 0 ? "none" : gpuckpt_mib((uint64_t)x, b, sizeof(b)));
        break;
    case AS_MS:
        snprintf(line + used, len - used, "%s%s %.1f ms", sep, label, strtod(value, NULL));
        break;
    case AS_SECONDS:
        snprintf(line + used, len - used, "%s%s %.1f s", sep, label, strtod(value, NULL) / 1000.0);
        break;
    default:
        if (!label)
            snprintf(line + used, len - used, "%s\"%s\"", sep, value);
        else
            snprintf(line + used, len - used, "%s%s %s", sep, label, value);
        break;
    }
}

/* "2024-12-01 08:11:40.123" (local time) of milliseconds since the epoch. */
static void format_date(uint64_t ms, char *out, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    char day[32];

    if (!localtime_r(&t, &tm) || !strftime(day, sizeof(day), "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(day, sizeof(day), "?");
    snprintf(out, len, "%s.%03u", day, (unsigned)(ms % 1000));
}

static void print_text(const struct ctl_msg *m)
{
    char when[48], line[2048] = "";
    const char *pid = ctl_get(m, "pid");
    uint64_t ms = 0;

    ctl_get_u64(m, "time_ms", &ms);
    format_date(ms, when, sizeof(when));
    for (size_t i = 0; i < NELEM(fields); i++) {
        const char *v = ctl_get(m, fields[i].key);
        if (v)
            show_field(&fields[i], fields[i].key, v, line, sizeof(line));
    }
    for (int i = 0; i < m->nfields; i++)
        if (!view_of(m->fields[i].key))
            show_field(NULL, m->fields[i].key, m->fields[i].value, line, sizeof(line));
    printf("%s  %-14s", when, ctl_get(m, "type") ? ctl_get(m, "type") : "?");
    if (pid)
        printf(" pid %s (%s, %s, prio %s)", pid, ctl_get(m, "user") ? ctl_get(m, "user") : "?",
               ctl_get(m, "project") ? ctl_get(m, "project") : "?",
               ctl_get(m, "priority") ? ctl_get(m, "priority") : "?");
    printf("%s%s\n", line[0] ? "  " : "", line);
    fflush(stdout);
}

struct events_view {
    int failed;                 /* stdout could not be written */
};

static void print_event(const struct ctl_msg *m, void *arg)
{
    struct events_view *v = arg;

    if (strcmp(m->word, "event") || v->failed)
        return;
    if (!gpuckpt_json())
        print_text(m);
    else if (gpuckpt_print_json(tc_json_from_msg(m, &tc_json_event_schema)) != CTL_EXIT_OK)
        v->failed = 1;
}

/* Parses `self`'s options. Returns 0, -1 when --help was shown, or a usage exit code. */
static int events_args(const struct gpuckpt_command *self, int argc, char **argv, int *follow)
{
    static const struct option longopts[] = {
        GPUCKPT_OUTPUT_LONGOPTS,
        { "follow", no_argument, NULL, 'f' },
        { 0 },
    };
    int ch, r;

    *follow = 0;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "hjo:f", longopts, NULL)) != -1) {
        if ((r = gpuckpt_output_option(self, ch)) != GPUCKPT_NOT_OUTPUT_OPTION) {
            if (r)
                return r;
        } else if (ch == 'f') {
            *follow = 1;
        } else {
            return gpuckpt_option_error(self->name, argc, argv, "hjo:f", longopts);
        }
    }
    if (optind != argc)
        return gpuckpt_usage_error(self->name, "no arguments, please");
    return 0;
}

int gpuckpt_cmd_events(const struct gpuckpt_command *self, int argc, char **argv)
{
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    struct events_view v = { 0 };
    int follow, r;

    if (!req || !rep) {
        r = CTL_EXIT_FAILED;
        goto out;
    }
    r = events_args(self, argc, argv, &follow);
    if (r) {
        r = r < 0 ? CTL_EXIT_OK : r;
        goto out;
    }
    ctl_buf_request(req, "events");
    if (follow)
        ctl_buf_put_u64(req, "follow", 1);
    /* with --follow there is no final reply: events until tcgpud goes away or ^C */
    r = gpuckpt_daemon_call("events", req, rep, follow ? -1 : 30000, print_event, &v, 0);
    if (r == CTL_EXIT_OK && rep->err) {
        gpuckpt_note_errno(rep->err_name);
        gpuckpt_error("events: %s: %s", rep->err_name, rep->err_text);
        r = ctl_exit_code(rep->err, 1);
    }
    if (r == CTL_EXIT_OK && v.failed)
        r = CTL_EXIT_FAILED;
out:
    free(req);
    free(rep);
    return r;
}
