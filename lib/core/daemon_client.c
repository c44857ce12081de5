/*
 * daemon_client.c - the job's side of tcgpud, inside libtcgpu.so; see
 * daemon_client.h.
 *
 * The job registers once (at cuInit) and then only talks to tcgpud when an
 * allocation does not fit: the fast path of an allocation is one relaxed
 * load of the limit. Each talk is its own connection, so a tcgpud that
 * restarts in between costs nothing; one that forgot the job (restarted
 * without its state file) answers ENOENT and the job registers again.
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
#include "driver/driver.h"
#include "driver/gate.h"
#include "common/log.h"
#include "common/units.h"
#include "common/clock.h"
#include "ctl/daemon_io.h"

#define REGISTER_TIMEOUT_MS   5000
#define DEFAULT_TIMEOUT_MS    120000
#define REREGISTER_EVERY_NS   5000000000ull

static _Atomic uint64_t job_limit;            /* bytes; 0: none */
static pthread_mutex_t reg_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int configured;                           /* environment read */
    int registered;
    int may_borrow;
    char project[64];
    char priority[32];
    uint64_t gpu_mem;                         /* TCGPU_GPU_MEM, 0: not given */
    uint64_t wait_ms;                         /* TCGPU_WAIT_TIMEOUT */
    int timeout_ms;                           /* TCGPU_DAEMON_TIMEOUT */
    uint64_t last_try_ns;
    int warned;
} dc;

uint64_t tcgpu_daemon_limit(void)
{
    return atomic_load_explicit(&job_limit, memory_order_relaxed);
}

/* Read the environment once. Lock held. */
static void configure(void)
{
    const char *p = getenv("TCGPU_PROJECT");
    const char *prio = getenv("TCGPU_PRIORITY");
    const char *mem = getenv("TCGPU_GPU_MEM");
    const char *wait = getenv("TCGPU_WAIT_TIMEOUT");
    const char *to = getenv("TCGPU_DAEMON_TIMEOUT");
    uint64_t v;

    if (dc.configured)
        return;
    dc.configured = 1;
    dc.timeout_ms = DEFAULT_TIMEOUT_MS;
    if (p && *p)
        snprintf(dc.project, sizeof(dc.project), "%s", p);
    if (prio && *prio)
        snprintf(dc.priority, sizeof(dc.priority), "%s", prio);
    if (mem && *mem) {
        if (units_parse_size(mem, &dc.gpu_mem) < 0 || dc.gpu_mem == 0) {
            log_err("TCGPU_GPU_MEM=%s is not a size (e.g. 8G); no memory limit", mem);
            dc.gpu_mem = 0;
        }
        atomic_store(&job_limit, dc.gpu_mem);
    }
    if (wait && *wait) {
        if (units_parse_duration(wait, &v) < 0)
            log_err("TCGPU_WAIT_TIMEOUT=%s is not a duration (e.g. 60s); not waiting", wait);
        else
            dc.wait_ms = v / 1000000;
    }
    if (to && *to) {
        if (units_parse_duration(to, &v) < 0 || v / 1000000 > 86400000)
            log_err("TCGPU_DAEMON_TIMEOUT=%s is not a duration; using 120s", to);
        else
            dc.timeout_ms = (int)(v / 1000000);
    }
}

/* One request/reply with tcgpud. Returns 0 with *reply filled (check ->err), or -errno. */
static int call_daemon(struct ctl_buf *req, struct ctl_msg *reply, int timeout_ms, char *err,
                       size_t errlen)
{
    int fd = tcgpud_connect(tcgpud_socket_path(), err, errlen);
    int r;

    if (fd < 0)
        return fd;
    r = tcgpud_call(fd, req, reply, timeout_ms, NULL, NULL);
    close(fd);
    if (r < 0)
        snprintf(err, errlen, "tcgpud at %s: %s", tcgpud_socket_path(), strerror(-r));
    return r;
}

/*
 * The machine's number of the GPU a job calls `ordinal`, when the job can
 * tell: the ordinal itself when CUDA_VISIBLE_DEVICES is unset, the list's
 * entry when it is a plain index ("2,3"); -1 for a UUID or MIG entry.
 */
static int machine_index(int ordinal)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    char *end;
    long n;

    if (!v)
        return ordinal;
    for (int k = 0; k < ordinal && v; k++)
        if ((v = strchr(v, ',')))
            v++;
    if (!v)
        return -1;
    while (*v == ' ')
        v++;
    n = strtol(v, &end, 10);
    if (end == v || n < 0 || n > 4095 || (*end && *end != ',' && *end != ' '))
        return -1;
    return (int)n;
}

/*
 * The GPU of `ordinal` in a request: tcgpud accounts by its UUID (two jobs'
 * ordinal 0 under CUDA_VISIBLE_DEVICES may be two GPUs), with the machine's
 * number of it as a hint for tcgpud's numbering (docs/tcgpud.md, "GPUs").
 */
static void put_gpu(struct ctl_buf *req, int ordinal)
{
    CUuuid u;
    char text[CU_UUID_TEXT_LEN];
    int index = machine_index(ordinal);

    ctl_buf_put_u64(req, "device", (uint64_t)ordinal);
    if (TCGPU_REAL(cuDeviceGetUuid)(&u, ordinal) != CUDA_SUCCESS)
        return;
    cu_uuid_text(&u, text);
    ctl_buf_put(req, "uuid", text);
    if (index >= 0)
        ctl_buf_put_u64(req, "index", (uint64_t)index);
}

/* Register now. Lock held. Returns 0 or -errno (logged once). */
static int do_register(void)
{
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    char err[256];
    size_t total = 0;
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
    /* Device 0's size, so that tcgpud knows the capacity without CUDA of its own. */
    if (TCGPU_REAL(cuDeviceTotalMem)(&total, 0) == CUDA_SUCCESS)
        ctl_buf_put_u64(req, "total", total);
    put_gpu(req, 0);
    r = call_daemon(req, rep, REGISTER_TIMEOUT_MS, err, sizeof(err));
    if (r == 0 && rep->err) {
        r = rep->err;
        snprintf(err, sizeof(err), "tcgpud refused to register this job: %s: %s", rep->err_name,
                 rep->err_text);
    }
    if (r < 0) {
        if (!dc.warned++)
            log_err("%s; running without policy (project %s)", err, dc.project);
        goto out;
    }
    dc.registered = 1;
    dc.warned = 0;
    dc.may_borrow = ctl_get(rep, "may_borrow") && !strcmp(ctl_get(rep, "may_borrow"), "1");
    if (ctl_get_u64(rep, "limit", &limit) == 0)
        atomic_store(&job_limit, limit);
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
    if (dc.project[0] && !dc.registered && tcgpud_socket_path()[0])
        do_register();
    pthread_mutex_unlock(&reg_mutex);
}

/* Registered (or registered again, at most every 5 s). Lock held. */
static int ensure_registered(void)
{
    if (!dc.project[0] || !tcgpud_socket_path()[0])
        return 0;
    if (!dc.registered && now_ns() - dc.last_try_ns >= REREGISTER_EVERY_NS)
        do_register();
    return dc.registered;
}

/* The request itself; returns 1 (retry), 0 (fail), -ENOENT (tcgpud forgot us). */
static int ask(int device, uint64_t bytes, uint64_t used, int over_limit)
{
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    size_t freemem = 0, total = 0;
    uint64_t limit;
    char err[256];
    int r = 0;

    if (!req || !rep)
        goto out;
    ctl_buf_request(req, "request");
    put_gpu(req, device);
    ctl_buf_put_u64(req, "bytes", bytes);
    ctl_buf_put_u64(req, "used", used);
    if (TCGPU_REAL(cuMemGetInfo)(&freemem, &total) == CUDA_SUCCESS) {
        ctl_buf_put_u64(req, "free", freemem);
        ctl_buf_put_u64(req, "total", total);
    }
    if (over_limit)
        ctl_buf_put_u64(req, "over_limit", 1);
    if (dc.wait_ms)
        ctl_buf_put_u64(req, "wait_ms", dc.wait_ms);
    r = call_daemon(req, rep, dc.timeout_ms + (int)dc.wait_ms, err, sizeof(err));
    if (r < 0) {
        log_err("allocation of %llu MiB: %s; failing it", (unsigned long long)(bytes >> 20), err);
        r = 0;
        goto out;
    }
    if (rep->err == -ENOENT) {
        r = -ENOENT;
        goto out;
    }
    if (rep->err == -EAGAIN) {
        /* We are being suspended: give the suspend a moment to close the
         * gate, so that our retry parks there until the resume instead of
         * failing again at once. */
        usleep(200000);
        r = 1;
        goto out;
    }
    if (rep->err) {
        log_info("allocation of %llu MiB refused by tcgpud: %s", (unsigned long long)(bytes >> 20),
                 rep->err_text);
        r = 0;
        goto out;
    }
    if (ctl_get_u64(rep, "limit", &limit) == 0)
        atomic_store(&job_limit, limit);
    r = 1;
out:
    free(req);
    free(rep);
    return r;
}

int tcgpu_daemon_make_room(int device, uint64_t bytes, uint64_t used, int over_limit)
{
    int left_gate = 0, r;

    pthread_mutex_lock(&reg_mutex);
    configure();
    if (!ensure_registered() || (over_limit && !dc.may_borrow)) {
        pthread_mutex_unlock(&reg_mutex);
        return 0;                 /* no policy: the limit is hard, OOM is OOM */
    }
    pthread_mutex_unlock(&reg_mutex);
    /* Leave the gate while tcgpud works: it may suspend this very job (if
     * it chose us as a victim just before our request arrived), and that
     * needs every thread outside. On the way back in we park until resumed. */
    if (tcgpu_gate_depth() == 1) {
        tcgpu_gate_leave();
        left_gate = 1;
    }
    r = ask(device, bytes, used, over_limit);
    if (r == -ENOENT) {
        pthread_mutex_lock(&reg_mutex);
        dc.registered = 0;
        dc.last_try_ns = 0;
        int again = ensure_registered();
        pthread_mutex_unlock(&reg_mutex);
        r = again ? ask(device, bytes, used, over_limit) : 0;
        if (r < 0)
            r = 0;
    }
    if (left_gate)
        tcgpu_gate_enter("cuMemAlloc (after tcgpud)");
    return r;
}
