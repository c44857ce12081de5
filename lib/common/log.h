/*
 * log.h - one log for the library and the programs: a line per event,
 * "PREFIX: message", handed whole to one sink (on stderr one write() a
 * line, so that lines of several processes and threads do not interleave).
 *
 * The prefix, the level and the sink are the program's, set once at start
 * by tcgpu_log_setup(); what each writes:
 *
 *   libtcgpu (never set up)  "tcgpu[PID]: ..." on stderr; the level is info until
 *                            tcgpu_log_set_level says otherwise (libtcgpu.so sets
 *                            it from TCGPU_LOG, core/settings.h)
 *   tcgpud                   "tcgpud HH:MM:SS.mmm: ..." on stderr
 *   tcgpu-slurm              "tcgpu-slurm[JOB.STEP.TASK] HH:MM:SS.mmm: ..." on stderr
 *   the CRIU plugin          "Error (tcgpu_plugin): ...", "tcgpu_plugin: ..." into CRIU's log
 *   gpuckpt, tcgpu-replay    "gpuckpt: ...", "tcgpu-replay: ..." on stderr
 *
 * Logging happens when something happens (an operation, a refusal, an
 * error), never on the API fast path. Thread-safe once set up; not
 * async-signal-safe: never log from a handler.
 */
#ifndef TCGPU_LOG_H
#define TCGPU_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum tcgpu_log_level { TCGPU_LOG_ERROR = 0, TCGPU_LOG_WARN, TCGPU_LOG_INFO, TCGPU_LOG_DEBUG };

/* How a line begins: NAME, then what these flags add, then ": ". */
#define TCGPU_LOG_PID    0x1u   /* "NAME[PID]": the process that logs (after fork, the child) */
#define TCGPU_LOG_CLOCK  0x2u   /* "NAME HH:MM:SS.mmm": the wall clock's time of day */
#define TCGPU_LOG_TAGGED 0x4u   /* errors and warnings as CRIU writes its own:
                                   "Error (NAME): ", "Warn  (NAME): " */

/*
 * Where a finished line goes: the prefix, the message and '\n' (len bytes,
 * a NUL after them), with the level it was logged at.
 */
typedef void tcgpu_log_sink(enum tcgpu_log_level level, const char *line, size_t len);

struct tcgpu_log_style {
    const char *name;               /* copied (at most 63 bytes kept) */
    unsigned flags;                 /* TCGPU_LOG_* above */
    enum tcgpu_log_level level;     /* the most detailed level written */
    tcgpu_log_sink *sink;           /* NULL: tcgpu_log_to_stderr */
};

/*
 * Makes style this process's log. Call it at start, before any thread
 * logs; a single-threaded program may call it again (tcgpu-slurm names its
 * task once it knows it). A program that never calls it logs as the
 * library does.
 */
void tcgpu_log_setup(const struct tcgpu_log_style *style);

/* The default sink: the line on stderr, one write(). */
void tcgpu_log_to_stderr(enum tcgpu_log_level level, const char *line, size_t len);

/* Whether a line of this level would be written. */
int tcgpu_log_enabled(enum tcgpu_log_level level);

/* The level a name says: "quiet" (or "error"), "info", "debug"; info for
 * NULL, "" and any other name. */
enum tcgpu_log_level tcgpu_log_level_named(const char *name);

/* What is printed from now on: lines of this level and the ones above it. */
void tcgpu_log_set_level(enum tcgpu_log_level level);

/* One line at level, when enabled. errno is kept. */
void tcgpu_log(enum tcgpu_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tcgpu_vlog(enum tcgpu_log_level level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

#define log_err(...)   tcgpu_log(TCGPU_LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  tcgpu_log(TCGPU_LOG_WARN, __VA_ARGS__)
#define log_info(...)  tcgpu_log(TCGPU_LOG_INFO, __VA_ARGS__)
#define log_debug(...) tcgpu_log(TCGPU_LOG_DEBUG, __VA_ARGS__)

#endif
