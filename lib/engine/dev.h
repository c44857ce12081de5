/*
 * dev.h - device-side helpers of the drain: small kernels that look
 * at device memory where it is, so that zero chunks and chunks unchanged
 * since the parent image never cross the host link.
 *
 * Kernels (lib/engine/kernels/, semantics in devhash.h):
 *   tcgpu_scan(desc, n, out, flags)  for each of n chunks {va, len}: whether
 *                              every byte is zero, and (flags bit 0) the
 *                              chunk's device hash; the twin takes bit 1 too
 *                              (PDEV_SCAN_SCALAR).
 *
 * Two images carry them, both embedded in the library: a cubin/fatbin built
 * by nvcc from lib/engine/kernels/scan.cu (when nvcc was found), and the simcuda
 * twin, a shared object of host functions with the same names and meaning
 * (lib/engine/kernels/scan_sim.c). pdev_load tries the cubin first and falls back to
 * the twin: a real driver refuses the twin, simcuda refuses the cubin.
 *
 * Runs on the operation's thread with a context current; 0 or -errno.
 */
#ifndef TCGPU_PIPELINE_DEV_H
#define TCGPU_PIPELINE_DEV_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

struct pdev;

/* What the scan kernel reads per chunk (16 bytes, little-endian). */
struct pdev_desc {
    uint64_t va;
    uint64_t len;
};

/* What it writes per chunk (16 bytes). */
struct pdev_result {
    uint64_t hash;                /* devhash.h */
    uint32_t nonzero;             /* 0: every byte is zero */
    uint32_t pad;
};

/* Which image was loaded. */
enum { PDEV_NONE = 0, PDEV_SIM_TWIN = 1, PDEV_CUBIN = 2 };

/*
 * Loads the helpers into the current context and allocates their small
 * device buffers (room for `max_batch` chunks per scan). The simcuda twin
 * is tried only with `allow_twin` (it scans on the CPU: slower than the
 * copies it saves there; the tests and the benchmark's columns ask for it). Returns 0 and *out,
 * or -ENOENT (no image loads: no helpers, not an error), -ENOMEM.
 */
int pdev_load(struct pdev **out, size_t max_batch, int allow_twin);

/* PDEV_SIM_TWIN or PDEV_CUBIN. */
int pdev_kind(const struct pdev *d);

#define PDEV_SCAN_HASH 0x1u   /* compute the device hash too (else zero detection only) */
#define PDEV_SCAN_SCALAR 0x2u /* the simcuda twin hashes with the scalar reference, not
                                 its vector form (tests); a GPU's kernel ignores it */

/*
 * Scans n (<= max_batch) chunks on `stream` and waits: res[i] for desc[i].
 * Without PDEV_SCAN_HASH in `flags` only res[i].nonzero is set (hash 0).
 * 0 or -EIO (the driver's error name in `err`).
 */
int pdev_scan(struct pdev *d, CUstream stream, const struct pdev_desc *desc, size_t n,
              unsigned flags, struct pdev_result *res, char *err, size_t errlen);

/* Frees the buffers and unloads the module (same context); NULL is fine. */
void pdev_unload(struct pdev *d);

/* The embedded images (generated C arrays; length 0 when not built). */
extern const unsigned char tcgpu_kernels_cubin[];
extern const size_t tcgpu_kernels_cubin_len;
extern const unsigned char tcgpu_kernels_sim[];
extern const size_t tcgpu_kernels_sim_len;

#endif
