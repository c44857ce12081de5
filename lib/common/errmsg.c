/*
 * errmsg.c - the calling thread's message for its last failure (errmsg.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "errmsg.h"

static __thread char message[512];

const char *errmsg_get(void)
{
    return message;
}

void errmsg_set(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
}

void errmsg_clear(void)
{
    message[0] = '\0';
}
