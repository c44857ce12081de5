/*
 * sim.h - the simulation's state, shared by the files that carry it out
 * (sim.c the loop, preempt.c preemptions, admit.c admission, metrics.c the
 * summary). Internal to tools/replay.
 */
#ifndef TCGPU_REPLAY_SIM_H
#define TCGPU_REPLAY_SIM_H

#include "replay.h"

#define EPS 1e-6
#define TASK_ID(job, t) ((((uint64_t)(job) + 1) << 4) | (uint64_t)(t))
#define JOB_OF(id) ((size_t)((id) >> 4) - 1)
#define TASK_OF(id) ((int)((id) & 15))

enum phase {
    PH_FUTURE = 0,                /* not arrived */
    PH_QUEUED,                    /* in the policy, not every task granted */
    PH_RUN,                       /* every task granted */
    PH_SAVING,                    /* save: victim being saved (its tasks still hold the GPUs) */
    PH_REQUEUED,                  /* kill/save/migrate: out of the policy until phase_end */
    PH_DONE,
};

enum op { OP_NONE = 0, OP_SUSPEND, OP_RESUME };

struct task {
    enum op op;
    double op_done;
    int node;                     /* suspended: the node whose host memory holds it, -1: none */
    int on_disk;                  /* suspended to disk: host memory was full */
};

struct jstate {
    enum phase phase;
    double phase_end;             /* SAVING, REQUEUED */
    double remaining;             /* work left, s */
    double redo;                  /* s of running before work counts again (restart, restore) */
    double max_done;              /* furthest progress ever: work below it is done again */
    double start, finish;
    int granted;                  /* tasks granted in the current stay in the policy */
    int restore;                  /* restore its image when it runs next */
    int refused;                  /* never placeable: refused at admission */
    unsigned preemptions;
    struct task task[REPLAY_MAX_GANG];
};

struct sim {
    const struct trace *tr;
    const struct opts *o;
    const struct sched_def *sd;
    struct policy *p;
    struct jstate *js;            /* per job of the trace */
    size_t *act;                  /* active jobs (arrived, not done) */
    size_t nact;
    const size_t *order;          /* the jobs of this run, by arrival */
    size_t norder, next;
    int ngpus, first_gpu;         /* this run's GPUs: first_gpu .. first_gpu + ngpus of the cluster */
    int hi;                       /* high priority: this and above */
    uint64_t *room0;              /* [project * ngpus + gpu]: most a project can ever get there */
    unsigned *resident;           /* [gpu]: tasks progressing there now (interference) */
    double *node_host;            /* [node]: suspended device memory in its host memory */
    int nnodes;
    struct pol_actions acts;
    double t, w0, w1;
    /* integrals over the window */
    double work_int, busy_int, mem_int;
    double lost, overhead;        /* work (GPUs x share x s), GPU s */
    double peak_host;
    unsigned long preemptions, migrations, spilled, refused_logged;
    unsigned long requeued;       /* jobs taken out of the policy (kill, save, migrate) */
    char refused_first[240];      /* the first refusal and its reason, for the log */
};

static inline const struct rjob *sim_job(const struct sim *s, size_t i)
{
    return &s->tr->jobs[i];
}

/* The bytes per GPU and compute share a job asks for under this placement. */
uint64_t sim_need_bytes(const struct sim *s, size_t i);
unsigned sim_need_compute(const struct sim *s, size_t i);
uint64_t sim_ns(double t);
int sim_enter_policy(struct sim *s, size_t i);
/* The GPUs job i may be placed on: first .. first + count - 1; count 0: any. */
void sim_partition_of(const struct sim *s, size_t i, int *first, int *count);
void sim_leave_policy(struct sim *s, size_t i);

/* preempt.c */
void preempt_victim(struct sim *s, size_t i, int k);          /* POL_ACT_SUSPEND */
void preempt_resume(struct sim *s, size_t i, int k);          /* POL_ACT_RESUME */
void preempt_op_done(struct sim *s, size_t i, int k);         /* a suspend or resume ended */
void preempt_saved(struct sim *s, size_t i);                  /* save: the image is written */
void preempt_granted(struct sim *s, size_t i);                /* runs again: restart or restore */
void preempt_migrations(struct sim *s);                       /* suspend+migrate */

/* admit.c */
int admit_prepare(struct sim *s);
/* 1 (with why) when job i can never be placed in this run, else 0. */
int admit_never(const struct sim *s, size_t i, char *why, size_t len);

/* metrics.c */
void metrics_summarise(const struct sim *s, int hi, struct result *r);

#endif
