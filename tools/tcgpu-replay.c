/*
 * tcgpu-replay - tcgpud's policy (lib/policy/policy.c) at scale, by simulation.
 *
 *   tcgpu-replay TRACE.csv [--gpus N] [--gpu-mem SIZE] [--min-runtime DUR]
 *                [--swap-gbps X] [--high-priority P] [--check] [--json]
 *   tcgpu-replay --generate [--jobs N] [--gpus N] [--gpu-mem SIZE] [--load L] [--seed S]
 *
 * Replays a job trace (CSV: arrival_s,project,priority,mem_gib,duration_s)
 * twice on a simulated cluster of N GPUs: once through the policy tcgpud
 * runs (priorities, preemption by suspend, automatic resume), once through a
 * FIFO without preemption (the policy module with no_preemption and fifo
 * set), and reports GPU utilisation, high-priority queueing delay, job
 * completion times and preemptions side by side.
 *
 * The model: a job needs mem_gib on one GPU for duration_s of running time.
 * A suspension or a resumption takes mem / swap bandwidth (the job does not
 * progress meanwhile) and loses no work, as with tcgpu. Placement of a new
 * job: best fit; preemption, when the policy allows it, on the GPU with the
 * most free memory where enough victims exist. All projects may borrow;
 * reservations are not modelled here (the unit tests cover them).
 *
 * --generate writes a synthetic trace: Poisson arrivals at the rate that
 * makes the offered memory load L (default 0.9) of the cluster, three
 * projects (prod 15% at priority 100, research 35% at 50, batch 50% at 10),
 * memory of 10/20/40/80 GiB, log-normal durations around 30 minutes.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "common/units.h"
#include "json/json.h"
#include "tcgpu.h"

#define GiB (1024.0 * 1024.0 * 1024.0)
#define EPS 1e-9

struct rjob {
    double arrival, dur, mem;     /* s, s, bytes */
    char project[POL_NAME_MAX];
    int prio;
    /* simulation */
    double remaining, ran, start, finish, op_done;
    int running, op, done, rejected;
    unsigned preempted;
};

struct opts {
    int gpus;
    uint64_t gpu_mem;
    uint64_t min_runtime_ns;
    double swap_bps;
    int high_prio;                /* -1: the highest in the trace */
    int check, json;
};

struct result {
    const char *name;
    double busy, memutil, makespan;
    double hi_wait_mean, hi_wait_p95, jct_all, jct_hi, jct_lo;
    unsigned long preemptions, rejected, finished;
    double work_lost;             /* run time beyond each job's duration, summed (must be 0) */
};

/* ---------------------------------------------------------------------------
 * Trace
 * ------------------------------------------------------------------------- */

static int parse_row(char *line, int lineno, const char *path, struct rjob *j)
{
    char *f[6], *save = NULL;
    int n = 0;

    for (char *t = strtok_r(line, ",\n\r", &save); t && n < 6; t = strtok_r(NULL, ",\n\r", &save))
        f[n++] = t;
    if (n != 5) {
        fprintf(stderr, "tcgpu-replay: %s:%d: want 5 fields (arrival_s,project,priority,mem_gib,"
                "duration_s), got %d\n", path, lineno, n);
        return -1;
    }
    char *e1, *e2, *e3, *e4;
    j->arrival = strtod(f[0], &e1);
    j->prio = (int)strtol(f[2], &e2, 10);
    j->mem = strtod(f[3], &e3) * GiB;
    j->dur = strtod(f[4], &e4);
    if (*e1 || *e2 || *e3 || *e4 || !(j->arrival >= 0) || !(j->mem > 0) || !(j->dur > 0) ||
        strlen(f[1]) >= POL_NAME_MAX || !f[1][0]) {
        fprintf(stderr, "tcgpu-replay: %s:%d: bad value in '%s,%s,%s,%s,%s'\n", path, lineno, f[0],
                f[1], f[2], f[3], f[4]);
        return -1;
    }
    snprintf(j->project, sizeof(j->project), "%s", f[1]);
    return 0;
}

static int cmp_arrival(const void *a, const void *b)
{
    const struct rjob *x = a, *y = b;
    return x->arrival < y->arrival ? -1 : x->arrival > y->arrival;
}

static struct rjob *load_trace(const char *path, size_t *n)
{
    FILE *f = fopen(path, "re");
    char line[1024];
    struct rjob *v = NULL;
    size_t cap = 0;
    int lineno = 0, header = 0;

    *n = 0;
    if (!f) {
        fprintf(stderr, "tcgpu-replay: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (!header) {
            if (strncmp(line, "arrival_s,project,priority,mem_gib,duration_s", 45)) {
                fprintf(stderr, "tcgpu-replay: %s:%d: want the header "
                        "arrival_s,project,priority,mem_gib,duration_s\n", path, lineno);
                goto err;
            }
            header = 1;
            continue;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 1024;
            struct rjob *w = realloc(v, cap * sizeof(*w));
            if (!w)
                goto err;
            v = w;
        }
        memset(&v[*n], 0, sizeof(v[*n]));
        if (parse_row(line, lineno, path, &v[*n]) < 0)
            goto err;
        (*n)++;
    }
    fclose(f);
    if (!*n) {
        fprintf(stderr, "tcgpu-replay: %s: no jobs\n", path);
        free(v);
        return NULL;
    }
    qsort(v, *n, sizeof(*v), cmp_arrival);   /* stable enough: ties keep no meaning */
    return v;
err:
    fclose(f);
    free(v);
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Simulation
 * ------------------------------------------------------------------------- */

struct sim {
    struct policy *p;
    struct rjob *jobs;
    size_t n;
    const struct opts *o;
    struct pol_actions acts;
    double t;
    double busy_time, mem_time;   /* integrals over time */
    int *dev_running;             /* running jobs per device */
    int busy_devices;
    double running_mem;
    unsigned long preemptions;
};

static uint64_t ns(double t)
{
    return (uint64_t)(t * 1e9 + 0.5);
}

static void set_running(struct sim *s, size_t i, int on)
{
    struct rjob *j = &s->jobs[i];
    const struct pol_job *pj = policy_job(s->p, i + 1);
    int d = pj ? pj->device : -1;

    if (j->running == on || d < 0)
        return;
    j->running = on;
    s->running_mem += on ? j->mem : -j->mem;
    if (on && s->dev_running[d]++ == 0)
        s->busy_devices++;
    if (!on && --s->dev_running[d] == 0)
        s->busy_devices--;
}

static void apply(struct sim *s)
{
    for (size_t k = 0; k < s->acts.n; k++) {
        const struct pol_action *a = &s->acts.v[k];
        size_t i = (size_t)a->job - 1;
        struct rjob *j = &s->jobs[i];
        switch (a->kind) {
        case POL_ACT_GRANT:
            if (j->start < 0)
                j->start = s->t;
            set_running(s, i, 1);
            break;
        case POL_ACT_SUSPEND:
            set_running(s, i, 0);
            j->op = POL_ACT_SUSPEND;
            j->op_done = s->t + j->mem / s->o->swap_bps;
            j->preempted++;
            s->preemptions++;
            break;
        case POL_ACT_RESUME:
            j->op = POL_ACT_RESUME;
            j->op_done = s->t + j->mem / s->o->swap_bps;
            break;
        case POL_ACT_DENY:
            j->done = j->rejected = 1;
            j->finish = s->t;
            policy_job_exited(s->p, a->job, ns(s->t), &s->acts);   /* appends: seen later in this loop */
            break;
        case POL_ACT_WAIT:
            break;
        }
    }
    pol_actions_clear(&s->acts);
}

/* The next moment something happens, or INFINITY. */
static double next_event(const struct sim *s, size_t next_arrival)
{
    double tn = next_arrival < s->n ? s->jobs[next_arrival].arrival : INFINITY;

    for (size_t i = 0; i < s->n; i++) {
        const struct rjob *j = &s->jobs[i];
        if (j->running && s->t + j->remaining < tn)
            tn = s->t + j->remaining;
        if (j->op && j->op_done < tn)
            tn = j->op_done;
    }
    return tn;
}

static void advance(struct sim *s, double tn)
{
    double dt = tn - s->t;

    s->busy_time += dt * s->busy_devices;
    s->mem_time += dt * s->running_mem;
    for (size_t i = 0; i < s->n; i++) {
        if (s->jobs[i].running) {
            s->jobs[i].remaining -= dt;
            s->jobs[i].ran += dt;
        }
    }
    s->t = tn;
}

static int events_at(struct sim *s, size_t *next_arrival)
{
    uint64_t now = ns(s->t);

    while (*next_arrival < s->n && s->jobs[*next_arrival].arrival <= s->t + EPS) {
        size_t i = (*next_arrival)++;
        struct rjob *j = &s->jobs[i];
        struct pol_job_spec spec = { .id = i + 1, .project = policy_project_find(s->p, j->project),
                                     .priority = j->prio, .device = POL_DEVICE_ANY,
                                     .state = POL_RUNNING };
        if (policy_admit(s->p, &spec, now) < 0 ||
            policy_request(s->p, i + 1, POL_DEVICE_ANY, (uint64_t)j->mem, POL_FREE_UNKNOWN, 1, now,
                           &s->acts) < 0)
            return -1;
        apply(s);
    }
    for (size_t i = 0; i < s->n; i++) {
        struct rjob *j = &s->jobs[i];
        if (j->op && j->op_done <= s->t + EPS) {
            int op = j->op;
            j->op = 0;
            if (op == POL_ACT_SUSPEND) {
                policy_job_suspended(s->p, i + 1, 0, now, &s->acts);
            } else {
                policy_job_resumed(s->p, i + 1, 0, now, &s->acts);
                set_running(s, i, 1);
            }
            apply(s);
        }
        if (j->running && j->remaining <= EPS) {
            set_running(s, i, 0);
            j->done = 1;
            j->finish = s->t;
            policy_job_exited(s->p, i + 1, now, &s->acts);
            apply(s);
        }
    }
    if (policy_tick(s->p, now, &s->acts) < 0)
        return -1;
    apply(s);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void summarise(const struct sim *s, int hi, struct result *r)
{
    double *waits = malloc(s->n * sizeof(*waits));
    double sum_all = 0, sum_hi = 0, sum_lo = 0, wsum = 0;
    size_t n_hi = 0, n_lo = 0, nw = 0;

    r->makespan = s->t;
    r->preemptions = s->preemptions;
    r->busy = s->t > 0 ? s->busy_time / (s->t * s->o->gpus) : 0;
    r->memutil = s->t > 0 ? s->mem_time / (s->t * s->o->gpus * (double)s->o->gpu_mem) : 0;
    for (size_t i = 0; i < s->n; i++) {
        const struct rjob *j = &s->jobs[i];
        if (j->rejected) {
            r->rejected++;
            continue;
        }
        r->finished++;
        r->work_lost += fabs(j->ran - j->dur) > 1e-6 ? fabs(j->ran - j->dur) : 0;
        double jct = j->finish - j->arrival;
        sum_all += jct;
        if (j->prio >= hi) {
            sum_hi += jct;
            n_hi++;
            if (waits)
                waits[nw++] = j->start - j->arrival;
            wsum += j->start - j->arrival;
        } else {
            sum_lo += jct;
            n_lo++;
        }
    }
    r->jct_all = r->finished ? sum_all / (double)r->finished : 0;
    r->jct_hi = n_hi ? sum_hi / (double)n_hi : 0;
    r->jct_lo = n_lo ? sum_lo / (double)n_lo : 0;
    r->hi_wait_mean = n_hi ? wsum / (double)n_hi : 0;
    if (waits && nw) {
        qsort(waits, nw, sizeof(*waits), cmp_double);
        r->hi_wait_p95 = waits[(size_t)(0.95 * (double)(nw - 1) + 0.5)];
    }
    free(waits);
}

static int add_projects(struct policy *p, const struct rjob *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int k = policy_project_find(p, jobs[i].project);
        if (k >= 0)
            continue;
        struct pol_project pr = { .priority = jobs[i].prio, .may_borrow = 1 };
        snprintf(pr.name, sizeof(pr.name), "%s", jobs[i].project);
        if (policy_add_project(p, &pr) < 0)
            return -1;
    }
    return 0;
}

static int simulate(const struct rjob *trace, size_t n, const struct opts *o, int baseline,
                    int hi, struct result *r)
{
    struct pol_config cfg = { .min_runtime_ns = o->min_runtime_ns, .resume_retry_ns = ns(1),
                              .no_preemption = baseline, .fifo = baseline };
    struct sim s = { .n = n, .o = o };
    size_t next_arrival = 0;
    char msg[256];
    int rc = -1;

    s.p = policy_new(&cfg);
    s.jobs = malloc(n * sizeof(*s.jobs));
    s.dev_running = calloc((size_t)o->gpus, sizeof(*s.dev_running));
    if (!s.p || !s.jobs || !s.dev_running)
        goto out;
    memcpy(s.jobs, trace, n * sizeof(*s.jobs));
    for (size_t i = 0; i < n; i++) {
        s.jobs[i].remaining = s.jobs[i].dur;
        s.jobs[i].start = s.jobs[i].finish = -1;
    }
    for (int d = 0; d < o->gpus; d++)
        if (policy_set_device(s.p, d, o->gpu_mem) < 0)
            goto out;
    if (add_projects(s.p, s.jobs, n) < 0)
        goto out;
    for (;;) {
        double tn = next_event(&s, next_arrival);
        if (tn == INFINITY)
            break;
        advance(&s, tn);
        if (events_at(&s, &next_arrival) < 0) {
            fprintf(stderr, "tcgpu-replay: the policy failed at t=%.1f s\n", s.t);
            goto out;
        }
        if (o->check && policy_check(s.p, msg, sizeof(msg)) < 0) {
            fprintf(stderr, "tcgpu-replay: invariant broken at t=%.1f s: %s\n", s.t, msg);
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!s.jobs[i].done) {
            fprintf(stderr, "tcgpu-replay: job %zu (%s, %.0f GiB) never finished: stuck\n", i + 1,
                    s.jobs[i].project, s.jobs[i].mem / GiB);
            goto out;
        }
    }
    r->name = baseline ? "fifo" : "tcgpud";
    summarise(&s, hi, r);
    rc = 0;
out:
    pol_actions_free(&s.acts);
    policy_free(s.p);
    free(s.jobs);
    free(s.dev_running);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Report
 * ------------------------------------------------------------------------- */

static void report_human(const struct result *a, const struct result *b, size_t n, size_t n_hi,
                         int hi, const struct opts *o)
{
    printf("trace: %zu jobs (%zu high-priority: priority >= %d) on %d GPUs x %.0f GiB; "
           "min runtime %.0f s, swap %.1f GB/s\n\n", n, n_hi, hi, o->gpus, (double)o->gpu_mem / GiB,
           (double)o->min_runtime_ns / 1e9, o->swap_bps / 1e9);
    printf("%-40s %16s %16s\n", "", "tcgpud policy", "FIFO, no preempt");
    printf("%-40s %15.1f%% %15.1f%%\n", "GPU busy (some job running)", 100 * a->busy, 100 * b->busy);
    printf("%-40s %15.1f%% %15.1f%%\n", "GPU memory utilisation", 100 * a->memutil, 100 * b->memutil);
    printf("%-40s %14.0f s %14.0f s\n", "high-priority queueing delay, mean", a->hi_wait_mean, b->hi_wait_mean);
    printf("%-40s %14.0f s %14.0f s\n", "high-priority queueing delay, p95", a->hi_wait_p95, b->hi_wait_p95);
    printf("%-40s %14.0f s %14.0f s\n", "mean job completion time, all", a->jct_all, b->jct_all);
    printf("%-40s %14.0f s %14.0f s\n", "mean job completion time, high priority", a->jct_hi, b->jct_hi);
    printf("%-40s %14.0f s %14.0f s\n", "mean job completion time, others", a->jct_lo, b->jct_lo);
    printf("%-40s %14.0f s %14.0f s\n", "makespan", a->makespan, b->makespan);
    printf("%-40s %16lu %16lu\n", "preemptions", a->preemptions, b->preemptions);
    printf("%-40s %16lu %16lu\n", "jobs finished", a->finished, b->finished);
    printf("%-40s %16lu %16lu\n", "jobs rejected (larger than a GPU)", a->rejected, b->rejected);
    printf("%-40s %14.0f s %14.0f s\n", "work lost", a->work_lost, b->work_lost);
}

static json_t *result_json(const struct result *r)
{
    return json_pack("{sf sf sf sf sf sf sf sf sI sI sI sf}", "busy", r->busy, "memutil", r->memutil,
                     "hi_wait_mean", r->hi_wait_mean, "hi_wait_p95", r->hi_wait_p95,
                     "jct_all", r->jct_all, "jct_hi", r->jct_hi, "jct_lo", r->jct_lo,
                     "makespan", r->makespan, "preemptions", (json_int_t)r->preemptions,
                     "finished", (json_int_t)r->finished, "rejected", (json_int_t)r->rejected,
                     "work_lost", r->work_lost);
}

/* One JSON object (docs/tcgpud.md, "Replay at scale"). 0, or -1 when stdout failed. */
static int report_json(const struct result *a, const struct result *b, size_t n, size_t n_hi,
                       int hi, const struct opts *o)
{
    json_t *v = json_pack("{sI sI si si sI so so}", "jobs", (json_int_t)n, "high_jobs",
                          (json_int_t)n_hi, "high_priority", hi, "gpus", o->gpus, "gpu_mem",
                          (json_int_t)o->gpu_mem, "tcgpud", result_json(a), "fifo", result_json(b));

    if (tc_json_print(v, stdout) < 0) {
        fprintf(stderr, "tcgpu-replay: cannot write the JSON report\n");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Generator
 * ------------------------------------------------------------------------- */

static uint64_t rng_state = 88172645463325252ull;

static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}

static double normal(void)
{
    return sqrt(-2 * log(urand())) * cos(2 * M_PI * urand());
}

static int generate(size_t jobs, int gpus, uint64_t gpu_mem, double load, uint64_t seed)
{
    static const double mems[] = { 10, 20, 40, 80 };
    const double mean_dur = 1800 * exp(0.5 * 0.8 * 0.8);  /* log-normal mean, sigma 0.8 */
    double mean_mem = 0, t = 0, rate;
    int nm = 0;

    rng_state = seed * 2654435761u + 1;
    for (int i = 0; i < 4; i++)
        if (mems[i] * GiB <= (double)gpu_mem) {
            mean_mem += mems[i];
            nm++;
        }
    if (!nm) {
        fprintf(stderr, "tcgpu-replay: --gpu-mem must be at least 10G\n");
        return 1;
    }
    mean_mem /= nm;
    /* arrivals per second so that offered memory-time = load x capacity */
    rate = load * gpus * ((double)gpu_mem / GiB) / (mean_mem * mean_dur);
    printf("# tcgpu-replay --generate --jobs %zu --gpus %d --gpu-mem %.0fG --load %.2f --seed %llu\n",
           jobs, gpus, (double)gpu_mem / GiB, load, (unsigned long long)seed);
    printf("arrival_s,project,priority,mem_gib,duration_s\n");
    for (size_t i = 0; i < jobs; i++) {
        double u = urand();
        const char *proj = u < 0.15 ? "prod" : u < 0.50 ? "research" : "batch";
        int prio = u < 0.15 ? 100 : u < 0.50 ? 50 : 10;
        double mem = mems[(int)(urand() * nm) % nm];
        double dur = 1800 * exp(0.8 * normal());
        t += -log(urand()) / rate;
        printf("%.1f,%s,%d,%.0f,%.0f\n", t, proj, prio, mem, dur < 60 ? 60 : dur);
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Main
 * ------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: tcgpu-replay TRACE.csv [--gpus N] [--gpu-mem SIZE] [--min-runtime DUR]\n"
               "                    [--swap-gbps X] [--high-priority P] [--check] [--json]\n"
               "       tcgpu-replay --generate [--jobs N] [--gpus N] [--gpu-mem SIZE] [--load L] [--seed S]\n"
               "       tcgpu-replay --version\n"
               "\n"
               "Replays a job trace through tcgpud's policy and through a FIFO without\n"
               "preemption, and compares them. Defaults: 8 GPUs of 80G, min runtime 60s,\n"
               "swap 20 GB/s, high priority = the highest in the trace.\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "gpus", required_argument, NULL, 'g' },
        { "gpu-mem", required_argument, NULL, 'm' },
        { "min-runtime", required_argument, NULL, 'r' },
        { "swap-gbps", required_argument, NULL, 'w' },
        { "high-priority", required_argument, NULL, 'H' },
        { "check", no_argument, NULL, 'c' },
        { "json", no_argument, NULL, 'j' },
        { "generate", no_argument, NULL, 'G' },
        { "jobs", required_argument, NULL, 'n' },
        { "load", required_argument, NULL, 'l' },
        { "seed", required_argument, NULL, 's' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { 0 },
    };
    struct opts o = { .gpus = 8, .gpu_mem = 80ull << 30, .min_runtime_ns = 60000000000ull,
                      .swap_bps = 20e9, .high_prio = -1 };
    size_t njobs = 2000, n, n_hi = 0;
    double load = 0.9;
    uint64_t seed = 1;
    int gen = 0, ch, hi, r = 0;
    struct rjob *trace;
    struct result a = { 0 }, b = { 0 };

    while ((ch = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'g': o.gpus = atoi(optarg); break;
        case 'm':
            if (units_parse_size(optarg, &o.gpu_mem) < 0 || !o.gpu_mem) {
                fprintf(stderr, "tcgpu-replay: --gpu-mem wants a size (80G)\n");
                return 2;
            }
            break;
        case 'r':
            if (units_parse_duration(optarg, &o.min_runtime_ns) < 0) {
                fprintf(stderr, "tcgpu-replay: --min-runtime wants a duration (60s)\n");
                return 2;
            }
            break;
        case 'w': o.swap_bps = atof(optarg) * 1e9; break;
        case 'H': o.high_prio = atoi(optarg); break;
        case 'c': o.check = 1; break;
        case 'j': o.json = 1; break;
        case 'G': gen = 1; break;
        case 'n': njobs = strtoull(optarg, NULL, 10); break;
        case 'l': load = atof(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("tcgpu-replay %s\n", TCGPU_VERSION_STRING); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (o.gpus <= 0 || o.gpus > POL_MAX_DEVICES || !(o.swap_bps > 0) || !(load > 0) || !njobs) {
        fprintf(stderr, "tcgpu-replay: --gpus 1..%d, --swap-gbps, --load and --jobs must be positive\n",
                POL_MAX_DEVICES);
        return 2;
    }
    if (gen)
        return optind == argc ? generate(njobs, o.gpus, o.gpu_mem, load, seed) : (usage(stderr), 2);
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    trace = load_trace(argv[optind], &n);
    if (!trace)
        return 1;
    hi = o.high_prio;
    for (size_t i = 0; i < n && o.high_prio < 0; i++)
        if (trace[i].prio > hi)
            hi = trace[i].prio;
    for (size_t i = 0; i < n; i++)
        n_hi += trace[i].prio >= hi;
    if (simulate(trace, n, &o, 0, hi, &a) < 0 || simulate(trace, n, &o, 1, hi, &b) < 0) {
        free(trace);
        return 1;
    }
    if (o.json)
        r = report_json(&a, &b, n, n_hi, hi, &o);
    else
        report_human(&a, &b, n, n_hi, hi, &o);
    free(trace);
    return r < 0 ? 1 : 0;
}
