/*
 * expandable - a PyTorch-shaped caching allocator on the driver's VMM API,
 * doing a little deterministic work, for suspends at the awkward moments.
 *
 *   expandable KERNELS.so [--steps N] [--seed S] [--think-ms MS]
 *              [--pause no-access|unmapped|created --go FILE] [--export 1]
 *
 * What it does, as PyTorch's expandable segments (and page pools such as
 * kvcached) do:
 *   - reserves one large VA range per stream ("segment"), maps 2 MiB pages
 *     into it as tensors need them: cuMemCreate + cuMemMap for every page of
 *     a run first, then cuMemSetAccess over the run (the state between the
 *     two is "no-access");
 *   - frees tensors into its own free list and, every few steps, empties the
 *     cache: pages with no live tensor are unmapped and released, leaving
 *     holes that later tensors map again;
 *   - parks a page now and then: fills it, unmaps it but keeps the handle
 *     ("unmapped"), and maps it again later, elsewhere, expecting its bytes;
 *     creates a handle before mapping it ("created");
 *   - takes scratch buffers from a memory pool of its own
 *     (cuMemAllocFromPoolAsync) on the second stream;
 *   - works on two streams ordered by events: stream A uploads tensors and
 *     mixes them into an accumulator (a kernel), stream B waits for A, copies
 *     the accumulator and mixes its scratch into a second one; A waits for B.
 * At every "no-access" moment it checks that cuMemGetAccess answers
 * PROT_NONE, and it sleeps --think-ms there (and while a page is parked or a
 * handle unmapped), so that suspends land in those states. --pause stops at
 * the first such state until FILE exists (for tests that act exactly there).
 *
 * Prints "checksum: HEX" of both accumulators and every parked page's bytes
 * at the end: the same with or without any suspend, resume or checkpoint.
 *
 * --export 1 also shares a page as NCCL's cuMem path does: created with
 * POSIX file-descriptor handles, exported, imported again from the
 * descriptor and mapped at a second address, where its bytes must show
 * (prints "exported"). No tool can carry that across a suspend, so tcgpu
 * must refuse every one, naming the export, and the job runs on.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda.h>

#include "check.h"

#define PAGE (2u << 20)
#define SEG_PAGES 48                  /* 96 MiB of VA per segment */
#define MAX_TENSORS 64
#define ACC_WORDS (256u << 10)        /* 1 MiB accumulators */
#define NPIN 3                        /* tensors 0..2: the accumulators, never freed */

struct segment {
    CUdeviceptr base;
    CUmemGenericAllocationHandle handle[SEG_PAGES];   /* 0: page not mapped */
};

struct tensor {
    size_t off, len;                  /* in segment A; len 0: free slot */
};

static struct {
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
    CUstream sa, sb;
    CUevent ea, eb;
    CUmemoryPool pool;
    CUfunction mix;
    struct segment seg;
    struct tensor t[MAX_TENSORS];
    CUdeviceptr acc, acc2, snap;
    uint64_t rng;
    unsigned think_ms;
    const char *pause, *go;
    int paused;
    unsigned step;                    /* the step being run (0: setting up) */
    uint64_t parked_sum;              /* of every parked page's contents, as read back */
} g;

static uint64_t rnd(void)
{
    g.rng ^= g.rng << 13;
    g.rng ^= g.rng >> 7;
    g.rng ^= g.rng << 17;
    return g.rng;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* An awkward moment: think, or stop here the first time if asked to. */
static void moment(const char *state)
{
    if (g.pause && !g.paused && g.step >= 3 && !strcmp(g.pause, state)) {
        g.paused = 1;
        printf("paused %s\n", state);
        fflush(stdout);
        for (int i = 0; i < 60000 && access(g.go, F_OK) != 0; i++)
            sleep_ms(1);
        return;
    }
    if (g.think_ms)
        sleep_ms(g.think_ms);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void launch_mix(CUstream s, CUdeviceptr dst, CUdeviceptr src, uint64_t words, uint32_t seed)
{
    void *args[] = { &dst, &src, &words, &seed };

    cu(cuLaunchKernel(g.mix, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), "cuLaunchKernel(mix)");
}

/* --- the segment: pages mapped as tensors need them ------------------------- */

static void require_no_access(CUdeviceptr va)
{
    unsigned long long flags = 99;

    cu(cuMemGetAccess(&flags, &g.prop.location, va), "cuMemGetAccess");
    CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE, "a page mapped without access answers %llu", flags);
}

/* Maps pages [first, first+n): every handle created and mapped, then access for the run. */
static void map_run(int first, int n)
{
    for (int i = first; i < first + n; i++) {
        cu(cuMemCreate(&g.seg.handle[i], PAGE, &g.prop, 0), "cuMemCreate");
        cu(cuMemMap(g.seg.base + (size_t)i * PAGE, PAGE, 0, g.seg.handle[i], 0), "cuMemMap");
    }
    require_no_access(g.seg.base + (size_t)first * PAGE);
    moment("no-access");
    require_no_access(g.seg.base + (size_t)first * PAGE);
    cu(cuMemSetAccess(g.seg.base + (size_t)first * PAGE, (size_t)n * PAGE, &g.access, 1),
       "cuMemSetAccess");
}

/* Every page of [off, off+len) mapped, a run at a time. */
static void ensure_mapped(size_t off, size_t len)
{
    int first = (int)(off / PAGE), last = (int)((off + len - 1) / PAGE);

    for (int i = first; i <= last;) {
        int j = i;
        if (g.seg.handle[i]) {
            i++;
            continue;
        }
        while (j <= last && !g.seg.handle[j])
            j++;
        map_run(i, j - i);
        i = j;
    }
}

static int page_used(int p)
{
    size_t lo = (size_t)p * PAGE, hi = lo + PAGE;

    for (int i = 0; i < MAX_TENSORS; i++)
        if (g.t[i].len && g.t[i].off < hi && g.t[i].off + g.t[i].len > lo)
            return 1;
    return 0;
}

/* emptyCache: pages no tensor uses go back (unmap, release); holes stay. */
static void empty_cache(void)
{
    cu(cuStreamSynchronize(g.sa), "cuStreamSynchronize");
    cu(cuStreamSynchronize(g.sb), "cuStreamSynchronize");
    for (int p = 0; p < SEG_PAGES; p++) {
        if (!g.seg.handle[p] || page_used(p))
            continue;
        cu(cuMemUnmap(g.seg.base + (size_t)p * PAGE, PAGE), "cuMemUnmap");
        cu(cuMemRelease(g.seg.handle[p]), "cuMemRelease");
        g.seg.handle[p] = 0;
    }
}

/* --- tensors ---------------------------------------------------------------- */

/* First fit over the segment's offsets (512-byte aligned); -1 when full. */
static int tensor_new(size_t len)
{
    size_t off = 0;
    int slot = -1;

    len = (len + 511) & ~(size_t)511;
    for (int i = 0; i < MAX_TENSORS && slot < 0; i++)
        if (!g.t[i].len)
            slot = i;
    if (slot < 0)
        return -1;
    for (;;) {
        int moved = 0;
        for (int i = 0; i < MAX_TENSORS; i++) {
            if (g.t[i].len && g.t[i].off < off + len && g.t[i].off + g.t[i].len > off) {
                off = g.t[i].off + g.t[i].len;
                moved = 1;
            }
        }
        if (!moved)
            break;
    }
    if (off + len > (size_t)SEG_PAGES * PAGE)
        return -1;
    ensure_mapped(off, len);
    g.t[slot] = (struct tensor){ off, len };
    return slot;
}

static CUdeviceptr tensor_ptr(int i)
{
    return g.seg.base + g.t[i].off;
}

/* A tensor of deterministic bytes, uploaded and mixed into the accumulator on A. */
static void step_tensor(unsigned step)
{
    size_t len = 4096 + (size_t)(rnd() % (6u << 20));
    int i = tensor_new(len);
    uint32_t *h;
    size_t words;

    if (i < 0)
        return;
    words = g.t[i].len / 4;
    h = malloc(g.t[i].len);
    if (!h) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (size_t w = 0; w < words; w++)
        h[w] = (uint32_t)(step * 2654435761u) ^ (uint32_t)w;
    /* legacy-stream copy: waits for A's earlier use of this memory */
    cu(cuMemcpyHtoD(tensor_ptr(i), h, g.t[i].len), "cuMemcpyHtoD");
    free(h);
    launch_mix(g.sa, g.acc, tensor_ptr(i), words < ACC_WORDS ? words : ACC_WORDS, step);
}

static void free_some(void)
{
    for (int i = NPIN; i < MAX_TENSORS; i++)
        if (g.t[i].len && rnd() % 3 == 0)
            g.t[i].len = 0;           /* back to the allocator; A may still read it */
}

/* --- a parked page: content kept in a handle with no mapping --------------- */

static void park_page(unsigned step)
{
    CUmemGenericAllocationHandle h;
    CUdeviceptr where;
    uint32_t *back;
    int slot;

    cu(cuMemCreate(&h, PAGE, &g.prop, 0), "cuMemCreate");
    moment("created");
    /* Fill it through a page of the segment's free VA at the top. */
    where = g.seg.base + (size_t)(SEG_PAGES - 1) * PAGE;
    if (g.seg.handle[SEG_PAGES - 1] || page_used(SEG_PAGES - 1)) {
        cu(cuMemRelease(h), "cuMemRelease");
        return;
    }
    cu(cuMemMap(where, PAGE, 0, h, 0), "cuMemMap");
    cu(cuMemSetAccess(where, PAGE, &g.access, 1), "cuMemSetAccess");
    cu(cuMemsetD32(where, 0x9e3779b9u * step, PAGE / 4), "cuMemsetD32");
    cu(cuMemsetD32(where + PAGE / 2, step, PAGE / 8), "cuMemsetD32");
    cu(cuCtxSynchronize(), "cuCtxSynchronize");
    cu(cuMemUnmap(where, PAGE), "cuMemUnmap");
    moment("unmapped");
    /* Back, somewhere else: a fresh tensor's place, as a page pool reuses it. */
    slot = tensor_new(PAGE);
    if (slot < 0 || g.t[slot].off % PAGE) {
        if (slot >= 0)
            g.t[slot].len = 0;
        where = g.seg.base + (size_t)(SEG_PAGES - 1) * PAGE;
        slot = -1;
    } else {
        int p = (int)(g.t[slot].off / PAGE);
        /* the tensor's page was just mapped for it: hand it the parked one */
        cu(cuStreamSynchronize(g.sa), "cuStreamSynchronize");
        cu(cuMemUnmap(g.seg.base + (size_t)p * PAGE, PAGE), "cuMemUnmap");
        cu(cuMemRelease(g.seg.handle[p]), "cuMemRelease");
        g.seg.handle[p] = h;
        where = g.seg.base + (size_t)p * PAGE;
    }
    cu(cuMemMap(where, PAGE, 0, h, 0), "cuMemMap");
    cu(cuMemSetAccess(where, PAGE, &g.access, 1), "cuMemSetAccess");
    back = malloc(PAGE);
    if (!back) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    cu(cuMemcpyDtoH(back, where, PAGE), "cuMemcpyDtoH");
    CHECK(back[0] == 0x9e3779b9u * step && back[PAGE / 8] == step &&
          back[PAGE / 4 - 1] == step,
          "a parked page came back with other bytes (step %u: %#x %#x)", step, back[0],
          back[PAGE / 8]);
    g.parked_sum = fnv(g.parked_sum, back, PAGE);
    free(back);
    if (slot < 0) {
        cu(cuMemUnmap(where, PAGE), "cuMemUnmap");
        cu(cuMemRelease(h), "cuMemRelease");
    } else {
        launch_mix(g.sa, g.acc, where, ACC_WORDS / 4, step);   /* the tensor holds it now */
    }
}

/* --- stream B: pool scratch, the accumulator copied after A --------------- */

static void step_b(unsigned step)
{
    CUdeviceptr scratch;

    cu(cuEventRecord(g.ea, g.sa), "cuEventRecord");
    cu(cuStreamWaitEvent(g.sb, g.ea, 0), "cuStreamWaitEvent");
    cu(cuMemcpyDtoDAsync(g.snap, g.acc, ACC_WORDS * 4, g.sb), "cuMemcpyDtoDAsync");
    cu(cuMemAllocFromPoolAsync(&scratch, 64 << 10, g.pool, g.sb), "cuMemAllocFromPoolAsync");
    cu(cuMemsetD32Async(scratch, step * 7u + 1, (64 << 10) / 4, g.sb), "cuMemsetD32Async");
    launch_mix(g.sb, g.acc2, scratch, (64 << 10) / 4, step);
    launch_mix(g.sb, g.acc2, g.snap, ACC_WORDS, step);
    cu(cuMemFreeAsync(scratch, g.sb), "cuMemFreeAsync");
    cu(cuEventRecord(g.eb, g.sb), "cuEventRecord");
    cu(cuStreamWaitEvent(g.sa, g.eb, 0), "cuStreamWaitEvent");
}

static void setup(const char *kernels)
{
    CUmemPoolProps pp = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                          .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    CUcontext ctx;
    CUmodule mod;
    int a;

    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    cu(cuModuleLoad(&mod, kernels), "cuModuleLoad");
    cu(cuModuleGetFunction(&g.mix, mod, "mix"), "cuModuleGetFunction");
    g.prop = (CUmemAllocationProp){ .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    g.access = (CUmemAccessDesc){ .location = g.prop.location,
                                  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    cu(cuMemAddressReserve(&g.seg.base, (size_t)SEG_PAGES * PAGE, 0, 0, 0), "cuMemAddressReserve");
    cu(cuStreamCreate(&g.sa, 0), "cuStreamCreate");
    cu(cuStreamCreate(&g.sb, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    cu(cuEventCreate(&g.ea, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    cu(cuEventCreate(&g.eb, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    cu(cuMemPoolCreate(&g.pool, &pp), "cuMemPoolCreate");
    /* The accumulators live in the segment too, never freed. */
    a = tensor_new(ACC_WORDS * 4);
    g.acc = tensor_ptr(a);
    a = tensor_new(ACC_WORDS * 4);
    g.acc2 = tensor_ptr(a);
    a = tensor_new(ACC_WORDS * 4);
    g.snap = tensor_ptr(a);
    cu(cuMemsetD32(g.acc, 1, ACC_WORDS), "cuMemsetD32");
    cu(cuMemsetD32(g.acc2, 2, ACC_WORDS), "cuMemsetD32");
}

/* --export: one page shared with ourselves through a descriptor. */
static void export_page(void)
{
    CUmemAllocationProp prop = g.prop;
    CUmemGenericAllocationHandle h, imported;
    CUdeviceptr va, alias;
    uint32_t seen[4];
    int fd = -1;

    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    cu(cuMemCreate(&h, PAGE, &prop, 0), "cuMemCreate (exportable)");
    cu(cuMemAddressReserve(&va, 2 * (size_t)PAGE, 0, 0, 0), "cuMemAddressReserve");
    cu(cuMemMap(va, PAGE, 0, h, 0), "cuMemMap");
    cu(cuMemSetAccess(va, PAGE, &g.access, 1), "cuMemSetAccess");
    cu(cuMemsetD32(va, 0x5eed0001, PAGE / 4), "cuMemsetD32");
    cu(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
       "cuMemExportToShareableHandle");
    cu(cuMemImportFromShareableHandle(&imported, (void *)(intptr_t)fd,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
       "cuMemImportFromShareableHandle");
    close(fd);
    alias = va + PAGE;
    cu(cuMemMap(alias, PAGE, 0, imported, 0), "cuMemMap (imported)");
    cu(cuMemSetAccess(alias, PAGE, &g.access, 1), "cuMemSetAccess (imported)");
    cu(cuMemcpyDtoH(seen, alias + PAGE - sizeof(seen), sizeof(seen)), "cuMemcpyDtoH");
    for (unsigned i = 0; i < 4; i++) {
        if (seen[i] != 0x5eed0001) {
            fprintf(stderr, "the imported page shows %08x, not the exporter's bytes\n", seen[i]);
            exit(1);
        }
    }
    cu(cuMemRelease(imported), "cuMemRelease (imported)");
    cu(cuMemRelease(h), "cuMemRelease");
    printf("exported\n");
    fflush(stdout);
}

static uint64_t checksum(void)
{
    uint32_t *h = malloc(ACC_WORDS * 4);
    uint64_t sum = 0xcbf29ce484222325ull;

    if (!h) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    cu(cuCtxSynchronize(), "cuCtxSynchronize");
    cu(cuMemcpyDtoH(h, g.acc, ACC_WORDS * 4), "cuMemcpyDtoH");
    sum = fnv(sum, h, ACC_WORDS * 4);
    cu(cuMemcpyDtoH(h, g.acc2, ACC_WORDS * 4), "cuMemcpyDtoH");
    sum = fnv(sum, h, ACC_WORDS * 4);
    free(h);
    return fnv(sum, &g.parked_sum, sizeof(g.parked_sum));
}

int main(int argc, char **argv)
{
    unsigned steps = 120;
    int export = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: expandable KERNELS.so [--steps N] [--seed S] [--think-ms MS] "
                        "[--pause STATE --go FILE] [--export 1]\n");
        return 2;
    }
    g.rng = 88172645463325252ull;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps"))
            steps = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--seed"))
            g.rng ^= strtoull(argv[i + 1], NULL, 10) * 0x9e3779b97f4a7c15ull;
        else if (!strcmp(argv[i], "--think-ms"))
            g.think_ms = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--pause"))
            g.pause = argv[i + 1];
        else if (!strcmp(argv[i], "--go"))
            g.go = argv[i + 1];
        else if (!strcmp(argv[i], "--export"))
            export = atoi(argv[i + 1]);
    }
    if (g.pause && !g.go) {
        fprintf(stderr, "--pause needs --go FILE\n");
        return 2;
    }
    setup(argv[1]);
    if (export)
        export_page();
    for (unsigned step = 1; step <= steps; step++) {
        g.step = step;
        step_tensor(step);
        if (rnd() % 2)
            step_tensor(step + 1000);
        step_b(step);
        free_some();
        if (step % 9 == 4)
            empty_cache();
        if (step % 13 == 6)
            park_page(step);
        if (step % 20 == 0) {
            printf("step %u\n", step);
            fflush(stdout);
        }
    }
    printf("checksum: %016llx\n", (unsigned long long)checksum());
    return T_EXIT_STATUS();
}
