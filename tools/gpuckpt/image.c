/* gpuckpt inspect and verify: the image reader (lib/image/image.h) on the command line. */
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
 * when allow_json. Returns 0, -1 when --help was shown, or a usage exit code.
 */
static int parse_dir_args(const struct gpuckpt_command *self, int argc, char **argv,
                          int allow_json, int *json, const char **dir)
{
    const char *cmd = self->name;
    static const struct option longopts[] = {
        { "json", no_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    int ch;

    *json = 0;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (ch == 'h') {
            gpuckpt_command_help(self);
            return -1;
        }
        if (ch == 'j' && allow_json) {
            *json = 1;
            continue;
        }
        if (ch == 'j')
            return gpuckpt_usage_error(cmd, "--json is for inspect");
        return gpuckpt_option_error(cmd, argc, argv, "h", longopts);
    }
    if (optind != argc - 1)
        return gpuckpt_usage_error(cmd, optind >= argc ? "which image directory?"
                                                       : "one image directory, please");
    *dir = argv[optind];
    return 0;
}

int gpuckpt_cmd_inspect(const struct gpuckpt_command *self, int argc, char **argv)
{
    struct image *img = NULL;
    const char *dir;
    char err[512] = "";
    int json, r;

    r = parse_dir_args(self, argc, argv, 1, &json, &dir);
    if (r)
        return r < 0 ? CTL_EXIT_OK : r;
    if (tree_is_save_dir(dir))
        return gpuckpt_tree_inspect(dir, json);
    r = image_open(&img, dir, 0, err, sizeof(err));
    if (r == -EBADMSG || r == -EIO) {
        /* damaged data files: still show what the manifest says */
        char err2[512];
        if (image_open(&img, dir, IMAGE_OPEN_MANIFEST_ONLY, err2, sizeof(err2)) == 0)
            gpuckpt_error("inspect %s: warning: %s", dir, err);
        else
            img = NULL;
    }
    if (!img) {
        gpuckpt_error("inspect %s: %s", dir, err[0] ? err : strerror(-r));
        return image_exit_code(r);
    }
    r = image_describe(img, stdout, json);
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
    int json, r;

    r = parse_dir_args(self, argc, argv, 0, &json, &dir);
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
    printf("%s: ok (%zu allocations, %zu chunks, %" PRIu64 " bytes checked)\n", dir,
           image_alloc_count(img), n, stored);
    image_close(img);
    return CTL_EXIT_OK;
}
