/*
 * jobs.h - tcgpud's jobs and what happens to them (jobs.c): the job table,
 * the policy's actions carried out, status polls, finished operations, the
 * state file.
 */
#ifndef TCGPU_TCGPUD_JOBS_H
#define TCGPU_TCGPUD_JOBS_H

#include <stdint.h>
#include <sys/types.h>

#include "daemon.h"
#include "tcgpud.h"

/* A new job in the table (its request and waiter none), or NULL without memory. */
struct djob *add_job(pid_t pid, uid_t uid, const char *user, int project, uint64_t start);
/* The gang of job `name` of user uid: its tasks' id, or a new one. */
uint64_t gang_for(uid_t uid, const char *name);
/* The job has ended (`how`, for the log and the event): the policy is told
 * and acts, and its connections are answered. */
void job_gone(struct djob *j, const char *how);

/*
 * Suspend (dir: an image directory, or NULL for host memory) or resume job j
 * on a worker; the state file is written first. A worker that cannot start
 * is the operation's failure, told to the policy.
 */
void start_op(struct djob *j, enum work_kind kind, const char *dir);
/* Carry out the policy's actions, in order, and clear them. */
void do_actions(struct pol_actions *a);

/* Ask every job not in an operation for its status, unless a poll is in flight. */
void kick_poll(void);
/* A poll's answers are in (WORK_POLL): usage, states changed by hand, the
 * memory requests that waited for it. */
void poll_done(struct work *w);
/* A suspend or resume has finished (WORK_SUSPEND, WORK_RESUME). */
void op_done(struct work *w);
/* A manual suspend of j (and its gang) must not stand (`why`, for the log):
 * its tasks already suspended are resumed now, those being suspended once
 * they are. A suspend must never leave a job stopped without a word. */
void undo_manual_suspend(struct djob *j, const char *why);

/* Write the state file now (d.dirty cleared when it is written). */
void save_state(void);

#endif
