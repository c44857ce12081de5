/* test_fdnames.c - descriptor paths in messages named as the user knows them
 * (lib/common/fdnames.h): every mention, only whole descriptor numbers, cut
 * to the buffer, nothing done when there is nothing to do. */
#include <string.h>

#include "common/fdnames.h"
#include "../common/check.h"

static int shows_the_users_name(void)
{
    char t[256] = "/proc/self/fd/7/img: No space left (writing /proc/self/fd/7/img/x)";

    tcgpu_fdnames_show(t, sizeof(t), "/proc/self/fd/7", "/home/me/ckpt");
    CHECK(!strcmp(t, "/home/me/ckpt/img: No space left (writing /home/me/ckpt/img/x)"), "%s", t);
    return T_EXIT_PASS;
}

static int only_that_descriptor(void)
{
    char t[256] = "/proc/self/fd/70/img and /proc/self/fd/7";

    tcgpu_fdnames_show(t, sizeof(t), "/proc/self/fd/7", "/d");
    CHECK(!strcmp(t, "/proc/self/fd/70/img and /d"), "%s", t);
    return T_EXIT_PASS;
}

static int cut_to_the_buffer(void)
{
    char t[16] = "/proc/self/fd/3";

    tcgpu_fdnames_show(t, sizeof(t), "/proc/self/fd/3", "/a/very/long/directory/name");
    CHECK(strlen(t) == sizeof(t) - 1 && !strncmp(t, "/a/very/long/di", 15), "%s", t);
    strcpy(t, "x");
    tcgpu_fdnames_show(t, sizeof(t), "", "/y");
    CHECK(!strcmp(t, "x"));
    return T_EXIT_PASS;
}

int main(void)
{
    RUN(shows_the_users_name);
    RUN(only_that_descriptor);
    RUN(cut_to_the_buffer);
    return T_EXIT_STATUS();
}
