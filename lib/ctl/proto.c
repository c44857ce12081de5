/* The control channel's wire protocol; see proto.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hex.h"
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
        int hi = hex_digit_value(src[i + 1]), lo = hex_digit_value(src[i + 2]);
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
 * Structs as fields
 * ------------------------------------------------------------------------- */

static void put_text(struct ctl_buf *b, const char *key, const char *text, size_t size)
{
    /* the array may lack its NUL if a writer filled it whole */
    char *v = strndup(text, size - 1);

    if (!v) {
        b->overflow = 1;
        return;
    }
    ctl_buf_put(b, key, v);
    free(v);
}

static void put_field(struct ctl_buf *b, const struct ctl_field_desc *f, const char *p)
{
    switch (f->kind) {
    case CTL_U64:
        ctl_buf_put_u64(b, f->key, *(const uint64_t *)p);
        break;
    case CTL_U32:
        ctl_buf_put_u64(b, f->key, *(const uint32_t *)p);
        break;
    case CTL_I32:
        ctl_buf_put_i64(b, f->key, *(const int32_t *)p);
        break;
    case CTL_FLAG:
        ctl_buf_put_u64(b, f->key, *(const int *)p != 0);
        break;
    case CTL_TEXT:
        put_text(b, f->key, p, f->size);
        break;
    case CTL_STATE:
        ctl_buf_put(b, f->key, tcgpu_state_name(*(const enum tcgpu_state *)p));
        break;
    case CTL_OP:
        ctl_buf_put(b, f->key, tcgpu_op_name(*(const enum tcgpu_op *)p));
        break;
    }
}

void ctl_put_fields(struct ctl_buf *b, const struct ctl_field_desc *fields, size_t n,
                    const void *obj)
{
    for (size_t i = 0; i < n; i++)
        put_field(b, &fields[i], (const char *)obj + fields[i].off);
}

static int get_number(const struct ctl_msg *m, const struct ctl_field_desc *f, char *p)
{
    uint64_t u;
    int64_t v;

    switch (f->kind) {
    case CTL_I32:
        if (ctl_get_i64(m, f->key, &v) < 0 || v < f->min || v > f->max)
            return -EPROTO;
        *(int32_t *)p = (int32_t)v;
        return 0;
    case CTL_U32:
        if (ctl_get_u64(m, f->key, &u) < 0 || u > UINT32_MAX)
            return -EPROTO;
        *(uint32_t *)p = (uint32_t)u;
        return 0;
    case CTL_FLAG:
        if (ctl_get_u64(m, f->key, &u) < 0)
            return -EPROTO;
        *(int *)p = u != 0;
        return 0;
    default:                    /* CTL_U64 */
        if (ctl_get_u64(m, f->key, &u) < 0)
            return -EPROTO;
        *(uint64_t *)p = u;
        return 0;
    }
}

static int get_name(const char *s, const struct ctl_field_desc *f, char *p)
{
    int r = f->kind == CTL_STATE ? tcgpu_state_parse(s) : tcgpu_op_parse(s);

    if (r < 0)
        return -EPROTO;
    if (f->kind == CTL_STATE)
        *(enum tcgpu_state *)p = (enum tcgpu_state)r;
    else
        *(enum tcgpu_op *)p = (enum tcgpu_op)r;
    return 0;
}

static int get_field(const struct ctl_msg *m, const struct ctl_field_desc *f, char *p)
{
    const char *s = ctl_get(m, f->key);

    if (!s) {
        if (f->required)
            return -EPROTO;
        memset(p, 0, f->size);   /* 0, or "" */
        return 0;
    }
    switch (f->kind) {
    case CTL_TEXT:
        snprintf(p, f->size, "%s", s);
        return 0;
    case CTL_STATE:
    case CTL_OP:
        return get_name(s, f, p);
    default:
        return get_number(m, f, p);
    }
}

int ctl_get_fields(const struct ctl_msg *m, const struct ctl_field_desc *fields, size_t n,
                   void *obj)
{
    for (size_t i = 0; i < n; i++)
        if (get_field(m, &fields[i], (char *)obj + fields[i].off) < 0)
            return -EPROTO;
    return 0;
}

/* ---------------------------------------------------------------------------
 * Status
 * ------------------------------------------------------------------------- */

#define STATUS_FIELD(member, kind, ...) \
    CTL_FIELD(struct tcgpu_status, member, #member, kind, __VA_ARGS__)

/* The status fields in the order they are sent (docs/cli.md, "The protocol"). */
static const struct ctl_field_desc status_fields[] = {
    STATUS_FIELD(state, CTL_STATE, .required = 1),
    STATUS_FIELD(gpu_bytes, CTL_U64),
    STATUS_FIELD(tracked_bytes, CTL_U64),
    STATUS_FIELD(image_bytes, CTL_U64),
    STATUS_FIELD(allocations, CTL_U32),
    STATUS_FIELD(contexts, CTL_U32),
    STATUS_FIELD(streams, CTL_U32),
    STATUS_FIELD(events, CTL_U32),
    STATUS_FIELD(modules, CTL_U32),
    STATUS_FIELD(last_op, CTL_OP),
    STATUS_FIELD(last_result, CTL_I32, .min = -4095, .max = 0),
    STATUS_FIELD(last_quiesce_ns, CTL_U64),
    STATUS_FIELD(last_free_ns, CTL_U64),
    STATUS_FIELD(last_total_ns, CTL_U64),
    STATUS_FIELD(last_image_ns, CTL_U64),
    STATUS_FIELD(last_error, CTL_TEXT),
};

const struct ctl_field_desc *ctl_status_fields(size_t *n)
{
    *n = NELEM(status_fields);
    return status_fields;
}

void ctl_put_status(struct ctl_buf *b, const struct tcgpu_status *st)
{
    ctl_put_fields(b, status_fields, NELEM(status_fields), st);
}

int ctl_get_status(const struct ctl_msg *m, struct tcgpu_status *st)
{
    memset(st, 0, sizeof(*st));
    return ctl_get_fields(m, status_fields, NELEM(status_fields), st);
}
