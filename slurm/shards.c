/*
 * shards.c - a job's Slurm shards made a partition of its GPU.
 *
 * Slurm's gres/shard lets several jobs onto one GPU (gres.conf gives each
 * GPU a Count of shards, typically the most jobs it may hold at once) but
 * enforces nothing: a job of one shard may take the whole GPU's memory and
 * compute from its neighbours. tcgpu-slurm turns a task's shards into what
 * libtcgpu.so enforces: its share of the GPU's memory (TCGPU_GPU_MEM, a
 * hard limit) and of its compute (TCGPU_GPU_COMPUTE), the share being the
 * task's shards (SLURM_SHARDS_ON_NODE) over the shards of one GPU of the
 * node (the node's shards over its GPUs, as slurmctld counts them: the
 * shards must be spread evenly over the GPUs, the same Count on each; a
 * node whose shards do not divide by its GPUs is refused, not guessed).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "tcgpu_slurm.h"

/* One entry of a gres list: "name[:type]:count[(details)]"; its name and
 * count (1 when it has none). 0, or -EINVAL. */
static int gres_entry(const char *s, size_t len, char *name, size_t name_len, unsigned long *count)
{
    const char *paren = memchr(s, '(', len), *colon = memchr(s, ':', len), *last = NULL;
    size_t n, body = paren ? (size_t)(paren - s) : len;
    char num[32], *end;

    n = colon && (size_t)(colon - s) < body ? (size_t)(colon - s) : body;
    if (!n || n >= name_len)
        return -EINVAL;
    memcpy(name, s, n);
    name[n] = '\0';
    *count = 1;
    for (const char *p = s; p < s + body; p++)
        if (*p == ':')
            last = p;
    if (!last)
        return 0;
    n = (size_t)(s + body - last - 1);
    if (!n || n >= sizeof(num))
        return -EINVAL;
    memcpy(num, last + 1, n);
    num[n] = '\0';
    errno = 0;
    *count = strtoul(num, &end, 10);
    if (errno || *end)
        return -EINVAL;     /* "gpu:a100" is a type, not a count: the count follows it */
    return 0;
}

int ts_gres_count(const char *gres, const char *name, unsigned long *count)
{
    const char *s = gres;
    int depth = 0, found = 0;

    *count = 0;
    if (!gres)
        return -ENOENT;
    for (const char *p = gres;; p++) {
        if (*p == '(')
            depth++;
        else if (*p == ')' && depth)
            depth--;
        else if ((*p == ',' && !depth) || !*p) {
            char n[64];
            unsigned long c;
            if (p > s && gres_entry(s, (size_t)(p - s), n, sizeof(n), &c) == 0 && !strcmp(n, name)) {
                *count += c;            /* one entry per type: "gpu:a100:2,gpu:v100:2" */
                found = 1;
            }
            if (!*p)
                break;
            s = p + 1;
        }
    }
    return found ? 0 : -ENOENT;
}

int ts_shard_limits(void)
{
    const char *on = getenv("SLURM_SHARDS_ON_NODE"), *node = getenv("SLURMD_NODENAME");
    unsigned long shards, gpus, node_shards;
    char gres[1024], pct[32], *end;

    if (!on || !*on)
        return 0;                               /* whole GPUs, or none: nothing to split */
    errno = 0;
    shards = strtoul(on, &end, 10);
    if (errno || *end || !shards) {
        log_err("SLURM_SHARDS_ON_NODE=%s: not a number of shards", on);
        return -EINVAL;
    }
    if (!node || !*node || ts_node_gres(node, gres, sizeof(gres)) < 0 ||
        ts_gres_count(gres, "gpu", &gpus) < 0 || ts_gres_count(gres, "shard", &node_shards) < 0 ||
        !gpus || node_shards < gpus || node_shards % gpus) {
        log_err("job of %lu shards: cannot tell how many shards a GPU of node %s has "
                "(its gres: %s), so not what share of the GPU is the job's: not started "
                "(gres.conf: Name=shard Count=N on every GPU of the node)",
                shards, node ? node : "?", node && *node ? gres : "unknown");
        return -ENOENT;
    }
    unsigned long per_gpu = node_shards / gpus;
    if (shards >= per_gpu)
        return 0;                               /* a whole GPU's worth */
    /* percent with 4 decimals, rounded down: the partitions of one GPU add up to it at most */
    unsigned long ppm = shards * 1000000ul / per_gpu;
    snprintf(pct, sizeof(pct), "%lu.%04lu%%", ppm / 10000, ppm % 10000);
    const char *own = getenv("TCGPU_GPU_MEM");
    if (own && *own && strcmp(own, pct))
        log_info("TCGPU_GPU_MEM=%s replaced by the job's shards: %s", own, pct);
    setenv("TCGPU_GPU_MEM", pct, 1);
    /* compute shares are whole percents (1..100) */
    snprintf(pct, sizeof(pct), "%lu%%", ppm / 10000 ? ppm / 10000 : 1);
    setenv("TCGPU_GPU_COMPUTE", pct, 1);
    log_info("%lu of the %lu shards of a GPU: memory limit %s, compute share %s", shards, per_gpu,
             getenv("TCGPU_GPU_MEM"), pct);
    return 0;
}
