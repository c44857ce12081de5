/*
 * policy.h - tcgpud's decisions, as a pure module.
 *
 * No processes, no clock, no I/O: time is an argument (nanoseconds on any
 * monotonic scale), and every decision comes back as a list of actions for
 * the caller to carry out (tcgpud talks to the jobs; tcgpu-replay simulates
 * them). The caller reports how each action ended (policy_job_suspended(),
 * policy_job_resumed()), and the policy moves on. This is what lets the unit
 * tests check it exhaustively and the replay tool run thousands of jobs on
 * hundreds of GPUs in a second.
 *
 * Model
 *   devices   capacity in bytes.
 *   projects  priority (default of its jobs), reservation (bytes per device
 *             the project is guaranteed), may_borrow (may it use more than
 *             its reservation), default job memory limit.
 *   jobs      a process on one device: priority, project, memory limit,
 *             memory held (`mem`), state, run time, preemptions, and who
 *             suspended it and why.
 *
 * Memory on a device: `used` is the memory of its jobs that are not
 * suspended (suspending jobs still hold theirs, resuming ones claim theirs
 * already); `claimed` is what requesters are promised while their victims
 * are being suspended. A grant or a resume is only given when it fits in
 * capacity - used - claimed, so used never exceeds capacity.
 *
 * A project is *borrowing* on a device when its jobs there hold more than
 * its reservation on that device (a project without a reservation is always
 * borrowing). A requester *reclaims* when its project stays within its
 * reservation after the grant.
 *
 * Preemption (policy_request when the memory does not fit). Victim V may be
 * suspended for requester R, on R's device, when V runs, has no request of
 * its own in flight, holds memory, has run at least min_runtime since it was
 * started or last resumed, and one of:
 *   (a) V's project is borrowing and R reclaims, or R's priority > V's;
 *   (b) V's project is within its reservation (V is protected), R's
 *       priority > V's and R reclaims: a borrower never takes memory another
 *       project reserved.
 * So a requester that would itself borrow can only displace strictly
 * lower-priority borrowers. Victims are picked one at a time, best first:
 * borrowers before protected jobs, then lower priority first, then the
 * least work lost (the shortest run since the last resume), then the
 * youngest; after each pick the projects' borrowing is recomputed. Either
 * the victims free enough memory or none is suspended.
 *
 * Why this cannot ping-pong: a victim is always of strictly lower priority
 * than its requester, or a borrower displaced by a reclaiming job; neither
 * relation can hold both ways between two jobs at once, and a resumed job
 * is protected for min_runtime.
 *
 * Resume (policy_tick): suspended jobs (unless suspended by hand without
 * auto-resume; a job the policy suspended not before min_runtime has passed,
 * so that its requester can take the memory it came for before the victim
 * competes for it again) and waiting requests are served highest priority first, FIFO
 * within a priority (by the time they were suspended or began to wait),
 * each when its memory fits. One that does not fit blocks everyone after it
 * on its device, so a large high-priority job is not starved by small ones.
 * A waiting request that does not fit tries preemption again (its victims
 * may have grown old enough since).
 *
 * Not thread-safe: one caller at a time.
 */
#ifndef TCGPU_POLICY_H
#define TCGPU_POLICY_H

#include <stddef.h>
#include <stdint.h>

#define POL_NAME_MAX        64
#define POL_MAX_DEVICES     4096
#define POL_DEVICE_ANY      (-1)      /* a job not yet placed (replay): any device */
#define POL_FREE_UNKNOWN    UINT64_MAX

enum pol_state {
    POL_RUNNING = 0,
    POL_SUSPENDING,               /* asked to suspend; still holds its memory */
    POL_SUSPENDED,                /* off the GPU; `mem` is what it needs back */
    POL_RESUMING,                 /* asked to resume; its memory is claimed */
};

enum pol_request {
    POL_REQ_NONE = 0,
    POL_REQ_PREEMPTING,           /* victims are being suspended for it */
    POL_REQ_WAITING,              /* waits until its memory fits */
};

/* Who suspended a job. */
enum pol_by { POL_BY_NONE = 0, POL_BY_POLICY, POL_BY_MANUAL };

/* Why: the reason of an action or of a job's suspension. */
enum pol_why {
    POL_WHY_NONE = 0,
    POL_WHY_RECLAIM,              /* suspend: a borrower, for a job reclaiming its reservation */
    POL_WHY_PRIORITY,             /* suspend: lower priority than the requester */
    POL_WHY_MANUAL,               /* suspend/resume: asked by a user */
    POL_WHY_FITS,                 /* resume/grant: the memory fits */
    POL_WHY_PREEMPTED,            /* grant: after its victims were suspended */
    POL_WHY_NO_ROOM,              /* deny/wait: no victims could make room */
    POL_WHY_NO_BORROW,            /* deny: beyond its reservation, and may not borrow */
    POL_WHY_VICTIM_FAILED,        /* deny: a victim did not suspend */
    POL_WHY_CANCELLED,            /* deny: the wait timed out or the requester left */
};

enum pol_act_kind {
    POL_ACT_GRANT = 1,            /* job may take `bytes` on `device` */
    POL_ACT_DENY,                 /* job's request fails (`why`) */
    POL_ACT_WAIT,                 /* job's request waits (a later GRANT or DENY ends it) */
    POL_ACT_SUSPEND,              /* suspend job; `for_job` is the requester (0: manual) */
    POL_ACT_RESUME,               /* resume job on `device` */
};

struct pol_action {
    enum pol_act_kind kind;
    uint64_t job;
    uint64_t for_job;             /* SUSPEND: the job it makes room for; DENY(VICTIM_FAILED): the victim */
    int device;
    uint64_t bytes;               /* GRANT: granted; SUSPEND/RESUME: the job's memory */
    enum pol_why why;
};

/* A growable list the policy appends to. Zero-initialise; pol_actions_free() when done. */
struct pol_actions {
    struct pol_action *v;
    size_t n, cap;
    int oom;                      /* an append failed for lack of host memory */
};

void pol_actions_clear(struct pol_actions *a);
void pol_actions_free(struct pol_actions *a);

struct pol_config {
    uint64_t min_runtime_ns;      /* a job is never preempted younger than this (since start/resume) */
    uint64_t resume_retry_ns;     /* after a failed resume, wait this long before trying again */
    int no_preemption;            /* baseline: never suspend anyone */
    int fifo;                     /* baseline: serve in arrival order, ignoring priorities */
};

struct pol_project {
    char name[POL_NAME_MAX];
    int priority;
    int may_borrow;
    uint64_t default_limit;       /* 0: no limit */
    int nreserve;                 /* entries in reserve[] */
    struct { int device; uint64_t bytes; } reserve[8];
};

/* What policy_admit() needs to know of a new job. */
struct pol_job_spec {
    uint64_t id;                  /* unique, non-zero (tcgpud: the pid) */
    int project;                  /* index from policy_add_project() */
    int priority;
    int device;                   /* or POL_DEVICE_ANY */
    uint64_t limit;               /* 0: none */
    /* Re-learnt jobs (tcgpud restarting) come in as they are: */
    enum pol_state state;         /* POL_RUNNING or POL_SUSPENDED */
    uint64_t mem;
    enum pol_by suspended_by;
    int auto_resume;              /* a manual suspension that tick may undo */
    uint64_t run_ns;
    unsigned preemptions;
};

struct pol_job {
    uint64_t id;
    int project;
    int priority;
    int device;
    uint64_t limit;
    uint64_t mem;                 /* held (running) or needed back (suspended) */
    enum pol_state state;
    enum pol_request req;
    uint64_t want;                /* bytes of the request in flight */
    unsigned victims_pending;     /* PREEMPTING: suspensions not yet acknowledged */
    int victim_failed;            /* PREEMPTING: one of them failed */
    uint64_t failed_victim;
    uint64_t for_job;             /* SUSPENDING as a victim: the requester */
    uint64_t start_ns;            /* admitted */
    uint64_t since_ns;            /* last resume (or start): preemption age, "work lost" */
    uint64_t queued_ns;           /* suspended or began to wait: FIFO order */
    uint64_t run_ns;              /* accumulated time running, up to since_ns */
    uint64_t retry_ns;            /* no automatic resume before this (failed resume) */
    unsigned preemptions;
    unsigned resumes;
    enum pol_by suspended_by;
    enum pol_why why;             /* of the last suspension */
    uint64_t suspended_for;       /* the requester it was suspended for */
    int auto_resume;              /* manual suspension: may tick resume it? */
};

struct policy;

/* A new policy with no devices, projects or jobs; NULL when out of memory. */
struct policy *policy_new(const struct pol_config *cfg);
void policy_free(struct policy *p);

/* Set device dev's capacity (devices 0..dev are created as needed). 0 or -EINVAL. */
int policy_set_device(struct policy *p, int dev, uint64_t capacity);
int policy_device_count(const struct policy *p);
uint64_t policy_device_capacity(const struct policy *p, int dev);
/* Memory held by non-suspended jobs on dev / promised to requesters. */
uint64_t policy_device_used(const struct policy *p, int dev);
uint64_t policy_device_claimed(const struct policy *p, int dev);

/* Add a project: its index (>= 0), or -EINVAL (bad name/device, duplicate), -ENOMEM. */
int policy_add_project(struct policy *p, const struct pol_project *proj);
int policy_project_count(const struct policy *p);
const struct pol_project *policy_project(const struct policy *p, int idx);
int policy_project_find(const struct policy *p, const char *name);
/* Bytes a project reserves on dev (pure, for config checks). */
uint64_t pol_project_reserved(const struct pol_project *pr, int dev);
/* Bytes project idx reserves on dev / holds there (non-suspended jobs). */
uint64_t policy_reserved(const struct policy *p, int idx, int dev);
uint64_t policy_project_used(const struct policy *p, int idx, int dev);

/*
 * Admit a job (spec->state RUNNING or SUSPENDED) at `now`: for a job that
 * was running before (tcgpud re-learning it), the time it was last started
 * or resumed; for a suspended one, when it was suspended. A suspended one
 * may be resumed by a later policy_tick(): one the policy suspended once
 * min_runtime has passed since `now`, as after policy_job_suspended().
 * Returns 0, -EEXIST (id taken), -EINVAL (bad project/device/state), -ENOMEM.
 */
int policy_admit(struct policy *p, const struct pol_job_spec *spec, uint64_t now);

/*
 * Job `id` (running on `device`, or POL_DEVICE_ANY for an unplaced job)
 * needs `bytes` more. observed_free is the device's free memory as the
 * driver reports it (POL_FREE_UNKNOWN: trust the policy's own accounting);
 * the smaller of the two counts. Appends to out exactly one of:
 *   GRANT                       it fits (the job's mem grows by bytes)
 *   SUSPEND... (n >= 1)         victims; GRANT (or DENY) follows from their acks
 *   DENY (NO_ROOM, NO_BORROW)   no way to make room
 *   WAIT                        as DENY, when may_wait: tick serves it later
 * Returns 0, -ENOENT (no such job), -EBUSY (a request already in flight, or
 * the job is not running), -EINVAL (bytes 0, bad device), -ENOMEM.
 */
int policy_request(struct policy *p, uint64_t id, int device, uint64_t bytes,
                   uint64_t observed_free, int may_wait, uint64_t now, struct pol_actions *out);

/* A WAITING or PREEMPTING request gives up (timeout, requester gone): it is
 * forgotten (a DENY(CANCELLED) is appended); victims already asked still
 * suspend and will be resumed by tick. 0 or -ENOENT/-EINVAL (nothing pending). */
int policy_request_cancel(struct policy *p, uint64_t id, uint64_t now, struct pol_actions *out);

/* The job's memory as measured (a status poll). Ignored while a request of
 * its own or a transition is in flight. 0 or -ENOENT. */
int policy_set_usage(struct policy *p, uint64_t id, uint64_t bytes);

/* The memory the job is allowed (its limit) changed. 0 or -ENOENT. */
int policy_set_limit(struct policy *p, uint64_t id, uint64_t limit);

/* The job is gone: its memory is free; a requester it was a victim for may
 * now be granted. 0 or -ENOENT. */
int policy_job_exited(struct policy *p, uint64_t id, uint64_t now, struct pol_actions *out);

/* The suspension of a SUSPENDING job ended: ok, or failed (err < 0: it runs
 * on). The requester it was for gets its GRANT (when all its victims are
 * done and the memory fits) or a DENY(VICTIM_FAILED). 0, -ENOENT, -EINVAL. */
int policy_job_suspended(struct policy *p, uint64_t id, int err, uint64_t now,
                         struct pol_actions *out);

/* The resumption of a RESUMING job ended: ok, or failed (err < 0: it stays
 * suspended and is retried after resume_retry_ns). 0, -ENOENT, -EINVAL. */
int policy_job_resumed(struct policy *p, uint64_t id, int err, uint64_t now,
                       struct pol_actions *out);

/* A user suspends a job: SUSPEND(MANUAL) for a running one; a job the
 * policy suspended becomes a manual suspension. auto_resume: tick may
 * resume it when memory fits. 0, -ENOENT, -EALREADY (already suspended by
 * hand), -EBUSY (in transition, or a request in flight). */
int policy_manual_suspend(struct policy *p, uint64_t id, int auto_resume, uint64_t now,
                          struct pol_actions *out);

/* A user resumes a suspended job: RESUME(MANUAL) when it fits. 0, -ENOENT,
 * -EALREADY (not suspended), -EBUSY (in transition), -ENOMEM (no room now). */
int policy_manual_resume(struct policy *p, uint64_t id, uint64_t now, struct pol_actions *out);

/* Resumes and waiting grants that fit now, in priority/FIFO order, and new
 * preemption attempts for waiting requests. Returns 0 or -ENOMEM. */
int policy_tick(struct policy *p, uint64_t now, struct pol_actions *out);

/* Jobs, in admission order. The pointers are valid until the next call
 * that changes the policy. */
size_t policy_job_count(const struct policy *p);
const struct pol_job *policy_job_at(const struct policy *p, size_t i);
const struct pol_job *policy_job(const struct policy *p, uint64_t id);
/* Run time including the current stretch. */
uint64_t policy_job_runtime(const struct pol_job *j, uint64_t now);
/* A job whose project holds more than its reservation on the job's device. */
int policy_job_borrowing(const struct policy *p, const struct pol_job *j);

/* Names ("running", "suspend", "reclaim"...); static strings. */
const char *pol_state_name(enum pol_state s);
const char *pol_why_name(enum pol_why w);
const char *pol_act_name(enum pol_act_kind k);
const char *pol_by_name(enum pol_by b);
int pol_state_parse(const char *s);
int pol_by_parse(const char *s);

/*
 * Checks every invariant the policy promises (used <= capacity on every
 * device, claimed consistent, victims_pending matches the suspending jobs,
 * states and requests consistent). Returns 0 or -EFAULT with a message in
 * msg. For tests and the replay's self-check.
 */
int policy_check(const struct policy *p, char *msg, size_t len);

#endif
