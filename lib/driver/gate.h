/*
 * gate.h - the API gate: every path into the CUDA driver passes it.
 *
 * Every interposed driver call (generated pass-through wrappers, hand-written
 * tracking wrappers, cuGetProcAddress) is bracketed by TCGPU_GATE_ENTER(name)
 * and TCGPU_GATE_LEAVE(). A checkpoint closes the gate: tcgpu_gate_close()
 * returns once no (non-exempt) thread is inside a driver call, and from then
 * on every thread that tries to enter one is parked until tcgpu_gate_open().
 * Threads that never call CUDA are never touched.
 *
 * Fast path (gate open): a thread-local pointer load, two plain stores to the
 * thread's own record and one load of the global gate word; no atomic
 * read-modify-write, no lock, no shared cache line written. See
 * docs/interposition.md for the numbers and the memory-ordering argument.
 *
 * Memory ordering. Enter is "store my depth, then load the gate word"; close
 * is "store the gate word, then load every thread's depth" (Dekker). The
 * entering side has only a compiler barrier; the closing side pays for both
 * with membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which runs a full memory
 * barrier on every CPU running one of our threads. Where membarrier is not
 * available the gate word carries a "fence" bit that sends every enter through
 * a slow path with a seq_cst fence (correct, a few ns slower).
 *
 * Happens-before (what callers may rely on): after tcgpu_gate_close()
 * returns 0, every driver call that entered before it has returned, and all
 * its memory effects are visible to the closing thread (leave is a release
 * store, close reads it with acquire). A thread that was parked observes all
 * effects of the closing thread made before tcgpu_gate_open().
 */
#ifndef TCGPU_GATE_H
#define TCGPU_GATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* One per thread that ever entered the gate; never freed (recycled after the
 * thread exits), so the closer may walk the list without a lock. */
struct tcgpu_gate_thread {
    _Atomic unsigned depth;            /* nesting depth; > 0 means inside */
    _Atomic(const char *) call;        /* outermost call while inside */
    _Atomic pid_t tid;                 /* kernel thread id; 0 when free */
    _Atomic bool exempt;               /* never parked, never waited for */
    _Atomic(struct tcgpu_gate_thread *) next;
};

/* Gate word bits. */
#define TCGPU_GATE_CLOSED 1u  /* a close is in progress or done */
#define TCGPU_GATE_FENCE  2u  /* no membarrier: enter must fence (slow path) */

extern _Atomic unsigned tcgpu_gate_word;
extern __thread struct tcgpu_gate_thread *tcgpu_gate_self
    __attribute__((tls_model("initial-exec")));

/* Slow paths (gate.c). Not for direct use. */
struct tcgpu_gate_thread *tcgpu_gate_register(void);
void tcgpu_gate_enter_slow(struct tcgpu_gate_thread *t);

/* Under ThreadSanitizer, which knows nothing of membarrier (and not much of
 * fences), the depth store and the gate-word load are seq_cst instead: the
 * same algorithm, in a form TSan models exactly. */
#if defined(__SANITIZE_THREAD__)
#define TCGPU_GATE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TCGPU_GATE_TSAN 1
#endif
#endif
#ifdef TCGPU_GATE_TSAN
#define TCGPU_GATE_ORDER_STORE memory_order_seq_cst
#define TCGPU_GATE_ORDER_LOAD memory_order_seq_cst
#define TCGPU_GATE_ENTER_FENCE() ((void)0)
#else
#define TCGPU_GATE_ORDER_STORE memory_order_relaxed
#define TCGPU_GATE_ORDER_LOAD memory_order_acquire
#define TCGPU_GATE_ENTER_FENCE() atomic_signal_fence(memory_order_seq_cst)
#endif

/* Enter a driver call named `call` (a string literal: it is kept, not copied).
 * Nests: only the outermost enter may park. Blocks while the gate is closed
 * unless the thread is exempt or is the one that closed it. Never fails. */
static inline void tcgpu_gate_enter(const char *call)
{
    struct tcgpu_gate_thread *t = tcgpu_gate_self;
    if (__builtin_expect(t == NULL, 0))
        t = tcgpu_gate_register();
    unsigned d = atomic_load_explicit(&t->depth, memory_order_relaxed);
    if (d != 0) {
        atomic_store_explicit(&t->depth, d + 1, memory_order_relaxed);
        return;
    }
    atomic_store_explicit(&t->call, call, memory_order_relaxed);
    atomic_store_explicit(&t->depth, 1, TCGPU_GATE_ORDER_STORE);
    TCGPU_GATE_ENTER_FENCE();
    if (__builtin_expect(atomic_load_explicit(&tcgpu_gate_word, TCGPU_GATE_ORDER_LOAD) != 0, 0))
        tcgpu_gate_enter_slow(t);
}

/* Leave the call entered last. Must pair with tcgpu_gate_enter() on the same
 * thread. Never blocks. */
static inline void tcgpu_gate_leave(void)
{
    struct tcgpu_gate_thread *t = tcgpu_gate_self;
    unsigned d = atomic_load_explicit(&t->depth, memory_order_relaxed);
    atomic_store_explicit(&t->depth, d - 1, memory_order_release);
}

#define TCGPU_GATE_ENTER(name) tcgpu_gate_enter(name)
#define TCGPU_GATE_LEAVE() tcgpu_gate_leave()

/* What tcgpu_gate_close() reports when a thread stays inside too long. */
struct tcgpu_gate_straggler {
    pid_t tid;               /* kernel thread id of one thread still inside */
    const char *call;        /* the driver call it is in ("cuStreamSynchronize") */
    unsigned waited_ms;      /* how long close waited */
};

/* Close the gate: park new callers, then wait until no thread other than the
 * caller and exempt threads is inside a driver call.
 * timeout_ms: how long to wait for threads to leave (0 = do not wait).
 * Returns 0: the gate is closed, held by the calling thread (which, like
 *            exempt threads, keeps calling the driver freely); every other
 *            thread that calls the driver parks until tcgpu_gate_open().
 *   -ETIMEDOUT: some thread stayed inside; the gate is open again (nothing was
 *            parked for good) and *straggler (if not NULL) names one of them.
 *            tcgpu_gate_format_straggler() writes the usual message.
 *   -EBUSY:  the gate is already closed (by this or another thread).
 * Thread-safe; not async-signal-safe (call it from a service thread). */
int tcgpu_gate_close(unsigned timeout_ms, struct tcgpu_gate_straggler *straggler);

/* Open the gate closed by tcgpu_gate_close() (from any thread) and wake every
 * parked thread. Returns 0, or -EINVAL if the gate is not closed. */
int tcgpu_gate_open(void);

/* Whether the gate is closed now (a snapshot). */
bool tcgpu_gate_is_closed(void);

/* Mark the calling thread exempt (or not): an exempt thread is never parked
 * and never waited for by close. For the library's own worker threads. */
void tcgpu_gate_set_exempt(bool exempt);

/* Nesting depth of the calling thread (0 = not inside a driver call). */
unsigned tcgpu_gate_depth(void);

/* Number of threads parked at the gate now (a snapshot). */
unsigned tcgpu_gate_parked(void);

/* Whether close may use membarrier (the default) or must fence on both
 * sides (tests; libtcgpu.so: TCGPU_GATE_NO_MEMBARRIER=1, core/settings.h).
 * Takes effect only before the gate's first use (the first register). */
void tcgpu_gate_set_membarrier(bool allowed);

/* Whether close uses membarrier (true) or fences on both sides (false). */
bool tcgpu_gate_uses_membarrier(void);

/* "thread 1234 still inside cuStreamSynchronize after 5000 ms" into buf. */
void tcgpu_gate_format_straggler(const struct tcgpu_gate_straggler *s, char *buf, size_t len);

#endif /* TCGPU_GATE_H */
