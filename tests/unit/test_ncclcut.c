/*
 * test_ncclcut.c - the release of NCCL communicators' memory across a
 * suspend (lib/core/ncclcut.h), with two ranks in two processes and a fake
 * library whose ncclCommSuspend/Resume are barriers of the communicator's
 * ranks, as NCCL's and simnccl's are.
 *
 *   resumer-behind   Two communicators, X made before Y, both released by a
 *                    gang suspend. At the resume, rank 0's resumer takes X
 *                    back and then sees the next suspend begin: it stops
 *                    before Y, while rank 1's resumer has gone on into Y's
 *                    barrier, where it waits for rank 0. That next suspend
 *                    must not release X again: rank 0's resumer would take
 *                    X back first (the older), in X's barrier, waiting for
 *                    rank 1, which waits in Y's for rank 0; the job would
 *                    never run again (ddp-gang-random-release hung so). The
 *                    check: after the last resume every communicator comes
 *                    back on both ranks, within the fake barrier's bound.
 *   program-suspend  While rank 0's tcgpu waits for rank 1's vote to release
 *                    X, rank 0's program calls its own ncclCommSuspend on X
 *                    (vLLM's pattern). It must wait until tcgpu is done
 *                    (and has taken X back): in the library's barrier it
 *                    would be counted beside the ranks' ncclCommSuspend, let
 *                    rank 1's go, and leave rank 0's there for ever (a gang
 *                    suspend of ddp-gang-random-release that never answered).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/ncclcut.h"
#include "../common/check.h"

#define RANKS 2
#define COMMS 2                         /* X (made first), Y */
#define BARRIER_MS 10000                /* a barrier that waits longer is stuck */
#define STEP_MS 15000                   /* the bound of every wait of the test */

enum { X, Y };

/* What both processes see: the fake library's barriers and what it did. */
struct shared {
    unsigned char id[COMMS][128];       /* the communicators' unique ids */
    _Atomic unsigned arrived[COMMS];    /* the fake barrier (simnccl's) */
    _Atomic unsigned gen[COMMS];
    _Atomic unsigned suspends[RANKS][COMMS];
    _Atomic unsigned own_suspends[RANKS];   /* the program's own, of X */
    _Atomic unsigned resumes[RANKS][COMMS];
    _Atomic unsigned stuck;             /* barriers that outwaited BARRIER_MS */
    _Atomic bool hold_x_resume;         /* rank 0's resume of X returns only once false */
    _Atomic unsigned step[RANKS];       /* each rank's progress through the script */
};

static struct shared *sh;
static int my_rank;
static char comm_obj[COMMS];            /* the "ncclComm_t" of each communicator here */

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

static int comm_index(const void *comm)
{
    return (const char *)comm - comm_obj;
}

/* Every rank of the communicator arrives, or BARRIER_MS passes (stuck). */
static int barrier(int c)
{
    unsigned gen = atomic_load(&sh->gen[c]);
    uint64_t end = now_ms() + BARRIER_MS;

    if (atomic_fetch_add(&sh->arrived[c], 1) + 1 == RANKS) {
        atomic_store(&sh->arrived[c], 0);
        atomic_fetch_add(&sh->gen[c], 1);
        return 0;
    }
    while (atomic_load(&sh->gen[c]) == gen) {
        if (now_ms() > end) {
            atomic_fetch_add(&sh->stuck, 1);
            fprintf(stderr, "rank %d: stuck in communicator %c's barrier\n", my_rank, "XY"[c]);
            return 5;                   /* ncclInvalidUsage, as a library would say */
        }
        sleep_ms(1);
    }
    return 0;
}

static int fake_suspend_mem(const void *comm)
{
    int c = comm_index(comm), rc = barrier(c);

    if (rc == 0)
        atomic_fetch_add(&sh->suspends[my_rank][c], 1);
    return rc;
}

static int fake_resume(const void *comm)
{
    int c = comm_index(comm), rc = barrier(c);

    while (my_rank == 0 && c == X && atomic_load(&sh->hold_x_resume))
        sleep_ms(1);
    if (rc == 0)
        atomic_fetch_add(&sh->resumes[my_rank][c], 1);
    return rc;
}

/* Each rank says where it is; a rank waits for the other to get as far. */
static bool both_at(unsigned step)
{
    uint64_t end = now_ms() + STEP_MS;

    atomic_store(&sh->step[my_rank], step);
    while (atomic_load(&sh->step[1 - my_rank]) < step)
        if (now_ms() > end)
            return false;
        else
            sleep_ms(1);
    return true;
}

/* Waits (bounded) until cond holds; false when it never did. */
#define WAIT_UNTIL(cond)                                                    \
    ({                                                                      \
        uint64_t end_ = now_ms() + STEP_MS;                                 \
        while (!(cond) && now_ms() <= end_)                                 \
            sleep_ms(1);                                                    \
        (bool)(cond);                                                       \
    })

/* The program's own ncclCommSuspend(X, NCCL_SUSPEND_MEM), through tcgpu's
 * wrapper's calls (interpose/track_nccl.c). */
static bool own_suspend_x(void)
{
    int rc;

    ncclcut_program_suspend_begin(&comm_obj[X]);
    rc = barrier(X);
    ncclcut_program_suspend_end(&comm_obj[X], rc == 0 ? 1 : -1);
    if (rc == 0)
        atomic_fetch_add(&sh->own_suspends[my_rank], 1);
    return rc == 0;
}

/* Both ranks' communicators, made in the same order. */
static void attach_all(int rank)
{
    static const struct ncclcut_lib lib = { fake_suspend_mem, fake_resume };

    my_rank = rank;
    ncclcut_set_lib(&lib);
    for (int c = 0; c < COMMS; c++)
        ncclcut_attach(&comm_obj[c], sh->id[c], sizeof(sh->id[c]), RANKS, rank);
}

/* Whether every communicator this rank released came back (bounded). */
static bool all_back(int rank)
{
    return WAIT_UNTIL(atomic_load(&sh->resumes[rank][X]) == atomic_load(&sh->suspends[rank][X]) &&
                      atomic_load(&sh->resumes[rank][Y]) == atomic_load(&sh->suspends[rank][Y]));
}

/* resumer-behind, one rank's script; its exit status says how far it got
 * (0: to the end). */
static int resumer_behind_rank(int rank)
{
    attach_all(rank);

    /* 1. a gang suspend releases both */
    if (!both_at(1) || ncclcut_hold(STEP_MS) != 0)
        return 10;
    ncclcut_release_memory(3000);       /* both vote at once; 3 s for a loaded machine */
    if (atomic_load(&sh->suspends[rank][X]) != 1 || atomic_load(&sh->suspends[rank][Y]) != 1)
        return 11;

    /* 2. the resume: rank 0's resumer is held inside X's ncclCommResume,
     * rank 1's goes on into Y's barrier */
    if (!both_at(2))
        return 20;
    ncclcut_release();
    if (rank == 1 && !WAIT_UNTIL(atomic_load(&sh->resumes[1][X]) == 1))
        return 21;

    /* 3. the next suspend begins on rank 0 before its resumer is back
     * from X; then the resumer stops before Y */
    if (!both_at(3))
        return 30;
    if (ncclcut_hold(STEP_MS) != 0)
        return 31;
    if (rank == 0) {
        atomic_store(&sh->hold_x_resume, false);
        if (!WAIT_UNTIL(atomic_load(&sh->resumes[0][X]) == 1))
            return 32;
        sleep_ms(100);                  /* it sees the hold, and stops */
        if (atomic_load(&sh->resumes[0][Y]) != 0)
            return 33;                  /* the script's premise did not hold */
    }

    /* 4. the release of that suspend, on both */
    if (!both_at(4))
        return 40;
    ncclcut_release_memory(1000);

    /* 5. the resume: every communicator comes back on both ranks */
    if (!both_at(5))
        return 50;
    ncclcut_release();
    if (!all_back(rank))
        return 51;
    return both_at(6) ? 0 : 60;
}

/* program-suspend: rank 0's tcgpu, on a thread of its own (the suspend's),
 * while the main thread is the program. */
static _Atomic bool tcgpu_started;

static void *rank0_tcgpu(void *unused)
{
    (void)unused;
    atomic_store(&tcgpu_started, true);
    ncclcut_release_memory(3000);
    if (both_at(2))
        ncclcut_release();
    return NULL;
}

static int program_suspend_rank(int rank)
{
    pthread_t t;
    bool own;

    attach_all(rank);
    if (!both_at(1) || ncclcut_hold(STEP_MS) != 0)
        return 10;
    if (rank == 0) {
        if (pthread_create(&t, NULL, rank0_tcgpu, NULL) != 0)
            return 11;
        if (!WAIT_UNTIL(atomic_load(&tcgpu_started)))
            return 12;
        sleep_ms(200);                  /* tcgpu waits for rank 1's vote */
        own = own_suspend_x();
        pthread_join(t, NULL);
    } else {
        sleep_ms(600);
        ncclcut_release_memory(3000);
        if (!both_at(2))
            return 20;
        ncclcut_release();
        if (!all_back(rank))
            return 21;
        own = own_suspend_x();
    }
    if (!own)
        return 30;
    if (!all_back(rank))
        return 31;
    return both_at(3) ? 0 : 40;
}

/* Runs script in a process per rank; fresh shared state and ids. */
static int run_ranks(int (*script)(int rank))
{
    pid_t pid[RANKS];
    int status[RANKS];

    memset(sh, 0, sizeof(*sh));
    REQUIRE(getrandom(sh->id, sizeof(sh->id), 0) == (ssize_t)sizeof(sh->id));
    atomic_store(&sh->hold_x_resume, script == resumer_behind_rank);
    for (int r = 0; r < RANKS; r++) {
        pid[r] = fork();
        REQUIRE(pid[r] >= 0);
        if (pid[r] == 0) {
            alarm(100);                 /* a stuck rank does not outlive the test */
            _exit(script(r));
        }
    }
    for (int r = 0; r < RANKS; r++) {
        REQUIRE(waitpid(pid[r], &status[r], 0) == pid[r]);
        CHECK(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0,
              "rank %d ended with status 0x%x (its script's step: the exit code / 10)", r,
              status[r]);
    }
    CHECK(atomic_load(&sh->stuck) == 0, "%u barrier(s) never completed", atomic_load(&sh->stuck));
    for (int r = 0; r < RANKS; r++)
        for (int c = 0; c < COMMS; c++)
            CHECK(atomic_load(&sh->resumes[r][c]) == atomic_load(&sh->suspends[r][c]),
                  "rank %d, communicator %c: released %u times, taken back %u", r, "XY"[c],
                  atomic_load(&sh->suspends[r][c]), atomic_load(&sh->resumes[r][c]));
    return T_EXIT_PASS;
}

static int test_resumer_behind(void)
{
    REQUIRE(run_ranks(resumer_behind_rank) == T_EXIT_PASS);
    /* X was not released a second time: rank 0 still owed Y */
    CHECK(atomic_load(&sh->suspends[0][X]) == 1 && atomic_load(&sh->suspends[1][X]) == 1);
    return T_EXIT_PASS;
}

static int test_program_suspend(void)
{
    REQUIRE(run_ranks(program_suspend_rank) == T_EXIT_PASS);
    for (int r = 0; r < RANKS; r++) {
        CHECK(atomic_load(&sh->suspends[r][X]) == 1, "rank %d: tcgpu released X %u times", r,
              atomic_load(&sh->suspends[r][X]));
        CHECK(atomic_load(&sh->own_suspends[r]) == 1, "rank %d: the program's own suspend "
              "completed %u times", r, atomic_load(&sh->own_suspends[r]));
    }
    return T_EXIT_PASS;
}

int main(void)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return T_EXIT_FAIL;
    /* libtcgpu.so's setting, read by the core at its first use */
    setenv("TCGPU_NCCL_RELEASE", "1", 1);
    RUN(test_resumer_behind);
    RUN(test_program_suspend);
    return T_EXIT_STATUS();
}
