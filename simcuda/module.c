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
    struct sim_fattrs attrs;
    struct sim_func *next;
    char name[];
};

struct sim_module {
    uint32_t magic;
    void *dl;
    struct sim_ctx *ctx;
    struct sim_func *funcs;
    void *lib;                   /* a library's module for ctx: the dl handle is the library's */
    char **names;                /* kernels it declares (cuModuleGetFunctionCount) */
    size_t nnames;
    struct sim_module *next;
};

static pthread_mutex_t mod_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_module *modules;

static bool is_elf(const void *p)
{
    return !memcmp(p, ELFMAG, SELFMAG);
}

static void names_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static CUresult module_add(struct sim_ctx *c, void *dl, void *lib, CUmodule *out)
{
    struct sim_module *m = calloc(1, sizeof(*m));

    if (!m) {
        if (!lib)
            dlclose(dl);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->magic = SIM_MAGIC_MODULE;
    m->dl = dl;
    m->ctx = c;
    m->lib = lib;
    pthread_mutex_lock(&mod_lock);
    m->next = modules;
    modules = m;
    pthread_mutex_unlock(&mod_lock);
    sim_handle_add(m);
    *out = (CUmodule)m;
    return CUDA_SUCCESS;
}

CUresult sim_module_add_shared(struct sim_ctx *c, void *dl, void *lib, CUmodule *out)
{
    return module_add(c, dl, lib, out);
}

/* The kernels the image declares, kept on the module (best effort). */
static void module_names(CUmodule mod, const unsigned char *img, size_t len)
{
    struct sim_module *m = (struct sim_module *)mod;

    if (img && sim_elf_kernel_names(img, len, &m->names, &m->nnames)) {
        m->names = NULL;
        m->nnames = 0;
    }
}

#ifndef EM_CUDA
#define EM_CUDA 190
#endif

void sim_load_failed(const char *call, const char *name, const void *image, size_t len)
{
    const Elf64_Ehdr *eh = image;

    if (eh && len >= sizeof(*eh) && eh->e_machine == EM_CUDA)
        sim_log("%s(%s): the image is CUDA device code (a cubin), which simcuda cannot run: "
                "its kernels are shared objects of host functions (simcuda_kernel.h)", call, name);
    else
        sim_log("%s(%s): not a simcuda kernel module (a shared object of host functions, "
                "simcuda_kernel.h): %s", call, name, dlerror());
}

static CUresult load_path(CUmodule *out, const char *path, struct sim_ctx *c,
                          const unsigned char *img, size_t len)
{
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CUresult r;

    if (!dl) {
        sim_load_failed("cuModuleLoad", path, img, len);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    if ((r = module_add(c, dl, NULL, out)) == CUDA_SUCCESS)
        module_names(*out, img, len);
    return r;
}

/* A file's bytes (for the kernel names), or NULL. */
static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rbe");
    unsigned char *buf = NULL;
    long n;

    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
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
    size_t len = 0;
    unsigned char *img = read_file(fname, &len);
    r = load_path(module, fname, c, img, len);
    free(img);
    return r;
}
SIM_EXPORT(cuModuleLoad);

/* Length of an ELF64 image: the furthest byte any header refers to. */
size_t sim_elf_size(const unsigned char *img)
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

CUresult sim_elf_dlopen(const void *image, const char *call, void **dl, size_t *plen)
{
    char path[64];
    size_t len;
    int fd;

    if (!is_elf(image) || !(len = sim_elf_size(image)))
        return CUDA_ERROR_INVALID_IMAGE;
    if ((fd = memfd_create(call, MFD_CLOEXEC)) < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    if (write_all(fd, image, len)) {
        close(fd);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    close(fd);      /* the loaded mapping keeps the memfd alive */
    if (!*dl) {
        sim_load_failed(call, "image in memory", image, len);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    *plen = len;
    return CUDA_SUCCESS;
}

static CUresult load_data(CUmodule *module, const void *image)
{
    struct sim_ctx *c;
    size_t len;
    void *dl;
    CUresult r;

    SIM_BEGIN();
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_ctx_current(&c)) || (r = sim_elf_dlopen(image, "cuModuleLoadData", &dl, &len)))
        return r;
    if ((r = module_add(c, dl, NULL, module)) == CUDA_SUCCESS)
        module_names(*module, image, len);
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
    if (m->lib)
        sim_library_module_gone(m->lib, (CUmodule)m);
    else
        dlclose(m->dl);
    names_free(m->names, m->nnames);
    free(m);
}

void sim_module_unload(CUmodule mod)
{
    struct sim_module *m = (struct sim_module *)mod;

    sim_ctx_sync(m->ctx);
    module_free(m);
}

CUresult cuModuleUnload(CUmodule hmod)
{
    struct sim_module *m;
    CUresult r;

    SIM_BEGIN();
    if ((r = module_get(hmod, &m)))
        return r;
    if (m->lib)
        return CUDA_ERROR_INVALID_HANDLE;    /* a library's module goes with the library */
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

CUresult sim_module_function(CUmodule hmod, const char *name, CUfunction *hfunc)
{
    char meta[256];
    struct sim_module *m;
    struct sim_func *f;
    void *sym;
    CUresult r;

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
    sim_fattrs_init(&f->attrs);
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

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    SIM_BEGIN();
    return sim_module_function(hmod, name, hfunc);
}
SIM_EXPORT(cuModuleGetFunction);

CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
{
    struct sim_module *m;
    CUresult r;

    SIM_BEGIN();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = module_get(mod, &m)))
        return r;
    *count = (unsigned)m->nnames;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuModuleGetFunctionCount);
SIM_PARTIAL(cuModuleGetFunctionCount,
    "counts the kernels declared with SIMCUDA_KERNEL_PARAMS only");

CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions, CUmodule mod)
{
    struct sim_module *m;
    CUresult r;

    SIM_BEGIN();
    if (!functions)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = module_get(mod, &m)))
        return r;
    if (numFunctions < m->nnames)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < m->nnames; i++)
        if ((r = sim_module_function(mod, m->names[i], &functions[i])))
            return r;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuModuleEnumerateFunctions);
SIM_PARTIAL(cuModuleEnumerateFunctions,
    "lists the kernels declared with SIMCUDA_KERNEL_PARAMS only");

/* Modules are loaded whole at once: every function is loaded. */
CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    const char *v = getenv("CUDA_MODULE_LOADING");

    SIM_BEGIN();
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    *mode = v && !strcmp(v, "EAGER") ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuModuleGetLoadingMode);

static CUresult func_get(CUfunction h, struct sim_func **out)
{
    struct sim_func *f = (struct sim_func *)h;

    if (!sim_handle_ok(f, SIM_MAGIC_FUNC))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = f;
    return CUDA_SUCCESS;
}

CUresult sim_func_resolve(CUfunction h, struct sim_ctx *c, struct sim_kfn *out)
{
    struct sim_func *f;

    if (sim_is_kernel(h))
        return sim_kernel_resolve(h, c, out, NULL);
    if (func_get(h, &f))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = (struct sim_kfn){ f->fn, f->params, f->mod->ctx, f->name, &f->attrs };
    return CUDA_SUCCESS;
}

CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
    struct sim_func *f;
    CUresult r;

    SIM_BEGIN();
    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = func_get(function, &f)))
        return r;
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuFuncIsLoaded);

CUresult cuFuncLoad(CUfunction function)
{
    struct sim_func *f;

    SIM_BEGIN();
    return func_get(function, &f);
}
SIM_EXPORT(cuFuncLoad);

/* ---- function attributes ------------------------------------------------------ */

#define MAX_SHARED_OPTIN 232448           /* CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */

void sim_fattrs_init(struct sim_fattrs *a)
{
    memset(a, 0, sizeof(*a));
    a->max_dyn_shared = 49152;            /* beyond 48 KiB needs opting in, as on a GPU */
    a->carveout = -1;                     /* no preference */
}

CUresult sim_fattr_get(const struct sim_fattrs *a, CUfunction_attribute attrib, int *pi)
{
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = SIM_REGS_PER_THREAD; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
        *pi = 0;
        break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = a->max_dyn_shared; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = a->carveout; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *pi = a->cluster_must_be_set; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: *pi = a->req_cluster[0]; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: *pi = a->req_cluster[1]; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *pi = a->req_cluster[2]; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = a->non_portable_cluster; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = a->cluster_policy; break;
    default:
        if ((int)attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX)
            return CUDA_ERROR_INVALID_VALUE;
        *pi = 0;
    }
    return CUDA_SUCCESS;
}

/* Only the attributes the driver lets a program set; the rest are read-only. */
CUresult sim_fattr_set(struct sim_fattrs *a, CUfunction_attribute attrib, int value)
{
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || value > MAX_SHARED_OPTIN)
            return CUDA_ERROR_INVALID_VALUE;
        a->max_dyn_shared = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100)
            return CUDA_ERROR_INVALID_VALUE;
        a->carveout = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
        if (value < 0 || value > 16)
            return CUDA_ERROR_INVALID_VALUE;
        a->req_cluster[attrib - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        if (value != 0 && value != 1)
            return CUDA_ERROR_INVALID_VALUE;
        a->non_portable_cluster = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        if (value < CU_CLUSTER_SCHEDULING_POLICY_DEFAULT || value > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
            return CUDA_ERROR_INVALID_VALUE;
        a->cluster_policy = value;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
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
    return sim_fattr_get(&f->attrs, attrib, pi);
}
SIM_EXPORT(cuFuncGetAttribute);

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    struct sim_func *f;
    CUresult r;

    SIM_BEGIN();
    if ((r = func_get(hfunc, &f)))
        return r;
    return sim_fattr_set(&f->attrs, attrib, value);
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
    struct sim_ctx *ctx;          /* where the kernel runs: its access rights */
    struct sim_pins pins;         /* the ranges it translated */
};

static void *kernel_dev(const simcuda_kernel_ctx *k, uint64_t ptr, size_t bytes)
{
    struct launch_state *st = k->priv;
    void *v = bytes ? sim_pins_view_ctx(&st->pins, st->ctx, ptr, bytes) : NULL;

    if (!v)
        st->faulted = true;
    return v;
}

static void kernel_charge_cpu(const simcuda_kernel_ctx *k, uint64_t cpu_ns)
{
    struct launch_state *st = k->priv;

    if (sim_self && st->ctx)
        __atomic_add_fetch(&sim_self->device_cpu_ns[sim_device_phys(st->ctx->dev)], cpu_ns,
                           __ATOMIC_RELAXED);
}

/* Runs on the worker. Each range the kernel translates stays pinned until
 * it returns, so the views it gets stay valid (a free of the memory meanwhile
 * unmaps it afterwards); the map lock is held only while translating, so a
 * kernel that runs long (one waiting for a peer) blocks no allocation, free
 * or mapping of the process, as on a GPU. */
int sim_exec_kernel(struct sim_op *op, struct sim_ctx *c)
{
    struct launch_state st = { .faulted = false, .ctx = op->u.kernel.ctx ? op->u.kernel.ctx : c };
    simcuda_kernel_ctx k = {
        .abi = SIMCUDA_KERNEL_ABI,
        .shared_bytes = op->u.kernel.shared,
        .dev = kernel_dev,
        .priv = &st,
        .charge_cpu = kernel_charge_cpu,
    };

    memcpy(k.grid, op->u.kernel.grid, sizeof(k.grid));
    memcpy(k.block, op->u.kernel.block, sizeof(k.block));
    sim_pins_init(&st.pins);
    sim_engine_acquire(c->dev);         /* its process's turn on the device (engine.c) */
    op->u.kernel.fn(&k, op->u.kernel.params);
    sim_engine_release(c->dev);
    sim_pins_release(&st.pins);
    if (!st.faulted)
        return 0;
    sim_coredump_on_fault(c, CUDA_ERROR_ILLEGAL_ADDRESS, op->u.kernel.name);
    return CUDA_ERROR_ILLEGAL_ADDRESS;
}

int sim_args_copy(const uint32_t *meta, void **params, void **argbuf, void ***pv)
{
    uint32_t n = meta ? meta[0] : 0;
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
    *argbuf = buf;
    *pv = v;
    return 0;
}

CUresult sim_check_dims(const unsigned grid[3], const unsigned block[3], unsigned shared)
{
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2])
        return CUDA_ERROR_INVALID_VALUE;
    if (grid[0] > 2147483647u || grid[1] > 65535 || grid[2] > 65535 || block[0] > 1024 ||
        block[1] > 1024 || block[2] > 64)
        return CUDA_ERROR_INVALID_VALUE;
    if ((uint64_t)block[0] * block[1] * block[2] > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (shared > 232448)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult sim_kernel_op_fill(struct sim_op *op, CUfunction h, const struct sim_kfn *k,
                            const unsigned grid[3], const unsigned block[3], unsigned shared,
                            void **params)
{
    op->u.kernel.fn = k->fn;
    op->u.kernel.func = h;
    op->u.kernel.meta = k->meta;
    op->u.kernel.ctx = k->ctx;
    op->u.kernel.name = k->name;
    memcpy(op->u.kernel.grid, grid, sizeof(op->u.kernel.grid));
    memcpy(op->u.kernel.block, block, sizeof(op->u.kernel.block));
    op->u.kernel.shared = shared;
    if (!k->meta) {
        op->u.kernel.params = params;      /* used in place: the launch waits */
        return CUDA_SUCCESS;
    }
    if (sim_args_copy(k->meta, params, &op->u.kernel.argbuf, &op->u.kernel.params))
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

CUresult sim_launch_prepare(CUfunction hf, struct sim_stream *s, const unsigned grid[3],
                            const unsigned block[3], unsigned shared, void **params, void **extra,
                            struct sim_op **out)
{
    struct sim_kfn k;
    struct sim_op *op;
    CUresult r;

    if (!hf)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((r = sim_func_resolve(hf, s->ctx, &k)))
        return r;
    if (k.ctx != s->ctx)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((r = sim_check_dims(grid, block, shared)))
        return r;
    if (k.attrs && shared > (unsigned)k.attrs->max_dyn_shared)
        return CUDA_ERROR_INVALID_VALUE;    /* more than the function opted in to */
    /* Packed arguments (CU_LAUNCH_PARAM_BUFFER_POINTER) are not supported. */
    if (extra && extra[0] != CU_LAUNCH_PARAM_END)
        return params ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
    if (k.meta && k.meta[0] && !params)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(op = sim_op_new(SIM_OP_KERNEL)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = sim_kernel_op_fill(op, hf, &k, grid, block, shared, params))) {
        sim_op_free(op);
        return r;
    }
    *out = op;
    return CUDA_SUCCESS;
}

CUresult sim_launch_submit(struct sim_stream *s, struct sim_op *op)
{
    static bool warned;
    CUresult r;

    if (op->u.kernel.meta)
        return sim_submit(s, op, NULL, 0, NULL);
    if (sim_capture_pending(s)) {
        /* A graph must own the argument values, and their sizes are unknown. */
        sim_log("kernel %s has no SIMCUDA_KERNEL_PARAMS: it cannot be captured", op->u.kernel.name);
        op->kind = SIM_OP_NOP;
        r = sim_capture_op(s, op);           /* invalidates the capture */
        return r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED ? CUDA_ERROR_NOT_SUPPORTED : r;
    }
    /* Without SIMCUDA_KERNEL_PARAMS the argument sizes are unknown, so the
     * caller's values are used in place and the launch waits for the kernel. */
    if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
        sim_log("kernel %s has no SIMCUDA_KERNEL_PARAMS: launches are synchronous", op->u.kernel.name);
    r = sim_submit_sync(s, op);
    return r == CUDA_ERROR_ILLEGAL_ADDRESS ? CUDA_SUCCESS : r;   /* the fault is reported later, sticky */
}

static CUresult launch(CUfunction hf, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned shared, CUstream hs, void **params,
                       void **extra, bool pt)
{
    const unsigned grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };
    struct sim_stream *s;
    struct sim_op *op;
    CUresult r;

    SIM_BEGIN();
    if ((r = sim_stream_get(hs, pt, &s)) ||
        (r = sim_launch_prepare(hf, s, grid, block, shared, params, extra, &op)))
        return r;
    return sim_launch_submit(s, op);
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                  hStream, kernelParams, extra, false);
}
SIM_EXPORT(cuLaunchKernel);
SIM_PARTIAL(cuLaunchKernel,
    "packed arguments (extra): CUDA_ERROR_NOT_SUPPORTED; a kernel without "
    "SIMCUDA_KERNEL_PARAMS runs synchronously and cannot be captured "
    "(CUDA_ERROR_NOT_SUPPORTED)");

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                  hStream, kernelParams, extra, true);
}
SIM_EXPORT(cuLaunchKernel_ptsz);
SIM_PARTIAL(cuLaunchKernel_ptsz,
    "packed arguments (extra): CUDA_ERROR_NOT_SUPPORTED; a kernel without "
    "SIMCUDA_KERNEL_PARAMS runs synchronously and cannot be captured "
    "(CUDA_ERROR_NOT_SUPPORTED)");
