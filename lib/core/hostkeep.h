/*
 * hostkeep.h - the host memory a process keeps from one operation to the
 * next: the emptied host store of the last suspend (its pages, so that the
 * next suspend copies into memory that is already there, docs/engine.md
 * "Warm host store") and the engine's pipe (its workers, pinned staging ring
 * and encode buffers).
 *
 * Within a budget, released under memory pressure:
 *   TCGPU_HOST_KEEP           bytes of store kept at most ("8G"; "0": keep
 *                             nothing; default half of the machine's memory)
 *   TCGPU_HOST_KEEP_MIN_FREE  release everything kept as soon as the
 *                             machine's available memory (MemAvailable) falls
 *                             below this (default 1/20 of its memory, at
 *                             least 256 MiB); checked by a thread of its own
 *                             every TCGPU_HOST_KEEP_POLL_MS (250) while
 *                             anything is kept
 * Besides, once available memory is under twice that floor the store's
 * pages are MADV_FREE (at the offer, or at the poll that sees it): the
 * kernel reclaims them first when memory runs short, whoever asks. Not
 * before: the next suspend's copy into MADV_FREE pages took twice as long.
 *
 * Ownership moves: *_take hands the kept object to the caller (NULL when
 * there is none), *_offer takes it back (or frees it when it does not fit).
 * Thread-safe; the operations' worker takes and offers, the monitor thread
 * releases in between. A forked child never sees its parent's.
 */
#ifndef TCGPU_HOSTKEEP_H
#define TCGPU_HOSTKEEP_H

#include <stdint.h>

struct pipe;
struct pipe_store;

/* The kept store (emptied), or NULL. The caller owns it. */
struct pipe_store *hostkeep_take_store(void);

/* Keeps `s` (its contents are dropped) when its memory fits the budget and
 * the machine is not short of memory, else frees it. NULL is fine. */
void hostkeep_offer_store(struct pipe_store *s);

/* The kept pipe, or NULL. The caller owns it. */
struct pipe *hostkeep_take_pipe(void);

/* Keeps `p` for the next operation (unless memory is short: freed). */
void hostkeep_offer_pipe(struct pipe *p);

/* Frees everything kept now (0 bytes afterwards); returns the bytes freed. */
uint64_t hostkeep_release(const char *why);

/* Bytes of store memory kept now. */
uint64_t hostkeep_store_bytes(void);

#endif
