/*
 * replay.c - the main of a fuzz target outside libFuzzer: feed it every
 * file named on the command line, or every file of the directories named
 * (its seed corpus), in name order, and report how many. A crash, a
 * sanitizer report or an abort fails the test; so does an empty corpus.
 *
 *   fuzz_image_replay tests/fuzz/corpus/image
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fileio.h"
#include "fuzz.h"

#define REPLAY_MAX_INPUT (16u << 20)

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = malloc(REPLAY_MAX_INPUT);
    size_t n;

    if (!f || !buf) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    n = fread(buf, 1, REPLAY_MAX_INPUT, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 1;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int replay_dir(const char *dir)
{
    struct dirent **names;
    char path[PATH_MAX];
    int n = scandir(dir, &names, NULL, by_name), done = 0;

    if (n < 0) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        exit(1);
    }
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.' &&
            snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name) < (int)sizeof(path))
            done += replay_file(path);
        free(names[i]);
    }
    free(names);
    return done;
}

int main(int argc, char **argv)
{
    int done = 0;

    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        done += S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]);
    }
    if (!done) {
        fprintf(stderr, "replay: no inputs\n");
        return 1;
    }
    printf("replayed %d inputs\n", done);
    return 0;
}
