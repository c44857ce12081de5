/*
 * frames.h - who called into this library: the caller's stack, named.
 *
 * For messages that say where the program did something (an allocation's
 * call site, the call that made a checkpoint impossible). Frames inside the
 * library that holds this code (libtcgpu.so, or the program it is linked
 * into) are skipped, so the first frame named is the caller's.
 */
#ifndef TCGPU_FRAMES_H
#define TCGPU_FRAMES_H

#include <stddef.h>

/*
 * Up to `max` frames of the calling thread's stack outside this library,
 * innermost first, into buf as "symbol+0xoff < object+0xoff < ...": a frame
 * is named by its symbol where the object exports one, else by the object's
 * file name and offset. Returns the length written (0: no frame, or buf
 * too small for the first; buf is then ""). Uses glibc's backtrace(), which
 * loads libgcc_s privately on first use (see lib/core/callsite.c for why not
 * libunwind). Any thread; not async-signal-safe.
 */
size_t tcgpu_frames_caller(char *buf, size_t len, int max);

#endif /* TCGPU_FRAMES_H */
