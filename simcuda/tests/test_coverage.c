/*
 * test_coverage.c - holds simcuda to docs/simcuda.md's coverage table
 * (codegen/gen_coverage.py generates both the table and coverage_probe.c).
 *
 * 1. Every exported driver function is called once, in a child process of
 *    its own with a current context, with zeroed arguments (pointers point
 *    to zeroed scratch memory, handles are NULL). A function the table
 *    lists as simulated must not answer CUDA_ERROR_NOT_SUPPORTED; one listed
 *    with a fixed answer (SIM_AS_DRIVER, SIM_NOT_SIMULATED) must give it;
 *    none may crash or hang.
 * 2. The table against the library: every name it lists as exported is
 *    there, no other is, and cuGetProcAddress finds exactly the entry points
 *    whose newest version is exported, as that name.
 *
 * usage: simcuda-test-coverage [ABI_NAME...]   (only those, for debugging)
 */
#include "harness.h"
#include "coverage_probe.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>

#define CALL_TIMEOUT_MS 20000     /* generous: sanitizer builds, a loaded machine */

unsigned char scratch[1 << 16] __attribute__((aligned(4096)));

static void *libcuda(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);

    if (!h)
        T_FAIL("libcuda.so.1 is not loaded: %s", dlerror());
    return h;
}

/* In the child: a context, the call, its answer on fd. Never returns. */
static void child(const struct probe_call *c, int fd)
{
    void *fn = dlsym(libcuda(), c->abi);
    CUcontext ctx;
    CUresult r;

    if (!fn || cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx))
        _exit(3);
    r = c->call(fn);
    if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
        _exit(4);
    _exit(0);
}

/* Runs one call; 0 when its answer agrees with the table, else prints why. */
static int probe(const struct probe_call *c)
{
    int fds[2], status = 0, bad = 0;
    struct pollfd p;
    CUresult r = CUDA_SUCCESS;
    ssize_t n = 0;
    pid_t pid;

    if (pipe(fds))
        T_FAIL("pipe: %s", strerror(errno));
    fflush(NULL);
    if ((pid = fork()) < 0)
        T_FAIL("fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        child(c, fds[1]);
    }
    close(fds[1]);
    p.fd = fds[0], p.events = POLLIN;
    if (poll(&p, 1, CALL_TIMEOUT_MS) == 0) {
        kill(pid, SIGKILL);
        printf("FAIL %s: no answer within %d ms\n", c->abi, CALL_TIMEOUT_MS);
        bad = 1;
    } else {
        n = read(fds[0], &r, sizeof(r));
    }
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (bad)
        return 1;
    if (WIFSIGNALED(status)) {
        printf("FAIL %s: the call died of signal %d\n", c->abi, WTERMSIG(status));
        return 1;
    }
    if (n != (ssize_t)sizeof(r)) {
        printf("FAIL %s: the child could not call it (exit %d)\n", c->abi, WEXITSTATUS(status));
        return 1;
    }
    if (c->kind == PROBE_SIMULATED && r == CUDA_ERROR_NOT_SUPPORTED) {
        printf("FAIL %s: answered CUDA_ERROR_NOT_SUPPORTED, but docs/simcuda.md lists it as simulated\n", c->abi);
        return 1;
    }
    if (c->kind == PROBE_FIXED && r != c->want) {
        printf("FAIL %s: answered %s, but docs/simcuda.md says it always answers %s\n", c->abi,
               t_err(r), t_err(c->want));
        return 1;
    }
    return 0;
}

static bool wanted(const char *abi, int argc, char **argv)
{
    if (argc < 2)
        return true;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], abi))
            return true;
    return false;
}

/* The table's claims about what is exported and what cuGetProcAddress finds. */
static int check_exports(void)
{
    void *h = libcuda();
    int bad = 0;

    for (size_t i = 0; i < probe_ncalls; i++)
        if (!dlsym(h, probe_calls[i].abi)) {
            printf("FAIL %s: listed as exported, but the library lacks it\n", probe_calls[i].abi);
            bad++;
        }
    for (size_t i = 0; i < probe_nabsent; i++)
        if (dlsym(h, probe_absent[i])) {
            printf("FAIL %s: exported, but not registered with SIM_EXPORT (the table lists it as absent)\n",
                   probe_absent[i]);
            bad++;
        }
    for (size_t i = 0; i < probe_nsymbols; i++) {
        const struct probe_symbol *s = &probe_symbols[i];
        CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;
        void *fn = NULL;
        CUresult r = cuGetProcAddress_v2(s->symbol, &fn, probe_cuda_version, CU_GET_PROC_ADDRESS_DEFAULT, &q);

        if (s->found && (r != CUDA_SUCCESS || fn != dlsym(h, s->abi))) {
            printf("FAIL %s: listed as simulated, but cuGetProcAddress answers %s (%p, want %s)\n", s->symbol,
                   t_err(r), fn, s->abi);
            bad++;
        } else if (!s->found && (r != CUDA_ERROR_NOT_FOUND || q != CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)) {
            printf("FAIL %s: listed as not simulated, but cuGetProcAddress answers %s (status %d)\n", s->symbol,
                   t_err(r), (int)q);
            bad++;
        }
    }
    return bad;
}

int main(int argc, char **argv)
{
    size_t probed = 0;
    int bad = 0;

    sim_test_setup("coverage");
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < probe_ncalls; i++)
        if (wanted(probe_calls[i].abi, argc, argv)) {
            bad += probe(&probe_calls[i]);
            probed++;
        }
    CHECK(cuInit(0));
    bad += check_exports();
    printf("coverage: %zu exported functions called, %zu absent names and %zu entry points checked: %d failures\n",
           probed, probe_nabsent, probe_nsymbols, bad);
    return bad ? 1 : 0;
}
