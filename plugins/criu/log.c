/*
 * log.c - the plugin's lines in CRIU's log.
 *
 * CRIU's own logger is print_on_level(), exported by the criu binary (its
 * plugins are built in its tree and call it directly). We are built against
 * the public plugin header only, so we look it up at run time and fall back
 * to stderr. Errors are written as CRIU writes its own ("Error (...): "),
 * so that tools which pick CRIU's reasons out of its log (gpuckpt, podman's
 * users reading restore.log) find ours too.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>

#include "plugin.h"

typedef void (*print_on_level_fn)(unsigned int level, const char *fmt, ...);

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

void tp_log(enum tp_level level, const char *fmt, ...)
{
    print_on_level_fn print = criu_print();
    const char *lead = level == TP_ERROR ? "Error (" TP_NAME "): "
                       : level == TP_WARN ? "Warn  (" TP_NAME "): " : TP_NAME ": ";
    char msg[2048];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (print)
        print((unsigned)level, "%s%s\n", lead, msg);
    else if (level <= TP_WARN)
        fprintf(stderr, "%s%s\n", lead, msg);
}
