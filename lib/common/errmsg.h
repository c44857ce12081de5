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
 * The message is per thread (a __thread buffer of 512 bytes, truncated
 * beyond), so concurrent operations on other threads never mix theirs.
 * Callers that report it (the C API's tcgpu_last_error(), the control
 * server's replies) copy it before the thread's next failure overwrites it.
 */
#ifndef TCGPU_COMMON_ERRMSG_H
#define TCGPU_COMMON_ERRMSG_H

/* The calling thread's last message, or "" (never NULL). */
const char *errmsg_get(void);

/* Set the calling thread's message, printf-style. */
void errmsg_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Forget the calling thread's message (errmsg_get() returns ""). */
void errmsg_clear(void);

/* Set the message and evaluate to rc (a -errno): return TC_FAIL(-EIO, "..."). */
#define TC_FAIL(rc, ...) (errmsg_set(__VA_ARGS__), (rc))

#endif
