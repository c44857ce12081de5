/*
 * blockers.h - what stops a checkpoint or a suspend of this process now,
 * and since when (docs/interposition.md, "What cannot be checkpointed").
 *
 * The notes of lib/driver/unsupported.h in force (each held by a driver
 * object until the program destroys it, or for the process's life), and
 * one thing only the driver knows: memory that graphs with memory nodes of
 * the driver's allocated and left allocated, which outlives those graphs
 * until the program frees it. Thread-safe; may call the driver (the device
 * graph-memory attributes) when graphs with such nodes existed.
 */
#ifndef TCGPU_BLOCKERS_H
#define TCGPU_BLOCKERS_H

#include <stdbool.h>
#include <stddef.h>

struct ctl_buf;

/* The first blocker as a refusal ("cuIpcGetEventHandle: IPC event handles
 * cannot be checkpointed (held by event 0x...: it goes when the event is
 * destroyed)") into why: true, or false when nothing blocks. */
bool blockers_first(char *why, size_t len);

/* The same for a suspend: memory shared by CUDA IPC (the notes held by
 * TCGPU_HELD_BY_IPC_IMPORTER and TCGPU_HELD_BY_IPC_EXPORTER) does not
 * block it, since ipcmem.h's suspend steps carry it. */
bool blockers_first_suspend(char *why, size_t len);

/* Into a status reply: blockers=N (0: nothing blocks) and, for the first,
 * blocker= (as blockers_first), blocker_call=, blocker_since= (UTC,
 * ISO 8601) and blocker_site= (the program's frames that made the call). */
void blockers_put(struct ctl_buf *b);

#endif /* TCGPU_BLOCKERS_H */
