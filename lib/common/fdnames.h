/*
 * fdnames.h - messages that name what a descriptor path reaches as its user
 * knows it.
 *
 * Work done through a checked descriptor reaches files as /proc/self/fd/N/...
 * (common/proc.h: tcgpu_proc_fd_path), and the errors it meets name those
 * paths: "/proc/self/fd/7/1234/img: No space left on device" means nothing to
 * the user, who named "/var/lib/ckpt/job". These put the user's name back.
 */
#ifndef TCGPU_FDNAMES_H
#define TCGPU_FDNAMES_H

#include <stddef.h>

/*
 * In text (NUL-terminated, in a buffer of len bytes), every mention of `at`
 * (a descriptor path such as "/proc/self/fd/7", or an entry of it) that is
 * not the start of a longer number ("/proc/self/fd/70") becomes `shown`.
 * The result is cut to len - 1 bytes. Nothing changes when at is "" or
 * the same as shown.
 */
void tcgpu_fdnames_show(char *text, size_t len, const char *at, const char *shown);

#endif /* TCGPU_FDNAMES_H */
