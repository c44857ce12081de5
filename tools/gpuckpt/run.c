/*
 * run.c - gpuckpt run: a command with libtcgpu.so preloaded (docs/cli.md).
 *
 * The options become the library's environment (TCGPU_*), checked here so
 * that a mistake is a usage error rather than a program that starts without
 * what was asked; then gpuckpt execs the command, which keeps gpuckpt's pid.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "tcgpud.h"
#include "util.h"
#include "ctl/client.h"
#include "common/macros.h"
#include "common/signals.h"

#ifndef TCGPU_INSTALL_LIBDIR
#define TCGPU_INSTALL_LIBDIR "/usr/local/lib"
#endif

static int readable_file(const char *p)
{
    struct stat st;

    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, R_OK) == 0;
}

/* ---------------------------------------------------------------------------
 * Is it libtcgpu.so? The dynamic loader skips an LD_PRELOAD entry it cannot
 * load and runs the program anyway, without tcgpu: check before exec.
 * ------------------------------------------------------------------------- */

/* The section header i of the mapped ELF file, or NULL when out of bounds. */
static const Elf64_Shdr *section(const uint8_t *m, size_t len, const Elf64_Ehdr *eh, unsigned i)
{
    uint64_t off = eh->e_shoff + (uint64_t)i * sizeof(Elf64_Shdr);

    if (i >= eh->e_shnum || eh->e_shentsize != sizeof(Elf64_Shdr) || off > len ||
        len - off < sizeof(Elf64_Shdr))
        return NULL;
    return (const Elf64_Shdr *)(m + off);
}

/* Whether the ELF shared object (mapped, len bytes) defines `name` in .dynsym. */
static int defines(const uint8_t *m, size_t len, const char *name)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)m;

    for (unsigned i = 0; i < eh->e_shnum; i++) {
        const Elf64_Shdr *sh = section(m, len, eh, i), *str;
        if (!sh || sh->sh_type != SHT_DYNSYM || sh->sh_entsize != sizeof(Elf64_Sym) ||
            sh->sh_offset > len || sh->sh_size > len - sh->sh_offset ||
            !(str = section(m, len, eh, sh->sh_link)) || str->sh_offset > len ||
            str->sh_size > len - str->sh_offset)
            continue;
        const Elf64_Sym *sym = (const Elf64_Sym *)(m + sh->sh_offset);
        const char *names = (const char *)(m + str->sh_offset);
        for (uint64_t k = 0; k < sh->sh_size / sizeof(Elf64_Sym); k++) {
            uint32_t n = sym[k].st_name;
            if (sym[k].st_shndx != SHN_UNDEF && n < str->sh_size &&
                strnlen(names + n, str->sh_size - n) == strlen(name) && !strcmp(names + n, name))
                return 1;
        }
    }
    return 0;
}

/* 0 when path is a 64-bit ELF shared object of this machine that defines
 * tcgpu_get_status (tcgpu.h); else -1, with why. */
static int is_tcgpu_library(const char *path, char *why, size_t len)
{
    struct stat st;
    void *m = MAP_FAILED;
    int fd = open(path, O_RDONLY | O_CLOEXEC), r = -1;
    const Elf64_Ehdr *eh;

    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        snprintf(why, len, "%s", fd < 0 ? strerror(errno) : "too short to be a library");
        goto out;
    }
    m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        snprintf(why, len, "cannot read it: %s", strerror(errno));
        goto out;
    }
    eh = m;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_type != ET_DYN || eh->e_machine != EM_X86_64)
        snprintf(why, len, "not a shared library (ELF 64-bit, x86-64)");
    else if (!defines(m, (size_t)st.st_size, "tcgpu_get_status"))
        snprintf(why, len, "a shared library, but not libtcgpu.so (no tcgpu_get_status)");
    else
        r = 0;
out:
    if (m != MAP_FAILED)
        munmap(m, (size_t)st.st_size);
    if (fd >= 0)
        close(fd);
    return r;
}

/*
 * Where libtcgpu.so is: $TCGPU_LIB, else next to gpuckpt (build tree or
 * install), else in the install's libdir. out: PATH_MAX bytes (realpath's).
 * 0, or -1 with the places looked in said on stderr.
 */
static int find_library(char out[PATH_MAX])
{
    const char *env = getenv("TCGPU_LIB");
    char exe[PATH_MAX], looked[4 * PATH_MAX] = "";
    static const char *const rel[] = {
        "/../../interpose/libtcgpu.so", /* build tree: tools/gpuckpt/gpuckpt */
        "/../lib/tcgpu/libtcgpu.so",    /* installed: bin/gpuckpt */
        "/../lib/libtcgpu.so",
        "/../lib64/libtcgpu.so",
    };
    char cand[PATH_MAX];
    ssize_t n;

    if (env && *env) {
        char why[128];
        if (!realpath(env, out) || !readable_file(out)) {
            gpuckpt_error("TCGPU_LIB=%s: not a readable file", env);
            return -1;
        }
        if (is_tcgpu_library(out, why, sizeof(why)) < 0) {
            gpuckpt_error("TCGPU_LIB=%s: %s; the program would run without tcgpu", env, why);
            return -1;
        }
        return 0;
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        for (size_t i = 0; i < NELEM(rel); i++) {
            snprintf(cand, sizeof(cand), "%s%s", exe, rel[i]);
            size_t l = strlen(looked);
            snprintf(looked + l, sizeof(looked) - l, "\n  %s", cand);
            if (readable_file(cand) && realpath(cand, out))
                return 0;
        }
    }
    const char *fixed[] = { TCGPU_INSTALL_LIBDIR "/tcgpu/libtcgpu.so", TCGPU_INSTALL_LIBDIR "/libtcgpu.so" };
    for (size_t i = 0; i < NELEM(fixed); i++) {
        size_t l = strlen(looked);
        snprintf(looked + l, sizeof(looked) - l, "\n  %s", fixed[i]);
        if (readable_file(fixed[i]) && realpath(fixed[i], out))
            return 0;
    }
    gpuckpt_error("cannot find libtcgpu.so; set TCGPU_LIB=/path/to/libtcgpu.so. Looked in:%s", looked);
    return -1;
}

/* LD_PRELOAD with lib first; the existing entries (space- or colon-separated) kept. */
static int preload_with(const char *lib)
{
    const char *old = getenv("LD_PRELOAD");
    char *v;
    int r;

    if (strpbrk(lib, " :")) {
        gpuckpt_error("%s: LD_PRELOAD cannot hold a path with a space or colon; "
                      "move the library or set TCGPU_LIB to a link without them", lib);
        return -1;
    }
    if (old && *old) {
        /* already there? then leave LD_PRELOAD alone */
        char *copy = strdup(old), *save = NULL;
        for (char *t = copy ? strtok_r(copy, " :", &save) : NULL; t; t = strtok_r(NULL, " :", &save)) {
            if (!strcmp(t, lib)) {
                free(copy);
                return 0;
            }
        }
        free(copy);
        if (asprintf(&v, "%s:%s", lib, old) < 0)
            return -1;
    } else if (!(v = strdup(lib))) {
        return -1;
    }
    r = setenv("LD_PRELOAD", v, 1);
    free(v);
    return r;
}

int gpuckpt_cmd_run(const struct gpuckpt_command *self, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "signal", required_argument, NULL, 's' },
        { "signal-action", required_argument, NULL, 'a' },
        { "checkpoint-dir", required_argument, NULL, 'D' },
        { "run-dir", required_argument, NULL, 'R' },
        { "log", required_argument, NULL, 'l' },
        GPUCKPT_TCGPUD_RUN_LONGOPTS,
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    char lib[PATH_MAX], dir[PATH_MAX];
    int ch;

    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "+hs:a:D:R:l:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            gpuckpt_command_help(self);
            return CTL_EXIT_OK;
        case 's':
            /* "0" is no signal: off is said as off, not as a number */
            if (!strcmp(optarg, "0") || tcgpu_signal_parse(optarg) < 0)
                return gpuckpt_usage_error("run", "--signal %s: unknown or unusable signal "
                                           "(try RTMIN+4, USR2, 38, or off for none)", optarg);
            setenv("TCGPU_SIGNAL", optarg, 1);
            break;
        case 'a':
            if (tcgpu_sigaction_parse(optarg) < 0)
                return gpuckpt_usage_error("run", "--signal-action %s: one of toggle, suspend, "
                                           "resume, checkpoint", optarg);
            setenv("TCGPU_SIGNAL_ACTION", optarg, 1);
            break;
        case 'D':
            if (gpuckpt_absolute_dir(optarg, dir, sizeof(dir)) < 0)
                return gpuckpt_usage_error("run", "bad directory '%s'", optarg);
            setenv("TCGPU_CHECKPOINT_DIR", dir, 1);
            break;
        case 'R':
            if (gpuckpt_absolute_dir(optarg, dir, sizeof(dir)) < 0)
                return gpuckpt_usage_error("run", "bad directory '%s'", optarg);
            setenv("TCGPU_RUN_DIR", dir, 1);
            break;
        case 'l':
            if (strcmp(optarg, "quiet") && strcmp(optarg, "info") && strcmp(optarg, "debug"))
                return gpuckpt_usage_error("run", "--log is quiet, info or debug");
            setenv("TCGPU_LOG", optarg, 1);
            break;
        case GPUCKPT_OPT_PROJECT ... GPUCKPT_OPT_TCGPUD_LAST - 1: {
            int e = gpuckpt_tcgpud_run_option(ch, optarg);   /* tcgpud's: sets TCGPU_* */
            if (e)
                return e;
            break;
        }
        default:
            return gpuckpt_option_error("run", argc, argv, "+hs:a:D:R:l:", longopts);
        }
    }
    if (optind >= argc)
        return gpuckpt_usage_error("run", "which command?");
    if (find_library(lib) < 0)
        return CTL_EXIT_FAILED;
    if (preload_with(lib) < 0) {
        gpuckpt_error("cannot set LD_PRELOAD");
        return CTL_EXIT_FAILED;
    }
    execvp(argv[optind], argv + optind);
    gpuckpt_error("cannot run %s: %s", argv[optind], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
