/*
 * daemon.h - what the files of tcgpud's event loop share: its state (the
 * connections, the jobs, the event ring, the counters) in `d`, defined in
 * daemon.c with the lookups every file makes in it.
 *
 * The files stand in floors, each calling only the floors under it:
 *
 *   main.c      start-up, re-learning the state file's jobs, the tick, the
 *               event loop and what it hands finished work to
 *   dashboard.c the dashboard's state (/api/state) and its memory history
 *   commands.c  the requests: a handler each, and the table that dispatches them
 *   save.c      save and restore of a user's own process trees, by gpuckpt as root
 *   jobs.c      jobs: carrying out the policy's actions, status polls,
 *               finished operations, the state file
 *   conns.c     connections: the socket, who may hold how many, replies,
 *               refusals, events pushed to followers
 *   devices.c   the GPUs, learnt from the configuration and the driver; a
 *               job's by its UUID
 *   metrics.c   latency histograms, counters, the Prometheus exposition (the
 *               node_exporter textfile and /metrics)
 *   daemon.c    the state and its lookups (this header)
 *   http.c      the HTTP endpoint (libmicrohttpd), on its own thread: it
 *               serves what the loop publishes and touches nothing else
 *   work.c, config.c, state.c   the workers (tcgpud.h), the configuration,
 *               the state file: they know nothing of the loop
 *
 * All of it runs on the loop's one thread; the workers (work.c, tcgpud.h)
 * touch none of it. Each file's header says what it offers.
 */
#ifndef TCGPU_TCGPUD_DAEMON_H
#define TCGPU_TCGPUD_DAEMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "policy/policy.h"
#include "tcgpu.h"
#include "config.h"

/*
 * Connections (docs/tcgpud.md, "Threat model"): the table is shared by
 * everyone who can connect, so no one user may fill it. A connection is
 * classed when it is accepted, by its peer credentials: root's; a
 * registered job's own (its peer pid is the job); anyone else's. Other
 * users' connections never take the last CONNS_RESERVED slots, and each
 * uid holds at most [daemon] max_connections_per_user of them (of which
 * FOLLOWERS_PER_USER follow events) plus JOB_CONNS_PER_USER from its jobs.
 */
#define MAX_CONNS        1024
#define CONNS_RESERVED   256      /* for root and the jobs' own requests */
#define CONNS_PER_JOB    4        /* a job talks over one at a time; a few for overlap */
#define JOB_CONNS_PER_USER 64
#define FOLLOWERS_PER_USER 4
#define ACCEPTS_PER_ROUND 64      /* then the loop serves the others before accepting more */
#define EVENTS_MAX       1024
#define EVENT_LEN        768
#define LATENCY_BUCKETS  15      /* metrics.c's bucket bounds, +Inf last */
#define MiB              (1ull << 20)

enum conn_kind { C_FREE = 0, C_READ, C_REQUEST, C_OP, C_FOLLOW };

/* Whose a connection is, for the limits above. */
enum conn_class { CLASS_USER = 0, CLASS_ROOT, CLASS_JOB };

struct conn {
    enum conn_kind kind;
    enum conn_class cls;
    int fd;
    struct ucred peer;
    uint64_t opened_ns;
    uint64_t deadline_ns;         /* C_READ: request by then; C_REQUEST waiting: give up then */
    pid_t job;                    /* C_REQUEST/C_OP: the job it is about */
};

struct djob {
    pid_t pid;
    uint64_t start_ticks;
    uid_t uid;
    char user[64];
    int project;
    int busy;                     /* a worker is suspending or resuming it */
    int waiter;                   /* conn waiting for a manual operation, -1 */
    int waiter_suspends;          /* that operation is a suspend */
    int undo_suspend;             /* resume it once its suspend is done: the asker left, or
                                     another task of its gang did not suspend */
    char undo_why[96];            /* which, for the log */
    /* the manual operation's own result, held until every task of its gang
     * has settled (the asker hears about the job, not about one task) */
    int result_ready, result_err;
    char result_msg[512];
    struct tcgpu_status result_st;
    int gang_err;                 /* a task of the gang failed the manual suspend: -errno, 0 */
    char gang_msg[768];           /* which task, and why */
    uint64_t op_t0;
    /* the memory request in flight, if any */
    int req_conn;                 /* -1: none */
    uint64_t req_bytes, req_used, req_free;
    int req_device;
    uint64_t req_wait_ms;
    uint64_t req_gen;             /* decide after this poll generation; 0: decided */
    uint64_t req_t0;
    /* a task of a gang: the job it is part of (`job=` at registration) */
    char job_name[64];            /* "" : a job of its own */
    uint64_t gang;                /* the policy's gang id, 0: none */
};

/* A GPU as the driver showed it (devices.c). */
struct tcgpud_gpu {
    int index;                    /* the node's ordinal, every GPU visible */
    uint64_t total;               /* its memory */
    uint8_t uuid[16];
};

/* A latency histogram (Prometheus buckets: cumulative when written). */
struct latency {
    uint64_t bucket[LATENCY_BUCKETS];   /* observations <= bound k (not cumulative here) */
    double sum;
    uint64_t count;
};

/* The loop's state. */
struct daemon {
    struct tcgpud_config cfg;
    struct policy *pol;
    struct djob *jobs;
    size_t njobs, cap;
    struct tcgpud_gpu gpus[TCGPUD_MAX_GPUS];
    int nprobed;                  /* GPUs the driver showed (0: it could not be asked) */
    struct conn conns[MAX_CONNS];
    int listen_fd, sig_fd;
    int stop;
    int relearning;               /* the state file's jobs are being asked (main.c) */
    int dirty;                    /* the state file is behind */
    uint64_t poll_started, poll_done;     /* generations */
    int poll_in_flight;
    char events[EVENTS_MAX][EVENT_LEN];
    uint64_t event_seq;
    uint64_t preemptions_total, refused_total;
    uint64_t last_gang;           /* gang ids given out */
    struct latency suspend_lat, resume_lat, grant_wait;
    uint64_t events_by_type[32];  /* metrics.c's event types */
    uint64_t start_ns;
};

extern struct daemon d;
/* The policy's actions being collected, for do_actions(). */
extern struct pol_actions acts;

/* The job registered with this pid, or NULL. */
struct djob *job_of(pid_t pid);
/* Project idx's name as configured, "?" for none. */
const char *project_name(int idx);
/* A job's state as ps, the metrics and the dashboard show it: the policy's,
 * and "waiting" for a running job whose memory request waits. */
const char *display_state(const struct pol_job *pj);

#endif
