/*
 * daemon_client.c - the job's side of tcgpud, inside libtcgpu.so; see
 * daemon_client.h.
 *
 * The job registers once (at cuInit) and then only talks to tcgpud when an
 * allocation does not fit: the fast path of an allocation is one relaxed
 * load of the limit. Each talk is its own connection, so a tcgpud that
 * restarts in between costs nothing; one that forgot the job (restarted
 * without its state file) answers ENOENT and the job registers again.
 *
 * A tcgpud that goes away while the job waits for its answer (killed in the
 * middle of a preemption) is not an answer: the job looks whether the
 * device has room now (a victim's memory may have been freed meanwhile) and
 * retries the allocation if so, else asks again, registering anew, until
 * tcgpud is back or TCGPU_DAEMON_TIMEOUT has passed (docs/tcgpud.md).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon_client.h"
#include "throttle.h"
#include "driver/driver.h"
#include "driver/gate.h"
#include "common/hex.h"
#include "common/log.h"
#include "common/units.h"
#include "common/clock.h"
#include "ctl/daemon_io.h"
#include "settings.h"
#include "thread.h"

#define REGISTER_TIMEOUT_MS   5000
#define DEFAULT_TIMEOUT_MS    120000
#define REREGISTER_EVERY_NS   5000000000ull
#define RETRY_FIRST_MS        50          /* tcgpud away: first pause, doubled up to... */
#define RETRY_MAX_MS          1000
#define FORGOTTEN_MAX         3           /* ENOENT answers in a row before giving up */
#define LIMIT_NOTE_EVERY_NS   10000000000ull
#define REPORT_EVERY_NS       500000000ull    /* compute reports of an active job */
#define REPORT_TIMEOUT_MS     2000
#define CAP_KEPT_NS           3000000000ull   /* a cap answered holds this long without another */

static _Atomic uint64_t job_limit;            /* bytes; 0: none */
static pthread_mutex_t reg_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int configured;                           /* settings read */
    int registered;
    int ever_registered;                      /* tcgpud has known this job once */
    int away;                                 /* the last try found tcgpud there but not answering */
    char project[64];
    char priority[32];
    uint64_t gpu_mem;                         /* TCGPU_GPU_MEM, 0: not given */
    uint64_t wait_ms;                         /* TCGPU_WAIT_TIMEOUT */
    int timeout_ms;                           /* TCGPU_DAEMON_TIMEOUT */
    uint64_t last_try_ns;
    int warned;
    uint64_t limit_noted_ns;                  /* the last "over its limit" line */
    unsigned long limit_not_noted;
    char job[64];                             /* TCGPU_JOB, or slurm:$SLURM_JOB_ID */
    int reporter;                             /* the compute reporter thread runs */
} dc;

uint64_t tcgpu_daemon_limit(void)
{
    return atomic_load_explicit(&job_limit, memory_order_relaxed);
}

/*
 * TCGPU_GPU_MEM in bytes: a size ("8G"), or a share of the memory of the
 * job's first GPU ("25%", as tcgpu-slurm sets it from a job's Slurm
 * shards), rounded down to whole MiB (1 MiB at least). Read after cuInit, so the driver
 * knows the device. 0 (no limit, said) when it is neither.
 */
static uint64_t parse_limit(const char *mem)
{
    uint64_t bytes;
    uint32_t ppm;
    size_t total = 0;
    CUdevice dev;

    if (units_parse_percent(mem, &ppm) == 0) {
        if (TCGPU_REAL(cuDeviceGet)(&dev, 0) != CUDA_SUCCESS ||
            TCGPU_REAL(cuDeviceTotalMem)(&total, dev) != CUDA_SUCCESS || !total) {
            log_err("TCGPU_GPU_MEM=%s: the driver does not say how much memory GPU 0 has; "
                    "no memory limit", mem);
            return 0;
        }
        bytes = (uint64_t)((unsigned __int128)total * ppm / 1000000) >> 20 << 20;
        if (!bytes)
            bytes = 1 << 20;
        log_info("memory limit %s of the GPU's %llu MiB: %llu MiB", mem,
                 (unsigned long long)(total >> 20), (unsigned long long)(bytes >> 20));
        return bytes;
    }
    if (units_parse_size(mem, &bytes) < 0 || bytes == 0) {
        log_err("TCGPU_GPU_MEM=%s is not a size (e.g. 8G) or a share of the GPU (e.g. 25%%); "
                "no memory limit", mem);
        return 0;
    }
    return bytes;
}

/* Read the settings once. Lock held. */
static void configure(void)
{
    const struct tcgpu_settings *s = settings_get();
    const char *mem = s->gpu_mem, *wait = s->wait_timeout, *to = s->daemon_timeout;
    uint64_t v;

    if (dc.configured)
        return;
    dc.configured = 1;
    dc.timeout_ms = DEFAULT_TIMEOUT_MS;
    snprintf(dc.project, sizeof(dc.project), "%s", s->project);
    /* the tasks of one job: its name, or Slurm's job id (every task of a step has it) */
    if (*s->job)
        snprintf(dc.job, sizeof(dc.job), "%s", s->job);
    else if (*s->slurm_job_id)
        snprintf(dc.job, sizeof(dc.job), "slurm:%s", s->slurm_job_id);
    throttle_configure();
    snprintf(dc.priority, sizeof(dc.priority), "%s", s->priority);
    if (*mem) {
        dc.gpu_mem = parse_limit(mem);
        atomic_store(&job_limit, dc.gpu_mem);
    }
    if (*wait) {
        if (units_parse_duration(wait, &v) < 0)
            log_err("TCGPU_WAIT_TIMEOUT=%s is not a duration (e.g. 60s); not waiting", wait);
        else
            dc.wait_ms = v / 1000000;
    }
    if (*to) {
        if (units_parse_duration(to, &v) < 0 || v / 1000000 > 86400000)
            log_err("TCGPU_DAEMON_TIMEOUT=%s is not a duration; using 120s", to);
        else
            dc.timeout_ms = (int)(v / 1000000);
    }
}

/*
 * The machine's index of the job's CUDA device `ordinal`: under
 * CUDA_VISIBLE_DEVICES=2,3 (as Slurm sets it) the job's device 0 is GPU 2.
 * Entries that are not indexes (UUIDs, MIG instances) are left as the
 * ordinal: tcgpud then accounts the job on the GPU of that number.
 */
static int physical_device(int ordinal)
{
    const char *v = settings_get()->cuda_visible_devices;
    int i = 0;

    if (!*v || ordinal < 0)
        return ordinal;
    for (const char *s = v; *s; i++) {
        char *end;
        long idx = strtol(s, &end, 10);
        if (i == ordinal)
            return end != s && (*end == ',' || !*end) && idx >= 0 && idx < 4096 ? (int)idx : ordinal;
        s = strchr(s, ',');
        if (!s)
            break;
        s++;
    }
    return ordinal;
}

/* tcgpud's socket; "" when TCGPU_DAEMON_SOCKET=off. */
static const char *daemon_socket(void)
{
    return tcgpud_socket_path(settings_get()->daemon_socket);
}

/* One request/reply with tcgpud. Returns 0 with *reply filled (check ->err), or -errno. */
static int call_daemon(struct ctl_buf *req, struct ctl_msg *reply, int timeout_ms, char *err,
                       size_t errlen)
{
    int fd = tcgpud_connect(daemon_socket(), err, errlen);
    int r;

    if (fd < 0)
        return fd;
    r = tcgpud_call(fd, req, reply, timeout_ms, NULL, NULL);
    close(fd);
    if (r < 0)
        snprintf(err, errlen, "tcgpud at %s: %s", daemon_socket(), strerror(-r));
    return r;
}

/*
 * The device as tcgpud knows it: its UUID (this job's ordinals are its own,
 * remapped by CUDA_VISIBLE_DEVICES) and the ordinal. tcgpud learns sizes
 * itself: the job sends none.
 */
static void put_device(struct ctl_buf *req, int ordinal)
{
    CUuuid u;
    char hex[33];

    ctl_buf_put_u64(req, "device", (uint64_t)physical_device(ordinal));
    if (TCGPU_REAL(cuDeviceGetUuid)(&u, ordinal) != CUDA_SUCCESS)
        return;
    hex_put16((const uint8_t *)u.bytes, hex);
    ctl_buf_put(req, "uuid", hex);
}

/* ---------------------------------------------------------------------------
 * Compute reports: tcgpud hears which jobs compute on a device and answers
 * with the cap each one's throttle applies (lib/core/throttle.h).
 * ------------------------------------------------------------------------- */

static int ensure_registered(void);

/* One report; the cap tcgpud answers, or 0 when there was no answer
 * (*forgotten: tcgpud does not know the job, it must register again). */
static unsigned report_compute(int active, unsigned busy, int device, int *forgotten)
{
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    uint64_t cap = 0;
    char err[256];

    *forgotten = 0;
    if (!req || !rep)
        goto out;
    ctl_buf_request(req, "compute");
    if (device >= 0)
        put_device(req, device);
    ctl_buf_put_u64(req, "active", (uint64_t)(active != 0));
    ctl_buf_put_u64(req, "busy", busy);
    if (call_daemon(req, rep, REPORT_TIMEOUT_MS, err, sizeof(err)) < 0) {
        cap = 0;
    } else if (rep->err || ctl_get_u64(rep, "cap", &cap) < 0) {
        *forgotten = rep->err == -ENOENT;
        cap = 0;
    }
out:
    free(req);
    free(rep);
    return (unsigned)cap;
}

/* Twice a second while the job launches work (and once more when it
 * stops): whether it did, and the answer applied. tcgpud away: the share.
 * A report left unanswered (a daemon slow on a loaded host) keeps the last
 * cap for CAP_KEPT_NS, so that one late answer does not hold a job alone on
 * its GPU to its share for half a second. */
static void *reporter(void *arg)
{
    struct timespec ts = { 0, (long)REPORT_EVERY_NS };
    int was_active = 0;
    uint64_t answered_ns = 0;

    (void)arg;
    for (;;) {
        int active, device;
        unsigned busy, cap;
        nanosleep(&ts, NULL);
        throttle_take_report(&active, &busy, &device);
        if (!active && !was_active && throttle_cap() == THROTTLE_FULL)
            continue;                   /* idle, and nothing holds it back: nothing to say */
        was_active = active;
        int forgotten;
        cap = report_compute(active, busy, device, &forgotten);
        if (forgotten) {
            /* tcgpud restarted without its state: register again (at most every 5 s) */
            pthread_mutex_lock(&reg_mutex);
            dc.registered = 0;
            ensure_registered();
            pthread_mutex_unlock(&reg_mutex);
        }
        if (cap)
            answered_ns = now_ns();
        if (throttle_share() && (cap || forgotten || now_ns() - answered_ns >= CAP_KEPT_NS))
            throttle_set_cap(cap ? cap : throttle_share());
    }
    return NULL;
}

/* Start the reporter once, after the first registration. Lock held. */
static void start_reporter(void)
{
    if (dc.reporter)
        return;
    atomic_store(&tcgpu_throttle_counting, 1);
    if (core_thread_start(NULL, reporter, "tcgpu-report", 0) == 0)
        dc.reporter = 1;
    else
        log_err("cannot start the compute reporter: the compute share stays at %u%%",
                throttle_share() / 10);
}

/* Register now. Lock held. Returns 0 or -errno (logged once). */
static int do_register(void)
{
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    char err[256];
    uint64_t limit;
    int r = -ENOMEM;

    dc.last_try_ns = now_ns();
    if (!req || !rep)
        goto out;
    ctl_buf_request(req, "register");
    ctl_buf_put(req, "project", dc.project);
    if (dc.priority[0])
        ctl_buf_put(req, "priority", dc.priority);
    if (dc.gpu_mem)
        ctl_buf_put_u64(req, "gpu_mem", dc.gpu_mem);
    put_device(req, 0);
    if (throttle_share())
        ctl_buf_put_u64(req, "compute", throttle_share());
    if (dc.job[0])
        ctl_buf_put(req, "job", dc.job);
    r = call_daemon(req, rep, REGISTER_TIMEOUT_MS, err, sizeof(err));
    /* A tcgpud that is there but does not answer now (killed, restarting,
     * busy turning connections away) is away; no socket at all is no tcgpud. */
    dc.away = (r < 0 && r != -ENOENT) || (r == 0 && rep->err == -EAGAIN);
    if (r == 0 && rep->err) {
        r = rep->err;
        snprintf(err, sizeof(err), "tcgpud refused to register this job: %s: %s", rep->err_name,
                 rep->err_text);
    }
    if (r < 0) {
        if (!dc.warned++)
            log_err("%s; running without policy (project %s)%s", err, dc.project,
                    dc.away ? " until tcgpud answers" : "");
        goto out;
    }
    dc.registered = 1;
    dc.ever_registered = 1;
    dc.warned = 0;
    if (ctl_get_u64(rep, "limit", &limit) == 0)
        atomic_store(&job_limit, limit);
    /* the project's default share, when the job gave none */
    uint64_t compute;
    if (!throttle_share() && ctl_get_u64(rep, "compute", &compute) == 0 && compute &&
        compute <= THROTTLE_FULL)
        throttle_set_share((unsigned)compute);
    start_reporter();
    log_info("registered with tcgpud: project %s, priority %s, memory limit %llu MiB%s",
             dc.project, ctl_get(rep, "priority") ? ctl_get(rep, "priority") : "?",
             (unsigned long long)(tcgpu_daemon_limit() >> 20),
             tcgpu_daemon_limit() ? "" : " (none)");
out:
    free(req);
    free(rep);
    return r;
}

void tcgpu_daemon_register(void)
{
    pthread_mutex_lock(&reg_mutex);
    configure();
    if (dc.project[0] && !dc.registered && daemon_socket()[0])
        do_register();
    pthread_mutex_unlock(&reg_mutex);
}

/* Registered (or registered again, at most every 5 s). Lock held. */
static int ensure_registered(void)
{
    if (!dc.project[0] || !daemon_socket()[0])
        return 0;
    if (!dc.registered && now_ns() - dc.last_try_ns >= REREGISTER_EVERY_NS)
        do_register();
    return dc.registered;
}

/* What ask() says: retry the allocation, fail it, or neither yet. */
enum {
    ASK_FAIL = 0,
    ASK_RETRY = 1,
    ASK_FORGOTTEN = -ENOENT,      /* tcgpud does not know the job: register again */
    ASK_UNREACHABLE = -ENOTCONN,  /* no answer: tcgpud is away, or went away meanwhile */
};

/* The request itself, waiting at most timeout_ms; err says why it was unreachable. */
static int ask(int device, uint64_t bytes, uint64_t used, int timeout_ms, char *err, size_t errlen)
{
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    size_t freemem = 0, total = 0;
    uint64_t limit;
    int r = ASK_FAIL;

    if (!req || !rep)
        goto out;
    ctl_buf_request(req, "request");
    put_device(req, device);
    ctl_buf_put_u64(req, "bytes", bytes);
    ctl_buf_put_u64(req, "used", used);
    if (TCGPU_REAL(cuMemGetInfo)(&freemem, &total) == CUDA_SUCCESS)
        ctl_buf_put_u64(req, "free", freemem);
    if (dc.wait_ms)
        ctl_buf_put_u64(req, "wait_ms", dc.wait_ms);
    if (call_daemon(req, rep, timeout_ms, err, errlen) < 0) {
        r = ASK_UNREACHABLE;
        goto out;
    }
    if (rep->err == -ENOENT) {
        r = ASK_FORGOTTEN;
        goto out;
    }
    if (rep->err == -EAGAIN && ctl_get(rep, "suspending")) {
        /* We are being suspended: give the suspend a moment to close the
         * gate, so that our retry parks there until the resume instead of
         * failing again at once. */
        usleep(200000);
        r = ASK_RETRY;
        goto out;
    }
    if (rep->err == -EAGAIN) {
        /* turned away (too many connections, or it has just restarted): as
         * if tcgpud were away, for a moment */
        snprintf(err, errlen, "tcgpud asked to come back: %s", rep->err_text);
        r = ASK_UNREACHABLE;
        goto out;
    }
    if (rep->err) {
        log_info("allocation of %llu MiB refused by tcgpud: %s", (unsigned long long)(bytes >> 20),
                 rep->err_text);
        goto out;
    }
    if (ctl_get_u64(rep, "limit", &limit) == 0)
        atomic_store(&job_limit, limit);
    r = ASK_RETRY;
out:
    free(req);
    free(rep);
    return r;
}

/* The device has room for bytes now (the driver says so). */
static int device_has_room(uint64_t bytes)
{
    size_t freemem = 0, total = 0;

    return TCGPU_REAL(cuMemGetInfo)(&freemem, &total) == CUDA_SUCCESS && freemem >= bytes;
}

static int registered_now(void)
{
    int r;

    pthread_mutex_lock(&reg_mutex);
    r = dc.registered;
    pthread_mutex_unlock(&reg_mutex);
    return r;
}

/* Register again at once (tcgpud forgot the job, or it is coming back). */
static int register_again(void)
{
    int r;

    pthread_mutex_lock(&reg_mutex);
    dc.registered = 0;
    dc.last_try_ns = 0;
    r = ensure_registered();
    pthread_mutex_unlock(&reg_mutex);
    return r;
}

/*
 * Ask until there is an answer or the time is up. While tcgpud is away the
 * allocation is retried as soon as the device has room (the memory a
 * victim was releasing when tcgpud went away), and the job registers again
 * when tcgpud is back. Returns 1 (retry the allocation) or 0 (fail it).
 */
static int ask_until_answered(int device, uint64_t bytes, uint64_t used)
{
    uint64_t t0 = now_ns(), deadline = t0 + ((uint64_t)dc.timeout_ms + dc.wait_ms) * 1000000u;
    int pause_ms = RETRY_FIRST_MS, forgotten = 0, said = 0;
    char err[256] = "";

    for (;;) {
        uint64_t now = now_ns();
        int left_ms = now < deadline ? (int)((deadline - now) / 1000000u) + 1 : 0;
        int r = registered_now() ? ask(device, bytes, used, left_ms, err, sizeof(err)) : ASK_UNREACHABLE;

        if (r == ASK_RETRY || r == ASK_FAIL)
            return r;
        if (r == ASK_FORGOTTEN) {
            if (++forgotten < FORGOTTEN_MAX && register_again())
                continue;
            log_err("allocation of %llu MiB: tcgpud does not know this job and it cannot "
                    "register again; failing it", (unsigned long long)(bytes >> 20));
            return ASK_FAIL;
        }
        if (device_has_room(bytes))
            return ASK_RETRY;
        if (now_ns() >= deadline) {
            log_err("allocation of %llu MiB: no answer from tcgpud in %.0f s (%s); failing it "
                    "(TCGPU_DAEMON_TIMEOUT)", (unsigned long long)(bytes >> 20),
                    (double)(now_ns() - t0) / 1e9, err[0] ? err : "not registered");
            return ASK_FAIL;
        }
        if (!said++)
            log_err("allocation of %llu MiB: %s; waiting for room or for tcgpud, for up to "
                    "%.0f s", (unsigned long long)(bytes >> 20), err[0] ? err : "tcgpud is away",
                    (double)(deadline - now_ns()) / 1e9);
        usleep((useconds_t)pause_ms * 1000);
        pause_ms = pause_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : pause_ms * 2;
        if (!registered_now())
            register_again();     /* tcgpud may be back: it answers once it is */
    }
}

/* An allocation fails for the job's own limit: say so, naming the limit
 * (at most every 10 s, with how many were not said). */
static void note_over_limit(uint64_t bytes, uint64_t used)
{
    uint64_t now = now_ns();
    char b[32], l[32], u[32];

    pthread_mutex_lock(&reg_mutex);
    if (dc.limit_noted_ns && now - dc.limit_noted_ns < LIMIT_NOTE_EVERY_NS) {
        dc.limit_not_noted++;
        pthread_mutex_unlock(&reg_mutex);
        return;
    }
    log_err("allocation of %s fails with CUDA_ERROR_OUT_OF_MEMORY: the job holds %s and its "
            "memory limit is %s (%s)%s", units_format_bytes(bytes, b, sizeof(b)),
            units_format_bytes(used, u, sizeof(u)),
            units_format_bytes(tcgpu_daemon_limit(), l, sizeof(l)),
            dc.gpu_mem ? "TCGPU_GPU_MEM, gpuckpt run --gpu-mem"
                       : "given by tcgpud: the project's default_limit",
            "; a job's limit is hard: its project's borrowing never lifts it");
    if (dc.limit_not_noted)
        log_err("(%lu more allocations failed over the limit since the last such line)",
                dc.limit_not_noted);
    dc.limit_noted_ns = now;
    dc.limit_not_noted = 0;
    pthread_mutex_unlock(&reg_mutex);
}

int tcgpu_daemon_make_room(int device, uint64_t bytes, uint64_t used, int over_limit)
{
    int left_gate = 0, r, policy;

    /* A job's limit is a partition of the GPU (--gpu-mem, a project's
     * default_limit): it holds whatever the project may borrow. Borrowing
     * lends a project the idle memory of others, for jobs within their
     * own limits; nothing lifts a job's limit. */
    if (over_limit) {
        note_over_limit(bytes, used);
        return 0;
    }
    pthread_mutex_lock(&reg_mutex);
    configure();
    /* A job tcgpud knew once, or that found it away, keeps asking while
     * tcgpud is away; one refused or without a tcgpud runs without policy:
     * OOM is OOM. */
    policy = ensure_registered() || dc.ever_registered || dc.away;
    pthread_mutex_unlock(&reg_mutex);
    if (!policy)
        return 0;
    /* Leave the gate while tcgpud works: it may suspend this very job (if
     * it chose us as a victim just before our request arrived), and that
     * needs every thread outside. On the way back in we park until resumed. */
    if (tcgpu_gate_depth() == 1) {
        tcgpu_gate_leave();
        left_gate = 1;
    }
    r = ask_until_answered(device, bytes, used);
    if (left_gate)
        tcgpu_gate_enter("cuMemAlloc (after tcgpud)");
    return r;
}
