/*
 * library.c - context-independent loading (cuLibrary*, cuKernel*), which the
 * CUDA 12+ runtime uses for the kernels of a program.
 *
 * A library is a simcuda module (a shared object of host functions, see
 * simcuda_kernel.h) loaded once for the process; no context is needed. A
 * CUkernel names one of its kernels; cuKernelGetFunction, a launch with the
 * CUkernel, or cuLibraryGetModule makes the library's module for the current
 * context on first use (lazy loading, as CU_MODULE_LAZY_LOADING), sharing the
 * library's code. The kernels a library lists are those declared with
 * SIMCUDA_KERNEL_PARAMS (read from the image's dynamic symbols). Device
 * globals and managed variables do not exist in simcuda modules:
 * cuLibraryGetGlobal/Managed answer CUDA_ERROR_NOT_FOUND for every name.
 */
#include "sim.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PARAMS_PREFIX "simcuda_params__"

struct sim_kernel {
    uint32_t magic;                 /* SIM_MAGIC_KERNEL */
    struct sim_library *lib;
    simcuda_kernel_fn fn;
    const uint32_t *meta;
    struct sim_fattrs attrs;
    struct sim_kernel *next;
    char name[];
};

struct lib_module {                 /* the library loaded into one context */
    struct sim_ctx *ctx;
    CUmodule mod;
    struct lib_module *next;
};

struct sim_library {
    uint32_t magic;                 /* SIM_MAGIC_LIBRARY */
    void *dl;
    char **names;
    size_t nnames;
    struct sim_kernel *kernels;
    struct lib_module *mods;
    pthread_mutex_t lock;           /* kernels and mods */
};

bool sim_is_kernel(const void *h)
{
    return sim_handle_ok(h, SIM_MAGIC_KERNEL);
}

static CUresult lib_get(CUlibrary h, struct sim_library **out)
{
    struct sim_library *l = (struct sim_library *)h;

    if (!sim_handle_ok(l, SIM_MAGIC_LIBRARY))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = l;
    return CUDA_SUCCESS;
}

static CUresult kernel_get(CUkernel h, struct sim_kernel **out)
{
    struct sim_kernel *k = (struct sim_kernel *)h;

    if (!sim_handle_ok(k, SIM_MAGIC_KERNEL))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = k;
    return CUDA_SUCCESS;
}

/* ---- the kernels an image declares --------------------------------------------------- */

static bool inside(size_t off, size_t n, size_t len)
{
    return off <= len && n <= len - off;
}

int sim_elf_kernel_names(const unsigned char *img, size_t len, char ***names, size_t *n)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
    char **v = NULL;
    size_t k = 0;

    *names = NULL;
    *n = 0;
    if (len < sizeof(*eh) || memcmp(img, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shentsize != sizeof(Elf64_Shdr) || !inside(eh->e_shoff, (size_t)eh->e_shnum * sizeof(Elf64_Shdr), len))
        return -1;
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff) + i;
        const Elf64_Shdr *st;

        if (sh->sh_type != SHT_DYNSYM || sh->sh_entsize != sizeof(Elf64_Sym) || sh->sh_link >= eh->e_shnum)
            continue;
        st = (const Elf64_Shdr *)(img + eh->e_shoff) + sh->sh_link;
        if (!inside(sh->sh_offset, sh->sh_size, len) || !inside(st->sh_offset, st->sh_size, len))
            return -1;
        for (size_t j = 0; j < sh->sh_size / sizeof(Elf64_Sym); j++) {
            const Elf64_Sym *sym = (const Elf64_Sym *)(img + sh->sh_offset) + j;
            const char *nm;
            char **nv;

            if (sym->st_name >= st->sh_size || sym->st_shndx == SHN_UNDEF)
                continue;
            nm = (const char *)img + st->sh_offset + sym->st_name;
            if (strnlen(nm, st->sh_size - sym->st_name) == st->sh_size - sym->st_name ||
                strncmp(nm, PARAMS_PREFIX, strlen(PARAMS_PREFIX)) || !nm[strlen(PARAMS_PREFIX)])
                continue;
            if (!(nv = realloc(v, (k + 1) * sizeof(*v))))
                goto fail;
            v = nv;
            if (!(v[k] = strdup(nm + strlen(PARAMS_PREFIX))))
                goto fail;
            k++;
        }
    }
    *names = v;
    *n = k;
    return 0;
fail:
    for (size_t x = 0; x < k; x++)
        free(v[x]);
    free(v);
    return -1;
}

/* ---- loading -------------------------------------------------------------------------- */

static CUresult options_ok(CUjit_option *jo, void **jv, unsigned nj, CUlibraryOption *lo, void **lv,
                           unsigned nl)
{
    if ((nj && (!jo || !jv)) || (nl && (!lo || !lv)))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < nl; i++)
        if (lo[i] != CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE && lo[i] != CU_LIBRARY_BINARY_IS_PRESERVED)
            return CUDA_ERROR_INVALID_VALUE;
    /* JIT options have nothing to act on: the code is host code already. */
    return CUDA_SUCCESS;
}

static CUresult lib_new(void *dl, const unsigned char *img, size_t len, CUlibrary *out)
{
    struct sim_library *l = calloc(1, sizeof(*l));

    if (!l) {
        dlclose(dl);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    l->magic = SIM_MAGIC_LIBRARY;
    l->dl = dl;
    if (sim_elf_kernel_names(img, len, &l->names, &l->nnames)) {
        l->names = NULL;
        l->nnames = 0;
    }
    pthread_mutex_init(&l->lock, NULL);
    sim_handle_add(l);
    *out = (CUlibrary)l;
    return CUDA_SUCCESS;
}

CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                           void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                           void **libraryOptionValues, unsigned int numLibraryOptions)
{
    size_t len;
    void *dl;
    CUresult r;

    SIM_BEGIN();
    if (!library || !code)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = options_ok(jitOptions, jitOptionsValues, numJitOptions, libraryOptions, libraryOptionValues,
                        numLibraryOptions)) ||
        (r = sim_elf_dlopen(code, "cuLibraryLoadData", &dl, &len)))
        return r;
    return lib_new(dl, code, len, library);
}
SIM_EXPORT(cuLibraryLoadData);

CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                               void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                               void **libraryOptionValues, unsigned int numLibraryOptions)
{
    unsigned char *img = NULL;
    struct stat st;
    void *dl;
    CUresult r;
    int fd;

    SIM_BEGIN();
    if (!library || !fileName)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = options_ok(jitOptions, jitOptionsValues, numJitOptions, libraryOptions, libraryOptionValues,
                        numLibraryOptions)))
        return r;
    if ((fd = open(fileName, O_RDONLY | O_CLOEXEC)) < 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size < (off_t)SELFMAG ||
        (img = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    close(fd);
    if (memcmp(img, ELFMAG, SELFMAG)) {
        munmap(img, (size_t)st.st_size);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    if (!(dl = dlopen(fileName, RTLD_NOW | RTLD_LOCAL))) {
        sim_load_failed("cuLibraryLoadFromFile", fileName, img, (size_t)st.st_size);
        munmap(img, (size_t)st.st_size);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    r = lib_new(dl, img, (size_t)st.st_size, library);
    munmap(img, (size_t)st.st_size);
    return r;
}
SIM_EXPORT(cuLibraryLoadFromFile);

void sim_library_module_gone(void *lib, CUmodule mod)
{
    struct sim_library *l = lib;

    pthread_mutex_lock(&l->lock);
    for (struct lib_module **pp = &l->mods; *pp; pp = &(*pp)->next)
        if ((*pp)->mod == mod) {
            struct lib_module *m = *pp;
            *pp = m->next;
            free(m);
            break;
        }
    pthread_mutex_unlock(&l->lock);
}

CUresult cuLibraryUnload(CUlibrary library)
{
    struct sim_library *l;
    CUresult r;

    SIM_BEGIN();
    if ((r = lib_get(library, &l)))
        return r;
    sim_handle_del(l);
    /* Each context's module goes after its work is done (it runs our code). */
    for (;;) {
        CUmodule mod = NULL;

        pthread_mutex_lock(&l->lock);
        if (l->mods)
            mod = l->mods->mod;
        pthread_mutex_unlock(&l->lock);
        if (!mod)
            break;
        sim_module_unload(mod);      /* calls sim_library_module_gone */
    }
    for (struct sim_kernel *k = l->kernels, *n; k; k = n) {
        n = k->next;
        sim_handle_del(k);
        k->magic = 0;
        free(k);
    }
    for (size_t i = 0; i < l->nnames; i++)
        free(l->names[i]);
    free(l->names);
    dlclose(l->dl);
    pthread_mutex_destroy(&l->lock);
    l->magic = 0;
    free(l);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuLibraryUnload);

/* ---- kernels ------------------------------------------------------------------------------- */

static CUresult kernel_of(struct sim_library *l, const char *name, struct sim_kernel **out)
{
    char meta[256];
    struct sim_kernel *k;
    void *sym;

    pthread_mutex_lock(&l->lock);
    for (k = l->kernels; k && strcmp(k->name, name); k = k->next)
        ;
    if (k) {
        pthread_mutex_unlock(&l->lock);
        *out = k;
        return CUDA_SUCCESS;
    }
    if (!(sym = dlsym(l->dl, name))) {
        pthread_mutex_unlock(&l->lock);
        return CUDA_ERROR_NOT_FOUND;
    }
    if (!(k = calloc(1, sizeof(*k) + strlen(name) + 1))) {
        pthread_mutex_unlock(&l->lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    k->magic = SIM_MAGIC_KERNEL;
    k->lib = l;
    k->fn = (simcuda_kernel_fn)sym;
    strcpy(k->name, name);
    if ((size_t)snprintf(meta, sizeof(meta), PARAMS_PREFIX "%s", name) < sizeof(meta))
        k->meta = dlsym(l->dl, meta);
    sim_fattrs_init(&k->attrs);
    k->next = l->kernels;
    l->kernels = k;
    pthread_mutex_unlock(&l->lock);
    sim_handle_add(k);
    *out = k;
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    struct sim_library *l;
    struct sim_kernel *k;
    CUresult r;

    SIM_BEGIN();
    if (!pKernel || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = lib_get(library, &l)) || (r = kernel_of(l, name, &k)))
        return r;
    *pKernel = (CUkernel)k;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuLibraryGetKernel);

CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
    struct sim_library *l;
    CUresult r;

    SIM_BEGIN();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = lib_get(lib, &l)))
        return r;
    *count = (unsigned)l->nnames;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuLibraryGetKernelCount);
SIM_PARTIAL(cuLibraryGetKernelCount, "counts the kernels declared with SIMCUDA_KERNEL_PARAMS only");

CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels, CUlibrary lib)
{
    struct sim_library *l;
    struct sim_kernel *k;
    CUresult r;

    SIM_BEGIN();
    if (!kernels || !numKernels)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = lib_get(lib, &l)))
        return r;
    for (size_t i = 0; i < l->nnames && i < numKernels; i++) {
        if ((r = kernel_of(l, l->names[i], &k)))
            return r;
        kernels[i] = (CUkernel)k;
    }
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuLibraryEnumerateKernels);
SIM_PARTIAL(cuLibraryEnumerateKernels,
    "lists the kernels declared with SIMCUDA_KERNEL_PARAMS only");

/* The library's module in context c, made on first use. */
static CUresult module_in(struct sim_library *l, struct sim_ctx *c, CUmodule *out)
{
    struct lib_module *m;
    CUresult r;

    pthread_mutex_lock(&l->lock);
    for (m = l->mods; m && m->ctx != c; m = m->next)
        ;
    if (m) {
        *out = m->mod;
        pthread_mutex_unlock(&l->lock);
        return CUDA_SUCCESS;
    }
    if (!(m = calloc(1, sizeof(*m)))) {
        pthread_mutex_unlock(&l->lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if ((r = sim_module_add_shared(c, l->dl, l, &m->mod))) {
        pthread_mutex_unlock(&l->lock);
        free(m);
        return r;
    }
    m->ctx = c;
    m->next = l->mods;
    l->mods = m;
    *out = m->mod;
    pthread_mutex_unlock(&l->lock);
    return CUDA_SUCCESS;
}

CUresult sim_kernel_resolve(const void *kern, struct sim_ctx *c, struct sim_kfn *out, CUfunction *fout)
{
    struct sim_kernel *k;
    CUmodule mod;
    CUfunction f;
    CUresult r;

    if (kernel_get((CUkernel)kern, &k))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if ((r = module_in(k->lib, c, &mod)) || (r = sim_module_function(mod, k->name, &f)))
        return r;
    /* The kernel's attributes (cuKernelSetAttribute) govern its launches. */
    *out = (struct sim_kfn){ k->fn, k->meta, c, k->name, &k->attrs };
    if (fout)
        *fout = f;
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    struct sim_library *l;
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (!pMod)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = lib_get(library, &l)))
        return r;
    if ((r = sim_ctx_current(&c)))
        return r;
    return module_in(l, c, pMod);
}
SIM_EXPORT(cuLibraryGetModule);

CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    struct sim_kfn k;
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (!pFunc)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_is_kernel(kernel))
        return CUDA_ERROR_INVALID_HANDLE;
    if ((r = sim_ctx_current(&c)))
        return r;
    return sim_kernel_resolve(kernel, c, &k, pFunc);
}
SIM_EXPORT(cuKernelGetFunction);

CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
    struct sim_kernel *k;
    CUresult r;

    SIM_BEGIN();
    if (!pLib)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = kernel_get(kernel, &k)))
        return r;
    *pLib = (CUlibrary)k->lib;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuKernelGetLibrary);

CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    struct sim_kernel *k;
    CUresult r;

    SIM_BEGIN();
    if (!name || !hfunc)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = kernel_get(hfunc, &k)))
        return r;
    *name = k->name;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuKernelGetName);

CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    struct sim_kernel *k;
    CUresult r;
    size_t off = 0;

    SIM_BEGIN();
    if ((r = kernel_get(kernel, &k)))
        return r;
    if (!k->meta || paramIndex >= k->meta[0])
        return CUDA_ERROR_INVALID_VALUE;
    /* Each argument aligned to its own size (at most 16), as packed by the compiler. */
    for (size_t i = 0; i <= paramIndex; i++) {
        size_t sz = k->meta[1 + i], al = sz >= 16 ? 16 : sz >= 8 ? 8 : sz >= 4 ? 4 : sz >= 2 ? 2 : 1;

        off = (off + al - 1) / al * al;
        if (i < paramIndex)
            off += sz;
    }
    if (paramOffset)
        *paramOffset = off;
    if (paramSize)
        *paramSize = k->meta[1 + paramIndex];
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuKernelGetParamInfo);

static CUresult kernel_dev(CUkernel kernel, CUdevice dev, struct sim_kernel **out)
{
    if (kernel_get(kernel, out))
        return CUDA_ERROR_INVALID_HANDLE;
    if (dev < 0 || dev >= sim_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

/* Attributes are kept per kernel, not per device: every simulated device is alike. */
CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    struct sim_kernel *k;
    CUresult r;

    SIM_BEGIN();
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = kernel_dev(kernel, dev, &k)))
        return r;
    return sim_fattr_get(&k->attrs, attrib, pi);
}
SIM_EXPORT(cuKernelGetAttribute);

CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    struct sim_kernel *k;
    CUresult r;

    SIM_BEGIN();
    if ((r = kernel_dev(kernel, dev, &k)))
        return r;
    return sim_fattr_set(&k->attrs, attrib, val);
}
SIM_EXPORT(cuKernelSetAttribute);
SIM_PARTIAL(cuKernelSetAttribute, "one value for all devices");

CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    struct sim_kernel *k;

    SIM_BEGIN();
    if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    return kernel_dev(kernel, dev, &k);
}
SIM_EXPORT(cuKernelSetCacheConfig);

/* ---- globals: simcuda modules have none ---------------------------------------------------- */

/* A symbol of a library that simcuda modules never have (no device code):
 * CUDA_ERROR_NOT_FOUND once the arguments are checked. */
static CUresult no_symbol(CUlibrary library, const char *name)
{
    struct sim_library *l;
    CUresult r;

    SIM_BEGIN();
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = lib_get(library, &l)))
        return r;
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    (void)dptr;
    (void)bytes;
    return no_symbol(library, name);
}
SIM_EXPORT(cuLibraryGetGlobal);
SIM_PARTIAL(cuLibraryGetGlobal, "simcuda modules have no device globals: CUDA_ERROR_NOT_FOUND");

CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    (void)dptr;
    (void)bytes;
    return no_symbol(library, name);
}
SIM_EXPORT(cuLibraryGetManaged);
SIM_PARTIAL(cuLibraryGetManaged, "simcuda modules have no managed variables: CUDA_ERROR_NOT_FOUND");

CUresult cuLibraryGetUnifiedFunction(void **fptr, CUlibrary library, const char *symbol)
{
    if (!fptr)
        return CUDA_ERROR_INVALID_VALUE;
    return no_symbol(library, symbol);
}
SIM_EXPORT(cuLibraryGetUnifiedFunction);
SIM_PARTIAL(cuLibraryGetUnifiedFunction,
    "simcuda modules have no unified functions: CUDA_ERROR_NOT_FOUND");
