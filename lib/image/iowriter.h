/*
 * iowriter.h - sequential file writer for image data: large aligned writes,
 * a few in flight through io_uring, plain pwrite when io_uring is not
 * available (disabled by sysctl, seccomp, old kernel).
 *
 * Appended bytes are copied into `depth` aligned buffers of `buf_size`
 * bytes; a full buffer is submitted at its file offset while the next one
 * fills. iowriter_append_ref writes from the caller's memory instead, with
 * no copy, and says when that memory is free again. The file is opened
 * O_DIRECT when the filesystem allows it (tmpfs does not: then the page
 * cache is used), and then extended ahead of the writes (fallocate, where
 * the filesystem has it and there is room), so that they do not wait on
 * one another for the inode's lock; iowriter_finish cuts it back to the
 * bytes appended, and until then it may be longer.
 *
 * The ring exists only while a file is being written: iowriter_finish and
 * iowriter_free tear it down, because a process holding an io_uring cannot be
 * dumped by CRIU.
 *
 * Threads: one writer object is used by one thread at a time.
 * Errors: 0 or -errno; the first I/O error is sticky and returned by every
 * later call.
 */
#ifndef TCGPU_IOWRITER_H
#define TCGPU_IOWRITER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct iowriter;

/* What a zero-copy append needs for O_DIRECT: memory aligned to this, and
 * room after the bytes up to the next multiple of it. */
#define IOWRITER_ALIGN 4096u

struct iowriter_opts {
    size_t buf_size; /* bytes per write; 0 = 4 MiB; rounded up to 4 KiB */
    unsigned depth;  /* buffers (writes in flight + 1 filling); 0 = 4 */
    int no_uring;    /* 1: always pwrite (tests; libtcgpu: TCGPU_IO_URING=0) */
    int no_direct;   /* 1: never O_DIRECT (libtcgpu: TCGPU_IO_DIRECT=0) */
};

/*
 * Creates `name` under `dirfd` (O_CREAT|O_EXCL, `mode`) and a writer for it.
 * `opts` may be NULL. Returns 0 and sets *out (caller owns it; iowriter_free),
 * or -errno from open/allocation.
 */
int iowriter_open(struct iowriter **out, int dirfd, const char *name, mode_t mode,
                  const struct iowriter_opts *opts);

/*
 * Appends `len` bytes; they land at file offset iowriter_offset() as it was
 * before the call. `data` may be reused as soon as the call returns.
 * Returns 0 or -errno (e.g. -ENOSPC) of this or an earlier write.
 */
int iowriter_append(struct iowriter *w, const void *data, size_t len);

/*
 * Appends `len` bytes written from `data` itself, not copied, at file
 * offset *at (iowriter_offset before the call, or past the padding of
 * what was buffered: see below). The memory
 * must stay as it is until iowriter_wait(w, *ticket) returns (or
 * iowriter_finish / iowriter_free). On an O_DIRECT file the write is padded
 * with zeros to a multiple of IOWRITER_ALIGN: `data` must be aligned to it
 * and `cap` (the bytes at `data` the writer may write, >= len) reach the
 * padded end; the padding becomes part of the file (iowriter_offset moves
 * past it). Where that does not hold, the bytes are copied as by
 * iowriter_append and *ticket is 0 (nothing to wait for). Bytes buffered by
 * earlier appends are sent first, padded the same way.
 * Returns 0 or -errno as iowriter_append.
 */
int iowriter_append_ref(struct iowriter *w, void *data, size_t len, size_t cap, uint64_t *at,
                        uint64_t *ticket);

/*
 * Waits until every zero-copy append up to `ticket` (UINT64_MAX: all) is
 * written, so their memory may be reused. Returns 0 or the sticky error.
 */
int iowriter_wait(struct iowriter *w, uint64_t ticket);

/* Bytes appended so far (the logical file size). */
uint64_t iowriter_offset(const struct iowriter *w);

/*
 * Writes what is buffered, waits for every write, closes the ring, cuts
 * the file to iowriter_offset and fsyncs it. The fd stays open until
 * iowriter_free. Returns 0 or -errno of any write, of the cut or of fsync.
 */
int iowriter_finish(struct iowriter *w);

/* Closes the ring (if still open) and the file; NULL is fine. Does not
 * unlink the file. */
void iowriter_free(struct iowriter *w);

/* Whether io_uring / O_DIRECT are in use (for logs and tests). */
int iowriter_uses_uring(const struct iowriter *w);
int iowriter_uses_direct(const struct iowriter *w);

#endif /* TCGPU_IOWRITER_H */
