/*
 * metrics.c - what one scheduler achieved on the trace (docs/replay.md,
 * "The metrics"). Goodput and busy are over the arrival window (first to
 * last arrival): the part of the run where demand is what the trace says.
 */
#include <stdlib.h>

#include "sim.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile of v[0..n) (sorted here), nearest rank. */
static double quantile(double *v, size_t n, double q)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof(*v), cmp_double);
    return v[(size_t)(q * (double)(n - 1) + 0.5)];
}

static int cmp_desc(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return x > y ? -1 : x < y;
}

/* The trace's priorities, highest first; beyond RES_MAX_PRIOS the lowest
 * level takes every priority below it. */
static void priorities(const struct trace *tr, struct result *r)
{
    int seen[REPLAY_MAX_PROJECTS + RES_MAX_PRIOS], n = 0;

    for (size_t i = 0; i < tr->n; i++) {
        int p = tr->jobs[i].prio, k;
        for (k = 0; k < n && seen[k] != p; k++)
            ;
        if (k == n && n < (int)(sizeof(seen) / sizeof(seen[0])))
            seen[n++] = p;
    }
    qsort(seen, (size_t)n, sizeof(*seen), cmp_desc);
    r->nprio = n < RES_MAX_PRIOS ? n : RES_MAX_PRIOS;
    for (int k = 0; k < r->nprio; k++)
        r->prio[k] = seen[k];
}

/* Completion p50/p95 of the jobs at priority level k (the last level takes all below). */
static void completion(const struct sim *s, struct result *r, int k, double *buf)
{
    const struct trace *tr = s->tr;
    size_t n = 0;

    for (size_t i = 0; i < tr->n; i++) {
        int p = tr->jobs[i].prio;
        if (s->js[i].refused || (p != r->prio[k] && !(k == r->nprio - 1 && p < r->prio[k])))
            continue;
        buf[n++] = s->js[i].finish - tr->jobs[i].arrival;
    }
    r->jct_p50[k] = quantile(buf, n, 0.50);
    r->jct_p95[k] = quantile(buf, n, 0.95);
}

/* High priority: time to GPU (arrival to first start). A refused job never
 * gets one: it misses the SLO. */
static void high_waits(const struct sim *s, int hi, struct result *r, double *buf)
{
    const struct trace *tr = s->tr;
    size_t n = 0, nhi = 0, met = 0;

    for (size_t i = 0; i < tr->n; i++) {
        if (tr->jobs[i].prio < hi)
            continue;
        nhi++;
        if (s->js[i].refused)
            continue;
        buf[n] = s->js[i].start - tr->jobs[i].arrival;
        met += buf[n] <= s->o->slo_s + EPS;
        n++;
    }
    r->slo_met = nhi ? (double)met / (double)nhi : 1;
    r->hi_wait_p50 = quantile(buf, n, 0.50);
    r->hi_wait_p95 = quantile(buf, n, 0.95);
    r->hi_wait_p99 = quantile(buf, n, 0.99);
}

void metrics_summarise(const struct sim *s, int hi, struct result *r)
{
    const struct trace *tr = s->tr;
    double cap = (double)s->o->gpus * (s->w1 - s->w0);
    double *buf = malloc(tr->n * sizeof(*buf));

    r->sched = s->sd;
    r->window = s->w1 - s->w0;
    r->goodput = cap > 0 ? s->work_int / cap : 0;
    r->busy = cap > 0 ? s->busy_int / cap : 0;
    r->memutil = cap > 0 ? s->mem_int / (cap * (double)s->o->gpu_mem) : 0;
    r->lost_gpuh = s->lost / 3600;
    r->preempt_gpuh = s->overhead / 3600;
    r->peak_host_per_node = s->peak_host;
    r->spilled = s->spilled;
    r->preemptions = s->preemptions;
    r->migrations = s->migrations;
    for (size_t i = 0; i < tr->n; i++) {
        if (s->js[i].refused) {
            r->refused++;
            continue;
        }
        r->finished++;
        if (s->js[i].finish > r->makespan)
            r->makespan = s->js[i].finish;
    }
    priorities(tr, r);
    if (!buf)
        return;
    high_waits(s, hi, r, buf);
    for (int k = 0; k < r->nprio; k++)
        completion(s, r, k, buf);
    free(buf);
}
