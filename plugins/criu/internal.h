/*
 * internal.h - the pieces of tcgpu's CRIU plugin, tcgpu_plugin.so, and of
 * its helper, tcgpu-criu-helper, and their contracts (docs/kubernetes.md,
 * "The CRIU plugin"; README.md beside this file). The plugin's face is its
 * hooks' registration with CRIU in plugin.c; nothing here is seen outside.
 *
 * CRIU loads the plugin into its own process (criu dump / restore, or the
 * `criu swrk` that runc starts for podman, CRI-O and containerd) and calls
 * its hooks with host pids:
 *
 *   init(DUMP)                  read the configuration
 *   PAUSE_DEVICES(pid)          the task still runs: a tcgpu process is
 *                               suspended into a GPU image in CRIU's images
 *                               directory and its context handed to the
 *                               driver (Lock + Checkpoint); the index records it
 *   CHECKPOINT_DEVICES(pid)     tasks frozen: nothing left to do, but a tcgpu
 *                               process is claimed (0) so that no later plugin
 *                               (NVIDIA's cuda_plugin) acts on it
 *   fini(DUMP, ret)             on failure or --leave-running every process is
 *                               given back what was taken
 *   init(RESTORE)               the index and every GPU image verified whole,
 *                               and the device model, before anything is restored
 *   RESUME_DEVICES_LATE(pid)    tasks restored but held by CRIU: the driver's
 *                               restore thread and tcgpu's service threads are
 *                               let run, the context comes back and the memory is
 *                               refilled at the same addresses; then CRIU lets
 *                               the tasks go
 *
 * Who owns a process: a process with a tcgpu control socket is this plugin's
 * (its hooks answer 0, which ends CRIU's plugin chain for that pid); any
 * other answers -ENOTSUP and is left to the next plugin or to CRIU.
 *
 * CRIU is single-threaded around its hooks: nothing here takes locks.
 */
#ifndef TCGPU_CRIU_INTERNAL_H
#define TCGPU_CRIU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/log.h"
#include "tcgpu.h"

#define TP_NAME "tcgpu_plugin"          /* as CRIU lists it (inventory, log) */
#define TP_INDEX "tcgpu.img"            /* the index, in CRIU's images directory */
#define TP_GPU_SUBDIR "tcgpu"           /* the GPU images, <images>/tcgpu/<vpid> */
#define TP_HELPER "tcgpu-criu-helper"  /* the helper program, beside the plugin */
#define TP_MAX_PROCS 256
#define TP_MAX_TIDS 24                  /* threads recorded per process: the driver's,
                                           libtcgpu's service threads (at most 16) */

/* ---- log.c: into CRIU's log ---------------------------------------------------- */

/*
 * The plugin and its helper log with common/log.h (log_err, log_warn,
 * log_info), once this ran at their start: each line goes into CRIU's log
 * (print_on_level when CRIU exports it; else errors and warnings to stderr),
 * prefixed "tcgpu_plugin: ", errors and warnings as CRIU writes its own
 * ("Error (tcgpu_plugin): ").
 */
void tp_log_setup(void);

/* ---- config.c: what the plugin is told ---------------------------------------- */

struct tp_config {
    int timeout_ms;             /* a suspend or a resume of one process; 0: none */
    char path[4096];            /* the file it was read from, "" if none */
};

/*
 * Reads $TCGPU_CRIU_CONFIG, else tcgpu_plugin.conf beside the plugin, else
 * /etc/tcgpu/criu-plugin.conf (the first that exists; none is fine):
 * [plugin] timeout=SECONDS, and [environment] NAME=VALUE pairs set in CRIU's
 * process unless already set (the driver's TCGPU_REAL_LIBCUDA,
 * CUDA_VISIBLE_DEVICES, a simulated device's SIMCUDA_SHM). 0, or -errno with
 * the reason logged.
 */
int tp_config_load(struct tp_config *c);

/* ---- index.c: what a dump wrote ------------------------------------------------- */

/* One tcgpu process of a dump. */
struct tp_proc {
    pid_t pid;                  /* host pid at dump (CRIU's "real" pid) */
    pid_t vpid;                 /* its pid where it lives: names its image, the same after restore */
    uid_t uid;
    char comm[64];
    int suspended_by_us;        /* 1: it was running, the dump suspended it; restore resumes it */
    int released_by_us;         /* 1: the dump handed its context to the driver */
    uint8_t image_csum[16];     /* its GPU image's manifest checksum */
    int ntids;
    pid_t tids[TP_MAX_TIDS];    /* threads that must run for a resume, by their pids where
                                   they live: the driver's restore thread, tcgpu's own */
};

struct tp_index {
    int n;
    struct tp_proc proc[TP_MAX_PROCS];
};

/* Seals idx into TP_INDEX under imgdir (atomically). 0 or -errno (logged). */
int tp_index_write(int imgdir, const struct tp_index *idx);

/* Reads TP_INDEX under imgdir: 0, -ENOENT (none: no tcgpu process was
 * dumped), -EBADMSG / -EPROTONOSUPPORT (logged, naming the problem). */
int tp_index_read(int imgdir, struct tp_index *idx);

struct tp_proc *tp_index_find_vpid(struct tp_index *idx, pid_t vpid);

/* ---- threads.c: the threads CRIU holds ------------------------------------------- */

/* Threads of one task let run while CRIU holds the rest (see threads.c). */
struct tp_running {
    pid_t pid;
    int n;
    pid_t tid[TP_MAX_TIDS];
    uint64_t sigmask[TP_MAX_TIDS];
};

/*
 * Lets the threads tids (n of them, by their pids where they live) of task
 * pid run, if CRIU holds them stopped (we are their tracer); threads that
 * are not stopped by us are left alone. tp_threads_hold stops them again
 * as CRIU had them. Returns 0 or -errno (logged).
 */
int tp_threads_run(pid_t pid, const pid_t *tids, int n, struct tp_running *run);
int tp_threads_hold(struct tp_running *run);

/* The ns pids of task pid's threads named tcgpu-* (tcgpu's own), appended to
 * tids: what an older libtcgpu.so, which does not list its service threads,
 * is asked for instead. Threads those start inherit the name. */
int tp_threads_tcgpu(pid_t pid, pid_t *tids, int n, int max);

/* Appends the comma-separated tids of s to tids[*n] (at most max in all,
 * none twice). Returns 0, or -1 when s is malformed or holds too many. */
int tp_tids_parse(const char *s, pid_t *tids, int *n, int max);

/* A thread's pid where it lives (its NSpid's last), from the caller's tid; 0 if gone. */
pid_t tp_tid_ns(pid_t pid, pid_t tid);

/* ---- driver.c: the driver's checkpoint API ---------------------------------------- */

struct gdrv_device;

/*
 * Two ways to the driver, behind one face. CRIU's own process must not load
 * the driver: a driver starts threads, and CRIU joins mount namespaces
 * (setns) that only a single-threaded process may join. So the plugin goes
 * through tcgpu-criu-helper (helper.c), one short process per call, as
 * NVIDIA's cuda_plugin goes through cuda-checkpoint; the helper itself calls
 * the driver directly. Each returns 0 or -errno with a message in err (the
 * errors of ckptapi/ckptapi.h).
 */
struct tp_driver {
    /* the driver's state of pid (GDRV_*) and its restore thread (0 if none) */
    int (*state)(pid_t pid, int *state, pid_t *restore_tid, char *err, size_t len);
    int (*release)(pid_t pid, unsigned timeout_ms, char *err, size_t len);
    int (*reacquire)(pid_t pid, char *err, size_t len);
    /* the devices now: how many (at most max filled), or -errno */
    int (*devices)(struct gdrv_device *devs, int max, char *err, size_t len);
};
extern const struct tp_driver tp_driver_direct;
extern const struct tp_driver tp_driver_helper;

/* GPUs to remap at every later reacquire (a restore onto another GPU of the
 * same model): n pairs, at most 16, of old and new device UUIDs. */
void tp_driver_remap(const uint8_t (*old_uuid)[16], const uint8_t (*new_uuid)[16], int n);

/* ---- job.c: one tcgpu process ------------------------------------------------------- */

/*
 * Asks process pid for `cmd` ("status", "suspend", "resume") with dir=name
 * under the directory dirfd (passed with the request; name NULL: none), and
 * waits up to timeout_ms (0: no limit). st (may be NULL) receives the status
 * of the reply. Returns 0; -ENOENT / -ECONNREFUSED / -ESRCH (not a tcgpu
 * process); or the process's -errno with its message in err.
 */
int tp_job_call(pid_t pid, const char *cmd, int dirfd, const char *name, int timeout_ms,
                struct tcgpu_status *st, char *err, size_t len);

/*
 * Appends to tids[*n] (at most max in all, none twice) the threads process
 * pid says a resume needs (its status' service_threads: its own threads,
 * which never end by themselves; by their pids where they live). Returns 0;
 * -ENOENT when its library does not say (an older libtcgpu.so); or -errno
 * with the message in err.
 */
int tp_job_service_threads(pid_t pid, pid_t *tids, int *n, int max, int timeout_ms, char *err,
                           size_t len);

/* Its pid where it lives (NSpid's last); pid itself outside namespaces. */
pid_t tp_job_vpid(pid_t pid);

/*
 * Gives process p (host pid `pid` now) back what a dump took, in order:
 * its context (driver Restore + Unlock) if the dump released it, then its
 * memory from its image (dirfd/<vpid>) if the dump suspended it. Its
 * service threads must be running. Returns 0, or -errno after logging what
 * is left to do by hand.
 */
int tp_job_give_back(const struct tp_proc *p, pid_t pid, int gpudir, int timeout_ms,
                     const struct tp_driver *drv);

/* ---- helper.c's watch: see dump.c ---------------------------------------------------------- */

/* Waits for CRIU to end or let go of the processes of idx; gives back those let go alive. */
void tp_watch(struct tp_index *idx, int gpudir, int timeout_ms);

/* ---- dump.c / restore.c: the hooks' work ---------------------------------------------- */

int tp_dump_init(const struct tp_config *c);
int tp_dump_pause(pid_t pid);
int tp_dump_owns(pid_t pid);
void tp_dump_fini(int ret);

int tp_restore_init(const struct tp_config *c);
int tp_restore_resume(pid_t pid);
void tp_restore_fini(void);

/* The helper program: beside the plugin, else where it was installed. 0 or -ENOENT. */
int tp_helper_path(char *out, size_t len);

/* The directory of the GPU images: $TCGPU_CRIU_GPU_DIR (absolute, a private
 * directory of ours), else <images>/tcgpu (made when create). fd or -errno. */
int tp_gpu_dir_open(int imgdir, int create);

#endif
