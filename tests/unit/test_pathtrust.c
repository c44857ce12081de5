/*
 * lib/common/pathtrust.c: a path is walked only through directories and
 * symlinks its user can trust (owned by root or the user, not writable by
 * others unless sticky), as ssh's StrictModes; the descriptor is the
 * directory that was checked. Cases with another owner need root (chown):
 * they are checked as root and skipped otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/pathtrust.h"
#include "../common/check.h"

#define OTHER 65534               /* nobody */

static char top[256];

static const char *at(const char *rel)
{
    static char buf[4][PATH_MAX];
    static int i;

    i = (i + 1) % 4;
    snprintf(buf[i], sizeof(buf[i]), "%s/%s", top, rel);
    return buf[i];
}

/* pathtrust_open_parent(path) for our uid: the result, leaf and message. */
static int walk(const char *path, char *leaf, char *err)
{
    int fd = pathtrust_open_parent(path, geteuid(), leaf, NAME_MAX + 1, err, 512);

    if (fd >= 0)
        close(fd);
    return fd >= 0 ? 0 : fd;
}

static int test_trusted(void)
{
    char leaf[NAME_MAX + 1], err[512], rel[512];
    struct stat a, b;
    int fd;

    REQUIRE(mkdir(at("a"), 0755) == 0 && mkdir(at("a/b"), 0700) == 0, "mkdir");
    fd = pathtrust_open_parent(at("a/b/img"), geteuid(), leaf, sizeof(leaf), err, sizeof(err));
    REQUIRE(fd >= 0, "a trusted chain: %s", err);
    CHECK(!strcmp(leaf, "img"), "leaf %s", leaf);
    CHECK(fstat(fd, &a) == 0 && stat(at("a/b"), &b) == 0 && a.st_ino == b.st_ino,
          "the descriptor is the parent");
    close(fd);
    CHECK(walk(at("a/b/img//"), leaf, err) == 0 && !strcmp(leaf, "img"), "trailing slashes");
    CHECK(walk(at("a/./b/../b/img"), leaf, err) == 0, ". and ..: %s", err);
    /* our own symlinks are followed, relative and absolute */
    CHECK(symlink("b", at("a/rel")) == 0 && walk(at("a/rel/img"), leaf, err) == 0, "relative: %s", err);
    CHECK(symlink(at("a/b"), at("a/abs")) == 0 && walk(at("a/abs/img"), leaf, err) == 0,
          "absolute: %s", err);
    /* a loop ends */
    CHECK(symlink("loop2", at("a/loop1")) == 0 && symlink("loop1", at("a/loop2")) == 0);
    CHECK(walk(at("a/loop1/img"), leaf, err) == -ELOOP, "loop: %s", err);
    /* what is not a directory, not absolute, or has no new last component */
    CHECK(close(open(at("a/file"), O_CREAT | O_WRONLY, 0600)) == 0);
    CHECK(walk(at("a/file/img"), leaf, err) == -ENOTDIR && strstr(err, "not a directory"), "%s", err);
    CHECK(walk(at("a/none/img"), leaf, err) == -ENOENT, "%s", err);
    CHECK(walk("a/b/img", leaf, err) == -EINVAL, "relative path");
    CHECK(walk("/", leaf, err) == -EINVAL && walk(at("a/.."), leaf, err) == -EINVAL, "no leaf");
    snprintf(rel, sizeof(rel), "%s/a/b/..", top);
    CHECK(walk(rel, leaf, err) == -EINVAL, "a leaf of ..");
    return 0;
}

static int test_writable_by_others(void)
{
    char leaf[NAME_MAX + 1], err[512];

    REQUIRE(mkdir(at("w"), 0700) == 0 && chmod(at("w"), 0777) == 0, "mkdir");
    CHECK(walk(at("w/img"), leaf, err) == -EPERM && strstr(err, "may be written by others") &&
          strstr(err, at("w")), "world-writable: %s", err);
    CHECK(chmod(at("w"), 0770) == 0 && walk(at("w/img"), leaf, err) == -EPERM, "group-writable");
    /* sticky (as /tmp): our entries in it are ours to keep */
    CHECK(chmod(at("w"), 01777) == 0 && walk(at("w/img"), leaf, err) == 0, "sticky: %s", err);
    CHECK(mkdir(at("w/mine"), 0700) == 0 && walk(at("w/mine/img"), leaf, err) == 0, "%s", err);
    return 0;
}

static int test_other_owner(void)
{
    char leaf[NAME_MAX + 1], err[512];
    int fd;

    if (geteuid() != 0)
        return T_EXIT_SKIP;
    /* w is sticky and world-writable (test_writable_by_others) */
    REQUIRE(mkdir(at("w/theirs"), 0755) == 0 && chown(at("w/theirs"), OTHER, OTHER) == 0, "mkdir");
    CHECK(walk(at("w/theirs/img"), leaf, err) == -EPERM && strstr(err, "owned by uid 65534"),
          "another user's dir: %s", err);
    /* their symlink in a sticky dir, to a dir of ours: never followed (the
     * planted-parent case: root's image would land where they point) */
    REQUIRE(symlink(at("a/b"), at("w/link")) == 0 &&
            lchown(at("w/link"), OTHER, OTHER) == 0, "symlink");
    CHECK(walk(at("w/link/img"), leaf, err) == -EPERM && strstr(err, "symbolic link owned by uid 65534"),
          "their symlink: %s", err);
    /* a symlink someone else owns in a dir no one else may write: a trusted
     * user put it there (lchown), so it is followed */
    REQUIRE(symlink(at("a/b"), at("a/given")) == 0 && lchown(at("a/given"), OTHER, OTHER) == 0, "link");
    CHECK(walk(at("a/given/img"), leaf, err) == 0, "in a private dir: %s", err);
    /* for that user, its own dir is trusted (and root's are, for everyone) */
    fd = pathtrust_open_parent(at("w/theirs/img"), OTHER, leaf, sizeof(leaf), err, sizeof(err));
    CHECK(fd >= 0, "its own dir, for uid 65534: %s", err);
    if (fd >= 0)
        close(fd);
    return 0;
}

/* "/proc/self/fd/N/...": the walk starts at the directory we hold, even
 * when no path names it here (the CRIU plugin passes its images directory,
 * which may be in another mount namespace); that directory is checked too. */
static int test_held_descriptor(void)
{
    char leaf[NAME_MAX + 1], err[512], path[64];
    struct stat a, b;
    int dfd, fd;

    REQUIRE(mkdir(at("held"), 0700) == 0 && mkdir(at("held/sub"), 0700) == 0, "mkdir");
    REQUIRE((dfd = open(at("held"), O_PATH | O_DIRECTORY | O_CLOEXEC)) >= 0, "open");
    /* gone from its path: only the descriptor reaches it now */
    REQUIRE(rename(at("held"), at("moved")) == 0, "rename");
    snprintf(path, sizeof(path), "/proc/self/fd/%d/sub/img", dfd);
    fd = pathtrust_open_parent(path, geteuid(), leaf, sizeof(leaf), err, sizeof(err));
    REQUIRE(fd >= 0, "a held directory: %s", err);
    CHECK(!strcmp(leaf, "img"), "leaf %s", leaf);
    CHECK(fstat(fd, &a) == 0 && stat(at("moved/sub"), &b) == 0 && a.st_ino == b.st_ino,
          "the descriptor is the held directory's sub");
    close(fd);
    snprintf(path, sizeof(path), "/proc/self/fd/%d/img", dfd);
    CHECK(walk(path, leaf, err) == 0, "the held directory itself as parent: %s", err);
    /* a held directory others may write is refused as any other */
    REQUIRE(chmod(at("moved"), 0777) == 0, "chmod");
    CHECK(walk(path, leaf, err) == -EPERM && strstr(err, "/proc/self/fd/"), "writable by others: %s", err);
    close(dfd);
    /* one no path leads to at all (the link's name resolves to nothing) */
    REQUIRE(mkdir(at("gone"), 0700) == 0, "mkdir");
    REQUIRE((dfd = open(at("gone"), O_PATH | O_DIRECTORY | O_CLOEXEC)) >= 0, "open");
    REQUIRE(rmdir(at("gone")) == 0, "rmdir");
    snprintf(path, sizeof(path), "/proc/self/fd/%d/img", dfd);
    CHECK(walk(path, leaf, err) == 0, "a directory reached only by its descriptor: %s", err);
    close(dfd);
    return 0;
}

/* Where root may write for a user: the user's own private directory, or a
 * sticky world-writable one of root's; not root's own, not one others may
 * write, not another user's, not a file. */
static int test_user_may_write(void)
{
    struct stat st = { .st_mode = S_IFDIR | 0700, .st_uid = 1000 };

    CHECK(pathtrust_user_may_write(&st, 1000), "the user's own 0700");
    st.st_mode = S_IFDIR | 0755;
    CHECK(pathtrust_user_may_write(&st, 1000), "the user's own 0755");
    st.st_mode = S_IFDIR | 0775;
    CHECK(!pathtrust_user_may_write(&st, 1000), "the user's own, group-writable");
    st.st_mode = S_IFDIR | 0700;
    CHECK(!pathtrust_user_may_write(&st, 1001), "another user's");
    st.st_uid = 0;
    CHECK(!pathtrust_user_may_write(&st, 1000), "root's own 0700 (where a user's symlink led root)");
    st.st_mode = S_IFDIR | 01777;
    CHECK(pathtrust_user_may_write(&st, 1000), "root's sticky /tmp");
    st.st_mode = S_IFDIR | 0777;
    CHECK(!pathtrust_user_may_write(&st, 1000), "root's, world-writable but not sticky");
    st.st_mode = S_IFREG | 0700;
    st.st_uid = 1000;
    CHECK(!pathtrust_user_may_write(&st, 1000), "a file");
    return 0;
}

int main(void)
{
    char cmd[PATH_MAX + 16];

    snprintf(top, sizeof(top), "/tmp/tcgpu-pathtrust-XXXXXX");
    REQUIRE(mkdtemp(top), "mkdtemp");
    RUN(test_trusted);
    RUN(test_writable_by_others);
    RUN(test_other_owner);
    RUN(test_held_descriptor);
    RUN(test_user_may_write);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", top);
    return T_EXIT_STATUS();
}
