/*
 * host_hold - hold a tcgpu image's bytes in host memory, for the save/restore
 * benchmark's baseline: what cuda-checkpoint + CRIU dump is a process whose
 * device memory the driver has copied into its host memory. This program
 * decodes every allocation of IMAGE into malloc'ed memory, touches it, writes
 * READY_FILE, and sleeps until killed.
 *
 *   host_hold IMAGE READY_FILE
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "image/image.h"

int main(int argc, char **argv)
{
    struct image *img = NULL;
    char err[512];
    uint64_t total = 0;
    FILE *f;

    if (argc != 3) {
        fprintf(stderr, "usage: host_hold IMAGE READY_FILE\n");
        return 2;
    }
    if (image_open(&img, argv[1], 0, err, sizeof(err)) < 0) {
        fprintf(stderr, "host_hold: %s\n", err);
        return 1;
    }
    for (size_t i = 0; i < image_alloc_count(img); i++) {
        const struct image_alloc *a = image_alloc_at(img, i);
        void *p = malloc(a->size);
        int r;

        if (!p || (r = image_read_allocation(img, a->id, p, a->size)) < 0) {
            fprintf(stderr, "host_hold: allocation %zu: %s\n", i, p ? image_error(img) : "no memory");
            return 1;
        }
        total += a->size;       /* kept: the process holds the bytes until killed */
    }
    image_close(img);
    if (!(f = fopen(argv[2], "w")))
        return 1;
    fprintf(f, "%llu\n", (unsigned long long)total);
    fclose(f);
    for (;;)
        pause();
}
