/*
 * proto.h - the control channel's wire protocol, shared by the server in
 * the preloaded process (control.c) and its clients (gpuckpt, tcgpud).
 *
 * Transport: an AF_UNIX SOCK_SEQPACKET connection; one request message from
 * the client, then zero or more `progress` messages and one final reply from
 * the server. docs/cli.md documents the protocol for people who write
 * clients in other languages.
 *
 * A message is text, at most CTL_MSG_MAX bytes, with no NUL byte:
 *
 *     request   = WORD *( SEP key=value )            e.g. "suspend dir=/scratch/a"
 *     progress  = "progress" *( SEP key=value )       e.g. "progress phase=drain done=1 total=8"
 *     reply     = "ok" *( SEP key=value )
 *               / "error" SP ERRNO_NAME SP errno SP text *( "\n" key=value )
 *
 * SEP is one or more spaces or newlines (requests and progress use spaces,
 * replies one pair per line). A key is 1..31 characters of [a-z0-9_]; a value
 * is percent-encoded (%XX) where it contains a space, '=', '%', or a byte
 * outside printable ASCII; the error text is percent-encoded the same way
 * except that it keeps its spaces. Keys appear at most once. Readers ignore
 * keys they do not know, so new fields can be added without a version bump.
 *
 * Every function here is pure (no I/O, no globals) and safe on hostile
 * input: a parser never reads past `len` and never trusts a length it reads.
 */
#ifndef TCGPU_CTLPROTO_H
#define TCGPU_CTLPROTO_H

#include <stddef.h>
#include <stdint.h>

#include "tcgpu.h"

#define CTL_MSG_MAX     65536   /* bytes in one message, request or reply */
#define CTL_MAX_FIELDS  64      /* key=value pairs in one message */
#define CTL_KEY_MAX     31      /* characters in a key */
#define CTL_WORD_MAX    31      /* characters in the first word */

/* A message being built. Functions on it never fail: an overflow is
 * remembered and reported by ctl_buf_finish(). */
struct ctl_buf {
    char data[CTL_MSG_MAX];
    size_t len;
    int overflow;
    char sep;                   /* ' ' for requests and progress, '\n' for replies */
};

/* Start a request or progress message ("status", "progress"): pairs on one line. */
void ctl_buf_request(struct ctl_buf *b, const char *word);
/* Start an "ok" reply: one pair per line. */
void ctl_buf_ok(struct ctl_buf *b);
/* Start an "error" reply for -err (a negative errno) with a one-line text. */
void ctl_buf_error(struct ctl_buf *b, int err, const char *text);
/* Append key=value (value percent-encoded as needed). */
void ctl_buf_put(struct ctl_buf *b, const char *key, const char *value);
void ctl_buf_put_u64(struct ctl_buf *b, const char *key, uint64_t v);
void ctl_buf_put_i64(struct ctl_buf *b, const char *key, int64_t v);
/* Returns the message length, or -EMSGSIZE if it did not fit. */
long ctl_buf_finish(const struct ctl_buf *b);

/* A parsed message. Strings point into `store` and live as long as the struct. */
struct ctl_field {
    const char *key;
    const char *value;          /* decoded, NUL-terminated */
};

struct ctl_msg {
    char word[CTL_WORD_MAX + 1];    /* "status", "ok", "error", "progress"... */
    int err;                        /* for "error": the negative errno, else 0 */
    const char *err_name;           /* for "error": "EBUSY" as sent, else "" */
    const char *err_text;           /* for "error": decoded text, else "" */
    int nfields;
    struct ctl_field fields[CTL_MAX_FIELDS];
    char store[CTL_MSG_MAX + 2 * CTL_MAX_FIELDS + 64];
};

/*
 * Parse `len` bytes of `buf` (need not be NUL-terminated) into *m.
 * Returns 0, or -EPROTO for a malformed message (bad word, key, escape,
 * duplicate key, NUL byte, too many fields), -EMSGSIZE if len > CTL_MSG_MAX.
 * *m is unspecified after an error.
 */
int ctl_parse(const char *buf, size_t len, struct ctl_msg *m);

/* The value of `key`, or NULL when absent. */
const char *ctl_get(const struct ctl_msg *m, const char *key);
/* Parse key's value as a decimal integer: 0, -ENOENT (absent), -EPROTO (not a number / out of range). */
int ctl_get_u64(const struct ctl_msg *m, const char *key, uint64_t *v);
int ctl_get_i64(const struct ctl_msg *m, const char *key, int64_t *v);

/* Percent-encode src into dst (dstlen bytes incl. NUL). keep_space: leave ' '
 * as is (error text). Returns the encoded length, or -ENOSPC. */
long ctl_encode(const char *src, char *dst, size_t dstlen, int keep_space);
/* Decode srclen bytes into dst (at least srclen + 1 bytes). Returns the decoded
 * length, or -EPROTO (bad escape, %00). */
long ctl_decode(const char *src, size_t srclen, char *dst);

/*
 * A C struct as key=value pairs, declared once as a table of its fields, one
 * row a field in the order they are written: ctl_put_fields() writes the
 * struct from the table and ctl_get_fields() reads it back from the same
 * table, so the two directions cannot drift apart.
 */
enum ctl_kind {
    CTL_U64,                    /* uint64_t, decimal */
    CTL_U32,                    /* uint32_t (unsigned, uid_t), decimal, at most UINT32_MAX */
    CTL_I32,                    /* int32_t (int, pid_t), decimal with its sign, in [min, max] */
    CTL_FLAG,                   /* int, written 0 or 1; any non-zero number reads as 1 */
    CTL_TEXT,                   /* char[size], written up to its NUL or its size - 1 bytes */
    CTL_STATE,                  /* enum tcgpu_state, by name ("running") */
    CTL_OP,                     /* enum tcgpu_op, by name ("suspend") */
};

struct ctl_field_desc {
    const char *key;
    enum ctl_kind kind;
    size_t off;                 /* offsetof() the field in its struct */
    size_t size;                /* sizeof() the field (CTL_TEXT: its array) */
    int required;               /* absent: -EPROTO; else absent reads as 0 or "" */
    int64_t min, max;           /* CTL_I32: the range accepted */
};

/* A row of the table of struct `type`: its field `member`, written as `key`. */
#define CTL_FIELD(type, member, key_, kind_, ...)                                   \
    { .key = (key_), .kind = (kind_), .off = offsetof(type, member),                \
      .size = sizeof(((type *)0)->member), __VA_ARGS__ }

/* Append the n fields of `fields` from the struct at obj. */
void ctl_put_fields(struct ctl_buf *b, const struct ctl_field_desc *fields, size_t n,
                    const void *obj);
/* Fill the n fields of `fields` in the struct at obj from m (other bytes of
 * it are left alone). Returns 0, or -EPROTO: a required field is absent, or a
 * field is present but malformed or out of its range. */
int ctl_get_fields(const struct ctl_msg *m, const struct ctl_field_desc *fields, size_t n,
                   void *obj);

/* The table of struct tcgpu_status's fields (n rows into *n), for readers
 * that need each key's kind, such as the tools' JSON (lib/json). */
const struct ctl_field_desc *ctl_status_fields(size_t *n);

/* Append every field of *st (state, gpu_bytes, ..., last_error, last_image_ns). */
void ctl_put_status(struct ctl_buf *b, const struct tcgpu_status *st);
/* Fill *st from a reply; absent fields are 0. Returns 0 or -EPROTO (a field
 * is present but malformed, or state is missing or unknown). */
int ctl_get_status(const struct ctl_msg *m, struct tcgpu_status *st);

#endif
