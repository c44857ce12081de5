/*
 * fileio.h - writing files so that a crash leaves the old or the new one,
 * never a mix: complete writes, fsync of a directory, and the write to a
 * temporary name, fsync, rename sequence.
 *
 * Every function returns 0 or -errno and is thread-safe (no shared state).
 */
#ifndef TCGPU_COMMON_FILEIO_H
#define TCGPU_COMMON_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

/* Writes all len bytes of p to fd, retrying short writes and EINTR. A write
 * that makes no progress is -EIO. */
int fileio_write_all(int fd, const void *p, size_t len);

/* fsync the directory `dir` (makes the entries in it durable). */
int fileio_fsync_dir(const char *dir);

/* fsync the directory that holds `path` (makes a rename to path durable). */
int fileio_fsync_parent(const char *path);

/* The directory part of path into out ("." for a bare name, "/" for
 * "/x"); -ENAMETOOLONG when it does not fit in cap bytes. */
int fileio_parent_of(const char *path, char *out, size_t cap);

/*
 * Replaces `path` atomically with what fill() writes: fill(fd, arg) writes
 * into a new temporary file beside path (mode `mode`, created exclusively),
 * which is then fsynced, renamed over path, and the directory fsynced. fill
 * returns 0 or -errno. On any failure the temporary file is removed, path is
 * untouched, and the -errno is returned; *stage (when not NULL) then names
 * the step that failed ("create", "write", "fsync", "rename", "fsync-dir").
 * After "fsync-dir" the new file is in place but its rename may not survive
 * a crash.
 */
int fileio_replace(const char *path, mode_t mode, int (*fill)(int fd, void *arg), void *arg,
                   const char **stage);

#endif
