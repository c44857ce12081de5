/*
 * store.c - the host store (a drain's raw copy, one buffer per extent,
 * mmap'd with transparent huge pages) and its background compression
 * (TCGPU_HOST_COMPRESS: threads of its own, raw pages given back chunk by
 * chunk).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "driver/gate.h"
#include "internal.h"

/* --- host store ------------------------------------------------------------ */

static uint8_t *store_alloc(struct pipe_store *s, size_t len)
{
    struct hbuf *b = &s->bufs[s->nbufs];

    b->len = len;
    if (len >= MMAP_MIN) {
        b->mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b->mem == MAP_FAILED)
            return NULL;
        b->mapped = 1;
        /* Fewer faults on the way in; zero chunks never touch their pages. */
        madvise(b->mem, len, MADV_HUGEPAGE);
    } else if (!(b->mem = malloc(len ? len : 1))) {
        return NULL;
    }
    s->nbufs++;
    return b->mem;
}

void pipe_store_free(struct pipe_store *s)
{
    if (!s)
        return;
    pipe_store_compress_stop(s);
    for (size_t i = 0; i < s->nbufs; i++) {
        if (s->bufs[i].mapped)
            munmap(s->bufs[i].mem, s->bufs[i].len);
        else
            free(s->bufs[i].mem);
    }
    for (size_t i = 0; i < s->n; i++)
        free(s->pc[i].enc);
    pthread_mutex_destroy(&s->mu);
    free(s->bufs);
    free(s->pc);
    free(s);
}

int pipe_store_new(struct pipe *p, const struct pipe_ext *e, size_t n, struct pipe_store **out)
{
    struct pipe_store *s = calloc(1, sizeof(*s));
    size_t k = 0;
    int rc;

    if (!s)
        return -ENOMEM;
    pthread_mutex_init(&s->mu, NULL);
    s->bufs = calloc(n ? n : 1, sizeof(*s->bufs));
    if (!s->bufs || (rc = pipe_make_pieces(p, e, n, &s->pc, &s->n)) != 0) {
        pipe_store_free(s);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t *m;

        if (!e[i].len)
            continue;
        m = store_alloc(s, e[i].len);
        if (!m) {
            pipe_say(p, "out of host memory for %zu bytes of device memory at %#llx", e[i].len,
                     (unsigned long long)e[i].va);
            pipe_store_free(s);
            return -ENOMEM;
        }
        for (size_t done = 0; done < e[i].len; k++) {
            s->pc[k].host = m + done;
            done += s->pc[k].len;
        }
        s->raw_bytes += e[i].len;
    }
    *out = s;
    return 0;
}

uint64_t pipe_store_raw_bytes(const struct pipe_store *s)
{
    return s->raw_bytes;
}

uint64_t pipe_store_bytes(const struct pipe_store *s)
{
    uint64_t b = 0;

    for (size_t i = 0; i < s->n; i++)
        b += s->pc[i].state == P_RAW ? s->pc[i].len : s->pc[i].state == P_ENC ? s->pc[i].enc_len : 0;
    return b;
}

int pipe_store_read(struct pipe_store *s, uint64_t alloc_id, uint64_t offset, void *dst,
                    size_t len)
{
    for (size_t i = 0; i < s->n; i++) {
        struct piece *q = &s->pc[i];

        if (q->alloc_id != alloc_id || offset < q->offset || offset + len > q->offset + q->len)
            continue;
        if (q->state == P_ZERO)
            memset(dst, 0, len);
        else if (q->state == P_RAW)
            memcpy(dst, q->host + (offset - q->offset), len);
        else
            return -EOPNOTSUPP;
        return 0;
    }
    return -ENOENT;
}

/* --- background compression of a host store ----------------------------------- */

static void *compress_main(void *arg)
{
    struct pipe_store *s = arg;
    struct codec_ctx *ctx = NULL;
    uint8_t *buf = NULL;
    size_t cap = 0;

    tcgpu_gate_set_exempt(true);
    if (codec_ctx_new(&ctx, NULL))
        return NULL;
    for (;;) {
        struct piece *q;
        struct codec_out o;
        size_t i;

        pthread_mutex_lock(&s->mu);
        i = s->stop ? s->n : s->next++;
        pthread_mutex_unlock(&s->mu);
        if (i >= s->n)
            break;
        q = &s->pc[i];
        if (q->state != P_RAW)
            continue;
        if (cap < q->len) {
            free(buf);
            cap = q->len;
            if (!(buf = malloc(cap)))
                break;
        }
        if (codec_encode(ctx, q->host, q->len, q->dtype, buf, cap, &o) != 0)
            continue;
        if (o.codec == TCGPU_CODEC_ZERO) {
            q->state = P_ZERO;
        } else if (o.codec != TCGPU_CODEC_RAW) {
            uint8_t *e = malloc(o.stored_len);
            if (!e)
                continue;
            memcpy(e, o.data, o.stored_len);
            q->enc = e;
            q->enc_len = (uint32_t)o.stored_len;
            q->codec = o.codec;
            q->state = P_ENC;
        } else {
            continue;
        }
        /* Give the raw pages back (the page-aligned inside of the chunk). */
        uintptr_t a = ((uintptr_t)q->host + 4095) & ~(uintptr_t)4095;
        uintptr_t b = ((uintptr_t)q->host + q->len) & ~(uintptr_t)4095;
        if (b > a)
            madvise((void *)a, b - a, MADV_DONTNEED);
    }
    free(buf);
    codec_ctx_free(ctx);
    return NULL;
}

int pipe_store_compress_start(struct pipe_store *s, unsigned threads)
{
    if (s->th)
        return -EALREADY;
    s->nth = threads ? threads : pipe_default_workers();
    s->th = calloc(s->nth, sizeof(*s->th));
    if (!s->th)
        return -ENOMEM;
    s->stop = 0;
    s->next = 0;
    for (unsigned i = 0; i < s->nth; i++) {
        if (pthread_create(&s->th[i], NULL, compress_main, s)) {
            s->nth = i;
            pipe_store_compress_stop(s);
            return -EAGAIN;
        }
    }
    return 0;
}

void pipe_store_compress_stop(struct pipe_store *s)
{
    if (!s->th)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    for (unsigned i = 0; i < s->nth; i++)
        pthread_join(s->th[i], NULL);
    free(s->th);
    s->th = NULL;
    s->nth = 0;
}
