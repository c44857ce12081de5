/*
 * tcgpu.h - transparent checkpoint and preemptive sharing of GPUs: the C API.
 *
 * This is the one public header of libtcgpu.so. Each function's contract
 * (what it returns, what the caller owns afterwards, which threads may call
 * it) sits next to its prototype.
 *
 * Conventions
 *   - Functions return 0 on success or a negative errno value. The codes a
 *     caller can act on are listed with each function; tcgpu_strerror() names
 *     any of them, and tcgpu_last_error() gives the detailed message of the
 *     calling thread's last failed operation ("cuIpcGetMemHandle: IPC memory
 *     handles cannot be checkpointed").
 *   - Every operation may also return -ENODEV (the CUDA driver could not be
 *     loaded) and -ENOMEM (host memory ran out); they are not repeated below.
 *   - All functions are thread-safe unless a comment says otherwise.
 *   - Operations (checkpoint, suspend, resume) are serialised: one at a time
 *     per process; a second caller waits for the first to finish.
 *
 * Using the API without linking against libtcgpu
 *   A framework that wants to work with or without the library preloaded
 *   looks the functions up at run time:
 *
 *       typedef int (*tcgpu_hint_skip_fn)(unsigned long long, size_t, int);
 *       tcgpu_hint_skip_fn hint = (tcgpu_hint_skip_fn)dlsym(RTLD_DEFAULT, "tcgpu_hint_skip");
 *       if (hint)
 *           hint(ptr, len, 1);
 *
 *   RTLD_DEFAULT finds the functions when libtcgpu.so is preloaded (or linked)
 *   and returns NULL otherwise, so the framework runs unchanged without it.
 */
#ifndef TCGPU_H
#define TCGPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TCGPU_VERSION_MAJOR 0
#define TCGPU_VERSION_MINOR 1
#define TCGPU_VERSION_PATCH 0
#define TCGPU_VERSION_STRING "0.1.0"

#if defined(__GNUC__)
#define TCGPU_API __attribute__((visibility("default")))
#else
#define TCGPU_API
#endif

/* The library's version, "MAJOR.MINOR.PATCH"; a static string. */
TCGPU_API const char *tcgpu_version_string(void);

/* ---------------------------------------------------------------------------
 * Operations
 * ------------------------------------------------------------------------- */

/*
 * Write an image of the process's device state to the directory `dir` and
 * carry on. CUDA calls from the program's threads wait while the device
 * memory is drained (the API gate is closed) and proceed afterwards.
 *
 * `dir` must not exist; it is created whole or not at all (written under a
 * temporary name, fsynced, renamed). Mode 0700, files 0600.
 *
 * Returns 0, or:
 *   -EEXIST      dir exists
 *   -ENOTSUP     the program holds state that cannot be checkpointed (IPC
 *                handles, external memory, arrays...); tcgpu_last_error()
 *                names the call that created it
 *   -ETIMEDOUT   a CUDA call did not return within the gate timeout
 *                (TCGPU_GATE_TIMEOUT_MS, default 10000); tcgpu_last_error()
 *                names the thread and the call
 *   -EBUSY       the process is suspended (resume it first)
 *   -EIO         the driver failed a copy or a context switch; the message
 *                names the call and the CUresult
 *   -ENOSPC, -EIO, ...  writing the image failed; nothing is left behind
 * On any error the program continues exactly as before.
 */
TCGPU_API int tcgpu_checkpoint(const char *dir);

/*
 * Take the process off the GPU: drain all tracked device memory (to `dir`
 * when not NULL, else to host memory), unmap and release the physical device
 * memory (it is free for other processes; the device addresses stay reserved),
 * and park every thread that calls CUDA until tcgpu_resume().
 *
 * Returns 0, or the errors of tcgpu_checkpoint() except -EBUSY, plus
 * -EALREADY (already suspended). On error nothing was released and the
 * program continues.
 * A thread that calls tcgpu_suspend() and then a CUDA function blocks until
 * another thread (or a signal, or gpuckpt) resumes the process.
 */
TCGPU_API int tcgpu_suspend(const char *dir);

/*
 * Put the process back on the GPU: re-create the physical memory, map it at
 * the same device addresses, refill the contents (verifying every checksum
 * first when they come from an image), and release the parked threads.
 *
 * Returns 0, or:
 *   -EALREADY    not suspended
 *   -ENOMEM      the device does not have room now (the process stays
 *                suspended, safely; try again later)
 *   -EBADMSG     the image is corrupt or truncated (tcgpu_last_error() names
 *                the file and the chunk); the process stays suspended
 *   -EIO         the driver or the disk failed; the process stays suspended
 */
TCGPU_API int tcgpu_resume(void);

/* ---------------------------------------------------------------------------
 * Status
 * ------------------------------------------------------------------------- */

enum tcgpu_state {
    TCGPU_STATE_RUNNING = 0,     /* on the GPU */
    TCGPU_STATE_CHECKPOINTING,   /* gate closed, writing an image */
    TCGPU_STATE_SUSPENDING,      /* gate closed, draining */
    TCGPU_STATE_SUSPENDED,       /* off the GPU; CUDA calls wait */
    TCGPU_STATE_RESUMING,        /* refilling */
};

enum tcgpu_op {
    TCGPU_OP_NONE = 0,
    TCGPU_OP_CHECKPOINT,
    TCGPU_OP_SUSPEND,
    TCGPU_OP_RESUME,
};

struct tcgpu_status {
    enum tcgpu_state state;
    uint64_t gpu_bytes;          /* device memory the process holds now */
    uint64_t tracked_bytes;      /* bytes of all tracked allocations */
    uint64_t image_bytes;        /* bytes held by the last image (host or disk), stored size */
    uint32_t allocations;        /* tracked allocations */
    uint32_t contexts, streams, events, modules;
    enum tcgpu_op last_op;
    int last_result;             /* 0 or -errno of last_op */
    uint64_t last_quiesce_ns;    /* gate closed and threads parked */
    uint64_t last_free_ns;       /* from start to GPU memory released (suspend); a
                                    suspend to an image releases before it compresses */
    uint64_t last_total_ns;      /* whole operation */
    char last_error[256];        /* message of last_op's failure, "" on success */
    uint64_t last_image_ns;      /* from start to image committed (checkpoint, suspend
                                    to an image); 0 otherwise */
};

/* The size of struct tcgpu_status in release 0.1: what tcgpu_status() fills. */
#define TCGPU_STATUS_SIZE_0_1 (offsetof(struct tcgpu_status, last_image_ns) + sizeof(uint64_t))

/*
 * Fill *st with the process's current state. Never blocks on an operation.
 * Fills the fields of release 0.1 only (TCGPU_STATUS_SIZE_0_1 bytes), now
 * and in every later release, so a program built against this header keeps
 * working when struct tcgpu_status grows. Returns 0, or -EINVAL (st NULL).
 */
TCGPU_API int tcgpu_status(struct tcgpu_status *st);

/*
 * The same for a struct of `size` bytes: pass sizeof(*st) to get every
 * field your header knows. Fields this library does not know are zeroed;
 * fields it knows beyond `size` are left out. Returns 0, or -EINVAL (st
 * NULL or size < TCGPU_STATUS_SIZE_0_1). Fields are only ever added at the
 * end; none moves or changes meaning.
 */
TCGPU_API int tcgpu_get_status(struct tcgpu_status *st, size_t size);

/* Names: "running", "suspended"...; "checkpoint", "suspend"...; static strings. */
TCGPU_API const char *tcgpu_state_name(enum tcgpu_state s);
TCGPU_API const char *tcgpu_op_name(enum tcgpu_op op);

/* A static description of a tcgpu error code ("device state cannot be checkpointed"). */
TCGPU_API const char *tcgpu_strerror(int err);

/*
 * The detailed message of the calling thread's last operation (checkpoint,
 * suspend, resume): its failure's, or "" when it succeeded or none ran. Each
 * operation replaces it; the other functions leave it alone. The string is
 * the thread's own, valid until its next operation.
 */
TCGPU_API const char *tcgpu_last_error(void);

/* ---------------------------------------------------------------------------
 * Events
 * ------------------------------------------------------------------------- */

enum tcgpu_event {
    TCGPU_EVENT_BEFORE_QUIESCE = 1,  /* an operation starts; CUDA still usable */
    TCGPU_EVENT_SUSPENDED,           /* device memory released */
    TCGPU_EVENT_RESUMED,             /* back on the GPU, threads released */
    TCGPU_EVENT_CHECKPOINTED,        /* image written, program continues */
    TCGPU_EVENT_FAILED,              /* an operation failed; the program continues */
};

/*
 * Called on the thread that asked for the operation, and waited for: the
 * program's own thread inside tcgpu_checkpoint(), tcgpu_suspend() or
 * tcgpu_resume(), with whatever locks it holds there (a lock the callback
 * takes must be one the caller does not hold, or a recursive one, such as
 * Python's GIL through PyGILState_Ensure); a thread of the library's for an
 * operation asked from outside the program (gpuckpt, the trigger signal,
 * tcgpud). Never from a signal handler. It must not call CUDA (the gate may
 * be closed) nor start an operation (BEFORE_QUIESCE comes while the
 * operation holds the operations' lock), and should return quickly.
 * One callback per process: setting a new one replaces the old; NULL removes
 * it. `arg` is passed through.
 */
typedef void (*tcgpu_event_fn)(enum tcgpu_event ev, enum tcgpu_op op, int result, void *arg);
TCGPU_API int tcgpu_set_event_callback(tcgpu_event_fn fn, void *arg);

/* ---------------------------------------------------------------------------
 * Hints from frameworks
 * ------------------------------------------------------------------------- */

/*
 * The device range [ptr, ptr + len) holds nothing worth saving (for example a
 * free block of a caching allocator): checkpoints skip it and a resume leaves
 * its contents undefined. skip = 0 withdraws the hint for the range. The
 * range must lie inside tracked allocations; hints on freed memory vanish.
 * Returns 0 or -EINVAL.
 */
TCGPU_API int tcgpu_hint_skip(uint64_t ptr, size_t len, int skip);

/* Element types; the values are stored in images and never change. */
enum tcgpu_dtype {
    TCGPU_DTYPE_UNKNOWN = 0,     /* detect */
    TCGPU_DTYPE_U8 = 1,          /* opaque bytes; no byte grouping */
    TCGPU_DTYPE_BF16 = 2,
    TCGPU_DTYPE_FP16 = 3,
    TCGPU_DTYPE_FP32 = 4,
    TCGPU_DTYPE_FP64 = 5,
    TCGPU_DTYPE_I32 = 6,
    TCGPU_DTYPE_I64 = 7,
    TCGPU_DTYPE_COUNT
};

/*
 * The range holds elements of `dtype`, so the codec can group their bytes
 * (exponents with exponents) and compress them better. Returns 0 or -EINVAL.
 */
TCGPU_API int tcgpu_hint_dtype(uint64_t ptr, size_t len, enum tcgpu_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif /* TCGPU_H */
