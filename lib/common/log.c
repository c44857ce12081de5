/* The log of the library and the programs; see log.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

#define NAME_MAX_LEN 64
#define LINE_ON_STACK 2048      /* longer lines are built on the heap */

static int log_level = TCGPU_LOG_INFO;

/* The library's style until a program sets its own. */
static struct {
    char name[NAME_MAX_LEN];
    unsigned flags;
    tcgpu_log_sink *sink;
} style = { "tcgpu", TCGPU_LOG_PID, tcgpu_log_to_stderr };

enum tcgpu_log_level tcgpu_log_level_named(const char *name)
{
    if (name && (!strcmp(name, "quiet") || !strcmp(name, "error")))
        return TCGPU_LOG_ERROR;
    if (name && !strcmp(name, "debug"))
        return TCGPU_LOG_DEBUG;
    return TCGPU_LOG_INFO;
}

void tcgpu_log_set_level(enum tcgpu_log_level level)
{
    __atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

void tcgpu_log_setup(const struct tcgpu_log_style *s)
{
    snprintf(style.name, sizeof(style.name), "%s", s->name);
    style.flags = s->flags;
    style.sink = s->sink ? s->sink : tcgpu_log_to_stderr;
    __atomic_store_n(&log_level, (int)s->level, __ATOMIC_RELAXED);
}

void tcgpu_log_to_stderr(enum tcgpu_log_level level, const char *line, size_t len)
{
    (void)level;
    if (write(STDERR_FILENO, line, len) < 0) {
        /* nowhere left to report it */
    }
}

int tcgpu_log_enabled(enum tcgpu_log_level level)
{
    return (int)level <= __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

/* The line's prefix into out (cap bytes, always enough): its length. */
static size_t put_prefix(enum tcgpu_log_level level, char *out, size_t cap)
{
    char pid[16] = "", when[17] = "";
    int n;

    if (style.flags & TCGPU_LOG_PID)
        snprintf(pid, sizeof(pid), "[%d]", (int)getpid());
    if (style.flags & TCGPU_LOG_CLOCK) {
        when[0] = ' ';
        wall_hms(when + 1);
    }
    if ((style.flags & TCGPU_LOG_TAGGED) && level <= TCGPU_LOG_WARN)
        n = snprintf(out, cap, "%s (%s%s%s): ", level == TCGPU_LOG_ERROR ? "Error" : "Warn ",
                     style.name, pid, when);
    else
        n = snprintf(out, cap, "%s%s%s: ", style.name, pid, when);
    return (size_t)n;
}

void tcgpu_vlog(enum tcgpu_log_level level, const char *fmt, va_list ap)
{
    char stack[LINE_ON_STACK], *line = stack;
    int saved_errno = errno;
    size_t pre, room;
    va_list again;
    int n;

    if (!tcgpu_log_enabled(level))
        return;
    pre = put_prefix(level, stack, sizeof(stack));
    room = sizeof(stack) - pre - 1;             /* the message and its NUL; '\n' after */
    va_copy(again, ap);
    n = vsnprintf(stack + pre, room, fmt, ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= room) {
        char *big = malloc(pre + (size_t)n + 2);
        if (big) {
            memcpy(big, stack, pre);
            vsnprintf(big + pre, (size_t)n + 1, fmt, again);
            line = big;
        } else {
            n = (int)room - 1;                  /* no memory: the line cut short */
        }
    }
    va_end(again);
    line[pre + (size_t)n] = '\n';
    line[pre + (size_t)n + 1] = '\0';
    style.sink(level, line, pre + (size_t)n + 1);
    if (line != stack)
        free(line);
    errno = saved_errno;
}

void tcgpu_log(enum tcgpu_log_level level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    tcgpu_vlog(level, fmt, ap);
    va_end(ap);
}
