/*
 * tcgpud.h - the daemon's workers (work.c) and what the loop asks of them.
 *
 * One thread runs the event loop (main.c and the files of daemon.h): the
 * socket, the policy, the jobs, the state file, the metrics. Talking to a job's control socket can
 * take seconds (a suspend drains its memory), so each such call runs on a
 * worker thread (work.c) and reports back through a queue the loop
 * reads when an eventfd fires. Workers touch nothing of the loop's state.
 */
#ifndef TCGPU_TCGPUD_H
#define TCGPU_TCGPUD_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "tcgpu.h"

/*
 * SUSPEND, RESUME: one job's operation. POLL: every job's status at once,
 * bounded by one deadline. RELEARN: the same for a restarted tcgpud, which
 * waits (longer) for jobs in the middle of an operation to settle.
 */
enum work_kind { WORK_SUSPEND = 1, WORK_RESUME, WORK_POLL, WORK_RELEARN };

/* One job's answer to a status poll (-ETIMEDOUT: none by the deadline). */
struct poll_item {
    pid_t pid;
    int err;                      /* 0, or -errno of reaching it */
    struct tcgpu_status st;
};

struct work {
    enum work_kind kind;
    pid_t pid;                    /* SUSPEND/RESUME */
    char dir[PATH_MAX];           /* SUSPEND: image directory, "" for host memory */
    int timeout_ms;
    /* results */
    int err;                      /* 0 or -errno (from the job's reply or from reaching it) */
    int from_server;              /* err came from the job's reply */
    char msg[512];
    struct tcgpu_status st;       /* after the operation */
    uint64_t ns;                  /* how long it took */
    /* WORK_POLL, WORK_RELEARN */
    uint64_t gen;
    size_t n;
    struct poll_item *items;
    struct work *next;
};

/* Start a worker for w (owned by the queue from now on). 0 or -errno. */
int tcgpud_work_start(struct work *w);
/* The eventfd the loop polls: readable when finished work is queued. */
int tcgpud_work_fd(void);
int tcgpud_work_init(void);
/* Take all finished work (a list, oldest first); the caller frees each. */
struct work *tcgpud_work_take(void);
void tcgpud_work_free(struct work *w);

#endif
