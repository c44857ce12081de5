/*
 * config.c - tcgpud's configuration; see config.h.
 *
 * libinih splits the file into (section, key, value); everything else is
 * ours: which sections and keys exist, their values, duplicates, and the
 * cross-checks at the end (reservations within capacity). inih does not pass
 * line numbers to the handler in the Debian build, so we feed it lines
 * through our own reader and count them (and spot malformed lines there,
 * since inih reports only the first). Every error is collected, not only
 * the first (tcgpud --check-config lists them all); the keys of a section
 * whose header is wrong are skipped rather than reported against another.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <pwd.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

struct parse_ctx {
    struct tcgpud_config *c;
    const char *name;             /* file name for messages */
    FILE *f;
    int line;                     /* of the text inih is working on */
    int at_line_start;
    char err[TCGPUD_CONFIG_ERR_MAX]; /* every error, one a line, first first */
    size_t err_len;
    int nerr;
    int section_ok;               /* the current section's header was valid */
    int has_pending;              /* a section header read, not yet entered */
    char pending[128];            /* its text */
    int pending_line;
    int entered;                  /* some section was entered */
    unsigned daemon_seen;         /* keys of [daemon] given */
    int daemon_sections;
    int daemon_line;              /* its header */
    int cur_project;              /* index, or -1 */
    int cur_gpu;                  /* index, or -1 */
};

static void fail(struct parse_ctx *x, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records an error at line; the list is cut (with a note) when it is full. */
static void fail(struct parse_ctx *x, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    int n;

    x->nerr++;
    if (x->err_len + 64 >= sizeof(x->err))
        return;
    n = snprintf(msg, sizeof(msg), "%s:%d: ", x->name, line);
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    va_end(ap);
    if (x->err_len + strlen(msg) + 2 + 64 >= sizeof(x->err)) {
        snprintf(x->err + x->err_len, sizeof(x->err) - x->err_len, "%s%s: more errors follow",
                 x->err_len ? "\n" : "", x->name);
        x->err_len = sizeof(x->err);
        return;
    }
    x->err_len += (size_t)snprintf(x->err + x->err_len, sizeof(x->err) - x->err_len, "%s%s",
                                   x->err_len ? "\n" : "", msg);
}

/* ---------------------------------------------------------------------------
 * Values
 * ------------------------------------------------------------------------- */

static const char *skip_space(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

static int parse_bool(const char *s, int *out)
{
    if (!strcmp(s, "yes") || !strcmp(s, "true") || !strcmp(s, "on") || !strcmp(s, "1"))
        *out = 1;
    else if (!strcmp(s, "no") || !strcmp(s, "false") || !strcmp(s, "off") || !strcmp(s, "0"))
        *out = 0;
    else
        return -EINVAL;
    return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *skip_space(end) || v < lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

/* One "8G on 0" item. */
static int parse_reserve_item(char *item, struct pol_project *p, char *err, size_t errlen)
{
    char *on = strstr(item, " on ");
    uint64_t bytes;
    long dev;

    if (!on) {
        snprintf(err, errlen, "reservation '%s': want SIZE on GPU (e.g. 8G on 0)", item);
        return -EINVAL;
    }
    *on = '\0';
    if (units_parse_size(item, &bytes) < 0) {
        snprintf(err, errlen, "reservation: '%s' is not a size (e.g. 8G)", item);
        return -EINVAL;
    }
    if (parse_int(skip_space(on + 4), 0, TCGPUD_MAX_GPUS - 1, &dev) < 0) {
        snprintf(err, errlen, "reservation: '%s' is not a GPU number (0..%d)", skip_space(on + 4),
                 TCGPUD_MAX_GPUS - 1);
        return -EINVAL;
    }
    for (int i = 0; i < p->nreserve; i++) {
        if (p->reserve[i].device == (int)dev) {
            snprintf(err, errlen, "reservation: GPU %ld given twice", dev);
            return -EINVAL;
        }
    }
    if (p->nreserve == (int)(sizeof(p->reserve) / sizeof(p->reserve[0]))) {
        snprintf(err, errlen, "reservation: at most %zu GPUs per project",
                 sizeof(p->reserve) / sizeof(p->reserve[0]));
        return -EINVAL;
    }
    p->reserve[p->nreserve].device = (int)dev;
    p->reserve[p->nreserve].bytes = bytes;
    p->nreserve++;
    return 0;
}

int tcgpud_parse_reservation(const char *s, struct pol_project *p, char *err, size_t errlen)
{
    char *copy = strdup(s), *save = NULL;
    int r = 0;

    if (!copy) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    p->nreserve = 0;
    for (char *t = strtok_r(copy, ",", &save); t && r == 0; t = strtok_r(NULL, ",", &save)) {
        char *item = (char *)skip_space(t);
        size_t n = strlen(item);
        while (n && isspace((unsigned char)item[n - 1]))
            item[--n] = '\0';
        if (!n)
            continue;
        r = parse_reserve_item(item, p, err, errlen);
    }
    free(copy);
    return r;
}

static int valid_name(const char *s, size_t max)
{
    size_t n = strlen(s);

    if (n == 0 || n >= max)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._-", *s))
            return 0;
    return 1;
}

static int add_members(struct parse_ctx *x, struct tcgpud_project *p, const char *value)
{
    char *copy = strdup(value), *save = NULL;

    if (!copy) {
        fail(x, x->line, "out of memory");
        return -1;
    }
    int bad = 0;

    for (char *t = strtok_r(copy, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save)) {
        struct tcgpud_member m = { .line = x->line };
        if (!strcmp(t, "*")) {
            m.everyone = 1;
        } else {
            m.is_group = t[0] == '@';
            if (!valid_name(t + m.is_group, sizeof(m.name))) {
                fail(x, x->line, "members: '%s' is not a user, @group or *", t);
                bad = 1;
                continue;
            }
            snprintf(m.name, sizeof(m.name), "%s", t + m.is_group);
        }
        if (p->nmembers == TCGPUD_MAX_MEMBERS) {
            fail(x, x->line, "members: more than %d", TCGPUD_MAX_MEMBERS);
            bad = 1;
            break;
        }
        p->members[p->nmembers++] = m;
    }
    free(copy);
    return bad ? -1 : 0;
}

int tcgpud_parse_listen(const char *s, char *host, size_t hostlen, int *port, char *err, size_t errlen)
{
    char addr[64] = "127.0.0.1", probe[16];
    const char *p = s, *colon;
    long v;

    if (*s == '[') {                      /* [v6]:port */
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':' || (size_t)(end - s - 1) >= sizeof(addr)) {
            snprintf(err, errlen, "'%s': want [IPv6]:PORT", s);
            return -EINVAL;
        }
        memcpy(addr, s + 1, (size_t)(end - s - 1));
        addr[end - s - 1] = '\0';
        p = end + 2;
        if (inet_pton(AF_INET6, addr, probe) != 1) {
            snprintf(err, errlen, "'%s' is not an IPv6 address", addr);
            return -EINVAL;
        }
    } else if ((colon = strrchr(s, ':'))) {   /* v4:port */
        if ((size_t)(colon - s) >= sizeof(addr)) {
            snprintf(err, errlen, "'%s': address too long", s);
            return -EINVAL;
        }
        memcpy(addr, s, (size_t)(colon - s));
        addr[colon - s] = '\0';
        p = colon + 1;
        if (inet_pton(AF_INET, addr, probe) != 1) {
            snprintf(err, errlen, "'%s' is not an IPv4 address (a numeric one: no host names)", addr);
            return -EINVAL;
        }
    }
    if (parse_int(p, 0, 65535, &v) < 0) {
        snprintf(err, errlen, "'%s': want [ADDR:]PORT, PORT 0..65535 (e.g. 9466 or 127.0.0.1:9466)", s);
        return -EINVAL;
    }
    snprintf(host, hostlen, "%s", addr);
    *port = (int)v;
    return 0;
}

/* ---------------------------------------------------------------------------
 * Sections
 * ------------------------------------------------------------------------- */

/* Bit for a key of a section (for duplicates); -1 when unknown. */
static int key_bit(const char *const *keys, const char *name)
{
    for (int i = 0; keys[i]; i++)
        if (!strcmp(keys[i], name))
            return i;
    return -1;
}

static const char *const daemon_keys[] = {
    "socket", "state_file", "admins", "min_runtime", "resume_retry", "metrics", "http", "dashboard",
    "backfill", "max_connections_per_user", "max_jobs_per_user", NULL,
};
static const char *const project_keys[] = {
    "priority", "reservation", "members", "borrow", "default_limit", "lending_limit",
    "borrowing_limit", "weight", "cohort", "default_compute", NULL,
};

/* "30%" (a whole percentage, lo..100) into *pct. */
static int parse_pct(const char *s, unsigned lo, unsigned *pct)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end != '%' || *skip_space(end + 1) || v < (long)lo || v > 100)
        return -EINVAL;
    *pct = (unsigned)v;
    return 0;
}

static int set_path(struct parse_ctx *x, char *dst, size_t len, const char *key, const char *v)
{
    if (v[0] != '/') {
        fail(x, x->line, "%s: '%s' must be an absolute path", key, v);
        return -1;
    }
    if (strlen(v) >= len) {
        fail(x, x->line, "%s: path longer than %zu characters", key, len - 1);
        return -1;
    }
    snprintf(dst, len, "%s", v);
    return 0;
}

static void daemon_key(struct parse_ctx *x, const char *name, const char *v)
{
    struct tcgpud_config *c = x->c;
    int bit = key_bit(daemon_keys, name);
    long n;

    if (bit < 0) {
        fail(x, x->line, "[daemon]: unknown key '%s' (known: socket, state_file, admins, "
              "min_runtime, resume_retry, metrics, http, dashboard, backfill, "
              "max_connections_per_user, max_jobs_per_user)", name);
        return;
    }
    if (x->daemon_seen & (1u << bit)) {
        fail(x, x->line, "[daemon]: '%s' given twice", name);
        return;
    }
    x->daemon_seen |= 1u << bit;
    if (!strcmp(name, "socket"))
        set_path(x, c->socket, sizeof(c->socket), name, v);
    else if (!strcmp(name, "state_file"))
        set_path(x, c->state_file, sizeof(c->state_file), name, v);
    else if (!strcmp(name, "metrics"))
        set_path(x, c->metrics, sizeof(c->metrics), name, v);
    else if (!strcmp(name, "admins")) {
        const char *g = v[0] == '@' ? v + 1 : v;
        if (*g && !valid_name(g, sizeof(c->admins)))
            fail(x, x->line, "admins: '%s' is not a group name", v);
        else
            snprintf(c->admins, sizeof(c->admins), "%s", g);
        c->admins_line = x->line;
    } else if (!strcmp(name, "max_connections_per_user")) {
        if (parse_int(v, 1, 512, &n) < 0)
            fail(x, x->line, "max_connections_per_user: '%s' is not a number in 1..512", v);
        else
            c->max_connections_per_user = (int)n;
    } else if (!strcmp(name, "max_jobs_per_user")) {
        if (parse_int(v, 1, 100000, &n) < 0)
            fail(x, x->line, "max_jobs_per_user: '%s' is not a number in 1..100000", v);
        else
            c->max_jobs_per_user = (int)n;
    } else if (!strcmp(name, "http")) {
        char err[256];
        if (tcgpud_parse_listen(v, c->http_host, sizeof(c->http_host), &c->http_port, err,
                                sizeof(err)) < 0)
            fail(x, x->line, "http: %s", err);
    } else if (!strcmp(name, "dashboard")) {
        if (parse_bool(v, &c->dashboard) < 0)
            fail(x, x->line, "dashboard: '%s' is not yes or no", v);
    } else if (!strcmp(name, "min_runtime")) {
        if (units_parse_duration(v, &c->min_runtime_ns) < 0)
            fail(x, x->line, "min_runtime: '%s' is not a duration (e.g. 30s, 500ms, 2m)", v);
    } else if (!strcmp(name, "backfill")) {
        if (parse_bool(v, &c->backfill) < 0)
            fail(x, x->line, "backfill: '%s' is not yes or no", v);
    } else if (units_parse_duration(v, &c->resume_retry_ns) < 0) {
        fail(x, x->line, "resume_retry: '%s' is not a duration (e.g. 5s)", v);
    }
}

/* The quota keys of a project (docs/tcgpud.md, "Quotas"). */
static void quota_key(struct parse_ctx *x, struct tcgpud_project *p, const char *name,
                      const char *v)
{
    struct pol_project *q = &p->pol;
    long w;

    if (!strcmp(name, "lending_limit")) {
        unsigned pct;
        q->quota_flags |= POL_Q_LENDING_LIMIT;
        if (!strchr(v, '%')) {
            if (units_parse_size(v, &q->lend_bytes) < 0)
                fail(x, x->line, "lending_limit: '%s' is not a size or a percentage (e.g. 20G, 50%%)", v);
        } else if (parse_pct(v, 0, &pct) < 0) {
            fail(x, x->line, "lending_limit: '%s' is not a percentage in 0%%..100%%", v);
        } else {
            q->lend_pct = pct;            /* 0%: lend_bytes stays 0, it lends nothing */
        }
    } else if (!strcmp(name, "borrowing_limit")) {
        q->quota_flags |= POL_Q_BORROWING_LIMIT;
        if (units_parse_size(v, &q->borrow_bytes) < 0)
            fail(x, x->line, "borrowing_limit: '%s' is not a size (e.g. 40G, or 0)", v);
    } else if (!strcmp(name, "weight")) {
        if (parse_int(v, 1, 1000, &w) < 0)
            fail(x, x->line, "weight: '%s' is not an integer in 1..1000", v);
        else
            q->weight = (unsigned)w;
    } else if (!strcmp(name, "cohort")) {
        if (!valid_name(v, sizeof(q->cohort)))
            fail(x, x->line, "cohort: '%s' is not a name of [A-Za-z0-9._-]", v);
        else
            snprintf(q->cohort, sizeof(q->cohort), "%s", v);
    } else {
        unsigned pct;
        if (parse_pct(v, 1, &pct) < 0)
            fail(x, x->line, "default_compute: '%s' is not a percentage in 1%%..100%% (e.g. 30%%)", v);
        else
            q->compute = pct * 10;
    }
}

static void project_key(struct parse_ctx *x, struct tcgpud_project *p, const char *name,
                        const char *v)
{
    int bit = key_bit(project_keys, name);
    char err[256];
    long prio;
    int b;

    if (bit < 0) {
        fail(x, x->line, "[project %s]: unknown key '%s' (known: priority, reservation, members, "
             "borrow, default_limit, lending_limit, borrowing_limit, weight, cohort, "
             "default_compute)", p->pol.name, name);
        return;
    }
    /* inih hands indented continuation lines over as the same key again:
     * members may go on over several lines; any other key twice is a mistake. */
    if ((p->seen & (1u << bit)) && strcmp(name, "members")) {
        fail(x, x->line, "[project %s]: '%s' given twice", p->pol.name, name);
        return;
    }
    p->seen |= 1u << bit;
    if (!strcmp(name, "priority")) {
        if (parse_int(v, -1000000, 1000000, &prio) < 0)
            fail(x, x->line, "priority: '%s' is not an integer in -1000000..1000000", v);
        else
            p->pol.priority = (int)prio;
    } else if (!strcmp(name, "reservation")) {
        if (tcgpud_parse_reservation(v, &p->pol, err, sizeof(err)) < 0)
            fail(x, x->line, "%s", err);
    } else if (!strcmp(name, "members")) {
        add_members(x, p, v);
    } else if (!strcmp(name, "borrow")) {
        if (parse_bool(v, &b) < 0)
            fail(x, x->line, "borrow: '%s' is not yes or no", v);
        else
            p->pol.may_borrow = b;
    } else if (!strcmp(name, "default_limit")) {
        if (units_parse_size(v, &p->pol.default_limit) < 0)
            fail(x, x->line, "default_limit: '%s' is not a size (e.g. 16G, or 0 for none)", v);
    } else {
        quota_key(x, p, name, v);
    }
    if (!x->err[0])
        p->key_line[bit] = x->line;
}

static void gpu_key(struct parse_ctx *x, int idx, const char *name, const char *v)
{
    if (strcmp(name, "capacity")) {
        fail(x, x->line, "[gpu %d]: unknown key '%s' (known: capacity)", x->c->gpus[idx].id, name);
        return;
    }
    if (x->c->gpus[idx].capacity) {
        fail(x, x->line, "[gpu %d]: 'capacity' given twice", x->c->gpus[idx].id);
        return;
    }
    if (units_parse_size(v, &x->c->gpus[idx].capacity) < 0 || x->c->gpus[idx].capacity == 0)
        fail(x, x->line, "capacity: '%s' is not a size (e.g. 80G)", v);
}

static void new_project(struct parse_ctx *x, const char *name, int line)
{
    struct tcgpud_config *c = x->c;
    struct tcgpud_project *v;

    if (!valid_name(name, POL_NAME_MAX)) {
        fail(x, line, "[project %s]: a project name is 1..%d characters of [A-Za-z0-9._-]", name,
             POL_NAME_MAX - 1);
        return;
    }
    if (tcgpud_config_project(c, name)) {
        fail(x, line, "[project %s] appears twice", name);
        return;
    }
    if (c->nprojects == TCGPUD_MAX_PROJECTS) {
        fail(x, x->line, "more than %d projects", TCGPUD_MAX_PROJECTS);
        return;
    }
    v = realloc(c->projects, (size_t)(c->nprojects + 1) * sizeof(*v));
    if (!v) {
        fail(x, x->line, "out of memory");
        return;
    }
    c->projects = v;
    memset(&v[c->nprojects], 0, sizeof(*v));
    snprintf(v[c->nprojects].pol.name, POL_NAME_MAX, "%s", name);
    v[c->nprojects].pol.may_borrow = 1;
    v[c->nprojects].line = line;
    x->cur_project = c->nprojects++;
}

static void new_gpu(struct parse_ctx *x, const char *arg, int line)
{
    struct tcgpud_config *c = x->c;
    long id;

    if (parse_int(arg, 0, TCGPUD_MAX_GPUS - 1, &id) < 0) {
        fail(x, line, "[gpu %s]: want a GPU number 0..%d", arg, TCGPUD_MAX_GPUS - 1);
        return;
    }
    for (int i = 0; i < c->ngpus; i++) {
        if (c->gpus[i].id == (int)id) {
            fail(x, line, "[gpu %ld] appears twice", id);
            return;
        }
    }
    c->gpus[c->ngpus].id = (int)id;
    c->gpus[c->ngpus].capacity = 0;
    c->gpus[c->ngpus].line = line;
    x->cur_gpu = c->ngpus++;
}

/* Enter a section: "daemon", "gpu N", "project NAME" (its header was at `line`). */
static void enter_section(struct parse_ctx *x, const char *section, int line)
{
    int errors = x->nerr;

    x->cur_project = -1;
    x->cur_gpu = -1;
    x->entered = 1;
    if (!strcmp(section, "daemon")) {
        if (x->daemon_sections++)
            fail(x, line, "[daemon] appears twice");
        else
            x->daemon_line = line;
    } else if (!strncmp(section, "project ", 8)) {
        new_project(x, skip_space(section + 8), line);
    } else if (!strncmp(section, "gpu ", 4)) {
        new_gpu(x, skip_space(section + 4), line);
    } else {
        fail(x, line, "unknown section [%s] (known: [daemon], [gpu N], [project NAME])", section);
    }
    /* a wrong header's keys would be someone else's: skip them */
    x->section_ok = x->nerr == errors;
}

/* Enter the header read last, if any (also for a section without keys,
 * so that "[gpu 1]" alone is reported as missing its capacity). */
static void enter_pending(struct parse_ctx *x)
{
    if (x->has_pending) {
        x->has_pending = 0;
        enter_section(x, x->pending, x->pending_line);
    }
}

static int on_key(void *user, const char *section, const char *name, const char *value)
{
    struct parse_ctx *x = user;

    (void)section;                /* we take the header's text from the line itself */
    if (!name)
        return 1;
    enter_pending(x);
    if (x->entered && !x->section_ok)
        return 1;                 /* its header was wrong: said once */
    if (!x->entered) {
        fail(x, x->line, "a key before any section ([daemon], [gpu N], [project NAME])");
        return 1;
    }
    if (!value || !*value) {
        fail(x, x->line, "'%s' has no value", name);
        return 1;
    }
    if (x->cur_project >= 0)
        project_key(x, &x->c->projects[x->cur_project], name, value);
    else if (x->cur_gpu >= 0)
        gpu_key(x, x->cur_gpu, name, value);
    else
        daemon_key(x, name, value);
    return 1;
}

/* A "[...]" line: remember its text for the next key (or the next header). */
static void note_header(struct parse_ctx *x, const char *line)
{
    const char *s = skip_space(line);
    const char *end;
    size_t n;

    if (*s != '[' || !(end = strchr(s, ']')))
        return;                   /* inih reports a malformed header itself */
    enter_pending(x);
    s = skip_space(s + 1);
    n = (size_t)(end - s);
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    if (n >= sizeof(x->pending))
        n = sizeof(x->pending) - 1;
    memcpy(x->pending, s, n);
    x->pending[n] = '\0';
    x->pending_line = x->line;
    x->has_pending = 1;
}

/*
 * A line inih would refuse: not blank, not a comment, not an indented
 * continuation, not "[section]", and without "=" or ":". inih reports only
 * the first such line; we report each.
 */
static int malformed(const char *line)
{
    const char *s = skip_space(line);

    if (!*s || *s == ';' || *s == '#' || (line[0] == ' ' || line[0] == '\t'))
        return 0;
    if (*s == '[')
        return !strchr(s, ']');
    return !strpbrk(s, "=:");
}

/* fgets for inih, counting lines, noting section headers, refusing overlong lines. */
static char *read_line(char *str, int num, void *stream)
{
    struct parse_ctx *x = stream;
    char *r = fgets(str, num, x->f);
    size_t n;
    int start = x->at_line_start;

    if (!r)
        return NULL;
    if (start)
        x->line++;
    n = strlen(str);
    x->at_line_start = n > 0 && str[n - 1] == '\n';
    if (!x->at_line_start && !feof(x->f))
        fail(x, x->line, "line longer than %d characters (continue a long members list on "
             "indented lines)", num - 2);
    if (start && malformed(str))
        fail(x, x->line, "not a section header or key = value line");
    if (start)
        note_header(x, str);
    return r;
}

/* ---------------------------------------------------------------------------
 * Whole-file checks
 * ------------------------------------------------------------------------- */

static int key_index(const char *name)
{
    return key_bit(project_keys, name);
}

/* Quotas that contradict each other or the reservation. */
static void check_quotas(struct parse_ctx *x, const struct tcgpud_project *p)
{
    const struct pol_project *q = &p->pol;
    int lend = p->key_line[key_index("lending_limit")];
    int borrow = p->key_line[key_index("borrowing_limit")];

    if (lend && !q->nreserve)
        fail(x, lend, "[project %s]: lending_limit: the project reserves nothing to lend", q->name);
    else if (borrow && !q->may_borrow && q->borrow_bytes)
        fail(x, borrow, "[project %s]: borrowing_limit %llu MiB, but borrow = no", q->name,
             (unsigned long long)(q->borrow_bytes >> 20));
}

static void check_whole(struct parse_ctx *x)
{
    struct tcgpud_config *c = x->c;

    if (c->dashboard && !c->http_host[0])
        fail(x, x->daemon_line, "dashboard = yes needs http = [ADDR:]PORT (where to serve it)");
    for (int i = 0; i < c->ngpus; i++)
        if (!c->gpus[i].capacity)
            fail(x, c->gpus[i].line, "[gpu %d]: capacity is missing", c->gpus[i].id);
    for (int i = 0; i < c->nprojects; i++)
        if (!c->projects[i].nmembers)
            fail(x, c->projects[i].line, "[project %s]: members is missing (users, @groups, or *)",
                 c->projects[i].pol.name);
    for (int i = 0; i < c->nprojects && !x->err[0]; i++)
        check_quotas(x, &c->projects[i]);
    /* Reservations on a GPU of known capacity must fit together. */
    for (int i = 0; i < c->ngpus; i++) {
        if (!c->gpus[i].capacity)
            continue;
        uint64_t sum = 0;
        for (int k = 0; k < c->nprojects; k++)
            sum += pol_project_reserved(&c->projects[k].pol, c->gpus[i].id);
        if (sum > c->gpus[i].capacity)
            fail(x, c->gpus[i].line, "[gpu %d]: the projects reserve %llu MiB, more than its "
                 "capacity of %llu MiB", c->gpus[i].id, (unsigned long long)(sum >> 20),
                 (unsigned long long)(c->gpus[i].capacity >> 20));
    }
}

/* ---------------------------------------------------------------------------
 * API
 * ------------------------------------------------------------------------- */

void tcgpud_config_defaults(struct tcgpud_config *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->socket, sizeof(c->socket), "%s", TCGPUD_DEFAULT_SOCKET);
    snprintf(c->state_file, sizeof(c->state_file), "%s", TCGPUD_DEFAULT_STATE);
    c->min_runtime_ns = TCGPUD_DEFAULT_MIN_RUNTIME_NS;
    c->resume_retry_ns = TCGPUD_DEFAULT_RETRY_NS;
    c->max_connections_per_user = TCGPUD_DEFAULT_CONNS_PER_USER;
    c->max_jobs_per_user = TCGPUD_DEFAULT_JOBS_PER_USER;
    c->backfill = 1;
}

static int parse_file(struct tcgpud_config *c, FILE *f, const char *name, char *err, size_t errlen)
{
    struct parse_ctx x = { .c = c, .name = name, .f = f, .at_line_start = 1, .cur_project = -1,
                           .cur_gpu = -1 };
    int r;

    snprintf(c->path, sizeof(c->path), "%s", name);
    r = ini_parse_stream(read_line, &x, on_key, &x);
    enter_pending(&x);
    if (r > 0 && !x.nerr)
        fail(&x, r, "not a section header or key = value line");
    else if (r < 0)
        fail(&x, x.line, "out of memory");
    check_whole(&x);
    c->nerrors = x.nerr;
    if (x.nerr) {
        snprintf(err, errlen, "%s", x.err);
        return -EINVAL;
    }
    return 0;
}

int tcgpud_config_load(struct tcgpud_config *c, const char *path, char *err, size_t errlen)
{
    FILE *f;
    int r;

    tcgpud_config_defaults(c);
    snprintf(c->path, sizeof(c->path), "%s", path);
    f = fopen(path, "re");
    if (!f) {
        r = -errno;
        snprintf(err, errlen, "%s: %s", path, strerror(-r));
        return r;
    }
    r = parse_file(c, f, path, err, errlen);
    fclose(f);
    return r;
}

int tcgpud_config_parse(struct tcgpud_config *c, const char *text, const char *name, char *err,
                        size_t errlen)
{
    FILE *f;
    int r;

    tcgpud_config_defaults(c);
    f = fmemopen((void *)text, strlen(text), "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", name, strerror(errno));
        return -ENOMEM;
    }
    r = parse_file(c, f, name, err, errlen);
    fclose(f);
    return r;
}

static int user_exists(const char *name)
{
    struct passwd pw, *pwp = NULL;
    char buf[4096];

    return getpwnam_r(name, &pw, buf, sizeof(buf), &pwp) == 0 && pwp;
}

static int group_exists(const char *name)
{
    struct group gr, *grp = NULL;
    char buf[16384];

    return getgrnam_r(name, &gr, buf, sizeof(buf), &grp) == 0 && grp;
}

static void warn(const struct tcgpud_config *c, int line, void (*fn)(const char *, void *), void *arg,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void warn(const struct tcgpud_config *c, int line, void (*fn)(const char *, void *), void *arg,
                 const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    int n = snprintf(msg, sizeof(msg), "%s:%d: warning: ", c->path, line);

    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    va_end(ap);
    fn(msg, arg);
}

int tcgpud_config_warnings(const struct tcgpud_config *c, void (*fn)(const char *msg, void *arg),
                           void *arg)
{
    int n = 0;

    if (c->admins[0] && !group_exists(c->admins)) {
        warn(c, c->admins_line, fn, arg, "admins: no group '%s' on this machine: only root is an admin",
             c->admins);
        n++;
    }
    for (int i = 0; i < c->nprojects; i++) {
        const struct tcgpud_project *p = &c->projects[i];
        for (int k = 0; k < p->nmembers; k++) {
            const struct tcgpud_member *m = &p->members[k];
            if (m->everyone || (m->is_group ? group_exists(m->name) : user_exists(m->name)))
                continue;
            warn(c, m->line, fn, arg, "[project %s]: no %s '%s' on this machine", p->pol.name,
                 m->is_group ? "group" : "user", m->name);
            n++;
        }
    }
    return n;
}

void tcgpud_config_free(struct tcgpud_config *c)
{
    free(c->projects);
    c->projects = NULL;
    c->nprojects = 0;
}

const struct tcgpud_project *tcgpud_config_project(const struct tcgpud_config *c, const char *name)
{
    for (int i = 0; i < c->nprojects; i++)
        if (!strcmp(c->projects[i].pol.name, name))
            return &c->projects[i];
    return NULL;
}

int tcgpud_project_has_member(const struct tcgpud_project *p, const char *user,
                              const char *const *groups, int ngroups)
{
    for (int i = 0; i < p->nmembers; i++) {
        const struct tcgpud_member *m = &p->members[i];
        if (m->everyone)
            return 1;
        if (!m->is_group && user && !strcmp(m->name, user))
            return 1;
        for (int g = 0; m->is_group && g < ngroups; g++)
            if (!strcmp(m->name, groups[g]))
                return 1;
    }
    return 0;
}
