/*
 * library.h - where gpuckpt finds libtcgpu.so, for `run` (to preload it)
 * and `check` (docs/cli.md, "Where run finds libtcgpu.so").
 *
 * In order: $TCGPU_LIB; relative to the gpuckpt executable (/proc/self/exe):
 * the build tree's ../../interpose/, then the install's libdir at the place
 * it has relative to bindir (common/install_dirs.h: so an install moved to
 * another prefix, or staged with DESTDIR, finds its own library); last the
 * configured libdir itself.
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
