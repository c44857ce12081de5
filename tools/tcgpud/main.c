/*
 * tcgpud - the node's GPU policy daemon: priorities, reservations,
 * borrowing, preemption by transparent suspend, automatic resume.
 *
 *   tcgpud [--config FILE] [--socket PATH] [--state FILE]
 *
 * Foreground, logs to stderr. Decisions come from lib/policy (policy.h); tcgpud
 * carries them out by talking to each job's control socket (suspend,
 * resume, status), persists its jobs to a state file, and re-learns them
 * from it and from the jobs themselves when it starts again.
 * docs/tcgpud.md describes the protocol, the policy and the security model.
 *
 * This file: start-up, re-learning the state file's jobs, the tick and the
 * event loop; daemon.h says how the others stand under it.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "ctl/client.h"
#include "common/clock.h"
#include "common/log.h"
#include "commands.h"
#include "conns.h"
#include "daemon.h"
#include "dashboard.h"
#include "devices.h"
#include "http.h"
#include "jobs.h"
#include "metrics.h"
#include "state.h"

#define TICK_MS          500

/* ---------------------------------------------------------------------------
 * Tick
 * ------------------------------------------------------------------------- */

static void check_deaths(void)
{
    for (size_t i = 0; i < d.njobs;) {
        struct djob *j = &d.jobs[i];
        if (tcgpud_proc_start_ticks(j->pid) != j->start_ticks) {
            job_gone(j, "exited");
            continue;
        }
        i++;
    }
}

static void check_deadlines(void)
{
    uint64_t now = now_ns();

    for (int ci = 0; ci < MAX_CONNS; ci++) {
        struct conn *c = &d.conns[ci];
        if (c->kind == C_READ && now > c->deadline_ns) {
            conn_close(ci);
        } else if (c->kind == C_REQUEST && c->deadline_ns && now > c->deadline_ns) {
            struct djob *j = job_of(c->job);
            const struct pol_job *pj = j ? policy_job(d.pol, (uint64_t)j->pid) : NULL;
            /* only a request still waiting for room times out; one whose
             * victims are being suspended gets its answer from their acks */
            if (pj && pj->req == POL_REQ_PREEMPTING)
                continue;
            if (j && policy_request_cancel(d.pol, (uint64_t)j->pid, now, &acts) == 0)
                do_actions(&acts);
            else if (d.conns[ci].kind != C_FREE)
                reply_error(ci, -ENOMEM, "no room within the wait timeout");
        }
    }
}

static void tick(void)
{
    check_deaths();
    check_deadlines();
    if (!d.relearning) {          /* nobody is resumed before every job is known */
        if (policy_tick(d.pol, now_ns(), &acts) == 0)
            do_actions(&acts);
        else
            pol_actions_clear(&acts);
    }
    kick_poll();
    publish_metrics();
    dashboard_tick();
}

/* ---------------------------------------------------------------------------
 * Start-up: configuration, policy, re-learning jobs
 * ------------------------------------------------------------------------- */

/* What the projects reserve fits every GPU as tcgpud found it. 0 or -EINVAL (logged). */
static int reservations_fit(void)
{
    for (int dev = 0; dev < policy_device_count(d.pol); dev++) {
        uint64_t sum = 0, cap = policy_device_capacity(d.pol, dev);
        for (int k = 0; k < d.cfg.nprojects; k++)
            sum += pol_project_reserved(&d.cfg.projects[k].pol, dev);
        if (cap && sum > cap) {
            log_info("the projects reserve %llu MiB on GPU %d, more than its %llu MiB: fix %s",
                     (unsigned long long)(sum / MiB), dev, (unsigned long long)(cap / MiB),
                     d.cfg.path);
            return -EINVAL;
        }
    }
    return 0;
}

static int build_policy(void)
{
    struct pol_config pc = { .min_runtime_ns = d.cfg.min_runtime_ns,
                             .resume_retry_ns = d.cfg.resume_retry_ns,
                             .backfill = d.cfg.backfill };

    d.pol = policy_new(&pc);
    if (!d.pol)
        return -ENOMEM;
    for (int i = 0; i < d.cfg.nprojects; i++)
        if (policy_add_project(d.pol, &d.cfg.projects[i].pol) < 0)
            return -EINVAL;
    if (learn_devices() < 0)
        return -EINVAL;
    return reservations_fit();
}

/*
 * What the job is now, from its answer (r: 0, or the -errno of asking it),
 * and as it was saved. The job's word wins; a job that does not settle in
 * time (busy with a long operation, or not answering) is taken as it was
 * saved: tcgpud saved it as suspending before it asked it to suspend.
 */
static void relearnt_state(const struct tcgpud_saved_job *s, int r, const struct tcgpu_status *st,
                           struct pol_job_spec *spec)
{
    int saved_off = strcmp(s->state, "running") != 0;     /* suspending, suspended, resuming */
    int suspended = r == 0 ? st->state == TCGPU_STATE_SUSPENDED || st->state == TCGPU_STATE_SUSPENDING
                           : saved_off;

    if (!suspended) {
        spec->state = POL_RUNNING;
        spec->mem = r == 0 ? st->gpu_bytes : s->mem;
        return;
    }
    spec->state = POL_SUSPENDED;
    spec->mem = s->mem ? s->mem : st->tracked_bytes;
    /* Saved as running but suspended now: someone did it by hand meanwhile
     * (tcgpud saves a job as suspending before it asks it to suspend). */
    spec->suspended_by = saved_off ? (enum pol_by)pol_by_parse(s->suspended_by) : POL_BY_MANUAL;
    if ((int)spec->suspended_by <= 0)
        spec->suspended_by = POL_BY_MANUAL;
    spec->auto_resume = s->auto_resume;
}

/* A monotonic time of this boot that the state file gave (0: none). */
static int known(uint64_t t)
{
    return t && t <= now_ns();
}

/*
 * The time to admit a re-learnt job at: the policy takes it as the job's
 * last start or resume (running), or as its suspension (suspended), so that
 * its age, its place in the queue and its hold-off survive the restart.
 * spec->run_ns becomes its run time up to that point.
 */
static uint64_t relearnt_since(const struct tcgpud_saved_job *s, struct pol_job_spec *spec)
{
    uint64_t now = now_ns();
    int was_on = !strcmp(s->state, "running") || !strcmp(s->state, "suspending");

    spec->run_ns = s->run_ns;
    if (!known(s->since_ns))
        return now;                           /* an older file: run_ns is all of it */
    if (spec->state == POL_RUNNING)           /* on all along, or resumed while away */
        return was_on ? s->since_ns : now;
    if (known(s->queued_ns) && !was_on)       /* suspended all along */
        return s->queued_ns;
    /* it stopped running while tcgpud was away: held off from now */
    if (was_on)
        spec->run_ns = s->run_ns + (now - s->since_ns);
    return now;
}

/* The job's GPU by the UUID saved with it: the driver may number the GPUs
 * otherwise since (a reload, a GPU gone); the saved number when it does not
 * show that UUID, or the file has none. */
static int relearnt_device(const struct tcgpud_saved_job *s)
{
    int idx = s->uuid[0] ? device_of_uuid_text(s->uuid) : -ENODEV;

    if (idx < 0 || idx == s->device)
        return s->device;
    log_info("pid %d: its GPU %s is GPU %d now (was %d)", (int)s->pid, s->uuid, idx, s->device);
    return idx;
}

static void relearn_one(const struct tcgpud_saved_job *s, const struct poll_item *it)
{
    struct pol_job_spec spec = { .id = (uint64_t)s->pid, .priority = s->priority,
                                 .device = s->device, .limit = s->limit,
                                 .compute = s->compute <= POL_COMPUTE_FULL ? s->compute : 0,
                                 .preemptions = s->preemptions, .run_ns = s->run_ns };
    struct djob *j;
    int proj = policy_project_find(d.pol, s->project), r = it->err;

    if (tcgpud_proc_start_ticks(s->pid) != s->start_ticks) {
        log_info("pid %d (project %s) ended while tcgpud was away", (int)s->pid, s->project);
        return;
    }
    if (proj < 0) {
        log_info("pid %d: project %s is no longer configured; not managing it", (int)s->pid, s->project);
        return;
    }
    spec.device = relearnt_device(s);
    if (spec.device < 0 || policy_device_capacity(d.pol, spec.device) == 0) {
        log_info("pid %d: tcgpud no longer manages its GPU %d; not managing it", (int)s->pid, spec.device);
        return;
    }
    if (r < 0 && r != -ETIMEDOUT) {
        log_info("pid %d: cannot ask it its state (%s); not managing it", (int)s->pid, strerror(-r));
        return;
    }
    if (r < 0)
        log_info("pid %d did not settle in time; taking it as it was saved (%s)", (int)s->pid,
                 s->state);
    spec.project = proj;
    spec.gang = s->job[0] ? gang_for(s->uid, s->job) : 0;
    relearnt_state(s, r, &it->st, &spec);
    if (policy_admit(d.pol, &spec, relearnt_since(s, &spec)) < 0 ||
        !(j = add_job(s->pid, s->uid, s->user, proj, s->start_ticks))) {
        log_info("pid %d: cannot re-admit it", (int)s->pid);
        return;
    }
    snprintf(j->job_name, sizeof(j->job_name), "%s", s->job);
    j->gang = spec.gang;
    log_info("pid %d re-learnt: project %s, %s%s", (int)s->pid, s->project, pol_state_name(spec.state),
             spec.state == POL_SUSPENDED ? (spec.suspended_by == POL_BY_MANUAL ? " (by hand)" : " (by policy)") : "");
    event("relearnt", s->pid, "state", pol_state_name(spec.state), NULL);
}

/* The state file's jobs, while their statuses are asked (WORK_RELEARN). */
static struct tcgpud_saved_job *saved;
static size_t nsaved;

/* The answers of the state file's jobs are in: admit those still there. */
static void relearn_done(struct work *w)
{
    size_t n = 0;

    for (size_t i = 0; i < nsaved && i < w->n; i++) {
        relearn_one(&saved[i], &w->items[i]);
        n += job_of(saved[i].pid) != NULL;
    }
    log_info("re-learnt %zu of the %zu jobs in %s in %.0f ms", n, nsaved, d.cfg.state_file,
             (double)w->ns / 1e6);
    free(saved);
    saved = NULL;
    nsaved = 0;
    d.relearning = 0;
    d.dirty = 1;
}

/*
 * Ask the jobs of the state file how they are, all at once and without
 * holding up the loop: a restarted tcgpud serves ps and registrations at
 * once, and decides nothing (requests are asked to come back, nobody is
 * resumed) until it knows where each of its jobs stands.
 */
static void relearn(void)
{
    struct work *w;
    char err[512];

    if (tcgpud_state_load(d.cfg.state_file, &saved, &nsaved, err, sizeof(err)) < 0) {
        log_info("%s: starting without the jobs it held", err);
        return;
    }
    if (!nsaved)
        return;
    w = calloc(1, sizeof(*w));
    if (w)
        w->items = calloc(nsaved, sizeof(*w->items));
    if (!w || !w->items) {
        free(w);
        log_info("out of memory re-learning %zu jobs", nsaved);
        return;
    }
    for (size_t i = 0; i < nsaved; i++)
        w->items[i].pid = saved[i].pid;
    w->kind = WORK_RELEARN;
    w->n = nsaved;
    d.relearning = 1;
    if (tcgpud_work_start(w) < 0) {
        for (size_t i = 0; i < nsaved; i++)
            w->items[i].err = -ETIMEDOUT;   /* as saved */
        relearn_done(w);
        tcgpud_work_free(w);
    }
}

/* ---------------------------------------------------------------------------
 * Finished work
 * ------------------------------------------------------------------------- */

/* Hand each piece of finished work to what waits for it. */
static void take_work(void)
{
    struct work *w = tcgpud_work_take();

    while (w) {
        struct work *next = w->next;
        if (w->kind == WORK_POLL)
            poll_done(w);
        else if (w->kind == WORK_RELEARN)
            relearn_done(w);
        else
            op_done(w);
        tcgpud_work_free(w);
        w = next;
    }
}

/* ---------------------------------------------------------------------------
 * Main
 * ------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: tcgpud [--config FILE] [--socket PATH] [--state FILE]\n"
               "       tcgpud --check-config FILE\n"
               "       tcgpud --version\n"
               "\n"
               "The GPU policy daemon: priorities, reservations, borrowing, preemption by\n"
               "transparent suspend, automatic resume. Runs in the foreground, logs to stderr.\n"
               "Must run as root (or as the jobs' own user on a single-user machine): it\n"
               "suspends and resumes jobs through their control sockets.\n"
               "\n"
               "  -c, --config FILE   configuration (default " TCGPUD_DEFAULT_CONFIG ", which may be\n"
               "                      absent: then the defaults, no projects; docs/tcgpud.md)\n"
               "  -s, --socket PATH   override [daemon] socket\n"
               "  -S, --state FILE    override [daemon] state_file\n"
               "  --check-config FILE check FILE and exit: every error (exit 1), and warnings for\n"
               "                      members, @groups and admins that do not exist here\n");
}

/* Each line of a multi-line message, "tcgpud: " first. */
static void print_lines(FILE *f, const char *text)
{
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        fprintf(f, "tcgpud: %.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    }
}

static void print_warning(const char *msg, void *arg)
{
    (void)arg;
    fprintf(stderr, "tcgpud: %s\n", msg);
}

/* tcgpud --check-config FILE: as nginx -t. Returns the exit code. */
static int check_config(const char *path)
{
    struct tcgpud_config c;
    static char err[TCGPUD_CONFIG_ERR_MAX + 64];
    int r = tcgpud_config_load(&c, path, err, sizeof(err)), warnings;

    if (r < 0) {
        print_lines(stderr, err);
        warnings = r == -EINVAL ? tcgpud_config_warnings(&c, print_warning, NULL) : 0;
        fprintf(stderr, "tcgpud: configuration %s: %d error%s, %d warning%s\n", path,
                c.nerrors ? c.nerrors : 1, c.nerrors == 1 || !c.nerrors ? "" : "s", warnings,
                warnings == 1 ? "" : "s");
        tcgpud_config_free(&c);
        return 1;
    }
    warnings = tcgpud_config_warnings(&c, print_warning, NULL);
    printf("tcgpud: configuration %s is valid: %d project%s, %d GPU%s configured, %d warning%s\n", path,
           c.nprojects, c.nprojects == 1 ? "" : "s", c.ngpus, c.ngpus == 1 ? "" : "s", warnings,
           warnings == 1 ? "" : "s");
    tcgpud_config_free(&c);
    return 0;
}

static int parse_args(int argc, char **argv, const char **config, const char **sock,
                      const char **state)
{
    enum { OPT_CHECK_CONFIG = 1000 };
    static const struct option longopts[] = {
        { "check-config", required_argument, NULL, OPT_CHECK_CONFIG },
        { "config", required_argument, NULL, 'c' },
        { "socket", required_argument, NULL, 's' },
        { "state", required_argument, NULL, 'S' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { 0 },
    };
    int ch;

    while ((ch = getopt_long(argc, argv, "c:s:S:hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c': *config = optarg; break;
        case 's': *sock = optarg; break;
        case 'S': *state = optarg; break;
        case 'h': usage(stdout); exit(0);
        case 'V': printf("tcgpud %s\n", TCGPU_VERSION_STRING); exit(0);
        case OPT_CHECK_CONFIG: exit(check_config(optarg));
        default: usage(stderr); return -1;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return -1;
    }
    return 0;
}

/* Room for a full connection table and the workers' sockets. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    rlim_t want = MAX_CONNS + 256;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < want)
        log_info("open files limited to %llu (want %llu): fewer connections can be served",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)want);
}

/* The HTTP endpoint, when [daemon] http is set; its first contents at once. */
static int start_http(void)
{
    char err[512];
    int port;

    if (!d.cfg.http_host[0])
        return 0;
    if (http_start(d.cfg.http_host, d.cfg.http_port, d.cfg.dashboard, &port, err, sizeof(err)) < 0) {
        log_info("%s", err);
        return -1;
    }
    publish_metrics();
    dashboard_tick();
    log_info("http: serving /metrics%s on http://%s%s%s:%d/", d.cfg.dashboard ? " and the dashboard" : "",
             strchr(d.cfg.http_host, ':') ? "[" : "", d.cfg.http_host,
             strchr(d.cfg.http_host, ':') ? "]" : "", port);
    return 0;
}

/* The configuration: --config's file, which must be there, else the default
 * one, or the defaults when there is none (the unit runs tcgpud so). Its
 * warnings go to the log, as --check-config prints them. 0 or -1. */
static int load_config(const char *given)
{
    static char err[TCGPUD_CONFIG_ERR_MAX + 64];
    const char *path = given ? given : TCGPUD_DEFAULT_CONFIG;
    int r = tcgpud_config_load(&d.cfg, path, err, sizeof(err));

    if (r == -ENOENT && !given) {
        log_info("no %s: running with the defaults (no projects: jobs run without policy; "
                 "tcgpud.ini(5), docs/tcgpud.md)", path);
        return 0;
    }
    if (r < 0) {
        print_lines(stderr, err);
        return -1;
    }
    tcgpud_config_warnings(&d.cfg, print_warning, NULL);
    return 0;
}

static int setup(int argc, char **argv)
{
    const char *config = NULL, *sock = NULL, *state = NULL;
    sigset_t mask;

    if (parse_args(argc, argv, &config, &sock, &state) < 0)
        return 2;
    if (load_config(config) < 0)
        return 1;
    if (sock)
        snprintf(d.cfg.socket, sizeof(d.cfg.socket), "%s", sock);
    if (state)
        snprintf(d.cfg.state_file, sizeof(d.cfg.state_file), "%s", state);
    if (build_policy() < 0) {
        fprintf(stderr, "tcgpud: cannot build the policy from %s\n", d.cfg.path);
        return 1;
    }
    raise_fd_limit();
    if (geteuid() != 0)
        log_info("not running as root: only jobs of uid %u can be suspended and resumed",
                 (unsigned)geteuid());
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    d.sig_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (d.sig_fd < 0 || tcgpud_work_init() < 0) {
        fprintf(stderr, "tcgpud: signalfd/eventfd: %s\n", strerror(errno));
        return 1;
    }
    d.start_ns = now_ns();
    relearn();
    d.listen_fd = open_socket(d.cfg.socket);
    if (d.listen_fd < 0)
        return 1;
    if (start_http() < 0)
        return 1;
    log_info("serving %s (config %s, state %s, %d projects, min runtime %.1f s)", d.cfg.socket,
             d.cfg.path, d.cfg.state_file, d.cfg.nprojects, (double)d.cfg.min_runtime_ns / 1e9);
    return 0;
}

static void loop(void)
{
    struct pollfd p[3 + MAX_CONNS];
    int idx[MAX_CONNS];
    uint64_t next_tick = now_ns();

    while (!d.stop) {
        int n = 3, wait;
        p[0] = (struct pollfd){ .fd = d.listen_fd, .events = POLLIN };
        p[1] = (struct pollfd){ .fd = tcgpud_work_fd(), .events = POLLIN };
        p[2] = (struct pollfd){ .fd = d.sig_fd, .events = POLLIN };
        for (int ci = 0; ci < MAX_CONNS; ci++) {
            if (d.conns[ci].kind == C_FREE)
                continue;
            idx[n - 3] = ci;
            p[n++] = (struct pollfd){ .fd = d.conns[ci].fd, .events = POLLIN };
        }
        uint64_t now = now_ns();
        wait = now >= next_tick ? 0 : (int)((next_tick - now) / 1000000u) + 1;
        if (poll(p, (nfds_t)n, wait) < 0 && errno != EINTR) {
            log_info("poll: %s", strerror(errno));
            break;
        }
        if (p[2].revents) {
            struct signalfd_siginfo si;
            if (read(d.sig_fd, &si, sizeof(si)) > 0)
                log_info("signal %u: stopping (jobs keep running)", si.ssi_signo);
            d.stop = 1;
        }
        if (p[1].revents)
            take_work();
        for (int k = 3; k < n; k++) {
            int ci = idx[k - 3];
            if (!p[k].revents || d.conns[ci].kind == C_FREE || d.conns[ci].fd != p[k].fd)
                continue;
            if (d.conns[ci].kind == C_READ) {
                const struct ctl_msg *m = read_request(ci);
                if (m)
                    handle(ci, m);
            } else
                peer_gone(ci);    /* waiting clients send nothing more: readable means gone */
        }
        if (p[0].revents)
            accept_all();
        if (now_ns() >= next_tick) {
            tick();
            next_tick = now_ns() + TICK_MS * 1000000ull;
        }
        if (d.dirty)
            save_state();
    }
}

int main(int argc, char **argv)
{
    int r;

    tcgpu_log_setup(&(struct tcgpu_log_style){ .name = "tcgpud", .flags = TCGPU_LOG_CLOCK,
                                              .level = TCGPU_LOG_INFO });
    r = setup(argc, argv);
    if (r)
        return r;
    loop();
    http_stop();
    save_state();
    unlink(d.cfg.socket);
    for (int ci = 0; ci < MAX_CONNS; ci++)
        conn_close(ci);
    pol_actions_free(&acts);
    policy_free(d.pol);
    free(d.jobs);
    tcgpud_config_free(&d.cfg);
    return 0;
}
