/*
 * fuzz.h - what the fuzz targets share (tests/fuzz/README.md).
 *
 * Each target is one file defining LLVMFuzzerTestOneInput. Built with
 * -Dfuzz=enabled under clang it links libFuzzer (suite `fuzz`); in every
 * other build it links replay.c instead, which feeds it each file of its
 * checked-in seed corpus (suite `unit`, test fuzz-replay-*). A target must
 * be deterministic and leave nothing behind but what it cleans up at exit.
 */
#ifndef TCGPU_TESTS_FUZZ_H
#define TCGPU_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * A private scratch directory for this process (made once, removed at
 * exit), and the path of `name` in it. Aborts if it cannot be made: a
 * target that cannot run must not pass.
 */
const char *fuzz_scratch(const char *name);

/* Write len bytes to path (created or truncated, 0600). Aborts on failure. */
void fuzz_write_file(const char *path, const void *data, size_t len);

#endif
