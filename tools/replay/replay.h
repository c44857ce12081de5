/*
 * replay.h - tcgpu-replay: tcgpud's policy (lib/policy) at cluster scale, by
 * simulation, against the schedulers it is compared with (docs/tcgpud.md,
 * "Replay at scale").
 *
 *   trace.c     the trace: jobs and projects, read from CSV
 *   generate.c  synthetic traces with the shape of published GPU cluster traces
 *   sim.c       one scheduler over one trace: an event loop around the policy
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

/* The schedulers compared. */
enum sched {
    SCHED_FIFO = 0,               /* one queue in arrival order, whole GPUs, no preemption */
    SCHED_STATIC,                 /* each project alone on its reserved GPUs (FIFO there) */
    SCHED_KILL,                   /* priorities, whole GPUs, preemption by kill and requeue */
    SCHED_CKPT,                   /* the same, the victim saved (tcgpu + CRIU) and restored */
    SCHED_TCGPUD,                 /* tcgpud: sharing, backfill, quotas, suspend in place */
    SCHED_COUNT
};

struct opts {
    int gpus;
    uint64_t gpu_mem;
    uint64_t min_runtime_ns;
    double suspend_bps, resume_bps;       /* device memory to/from host memory */
    double disk_write_bps, disk_read_bps; /* images written/read (checkpoint, CRIU) */
    double host_bytes;            /* host memory of a job's process, saved with it by CRIU */
    double fixed_s;               /* fixed cost of one suspend, resume, save or restore */
    double requeue_s;             /* a requeued job waits this long before it may run again */
    double restart_s;             /* a killed job's restart: start-up, loading its checkpoint */
    double app_ckpt_s;            /* a job saves its own checkpoint this often (kill: work lost) */
    double migrate_s;             /* tcgpud: a job suspended this long moves to a free GPU (0: never) */
    int high_prio;                /* -1: the highest in the trace */
    int check, json, compare;
    unsigned mask;                /* schedulers to run (bit per enum sched) */
};

/* What one scheduler achieved on one trace. */
struct result {
    enum sched sched;
    double window;                /* s: first to last arrival */
    double util;                  /* compute used for new work / compute there was, in the window */
    double alloc;                 /* GPU time held by some job / GPU time, in the window */
    double memutil;               /* memory held / memory there was, in the window */
    double makespan;
    double jct_mean, jct_p95, jct_hi;
    double hi_wait_mean, hi_wait_p95;
    double work_lost_gpuh;        /* GPU hours of work done again (kill) */
    double overhead_gpuh;         /* GPU hours spent suspending, resuming, saving, restarting */
    unsigned long migrations;     /* tcgpud: suspended jobs moved to another GPU (save/restore) */
    double preempt_per_job;
    unsigned long preemptions, finished, rejected;
};

/* trace.c */
int trace_load(const char *path, struct trace *t);
void trace_free(struct trace *t);
int trace_high_priority(const struct trace *t, int given);

/* generate.c: writes a trace to f; 0, or 1 with a message on stderr. */
struct gen_opts {
    size_t jobs;
    int gpus;
    uint64_t gpu_mem;
    double load;                  /* offered compute, a fraction of the cluster's */
    uint64_t seed;
};
int generate_trace(FILE *f, const struct gen_opts *g);

/* sim.c: one scheduler over the trace. 0, or -1 with a message on stderr. */
int simulate(const struct trace *t, const struct opts *o, enum sched s, int hi, struct result *r);
const char *sched_name(enum sched s);
const char *sched_title(enum sched s);

/* report.c */
void report_table(const struct trace *t, const struct opts *o, int hi, const struct result *r,
                  size_t n);
/* One JSON object on stdout (docs/tcgpud.md, "Replay at scale"); 0, or -1 when stdout failed. */
int report_json(const struct trace *t, const struct opts *o, int hi, const struct result *r,
                size_t n);

#endif
