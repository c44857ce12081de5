/*
 * coverage_probe.h - what codegen/gen_coverage.py generates for the
 * coverage probe (test_coverage.c): one call per exported driver function,
 * and what docs/simcuda.md's coverage table says of every entry point.
 */
#ifndef SIMCUDA_COVERAGE_PROBE_H
#define SIMCUDA_COVERAGE_PROBE_H

#include <cuda.h>
#include <cudaProfilerTypedefs.h>
#include <cudaTypedefs.h>
#include <stddef.h>
#include <string.h>

/* What the table lists an exported function as. */
enum probe_kind {
    PROBE_SIMULATED,    /* must never answer CUDA_ERROR_NOT_SUPPORTED */
    PROBE_PARTIAL,      /* may: simulated in part */
    PROBE_FIXED,        /* must answer `want`: as the driver always does
                           (SIM_AS_DRIVER), or exported but not simulated */
};

struct probe_call {
    const char *abi;                /* exported name */
    CUresult (*call)(void *fn);     /* calls fn with zeroed arguments */
    enum probe_kind kind;
    CUresult want;                  /* PROBE_FIXED */
};

/* An entry point as cuGetProcAddress(symbol, CUDA_VERSION, default) sees it:
 * found (the table lists it simulated, in whole or in part) as `abi`, or
 * not found. */
struct probe_symbol {
    const char *symbol;
    int found;
    const char *abi;
};

/* Zeroed memory every pointer argument points to (the probe's own). */
extern unsigned char scratch[];

extern const struct probe_call probe_calls[];
extern const size_t probe_ncalls;
extern const char *const probe_absent[];     /* ABI names simcuda must not export */
extern const size_t probe_nabsent;
extern const struct probe_symbol probe_symbols[];
extern const size_t probe_nsymbols;
extern const int probe_cuda_version;

#endif
