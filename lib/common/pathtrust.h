/*
 * pathtrust.h - a path whose every ancestor its user can trust.
 *
 * A private file in a directory that someone else may change is not
 * private: they can rename it, replace it, or put a symlink where its
 * parent was. So before tcgpu writes an image (or a save) at a path, it
 * walks the path from "/" with openat(O_NOFOLLOW), one component at a time,
 * and trusts a directory only when, as ssh's StrictModes:
 *
 *   - it is owned by root or by the user, and
 *   - no one else may write to it (no group/other write bit), or it is
 *     sticky (/tmp, /var/tmp): then others may add entries but not rename
 *     or remove ours, and the entry we go through must be owned by root or
 *     the user (checked as the next directory's owner).
 *
 * A symbolic link is followed only when owned by root, the user or the
 * directory's owner, or when it sits in a directory no one else may write
 * (then a trusted user made it); its target is walked the same way. The
 * descriptor returned is the directory that was checked, not a path
 * resolved again later: create and rename relative to it (mkdirat,
 * renameat2), so that nothing can be swapped in between.
 *
 * A path that starts "/proc/self/fd/N/" starts at the directory this
 * process holds as descriptor N (one passed by a peer whose credentials
 * were checked), itself checked as above, rather than at "/": the magic
 * link may name a place outside our mount namespace.
 *
 * Thread-safe; no globals, no output of its own.
 */
#ifndef TCGPU_COMMON_PATHTRUST_H
#define TCGPU_COMMON_PATHTRUST_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

/*
 * Walk the parent of `path` (absolute) as above, for `uid`. Returns an
 * O_PATH directory descriptor of the parent (the caller closes it) and
 * writes path's last component to leaf (leaflen bytes). Or -errno with a
 * one-line message in err naming the component and why:
 *   -EPERM        a component another user owns or may change ("/tmp/x is a
 *                 symbolic link owned by uid 1001 in /tmp, which others may
 *                 write: refusing to follow it")
 *   -EINVAL       not absolute, or no last component ("/", "x/..")
 *   -ENOENT, -ENOTDIR, -ELOOP, -ENAMETOOLONG, -EACCES...: as open would
 */
int pathtrust_open_parent(const char *path, uid_t uid, char *leaf, size_t leaflen, char *err,
                          size_t errlen);

/*
 * Whether a directory (st) may receive what root writes on behalf of uid
 * (tcgpud's saves for an ordinary user): one uid may write into itself and
 * nobody else may change, that is uid's own with no group/other write bit,
 * or root's sticky world-writable one (/tmp). pathtrust_open_parent says
 * nobody else can swap the way there; this says the user may write there:
 * root must not be led into a directory the user could not write to.
 */
int pathtrust_user_may_write(const struct stat *st, uid_t uid);

#endif
