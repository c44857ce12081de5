/*
 * bench_engine.c - the engine's figures, each a ratio against a baseline
 * measured in the same run (tests/bench/run.sh drives it; docs/engine.md).
 *
 *   bench_engine free MB          time to free: drain to host (what a suspend
 *                                 does before releasing), into a fresh store and
 *                                 into the kept store of an earlier suspend, vs
 *                                 cuMemcpyDtoH of the same bytes into a fresh
 *                                 buffer and into a warm one; the bench mix and
 *                                 random data; interleaved, medians [ranges]
 *   bench_engine codec NAME FILE DTYPE  per file: stored/raw and MB per CPU-second
 *                                 of tcgpu's codec vs zstd -1 (libzstd, 1 thread),
 *                                 compress and decompress, and of a memcpy; prints
 *                                 "codec NAME ratio_tcgpu ratio_zstd c_tcgpu c_zstd d_tcgpu d_zstd copy"
 *   bench_engine bound NAME FILE DTYPE  the order-0 entropy of FILE's byte planes
 *                                 per 128 KiB and 32 KiB block: the best any
 *                                 table-per-block byte coder can reach; and
 *                                 with the lower bytes' tables chosen by the
 *                                 exponent (exponent_context_bits)
 *   bench_engine delta NAME A B DTYPE  B (one training step after A) encoded alone
 *                                 and as the XOR with A (PATCH chunks)
 *   bench_engine mixfile OUT MB   writes the bench mix (a caching allocator's
 *                                 heap: weights, moments, zeros, random, stale)
 *   bench_engine refill MB        refill from an image and from host memory vs
 *                                 cuMemcpyHtoD of the same bytes
 *   bench_engine image MB DIR     streams MB of the mix to an image (time, size)
 *   bench_engine fresh MB         the machine's own cost of MB of fresh memory:
 *                                 seconds per GiB to fault in and zero it (a
 *                                 memset of a new mapping), and to write it again;
 *                                 the scale part's baseline
 *
 * Runs on simcuda through the driver table (TCGPU_REAL_LIBCUDA). Each timing
 * is the median of REPS runs.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include <cuda.h>

#include "image/codec.h"
#include "driver/driver.h"
#include "image/image.h"
#include "engine/pipeline.h"
#include "../common/engine_ctx.h"
#include "../common/rand.h"

#define MiB (1ull << 20)
#define CHUNK (4u << 20)
#define REPS 5

static const char *shared_dir;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof(*v), cmp_d);
    return v[n / 2];
}

static void die(const char *what)
{
    fprintf(stderr, "bench_engine: %s\n", what);
    exit(1);
}

#define CU(call) do { if ((call) != CUDA_SUCCESS) die(#call); } while (0)

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b;
    long n;

    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = malloc(n ? (size_t)n : 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
        die("read");
    fclose(f);
    *len = (size_t)n;
    return b;
}

/*
 * The bench mix, `mb` MiB, as a caching allocator's heap looks: segments of
 * bf16 weights, fp32 master weights and Adam moments (tiled from the bench
 * data), gradients, activations, free blocks (zeros), stale blocks (old
 * activations) and incompressible buffers (random: e.g. int8 quantised or
 * already compressed data), in 2-8 MiB blocks.
 */
static void make_mix(uint8_t *dst, size_t bytes)
{
    static const char *files[] = { "weights.bf16", "weights.fp32", "adam_exp_avg.fp32",
                                   "adam_exp_avg_sq.fp32", "grads.bf16", "activations.bf16" };
    /* weights: share of blocks by kind (out of 20) */
    static const int kinds[20] = { 0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 6, 6, 6, 6, 7, 8, 5 };
    uint8_t *src[6];
    size_t len[6], pos[6] = { 0 };
    char path[4096];

    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof(path), "%s/bench-data/%s", shared_dir, files[i]);
        if (!(src[i] = read_file(path, &len[i])))
            die("bench data missing (TCGPU_SHARED_DIR)");
    }
    for (size_t at = 0; at < bytes;) {
        size_t n = (2 + t_rand() % 7) * MiB;
        int k = kinds[t_rand() % 20];

        if (n > bytes - at)
            n = bytes - at;
        if (k <= 5) {
            for (size_t d = 0; d < n;) {
                size_t m = len[k] - pos[k] < n - d ? len[k] - pos[k] : n - d;
                memcpy(dst + at + d, src[k] + pos[k], m);
                pos[k] = (pos[k] + m) % len[k];
                d += m;
            }
        } else if (k == 6) {
            memset(dst + at, 0, n);          /* free blocks */
        } else if (k == 7) {
            for (size_t d = 0; d + 8 <= n; d += 8) {
                uint64_t r = t_rand();
                memcpy(dst + at + d, &r, 8);
            }
        } else {
            /* stale: old activations, half of the block re-zeroed */
            memcpy(dst + at, src[5], n < len[5] ? n : len[5]);
            memset(dst + at + n / 2, 0, n - n / 2);
        }
        at += n;
    }
    for (int i = 0; i < 6; i++)
        free(src[i]);
}

static void fill_random(uint8_t *dst, size_t bytes)
{
    for (size_t d = 0; d + 8 <= bytes; d += 8) {
        uint64_t r = t_rand();
        memcpy(dst + d, &r, 8);
    }
}

static struct pipe *new_pipe(void)
{
    struct pipe_opts o = { .ctx_enter = t_ctx_enter, .ctx_leave = t_ctx_leave };
    struct pipe *p;

    if (pipe_new(&p, &o))
        die("pipe_new");
    return p;
}

static void init_cuda(void)
{
    CUdevice dev;

    if (t_driver_load())
        die("no driver (TCGPU_REAL_LIBCUDA)");
    CU(TCGPU_REAL(cuInit)(0));
    CU(TCGPU_REAL(cuDeviceGet)(&dev, 0));
    t_seed(0x243f6a8885a308d3ull);
    CU(TCGPU_REAL(cuDevicePrimaryCtxRetain)(&t_ctx, dev));
    CU(TCGPU_REAL(cuCtxSetCurrent)(t_ctx));
}

static CUdeviceptr device_with(const uint8_t *h, size_t bytes)
{
    CUdeviceptr d;

    CU(TCGPU_REAL(cuMemAlloc)(&d, bytes));
    CU(TCGPU_REAL(cuMemcpyHtoD)(d, h, bytes));
    return d;
}

/* --- time to free ------------------------------------------------------------ */

static double min_of(const double *v, int n)
{
    double m = v[0];

    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static double max_of(const double *v, int n)
{
    double m = v[0];

    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* "12.3 ms [11.0-15.2]": median and range of n timings in seconds. */
static const char *msr(const double *v, int n, char *buf, size_t len)
{
    double c[64];

    memcpy(c, v, (size_t)n * sizeof(*v));
    snprintf(buf, len, "%.1f ms [%.1f-%.1f]", median(c, n) * 1e3, min_of(v, n) * 1e3,
             max_of(v, n) * 1e3);
    return buf;
}

/*
 * "MEDIAN [MIN-MAX]" of the rounds' own ratios num[r] / den[r]. A round's two
 * timings ran next to each other, so the range is the noise between
 * neighbours, not the machine's drift over the whole run; run.sh calls a
 * figure whose range straddles its target unsettled.
 */
static const char *ratio_range(const double *num, const double *den, int n, char *buf, size_t len)
{
    double q[64];

    for (int r = 0; r < n; r++)
        q[r] = den[r] > 0 ? num[r] / den[r] : NAN;
    snprintf(buf, len, "%.4f [%.4f-%.4f]", median(q, n), min_of(q, n), max_of(q, n));
    return buf;
}

/* A figure line: "NAME MEDIAN [MIN-MAX]" of the rounds' ratios. */
static void print_ratio(const char *name, const double *num, const double *den, int n)
{
    char b[64];

    printf("%s %s\n", name, ratio_range(num, den, n, b, sizeof(b)));
}

static struct pipe *pipe_with(int no_helpers)
{
    struct pipe_opts o = { .ctx_enter = t_ctx_enter, .ctx_leave = t_ctx_leave,
                           .no_helpers = no_helpers };
    struct pipe *p;

    if (pipe_new(&p, &o))
        die("pipe_new");
    return p;
}

enum { F_FRESH, F_WARM, F_FIRST, F_AGAIN, F_TIGHT, F_TWIN, F_STEPS };

/*
 * Time to free `bytes` at d, REPS rounds of six steps in an order that
 * rotates from round to round (so no step always runs right after a large
 * free): a program's cuMemcpyDtoH into fresh malloc'ed memory and into a
 * warm buffer; the suspend's drain into a fresh store (the first suspend)
 * and into the kept store of an earlier one (every later suspend), also
 * when that store was made reclaimable (MADV_FREE, as when memory is
 * tight); the drain with the simcuda twin of the device helpers (zero
 * chunks not copied). On simcuda the default drain loads no helpers: "default" and
 * "no helpers" are the same code.
 */
static void bench_free_one(const char *name, CUdeviceptr d, size_t bytes)
{
    double t_[F_STEPS][REPS];
    uint8_t *w = malloc(bytes);
    struct pipe_ext e = { d, bytes, 1, 0, TCGPU_DTYPE_UNKNOWN, 0 };
    struct pipe *p = pipe_with(0), *tw = pipe_with(-1);
    struct pipe_store *spare = NULL, *s = NULL;
    char b[F_STEPS][64], fig[96];

    memset(w, 1, bytes);
    if (pipe_drain_host(p, &e, 1, &spare))   /* an earlier suspend's store, kept */
        die(pipe_error(p));
    pipe_store_empty(spare);
    for (int r = 0; r < REPS; r++) {
        for (int k = 0; k < F_STEPS; k++) {
            int step = (k + r) % F_STEPS;
            uint8_t *c;
            double t = now();

            switch (step) {
            case F_FRESH:
                c = malloc(bytes);
                CU(TCGPU_REAL(cuMemcpyDtoH)(c, d, bytes));
                t_[step][r] = now() - t;
                free(c);
                break;
            case F_WARM:
                CU(TCGPU_REAL(cuMemcpyDtoH)(w, d, bytes));
                t_[step][r] = now() - t;
                break;
            case F_FIRST:
            case F_TWIN:
                if (pipe_drain_host(step == F_TWIN ? tw : p, &e, 1, &s))
                    die(pipe_error(p));
                t_[step][r] = now() - t;
                pipe_store_free(s);
                break;
            case F_AGAIN:
            case F_TIGHT:
                if (step == F_TIGHT) {
                    pipe_store_make_reclaimable(spare);
                    t = now();
                }
                if (pipe_drain_host_reuse(p, &e, 1, spare, &s))
                    die(pipe_error(p));
                t_[step][r] = now() - t;
                pipe_store_empty(s);
                spare = s;
                break;
            }
        }
    }
    for (int k = 0; k < F_STEPS; k++)
        msr(t_[k], REPS, b[k], sizeof(b[k]));
    printf("free %s %zu MiB: cuMemcpyDtoH into fresh memory %s, into warm memory %s; drain into "
           "a fresh store (first suspend) %s, into the kept store (later suspends) %s, into it "
           "made reclaimable (MADV_FREE: memory tight) %s, with the simcuda twin scan %s "
           "(default = no helpers on simcuda)\n", name, bytes >> 20,
           b[F_FRESH], b[F_WARM], b[F_FIRST], b[F_AGAIN], b[F_TIGHT], b[F_TWIN]);
    snprintf(fig, sizeof(fig), "free_first_vs_memcpy_fresh_%s", name);
    print_ratio(fig, t_[F_FIRST], t_[F_FRESH], REPS);
    snprintf(fig, sizeof(fig), "free_again_vs_memcpy_warm_%s", name);
    print_ratio(fig, t_[F_AGAIN], t_[F_WARM], REPS);
    snprintf(fig, sizeof(fig), "free_again_reclaimable_vs_memcpy_warm_%s", name);
    print_ratio(fig, t_[F_TIGHT], t_[F_WARM], REPS);
    snprintf(fig, sizeof(fig), "free_twin_vs_default_%s", name);
    print_ratio(fig, t_[F_TWIN], t_[F_FIRST], REPS);
    pipe_store_free(spare);
    pipe_free(p);
    pipe_free(tw);
    free(w);
}

/* The host copy of the data is freed before each run: at the larger sizes
 * the device's memory, the program's buffer, the kept store and one store
 * more are what must fit (run.sh checks four times the size). */
static int cmd_free(size_t mb)
{
    size_t bytes = mb * MiB;
    uint8_t *h = malloc(bytes);
    CUdeviceptr d;

    if (!h)
        die("out of memory");
    init_cuda();
    make_mix(h, bytes);
    d = device_with(h, bytes);
    free(h);
    bench_free_one("mix", d, bytes);
    if (!(h = malloc(bytes)))
        die("out of memory");
    fill_random(h, bytes);
    CU(TCGPU_REAL(cuMemcpyHtoD)(d, h, bytes));
    free(h);
    bench_free_one("random", d, bytes);
    return 0;
}

/* --- codec --------------------------------------------------------------------- */

static enum tcgpu_dtype parse_dtype(const char *s)
{
    if (!strcmp(s, "bf16")) return TCGPU_DTYPE_BF16;
    if (!strcmp(s, "fp16")) return TCGPU_DTYPE_FP16;
    if (!strcmp(s, "fp32")) return TCGPU_DTYPE_FP32;
    if (!strcmp(s, "u8")) return TCGPU_DTYPE_U8;
    return TCGPU_DTYPE_UNKNOWN;
}

/* CPU seconds of every thread of the process (simcuda's stream threads too). */
static double process_cpu_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU time of the calling thread: codec speeds are per core, and on a
 * shared machine wall-clock ratios swing with the neighbours' load. */
static double cpu_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct encoded {
    uint8_t codec;
    size_t len;
    uint8_t *bytes;
};

/* tcgpu's codec over the file in 4 MiB chunks; returns the CPU seconds and
 * the stored bytes, keeping each chunk's encoded form in `out`. */
static double tcgpu_encode_all(struct codec_ctx *c, const uint8_t *raw, size_t len,
                               enum tcgpu_dtype dtype, struct encoded *out, uint64_t *stored)
{
    double t = 0;

    *stored = 0;
    for (size_t at = 0, k = 0; at < len; at += CHUNK, k++) {
        size_t n = len - at < CHUNK ? len - at : CHUNK;
        struct codec_out o;
        double t0 = cpu_now();

        if (codec_encode(c, raw + at, n, dtype, out[k].bytes, CHUNK, &o))
            die("encode");
        t += cpu_now() - t0;
        out[k].codec = o.codec;
        out[k].len = o.stored_len;
        /* RAW points at the source: the writer writes it from there, the
         * copy here is only for the decode round (not timed). */
        if (o.data && o.data != out[k].bytes)
            memcpy(out[k].bytes, o.data, o.stored_len);
        *stored += o.stored_len;
    }
    return t;
}

static double tcgpu_decode_all(struct codec_ctx *c, const struct encoded *in, size_t len,
                               uint8_t *dec)
{
    double t = cpu_now();

    for (size_t at = 0, k = 0; at < len; at += CHUNK, k++) {
        size_t n = len - at < CHUNK ? len - at : CHUNK;

        if (codec_decode(c, in[k].codec, in[k].bytes, in[k].len, dec + at, n))
            die("decode");
    }
    return cpu_now() - t;
}

static double zstd_encode_all(ZSTD_CCtx *zc, const uint8_t *raw, size_t len, struct encoded *out,
                              size_t cap, uint64_t *stored)
{
    double t = cpu_now();

    *stored = 0;
    for (size_t at = 0, k = 0; at < len; at += CHUNK, k++) {
        size_t n = len - at < CHUNK ? len - at : CHUNK;
        size_t z = ZSTD_compress2(zc, out[k].bytes, cap, raw + at, n);

        if (ZSTD_isError(z))
            die("zstd");
        out[k].len = z;
        *stored += z;
    }
    return cpu_now() - t;
}

static double zstd_decode_all(ZSTD_DCtx *zd, const struct encoded *in, size_t len, uint8_t *dec)
{
    double t = cpu_now();

    for (size_t at = 0, k = 0; at < len; at += CHUNK, k++)
        if (ZSTD_isError(ZSTD_decompressDCtx(zd, dec, CHUNK, in[k].bytes, in[k].len)))
            die("unzstd");
    return cpu_now() - t;
}

static uint8_t *input_bytes(const char *path, size_t *len)
{
    uint8_t *raw;

    if (!strcmp(path, "zeros") || !strcmp(path, "random")) {
        *len = 64 * MiB;
        raw = calloc(1, *len);
        if (raw && path[0] == 'r')
            fill_random(raw, *len);
        return raw;
    }
    return read_file(path, len);
}

/*
 * Per file: stored/raw and MB per CPU-second (this thread's) of tcgpu's codec
 * and of zstd -1, compress and decompress, REPS interleaved rounds (tcgpu,
 * zstd, tcgpu, ...), medians; then the speed ratios against zstd -1 (compress,
 * decompress) and a memcpy's against our compress, each "MEDIAN [MIN-MAX]" of
 * the rounds' own. Every round's output is decoded and checked.
 */
static int cmd_codec(const char *name, const char *path, const char *dt)
{
    enum tcgpu_dtype dtype = parse_dtype(dt);
    size_t len = 0, nch, zcap = ZSTD_compressBound(CHUNK);
    uint8_t *raw = input_bytes(path, &len), *dec;
    struct encoded *ours, *theirs;
    struct codec_ctx *cctx;
    ZSTD_CCtx *zc = ZSTD_createCCtx();
    ZSTD_DCtx *zd = ZSTD_createDCtx();
    double tc[REPS], td[REPS], zct[REPS], zdt[REPS], cp[REPS];
    uint64_t stored = 0, zstored = 0;

    if (!raw)
        die("cannot read input");
    nch = (len + CHUNK - 1) / CHUNK;
    ours = calloc(nch ? nch : 1, sizeof(*ours));
    theirs = calloc(nch ? nch : 1, sizeof(*theirs));
    dec = malloc(len + CHUNK);
    for (size_t k = 0; k < nch; k++) {
        ours[k].bytes = malloc(CHUNK);
        theirs[k].bytes = malloc(zcap);
        if (!ours[k].bytes || !theirs[k].bytes)
            die("out of memory");
    }
    if (codec_ctx_new(&cctx, NULL))
        die("codec");
    ZSTD_CCtx_setParameter(zc, ZSTD_c_compressionLevel, 1);
    /* A round untimed first, for both: the first writes into each output
     * buffer fault its pages in (kernel time in this thread's CPU), which
     * is not the codec's work. Without it our first encode of grads.bf16
     * took 16 ms against 9 in the later rounds, its ratio to zstd -1 was
     * 0.98 against 1.35-1.43, and the targets' verdicts read "unsettled". */
    for (int r = -1; r < REPS; r++) {
        if (r < 0) {
            tcgpu_encode_all(cctx, raw, len, dtype, ours, &stored);
            zstd_encode_all(zc, raw, len, theirs, zcap, &zstored);
            tcgpu_decode_all(cctx, ours, len, dec);
            zstd_decode_all(zd, theirs, len, dec);
            memcpy(dec, raw, len);
            continue;
        }
        tc[r] = tcgpu_encode_all(cctx, raw, len, dtype, ours, &stored);
        zct[r] = zstd_encode_all(zc, raw, len, theirs, zcap, &zstored);
        td[r] = tcgpu_decode_all(cctx, ours, len, dec);
        if (memcmp(dec, raw, len))
            die("tcgpu round trip differs");
        zdt[r] = zstd_decode_all(zd, theirs, len, dec);
        cp[r] = cpu_now();        /* a raw copy of the same bytes, the floor of any codec */
        memcpy(dec, raw, len);
        cp[r] = cpu_now() - cp[r];
    }
    double mb = (double)len / 1e6;
    char cs[64], ds[64], cc[64];
    ratio_range(zct, tc, REPS, cs, sizeof(cs));   /* speed: the time zstd took / ours */
    ratio_range(zdt, td, REPS, ds, sizeof(ds));
    ratio_range(cp, tc, REPS, cc, sizeof(cc));
    printf("codec %s %.4f %.4f %.0f %.0f %.0f %.0f %.0f %s %s %s\n", name, (double)stored / len,
           (double)zstored / len, mb / median(tc, REPS), mb / median(zct, REPS),
           mb / median(td, REPS), mb / median(zdt, REPS), mb / median(cp, REPS), cs, ds, cc);
    return 0;
}

/*
 * The order-0 entropy of FILE's byte planes: what any coder of bytes that
 * builds one table per block of a plane could reach at best, table costs not
 * counted. Planes as the codec makes them (4 MiB chunks, elements of DTYPE,
 * the sign rotated below the mantissa); blocks of 128 KiB (zstd's and so the
 * codec's table size) and of 32 KiB of a plane. Prints
 * "bound NAME stored128/raw stored32/raw exponent/raw", the last from
 * exponent_context_bits below. It says how far below ZipNN a target may be
 * set at all: ZipNN's Huffman and ours code the same planes.
 */
static double plane_block_bits(const uint8_t *p, size_t n)
{
    uint32_t count[256] = { 0 };
    double bits = 0;

    for (size_t i = 0; i < n; i++)
        count[p[i]]++;
    for (int v = 0; v < 256; v++)
        if (count[v])
            bits += count[v] * log2((double)n / count[v]);
    return bits;
}

/* The element of es bytes at p, its sign rotated below its mantissa. */
static uint64_t rotated(const uint8_t *p, unsigned es)
{
    uint64_t v = 0;

    memcpy(&v, p, es);
    return ((v << 1) | (v >> (8 * es - 1))) & (es == 8 ? ~0ull : (1ull << (8 * es)) - 1);
}

/* Plane b of the n elements at chunk into `plane`; its bits per block. */
static double planes_bits_one(const uint8_t *chunk, size_t n, unsigned es, unsigned b,
                              size_t block, uint8_t *plane)
{
    double bits = 0;

    for (size_t i = 0; i < n; i++)
        plane[i] = (uint8_t)(rotated(chunk + i * es, es) >> (8 * b));
    for (size_t at = 0; at < n; at += block) {
        size_t m = n - at < block ? n - at : block;
        double h = plane_block_bits(plane + at, m);

        bits += h < 8.0 * m ? h : 8.0 * m;      /* a block stored raw costs 8 bits a byte */
    }
    return bits;
}

static double planes_bits(const uint8_t *chunk, size_t len, unsigned es, size_t block,
                          uint8_t *plane)
{
    double bits = 8.0 * (len % es);      /* a tail that is not an element stays raw */

    for (unsigned b = 0; b < es; b++)
        bits += planes_bits_one(chunk, len / es, es, b, block, plane);
    return bits;
}

/*
 * A model of more than single bytes: the exponent (the top plane, once the
 * sign is rotated away) as above, one table per 32 KiB, and every other
 * byte of an element coded with a table chosen by its element's exponent,
 * one table per exponent and 4 MiB chunk; tables free, a context's bytes
 * never above raw. Within a binade a weight's density falls with its
 * mantissa, so the mantissa of a large exponent is skewed where the plane
 * as a whole is flat. An arithmetic or ANS coder could come near this with
 * per-chunk tables; with a table per 32 KiB too, their cost would exceed
 * what they save (256 contexts of 256 entries).
 */
static double exponent_context_bits(const uint8_t *chunk, size_t len, unsigned es,
                                    uint8_t *expo, uint32_t (*count)[256])
{
    size_t n = len / es;
    double bits = 8.0 * (len % es) + planes_bits_one(chunk, n, es, es - 1, 32 << 10, expo);

    for (unsigned b = 0; b + 1 < es; b++) {
        memset(count, 0, 256 * sizeof(*count));
        for (size_t i = 0; i < n; i++)
            count[expo[i]][(uint8_t)(rotated(chunk + i * es, es) >> (8 * b))]++;
        for (int e = 0; e < 256; e++) {
            uint64_t total = 0;
            double h = 0;

            for (int v = 0; v < 256; v++)
                total += count[e][v];
            for (int v = 0; v < 256; v++)
                if (count[e][v])
                    h += count[e][v] * log2((double)total / count[e][v]);
            bits += h < 8.0 * total ? h : 8.0 * total;
        }
    }
    return bits;
}

static int cmd_bound(const char *name, const char *path, const char *dt)
{
    unsigned es = codec_dtype_esize(parse_dtype(dt));
    size_t len = 0;
    uint8_t *raw = input_bytes(path, &len), *plane = malloc(CHUNK);
    uint32_t (*count)[256] = malloc(256 * sizeof(*count));
    double b128 = 0, b32 = 0, bexp = 0;

    if (!raw || !plane || !count || es < 2 || !len)
        die("bound: needs a file of 2-, 4- or 8-byte floats");
    for (size_t at = 0; at < len; at += CHUNK) {
        size_t n = len - at < CHUNK ? len - at : CHUNK;

        b128 += planes_bits(raw + at, n, es, 128 << 10, plane);
        b32 += planes_bits(raw + at, n, es, 32 << 10, plane);
        bexp += exponent_context_bits(raw + at, n, es, plane, count);
    }
    printf("bound %s %.4f %.4f %.4f\n", name, b128 / 8 / len, b32 / 8 / len, bexp / 8 / len);
    free(count);
    free(plane);
    free(raw);
    return 0;
}

/*
 * What encoding the difference from the parent's bytes buys: FILE_B (a
 * tensor one training step after FILE_A) in 4 MiB chunks, each encoded on
 * its own (a full image) and as a PATCH of all its 64 KiB blocks, the XOR
 * with FILE_A's chunk (an incremental image after a dense step). Prints
 * "delta NAME plain/raw xor/raw xor/plain c_xor_MBps".
 */
static int cmd_delta(const char *name, const char *pa, const char *pb, const char *dt)
{
    enum tcgpu_dtype dtype = parse_dtype(dt);
    size_t la = 0, lb = 0;
    uint8_t *a = read_file(pa, &la), *b = read_file(pb, &lb);
    uint8_t *out = malloc(2 * CHUNK), *scratch = malloc(CHUNK);
    uint32_t idx[CHUNK / (64 << 10)];
    struct codec_ctx *c;
    uint64_t plain = 0, xored = 0;
    double t_xor = 0;

    if (!a || !b || la != lb || !out || !scratch || codec_ctx_new(&c, NULL))
        die("delta: inputs of different sizes, or no memory");
    for (size_t at = 0; at < lb; at += CHUNK) {
        size_t n = lb - at < CHUNK ? lb - at : CHUNK, stored;
        uint32_t k = (uint32_t)((n + (64 << 10) - 1) / (64 << 10));
        struct codec_patch pt = { .raw_len = n, .block_size = 64 << 10, .k = k, .idx = idx,
                                  .blocks = b + at, .base = a + at, .scratch = scratch };
        struct codec_out o;
        uint64_t csum;
        double t;

        for (uint32_t i = 0; i < k; i++)
            idx[i] = i;
        if (codec_encode(c, b + at, n, dtype, out, 2 * CHUNK, &o))
            die("encode");
        plain += o.stored_len;
        t = cpu_now();
        if (codec_patch_encode(c, &pt, dtype, out, 2 * CHUNK, &stored, &csum))
            die("patch");
        t_xor += cpu_now() - t;
        xored += stored;
    }
    printf("delta %s %.4f %.4f %.4f %.0f\n", name, (double)plain / lb, (double)xored / lb,
           (double)xored / plain, lb / 1e6 / t_xor);
    return 0;
}

static int cmd_mixfile(const char *out, size_t mb)
{
    size_t bytes = mb * MiB;
    uint8_t *h = malloc(bytes);
    FILE *f = fopen(out, "wb");

    if (!f)
        die("open out");
    make_mix(h, bytes);
    if (fwrite(h, 1, bytes, f) != bytes || fclose(f))
        die("write");
    return 0;
}

/* --- whole drain to an image, and refill ------------------------------------------ */

static int write_image(const char *dir, CUdeviceptr d, size_t bytes, double *secs,
                       uint64_t *stored)
{
    struct image_writer *w = NULL;
    struct image_device dv = { .name = "sim" };
    struct image_alloc a = { .id = 1, .addr = d, .size = bytes };
    struct pipe_ext e = { d, bytes, 1, 0, TCGPU_DTYPE_UNKNOWN, 0 };
    struct pipe *p = new_pipe();
    struct chunk_sink sink;
    char err[512];
    double t = now();

    if (image_writer_begin(&w, dir, NULL, err, sizeof(err)) ||
        image_writer_add_device(w, &dv, NULL) || image_writer_add_allocation(w, &a))
        die(err);
    chunk_sink_init(&sink, w, NULL);
    if (pipe_drain_image(p, &e, 1, &sink))
        die(pipe_error(p));
    if (image_writer_commit(w))
        die(image_writer_error(w));
    *secs = now() - t;
    image_writer_stats(w, NULL, stored, NULL);
    image_writer_free(w);
    pipe_free(p);
    return 0;
}

static int cmd_image(size_t mb, const char *dir)
{
    size_t bytes = mb * MiB;
    uint8_t *h = malloc(bytes);
    uint64_t stored;
    double secs;

    init_cuda();
    make_mix(h, bytes);
    write_image(dir, device_with(h, bytes), bytes, &secs, &stored);
    printf("image %zu MiB: %.3f s, %llu bytes\n", mb, secs, (unsigned long long)stored);
    return 0;
}

/* Reads an image's data file once: the writer wrote it with O_DIRECT, so
 * it is not in the page cache, and a refill would measure the disk. */
static void page_in(const char *dir)
{
    char path[4096], buf[1 << 16];
    int fd;

    snprintf(path, sizeof(path), "%s/data.0", dir);
    if ((fd = open(path, O_RDONLY)) < 0)
        die("open data.0");
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    close(fd);
}

/*
 * The refill's CPU, every thread of the process: from the image, and the
 * baseline's cuMemcpyHtoD of the same bytes (on simcuda a stream thread's
 * copy: the upload, a GPU's DMA). The difference is the engine's own work
 * (reading, checksums, decoding, joining), which on a GPU host is what its
 * workers must keep up with: at a 50 GB/s link, 50 GB/s times the engine's
 * CPU-seconds per byte is how many workers the refill needs (docs/engine.md,
 * the model).
 */
static void report_refill_cpu(const double *base_cpu, const double *img_cpu, size_t bytes)
{
    double gib = (double)bytes / (1ull << 30), b[REPS], i[REPS], eng[REPS];

    for (int r = 0; r < REPS; r++) {
        b[r] = base_cpu[r] * 1e3 / gib;
        i[r] = img_cpu[r] * 1e3 / gib;
        eng[r] = i[r] - b[r];
    }
    double bm = median(b, REPS), im = median(i, REPS), em = median(eng, REPS);
    printf("refill CPU per GiB: from image %.0f ms [%.0f-%.0f] (every thread), memcpy %.0f ms "
           "[%.0f-%.0f], the engine's own %.0f ms\n", im, min_of(i, REPS), max_of(i, REPS), bm,
           min_of(b, REPS), max_of(b, REPS), em);
    printf("refill_image_cpu_ms_per_gib %.0f\n", im);
    printf("refill_memcpy_cpu_ms_per_gib %.0f\n", bm);
    printf("refill_engine_cpu_ms_per_gib %.0f\n", em);
    printf("refill_workers_for_50gbs_link %.1f\n", 50e9 * (em / 1e3) / (double)(1ull << 30));
}

static int cmd_refill(size_t mb, const char *dir)
{
    size_t bytes = mb * MiB;
    uint8_t *h = malloc(bytes);
    double base[REPS], img_t[REPS], host_t[REPS], base_cpu[REPS], img_cpu[REPS];
    uint64_t stored;
    double secs;
    CUdeviceptr d;
    struct pipe_ext e;

    init_cuda();
    make_mix(h, bytes);
    d = device_with(h, bytes);
    e = (struct pipe_ext){ d, bytes, 1, 0, TCGPU_DTYPE_UNKNOWN, 0 };
    write_image(dir, d, bytes, &secs, &stored);
    page_in(dir);
    for (int r = 0; r < REPS; r++) {
        struct pipe *p = new_pipe();
        struct pipe_store *s = NULL;
        struct image *img = NULL;
        struct chunk_source src;
        char err[512];
        double t = now(), c = process_cpu_now();

        CU(TCGPU_REAL(cuMemcpyHtoD)(d, h, bytes));
        base[r] = now() - t;
        base_cpu[r] = process_cpu_now() - c;
        if (image_open(&img, dir, 0, err, sizeof(err)) ||
            image_verify_stored(img, 0, err, sizeof(err)))   /* as a restore does, before */
            die(err);
        chunk_source_init_verified(&src, img);
        t = now();
        c = process_cpu_now();
        if (pipe_refill_image(p, &src, &e, 1))
            die(pipe_error(p));
        img_t[r] = now() - t;
        img_cpu[r] = process_cpu_now() - c;
        image_close(img);
        if (pipe_drain_host(p, &e, 1, &s))
            die(pipe_error(p));
        t = now();
        if (pipe_refill_host(p, s))
            die(pipe_error(p));
        host_t[r] = now() - t;
        pipe_store_free(s);
        pipe_free(p);
    }
    char tb[3][64];
    msr(base, REPS, tb[0], sizeof(tb[0]));
    msr(img_t, REPS, tb[1], sizeof(tb[1]));
    msr(host_t, REPS, tb[2], sizeof(tb[2]));
    printf("refill %zu MiB: memcpy %s, from image %s, from host %s\n", mb, tb[0], tb[1], tb[2]);
    print_ratio("refill_image_throughput_vs_memcpy", base, img_t, REPS);
    print_ratio("refill_host_throughput_vs_memcpy", base, host_t, REPS);
    report_refill_cpu(base_cpu, img_cpu, bytes);
    return 0;
}

/* Fresh anonymous memory: what the kernel (and under a VM, the hypervisor,
 * which backs guest memory on first touch) charges per GiB before the first
 * write lands, against a second write of the same pages. */
static int cmd_fresh(size_t mb)
{
    size_t bytes = mb * MiB;
    uint8_t *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    double t, fresh, warm, gib = (double)mb / 1024;

    if (p == MAP_FAILED)
        die("fresh: mmap");
    t = now();
    memset(p, 1, bytes);
    fresh = now() - t;
    t = now();
    memset(p, 2, bytes);
    warm = now() - t;
    munmap(p, bytes);
    printf("fresh %zu %.4f %.4f\n", mb, fresh / gib, warm / gib);
    return 0;
}

int main(int argc, char **argv)
{
    shared_dir = getenv("TCGPU_SHARED_DIR");
    if (!shared_dir || !*shared_dir)
        shared_dir = "../shared";
    if (argc >= 3 && !strcmp(argv[1], "free"))
        return cmd_free(strtoul(argv[2], NULL, 10));
    if (argc >= 5 && !strcmp(argv[1], "codec"))
        return cmd_codec(argv[2], argv[3], argv[4]);
    if (argc >= 5 && !strcmp(argv[1], "bound"))
        return cmd_bound(argv[2], argv[3], argv[4]);
    if (argc >= 6 && !strcmp(argv[1], "delta"))
        return cmd_delta(argv[2], argv[3], argv[4], argv[5]);
    if (argc >= 4 && !strcmp(argv[1], "mixfile"))
        return cmd_mixfile(argv[2], strtoul(argv[3], NULL, 10));
    if (argc >= 4 && !strcmp(argv[1], "image"))
        return cmd_image(strtoul(argv[2], NULL, 10), argv[3]);
    if (argc >= 4 && !strcmp(argv[1], "refill"))
        return cmd_refill(strtoul(argv[2], NULL, 10), argv[3]);
    if (argc >= 3 && !strcmp(argv[1], "fresh"))
        return cmd_fresh(strtoul(argv[2], NULL, 10));
    fprintf(stderr, "usage: bench_engine free MB | codec NAME FILE DTYPE | bound NAME FILE DTYPE | "
                    "mixfile OUT MB | "
                    "image MB DIR | refill MB DIR | delta NAME FILE_A FILE_B DTYPE | fresh MB\n");
    return 2;
}
