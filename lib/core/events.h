/*
 * events.h - delivering events to the program's callback
 * (tcgpu_set_event_callback() in tcgpu.h, defined in events.c).
 */
#ifndef TCGPU_CORE_EVENTS_H
#define TCGPU_CORE_EVENTS_H

#include "tcgpu.h"

/* Calls the program's callback, if one is set, on the calling thread (the
 * operation's, never a signal handler). Thread-safe: the callback may be
 * replaced concurrently; the old or the new one is called, not both. */
void tcgpu_emit_event(enum tcgpu_event ev, enum tcgpu_op op, int result);

#endif
