/*
 * state.h - what tcgpud keeps across restarts: its jobs and their
 * manual suspensions. One text file, one line per job in the control
 * protocol's message format ("job pid=4242 start=... project=prod ..."),
 * after a version line. Written whole to a temporary file, fsynced and
 * renamed over the old one (and the directory fsynced), so a crash leaves
 * either the old state or the new, never a mix.
 */
#ifndef TCGPU_TCGPUD_STATE_H
#define TCGPU_TCGPUD_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TCGPUD_STATE_VERSION 1

struct tcgpud_saved_job {
    pid_t pid;
    uint64_t start_ticks;         /* /proc/PID/stat starttime: tells a reused pid apart */
    uid_t uid;
    char user[64];
    char project[64];
    int priority;
    uint64_t limit;
    int device;
    uint64_t dev_capacity;        /* the device's capacity as tcgpud knew it */
    char uuid[48];                /* the device's UUID ("": not known) */
    uint64_t mem;
    char state[16];               /* pol_state_name(): running, suspending, suspended, resuming */
    char suspended_by[16];        /* pol_by_name() */
    int auto_resume;
    unsigned preemptions;
    uint64_t run_ns;              /* time it ran: up to since_ns when that is given, else all */
    uint64_t since_ns;            /* CLOCK_MONOTONIC (one boot, as the job's pid is): its last
                                     start or resume; 0: not known (older files) */
    uint64_t queued_ns;           /* CLOCK_MONOTONIC: when it was suspended; 0: not suspended */
    char job[64];                 /* the gang (multi-GPU job) it is a task of, "" none */
    unsigned compute;             /* its compute share, permille, 0: none */
};

/* Write n jobs to path atomically. 0 or -errno (message in err). */
int tcgpud_state_save(const char *path, const struct tcgpud_saved_job *jobs, size_t n, char *err,
                      size_t errlen);

/*
 * Read path into a malloc'd array (*jobs, *n; free() it). A missing file is
 * an empty state (0). Returns 0, or -errno: -EBADMSG for a file that is not
 * a tcgpud state file or has a malformed line (message names the line).
 */
int tcgpud_state_load(const char *path, struct tcgpud_saved_job **jobs, size_t *n, char *err,
                      size_t errlen);

/* The start time of pid (field 22 of /proc/PID/stat), or 0 when it is gone. */
uint64_t tcgpud_proc_start_ticks(pid_t pid);

#endif
