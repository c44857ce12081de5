/*
 * ops.h - the operations on a process's GPU state, as every trigger sees them.
 *
 * The public C API (api.c), the control socket (control.c) and the signal
 * trigger all end up here. Operations are serialised by an internal mutex:
 * one runs at a time, a second caller waits for it. They run on the
 * library's operation worker, which closes the API gate, while the calling
 * thread waits; the calling thread must not be inside a CUDA call. The
 * program's event callback (tcgpu.h) is called on the calling thread.
 *
 * Each returns 0 or -errno (codes as documented in tcgpu.h). On failure the
 * calling thread's message (common/errmsg.h) says what and where, e.g.
 * "cuIpcGetMemHandle: IPC memory handles cannot be checkpointed": the worker
 * and the threads it starts write into the calling thread's record.
 */
#ifndef TCGPU_OPS_H
#define TCGPU_OPS_H

#include <sys/types.h>

#include "snapshot.h"
#include "tcgpu.h"

/*
 * Who asks for an operation, for its log line, and where its progress goes.
 * Every operation logs exactly one line at info level when it ends
 * ("suspend (uid 1000 pid 4711): done in 350 ms, 2.0 GiB of GPU memory
 * freed", or "... failed: EBUSY: ..."). by may be NULL: the program itself
 * (the C API), no progress.
 */
struct tcgpu_op_caller {
    const char *who;            /* "uid 1000 pid 4711", "signal SIGRTMIN+4"; NULL: "the program" */
    tcgpu_progress_fn progress; /* may be NULL */
    void *arg;
};

int tcgpu_op_checkpoint(const char *dir, const struct tcgpu_op_caller *by);
/* An incremental checkpoint: chunks unchanged since the image `parent` are
 * stored as references to it; "auto" = this process's last checkpoint (a
 * full image when there is none); NULL = a full image. */
int tcgpu_op_checkpoint_parent(const char *dir, const char *parent, const struct tcgpu_op_caller *by);
int tcgpu_op_suspend(const char *dir /* NULL: host memory */, const struct tcgpu_op_caller *by);
int tcgpu_op_resume(const struct tcgpu_op_caller *by);
/* Resume from the suspend's image, which now lives at dir (absolute; NULL:
 * where it was written). For gpuckpt save/restore, which move images after
 * the process wrote them. -EINVAL when the process was suspended to host
 * memory. The new place counts for this attempt only. */
int tcgpu_op_resume_from(const char *dir, const struct tcgpu_op_caller *by);
int tcgpu_op_status(struct tcgpu_status *st);

/* What stops a checkpoint or a suspend now, as fields of a status reply
 * (lib/core/blockers.h: blockers=N and the first one). Never blocks on an
 * operation. */
struct ctl_buf;
void tcgpu_op_put_blockers(struct ctl_buf *reply);

/*
 * ipc_export (lib/core/ipcmem.h): process `peer` asks, with the id and
 * token of an IPC handle we made, for the memory behind it. Fills the
 * reply (an "ok" with the mapping's fields, or an error) and returns the
 * descriptor to send with it (the caller sends and closes it), or -1 when
 * the reply is an error. From then on we count `peer` as mapping our
 * memory until tcgpu_op_ipc_closed(peer) (its connection ended).
 */
struct ctl_msg;
int tcgpu_op_ipc_export(const struct ctl_msg *req, pid_t peer, struct ctl_buf *reply);
void tcgpu_op_ipc_closed(pid_t peer);
/* ipc_forget: peer let go for good of memory it imported (ipcmem.h). */
int tcgpu_op_ipc_forget(const struct ctl_msg *req, pid_t peer, struct ctl_buf *reply);

#endif
