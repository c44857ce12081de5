/*
 * policy.h - tcgpud's decisions, as a pure module.
 *
 * No processes, no clock, no I/O: time is an argument (nanoseconds on any
 * monotonic scale), and every decision comes back as a list of actions for
 * the caller to carry out (tcgpud talks to the jobs; tcgpu-replay simulates
 * them). The caller reports how each action ended (policy_job_suspended(),
 * policy_job_resumed()), and the policy moves on. This is what lets the unit
 * tests check it exhaustively and the replay tool run thousands of jobs on
 * hundreds of GPUs in a second. docs/tcgpud.md explains the rules for users.
 *
 * Model
 *   devices   capacity in bytes (and, for placement, 1000 permille of compute).
 *   projects  priority (default of its jobs), reservation (bytes per device
 *             the project is guaranteed), quotas (how much of its reservation
 *             others may use, how much it may use beyond it, its weight when
 *             idle memory is shared out, its cohort), default job limits.
 *   jobs      a process on one device: priority, project, memory limit,
 *             compute share, memory held (`mem`), state, run time,
 *             preemptions, who suspended it and why; optionally one task of a
 *             gang (the tasks of one multi-GPU job, suspended and resumed
 *             together).
 *
 * Memory on a device: `used` is the memory of its jobs that are not
 * suspended (suspending jobs still hold theirs, resuming ones claim theirs
 * already); `claimed` is what requesters are promised while their victims
 * are being suspended. A project *holds* its used plus its claims.
 *
 * Quotas (Kueue's and KAI's, per device):
 *   reservation      R_p: guaranteed to p (Kueue nominalQuota, KAI deserved quota).
 *   lending limit    L_p: the most of R_p other projects may hold (Kueue
 *                    lendingLimit); U_p = R_p - L_p stays free for p even
 *                    when p does not use it. Default: all of R_p may be lent.
 *   borrowing limit  B_p: the most p may hold beyond R_p (Kueue borrowingLimit;
 *                    may_borrow = 0 is B_p = 0). Default: unlimited.
 *   weight           w_p: borrowers of equal priority share the borrowable
 *                    memory in proportion to their weights (KAI over-quota weight).
 *   cohort           projects of one cohort lend to each other first: as seen
 *                    from outside the cohort, a member borrowing within the
 *                    cohort's idle reservations is not borrowing, and a member
 *                    may reclaim the cohort's reservations from outsiders.
 * Room for project P on device d (what a grant or a resume may take):
 *   cap - held_P - sum over q != P of max(held_q, U_q)
 * so every lending limit holds at all times (policy_check verifies it).
 *
 * A project is *borrowing* on a device when its jobs there hold more than
 * its reservation on that device (a project without a reservation is always
 * borrowing). A requester *reclaims* when its project stays within its
 * reservation after the grant (or, against outsiders, its cohort within the
 * cohort's reservations).
 *
 * Preemption (policy_request when the memory does not fit). Victim V may be
 * suspended for requester R, on R's device, when V runs, has no request of
 * its own in flight, holds memory, and one of:
 *   (j) V jumped R (backfill, below): no age needed;
 *   (a) V has run at least min_runtime since it was started or last resumed,
 *       V's project is borrowing and R reclaims, or R's priority > V's;
 *   (f) ... V's project borrows more than its weighted fair share of the
 *       borrowable memory, R's priority equals V's, and R's project stays
 *       within its own fair share after the grant;
 *   (b) ... V is within its project's reservation (protected), R's priority
 *       > V's and R reclaims: a borrower never takes memory another project
 *       reserved.
 * Victims are picked one at a time, best first: jumpers, then borrowers from
 * outside R's cohort, borrowers within it, protected jobs; then lower
 * priority first, then the least work lost (the shortest run since the last
 * resume), then the youngest; after each pick the projects' borrowing is
 * recomputed. Either the victims make enough room or none is suspended.
 * A victim that is a gang task takes its whole gang with it.
 * With cfg.partition_prio (the replay's model of Slurm's preempt/partition_prio
 * with two tiers) only this holds: R's priority is at least
 * cfg.tier_priority, V's below it, and V has run min_runtime; no reclaim,
 * fair share or backfill victims, and none between jobs of one tier.
 *
 * Why this cannot ping-pong: a victim is of strictly lower priority than
 * its requester, or a borrower displaced by a reclaiming job, or a borrower
 * above its fair share displaced by one that stays within its own, or a job
 * that jumped the requester in the queue. None of these relations can hold
 * both ways between two jobs at once, and a resumed job is protected for
 * min_runtime.
 *
 * Resume and waiting requests (policy_tick): suspended jobs (unless
 * suspended by hand without auto-resume; a job the policy suspended not
 * before min_runtime has passed) and waiting requests are served highest
 * priority first, FIFO within a priority (by the time they were suspended or
 * began to wait), each when its memory fits; a waiting request that does not
 * fit tries preemption again. Then, with cfg.backfill off, one that does
 * not fit blocks everyone after it on its device (and, with cfg.strict, a
 * new request never passes a waiting one ahead of it). With cfg.backfill
 * on, later ones that fit run anyway and are marked as having *jumped* the
 * waiting ones ahead of them (that waited already when they asked: a job that
 * displaced its victim jumped nobody); a waiting job suspends the jobs that jumped it
 * as soon as that makes it fit, without waiting for their min_runtime. So a
 * job that fits starts while a larger one waits, and can never delay it by
 * more than the time to suspend it (policy_check_backfill verifies this
 * after every tick in the tests).
 *
 * Compute share: a job's share of the device's compute (permille), applied
 * by the job's own throttle (lib/core/throttle.h) as a cap that
 * policy_compute_cap() computes from the other jobs active on the device:
 * no cap when nobody else computes there, the share when an unlimited job
 * does, else the shares scaled up to fill the device (never below the job's
 * share: compute.c). With cfg.pack_compute
 * (the replay's cluster placement), shares are also a second dimension of
 * placement and preemption: the shares on a device never exceed 1000.
 *
 * Not thread-safe: one caller at a time.
 */
#ifndef TCGPU_POLICY_H
#define TCGPU_POLICY_H

#include <stddef.h>
#include <stdint.h>

#define POL_NAME_MAX        64
#define POL_MAX_DEVICES     4096
#define POL_MAX_RESERVE     64        /* devices a project may reserve on */
#define POL_DEVICE_ANY      (-1)      /* a job not yet placed (replay): any device */
#define POL_FREE_UNKNOWN    UINT64_MAX
#define POL_COMPUTE_FULL    1000u     /* permille: the whole device */
/* A job's compute report counts for this long (tcgpud hears from active jobs every 500 ms). */
#define POL_COMPUTE_ACTIVE_NS (1500ull * 1000000ull)

enum pol_state {
    POL_RUNNING = 0,
    POL_SUSPENDING,               /* asked to suspend; still holds its memory */
    POL_SUSPENDED,                /* off the GPU; `mem` is what it needs back */
    POL_RESUMING,                 /* asked to resume; its memory is claimed */
};

enum pol_request {
    POL_REQ_NONE = 0,
    POL_REQ_PREEMPTING,           /* victims are being suspended for it (a running job's
                                     request, or a suspended job's resume) */
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
    POL_WHY_PREEMPTED,            /* grant/resume: after its victims were suspended */
    POL_WHY_NO_ROOM,              /* deny/wait: no victims could make room */
    POL_WHY_NO_BORROW,            /* deny: beyond its reservation plus borrowing limit */
    POL_WHY_VICTIM_FAILED,        /* deny: a victim did not suspend */
    POL_WHY_CANCELLED,            /* deny: the wait timed out or the requester left */
    POL_WHY_BACKFILL,             /* suspend: it jumped the requester, which fits now */
    POL_WHY_FAIR_SHARE,           /* suspend: its project borrows beyond its weighted share */
    POL_WHY_GANG,                 /* suspend/resume: with the other tasks of its gang */
    POL_WHY_COUNT
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
    int strict;                   /* no job starts ahead of a waiting one that could use its device */
    int backfill;                 /* jobs that fit start ahead of waiting ones, which suspend them
                                     when that lets them start (header comment) */
    int pack_compute;             /* compute shares are a placement dimension (sum <= 1000) */
    int partition_prio;           /* Slurm's preempt/partition_prio, two tiers: only a job of
                                     at least tier_priority preempts, only jobs below it are
                                     victims; never for reclaim, fair share or backfill */
    int tier_priority;
};

/* Quota flags of struct pol_project. */
#define POL_Q_LENDING_LIMIT   1u  /* lend_bytes / lend_pct apply */
#define POL_Q_BORROWING_LIMIT 2u  /* borrow_bytes applies */
/* With POL_Q_LENDING_LIMIT and lend_pct: lend whole devices, as Kueue's
 * lendingLimit lends whole GPUs: the first lend_pct% of reserve[] (rounded
 * down) lend all of their reservation, the others none. Without it, every
 * device lends lend_pct% of its reservation, so none is ever whole for
 * another project's job that needs the whole device. */
#define POL_Q_LEND_WHOLE      4u

struct pol_project {
    char name[POL_NAME_MAX];
    int priority;
    int may_borrow;               /* 0: borrowing limit 0, requests beyond the reservation denied */
    uint64_t default_limit;       /* 0: no limit */
    int nreserve;                 /* entries in reserve[] */
    struct { int device; uint64_t bytes; } reserve[POL_MAX_RESERVE];
    unsigned quota_flags;         /* POL_Q_*; zero-initialised: no lending or borrowing limit */
    uint64_t lend_bytes;          /* lending limit on each device it reserves on ... */
    unsigned lend_pct;            /* ... or, when non-zero, this percentage of that reservation */
    uint64_t borrow_bytes;        /* borrowing limit: most it may hold beyond its reservation, per device */
    unsigned weight;              /* over-quota weight, 1..1000; 0 counts as 1 */
    char cohort[POL_NAME_MAX];    /* "" : in no cohort */
    unsigned compute;             /* default compute share of its jobs, permille; 0: unlimited */
};

/* What policy_admit() needs to know of a new job. */
struct pol_job_spec {
    uint64_t id;                  /* unique, non-zero (tcgpud: the pid) */
    int project;                  /* index from policy_add_project() */
    int priority;
    int device;                   /* or POL_DEVICE_ANY */
    /* An unplaced job goes only on devices dev_first .. dev_first +
     * dev_count - 1 (a Slurm partition's nodes); dev_count 0: any. */
    int dev_first, dev_count;
    uint64_t limit;               /* 0: none */
    unsigned compute;             /* compute share, permille (1..1000); 0: unlimited */
    uint64_t gang;                /* the gang (multi-GPU job) it is a task of; 0: none */
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
    int dev_first, dev_count;     /* where it may be placed (pol_job_spec) */
    uint64_t limit;
    unsigned compute;             /* share, permille; 0: unlimited */
    uint64_t gang;                /* 0: none */
    uint64_t mem;                 /* held (running) or needed back (suspended) */
    enum pol_state state;
    enum pol_request req;
    uint64_t want;                /* bytes of the request in flight (a resume: mem) */
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
    /* Backfill: set when it started (or resumed) ahead of a waiting job. */
    uint64_t bf_ns;               /* when; 0: it jumped nobody */
    int bf_priority;              /* its queue position then: priority ... */
    uint64_t bf_queued;           /* ... and time it had queued since */
    uint64_t bf_tick;             /* the tick it jumped in, 0: outside a tick (a new request) */
    /* Compute (policy_compute_report). */
    uint64_t compute_seen_ns;     /* last report saying it launched work; 0: never */
    unsigned compute_busy;        /* its measured share, permille (last report) */
};

struct policy;

/* A new policy with no devices, projects or jobs; NULL when out of memory. */
struct policy *policy_new(const struct pol_config *cfg);
void policy_free(struct policy *p);
const struct pol_config *policy_config(const struct policy *p);

/* Set device dev's capacity (devices 0..dev are created as needed). 0 or -EINVAL. */
int policy_set_device(struct policy *p, int dev, uint64_t capacity);
int policy_device_count(const struct policy *p);
uint64_t policy_device_capacity(const struct policy *p, int dev);
/* Memory held by non-suspended jobs on dev / promised to requesters. */
uint64_t policy_device_used(const struct policy *p, int dev);
uint64_t policy_device_claimed(const struct policy *p, int dev);
/* Compute shares (permille, unlimited jobs counting 1000) of the jobs holding memory on dev. */
unsigned policy_device_compute(const struct policy *p, int dev);

/* Add a project: its index (>= 0), or -EINVAL (bad name/device/quota, duplicate), -ENOMEM. */
int policy_add_project(struct policy *p, const struct pol_project *proj);
int policy_project_count(const struct policy *p);
const struct pol_project *policy_project(const struct policy *p, int idx);
int policy_project_find(const struct policy *p, const char *name);
/* Bytes a project reserves on dev / may lend of it (pure, for config checks). */
uint64_t pol_project_reserved(const struct pol_project *pr, int dev);
uint64_t pol_project_lendable(const struct pol_project *pr, int dev);
/* Bytes project idx reserves on dev / holds there (non-suspended jobs). */
uint64_t policy_reserved(const struct policy *p, int idx, int dev);
uint64_t policy_project_used(const struct policy *p, int idx, int dev);
/* Room for one more grant of project idx on dev, lending limits applied. */
uint64_t policy_room(const struct policy *p, int idx, int dev);

/*
 * Admit a job (spec->state RUNNING or SUSPENDED) at `now`: for a job that
 * was running before (tcgpud re-learning it), the time it was last started
 * or resumed; for a suspended one, when it was suspended. A suspended one
 * may be resumed by a later policy_tick(): one the policy suspended once
 * min_runtime has passed since `now`, as after policy_job_suspended().
 * Returns 0, -EEXIST (id taken), -EINVAL (bad project/device/state/compute),
 * -ENOMEM.
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
 * An unplaced task of a gang WAITs until every unplaced task of its gang has
 * asked; the last one's request places them all at once, on distinct
 * devices (GRANTs or SUSPENDs for all of them), or none.
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

/* The job says it runs on `device` (it knows; tcgpud learnt device 0 at
 * registration): its accounting moves there. Only for a running job without
 * a request in flight; 0 (also when nothing changes), -ENOENT, -EBUSY, -EINVAL. */
int policy_job_relocate(struct policy *p, uint64_t id, int device);

/* The job is gone: its memory is free; a requester it was a victim for may
 * now be granted. 0 or -ENOENT. */
int policy_job_exited(struct policy *p, uint64_t id, uint64_t now, struct pol_actions *out);

/* The suspension of a SUSPENDING job ended: ok, or failed (err < 0: it runs
 * on). The requester it was for gets its GRANT (when all its victims are
 * done and the memory fits) or a DENY(VICTIM_FAILED); a suspended job it
 * made room for gets its RESUME. 0, -ENOENT, -EINVAL. */
int policy_job_suspended(struct policy *p, uint64_t id, int err, uint64_t now,
                         struct pol_actions *out);

/* The resumption of a RESUMING job ended: ok, or failed (err < 0: it stays
 * suspended and is retried after resume_retry_ns). 0, -ENOENT, -EINVAL. */
int policy_job_resumed(struct policy *p, uint64_t id, int err, uint64_t now,
                       struct pol_actions *out);

/* A user suspends a job: SUSPEND(MANUAL) for a running one (and for the
 * other running tasks of its gang, SUSPEND(GANG)); a job the policy
 * suspended becomes a manual suspension. auto_resume: tick may resume it
 * when memory fits. 0, -ENOENT, -EALREADY (already suspended by hand),
 * -EBUSY (in transition, or a request in flight). */
int policy_manual_suspend(struct policy *p, uint64_t id, int auto_resume, uint64_t now,
                          struct pol_actions *out);

/* A user resumes a suspended job (and the suspended tasks of its gang):
 * RESUME(MANUAL) when all of them fit. 0, -ENOENT, -EALREADY (not
 * suspended), -EBUSY (in transition), -ENOMEM (no room now). */
int policy_manual_resume(struct policy *p, uint64_t id, uint64_t now, struct pol_actions *out);

/* Resumes and waiting grants that fit now, in priority/FIFO order, and new
 * preemption attempts for waiting requests. Returns 0 or -ENOMEM. */
int policy_tick(struct policy *p, uint64_t now, struct pol_actions *out);

/*
 * Compute: the job reports whether it launched work since its last report
 * (active) and the share of the device its kernels took (busy, permille,
 * as it measured it; for ps). 0 or -ENOENT.
 */
int policy_compute_report(struct policy *p, uint64_t id, int active, unsigned busy, uint64_t now);

/* The cap (permille) the job's throttle applies now: POL_COMPUTE_FULL for a
 * job without a share or alone on its device (header comment). 0 when the
 * job is unknown. */
unsigned policy_compute_cap(const struct policy *p, uint64_t id, uint64_t now);

/* Jobs, in admission order. The pointers are valid until the next call
 * that changes the policy. */
size_t policy_job_count(const struct policy *p);
const struct pol_job *policy_job_at(const struct policy *p, size_t i);
const struct pol_job *policy_job(const struct policy *p, uint64_t id);
/* Run time including the current stretch. */
uint64_t policy_job_runtime(const struct pol_job *j, uint64_t now);
/* A job whose project holds more than its reservation on the job's device. */
int policy_job_borrowing(const struct policy *p, const struct pol_job *j);
/* Did `v` start ahead of `h` while h waited (backfill), so that h may suspend it? */
int policy_job_jumped(const struct policy *p, const struct pol_job *h, const struct pol_job *v);

/* Names ("running", "suspend", "reclaim"...); static strings. */
const char *pol_state_name(enum pol_state s);
const char *pol_why_name(enum pol_why w);
const char *pol_act_name(enum pol_act_kind k);
const char *pol_by_name(enum pol_by b);
int pol_state_parse(const char *s);
int pol_by_parse(const char *s);

/*
 * Checks every invariant the policy promises (used <= capacity on every
 * device, every lending limit, compute shares within the device under
 * pack_compute, used and claimed sums consistent with the jobs,
 * victims_pending matches the suspending jobs, states and requests
 * consistent). Returns 0 or -EFAULT with a message in msg. For tests and
 * the replay's self-check.
 */
int policy_check(const struct policy *p, char *msg, size_t len);

/*
 * Right after policy_tick(now): with cfg.backfill, no waiting job could
 * start by suspending only jobs that jumped it before this tick (the tick
 * would have done it), unless a job ahead of it waits for the same device.
 * (Jobs that jumped it during this tick were served after it; the next tick
 * deals with them: a waiting job is delayed by jumpers by at most one tick
 * and their suspension.) 0 or -EFAULT with the waiting job and what it could
 * have had in msg.
 */
int policy_check_backfill(const struct policy *p, uint64_t now, char *msg, size_t len);

#endif
