/*
 * trace.c - the replay's trace file.
 *
 *   # anything                       a comment
 *   #project name=prod priority=100 reserve_gpus=16 [lend=50%] [weight=2] [cohort=ml]
 *   arrival_s,project,priority,mem_gib,duration_s[,gpus,compute_pct]
 *   12.5,prod,100,20,3600,1,30
 *
 * Projects named only by jobs have no reservation. Reserved GPU ranges are
 * given out in the order of the #project lines, from GPU 0. A trace of the
 * first five columns only is one GPU per job, all of the GPU's compute.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "common/log.h"

#define LINE_MAX_LEN 1024

static int find_project(const struct trace *t, const char *name)
{
    for (int i = 0; i < t->nproj; i++)
        if (!strcmp(t->proj[i].name, name))
            return i;
    return -1;
}

static int add_project(struct trace *t, const char *name, const char *path, int lineno)
{
    if (strlen(name) >= POL_NAME_MAX || !name[0]) {
        log_err("%s:%d: bad project name '%s'", path, lineno, name);
        return -1;
    }
    if (t->nproj == REPLAY_MAX_PROJECTS) {
        log_err("%s:%d: more than %d projects", path, lineno,
                REPLAY_MAX_PROJECTS);
        return -1;
    }
    struct rproject *p = &t->proj[t->nproj];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->lend_pct = 100;
    p->weight = 1;
    return t->nproj++;
}

static int parse_uint(const char *s, long lo, long hi, long *out)
{
    char *end;

    errno = 0;
    *out = strtol(s, &end, 10);
    return errno || end == s || (*end && strcmp(end, "%")) || *out < lo || *out > hi ? -1 : 0;
}

/* One "#project key=value ..." line. */
static int parse_project(struct trace *t, char *line, const char *path, int lineno)
{
    char *save = NULL, *tok;
    struct rproject p = { .lend_pct = 100, .weight = 1 };
    long v;

    for (tok = strtok_r(line + 8, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
        char *eq = strchr(tok, '=');
        int bad = !eq;
        if (eq) {
            *eq++ = '\0';
            if (!strcmp(tok, "name") && strlen(eq) < POL_NAME_MAX && *eq)
                snprintf(p.name, sizeof(p.name), "%s", eq);
            else if (!strcmp(tok, "priority") && parse_uint(eq, -1000000, 1000000, &v) == 0)
                p.priority = (int)v;
            else if (!strcmp(tok, "reserve_gpus") && parse_uint(eq, 0, POL_MAX_DEVICES, &v) == 0)
                p.reserve_gpus = (int)v;
            else if (!strcmp(tok, "lend") && parse_uint(eq, 0, 100, &v) == 0)
                p.lend_pct = (unsigned)v;
            else if (!strcmp(tok, "weight") && parse_uint(eq, 1, 1000, &v) == 0)
                p.weight = (unsigned)v;
            else if (!strcmp(tok, "cohort") && strlen(eq) < POL_NAME_MAX)
                snprintf(p.cohort, sizeof(p.cohort), "%s", eq);
            else
                bad = 1;
        }
        if (bad) {
            log_err("%s:%d: bad #project field '%s' (name=, priority=, "
                    "reserve_gpus=, lend=PCT, weight=, cohort=)", path, lineno, tok);
            return -1;
        }
    }
    if (p.reserve_gpus > POL_MAX_RESERVE) {
        /* the policy holds a reservation on at most POL_MAX_RESERVE GPUs (as
         * one tcgpud does): refused, never cut short */
        log_err("%s:%d: project %s reserves %d GPUs, the policy at most %d: split it into "
                "projects of %d or fewer", path, lineno, p.name, p.reserve_gpus, POL_MAX_RESERVE,
                POL_MAX_RESERVE);
        return -1;
    }
    if (!p.name[0] || find_project(t, p.name) >= 0) {
        log_err("%s:%d: #project needs a new name=", path, lineno);
        return -1;
    }
    int k = add_project(t, p.name, path, lineno);
    if (k < 0)
        return -1;
    p.first_gpu = t->reserved_gpus;
    t->reserved_gpus += p.reserve_gpus;
    t->proj[k] = p;
    return 0;
}

static int parse_row(struct trace *t, char *line, int nfields, const char *path, int lineno,
                     struct rjob *j)
{
    char *f[8], *save = NULL, *e[7];
    int n = 0;
    long gpus = 1, pct = 100;

    for (char *s = strtok_r(line, ",\n\r", &save); s && n < 8; s = strtok_r(NULL, ",\n\r", &save))
        f[n++] = s;
    if (n != nfields) {
        log_err("%s:%d: want %d fields, got %d", path, lineno, nfields, n);
        return -1;
    }
    j->arrival = strtod(f[0], &e[0]);
    j->prio = (int)strtol(f[2], &e[2], 10);
    j->mem = strtod(f[3], &e[3]) * GiB;
    j->dur = strtod(f[4], &e[4]);
    int bad = *e[0] || *e[2] || *e[3] || *e[4] || !(j->arrival >= 0) || !(j->mem > 0) ||
              !(j->dur > 0) || j->arrival > 1e12 || j->dur > 1e12;
    if (nfields == 7)
        bad |= parse_uint(f[5], 1, REPLAY_MAX_GANG, &gpus) < 0 || parse_uint(f[6], 1, 100, &pct) < 0;
    if (bad || strlen(f[1]) >= POL_NAME_MAX || !f[1][0]) {
        log_err("%s:%d: bad value in '%s,%s,%s,%s,%s%s'", path, lineno, f[0],
                f[1], f[2], f[3], f[4], nfields == 7 ? ",..." : "");
        return -1;
    }
    j->gpus = (int)gpus;
    j->compute = (unsigned)pct * 10;
    j->project = find_project(t, f[1]);
    if (j->project < 0 && (j->project = add_project(t, f[1], path, lineno)) >= 0)
        t->proj[j->project].priority = j->prio;
    return j->project < 0 ? -1 : 0;
}

static int cmp_arrival(const void *a, const void *b)
{
    const struct rjob *x = a, *y = b;
    return x->arrival < y->arrival ? -1 : x->arrival > y->arrival;
}

static int read_header(const char *line, const char *path, int lineno)
{
    static const char base[] = "arrival_s,project,priority,mem_gib,duration_s";
    size_t n = strlen(base);

    if (strncmp(line, base, n) == 0 && strspn(line + n, "\r\n") == strlen(line + n))
        return 5;
    if (strncmp(line, base, n) == 0 && strncmp(line + n, ",gpus,compute_pct", 17) == 0 &&
        strspn(line + n + 17, "\r\n") == strlen(line + n + 17))
        return 7;
    log_err("%s:%d: want the header %s[,gpus,compute_pct]", path, lineno,
            base);
    return -1;
}

int trace_load(const char *path, struct trace *t)
{
    FILE *f = fopen(path, "re");
    char line[LINE_MAX_LEN];
    size_t cap = 0;
    int lineno = 0, nfields = 0;

    memset(t, 0, sizeof(*t));
    if (!f) {
        log_err("%s: %s", path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            log_err("%s:%d: line too long", path, lineno);
            goto err;
        }
        if (!strncmp(line, "#project ", 9)) {
            if (nfields || parse_project(t, line, path, lineno) < 0) {
                if (nfields)
                    log_err("%s:%d: #project after the header", path, lineno);
                goto err;
            }
            continue;
        }
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (!nfields) {
            if ((nfields = read_header(line, path, lineno)) < 0)
                goto err;
            continue;
        }
        if (t->n == cap) {
            cap = cap ? cap * 2 : 1024;
            struct rjob *w = realloc(t->jobs, cap * sizeof(*w));
            if (!w)
                goto err;
            t->jobs = w;
        }
        memset(&t->jobs[t->n], 0, sizeof(t->jobs[t->n]));
        if (parse_row(t, line, nfields, path, lineno, &t->jobs[t->n]) < 0)
            goto err;
        t->n++;
    }
    fclose(f);
    if (!t->n) {
        log_err("%s: no jobs", path);
        trace_free(t);
        return -1;
    }
    qsort(t->jobs, t->n, sizeof(*t->jobs), cmp_arrival);
    return 0;
err:
    fclose(f);
    trace_free(t);
    return -1;
}

void trace_free(struct trace *t)
{
    free(t->jobs);
    t->jobs = NULL;
    t->n = 0;
}

int trace_high_priority(const struct trace *t, int given)
{
    int hi = given;

    for (size_t i = 0; i < t->n && given < 0; i++)
        if (t->jobs[i].prio > hi)
            hi = t->jobs[i].prio;
    return hi;
}

void trace_load_offered(const struct trace *t, int gpus, double *whole, double *compute)
{
    double span = t->jobs[t->n - 1].arrival - t->jobs[0].arrival, w = 0, c = 0;

    for (size_t i = 0; i < t->n; i++) {
        w += t->jobs[i].gpus * t->jobs[i].dur;
        c += t->jobs[i].gpus * (t->jobs[i].compute / 1000.0) * t->jobs[i].dur;
    }
    span = span > 0 ? span * gpus : 1;
    *whole = w / span;
    *compute = c / span;
}
