/*
 * describe.c - `gpuckpt inspect`: the manifest as a table or as JSON
 * (contract in image.h).
 */
#include "image.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const kind_names[TCGPU_ALLOC_KIND_COUNT] = {
    "device", "pitch", "vmm", "pool", "host-pinned", "managed",
};

struct codec_stat {
    uint64_t chunks, raw, stored;
};

/* Per-allocation and per-codec sums over the chunk table. */
struct totals {
    struct codec_stat codec[TCGPU_CODEC_COUNT];
    uint64_t alloc_bytes, raw, stored;
};

static const char *kind_name(uint32_t k)
{
    return k < TCGPU_ALLOC_KIND_COUNT ? kind_names[k] : "unknown";
}

static void sum_alloc(const struct image *img, uint64_t id, struct codec_stat *s)
{
    size_t lo = 0, hi = image_chunk_count(img);

    *s = (struct codec_stat){0};
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
        s->raw += k->raw_len;
        s->stored += k->stored_len;
    }
}

static void sum_all(const struct image *img, struct totals *t)
{
    memset(t, 0, sizeof(*t));
    for (size_t i = 0; i < image_alloc_count(img); i++)
        t->alloc_bytes += image_alloc_at(img, i)->size;
    for (size_t i = 0; i < image_chunk_count(img); i++) {
        const struct image_chunk *k = image_chunk_at(img, i);
        struct codec_stat *c = &t->codec[k->codec < TCGPU_CODEC_COUNT ? k->codec : 0];

        c->chunks++;
        c->raw += k->raw_len;
        c->stored += k->stored_len;
        t->raw += k->raw_len;
        t->stored += k->stored_len;
    }
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

static void hex(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

static void describe_text(const struct image *img, FILE *o, const struct totals *t)
{
    const struct image_process *p = image_process_info(img);
    char a[32], b[32], c[32], id[33], when1[32], when2[32];
    uint8_t sum[16];
    const char *parent = image_parent(img, sum);

    image_manifest_csum(img, sum);
    hex(sum, 16, id);
    fprintf(o, "format       tcgpu image %u.%u, id %s\n", TCGPU_IMG_VERSION_MAJOR,
            image_version_minor(img), id);
    fprintf(o, "process      pid %u on %s: %s\n", p->pid, p->hostname, p->exe);
    fprintf(o, "             started %s, saved %s\n", when(p->start_time_ns, when1, 32),
            when(p->created_ns, when2, 32));
    for (uint32_t i = 0; i < image_device_count(img); i++) {
        const struct image_device *d = image_device_info(img, i);

        hex(d->uuid, 16, id);
        fprintf(o, "device %-5u %s (ordinal %d), uuid %s, %s, driver %u\n", i, d->name, d->ordinal,
                id, human(d->total_mem, a, 32), d->driver_version);
    }
    if (parent) {
        image_parent(img, sum);
        hex(sum, 16, id);
        fprintf(o, "parent       %s (id %s)\n", parent, id);
    }
    fprintf(o, "memory       %zu allocations, %s; saved %s in %s (ratio %.3f)\n",
            image_alloc_count(img), human(t->alloc_bytes, a, 32), human(t->raw, b, 32),
            human(t->stored, c, 32), ratio(t->stored, t->raw));
    for (unsigned k = 0; k < TCGPU_CODEC_COUNT; k++)
        if (t->codec[k].chunks)
            fprintf(o, "codec %-10s %" PRIu64 " chunks, %s -> %s\n", codec_name(k),
                    t->codec[k].chunks, human(t->codec[k].raw, a, 32),
                    human(t->codec[k].stored, b, 32));
    fprintf(o, "\n%8s  %-18s  %10s  %-11s  %-7s  %3s  %6s  %10s  %6s  %s\n", "id", "address",
            "size", "kind", "dtype", "dev", "chunks", "stored", "ratio", "call site");
    for (size_t i = 0; i < image_alloc_count(img); i++) {
        const struct image_alloc *al = image_alloc_at(img, i);
        struct codec_stat s;

        sum_alloc(img, al->id, &s);
        fprintf(o,
                "%8" PRIu64 "  0x%016" PRIx64 "  %10s  %-11s  %-7s  %3u  %6" PRIu64
                "  %10s  %6.3f  %s\n",
                al->id, al->addr, human(al->size, a, 32), kind_name(al->kind),
                codec_dtype_name(al->dtype), al->device, s.chunks, human(s.stored, b, 32),
                ratio(s.stored, s.raw), al->callsite ? al->callsite : "-");
    }
}

/* JSON string with the escapes RFC 8259 requires. */
static void jstr(FILE *o, const char *s)
{
    fputc('"', o);
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(o, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(o, "\\u%04x", *p);
        else
            fputc(*p, o);
    }
    fputc('"', o);
}

static void json_head(const struct image *img, FILE *o)
{
    const struct image_process *p = image_process_info(img);
    uint8_t sum[16];
    char id[33];
    const char *parent = image_parent(img, sum);

    fprintf(o, "{\"format\":{\"major\":%u,\"minor\":%u},", TCGPU_IMG_VERSION_MAJOR,
            image_version_minor(img));
    if (parent) {
        hex(sum, 16, id);
        fprintf(o, "\"parent\":{\"path\":");
        jstr(o, parent);
        fprintf(o, ",\"id\":\"%s\"},", id);
    } else {
        fprintf(o, "\"parent\":null,");
    }
    image_manifest_csum(img, sum);
    hex(sum, 16, id);
    fprintf(o, "\"id\":\"%s\",\"process\":{\"pid\":%u,\"hostname\":", id, p->pid);
    jstr(o, p->hostname);
    fprintf(o, ",\"exe\":");
    jstr(o, p->exe);
    fprintf(o, ",\"start_time_ns\":%" PRIu64 ",\"created_ns\":%" PRIu64 "},\"devices\":[",
            p->start_time_ns, p->created_ns);
    for (uint32_t i = 0; i < image_device_count(img); i++) {
        const struct image_device *d = image_device_info(img, i);

        hex(d->uuid, 16, id);
        fprintf(o, "%s{\"index\":%u,\"name\":", i ? "," : "", i);
        jstr(o, d->name);
        fprintf(o,
                ",\"ordinal\":%d,\"uuid\":\"%s\",\"total_mem\":%" PRIu64 ",\"driver_version\":%u}",
                d->ordinal, id, d->total_mem, d->driver_version);
    }
    fprintf(o, "],");
}

static void describe_json(const struct image *img, FILE *o, const struct totals *t)
{
    json_head(img, o);
    fprintf(o, "\"allocations\":[");
    for (size_t i = 0; i < image_alloc_count(img); i++) {
        const struct image_alloc *a = image_alloc_at(img, i);
        struct codec_stat s;

        sum_alloc(img, a->id, &s);
        fprintf(o,
                "%s{\"id\":%" PRIu64 ",\"address\":\"0x%" PRIx64 "\",\"size\":%" PRIu64
                ",\"kind\":\"%s\",\"flags\":%u,\"dtype\":\"%s\",\"device\":%u,\"chunks\":%" PRIu64
                ",\"raw_bytes\":%" PRIu64 ",\"stored_bytes\":%" PRIu64 ",\"callsite\":",
                i ? "," : "", a->id, a->addr, a->size, kind_name(a->kind), a->flags,
                codec_dtype_name(a->dtype), a->device, s.chunks, s.raw, s.stored);
        if (a->callsite)
            jstr(o, a->callsite);
        else
            fputs("null", o);
        fputc('}', o);
    }
    fprintf(o, "],\"codecs\":{");
    for (unsigned k = 0; k < TCGPU_CODEC_COUNT; k++)
        fprintf(o,
                "%s\"%s\":{\"chunks\":%" PRIu64 ",\"raw_bytes\":%" PRIu64
                ",\"stored_bytes\":%" PRIu64 "}",
                k ? "," : "", codec_name(k), t->codec[k].chunks, t->codec[k].raw,
                t->codec[k].stored);
    fprintf(o,
            "},\"totals\":{\"allocations\":%zu,\"alloc_bytes\":%" PRIu64
            ",\"chunks\":%zu,\"raw_bytes\":%" PRIu64 ",\"stored_bytes\":%" PRIu64
            ",\"ratio\":%.4f}}\n",
            image_alloc_count(img), t->alloc_bytes, image_chunk_count(img), t->raw, t->stored,
            ratio(t->stored, t->raw));
}

int image_describe(const struct image *img, FILE *out, int json)
{
    struct totals t;

    sum_all(img, &t);
    if (json)
        describe_json(img, out, &t);
    else
        describe_text(img, out, &t);
    return fflush(out) == 0 && !ferror(out) ? 0 : -EIO;
}
