/*
 * simcuda-smi - what nvidia-smi shows, for the simulated devices.
 *
 *   simcuda-smi        a table: devices (capacity, used, free) and processes
 *   simcuda-smi -q     one line per record, key=value, for scripts:
 *                        device index=0 total=... used=... free=...
 *                        process pid=... device=0 used=... state=running command=... nspid=...
 *
 * Processes are shown by host pid, as nvidia-smi does, also for processes in
 * containers (nspid= is the pid in the process's own namespace); inside a
 * container, a process of another namespace whose host pid nobody on the host
 * has looked up yet shows pid 0.
 * It reads the shm named by SIMCUDA_SHM (default /simcuda) without attaching
 * to the device; dead processes are reaped first, as any attach would.
 */
#include "sim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Capacity and usage for the table: MiB, as nvidia-smi prints them. */
static unsigned long long mib(uint64_t b)
{
    return (unsigned long long)(b >> 20);
}

static void print_table(const struct sim_shm *s)
{
    printf("+-----------------------------------------------------------------------+\n");
    printf("| simcuda-smi (simulated GPU)                      Driver Version: %5d |\n", SIM_DRIVER_VERSION);
    printf("+-----+-----------------------------------------------------------------+\n");
    printf("| GPU |        Total MiB        Used MiB        Free MiB                 |\n");
    for (int d = 0; d < s->ndev; d++)
        printf("| %3d | %16llu %15llu %15llu                 |\n", d, mib(s->capacity[d]),
               mib(s->used[d]), mib(s->capacity[d] - s->used[d]));
    printf("+-----+-----------------------------------------------------------------+\n");
    printf("| Processes:                                                            |\n");
    printf("|  GPU      PID  State          Used MiB  Command                       |\n");
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        const struct sim_shm_proc *p = &s->procs[i];

        if (!sim_slot_used(p))
            continue;
        for (int d = 0; d < s->ndev; d++)
            if (p->used[d] || p->parked[d] || d == 0)
                printf("| %4d %8d  %-13s %9llu  %-29.29s |\n", d, p->id.hostpid, sim_state_name(p->state),
                       mib(p->used[d] + p->parked[d]), p->comm);
    }
    printf("+-----------------------------------------------------------------------+\n");
}

static void print_lines(const struct sim_shm *s)
{
    for (int d = 0; d < s->ndev; d++)
        printf("device index=%d total=%llu used=%llu free=%llu\n", d,
               (unsigned long long)s->capacity[d], (unsigned long long)s->used[d],
               (unsigned long long)(s->capacity[d] - s->used[d]));
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        const struct sim_shm_proc *p = &s->procs[i];

        if (!sim_slot_used(p))
            continue;
        for (int d = 0; d < s->ndev; d++)
            printf("process pid=%d device=%d used=%llu parked=%llu state=%s command=%s nspid=%d\n",
                   p->id.hostpid, d, (unsigned long long)p->used[d], (unsigned long long)p->parked[d],
                   sim_state_name(p->state), p->comm, p->id.nspid);
    }
}

int main(int argc, char **argv)
{
    struct sim_shm *s, copy;
    bool quiet = argc > 1 && !strcmp(argv[1], "-q");
    int rc;

    if (argc > 2 || (argc == 2 && !quiet)) {
        fprintf(stderr, "usage: %s [-q]\n", argv[0]);
        return 2;
    }
    if ((rc = sim_shm_open(&s, NULL))) {
        fprintf(stderr, "simcuda-smi: cannot open the simulated device state: %s\n", strerror(-rc));
        return 1;
    }
    sim_shm_lock(s);
    sim_shm_reap(s);
    memcpy(&copy, s, sizeof(copy));     /* print a consistent snapshot, unlocked */
    sim_shm_unlock(s);
    if (quiet)
        print_lines(&copy);
    else
        print_table(&copy);
    return 0;
}
