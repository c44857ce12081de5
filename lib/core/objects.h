/*
 * objects.h - the driver objects a process holds besides memory: contexts,
 * streams, events and modules.
 *
 * Suspend in place keeps them all (only device memory is released), so the
 * registry needs little about them: the live contexts, to wait for their
 * work before draining, and counts for `gpuckpt status`. The interposer's
 * wrappers report creations and destructions here after the real call
 * succeeded. Thread-safe.
 */
#ifndef TCGPU_OBJECTS_H
#define TCGPU_OBJECTS_H

#include <stddef.h>
#include <sys/types.h>
#include <cuda.h>

enum obj_kind { OBJ_CONTEXT, OBJ_STREAM, OBJ_EVENT, OBJ_MODULE, OBJ_KIND_COUNT };

void objects_ctx_created(CUcontext ctx, CUdevice dev, int primary);
/* A context destroyed, or a reference to a primary context released.
 * Returns 1 when the context is gone now (its last reference), else 0. */
int objects_ctx_destroyed(CUcontext ctx);
/* A primary context reset (cuDevicePrimaryCtxReset): gone, however many
 * references it had. Returns 1 when it was known. */
int objects_ctx_reset(CUcontext ctx);
void objects_count(enum obj_kind kind, int delta);

/* Counts for status. */
unsigned objects_get_count(enum obj_kind kind);

/*
 * Copies up to `max` live contexts (each with its device) into the arrays;
 * returns how many there are (may exceed max).
 */
size_t objects_contexts(CUcontext *ctxs, CUdevice *devs, size_t max);

/* --- streams and the work last put on them --------------------------------
 * So that an operation can wait for the device with a bound, querying each
 * stream instead of blocking in cuCtxSynchronize, and say what is still
 * running when the bound is reached (lib/core/devsync.c, devsync_wait). */

enum obj_stream_kind {
    OBJ_STREAM_CREATED = 1,       /* cuStreamCreate/WithPriority: queryable by handle */
    OBJ_STREAM_LEGACY,            /* a context's legacy default stream: queryable */
    OBJ_STREAM_PER_THREAD,        /* a thread's per-thread default stream: only that thread can name it */
};

enum obj_work_kind { OBJ_WORK_NONE, OBJ_WORK_KERNEL, OBJ_WORK_HOSTFN, OBJ_WORK_WAIT, OBJ_WORK_GRAPH };

struct obj_stream {
    enum obj_stream_kind kind;
    CUstream handle;              /* CREATED */
    CUcontext ctx;
    unsigned flags;               /* CREATED: CU_STREAM_NON_BLOCKING... */
    pid_t tid;                    /* PER_THREAD: the thread; CREATED: its creator */
    const char *call;             /* last work put on it: the call (static string) */
    enum obj_work_kind work;
    const void *what;             /* the kernel (CUfunction), host function, event... */
};

void objects_stream_created(CUstream s, CUcontext ctx, unsigned flags);
void objects_stream_destroyed(CUstream s);

/*
 * The program put work on `s` with `call` (after the call succeeded):
 * `per_thread` says the call is a _ptsz/_ptds flavour (stream 0 is then the
 * thread's per-thread default stream). The current context names the
 * default streams. Cheap: a lock and a short search.
 */
void objects_note_work(CUstream s, int per_thread, const char *call, enum obj_work_kind work,
                       const void *what);

/* The streams known for ctx (created ones, and default streams work was
 * noted on): up to max into out; returns how many there are. */
size_t objects_streams_of(CUcontext ctx, struct obj_stream *out, size_t max);

/* Forgets a destroyed context's streams. */
void objects_forget_streams(CUcontext ctx);

/* "stream 0x55d0 (non-blocking, created by thread 1234): last cuLaunchKernel(spin)"
 * into buf; names kernels with the driver's cuFuncGetName, host functions
 * with their symbol when they have one. */
void objects_describe_stream(const struct obj_stream *s, char *buf, size_t len);

#endif
