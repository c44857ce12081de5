/*
 * gen_image_seeds - writes the image fuzz target's seed corpus: images made
 * by the real writer (every codec: zero, raw, zstd, byte groups of fp32 and
 * bf16, a parent chunk; several allocations and devices), each packed as
 * fuzz_image reads it (u32 manifest length, manifest, data.0).
 *
 *   gen_image_seeds OUTDIR     (tests/fuzz/README.md: when to run it)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "image/image.h"

static int slurp(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    long n;

    if (!f || fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0)
        return -1;
    *out = malloc((size_t)n + 1);
    *len = (size_t)n;
    if (!*out || fread(*out, 1, (size_t)n, f) != (size_t)n)
        return -1;
    fclose(f);
    return 0;
}

static int pack(const char *img, const char *out)
{
    char p[4096];
    uint8_t *m, *d, len[4];
    size_t ml, dl;
    FILE *f;

    if (snprintf(p, sizeof(p), "%s/manifest", img) >= (int)sizeof(p) || slurp(p, &m, &ml) < 0)
        return -1;
    if (snprintf(p, sizeof(p), "%s/data.0", img) >= (int)sizeof(p) || slurp(p, &d, &dl) < 0)
        return -1;
    for (int i = 0; i < 4; i++)
        len[i] = (uint8_t)(ml >> (8 * i));
    f = fopen(out, "wb");
    if (!f || fwrite(len, 1, 4, f) != 4 || fwrite(m, 1, ml, f) != ml || fwrite(d, 1, dl, f) != dl ||
        fclose(f) != 0)
        return -1;
    free(m);
    free(d);
    return 0;
}

/* One image: `nallocs` allocations of `size` bytes filled by `fill`. */
static int make(const char *dir, int nallocs, size_t size, enum tcgpu_dtype dtype,
                void (*fill)(uint8_t *, size_t, int), const char *parent)
{
    struct image_writer_opts o = { .chunk_size = 64 << 10, .flags = IMAGE_NO_URING | IMAGE_NO_DIRECT };
    struct image_process pr = { .pid = 4242, .start_time_ns = 1, .hostname = "seed",
                                .exe = "/usr/bin/train" };
    struct image_device dev = { .ordinal = 0, .driver_version = 13000, .total_mem = 1ull << 30,
                                .name = "simcuda H100 (simulated)" };
    struct image_writer *w;
    char err[512];
    uint8_t *buf = malloc(size);

    if (!buf || image_writer_begin(&w, dir, &o, err, sizeof(err)) != 0 ||
        image_writer_set_process(w, &pr) != 0 || image_writer_add_device(w, &dev, NULL) != 0) {
        fprintf(stderr, "%s: %s\n", dir, err);
        return -1;
    }
    if (parent) {
        uint8_t csum[16] = { 1, 2, 3 };
        image_writer_set_parent(w, parent, csum);
    }
    for (int a = 0; a < nallocs; a++) {
        struct image_alloc al = { .id = (uint64_t)a + 1, .addr = 0x7f0000000000ull + (uint64_t)a * size,
                                  .size = size, .dtype = dtype, .callsite = a ? NULL : "train.c:42" };
        fill(buf, size, a);
        if (image_writer_add_allocation(w, &al) != 0 ||
            image_writer_add_data(w, al.id, 0, buf, size) != 0) {
            fprintf(stderr, "%s: %s\n", dir, image_writer_error(w));
            return -1;
        }
    }
    if (image_writer_commit(w) != 0) {
        fprintf(stderr, "%s: %s\n", dir, image_writer_error(w));
        return -1;
    }
    image_writer_free(w);
    free(buf);
    return 0;
}

static void zeros(uint8_t *b, size_t n, int a) { (void)a; memset(b, 0, n); }
static void noise(uint8_t *b, size_t n, int a)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(a + 1);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b[i] = (uint8_t)x;
    }
}
static void text(uint8_t *b, size_t n, int a)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)("checkpoint the GPU "[i % 19] + a);
}
static void floats(uint8_t *b, size_t n, int a)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        float f = 0.001f * (float)(i / 4 % 1000) + (float)a;
        memcpy(b + i, &f, 4);
    }
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int nallocs;
        size_t size;
        enum tcgpu_dtype dtype;
        void (*fill)(uint8_t *, size_t, int);
        const char *parent;
    } seeds[] = {
        { "zero", 1, 4096, TCGPU_DTYPE_U8, zeros, NULL },
        { "raw", 1, 8192, TCGPU_DTYPE_U8, noise, NULL },
        { "zstd", 2, 16384, TCGPU_DTYPE_U8, text, NULL },
        { "bytegroup-fp32", 1, 65536, TCGPU_DTYPE_FP32, floats, NULL },
        { "bytegroup-bf16", 1, 32768, TCGPU_DTYPE_BF16, floats, NULL },
        { "chunks", 3, 150000, TCGPU_DTYPE_UNKNOWN, text, NULL },
        { "incremental", 1, 4096, TCGPU_DTYPE_U8, text, "/nonexistent/parent" },
    };
    char tmp[] = "/tmp/tcgpu-seeds-XXXXXX", dir[4096], out[4096];

    if (argc != 2 || !mkdtemp(tmp)) {
        fprintf(stderr, "usage: gen_image_seeds OUTDIR\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        snprintf(dir, sizeof(dir), "%s/%s", tmp, seeds[i].name);
        snprintf(out, sizeof(out), "%s/%s", argv[1], seeds[i].name);
        if (make(dir, seeds[i].nallocs, seeds[i].size, seeds[i].dtype, seeds[i].fill,
                 seeds[i].parent) < 0 || pack(dir, out) < 0) {
            fprintf(stderr, "seed %s failed\n", seeds[i].name);
            return 1;
        }
    }
    snprintf(dir, sizeof(dir), "rm -rf '%s'", tmp);
    return system(dir) == 0 ? 0 : 1;
}
