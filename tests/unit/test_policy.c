/*
 * The policy module (lib/policy/policy.c): victim order, reservations, borrowing
 * and reclaim, min runtime, no ping-pong, manual suspensions, failures, and
 * randomized runs that check the invariants after every step:
 *   - used memory never exceeds a device's capacity (policy_check);
 *   - a SUSPEND for a requester obeys the rule of policy.h (never for a
 *     lower-priority borrower, never a job younger than min_runtime);
 *   - once the running jobs are gone, every automatically suspended job
 *     resumes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "../common/check.h"
#include "../common/rand.h"

#define MiB (1ull << 20)
#define SEC 1000000000ull

static struct pol_actions acts;

static struct policy *new_policy(uint64_t min_runtime, uint64_t cap, int ndev)
{
    struct pol_config cfg = { .min_runtime_ns = min_runtime, .resume_retry_ns = SEC };
    struct policy *p = policy_new(&cfg);

    for (int d = 0; d < ndev; d++)
        policy_set_device(p, d, cap);
    return p;
}

static int add_project(struct policy *p, const char *name, int prio, int borrow, int dev,
                       uint64_t reserve)
{
    struct pol_project pr = { .priority = prio, .may_borrow = borrow };

    snprintf(pr.name, sizeof(pr.name), "%s", name);
    if (reserve) {
        pr.nreserve = 1;
        pr.reserve[0].device = dev;
        pr.reserve[0].bytes = reserve;
    }
    return policy_add_project(p, &pr);
}

static int admit(struct policy *p, uint64_t id, int proj, int prio, uint64_t now)
{
    struct pol_job_spec s = { .id = id, .project = proj, .priority = prio, .device = 0,
                              .state = POL_RUNNING };
    return policy_admit(p, &s, now);
}

/* Admit and give it mem at time now (granted without preemption). */
static int start_job(struct policy *p, uint64_t id, int proj, int prio, uint64_t mem, uint64_t now)
{
    if (admit(p, id, proj, prio, now))
        return -1;
    pol_actions_clear(&acts);
    if (policy_request(p, id, 0, mem, POL_FREE_UNKNOWN, 0, now, &acts))
        return -1;
    return acts.n == 1 && acts.v[0].kind == POL_ACT_GRANT ? 0 : -1;
}

static size_t count(enum pol_act_kind k)
{
    size_t n = 0;
    for (size_t i = 0; i < acts.n; i++)
        n += acts.v[i].kind == k;
    return n;
}

static int has(enum pol_act_kind k, uint64_t job)
{
    for (size_t i = 0; i < acts.n; i++)
        if (acts.v[i].kind == k && acts.v[i].job == job)
            return 1;
    return 0;
}

/* Ack every SUSPEND in acts (ok), collecting the follow-up actions. */
static void ack_suspends(struct policy *p, uint64_t now)
{
    struct pol_actions first = acts;
    struct pol_actions next = { 0 };

    for (size_t i = 0; i < first.n; i++)
        if (first.v[i].kind == POL_ACT_SUSPEND)
            policy_job_suspended(p, first.v[i].job, 0, now, &next);
    free(first.v);
    acts = next;
}

static int checked(struct policy *p)
{
    char msg[256];
    int r = policy_check(p, msg, sizeof(msg));
    if (r)
        fprintf(stderr, "policy_check: %s\n", msg);
    return r;
}

/* ------------------------------------------------------------------------- */

static int test_grant_and_deny(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 1);
    int a = add_project(p, "a", 10, 1, 0, 0);

    REQUIRE(start_job(p, 1, a, 10, 600 * MiB, 0) == 0, "first job fits");
    REQUIRE(admit(p, 2, a, 10, 0) == 0, "admit");
    pol_actions_clear(&acts);
    REQUIRE(policy_request(p, 2, 0, 600 * MiB, POL_FREE_UNKNOWN, 0, SEC, &acts) == 0, "request");
    REQUIRE(acts.n == 1 && acts.v[0].kind == POL_ACT_DENY && acts.v[0].why == POL_WHY_NO_ROOM,
          "equal priority borrower denied (got %s)", acts.n ? pol_act_name(acts.v[0].kind) : "-");
    pol_actions_clear(&acts);
    REQUIRE(policy_request(p, 2, 0, 400 * MiB, POL_FREE_UNKNOWN, 0, SEC, &acts) == 0 &&
          count(POL_ACT_GRANT) == 1, "what fits is granted");
    REQUIRE(policy_device_used(p, 0) == 1000 * MiB, "used %" PRIu64, policy_device_used(p, 0));
    /* observed free memory smaller than the policy's own view counts */
    REQUIRE(admit(p, 3, a, 10, 0) == 0, "admit 3");
    policy_job_exited(p, 2, SEC, &acts);
    pol_actions_clear(&acts);
    policy_request(p, 3, 0, 300 * MiB, 100 * MiB, 0, SEC, &acts);
    REQUIRE(count(POL_ACT_DENY) == 1, "the driver's free memory is believed");
    REQUIRE(policy_request(p, 99, 0, 1, POL_FREE_UNKNOWN, 0, 0, &acts) == -ENOENT, "unknown job");
    REQUIRE(policy_request(p, 3, 0, 0, POL_FREE_UNKNOWN, 0, 0, &acts) == -EINVAL, "zero bytes");
    REQUIRE(checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

/* Borrowers first, then lower priority, then least work lost. */
static int test_victim_order(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 1);
    int res = add_project(p, "res", 5, 1, 0, 600 * MiB);    /* reserves 600 MiB */
    int bor = add_project(p, "bor", 5, 1, 0, 0);            /* always borrowing */
    int hi = add_project(p, "hi", 50, 1, 0, 300 * MiB);

    /* res job (prio 1, within its reservation, protected), two borrowers of prio 5 */
    REQUIRE(start_job(p, 1, res, 1, 300 * MiB, 0) == 0, "res job");
    REQUIRE(start_job(p, 2, bor, 5, 300 * MiB, 1 * SEC) == 0, "borrower 2");
    REQUIRE(start_job(p, 3, bor, 5, 300 * MiB, 5 * SEC) == 0, "borrower 3 (resumed later)");
    REQUIRE(admit(p, 10, hi, 50, 10 * SEC) == 0, "admit hi");
    pol_actions_clear(&acts);
    /* needs 200 MiB beyond the free 100: one victim; the borrower with least work lost (3) */
    REQUIRE(policy_request(p, 10, 0, 300 * MiB, POL_FREE_UNKNOWN, 0, 10 * SEC, &acts) == 0, "req");
    REQUIRE(count(POL_ACT_SUSPEND) == 1 && has(POL_ACT_SUSPEND, 3),
          "victim is borrower 3 (%zu suspends, first %" PRIu64 ")", count(POL_ACT_SUSPEND),
          acts.n ? acts.v[0].job : 0);
    REQUIRE(acts.v[0].for_job == 10 && acts.v[0].why == POL_WHY_RECLAIM, "reclaim for 10");
    REQUIRE(policy_job(p, 10)->req == POL_REQ_PREEMPTING, "requester waits for the ack");
    REQUIRE(checked(p) == 0, "invariants while suspending");
    ack_suspends(p, 11 * SEC);
    REQUIRE(acts.n == 1 && acts.v[0].kind == POL_ACT_GRANT && acts.v[0].job == 10 &&
          acts.v[0].why == POL_WHY_PREEMPTED, "granted after the ack");
    REQUIRE(policy_job(p, 3)->state == POL_SUSPENDED && policy_job(p, 3)->preemptions == 1,
          "3 suspended, counted");
    REQUIRE(policy_job(p, 3)->suspended_for == 10, "who it was for");

    /* a bigger ask: the remaining borrower first, then the protected low-priority job */
    REQUIRE(admit(p, 11, hi, 50, 12 * SEC) == 0, "admit hi 2");
    pol_actions_clear(&acts);
    policy_request(p, 11, 0, 600 * MiB, POL_FREE_UNKNOWN, 0, 12 * SEC, &acts);
    REQUIRE(count(POL_ACT_DENY) == 1, "hi project beyond its reservation cannot take reserved memory");
    policy_free(p);
    return 0;
}

/* Lower priority first within borrowers; least work lost breaks ties. */
static int test_priority_then_work(void)
{
    struct policy *p = new_policy(0, 900 * MiB, 1);
    int a = add_project(p, "a", 1, 1, 0, 0);
    int b = add_project(p, "b", 90, 1, 0, 0);

    REQUIRE(start_job(p, 1, a, 3, 300 * MiB, 0) == 0, "1");
    REQUIRE(start_job(p, 2, a, 2, 300 * MiB, 0) == 0, "2");
    REQUIRE(start_job(p, 3, a, 3, 300 * MiB, 3 * SEC) == 0, "3");
    REQUIRE(admit(p, 9, b, 90, 0) == 0, "9");
    pol_actions_clear(&acts);
    policy_request(p, 9, 0, 600 * MiB, POL_FREE_UNKNOWN, 0, 10 * SEC, &acts);
    REQUIRE(count(POL_ACT_SUSPEND) == 2 && acts.v[0].job == 2 && acts.v[1].job == 3,
          "order: lowest priority (2), then least work lost (3); got %zu", count(POL_ACT_SUSPEND));
    REQUIRE(acts.v[0].why == POL_WHY_PRIORITY, "why priority");
    ack_suspends(p, 11 * SEC);
    REQUIRE(has(POL_ACT_GRANT, 9), "granted");
    REQUIRE(checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

/* A borrower never preempts a job within its reservation; a reclaimer does. */
static int test_reservation(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 1);
    int own = add_project(p, "own", 1, 1, 0, 800 * MiB);
    int vip = add_project(p, "vip", 99, 1, 0, 0);
    int nob = add_project(p, "nob", 50, 0, 0, 100 * MiB);

    REQUIRE(start_job(p, 1, own, 1, 800 * MiB, 0) == 0, "own within reservation");
    REQUIRE(admit(p, 2, vip, 99, 0) == 0, "vip");
    pol_actions_clear(&acts);
    policy_request(p, 2, 0, 500 * MiB, POL_FREE_UNKNOWN, 0, 10 * SEC, &acts);
    REQUIRE(count(POL_ACT_DENY) == 1 && count(POL_ACT_SUSPEND) == 0,
          "a high-priority borrower does not take reserved memory");
    /* may_borrow = no: beyond its reservation is refused outright */
    REQUIRE(admit(p, 3, nob, 50, 0) == 0, "nob");
    pol_actions_clear(&acts);
    policy_request(p, 3, 0, 150 * MiB, POL_FREE_UNKNOWN, 0, 10 * SEC, &acts);
    REQUIRE(acts.n == 1 && acts.v[0].kind == POL_ACT_DENY && acts.v[0].why == POL_WHY_NO_BORROW,
          "no borrowing");
    pol_actions_clear(&acts);
    policy_request(p, 3, 0, 100 * MiB, POL_FREE_UNKNOWN, 0, 10 * SEC, &acts);
    REQUIRE(has(POL_ACT_GRANT, 3), "within reservation: granted");
    policy_free(p);
    return 0;
}

/* Reclaim: a low-priority project reclaims its reservation from a higher-priority borrower. */
static int test_reclaim(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 1);
    int own = add_project(p, "own", 1, 1, 0, 600 * MiB);
    int bor = add_project(p, "bor", 20, 1, 0, 0);

    REQUIRE(start_job(p, 1, bor, 20, 900 * MiB, 0) == 0, "borrower fills the device");
    REQUIRE(admit(p, 2, own, 1, 0) == 0, "owner");
    pol_actions_clear(&acts);
    policy_request(p, 2, 0, 500 * MiB, POL_FREE_UNKNOWN, 0, 10 * SEC, &acts);
    REQUIRE(has(POL_ACT_SUSPEND, 1) && acts.v[0].why == POL_WHY_RECLAIM, "reclaimed");
    ack_suspends(p, 10 * SEC);
    REQUIRE(has(POL_ACT_GRANT, 2), "granted");
    /* the borrower cannot take it back while the owner stays within its reservation */
    pol_actions_clear(&acts);
    policy_tick(p, 20 * SEC, &acts);
    REQUIRE(acts.n == 0, "no resume: 900 MiB do not fit next to 500");
    policy_job_exited(p, 2, 30 * SEC, &acts);
    pol_actions_clear(&acts);
    policy_tick(p, 30 * SEC, &acts);
    REQUIRE(has(POL_ACT_RESUME, 1), "resumed when the owner left");
    policy_job_resumed(p, 1, 0, 31 * SEC, &acts);
    REQUIRE(policy_job(p, 1)->state == POL_RUNNING && policy_job(p, 1)->resumes == 1, "running");
    REQUIRE(checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

/* A victim stays suspended at least min_runtime, even when memory looks free. */
static int test_victim_hold_off(void)
{
    struct policy *p = new_policy(5 * SEC, 1000 * MiB, 1);
    int lo = add_project(p, "lo", 1, 1, 0, 0);
    int hi = add_project(p, "hi", 9, 1, 0, 0);

    REQUIRE(start_job(p, 1, lo, 1, 600 * MiB, 0) == 0, "lo");
    REQUIRE(start_job(p, 2, hi, 9, 300 * MiB, 0) == 0, "hi holds 300");
    pol_actions_clear(&acts);
    policy_request(p, 2, 0, 200 * MiB, POL_FREE_UNKNOWN, 0, 10 * SEC, &acts);
    REQUIRE(has(POL_ACT_SUSPEND, 1), "lo preempted for 200 MiB");
    ack_suspends(p, 10 * SEC);
    REQUIRE(has(POL_ACT_GRANT, 2), "granted");
    /* 500 MiB free now, but hi will want more soon: lo waits min_runtime */
    pol_actions_clear(&acts);
    policy_tick(p, 11 * SEC, &acts);
    REQUIRE(acts.n == 0, "resumed right after its preemption");
    policy_set_usage(p, 2, 400 * MiB);
    pol_actions_clear(&acts);
    policy_tick(p, 15 * SEC, &acts);
    REQUIRE(has(POL_ACT_RESUME, 1), "after min_runtime it comes back when it fits");
    policy_free(p);
    return 0;
}

static int test_min_runtime(void)
{
    struct policy *p = new_policy(30 * SEC, 1000 * MiB, 1);
    int lo = add_project(p, "lo", 1, 1, 0, 0);
    int hi = add_project(p, "hi", 9, 1, 0, 0);

    REQUIRE(start_job(p, 1, lo, 1, 900 * MiB, 0) == 0, "lo");
    REQUIRE(admit(p, 2, hi, 9, 0) == 0, "hi");
    pol_actions_clear(&acts);
    policy_request(p, 2, 0, 500 * MiB, POL_FREE_UNKNOWN, 1, 10 * SEC, &acts);
    REQUIRE(acts.n == 1 && acts.v[0].kind == POL_ACT_WAIT, "too young: the request waits");
    pol_actions_clear(&acts);
    policy_tick(p, 29 * SEC, &acts);
    REQUIRE(acts.n == 0, "still too young at 29 s");
    policy_tick(p, 30 * SEC, &acts);
    REQUIRE(has(POL_ACT_SUSPEND, 1), "preempted at 30 s (tick retries waiting requests)");
    ack_suspends(p, 31 * SEC);
    REQUIRE(has(POL_ACT_GRANT, 2), "granted");
    REQUIRE(checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

/* Two jobs cannot preempt each other back and forth. */
static int test_no_ping_pong(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 1);
    int a = add_project(p, "a", 5, 1, 0, 0);
    int b = add_project(p, "b", 5, 1, 0, 0);
    int c = add_project(p, "c", 7, 1, 0, 0);

    /* equal priorities, both borrowing: neither can displace the other */
    REQUIRE(start_job(p, 1, a, 5, 700 * MiB, 0) == 0, "1");
    REQUIRE(admit(p, 2, b, 5, 0) == 0, "2");
    pol_actions_clear(&acts);
    policy_request(p, 2, 0, 700 * MiB, POL_FREE_UNKNOWN, 0, 100 * SEC, &acts);
    REQUIRE(count(POL_ACT_SUSPEND) == 0, "equal priority: no preemption");
    /* higher priority preempts; then the victim, once back, cannot preempt it */
    REQUIRE(admit(p, 3, c, 7, 0) == 0, "3");
    pol_actions_clear(&acts);
    policy_request(p, 3, 0, 700 * MiB, POL_FREE_UNKNOWN, 0, 100 * SEC, &acts);
    REQUIRE(has(POL_ACT_SUSPEND, 1), "1 preempted by 3");
    ack_suspends(p, 100 * SEC);
    for (int round = 0; round < 50; round++) {
        pol_actions_clear(&acts);
        policy_tick(p, (101 + round) * SEC, &acts);
        REQUIRE(count(POL_ACT_SUSPEND) == 0 && count(POL_ACT_RESUME) == 0,
              "round %d: nothing moves while 3 holds the memory", round);
        pol_actions_clear(&acts);
        int r = policy_request(p, 2, 0, 700 * MiB, POL_FREE_UNKNOWN, 0, (101 + round) * SEC, &acts);
        REQUIRE(r == 0 && count(POL_ACT_SUSPEND) == 0, "2 cannot preempt 3");
    }
    policy_free(p);
    return 0;
}

/* Resume order: priority, FIFO within a priority; a big one blocks smaller later ones. */
static int test_resume_order(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 1);
    int a = add_project(p, "a", 1, 1, 0, 0);
    int h = add_project(p, "h", 99, 1, 0, 0);

    REQUIRE(start_job(p, 1, a, 1, 200 * MiB, 0) == 0, "1");
    REQUIRE(start_job(p, 2, a, 3, 200 * MiB, 0) == 0, "2");
    REQUIRE(start_job(p, 3, a, 1, 200 * MiB, 0) == 0, "3");
    REQUIRE(start_job(p, 4, a, 1, 400 * MiB, 0) == 0, "4");
    /* suspend by hand with auto-resume, in the order 3, 1, 2, 4 */
    uint64_t order[] = { 3, 1, 2, 4 };
    for (int i = 0; i < 4; i++) {
        pol_actions_clear(&acts);
        REQUIRE(policy_manual_suspend(p, order[i], 1, (uint64_t)i * SEC, &acts) == 0, "suspend");
        ack_suspends(p, (uint64_t)i * SEC);
    }
    REQUIRE(start_job(p, 9, h, 99, 900 * MiB, 10 * SEC) == 0, "the big one");
    pol_actions_clear(&acts);
    policy_tick(p, 11 * SEC, &acts);
    REQUIRE(acts.n == 0, "nothing fits");
    policy_job_exited(p, 9, 12 * SEC, &acts);
    pol_actions_clear(&acts);
    policy_tick(p, 12 * SEC, &acts);
    REQUIRE(acts.n == 4 && acts.v[0].job == 2 && acts.v[1].job == 3 && acts.v[2].job == 1 &&
          acts.v[3].job == 4, "priority first, then FIFO: 2 3 1 4 (got %zu)", acts.n);
    /* head-of-line: with 500 MiB free, 4 (400) cannot pass a waiting 600 of equal priority */
    policy_free(p);

    p = new_policy(0, 1000 * MiB, 1);
    a = add_project(p, "a", 1, 1, 0, 0);
    REQUIRE(start_job(p, 1, a, 1, 600 * MiB, 0) == 0, "1");
    REQUIRE(start_job(p, 2, a, 1, 300 * MiB, 0) == 0, "2");
    pol_actions_clear(&acts);
    policy_manual_suspend(p, 1, 1, 1 * SEC, &acts);
    ack_suspends(p, 1 * SEC);
    pol_actions_clear(&acts);
    policy_manual_suspend(p, 2, 1, 2 * SEC, &acts);
    ack_suspends(p, 2 * SEC);
    REQUIRE(start_job(p, 3, a, 1, 500 * MiB, 3 * SEC) == 0, "3 holds 500");
    pol_actions_clear(&acts);
    policy_tick(p, 4 * SEC, &acts);
    REQUIRE(acts.n == 0, "2 (300) does not jump ahead of 1 (600), which does not fit");
    policy_free(p);
    return 0;
}

static int test_manual(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 1);
    int a = add_project(p, "a", 1, 1, 0, 0);

    REQUIRE(start_job(p, 1, a, 1, 500 * MiB, 0) == 0, "1");
    pol_actions_clear(&acts);
    REQUIRE(policy_manual_suspend(p, 1, 0, SEC, &acts) == 0 && has(POL_ACT_SUSPEND, 1), "suspend");
    REQUIRE(policy_manual_suspend(p, 1, 0, SEC, &acts) == -EBUSY, "busy while suspending");
    ack_suspends(p, SEC);
    REQUIRE(policy_manual_suspend(p, 1, 0, SEC, &acts) == -EALREADY, "already");
    pol_actions_clear(&acts);
    policy_tick(p, 100 * SEC, &acts);
    REQUIRE(acts.n == 0, "a manual suspension is never undone automatically");
    REQUIRE(policy_manual_resume(p, 1, 100 * SEC, &acts) == 0 && has(POL_ACT_RESUME, 1), "resume");
    REQUIRE(policy_manual_resume(p, 1, 100 * SEC, &acts) == -EBUSY, "busy while resuming");
    /* a failed resume stays suspended and is not retried automatically (manual) */
    policy_job_resumed(p, 1, -ENOMEM, 100 * SEC, &acts);
    REQUIRE(policy_job(p, 1)->state == POL_SUSPENDED, "still suspended");
    REQUIRE(policy_manual_resume(p, 1, 100 * SEC, &acts) == 0, "again");
    policy_job_resumed(p, 1, 0, 101 * SEC, &acts);
    REQUIRE(policy_manual_resume(p, 1, 100 * SEC, &acts) == -EALREADY, "running");
    /* auto-resume: undone when memory fits */
    pol_actions_clear(&acts);
    policy_manual_suspend(p, 1, 1, 102 * SEC, &acts);
    ack_suspends(p, 102 * SEC);
    pol_actions_clear(&acts);
    policy_tick(p, 103 * SEC, &acts);
    REQUIRE(has(POL_ACT_RESUME, 1), "auto-resume asked for");
    /* no room: manual resume says ENOMEM */
    policy_job_resumed(p, 1, 0, 103 * SEC, &acts);
    pol_actions_clear(&acts);
    policy_manual_suspend(p, 1, 0, 104 * SEC, &acts);
    ack_suspends(p, 104 * SEC);
    REQUIRE(start_job(p, 2, a, 1, 700 * MiB, 105 * SEC) == 0, "2 fills it");
    REQUIRE(policy_manual_resume(p, 1, 106 * SEC, &acts) == -ENOMEM, "no room now");
    REQUIRE(checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

/* A victim that fails to suspend: the requester is told; one that dies counts as freed. */
static int test_victim_failure(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 1);
    int lo = add_project(p, "lo", 1, 1, 0, 0);
    int hi = add_project(p, "hi", 9, 1, 0, 0);
    struct pol_actions next = { 0 };

    REQUIRE(start_job(p, 1, lo, 1, 500 * MiB, 0) == 0, "1");
    REQUIRE(start_job(p, 2, lo, 1, 500 * MiB, 0) == 0, "2");
    REQUIRE(admit(p, 3, hi, 9, 0) == 0, "3");
    pol_actions_clear(&acts);
    policy_request(p, 3, 0, 800 * MiB, POL_FREE_UNKNOWN, 0, SEC, &acts);
    REQUIRE(count(POL_ACT_SUSPEND) == 2, "two victims");
    policy_job_suspended(p, 1, 0, SEC, &next);
    REQUIRE(next.n == 0, "one ack is not enough");
    policy_job_suspended(p, 2, -ETIMEDOUT, SEC, &next);
    REQUIRE(next.n == 1 && next.v[0].kind == POL_ACT_DENY && next.v[0].why == POL_WHY_VICTIM_FAILED &&
          next.v[0].for_job == 2, "requester told which victim failed");
    REQUIRE(policy_job(p, 2)->state == POL_RUNNING, "the failed victim runs on");
    pol_actions_clear(&next);
    policy_tick(p, 2 * SEC, &next);
    REQUIRE(next.n == 1 && next.v[0].kind == POL_ACT_RESUME && next.v[0].job == 1,
          "the other victim comes back");
    policy_job_resumed(p, 1, 0, 2 * SEC, &next);

    pol_actions_clear(&acts);
    policy_request(p, 3, 0, 800 * MiB, POL_FREE_UNKNOWN, 0, 3 * SEC, &acts);
    REQUIRE(count(POL_ACT_SUSPEND) == 2, "again");
    pol_actions_clear(&next);
    policy_job_exited(p, 1, 3 * SEC, &next);
    policy_job_exited(p, 2, 3 * SEC, &next);
    REQUIRE(next.n == 1 && next.v[0].kind == POL_ACT_GRANT, "victims that died freed their memory");
    /* a requester that leaves while its victims suspend: they come back */
    REQUIRE(start_job(p, 4, lo, 1, 200 * MiB, 4 * SEC) == 0, "4");
    REQUIRE(admit(p, 5, hi, 9, 0) == 0, "5");
    pol_actions_clear(&acts);
    policy_request(p, 5, 0, 150 * MiB, POL_FREE_UNKNOWN, 0, 5 * SEC, &acts);
    REQUIRE(has(POL_ACT_SUSPEND, 4), "4 for 5");
    pol_actions_clear(&next);
    policy_job_exited(p, 5, 5 * SEC, &next);
    policy_job_suspended(p, 4, 0, 5 * SEC, &next);
    REQUIRE(next.n == 0, "nothing to grant");
    policy_tick(p, 6 * SEC, &next);
    REQUIRE(next.n == 1 && next.v[0].kind == POL_ACT_RESUME && next.v[0].job == 4, "4 resumes");
    REQUIRE(checked(p) == 0, "invariants");
    pol_actions_free(&next);
    policy_free(p);
    return 0;
}

static int test_wait_and_cancel(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 1);
    int a = add_project(p, "a", 1, 1, 0, 0);

    REQUIRE(start_job(p, 1, a, 1, 800 * MiB, 0) == 0, "1");
    REQUIRE(admit(p, 2, a, 1, 0) == 0, "2");
    pol_actions_clear(&acts);
    policy_request(p, 2, 0, 500 * MiB, POL_FREE_UNKNOWN, 1, SEC, &acts);
    REQUIRE(acts.n == 1 && acts.v[0].kind == POL_ACT_WAIT, "waits");
    REQUIRE(policy_request(p, 2, 0, 1, POL_FREE_UNKNOWN, 1, SEC, &acts) == -EBUSY, "one at a time");
    policy_job_exited(p, 1, 2 * SEC, &acts);
    pol_actions_clear(&acts);
    policy_tick(p, 2 * SEC, &acts);
    REQUIRE(acts.n == 1 && acts.v[0].kind == POL_ACT_GRANT && acts.v[0].job == 2, "granted on tick");
    REQUIRE(admit(p, 3, a, 1, 0) == 0, "3");
    pol_actions_clear(&acts);
    policy_request(p, 3, 0, 900 * MiB, POL_FREE_UNKNOWN, 1, 3 * SEC, &acts);
    REQUIRE(policy_request_cancel(p, 3, 4 * SEC, &acts) == 0 && has(POL_ACT_DENY, 3), "cancel");
    REQUIRE(policy_job(p, 3)->req == POL_REQ_NONE, "nothing pending");
    REQUIRE(policy_request_cancel(p, 3, 4 * SEC, &acts) == -EINVAL, "nothing to cancel");
    policy_free(p);
    return 0;
}

/* Unplaced jobs (the replay's): best fit across devices, preemption on any. */
static int test_placement(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 3);
    int lo = add_project(p, "lo", 1, 1, 0, 0);
    int hi = add_project(p, "hi", 9, 1, 0, 0);
    struct pol_job_spec s = { .project = lo, .priority = 1, .device = POL_DEVICE_ANY,
                              .state = POL_RUNNING };

    for (uint64_t id = 1; id <= 3; id++) {
        s.id = id;
        REQUIRE(policy_admit(p, &s, 0) == 0, "admit");
        pol_actions_clear(&acts);
        policy_request(p, id, POL_DEVICE_ANY, (300 + 100 * id) * MiB, POL_FREE_UNKNOWN, 1, 0, &acts);
        REQUIRE(has(POL_ACT_GRANT, id), "placed %" PRIu64, id);
    }
    s.id = 4;
    policy_admit(p, &s, 0);
    pol_actions_clear(&acts);
    /* free now: device 0 100 MiB (400 + 500), device 1 400 (600), device 2 1000 */
    policy_request(p, 4, POL_DEVICE_ANY, 350 * MiB, POL_FREE_UNKNOWN, 1, 0, &acts);
    REQUIRE(has(POL_ACT_GRANT, 4) && acts.v[0].device == 1, "best fit: device 1 (got %d)",
          acts.v[0].device);
    s.id = 6;
    policy_admit(p, &s, 0);
    pol_actions_clear(&acts);
    policy_request(p, 6, POL_DEVICE_ANY, 700 * MiB, POL_FREE_UNKNOWN, 1, 0, &acts);
    REQUIRE(has(POL_ACT_GRANT, 6) && acts.v[0].device == 2, "the only device with room");
    s.id = 5;
    s.project = hi;
    s.priority = 9;
    policy_admit(p, &s, 0);
    pol_actions_clear(&acts);
    policy_request(p, 5, POL_DEVICE_ANY, 900 * MiB, POL_FREE_UNKNOWN, 1, SEC, &acts);
    REQUIRE(count(POL_ACT_SUSPEND) >= 1, "preempts somewhere");
    ack_suspends(p, SEC);
    REQUIRE(has(POL_ACT_GRANT, 5), "granted");
    REQUIRE(checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

/* ---------------------------------------------------------------------------
 * Randomized: random jobs, requests, exits, manual operations, failing
 * suspends and resumes; every action executed (or failed) by a simulated
 * world; invariants checked after each step.
 * ------------------------------------------------------------------------- */


static unsigned long stat_preempt, stat_resume, stat_wait_grant;

struct world {
    struct policy *p;
    struct pol_actions todo;      /* actions not yet carried out */
    uint64_t now;
    uint64_t min_runtime;
};

/* The preemption rule, checked independently of select_victims, at the
 * moment of the decision (the victim is SUSPENDING, the requester PREEMPTING). */
static int suspend_allowed(struct world *w, const struct pol_action *a)
{
    const struct pol_job *v = policy_job(w->p, a->job);
    const struct pol_job *r = policy_job(w->p, a->for_job);
    int reclaim;

    if (!v || !r || v->since_ns > w->now || w->now - v->since_ns < w->min_runtime)
        return 0;
    reclaim = policy_project_used(w->p, r->project, r->device) + r->want <=
              policy_reserved(w->p, r->project, r->device);
    if (a->why == POL_WHY_RECLAIM)
        return policy_job_borrowing(w->p, v) && reclaim;
    return a->why == POL_WHY_PRIORITY && r->priority > v->priority &&
           (policy_job_borrowing(w->p, v) || reclaim);
}

/* Check the SUSPENDs appended to todo since index `from`. */
static int check_new(struct world *w, size_t from)
{
    for (size_t i = from; i < w->todo.n; i++) {
        const struct pol_action *a = &w->todo.v[i];
        stat_preempt += a->kind == POL_ACT_SUSPEND && a->why != POL_WHY_MANUAL;
        stat_resume += a->kind == POL_ACT_RESUME && a->why == POL_WHY_FITS;
        stat_wait_grant += a->kind == POL_ACT_GRANT && a->why == POL_WHY_PREEMPTED;
        if (a->kind == POL_ACT_SUSPEND && a->why != POL_WHY_MANUAL)
            REQUIRE(suspend_allowed(w, a), "suspend of %" PRIu64 " for %" PRIu64 " breaks the rule (%s)",
                  a->job, a->for_job, pol_why_name(a->why));
    }
    REQUIRE(!w->todo.oom, "out of memory");
    REQUIRE(checked(w->p) == 0, "invariants");
    return 0;
}

/* Carry out the pending actions one at a time, in random order, some failing. */
static int world_step_actions(struct world *w)
{
    while (w->todo.n) {
        size_t i = t_rand_below(w->todo.n);
        struct pol_action a = w->todo.v[i];
        size_t from;
        w->todo.v[i] = w->todo.v[--w->todo.n];
        from = w->todo.n;
        if (a.kind == POL_ACT_SUSPEND && policy_job(w->p, a.job))
            REQUIRE(policy_job_suspended(w->p, a.job, t_rand_below(20) ? 0 : -ETIMEDOUT, w->now, &w->todo) == 0,
                  "ack");
        else if (a.kind == POL_ACT_RESUME && policy_job(w->p, a.job))
            REQUIRE(policy_job_resumed(w->p, a.job, t_rand_below(20) ? 0 : -ENOMEM, w->now, &w->todo) == 0,
                  "resumed");
        if (check_new(w, from))
            return 1;
    }
    return 0;
}

static int random_op(struct world *w, uint64_t *next_id, int nproj)
{
    size_t n = policy_job_count(w->p);
    const struct pol_job *j = n ? policy_job_at(w->p, t_rand_below(n)) : NULL;
    uint64_t id = j ? j->id : 0;
    size_t from = w->todo.n;

    switch (t_rand_below(10)) {
    case 0:
    case 1: {
        struct pol_job_spec s = { .id = (*next_id)++, .project = (int)t_rand_below((uint64_t)nproj),
                                  .priority = (int)t_rand_below(5), .device = (int)t_rand_below(2),
                                  .state = POL_RUNNING };
        REQUIRE(policy_admit(w->p, &s, w->now) == 0, "admit");
        break;
    }
    case 2:
    case 3:
    case 4:
        if (j && j->state == POL_RUNNING && j->req == POL_REQ_NONE)
            REQUIRE(policy_request(w->p, id, j->device, (1 + t_rand_below(8)) * 64 * MiB,
                                 t_rand_below(4) ? POL_FREE_UNKNOWN : t_rand_below(1024) * MiB, (int)t_rand_below(2), w->now,
                                 &w->todo) == 0, "request");
        break;
    case 5:
        if (j)
            REQUIRE(policy_job_exited(w->p, id, w->now, &w->todo) == 0, "exit");
        break;
    case 6:
        if (j) {
            int r = policy_manual_suspend(w->p, id, (int)t_rand_below(2), w->now, &w->todo);
            REQUIRE(r == 0 || r == -EALREADY || r == -EBUSY, "manual suspend: %d", r);
        }
        break;
    case 7:
        if (j) {
            int r = policy_manual_resume(w->p, id, w->now, &w->todo);
            REQUIRE(r == 0 || r == -EALREADY || r == -EBUSY || r == -ENOMEM, "manual resume: %d", r);
        }
        break;
    case 8:
        if (j && j->req == POL_REQ_WAITING)
            REQUIRE(policy_request_cancel(w->p, id, w->now, &w->todo) == 0, "cancel");
        break;
    default:
        if (j && j->state == POL_RUNNING && j->req == POL_REQ_NONE && j->mem)
            policy_set_usage(w->p, id, j->mem / 2);
        break;
    }
    return check_new(w, from);
}

static int auto_suspended(const struct pol_job *j)
{
    return j->state == POL_SUSPENDED && (j->suspended_by == POL_BY_POLICY || j->auto_resume);
}

static int random_run(uint64_t seed)
{
    struct pol_config cfg = { .min_runtime_ns = 3 * SEC, .resume_retry_ns = SEC };
    struct world w = { .min_runtime = cfg.min_runtime_ns };
    uint64_t next_id = 1;
    int nproj = 4;

    t_seed(seed * 2654435761u + 1);
    w.p = policy_new(&cfg);
    policy_set_device(w.p, 0, 1024 * MiB);
    policy_set_device(w.p, 1, 768 * MiB);
    add_project(w.p, "p0", 1, 1, 0, 256 * MiB);
    add_project(w.p, "p1", 3, 1, 1, 256 * MiB);
    add_project(w.p, "p2", 5, 1, 0, 0);
    add_project(w.p, "p3", 2, 0, 0, 512 * MiB);
    for (int step = 0; step < 400; step++) {
        w.now += t_rand_below(2 * SEC);
        if (random_op(&w, &next_id, nproj))
            return 1;
        if (t_rand_below(3) == 0) {
            size_t from = w.todo.n;
            REQUIRE(policy_tick(w.p, w.now, &w.todo) == 0, "tick");
            if (check_new(&w, from))
                return 1;
        }
        if (world_step_actions(&w))
            return 1;
    }
    /* Every job that is not waiting for an automatic resume leaves, round
     * after round; every automatically suspended job must then come back. */
    for (int round = 0; round < 64; round++) {
        size_t from = w.todo.n;
        for (size_t i = 0; i < policy_job_count(w.p);) {
            const struct pol_job *j = policy_job_at(w.p, i);
            if (!auto_suspended(j)) {
                REQUIRE(policy_job_exited(w.p, j->id, w.now, &w.todo) == 0, "exit");
                continue;
            }
            i++;
        }
        w.now += 2 * SEC;
        REQUIRE(policy_tick(w.p, w.now, &w.todo) == 0, "tick");
        if (check_new(&w, from) || world_step_actions(&w))
            return 1;
    }
    for (size_t i = 0; i < policy_job_count(w.p); i++) {
        const struct pol_job *j = policy_job_at(w.p, i);
        REQUIRE(!auto_suspended(j), "seed %" PRIu64 ": job %" PRIu64 " (%" PRIu64 " MiB on %d) never resumed",
              seed, j->id, (uint64_t)(j->mem / MiB), j->device);
    }
    pol_actions_free(&w.todo);
    policy_free(w.p);
    return 0;
}

static int test_randomized(void)
{
    for (uint64_t seed = 1; seed <= 1000; seed++)
        if (random_run(seed))
            return 1;
    fprintf(stderr, "randomized: %lu preemptions, %lu automatic resumes, %lu grants after preemption\n",
            stat_preempt, stat_resume, stat_wait_grant);
    /* the runs must exercise what they check */
    REQUIRE(stat_preempt > 1000 && stat_resume > 1000 && stat_wait_grant > 300, "too few events");
    return 0;
}

static int test_names(void)
{
    for (int s = 0; s < 4; s++)
        REQUIRE(pol_state_parse(pol_state_name(s)) == s, "state %d", s);
    for (int b = 0; b < 3; b++)
        REQUIRE(pol_by_parse(pol_by_name(b)) == b, "by %d", b);
    REQUIRE(pol_state_parse("nope") == -1, "unknown");
    REQUIRE(!strcmp(pol_why_name(POL_WHY_RECLAIM), "reclaim"), "why");
    return 0;
}

int main(void)
{

    RUN(test_grant_and_deny);
    RUN(test_victim_order);
    RUN(test_priority_then_work);
    RUN(test_reservation);
    RUN(test_reclaim);
    RUN(test_min_runtime);
    RUN(test_victim_hold_off);
    RUN(test_no_ping_pong);
    RUN(test_resume_order);
    RUN(test_manual);
    RUN(test_victim_failure);
    RUN(test_wait_and_cancel);
    RUN(test_placement);
    RUN(test_randomized);
    RUN(test_names);
    pol_actions_free(&acts);
    return T_EXIT_STATUS();
}
