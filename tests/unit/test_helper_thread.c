/*
 * lib/common/helper_thread.c: a joined helper thread is out of the process's
 * thread list (/proc/self/task), not only finished, so that whoever lists
 * the threads next (CRIU) never sees one vanish; its function ran with its
 * argument; a thread never started is not joined.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/helper_thread.h"
#include "../common/check.h"

#define ROUNDS 300

static void *note_tid(void *arg)
{
    *(pid_t *)arg = gettid();
    return NULL;
}

static int listed(pid_t tid)
{
    char path[64];
    struct stat st;

    snprintf(path, sizeof(path), "/proc/self/task/%d", (int)tid);
    return stat(path, &st) == 0;
}

/* Many rounds: with a bare pthread_join the task is still listed in some. */
static int test_gone_once_joined(void)
{
    int still = 0;

    for (int i = 0; i < ROUNDS; i++) {
        struct helper_thread h;
        pid_t seen = 0;

        REQUIRE(helper_thread_start(&h, note_tid, &seen) == 0, "round %d", i);
        CHECK(h.started);
        helper_thread_join(&h);
        CHECK(seen > 0 && seen != gettid(), "round %d: the function ran on tid %d", i, (int)seen);
        still += listed(seen);
        CHECK(!h.started, "joined twice would join a stale id");
        helper_thread_join(&h);       /* a second join does nothing */
    }
    CHECK(still == 0, "%d of %d joined threads still in /proc/self/task", still, ROUNDS);
    return 0;
}

static int test_not_started(void)
{
    struct helper_thread h = { 0 };

    helper_thread_join(&h);       /* nothing to join: returns at once */
    CHECK(!h.started);
    return 0;
}

int main(void)
{
    RUN(test_gone_once_joined);
    RUN(test_not_started);
    return T_EXIT_STATUS();
}
