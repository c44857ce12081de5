/*
 * tcgpu-replay - schedulers for a GPU cluster compared by simulation on one
 * trace: each a placement (whole GPUs, or shared by memory and compute
 * share) and a preemption (none, kill, save, suspend, suspend+migrate),
 * with tcgpud's policy (lib/policy) deciding for all of them.
 *
 *   tcgpu-replay TRACE.csv [--gpus N] [--gpus-per-node N] [--gpu-mem SIZE]
 *                [--compare | --sched LIST] [--slo DUR] [--slo-share X]
 *                [--min-runtime DUR] [--suspend-gbps X] [--resume-gbps X]
 *                [--disk-write-gbps X] [--disk-read-gbps X] [--host-mem SIZE]
 *                [--node-host-mem SIZE] [--interference X] [--fixed-cost DUR]
 *                [--requeue-delay DUR] [--restart DUR] [--app-ckpt DUR]
 *                [--migrate-after DUR] [--high-priority P] [--check] [--json]
 *   tcgpu-replay --generate [--jobs N] [--gpus N] [--gpu-mem SIZE]
 *                [--scenario under|enterprise|overload | --load L | --compute-load L] [--seed S]
 *
 * See replay.h for the parts and docs/replay.md for the model, the trace
 * and the numbers.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "common/log.h"
#include "common/units.h"
#include "tcgpu.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: tcgpu-replay TRACE.csv [--gpus N] [--gpus-per-node N] [--gpu-mem SIZE]\n"
               "                    [--compare | --sched LIST] [--slo DUR] [--slo-share X]\n"
               "                    [--min-runtime DUR] [--suspend-gbps X] [--resume-gbps X]\n"
               "                    [--disk-write-gbps X] [--disk-read-gbps X] [--host-mem SIZE]\n"
               "                    [--node-host-mem SIZE] [--interference X] [--fixed-cost DUR]\n"
               "                    [--requeue-delay DUR] [--restart DUR] [--app-ckpt DUR]\n"
               "                    [--migrate-after DUR] [--high-priority P] [--check] [--json]\n"
               "       tcgpu-replay --generate [--jobs N] [--gpus N] [--gpu-mem SIZE]\n"
               "                    [--scenario under|enterprise|overload | --load L | --compute-load L]\n"
               "                    [--seed S]\n"
               "       tcgpu-replay --version\n"
               "\n"
               "Replays a job trace through every scheduler (or --sched NAME,...), each a placement\n"
               "(whole, shared) and a preemption (none, kill, save, suspend, suspend+migrate);\n"
               "slurm-*: victims chosen as Slurm's partition_prio does, not by tcgpud's policy:\n");
    for (size_t i = 0; i < sched_count; i++)
        fprintf(f, "  %-17s %-6s %-15s %s%s\n", sched_table[i].name,
                placement_name(sched_table[i].placement), preempt_name(sched_table[i].preempt),
                sched_table[i].title, sched_table[i].shipped ? " [shipped]" : "");
    fprintf(f, "Defaults: 8 GPUs of 80G, 8 a node, SLO 60s for 99%%, min runtime 60s, suspend and\n"
               "resume 50 GB/s, disk 2/3 GB/s, host memory 16G a job, 1T a node for suspended jobs,\n"
               "interference 15%%, fixed cost 0.5s, requeue 150s, restart 120s, own checkpoint every\n"
               "30m, migrate after 10m. --load is whole-GPU demand, --compute-load compute demand.\n");
}

static int bad(const char *what)
{
    log_err("%s", what);
    return 2;
}

/* A positive number of GB/s into bytes/s. */
static int gbps(const char *arg, double *out)
{
    char *end;
    double v = strtod(arg, &end);

    if (*end || !(v > 0) || v > 1e6)
        return -1;
    *out = v * 1e9;
    return 0;
}

static int seconds(const char *arg, double *out)
{
    uint64_t v;

    if (units_parse_duration(arg, &v) < 0)
        return -1;
    *out = (double)v / 1e9;
    return 0;
}

static int bytes(const char *arg, double *out)
{
    uint64_t v;

    if (units_parse_size(arg, &v) < 0)
        return -1;
    *out = (double)v;
    return 0;
}

/* A fraction in [lo, hi]. */
static int fraction(const char *arg, double lo, double hi, double *out)
{
    char *end;

    *out = strtod(arg, &end);
    return *end || !(*out >= lo && *out <= hi) ? -1 : 0;
}

enum { O_GPUS = 256, O_PERNODE, O_MEM, O_MINRT, O_SUSP, O_RES, O_SWAP, O_DW, O_DR, O_HOST,
       O_NODEHOST, O_INTERF, O_SLO, O_SLOSHARE, O_FIXED, O_REQ, O_RESTART, O_CKPT, O_MIGRATE, O_HI,
       O_CHECK, O_JSON, O_GEN, O_JOBS, O_LOAD, O_CLOAD, O_SCEN, O_SEED, O_CMP, O_SCHED };

static const struct option longopts[] = {
    { "gpus", required_argument, NULL, O_GPUS },
    { "gpus-per-node", required_argument, NULL, O_PERNODE },
    { "gpu-mem", required_argument, NULL, O_MEM },
    { "min-runtime", required_argument, NULL, O_MINRT },
    { "suspend-gbps", required_argument, NULL, O_SUSP },
    { "resume-gbps", required_argument, NULL, O_RES },
    { "swap-gbps", required_argument, NULL, O_SWAP },
    { "disk-write-gbps", required_argument, NULL, O_DW },
    { "disk-read-gbps", required_argument, NULL, O_DR },
    { "host-mem", required_argument, NULL, O_HOST },
    { "node-host-mem", required_argument, NULL, O_NODEHOST },
    { "interference", required_argument, NULL, O_INTERF },
    { "slo", required_argument, NULL, O_SLO },
    { "slo-share", required_argument, NULL, O_SLOSHARE },
    { "fixed-cost", required_argument, NULL, O_FIXED },
    { "requeue-delay", required_argument, NULL, O_REQ },
    { "restart", required_argument, NULL, O_RESTART },
    { "app-ckpt", required_argument, NULL, O_CKPT },
    { "migrate-after", required_argument, NULL, O_MIGRATE },
    { "high-priority", required_argument, NULL, O_HI },
    { "check", no_argument, NULL, O_CHECK },
    { "json", no_argument, NULL, O_JSON },
    { "generate", no_argument, NULL, O_GEN },
    { "jobs", required_argument, NULL, O_JOBS },
    { "load", required_argument, NULL, O_LOAD },
    { "compute-load", required_argument, NULL, O_CLOAD },
    { "scenario", required_argument, NULL, O_SCEN },
    { "seed", required_argument, NULL, O_SEED },
    { "compare", no_argument, NULL, O_CMP },
    { "sched", required_argument, NULL, O_SCHED },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { 0 },
};

/* The cost and model options into o. 0, or an exit code; 1: not one of them. */
static int cost_option(int ch, const char *arg, struct opts *o)
{
    switch (ch) {
    case O_MINRT:
        return units_parse_duration(arg, &o->min_runtime_ns) < 0 ? bad("--min-runtime wants a duration (60s)") : 0;
    case O_SUSP: return gbps(arg, &o->suspend_bps) < 0 ? bad("--suspend-gbps wants GB/s") : 0;
    case O_RES: return gbps(arg, &o->resume_bps) < 0 ? bad("--resume-gbps wants GB/s") : 0;
    case O_SWAP:
        if (gbps(arg, &o->suspend_bps) < 0)
            return bad("--swap-gbps wants GB/s");
        o->resume_bps = o->suspend_bps;
        return 0;
    case O_DW: return gbps(arg, &o->disk_write_bps) < 0 ? bad("--disk-write-gbps wants GB/s") : 0;
    case O_DR: return gbps(arg, &o->disk_read_bps) < 0 ? bad("--disk-read-gbps wants GB/s") : 0;
    case O_HOST: return bytes(arg, &o->host_bytes) < 0 ? bad("--host-mem wants a size (16G)") : 0;
    case O_NODEHOST:
        return bytes(arg, &o->node_host_bytes) < 0 ? bad("--node-host-mem wants a size (1T)") : 0;
    case O_INTERF:
        return fraction(arg, 0, 0.9, &o->interference) < 0 ? bad("--interference wants 0..0.9") : 0;
    case O_SLO: return seconds(arg, &o->slo_s) < 0 ? bad("--slo wants a duration (60s)") : 0;
    case O_SLOSHARE:
        return fraction(arg, 0, 1, &o->slo_share) < 0 ? bad("--slo-share wants 0..1") : 0;
    case O_FIXED: return seconds(arg, &o->fixed_s) < 0 ? bad("--fixed-cost wants a duration") : 0;
    case O_REQ: return seconds(arg, &o->requeue_s) < 0 ? bad("--requeue-delay wants a duration") : 0;
    case O_RESTART: return seconds(arg, &o->restart_s) < 0 ? bad("--restart wants a duration") : 0;
    case O_CKPT: return seconds(arg, &o->app_ckpt_s) < 0 ? bad("--app-ckpt wants a duration") : 0;
    case O_MIGRATE:
        return seconds(arg, &o->migrate_s) < 0 ? bad("--migrate-after wants a duration (0: never)") : 0;
    default: return 1;
    }
}

/* The generator's options into g. 0, or an exit code; 1: not one of them. */
static int gen_option(int ch, const char *arg, struct gen_opts *g, int *gen)
{
    char *end;

    switch (ch) {
    case O_GEN: *gen = 1; return 0;
    case O_JOBS:
        g->jobs = strtoull(arg, &end, 10);
        return *end || !g->jobs || g->jobs > 10000000 ? bad("--jobs wants 1..10000000") : 0;
    case O_LOAD:
    case O_CLOAD:
        g->load = strtod(arg, &end);
        g->load_compute = ch == O_CLOAD;
        g->scenario = SC_DEFAULT;
        return *end || !(g->load > 0) || g->load > 100 ? bad("--load wants a positive fraction") : 0;
    case O_SCEN:
        return scenario_parse(arg, g) < 0 ? bad("--scenario wants under, enterprise or overload") : 0;
    case O_SEED:
        g->seed = strtoull(arg, &end, 10);
        return *end ? bad("--seed wants an integer") : 0;
    default: return 1;
    }
}

/* One option into o or g. 0, or an exit code (-1: exit 0). */
static int option(int ch, const char *arg, struct opts *o, struct gen_opts *g, int *gen)
{
    char *end;
    int r;

    if ((r = cost_option(ch, arg, o)) != 1 || (r = gen_option(ch, arg, g, gen)) != 1)
        return r;
    switch (ch) {
    case O_GPUS:
        o->gpus = g->gpus = (int)strtol(arg, &end, 10);
        return *end || o->gpus <= 0 || o->gpus > POL_MAX_DEVICES ? bad("--gpus wants 1..4096") : 0;
    case O_PERNODE:
        o->gpus_per_node = (int)strtol(arg, &end, 10);
        return *end || o->gpus_per_node <= 0 || o->gpus_per_node > 64 ? bad("--gpus-per-node wants 1..64") : 0;
    case O_MEM:
        if (units_parse_size(arg, &o->gpu_mem) < 0 || !o->gpu_mem)
            return bad("--gpu-mem wants a size (80G)");
        g->gpu_mem = o->gpu_mem;
        return 0;
    case O_HI:
        o->high_prio = (int)strtol(arg, &end, 10);
        return *end ? bad("--high-priority wants an integer") : 0;
    case O_CHECK: o->check = 1; return 0;
    case O_JSON: o->json = 1; return 0;
    case O_CMP: o->mask = (1u << sched_count) - 1; return 0;
    case O_SCHED:
        return sched_parse(arg, &o->mask) < 0 ? bad("--sched wants names of schedulers (--help)") : 0;
    case 'h': usage(stdout); return -1;
    case 'V': printf("tcgpu-replay %s\n", TCGPU_VERSION_STRING); return -1;
    default: usage(stderr); return 2;
    }
}

static int replay(const char *path, const struct opts *o)
{
    struct result res[SCHED_MAX];
    struct trace t;
    size_t nres = 0;
    int hi, rc = 0;

    if (trace_load(path, &t) < 0)
        return 1;
    hi = trace_high_priority(&t, o->high_prio);
    for (size_t s = 0; s < sched_count && rc == 0; s++)
        if (o->mask & (1u << s))
            rc = simulate(&t, o, &sched_table[s], hi, &res[nres++]) < 0 ? 1 : 0;
    if (rc == 0 && o->json)
        rc = report_json(&t, o, hi, res, nres) < 0 ? 1 : 0;
    else if (rc == 0)
        report_table(&t, o, hi, res, nres);
    trace_free(&t);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o = {
        .gpus = 8, .gpus_per_node = 8, .gpu_mem = 80ull << 30, .min_runtime_ns = 60000000000ull,
        .suspend_bps = 50e9, .resume_bps = 50e9, .disk_write_bps = 2e9, .disk_read_bps = 3e9,
        .host_bytes = 16.0 * GiB, .node_host_bytes = 1024.0 * GiB, .interference = 0.15,
        .slo_s = 60, .slo_share = 0.99, .fixed_s = 0.5, .requeue_s = 150, .restart_s = 120,
        .app_ckpt_s = 1800, .migrate_s = 600, .high_prio = -1, .mask = (1u << sched_count) - 1,
    };
    struct gen_opts g = { .jobs = 2000, .gpus = 8, .gpu_mem = 80ull << 30, .load = 0.8, .seed = 1 };
    int gen = 0, ch, rc;

    tcgpu_log_setup(&(struct tcgpu_log_style){ .name = "tcgpu-replay", .level = TCGPU_LOG_INFO });
    while ((ch = getopt_long(argc, argv, "hV", longopts, NULL)) != -1)
        if ((rc = option(ch, optarg, &o, &g, &gen)) != 0)
            return rc < 0 ? 0 : rc;
    if (gen)
        return optind == argc ? generate_trace(stdout, &g) : (usage(stderr), 2);
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    return replay(argv[optind], &o);
}
