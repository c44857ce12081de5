/*
 * daemon.h - what the files of tcgpud's event loop share: its state (the
 * connections, the jobs, the event ring, the counters) and the functions one
 * of them calls in another.
 *
 *   main.c      start-up, the tick, the event loop
 *   conns.c     connections: the socket, who may hold how many, replies,
 *               events pushed to followers
 *   devices.c   the GPUs, learnt from the configuration and the driver; a
 *               job's by its UUID
 *   jobs.c      jobs: carrying out the policy's actions, status polls,
 *               finished operations, the state file
 *   commands.c  the requests: a handler each, and the table that dispatches them
 *   metrics.c   latency histograms, counters, the Prometheus exposition (the
 *               node_exporter textfile and /metrics)
 *   dashboard.c the dashboard's state (/api/state) and its memory history
 *   http.c      the HTTP endpoint (libmicrohttpd), on its own thread: it
 *               serves what the loop publishes and touches nothing else
 *   save.c      save and restore of a user's own process trees, by gpuckpt as root
 *
 * All of it runs on the loop's one thread; the workers (work.c, tcgpud.h)
 * touch none of it.
 */
#ifndef TCGPU_TCGPUD_DAEMON_H
#define TCGPU_TCGPUD_DAEMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "ctl/proto.h"
#include "policy/policy.h"
#include "config.h"
#include "tcgpud.h"

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
    uint64_t op_t0;
    /* the memory request in flight, if any */
    int req_conn;                 /* -1: none */
    uint64_t req_bytes, req_used, req_free;
    int req_device, req_over_limit;
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

/* main.c */
/* The answers of the state file's jobs are in: admit those still there. */
void relearn_done(struct work *w);

/*
 * Log a refusal of uid's (the message from fmt), at most once a second per
 * uid: returns how many of its refusals were held back before this one
 * (and counted in the line), or -1 when this one is held back.
 */
long note_refusal(uid_t uid, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* conns.c */
void send_msg(int ci, const struct ctl_buf *b);
void conn_close(int ci);
/* Reply an error to connection ci and close it. */
void reply_error(int ci, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void event(const char *type, pid_t pid, ...);
/* Values for event(), formatted into buf (24 bytes). */
const char *u64s(uint64_t v, char *buf);
const char *i64s(int64_t v, char *buf);
const char *msecs(uint64_t ns, char *buf);
/* The listening socket at path, or -errno (logged). */
int open_socket(const char *path);
/* Accept what waits on the socket, within the limits of who may hold how many. */
void accept_all(void);
/* Connections of uid that follow events. */
int followers_of(uid_t uid);
void read_request(int ci);
void peer_gone(int ci);

/* jobs.c */
struct djob *job_of(pid_t pid);
const char *project_name(int idx);
struct djob *add_job(pid_t pid, uid_t uid, const char *user, int project, uint64_t start);
/* The gang of job `name` of user uid: its tasks' id, or a new one. */
uint64_t gang_for(uid_t uid, const char *name);
void job_gone(struct djob *j, const char *how);
void start_op(struct djob *j, enum work_kind kind, const char *dir);
void do_actions(struct pol_actions *a);
void kick_poll(void);
void take_work(void);
const char *display_state(const struct pol_job *pj);
void save_state(void);

/* devices.c */
/*
 * Put the GPUs tcgpud manages into the policy: [gpu N] capacity where
 * configured (at most the device's memory), else the device's memory as the
 * driver reports it to a child process. Returns how many, or -EINVAL.
 */
int learn_devices(void);
/*
 * The GPU a job's message names: uuid= (the device's UUID, 32 hex digits:
 * a job's ordinals are remapped by CUDA_VISIBLE_DEVICES) when tcgpud knows
 * the UUIDs, else device= (default 0). 0 with *dev, or -EINVAL (malformed),
 * -ENODEV (not a GPU tcgpud manages), with why.
 */
int job_device(const struct ctl_msg *m, int *dev, char *why, size_t len);
/* GPU idx's UUID as nvidia-smi writes it ("GPU-xxxxxxxx-xxxx-..."), for ps
 * and the state file; "" when the driver did not show tcgpud that GPU. */
#define DEVICE_UUID_TEXT_LEN 41
void device_uuid_text(int idx, char out[DEVICE_UUID_TEXT_LEN]);
/* The GPU whose UUID text that is, or -ENODEV. */
int device_of_uuid_text(const char *text);

/* commands.c: answer the request m on connection ci. */
void handle(int ci, const struct ctl_msg *m);
/* Refuse `what` to the peer of ci (EACCES), logged, counted and recorded as an event. */
void refuse(int ci, const char *what, const char *why);

/* save.c: the requests save and restore (the job argument is unused). */
void priv_save(int ci, const struct ctl_msg *m, struct djob *unused);
void priv_restore(int ci, const struct ctl_msg *m, struct djob *unused);

/* commands.c: a "job" message of ps, as ps and the dashboard show a job */
void put_job(struct ctl_buf *b, const struct djob *j, const struct pol_job *pj, uint64_t now);

/* metrics.c */
void latency_add(struct latency *l, double secs);
/* Counts an event of this type (event() calls it). */
void metrics_count_event(const char *type);
/* The Prometheus exposition of everything now (docs/tcgpud.md, "Metrics"):
 * a new string the caller frees, its length in *len; NULL without memory. */
char *metrics_text(size_t *len);
/* Every tick: the textfile, if configured, and the HTTP endpoint's copy. */
void publish_metrics(void);

/* dashboard.c */
/* Every tick: one sample of the memory history, the state for /api/state. */
void dashboard_tick(void);

#endif
