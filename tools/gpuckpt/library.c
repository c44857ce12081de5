/* library.c - where libtcgpu.so is; see library.h. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "library.h"
#include "common/companion.h"
#include "common/install_dirs.h"

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

int gpuckpt_find_library(char out[PATH_MAX], char *err, size_t errlen)
{
    static const char *const dirs[] = {
        "../../interpose",          /* the build tree: tools/gpuckpt/gpuckpt */
        TCGPU_BINDIR_TO_LIBDIR,     /* installed, wherever the tree lies */
        TCGPU_LIBDIR,
        NULL,
    };
    const char *env = getenv("TCGPU_LIB");
    char looked[4 * PATH_MAX];

    if (env && *env) {
        char why[128];
        if (!realpath(env, out) || !readable_file(out)) {
            snprintf(err, errlen, "TCGPU_LIB=%s: not a readable file", env);
            return -1;
        }
        if (is_tcgpu_library(out, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "TCGPU_LIB=%s: %s; the program would run without tcgpu", env, why);
            return -1;
        }
        return 0;
    }
    if (tcgpu_companion_find(dirs, "libtcgpu.so", NULL, looked, sizeof(looked)) == 0) {
        memcpy(out, looked, strlen(looked) + 1);
        return 0;
    }
    snprintf(err, errlen, "cannot find libtcgpu.so; set TCGPU_LIB=/path/to/libtcgpu.so. Looked in: %s",
             looked);
    return -1;
}
