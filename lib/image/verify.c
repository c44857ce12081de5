/*
 * verify.c - checking every chunk's stored bytes against their checksum on
 * several threads (image_verify_stored, image.h). A restore runs it before
 * it touches anything: it refuses a damaged or truncated data file at the
 * cost of reading it once and hashing it (XXH3 runs at memory speed), and
 * leaves the raw checksums to the refill, which decodes every chunk anyway
 * (docs/image-format.md, "Reading an untrusted image").
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/helper_thread.h"
#include "image.h"

#define MAX_VERIFY_THREADS 64u

struct verify {
    const struct image *img;
    size_t n;
    size_t next;                  /* next chunk to take (mu) */
    size_t bad;                   /* lowest failing chunk, n if none (mu) */
    int rc;                       /* its error */
    char msg[512];
    pthread_mutex_t mu;
};

/* The next chunk to check, or n when done (or a failure before it). */
static size_t take(struct verify *v)
{
    size_t i;

    pthread_mutex_lock(&v->mu);
    i = v->next < v->bad ? v->next++ : v->n;
    pthread_mutex_unlock(&v->mu);
    return i < v->n ? i : v->n;
}

static void failed(struct verify *v, size_t i, int rc, const char *msg)
{
    pthread_mutex_lock(&v->mu);
    if (i < v->bad) {             /* the first in chunk order wins: reproducible */
        v->bad = i;
        v->rc = rc;
        snprintf(v->msg, sizeof(v->msg), "%s", msg);
    }
    pthread_mutex_unlock(&v->mu);
}

/* Reads and checks chunk i's stored bytes into *buf (grown as needed); a
 * PATCH chunk's base chain too (the base it names, its stored bytes). */
static int verify_chunk(const struct image *img, size_t i, uint8_t **buf, size_t *cap, char *err,
                        size_t errlen)
{
    for (int depth = 0;; depth++) {
        const struct image *b;
        uint64_t named;
        uint32_t len;
        size_t bi;
        int rc;

        image_chunk_resolved(img, i, NULL, &len);
        if (len > *cap) {
            uint8_t *nb = realloc(*buf, len);

            if (!nb) {
                snprintf(err, errlen, "out of memory verifying the image");
                return -ENOMEM;
            }
            *buf = nb;
            *cap = len;
        }
        if ((rc = image_read_stored(img, i, *buf, err, errlen)) != 0)
            return rc;
        rc = image_chunk_base(img, i, &b, &bi);
        if (rc == -ENOENT)
            return 0;             /* not a patch: done */
        if (rc || depth > 64 || codec_patch_base_csum(*buf, len, &named) ||
            named != image_chunk_at(b, bi)->raw_csum) {
            snprintf(err, errlen, "chunk %zu of %s: %s", i, image_parent(img, NULL),
                     rc ? "the parent image it patches is not open"
                        : "patches a chunk its parent image does not hold (checksum differs)");
            return rc ? -EOPNOTSUPP : -EBADMSG;
        }
        img = b;
        i = bi;
    }
}

static void *verify_main(void *arg)
{
    struct verify *v = arg;
    uint8_t *buf = NULL;
    size_t cap = 0;

    for (size_t i; (i = take(v)) < v->n;) {
        char err[512] = "";
        int rc = verify_chunk(v->img, i, &buf, &cap, err, sizeof(err));

        if (rc)
            failed(v, i, rc, err);
    }
    free(buf);
    return NULL;
}

int image_verify_stored(const struct image *img, unsigned threads, char *errbuf, size_t errlen)
{
    struct verify v = { .img = img, .n = image_chunk_count(img) };
    struct helper_thread th[MAX_VERIFY_THREADS];
    unsigned started = 0;

    if (!threads) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cpus > 0 ? (unsigned)cpus : 1;
    }
    if (threads > MAX_VERIFY_THREADS)
        threads = MAX_VERIFY_THREADS;
    if (threads > v.n)
        threads = v.n ? (unsigned)v.n : 1;
    v.bad = v.n;
    pthread_mutex_init(&v.mu, NULL);
    while (started + 1 < threads && helper_thread_start(&th[started], verify_main, &v) == 0)
        started++;
    verify_main(&v);              /* the caller's thread is one of them */
    for (unsigned k = 0; k < started; k++)
        helper_thread_join(&th[k]);
    pthread_mutex_destroy(&v.mu);
    if (v.bad < v.n && errbuf && errlen)
        snprintf(errbuf, errlen, "%s", v.msg);
    return v.bad < v.n ? v.rc : 0;
}
