/*
 * module.c - modules and kernel launches (see simcuda_kernel.h).
 *
 * A module is a shared object of host functions. cuModuleLoadData gets ELF
 * bytes with no length; the length is read from the ELF headers, the bytes go
 * to a memfd, and the memfd is dlopen'ed through /proc/self/fd.
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
#include <unistd.h>

struct sim_func {
    uint32_t magic;
    struct sim_module *mod;
    simcuda_kernel_fn fn;
    const uint32_t *params;      /* simcuda_params__<name>: {n, size0, ...} or NULL */
    struct sim_func *next;
    char name[];
};

struct sim_module {
    uint32_t magic;
    void *dl;
    struct sim_ctx *ctx;
    struct sim_func *funcs;
    struct sim_module *next;
};

static pthread_mutex_t mod_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_module *modules;

static bool is_elf(const void *p)
{
    return !memcmp(p, ELFMAG, SELFMAG);
}

static CUresult module_add(struct sim_ctx *c, void *dl, CUmodule *out)
{
    struct sim_module *m = calloc(1, sizeof(*m));

    if (!m) {
        dlclose(dl);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->magic = SIM_MAGIC_MODULE;
    m->dl = dl;
    m->ctx = c;
    pthread_mutex_lock(&mod_lock);
    m->next = modules;
    modules = m;
    pthread_mutex_unlock(&mod_lock);
    sim_handle_add(m);
    *out = (CUmodule)m;
    return CUDA_SUCCESS;
}

static CUresult load_path(CUmodule *out, const char *path, struct sim_ctx *c)
{
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);

    if (!dl) {
        sim_log("cannot load module %s: %s", path, dlerror());
        return CUDA_ERROR_INVALID_IMAGE;
    }
    return module_add(c, dl, out);
}

CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    unsigned char head[SELFMAG];
    struct sim_ctx *c;
    CUresult r;
    ssize_t n;
    int fd;

    SIM_BEGIN();
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_ctx_current(&c)))
        return r;
    if ((fd = open(fname, O_RDONLY | O_CLOEXEC)) < 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    n = read(fd, head, sizeof(head));
    close(fd);
    if (n != (ssize_t)sizeof(head) || !is_elf(head))
        return CUDA_ERROR_INVALID_IMAGE;
    return load_path(module, fname, c);
}
SIM_EXPORT(cuModuleLoad);

/* Length of an ELF64 image: the furthest byte any header refers to. */
static size_t elf_size(const unsigned char *img)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
    size_t end = sizeof(*eh);

    if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ehsize < sizeof(*eh))
        return 0;
    if (eh->e_phoff) {
        end = end > eh->e_phoff + (size_t)eh->e_phnum * eh->e_phentsize ? end
              : eh->e_phoff + (size_t)eh->e_phnum * eh->e_phentsize;
        for (unsigned i = 0; i < eh->e_phnum; i++) {
            const Elf64_Phdr *ph = (const Elf64_Phdr *)(img + eh->e_phoff + (size_t)i * eh->e_phentsize);
            if (ph->p_offset + ph->p_filesz > end)
                end = ph->p_offset + ph->p_filesz;
        }
    }
    if (eh->e_shoff) {
        if (eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize > end)
            end = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
        for (unsigned i = 0; i < eh->e_shnum; i++) {
            const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff + (size_t)i * eh->e_shentsize);
            if (sh->sh_type != SHT_NOBITS && sh->sh_offset + sh->sh_size > end)
                end = sh->sh_offset + sh->sh_size;
        }
    }
    return end;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static CUresult load_data(CUmodule *module, const void *image)
{
    char path[64];
    struct sim_ctx *c;
    size_t len;
    CUresult r;
    int fd;

    SIM_BEGIN();
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_ctx_current(&c)))
        return r;
    if (!is_elf(image) || !(len = elf_size(image)))
        return CUDA_ERROR_INVALID_IMAGE;
    if ((fd = memfd_create("simcuda-module", MFD_CLOEXEC)) < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    if (write_all(fd, image, len)) {
        close(fd);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    r = load_path(module, path, c);
    close(fd);      /* the loaded mapping keeps the memfd alive */
    return r;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    return load_data(module, image);
}
SIM_EXPORT(cuModuleLoadData);

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                            CUjit_option *options, void **optionValues)
{
    /* JIT options have nothing to act on: modules are already host code. */
    if (numOptions && (!options || !optionValues))
        return CUDA_ERROR_INVALID_VALUE;
    return load_data(module, image);
}
SIM_EXPORT(cuModuleLoadDataEx);

CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return load_data(module, fatCubin);
}
SIM_EXPORT(cuModuleLoadFatBinary);

static CUresult module_get(CUmodule h, struct sim_module **out)
{
    struct sim_module *m = (struct sim_module *)h;

    if (!sim_handle_ok(m, SIM_MAGIC_MODULE))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = m;
    return CUDA_SUCCESS;
}

/* Unlink m from the list and free it with its functions (after the context
 * has no work left that could run its code). */
static void module_free(struct sim_module *m)
{
    pthread_mutex_lock(&mod_lock);
    for (struct sim_module **pp = &modules; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    pthread_mutex_unlock(&mod_lock);
    sim_handle_del(m);
    for (struct sim_func *f = m->funcs, *n; f; f = n) {
        n = f->next;
        sim_handle_del(f);
        free(f);
    }
    dlclose(m->dl);
    free(m);
}

CUresult cuModuleUnload(CUmodule hmod)
{
    struct sim_module *m;
    CUresult r;

    SIM_BEGIN();
    if ((r = module_get(hmod, &m)))
        return r;
    /* Launches still queued would run unmapped code: let them finish. */
    sim_ctx_sync(m->ctx);
    module_free(m);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuModuleUnload);

void sim_modules_release_ctx(struct sim_ctx *c)
{
    for (;;) {
        struct sim_module *m;

        pthread_mutex_lock(&mod_lock);
        for (m = modules; m && m->ctx != c; m = m->next)
            ;
        pthread_mutex_unlock(&mod_lock);
        if (!m)
            return;
        module_free(m);
    }
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    char meta[256];
    struct sim_module *m;
    struct sim_func *f;
    void *sym;
    CUresult r;

    SIM_BEGIN();
    if (!hfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = module_get(hmod, &m)))
        return r;
    pthread_mutex_lock(&mod_lock);
    for (f = m->funcs; f && strcmp(f->name, name); f = f->next)
        ;
    pthread_mutex_unlock(&mod_lock);
    if (f) {
        *hfunc = (CUfunction)f;
        return CUDA_SUCCESS;
    }
    if (!(sym = dlsym(m->dl, name)))
        return CUDA_ERROR_NOT_FOUND;
    if (!(f = calloc(1, sizeof(*f) + strlen(name) + 1)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    f->magic = SIM_MAGIC_FUNC;
    f->mod = m;
    f->fn = (simcuda_kernel_fn)sym;
    strcpy(f->name, name);
    if ((size_t)snprintf(meta, sizeof(meta), "simcuda_params__%s", name) < sizeof(meta))
        f->params = dlsym(m->dl, meta);
    pthread_mutex_lock(&mod_lock);
    f->next = m->funcs;
    m->funcs = f;
    pthread_mutex_unlock(&mod_lock);
    sim_handle_add(f);
    *hfunc = (CUfunction)f;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuModuleGetFunction);

static CUresult func_get(CUfunction h, struct sim_func **out)
{
    struct sim_func *f = (struct sim_func *)h;

    if (!sim_handle_ok(f, SIM_MAGIC_FUNC))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = f;
    return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    struct sim_func *f;
    CUresult r;

    SIM_BEGIN();
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = func_get(hfunc, &f)))
        return r;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = 232448 - 49152; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        *pi = 0;
        break;
    default:
        if ((int)attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX)
            return CUDA_ERROR_INVALID_VALUE;
        *pi = 0;
    }
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuFuncGetAttribute);

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    struct sim_func *f;
    CUresult r;

    SIM_BEGIN();
    (void)value;
    if ((r = func_get(hfunc, &f)))
        return r;
    if ((int)attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuFuncSetAttribute);

CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    struct sim_func *f;

    SIM_BEGIN();
    (void)config;
    return func_get(hfunc, &f);
}
SIM_EXPORT(cuFuncSetCacheConfig);

CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    struct sim_func *f;
    CUresult r;

    SIM_BEGIN();
    /* cuda.h: "If either **name or hfunc is NULL, CUDA_ERROR_INVALID_VALUE" */
    if (!name || !hfunc)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = func_get(hfunc, &f)))
        return r;
    *name = f->name;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuFuncGetName);

CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    struct sim_func *f;
    CUresult r;

    SIM_BEGIN();
    if (!hmod)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = func_get(hfunc, &f)))
        return r;
    *hmod = (CUmodule)f->mod;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuFuncGetModule);

/* Offsets of the packed arguments: each aligned to its own size (max 16). */
static size_t arg_offset(const uint32_t *meta, uint32_t idx, size_t *end)
{
    size_t off = 0;

    for (uint32_t i = 0; i <= idx && i < meta[0]; i++) {
        size_t sz = meta[1 + i], al = sz >= 16 ? 16 : sz >= 8 ? 8 : sz >= 4 ? 4 : sz >= 2 ? 2 : 1;

        off = (off + al - 1) / al * al;
        if (i == idx)
            break;
        off += sz;
    }
    if (end)
        *end = off + (idx < meta[0] ? meta[1 + idx] : 0);
    return off;
}

CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    struct sim_func *f;
    CUresult r;

    SIM_BEGIN();
    if ((r = func_get(func, &f)))
        return r;
    if (!f->params || paramIndex >= f->params[0])
        return CUDA_ERROR_INVALID_VALUE;
    if (paramOffset)
        *paramOffset = arg_offset(f->params, (uint32_t)paramIndex, NULL);
    if (paramSize)
        *paramSize = f->params[1 + paramIndex];
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuFuncGetParamInfo);

/* ---- launch ---------------------------------------------------------------------- */

struct launch_state {
    bool faulted;
};

static void *kernel_dev(const simcuda_kernel_ctx *k, uint64_t ptr, size_t bytes)
{
    struct launch_state *st = k->priv;
    void *v = bytes ? sim_map_view(ptr, bytes) : NULL;

    if (!v)
        st->faulted = true;
    return v;
}

/* Runs on the worker. The map read lock is held for the whole kernel, so the
 * views it gets stay valid until it returns. */
int sim_exec_kernel(struct sim_op *op, struct sim_ctx *c)
{
    struct launch_state st = { false };
    simcuda_kernel_ctx k = {
        .abi = SIMCUDA_KERNEL_ABI,
        .shared_bytes = op->u.kernel.shared,
        .dev = kernel_dev,
        .priv = &st,
    };

    (void)c;
    memcpy(k.grid, op->u.kernel.grid, sizeof(k.grid));
    memcpy(k.block, op->u.kernel.block, sizeof(k.block));
    sim_map_rdlock();
    op->u.kernel.fn(&k, op->u.kernel.params);
    sim_map_unlock();
    return st.faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : 0;
}

/* Copy the argument values: the caller's may be gone when the kernel runs. */
static int copy_params(struct sim_op *op, const uint32_t *meta, void **params)
{
    uint32_t n = meta[0];
    size_t total = 0;
    unsigned char *buf;
    void **v;

    if (n)
        arg_offset(meta, n - 1, &total);
    buf = malloc(n * sizeof(void *) + total + 16);
    if (!buf)
        return -1;
    v = (void **)buf;
    unsigned char *vals = buf + sim_round_up(n * sizeof(void *), 16);
    for (uint32_t i = 0; i < n; i++) {
        v[i] = vals + arg_offset(meta, i, NULL);
        memcpy(v[i], params[i], meta[1 + i]);
    }
    op->u.kernel.argbuf = buf;
    op->u.kernel.params = v;
    return 0;
}

static CUresult check_dims(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                           unsigned bz, unsigned shared)
{
    if (!gx || !gy || !gz || !bx || !by || !bz)
        return CUDA_ERROR_INVALID_VALUE;
    if (gx > 2147483647u || gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64)
        return CUDA_ERROR_INVALID_VALUE;
    if ((uint64_t)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (shared > 232448)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction hf, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned shared, CUstream hs, void **params,
                       void **extra, bool pt)
{
    static bool warned;
    struct sim_func *f;
    struct sim_stream *s;
    struct sim_op *op;
    CUresult r;

    SIM_BEGIN();
    if ((r = func_get(hf, &f)) || (r = sim_stream_get(hs, pt, &s)))
        return r;
    if (f->mod->ctx != s->ctx)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((r = check_dims(gx, gy, gz, bx, by, bz, shared)))
        return r;
    /* Packed arguments (CU_LAUNCH_PARAM_BUFFER_POINTER) are not supported. */
    if (extra && extra[0] != CU_LAUNCH_PARAM_END)
        return params ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
    if (f->params && f->params[0] && !params)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(op = sim_op_new(SIM_OP_KERNEL)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.kernel.fn = f->fn;
    op->u.kernel.grid[0] = gx, op->u.kernel.grid[1] = gy, op->u.kernel.grid[2] = gz;
    op->u.kernel.block[0] = bx, op->u.kernel.block[1] = by, op->u.kernel.block[2] = bz;
    op->u.kernel.shared = shared;
    if (f->params) {
        if (copy_params(op, f->params, params)) {
            sim_op_free(op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return sim_submit(s, op, NULL, 0, NULL);
    }
    /* Without SIMCUDA_KERNEL_PARAMS the argument sizes are unknown, so the
     * caller's values are used in place and the launch waits for the kernel. */
    if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
        sim_log("kernel %s has no SIMCUDA_KERNEL_PARAMS: launches are synchronous", f->name);
    op->u.kernel.params = params;
    r = sim_submit_sync(s, op);
    return r == CUDA_ERROR_ILLEGAL_ADDRESS ? CUDA_SUCCESS : r;   /* the fault is reported later, sticky */
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                  hStream, kernelParams, extra, false);
}
SIM_EXPORT(cuLaunchKernel);

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                  hStream, kernelParams, extra, true);
}
SIM_EXPORT(cuLaunchKernel_ptsz);
