/*
 * config.c - the plugin's configuration file.
 *
 * CRIU starts plugins with no options of their own, and the container
 * runtimes that run CRIU (runc under podman, CRI-O, containerd) pass it no
 * environment of ours, so what the plugin must know lives in a file:
 *
 *     [plugin]
 *     timeout = 600                 ; seconds one suspend or resume may take
 *     [environment]
 *     TCGPU_REAL_LIBCUDA = /usr/lib/x86_64-linux-gnu/libcuda.so.1
 *
 * [environment] is set in CRIU's process before the driver is loaded, for
 * what the driver library reads (CUDA_VISIBLE_DEVICES; a simulated device's
 * SIMCUDA_SHM), never over a variable CRIU's caller set.
 */
#include <dlfcn.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "common/units.h"

#ifndef TCGPU_CRIU_LIBEXECDIR
#define TCGPU_CRIU_LIBEXECDIR "/usr/local/libexec/tcgpu"
#endif

#define DEFAULT_TIMEOUT_MS (600 * 1000)

struct parse {
    struct tp_config *c;
    int bad;
};

static int on_key(void *arg, const char *section, const char *key, const char *value)
{
    struct parse *p = arg;
    uint64_t ns;

    if (!strcmp(section, "plugin") && !strcmp(key, "timeout")) {
        char spec[64];
        /* plain seconds, or a duration as tcgpud takes them ("90s", "10m") */
        snprintf(spec, sizeof(spec), "%s%s", value, strspn(value, "0123456789") == strlen(value) ? "s" : "");
        if (units_parse_duration(spec, &ns) < 0 || ns / 1000000 > INT_MAX) {
            log_err("%s: [plugin] timeout = %s is not a duration", p->c->path, value);
            p->bad = 1;
        } else {
            p->c->timeout_ms = (int)(ns / 1000000);
        }
    } else if (!strcmp(section, "environment")) {
        setenv(key, value, 0);
    } else {
        log_warn("%s: [%s] %s is not a setting of the plugin: ignored", p->c->path, section, key);
    }
    return 1;
}

/* `name` in the directory this plugin was loaded from (or the program running). */
static void beside_plugin(const char *name, char *out, size_t len)
{
    Dl_info info;
    const char *slash;

    out[0] = '\0';
    if (!dladdr((void *)beside_plugin, &info) || !info.dli_fname || !(slash = strrchr(info.dli_fname, '/')))
        return;
    snprintf(out, len, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname, name);
}

int tp_helper_path(char *out, size_t len)
{
    beside_plugin(TP_HELPER, out, len);
    if (out[0] && access(out, X_OK) == 0)
        return 0;
    snprintf(out, len, "%s/%s", TCGPU_CRIU_LIBEXECDIR, TP_HELPER);
    return access(out, X_OK) == 0 ? 0 : -ENOENT;
}

int tp_config_load(struct tp_config *c)
{
    const char *env = getenv("TCGPU_CRIU_CONFIG");
    char cand[3][sizeof(c->path)];
    struct parse p = { .c = c };
    struct stat st;
    FILE *f;
    int r;

    memset(c, 0, sizeof(*c));
    c->timeout_ms = DEFAULT_TIMEOUT_MS;
    snprintf(cand[0], sizeof(cand[0]), "%s", env ? env : "");
    beside_plugin("tcgpu_plugin.conf", cand[1], sizeof(cand[1]));
    snprintf(cand[2], sizeof(cand[2]), "/etc/tcgpu/criu-plugin.conf");
    for (int i = 0; i < 3 && !c->path[0]; i++)
        if (cand[i][0] && stat(cand[i], &st) == 0)
            memcpy(c->path, cand[i], sizeof(c->path));
    if (!c->path[0]) {
        if (env && *env) {
            log_err("TCGPU_CRIU_CONFIG=%s: no such file", env);
            return -ENOENT;
        }
        return 0;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 022) || st.st_uid != geteuid()) {
        /* it sets CRIU's environment: only its owner may write it */
        log_err("%s is not a regular file owned by uid %u and writable by it alone: refusing it",
                c->path, (unsigned)geteuid());
        return -EPERM;
    }
    if (!(f = fopen(c->path, "re"))) {
        r = -errno;
        log_err("cannot read %s: %s", c->path, strerror(errno));
        return r;
    }
    r = ini_parse_file(f, on_key, &p);
    fclose(f);
    if (r != 0 || p.bad) {
        if (r > 0)
            log_err("%s: line %d is not INI", c->path, r);
        return -EINVAL;
    }
    log_info("configuration from %s (timeout %d s)", c->path, c->timeout_ms / 1000);
    return 0;
}
