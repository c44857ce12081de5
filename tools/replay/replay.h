/*
 * replay.h - tcgpu-replay: tcgpud's policy (lib/policy) at cluster scale, by
 * simulation, against the schedulers it is compared with (docs/replay.md).
 *
 *   trace.c     the trace: jobs and projects, read from CSV
 *   generate.c  synthetic traces with the shape of published GPU cluster traces
 *   sched.c     the schedulers: placement x preemption, and the named baselines
 *   admit.c     what can never be placed, refused at admission with the reason
 *   sim.c       one scheduler over one trace: an event loop around the policy
 *   preempt.c   a preemption carried out (kill, save, suspend), host memory per node
 *   metrics.c   what a run achieved: goodput, waits, the SLO, completion per priority
 *   report.c    the comparison table and its JSON
 *   main.c      options
 */
#ifndef TCGPU_REPLAY_H
#define TCGPU_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "policy/policy.h"

#define GiB (1024.0 * 1024.0 * 1024.0)
#define REPLAY_MAX_GANG 16        /* tasks of one job (GPUs) */
#define REPLAY_MAX_PROJECTS 64

/* One job of the trace. */
struct rjob {
    double arrival;               /* s */
    double dur;                   /* s of running time it needs */
    double mem;                   /* bytes per GPU */
    int gpus;                     /* tasks, one per GPU (a gang when > 1) */
    unsigned compute;             /* permille of a GPU's compute it uses (its share) */
    int prio;
    int project;                  /* index into the trace's projects */
};

/* A project of the trace: `#project name=... priority=... reserve_gpus=...` lines. */
struct rproject {
    char name[POL_NAME_MAX];
    int priority;
    int reserve_gpus;             /* whole GPUs it reserves (a contiguous range) */
    int first_gpu;                /* where its range starts (given by the order of the lines) */
    unsigned lend_pct;            /* 0..100, 100: lends all of it (default) */
    unsigned weight;
    char cohort[POL_NAME_MAX];
};

struct trace {
    struct rjob *jobs;            /* by arrival */
    size_t n;
    struct rproject proj[REPLAY_MAX_PROJECTS];
    int nproj;
    int reserved_gpus;            /* sum of the projects' ranges */
};

/* A scheduler is a point on two axes (docs/replay.md, "The schedulers"). */
enum placement {
    PL_WHOLE = 0,                 /* a job takes whole GPUs (Slurm gres/gpu, nvidia.com/gpu) */
    PL_SHARED,                    /* jobs share GPUs by memory and compute share */
};

enum preempt {
    PR_NONE = 0,                  /* a job runs to its end once started */
    PR_KILL,                      /* killed, requeued, restarts from its own last checkpoint */
    PR_SAVE,                      /* saved to disk, requeued, restored where it runs next */
    PR_SUSPEND,                   /* suspended in place (device memory to host), resumed there */
    PR_MIGRATE,                   /* suspend, and one suspended too long moves by save/restore */
    PR_COUNT
};

struct sched_def {
    const char *name;             /* --sched NAME, and the JSON key */
    const char *title;            /* what it stands for, in words */
    enum placement placement;
    enum preempt preempt;
    int statik;                   /* each department alone on the GPUs it owns */
    int shipped;                  /* this tree ships the mechanism (else: modelled) */
    int slurm;                    /* Slurm's partition_prio decides (else tcgpud's policy):
                                     a high-priority job runs only on its department's GPUs
                                     (its partition) and preempts only jobs below the high
                                     priority there; everything else borrows anywhere and
                                     preempts nobody */
};

#define SCHED_MAX 24

struct opts {
    int gpus;
    int gpus_per_node;            /* a node: host memory, where a suspended job stays */
    uint64_t gpu_mem;
    uint64_t min_runtime_ns;
    double suspend_bps, resume_bps;       /* device memory to/from host memory */
    double disk_write_bps, disk_read_bps; /* images written/read (checkpoint, CRIU) */
    double host_bytes;            /* host memory of a job's process, saved with it by CRIU */
    double node_host_bytes;       /* host memory a node may give suspended jobs' device memory */
    double fixed_s;               /* fixed cost of one suspend, resume, save or restore */
    double requeue_s;             /* a requeued job waits this long before it may run again */
    double restart_s;             /* a killed job's restart: start-up, loading its checkpoint */
    double app_ckpt_s;            /* a job saves its own checkpoint this often (kill: work lost) */
    double migrate_s;             /* suspend+migrate: suspended this long, moves to a free GPU */
    double interference;          /* slowdown of a job while another one runs on its GPU */
    double slo_s;                 /* high priority: time to GPU within this meets the SLO */
    double slo_share;             /* a scheduler meets the SLO when this share of them do */
    int high_prio;                /* -1: the highest in the trace */
    int check, json, compare;
    unsigned mask;                /* schedulers to run (bit per index of sched_table) */
};

/* What one scheduler achieved on one trace. */
#define RES_MAX_PRIOS 8
struct result {
    const struct sched_def *sched;
    double window;                /* s: first to last arrival */
    double goodput;               /* work kept (GPUs x share x s) / GPU time, in the window */
    double busy;                  /* GPU time held by some job / GPU time, in the window */
    double memutil;               /* memory held / memory there was, in the window */
    double makespan;
    double hi_wait_p50, hi_wait_p95, hi_wait_p99;
    double slo_met;               /* share of high-priority jobs on a GPU within the SLO */
    int nprio;                    /* completion per priority, highest first */
    int prio[RES_MAX_PRIOS];
    double jct_p50[RES_MAX_PRIOS], jct_p95[RES_MAX_PRIOS];
    double lost_gpuh;             /* work done again (kill), GPU hours */
    double preempt_gpuh;          /* GPU hours spent suspending, resuming, saving, restarting */
    double peak_host_per_node;    /* bytes of suspended jobs' device memory in one node's host memory */
    unsigned long spilled;        /* suspensions that did not fit in host memory: to disk */
    unsigned long migrations;     /* suspended jobs moved to another GPU (save/restore) */
    unsigned long preemptions, finished, refused;
};

/* trace.c */
int trace_load(const char *path, struct trace *t);
void trace_free(struct trace *t);
int trace_high_priority(const struct trace *t, int given);

/* generate.c: writes a trace to f; 0, or 1 with a message on stderr. */
enum scenario { SC_DEFAULT = 0, SC_UNDER, SC_ENTERPRISE, SC_OVERLOAD };

struct gen_opts {
    size_t jobs;
    int gpus;
    uint64_t gpu_mem;
    double load;                  /* offered demand, a fraction of the cluster's ... */
    int load_compute;             /* ... in compute (GPUs x share x s), else in whole GPUs (GPUs x s) */
    enum scenario scenario;
    uint64_t seed;
};
int scenario_parse(const char *name, struct gen_opts *g);
int generate_trace(FILE *f, const struct gen_opts *g);

/* trace.c: offered demand over the arrival window, a fraction of the
 * cluster's, in whole GPUs (GPUs x s) and in compute (GPUs x share x s). */
void trace_load_offered(const struct trace *t, int gpus, double *whole, double *compute);

/* sched.c: the schedulers, in the order they are printed. */
extern const struct sched_def sched_table[];
extern const size_t sched_count;
const char *placement_name(enum placement p);
const char *preempt_name(enum preempt p);
const char *victims_name(const struct sched_def *s);   /* "tcgpud" or "partition_prio" */
/* A comma-separated list of names into a mask of sched_table; -1 when a name is unknown. */
int sched_parse(const char *list, unsigned *mask);

/* sim.c: one scheduler over the trace. 0, or -1 with a message on stderr. */
int simulate(const struct trace *t, const struct opts *o, const struct sched_def *s, int hi,
             struct result *r);

/* report.c */
void report_table(const struct trace *t, const struct opts *o, int hi, const struct result *r,
                  size_t n);
/* One JSON object on stdout (docs/replay.md, "JSON"); 0, or -1 when stdout failed. */
int report_json(const struct trace *t, const struct opts *o, int hi, const struct result *r,
                size_t n);

#endif
