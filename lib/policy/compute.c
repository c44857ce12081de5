/*
 * compute.c - a job's share of its device's compute: what it reports, and
 * the cap its throttle applies (policy.h, "Compute share").
 *
 * The cap follows who else computes on the device now: a job with a share
 * alone there is not held back at all; next to a job without a share it
 * keeps to its share (the other takes what it wants); next to jobs that all
 * have shares, the shares are scaled up to fill the device, so 30% and 50%
 * become 37.5% and 62.5%. A cap is never below the job's own share: shares
 * that add up to more than the device (60% and 60%) stay as they are and
 * the device's turns decide, so no job can push another below its share by
 * claiming a large one.
 */
#include <errno.h>

#include "internal.h"

int policy_compute_report(struct policy *p, uint64_t id, int active, unsigned busy, uint64_t now)
{
    struct pol_job *j = pol_find(p, id);

    if (!j)
        return -ENOENT;
    if (active)
        j->compute_seen_ns = now ? now : 1;
    j->compute_busy = busy > POL_COMPUTE_FULL ? POL_COMPUTE_FULL : busy;
    return 0;
}

/* Has k launched work on its device lately? */
static int computing(const struct pol_job *k, uint64_t now)
{
    return k->state == POL_RUNNING && k->compute_seen_ns && k->compute_seen_ns <= now &&
           now - k->compute_seen_ns <= POL_COMPUTE_ACTIVE_NS;
}

unsigned policy_compute_cap(const struct policy *p, uint64_t id, uint64_t now)
{
    const struct pol_job *j = policy_job(p, id);
    uint64_t sum;
    int others = 0;

    if (!j)
        return 0;
    if (!j->compute)
        return POL_COMPUTE_FULL;
    sum = j->compute;
    for (size_t i = 0; i < p->njobs; i++) {
        const struct pol_job *k = &p->jobs[i];
        if (k == j || k->device != j->device || !computing(k, now))
            continue;
        if (!k->compute)
            return j->compute;          /* an unlimited job takes what it wants */
        sum += k->compute;
        others++;
    }
    if (!others)
        return POL_COMPUTE_FULL;
    uint64_t cap = (uint64_t)POL_COMPUTE_FULL * j->compute / sum;
    if (cap < j->compute)
        cap = j->compute;
    return cap > POL_COMPUTE_FULL ? POL_COMPUTE_FULL : (unsigned)cap;
}
