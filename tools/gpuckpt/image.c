/*
 * gpuckpt inspect and verify: the image reader (lib/image/image.h) on the
 * command line. inspect --json is built here, through jansson, from the
 * reader's accessors (docs/cli.md, "JSON output": the inspect object).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ctl/client.h"
#include "commands.h"
#include "restore.h"
#include "tree.h"
#include "util.h"
#include "image/image.h"
#include "json/json.h"
#include "common/hex.h"

/* Exit code for an image_open / image_verify_all failure. */
static int image_exit_code(int r)
{
    switch (-r) {
    case EBADMSG:
    case EILSEQ:
        return CTL_EXIT_CORRUPT;
    case EACCES:
    case EPERM:
        return CTL_EXIT_PERM;
    default:
        return CTL_EXIT_FAILED;
    }
}

/*
 * Parses `self`'s command line: one image directory into *dir, and --json
 * or -o FORMAT. Returns 0, -1 when --help was shown, or a usage exit code.
 */
static int parse_dir_args(const struct gpuckpt_command *self, int argc, char **argv,
                          const char **dir)
{
    const char *cmd = self->name;
    static const struct option longopts[] = {
        GPUCKPT_OUTPUT_LONGOPTS,
        { 0 },
    };
    int ch, r;

    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "hjo:", longopts, NULL)) != -1) {
        r = gpuckpt_output_option(self, ch);
        if (r == GPUCKPT_NOT_OUTPUT_OPTION)
            return gpuckpt_option_error(cmd, argc, argv, "hjo:", longopts);
        if (r)
            return r;
    }
    if (optind != argc - 1)
        return gpuckpt_usage_error(cmd, optind >= argc ? "which image directory?"
                                                       : "one image directory, please");
    *dir = argv[optind];
    return 0;
}

/* ---------------------------------------------------------------------------
 * inspect --json
 * ------------------------------------------------------------------------- */

static double ratio(uint64_t stored, uint64_t raw)
{
    return raw ? (double)stored / (double)raw : 0.0;
}

static json_t *sums_object(const struct image_sums *s)
{
    return json_pack("{sI sI sI}", "chunks", (json_int_t)s->chunks, "raw_bytes",
                     (json_int_t)s->raw_bytes, "stored_bytes", (json_int_t)s->stored_bytes);
}

static json_t *process_object(const struct image *img)
{
    const struct image_process *p = image_process_info(img);
    json_t *o = json_object();

    if (o && (tc_json_set_int(o, "pid", p->pid) < 0 ||
              tc_json_set_string(o, "hostname", p->hostname) < 0 ||
              tc_json_set_string(o, "exe", p->exe) < 0 ||
              tc_json_set_uint(o, "start_time_ns", p->start_time_ns) < 0 ||
              tc_json_set_uint(o, "created_ns", p->created_ns) < 0)) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

static json_t *devices_array(const struct image *img)
{
    json_t *a = json_array();
    char id[33];

    for (uint32_t i = 0; a && i < image_device_count(img); i++) {
        const struct image_device *d = image_device_info(img, i);
        json_t *o = json_object();

        hex_put16(d->uuid, id);
        if (!o || tc_json_set_int(o, "index", i) < 0 || tc_json_set_string(o, "name", d->name) < 0 ||
            tc_json_set_int(o, "ordinal", d->ordinal) < 0 || tc_json_set_string(o, "uuid", id) < 0 ||
            tc_json_set_uint(o, "total_mem", d->total_mem) < 0 ||
            tc_json_set_int(o, "driver_version", d->driver_version) < 0 ||
            json_array_append_new(a, o) < 0) {
            json_decref(o);
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

static json_t *allocations_array(const struct image *img)
{
    json_t *a = json_array();
    char addr[24];

    for (size_t i = 0; a && i < image_alloc_count(img); i++) {
        const struct image_alloc *al = image_alloc_at(img, i);
        struct image_sums s;
        json_t *o = json_object();

        image_sum_alloc(img, al->id, &s);
        snprintf(addr, sizeof(addr), "0x%" PRIx64, al->addr);
        if (!o || tc_json_set_uint(o, "id", al->id) < 0 || tc_json_set_string(o, "address", addr) < 0 ||
            tc_json_set_uint(o, "size", al->size) < 0 ||
            tc_json_set_string(o, "kind", image_alloc_kind_name(al->kind)) < 0 ||
            tc_json_set_int(o, "flags", al->flags) < 0 ||
            tc_json_set_string(o, "dtype", codec_dtype_name(al->dtype)) < 0 ||
            tc_json_set_int(o, "device", al->device) < 0 || tc_json_set_uint(o, "chunks", s.chunks) < 0 ||
            tc_json_set_uint(o, "raw_bytes", s.raw_bytes) < 0 ||
            tc_json_set_uint(o, "stored_bytes", s.stored_bytes) < 0 ||
            tc_json_set_string(o, "callsite", al->callsite) < 0 || json_array_append_new(a, o) < 0) {
            json_decref(o);
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

static json_t *codecs_object(const struct image_sums *codec)
{
    json_t *o = json_object();

    for (unsigned k = 0; o && k < TCGPU_CODEC_COUNT; k++)
        if (tc_json_set_new(o, codec_name(k), sums_object(&codec[k])) < 0) {
            json_decref(o);
            o = NULL;
        }
    return o;
}

/* The inspect object (docs/cli.md): warning is the damage inspect found, or NULL. */
static json_t *inspect_object(const struct image *img, const char *dir, const char *warning)
{
    struct image_sums codec[TCGPU_CODEC_COUNT], all;
    uint8_t sum[16];
    const char *parent = image_parent(img, sum);
    char id[33];
    json_t *o = json_object(), *par = json_null();
    int bad;

    image_sum_chunks(img, codec, &all);
    if (parent) {
        hex_put16(sum, id);
        json_decref(par);
        par = json_object();
        if (par && (tc_json_set_string(par, "path", parent) < 0 || tc_json_set_string(par, "id", id) < 0)) {
            json_decref(par);
            par = NULL;
        }
    }
    image_manifest_csum(img, sum);
    hex_put16(sum, id);
    bad = !o || tc_json_set_bool(o, "ok", 1) < 0 || tc_json_set_string(o, "dir", dir) < 0 ||
          tc_json_set_string(o, "kind", "image") < 0 || tc_json_set_string(o, "warning", warning) < 0 ||
          tc_json_set_new(o, "format", json_pack("{sI sI}", "major", (json_int_t)TCGPU_IMG_VERSION_MAJOR,
                                                 "minor", (json_int_t)image_version_minor(img))) < 0 ||
          tc_json_set_new(o, "parent", par) < 0 || tc_json_set_string(o, "id", id) < 0 ||
          tc_json_set_new(o, "process", process_object(img)) < 0 ||
          tc_json_set_new(o, "devices", devices_array(img)) < 0 ||
          tc_json_set_new(o, "allocations", allocations_array(img)) < 0 ||
          tc_json_set_new(o, "codecs", codecs_object(codec)) < 0 ||
          tc_json_set_new(o, "totals", json_pack("{sI sI sI sI sI sf}",
                  "allocations", (json_int_t)image_alloc_count(img),
                  "alloc_bytes", (json_int_t)image_alloc_bytes(img),
                  "chunks", (json_int_t)image_chunk_count(img),
                  "raw_bytes", (json_int_t)all.raw_bytes, "stored_bytes", (json_int_t)all.stored_bytes,
                  "ratio", ratio(all.stored_bytes, all.raw_bytes))) < 0;
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* ---------------------------------------------------------------------------
 * The commands
 * ------------------------------------------------------------------------- */

int gpuckpt_cmd_inspect(const struct gpuckpt_command *self, int argc, char **argv)
{
    struct image *img = NULL;
    const char *dir;
    char err[512] = "";
    int damaged = 0, r;

    r = parse_dir_args(self, argc, argv, &dir);
    if (r)
        return r < 0 ? CTL_EXIT_OK : r;
    if (tree_is_save_dir(dir))
        return gpuckpt_tree_inspect(dir);
    r = image_open(&img, dir, 0, err, sizeof(err));
    if (r == -EBADMSG || r == -EIO) {
        /* damaged data files: still show what the manifest says */
        char err2[512];
        if (image_open(&img, dir, IMAGE_OPEN_MANIFEST_ONLY, err2, sizeof(err2)) == 0) {
            gpuckpt_error("inspect %s: warning: %s", dir, err);
            damaged = 1;
        } else {
            img = NULL;
        }
    }
    if (!img) {
        gpuckpt_error("inspect %s: %s", dir, err[0] ? err : strerror(-r));
        return image_exit_code(r);
    }
    if (gpuckpt_json()) {
        r = gpuckpt_print_json(inspect_object(img, dir, damaged ? err : NULL));
        image_close(img);
        return r;
    }
    r = image_describe(img, stdout);
    image_close(img);
    if (r < 0) {
        gpuckpt_error("inspect %s: cannot write the description: %s", dir, strerror(-r));
        return CTL_EXIT_FAILED;
    }
    return CTL_EXIT_OK;
}

int gpuckpt_cmd_verify(const struct gpuckpt_command *self, int argc, char **argv)
{
    struct image *img = NULL;
    const char *dir;
    char err[512] = "";
    uint64_t stored = 0;
    size_t n;
    int r;

    r = parse_dir_args(self, argc, argv, &dir);
    if (r)
        return r < 0 ? CTL_EXIT_OK : r;
    if (tree_is_save_dir(dir))
        return gpuckpt_tree_verify(dir);
    r = image_open(&img, dir, 0, err, sizeof(err));
    if (r < 0) {
        gpuckpt_error("verify %s: %s", dir, err[0] ? err : strerror(-r));
        return image_exit_code(r);
    }
    r = image_verify_all(img, 0);
    if (r < 0) {
        gpuckpt_error("verify %s: %s", dir, image_error(img));
        image_close(img);
        return image_exit_code(r);
    }
    n = image_chunk_count(img);
    for (size_t i = 0; i < n; i++)
        stored += image_chunk_at(img, i)->stored_len;
    if (gpuckpt_json())
        r = gpuckpt_print_json(json_pack("{sb so ss sI sI sI}", "ok", 1, "dir", tc_json_string(dir), "kind", "image",
                                         "allocations", (json_int_t)image_alloc_count(img),
                                         "chunks", (json_int_t)n, "bytes_checked", (json_int_t)stored));
    else
        printf("%s: ok (%zu allocations, %zu chunks, %" PRIu64 " bytes checked)\n", dir,
               image_alloc_count(img), n, stored);
    image_close(img);
    return r;
}
