/* procaddr_table.h - the tables gen_procaddr.py generates (procaddr_table.c). */
#ifndef SIMCUDA_PROCADDR_TABLE_H
#define SIMCUDA_PROCADDR_TABLE_H

enum { SIM_FLAVOUR_LEGACY = 0, SIM_FLAVOUR_PTDS = 1, SIM_FLAVOUR_PTSZ = 2 };

/* Sorted by symbol (strcmp order), then version, then flavour. */
struct sim_proc_entry {
    const char *symbol;     /* "cuMemAlloc" */
    int version;            /* first CUDA version with this prototype: 3020 */
    int flavour;            /* SIM_FLAVOUR_* */
    const char *abi;        /* exported function: "cuMemAlloc_v2" */
};

struct sim_error_name {
    int code;
    const char *name;
};

extern const unsigned sim_proc_cuda_version;
extern const struct sim_proc_entry sim_proc_table[];
extern const unsigned sim_proc_table_len;
extern const struct sim_error_name sim_error_names[];
extern const unsigned sim_error_names_len;

#endif
