/*
 * filesums.h - every file CRIU wrote into a save, checksummed at save time
 * and checked before anything trusts it (docs/save-restore.md, "What a
 * save checks").
 *
 * The GPU images carry their own checksums (every chunk, the manifest,
 * whose checksum the tree manifest records); CRIU's images carry none, so
 * a damaged pages-1.img would restore a process with damaged host memory.
 * So save records, in the tree manifest, the size and XXH3-64 of every
 * regular file under DIR/criu, and verify and restore check each of them,
 * and that no CRIU image (*.img) is there that the save did not write.
 */
#ifndef GPUCKPT_FILESUMS_H
#define GPUCKPT_FILESUMS_H

#include <stddef.h>

#include "tree.h"

/*
 * Records every regular file under DIR/criu into t->file (names sorted).
 * 0, -E2BIG (more than TREE_MAX_FILES), -EBADMSG (something other than a
 * regular file or a name too long), or -errno; err names the file.
 */
int filesums_record(struct tree *t, const char *dir, char *err, size_t len);

/*
 * Checks DIR against t->file: each listed file a regular file (no link
 * followed, nothing that blocks) of its size and checksum; no *.img under
 * DIR/criu that is not listed. Files CRIU adds on restore (restore.log,
 * stats-restore) are not images and are left alone. 0, -EBADMSG with err
 * naming the file and what is wrong, -ENOMEM or -EIO.
 */
int filesums_check(const struct tree *t, const char *dir, char *err, size_t len);

#endif
