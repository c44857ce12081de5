/* The files installed with a program, found from where it runs; see companion.h. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "companion.h"
#include "proc.h"

static int readable_file(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, R_OK) == 0;
}

/* dir (relative: to exe_dir) into buf, resolved when it exists: 0, or -1 when it does not fit. */
static int folder_path(const char *exe_dir, const char *dir, char buf[PATH_MAX])
{
    char joined[PATH_MAX];
    int n = dir[0] == '/' ? snprintf(joined, sizeof(joined), "%s", dir)
                          : snprintf(joined, sizeof(joined), "%s/%s", exe_dir, dir);

    if (n < 0 || (size_t)n >= sizeof(joined))
        return -1;
    if (!realpath(joined, buf))
        memcpy(buf, joined, (size_t)n + 1);
    return 0;
}

/* Adds folder to the ", "-joined list in out (cut at len). */
static void note_looked(const char *folder, char *out, size_t len)
{
    size_t used = strnlen(out, len);

    if (used + 1 < len)
        snprintf(out + used, len - used, "%s%s", used ? ", " : "", folder);
}

int tcgpu_companion_find(const char *const dirs[], const char *name,
                         int (*fits)(const char *path), char *out, size_t len)
{
    char exe_dir[PATH_MAX], folder[PATH_MAX], cand[PATH_MAX], found[PATH_MAX];
    int have_exe = tcgpu_proc_self_dir(exe_dir, sizeof(exe_dir)) == 0;

    if (!fits)
        fits = readable_file;
    if (len)
        out[0] = '\0';
    for (; *dirs; dirs++) {
        if (((*dirs)[0] != '/' && !have_exe) ||
            folder_path(exe_dir, *dirs, folder) < 0)
            continue;
        int n = snprintf(cand, sizeof(cand), "%s/%s", folder, name);
        if (n > 0 && (size_t)n < sizeof(cand) && fits(cand) && realpath(cand, found)) {
            if (strlen(found) >= len)
                return -ENAMETOOLONG;
            memcpy(out, found, strlen(found) + 1);
            return 0;
        }
        note_looked(folder, out, len);
    }
    return -ENOENT;
}
