/*
 * log.h - the library's log: stderr, one line per event, "tcgpu[PID]: ...".
 *
 * The level chooses what is printed: info until tcgpu_log_set_level says
 * otherwise (libtcgpu.so sets it from TCGPU_LOG, core/settings.h). Logging
 * happens when something happens (an operation, a refusal, an error), never
 * on the API fast path. Not async-signal-safe: never log from a handler.
 */
#ifndef TCGPU_LOG_H
#define TCGPU_LOG_H

enum tcgpu_log_level { TCGPU_LOG_ERROR = 0, TCGPU_LOG_INFO = 1, TCGPU_LOG_DEBUG = 2 };

void tcgpu_log(enum tcgpu_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int tcgpu_log_enabled(enum tcgpu_log_level level);

/* The level a name says: "quiet" (or "error"), "info", "debug"; info for
 * NULL, "" and any other name. */
enum tcgpu_log_level tcgpu_log_level_named(const char *name);

/* What is printed from now on: lines of this level and the ones above it. */
void tcgpu_log_set_level(enum tcgpu_log_level level);

#define log_err(...)   tcgpu_log(TCGPU_LOG_ERROR, __VA_ARGS__)
#define log_info(...)  tcgpu_log(TCGPU_LOG_INFO, __VA_ARGS__)
#define log_debug(...) tcgpu_log(TCGPU_LOG_DEBUG, __VA_ARGS__)

#endif
