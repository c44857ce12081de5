/*
 * The policy module (lib/policy): victim order, reservations, borrowing and
 * reclaim, lending and borrowing limits, fair shares, cohorts, backfill
 * without starvation, gangs, compute shares, min runtime, no ping-pong,
 * manual suspensions, failures, and randomized runs (1000 seeds, with and
 * without backfill, with quotas and gangs) that check the invariants after
 * every step:
 *   - used memory never exceeds a device's capacity, and no project holds
 *     memory another keeps unlent (policy_check);
 *   - a SUSPEND for a requester obeys the rule of policy.h, checked here
 *     from its own definition (never a lower-priority borrower's requester,
 *     never a job younger than min_runtime unless it jumped the requester);
 *   - after every tick, no waiting job could start by suspending the jobs
 *     that jumped it (policy_check_backfill), and no request within its
 *     reservation waits while borrowers old enough hold what it needs;
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

static struct policy *new_policy_cfg(const struct pol_config *cfg, uint64_t cap, int ndev)
{
    struct policy *p = policy_new(cfg);

    for (int d = 0; d < ndev; d++)
        policy_set_device(p, d, cap);
    return p;
}

static struct policy *new_policy(uint64_t min_runtime, uint64_t cap, int ndev)
{
    struct pol_config cfg = { .min_runtime_ns = min_runtime, .resume_retry_ns = SEC };

    return new_policy_cfg(&cfg, cap, ndev);
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

/* The device of job id's action of kind k in acts, or -1. */
static int device_of(enum pol_act_kind k, uint64_t id)
{
    for (size_t i = 0; i < acts.n; i++)
        if (acts.v[i].kind == k && acts.v[i].job == id)
            return acts.v[i].device;
    return -1;
}

static void admit_ranged(struct policy *p, uint64_t id, int proj, int prio, int first, int n,
                         uint64_t bytes, uint64_t now)
{
    struct pol_job_spec s = { .id = id, .project = proj, .priority = prio,
                              .device = POL_DEVICE_ANY, .dev_first = first, .dev_count = n,
                              .state = POL_RUNNING };

    policy_admit(p, &s, now);
    pol_actions_clear(&acts);
    policy_request(p, id, POL_DEVICE_ANY, bytes, POL_FREE_UNKNOWN, 1, now, &acts);
}

/*
 * Slurm's partition_prio as the replay models it: a job of an owner's
 * partition goes only on that partition's devices (dev_first, dev_count),
 * and with partition_prio only a job of the high tier preempts, only jobs
 * below it, never by fair share nor within a tier.
 */
static int test_partition(void)
{
    struct pol_config cfg = { .resume_retry_ns = SEC, .backfill = 1, .partition_prio = 1,
                              .tier_priority = 9 };
    struct policy *p = new_policy_cfg(&cfg, 1000 * MiB, 4);
    int a = add_project(p, "a", 1, 1, 0, 0), b = add_project(p, "b", 1, 1, 0, 0);
    struct pol_job_spec bad = { .id = 99, .project = a, .device = POL_DEVICE_ANY, .dev_first = 3,
                                .dev_count = 2, .state = POL_RUNNING };

    REQUIRE(policy_admit(p, &bad, 0) == -EINVAL, "a partition past the last device refused");
    /* borrowers of a: 700 MiB on each device */
    for (uint64_t id = 1; id <= 4; id++) {
        admit_ranged(p, id, a, 1, 0, 0, 700 * MiB, 0);
        REQUIRE(has(POL_ACT_GRANT, id), "borrower %" PRIu64 " placed", id);
    }
    /* b's borrower at the same priority: b holds nothing and asks for less
     * than its fair share, a holds more than its own (a fair share victim
     * without partition_prio), yet it waits */
    admit_ranged(p, 5, b, 1, 0, 0, 400 * MiB, SEC);
    REQUIRE(count(POL_ACT_SUSPEND) == 0 && has(POL_ACT_WAIT, 5), "equal priority waits");
    /* a higher priority below the tier preempts nobody either (one
     * low-tier partition, whatever the jobs' priorities) */
    admit_ranged(p, 9, b, 5, 0, 0, 400 * MiB, SEC);
    REQUIRE(count(POL_ACT_SUSPEND) == 0 && has(POL_ACT_WAIT, 9), "below the tier waits");
    /* b's owner job, partition devices 2-3: a victim there, never on 0-1 */
    admit_ranged(p, 6, b, 9, 2, 2, 700 * MiB, SEC);
    REQUIRE(count(POL_ACT_SUSPEND) == 1, "one victim (%zu)", count(POL_ACT_SUSPEND));
    for (size_t i = 0; i < acts.n; i++)
        if (acts.v[i].kind == POL_ACT_SUSPEND)
            REQUIRE(acts.v[i].device >= 2, "victim on device %d, outside b's partition",
                    acts.v[i].device);
    ack_suspends(p, SEC);
    REQUIRE(device_of(POL_ACT_GRANT, 6) >= 2, "granted in its partition (%d)",
            device_of(POL_ACT_GRANT, 6));
    /* a second one takes the other device of the partition */
    admit_ranged(p, 7, b, 9, 2, 2, 700 * MiB, SEC);
    ack_suspends(p, SEC);
    REQUIRE(device_of(POL_ACT_GRANT, 7) >= 2 && device_of(POL_ACT_GRANT, 7) != policy_job(p, 6)->device,
            "the partition's other device");
    /* a third: its partition holds owner jobs only, of equal priority; it
     * waits though devices 0-1 have borrowers it could displace */
    admit_ranged(p, 8, b, 9, 2, 2, 700 * MiB, SEC);
    REQUIRE(count(POL_ACT_SUSPEND) == 0 && has(POL_ACT_WAIT, 8), "waits for its partition");
    REQUIRE(checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

/* ---------------------------------------------------------------------------
 * Quotas: lending and borrowing limits, fair shares, cohorts
 * ------------------------------------------------------------------------- */

struct quota {
    int lend;                     /* lending limit in MiB, -1: none */
    int borrow;                   /* borrowing limit in MiB, -1: none */
    unsigned weight;
    const char *cohort;
};

static int add_project_q(struct policy *p, const char *name, int prio, int dev, uint64_t reserve,
                         struct quota q)
{
    struct pol_project pr = { .priority = prio, .may_borrow = 1, .weight = q.weight };

    snprintf(pr.name, sizeof(pr.name), "%s", name);
    snprintf(pr.cohort, sizeof(pr.cohort), "%s", q.cohort ? q.cohort : "");
    if (reserve) {
        pr.nreserve = 1;
        pr.reserve[0].device = dev;
        pr.reserve[0].bytes = reserve;
    }
    if (q.lend >= 0) {
        pr.quota_flags |= POL_Q_LENDING_LIMIT;
        pr.lend_bytes = (uint64_t)q.lend * MiB;
    }
    if (q.borrow >= 0) {
        pr.quota_flags |= POL_Q_BORROWING_LIMIT;
        pr.borrow_bytes = (uint64_t)q.borrow * MiB;
    }
    return policy_add_project(p, &pr);
}

#define NOQ ((struct quota){ -1, -1, 1, NULL })

/* What a project does not lend stays free for it, even idle; the rest is lent and reclaimed. */
static int test_lending_limit(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 1);
    int a = add_project_q(p, "a", 5, 0, 600 * MiB, (struct quota){ 200, -1, 1, NULL });
    int b = add_project(p, "b", 5, 1, 0, 0);

    REQUIRE(policy_room(p, b, 0) == 600 * MiB, "b may have the 400 unreserved and 200 lent: %" PRIu64,
            (uint64_t)(policy_room(p, b, 0) / MiB));
    REQUIRE(start_job(p, 1, b, 5, 600 * MiB, 0) == 0, "b takes all it may");
    REQUIRE(admit(p, 2, b, 5, 0) == 0, "2");
    pol_actions_clear(&acts);
    policy_request(p, 2, 0, 100 * MiB, POL_FREE_UNKNOWN, 0, SEC, &acts);
    REQUIRE(count(POL_ACT_DENY) == 1 && count(POL_ACT_SUSPEND) == 0,
            "the 400 MiB a keeps unlent are not b's, though free");
    REQUIRE(start_job(p, 3, a, 5, 400 * MiB, SEC) == 0, "a's unlent part is there, no preemption");
    REQUIRE(admit(p, 4, a, 5, 0) == 0, "4");
    pol_actions_clear(&acts);
    policy_request(p, 4, 0, 200 * MiB, POL_FREE_UNKNOWN, 0, 2 * SEC, &acts);
    REQUIRE(has(POL_ACT_SUSPEND, 1) && acts.v[0].why == POL_WHY_RECLAIM, "a reclaims what it lent");
    REQUIRE(checked(p) == 0, "invariants (lending limits included)");
    ack_suspends(p, 3 * SEC);
    REQUIRE(has(POL_ACT_GRANT, 4), "granted");
    /* a percentage of the reservation works alike */
    struct pol_project pct = { .name = "c", .may_borrow = 1, .nreserve = 1,
                               .reserve = { { 0, 400 * MiB } }, .quota_flags = POL_Q_LENDING_LIMIT,
                               .lend_pct = 25 };
    REQUIRE(pol_project_lendable(&pct, 0) == 100 * MiB && pol_project_lendable(&pct, 1) == 0,
            "25%% of 400 MiB");
    policy_free(p);
    return 0;
}

static int test_borrowing_limit(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 2);
    int c = add_project_q(p, "c", 5, 0, 200 * MiB, (struct quota){ -1, 300, 1, NULL });

    REQUIRE(start_job(p, 1, c, 5, 400 * MiB, 0) == 0, "200 reserved + 200 borrowed");
    pol_actions_clear(&acts);
    policy_request(p, 1, 0, 150 * MiB, POL_FREE_UNKNOWN, 1, SEC, &acts);
    REQUIRE(acts.n == 1 && acts.v[0].kind == POL_ACT_DENY && acts.v[0].why == POL_WHY_NO_BORROW,
            "beyond reservation + borrowing limit: denied, not waiting");
    pol_actions_clear(&acts);
    policy_request(p, 1, 0, 100 * MiB, POL_FREE_UNKNOWN, 0, SEC, &acts);
    REQUIRE(has(POL_ACT_GRANT, 1), "up to the limit: granted");
    /* unplaced: the limit applies per device, placement goes where it holds */
    struct pol_job_spec s = { .id = 2, .project = c, .priority = 5, .device = POL_DEVICE_ANY,
                              .state = POL_RUNNING };
    REQUIRE(policy_admit(p, &s, SEC) == 0, "2");
    pol_actions_clear(&acts);
    policy_request(p, 2, POL_DEVICE_ANY, 250 * MiB, POL_FREE_UNKNOWN, 1, SEC, &acts);
    REQUIRE(has(POL_ACT_GRANT, 2) && acts.v[0].device == 1, "placed on device 1 (got %d)",
            acts.n ? acts.v[0].device : -2);
    REQUIRE(checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

/* Equal-priority borrowers share what is borrowable by weight (KAI's over-quota weight). */
static int test_fair_share(void)
{
    struct policy *p = new_policy(0, 900 * MiB, 1);
    int a = add_project_q(p, "a", 5, 0, 0, (struct quota){ -1, -1, 2, NULL });
    int b = add_project_q(p, "b", 5, 0, 0, (struct quota){ -1, -1, 1, NULL });

    REQUIRE(start_job(p, 1, a, 5, 450 * MiB, 0) == 0, "1");
    REQUIRE(start_job(p, 2, a, 5, 450 * MiB, SEC) == 0, "2");
    REQUIRE(admit(p, 3, b, 5, 0) == 0, "3");
    pol_actions_clear(&acts);
    policy_request(p, 3, 0, 400 * MiB, POL_FREE_UNKNOWN, 0, 10 * SEC, &acts);
    REQUIRE(count(POL_ACT_SUSPEND) == 0, "b's share is 1/3 of 900: 400 is beyond it");
    pol_actions_clear(&acts);
    policy_request(p, 3, 0, 300 * MiB, POL_FREE_UNKNOWN, 0, 10 * SEC, &acts);
    REQUIRE(count(POL_ACT_SUSPEND) == 1 && has(POL_ACT_SUSPEND, 2) &&
            acts.v[0].why == POL_WHY_FAIR_SHARE, "a holds 900, its share is 600: its younger job goes");
    ack_suspends(p, 11 * SEC);
    REQUIRE(has(POL_ACT_GRANT, 3), "granted");
    /* a, now at 450 of its 600, cannot take 300 more back from b (it would hold 750) */
    pol_actions_clear(&acts);
    policy_request(p, 1, 0, 300 * MiB, POL_FREE_UNKNOWN, 0, 20 * SEC, &acts);
    REQUIRE(count(POL_ACT_SUSPEND) == 0 && count(POL_ACT_DENY) == 1, "no ping-pong");
    pol_actions_clear(&acts);
    policy_request(p, 1, 0, 150 * MiB, POL_FREE_UNKNOWN, 0, 20 * SEC, &acts);
    REQUIRE(has(POL_ACT_GRANT, 1), "what is free is a's");
    REQUIRE(checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

/* Cohort members lend to each other first: outsiders see a member borrowing
 * within the cohort's reservations as protected, and a reclaiming member
 * displaces outsiders before members. */
static int test_cohort(void)
{
    for (int cohort = 1; cohort >= 0; cohort--) {
        struct policy *p = new_policy(0, 1000 * MiB, 1);
        const char *c = cohort ? "ml" : NULL;
        int res = add_project_q(p, "research", 50, 0, 300 * MiB, (struct quota){ -1, -1, 1, c });
        int vis = add_project_q(p, "vision", 50, 0, 300 * MiB, (struct quota){ -1, -1, 1, c });
        int bat = add_project(p, "batch", 60, 1, 0, 0);

        REQUIRE(start_job(p, 1, vis, 50, 500 * MiB, 0) == 0, "vision borrows 200 beyond its own");
        REQUIRE(start_job(p, 2, bat, 60, 400 * MiB, 0) == 0, "batch borrows 400");
        REQUIRE(admit(p, 3, bat, 60, 0) == 0, "3");
        pol_actions_clear(&acts);
        policy_request(p, 3, 0, 300 * MiB, POL_FREE_UNKNOWN, 0, 10 * SEC, &acts);
        if (cohort)
            REQUIRE(count(POL_ACT_SUSPEND) == 0 && count(POL_ACT_DENY) == 1,
                    "vision borrows research's idle reservation: safe from the outsider");
        else
            REQUIRE(has(POL_ACT_SUSPEND, 1) && acts.v[0].why == POL_WHY_PRIORITY,
                    "without the cohort vision is a borrower of lower priority");
        if (!cohort) {
            policy_free(p);
            continue;
        }
        /* research reclaims its reservation: the outsider goes first */
        REQUIRE(admit(p, 4, res, 50, 0) == 0, "4");
        pol_actions_clear(&acts);
        policy_request(p, 4, 0, 300 * MiB, POL_FREE_UNKNOWN, 0, 10 * SEC, &acts);
        REQUIRE(count(POL_ACT_SUSPEND) == 1 && has(POL_ACT_SUSPEND, 2) &&
                acts.v[0].why == POL_WHY_RECLAIM, "batch (outside the cohort) before vision");
        ack_suspends(p, 11 * SEC);
        /* and vision, a member borrowing from research, is next */
        REQUIRE(admit(p, 5, res, 50, 0) == 0, "5");
        policy_job_exited(p, 4, 12 * SEC, &acts);
        REQUIRE(start_job(p, 6, bat, 60, 400 * MiB, 12 * SEC) == 0, "batch again");
        pol_actions_clear(&acts);
        policy_request(p, 5, 0, 300 * MiB, POL_FREE_UNKNOWN, 0, 20 * SEC, &acts);
        REQUIRE(has(POL_ACT_SUSPEND, 6) && !has(POL_ACT_SUSPEND, 1), "outsider first again");
        REQUIRE(checked(p) == 0, "invariants");
        policy_free(p);
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Backfill without starvation
 * ------------------------------------------------------------------------- */

static void dump(const struct policy *p, uint64_t now)
{
    for (size_t i = 0; i < policy_job_count(p); i++) {
        const struct pol_job *j = policy_job_at(p, i);
        fprintf(stderr, "  job %" PRIu64 " %s prio %d dev %d mem %" PRIu64 " req %d want %" PRIu64
                " queued %.1f since %.1f bf %.1f/%d/%.1f/%" PRIu64 " gang %" PRIu64 " by %s retry %.1f"
                " for %" PRIu64 " proj %d\n",
                j->id, pol_state_name(j->state), j->priority, j->device, (uint64_t)(j->mem >> 20),
                j->req, (uint64_t)(j->want >> 20), j->queued_ns / 1e9, j->since_ns / 1e9,
                j->bf_ns / 1e9, j->bf_priority, j->bf_queued / 1e9, j->bf_tick, j->gang,
                pol_by_name(j->suspended_by), j->retry_ns / 1e9, j->for_job, j->project);
    }
    fprintf(stderr, "  now %.1f\n", now / 1e9);
}

static int checked_backfill(struct policy *p, uint64_t now)
{
    char msg[256];
    int r = policy_check_backfill(p, now, msg, sizeof(msg));
    if (r) {
        fprintf(stderr, "policy_check_backfill: %s\n", msg);
        dump(p, now);
    }
    return r;
}

/*
 * A big job waits; a small one that fits runs meanwhile. When the big one's
 * memory frees it suspends the small one at once, young as it is: it is
 * delayed by a suspension, not by the small job's run. Without backfill the
 * small one would hold the big one up until it ends; with strict order it
 * would not have started.
 */
static int test_backfill(void)
{
    for (int mode = 0; mode < 3; mode++) {       /* backfill, legacy, strict */
        struct pol_config cfg = { .min_runtime_ns = 30 * SEC, .resume_retry_ns = SEC,
                                  .backfill = mode == 0, .strict = mode == 2 };
        struct policy *p = new_policy_cfg(&cfg, 1000 * MiB, 1);
        int a = add_project(p, "a", 5, 1, 0, 0);

        REQUIRE(start_job(p, 1, a, 5, 600 * MiB, 0) == 0, "1 holds 600");
        REQUIRE(admit(p, 2, a, 5, 0) == 0, "2");
        pol_actions_clear(&acts);
        policy_request(p, 2, 0, 700 * MiB, POL_FREE_UNKNOWN, 1, 1 * SEC, &acts);
        REQUIRE(acts.n == 1 && acts.v[0].kind == POL_ACT_WAIT, "the big one waits");
        REQUIRE(admit(p, 3, a, 5, 0) == 0, "3");
        pol_actions_clear(&acts);
        policy_request(p, 3, 0, 400 * MiB, POL_FREE_UNKNOWN, 1, 3 * SEC, &acts);
        if (mode == 2) {
            REQUIRE(acts.n == 1 && acts.v[0].kind == POL_ACT_WAIT, "strict: it waits behind 2");
            policy_free(p);
            continue;
        }
        REQUIRE(has(POL_ACT_GRANT, 3), "the small one fits and runs");
        REQUIRE(policy_job_jumped(p, policy_job(p, 2), policy_job(p, 3)) == (mode == 0),
                "it jumped the big one (backfill only)");
        pol_actions_clear(&acts);
        policy_tick(p, 4 * SEC, &acts);
        REQUIRE(acts.n == 0, "suspending it would not make room yet: nothing happens");
        REQUIRE(checked_backfill(p, 4 * SEC) == 0, "no waiting job is starved");
        policy_job_exited(p, 1, 5 * SEC, &acts);
        pol_actions_clear(&acts);
        policy_tick(p, 5 * SEC, &acts);
        if (mode == 1) {
            REQUIRE(acts.n == 0, "legacy: the 2 s old small job holds the big one up");
            policy_free(p);
            continue;
        }
        REQUIRE(has(POL_ACT_SUSPEND, 3) && acts.v[0].for_job == 2 && acts.v[0].why == POL_WHY_BACKFILL,
                "the small one (2 s old, min runtime 30 s) makes way at once");
        ack_suspends(p, 6 * SEC);
        REQUIRE(has(POL_ACT_GRANT, 2), "the big one runs");
        REQUIRE(checked_backfill(p, 6 * SEC) == 0 && checked(p) == 0, "invariants");
        policy_job_exited(p, 2, 60 * SEC, &acts);
        pol_actions_clear(&acts);
        policy_tick(p, 60 * SEC, &acts);
        REQUIRE(has(POL_ACT_RESUME, 3), "the small one comes back");
        policy_free(p);
    }
    return 0;
}

/* A victim waiting to come back does not see the job it made room for as a
 * jumper, though it has the higher priority: no ping-pong through backfill. */
static int test_backfill_no_ping_pong(void)
{
    struct pol_config cfg = { .min_runtime_ns = 30 * SEC, .resume_retry_ns = SEC, .backfill = 1 };
    struct policy *p = new_policy_cfg(&cfg, 1000 * MiB, 1);
    int bat = add_project(p, "batch", 50, 1, 0, 0);
    int team = add_project(p, "team", 10, 1, 0, 700 * MiB);

    REQUIRE(start_job(p, 1, bat, 50, 600 * MiB, 0) == 0, "the borrower");
    REQUIRE(admit(p, 2, team, 10, 0) == 0, "2");
    pol_actions_clear(&acts);
    policy_request(p, 2, 0, 500 * MiB, POL_FREE_UNKNOWN, 0, 40 * SEC, &acts);
    REQUIRE(has(POL_ACT_SUSPEND, 1) && acts.v[0].why == POL_WHY_RECLAIM, "team reclaims");
    ack_suspends(p, 41 * SEC);
    REQUIRE(has(POL_ACT_GRANT, 2), "granted");
    REQUIRE(!policy_job_jumped(p, policy_job(p, 1), policy_job(p, 2)), "team did not jump batch");
    for (int t = 42; t < 120; t += 5) {
        pol_actions_clear(&acts);
        policy_tick(p, (uint64_t)t * SEC, &acts);
        REQUIRE(count(POL_ACT_SUSPEND) == 0, "t=%d: batch suspends team back", t);
    }
    policy_free(p);
    return 0;
}

/* A job of higher priority is never a jumper; nor one that came first. */
static int test_backfill_order(void)
{
    struct pol_config cfg = { .min_runtime_ns = 30 * SEC, .resume_retry_ns = SEC, .backfill = 1 };
    struct policy *p = new_policy_cfg(&cfg, 1000 * MiB, 2);
    int a = add_project(p, "a", 5, 1, 0, 0);

    REQUIRE(start_job(p, 1, a, 5, 800 * MiB, 0) == 0, "1");
    REQUIRE(admit(p, 2, a, 3, 0) == 0, "2");
    pol_actions_clear(&acts);
    policy_request(p, 2, 0, 500 * MiB, POL_FREE_UNKNOWN, 1, SEC, &acts);
    REQUIRE(acts.n == 1 && acts.v[0].kind == POL_ACT_WAIT, "2 (priority 3) waits");
    REQUIRE(start_job(p, 3, a, 9, 100 * MiB, 2 * SEC) == 0, "3 (priority 9) starts");
    REQUIRE(!policy_job_jumped(p, policy_job(p, 2), policy_job(p, 3)), "it was ahead of 2 anyway");
    REQUIRE(admit(p, 4, a, 5, 0) == 0, "4");
    pol_actions_clear(&acts);
    policy_request(p, 4, 1, 100 * MiB, POL_FREE_UNKNOWN, 1, 3 * SEC, &acts);
    REQUIRE(has(POL_ACT_GRANT, 4) && !policy_job_jumped(p, policy_job(p, 2), policy_job(p, 4)),
            "a job on another device than the waiting one's jumps nobody");
    policy_free(p);
    return 0;
}

/* ---------------------------------------------------------------------------
 * Gangs
 * ------------------------------------------------------------------------- */

static int admit_task(struct policy *p, uint64_t id, int proj, int prio, int dev, uint64_t gang)
{
    struct pol_job_spec s = { .id = id, .project = proj, .priority = prio, .device = dev,
                              .state = POL_RUNNING, .gang = gang };
    return policy_admit(p, &s, 0);
}

static int test_gang_preempt(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 2);
    int lo = add_project(p, "lo", 1, 1, 0, 0);
    int hi = add_project(p, "hi", 9, 1, 0, 0);

    for (int t = 0; t < 2; t++) {
        REQUIRE(admit_task(p, 11 + t, lo, 1, t, 7) == 0, "task");
        pol_actions_clear(&acts);
        policy_request(p, 11 + t, t, 600 * MiB, POL_FREE_UNKNOWN, 0, 0, &acts);
        REQUIRE(has(POL_ACT_GRANT, 11 + t), "task %d placed", t);
    }
    REQUIRE(admit(p, 20, hi, 9, 0) == 0, "20");
    pol_actions_clear(&acts);
    policy_request(p, 20, 0, 700 * MiB, POL_FREE_UNKNOWN, 0, SEC, &acts);
    REQUIRE(count(POL_ACT_SUSPEND) == 2 && has(POL_ACT_SUSPEND, 11) && has(POL_ACT_SUSPEND, 12),
            "the victim's whole gang is suspended (%zu suspends)", count(POL_ACT_SUSPEND));
    for (size_t i = 0; i < acts.n; i++)
        REQUIRE(acts.v[i].for_job == 20 &&
                acts.v[i].why == (acts.v[i].job == 11 ? POL_WHY_PRIORITY : POL_WHY_GANG), "why");
    struct pol_actions next = { 0 };
    policy_job_suspended(p, 11, 0, 2 * SEC, &next);
    REQUIRE(next.n == 0, "the grant waits for the whole gang");
    policy_job_suspended(p, 12, 0, 2 * SEC, &next);
    REQUIRE(next.n == 1 && next.v[0].kind == POL_ACT_GRANT && next.v[0].job == 20, "then granted");
    pol_actions_clear(&next);
    policy_tick(p, 3 * SEC, &next);
    REQUIRE(next.n == 0, "task 12 would fit on device 1, but the gang resumes together");
    policy_job_exited(p, 20, 4 * SEC, &next);
    policy_tick(p, 4 * SEC, &next);
    REQUIRE(next.n == 2 && next.v[0].kind == POL_ACT_RESUME && next.v[1].kind == POL_ACT_RESUME,
            "both resume");
    policy_job_resumed(p, 11, 0, 5 * SEC, &next);
    policy_job_resumed(p, 12, 0, 5 * SEC, &next);
    REQUIRE(policy_job(p, 11)->preemptions == 1 && policy_job(p, 12)->preemptions == 1, "counted");

    /* by hand: one task's suspend suspends the gang, one's resume resumes it */
    pol_actions_clear(&next);
    REQUIRE(policy_manual_suspend(p, 12, 0, 6 * SEC, &next) == 0 && next.n == 2, "gang suspend");
    for (size_t i = 0; i < next.n; i++)
        policy_job_suspended(p, next.v[i].job, 0, 6 * SEC, &acts);
    REQUIRE(policy_job(p, 11)->suspended_by == POL_BY_MANUAL, "11 suspended by hand too");
    REQUIRE(start_job(p, 30, hi, 9, 500 * MiB, 7 * SEC) == 0 || 1, "device 0 busy");
    pol_actions_clear(&next);
    REQUIRE(policy_manual_resume(p, 12, 8 * SEC, &next) == -ENOMEM && next.n == 0,
            "task 11 does not fit: neither resumes");
    policy_job_exited(p, 30, 9 * SEC, &next);
    pol_actions_clear(&next);
    REQUIRE(policy_manual_resume(p, 12, 9 * SEC, &next) == 0 && next.n == 2, "both resume");
    REQUIRE(checked(p) == 0, "invariants");
    pol_actions_free(&next);
    policy_free(p);
    return 0;
}

/* Unplaced gangs (the replay's): placed when all their tasks ask, on distinct devices, or not at all. */
static int test_gang_place(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 3);
    int a = add_project(p, "a", 1, 1, 0, 0);

    REQUIRE(start_job(p, 1, a, 1, 900 * MiB, 0) == 0, "device 0 taken");
    for (int t = 0; t < 2; t++)
        REQUIRE(admit_task(p, 31 + t, a, 1, POL_DEVICE_ANY, 5) == 0, "task");
    pol_actions_clear(&acts);
    policy_request(p, 31, POL_DEVICE_ANY, 500 * MiB, POL_FREE_UNKNOWN, 1, 0, &acts);
    REQUIRE(acts.n == 1 && acts.v[0].kind == POL_ACT_WAIT, "the first task waits for the second");
    pol_actions_clear(&acts);
    policy_request(p, 32, POL_DEVICE_ANY, 500 * MiB, POL_FREE_UNKNOWN, 1, 0, &acts);
    REQUIRE(count(POL_ACT_GRANT) == 2, "both placed at once");
    REQUIRE(policy_job(p, 31)->device != policy_job(p, 32)->device &&
            policy_job(p, 31)->device > 0 && policy_job(p, 32)->device > 0, "on distinct free devices");
    for (int t = 0; t < 2; t++)
        REQUIRE(admit_task(p, 41 + t, a, 1, POL_DEVICE_ANY, 6) == 0, "task");
    pol_actions_clear(&acts);
    policy_request(p, 41, POL_DEVICE_ANY, 600 * MiB, POL_FREE_UNKNOWN, 1, 0, &acts);
    policy_request(p, 42, POL_DEVICE_ANY, 600 * MiB, POL_FREE_UNKNOWN, 1, 0, &acts);
    REQUIRE(count(POL_ACT_GRANT) == 0 && count(POL_ACT_WAIT) == 2,
            "no two devices with 600 MiB: none is placed");
    policy_job_exited(p, 1, SEC, &acts);
    pol_actions_clear(&acts);
    policy_tick(p, SEC, &acts);
    REQUIRE(count(POL_ACT_GRANT) == 0, "one device is not enough");
    policy_job_exited(p, 31, SEC, &acts);
    pol_actions_clear(&acts);
    policy_tick(p, SEC, &acts);
    REQUIRE(count(POL_ACT_GRANT) == 2, "two are");
    REQUIRE(checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

/*
 * An unplaced gang that must preempt picks devices where room can be made:
 * device 0 holds a job of its own priority (no victim), devices 1 and 2
 * lower-priority ones, every device full. By room alone (0 everywhere) the
 * lowest indexes, 0 and 1, were picked, and the gang waited for good.
 */
static int test_gang_place_victims(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 3);
    int lo = add_project(p, "lo", 1, 1, 0, 0), hi = add_project(p, "hi", 9, 1, 0, 0);

    for (uint64_t id = 1; id <= 3; id++) {
        struct pol_job_spec s = { .id = id, .project = id == 1 ? hi : lo, .priority = id == 1 ? 9 : 1,
                                  .device = (int)id - 1, .state = POL_RUNNING };
        REQUIRE(policy_admit(p, &s, 0) == 0, "admit %" PRIu64, id);
        pol_actions_clear(&acts);
        policy_request(p, id, (int)id - 1, 1000 * MiB, POL_FREE_UNKNOWN, 0, 0, &acts);
        REQUIRE(has(POL_ACT_GRANT, id), "job %" PRIu64 " fills device %d", id, (int)id - 1);
    }
    for (int t = 0; t < 2; t++)
        REQUIRE(admit_task(p, 51 + t, hi, 9, POL_DEVICE_ANY, 7) == 0, "task");
    pol_actions_clear(&acts);
    policy_request(p, 51, POL_DEVICE_ANY, 800 * MiB, POL_FREE_UNKNOWN, 1, SEC, &acts);
    policy_request(p, 52, POL_DEVICE_ANY, 800 * MiB, POL_FREE_UNKNOWN, 1, SEC, &acts);
    REQUIRE(count(POL_ACT_SUSPEND) == 2 && has(POL_ACT_SUSPEND, 2) && has(POL_ACT_SUSPEND, 3),
            "the two lower-priority jobs are the victims (%zu suspends)", count(POL_ACT_SUSPEND));
    ack_suspends(p, SEC);
    REQUIRE(count(POL_ACT_GRANT) == 2 && policy_job(p, 51)->device > 0 && policy_job(p, 52)->device > 0,
            "the gang runs on devices 1 and 2");
    REQUIRE(checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

/* The same with compute as the full dimension (packing shares): every
 * device has memory to spare, device 0's compute is all its peer's. */
static int test_gang_place_victims_compute(void)
{
    struct pol_config cfg = { .resume_retry_ns = SEC, .pack_compute = 1 };
    struct policy *p = new_policy_cfg(&cfg, 1000 * MiB, 3);
    int lo = add_project(p, "lo", 1, 1, 0, 0), hi = add_project(p, "hi", 9, 1, 0, 0);

    for (uint64_t id = 1; id <= 3; id++) {
        struct pol_job_spec s = { .id = id, .project = id == 1 ? hi : lo, .priority = id == 1 ? 9 : 1,
                                  .device = (int)id - 1, .state = POL_RUNNING, .compute = 1000 };
        REQUIRE(policy_admit(p, &s, 0) == 0, "admit %" PRIu64, id);
        pol_actions_clear(&acts);
        policy_request(p, id, (int)id - 1, 100 * MiB, POL_FREE_UNKNOWN, 0, 0, &acts);
        REQUIRE(has(POL_ACT_GRANT, id), "job %" PRIu64 " takes device %d's compute", id, (int)id - 1);
    }
    for (int t = 0; t < 2; t++) {
        struct pol_job_spec s = { .id = 61 + t, .project = hi, .priority = 9, .device = POL_DEVICE_ANY,
                                  .state = POL_RUNNING, .gang = 8, .compute = 500 };
        REQUIRE(policy_admit(p, &s, 0) == 0, "task");
    }
    pol_actions_clear(&acts);
    policy_request(p, 61, POL_DEVICE_ANY, 100 * MiB, POL_FREE_UNKNOWN, 1, SEC, &acts);
    policy_request(p, 62, POL_DEVICE_ANY, 100 * MiB, POL_FREE_UNKNOWN, 1, SEC, &acts);
    REQUIRE(count(POL_ACT_SUSPEND) == 2 && has(POL_ACT_SUSPEND, 2) && has(POL_ACT_SUSPEND, 3),
            "the two lower-priority jobs are the victims (%zu suspends)", count(POL_ACT_SUSPEND));
    REQUIRE(checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

/* ---------------------------------------------------------------------------
 * Compute shares
 * ------------------------------------------------------------------------- */

static int admit_compute(struct policy *p, uint64_t id, int proj, int dev, unsigned compute)
{
    struct pol_job_spec s = { .id = id, .project = proj, .priority = 1, .device = dev,
                              .state = POL_RUNNING, .compute = compute };
    return policy_admit(p, &s, 0);
}

static int test_compute_cap(void)
{
    struct policy *p = new_policy(0, 1000 * MiB, 2);
    int a = add_project(p, "a", 1, 1, 0, 0);
    uint64_t t = 10 * SEC;

    REQUIRE(admit_compute(p, 1, a, 0, 300) == 0 && admit_compute(p, 2, a, 0, 700) == 0 &&
            admit_compute(p, 3, a, 0, 0) == 0 && admit_compute(p, 4, a, 1, 600) == 0 &&
            admit_compute(p, 5, a, 1, 600) == 0, "admit");
    policy_compute_report(p, 1, 1, 0, t);
    REQUIRE(policy_compute_cap(p, 1, t) == 1000, "alone: no cap");
    policy_compute_report(p, 2, 1, 0, t);
    REQUIRE(policy_compute_cap(p, 1, t) == 300 && policy_compute_cap(p, 2, t) == 700, "30/70");
    REQUIRE(policy_compute_cap(p, 1, t + 2 * SEC) == 1000, "2 stopped reporting: 1 is alone again");
    policy_compute_report(p, 3, 1, 0, t);
    REQUIRE(policy_compute_cap(p, 1, t) == 300 && policy_compute_cap(p, 3, t) == 1000,
            "next to an unlimited job: the share; the unlimited one: no cap");
    policy_compute_report(p, 4, 1, 0, t);
    policy_compute_report(p, 5, 1, 0, t);
    REQUIRE(policy_compute_cap(p, 4, t) == 600, "60%% and 60%%: never below its own share");
    policy_compute_report(p, 5, 0, 0, t + SEC);
    REQUIRE(policy_compute_cap(p, 4, t + SEC) == 600 && policy_compute_cap(p, 4, t + 2 * SEC) == 1000,
            "an idle report does not refresh");
    REQUIRE(policy_compute_cap(p, 99, t) == 0 && policy_compute_report(p, 99, 1, 0, t) == -ENOENT,
            "unknown job");
    policy_free(p);

    /* 30% and 50%: scaled to fill the device */
    p = new_policy(0, 1000 * MiB, 1);
    a = add_project(p, "a", 1, 1, 0, 0);
    admit_compute(p, 1, a, 0, 300);
    admit_compute(p, 2, a, 0, 500);
    policy_compute_report(p, 1, 1, 0, t);
    policy_compute_report(p, 2, 1, 0, t);
    REQUIRE(policy_compute_cap(p, 1, t) == 375 && policy_compute_cap(p, 2, t) == 625, "37.5/62.5");
    policy_free(p);
    return 0;
}

/* With pack_compute the shares on a device never exceed the device. */
static int test_pack_compute(void)
{
    struct pol_config cfg = { .resume_retry_ns = SEC, .pack_compute = 1 };
    struct policy *p = new_policy_cfg(&cfg, 1000 * MiB, 2);
    int a = add_project(p, "a", 1, 1, 0, 0);
    int dev[3];

    admit_compute(p, 1, a, POL_DEVICE_ANY, 700);
    admit_compute(p, 2, a, POL_DEVICE_ANY, 400);
    admit_compute(p, 3, a, POL_DEVICE_ANY, 300);
    for (uint64_t id = 1; id <= 3; id++) {
        pol_actions_clear(&acts);
        policy_request(p, id, POL_DEVICE_ANY, 100 * MiB, POL_FREE_UNKNOWN, 1, 0, &acts);
        REQUIRE(has(POL_ACT_GRANT, id), "placed");
        dev[id - 1] = acts.v[0].device;
    }
    REQUIRE(dev[0] != dev[1] && dev[2] == dev[0], "70%% + 30%% together, 40%% apart (%d %d %d)",
            dev[0], dev[1], dev[2]);
    admit_compute(p, 4, a, POL_DEVICE_ANY, 700);
    pol_actions_clear(&acts);
    policy_request(p, 4, POL_DEVICE_ANY, 100 * MiB, POL_FREE_UNKNOWN, 1, 0, &acts);
    REQUIRE(acts.n == 1 && acts.v[0].kind == POL_ACT_WAIT, "no device has 70%% left");
    REQUIRE(policy_device_compute(p, dev[0]) == 1000 && checked(p) == 0, "invariants");
    policy_free(p);
    return 0;
}

static void dump(const struct policy *p, uint64_t now);

/* ---------------------------------------------------------------------------
 * Randomized: random jobs and gangs, requests, exits, manual operations,
 * failing suspends and resumes, compute reports; every action carried out
 * (or failed) by a simulated world; invariants checked after each step.
 * ------------------------------------------------------------------------- */

static unsigned long stat_preempt, stat_resume, stat_wait_grant;
static unsigned long stat_why[POL_WHY_COUNT];

struct world {
    struct policy *p;
    struct pol_actions todo;      /* actions not yet carried out */
    uint64_t now;
    uint64_t min_runtime;
    int backfill;
};

static int same_group(struct world *w, int a, int b)
{
    const struct pol_project *pa = policy_project(w->p, a), *pb = policy_project(w->p, b);
    return a == b || (pa->cohort[0] && !strcmp(pa->cohort, pb->cohort));
}

static uint64_t cohort_sum(struct world *w, int proj, int dev, int reserved)
{
    const struct pol_project *pr = policy_project(w->p, proj);
    uint64_t s = 0;

    for (int q = 0; q < policy_project_count(w->p); q++)
        if (!strcmp(policy_project(w->p, q)->cohort, pr->cohort))
            s += reserved ? policy_reserved(w->p, q, dev) : policy_project_used(w->p, q, dev);
    return s;
}

/* Is v's project borrowing, as r's project sees it (cohorts: policy.h)? */
static int borrowing_for(struct world *w, const struct pol_job *r, const struct pol_job *v)
{
    int d = v->device;

    if (policy_project_used(w->p, v->project, d) <= policy_reserved(w->p, v->project, d))
        return 0;
    if (same_group(w, r->project, v->project) || !policy_project(w->p, v->project)->cohort[0])
        return 1;
    return cohort_sum(w, v->project, d, 0) > cohort_sum(w, v->project, d, 1);
}

static int reclaims_for(struct world *w, const struct pol_job *r, const struct pol_job *v)
{
    int d = r->device;

    if (policy_project_used(w->p, r->project, d) + r->want <= policy_reserved(w->p, r->project, d))
        return 1;
    return !same_group(w, r->project, v->project) && policy_project(w->p, r->project)->cohort[0] &&
           cohort_sum(w, r->project, d, 0) + r->want <= cohort_sum(w, r->project, d, 1);
}

/* v jumped r: it started after r began to wait, from behind r in the queue. */
static int jumped(struct world *w, const struct pol_job *r, const struct pol_job *v)
{
    if (!w->backfill || !v->bf_ns || r->queued_ns > v->bf_queued)
        return 0;
    if (r->priority != v->bf_priority)
        return r->priority > v->bf_priority;
    return r->queued_ns < v->bf_queued || (r->queued_ns == v->bf_queued && r->id < v->id);
}

/* The preemption rule, checked from its definition in policy.h at the moment
 * of the decision (the victim is SUSPENDING, the requester PREEMPTING). */
static int suspend_allowed(struct world *w, const struct pol_action *a)
{
    const struct pol_job *v = policy_job(w->p, a->job);
    const struct pol_job *r = policy_job(w->p, a->for_job);

    if (!v || !r || v->state != POL_SUSPENDING || r->req != POL_REQ_PREEMPTING)
        return 0;
    if (a->why == POL_WHY_GANG) {
        /* a task of a victim's gang, waited for by the requester (or by the
         * requester's own task on the same device, when a gang makes room) */
        for (size_t i = 0; v->gang && i < policy_job_count(w->p); i++) {
            const struct pol_job *u = policy_job_at(w->p, i);
            const struct pol_job *ur = u->state == POL_SUSPENDING ? policy_job(w->p, u->for_job) : NULL;
            if (u != v && u->gang == v->gang && ur && u->why != POL_WHY_GANG &&
                (ur == r || (r->gang && ur->gang == r->gang)))
                return 1;
        }
        return 0;
    }
    if (a->why == POL_WHY_BACKFILL)
        return jumped(w, r, v);
    if (v->since_ns > w->now || w->now - v->since_ns < w->min_runtime)
        return 0;
    switch (a->why) {
    case POL_WHY_RECLAIM:
        return borrowing_for(w, r, v) && reclaims_for(w, r, v);
    case POL_WHY_PRIORITY:
        return r->priority > v->priority && (borrowing_for(w, r, v) || reclaims_for(w, r, v));
    case POL_WHY_FAIR_SHARE:
        return r->priority == v->priority && r->project != v->project && borrowing_for(w, r, v);
    default:
        return 0;
    }
}

/* Check the actions appended to todo since index `from`. */
static int check_new(struct world *w, size_t from)
{
    for (size_t i = from; i < w->todo.n; i++) {
        const struct pol_action *a = &w->todo.v[i];
        stat_preempt += a->kind == POL_ACT_SUSPEND && a->why != POL_WHY_MANUAL;
        stat_resume += a->kind == POL_ACT_RESUME && a->why == POL_WHY_FITS;
        stat_wait_grant += a->kind == POL_ACT_GRANT && a->why == POL_WHY_PREEMPTED;
        if (a->kind == POL_ACT_SUSPEND)
            stat_why[a->why]++;
        if (a->kind == POL_ACT_SUSPEND && a->for_job)
            if (!suspend_allowed(w, a)) {
                dump(w->p, w->now);
                REQUIRE(0, "suspend of %" PRIu64 " for %" PRIu64 " breaks the rule (%s)",
                        a->job, a->for_job, pol_why_name(a->why));
            }
    }
    REQUIRE(!w->todo.oom, "out of memory");
    REQUIRE(checked(w->p) == 0, "invariants");
    return 0;
}

/*
 * After a tick: a request within its reservation does not wait while
 * borrowers old enough (of projects without any reservation, so nothing
 * protects them) hold what it needs, unless a job ahead of it waits there.
 */
static int reservations_honoured(struct world *w)
{
    for (size_t i = 0; i < policy_job_count(w->p); i++) {
        const struct pol_job *j = policy_job_at(w->p, i);
        int d = j->device, ahead = 0;
        if (j->req != POL_REQ_WAITING || d < 0 || j->gang ||
            policy_project_used(w->p, j->project, d) + j->want > policy_reserved(w->p, j->project, d))
            continue;
        uint64_t avail = policy_room(w->p, j->project, d);
        for (size_t k = 0; k < policy_job_count(w->p); k++) {
            const struct pol_job *v = policy_job_at(w->p, k);
            const struct pol_project *vp = policy_project(w->p, v->project);
            if ((v->req != POL_REQ_NONE || v->state == POL_SUSPENDED) && v != j &&
                (v->device == d || v->device < 0) && v->priority >= j->priority)
                ahead = 1;
            if (v->device == d && v->state == POL_RUNNING && v->req == POL_REQ_NONE && !v->gang &&
                v->project != j->project && !vp->nreserve && !vp->cohort[0] &&
                w->now >= v->since_ns && w->now - v->since_ns >= w->min_runtime)
                avail += v->mem;
        }
        REQUIRE(ahead || avail < j->want, "job %" PRIu64 " waits for %" PRIu64 " MiB within its "
                "reservation while %" PRIu64 " MiB could be had", j->id, (uint64_t)(j->want / MiB),
                (uint64_t)(avail / MiB));
    }
    return 0;
}

static int world_tick(struct world *w)
{
    size_t from = w->todo.n;

    REQUIRE(policy_tick(w->p, w->now, &w->todo) == 0, "tick");
    if (check_new(w, from))
        return 1;
    REQUIRE(checked_backfill(w->p, w->now) == 0, "backfill: a waiting job is starved");
    return reservations_honoured(w);
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

/* A job, or (one time in five) a gang of two tasks, one on each device. */
static int random_admit(struct world *w, uint64_t *next_id, int nproj)
{
    int proj = (int)t_rand_below((uint64_t)nproj), prio = (int)t_rand_below(5);
    int gang = t_rand_below(5) == 0;
    uint64_t g = gang ? *next_id : 0;

    for (int t = 0; t < (gang ? 2 : 1); t++) {
        struct pol_job_spec s = { .id = (*next_id)++, .project = proj, .priority = prio,
                                  .device = gang ? t : (int)t_rand_below(2), .state = POL_RUNNING,
                                  .gang = g, .compute = (unsigned)t_rand_below(11) * 100 };
        REQUIRE(policy_admit(w->p, &s, w->now) == 0, "admit");
    }
    return 0;
}

static int random_op(struct world *w, uint64_t *next_id, int nproj)
{
    size_t n = policy_job_count(w->p);
    const struct pol_job *j = n ? policy_job_at(w->p, t_rand_below(n)) : NULL;
    uint64_t id = j ? j->id : 0;
    size_t from = w->todo.n;

    switch (t_rand_below(11)) {
    case 0:
    case 1:
        if (random_admit(w, next_id, nproj))
            return 1;
        break;
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
    case 9:
        if (j)
            REQUIRE(policy_compute_report(w->p, id, (int)t_rand_below(2), 0, w->now) == 0 &&
                    policy_compute_cap(w->p, id, w->now) <= 1000 &&
                    policy_compute_cap(w->p, id, w->now) >= (j->compute ? j->compute : 1000),
                    "compute cap: never below the share");
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

static void random_projects(struct policy *p)
{
    add_project_q(p, "p0", 1, 0, 256 * MiB, (struct quota){ 128, -1, 1, NULL });
    add_project_q(p, "p1", 3, 1, 256 * MiB, (struct quota){ -1, -1, 2, "c" });
    add_project_q(p, "p2", 5, 0, 0, (struct quota){ -1, -1, 1, NULL });
    add_project(p, "p3", 2, 0, 0, 512 * MiB);
    add_project_q(p, "p4", 3, 0, 128 * MiB, (struct quota){ -1, 256, 1, "c" });
    add_project_q(p, "p5", 3, 0, 0, (struct quota){ -1, -1, 3, NULL });
}

static int random_run(uint64_t seed)
{
    struct pol_config cfg = { .min_runtime_ns = 3 * SEC, .resume_retry_ns = SEC,
                              .backfill = (int)(seed & 1) };
    struct world w = { .min_runtime = cfg.min_runtime_ns, .backfill = cfg.backfill };
    uint64_t next_id = 1;
    int nproj = 6;

    t_seed(seed * 2654435761u + 1);
    w.p = policy_new(&cfg);
    policy_set_device(w.p, 0, 1024 * MiB);
    policy_set_device(w.p, 1, 768 * MiB);
    random_projects(w.p);
    for (int step = 0; step < 400; step++) {
        w.now += t_rand_below(2 * SEC);
        if (random_op(&w, &next_id, nproj))
            return 1;
        if (t_rand_below(3) == 0 && world_tick(&w))
            return 1;
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
        if (check_new(&w, from) || world_tick(&w) || world_step_actions(&w))
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
        if (random_run(seed)) {
            fprintf(stderr, "randomized: seed %" PRIu64 " failed\n", seed);
            return 1;
        }
    fprintf(stderr, "randomized: %lu preemptions (%lu reclaim, %lu priority, %lu fair share, "
            "%lu backfill, %lu gang), %lu automatic resumes, %lu grants after preemption\n",
            stat_preempt, stat_why[POL_WHY_RECLAIM], stat_why[POL_WHY_PRIORITY],
            stat_why[POL_WHY_FAIR_SHARE], stat_why[POL_WHY_BACKFILL], stat_why[POL_WHY_GANG],
            stat_resume, stat_wait_grant);
    /* the runs must exercise what they check */
    REQUIRE(stat_preempt > 1000 && stat_resume > 1000 && stat_wait_grant > 300, "too few events");
    REQUIRE(stat_why[POL_WHY_RECLAIM] > 100 && stat_why[POL_WHY_PRIORITY] > 100 &&
            stat_why[POL_WHY_FAIR_SHARE] > 20 && stat_why[POL_WHY_BACKFILL] > 20 &&
            stat_why[POL_WHY_GANG] > 20, "every kind of preemption happens");
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
    for (int w = 0; w < POL_WHY_COUNT; w++)
        REQUIRE(strcmp(pol_why_name(w), "?"), "why %d has a name", w);
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
    RUN(test_partition);
    RUN(test_lending_limit);
    RUN(test_borrowing_limit);
    RUN(test_fair_share);
    RUN(test_cohort);
    RUN(test_backfill);
    RUN(test_backfill_order);
    RUN(test_backfill_no_ping_pong);
    RUN(test_gang_preempt);
    RUN(test_gang_place);
    RUN(test_gang_place_victims);
    RUN(test_gang_place_victims_compute);
    RUN(test_compute_cap);
    RUN(test_pack_compute);
    RUN(test_randomized);
    RUN(test_names);
    pol_actions_free(&acts);
    return T_EXIT_STATUS();
}
