/*
 * report.c - the comparison: one row per scheduler (its two axes, whether
 * it ships, what it achieved), completion per priority, and which
 * schedulers meet the SLO at what goodput; or all of it as one JSON object
 * (docs/replay.md, "JSON").
 */
#include <math.h>
#include <string.h>

#include "json/json.h"
#include "replay.h"
#include "common/log.h"

static size_t high_jobs(const struct trace *t, int hi)
{
    size_t n = 0;

    for (size_t i = 0; i < t->n; i++)
        n += t->jobs[i].prio >= hi;
    return n;
}

static void trace_line(const struct trace *t, const struct opts *o, int hi)
{
    double whole, compute;

    trace_load_offered(t, o->gpus, &whole, &compute);
    printf("trace: %zu jobs (%zu high-priority: priority >= %d) over %.1f days, %d GPUs x %.0f GiB, "
           "%d GPUs a node\n", t->n, high_jobs(t, hi), hi,
           (t->jobs[t->n - 1].arrival - t->jobs[0].arrival) / 86400, o->gpus,
           (double)o->gpu_mem / GiB, o->gpus_per_node);
    printf("offered load: whole-GPU demand %.2f, compute demand %.2f of the cluster's\n", whole, compute);
    printf("projects:");
    for (int k = 0; k < t->nproj; k++)
        printf(" %s (priority %d, %d GPUs reserved%s%s)", t->proj[k].name, t->proj[k].priority,
               t->proj[k].reserve_gpus, t->proj[k].cohort[0] ? ", cohort " : "", t->proj[k].cohort);
    printf("\ncosts: suspend %.0f GB/s, resume %.0f GB/s, disk %.1f/%.1f GB/s, host memory of a job "
           "%.0f GiB, for suspended jobs %.0f GiB a node, fixed %.1f s, requeue %.0f s, restart %.0f s, "
           "own checkpoint every %.0f s, min runtime %.0f s, migrate after %.0f s, interference %.0f%%\n",
           o->suspend_bps / 1e9, o->resume_bps / 1e9, o->disk_write_bps / 1e9, o->disk_read_bps / 1e9,
           o->host_bytes / GiB, o->node_host_bytes / GiB, o->fixed_s, o->requeue_s, o->restart_s,
           o->app_ckpt_s, (double)o->min_runtime_ns / 1e9, o->migrate_s, 100 * o->interference);
    printf("SLO: a high-priority job on a GPU within %.0f s; met when %.0f%% of them are\n\n", o->slo_s,
           100 * o->slo_share);
}

static void main_table(const struct result *r, size_t n)
{
    printf("%-17s %-6s %-15s %-14s %-8s %7s %6s %9s %9s %8s %8s %8s %6s %10s %7s %7s\n",
           "scheduler", "place", "preemption", "victims", "shipped", "goodput", "busy", "lost GPUh",
           "cost GPUh", "hi p50", "hi p95", "hi p99", "SLO", "host/node", "spilled", "refused");
    for (size_t i = 0; i < n; i++) {
        const struct result *x = &r[i];
        printf("%-17s %-6s %-15s %-14s %-8s %6.1f%% %5.1f%% %9.1f %9.1f %7.0fs %7.0fs %7.0fs %5.1f%% "
               "%6.0f GiB %7lu %7lu\n", x->sched->name, placement_name(x->sched->placement),
               preempt_name(x->sched->preempt), victims_name(x->sched),
               x->sched->shipped ? "shipped" : "modelled",
               100 * x->goodput, 100 * x->busy, x->lost_gpuh, x->preempt_gpuh, x->hi_wait_p50,
               x->hi_wait_p95, x->hi_wait_p99, 100 * x->slo_met, x->peak_host_per_node / GiB,
               x->spilled, x->refused);
    }
}

static void completion_table(const struct result *r, size_t n)
{
    if (!n)
        return;
    printf("\ncompletion (arrival to end), p50 / p95, by priority:\n%-17s", "scheduler");
    for (int k = 0; k < r[0].nprio; k++)
        printf("  %21d", r[0].prio[k]);
    printf("\n");
    for (size_t i = 0; i < n; i++) {
        printf("%-17s", r[i].sched->name);
        for (int k = 0; k < r[i].nprio; k++)
            printf("  %9.0fs / %8.0fs", r[i].jct_p50[k], r[i].jct_p95[k]);
        printf("\n");
    }
}

/* Which schedulers meet the SLO, and the best goodput without preemption
 * against the best with it. */
static void verdict(const struct opts *o, const struct result *r, size_t n)
{
    const struct result *best_none = NULL, *best_pre = NULL;

    printf("\nmeet the SLO:");
    for (size_t i = 0; i < n; i++) {
        int meets = r[i].slo_met >= o->slo_share;
        const struct result **best = r[i].sched->preempt == PR_NONE ? &best_none : &best_pre;
        if (meets)
            printf(" %s (goodput %.1f%%, %.1f GPU h lost)", r[i].sched->name, 100 * r[i].goodput,
                   r[i].lost_gpuh);
        if (!*best || r[i].goodput > (*best)->goodput)
            *best = &r[i];
    }
    printf("\n");
    if (best_none && best_pre)
        printf("best goodput without preemption: %s %.1f%% (SLO %.1f%%); with preemption: %s %.1f%% "
               "(SLO %.1f%%, %.1f GPU h lost)\n", best_none->sched->name, 100 * best_none->goodput,
               100 * best_none->slo_met, best_pre->sched->name, 100 * best_pre->goodput,
               100 * best_pre->slo_met, best_pre->lost_gpuh);
}

void report_table(const struct trace *t, const struct opts *o, int hi, const struct result *r,
                  size_t n)
{
    trace_line(t, o, hi);
    main_table(r, n);
    completion_table(r, n);
    verdict(o, r, n);
}

static json_t *completion_json(const struct result *r)
{
    json_t *a = json_array();

    for (int k = 0; a && k < r->nprio; k++)
        json_array_append_new(a, json_pack("{si sf sf}", "priority", r->prio[k], "p50_s",
                                           r->jct_p50[k], "p95_s", r->jct_p95[k]));
    return a;
}

static json_t *result_json(const struct result *r)
{
    json_t *v = json_pack("{ss ss ss ss ss sb sf sf sf sf sf sf sf sf sf sf sf}",
                          "name", r->sched->name, "title", r->sched->title,
                          "placement", placement_name(r->sched->placement),
                          "preemption", preempt_name(r->sched->preempt),
                          "victims", victims_name(r->sched), "shipped", r->sched->shipped,
                          "goodput", r->goodput, "busy", r->busy, "memutil", r->memutil,
                          "lost_gpu_hours", r->lost_gpuh, "preempt_gpu_hours", r->preempt_gpuh,
                          "hi_wait_p50_s", r->hi_wait_p50, "hi_wait_p95_s", r->hi_wait_p95,
                          "hi_wait_p99_s", r->hi_wait_p99, "slo_met", r->slo_met,
                          "peak_suspended_host_bytes_per_node", r->peak_host_per_node,
                          "makespan_s", r->makespan);

    if (v && tc_json_set_new(v, "completion", completion_json(r)) == 0 &&
        tc_json_set_uint(v, "spilled", r->spilled) == 0 &&
        tc_json_set_uint(v, "migrations", r->migrations) == 0 &&
        tc_json_set_uint(v, "preemptions", r->preemptions) == 0 &&
        tc_json_set_uint(v, "finished", r->finished) == 0 &&
        tc_json_set_uint(v, "refused", r->refused) == 0)
        return v;
    json_decref(v);
    return NULL;
}

static json_t *costs_json(const struct opts *o)
{
    return json_pack("{sf sf sf sf sf sf sf sf sf sf sf sf sf}",
                     "suspend_gbps", o->suspend_bps / 1e9, "resume_gbps", o->resume_bps / 1e9,
                     "disk_write_gbps", o->disk_write_bps / 1e9, "disk_read_gbps", o->disk_read_bps / 1e9,
                     "host_mem", o->host_bytes, "node_host_mem", o->node_host_bytes,
                     "fixed_s", o->fixed_s, "requeue_s", o->requeue_s, "restart_s", o->restart_s,
                     "app_ckpt_s", o->app_ckpt_s, "migrate_after_s", o->migrate_s,
                     "interference", o->interference, "min_runtime_s", (double)o->min_runtime_ns / 1e9);
}

int report_json(const struct trace *t, const struct opts *o, int hi, const struct result *r,
                size_t n)
{
    double whole, compute;
    json_t *v, *list = json_array();

    trace_load_offered(t, o->gpus, &whole, &compute);
    v = json_pack("{sI sI si si si sI sf sf sf sf}", "jobs", (json_int_t)t->n, "high_jobs",
                  (json_int_t)high_jobs(t, hi), "high_priority", hi, "gpus", o->gpus, "gpus_per_node",
                  o->gpus_per_node, "gpu_mem", (json_int_t)o->gpu_mem, "load_whole", whole,
                  "load_compute", compute, "slo_s", o->slo_s, "slo_share", o->slo_share);
    for (size_t i = 0; list && i < n; i++)
        json_array_append_new(list, result_json(&r[i]));
    if (v && tc_json_set_new(v, "costs", costs_json(o)) == 0)
        tc_json_set_new(v, "schedulers", list);
    else
        json_decref(list);
    if (tc_json_print(v, stdout) < 0) {
        log_err("cannot write the JSON report");
        return -1;
    }
    return 0;
}
