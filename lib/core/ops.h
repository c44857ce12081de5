/*
 * ops.h - the operations on a process's GPU state, as every trigger sees them.
 *
 * The public C API (api.c), the control socket (control.c) and the signal
 * trigger all end up here. Operations are serialised by an internal mutex:
 * one runs at a time, a second caller waits for it. They run on the calling
 * thread, which must not be inside a CUDA call (it is made exempt from the
 * API gate for the duration).
 *
 * Each returns 0 or -errno (codes as documented in tcgpu.h). On failure the
 * calling thread's message (tcgpu_op_error()) says what and where, e.g.
 * "cuIpcGetMemHandle: IPC memory handles cannot be checkpointed".
 */
#ifndef TCGPU_OPS_H
#define TCGPU_OPS_H

#include <stdint.h>
#include "tcgpu.h"

/* Progress of a long operation, for gpuckpt's progress bar; may be NULL. */
typedef void (*tcgpu_progress_fn)(uint64_t done_bytes, uint64_t total_bytes, void *arg);

int tcgpu_op_checkpoint(const char *dir, tcgpu_progress_fn progress, void *arg);
/* An incremental checkpoint: chunks unchanged since the image `parent` are
 * stored as references to it; "auto" = this process's last checkpoint (a
 * full image when there is none); NULL = a full image. */
int tcgpu_op_checkpoint_parent(const char *dir, const char *parent, tcgpu_progress_fn progress,
                               void *arg);
int tcgpu_op_suspend(const char *dir /* NULL: host memory */, tcgpu_progress_fn progress, void *arg);
int tcgpu_op_resume(tcgpu_progress_fn progress, void *arg);
/* Resume from the suspend's image, which now lives at dir (absolute; NULL:
 * where it was written). For gpuckpt save/restore, which move images after
 * the process wrote them. -EINVAL when the process was suspended to host
 * memory. The new place counts for this attempt only. */
int tcgpu_op_resume_from(const char *dir, tcgpu_progress_fn progress, void *arg);
int tcgpu_op_status(struct tcgpu_status *st);

/* The calling thread's message for its last failed operation, or "". */
const char *tcgpu_op_error(void);

/* Set the calling thread's message (printf-style); used by ops and their callers. */
void tcgpu_op_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Delivers an event to the program's callback (tcgpu_set_event_callback); api.c. */
void tcgpu_emit_event(enum tcgpu_event ev, enum tcgpu_op op, int result);

#endif
