/*
 * dlsym.c - the dlsym override: dlsym(handle, "cuFoo") hands out our
 * wrapper of cuFoo whenever the real lookup finds cuFoo (any handle: a
 * libcuda handle, RTLD_DEFAULT, RTLD_NEXT) and we have a wrapper of that ABI
 * name. Everything else is glibc's own answer.
 *
 * On x86-64 the exported dlsym is a few instructions of assembly:
 * they ask tcgpu_dlsym_hook() first and otherwise *jump* to glibc's function
 * with the caller's return address still in place, so that glibc sees the
 * real caller. That matters for RTLD_NEXT (relative to the caller's object)
 * and keeps other interposers that look up their "next" symbol working.
 * Callers inside libtcgpu itself and inside the real driver always get the
 * real answer. dlvsym is not overridden: we need glibc's to find glibc's
 * dlsym (a versioned lookup, which our unversioned dlsym never matches), and
 * nobody asks libcuda's unversioned symbols for a version. See
 * docs/interposition.md.
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "driver/driver.h"
#include "wrappers.h"

/* Hidden: called only from the trampoline below, never exported. */
__attribute__((visibility("hidden"))) void *tcgpu_dlsym_hook(void *handle, const char *name,
                                                           const void *caller);

#define MAX_SELF 8
static struct {
    uintptr_t lo, hi;
} self[MAX_SELF];
static unsigned nself;
static pthread_once_t self_once = PTHREAD_ONCE_INIT;

static int find_self_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    uintptr_t me = (uintptr_t)arg;
    bool mine = false;
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && me >= lo && me < lo + ph->p_memsz)
            mine = true;
    }
    if (!mine)
        return 0;
    for (int i = 0; i < info->dlpi_phnum && nself < MAX_SELF; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            self[nself].lo = info->dlpi_addr + ph->p_vaddr;
            self[nself].hi = self[nself].lo + ph->p_memsz;
            nself++;
        }
    }
    return 1;
}

static void find_self(void)
{
    dl_iterate_phdr(find_self_cb, (void *)(uintptr_t)&find_self);
}

__attribute__((constructor)) static void dlsym_init(void)
{
    pthread_once(&self_once, find_self);
}

/* Whether a call from `caller` must see the real driver: from our own code
 * or from the real driver's. */
static bool caller_is_inside(const void *caller)
{
    uintptr_t a = (uintptr_t)caller;
    pthread_once(&self_once, find_self);
    for (unsigned i = 0; i < nself; i++)
        if (a >= self[i].lo && a < self[i].hi)
            return true;
    return tcgpu_driver_owns_address(caller);
}

/* Our wrapper for `name` if we are to hand it out, else NULL (glibc answers). */
static int wrapped_index(const char *name, const void *caller)
{
    if (!name || name[0] != 'c' || name[1] != 'u')
        return -1;
    int fn = tcgpu_driver_index(name);
    if (fn < 0 || caller_is_inside(caller))
        return -1;
    return fn;
}

/* Runs for every dlsym in the process, sanitizer start-up included: nothing
 * instrumented before we know the name is one of ours. */
TCGPU_NO_SANITIZE __attribute__((used)) void *tcgpu_dlsym_hook(void *handle, const char *name,
                                                               const void *caller)
{
    tcgpu_real_dlsym_init();       /* the trampoline jumps through the pointer */
    if (!name || name[0] != 'c' || name[1] != 'u')
        return NULL;
    int fn = wrapped_index(name, caller);
    if (fn < 0 || !tcgpu_real_dlsym(handle, name))
        return NULL;
    return tcgpu_wrappers[fn];
}

#if defined(__x86_64__)
#if defined(__CET__)
#define ENDBR "endbr64\n"
#else
#define ENDBR ""
#endif
__asm__(
    ".text\n"
    ".globl dlsym\n"
    ".type dlsym, @function\n"
    ".p2align 4\n"
    "dlsym:\n"
    ".cfi_startproc\n"
    ENDBR
    "pushq %rdi\n.cfi_adjust_cfa_offset 8\n"
    "pushq %rsi\n.cfi_adjust_cfa_offset 8\n"
    "subq $8, %rsp\n.cfi_adjust_cfa_offset 8\n"
    "movq 24(%rsp), %rdx\n"                  /* the caller's return address */
    "call tcgpu_dlsym_hook\n"
    "addq $8, %rsp\n.cfi_adjust_cfa_offset -8\n"
    "popq %rsi\n.cfi_adjust_cfa_offset -8\n"
    "popq %rdi\n.cfi_adjust_cfa_offset -8\n"
    "testq %rax, %rax\n"
    "jnz 1f\n"
    "jmp *tcgpu_libc_dlsym_ptr(%rip)\n"      /* tail call: glibc sees our caller */
    "1: ret\n"
    ".cfi_endproc\n"
    ".size dlsym, .-dlsym\n");
#else
/* Portable fallback: correct for the cu* names; for other names with
 * RTLD_NEXT, glibc sees libtcgpu as the caller (its "next" starts after us). */
__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
    void *w = tcgpu_dlsym_hook(handle, name, __builtin_return_address(0));
    return w ? w : tcgpu_real_dlsym(handle, name);
}

#endif
