/*
 * unsupported.h - driver calls whose state a checkpoint cannot restore.
 *
 * The generated wrappers of the names in interpose/unsupported.list call
 * tcgpu_note_unsupported() after the real call succeeded (the program keeps
 * running: it is only the *checkpoint* that must refuse). The checkpoint code
 * asks tcgpu_unsupported_first() and refuses with its message, e.g.
 * "cuIpcGetMemHandle: IPC memory handles cannot be checkpointed".
 */
#ifndef TCGPU_UNSUPPORTED_H
#define TCGPU_UNSUPPORTED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How many notes are kept (later ones are only counted). */
#define TCGPU_UNSUPPORTED_KEEP 16

struct tcgpu_unsupported_note {
    const char *call;        /* ABI name of the driver call ("cuIpcGetMemHandle") */
    const char *what;        /* why it cannot be restored (static string) */
    uint64_t realtime_ns;    /* CLOCK_REALTIME when it was noted */
};

/* Record that `call` succeeded and made state we cannot checkpoint. Both
 * strings must be static. Lock-free, async-signal-safe, any thread. */
void tcgpu_note_unsupported(const char *call, const char *what);

/* The first note, if any: returns true and fills *note (if not NULL). */
bool tcgpu_unsupported_first(struct tcgpu_unsupported_note *note);

/* Copy up to `max` kept notes, oldest first; returns how many were copied. */
size_t tcgpu_unsupported_list(struct tcgpu_unsupported_note *notes, size_t max);

/* How many times tcgpu_note_unsupported() was called in all. */
uint64_t tcgpu_unsupported_count(void);

/* "cuIpcGetMemHandle: IPC memory handles cannot be checkpointed" into buf. */
void tcgpu_unsupported_format(const struct tcgpu_unsupported_note *note, char *buf, size_t len);

/* Forget every note (tests; after a fork the child may call it too). */
void tcgpu_unsupported_reset(void);

#endif /* TCGPU_UNSUPPORTED_H */
