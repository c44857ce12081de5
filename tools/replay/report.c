/*
 * report.c - the comparison: one table (or one JSON object), one column per
 * scheduler, and, when the baselines are there, tcgpud against the targets
 * of docs/tcgpud.md ("Replay at scale").
 */
#include <math.h>
#include <string.h>

#include "json/json.h"
#include "replay.h"
#include "common/log.h"

static const struct result *find(const struct result *r, size_t n, enum sched s)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].sched == s)
            return &r[i];
    return NULL;
}

struct row {
    const char *label;
    const char *unit;             /* "%", "s", "" */
    double (*get)(const struct result *);
};

static double g_util(const struct result *r) { return 100 * r->util; }
static double g_alloc(const struct result *r) { return 100 * r->alloc; }
static double g_mem(const struct result *r) { return 100 * r->memutil; }
static double g_jct(const struct result *r) { return r->jct_mean; }
static double g_jct95(const struct result *r) { return r->jct_p95; }
static double g_jcthi(const struct result *r) { return r->jct_hi; }
static double g_wait(const struct result *r) { return r->hi_wait_mean; }
static double g_wait95(const struct result *r) { return r->hi_wait_p95; }
static double g_lost(const struct result *r) { return r->work_lost_gpuh; }
static double g_ppj(const struct result *r) { return r->preempt_per_job; }
static double g_over(const struct result *r) { return r->overhead_gpuh; }
static double g_make(const struct result *r) { return r->makespan; }
static double g_mig(const struct result *r) { return (double)r->migrations; }
static double g_fin(const struct result *r) { return (double)r->finished; }
static double g_rej(const struct result *r) { return (double)r->rejected; }

static const struct row rows[] = {
    { "compute used for work (utilisation)", "%", g_util },
    { "GPUs held by some job", "%", g_alloc },
    { "GPU memory held", "%", g_mem },
    { "job completion time, mean", "s", g_jct },
    { "job completion time, p95", "s", g_jct95 },
    { "job completion time, high priority", "s", g_jcthi },
    { "high-priority wait, mean", "s", g_wait },
    { "high-priority wait, p95", "s", g_wait95 },
    { "work lost (GPU hours)", "h", g_lost },
    { "preemptions per job", "x", g_ppj },
    { "preemption cost (GPU hours)", "h", g_over },
    { "suspended jobs moved to a free GPU", "n", g_mig },
    { "makespan", "s", g_make },
    { "jobs finished", "n", g_fin },
    { "jobs rejected", "n", g_rej },
};

static void cell(double v, const char *unit)
{
    if (!strcmp(unit, "%"))
        printf(" %12.1f%%", v);
    else if (!strcmp(unit, "s"))
        printf(" %11.0f s", v);
    else if (!strcmp(unit, "h"))
        printf(" %13.1f", v);
    else if (!strcmp(unit, "x"))
        printf(" %13.3f", v);
    else
        printf(" %13.0f", v);
}

/* tcgpud against the targets, each line: what, the figure, ok or not. */
enum tfmt { T_RATIO, T_POINTS, T_SECONDS, T_GPUH };

struct target {
    const char *what;
    double value;
    enum tfmt fmt;
    int ok;
};

static void format_target(const struct target *t, char *buf, size_t len)
{
    switch (t->fmt) {
    case T_RATIO: snprintf(buf, len, "%.2fx", t->value); break;
    case T_POINTS: snprintf(buf, len, "%+.1f points", t->value); break;
    case T_SECONDS: snprintf(buf, len, "%.1f s", t->value); break;
    default: snprintf(buf, len, "%.1f GPU h", t->value); break;
    }
}

static size_t targets(const struct result *r, size_t n, struct target *t)
{
    const struct result *tc = find(r, n, SCHED_TCGPUD), *ff = find(r, n, SCHED_FIFO);
    const struct result *st = find(r, n, SCHED_STATIC), *kl = find(r, n, SCHED_KILL);
    size_t k = 0;

    if (!tc)
        return 0;
    if (st)
        t[k++] = (struct target){ "utilisation >= 1.8x static partitioning",
                                  st->util > 0 ? tc->util / st->util : INFINITY, T_RATIO,
                                  st->util > 0 ? tc->util >= 1.8 * st->util : 1 };
    if (ff) {
        t[k++] = (struct target){ "utilisation >= FIFO + 15 points", 100 * (tc->util - ff->util),
                                  T_POINTS, tc->util >= ff->util + 0.15 };
        t[k++] = (struct target){ "mean completion time <= 0.9x FIFO",
                                  ff->jct_mean > 0 ? tc->jct_mean / ff->jct_mean : 0, T_RATIO,
                                  tc->jct_mean <= 0.9 * ff->jct_mean };
    }
    t[k++] = (struct target){ "high-priority p95 wait <= 1 s", tc->hi_wait_p95, T_SECONDS,
                              tc->hi_wait_p95 <= 1.0 };
    if (kl)
        t[k++] = (struct target){ "work lost 0 (kill+requeue loses some)", tc->work_lost_gpuh,
                                  T_GPUH, tc->work_lost_gpuh == 0 && kl->work_lost_gpuh > 0 };
    return k;
}

static void trace_line(const struct trace *t, const struct opts *o, int hi)
{
    size_t nhi = 0, gangs = 0;

    for (size_t i = 0; i < t->n; i++) {
        nhi += t->jobs[i].prio >= hi;
        gangs += t->jobs[i].gpus > 1;
    }
    printf("trace: %zu jobs (%zu high-priority: priority >= %d; %zu on several GPUs) over %.1f days, "
           "%d GPUs x %.0f GiB\n", t->n, nhi, hi, gangs,
           (t->jobs[t->n - 1].arrival - t->jobs[0].arrival) / 86400, o->gpus,
           (double)o->gpu_mem / GiB);
    printf("projects:");
    for (int k = 0; k < t->nproj; k++)
        printf(" %s (priority %d, %d GPUs reserved%s%s)", t->proj[k].name, t->proj[k].priority,
               t->proj[k].reserve_gpus, t->proj[k].cohort[0] ? ", cohort " : "", t->proj[k].cohort);
    printf("\ncosts: suspend %.0f GB/s, resume %.0f GB/s, disk %.1f/%.1f GB/s, host memory %.0f GiB, "
           "fixed %.1f s, requeue %.0f s, restart %.0f s, own checkpoint every %.0f s, "
           "min runtime %.0f s, migrate after %.0f s\n\n", o->suspend_bps / 1e9, o->resume_bps / 1e9,
           o->disk_write_bps / 1e9, o->disk_read_bps / 1e9, o->host_bytes / GiB, o->fixed_s,
           o->requeue_s, o->restart_s, o->app_ckpt_s, (double)o->min_runtime_ns / 1e9, o->migrate_s);
}

void report_table(const struct trace *t, const struct opts *o, int hi, const struct result *r,
                  size_t n)
{
    struct target tg[8];
    size_t nt;

    trace_line(t, o, hi);
    printf("%-38s", "");
    for (size_t i = 0; i < n; i++)
        printf(" %14s", sched_title(r[i].sched));
    printf("\n");
    for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
        printf("%-38s", rows[k].label);
        for (size_t i = 0; i < n; i++)
            cell(rows[k].get(&r[i]), rows[k].unit);
        printf("\n");
    }
    nt = targets(r, n, tg);
    if (nt)
        printf("\ntcgpud against the targets:\n");
    for (size_t k = 0; k < nt; k++) {
        char v[64];
        format_target(&tg[k], v, sizeof(v));
        printf("  %-42s %16s  %s\n", tg[k].what, v, tg[k].ok ? "met" : "NOT MET");
    }
}

static json_t *result_json(const struct result *r)
{
    return json_pack("{sf sf sf sf sf sf sf sf sf sf sf sf sf sI sI sI sI}",
                     "util", r->util, "alloc", r->alloc, "memutil", r->memutil,
                     "jct_mean", r->jct_mean, "jct_p95", r->jct_p95, "jct_hi", r->jct_hi,
                     "hi_wait_mean", r->hi_wait_mean, "hi_wait_p95", r->hi_wait_p95,
                     "work_lost_gpuh", r->work_lost_gpuh, "preempt_per_job", r->preempt_per_job,
                     "overhead_gpuh", r->overhead_gpuh, "makespan", r->makespan,
                     "window", r->window, "preemptions", (json_int_t)r->preemptions,
                     "migrations", (json_int_t)r->migrations, "finished", (json_int_t)r->finished,
                     "rejected", (json_int_t)r->rejected);
}

int report_json(const struct trace *t, const struct opts *o, int hi, const struct result *r,
                size_t n)
{
    struct target tg[8];
    size_t nhi = 0, nt = targets(r, n, tg);
    json_t *v, *list;

    for (size_t i = 0; i < t->n; i++)
        nhi += t->jobs[i].prio >= hi;
    v = json_pack("{sI sI si si sI}", "jobs", (json_int_t)t->n, "high_jobs", (json_int_t)nhi,
                  "high_priority", hi, "gpus", o->gpus, "gpu_mem", (json_int_t)o->gpu_mem);
    list = json_array();
    for (size_t i = 0; v && i < n; i++)
        tc_json_set_new(v, sched_name(r[i].sched), result_json(&r[i]));
    /* an unbounded value (a ratio over nothing) as 1e300, as before: JSON has no inf */
    for (size_t k = 0; list && k < nt; k++)
        json_array_append_new(list, json_pack("{ss sf sb}", "what", tg[k].what, "value",
                                              isfinite(tg[k].value) ? tg[k].value : 1e300,
                                              "met", tg[k].ok));
    if (v && list)
        tc_json_set_new(v, "targets", list);
    else
        json_decref(list);
    if (tc_json_print(v, stdout) < 0) {
        log_err("cannot write the JSON report");
        return -1;
    }
    return 0;
}
