/*
 * test_slurm_shards.c - a Slurm job's shards as its share of the GPU
 * (slurm/shards.c), without Slurm: the node's gres list as slurmctld
 * writes it, and the limits a task of N shards gets from it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../slurm/tcgpu_slurm.h"
#include "../common/check.h"

/* Test double of slurmapi.c's question to slurmctld. */
static const char *node_gres_answer;

int ts_node_gres(const char *node, char *buf, size_t len)
{
    (void)node;
    if (!node_gres_answer)
        return -EIO;
    snprintf(buf, len, "%s", node_gres_answer);
    return 0;
}

static int gres_lists_are_read(void)
{
    unsigned long n;

    REQUIRE(ts_gres_count("gpu:2,shard:8", "gpu", &n) == 0 && n == 2);
    REQUIRE(ts_gres_count("gpu:2,shard:8", "shard", &n) == 0 && n == 8);
    /* sockets in parentheses, commas inside them; types summed */
    CHECK(ts_gres_count("gpu:a100:2(S:0,1),gpu:v100:2(S:1),shard:16(S:0-1)", "gpu", &n) == 0 &&
          n == 4, "%lu", n);
    CHECK(ts_gres_count("gpu:a100:2(S:0,1),shard:16(S:0-1)", "shard", &n) == 0 && n == 16);
    CHECK(ts_gres_count("gpu:2", "shard", &n) == -ENOENT && n == 0, "no shards");
    CHECK(ts_gres_count("", "gpu", &n) == -ENOENT && ts_gres_count(NULL, "gpu", &n) == -ENOENT);
    CHECK(ts_gres_count("gpus:2,gpu", "gpu", &n) == 0 && n == 1, "a prefix is not the name: %lu", n);
    CHECK(ts_gres_count("gpu:a100", "gpu", &n) == -ENOENT, "a type alone has no count");
    return T_EXIT_PASS;
}

static int limits(const char *shards, const char *gres)
{
    unsetenv("TCGPU_GPU_MEM");
    unsetenv("TCGPU_GPU_COMPUTE");
    setenv("SLURMD_NODENAME", "na", 1);
    if (shards)
        setenv("SLURM_SHARDS_ON_NODE", shards, 1);
    else
        unsetenv("SLURM_SHARDS_ON_NODE");
    node_gres_answer = gres;
    return ts_shard_limits();
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v ? v : "(unset)";
}

static int shards_become_limits(void)
{
    REQUIRE(limits("1", "gpu:2,shard:8") == 0);
    CHECK(!strcmp(env("TCGPU_GPU_MEM"), "25.0000%") && !strcmp(env("TCGPU_GPU_COMPUTE"), "25%"),
          "1 of 4 shards per GPU: %s, %s", env("TCGPU_GPU_MEM"), env("TCGPU_GPU_COMPUTE"));
    REQUIRE(limits("1", "gpu:2,shard:6") == 0);
    CHECK(!strcmp(env("TCGPU_GPU_MEM"), "33.3333%") && !strcmp(env("TCGPU_GPU_COMPUTE"), "33%"),
          "1 of 3: %s, %s", env("TCGPU_GPU_MEM"), env("TCGPU_GPU_COMPUTE"));
    /* a whole GPU's worth, or no shards: no partition */
    REQUIRE(limits("4", "gpu:2,shard:8") == 0);
    CHECK(!getenv("TCGPU_GPU_MEM") && !getenv("TCGPU_GPU_COMPUTE"));
    REQUIRE(limits(NULL, "gpu:2,shard:8") == 0);
    CHECK(!getenv("TCGPU_GPU_MEM"));
    /* the job's own limit is replaced: shards are the partition */
    setenv("SLURM_SHARDS_ON_NODE", "2", 1);
    setenv("TCGPU_GPU_MEM", "100G", 1);
    node_gres_answer = "gpu:1,shard:4";
    REQUIRE(ts_shard_limits() == 0);
    CHECK(!strcmp(env("TCGPU_GPU_MEM"), "50.0000%"), "%s", env("TCGPU_GPU_MEM"));
    return T_EXIT_PASS;
}

static int unknown_share_refuses(void)
{
    CHECK(limits("1", "gpu:2") < 0, "a node without shards");
    CHECK(limits("1", "gpu:2,shard:5") < 0, "shards not spread evenly");
    CHECK(limits("1", NULL) < 0, "slurmctld did not answer");
    CHECK(limits("x", "gpu:2,shard:8") < 0 && limits("0", "gpu:2,shard:8") < 0, "not a count");
    CHECK(!getenv("TCGPU_GPU_MEM"), "a refusal set a limit");
    return T_EXIT_PASS;
}

int main(void)
{
    RUN(gres_lists_are_read);
    RUN(shards_become_limits);
    RUN(unknown_share_refuses);
    return T_EXIT_STATUS();
}
