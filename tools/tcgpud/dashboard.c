/*
 * dashboard.c - what the dashboard shows (GET /api/state, docs/tcgpud.md,
 * "Dashboard"): the GPUs, the projects with their reservations and
 * borrowing, the jobs (as gpuckpt ps shows them: who suspended whom and
 * why), the memory of every job over the last minutes, and the recent
 * events with their latencies. Built on the loop's thread every tick and
 * published to the HTTP thread (http.h); see dashboard.h.
 *
 * The history is a ring of samples, one every HISTORY_EVERY_MS and one at
 * the first tick after each event (so that a preemption shows where it
 * happened, not up to two seconds off), each the memory every job held (or
 * needs back, suspended) and its state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/macros.h"
#include "commands.h"
#include "daemon.h"
#include "dashboard.h"
#include "http.h"
#include "json/schema.h"

#define HISTORY_SAMPLES   900     /* ten minutes of a sample a second, and room for events' */
#define HISTORY_EVERY_MS  1000
#define HISTORY_JOBS      64      /* jobs kept per sample (the rest are left out) */
#define STATE_EVENTS      200     /* the newest events in the state */

struct sample_job {
    pid_t pid;
    int device;
    int project;
    uint64_t mem;
    char state[12];
};

struct sample {
    uint64_t time_ms;
    int n;
    struct sample_job jobs[HISTORY_JOBS];
};

static struct {
    struct sample *ring;
    size_t n, next;
    uint64_t last_ms;
    uint64_t last_event;          /* d.event_seq at the last sample */
} history;

/* Takes a sample when HISTORY_EVERY_MS have passed since the last one, or an event happened. */
static void sample(uint64_t now_ms)
{
    struct sample *s;

    if (history.n && now_ms - history.last_ms < HISTORY_EVERY_MS && history.last_event == d.event_seq)
        return;
    history.last_event = d.event_seq;
    if (!history.ring && !(history.ring = calloc(HISTORY_SAMPLES, sizeof(*history.ring))))
        return;
    s = &history.ring[history.next];
    s->time_ms = now_ms;
    s->n = 0;
    for (size_t i = 0; i < d.njobs && s->n < HISTORY_JOBS; i++) {
        const struct pol_job *pj = policy_job(d.pol, (uint64_t)d.jobs[i].pid);
        struct sample_job *sj = &s->jobs[s->n];
        if (!pj)
            continue;
        sj->pid = d.jobs[i].pid;
        sj->device = pj->device;
        sj->project = pj->project;
        sj->mem = pj->mem;
        snprintf(sj->state, sizeof(sj->state), "%s", display_state(pj));
        s->n++;
    }
    history.next = (history.next + 1) % HISTORY_SAMPLES;
    if (history.n < HISTORY_SAMPLES)
        history.n++;
    history.last_ms = now_ms;
}

/* ---------------------------------------------------------------------------
 * The state, as JSON
 * ------------------------------------------------------------------------- */

static json_t *devices_json(void)
{
    json_t *a = json_array();

    for (int dev = 0; a && dev < policy_device_count(d.pol); dev++)
        if (json_array_append_new(a, json_pack("{si sI sI}", "id", dev, "capacity",
                                               (json_int_t)policy_device_capacity(d.pol, dev), "used",
                                               (json_int_t)policy_device_used(d.pol, dev))) < 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

/* [{"device": D, "bytes": N}] of a project's reservation, or of its use (0s left out). */
static json_t *per_device(int p, int used)
{
    json_t *a = json_array();

    for (int dev = 0; a && dev < policy_device_count(d.pol); dev++) {
        uint64_t v = used ? policy_project_used(d.pol, p, dev) : policy_reserved(d.pol, p, dev);
        if (v && json_array_append_new(a, json_pack("{si sI}", "device", dev, "bytes", (json_int_t)v)) < 0) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

static uint64_t project_borrowed(int p)
{
    uint64_t sum = 0;

    for (int dev = 0; dev < policy_device_count(d.pol); dev++) {
        uint64_t used = policy_project_used(d.pol, p, dev), res = policy_reserved(d.pol, p, dev);
        sum += used > res ? used - res : 0;
    }
    return sum;
}

static json_t *project_jobs(int p)
{
    static const char *const states[] = { "running", "waiting", "suspending", "suspended", "resuming" };
    json_t *o = json_object();
    int n[NELEM(states)] = { 0 };

    for (size_t i = 0; i < d.njobs; i++) {
        const struct pol_job *pj = policy_job(d.pol, (uint64_t)d.jobs[i].pid);
        for (size_t k = 0; pj && pj->project == p && k < NELEM(states); k++)
            n[k] += !strcmp(display_state(pj), states[k]);
    }
    for (size_t k = 0; o && k < NELEM(states); k++)
        if (tc_json_set_int(o, states[k], n[k]) < 0) {
            json_decref(o);
            o = NULL;
        }
    return o;
}

static json_t *projects_json(void)
{
    json_t *a = json_array();

    for (int p = 0; a && p < policy_project_count(d.pol); p++) {
        const struct pol_project *pr = policy_project(d.pol, p);
        json_t *o = json_pack("{so si sb so so sI so}", "name", tc_json_string(pr->name),
                              "priority", pr->priority, "may_borrow", pr->may_borrow,
                              "reservation", per_device(p, 0), "used", per_device(p, 1),
                              "borrowed_bytes", (json_int_t)project_borrowed(p),
                              "jobs", project_jobs(p));
        if (json_array_append_new(a, o) < 0) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

/* The jobs exactly as gpuckpt ps --json gives them (put_job, typed by the job schema). */
static json_t *jobs_json(void)
{
    static struct ctl_buf b;
    static struct ctl_msg m;
    uint64_t now = now_ns();
    json_t *a = json_array();

    for (size_t i = 0; a && i < d.njobs; i++) {
        const struct pol_job *pj = policy_job(d.pol, (uint64_t)d.jobs[i].pid);
        long n;
        if (!pj)
            continue;
        put_job(&b, &d.jobs[i], pj, now);
        n = ctl_buf_finish(&b);
        if (n < 0 || ctl_parse(b.data, (size_t)n, &m) < 0)
            continue;
        if (json_array_append_new(a, tc_json_from_msg(&m, &tc_json_job_schema)) < 0) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

/* {"interval_ms", "samples": [{"time_ms", "jobs": [[pid, device, mem, state, project]...]}]} */
static json_t *history_json(void)
{
    json_t *samples = json_array();

    for (size_t k = 0; samples && k < history.n; k++) {
        const struct sample *s =
            &history.ring[(history.next + HISTORY_SAMPLES - history.n + k) % HISTORY_SAMPLES];
        json_t *jobs = json_array();
        for (int i = 0; jobs && i < s->n; i++) {
            const struct sample_job *sj = &s->jobs[i];
            if (json_array_append_new(jobs, json_pack("[i i I s o]", (int)sj->pid, sj->device,
                                                      (json_int_t)sj->mem, sj->state,
                                                      tc_json_string(project_name(sj->project)))) < 0) {
                json_decref(jobs);
                jobs = NULL;
            }
        }
        if (json_array_append_new(samples, json_pack("{sI so}", "time_ms", (json_int_t)s->time_ms,
                                                     "jobs", jobs)) < 0) {
            json_decref(samples);
            samples = NULL;
        }
    }
    return json_pack("{si so}", "interval_ms", HISTORY_EVERY_MS, "samples", samples);
}

/* The newest events, oldest first, typed as gpuckpt events --json gives them. */
static json_t *events_json(void)
{
    static struct ctl_msg m;
    uint64_t first = d.event_seq >= STATE_EVENTS ? d.event_seq - STATE_EVENTS + 1 : 1;
    json_t *a = json_array();

    for (uint64_t s = first; a && s <= d.event_seq; s++) {
        const char *e = d.events[s % EVENTS_MAX];
        if (ctl_parse(e, strlen(e), &m) < 0)
            continue;
        if (json_array_append_new(a, tc_json_from_msg(&m, &tc_json_event_schema)) < 0) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

static json_t *state_json(uint64_t now_ms)
{
    char host[256] = "";

    gethostname(host, sizeof(host) - 1);
    return json_pack("{ss so sI sI so so so so so}", "version", TCGPU_VERSION_STRING,
                     "node", tc_json_string(host), "time_ms", (json_int_t)now_ms,
                     "uptime_ms", (json_int_t)((now_ns() - d.start_ns) / 1000000u),
                     "devices", devices_json(), "projects", projects_json(), "jobs", jobs_json(),
                     "history", history_json(), "events", events_json());
}

void dashboard_tick(void)
{
    uint64_t now_ms = wall_ms();
    char *text;

    if (!d.cfg.dashboard)
        return;
    sample(now_ms);
    if (!(text = tc_json_dumps(state_json(now_ms)))) {
        log_info("out of memory building the dashboard's state");
        return;
    }
    http_publish(HTTP_STATE, text, strlen(text));
    free(text);
}
