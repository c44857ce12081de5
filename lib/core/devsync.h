/*
 * devsync.h - contexts for tcgpu's own device work, and waiting for the
 * program's device work with a bound (devsync.c).
 *
 * Every function here runs on the operation's thread (or a thread it waits
 * for), with the API gate closed.
 */
#ifndef TCGPU_CORE_DEVSYNC_H
#define TCGPU_CORE_DEVSYNC_H

/*
 * Makes a context of `device` current on this thread (pushed): one of the
 * program's, else the device's primary context, retained for the copy (a
 * program that destroyed every context there still holds its VMM memory).
 * 0, or -EIO with the message set. Pop with ctx_leave.
 */
int ctx_enter(int device);
void ctx_leave(void);

/*
 * Waits for the device work of every context to finish, at most timeout_ms
 * (polling each stream it can name; docs/interposition.md, "Waiting for the
 * device"). -ETIMEDOUT names a stream still busy and its last work; -EIO is
 * a sticky device error (nothing worth saving).
 */
int snap_sync(unsigned timeout_ms);

#endif
