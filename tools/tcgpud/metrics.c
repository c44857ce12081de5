/* tcgpud's latencies and its node_exporter textfile; see daemon.h. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"

/* ---------------------------------------------------------------------------
 * Latencies
 * ------------------------------------------------------------------------- */

void latency_add(struct latency *l, double secs)
{
    if (l->n == LATENCY_SAMPLES)
        l->sum -= l->v[l->next];
    else
        l->n++;
    l->v[l->next] = secs;
    l->next = (l->next + 1) % LATENCY_SAMPLES;
    l->sum += secs;
    l->count++;
}

/* ---------------------------------------------------------------------------
 * Metrics
 * ------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void write_summary(FILE *f, const char *name, const char *help, const struct latency *l)
{
    double v[LATENCY_SAMPLES];
    static const double qs[] = { 0.5, 0.9, 0.99 };

    fprintf(f, "# HELP %s %s\n# TYPE %s summary\n", name, help, name);
    memcpy(v, l->v, l->n * sizeof(double));
    qsort(v, l->n, sizeof(double), cmp_double);
    for (size_t i = 0; i < 3 && l->n; i++)
        fprintf(f, "%s{quantile=\"%g\"} %.6f\n", name, qs[i], v[(size_t)(qs[i] * (double)(l->n - 1) + 0.5)]);
    /* sum over the samples kept; count over all time (a summary's count is a counter) */
    fprintf(f, "%s_sum %.6f\n%s_count %llu\n", name, l->sum, name, (unsigned long long)l->count);
}

static void write_metrics_to(FILE *f)
{
    static const char *const states[] = { "running", "waiting", "suspending", "suspended", "resuming" };
    unsigned long counts[5] = { 0 };

    fprintf(f, "# HELP tcgpud_device_memory_capacity_bytes GPU memory tcgpud manages.\n"
               "# TYPE tcgpud_device_memory_capacity_bytes gauge\n");
    for (int dev = 0; dev < policy_device_count(d.pol); dev++)
        fprintf(f, "tcgpud_device_memory_capacity_bytes{device=\"%d\"} %llu\n", dev,
                (unsigned long long)policy_device_capacity(d.pol, dev));
    fprintf(f, "# HELP tcgpud_device_memory_used_bytes GPU memory held by managed jobs that are not suspended.\n"
               "# TYPE tcgpud_device_memory_used_bytes gauge\n");
    for (int dev = 0; dev < policy_device_count(d.pol); dev++)
        fprintf(f, "tcgpud_device_memory_used_bytes{device=\"%d\"} %llu\n", dev,
                (unsigned long long)policy_device_used(d.pol, dev));
    for (size_t i = 0; i < d.njobs; i++) {
        const struct pol_job *pj = policy_job(d.pol, (uint64_t)d.jobs[i].pid);
        const char *s = pj ? display_state(pj) : "";
        for (int k = 0; k < 5; k++)
            counts[k] += !strcmp(s, states[k]);
    }
    fprintf(f, "# HELP tcgpud_jobs Managed jobs by state.\n# TYPE tcgpud_jobs gauge\n");
    for (int k = 0; k < 5; k++)
        fprintf(f, "tcgpud_jobs{state=\"%s\"} %lu\n", states[k], counts[k]);
    fprintf(f, "# HELP tcgpud_preemptions_total Jobs suspended to make room for others.\n"
               "# TYPE tcgpud_preemptions_total counter\ntcgpud_preemptions_total %llu\n",
            (unsigned long long)d.preemptions_total);
    fprintf(f, "# HELP tcgpud_refused_requests_total Requests refused for lack of permission.\n"
               "# TYPE tcgpud_refused_requests_total counter\ntcgpud_refused_requests_total %llu\n",
            (unsigned long long)d.refused_total);
    write_summary(f, "tcgpud_suspend_latency_seconds", "Time to suspend a job (GPU memory freed).",
                  &d.suspend_lat);
    write_summary(f, "tcgpud_resume_latency_seconds", "Time to resume a job.", &d.resume_lat);
}

/* The textfile, written whole to a temporary name and renamed (node_exporter
 * must never read half a file). */
void write_metrics(void)
{
    char tmp[PATH_MAX + 16];
    FILE *f;

    if (!d.cfg.metrics[0])
        return;
    snprintf(tmp, sizeof(tmp), "%s.tmp", d.cfg.metrics);
    f = fopen(tmp, "we");
    if (!f) {
        static int warned;
        if (!warned++)
            logmsg("cannot write metrics to %s: %s", tmp, strerror(errno));
        return;
    }
    write_metrics_to(f);
    if (fclose(f) != 0 || rename(tmp, d.cfg.metrics) < 0) {
        logmsg("cannot write metrics to %s: %s", d.cfg.metrics, strerror(errno));
        unlink(tmp);
    }
}
