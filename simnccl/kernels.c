/*
 * kernels.c - simnccl's device code: the module libnccl loads into every
 * communicator's context (simcuda_kernel.h says how kernels run on simcuda).
 *
 * One kernel, simnccl_kernel, runs the operations of one launch in order
 * (send/recv operations that follow each other progress together, as in a
 * group). A collective moves in steps of one slot: every rank waits until all
 * ranks read the previous step, writes its contribution into its own slot,
 * publishes the step, waits until every rank published it, copies the slots
 * it needs into its receive buffer (device memory) and reduces from there in
 * rank order, so every rank computes the same bytes. A send/recv uses the
 * slot of its pair of ranks, one step at a time.
 *
 * With a proxy (NCCL_SHM_USE_CUDA_MEMCPY=1), what a rank sends goes into its
 * staging buffer in device memory instead, and the library's proxy thread
 * copies it into the shared slot (cuMemcpyDtoHAsync) and publishes it.
 *
 * A rank that never issues its part leaves the others waiting here, as on a
 * GPU. Waiting sleeps on a futex word (the bell) that every publish rings,
 * with a short timeout, and ends early when this rank's communicator is
 * aborted (the kernel then returns with its work undone).
 */
#include "simcuda_kernel.h"
#include "work.h"

#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define WAIT_NS 2000000L          /* re-check the abort flag this often */

struct kx {
    const simcuda_kernel_ctx *k;
    const struct snccl_devcomm *dc;
    uint32_t n, rank;
    uint32_t *bell;
    struct snccl_rank_ctr *rc;
    struct snccl_pair_ctr *pc;
    unsigned char *devbuf;
    bool stop;                    /* aborted or faulted: return */
};

/* --- waiting and publishing ------------------------------------------------ */

static void bell_wait(struct kx *x, uint32_t seen)
{
    struct timespec ts = { 0, WAIT_NS };

    syscall(SYS_futex, x->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static void publish(struct kx *x, uint64_t *ctr, uint64_t v)
{
    __atomic_store_n(ctr, v, __ATOMIC_RELEASE);
    __atomic_add_fetch(x->bell, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, x->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static bool aborted(struct kx *x)
{
    if (__atomic_load_n(&x->rc[x->rank].abort, __ATOMIC_ACQUIRE))
        x->stop = true;
    return x->stop;
}

/* Every rank's counter (posted or consumed) has reached v. */
static bool all_reached(struct kx *x, bool posted, uint64_t v)
{
    for (uint32_t r = 0; r < x->n; r++) {
        uint64_t *c = posted ? &x->rc[r].posted : &x->rc[r].consumed;

        if (__atomic_load_n(c, __ATOMIC_ACQUIRE) < v)
            return false;
    }
    return true;
}

/* Sleeps until all_reached(posted, v) or abort; false on abort. */
static bool wait_all(struct kx *x, bool posted, uint64_t v)
{
    for (;;) {
        uint32_t seen = __atomic_load_n(x->bell, __ATOMIC_ACQUIRE);

        if (all_reached(x, posted, v))
            return true;
        if (aborted(x))
            return false;
        bell_wait(x, seen);
    }
}

/* --- views ------------------------------------------------------------------- */

static void *view(struct kx *x, uint64_t ptr, uint64_t bytes)
{
    void *v;

    if (!bytes)
        return NULL;
    if (!(v = x->k->dev(x->k, ptr, bytes)))
        x->stop = true;          /* faulted: the launch reports it */
    return v;
}

static unsigned char *coll_slot(struct kx *x, uint32_t r)
{
    return view(x, x->dc->table[r], x->dc->slot_bytes);
}

static unsigned char *p2p_slot(struct kx *x, uint32_t src, uint32_t dst)
{
    return view(x, x->dc->table[x->n + src * x->n + dst], x->dc->slot_bytes);
}

static unsigned char *row(struct kx *x, uint32_t r)
{
    return x->devbuf + (uint64_t)r * x->dc->slot_bytes;
}

/* Where this rank's part goes: its collective slot (to peer -1) or its slot
 * towards peer; with a proxy, the matching part of the staging buffer. */
static unsigned char *outbox(struct kx *x, int peer)
{
    if (x->dc->proxy)
        return row(x, x->n + 1 + (uint32_t)peer);   /* stage[0] is row n */
    return peer < 0 ? coll_slot(x, x->rank) : p2p_slot(x, x->rank, (uint32_t)peer);
}

/* Step s of what this rank sends is in its outbox (len bytes): published, or
 * handed to the proxy. */
static void send_step(struct kx *x, uint64_t *ctr, uint64_t *staged, uint64_t *staged_len,
                      uint64_t s, uint64_t len)
{
    if (x->dc->proxy) {
        __atomic_store_n(staged_len, len, __ATOMIC_RELAXED);
        publish(x, staged, s);
    } else {
        publish(x, ctr, s);
    }
}

/* --- element types and reductions ------------------------------------------ */

static size_t elem_size(unsigned dtype)
{
    static const unsigned char sz[] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2 };

    return dtype < sizeof(sz) ? sz[dtype] : 0;
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    float f;

    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else {
        f = ldexpf((float)man, -24);
        return sign ? -f : f;
    }
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even, as a GPU's conversion does. */
static uint16_t float_to_half(float f)
{
    uint32_t x, sign, man;
    int exp;

    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000;
    exp = (int)((x >> 23) & 0xff) - 127 + 15;
    man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff)
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 0x1f)
        return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp), h = man >> shift, rem = man & ((1u << shift) - 1),
                 half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++;                      /* may carry into the exponent: still right */
    return (uint16_t)h;
}

static float bf16_to_float(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;

    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t float_to_bf16(float f)
{
    uint32_t x;

    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* acc = acc op v; sums and products of integers wrap as on a GPU (done in
 * the unsigned type U: no undefined overflow here). */
#define FOLD(T, U, acc, v, op)                                                 \
    do {                                                                       \
        if ((op) == 0 || (op) == 4)                                            \
            acc = (T)((U)(acc) + (U)(v));                                      \
        else if ((op) == 1)                                                    \
            acc = (T)((U)(acc) * (U)(v));                                      \
        else if ((op) == 2 ? !((acc) > (v)) : !((acc) < (v)))                  \
            acc = (v);                                                         \
    } while (0)

/* dst[i] = src_0[i] op src_1[i] op ... in rank order, over the rows of the
 * receive buffer; avg divides the sum by n. */
#define REDUCE_T(T, U)                                                          \
    for (uint64_t i = 0; i < cnt; i++) {                                       \
        T acc;                                                                 \
        memcpy(&acc, row(x, 0) + i * sizeof(T), sizeof(T));                    \
        for (uint32_t r = 1; r < x->n; r++) {                                  \
            T v;                                                               \
            memcpy(&v, row(x, r) + i * sizeof(T), sizeof(T));                  \
            FOLD(T, U, acc, v, op);                                      \
        }                                                                      \
        if (op == 4)                                                           \
            acc = (T)(acc / (T)x->n);                                          \
        memcpy(dst + i * sizeof(T), &acc, sizeof(T));                          \
    }

#define REDUCE_16(TO_F, FROM_F)                                                \
    for (uint64_t i = 0; i < cnt; i++) {                                       \
        uint16_t h;                                                            \
        float acc;                                                             \
        memcpy(&h, row(x, 0) + i * 2, 2);                                      \
        acc = TO_F(h);                                                         \
        for (uint32_t r = 1; r < x->n; r++) {                                  \
            memcpy(&h, row(x, r) + i * 2, 2);                                  \
            float v = TO_F(h);                                                 \
            FOLD(float, float, acc, v, op);                                     \
        }                                                                      \
        if (op == 4)                                                           \
            acc /= (float)x->n;                                                \
        h = FROM_F(acc);                                                       \
        memcpy(dst + i * 2, &h, 2);                                            \
    }

static void reduce_rows(struct kx *x, unsigned dtype, unsigned op, unsigned char *dst, uint64_t cnt)
{
    switch (dtype) {
    case 0: REDUCE_T(int8_t, uint8_t); break;
    case 1: REDUCE_T(uint8_t, uint8_t); break;
    case 2: REDUCE_T(int32_t, uint32_t); break;
    case 3: REDUCE_T(uint32_t, uint32_t); break;
    case 4: REDUCE_T(int64_t, uint64_t); break;
    case 5: REDUCE_T(uint64_t, uint64_t); break;
    case 6: REDUCE_16(half_to_float, float_to_half); break;
    case 7: REDUCE_T(float, float); break;
    case 8: REDUCE_T(double, double); break;
    case 9: REDUCE_16(bf16_to_float, float_to_bf16); break;
    }
}

/* --- collectives ----------------------------------------------------------- */

/* My contribution to step i (elements [off, off + c) of each block); the
 * bytes of the slot it uses. */
static uint64_t contribute(struct kx *x, const struct snccl_op *op, uint64_t off, uint64_t c,
                           uint64_t chunk, size_t es)
{
    unsigned char *mine = outbox(x, -1), *src;

    if (!mine || !c)
        return 0;
    switch (op->kind) {
    case SNCCL_BROADCAST:
        if ((uint32_t)op->peer != x->rank)
            return 0;
        /* fall through */
    case SNCCL_ALLREDUCE:
    case SNCCL_REDUCE:
    case SNCCL_ALLGATHER:
    case SNCCL_GATHER:
        if ((src = view(x, op->sendbuff + off * es, c * es)))
            memcpy(mine, src, c * es);
        return c * es;
    case SNCCL_SCATTER:
        if ((uint32_t)op->peer != x->rank)
            return 0;
        /* fall through */
    case SNCCL_REDUCESCATTER:
    case SNCCL_ALLTOALL:
        /* block b of the slot: what rank b takes */
        for (uint32_t b = 0; b < x->n; b++)
            if ((src = view(x, op->sendbuff + ((uint64_t)b * op->count + off) * es, c * es)))
                memcpy(mine + (uint64_t)b * chunk * es, src, c * es);
        return (uint64_t)(x->n - 1) * chunk * es + c * es;
    }
    return 0;
}

/* bytes from rank r's slot, at byte at, into row r of the receive buffer
 * (every byte a rank receives passes through it), then to device address
 * dst. */
static void take(struct kx *x, uint32_t r, uint64_t at, uint64_t dst, uint64_t bytes)
{
    unsigned char *s, *d;

    if ((s = coll_slot(x, r)) && (d = view(x, dst, bytes))) {
        memcpy(row(x, r), s + at, bytes);
        memcpy(d, row(x, r), bytes);
    }
}

/* Every rank's part of step i, from byte at of its slot, to its place in
 * recvbuff: rank r's elements [off, off + c) at r * count + off. */
static void take_each(struct kx *x, const struct snccl_op *op, uint64_t at, uint64_t off, uint64_t c,
                      size_t es)
{
    for (uint32_t r = 0; r < x->n && !x->stop; r++)
        take(x, r, at, op->recvbuff + ((uint64_t)r * op->count + off) * es, c * es);
}

/* Every slot's part of step i into the receive buffer, then the result out. */
static void collect(struct kx *x, const struct snccl_op *op, uint64_t off, uint64_t c,
                    uint64_t chunk, size_t es)
{
    unsigned char *s, *dst;
    uint32_t root = (uint32_t)op->peer;
    uint64_t my_block = (uint64_t)x->rank * chunk * es;

    if (!c)
        return;
    switch (op->kind) {
    case SNCCL_BROADCAST:
        take(x, root, 0, op->recvbuff + off * es, c * es);
        break;
    case SNCCL_SCATTER:
        take(x, root, my_block, op->recvbuff + off * es, c * es);
        break;
    case SNCCL_REDUCE:
        if (x->rank != root)
            break;
        /* fall through */
    case SNCCL_ALLREDUCE:
    case SNCCL_REDUCESCATTER:
        for (uint32_t r = 0; r < x->n && !x->stop; r++)
            if ((s = coll_slot(x, r)))
                memcpy(row(x, r), s + (op->kind == SNCCL_REDUCESCATTER ? my_block : 0), c * es);
        if (!x->stop && (dst = view(x, op->recvbuff + off * es, c * es)))
            reduce_rows(x, op->dtype, op->redop, dst, c);
        break;
    case SNCCL_GATHER:
        if (x->rank != root)
            break;
        /* fall through */
    case SNCCL_ALLGATHER:
        take_each(x, op, 0, off, c, es);
        break;
    case SNCCL_ALLTOALL:
        take_each(x, op, my_block, off, c, es);
        break;
    }
}

static void run_collective(struct kx *x, const struct snccl_op *op)
{
    size_t es = elem_size(op->dtype);
    uint64_t chunk = x->dc->slot_bytes / es;

    if (snccl_blocked(op->kind))
        chunk /= x->n;
    for (uint64_t off = 0, s = op->step + 1; off < op->count && !x->stop; off += chunk, s++) {
        uint64_t c = op->count - off < chunk ? op->count - off : chunk;

        struct snccl_rank_ctr *me = &x->rc[x->rank];

        if (!wait_all(x, false, s - 1))
            return;
        SNCCL_TSAN_ACQUIRE(&me->staged);
        send_step(x, &me->posted, &me->staged, &me->staged_len, s,
                  contribute(x, op, off, c, chunk, es));
        if (!wait_all(x, true, s))
            return;
        collect(x, op, off, c, chunk, es);
        publish(x, &x->rc[x->rank].consumed, s);
    }
}

/* --- send / recv ----------------------------------------------------------- */

/* One step of op if its peer is ready; true if it moved. */
static bool p2p_step(struct kx *x, const struct snccl_op *op, uint64_t *done)
{
    size_t es = elem_size(op->dtype);
    uint64_t chunk = x->dc->slot_bytes / es, off = *done * chunk, s = op->step + *done + 1;
    uint64_t c = op->count - off < chunk ? op->count - off : chunk;
    uint32_t peer = (uint32_t)op->peer;
    unsigned char *slot, *buf;

    if (op->kind == SNCCL_SEND) {
        struct snccl_pair_ctr *p = &x->pc[x->rank * x->n + peer];

        if (__atomic_load_n(&p->acked, __ATOMIC_ACQUIRE) < s - 1)
            return false;
        SNCCL_TSAN_ACQUIRE(&p->staged);     /* the proxy copied step s - 1 out */
        if ((slot = outbox(x, (int)peer)) && (buf = view(x, op->sendbuff + off * es, c * es)))
            memcpy(slot, buf, c * es);
        send_step(x, &p->sent, &p->staged, &p->staged_len, s, c * es);
    } else {
        struct snccl_pair_ctr *p = &x->pc[peer * x->n + x->rank];

        if (__atomic_load_n(&p->sent, __ATOMIC_ACQUIRE) < s)
            return false;
        if ((slot = p2p_slot(x, peer, x->rank)) && (buf = view(x, op->recvbuff + off * es, c * es))) {
            memcpy(row(x, peer), slot, c * es);
            memcpy(buf, row(x, peer), c * es);
        }
        publish(x, &p->acked, s);
    }
    (*done)++;
    return true;
}

/* A send is over once its last step left this rank: with a proxy, once the
 * proxy copied it (the staging buffer may be freed after the kernel). */
static bool proxy_sent(struct kx *x, const struct snccl_op *op, uint64_t steps)
{
    if (!x->dc->proxy || op->kind != SNCCL_SEND || !steps)
        return true;
    return __atomic_load_n(&x->pc[x->rank * x->n + (uint32_t)op->peer].sent, __ATOMIC_ACQUIRE) >=
           op->step + steps;
}

/* ops[0..n) are sends and receives: progress them together. */
static void run_p2p(struct kx *x, const struct snccl_op *ops, uint32_t nops)
{
    uint64_t done[SNCCL_MAX_OPS] = { 0 };

    for (;;) {
        uint32_t seen = __atomic_load_n(x->bell, __ATOMIC_ACQUIRE);
        bool moved = false, left = false;

        for (uint32_t i = 0; i < nops && !x->stop; i++) {
            uint64_t chunk = x->dc->slot_bytes / elem_size(ops[i].dtype);
            uint64_t steps = (ops[i].count + chunk - 1) / chunk;

            while (done[i] < steps && !x->stop && p2p_step(x, &ops[i], &done[i]))
                moved = true;
            if (done[i] < steps || !proxy_sent(x, &ops[i], steps))
                left = true;
        }
        if (!left || x->stop || aborted(x))
            return;
        if (!moved)
            bell_wait(x, seen);
    }
}

/* --- the kernel ------------------------------------------------------------ */

static bool kx_open(struct kx *x, const simcuda_kernel_ctx *k, uint64_t devcomm)
{
    const struct snccl_devcomm *dc;

    x->k = k;
    x->stop = false;
    if (!(dc = view(x, devcomm, sizeof(*dc))) || dc->magic != SNCCL_DEVCOMM_MAGIC)
        return false;
    if (!(x->dc = view(x, devcomm, snccl_devcomm_bytes(dc->nranks))))
        return false;
    x->n = dc->nranks;
    x->rank = dc->rank;
    x->bell = view(x, dc->bell, sizeof(uint32_t));
    x->rc = view(x, dc->rank_ctr, sizeof(*x->rc) * x->n);
    x->pc = view(x, dc->pair_ctr, sizeof(*x->pc) * x->n * x->n);
    x->devbuf = view(x, dc->devbuf, dc->slot_bytes * (dc->proxy ? 2 * x->n + 1 : x->n));
    return !x->stop;
}

SIMCUDA_KERNEL(simnccl_kernel)
{
    const struct snccl_work *w = params[0];
    struct kx x;

    if (!kx_open(&x, k, w->devcomm))
        return;
    for (uint32_t i = 0; i < w->nops && !x.stop;) {
        uint32_t j = i;

        if (w->ops[i].kind == SNCCL_SEND || w->ops[i].kind == SNCCL_RECV) {
            while (j < w->nops && (w->ops[j].kind == SNCCL_SEND || w->ops[j].kind == SNCCL_RECV))
                j++;
            run_p2p(&x, &w->ops[i], j - i);
            i = j;
        } else {
            run_collective(&x, &w->ops[i++]);
        }
    }
}
SIMCUDA_KERNEL_PARAMS(simnccl_kernel, sizeof(struct snccl_work));
