/* The control channel's wire protocol; see proto.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/macros.h"
#include "common/names.h"
#include "proto.h"

static const char hexdigits[] = "0123456789ABCDEF";

/* ---------------------------------------------------------------------------
 * Encoding
 * ------------------------------------------------------------------------- */

static int must_escape(unsigned char c, int keep_space)
{
    if (c == ' ')
        return !keep_space;
    return c < 0x21 || c > 0x7e || c == '=' || c == '%';
}

long ctl_encode(const char *src, char *dst, size_t dstlen, int keep_space)
{
    size_t n = 0;

    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        if (must_escape(*p, keep_space)) {
            if (n + 3 >= dstlen)
                return -ENOSPC;
            dst[n++] = '%';
            dst[n++] = hexdigits[*p >> 4];
            dst[n++] = hexdigits[*p & 15];
        } else {
            if (n + 1 >= dstlen)
                return -ENOSPC;
            dst[n++] = (char)*p;
        }
    }
    if (dstlen == 0)
        return -ENOSPC;
    dst[n] = '\0';
    return (long)n;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

long ctl_decode(const char *src, size_t srclen, char *dst)
{
    size_t n = 0;

    for (size_t i = 0; i < srclen; i++) {
        if (src[i] != '%') {
            dst[n++] = src[i];
            continue;
        }
        if (srclen - i < 3)
            return -EPROTO;
        int hi = hexval(src[i + 1]), lo = hexval(src[i + 2]);
        if (hi < 0 || lo < 0 || (hi | lo) == 0)
            return -EPROTO;     /* a NUL would silently cut the value */
        dst[n++] = (char)(hi << 4 | lo);
        i += 2;
    }
    dst[n] = '\0';
    return (long)n;
}

static void buf_append(struct ctl_buf *b, const char *s, size_t n)
{
    if (b->overflow || n > sizeof(b->data) - b->len) {
        b->overflow = 1;
        return;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

static void buf_start(struct ctl_buf *b, const char *word, char sep)
{
    b->len = 0;
    b->overflow = 0;
    b->sep = sep;
    buf_append(b, word, strlen(word));
}

void ctl_buf_request(struct ctl_buf *b, const char *word)
{
    buf_start(b, word, ' ');
}

void ctl_buf_ok(struct ctl_buf *b)
{
    buf_start(b, "ok", '\n');
}

void ctl_buf_error(struct ctl_buf *b, int err, const char *text)
{
    char head[64];
    char enc[1024];
    int e = err < 0 ? -err : err;

    buf_start(b, "error", '\n');
    snprintf(head, sizeof(head), " %s %d ", errno_name(e), e);
    buf_append(b, head, strlen(head));
    if (!text || !*text)
        text = strerror(e);
    /* The text is a human message: a long one is cut rather than lost. */
    char cut[340];
    snprintf(cut, sizeof(cut), "%s", text);
    if (ctl_encode(cut, enc, sizeof(enc), 1) < 0)
        snprintf(enc, sizeof(enc), "%s", "(unprintable message)");
    buf_append(b, enc, strlen(enc));
}

static int key_ok(const char *k, size_t n)
{
    if (n == 0 || n > CTL_KEY_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = k[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return 0;
    }
    return 1;
}

void ctl_buf_put(struct ctl_buf *b, const char *key, const char *value)
{
    size_t vlen = strlen(value);
    char *enc;

    if (!key_ok(key, strlen(key)) || vlen >= CTL_MSG_MAX) {
        b->overflow = 1;
        return;
    }
    enc = malloc(vlen * 3 + 1);
    if (!enc || ctl_encode(value, enc, vlen * 3 + 1, 0) < 0) {
        free(enc);
        b->overflow = 1;
        return;
    }
    buf_append(b, &b->sep, 1);
    buf_append(b, key, strlen(key));
    buf_append(b, "=", 1);
    buf_append(b, enc, strlen(enc));
    free(enc);
}

void ctl_buf_put_u64(struct ctl_buf *b, const char *key, uint64_t v)
{
    char s[24];

    snprintf(s, sizeof(s), "%" PRIu64, v);
    ctl_buf_put(b, key, s);
}

void ctl_buf_put_i64(struct ctl_buf *b, const char *key, int64_t v)
{
    char s[24];

    snprintf(s, sizeof(s), "%" PRId64, v);
    ctl_buf_put(b, key, s);
}

long ctl_buf_finish(const struct ctl_buf *b)
{
    return b->overflow ? -EMSGSIZE : (long)b->len;
}

/* ---------------------------------------------------------------------------
 * Parsing
 * ------------------------------------------------------------------------- */

static int word_ok(const char *w, size_t n)
{
    if (n == 0 || n > CTL_WORD_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((w[i] >= 'a' && w[i] <= 'z') || (w[i] >= '0' && w[i] <= '9') || w[i] == '_'))
            return 0;
    return 1;
}

static int is_sep(char c)
{
    return c == ' ' || c == '\n';
}

/* Store a decoded copy of [src, src+n) in m->store at *pos; NULL on bad escape. */
static const char *store_decoded(struct ctl_msg *m, size_t *pos, const char *src, size_t n)
{
    char *dst = m->store + *pos;
    long dl;

    if (*pos + n + 1 > sizeof(m->store))
        return NULL;
    dl = ctl_decode(src, n, dst);
    if (dl < 0)
        return NULL;
    *pos += (size_t)dl + 1;
    return dst;
}

/* Parse "error NAME NUMBER text" starting after the word; returns the offset
 * of the end of the line, or -1. */
static long parse_error_head(const char *buf, size_t len, size_t i, struct ctl_msg *m, size_t *pos)
{
    size_t s, e;
    long num = 0;

    if (i >= len || buf[i] != ' ')
        return -1;
    i++;
    /* NAME: E[A-Z0-9]* (or "E?") */
    for (s = i; i < len && buf[i] != ' ' && buf[i] != '\n'; i++)
        ;
    if (i - s == 0 || i - s > 32 || buf[s] != 'E')
        return -1;
    for (e = s; e < i; e++)
        if (!((buf[e] >= 'A' && buf[e] <= 'Z') || (buf[e] >= '0' && buf[e] <= '9') || buf[e] == '?'))
            return -1;
    m->err_name = store_decoded(m, pos, buf + s, i - s);
    if (!m->err_name || i >= len || buf[i] != ' ')
        return -1;
    i++;
    /* NUMBER: 1..4095 */
    for (s = i; i < len && buf[i] >= '0' && buf[i] <= '9'; i++) {
        num = num * 10 + (buf[i] - '0');
        if (num > 4095)
            return -1;
    }
    if (i == s || num == 0)
        return -1;
    m->err = -(int)num;
    /* text: the rest of the line, possibly empty */
    if (i < len && buf[i] == ' ')
        i++;
    else if (i < len && buf[i] != '\n')
        return -1;
    for (s = i; i < len && buf[i] != '\n'; i++)
        ;
    m->err_text = store_decoded(m, pos, buf + s, i - s);
    if (!m->err_text)
        return -1;
    return (long)i;
}

int ctl_parse(const char *buf, size_t len, struct ctl_msg *m)
{
    size_t i = 0, s, pos = 0;

    if (len > CTL_MSG_MAX)
        return -EMSGSIZE;
    m->word[0] = '\0';
    m->err = 0;
    m->err_name = "";
    m->err_text = "";
    m->nfields = 0;
    if (memchr(buf, '\0', len))
        return -EPROTO;

    for (s = i; i < len && !is_sep(buf[i]); i++)
        ;
    if (!word_ok(buf + s, i - s))
        return -EPROTO;
    memcpy(m->word, buf + s, i - s);
    m->word[i - s] = '\0';

    if (!strcmp(m->word, "error")) {
        long end = parse_error_head(buf, len, i, m, &pos);
        if (end < 0)
            return -EPROTO;
        i = (size_t)end;
    }

    for (;;) {
        while (i < len && is_sep(buf[i]))
            i++;
        if (i >= len)
            break;
        s = i;
        while (i < len && !is_sep(buf[i]) && buf[i] != '=')
            i++;
        if (i >= len || buf[i] != '=' || !key_ok(buf + s, i - s))
            return -EPROTO;
        if (m->nfields >= CTL_MAX_FIELDS)
            return -EPROTO;
        struct ctl_field *f = &m->fields[m->nfields];
        size_t klen = i - s;
        f->key = store_decoded(m, &pos, buf + s, klen);
        if (!f->key)
            return -EPROTO;
        for (int k = 0; k < m->nfields; k++)
            if (!strcmp(m->fields[k].key, f->key))
                return -EPROTO;
        s = ++i;
        while (i < len && !is_sep(buf[i]))
            i++;
        if (memchr(buf + s, '=', i - s))
            return -EPROTO;
        f->value = store_decoded(m, &pos, buf + s, i - s);
        if (!f->value)
            return -EPROTO;
        m->nfields++;
    }
    return 0;
}

const char *ctl_get(const struct ctl_msg *m, const char *key)
{
    for (int i = 0; i < m->nfields; i++)
        if (!strcmp(m->fields[i].key, key))
            return m->fields[i].value;
    return NULL;
}

static int parse_u64(const char *s, uint64_t *v)
{
    uint64_t x = 0;

    if (!*s || strlen(s) > 20)
        return -EPROTO;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EPROTO;
        unsigned d = (unsigned)(*s - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -EPROTO;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

int ctl_get_u64(const struct ctl_msg *m, const char *key, uint64_t *v)
{
    const char *s = ctl_get(m, key);

    if (!s)
        return -ENOENT;
    return parse_u64(s, v);
}

int ctl_get_i64(const struct ctl_msg *m, const char *key, int64_t *v)
{
    const char *s = ctl_get(m, key);
    uint64_t u;
    int neg;

    if (!s)
        return -ENOENT;
    neg = (*s == '-');
    if (parse_u64(s + neg, &u) < 0)
        return -EPROTO;
    if (neg ? u > (uint64_t)INT64_MAX + 1 : u > (uint64_t)INT64_MAX)
        return -EPROTO;
    *v = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 0;
}


/* ---------------------------------------------------------------------------
 * Status
 * ------------------------------------------------------------------------- */

void ctl_put_status(struct ctl_buf *b, const struct tcgpu_status *st)
{
    char err[sizeof(st->last_error)];

    ctl_buf_put(b, "state", tcgpu_state_name(st->state));
    ctl_buf_put_u64(b, "gpu_bytes", st->gpu_bytes);
    ctl_buf_put_u64(b, "tracked_bytes", st->tracked_bytes);
    ctl_buf_put_u64(b, "image_bytes", st->image_bytes);
    ctl_buf_put_u64(b, "allocations", st->allocations);
    ctl_buf_put_u64(b, "contexts", st->contexts);
    ctl_buf_put_u64(b, "streams", st->streams);
    ctl_buf_put_u64(b, "events", st->events);
    ctl_buf_put_u64(b, "modules", st->modules);
    ctl_buf_put(b, "last_op", tcgpu_op_name(st->last_op));
    ctl_buf_put_i64(b, "last_result", st->last_result);
    ctl_buf_put_u64(b, "last_quiesce_ns", st->last_quiesce_ns);
    ctl_buf_put_u64(b, "last_free_ns", st->last_free_ns);
    ctl_buf_put_u64(b, "last_total_ns", st->last_total_ns);
    ctl_buf_put_u64(b, "last_image_ns", st->last_image_ns);
    /* last_error may lack its NUL if a writer filled it whole */
    memcpy(err, st->last_error, sizeof(err));
    err[sizeof(err) - 1] = '\0';
    ctl_buf_put(b, "last_error", err);
}

static int get_u64_opt(const struct ctl_msg *m, const char *key, uint64_t *v, uint64_t max)
{
    int r = ctl_get_u64(m, key, v);

    if (r == -ENOENT) {
        *v = 0;
        return 0;
    }
    if (r == 0 && *v > max)
        return -EPROTO;
    return r;
}

int ctl_get_status(const struct ctl_msg *m, struct tcgpu_status *st)
{
    static const struct { const char *key; size_t off; int is32; } nums[] = {
        { "gpu_bytes", offsetof(struct tcgpu_status, gpu_bytes), 0 },
        { "tracked_bytes", offsetof(struct tcgpu_status, tracked_bytes), 0 },
        { "image_bytes", offsetof(struct tcgpu_status, image_bytes), 0 },
        { "allocations", offsetof(struct tcgpu_status, allocations), 1 },
        { "contexts", offsetof(struct tcgpu_status, contexts), 1 },
        { "streams", offsetof(struct tcgpu_status, streams), 1 },
        { "events", offsetof(struct tcgpu_status, events), 1 },
        { "modules", offsetof(struct tcgpu_status, modules), 1 },
        { "last_quiesce_ns", offsetof(struct tcgpu_status, last_quiesce_ns), 0 },
        { "last_free_ns", offsetof(struct tcgpu_status, last_free_ns), 0 },
        { "last_total_ns", offsetof(struct tcgpu_status, last_total_ns), 0 },
        { "last_image_ns", offsetof(struct tcgpu_status, last_image_ns), 0 },
    };
    const char *s;
    int64_t res;
    int r;

    memset(st, 0, sizeof(*st));
    s = ctl_get(m, "state");
    if (!s || (r = tcgpu_state_parse(s)) < 0)
        return -EPROTO;
    st->state = (enum tcgpu_state)r;
    s = ctl_get(m, "last_op");
    if (s) {
        if ((r = tcgpu_op_parse(s)) < 0)
            return -EPROTO;
        st->last_op = (enum tcgpu_op)r;
    }
    for (size_t i = 0; i < NELEM(nums); i++) {
        uint64_t v;
        if (get_u64_opt(m, nums[i].key, &v, nums[i].is32 ? UINT32_MAX : UINT64_MAX) < 0)
            return -EPROTO;
        if (nums[i].is32)
            *(uint32_t *)((char *)st + nums[i].off) = (uint32_t)v;
        else
            *(uint64_t *)((char *)st + nums[i].off) = v;
    }
    r = ctl_get_i64(m, "last_result", &res);
    if (r == 0) {
        if (res > 0 || res < -4095)
            return -EPROTO;
        st->last_result = (int)res;
    } else if (r != -ENOENT) {
        return -EPROTO;
    }
    s = ctl_get(m, "last_error");
    if (s)
        snprintf(st->last_error, sizeof(st->last_error), "%s", s);
    return 0;
}
