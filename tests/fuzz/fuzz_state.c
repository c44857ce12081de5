/*
 * fuzz_state - tcgpud's state file reader (tools/tcgpud/state.c) on hostile
 * files: a file is read whole or refused (-EBADMSG naming the line), and a
 * state that was read, saved again and read back is the same jobs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tcgpud/state.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_state: property violated: %s\n", what);
        abort();
    }
}

static int same_job(const struct tcgpud_saved_job *a, const struct tcgpud_saved_job *b)
{
    return a->pid == b->pid && a->start_ticks == b->start_ticks && a->uid == b->uid &&
           !strcmp(a->user, b->user) && !strcmp(a->project, b->project) &&
           a->priority == b->priority && a->limit == b->limit && a->device == b->device &&
           a->mem == b->mem && !strcmp(a->state, b->state) &&
           !strcmp(a->suspended_by, b->suspended_by) && a->auto_resume == b->auto_resume &&
           a->preemptions == b->preemptions && a->run_ns == b->run_ns &&
           a->since_ns == b->since_ns && a->queued_ns == b->queued_ns;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char in[4096], out[4096];
    struct tcgpud_saved_job *v = NULL, *w = NULL;
    size_t n = 0, m = 0;
    char err[512] = "";
    int r;

    if (!in[0]) {
        snprintf(in, sizeof(in), "%s", fuzz_scratch("state.in"));
        snprintf(out, sizeof(out), "%s", fuzz_scratch("state.out"));
    }
    fuzz_write_file(in, data, size);
    r = tcgpud_state_load(in, &v, &n, err, sizeof(err));
    if (r < 0) {
        check(!v && n == 0, "a refused file yields no jobs");
        check(err[0] != '\0', "a refusal says why");
        return 0;
    }
    check(tcgpud_state_save(out, v, n, err, sizeof(err)) == 0, "what was read can be saved");
    check(tcgpud_state_load(out, &w, &m, err, sizeof(err)) == 0, "what was saved reads back");
    check(m == n, "as many jobs");
    for (size_t i = 0; i < n; i++)
        check(same_job(&v[i], &w[i]), "the same jobs");
    free(v);
    free(w);
    return 0;
}
