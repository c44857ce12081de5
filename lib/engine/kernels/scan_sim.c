/*
 * scan_sim.c - the simcuda twin of scan.cu: the same kernel names, arguments
 * and results, as host functions for the simulated GPU (simcuda_kernel.h).
 * Built into a shared object and embedded in the library (embed.py), loaded
 * with cuModuleLoadData when the driver is simcuda.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "devhash.h"
#include "simcuda_kernel.h"

struct scan_desc {
    uint64_t va, len;
};

struct scan_result {
    uint64_t hash;
    uint32_t nonzero, pad;
};

/* Whether any of len bytes is non-zero, stopping at the first. */
static uint32_t any_nonzero(const uint8_t *p, size_t len)
{
    static const uint8_t zeros[256];

    while (len >= sizeof(zeros)) {
        if (memcmp(p, zeros, sizeof(zeros)))
            return 1;
        p += sizeof(zeros), len -= sizeof(zeros);
    }
    return len && memcmp(p, zeros, len) != 0;
}

/* A share of the chunks, scanned by one thread (a GPU scans them all at
 * once: the twin uses the host's cores, as the device would its SMs). */
struct share {
    const uint8_t **views;
    const struct scan_desc *d;
    struct scan_result *out;
    uint32_t from, to, flags;
    int wide;                     /* devhash_fast, else the scalar reference */
    uint64_t cpu_ns;              /* its thread's CPU time, when it ran on one of its own */
};

static void scan_range(struct share *s)
{
    for (uint32_t i = s->from; i < s->to; i++) {
        uint32_t nz = 0;

        if (s->flags & 1) {
            s->out[i].hash = s->wide ? devhash_fast(s->views[i], (size_t)s->d[i].len, &nz)
                                     : devhash_host(s->views[i], (size_t)s->d[i].len, &nz);
        } else {
            s->out[i].hash = 0;
            nz = any_nonzero(s->views[i], (size_t)s->d[i].len);
        }
        s->out[i].nonzero = nz;
        s->out[i].pad = 0;
    }
}

/* A share on a thread of its own, which simcuda does not see: its CPU time
 * is charged to the device after the join, as the launch's thread's is. */
static void *scan_share(void *arg)
{
    struct share *s = arg;
    uint64_t t0 = clock_ns_of(CLOCK_THREAD_CPUTIME_ID);

    scan_range(s);
    s->cpu_ns = clock_ns_of(CLOCK_THREAD_CPUTIME_ID) - t0;
    return NULL;
}

/* Threads for `bytes` of work: one per 16 MiB, at most one per CPU (8). */
static unsigned threads_for(uint64_t bytes)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t t = bytes >> 24;

    if (cpus > 8)
        cpus = 8;
    if (t > (uint64_t)cpus)
        t = (uint64_t)cpus;
    return t ? (unsigned)t : 1;
}

/* tcgpu_scan(const scan_desc *desc, uint32_t n, scan_result *out, uint32_t
 * flags): for each of n chunks, whether any byte is non-zero and, with flags
 * bit 0 (SCAN_HASH), its device hash (else hash 0: zero detection stops at
 * the first non-zero byte), with bit 1 (SCAN_SCALAR) by the scalar reference
 * (tests). Device pointers are translated here, on the
 * stream's worker (which holds the device map), and hashed on the threads. */
SIMCUDA_KERNEL(tcgpu_scan)
{
    uint64_t desc_ptr = SIMCUDA_ARG(uint64_t, 0);
    uint32_t n = SIMCUDA_ARG(uint32_t, 1);
    uint64_t out_ptr = SIMCUDA_ARG(uint64_t, 2);
    uint32_t flags = SIMCUDA_ARG(uint32_t, 3);
    const struct scan_desc *d = k->dev(k, desc_ptr, (size_t)n * sizeof(*d));
    struct scan_result *out = k->dev(k, out_ptr, (size_t)n * sizeof(*out));
    const uint8_t **views = malloc((n ? n : 1) * sizeof(*views));
    struct share sh[8];
    pthread_t th[8];
    unsigned nt, started = 0;
    uint64_t bytes = 0;
    int wide = !(flags & 2);

    if (!d || !out || !views) {
        free(views);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (!(views[i] = k->dev(k, d[i].va, (size_t)d[i].len))) {
            free(views);
            return;
        }
        bytes += d[i].len;
    }
    nt = threads_for(bytes);
    for (unsigned t = 0; t < nt; t++)
        sh[t] = (struct share){ views, d, out, (uint32_t)((uint64_t)n * t / nt),
                                (uint32_t)((uint64_t)n * (t + 1) / nt), flags, wide, 0 };
    while (started + 1 < nt && pthread_create(&th[started], NULL, scan_share, &sh[started]) == 0)
        started++;
    for (unsigned t = started; t < nt; t++)   /* this thread takes the rest */
        scan_range(&sh[t]);
    for (unsigned t = 0; t < started; t++) {
        pthread_join(th[t], NULL);
        if (k->abi >= 2 && k->charge_cpu)
            k->charge_cpu(k, sh[t].cpu_ns);
    }
    free(views);
}
SIMCUDA_KERNEL_PARAMS(tcgpu_scan, sizeof(uint64_t), sizeof(uint32_t), sizeof(uint64_t),
                      sizeof(uint32_t));
