/*
 * test_procaddr_replay.c - replay what libcudart asks the driver at start-up
 * (tests/data/cudart13-driver-requests.txt) and print one line per request:
 *
 *   SYMBOL VERSION FLAGS -> RC STATUS ABI LIB
 *
 * ABI and LIB: the exported name and the file of the returned function
 * (dladdr), "-" when none. test_procaddr_replay.py runs this with and
 * without LD_PRELOAD=libtcgpu.so and compares.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s REQUESTS\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen(libcuda.so.1): %s\n", dlerror());
        return 2;
    }
    gpa_fn gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        fprintf(stderr, "no cuGetProcAddress_v2\n");
        return 2;
    }
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#' || strncmp(line, "cuGetProcAddress_v2 ", 20) != 0)
            continue;
        /* "cuGetProcAddress_v2 SYMBOL ver=V flags=F"; SYMBOL may be empty */
        char symbol[256] = "";
        const char *p = line + 20;
        const char *ver = strstr(p, "ver=");
        if (!ver)
            continue;
        size_t len = (size_t)(ver - p);
        while (len && p[len - 1] == ' ')
            len--;
        if (len >= sizeof(symbol))
            len = sizeof(symbol) - 1;
        memcpy(symbol, p, len);
        symbol[len] = 0;
        int version = atoi(ver + 4);
        const char *fl = strstr(ver, "flags=");
        unsigned long long flags = fl ? strtoull(fl + 6, NULL, 0) : 0;

        void *fn = NULL;
        CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
        CUresult rc = gpa(symbol, &fn, version, flags, &st);
        const char *abi = "-", *lib = "-";
        Dl_info info;
        if (fn && dladdr(fn, &info)) {
            abi = info.dli_sname && info.dli_saddr == fn ? info.dli_sname : "?";
            lib = info.dli_fname ? (strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1
                                                                   : info.dli_fname) : "?";
        }
        printf("%s %d %llu -> %d %d %s %s\n", symbol[0] ? symbol : "\"\"", version, flags, rc,
               (int)st, abi, lib);
    }
    fclose(f);
    return 0;
}
