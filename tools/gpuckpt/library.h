/*
 * library.h - where gpuckpt finds libtcgpu.so, for `run` (to preload it)
 * and `check` (docs/cli.md, "Where run finds libtcgpu.so").
 *
 * In order: $TCGPU_LIB; next to the gpuckpt executable (/proc/self/exe):
 * the build tree's ../../interpose/, then the install's libdir at the same
 * place relative to bindir as at build time (so an install moved to another
 * prefix, or made with DESTDIR, finds its own library), then ../lib/tcgpu,
 * ../lib, ../lib64; last the configured libdir itself.
 */
#ifndef GPUCKPT_LIBRARY_H
#define GPUCKPT_LIBRARY_H

#include <limits.h>
#include <stddef.h>

/*
 * The library's resolved path (absolute, no symlinks) into out. Returns 0,
 * or -1 with why in err: $TCGPU_LIB is not a readable file, or where it
 * looked ("cannot find libtcgpu.so ... Looked in: ...").
 */
int gpuckpt_find_library(char out[PATH_MAX], char *err, size_t errlen);

#endif
