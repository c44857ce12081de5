/*
 * daemon.h - what the files of tcgpud's event loop share: its state (the
 * connections, the jobs, the event ring, the counters) and the functions one
 * of them calls in another.
 *
 *   main.c      start-up, the tick, the event loop
 *   conns.c     connections: the socket, replies, events pushed to followers
 *   jobs.c      jobs: carrying out the policy's actions, status polls,
 *               finished operations, the state file
 *   commands.c  the requests: a handler each, and the table that dispatches them
 *   gpus.c      the GPUs by UUID: the number each is accounted under
 *   metrics.c   latencies and the node_exporter textfile
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

#define MAX_CONNS        256
#define EVENTS_MAX       1024
#define EVENT_LEN        768
#define LATENCY_SAMPLES  256
#define MiB              (1ull << 20)

enum conn_kind { C_FREE = 0, C_READ, C_REQUEST, C_OP, C_FOLLOW };

struct conn {
    enum conn_kind kind;
    int fd;
    struct ucred peer;
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
};

struct latency {
    double v[LATENCY_SAMPLES];
    size_t n, next;
    double sum;
    uint64_t count;
};

/* The loop's state. */
struct daemon {
    struct tcgpud_config cfg;
    struct policy *pol;
    struct djob *jobs;
    size_t njobs, cap;
    struct conn conns[MAX_CONNS];
    int listen_fd, sig_fd;
    int stop;
    int dirty;                    /* the state file is behind */
    uint64_t poll_started, poll_done;     /* generations */
    int poll_in_flight;
    char events[EVENTS_MAX][EVENT_LEN];
    uint64_t event_seq;
    uint64_t preemptions_total, refused_total;
    struct latency suspend_lat, resume_lat;
    uint64_t start_ns;
};

extern struct daemon d;
/* The policy's actions being collected, for do_actions(). */
extern struct pol_actions acts;

/* main.c */
void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

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
void accept_all(void);
void read_request(int ci);
void peer_gone(int ci);

/* jobs.c */
struct djob *job_of(pid_t pid);
const char *project_name(int idx);
struct djob *add_job(pid_t pid, uid_t uid, const char *user, int project, uint64_t start);
void job_gone(struct djob *j, const char *how);
void learn_device(int dev, uint64_t reported);
void start_op(struct djob *j, enum work_kind kind, const char *dir);
void do_actions(struct pol_actions *a);
void kick_poll(void);
void take_work(void);
const char *display_state(const struct pol_job *pj);
void save_state(void);

/* gpus.c: GPUs by UUID (docs/tcgpud.md, "GPUs"). Main thread only. */
/* tcgpud's number of the GPU with this UUID ("GPU-..."), given one on first
 * sight: hint (the machine's number, -1: unknown) when free, else the lowest
 * free, else one no managed job is on. -EINVAL for a malformed UUID,
 * -ENOSPC when every number has a job on it. */
int gpu_number(const char *uuid, int hint);
/* Number n is uuid again (from the state file). 0, -EINVAL, or -EEXIST when
 * n or the UUID is already another's. */
int gpu_relearn(int n, const char *uuid);
/* The UUID of number n: "" when none is known (a job without one). */
const char *gpu_uuid(int n);
/* The GPU a register or request message m is about, into *dev: by its
 * "uuid" (and "index" hint), or its "device" ordinal from a job without
 * one. 0, or -EINVAL/-ENOSPC. */
int gpu_of_message(const struct ctl_msg *m, int *dev);

/* commands.c: answer the request m on connection ci. */
void handle(int ci, const struct ctl_msg *m);
/* Refuse `what` to the peer of ci (EACCES), logged, counted and recorded as an event. */
void refuse(int ci, const char *what, const char *why);

/* save.c: the requests save and restore (the job argument is unused). */
void priv_save(int ci, const struct ctl_msg *m, struct djob *unused);
void priv_restore(int ci, const struct ctl_msg *m, struct djob *unused);

/* metrics.c */
void latency_add(struct latency *l, double secs);
void write_metrics(void);

#endif
