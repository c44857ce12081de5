/*
 * The control protocol (lib/ctl/proto.c): encoding, round trips, and parsing
 * hostile input. Run under ASan, the random part shows that no input makes
 * the parser read or write out of bounds.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/client.h"
#include "ctl/proto.h"

#include "../common/check.h"
#include "../common/rand.h"
#include "common/macros.h"
#include "common/names.h"

static struct ctl_msg msg;
static struct ctl_buf buf;

/* Parse a copy of exactly len bytes, so ASan sees any read past the end. */
static int parse_exact(const char *s, size_t len)
{
    char *copy = malloc(len ? len : 1);
    int r;

    memcpy(copy, s, len);
    r = ctl_parse(copy, len, &msg);
    free(copy);
    return r;
}

static int parse_str(const char *s)
{
    return parse_exact(s, strlen(s));
}

static void test_encoding(void)
{
    char src[256], enc[1024], dec[1024];
    long n;

    for (int i = 1; i < 256; i++)
        src[i - 1] = (char)i;
    src[255] = '\0';
    n = ctl_encode(src, enc, sizeof(enc), 0);
    CHECK(n > 0);
    CHECK(!strchr(enc, ' ') && !strchr(enc, '=') && !strchr(enc, '\n'));
    CHECK(ctl_decode(enc, (size_t)n, dec) == 255);
    CHECK(!strcmp(dec, src));

    n = ctl_encode("a b%c", enc, sizeof(enc), 1);
    CHECK(n == 7 && !strcmp(enc, "a b%25c"));
    CHECK(ctl_encode("abc", enc, 3, 0) == -ENOSPC);
    CHECK(ctl_encode("abc", enc, 4, 0) == 3);
    CHECK(ctl_encode(" ", enc, 3, 0) == -ENOSPC);
    CHECK(ctl_decode("%41%4a%4A", 9, dec) == 3 && !strcmp(dec, "AJJ"));
    CHECK(ctl_decode("%", 1, dec) == -EPROTO);
    CHECK(ctl_decode("%4", 2, dec) == -EPROTO);
    CHECK(ctl_decode("%g0", 3, dec) == -EPROTO);
    CHECK(ctl_decode("%00", 3, dec) == -EPROTO);
}

static void test_round_trip(void)
{
    struct tcgpu_status st, back;
    long n;

    ctl_buf_request(&buf, "checkpoint");
    ctl_buf_put(&buf, "dir", "/scratch/my run=1/100%\n");
    n = ctl_buf_finish(&buf);
    CHECK(n > 0 && !memchr(buf.data, '\n', (size_t)n));
    CHECK(ctl_parse(buf.data, (size_t)n, &msg) == 0);
    CHECK(!strcmp(msg.word, "checkpoint"));
    CHECK(msg.nfields == 1 && !strcmp(ctl_get(&msg, "dir"), "/scratch/my run=1/100%\n"));
    CHECK(ctl_get(&msg, "nope") == NULL);

    memset(&st, 0, sizeof(st));
    st.state = TCGPU_STATE_SUSPENDED;
    st.gpu_bytes = 0;
    st.tracked_bytes = UINT64_MAX;
    st.image_bytes = 123456789012ull;
    st.allocations = UINT32_MAX;
    st.contexts = 1;
    st.streams = 2;
    st.events = 3;
    st.modules = 4;
    st.last_op = TCGPU_OP_SUSPEND;
    st.last_result = -EBUSY;
    st.last_quiesce_ns = 1;
    st.last_free_ns = 2;
    st.last_total_ns = 3;
    snprintf(st.last_error, sizeof(st.last_error), "cuIpcGetMemHandle: 100%% = no\nline");
    ctl_buf_ok(&buf);
    ctl_put_status(&buf, &st);
    n = ctl_buf_finish(&buf);
    CHECK(n > 0);
    CHECK(ctl_parse(buf.data, (size_t)n, &msg) == 0);
    CHECK(!strcmp(msg.word, "ok") && msg.err == 0);
    CHECK(ctl_get_status(&msg, &back) == 0);
    CHECK(memcmp(&st, &back, sizeof(st)) == 0);

    /* a last_error without its NUL is cut, not overrun */
    memset(st.last_error, 'x', sizeof(st.last_error));
    ctl_buf_ok(&buf);
    ctl_put_status(&buf, &st);
    n = ctl_buf_finish(&buf);
    CHECK(n > 0 && ctl_parse(buf.data, (size_t)n, &msg) == 0);
    CHECK(strlen(ctl_get(&msg, "last_error")) == sizeof(st.last_error) - 1);

    ctl_buf_error(&buf, -EBUSY, "the process is suspended; 50% done\nsecond line");
    n = ctl_buf_finish(&buf);
    CHECK(n > 0 && !memchr(buf.data, '\n', (size_t)n));
    CHECK(ctl_parse(buf.data, (size_t)n, &msg) == 0);
    CHECK(!strcmp(msg.word, "error") && msg.err == -EBUSY && !strcmp(msg.err_name, "EBUSY"));
    CHECK(!strcmp(msg.err_text, "the process is suspended; 50% done\nsecond line"));
    CHECK(!strncmp(buf.data, "error EBUSY 16 the process is suspended", 39));

    ctl_buf_error(&buf, -ENOTSUP, "");
    ctl_buf_put(&buf, "state", "running");
    n = ctl_buf_finish(&buf);
    CHECK(ctl_parse(buf.data, (size_t)n, &msg) == 0);
    CHECK(msg.err == -ENOTSUP && !strcmp(msg.err_name, "ENOTSUP") && *msg.err_text);
    CHECK(!strcmp(ctl_get(&msg, "state"), "running"));

    /* a very long message is cut, not overflowed */
    char *big = malloc(CTL_MSG_MAX);
    memset(big, 'a', CTL_MSG_MAX - 1);
    big[CTL_MSG_MAX - 1] = '\0';
    ctl_buf_error(&buf, -EIO, big);
    CHECK(ctl_buf_finish(&buf) > 0 && ctl_buf_finish(&buf) < 1024);
    ctl_buf_request(&buf, "checkpoint");
    ctl_buf_put(&buf, "dir", big);
    CHECK(ctl_buf_finish(&buf) == -EMSGSIZE);
    free(big);
    ctl_buf_request(&buf, "status");
    ctl_buf_put(&buf, "Bad-Key", "v");
    CHECK(ctl_buf_finish(&buf) == -EMSGSIZE);
}

/* Every field of struct tcgpu_status, in the order it goes on the wire. */
static const char *const status_keys[] = {
    "state", "gpu_bytes", "tracked_bytes", "image_bytes", "allocations", "contexts", "streams",
    "events", "modules", "last_op", "last_result", "last_quiesce_ns", "last_free_ns",
    "last_total_ns", "last_image_ns", "last_error",
};

static int status_round_trip(const struct tcgpu_status *st, struct tcgpu_status *back)
{
    long n;

    ctl_buf_ok(&buf);
    ctl_put_status(&buf, st);
    n = ctl_buf_finish(&buf);
    if (n <= 0 || ctl_parse(buf.data, (size_t)n, &msg) < 0)
        return -1;
    return ctl_get_status(&msg, back);
}

static void test_status_fields(void)
{
    struct tcgpu_status st, back;

    /* each field its own value, none of them 0 */
    memset(&st, 0, sizeof(st));
    st.state = TCGPU_STATE_RESUMING;
    st.gpu_bytes = 11;
    st.tracked_bytes = 12;
    st.image_bytes = 13;
    st.allocations = 14;
    st.contexts = 15;
    st.streams = 16;
    st.events = 17;
    st.modules = 18;
    st.last_op = TCGPU_OP_RESUME;
    st.last_result = -19;
    st.last_quiesce_ns = 20;
    st.last_free_ns = 21;
    st.last_total_ns = 22;
    st.last_image_ns = 23;
    snprintf(st.last_error, sizeof(st.last_error), "x y=z%%");
    CHECK(status_round_trip(&st, &back) == 0);
    CHECK(memcmp(&st, &back, sizeof(st)) == 0);
    CHECK(msg.nfields == (int)NELEM(status_keys));
    for (int k = 0; k < msg.nfields && k < (int)NELEM(status_keys); k++)
        CHECK(!strcmp(msg.fields[k].key, status_keys[k]));

    /* the ends of each range */
    memset(&st, 0, sizeof(st));
    st.gpu_bytes = st.tracked_bytes = st.image_bytes = UINT64_MAX;
    st.allocations = st.contexts = st.streams = st.events = st.modules = UINT32_MAX;
    st.last_result = -4095;
    st.last_quiesce_ns = st.last_free_ns = st.last_total_ns = st.last_image_ns = UINT64_MAX;
    CHECK(status_round_trip(&st, &back) == 0 && memcmp(&st, &back, sizeof(st)) == 0);
    for (int s = TCGPU_STATE_RUNNING; s <= TCGPU_STATE_RESUMING; s++) {
        for (int op = TCGPU_OP_NONE; op <= TCGPU_OP_RESUME; op++) {
            memset(&st, 0, sizeof(st));
            st.state = (enum tcgpu_state)s;
            st.last_op = (enum tcgpu_op)op;
            CHECK(status_round_trip(&st, &back) == 0 && back.state == st.state &&
                  back.last_op == st.last_op);
        }
    }

    /* each field alone beside the state: the others read as 0 */
    for (size_t k = 1; k < NELEM(status_keys); k++) {
        char line[128];
        const char *v = !strcmp(status_keys[k], "last_op") ? "checkpoint"
                        : !strcmp(status_keys[k], "last_result") ? "-5" : "7";
        snprintf(line, sizeof(line), "ok state=suspended %s=%s", status_keys[k], v);
        CHECK(parse_str(line) == 0 && ctl_get_status(&msg, &back) == 0);
        st = back;
        CHECK(status_round_trip(&st, &back) == 0);
        CHECK(msg.nfields == (int)NELEM(status_keys));
        for (int f = 0; f < msg.nfields; f++) {
            const char *got = msg.fields[f].value;
            if (f == 0)
                CHECK(!strcmp(got, "suspended"));
            else if ((size_t)f == k)
                CHECK(!strcmp(got, v));
            else if (!strcmp(msg.fields[f].key, "last_op"))
                CHECK(!strcmp(got, "none"));
            else if (!strcmp(msg.fields[f].key, "last_error"))
                CHECK(!strcmp(got, ""));
            else
                CHECK(!strcmp(got, "0"));
        }
    }
}

/* A table of every kind, as a caller outside the status would declare one. */
struct rec {
    uint64_t big;
    uint32_t count;
    int32_t level;
    int on;
    char name[8];
    enum tcgpu_state state;
    enum tcgpu_op op;
    uint64_t extra;
};

#define REC_FIELD(member, kind, ...) CTL_FIELD(struct rec, member, #member, kind, __VA_ARGS__)

static const struct ctl_field_desc rec_fields[] = {
    REC_FIELD(big, CTL_U64, .required = 1),
    REC_FIELD(count, CTL_U32, .required = 1),
    REC_FIELD(level, CTL_I32, .required = 1, .min = -3, .max = 3),
    REC_FIELD(on, CTL_FLAG, .required = 1),
    REC_FIELD(name, CTL_TEXT, .required = 1),
    REC_FIELD(state, CTL_STATE, .required = 1),
    REC_FIELD(op, CTL_OP, .required = 1),
    REC_FIELD(extra, CTL_U64),
};

static int rec_parse(const char *line, struct rec *r)
{
    memset(r, 0x5a, sizeof(*r));
    if (parse_str(line) < 0)
        return -EBADMSG;
    return ctl_get_fields(&msg, rec_fields, NELEM(rec_fields), r);
}

static void test_field_table(void)
{
    struct rec r = { .big = UINT64_MAX, .count = UINT32_MAX, .level = -3, .on = 7,
                     .state = TCGPU_STATE_SUSPENDED, .op = TCGPU_OP_CHECKPOINT, .extra = 9 };
    struct rec back;
    long n;

    memcpy(r.name, "abcdefgh", sizeof(r.name));         /* no NUL: cut to 7 */
    ctl_buf_request(&buf, "rec");
    ctl_put_fields(&buf, rec_fields, NELEM(rec_fields), &r);
    n = ctl_buf_finish(&buf);
    CHECK(n > 0 && n < CTL_MSG_MAX);
    if (n <= 0 || n >= CTL_MSG_MAX)
        return;
    buf.data[n] = '\0';
    CHECK(!strcmp(buf.data, "rec big=18446744073709551615 count=4294967295 level=-3 on=1 "
                            "name=abcdefg state=suspended op=checkpoint extra=9"));
    CHECK(rec_parse(buf.data, &back) == 0);
    CHECK(back.big == r.big && back.count == r.count && back.level == -3 && back.on == 1);
    CHECK(!strcmp(back.name, "abcdefg") && back.state == r.state && back.op == r.op);
    CHECK(back.extra == 9);

    /* an optional field absent reads as 0; a required one absent is refused */
    CHECK(rec_parse("rec big=1 count=2 level=3 on=0 name= state=running op=none", &back) == 0);
    CHECK(back.extra == 0 && back.on == 0 && back.level == 3 && !strcmp(back.name, ""));
    CHECK(rec_parse("rec count=2 level=3 on=0 name= state=running op=none", &back) == -EPROTO);
    CHECK(rec_parse("rec big=1 count=2 level=3 on=0 state=running op=none", &back) == -EPROTO);
    /* out of range, malformed, unknown names */
    static const char *const bad[] = {
        "rec big=1 count=4294967296 level=0 on=0 name= state=running op=none",
        "rec big=1 count=-1 level=0 on=0 name= state=running op=none",
        "rec big=1 count=1 level=4 on=0 name= state=running op=none",
        "rec big=1 count=1 level=-4 on=0 name= state=running op=none",
        "rec big=-1 count=1 level=0 on=0 name= state=running op=none",
        "rec big=1 count=1 level=0 on=-1 name= state=running op=none",
        "rec big=1 count=1 level=0 on=0 name= state=flying op=none",
        "rec big=1 count=1 level=0 on=0 name= state=running op=nap",
        "rec big=1 count=1 level=0 on=0 name= state=running op=none extra=x",
    };
    for (size_t i = 0; i < NELEM(bad); i++)
        CHECK(rec_parse(bad[i], &back) == -EPROTO, "%s", bad[i]);
    /* a text longer than its array is cut */
    CHECK(rec_parse("rec big=1 count=1 level=0 on=0 name=0123456789 state=running op=none", &back) == 0);
    CHECK(!strcmp(back.name, "0123456"));
}

static void test_valid_forms(void)
{
    CHECK(parse_str("ok") == 0 && !strcmp(msg.word, "ok") && msg.nfields == 0);
    CHECK(parse_str("ok\n") == 0);
    CHECK(parse_str("status  a=1\n\nb=") == 0 && msg.nfields == 2 && !strcmp(ctl_get(&msg, "b"), ""));
    CHECK(parse_str("error EBUSY 16") == 0 && msg.err == -EBUSY && !strcmp(msg.err_text, ""));
    CHECK(parse_str("error EBUSY 16 ") == 0);
    CHECK(parse_str("error EBUSY 16\nk=v") == 0 && !strcmp(ctl_get(&msg, "k"), "v"));
    CHECK(parse_str("error E? 999 what  = now") == 0 && !strcmp(msg.err_text, "what  = now"));
    CHECK(parse_str("progress done=5 total=10") == 0);
    uint64_t v;
    int64_t i;
    CHECK(parse_str("x a=18446744073709551615 b=18446744073709551616 c=-1 d= e=01 f=-9223372036854775808") == 0);
    CHECK(ctl_get_u64(&msg, "a", &v) == 0 && v == UINT64_MAX);
    CHECK(ctl_get_u64(&msg, "b", &v) == -EPROTO);
    CHECK(ctl_get_u64(&msg, "c", &v) == -EPROTO);
    CHECK(ctl_get_u64(&msg, "d", &v) == -EPROTO);
    CHECK(ctl_get_u64(&msg, "e", &v) == 0 && v == 1);
    CHECK(ctl_get_u64(&msg, "zz", &v) == -ENOENT);
    CHECK(ctl_get_i64(&msg, "c", &i) == 0 && i == -1);
    CHECK(ctl_get_i64(&msg, "f", &i) == 0 && i == INT64_MIN);
    CHECK(ctl_get_i64(&msg, "a", &i) == -EPROTO);
}

static void test_hostile(void)
{
    static const char *const bad[] = {
        "", " ", "\n", "Status", "status key", "status =v", "status k=v=w",
        "status k=%", "status k=%0", "status k=%zz", "status k=%00", "status a=1 a=2",
        "status K=1", "status k-y=1", "status abcdefghijklmnopqrstuvwxyz012345=1",
        "abcdefghijklmnopqrstuvwxyz0123456", "error", "error ", "error EBUSY", "error EBUSY x",
        "error ebusy 16 x", "error EBUSY 0 x", "error EBUSY 99999 x", "error EBUSY 16x",
        "error  EBUSY 16", "error EBUSY -16", "error EBUSY 16 %zz", "error EBUSY 16\nk",
        "ok\nk", "ok k", "ok\t", "ok\r\nk=v",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int r = parse_str(bad[i]);
        if (r != -EPROTO) {
            fprintf(stderr, "accepted bad message #%zu '%s' (%d)\n", i, bad[i], r);
            failures++;
        }
    }
    CHECK(parse_exact("status\0k=v", 10) == -EPROTO);
    CHECK(parse_exact("ok", 0) == -EPROTO);

    /* too many fields */
    char many[2048];
    size_t n = (size_t)snprintf(many, sizeof(many), "ok");
    for (int i = 0; i < CTL_MAX_FIELDS + 1; i++)
        n += (size_t)snprintf(many + n, sizeof(many) - n, "\nk%d=%d", i, i);
    CHECK(parse_exact(many, n) == -EPROTO);
    /* exactly the maximum is fine */
    n = (size_t)snprintf(many, sizeof(many), "ok");
    for (int i = 0; i < CTL_MAX_FIELDS; i++)
        n += (size_t)snprintf(many + n, sizeof(many) - n, "\nk%d=%d", i, i);
    CHECK(parse_exact(many, n) == 0 && msg.nfields == CTL_MAX_FIELDS);

    /* length limits */
    char *huge = malloc(CTL_MSG_MAX + 1);
    memset(huge, 'a', CTL_MSG_MAX + 1);
    CHECK(ctl_parse(huge, CTL_MSG_MAX + 1, &msg) == -EMSGSIZE);
    memcpy(huge, "ok v=", 5);
    CHECK(ctl_parse(huge, CTL_MSG_MAX, &msg) == 0 && strlen(ctl_get(&msg, "v")) == CTL_MSG_MAX - 5);
    /* a maximal message of escapes decodes into the store */
    memcpy(huge, "ok v=", 5);
    for (size_t i = 5; i + 3 <= CTL_MSG_MAX; i += 3)
        memcpy(huge + i, "%41", 3);
    n = 5 + (CTL_MSG_MAX - 5) / 3 * 3;
    CHECK(ctl_parse(huge, n, &msg) == 0);
    free(huge);

    /* status with hostile fields */
    struct tcgpu_status st;
    CHECK(parse_str("ok gpu_bytes=1") == 0 && ctl_get_status(&msg, &st) == -EPROTO);  /* no state */
    CHECK(parse_str("ok state=flying") == 0 && ctl_get_status(&msg, &st) == -EPROTO);
    CHECK(parse_str("ok state=running allocations=4294967296") == 0 && ctl_get_status(&msg, &st) == -EPROTO);
    CHECK(parse_str("ok state=running allocations=4294967295") == 0 && ctl_get_status(&msg, &st) == 0);
    CHECK(parse_str("ok state=running last_result=5") == 0 && ctl_get_status(&msg, &st) == -EPROTO);
    CHECK(parse_str("ok state=running last_result=-99999") == 0 && ctl_get_status(&msg, &st) == -EPROTO);
    CHECK(parse_str("ok state=running last_op=nap") == 0 && ctl_get_status(&msg, &st) == -EPROTO);
    CHECK(parse_str("ok state=running gpu_bytes=x") == 0 && ctl_get_status(&msg, &st) == -EPROTO);
    char longerr[700];
    memset(longerr, 'e', sizeof(longerr));
    memcpy(longerr, "ok state=running last_error=", 28);
    CHECK(parse_exact(longerr, sizeof(longerr)) == 0 && ctl_get_status(&msg, &st) == 0);
    CHECK(strlen(st.last_error) == sizeof(st.last_error) - 1);
    CHECK(parse_str("ok state=suspended future_field=1") == 0 && ctl_get_status(&msg, &st) == 0 &&
          st.state == TCGPU_STATE_SUSPENDED);
}

/* Everything a successful parse returns must be well formed. */
static void check_parsed(void)
{
    CHECK(msg.nfields >= 0 && msg.nfields <= CTL_MAX_FIELDS);
    for (int i = 0; i < msg.nfields; i++) {
        size_t kl = strlen(msg.fields[i].key);
        CHECK(kl >= 1 && kl <= CTL_KEY_MAX);
        (void)strlen(msg.fields[i].value);
    }
    /* re-encode and re-parse: the same fields come back */
    struct ctl_msg *again = malloc(sizeof(*again));
    if (!strcmp(msg.word, "error"))
        ctl_buf_error(&buf, msg.err, msg.err_text);
    else
        ctl_buf_request(&buf, msg.word);
    for (int i = 0; i < msg.nfields; i++)
        ctl_buf_put(&buf, msg.fields[i].key, msg.fields[i].value);
    long n = ctl_buf_finish(&buf);
    if (n > 0) {
        CHECK(ctl_parse(buf.data, (size_t)n, again) == 0);
        CHECK(again->nfields == msg.nfields);
        for (int i = 0; i < msg.nfields && i < again->nfields; i++)
            CHECK(!strcmp(again->fields[i].value, msg.fields[i].value));
    }
    free(again);
    struct tcgpu_status st;
    (void)ctl_get_status(&msg, &st);
}

static void test_random(void)
{
    static const char alphabet[] = "ok error status progress EBUSY 16 a=b=%%4%00%41\n  k_1=v x=";
    static const char *const seeds[] = {
        "ok\nstate=running\ngpu_bytes=1024\nlast_error=a%20b",
        "error EBUSY 16 the process is suspended\nstate=suspended",
        "checkpoint dir=/a%20b",
        "progress done=1 total=2",
    };
    int accepted = 0;

    t_seed(0x9e3779b97f4a7c15ull);
    for (int iter = 0; iter < 200000; iter++) {
        char m[400];
        size_t len;
        if (iter & 1) {
            /* random bytes, biased towards the protocol's own characters */
            len = t_rand() % sizeof(m);
            for (size_t i = 0; i < len; i++) {
                uint64_t r = t_rand();
                m[i] = (r & 3) ? alphabet[(r >> 8) % (sizeof(alphabet) - 1)] : (char)(r >> 16);
            }
        } else {
            /* mutations of valid messages */
            const char *s = seeds[t_rand() % 4];
            len = strlen(s);
            memcpy(m, s, len);
            for (int k = 1 + (int)(t_rand() % 4); k > 0; k--) {
                uint64_t r = t_rand();
                size_t at = len ? r % len : 0;
                switch ((r >> 32) % 4) {
                case 0: m[at] = (char)(r >> 40); break;
                case 1: if (len) len = at; break;                             /* truncate */
                case 2: if (len < sizeof(m) - 1) { memmove(m + at + 1, m + at, len - at); m[at] = alphabet[(r >> 40) % (sizeof(alphabet) - 1)]; len++; } break;
                case 3: if (len) { memmove(m + at, m + at + 1, len - at - 1); len--; } break;
                }
            }
        }
        if (parse_exact(m, len) == 0) {
            accepted++;
            check_parsed();
        }
    }
    CHECK(accepted > 100);
}

static void test_names(void)
{
    CHECK(!strcmp(errno_name(EBUSY), "EBUSY") && !strcmp(errno_name(-EBUSY), "EBUSY"));
    CHECK(!strcmp(errno_name(ENOTSUP), "ENOTSUP"));
    CHECK(!strcmp(errno_name(0), "E?") && !strcmp(errno_name(100000), "E?"));
    CHECK(errno_from_name("EBADMSG") == EBADMSG && errno_from_name("EOPNOTSUPP") == ENOTSUP);
    CHECK(errno_from_name("EWHAT") == 0 && errno_from_name(NULL) == 0);
    for (int s = 0; s <= TCGPU_STATE_RESUMING; s++)
        CHECK(tcgpu_state_parse(tcgpu_state_name((enum tcgpu_state)s)) == s);
    for (int o = 0; o <= TCGPU_OP_RESUME; o++)
        CHECK(tcgpu_op_parse(tcgpu_op_name((enum tcgpu_op)o)) == o);
    CHECK(!strcmp(tcgpu_state_name((enum tcgpu_state)99), "unknown") && tcgpu_state_parse("unknown") == -1);
}

static void test_exit_codes(void)
{
    /* from the process (an operation's result) */
    CHECK(ctl_exit_code(0, 1) == 0);
    CHECK(ctl_exit_code(-ENOSPC, 1) == 1 && ctl_exit_code(-EIO, 1) == 1 && ctl_exit_code(-EEXIST, 1) == 1);
    CHECK(ctl_exit_code(-ENOENT, 1) == 1);
    CHECK(ctl_exit_code(-EINVAL, 1) == 2 && ctl_exit_code(-EPROTO, 1) == 2);
    CHECK(ctl_exit_code(-ENOTSUP, 1) == 4 && ctl_exit_code(-EBUSY, 1) == 4 && ctl_exit_code(-EALREADY, 1) == 4);
    CHECK(ctl_exit_code(-ETIMEDOUT, 1) == 5);
    CHECK(ctl_exit_code(-EACCES, 1) == 6 && ctl_exit_code(-EPERM, 1) == 6);
    CHECK(ctl_exit_code(-EBADMSG, 1) == 7);
    CHECK(ctl_exit_code(-ENOMEM, 1) == 8);
    /* from reaching it */
    CHECK(ctl_exit_code(-ESRCH, 0) == 3 && ctl_exit_code(-ENOENT, 0) == 3 && ctl_exit_code(-ECONNREFUSED, 0) == 3);
    CHECK(ctl_exit_code(-EPERM, 0) == 6 && ctl_exit_code(-ETIMEDOUT, 0) == 5);
    CHECK(ctl_exit_code(-ECONNRESET, 0) == 1 && ctl_exit_code(-EPROTO, 0) == 1);
}

int main(void)
{
    test_encoding();
    test_round_trip();
    test_status_fields();
    test_field_table();
    test_valid_forms();
    test_hostile();
    test_names();
    test_exit_codes();
    test_random();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ctlproto: all checks passed\n");
    return 0;
}
