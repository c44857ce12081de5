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
 * The arrival rate is set so that the offered demand is `load` of the
 * cluster's over the trace's span: in whole GPUs (GPUs x duration, what a
 * scheduler that gives whole GPUs must serve), or with --compute-load in
 * compute (GPUs x share x duration, what one that packs by share must).
 * Both are printed in the trace's header. Deterministic for a seed.
 *
 * Scenarios (docs/replay.md, "Scenarios") set the load and the shape:
 *   under       whole-GPU demand 0.5 of the cluster;
 *   enterprise  whole-GPU demand 0.9; prod's high-priority jobs come in
 *               bursts (20 minutes every 4 hours) onto the reservation it
 *               sized for them; a standing backlog of long, low-priority
 *               batch jobs (a tenth of the jobs, a day each, all in the
 *               first twentieth of the span) keeps every idle GPU wanted;
 *   overload    whole-GPU demand 1.3.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "common/log.h"

#define DAY 86400.0
#define BURST_EVERY (4 * 3600.0)
#define BURST_LEN (20 * 60.0)
#define BACKLOG_SHARE 0.10

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

/* enterprise: the high-priority department's jobs in bursts. */
static double bursty(double t, double span)
{
    t = floor(t / BURST_EVERY) * BURST_EVERY + urand() * BURST_LEN;
    return t < span ? t : span * urand();
}

/* enterprise: a long low-priority job of the standing backlog. */
static void backlog_job(double gpu_gib, struct rjob *j)
{
    j->gpus = 1;
    j->compute = 1000;
    j->mem = round(log_uniform(20, gpu_gib));
    j->dur = round(lognormal(DAY, 0.4));
}

int scenario_parse(const char *name, struct gen_opts *g)
{
    static const struct { const char *name; enum scenario sc; double load; } sc[] = {
        { "under", SC_UNDER, 0.5 }, { "enterprise", SC_ENTERPRISE, 0.9 }, { "overload", SC_OVERLOAD, 1.3 },
    };

    for (size_t i = 0; i < sizeof(sc) / sizeof(sc[0]); i++)
        if (!strcmp(name, sc[i].name)) {
            g->scenario = sc[i].sc;
            g->load = sc[i].load;
            g->load_compute = 0;
            return 0;
        }
    return -1;
}

static const char *scenario_name(enum scenario sc)
{
    static const char *const n[] = { "", "under", "enterprise", "overload" };
    return n[sc];
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

/* Draw the jobs (no arrival yet): their demand in whole GPUs and in compute. */
static void draw_jobs(const struct gen_opts *g, struct rjob *jobs, double *whole, double *compute)
{
    double gpu_gib = (double)g->gpu_mem / GiB, pw[NPROJ];
    size_t backlog = g->scenario == SC_ENTERPRISE ? (size_t)(BACKLOG_SHARE * (double)g->jobs) : 0;

    for (size_t i = 0; i < NPROJ; i++)
        pw[i] = projects[i].jobs;
    *whole = *compute = 0;
    for (size_t i = 0; i < g->jobs; i++) {
        int p = i < backlog ? (int)NPROJ - 1 : pick(pw, NPROJ);
        if (i < backlog)
            backlog_job(gpu_gib, &jobs[i]);
        else
            draw_job((enum kind)pick(projects[p].mix, K_COUNT), gpu_gib, &jobs[i]);
        if (jobs[i].gpus > g->gpus)
            jobs[i].gpus = g->gpus;
        jobs[i].project = p;
        jobs[i].prio = projects[p].priority;
        *whole += jobs[i].gpus * jobs[i].dur;
        *compute += jobs[i].gpus * (jobs[i].compute / 1000.0) * jobs[i].dur;
    }
}

static void place_arrivals(const struct gen_opts *g, struct rjob *jobs, double span)
{
    size_t backlog = g->scenario == SC_ENTERPRISE ? (size_t)(BACKLOG_SHARE * (double)g->jobs) : 0;

    for (size_t i = 0; i < g->jobs; i++) {
        const struct gen_project *p = &projects[jobs[i].project];
        double t = i < backlog ? urand() * span / 20 : arrival(span, p);
        if (g->scenario == SC_ENTERPRISE && i >= backlog && p->priority == projects[0].priority)
            t = bursty(t, span);
        jobs[i].arrival = round(t * 10) / 10;
    }
}

/* A reservation larger than the policy holds is refused, never cut. */
static int check_reservations(int gpus)
{
    for (size_t i = 0; i < NPROJ; i++)
        if ((int)(projects[i].gpus * gpus + 0.5) > POL_MAX_RESERVE) {
            log_err("%s would reserve %d GPUs of %d, the policy at most %d: use --gpus %d or fewer",
                    projects[i].name, (int)(projects[i].gpus * gpus + 0.5), gpus, POL_MAX_RESERVE,
                    (int)(POL_MAX_RESERVE / projects[i].gpus));
            return -1;
        }
    return 0;
}

static void print_header(FILE *f, const struct gen_opts *g, double span, double whole, double compute)
{
    fprintf(f, "# tcgpu-replay --generate --jobs %zu --gpus %d --gpu-mem %.0fG", g->jobs, g->gpus,
            (double)g->gpu_mem / GiB);
    if (g->scenario)
        fprintf(f, " --scenario %s", scenario_name(g->scenario));
    else
        fprintf(f, " %s %.2f", g->load_compute ? "--compute-load" : "--load", g->load);
    fprintf(f, " --seed %llu\n", (unsigned long long)g->seed);
    fprintf(f, "# %.1f days; offered whole-GPU demand %.2f, compute demand %.2f of the cluster's\n",
            span / DAY, whole / (span * g->gpus), compute / (span * g->gpus));
}

int generate_trace(FILE *f, const struct gen_opts *g)
{
    struct rjob *jobs = calloc(g->jobs, sizeof(*jobs));
    double whole, compute, span;

    if (!jobs) {
        log_err("out of memory");
        return 1;
    }
    if ((double)g->gpu_mem / GiB < 24 || check_reservations(g->gpus) < 0) {
        if ((double)g->gpu_mem / GiB < 24)
            log_err("--gpu-mem must be at least 24G for the generated jobs");
        free(jobs);
        return 1;
    }
    rng = g->seed * 2654435761u + 1;
    draw_jobs(g, jobs, &whole, &compute);
    /* the span over which that demand is `load` of the cluster's */
    span = (g->load_compute ? compute : whole) / (g->load * g->gpus);
    place_arrivals(g, jobs, span);
    qsort(jobs, g->jobs, sizeof(*jobs), cmp_arrival);
    print_header(f, g, span, whole, compute);
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
