/*
 * test_planes.c - the byte planes' split and join (lib/image/planes.c):
 * every vector form the CPU has stores the bytes the scalar one stores, and
 * the join undoes the split without writing past its end, for every element
 * size, with and without the sign rotation, at lengths that leave each
 * vector width a tail, and with source, planes and destination off a
 * vector's alignment.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/planes.h"
#include "../common/check.h"
#include "testdata.h"

#define MAXN (64u * 1024u + 67u)   /* elements: two 32 KiB join slices and a tail */
#define PLANE_ROOM (MAXN + 64u)
#define ALIGNS 3u

static const char *const isa_names[] = { "scalar", "sse2", "ssse3", "avx2" };
static const size_t offsets[ALIGNS] = { 0, 1, 31 };   /* bytes off a 64-byte boundary */

struct bufs {
    uint8_t *src[ALIGNS];   /* the same bytes at src[a] + offsets[a] */
    uint8_t *want, *got;    /* PLANES_MAX_ESIZE planes of PLANE_ROOM bytes each */
    uint8_t *back;          /* the join's output */
};

static void planes_in(uint8_t *mem, unsigned es, size_t off, uint8_t *pl[])
{
    for (unsigned b = 0; b < es; b++)
        pl[b] = mem + b * PLANE_ROOM + off;
}

/* Every form against the scalar one on n elements of es bytes. */
static int one_length(const struct bufs *B, size_t n, unsigned es, int rot)
{
    uint8_t *want[PLANES_MAX_ESIZE], *got[PLANES_MAX_ESIZE];

    planes_in(B->want, es, 0, want);
    planes_limit(PLANES_SCALAR);
    planes_split(B->src[0], n, es, rot, want);
    for (int isa = PLANES_SCALAR; isa <= PLANES_AVX2; isa++) {
        for (unsigned a = 0; a < ALIGNS; a++) {
            const uint8_t *src = B->src[a] + offsets[a];
            const uint8_t *from[PLANES_MAX_ESIZE];
            uint8_t *dst = B->back + offsets[(a + 1) % ALIGNS];

            planes_limit((enum planes_isa)isa);
            planes_in(B->got, es, offsets[(a + 2) % ALIGNS], got);
            planes_split(src, n, es, rot, got);
            for (unsigned b = 0; b < es; b++)
                REQUIRE(memcmp(want[b], got[b], n) == 0,
                        "split %s, esize %u, rot %d, %zu elements, source off by %zu: plane %u "
                        "differs from the scalar form's", isa_names[isa], es, rot, n,
                        offsets[a], b);
            for (unsigned b = 0; b < es; b++)
                from[b] = got[b];
            memset(dst, 0xa5, n * es + 1);
            planes_join(from, n, es, rot, dst);
            REQUIRE(memcmp(dst, src, n * es) == 0, "join %s, esize %u, rot %d, %zu elements: "
                    "not the source back", isa_names[isa], es, rot, n);
            REQUIRE(dst[n * es] == 0xa5, "join %s, esize %u, %zu elements: wrote past the end",
                    isa_names[isa], es, n);
        }
    }
    planes_limit(PLANES_AVX2);
    return T_EXIT_PASS;
}

static int test_forms_agree(void)
{
    static const size_t lens[] = { 0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000, MAXN };
    static const unsigned sizes[] = { 2, 4, 8 };
    size_t bytes = (size_t)MAXN * 8;
    struct bufs B = { .want = malloc(8 * PLANE_ROOM), .got = malloc(8 * PLANE_ROOM + 64),
                      .back = malloc(bytes + 64) };
    int rc = T_EXIT_PASS;

    REQUIRE(B.want && B.got && B.back, "malloc");
    for (unsigned a = 0; a < ALIGNS; a++) {
        REQUIRE((B.src[a] = malloc(bytes + 64)), "malloc");
        /* fp32 weights around zero: sign bits both ways, every byte varied */
        td_weights(B.src[a] + offsets[a], bytes, TD_FP32, 0.5, 7);
    }
    for (unsigned s = 0; s < 3 && rc == T_EXIT_PASS; s++)
        for (int rot = 0; rot <= 1 && rc == T_EXIT_PASS; rot++)
            for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]) && rc == T_EXIT_PASS; i++)
                rc = one_length(&B, lens[i], sizes[s], rot);
    for (unsigned a = 0; a < ALIGNS; a++)
        free(B.src[a]);
    free(B.want);
    free(B.got);
    free(B.back);
    return rc;
}

int main(void)
{
    RUN(test_forms_agree);
    return T_EXIT_STATUS();
}
