/*
 * tcgpu-replay - tcgpud's policy (lib/policy) at cluster scale, by
 * simulation, against the schedulers it is compared with.
 *
 *   tcgpu-replay TRACE.csv [--gpus N] [--gpu-mem SIZE] [--compare | --sched LIST]
 *                [--min-runtime DUR] [--suspend-gbps X] [--resume-gbps X]
 *                [--disk-write-gbps X] [--disk-read-gbps X] [--host-mem SIZE]
 *                [--fixed-cost DUR] [--requeue-delay DUR] [--restart DUR] [--app-ckpt DUR]
 *                [--high-priority P] [--check] [--json]
 *   tcgpu-replay --generate [--jobs N] [--gpus N] [--gpu-mem SIZE] [--load L] [--seed S]
 *
 * See replay.h for the parts and docs/tcgpud.md ("Replay at scale") for the
 * model, the trace and the numbers.
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
    fprintf(f, "usage: tcgpu-replay TRACE.csv [--gpus N] [--gpu-mem SIZE] [--compare | --sched LIST]\n"
               "                    [--min-runtime DUR] [--suspend-gbps X] [--resume-gbps X]\n"
               "                    [--disk-write-gbps X] [--disk-read-gbps X] [--host-mem SIZE]\n"
               "                    [--fixed-cost DUR] [--requeue-delay DUR] [--restart DUR]\n"
               "                    [--app-ckpt DUR] [--migrate-after DUR] [--high-priority P]\n"
               "                    [--check] [--json]\n"
               "       tcgpu-replay --generate [--jobs N] [--gpus N] [--gpu-mem SIZE] [--load L] [--seed S]\n"
               "       tcgpu-replay --version\n"
               "\n"
               "Replays a job trace through tcgpud's policy and the schedulers it is compared\n"
               "with, and prints them side by side: tcgpud and FIFO, or with --compare FIFO,\n"
               "static partitioning, kill+requeue, ckpt+requeue and tcgpud (--sched: a list of\n"
               "fifo,static,kill,ckpt,tcgpud). Defaults: 8 GPUs of 80G, min runtime 60s,\n"
               "suspend 25 GB/s, resume 20 GB/s, disk 2/3 GB/s, host memory 16G, fixed cost\n"
               "0.5s, requeue 150s, restart 120s, own checkpoint every 30m, migrate after 10m.\n");
}

static int parse_sched(const char *list, unsigned *mask)
{
    char *copy = strdup(list), *save = NULL;
    int r = 0;

    *mask = 0;
    for (char *t = strtok_r(copy, ",", &save); t && copy; t = strtok_r(NULL, ",", &save)) {
        int s;
        for (s = 0; s < SCHED_COUNT && strcmp(t, sched_name((enum sched)s)); s++)
            ;
        if (s == SCHED_COUNT)
            r = -1;
        else
            *mask |= 1u << s;
    }
    free(copy);
    return !copy || !*mask ? -1 : r;
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

enum { O_GPUS = 256, O_MEM, O_MINRT, O_SUSP, O_RES, O_SWAP, O_DW, O_DR, O_HOST, O_FIXED, O_REQ,
       O_RESTART, O_CKPT, O_MIGRATE, O_HI, O_CHECK, O_JSON, O_GEN, O_JOBS, O_LOAD, O_SEED, O_CMP, O_SCHED };

static const struct option longopts[] = {
    { "gpus", required_argument, NULL, O_GPUS },
    { "gpu-mem", required_argument, NULL, O_MEM },
    { "min-runtime", required_argument, NULL, O_MINRT },
    { "suspend-gbps", required_argument, NULL, O_SUSP },
    { "resume-gbps", required_argument, NULL, O_RES },
    { "swap-gbps", required_argument, NULL, O_SWAP },
    { "disk-write-gbps", required_argument, NULL, O_DW },
    { "disk-read-gbps", required_argument, NULL, O_DR },
    { "host-mem", required_argument, NULL, O_HOST },
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
    { "seed", required_argument, NULL, O_SEED },
    { "compare", no_argument, NULL, O_CMP },
    { "sched", required_argument, NULL, O_SCHED },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { 0 },
};

/* One option into o or g. 0, or an exit code. */
static int option(int ch, const char *arg, struct opts *o, struct gen_opts *g, int *gen)
{
    uint64_t v;
    char *end;

    switch (ch) {
    case O_GPUS:
        o->gpus = g->gpus = (int)strtol(arg, &end, 10);
        return *end || o->gpus <= 0 || o->gpus > POL_MAX_DEVICES ? bad("--gpus wants 1..4096") : 0;
    case O_MEM:
        if (units_parse_size(arg, &o->gpu_mem) < 0 || !o->gpu_mem)
            return bad("--gpu-mem wants a size (80G)");
        g->gpu_mem = o->gpu_mem;
        return 0;
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
    case O_HOST:
        if (units_parse_size(arg, &v) < 0)
            return bad("--host-mem wants a size (16G)");
        o->host_bytes = (double)v;
        return 0;
    case O_FIXED: return seconds(arg, &o->fixed_s) < 0 ? bad("--fixed-cost wants a duration") : 0;
    case O_REQ: return seconds(arg, &o->requeue_s) < 0 ? bad("--requeue-delay wants a duration") : 0;
    case O_RESTART: return seconds(arg, &o->restart_s) < 0 ? bad("--restart wants a duration") : 0;
    case O_CKPT: return seconds(arg, &o->app_ckpt_s) < 0 ? bad("--app-ckpt wants a duration") : 0;
    case O_MIGRATE:
        return seconds(arg, &o->migrate_s) < 0 ? bad("--migrate-after wants a duration (0: never)") : 0;
    case O_HI:
        o->high_prio = (int)strtol(arg, &end, 10);
        return *end ? bad("--high-priority wants an integer") : 0;
    case O_CHECK: o->check = 1; return 0;
    case O_JSON: o->json = 1; return 0;
    case O_GEN: *gen = 1; return 0;
    case O_JOBS:
        g->jobs = strtoull(arg, &end, 10);
        return *end || !g->jobs || g->jobs > 10000000 ? bad("--jobs wants 1..10000000") : 0;
    case O_LOAD:
        g->load = strtod(arg, &end);
        return *end || !(g->load > 0) || g->load > 100 ? bad("--load wants a positive fraction") : 0;
    case O_SEED:
        g->seed = strtoull(arg, &end, 10);
        return *end ? bad("--seed wants an integer") : 0;
    case O_CMP: o->mask = (1u << SCHED_COUNT) - 1; return 0;
    case O_SCHED:
        return parse_sched(arg, &o->mask) < 0 ? bad("--sched wants fifo,static,kill,ckpt,tcgpud") : 0;
    case 'h': usage(stdout); return -1;
    case 'V': printf("tcgpu-replay %s\n", TCGPU_VERSION_STRING); return -1;
    default: usage(stderr); return 2;
    }
}

int main(int argc, char **argv)
{
    struct opts o = {
        .gpus = 8, .gpu_mem = 80ull << 30, .min_runtime_ns = 60000000000ull,
        .suspend_bps = 25e9, .resume_bps = 20e9, .disk_write_bps = 2e9, .disk_read_bps = 3e9,
        .host_bytes = 16.0 * GiB, .fixed_s = 0.5, .requeue_s = 150, .restart_s = 120,
        .app_ckpt_s = 1800, .migrate_s = 600, .high_prio = -1, .mask = (1u << SCHED_FIFO) | (1u << SCHED_TCGPUD),
    };
    struct gen_opts g = { .jobs = 2000, .gpus = 8, .gpu_mem = 80ull << 30, .load = 0.9, .seed = 1 };
    struct result res[SCHED_COUNT];
    struct trace t;
    size_t nres = 0;
    int gen = 0, ch, hi, rc;

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
    if (trace_load(argv[optind], &t) < 0)
        return 1;
    hi = trace_high_priority(&t, o.high_prio);
    for (int s = 0; s < SCHED_COUNT; s++) {
        if (!(o.mask & (1u << s)))
            continue;
        if (simulate(&t, &o, (enum sched)s, hi, &res[nres]) < 0) {
            trace_free(&t);
            return 1;
        }
        nres++;
    }
    rc = 0;
    if (o.json)
        rc = report_json(&t, &o, hi, res, nres) < 0 ? 1 : 0;
    else
        report_table(&t, &o, hi, res, nres);
    trace_free(&t);
    return rc;
}
