/*
 * metrics.c - tcgpud's metrics: latency histograms, counters, and the
 * Prometheus text exposition (version 0.0.4) of them and of the policy's
 * state, for the node_exporter textfile and for /metrics (docs/tcgpud.md,
 * "Metrics"); see metrics.h.
 *
 * Latencies are histograms, not summaries: buckets add up across nodes
 * (histogram_quantile(0.99, sum by (le) (rate(..._bucket[5m])))), quantiles
 * computed on one node do not. Every series is written on every scrape,
 * zero included, so that rate() and absent() behave. Runs on the loop's
 * thread only.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/macros.h"
#include "daemon.h"
#include "devices.h"
#include "http.h"
#include "metrics.h"
#include "tcgpu.h"

/* Upper bounds of the latency buckets, seconds (+Inf after the last). */
static const double bounds[LATENCY_BUCKETS - 1] = {
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
};

/* The event types counted in tcgpud_events_total (docs/tcgpud.md lists them). */
static const char *const event_types[] = {
    "registered", "request", "waiting", "granted", "denied", "suspending", "suspended",
    "suspend-failed", "resuming", "resumed", "resume-failed", "manual-suspend", "manual-resume",
    "exited", "relearnt", "refused",
};

static const char *const job_states[] = { "running", "waiting", "suspending", "suspended", "resuming" };

void latency_add(struct latency *l, double secs)
{
    size_t k = 0;

    while (k < NELEM(bounds) && secs > bounds[k])
        k++;
    l->bucket[k]++;
    l->sum += secs;
    l->count++;
}

void metrics_count_event(const char *type)
{
    for (size_t i = 0; i < NELEM(event_types) && i < NELEM(d.events_by_type); i++)
        if (!strcmp(event_types[i], type)) {
            d.events_by_type[i]++;
            return;
        }
}

/* ---------------------------------------------------------------------------
 * The exposition
 * ------------------------------------------------------------------------- */

static void header(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value as the format wants it: backslash, quote and newline escaped. */
static void label_value(FILE *f, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            fprintf(f, "\\%c", *v);
        else if (*v == '\n')
            fputs("\\n", f);
        else
            fputc(*v, f);
    }
}

static void write_histogram(FILE *f, const char *name, const char *help, const struct latency *l)
{
    uint64_t cum = 0;

    header(f, name, "histogram", help);
    for (size_t k = 0; k < LATENCY_BUCKETS; k++) {
        cum += l->bucket[k];
        if (k < NELEM(bounds))
            fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[k], (unsigned long long)cum);
        else
            fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    fprintf(f, "%s_sum %.6f\n%s_count %llu\n", name, l->sum, name, (unsigned long long)l->count);
}

/* A GPU's labels: device="N" (the node's ordinal), and UUID="GPU-..." as
 * NVIDIA's DCGM exporter names it, so that the series join its own; no UUID
 * label for a GPU the driver did not show tcgpud (configured only). */
static void device_labels(FILE *f, int dev)
{
    char uuid[DEVICE_UUID_TEXT_LEN];

    device_uuid_text(dev, uuid);
    fprintf(f, "device=\"%d\"", dev);
    if (uuid[0])
        fprintf(f, ",UUID=\"%s\"", uuid);
}

/* name{device="D",UUID="U"} V */
static void device_line(FILE *f, const char *name, int dev, uint64_t v)
{
    fprintf(f, "%s{", name);
    device_labels(f, dev);
    fprintf(f, "} %llu\n", (unsigned long long)v);
}

static void write_devices(FILE *f)
{
    int n = policy_device_count(d.pol);

    header(f, "tcgpud_device_memory_capacity_bytes", "gauge", "GPU memory tcgpud manages.");
    for (int dev = 0; dev < n; dev++)
        device_line(f, "tcgpud_device_memory_capacity_bytes", dev, policy_device_capacity(d.pol, dev));
    header(f, "tcgpud_device_memory_used_bytes", "gauge",
           "GPU memory held by managed jobs that are not suspended.");
    for (int dev = 0; dev < n; dev++)
        device_line(f, "tcgpud_device_memory_used_bytes", dev, policy_device_used(d.pol, dev));
}

/* Jobs by state, on the whole and per project. */
static void write_jobs(FILE *f)
{
    int np = policy_project_count(d.pol);
    unsigned long *counts = calloc((size_t)(np + 1) * NELEM(job_states), sizeof(*counts));

    if (!counts)
        return;
    for (size_t i = 0; i < d.njobs; i++) {
        const struct pol_job *pj = policy_job(d.pol, (uint64_t)d.jobs[i].pid);
        const char *s = pj ? display_state(pj) : "";
        for (size_t k = 0; k < NELEM(job_states); k++)
            if (!strcmp(s, job_states[k]) && pj->project >= 0 && pj->project < np) {
                counts[k]++;                                        /* all: row 0 */
                counts[(size_t)(pj->project + 1) * NELEM(job_states) + k]++;
            }
    }
    header(f, "tcgpud_jobs", "gauge", "Managed jobs by state.");
    for (size_t k = 0; k < NELEM(job_states); k++)
        fprintf(f, "tcgpud_jobs{state=\"%s\"} %lu\n", job_states[k], counts[k]);
    header(f, "tcgpud_project_jobs", "gauge", "Managed jobs of a project by state.");
    for (int p = 0; p < np; p++)
        for (size_t k = 0; k < NELEM(job_states); k++) {
            fputs("tcgpud_project_jobs{project=\"", f);
            label_value(f, policy_project(d.pol, p)->name);
            fprintf(f, "\",state=\"%s\"} %lu\n", job_states[k],
                    counts[(size_t)(p + 1) * NELEM(job_states) + k]);
        }
    free(counts);
}

/* name{project="P",device="D",UUID="U"} V */
static void project_device_line(FILE *f, const char *name, int p, int dev, uint64_t v)
{
    fprintf(f, "%s{project=\"", name);
    label_value(f, policy_project(d.pol, p)->name);
    fputs("\",", f);
    device_labels(f, dev);
    fprintf(f, "} %llu\n", (unsigned long long)v);
}

/* Per project and GPU: memory used, reserved, and borrowed beyond the reservation. */
static void write_projects(FILE *f)
{
    int np = policy_project_count(d.pol), nd = policy_device_count(d.pol);

    header(f, "tcgpud_project_memory_used_bytes", "gauge",
           "GPU memory held by a project's jobs that are not suspended.");
    for (int p = 0; p < np; p++)
        for (int dev = 0; dev < nd; dev++)
            project_device_line(f, "tcgpud_project_memory_used_bytes", p, dev,
                                policy_project_used(d.pol, p, dev));
    header(f, "tcgpud_project_reservation_bytes", "gauge", "GPU memory reserved for a project.");
    for (int p = 0; p < np; p++)
        for (int dev = 0; dev < nd; dev++)
            project_device_line(f, "tcgpud_project_reservation_bytes", p, dev,
                                policy_reserved(d.pol, p, dev));
    header(f, "tcgpud_project_memory_borrowed_bytes", "gauge",
           "GPU memory a project's jobs hold beyond its reservation (borrowed idle memory).");
    for (int p = 0; p < np; p++)
        for (int dev = 0; dev < nd; dev++) {
            uint64_t used = policy_project_used(d.pol, p, dev), res = policy_reserved(d.pol, p, dev);
            project_device_line(f, "tcgpud_project_memory_borrowed_bytes", p, dev,
                                used > res ? used - res : 0);
        }
}

static void write_counters(FILE *f)
{
    header(f, "tcgpud_preemptions_total", "counter", "Jobs suspended to make room for others.");
    fprintf(f, "tcgpud_preemptions_total %llu\n", (unsigned long long)d.preemptions_total);
    header(f, "tcgpud_refused_requests_total", "counter", "Requests refused for lack of permission.");
    fprintf(f, "tcgpud_refused_requests_total %llu\n", (unsigned long long)d.refused_total);
    header(f, "tcgpud_events_total", "counter",
           "Events by type (denied and waiting requests, failed suspends and resumes...).");
    for (size_t i = 0; i < NELEM(event_types); i++)
        fprintf(f, "tcgpud_events_total{type=\"%s\"} %llu\n", event_types[i],
                (unsigned long long)d.events_by_type[i]);
}

static void write_daemon(FILE *f)
{
    header(f, "tcgpud_build_info", "gauge", "tcgpud's version, as a label; always 1.");
    fputs("tcgpud_build_info{version=\"", f);
    label_value(f, TCGPU_VERSION_STRING);
    fputs("\"} 1\n", f);
    header(f, "tcgpud_start_time_seconds", "gauge", "When tcgpud started, seconds since the epoch.");
    fprintf(f, "tcgpud_start_time_seconds %.3f\n",
            (double)wall_ms() / 1e3 - (double)(now_ns() - d.start_ns) / 1e9);
    header(f, "tcgpud_last_update_timestamp_seconds", "gauge",
           "When these values were computed, seconds since the epoch (a stale textfile shows).");
    fprintf(f, "tcgpud_last_update_timestamp_seconds %.3f\n", (double)wall_ms() / 1e3);
}

static void write_all(FILE *f)
{
    write_daemon(f);
    write_devices(f);
    write_jobs(f);
    write_projects(f);
    write_counters(f);
    write_histogram(f, "tcgpud_suspend_latency_seconds",
                    "Time to suspend a job (until its GPU memory is freed).", &d.suspend_lat);
    write_histogram(f, "tcgpud_resume_latency_seconds", "Time to resume a job.", &d.resume_lat);
    write_histogram(f, "tcgpud_grant_wait_seconds",
                    "Time from a job's memory request to its grant (preemptions included).",
                    &d.grant_wait);
}

char *metrics_text(size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);

    if (!f)
        return NULL;
    write_all(f);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* The textfile, written whole to a temporary name and renamed (node_exporter
 * must never read half a file). */
static void write_textfile(const char *text, size_t len)
{
    char tmp[PATH_MAX + 16];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp", d.cfg.metrics);
    f = fopen(tmp, "we");
    if (!f) {
        static int warned;
        if (!warned++)
            log_info("cannot write metrics to %s: %s", tmp, strerror(errno));
        return;
    }
    if (fwrite(text, 1, len, f) != len || fclose(f) != 0 || rename(tmp, d.cfg.metrics) < 0) {
        log_info("cannot write metrics to %s: %s", d.cfg.metrics, strerror(errno));
        unlink(tmp);
    }
}

void publish_metrics(void)
{
    size_t len;
    char *text;

    if (!d.cfg.metrics[0] && !d.cfg.http_host[0])
        return;
    if (!(text = metrics_text(&len))) {
        log_info("out of memory writing the metrics");
        return;
    }
    if (d.cfg.metrics[0])
        write_textfile(text, len);
    if (d.cfg.http_host[0])
        http_publish(HTTP_METRICS, text, len);
    free(text);
}
