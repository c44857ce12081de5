/*
 * companion.h - the files a program of ours needs that are built and
 * installed with it (libtcgpu.so, the CRIU plugin, libtcgpu-slurm-defer.so,
 * gpuckpt), found from where the running program lies rather than from
 * where it was configured to be installed: so the build tree, an install
 * staged with DESTDIR, one at another prefix or one moved elsewhere each
 * find their own files. Where `meson install` puts them, relative to the
 * programs, is in the generated common/install_dirs.h.
 *
 * Programs that let the environment name a companion ($TCGPU_LIB, ...)
 * read it themselves before they ask here.
 */
#ifndef TCGPU_COMMON_COMPANION_H
#define TCGPU_COMMON_COMPANION_H

#include <stddef.h>

/*
 * The file `name` in the first of dirs (NULL-terminated) where fits(path)
 * holds; fits NULL: a regular file this process may read. A relative dir is
 * taken from the folder of the running executable (/proc/self/exe, its
 * symlinks resolved), an absolute one as it is: list the build tree's place
 * first, then the install's relative one, then the configured absolute one.
 *
 * Returns 0 with the file's path in out, absolute and without symlinks; or
 * -ENOENT with out the folders looked in, ", "-joined (cut to len), when
 * none holds it (relative dirs are skipped when /proc/self/exe cannot be
 * read); -ENAMETOOLONG when the path found does not fit in len.
 * Thread-safe when fits is.
 */
int tcgpu_companion_find(const char *const dirs[], const char *name,
                         int (*fits)(const char *path), char *out, size_t len);

#endif
