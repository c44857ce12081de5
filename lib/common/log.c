/* The library's log; see log.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static int log_level = -1;

static int level_from_env(void)
{
    const char *v = getenv("TCGPU_LOG");

    if (!v || !*v || !strcmp(v, "info"))
        return TCGPU_LOG_INFO;
    if (!strcmp(v, "quiet") || !strcmp(v, "error"))
        return TCGPU_LOG_ERROR;
    if (!strcmp(v, "debug"))
        return TCGPU_LOG_DEBUG;
    return TCGPU_LOG_INFO;
}

int tcgpu_log_enabled(enum tcgpu_log_level level)
{
    int cur = __atomic_load_n(&log_level, __ATOMIC_RELAXED);

    if (cur < 0) {
        cur = level_from_env();
        __atomic_store_n(&log_level, cur, __ATOMIC_RELAXED);
    }
    return (int)level <= cur;
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
