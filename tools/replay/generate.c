/*
 * generate.c - synthetic traces shaped like the published GPU cluster traces
 * (docs/tcgpud.md, "The trace"):
 *
 * - most jobs small, a few large: notebooks and inference servers on a
 *   fraction of one GPU (Alibaba PAI 2020/2023: most tasks ask for less than
 *   a GPU and use far less than they hold), single-GPU training, and a few
 *   multi-GPU gangs of 2, 4 or 8 GPUs that take much of the GPU time
 *   (Philly, Helios);
 * - heavy-tailed durations: log-normal, minutes to days;
 * - diurnal arrivals, each project with its own peak (batch at night);
 * - several projects with reservations, two of them in one cohort.
 *
 * The arrival rate is set so that the offered compute (GPUs x share x
 * duration, summed) is `load` of the cluster's over the trace's span.
 * Deterministic for a seed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "common/log.h"

#define DAY 86400.0

enum kind { K_SMALL, K_TRAIN, K_GANG, K_COUNT };

static const struct gen_project {
    const char *name;
    int priority;
    double gpus;                  /* share of the cluster's GPUs it reserves */
    double jobs;                  /* share of the jobs */
    double mix[K_COUNT];          /* its jobs by kind */
    double peak_h;                /* hour of the day its submissions peak */
    double swing;                 /* how much: the rate goes from 1 - swing to 1 + swing */
    unsigned lend;                /* percent of its reservation it lends */
    unsigned weight;
    const char *cohort;
} projects[] = {
    { "prod", 100, 0.40, 0.15, { 0.80, 0.15, 0.05 }, 14, 0.9, 75, 1, "" },
    { "research", 50, 0.22, 0.35, { 0.55, 0.33, 0.12 }, 16, 0.6, 100, 2, "ml" },
    { "vision", 50, 0.13, 0.15, { 0.50, 0.38, 0.12 }, 10, 0.6, 100, 1, "ml" },
    { "batch", 10, 0.00, 0.35, { 0.40, 0.55, 0.05 }, 2, 0.6, 100, 1, "" },
};
#define NPROJ (sizeof(projects) / sizeof(projects[0]))

static uint64_t rng;

static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}

static double normal(void)
{
    return sqrt(-2 * log(urand())) * cos(2 * M_PI * urand());
}

static double lognormal(double median, double sigma)
{
    return median * exp(sigma * normal());
}

static double log_uniform(double lo, double hi)
{
    return lo * exp(urand() * log(hi / lo));
}

static int pick(const double *w, int n)
{
    double u = urand(), s = 0;

    for (int i = 0; i < n; i++)
        if (u < (s += w[i]))
            return i;
    return n - 1;
}

/* One job of a kind: its GPUs, share, memory and duration. */
static void draw_job(enum kind k, double gpu_gib, struct rjob *j)
{
    static const double shares_small[] = { 5, 10, 15, 20, 25, 30 };
    static const double shares_train[] = { 30, 50, 70, 90, 100 };
    static const double gangs_w[] = { 0.5, 0.3, 0.2 };
    static const int gangs[] = { 2, 4, 8 };

    switch (k) {
    case K_SMALL:
        j->gpus = 1;
        j->compute = (unsigned)shares_small[(int)(urand() * 6) % 6] * 10;
        j->mem = log_uniform(2, 24);
        j->dur = lognormal(7200, 1.3);
        break;
    case K_TRAIN:
        j->gpus = 1;
        j->compute = (unsigned)shares_train[(int)(urand() * 5) % 5] * 10;
        j->mem = log_uniform(12, gpu_gib);
        j->dur = lognormal(5400, 1.2);
        break;
    default:
        j->gpus = gangs[pick(gangs_w, 3)];
        j->compute = 800 + 100 * (unsigned)(urand() * 3);
        j->mem = log_uniform(40, gpu_gib);
        j->dur = lognormal(10800, 1.0);
        break;
    }
    if (j->mem > gpu_gib)
        j->mem = gpu_gib;
    j->mem = round(j->mem) < 1 ? 1 : round(j->mem);
    j->dur = round(j->dur < 60 ? 60 : j->dur > 3 * DAY ? 3 * DAY : j->dur);
}

/* An arrival time in [0, span) for a project: the diurnal rate
 * 1 + swing sin(...), peaking at peak_h, sampled by rejection. */
static double arrival(double span, const struct gen_project *p)
{
    for (;;) {
        double t = urand() * span, phase = t / DAY - p->peak_h / 24.0 + 0.25;
        if (urand() * (1 + p->swing) < 1 + p->swing * sin(2 * M_PI * phase))
            return t;
    }
}

static int cmp_arrival(const void *a, const void *b)
{
    const struct rjob *x = a, *y = b;
    return x->arrival < y->arrival ? -1 : x->arrival > y->arrival;
}

static void print_projects(FILE *f, int gpus)
{
    for (size_t i = 0; i < NPROJ; i++) {
        const struct gen_project *p = &projects[i];
        fprintf(f, "#project name=%s priority=%d reserve_gpus=%d lend=%u weight=%u%s%s\n", p->name,
                p->priority, (int)(p->gpus * gpus + 0.5), p->lend, p->weight,
                p->cohort[0] ? " cohort=" : "", p->cohort);
    }
}

int generate_trace(FILE *f, const struct gen_opts *g)
{
    double gpu_gib = (double)g->gpu_mem / GiB, work = 0, span;
    struct rjob *jobs = calloc(g->jobs, sizeof(*jobs));
    double pw[NPROJ];

    if (!jobs) {
        log_err("out of memory");
        return 1;
    }
    if (gpu_gib < 24) {
        log_err("--gpu-mem must be at least 24G for the generated jobs");
        free(jobs);
        return 1;
    }
    rng = g->seed * 2654435761u + 1;
    for (size_t i = 0; i < NPROJ; i++)
        pw[i] = projects[i].jobs;
    for (size_t i = 0; i < g->jobs; i++) {
        int p = pick(pw, NPROJ);
        draw_job((enum kind)pick(projects[p].mix, K_COUNT), gpu_gib, &jobs[i]);
        if (jobs[i].gpus > g->gpus)
            jobs[i].gpus = g->gpus;
        jobs[i].project = p;
        jobs[i].prio = projects[p].priority;
        work += jobs[i].gpus * (jobs[i].compute / 1000.0) * jobs[i].dur;
    }
    /* the span over which that work is `load` of the cluster's compute */
    span = work / (g->load * g->gpus);
    for (size_t i = 0; i < g->jobs; i++)
        jobs[i].arrival = round(arrival(span, &projects[jobs[i].project]) * 10) / 10;
    qsort(jobs, g->jobs, sizeof(*jobs), cmp_arrival);
    fprintf(f, "# tcgpu-replay --generate --jobs %zu --gpus %d --gpu-mem %.0fG --load %.2f --seed %llu\n",
            g->jobs, g->gpus, gpu_gib, g->load, (unsigned long long)g->seed);
    fprintf(f, "# %.1f days; offered compute %.2f of the cluster's\n", span / DAY,
            work / (span * g->gpus));
    print_projects(f, g->gpus);
    fprintf(f, "arrival_s,project,priority,mem_gib,duration_s,gpus,compute_pct\n");
    for (size_t i = 0; i < g->jobs; i++) {
        const struct rjob *j = &jobs[i];
        fprintf(f, "%.1f,%s,%d,%.0f,%.0f,%d,%u\n", j->arrival, projects[j->project].name, j->prio,
                j->mem, j->dur, j->gpus, j->compute / 10);
    }
    free(jobs);
    return 0;
}
