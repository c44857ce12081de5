/*
 * tcgpu.h - transparent checkpoint and preemptive sharing of GPUs: the C API.
 *
 * This is the one public header of libtcgpu.so. Each function's contract
 * (what it returns, what the caller owns afterwards, which threads may call
 * it) sits next to its prototype.
 *
 * Conventions
 *   - Functions return 0 on success or a negative errno value (-EINVAL, ...).
 *   - All functions are thread-safe unless a comment says otherwise.
 */
#ifndef TCGPU_H
#define TCGPU_H

#ifdef __cplusplus
extern "C" {
#endif

#define TCGPU_VERSION_MAJOR 0
#define TCGPU_VERSION_MINOR 1
#define TCGPU_VERSION_PATCH 0
#define TCGPU_VERSION_STRING "0.1.0"

#if defined(__GNUC__)
#define TCGPU_API __attribute__((visibility("default")))
#else
#define TCGPU_API
#endif

/* The library's version, "MAJOR.MINOR.PATCH"; a static string. */
TCGPU_API const char *tcgpu_version_string(void);

#ifdef __cplusplus
}
#endif
#endif /* TCGPU_H */
