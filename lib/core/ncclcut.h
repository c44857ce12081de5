/*
 * ncclcut.h - a consistent cut of a multi-process NCCL job: no rank stops
 * before a collective (or a send/recv) that a peer has already issued.
 *
 * A rank stopped before it issues a collective that its peers launched
 * leaves their collective kernels waiting for it on their GPUs, and their
 * drains never end (docs/multiprocess.md). So tcgpu counts, per
 * communicator, what each rank has issued: collectives, and sends and recvs
 * per peer. The counts live in a small shared segment per communicator (a
 * POSIX shm object named from the unique id, private to the user), one slot
 * per rank, beside each rank's "hold" flag.
 *
 * The rules, all under the segment's lock (a robust process-shared mutex):
 * - While any live rank of a communicator holds it, a rank may issue on it
 *   only what it owes: a collective when a peer has issued more collectives
 *   than it, a send that a peer's recv already waits for, a recv that a
 *   peer's send already waits for (a group: when any of its operations is
 *   owed); or anything while it is behind there (a peer waits for it), so
 *   that it goes on in its own order until it is level. Anything else waits
 *   in host code, outside every CUDA call, until the hold goes or the
 *   operation becomes owed.
 * - A suspend or checkpoint holds every communicator of its process, then
 *   waits until this rank is level with every peer (equal collective counts,
 *   every send matched by the peer's recv and the other way round): then
 *   every collective this rank's GPU runs has all its ranks, and the drain
 *   ends. The hold stays while the process is suspended, so peers stop in
 *   host code at their next operation instead of on their GPUs.
 *
 * Counts are committed before the library is called (a peer must see that
 * the operation exists) and taken back when the library refuses it.
 * Operations inside ncclGroupStart/End are committed at the outermost
 * ncclGroupEnd, which is where the library issues them.
 *
 * Node-local: ranks on other machines never attach (their slots stay empty
 * and are ignored), and ranks must share a pid namespace (a holder's death
 * is seen by its pid and start time). Communicators unknown to us (made
 * before tcgpu was loaded) are not counted, and none is with
 * TCGPU_NCCL_CUT=0; those ncclCommInitAll makes, and those ncclCommSplit
 * makes of a counted one, are.
 */
#ifndef TCGPU_CORE_NCCLCUT_H
#define TCGPU_CORE_NCCLCUT_H

#include <stdbool.h>
#include <stddef.h>

enum ncclcut_kind {
    NCCLCUT_COLL,               /* every rank of the communicator takes part */
    NCCLCUT_SEND,               /* to peer */
    NCCLCUT_RECV,               /* from peer */
};

/* A communicator the program made with ncclCommInitRank(Config): join its
 * segment as `rank` of `nranks` (id: the 128-byte ncclUniqueId). Failures
 * are logged (the communicator is then not counted); never fatal. */
void ncclcut_attach(const void *comm, const void *id, size_t id_len, int nranks, int rank);
/* ncclCommInitAll's communicators, all[i] rank i of n, every rank in this
 * process: counted in a segment of their own (the library's unique id stays
 * inside it), so that a suspend lets the threads that drive them go on until
 * they are level. Never released across a suspend (ncclcut_release_memory):
 * their ncclCommSuspend calls would be one barrier for one thread. */
void ncclcut_attach_all(const void *const *all, int n);
/* ncclCommSplit of parent, on every rank of it (also one that asked for no
 * communicator, or whose call failed: comm NULL): the new communicator as
 * `rank` of `nranks`, counted in a segment named from the parent's, the
 * split's number on it (every rank splits a communicator in the same order)
 * and the color. Nothing when the parent is not counted. */
void ncclcut_attach_split(const void *parent, int color, const void *comm, int nranks, int rank);
/* ncclCommDestroy/Abort: leave its segment. */
void ncclcut_detach(const void *comm);

/*
 * One operation of the program: ncclcut_issue() before the library call,
 * ncclcut_done() after it with whether the library took it. Outside a group
 * issue waits while the operation may not go (above), then counts it; in a
 * group it is remembered for the group's end. Operations on communicators
 * that are not counted pass at once.
 */
void ncclcut_issue(const void *comm, enum ncclcut_kind kind, int peer);
void ncclcut_done(bool accepted);

/* ncclGroupStart (after the library took it) and ncclGroupEnd: the
 * outermost end waits and counts the group's operations, like one issue. */
void ncclcut_group_start(void);
void ncclcut_group_end_issue(void);
void ncclcut_group_end_done(bool accepted);

/*
 * For a suspend or a checkpoint (core/ops.c), before the API gate closes:
 * hold every counted communicator of this process and wait, at most
 * timeout_ms, until this rank is level with its peers. 0, or -ETIMEDOUT /
 * -EPIPE (a peer that left mid-cut) with the thread's message naming the
 * rank, its pid and the counts; on failure the hold is released.
 */
int ncclcut_hold(unsigned timeout_ms);
/* The operation is over and the program runs again: release the hold, and
 * have what ncclcut_release_memory released taken back (below). */
void ncclcut_release(void);

/*
 * Releasing the communicators' memory across a suspend (NCCL 2.29.7's
 * ncclCommSuspend(comm, NCCL_SUSPEND_MEM) / ncclCommResume: vLLM measures
 * about 960 MiB per GPU), so that it is neither drained nor carried.
 *
 * Both calls are barriers of every rank of the communicator inside the
 * library, which must never wait for a rank that will not come. So after
 * ncclcut_hold, each rank votes in the communicator's segment; when every
 * rank of it (all on this machine, alive) has voted within wait_ms, they
 * all call ncclCommSuspend; otherwise none does and the memory is carried
 * as before (a rank suspended alone, ranks on other machines, TCGPU_NCCL_
 * RELEASE=0). When the program runs again (ncclcut_release), a thread of
 * tcgpu's takes them back with ncclCommResume, in the order they were
 * made, once every peer runs again too; the program's operations on such a
 * communicator wait for that in host code.
 *
 * The interposer gives the library's two functions (NULL: this NCCL has
 * none) before the first communicator is counted; each returns 0 or the
 * ncclResult_t.
 */
struct ncclcut_lib {
    int (*suspend_mem)(const void *comm);
    int (*resume)(const void *comm);
};
void ncclcut_set_lib(const struct ncclcut_lib *lib);

/* For a suspend, after ncclcut_hold succeeded and before the gate closes.
 * Failures are logged; the memory is then carried. */
void ncclcut_release_memory(unsigned wait_ms);

/* Whether tcgpu's thread is inside ncclCommResume on comm now: a program's
 * ncclCommAbort then goes to the library first, to get it out. */
bool ncclcut_resuming(const void *comm);

/* The program's own ncclCommSuspend/Resume around the library's call: it
 * waits while tcgpu has the communicator released; released: 1 (its memory
 * suspended), 0 (resumed), -1 (refused: unchanged). */
void ncclcut_program_suspend_begin(const void *comm);
void ncclcut_program_suspend_end(const void *comm, int released);

#endif /* TCGPU_CORE_NCCLCUT_H */
