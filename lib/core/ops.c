/*
 * ops.c - checkpoint, suspend and resume: the state machine around the
 * snapshot engine; see ops.h.
 *
 *   RUNNING --checkpoint--> CHECKPOINTING --> RUNNING
 *   RUNNING --suspend--> SUSPENDING --> SUSPENDED --resume--> RESUMING --> RUNNING
 *
 * Every failure returns to the state the operation started from, with the
 * program's memory where it was: a failed checkpoint or suspend leaves the
 * program running; a failed resume leaves it suspended, safely.
 *
 * Every operation runs on one worker thread of the library's, which closes
 * the API gate (the gate lets its closer call the driver freely). So the
 * thread that *asked* (a program thread calling tcgpu_suspend(), or the
 * control server's operation thread) is an ordinary thread to the gate and
 * parks at its next CUDA call while the process is suspended. The worker
 * lives as long as the process: the gate remembers its closer, and a
 * suspended process keeps the gate closed between two operations. The
 * asking thread hands the worker its error record and fires the program's
 * events itself (docs/architecture.md, "The threads an operation crosses").
 */
#include <unistd.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blockers.h"
#include "ipcmem.h"
#include "ncclcut.h"
#include "devmem.h"
#include "devsync.h"
#include "hostkeep.h"
#include "driver/driver.h"
#include "driver/gate.h"
#include "common/log.h"
#include "objects.h"
#include "ops.h"
#include "registry.h"
#include "settings.h"
#include "snapshot.h"
#include "thread.h"
#include "common/clock.h"
#include "common/errmsg.h"
#include "common/names.h"
#include "common/units.h"
#include "events.h"

static pthread_mutex_t op_mutex = PTHREAD_MUTEX_INITIALIZER;     /* one op at a time */
static pthread_mutex_t status_mutex = PTHREAD_MUTEX_INITIALIZER; /* the fields below */
static enum tcgpu_state state = TCGPU_STATE_RUNNING;  /* the operations' own (op_mutex) */
static enum tcgpu_state shown = TCGPU_STATE_RUNNING;  /* what status answers */
static struct tcgpu_status last;      /* last_* fields */
static struct snap *suspended;        /* what a suspend saved, until resume */

static int state_is_transition(enum tcgpu_state s)
{
    return s == TCGPU_STATE_SUSPENDING || s == TCGPU_STATE_RESUMING ||
           s == TCGPU_STATE_CHECKPOINTING;
}

/*
 * An operation's transition shows at once; where it ends shows with its
 * result (record). A reader that saw "suspending" and then "running" must
 * also see why: the failed suspend's last_op and last_error, never the
 * operation before it.
 */
static void set_state(enum tcgpu_state s)
{
    pthread_mutex_lock(&status_mutex);
    state = s;
    if (state_is_transition(s))
        shown = s;
    pthread_mutex_unlock(&status_mutex);
}

static unsigned gate_timeout_ms(void)
{
    return (unsigned)settings_get()->gate_timeout_ms;
}

/* --- one operation ------------------------------------------------------- */

struct op_run {
    enum tcgpu_op op;
    const char *dir;
    const char *parent;               /* checkpoint: parent image, "auto", or NULL */
    const char *who;                  /* for the log line */
    tcgpu_progress_fn progress;
    void *arg;
    struct errmsg_record *err;        /* the asking thread's: the result and message land there */
    uint64_t t_start, t_quiesced, t_freed, t_image, t_end;
};

static char *last_checkpoint_dir;     /* for --parent auto (op_mutex) */

/* TCGPU_HOST_COMPRESS=1: compress a suspend's host copy in the background
 * once the device memory is released (docs/engine.md: the default keeps it
 * raw, which frees the GPU as fast and resumes faster). */
static int host_compress_wanted(void)
{
    return settings_get()->host_compress > 0;
}

/* The phase starts (snapshot.h's contract: done 0; total 0 without a byte count). */
static void phase(const struct op_run *r, enum tcgpu_phase p)
{
    if (r->progress)
        r->progress(p, 0, 0, r->arg);
}

/* The program runs again after an operation: the gate opens and its NCCL
 * peers may go past this rank again. */
static void run_again(void)
{
    tcgpu_gate_open();
    ncclcut_release();
}

/* How long a rank waits for its peers' votes to release a communicator's
 * memory: a gang's ranks vote within milliseconds of one another; a rank
 * suspended alone waits this long before it carries the memory instead. */
#define NCCL_RELEASE_WAIT_MS 1000u

static int quiesce(struct op_run *r)
{
    struct tcgpu_gate_straggler who;
    char msg[256];
    int rc;

    phase(r, TCGPU_PHASE_QUIESCE);
    /* An NCCL rank first becomes level with its peers, or its collectives
     * (and theirs) would wait on the GPUs for ever (ncclcut.h). */
    if ((rc = ncclcut_hold(gate_timeout_ms())) != 0)
        return rc;
    /* A gang's ranks, level, give their communicators' buffers back to the
     * library together: nothing to drain there (ncclcut.h). */
    if (r->op == TCGPU_OP_SUSPEND)
        ncclcut_release_memory(gate_timeout_ms() < NCCL_RELEASE_WAIT_MS ? gate_timeout_ms()
                                                                        : NCCL_RELEASE_WAIT_MS);
    rc = tcgpu_gate_close(gate_timeout_ms(), &who);

    if (rc == -ETIMEDOUT) {
        tcgpu_gate_format_straggler(&who, msg, sizeof(msg));
        errmsg_set("%s", msg);
        ncclcut_release();
        return rc;
    }
    if (rc) {
        errmsg_set("the API gate is already closed");
        ncclcut_release();
        return rc;
    }
    rc = devsync_wait(gate_timeout_ms());
    if (rc)
        run_again();            /* the program goes on as before */
    r->t_quiesced = now_ns();
    return rc;
}

static int do_checkpoint(struct op_run *r)
{
    struct snap *s = NULL;
    int rc;

    if (state != TCGPU_STATE_RUNNING) {
        errmsg_set("the process is %s", tcgpu_state_name(state));
        return -EBUSY;
    }
    set_state(TCGPU_STATE_CHECKPOINTING);
    if ((rc = quiesce(r)) != 0)
        goto out;
    rc = snap_collect(&s, SNAP_MANAGED);
    if (rc == 0 && r->parent) {
        const char *parent = strcmp(r->parent, "auto") ? r->parent : last_checkpoint_dir;
        if (parent && snap_set_parent(s, parent) != 0) {
            errmsg_set("out of host memory");
            rc = -ENOMEM;
        }
    }
    if (rc == 0)
        rc = snap_save_image(s, r->dir, r->progress, r->arg);
    if (rc == 0) {
        r->t_image = now_ns();
        pthread_mutex_lock(&status_mutex);
        last.image_bytes = snap_stored_bytes(s);
        pthread_mutex_unlock(&status_mutex);
        free(last_checkpoint_dir);
        last_checkpoint_dir = realpath(r->dir, NULL);
    }
    run_again();
    snap_free(s);
out:
    set_state(TCGPU_STATE_RUNNING);
    return rc;
}

/*
 * After a failed suspend released memory: rebuild it from the host copy.
 * Keeps the operation's message (extended when the memory cannot go back).
 * Returns 0 when the memory is back, else -errno.
 */
static int put_back(struct snap *s)
{
    char why[512];
    int rc;

    snprintf(why, sizeof(why), "%s", errmsg_get());
    rc = snap_rebuild(s, NULL, NULL);
    if (rc == 0) {
        errmsg_set("%s", why);
        return 0;
    }
    log_err("suspend failed (%s); the memory cannot be put back now (%s): the process stays "
            "suspended with its contents in host memory", why, errmsg_get());
    errmsg_set("%s; the process stays suspended (its memory is kept in host memory: "
                       "resume it when the device has room)", why);
    return rc;
}

/*
 * After a failed suspend released what it opened from other processes (CUDA
 * IPC): open it again, at the same addresses. Keeps the operation's message
 * (extended when the memory cannot come back). 0, or -errno.
 */
static int reopen_back(void)
{
    char why[512];
    int rc;

    snprintf(why, sizeof(why), "%s", errmsg_get());
    rc = ipcmem_reopen(gate_timeout_ms());
    if (rc == 0) {
        errmsg_set("%s", why);
        return 0;
    }
    log_err("suspend failed (%s); the memory opened from another process cannot be mapped again "
            "now (%s): the process stays suspended", why, errmsg_get());
    errmsg_set("%s; the process stays suspended (%s): resume it when that is back", why, errmsg_get());
    return rc;
}

/*
 * A suspend failed before it released any memory of ours, after it released
 * what the process opened from other processes, and that cannot be opened
 * again now (its exporter was suspended meanwhile): the program cannot run
 * without it. Stay suspended with our memory where it is, on the device
 * (processes may still map it: it must not change under them);
 * suspended = NULL tells a resume to only open again.
 */
static int stay_suspended_in_place(struct snap *s, int rc)
{
    snap_free(s);
    suspended = NULL;
    set_state(TCGPU_STATE_SUSPENDED);
    return rc;
}

static int do_suspend(struct op_run *r)
{
    struct snap *s = NULL;
    int rc;

    if (state == TCGPU_STATE_SUSPENDED) {
        errmsg_set("the process is already suspended");
        return -EALREADY;
    }
    set_state(TCGPU_STATE_SUSPENDING);
    if ((rc = quiesce(r)) != 0)
        goto fail;
    if ((rc = snap_collect(&s, SNAP_SUSPEND)) != 0)
        goto fail_open;
    /* What we opened from other processes goes first, and then we wait for
     * those that map our memory to let it go (their suspends release it,
     * ipcmem.h): in that order two processes that map each other's memory
     * suspend together too. */
    ipcmem_release_opened();
    if ((rc = ipcmem_wait_importers(gate_timeout_ms())) != 0)
        goto fail_reopen;
    /* Raw to host memory first, even for an image: the device is released
     * as soon as the bytes are off it; compressing and writing come after. */
    rc = snap_save_host(s, r->progress, r->arg);
    if (rc)
        goto fail_reopen;
    phase(r, TCGPU_PHASE_RELEASE);
    rc = snap_release(s);
    if (rc)
        goto undo_release;
    r->t_freed = now_ns();
    if (r->dir) {
        pthread_mutex_lock(&status_mutex);
        last.last_free_ns = r->t_freed - r->t_start;   /* visible while writing */
        pthread_mutex_unlock(&status_mutex);
        rc = snap_save_image(s, r->dir, r->progress, r->arg);
        if (rc) {
            r->t_freed = 0;
            goto undo_release;
        }
        r->t_image = now_ns();
        /* The bytes are on disk: keep no host memory (a save's CRIU dump
         * would carry it). */
        hostkeep_release("suspended to an image");
    } else if (host_compress_wanted()) {
        snap_compress_host(s);
    }
    /* The gate stays closed: the program's CUDA threads park until resume. */
    suspended = s;
    pthread_mutex_lock(&status_mutex);
    last.image_bytes = snap_stored_bytes(s);
    state = TCGPU_STATE_SUSPENDED;
    pthread_mutex_unlock(&status_mutex);
    return 0;

undo_release:
    /* A failed suspend leaves the program running as before: open again
     * what it opened from other processes, and put the memory back from
     * the host copy. When either cannot be done now (the exporter was
     * suspended meanwhile, the device filled up), stay suspended with the
     * contents in host memory (never resumed onto missing memory); a later
     * resume puts them back. */
    if (reopen_back() != 0) {
        suspended = s;
        set_state(TCGPU_STATE_SUSPENDED);
        return rc;
    }
    if (put_back(s) != 0) {
        ipcmem_release_opened();
        suspended = s;
        set_state(TCGPU_STATE_SUSPENDED);
        return rc;
    }
    goto fail_open;
fail_reopen:
    if (reopen_back() != 0)
        return stay_suspended_in_place(s, rc);
fail_open:
    snap_free(s);
    run_again();
fail:
    set_state(TCGPU_STATE_RUNNING);
    return rc;
}

/*
 * Resume from an image that has moved (gpuckpt save renames its temporary
 * directory after the process wrote into it). *prev receives the old path.
 */
static int move_image(const char *dir, char **prev)
{
    const char *cur = snap_image_dir(suspended);

    if (!cur) {
        errmsg_set("the process was suspended to host memory, not to an image: "
                           "no image directory to resume from");
        return -EINVAL;
    }
    if (!(*prev = strdup(cur)) || snap_set_image_dir(suspended, dir) != 0) {
        free(*prev);
        *prev = NULL;
        errmsg_set("out of host memory");
        return -ENOMEM;
    }
    return 0;
}

/*
 * A resume put our memory back but cannot open again what we opened from
 * another process (it stays suspended): stay suspended. Released again when
 * nobody imported the memory meanwhile; else (or when it cannot be released)
 * it stays on the device, still exported, and suspended = NULL: the next
 * resume only opens again. Keeps the message, extended.
 */
static void resume_back_off(struct op_run *r)
{
    char why[512];

    snprintf(why, sizeof(why), "%s", errmsg_get());
    if (!suspended)
        return;                 /* in place already: exports stay served */
    /* Memory another process imported meanwhile must not change under it:
     * neither released nor refilled. */
    if (ipcmem_exports_close() == 0) {
        if (snap_release(suspended) == 0)
            return;             /* suspended as before, its memory released */
        if (put_back(suspended) != 0)
            return;             /* partly released and not back: put_back said it */
    }
    ipcmem_exports_open();      /* whoever imported it maps it: keep it served */
    if (!r->dir)
        snap_discard_image(suspended);
    snap_free(suspended);
    suspended = NULL;
    log_info("resume: the process stays suspended with its memory on the device (another process "
             "may map it)");
    errmsg_set("%s; its own memory stays on the device", why);
}

static int do_resume(struct op_run *r)
{
    char *prev = NULL;
    int rc = 0;

    if (state != TCGPU_STATE_SUSPENDED) {
        errmsg_set("the process is not suspended");
        return -EALREADY;
    }
    if (r->dir && !suspended) {
        errmsg_set("the process's memory stayed on the device: no image directory to resume from");
        return -EINVAL;
    }
    if (r->dir && (rc = move_image(r->dir, &prev)) != 0)
        return rc;
    set_state(TCGPU_STATE_RESUMING);
    r->t_quiesced = now_ns();
    if (suspended && (rc = snap_rebuild(suspended, r->progress, r->arg)) != 0) {
        /* the new place was for this attempt only */
        if (prev)
            snap_set_image_dir(suspended, prev);
        free(prev);
        set_state(TCGPU_STATE_SUSPENDED);
        return rc;
    }
    /* Our memory is back: processes that map it may open it again now,
     * while we open again what we opened from others (ipcmem.h). */
    ipcmem_exports_open();
    if ((rc = ipcmem_reopen(gate_timeout_ms())) != 0) {
        resume_back_off(r);
        if (prev && suspended)
            snap_set_image_dir(suspended, prev);
        free(prev);
        set_state(TCGPU_STATE_SUSPENDED);
        return rc;
    }
    free(prev);
    if (!r->dir && suspended)
        snap_discard_image(suspended);  /* in place only: an image named to us is its owner's */
    snap_free(suspended);
    suspended = NULL;
    devmem_trim();
    set_state(TCGPU_STATE_RUNNING);
    run_again();
    ipcmem_exports_close();             /* the open gate decides again */
    return 0;
}

static void op_thread(struct op_run *r)
{
    struct errmsg_record *own = errmsg_carry(r->err);
    int rc;

    errmsg_clear();
    r->t_start = now_ns();
    switch (r->op) {
    case TCGPU_OP_CHECKPOINT: rc = do_checkpoint(r); break;
    case TCGPU_OP_SUSPEND:    rc = do_suspend(r); break;
    case TCGPU_OP_RESUME:     rc = do_resume(r); break;
    default:                  rc = -EINVAL; break;
    }
    /* The drain's and the refill's buffers were freed, but glibc keeps freed
     * memory in its arenas: give it back, or a process CRIU dumps next (a
     * suspend to an image is how its CRIU plugin takes a job off) carries
     * tens of MiB of dead pages in its images. */
    malloc_trim(0);
    r->t_end = now_ns();
    errmsg_result(rc);
    errmsg_carry(own);
}

static void record(const struct op_run *r)
{
    pthread_mutex_lock(&status_mutex);
    last.last_op = r->op;
    last.last_result = r->err->rc;
    last.last_quiesce_ns = r->t_quiesced ? r->t_quiesced - r->t_start : 0;
    last.last_free_ns = r->t_freed ? r->t_freed - r->t_start : 0;
    last.last_image_ns = r->t_image ? r->t_image - r->t_start : 0;
    last.last_total_ns = r->t_end - r->t_start;
    snprintf(last.last_error, sizeof(last.last_error), "%.255s", r->err->text);
    shown = state;
    pthread_mutex_unlock(&status_mutex);
}

static enum tcgpu_event success_event(enum tcgpu_op op)
{
    switch (op) {
    case TCGPU_OP_SUSPEND: return TCGPU_EVENT_SUSPENDED;
    case TCGPU_OP_RESUME:  return TCGPU_EVENT_RESUMED;
    default:               return TCGPU_EVENT_CHECKPOINTED;
    }
}

/* --- the worker ---------------------------------------------------------- */

static pthread_mutex_t worker_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t worker_cond = PTHREAD_COND_INITIALIZER;
static struct op_run *worker_job;     /* posted, not yet done */
static int worker_done;
static pid_t worker_pid;              /* the process the worker belongs to (fork) */

static void *worker_main(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&worker_mutex);
    for (;;) {
        while (!worker_job || worker_done)
            pthread_cond_wait(&worker_cond, &worker_mutex);
        struct op_run *r = worker_job;
        pthread_mutex_unlock(&worker_mutex);
        op_thread(r);
        pthread_mutex_lock(&worker_mutex);
        worker_done = 1;
        pthread_cond_broadcast(&worker_cond);
    }
    return NULL;
}

/* Starts the worker once per process (a forked child starts its own). */
static int worker_ensure(void)
{
    int rc;

    if (worker_pid == getpid())
        return 0;
    if ((rc = core_thread_start(NULL, worker_main, "tcgpu-ops", 0)))
        return rc;
    worker_pid = getpid();
    return 0;
}

/* Runs r on the worker and waits for it; op_mutex held. */
static int worker_run(struct op_run *r)
{
    int rc = worker_ensure();

    if (rc) {
        errmsg_set("cannot start the operation thread: %s", strerror(-rc));
        return rc;
    }
    pthread_mutex_lock(&worker_mutex);
    worker_job = r;
    worker_done = 0;
    pthread_cond_broadcast(&worker_cond);
    while (!worker_done)
        pthread_cond_wait(&worker_cond, &worker_mutex);
    worker_job = NULL;
    pthread_mutex_unlock(&worker_mutex);
    return 0;
}

/* The operation's one log line (ops.h): held is the device memory it held before. */
static void log_op(const struct op_run *r, uint64_t held)
{
    char t[32], b[32];
    const char *who = r->who ? r->who : "the program";

    if (r->err->rc == 0 && r->op == TCGPU_OP_SUSPEND)
        log_info("%s (%s): done in %s, %s of GPU memory freed%s%s", tcgpu_op_name(r->op), who,
                 units_format_ns(r->t_end - r->t_start, t, sizeof(t)), units_format_bytes(held, b, sizeof(b)),
                 r->dir ? ", image " : "", r->dir ? r->dir : "");
    else if (r->err->rc == 0)
        log_info("%s (%s): done in %s%s%s", tcgpu_op_name(r->op), who,
                 units_format_ns(r->t_end - r->t_start, t, sizeof(t)),
                 r->dir && r->op == TCGPU_OP_CHECKPOINT ? ", image " : "",
                 r->dir && r->op == TCGPU_OP_CHECKPOINT ? r->dir : "");
    else
        log_info("%s (%s): failed: %s%s%s", tcgpu_op_name(r->op), who, errno_name(r->err->rc),
                 r->err->text[0] ? ": " : "", r->err->text);
}

static int run_op_parent(enum tcgpu_op op, const char *dir, const char *parent,
                         const struct tcgpu_op_caller *by)
{
    struct op_run r = { .op = op, .dir = dir, .parent = parent, .err = errmsg_record() };
    struct reg_counts before;
    int rc;

    if (by) {
        r.who = by->who;
        r.progress = by->progress;
        r.arg = by->arg;
    }
    if (tcgpu_driver_load() != 0) {
        errmsg_set("the CUDA driver is not loaded");
        return -ENODEV;
    }
    pthread_mutex_lock(&op_mutex);
    reg_lock();
    reg_counts(&before);
    reg_unlock();
    tcgpu_emit_event(TCGPU_EVENT_BEFORE_QUIESCE, op, 0);
    rc = worker_run(&r);
    if (rc) {
        pthread_mutex_unlock(&op_mutex);
        errmsg_result(rc);
        log_op(&r, before.phys_bytes);
        return rc;
    }
    record(&r);
    pthread_mutex_unlock(&op_mutex);

    /* The worker wrote the result and message into this thread's record. */
    rc = r.err->rc;
    log_op(&r, before.phys_bytes);
    if (rc == 0)
        tcgpu_emit_event(success_event(op), op, 0);
    else
        tcgpu_emit_event(TCGPU_EVENT_FAILED, op, rc);
    return rc;
}

static int run_op(enum tcgpu_op op, const char *dir, const struct tcgpu_op_caller *by)
{
    return run_op_parent(op, dir, NULL, by);
}

int tcgpu_op_checkpoint(const char *dir, const struct tcgpu_op_caller *by)
{
    return tcgpu_op_checkpoint_parent(dir, NULL, by);
}

int tcgpu_op_checkpoint_parent(const char *dir, const char *parent, const struct tcgpu_op_caller *by)
{
    if (!dir || !*dir) {
        errmsg_set("checkpoint needs an image directory");
        return -EINVAL;
    }
    return run_op_parent(TCGPU_OP_CHECKPOINT, dir, parent && *parent ? parent : NULL, by);
}

int tcgpu_op_suspend(const char *dir, const struct tcgpu_op_caller *by)
{
    return run_op(TCGPU_OP_SUSPEND, dir && *dir ? dir : NULL, by);
}

int tcgpu_op_resume(const struct tcgpu_op_caller *by)
{
    return run_op(TCGPU_OP_RESUME, NULL, by);
}

int tcgpu_op_resume_from(const char *dir, const struct tcgpu_op_caller *by)
{
    if (dir && *dir && dir[0] != '/') {
        errmsg_set("resume needs an absolute image directory, not '%s'", dir);
        return -EINVAL;
    }
    return run_op(TCGPU_OP_RESUME, dir && *dir ? dir : NULL, by);
}

/*
 * What the registry counts, for status. An operation holds the registry lock
 * over many driver calls (a rebuild creates and maps every physical
 * allocation under it): status does not wait for it, it answers with what
 * it counted last (status_mutex).
 */
static void registry_counts(struct reg_counts *rc, uint64_t *bytes, uint32_t *count)
{
    static struct reg_counts last_rc;
    static uint64_t last_bytes;
    static uint32_t last_count;

    if (reg_trylock()) {
        devmem_usage_locked(&last_bytes, &last_count);
        reg_counts(&last_rc);
        reg_unlock();
    }
    *rc = last_rc;
    *bytes = last_bytes;
    *count = last_count;
}

int tcgpu_op_status(struct tcgpu_status *st)
{
    struct reg_counts rc;
    uint64_t bytes;
    uint32_t count;

    if (!st)
        return -EINVAL;
    pthread_mutex_lock(&status_mutex);
    registry_counts(&rc, &bytes, &count);
    *st = last;
    st->state = shown;
    pthread_mutex_unlock(&status_mutex);
    st->gpu_bytes = rc.phys_bytes;
    st->tracked_bytes = bytes + rc.tracked_bytes;
    st->allocations = count + rc.allocations;
    st->contexts = objects_get_count(OBJ_CONTEXT);
    st->streams = objects_get_count(OBJ_STREAM);
    st->events = objects_get_count(OBJ_EVENT);
    st->modules = objects_get_count(OBJ_MODULE);
    return 0;
}

void tcgpu_op_put_blockers(struct ctl_buf *reply)
{
    blockers_put(reply);
}

int tcgpu_op_ipc_export(const struct ctl_msg *req, pid_t peer, struct ctl_buf *reply)
{
    return ipcmem_serve(req, peer, reply);
}

/* What our program let go of and the peer no longer holds is freed now,
 * as the driver would, when no operation holds a snapshot of the registry
 * (none running, and not suspended); else at the program's next VMM call. */
static void free_orphans_if_idle(void)
{
    if (pthread_mutex_trylock(&op_mutex) == 0) {
        if (state == TCGPU_STATE_RUNNING)
            ipcmem_orphans_free();
        pthread_mutex_unlock(&op_mutex);
    }
}

int tcgpu_op_ipc_forget(const struct ctl_msg *req, pid_t peer, struct ctl_buf *reply)
{
    int r = ipcmem_serve_forget(req, peer, reply);

    if (r == 0)
        free_orphans_if_idle();
    return r;
}

/* A peer that died held nothing any more: free as tcgpu_op_ipc_forget does. */
void tcgpu_op_ipc_closed(pid_t peer)
{
    ipcmem_peer_closed(peer);
    free_orphans_if_idle();
}
