/*
 * gpus.c - tcgpud's GPUs by UUID; see daemon.h and docs/tcgpud.md, "GPUs".
 *
 * A job names the GPU it allocates on by its ordinal, which means nothing
 * outside the job: under CUDA_VISIBLE_DEVICES (Slurm's GRES, device plugins,
 * docker --gpus) ordinal 0 of two jobs may be two GPUs. So tcgpud accounts
 * by the UUID the job reads from the driver, and gives each UUID a number
 * of its own (the policy's device, `gpuckpt ps`, metrics, [gpu N]): the
 * machine's number of that GPU when the job could tell it, else the lowest
 * number free.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon.h"

#define UUID_MAX 48

static char uuid_of[TCGPUD_MAX_GPUS][UUID_MAX];     /* "" : no GPU by that number yet */

/* "GPU-" and hex digits with dashes, as the job formats it; nothing else. */
static int uuid_ok(const char *u)
{
    size_t n = u ? strlen(u) : 0;

    if (n < 5 || n >= UUID_MAX || strncmp(u, "GPU-", 4))
        return 0;
    for (size_t i = 4; i < n; i++)
        if (!isxdigit((unsigned char)u[i]) && u[i] != '-')
            return 0;
    return 1;
}

static int take_number(int n, const char *uuid)
{
    snprintf(uuid_of[n], UUID_MAX, "%s", uuid);
    logmsg("GPU %d is %s", n, uuid);
    return n;
}

/* A managed job is on GPU n (so its number cannot go to another UUID). */
static int in_use(int n)
{
    for (size_t i = 0; i < d.njobs; i++) {
        const struct pol_job *pj = policy_job(d.pol, (uint64_t)d.jobs[i].pid);
        if (pj && pj->device == n)
            return 1;
    }
    return 0;
}

int gpu_number(const char *uuid, int hint)
{
    int n;

    if (!uuid_ok(uuid))
        return -EINVAL;
    for (n = 0; n < TCGPUD_MAX_GPUS; n++)
        if (!strcmp(uuid_of[n], uuid))
            return n;
    if (hint >= 0 && hint < TCGPUD_MAX_GPUS && !uuid_of[hint][0])
        return take_number(hint, uuid);
    for (n = 0; n < TCGPUD_MAX_GPUS; n++)
        if (!uuid_of[n][0])
            return take_number(n, uuid);
    /* Every number taken: jobs can name any UUID, so a user's made-up ones
     * must not lock the real GPUs out. A number no job is on is free again. */
    for (n = 0; n < TCGPUD_MAX_GPUS; n++)
        if (!in_use(n))
            return take_number(n, uuid);
    return -ENOSPC;
}

int gpu_relearn(int n, const char *uuid)
{
    if (n < 0 || n >= TCGPUD_MAX_GPUS || !uuid_ok(uuid))
        return -EINVAL;
    if (!strcmp(uuid_of[n], uuid))
        return 0;
    for (int i = 0; i < TCGPUD_MAX_GPUS; i++)
        if (!strcmp(uuid_of[i], uuid) || (i == n && uuid_of[i][0]))
            return -EEXIST;
    take_number(n, uuid);
    return 0;
}

const char *gpu_uuid(int n)
{
    return n >= 0 && n < TCGPUD_MAX_GPUS ? uuid_of[n] : "";
}

int gpu_of_message(const struct ctl_msg *m, int *dev)
{
    uint64_t ordinal = 0, index;
    const char *uuid = ctl_get(m, "uuid");
    int n;

    if (ctl_get(m, "device") && (ctl_get_u64(m, "device", &ordinal) < 0 || ordinal >= TCGPUD_MAX_GPUS))
        return -EINVAL;
    if (!uuid) {
        *dev = (int)ordinal;            /* a job of an older libtcgpu: its ordinal */
        return 0;
    }
    if (!ctl_get(m, "index"))
        index = UINT64_MAX;
    else if (ctl_get_u64(m, "index", &index) < 0)
        return -EINVAL;
    n = gpu_number(uuid, index < TCGPUD_MAX_GPUS ? (int)index : -1);
    if (n < 0)
        return n;
    *dev = n;
    return 0;
}
