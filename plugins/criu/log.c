/*
 * log.c - the plugin's lines in CRIU's log, through the common log
 * (common/log.h).
 *
 * CRIU's own logger is print_on_level(), exported by the criu binary (its
 * plugins are built in its tree and call it directly). We are built against
 * the public plugin header only, so we look it up at run time and fall back
 * to stderr. Errors are written as CRIU writes its own ("Error (...): "),
 * so that tools which pick CRIU's reasons out of its log (gpuckpt, podman's
 * users reading restore.log) find ours too.
 */
#include <dlfcn.h>

#include "common/log.h"
#include "internal.h"

typedef void (*print_on_level_fn)(unsigned int level, const char *fmt, ...);

/* CRIU's levels (criu/include/log.h) for ours. */
static const unsigned criu_level[] = {
    [TCGPU_LOG_ERROR] = 1, [TCGPU_LOG_WARN] = 2, [TCGPU_LOG_INFO] = 3, [TCGPU_LOG_DEBUG] = 4,
};

static print_on_level_fn criu_print(void)
{
    static int looked;
    static print_on_level_fn fn;

    if (!looked) {
        fn = (print_on_level_fn)dlsym(RTLD_DEFAULT, "print_on_level");
        looked = 1;
    }
    return fn;
}

/* CRIU's log decides what it keeps; without it, errors and warnings go to stderr. */
static void into_criu_log(enum tcgpu_log_level level, const char *line, size_t len)
{
    print_on_level_fn print = criu_print();

    if (print)
        print(criu_level[level], "%s", line);
    else if (level <= TCGPU_LOG_WARN)
        tcgpu_log_to_stderr(level, line, len);
}

void tp_log_setup(void)
{
    tcgpu_log_setup(&(struct tcgpu_log_style){ .name = TP_NAME, .flags = TCGPU_LOG_TAGGED,
                                              .level = TCGPU_LOG_DEBUG, .sink = into_criu_log });
}
