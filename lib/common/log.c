/* The library's log; see log.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static int log_level = TCGPU_LOG_INFO;

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

int tcgpu_log_enabled(enum tcgpu_log_level level)
{
    return (int)level <= __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

void tcgpu_log(enum tcgpu_log_level level, const char *fmt, ...)
{
    char line[1024];
    int saved_errno = errno;
    int n;
    va_list ap;

    if (!tcgpu_log_enabled(level))
        return;
    n = snprintf(line, sizeof(line), "tcgpu[%d]: ", (int)getpid());
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    n = (int)strlen(line);
    line[n++] = '\n';
    /* One write per line, so lines of several processes do not interleave. */
    if (write(STDERR_FILENO, line, (size_t)n) < 0) {
        /* nowhere left to report it */
    }
    errno = saved_errno;
}
