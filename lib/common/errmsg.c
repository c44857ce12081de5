/*
 * errmsg.c - the calling thread's message for its last failure (errmsg.h).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "errmsg.h"

static __thread struct errmsg_record own;
static __thread struct errmsg_record *carried;    /* another thread's, or NULL */

struct errmsg_record *errmsg_record(void)
{
    return carried ? carried : &own;
}

const char *errmsg_get(void)
{
    return errmsg_record()->text;
}

void errmsg_set(const char *fmt, ...)
{
    struct errmsg_record *r = errmsg_record();
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(r->text, sizeof(r->text), fmt, ap);
    va_end(ap);
}

void errmsg_clear(void)
{
    errmsg_record()->text[0] = '\0';
}

struct errmsg_record *errmsg_carry(struct errmsg_record *rec)
{
    struct errmsg_record *before = errmsg_record();

    carried = rec == &own ? NULL : rec;
    return before;
}

int errmsg_result(int rc)
{
    struct errmsg_record *r = errmsg_record();

    r->rc = rc;
    if (rc == 0)
        r->text[0] = '\0';
    return rc;
}
