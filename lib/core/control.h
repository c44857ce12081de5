/*
 * control.h - the control channel inside a tcgpu process: the socket
 * (<run dir>/<pid>.sock, see rundir.h), the signal trigger (see
 * signal_trigger.h), the service thread that serves both and the operation
 * thread that runs what they ask for.
 *
 * The service thread answers status at any time, an operation running or
 * not (with the running one's name, time so far and progress bytes), and
 * queues operations (tcgpu_op_* of ops.h) for the operation thread, which
 * runs them one at a time in the order they came, sends their progress and
 * their reply. A request that finds 8 operations already waiting is refused
 * at once (EBUSY, naming the running one). Neither thread calls CUDA on its
 * own, both block every signal (the program's handlers run on the program's
 * threads), and neither takes a lock the program's threads hold.
 *
 * Settings (settings.h), read by tcgpu_control_start():
 *   TCGPU_RUN_DIR          where the socket goes (see rundir.h; XDG_RUNTIME_DIR too)
 *   TCGPU_SIGNAL           trigger signal: "RTMIN+4" (default), "USR2", "SIGUSR2", "38", "off"
 *   TCGPU_SIGNAL_ACTION    toggle (default) | suspend | resume | checkpoint
 *   TCGPU_CHECKPOINT_DIR   where the checkpoint action writes ckpt-<pid>-<n>
 */
#ifndef TCGPU_CONTROL_H
#define TCGPU_CONTROL_H

/*
 * Start the channel: create the socket, install the signal handler, start
 * the service thread. Idempotent and thread-safe; may be called from a
 * library constructor. In a forked child it starts a new channel of the
 * child's own (the parent's is forgotten at fork, see below).
 *
 * Returns 0 when the socket is up, else -errno of the socket's failure (the
 * signal trigger and the thread may still be running; the reason is logged).
 * Never fatal for the program.
 */
int tcgpu_control_start(void);

/*
 * Stop the service thread and the operation thread (after the operation it
 * is running, if any; requests still waiting are answered ECANCELED), remove
 * the socket and put the signal's previous disposition back. For tests and
 * orderly shutdown; must not be called from either thread (an event
 * callback): it then returns without doing anything.
 */
void tcgpu_control_stop(void);

/*
 * For a child after fork(): forget the parent's channel without touching it
 * (close the inherited descriptors, never unlink the parent's socket; the
 * service thread does not exist in the child), and give the signal trigger
 * a fresh eventfd. The first tcgpu_control_start() registers this with
 * pthread_atfork, so callers need not; calling it again is harmless.
 */
void tcgpu_control_atfork_child(void);

/* The socket's path, or "" when there is none. */
const char *tcgpu_control_socket_path(void);

#endif
