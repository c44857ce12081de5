/*
 * fuzz_ctl - the control protocol on hostile messages (lib/ctl/proto.c):
 * what tcgpud and the control server parse from anyone who connects.
 *
 * Every input goes through ctl_parse, and a message that parses through
 * every reader of it (ctl_get_status, the typed getters). Then the
 * properties the protocol promises: a parsed message, written again with
 * ctl_buf_* and parsed again, has the same word and fields (the encoding
 * round-trips), and its status fields written with ctl_put_status read
 * back the same. A violated property aborts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/proto.h"
#include "fuzz.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_ctl: property violated: %s\n", what);
        abort();
    }
}

/* Writes m again (as a request, or an ok/error reply) and parses it back into *again. */
static int rewrite(const struct ctl_msg *m, struct ctl_buf *b, struct ctl_msg *again)
{
    long n;

    if (!strcmp(m->word, "ok"))
        ctl_buf_ok(b);
    else if (!strcmp(m->word, "error"))
        ctl_buf_error(b, m->err, m->err_text);
    else
        ctl_buf_request(b, m->word);
    for (int i = 0; i < m->nfields; i++)
        ctl_buf_put(b, m->fields[i].key, m->fields[i].value);
    n = ctl_buf_finish(b);
    if (n < 0)
        return -1;                /* encoding may grow past the limit: fine, if it says so */
    check(ctl_parse(b->data, (size_t)n, again) == 0, "a message we wrote parses");
    return 0;
}

static void same(const struct ctl_msg *a, const struct ctl_msg *b)
{
    check(!strcmp(a->word, b->word), "the word survives");
    check(a->err == b->err, "the errno survives");
    check(a->nfields == b->nfields, "the fields survive");
    for (int i = 0; i < a->nfields; i++) {
        check(!strcmp(a->fields[i].key, b->fields[i].key), "a key survives");
        check(!strcmp(a->fields[i].value, b->fields[i].value), "a value survives");
    }
}

static void getters(const struct ctl_msg *m)
{
    for (int i = 0; i < m->nfields; i++) {
        uint64_t u;
        int64_t s;
        check(ctl_get(m, m->fields[i].key) != NULL, "a parsed key is found");
        ctl_get_u64(m, m->fields[i].key, &u);
        ctl_get_i64(m, m->fields[i].key, &s);
    }
}

static void status_round_trip(const struct ctl_msg *m, struct ctl_buf *b, struct ctl_msg *again)
{
    struct tcgpu_status st, st2;
    long n;

    if (ctl_get_status(m, &st) < 0)
        return;
    ctl_buf_ok(b);
    ctl_put_status(b, &st);
    n = ctl_buf_finish(b);
    check(n > 0 && ctl_parse(b->data, (size_t)n, again) == 0, "a status we wrote parses");
    check(ctl_get_status(again, &st2) == 0, "a status we wrote reads");
    check(st.state == st2.state && st.gpu_bytes == st2.gpu_bytes &&
          st.last_result == st2.last_result && !strcmp(st.last_error, st2.last_error),
          "a status survives");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ctl_msg m, again;
    static struct ctl_buf b;

    if (ctl_parse((const char *)data, size, &m) != 0)
        return 0;
    getters(&m);
    if (rewrite(&m, &b, &again) == 0)
        same(&m, &again);
    status_round_trip(&m, &b, &again);
    return 0;
}
