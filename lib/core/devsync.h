/*
 * devsync.h - contexts for tcgpu's own device work, and waiting for the
 * program's device work with a bound (devsync.c).
 *
 * Every function here runs on the operation's thread (or a thread it waits
 * for), with the API gate closed.
 */
#ifndef TCGPU_CORE_DEVSYNC_H
#define TCGPU_CORE_DEVSYNC_H

#include <cuda.h>

/*
 * Makes a context of `device` current on this thread (pushed): one of the
 * program's, else the device's primary context, retained for the copy (a
 * program that destroyed every context there still holds its VMM memory).
 * 0, or -EIO with the message set. Pop with devsync_ctx_leave. The
 * signatures are the engine's context callbacks (struct pipe_opts), so that
 * they are handed to it as they are; their last argument is not used.
 */
int devsync_ctx_enter(int device, void *unused);
void devsync_ctx_leave(void *unused);

/* Whether ctx is one of the program's live contexts. */
int devsync_ctx_live(CUcontext ctx);

/*
 * Waits for the device work of every context to finish, at most timeout_ms
 * (polling each stream it can name; docs/interposition.md, "Waiting for the
 * device"). -ETIMEDOUT names a stream still busy and its last work; -EIO is
 * a sticky device error (nothing worth saving).
 */
int devsync_wait(unsigned timeout_ms);

#endif
