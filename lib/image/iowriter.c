/*
 * iowriter.c - aligned, pipelined appends via io_uring with a pwrite
 * fallback (contract in iowriter.h).
 */
#include "iowriter.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALIGN         IOWRITER_ALIGN
#define DEFAULT_BUF   (4u << 20)
#define DEFAULT_DEPTH 4u
#define MAX_DEPTH     64u
#define REF_DEPTH     32u        /* zero-copy writes in flight */
#define REF_TAG       (1ull << 63) /* user_data: a ref write, not a buffer */
#define RESERVE_MIN   (16ull << 20) /* the least reserved ahead of the writes at a time */

/* A write in flight: one of the writer's buffers, or the caller's memory. */
struct iobuf {
    uint8_t *mem;
    size_t fill;
    uint64_t off; /* file offset of mem[0] */
    int busy;     /* submitted, completion not yet reaped */
    uint64_t seq; /* refs: the ticket */
};

struct iowriter {
    int fd;
    int direct;
    int have_ring;
    struct io_uring ring;
    struct iobuf *bufs;
    struct iobuf refs[REF_DEPTH];
    uint64_t ref_seq; /* last ticket given */
    unsigned depth, cur, inflight;
    size_t buf_size;
    uint64_t offset; /* logical size */
    uint64_t sized;  /* the file's size as reserve_ahead left it */
    int reserve;     /* reserve room ahead of the writes: until fallocate fails */
    int reserved;    /* fallocate was called: the file may reach past `offset` */
    int err;         /* first error, sticky */
    int ring_broken; /* waiting for completions failed: stop waiting */
};

int iowriter_uses_uring(const struct iowriter *w)
{
    return w->have_ring;
}

int iowriter_uses_direct(const struct iowriter *w)
{
    return w->direct;
}

uint64_t iowriter_offset(const struct iowriter *w)
{
    return w->offset;
}

static void close_ring(struct iowriter *w)
{
    if (w->have_ring)
        io_uring_queue_exit(&w->ring);
    w->have_ring = 0;
}

static int reap_one(struct iowriter *w);

void iowriter_free(struct iowriter *w)
{
    if (!w)
        return;
    /* The kernel may still read buffers, the caller's among them. */
    while (w->have_ring && w->inflight && !w->ring_broken)
        reap_one(w);
    close_ring(w);
    if (w->fd >= 0)
        close(w->fd);
    for (unsigned i = 0; w->bufs && i < w->depth; i++)
        free(w->bufs[i].mem);
    free(w->bufs);
    free(w);
}

/* O_DIRECT first: at NVMe speeds the page cache copy costs as much as the
 * write. Filesystems that refuse it (tmpfs: EINVAL) get a buffered file. */
static int open_file(struct iowriter *w, int dirfd, const char *name, mode_t mode, int no_direct)
{
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;

    if (!no_direct) {
        w->fd = openat(dirfd, name, flags | O_DIRECT, mode);
        if (w->fd >= 0) {
            w->direct = 1;
            return 0;
        }
        if (errno != EINVAL)
            return -errno;
    }
    w->fd = openat(dirfd, name, flags, mode);
    return w->fd < 0 ? -errno : 0;
}

int iowriter_open(struct iowriter **out, int dirfd, const char *name, mode_t mode,
                  const struct iowriter_opts *opts)
{
    struct iowriter_opts o = opts ? *opts : (struct iowriter_opts){0};
    struct iowriter *w = calloc(1, sizeof(*w));
    int rc = -ENOMEM;

    if (!w)
        return -ENOMEM;
    w->fd = -1;
    w->buf_size = o.buf_size ? (o.buf_size + ALIGN - 1) & ~(size_t)(ALIGN - 1) : DEFAULT_BUF;
    w->depth = o.depth ? (o.depth < MAX_DEPTH ? o.depth : MAX_DEPTH) : DEFAULT_DEPTH;
    w->bufs = calloc(w->depth, sizeof(*w->bufs));
    if (!w->bufs)
        goto err;
    for (unsigned i = 0; i < w->depth; i++) {
        w->bufs[i].mem = aligned_alloc(ALIGN, w->buf_size);
        if (!w->bufs[i].mem)
            goto err;
    }
    rc = open_file(w, dirfd, name, mode, o.no_direct);
    if (rc)
        goto err;
    w->reserve = w->direct;   /* buffered writes take the lock exclusively anyway */
    if (!o.no_uring &&
        io_uring_queue_init(w->depth + REF_DEPTH, &w->ring, 0) == 0)
        w->have_ring = 1;
    *out = w;
    return 0;
err:
    iowriter_free(w);
    return rc;
}

/*
 * An O_DIRECT write past the end of the file extends it, and ext4 and XFS
 * take the inode's lock exclusively for it: the ring's writes wait on one
 * another in io_uring's worker threads, which spin for the lock (a tenth of
 * both CPUs during an incremental checkpoint, perf). Aligned writes inside
 * space fallocate reserved take it shared and are issued without a worker.
 * So room is reserved ahead of the writes, half the file's size at a time
 * (RESERVE_MIN at least), and the file is cut back to what was written by
 * iowriter_finish. Where fallocate fails (not supported, or no room for the
 * step: then it may have reserved part of it) the writes go on as before:
 * only a write that does not fit fails.
 */
static void reserve_ahead(struct iowriter *w, uint64_t end)
{
    uint64_t step;

    if (!w->reserve || end <= w->sized)
        return;
    step = w->sized / 2 > RESERVE_MIN ? w->sized / 2 : RESERVE_MIN;
    w->reserved = 1;   /* even a failed call may have extended it (ext4: ENOSPC part way) */
    if (fallocate(w->fd, 0, (off_t)w->sized, (off_t)(end + step - w->sized)) == 0)
        w->sized = end + step;
    else
        w->reserve = 0;
}

/* Writes all of it, however short the writes. */
static int pwrite_all(int fd, const uint8_t *p, size_t len, uint64_t off)
{
    while (len) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO;
        p += n, len -= (size_t)n, off += (uint64_t)n;
    }
    return 0;
}

/* Leaves O_DIRECT for a write that is not aligned (the last partial buffer,
 * the rest of a short write). */
static int drop_direct(struct iowriter *w)
{
    int fl;

    if (!w->direct)
        return 0;
    fl = fcntl(w->fd, F_GETFL);
    if (fl < 0 || fcntl(w->fd, F_SETFL, fl & ~O_DIRECT) < 0)
        return -errno;
    w->direct = 0;
    return 0;
}

static void set_err(struct iowriter *w, int rc)
{
    if (rc && !w->err)
        w->err = rc;
}

/* Reaps one completion. A short write is finished synchronously so the
 * error it was about to hit (ENOSPC) is reported, not a silent hole. */
static int reap_one(struct iowriter *w)
{
    struct io_uring_cqe *cqe;
    struct iobuf *b;
    uint64_t tag;
    int rc;

    do
        rc = io_uring_wait_cqe(&w->ring, &cqe);
    while (rc == -EINTR);
    if (rc) {
        w->ring_broken = 1;
        return rc;
    }
    tag = io_uring_cqe_get_data64(cqe);
    b = tag & REF_TAG ? &w->refs[tag & ~REF_TAG] : &w->bufs[tag];
    rc = cqe->res;
    io_uring_cqe_seen(&w->ring, cqe);
    b->busy = 0;
    w->inflight--;
    if (rc < 0)
        return rc;
    if ((size_t)rc < b->fill) {
        int drc = drop_direct(w);

        if (drc)
            return drc;
        return pwrite_all(w->fd, b->mem + rc, b->fill - (size_t)rc, b->off + (uint64_t)rc);
    }
    return 0;
}

/* Submits b's write; `tag` says which it is when it completes. */
static int submit_uring(struct iowriter *w, struct iobuf *b, uint64_t tag)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
    int rc;

    if (!sqe)
        return -EBUSY; /* cannot happen: an sqe per buffer and per ref */
    reserve_ahead(w, b->off + b->fill);
    io_uring_prep_write(sqe, w->fd, b->mem, (unsigned)b->fill, b->off);
    io_uring_sqe_set_data64(sqe, tag);
    rc = io_uring_submit(&w->ring);
    if (rc < 0)
        return rc;
    b->busy = 1;
    w->inflight++;
    return 0;
}

/* Sends buffer `i` to the file. */
static int flush_buf(struct iowriter *w, unsigned i)
{
    struct iobuf *b = &w->bufs[i];

    if (b->fill == 0)
        return 0;
    if (w->direct && (b->fill % ALIGN)) {
        int rc = drop_direct(w);

        if (rc)
            return rc;
    }
    if (w->have_ring)
        return submit_uring(w, b, i);
    return pwrite_all(w->fd, b->mem, b->fill, b->off);
}

/* Waits until buffer `i` may be filled again. */
static int wait_free(struct iowriter *w, unsigned i)
{
    while (w->bufs[i].busy && !w->ring_broken) {
        int rc = reap_one(w);

        if (rc)
            return rc;
    }
    return 0;
}

/* Sends the current buffer and makes the next one current (and empty),
 * once the kernel is done with it. */
static int send_and_advance(struct iowriter *w)
{
    int rc = flush_buf(w, w->cur);

    w->cur = (w->cur + 1) % w->depth;
    if (!rc)
        rc = wait_free(w, w->cur);
    w->bufs[w->cur].fill = 0;
    return rc;
}

int iowriter_append(struct iowriter *w, const void *data, size_t len)
{
    const uint8_t *p = data;

    while (len && !w->err) {
        struct iobuf *b = &w->bufs[w->cur];
        size_t n = w->buf_size - b->fill;

        if (n > len)
            n = len;
        if (b->fill == 0)
            b->off = w->offset;
        memcpy(b->mem + b->fill, p, n);
        b->fill += n, w->offset += n, p += n, len -= n;
        if (b->fill < w->buf_size)
            break;
        set_err(w, send_and_advance(w));
    }
    return w->err;
}

/*
 * Sends the partly filled buffer, padded with zeros to the alignment
 * O_DIRECT needs: a zero-copy write goes at the offset after it.
 */
static int flush_partial(struct iowriter *w)
{
    struct iobuf *b = &w->bufs[w->cur];

    if (b->fill == 0)
        return 0;
    if (w->direct && b->fill % ALIGN) {
        size_t pad = ALIGN - b->fill % ALIGN;   /* fits: buf_size is a multiple of ALIGN */

        memset(b->mem + b->fill, 0, pad);
        b->fill += pad;
        w->offset += pad;
    }
    return send_and_advance(w);
}

/* A ref entry not in flight, reaping completions until there is one. */
static struct iobuf *free_ref(struct iowriter *w, int *rc)
{
    for (;;) {
        for (unsigned i = 0; i < REF_DEPTH; i++)
            if (!w->refs[i].busy)
                return &w->refs[i];
        if (w->ring_broken) {
            *rc = -EIO;
            return NULL;
        }
        if ((*rc = reap_one(w)) != 0)
            return NULL;
    }
}

int iowriter_append_ref(struct iowriter *w, void *data, size_t len, size_t cap, uint64_t *at,
                        uint64_t *ticket)
{
    size_t padded = w->direct ? (len + ALIGN - 1) & ~(size_t)(ALIGN - 1) : len;
    struct iobuf *b;
    int rc;

    *ticket = 0;
    *at = w->offset;
    if (w->err || len == 0)
        return w->err;
    if (padded > cap || padded > UINT_MAX || (w->direct && (uintptr_t)data % ALIGN))
        return iowriter_append(w, data, len);
    if ((rc = flush_partial(w)) != 0) {
        set_err(w, rc);
        return w->err;
    }
    *at = w->offset;
    memset((uint8_t *)data + len, 0, padded - len);
    if (!w->have_ring) {
        set_err(w, pwrite_all(w->fd, data, padded, w->offset));
        w->offset += padded;
        return w->err;
    }
    if (!(b = free_ref(w, &rc))) {
        set_err(w, rc);
        return w->err;
    }
    *b = (struct iobuf){ .mem = data, .fill = padded, .off = w->offset, .seq = ++w->ref_seq };
    set_err(w, submit_uring(w, b, REF_TAG | (uint64_t)(b - w->refs)));
    w->offset += padded;
    if (!w->err)
        *ticket = b->seq;
    return w->err;
}

int iowriter_wait(struct iowriter *w, uint64_t ticket)
{
    while (!w->ring_broken) {
        int pending = 0;

        for (unsigned i = 0; i < REF_DEPTH && !pending; i++)
            pending = w->refs[i].busy && w->refs[i].seq <= ticket;
        if (!pending)
            break;
        set_err(w, reap_one(w));
    }
    return w->ring_broken ? (w->err ? w->err : -EIO) : w->err;
}

int iowriter_finish(struct iowriter *w)
{
    if (!w->err)
        set_err(w, flush_buf(w, w->cur));
    w->bufs[w->cur].fill = 0;
    /* Reap everything even after an error: the kernel still owns the buffers. */
    while (w->have_ring && w->inflight && !w->ring_broken)
        set_err(w, reap_one(w));
    close_ring(w);
    if (!w->err && w->reserved && ftruncate(w->fd, (off_t)w->offset) < 0)
        set_err(w, -errno);   /* what reserve_ahead reserved beyond the last write */
    if (!w->err && fsync(w->fd) < 0)
        set_err(w, -errno);
    return w->err;
}
