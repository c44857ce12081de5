/* library.c - where libtcgpu.so is; see library.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "library.h"
#include "common/macros.h"

#ifndef TCGPU_INSTALL_LIBDIR
#define TCGPU_INSTALL_LIBDIR "/usr/local/lib"
#endif
#ifndef TCGPU_BIN_TO_LIBDIR
#define TCGPU_BIN_TO_LIBDIR "../lib"
#endif

static int readable_file(const char *p)
{
    struct stat st;

    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, R_OK) == 0;
}

/* Tries dir/rel: 1 and out when it is a readable file; notes it in looked. */
static int try_at(const char *dir, const char *rel, char out[PATH_MAX], char *looked, size_t len)
{
    char cand[PATH_MAX];
    size_t used = strlen(looked);

    snprintf(cand, sizeof(cand), "%s%s", dir, rel);
    snprintf(looked + used, len - used, "\n  %s", cand);
    return readable_file(cand) && realpath(cand, out);
}

int gpuckpt_find_library(char out[PATH_MAX], char *err, size_t errlen)
{
    static const char *const rel[] = {
        "/../../interpose/libtcgpu.so",           /* build tree: tools/gpuckpt/gpuckpt */
        "/" TCGPU_BIN_TO_LIBDIR "/libtcgpu.so",   /* installed, at any prefix */
        "/../lib/tcgpu/libtcgpu.so",
        "/../lib/libtcgpu.so",
        "/../lib64/libtcgpu.so",
    };
    const char *env = getenv("TCGPU_LIB");
    char exe[PATH_MAX], looked[4 * PATH_MAX] = "";
    ssize_t n;

    if (env && *env) {
        if (!realpath(env, out) || !readable_file(out)) {
            snprintf(err, errlen, "TCGPU_LIB=%s: not a readable file", env);
            return -1;
        }
        return 0;
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        char *slash;
        exe[n] = '\0';
        if ((slash = strrchr(exe, '/')))
            *slash = '\0';
        for (size_t i = 0; i < NELEM(rel); i++)
            if (try_at(exe, rel[i], out, looked, sizeof(looked)))
                return 0;
    }
    if (try_at(TCGPU_INSTALL_LIBDIR, "/libtcgpu.so", out, looked, sizeof(looked)) ||
        try_at(TCGPU_INSTALL_LIBDIR, "/tcgpu/libtcgpu.so", out, looked, sizeof(looked)))
        return 0;
    snprintf(err, errlen, "cannot find libtcgpu.so; set TCGPU_LIB=/path/to/libtcgpu.so. Looked in:%s",
             looked);
    return -1;
}
