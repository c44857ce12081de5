/*
 * The files installed with a program, found from where it runs
 * (lib/common/companion.c): the build tree's place, the install's relative
 * one wherever the tree lies, the configured absolute one; the first that
 * fits wins, the path comes back without symlinks, and a miss names every
 * folder looked in.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/check.h"
#include "common/companion.h"

static char self[PATH_MAX], self_dir[PATH_MAX], tmp[] = "/tmp/tcgpu-companion-XXXXXX";

static int never(const char *path)
{
    (void)path;
    return 0;
}

static void remove_tmp(void)
{
    char p[PATH_MAX + 32];

    snprintf(p, sizeof(p), "%s/lib/libx.so", tmp);
    unlink(p);
    snprintf(p, sizeof(p), "%s/lib", tmp);
    rmdir(p);
    snprintf(p, sizeof(p), "%s/link", tmp);
    unlink(p);
    rmdir(tmp);
}

/* Relative folders are taken from the executable's, "../" included. */
static int test_relative(void)
{
    const char *const dirs[] = { "no-such-folder", "../unit", ".", NULL };
    char out[PATH_MAX];

    REQUIRE(tcgpu_companion_find(dirs, "test_companion", NULL, out, sizeof(out)) == 0);
    CHECK(!strcmp(out, self), "%s, not %s", out, self);
    return T_EXIT_PASS;
}

/* An absolute folder as it is; through a symlink, the path comes back resolved. */
static int test_absolute_resolved(void)
{
    char real[PATH_MAX + 32], link[PATH_MAX + 32], out[PATH_MAX], want[PATH_MAX];
    const char *const dirs[] = { "/no-such-folder", link, NULL };
    FILE *f;

    snprintf(real, sizeof(real), "%s/lib", tmp);
    snprintf(link, sizeof(link), "%s/link", tmp);
    REQUIRE(mkdir(real, 0700) == 0 && symlink(real, link) == 0);
    strcat(real, "/libx.so");
    REQUIRE((f = fopen(real, "w")) != NULL);
    fclose(f);
    REQUIRE(realpath(real, want) != NULL);
    REQUIRE(tcgpu_companion_find(dirs, "libx.so", NULL, out, sizeof(out)) == 0);
    CHECK(!strcmp(out, want), "%s, not %s", out, want);
    CHECK(tcgpu_companion_find(dirs, "libx.so", NULL, out, 8) == -ENAMETOOLONG);
    return T_EXIT_PASS;
}

/* None fits: -ENOENT, and the folders looked in, resolved where they exist. */
static int test_miss_says_where(void)
{
    const char *const dirs[] = { ".", "/no-such-folder", NULL };
    char out[2 * PATH_MAX + 64], want[sizeof(out)];

    CHECK(tcgpu_companion_find(dirs, "test_companion", never, out, sizeof(out)) == -ENOENT);
    snprintf(want, sizeof(want), "%s, /no-such-folder", self_dir);
    CHECK(!strcmp(out, want), "'%s', not '%s'", out, want);
    CHECK(tcgpu_companion_find(dirs, "test_companion", never, out, 6) == -ENOENT &&
          strlen(out) < 6, "the list is cut to the buffer: '%s'", out);
    return T_EXIT_PASS;
}

int main(void)
{
    REQUIRE(realpath("/proc/self/exe", self) != NULL && mkdtemp(tmp) != NULL);
    snprintf(self_dir, sizeof(self_dir), "%.*s", (int)(strrchr(self, '/') - self), self);
    RUN(test_relative);
    RUN(test_absolute_resolved);
    RUN(test_miss_says_where);
    remove_tmp();
    return T_EXIT_STATUS();
}
