/*
 * errmsg.h - the calling thread's message for its last failure.
 *
 * tcgpu's functions return 0 or -errno; the errno says what kind of failure,
 * the message says what and where ("cuMemCreate of 2097152 bytes on device
 * 0: CUDA_ERROR_OUT_OF_MEMORY"). Whoever detects a failure sets the message
 * and returns the code, in one statement:
 *
 *     if (rc != CUDA_SUCCESS)
 *         return TC_FAIL(-EIO, "cuMemMap at 0x%llx: %s", va, cu_error_name(rc));
 *
 * The message is per thread (a __thread record of 512 bytes, truncated
 * beyond), so concurrent operations on other threads never mix theirs.
 *
 * Work asked for on one thread and done on another (an operation crosses
 * several: docs/architecture.md, "The threads an operation crosses")
 * carries the asking thread's record: while a thread carries it, its
 * messages are written into that record, so the asker finds the failure in
 * its own record when the work is done, and nothing is copied from thread
 * to thread.
 */
#ifndef TCGPU_COMMON_ERRMSG_H
#define TCGPU_COMMON_ERRMSG_H

/* A failure as it travels: the work's result and its message together. */
struct errmsg_record {
    int rc;                       /* 0 or -errno, as errmsg_result() left it */
    char text[512];               /* the message, "" for none */
};

/* The calling thread's last message, or "" (never NULL). */
const char *errmsg_get(void);

/* Set the calling thread's message, printf-style. */
void errmsg_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Forget the calling thread's message (errmsg_get() returns ""). */
void errmsg_clear(void);

/* Set the message and evaluate to rc (a -errno): return TC_FAIL(-EIO, "..."). */
#define TC_FAIL(rc, ...) (errmsg_set(__VA_ARGS__), (rc))

/* The record the calling thread's messages go to now: its own, or the one
 * it carries. Never NULL. */
struct errmsg_record *errmsg_record(void);

/*
 * From now on the calling thread's messages go to `rec` (NULL: its own
 * record again). For work done on behalf of another thread, which does not
 * touch its record until the work is done (it waits for it), and no longer
 * than that. Returns the record used before: pass it back to stop carrying.
 */
struct errmsg_record *errmsg_carry(struct errmsg_record *rec);

/* The work ends with rc: stores it in the record and, on success, forgets
 * the message (a failure's stays). Returns rc. */
int errmsg_result(int rc);

#endif
