/*
 * test_collectives.c - N processes, one simulated GPU each: every collective
 * and send/recv pattern, checked against the same computation on the host
 * (reductions in rank order) byte for byte, and the same bytes on every rank
 * (each rank reports a hash of what all ranks must agree on).
 *
 * Usage: simnccl-test-collectives N (the test spawns its N ranks).
 * NCCL_BUFFSIZE is set small so that most operations take several steps.
 */
#include "ranks.h"

#include <math.h>

#define CNT_SMALL 1000
#define CNT_LARGE 40000     /* > several slots of 64 KiB for every type */

static int g_rank, g_n;
static ncclComm_t g_comm;
static CUstream g_s;
static uint64_t g_hash = T_HASH0;

/* --- host side of the data ---------------------------------------------------- */

static size_t esize(int t)
{
    static const size_t sz[] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2 };
    return sz[t];
}

/* Exact small values only (|v| < 2048, integers or halves of them). */
static uint16_t half_of(float f)
{
    int e;
    float m;
    uint16_t sign = f < 0 ? 0x8000 : 0;

    if (f == 0)
        return sign;
    m = frexpf(fabsf(f), &e);              /* f = m * 2^e, m in [0.5, 1) */
    return (uint16_t)(sign | ((e - 1 + 15) << 10) | ((uint32_t)(m * 2048) & 0x3ff));
}

static float float_of_half(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    float v = e ? ldexpf(1.0f + (h & 0x3ff) / 1024.0f, e - 15) : ldexpf((h & 0x3ff) / 1024.0f, -14);
    return h & 0x8000 ? -v : v;
}

static uint16_t bf16_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16);
}

static float float_of_bf16(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* Element i of rank r's input, written into p (type t). */
static void gen(int t, int r, size_t i, int salt, void *p)
{
    long iv = (long)((r * 37 + (long)i * 11 + salt * 5) % 17) - 8;      /* -8..8 */
    double fv = (r + 1) * 0.3711 + (double)i * 0.0137 + salt * 0.5;

    switch (t) {
    case ncclInt8: *(int8_t *)p = (int8_t)(iv * 9); break;
    case ncclUint8: *(uint8_t *)p = (uint8_t)(iv * 31 + 7); break;
    case ncclInt32: *(int32_t *)p = (int32_t)(iv * 100003); break;
    case ncclUint32: *(uint32_t *)p = (uint32_t)(iv * 2654435761u); break;
    case ncclInt64: *(int64_t *)p = iv * 1000000007LL; break;
    case ncclUint64: *(uint64_t *)p = (uint64_t)iv * 0x9e3779b97f4a7c15ull; break;
    case ncclFloat16: *(uint16_t *)p = half_of((float)iv); break;
    case ncclFloat32: *(float *)p = (float)fv; break;
    case ncclFloat64: *(double *)p = fv * 1.000001; break;
    case ncclBfloat16: *(uint16_t *)p = bf16_of((float)iv); break;
    }
}

static void *input(int t, int r, size_t cnt, int salt)
{
    unsigned char *p = malloc(cnt * esize(t) + 1);

    for (size_t i = 0; i < cnt; i++)
        gen(t, r, i, salt, p + i * esize(t));
    return p;
}

/* acc = acc op v; integer sums and products wrap (in the unsigned type U) */
#define FOLD(T, U, acc, v, op)                                                 \
    do {                                                                       \
        if ((op) == ncclSum || (op) == ncclAvg)                                \
            acc = (T)((U)(acc) + (U)(v));                                      \
        else if ((op) == ncclProd)                                             \
            acc = (T)((U)(acc) * (U)(v));                                      \
        else if ((op) == ncclMax ? !((acc) > (v)) : !((acc) < (v)))            \
            acc = (v);                                                         \
    } while (0)

#define REF(T, U)                                                             \
    for (size_t i = 0; i < cnt; i++) {                                       \
        T acc = ((T *)in[0])[i];                                             \
        for (int r = 1; r < g_n; r++)                                        \
            FOLD(T, U, acc, ((T *)in[r])[i], op);                         \
        if (op == ncclAvg)                                                   \
            acc = (T)(acc / (T)g_n);                                         \
        ((T *)out)[i] = acc;                                                 \
    }
#define REF16(TO, FROM)                                                      \
    for (size_t i = 0; i < cnt; i++) {                                       \
        float acc = TO(((uint16_t *)in[0])[i]);                              \
        for (int r = 1; r < g_n; r++)                                        \
            { float v_ = TO(((uint16_t *)in[r])[i]); FOLD(float, float, acc, v_, op); }                 \
        if (op == ncclAvg)                                                   \
            acc /= (float)g_n;                                               \
        ((uint16_t *)out)[i] = FROM(acc);                                    \
    }

/* out = in[0] op in[1] op ... in rank order. */
static void reference(int t, int op, size_t cnt, void **in, void *out)
{
    switch (t) {
    case ncclInt8: REF(int8_t, uint8_t); break;
    case ncclUint8: REF(uint8_t, uint8_t); break;
    case ncclInt32: REF(int32_t, uint32_t); break;
    case ncclUint32: REF(uint32_t, uint32_t); break;
    case ncclInt64: REF(int64_t, uint64_t); break;
    case ncclUint64: REF(uint64_t, uint64_t); break;
    case ncclFloat16: REF16(float_of_half, half_of); break;
    case ncclFloat32: REF(float, float); break;
    case ncclFloat64: REF(double, double); break;
    case ncclBfloat16: REF16(float_of_bf16, bf16_of); break;
    }
}

/* --- device helpers ---------------------------------------------------------- */

static CUdeviceptr dev_with(const void *host, size_t bytes)
{
    CUdeviceptr d;

    CU_OK(cuMemAlloc(&d, bytes ? bytes : 1));
    if (bytes && host)
        CU_OK(cuMemcpyHtoD(d, host, bytes));
    else
        CU_OK(cuMemsetD8(d, 0xee, bytes ? bytes : 1));
    return d;
}

static void *host_of(CUdeviceptr d, size_t bytes)
{
    void *h = malloc(bytes + 1);

    CU_OK(cuStreamSynchronize(g_s));
    CU_OK(cuMemcpyDtoH(h, d, bytes));
    return h;
}

static void expect_bytes(const void *got, const void *want, size_t bytes, const char *what, int t, int op)
{
    if (memcmp(got, want, bytes)) {
        size_t i = 0;
        while (((const unsigned char *)got)[i] == ((const unsigned char *)want)[i])
            i++;
        FAIL("rank %d: %s (type %d, op %d): byte %zu of %zu differs (%02x, want %02x)", g_rank, what,
             t, op, i, bytes, ((const unsigned char *)got)[i], ((const unsigned char *)want)[i]);
    }
}

/* --- the collectives ----------------------------------------------------------- */

static void allreduce(int t, int op, size_t cnt, int salt, bool in_place)
{
    void *in[64], *want = malloc(cnt * esize(t) + 1), *got;
    size_t bytes = cnt * esize(t);
    CUdeviceptr sb, rb;

    for (int r = 0; r < g_n; r++)
        in[r] = input(t, r, cnt, salt);
    reference(t, op, cnt, in, want);
    sb = dev_with(in[g_rank], bytes);
    rb = in_place ? sb : dev_with(NULL, bytes);
    NCCL_OK(ncclAllReduce((void *)sb, (void *)rb, cnt, t, op, g_comm, g_s));
    got = host_of(rb, bytes);
    expect_bytes(got, want, bytes, in_place ? "in-place AllReduce" : "AllReduce", t, op);
    g_hash = t_hash(g_hash, got, bytes);
    free(got);
    free(want);
    for (int r = 0; r < g_n; r++)
        free(in[r]);
    if (!in_place)
        cuMemFree(rb);
    cuMemFree(sb);
}

static void broadcast(int t, size_t cnt, int root, bool legacy)
{
    void *want = input(t, root, cnt, 3), *got;
    size_t bytes = cnt * esize(t);
    CUdeviceptr sb = dev_with(g_rank == root ? want : NULL, bytes), rb;

    if (legacy) {
        NCCL_OK(ncclBcast((void *)sb, cnt, t, root, g_comm, g_s));
        rb = sb;
    } else {
        rb = dev_with(NULL, bytes);
        NCCL_OK(ncclBroadcast((void *)sb, (void *)rb, cnt, t, root, g_comm, g_s));
    }
    got = host_of(rb, bytes);
    expect_bytes(got, want, bytes, legacy ? "Bcast" : "Broadcast", t, -1);
    g_hash = t_hash(g_hash, got, bytes);
    free(got);
    free(want);
    if (rb != sb)
        cuMemFree(rb);
    cuMemFree(sb);
}

static void reduce(int t, int op, size_t cnt, int root)
{
    void *in[64], *want = malloc(cnt * esize(t) + 1), *got;
    size_t bytes = cnt * esize(t);
    CUdeviceptr sb, rb;

    for (int r = 0; r < g_n; r++)
        in[r] = input(t, r, cnt, 4);
    reference(t, op, cnt, in, want);
    sb = dev_with(in[g_rank], bytes);
    rb = dev_with(NULL, bytes);
    NCCL_OK(ncclReduce((void *)sb, (void *)rb, cnt, t, op, root, g_comm, g_s));
    got = host_of(rb, bytes);
    if (g_rank == root) {
        expect_bytes(got, want, bytes, "Reduce at the root", t, op);
    } else {
        for (size_t i = 0; i < bytes; i++)
            if (((unsigned char *)got)[i] != 0xee)
                FAIL("rank %d: Reduce wrote a non-root's recvbuff at byte %zu", g_rank, i);
    }
    free(got);
    free(want);
    for (int r = 0; r < g_n; r++)
        free(in[r]);
    cuMemFree(rb);
    cuMemFree(sb);
}

static void allgather(int t, size_t cnt, bool in_place)
{
    size_t bytes = cnt * esize(t);
    unsigned char *want = malloc(bytes * g_n + 1), *got;
    CUdeviceptr sb, rb;

    for (int r = 0; r < g_n; r++) {
        void *in = input(t, r, cnt, 5);
        memcpy(want + r * bytes, in, bytes);
        free(in);
    }
    rb = dev_with(NULL, bytes * g_n);
    if (in_place) {
        sb = rb + g_rank * bytes;
        CU_OK(cuMemcpyHtoD(sb, want + g_rank * bytes, bytes));
    } else {
        sb = dev_with(want + g_rank * bytes, bytes);
    }
    NCCL_OK(ncclAllGather((void *)sb, (void *)rb, cnt, t, g_comm, g_s));
    got = host_of(rb, bytes * g_n);
    expect_bytes(got, want, bytes * g_n, in_place ? "in-place AllGather" : "AllGather", t, -1);
    g_hash = t_hash(g_hash, got, bytes * g_n);
    free(got);
    free(want);
    if (!in_place)
        cuMemFree(sb);
    cuMemFree(rb);
}

static void reducescatter(int t, int op, size_t cnt)
{
    size_t bytes = cnt * esize(t);
    void *in[64], *blocks[64], *want = malloc(bytes + 1), *got;
    CUdeviceptr sb, rb;

    for (int r = 0; r < g_n; r++) {
        in[r] = input(t, r, cnt * g_n, 6);
        blocks[r] = (unsigned char *)in[r] + g_rank * bytes;   /* my block of every rank */
    }
    reference(t, op, cnt, blocks, want);
    sb = dev_with(in[g_rank], bytes * g_n);
    rb = dev_with(NULL, bytes);
    NCCL_OK(ncclReduceScatter((void *)sb, (void *)rb, cnt, t, op, g_comm, g_s));
    got = host_of(rb, bytes);
    expect_bytes(got, want, bytes, "ReduceScatter", t, op);
    free(got);
    free(want);
    for (int r = 0; r < g_n; r++)
        free(in[r]);
    cuMemFree(rb);
    cuMemFree(sb);
}

/* Rank r's block for rank p of an exchange (AlltoAll, Gather, Scatter). */
static void *block_of(int t, int r, int p, size_t cnt, int salt)
{
    return input(t, r * 64 + p, cnt, salt);
}

/* ncclAlltoAll: my block p goes to rank p, rank p's block for me lands at
 * p * cnt. */
static void alltoall_coll(int t, size_t cnt)
{
    size_t bytes = cnt * esize(t);
    unsigned char *mine = malloc(bytes * g_n + 1), *want = malloc(bytes * g_n + 1), *got;
    CUdeviceptr sb, rb;

    for (int p = 0; p < g_n; p++) {
        void *b = block_of(t, g_rank, p, cnt, 11), *w = block_of(t, p, g_rank, cnt, 11);
        memcpy(mine + p * bytes, b, bytes);
        memcpy(want + p * bytes, w, bytes);
        free(b);
        free(w);
    }
    sb = dev_with(mine, bytes * g_n);
    rb = dev_with(NULL, bytes * g_n);
    NCCL_OK(ncclAlltoAll((void *)sb, (void *)rb, cnt, t, g_comm, g_s));
    got = host_of(rb, bytes * g_n);
    expect_bytes(got, want, bytes * g_n, "AlltoAll", t, -1);
    free(got);
    free(want);
    free(mine);
    cuMemFree(rb);
    cuMemFree(sb);
}

/* Bytes of recvbuff (from the device) are all 0xee: untouched. */
static void expect_untouched(CUdeviceptr d, size_t bytes, const char *what)
{
    unsigned char *got = host_of(d, bytes);

    for (size_t i = 0; i < bytes; i++)
        if (got[i] != 0xee)
            FAIL("rank %d: %s wrote byte %zu of a buffer it must not touch", g_rank, what, i);
    free(got);
}

/* ncclGather to root: rank p's block at p * cnt on root; the others give a
 * recvbuff that must stay untouched, or (null_elsewhere) none. */
static void gather(int t, size_t cnt, int root, bool null_elsewhere)
{
    size_t bytes = cnt * esize(t);
    unsigned char *want = malloc(bytes * g_n + 1), *got;
    CUdeviceptr sb, rb = 0;

    for (int p = 0; p < g_n; p++) {
        void *b = block_of(t, p, root, cnt, 12);
        memcpy(want + p * bytes, b, bytes);
        free(b);
    }
    sb = dev_with(want + g_rank * bytes, bytes);
    if (g_rank == root || !null_elsewhere)
        rb = dev_with(NULL, bytes * g_n);
    NCCL_OK(ncclGather((void *)sb, (void *)rb, cnt, t, root, g_comm, g_s));
    if (g_rank == root) {
        got = host_of(rb, bytes * g_n);
        expect_bytes(got, want, bytes * g_n, "Gather at the root", t, -1);
        free(got);
    } else if (rb) {
        expect_untouched(rb, bytes * g_n, "Gather on a non-root");
    }
    CU_OK(cuStreamSynchronize(g_s));
    free(want);
    if (rb)
        cuMemFree(rb);
    cuMemFree(sb);
}

/* ncclScatter from root: root's block p goes to rank p; the others give no
 * sendbuff. */
static void scatter(int t, size_t cnt, int root)
{
    size_t bytes = cnt * esize(t);
    unsigned char *all = malloc(bytes * g_n + 1), *got;
    CUdeviceptr sb = 0, rb;

    for (int p = 0; p < g_n; p++) {
        void *b = block_of(t, root, p, cnt, 13);
        memcpy(all + p * bytes, b, bytes);
        free(b);
    }
    if (g_rank == root)
        sb = dev_with(all, bytes * g_n);
    rb = dev_with(NULL, bytes);
    NCCL_OK(ncclScatter((void *)sb, (void *)rb, cnt, t, root, g_comm, g_s));
    got = host_of(rb, bytes);
    expect_bytes(got, all + g_rank * bytes, bytes, "Scatter", t, -1);
    free(got);
    free(all);
    cuMemFree(rb);
    if (sb)
        cuMemFree(sb);
}

/* The three in one group with an AllReduce, in NCCL's order on every rank:
 * each gets its own result, as alone. */
static void exchanges_in_group(size_t cnt)
{
    size_t bytes = cnt * 4;
    int root = g_n - 1;
    void *in[64], *sum = malloc(bytes), *got;
    unsigned char *a2a = malloc(bytes * g_n), *scat = malloc(bytes * g_n);
    CUdeviceptr ar, a2a_s, a2a_r, ga_s, ga_r, sc_s, sc_r;

    for (int r = 0; r < g_n; r++)
        in[r] = input(ncclFloat32, r, cnt, 14);
    reference(ncclFloat32, ncclSum, cnt, in, sum);
    for (int p = 0; p < g_n; p++) {
        void *b = block_of(ncclFloat32, g_rank, p, cnt, 15), *c = block_of(ncclFloat32, root, p, cnt, 16);
        memcpy(a2a + p * bytes, b, bytes);
        memcpy(scat + p * bytes, c, bytes);
        free(b);
        free(c);
    }
    ar = dev_with(in[g_rank], bytes);
    a2a_s = dev_with(a2a, bytes * g_n);
    a2a_r = dev_with(NULL, bytes * g_n);
    ga_s = dev_with(in[g_rank], bytes);
    ga_r = dev_with(NULL, bytes * g_n);
    sc_s = dev_with(scat, bytes * g_n);
    sc_r = dev_with(NULL, bytes);
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce((void *)ar, (void *)ar, cnt, ncclFloat32, ncclSum, g_comm, g_s));
    NCCL_OK(ncclAlltoAll((void *)a2a_s, (void *)a2a_r, cnt, ncclFloat32, g_comm, g_s));
    NCCL_OK(ncclGather((void *)ga_s, (void *)ga_r, cnt, ncclFloat32, 0, g_comm, g_s));
    NCCL_OK(ncclScatter((void *)sc_s, (void *)sc_r, cnt, ncclFloat32, root, g_comm, g_s));
    NCCL_OK(ncclGroupEnd());
    got = host_of(ar, bytes);
    expect_bytes(got, sum, bytes, "AllReduce in a group with AlltoAll, Gather, Scatter", ncclFloat32, ncclSum);
    free(got);
    got = host_of(a2a_r, bytes * g_n);
    for (int p = 0; p < g_n; p++) {
        void *w = block_of(ncclFloat32, p, g_rank, cnt, 15);
        expect_bytes((char *)got + p * bytes, w, bytes, "AlltoAll in a group", ncclFloat32, -1);
        free(w);
    }
    free(got);
    if (g_rank == 0) {
        got = host_of(ga_r, bytes * g_n);
        for (int p = 0; p < g_n; p++)
            expect_bytes((char *)got + p * bytes, in[p], bytes, "Gather in a group", ncclFloat32, -1);
        free(got);
    }
    got = host_of(sc_r, bytes);
    expect_bytes(got, scat + g_rank * bytes, bytes, "Scatter in a group", ncclFloat32, -1);
    free(got);
    for (int r = 0; r < g_n; r++)
        free(in[r]);
    free(sum);
    free(a2a);
    free(scat);
    CUdeviceptr bufs[] = { ar, a2a_s, a2a_r, ga_s, ga_r, sc_s, sc_r };
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        cuMemFree(bufs[i]);
}

/* What NCCL refuses: a root out of range, a buffer missing where it is
 * used, an AlltoAll in place. Refused on every rank alike, so no rank
 * waits for another. */
static void exchange_bad_arguments(void)
{
    CUdeviceptr a = dev_with(NULL, 4 * g_n), b = dev_with(NULL, 4 * g_n);

    NCCL_RES(ncclGather((void *)a, (void *)b, 1, ncclInt32, g_n, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclGather((void *)a, (void *)b, 1, ncclInt32, -1, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclScatter((void *)a, (void *)b, 1, ncclInt32, g_n, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclScatter((void *)a, (void *)b, 1, ncclInt32, -7, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclGather(NULL, (void *)b, 1, ncclInt32, 0, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclGather((void *)a, NULL, 1, ncclInt32, g_rank, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclScatter(NULL, (void *)b, 1, ncclInt32, g_rank, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclScatter((void *)a, NULL, 1, ncclInt32, 0, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclAlltoAll(NULL, (void *)b, 1, ncclInt32, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclAlltoAll((void *)a, NULL, 1, ncclInt32, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclAlltoAll((void *)a, (void *)a, 1, ncclInt32, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclAlltoAll((void *)a, (void *)b, 1, ncclFloat8e5m2, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclAlltoAll((void *)a, (void *)b, 1, ncclInt32, NULL, g_s), ncclInvalidArgument);
    NCCL_RES(ncclGather((void *)a, (void *)b, 1, ncclInt32, 0, NULL, g_s), ncclInvalidArgument);
    NCCL_RES(ncclScatter((void *)a, (void *)b, 1, ncclInt32, 0, NULL, g_s), ncclInvalidArgument);
    /* in a group, the refusal is the group's too, and nothing is issued */
    NCCL_OK(ncclGroupStart());
    NCCL_RES(ncclScatter((void *)a, (void *)b, 1, ncclInt32, g_n, g_comm, g_s), ncclInvalidArgument);
    NCCL_RES(ncclGroupEnd(), ncclInvalidArgument);
    cuMemFree(a);
    cuMemFree(b);
}

/* Every rank sends its block to every rank (itself too) in one group. */
static void alltoall(size_t cnt)
{
    size_t bytes = cnt * 4;
    CUdeviceptr sb, rb;
    unsigned char *mine = malloc(bytes * g_n), *got;

    for (int p = 0; p < g_n; p++) {
        void *b = input(ncclInt32, g_rank * 64 + p, cnt, 7);   /* my block for p */
        memcpy(mine + p * bytes, b, bytes);
        free(b);
    }
    sb = dev_with(mine, bytes * g_n);
    rb = dev_with(NULL, bytes * g_n);
    NCCL_OK(ncclGroupStart());
    for (int p = 0; p < g_n; p++) {
        NCCL_OK(ncclSend((void *)(sb + p * bytes), cnt, ncclInt32, p, g_comm, g_s));
        NCCL_OK(ncclRecv((void *)(rb + p * bytes), cnt, ncclInt32, p, g_comm, g_s));
    }
    NCCL_OK(ncclGroupEnd());
    got = host_of(rb, bytes * g_n);
    for (int p = 0; p < g_n; p++) {
        void *want = input(ncclInt32, p * 64 + g_rank, cnt, 7);
        expect_bytes(got + p * bytes, want, bytes, "all-to-all by Send/Recv", ncclInt32, -1);
        free(want);
    }
    free(got);
    free(mine);
    cuMemFree(rb);
    cuMemFree(sb);
}

/* A ring: send to the next rank, receive from the previous one, in a group;
 * with recv posted before send on odd ranks, to show the order in a group
 * does not matter. */
static void ring(size_t cnt)
{
    int next = (g_rank + 1) % g_n, prev = (g_rank + g_n - 1) % g_n;
    size_t bytes = cnt * 8;
    void *mine = input(ncclFloat64, g_rank, cnt, 8), *want = input(ncclFloat64, prev, cnt, 8), *got;
    CUdeviceptr sb = dev_with(mine, bytes), rb = dev_with(NULL, bytes);

    NCCL_OK(ncclGroupStart());
    if (g_rank & 1) {
        NCCL_OK(ncclRecv((void *)rb, cnt, ncclFloat64, prev, g_comm, g_s));
        NCCL_OK(ncclSend((void *)sb, cnt, ncclFloat64, next, g_comm, g_s));
    } else {
        NCCL_OK(ncclSend((void *)sb, cnt, ncclFloat64, next, g_comm, g_s));
        NCCL_OK(ncclRecv((void *)rb, cnt, ncclFloat64, prev, g_comm, g_s));
    }
    NCCL_OK(ncclGroupEnd());
    got = host_of(rb, bytes);
    expect_bytes(got, want, bytes, "ring of Send/Recv", ncclFloat64, -1);
    free(got);
    free(want);
    free(mine);
    cuMemFree(rb);
    cuMemFree(sb);
}

/* A plain pair outside any group: rank 0 sends, rank n-1 receives. */
static void pair(size_t cnt)
{
    size_t bytes = cnt * 2;
    void *data = input(ncclFloat16, 0, cnt, 9), *got;
    CUdeviceptr b = dev_with(g_rank == 0 ? data : NULL, bytes);

    if (g_rank == 0)
        NCCL_OK(ncclSend((void *)b, cnt, ncclFloat16, g_n - 1, g_comm, g_s));
    if (g_rank == g_n - 1) {
        NCCL_OK(ncclRecv((void *)b, cnt, ncclFloat16, 0, g_comm, g_s));
        got = host_of(b, bytes);
        expect_bytes(got, data, bytes, "Send then Recv", ncclFloat16, -1);
        free(got);
    }
    CU_OK(cuStreamSynchronize(g_s));
    free(data);
    cuMemFree(b);
}

/* Two collectives on two streams in one group. */
static void two_streams(void)
{
    CUstream s2;
    size_t cnt = 3000, bytes = cnt * 4;
    void *in[64], *want = malloc(bytes), *got;
    CUdeviceptr a, b, g;

    CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    for (int r = 0; r < g_n; r++)
        in[r] = input(ncclFloat32, r, cnt, 10);
    reference(ncclFloat32, ncclSum, cnt, in, want);
    a = dev_with(in[g_rank], bytes);
    b = dev_with(NULL, bytes);
    g = dev_with(NULL, bytes * g_n);
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce((void *)a, (void *)b, cnt, ncclFloat32, ncclSum, g_comm, g_s));
    NCCL_OK(ncclAllGather((void *)a, (void *)g, cnt, ncclFloat32, g_comm, s2));
    NCCL_OK(ncclGroupEnd());
    CU_OK(cuStreamSynchronize(s2));     /* s2 waits for the group's kernel */
    got = malloc(bytes * g_n);
    CU_OK(cuMemcpyDtoH(got, b, bytes));
    expect_bytes(got, want, bytes, "AllReduce of a two-stream group", ncclFloat32, ncclSum);
    CU_OK(cuMemcpyDtoH(got, g, bytes * g_n));
    for (int r = 0; r < g_n; r++)
        expect_bytes((char *)got + r * bytes, in[r], bytes, "AllGather of a two-stream group", ncclFloat32, -1);
    free(got);
    free(want);
    for (int r = 0; r < g_n; r++)
        free(in[r]);
    cuMemFree(a);
    cuMemFree(b);
    cuMemFree(g);
    CU_OK(cuStreamDestroy(s2));
}

/* ncclCommSplit: the last rank of more than two asks for none, the others
 * split by parity, ranked in reverse (key -rank); each group's all-reduce of
 * the old ranks gives their sum. Then everyone in one color by rank: the
 * world again, its all-reduce the sum of all ranks. */
static void split(void)
{
    int out = g_n > 2 ? g_n - 1 : -1, color = g_rank == out ? NCCL_SPLIT_NOCOLOR : g_rank % 2;
    int members = 0, above = 0, sum = 0, v, got;
    ncclComm_t sub;
    CUdeviceptr d;

    for (int r = 0; r < g_n; r++)
        if (r != out && r % 2 == g_rank % 2) {
            members++;
            sum += r;
            above += r > g_rank;
        }
    d = dev_with(&g_rank, sizeof(int));
    NCCL_OK(ncclCommSplit(g_comm, color, -g_rank, &sub, NULL));
    if (color == NCCL_SPLIT_NOCOLOR) {
        CHECK(sub == NULL);
    } else {
        NCCL_OK(ncclCommCount(sub, &v));
        CHECK_EQ(v, members);
        NCCL_OK(ncclCommUserRank(sub, &v));
        CHECK_EQ(v, above);
        NCCL_OK(ncclAllReduce((void *)d, (void *)d, 1, ncclInt32, ncclSum, sub, g_s));
        CU_OK(cuStreamSynchronize(g_s));
        CU_OK(cuMemcpyDtoH(&got, d, sizeof(got)));
        CHECK_EQ(got, sum);
        NCCL_OK(ncclCommDestroy(sub));
    }
    CU_OK(cuMemcpyHtoD(d, &g_rank, sizeof(int)));
    NCCL_OK(ncclCommSplit(g_comm, 0, g_rank, &sub, NULL));
    NCCL_OK(ncclCommUserRank(sub, &v));
    CHECK_EQ(v, g_rank);
    NCCL_OK(ncclAllReduce((void *)d, (void *)d, 1, ncclInt32, ncclSum, sub, g_s));
    CU_OK(cuStreamSynchronize(g_s));
    CU_OK(cuMemcpyDtoH(&got, d, sizeof(got)));
    CHECK_EQ(got, g_n * (g_n - 1) / 2);
    NCCL_OK(ncclCommDestroy(sub));
    CHECK_EQ(ncclCommSplit(g_comm, -5, 0, &sub, NULL), ncclInvalidArgument);
    cuMemFree(d);
}

static int rank_main(int rank, int n, const char *hex)
{
    ncclUniqueId id;
    int v;

    g_rank = rank;
    g_n = n;
    t_id_parse(hex, &id);
    t_rank_ctx(rank);
    NCCL_OK(ncclCommInitRank(&g_comm, n, id, rank));
    NCCL_OK(ncclCommCount(g_comm, &v));
    CHECK_EQ(v, n);
    NCCL_OK(ncclCommUserRank(g_comm, &v));
    CHECK_EQ(v, rank);
    NCCL_OK(ncclCommCuDevice(g_comm, &v));
    CHECK_EQ(v, rank);
    CU_OK(cuStreamCreate(&g_s, 0));

    for (int t = 0; t < ncclFloat8e4m3; t++)
        for (int op = 0; op < ncclNumOps; op++) {
            if ((t == ncclFloat16 || t == ncclBfloat16) && op == ncclProd)
                continue;   /* products of the test's values are not exact in 16 bits */
            allreduce(t, op, CNT_SMALL, t * 5 + op, false);
        }
    for (int t = 0; t < ncclFloat8e4m3; t++)
        allreduce(t, ncclSum, CNT_LARGE, t, false);
    allreduce(ncclFloat32, ncclSum, CNT_LARGE + 17, 1, true);
    allreduce(ncclFloat64, ncclMax, 0, 0, false);           /* count 0: nothing, no hang */
    broadcast(ncclInt32, CNT_LARGE, n - 1, false);
    broadcast(ncclFloat64, CNT_SMALL, 0, true);
    reduce(ncclFloat32, ncclSum, CNT_LARGE, 1 % n);
    reduce(ncclInt64, ncclMin, CNT_SMALL, 0);
    allgather(ncclInt64, CNT_SMALL, false);
    allgather(ncclUint8, CNT_LARGE, true);
    reducescatter(ncclFloat32, ncclSum, CNT_LARGE);
    reducescatter(ncclInt32, ncclMax, CNT_SMALL);
    reducescatter(ncclFloat64, ncclAvg, 5);
    pair(CNT_LARGE);
    ring(CNT_LARGE);
    alltoall(CNT_SMALL);
    {
        static const int types[] = { ncclInt8, ncclUint32, ncclInt64, ncclFloat16, ncclFloat64,
                                     ncclBfloat16 };
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
            int t = types[i];
            alltoall_coll(t, i % 2 ? CNT_LARGE : CNT_SMALL);
            gather(t, i % 2 ? CNT_SMALL : CNT_LARGE, (int)i % n, i % 3 == 0);
            scatter(t, i % 2 ? CNT_LARGE : CNT_SMALL, (int)(i + 1) % n);
        }
    }
    alltoall_coll(ncclFloat32, 0);                          /* count 0: nothing, no hang */
    alltoall_coll(ncclFloat32, 1);
    exchanges_in_group(CNT_LARGE);
    exchange_bad_arguments();
    two_streams();
    split();

    t_send(4, &g_hash, sizeof(g_hash));
    NCCL_OK(ncclCommFinalize(g_comm));
    NCCL_OK(ncclCommDestroy(g_comm));
    return 0;
}

int main(int argc, char **argv)
{
    struct t_rank ranks[8];
    uint64_t hash[8];
    ncclUniqueId id;
    int n, bad = 0;

    if (argc == 5 && !strcmp(argv[1], "rank"))
        return rank_main(atoi(argv[2]), atoi(argv[3]), argv[4]);
    n = argc > 1 ? atoi(argv[1]) : 2;
    CHECK(n >= 1 && n <= 8);
    t_machine("coll", n);
    setenv("NCCL_BUFFSIZE", "65536", 1);
    t_new_id(&id);
    for (int r = 0; r < n; r++)
        ranks[r] = t_spawn("rank", r, n, &id);
    for (int r = 0; r < n; r++)
        t_recv(ranks[r].from, &hash[r], sizeof(hash[r]));
    for (int r = 0; r < n; r++) {
        int st = t_wait(ranks[r].pid);
        if (st) {
            fprintf(stderr, "rank %d exited with %d\n", r, st);
            bad = 1;
        }
        if (hash[r] != hash[0]) {
            fprintf(stderr, "rank %d's results differ from rank 0's (%016llx, %016llx)\n", r,
                    (unsigned long long)hash[r], (unsigned long long)hash[0]);
            bad = 1;
        }
    }
    if (!bad)
        printf("%d ranks: every collective as computed on the host, the same bytes on every rank\n", n);
    return bad;
}
