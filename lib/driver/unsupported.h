/*
 * unsupported.h - driver state a checkpoint cannot restore, and the objects
 * that hold it.
 *
 * The generated wrappers of the names in interpose/unsupported.list (and a
 * few hand-written ones) note, after the real call succeeded, that the
 * process now holds such state: the program keeps running, only a
 * checkpoint or a suspend must refuse. Most of that state lives in one
 * driver object (an IPC event, a graph with memory nodes, a texture): the
 * note is then held by that object and goes when the program destroys it
 * (tcgpu_unsupported_release), so a process that used an IPC event handle
 * once can be checkpointed again once the event is gone. State no object
 * of ours holds (a legacy 32-bit allocation, a mapped graphics resource) is
 * noted for the process's life (TCGPU_HELD_BY_PROCESS).
 *
 * A note keeps the call that made it, why it blocks a checkpoint, when it
 * was made, and the program's frames that called (common/frames.h):
 * `gpuckpt status` shows them (lib/core/blockers.h).
 *
 * Thread-safe (one mutex; a process that noted nothing takes it only to
 * note); not async-signal-safe.
 */
#ifndef TCGPU_UNSUPPORTED_H
#define TCGPU_UNSUPPORTED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What holds a note: the kind of driver object, whose handle is `object`. */
enum tcgpu_holder {
    TCGPU_HELD_BY_PROCESS = 0,          /* nothing: for the process's life */
    TCGPU_HELD_BY_EVENT,                /* CUevent (IPC handle made or opened) */
    TCGPU_HELD_BY_IPC_MEMORY,           /* CUdeviceptr of cuIpcOpenMemHandle */
    TCGPU_HELD_BY_GRAPH,                /* CUgraph with memory nodes of the driver's */
    TCGPU_HELD_BY_GRAPH_EXEC,           /* CUgraphExec instantiated from one */
    TCGPU_HELD_BY_EXTERNAL_MEMORY,      /* CUexternalMemory */
    TCGPU_HELD_BY_EXTERNAL_SEMAPHORE,   /* CUexternalSemaphore */
    TCGPU_HELD_BY_ARRAY,                /* CUarray */
    TCGPU_HELD_BY_MIPMAPPED_ARRAY,      /* CUmipmappedArray */
    TCGPU_HELD_BY_TEXTURE,              /* CUtexObject */
    TCGPU_HELD_BY_SURFACE,              /* CUsurfObject */
    TCGPU_HELD_BY_IPC_IMPORTER,         /* pid of a process that maps our memory (lib/core/ipcmem.h) */
    TCGPU_HELD_BY_IPC_EXPORTER,         /* pid of a process whose memory we map (lib/core/ipcmem.h) */
    TCGPU_HOLDER_KINDS
};

#define TCGPU_UNSUPPORTED_SITE 160      /* bytes of the caller's frames kept */

struct tcgpu_unsupported_note {
    const char *call;        /* ABI name of the driver call ("cuIpcGetEventHandle") */
    const char *what;        /* why it cannot be restored (static string) */
    enum tcgpu_holder held_by;
    uint64_t object;         /* the holder's handle (0 for the process) */
    uint64_t realtime_ns;    /* CLOCK_REALTIME when it was noted */
    char site[TCGPU_UNSUPPORTED_SITE]; /* the program's frames that called, "" if unknown */
};

/* Record that `call` succeeded and made state we cannot checkpoint, for the
 * process's life. Both strings must be static. */
void tcgpu_note_unsupported(const char *call, const char *what);

/* The same, held by `object` of `kind` until tcgpu_unsupported_release()
 * of it. A second note of the same object keeps the first. When the note
 * cannot be kept (no memory) it is kept for the process's life instead:
 * a refusal too many, never a checkpoint too many. */
void tcgpu_note_unsupported_held(const char *call, const char *what, enum tcgpu_holder kind, uint64_t object);

/* `object` of `kind` is gone (the program destroyed it): its notes go.
 * Cheap when no object of that kind holds one (every cuEventDestroy calls it). */
void tcgpu_unsupported_release(enum tcgpu_holder kind, uint64_t object);

/* `to` holds what `from` holds (an executable graph instantiated from a
 * graph with memory nodes, a graph that took a child graph). */
void tcgpu_unsupported_inherit(enum tcgpu_holder from_kind, uint64_t from, enum tcgpu_holder to_kind, uint64_t to);

/* Does any object of `kind` hold a note now? */
bool tcgpu_unsupported_any_held_by(enum tcgpu_holder kind);

/* How many notes objects of `kind` have been given in all: a counter that
 * only grows (lib/core/blockers.c: whether the driver's graph memory may
 * have outlived the graphs that held notes, since it last looked). */
uint64_t tcgpu_unsupported_given_to(enum tcgpu_holder kind);

/* Copy up to `max` notes in force, oldest first; returns how many are in
 * force (which may be more than max). */
size_t tcgpu_unsupported_list(struct tcgpu_unsupported_note *notes, size_t max);

/* The first note in force, if any: returns true and fills *note (if not NULL). */
bool tcgpu_unsupported_first(struct tcgpu_unsupported_note *note);

/* "cuIpcGetEventHandle: IPC event handles cannot be checkpointed" into buf. */
void tcgpu_unsupported_format(const struct tcgpu_unsupported_note *note, char *buf, size_t len);

/* "event", "graph", ... ("process" for TCGPU_HELD_BY_PROCESS): static. */
const char *tcgpu_holder_name(enum tcgpu_holder kind);

/* Forget every note (tests). */
void tcgpu_unsupported_reset(void);

#endif /* TCGPU_UNSUPPORTED_H */
