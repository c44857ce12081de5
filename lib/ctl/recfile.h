/*
 * recfile.h - a small sealed file of records: one control-protocol message
 * per line (proto.h: a word, then key=value pairs, values percent-encoded),
 * and a last line "checksum xxh3=HEX" over every byte before it. Easy to
 * read, hard to misparse, and a change or a truncation is caught. The CRIU
 * plugin's index is one (docs/kubernetes.md, "What the plugin writes").
 *
 * Writing builds the records in memory and writes them in one go, to a
 * temporary name that is fsynced and renamed (the file is whole or absent).
 * Reading refuses a missing or wrong checksum before any record is parsed.
 * Functions return 0 or -errno with a one-line message in err; no globals.
 */
#ifndef TCGPU_CTL_RECFILE_H
#define TCGPU_CTL_RECFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "proto.h"

struct recfile_writer {
    FILE *mem;
    char *text;
    size_t size;
    struct ctl_buf *b;
    int err;                    /* the first failure, reported by commit */
};

/* 0, or -ENOMEM. Always recfile_writer_free it. */
int recfile_writer_init(struct recfile_writer *w);

/* The record being built: ctl_buf_request(buf, word), ctl_buf_put..., then recfile_put. */
struct ctl_buf *recfile_buf(struct recfile_writer *w);

/* Appends the record built in recfile_buf(w) as one line. 0, or -EMSGSIZE / -ENOMEM. */
int recfile_put(struct recfile_writer *w);

/*
 * Seals the records into `name` under the directory dirfd (mode 0600):
 * written to a temporary name beside it, fsynced, renamed over any older
 * file, and the directory fsynced.
 */
int recfile_commit(struct recfile_writer *w, int dirfd, const char *name, char *err, size_t len);

void recfile_writer_free(struct recfile_writer *w);

/*
 * Reads `name` under dirfd (a regular file, not a symlink, at most max
 * bytes), checks its checksum, and calls fn for each record in order with
 * its line number (1-based). fn returns 0, or -errno with why filled, which
 * stops the reading. Returns 0; -ENOENT (no such file); -EBADMSG (damaged:
 * err names the file and the problem); fn's error; or another -errno.
 */
typedef int (*recfile_fn)(const struct ctl_msg *m, int line, void *arg, char *why, size_t len);
int recfile_read(int dirfd, const char *name, size_t max, recfile_fn fn, void *arg, char *err,
                 size_t len);

/* The process id at `key` of record m: 0 and *out, or -1 when it is absent,
 * not a number, or not a pid (1..INT32_MAX). */
int recfile_get_pid(const struct ctl_msg *m, const char *key, pid_t *out);

#endif
