/*
 * describe.c - `gpuckpt inspect`: the manifest as a table, and the sums
 * over the chunk table it shows (contract in image.h; gpuckpt writes the
 * JSON form itself, through jansson).
 */
#include "image.h"
#include "common/hex.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const kind_names[TCGPU_ALLOC_KIND_COUNT] = {
    "device", "pitch", "vmm", "pool", "host-pinned", "managed",
};

const char *image_alloc_kind_name(uint32_t k)
{
    return k < TCGPU_ALLOC_KIND_COUNT ? kind_names[k] : "unknown";
}

void image_sum_alloc(const struct image *img, uint64_t id, struct image_sums *s)
{
    size_t lo = 0, hi = image_chunk_count(img);

    *s = (struct image_sums){0};
    /* The chunk table is sorted by allocation id: find the first. */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (image_chunk_at(img, mid)->alloc_id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < image_chunk_count(img); i++) {
        const struct image_chunk *k = image_chunk_at(img, i);

        if (k->alloc_id != id)
            break;
        s->chunks++;
        s->raw_bytes += k->raw_len;
        s->stored_bytes += k->stored_len;
    }
}

void image_sum_chunks(const struct image *img, struct image_sums codec[TCGPU_CODEC_COUNT],
                      struct image_sums *all)
{
    memset(codec, 0, TCGPU_CODEC_COUNT * sizeof(*codec));
    *all = (struct image_sums){0};
    for (size_t i = 0; i < image_chunk_count(img); i++) {
        const struct image_chunk *k = image_chunk_at(img, i);
        struct image_sums *c = &codec[k->codec < TCGPU_CODEC_COUNT ? k->codec : 0];

        c->chunks++;
        c->raw_bytes += k->raw_len;
        c->stored_bytes += k->stored_len;
        all->chunks++;
        all->raw_bytes += k->raw_len;
        all->stored_bytes += k->stored_len;
    }
}

uint64_t image_alloc_bytes(const struct image *img)
{
    uint64_t n = 0;

    for (size_t i = 0; i < image_alloc_count(img); i++)
        n += image_alloc_at(img, i)->size;
    return n;
}

static double ratio(uint64_t stored, uint64_t raw)
{
    return raw ? (double)stored / (double)raw : 0.0;
}

static const char *human(uint64_t v, char *buf, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double d = (double)v;
    unsigned u = 0;

    while (d >= 1024 && u < 4)
        d /= 1024, u++;
    if (u == 0)
        snprintf(buf, cap, "%" PRIu64 " B", v);
    else
        snprintf(buf, cap, "%.1f %s", d, unit[u]);
    return buf;
}

static const char *when(uint64_t ns, char *buf, size_t cap)
{
    time_t t = (time_t)(ns / 1000000000ull);
    struct tm tm;

    if (!ns || !gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, cap, "unknown");
    return buf;
}

int image_describe(const struct image *img, FILE *o)
{
    const struct image_process *p = image_process_info(img);
    struct image_sums codec[TCGPU_CODEC_COUNT], all;
    char a[32], b[32], c[32], id[33], when1[32], when2[32];
    uint8_t sum[16];
    const char *parent = image_parent(img, sum);

    image_sum_chunks(img, codec, &all);
    image_manifest_csum(img, sum);
    hex_put16(sum, id);
    fprintf(o, "format       tcgpu image %u.%u, id %s\n", TCGPU_IMG_VERSION_MAJOR,
            image_version_minor(img), id);
    fprintf(o, "process      pid %u on %s: %s\n", p->pid, p->hostname, p->exe);
    fprintf(o, "             started %s, saved %s\n", when(p->start_time_ns, when1, 32),
            when(p->created_ns, when2, 32));
    for (uint32_t i = 0; i < image_device_count(img); i++) {
        const struct image_device *d = image_device_info(img, i);

        hex_put16(d->uuid, id);
        fprintf(o, "device %-5u %s (ordinal %d), uuid %s, %s, driver %u\n", i, d->name, d->ordinal,
                id, human(d->total_mem, a, 32), d->driver_version);
    }
    if (parent) {
        image_parent(img, sum);
        hex_put16(sum, id);
        fprintf(o, "parent       %s (id %s)\n", parent, id);
    }
    fprintf(o, "memory       %zu allocations, %s; saved %s in %s (ratio %.3f)\n",
            image_alloc_count(img), human(image_alloc_bytes(img), a, 32), human(all.raw_bytes, b, 32),
            human(all.stored_bytes, c, 32), ratio(all.stored_bytes, all.raw_bytes));
    for (unsigned k = 0; k < TCGPU_CODEC_COUNT; k++)
        if (codec[k].chunks)
            fprintf(o, "codec %-10s %" PRIu64 " chunks, %s -> %s\n", codec_name(k),
                    codec[k].chunks, human(codec[k].raw_bytes, a, 32),
                    human(codec[k].stored_bytes, b, 32));
    fprintf(o, "\n%8s  %-18s  %10s  %-11s  %-7s  %3s  %6s  %10s  %6s  %s\n", "id", "address",
            "size", "kind", "dtype", "dev", "chunks", "stored", "ratio", "call site");
    for (size_t i = 0; i < image_alloc_count(img); i++) {
        const struct image_alloc *al = image_alloc_at(img, i);
        struct image_sums s;

        image_sum_alloc(img, al->id, &s);
        fprintf(o,
                "%8" PRIu64 "  0x%016" PRIx64 "  %10s  %-11s  %-7s  %3u  %6" PRIu64
                "  %10s  %6.3f  %s\n",
                al->id, al->addr, human(al->size, a, 32), image_alloc_kind_name(al->kind),
                codec_dtype_name(al->dtype), al->device, s.chunks, human(s.stored_bytes, b, 32),
                ratio(s.stored_bytes, s.raw_bytes), al->callsite ? al->callsite : "-");
    }
    return fflush(o) == 0 && !ferror(o) ? 0 : -EIO;
}
