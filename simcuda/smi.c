/*
 * simcuda-smi - what nvidia-smi shows, for the simulated devices, with
 * nvidia-smi's options, so that what scripts do with nvidia-smi they can
 * do here (docs/simcuda.md):
 *
 *   simcuda-smi                          the table: GPUs, their memory, the processes
 *   simcuda-smi -q [-i ID]               the verbose report, for people (as nvidia-smi -q)
 *   simcuda-smi -L                       one line per GPU, with its UUID
 *   simcuda-smi --query-gpu=F,... --format=csv[,noheader][,nounits] [-i ID]
 *   simcuda-smi --query-compute-apps=F,... --format=csv[,noheader][,nounits]
 *
 * --query-gpu fields: index, count, name, uuid, driver_version, pci.bus_id,
 * memory.total, memory.reserved, memory.used, memory.free, timestamp.
 * --query-compute-apps fields: pid, process_name, gpu_uuid, gpu_name,
 * gpu_bus_id, used_memory, and, simcuda's own (nvidia-smi has no such
 * field): gpu_index, used_memory_bytes, parked_memory_bytes (held in host
 * memory while checkpointed), checkpoint_state (running, locked,
 * checkpointed, failed: the driver checkpoint API's state), kernel_time_ns
 * (how long its kernels have held the GPU's engine), device_cpu_ns (CPU
 * time simcuda's stream threads spent on its copies, memsets and kernels:
 * the simulated GPU's work, which a real GPU does without the host), nspid (its pid in its
 * own pid namespace; pid is the host's, as the driver's). --query-gpu's own:
 * memory.used_bytes (exact). Sizes are MiB
 * (with " MiB" unless nounits), as nvidia-smi's. An unknown field is an
 * error (exit 2), as there.
 *
 * Processes are shown by host pid, as nvidia-smi does, also for processes in
 * containers (the nspid field is its pid in its own namespace); inside a
 * container, a process of another namespace whose host pid nobody on the host
 * has looked up yet shows pid 0.
 * It reads the shm named by SIMCUDA_SHM (default /simcuda) without attaching
 * to the device; dead processes are reaped first, as any attach would.
 */
#include "sim.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MiB (1ull << 20)

static unsigned long long mib(uint64_t b)
{
    return (unsigned long long)(b / MiB);
}

/* A consistent copy of the machine's state, and what was asked. */
struct smi {
    struct sim_shm s;
    const char *shm_name;
    int only_gpu;               /* -i: -1 for all */
    int noheader, nounits;
};

static void uuid_text(const struct smi *m, int dev, char out[48])
{
    unsigned char u[16];
    int n;

    sim_device_uuid(m->shm_name, dev, u);
    n = sprintf(out, "GPU-");
    for (int i = 0; i < 16; i++)
        n += sprintf(out + n, "%02x%s", u[i], i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
}

static void bus_id(int dev, char out[32])
{
    snprintf(out, 32, "00000000:%02X:00.0", dev + 1);
}

static int gpu_selected(const struct smi *m, int dev)
{
    return m->only_gpu < 0 || m->only_gpu == dev;
}

/* The devices a process shows on: those it holds or parks memory on, else GPU 0 (its context). */
static int process_on(const struct sim_shm_proc *p, int dev, int ndev)
{
    int any = 0;

    for (int d = 0; d < ndev; d++)
        any |= p->used[d] || p->parked[d];
    return p->used[dev] || p->parked[dev] || (!any && dev == 0);
}

static void now_text(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;

    localtime_r(&t, &tm);
    strftime(buf, len, "%a %b %e %H:%M:%S %Y", &tm);
}

/* ---------------------------------------------------------------------------
 * The table (nvidia-smi without options)
 * ------------------------------------------------------------------------- */

#define RULE  "+-----------------------------------------------------------------------------------------+\n"
#define RULE3 "+-----------------------------------------+------------------------+----------------------+\n"

/* "| content |", 91 columns in all, as nvidia-smi's boxes. */
static void boxed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void boxed(const char *fmt, ...)
{
    char line[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    printf("| %-87.87s |\n", line);
}

static void print_table(const struct smi *m)
{
    const struct sim_shm *s = &m->s;
    char when[64], bus[32];
    int shown = 0;

    now_text(when, sizeof(when));
    printf("%s\n" RULE, when);
    boxed("simcuda-smi (simulated GPUs)      Driver Version: simcuda      CUDA Version: %d.%d",
          SIM_DRIVER_VERSION / 1000, SIM_DRIVER_VERSION % 1000 / 10);
    printf(RULE3);
    printf("| GPU  Name                               | Bus-Id                 |         Memory-Usage |\n");
    printf("|=========================================+========================+======================|\n");
    for (int d = 0; d < s->ndev; d++) {
        if (!gpu_selected(m, d))
            continue;
        bus_id(d, bus);
        printf("| %3d  %-34.34s | %-22s | %6lluMiB / %5lluMiB |\n", d, SIM_DEVICE_NAME, bus,
               mib(s->used[d]), mib(s->capacity[d]));
    }
    printf(RULE3 "\n" RULE);
    boxed("Processes:");
    boxed(" GPU        PID  Type  State          Process name                  GPU Memory Usage");
    printf("|=========================================================================================|\n");
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        const struct sim_shm_proc *p = &s->procs[i];
        if (!sim_slot_used(p))
            continue;
        for (int d = 0; d < s->ndev; d++) {
            if (!gpu_selected(m, d) || !process_on(p, d, s->ndev))
                continue;
            boxed(" %3d %10d     C  %-13s  %-28.28s %13lluMiB", d, p->id.hostpid, sim_state_name(p->state),
                  p->comm, mib(p->used[d]));
            shown++;
        }
    }
    if (!shown)
        boxed(" No running processes found");
    printf(RULE);
}

/* ---------------------------------------------------------------------------
 * -q: the verbose report
 * ------------------------------------------------------------------------- */

#define KV(indent, key, fmt, ...) printf("%*s%-*s: " fmt "\n", indent, "", 38 - (indent), key, __VA_ARGS__)

static void print_report(const struct smi *m)
{
    const struct sim_shm *s = &m->s;
    char when[64], uuid[48], bus[32];

    now_text(when, sizeof(when));
    printf("\n==============SIMCUDA-SMI LOG==============\n\n");
    KV(0, "Timestamp", "%s", when);
    KV(0, "Driver Version", "%s", "simcuda (simulated)");
    KV(0, "CUDA Version", "%d.%d", SIM_DRIVER_VERSION / 1000, SIM_DRIVER_VERSION % 1000 / 10);
    printf("\n");
    KV(0, "Attached GPUs", "%d", s->ndev);
    for (int d = 0; d < s->ndev; d++) {
        if (!gpu_selected(m, d))
            continue;
        uuid_text(m, d, uuid);
        bus_id(d, bus);
        printf("GPU %s\n", bus);
        KV(4, "Product Name", "%s", SIM_DEVICE_NAME);
        KV(4, "GPU UUID", "%s", uuid);
        KV(4, "Minor Number", "%d", d);
        printf("    FB Memory Usage\n");
        KV(8, "Total", "%llu MiB", mib(s->capacity[d]));
        KV(8, "Reserved", "%d MiB", 0);
        KV(8, "Used", "%llu MiB", mib(s->used[d]));
        KV(8, "Free", "%llu MiB", mib(s->capacity[d] - s->used[d]));
        printf("    Processes\n");
        for (int i = 0; i < SIM_MAX_PROCS; i++) {
            const struct sim_shm_proc *p = &s->procs[i];
            if (!sim_slot_used(p) || !process_on(p, d, s->ndev))
                continue;
            KV(8, "GPU instance ID", "%s", "N/A");
            KV(8, "Compute instance ID", "%s", "N/A");
            KV(8, "Process ID", "%d", p->id.hostpid);
            KV(12, "Type", "%s", "C");
            KV(12, "Name", "%s", p->comm);
            KV(12, "Used GPU Memory", "%llu MiB", mib(p->used[d]));
            KV(12, "Checkpoint State", "%s (simcuda: the checkpoint API's state)", sim_state_name(p->state));
            if (p->parked[d])
                KV(12, "Parked in Host Memory", "%llu MiB (simcuda)", mib(p->parked[d]));
        }
    }
}

/* ---------------------------------------------------------------------------
 * --query-gpu, --query-compute-apps
 * ------------------------------------------------------------------------- */

enum unit { NONE, MIB };

struct field {
    const char *name;
    const char *header;         /* in the CSV's first line */
    enum unit unit;
};

static const struct field gpu_fields[] = {
    { "index", "index", NONE },
    { "count", "count", NONE },
    { "name", "name", NONE },
    { "uuid", "uuid", NONE },
    { "driver_version", "driver_version", NONE },
    { "pci.bus_id", "pci.bus_id", NONE },
    { "memory.total", "memory.total", MIB },
    { "memory.reserved", "memory.reserved", MIB },
    { "memory.used", "memory.used", MIB },
    { "memory.free", "memory.free", MIB },
    { "timestamp", "timestamp", NONE },
    /* simcuda's own */
    { "memory.used_bytes", "memory.used_bytes", NONE },
    { NULL, NULL, NONE },
};

static const struct field app_fields[] = {
    { "pid", "pid", NONE },
    { "process_name", "process_name", NONE },
    { "gpu_uuid", "gpu_uuid", NONE },
    { "gpu_name", "gpu_name", NONE },
    { "gpu_bus_id", "gpu_bus_id", NONE },
    { "used_memory", "used_gpu_memory", MIB },
    /* simcuda's own */
    { "gpu_index", "gpu_index", NONE },
    { "used_memory_bytes", "used_memory_bytes", NONE },
    { "parked_memory_bytes", "parked_memory_bytes", NONE },
    { "checkpoint_state", "checkpoint_state", NONE },
    { "kernel_time_ns", "kernel_time_ns", NONE },
    { "device_cpu_ns", "device_cpu_ns", NONE },
    { "nspid", "nspid", NONE },
    { NULL, NULL, NONE },
};

#define MAX_FIELDS 32

/* "a,b,c" into the fields of table; -1 (said) for an unknown one. */
static int parse_fields(const char *list, const struct field *table, const struct field **out)
{
    char *copy = strdup(list), *save = NULL;
    int n = 0;

    if (!copy)
        return -1;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const struct field *f = NULL;
        while (*t == ' ')
            t++;
        for (const struct field *c = table; c->name && !f; c++)
            if (!strcmp(c->name, t))
                f = c;
        if (!f) {
            fprintf(stderr, "Field \"%s\" is not a valid field to query.\n", t);
            free(copy);
            return -1;
        }
        if (n == MAX_FIELDS) {
            fprintf(stderr, "At most %d fields, please.\n", MAX_FIELDS);
            free(copy);
            return -1;
        }
        out[n++] = f;
    }
    free(copy);
    if (!n)
        fprintf(stderr, "No field to query.\n");
    return n ? n : -1;
}

static void csv_header(const struct smi *m, const struct field *const *f, int n)
{
    if (m->noheader)
        return;
    for (int i = 0; i < n; i++)
        printf("%s%s%s", i ? ", " : "", f[i]->header, f[i]->unit == MIB && !m->nounits ? " [MiB]" : "");
    printf("\n");
}

/* One value: a size in MiB (with its unit unless nounits), or the text. */
static void csv_value(const struct smi *m, const struct field *f, int first, uint64_t bytes, const char *text)
{
    if (!first)
        printf(", ");
    if (f->unit == MIB)
        printf("%llu%s", mib(bytes), m->nounits ? "" : " MiB");
    else
        printf("%s", text);
}

static void print_gpus(const struct smi *m, const struct field *const *f, int n)
{
    const struct sim_shm *s = &m->s;
    char v[96], when[64];
    time_t t = time(NULL);
    struct tm tm;

    localtime_r(&t, &tm);
    strftime(when, sizeof(when), "%Y/%m/%d %H:%M:%S.000", &tm);
    csv_header(m, f, n);
    for (int d = 0; d < s->ndev; d++) {
        if (!gpu_selected(m, d))
            continue;
        for (int i = 0; i < n; i++) {
            const char *name = f[i]->name;
            uint64_t bytes = 0;
            v[0] = '\0';
            if (!strcmp(name, "index"))
                snprintf(v, sizeof(v), "%d", d);
            else if (!strcmp(name, "count"))
                snprintf(v, sizeof(v), "%d", s->ndev);
            else if (!strcmp(name, "name"))
                snprintf(v, sizeof(v), "%s", SIM_DEVICE_NAME);
            else if (!strcmp(name, "uuid"))
                uuid_text(m, d, v);
            else if (!strcmp(name, "driver_version"))
                snprintf(v, sizeof(v), "simcuda-%d.%d", SIM_DRIVER_VERSION / 1000, SIM_DRIVER_VERSION % 1000 / 10);
            else if (!strcmp(name, "pci.bus_id"))
                bus_id(d, v);
            else if (!strcmp(name, "timestamp"))
                snprintf(v, sizeof(v), "%s", when);
            else if (!strcmp(name, "memory.total"))
                bytes = s->capacity[d];
            else if (!strcmp(name, "memory.used"))
                bytes = s->used[d];
            else if (!strcmp(name, "memory.free"))
                bytes = s->capacity[d] - s->used[d];
            else if (!strcmp(name, "memory.used_bytes"))
                snprintf(v, sizeof(v), "%llu", (unsigned long long)s->used[d]);
            csv_value(m, f[i], i == 0, bytes, v);
        }
        printf("\n");
    }
}

static void print_apps(const struct smi *m, const struct field *const *f, int n)
{
    const struct sim_shm *s = &m->s;
    char v[96];

    csv_header(m, f, n);
    for (int k = 0; k < SIM_MAX_PROCS; k++) {
        const struct sim_shm_proc *p = &s->procs[k];
        if (!sim_slot_used(p))
            continue;
        for (int d = 0; d < s->ndev; d++) {
            if (!gpu_selected(m, d) || !process_on(p, d, s->ndev))
                continue;
            for (int i = 0; i < n; i++) {
                const char *name = f[i]->name;
                v[0] = '\0';
                if (!strcmp(name, "pid"))
                    snprintf(v, sizeof(v), "%d", p->id.hostpid);
                else if (!strcmp(name, "process_name"))
                    snprintf(v, sizeof(v), "%s", p->comm);
                else if (!strcmp(name, "gpu_uuid"))
                    uuid_text(m, d, v);
                else if (!strcmp(name, "gpu_name"))
                    snprintf(v, sizeof(v), "%s", SIM_DEVICE_NAME);
                else if (!strcmp(name, "gpu_bus_id"))
                    bus_id(d, v);
                else if (!strcmp(name, "gpu_index"))
                    snprintf(v, sizeof(v), "%d", d);
                else if (!strcmp(name, "used_memory_bytes"))
                    snprintf(v, sizeof(v), "%llu", (unsigned long long)p->used[d]);
                else if (!strcmp(name, "parked_memory_bytes"))
                    snprintf(v, sizeof(v), "%llu", (unsigned long long)p->parked[d]);
                else if (!strcmp(name, "checkpoint_state"))
                    snprintf(v, sizeof(v), "%s", sim_state_name(p->state));
                else if (!strcmp(name, "nspid"))
                    snprintf(v, sizeof(v), "%d", p->id.nspid);
                else if (!strcmp(name, "kernel_time_ns"))
                    snprintf(v, sizeof(v), "%llu", (unsigned long long)p->kernel_ns[d]);
                else if (!strcmp(name, "device_cpu_ns"))
                    snprintf(v, sizeof(v), "%llu", (unsigned long long)p->device_cpu_ns[d]);
                csv_value(m, f[i], i == 0, p->used[d], v);
            }
            printf("\n");
        }
    }
}

/* ---------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: simcuda-smi [-q] [-i ID] [-L]\n"
               "       simcuda-smi --query-gpu=FIELD,... --format=csv[,noheader][,nounits] [-i ID]\n"
               "       simcuda-smi --query-compute-apps=FIELD,... --format=csv[,noheader][,nounits]\n"
               "\n"
               "nvidia-smi's view of the simulated GPUs of $SIMCUDA_SHM (docs/simcuda.md).\n"
               "  -q, --query          the verbose report\n"
               "  -i, --id=ID          only GPU ID (its index)\n"
               "  -L, --list-gpus      one line per GPU with its UUID\n"
               "  --query-gpu=...      index, count, name, uuid, driver_version, pci.bus_id,\n"
               "                       memory.total, memory.reserved, memory.used, memory.free, timestamp;\n"
               "                       simcuda's own: memory.used_bytes\n"
               "  --query-compute-apps=...  pid, process_name, gpu_uuid, gpu_name, gpu_bus_id,\n"
               "                       used_memory; simcuda's own: gpu_index, used_memory_bytes,\n"
               "                       parked_memory_bytes, checkpoint_state, kernel_time_ns,\n"
               "                       device_cpu_ns, nspid\n"
               "  --format=csv[,noheader][,nounits]   what --query-* print\n");
}

/* --format=csv[,noheader][,nounits]. 0, or -1 (said). */
static int parse_format(struct smi *m, const char *s)
{
    char *copy = strdup(s), *save = NULL;
    int csv = 0, r = 0;

    if (!copy)
        return -1;
    for (char *t = strtok_r(copy, ",", &save); t && !r; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        if (!strcmp(t, "csv"))
            csv = 1;
        else if (!strcmp(t, "noheader"))
            m->noheader = 1;
        else if (!strcmp(t, "nounits"))
            m->nounits = 1;
        else
            r = -1;
    }
    free(copy);
    if (r || !csv) {
        fprintf(stderr, "simcuda-smi: --format: want csv[,noheader][,nounits], not '%s'\n", s);
        return -1;
    }
    return 0;
}

/* A copy of the machine's state, dead processes reaped first. */
static int snapshot(struct smi *m)
{
    struct sim_shm *s;
    int rc = sim_shm_open(&s, &m->shm_name);

    if (rc) {
        fprintf(stderr, "simcuda-smi: cannot open the simulated device state: %s\n", strerror(-rc));
        return -1;
    }
    sim_shm_lock(s);
    sim_shm_reap(s);
    memcpy(&m->s, s, sizeof(m->s));     /* print a consistent snapshot, unlocked */
    sim_shm_unlock(s);
    return 0;
}

int main(int argc, char **argv)
{
    enum { OPT_QUERY_GPU = 1000, OPT_QUERY_APPS, OPT_FORMAT, OPT_VERSION };
    static const struct option longopts[] = {
        { "query", no_argument, NULL, 'q' },
        { "id", required_argument, NULL, 'i' },
        { "list-gpus", no_argument, NULL, 'L' },
        { "query-gpu", required_argument, NULL, OPT_QUERY_GPU },
        { "query-compute-apps", required_argument, NULL, OPT_QUERY_APPS },
        { "format", required_argument, NULL, OPT_FORMAT },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, OPT_VERSION },
        { 0 },
    };
    static struct smi m = { .only_gpu = -1 };
    const struct field *fields[MAX_FIELDS];
    const char *query_gpu = NULL, *query_apps = NULL, *format = NULL;
    int report = 0, list = 0, ch, n;
    char *end;

    while ((ch = getopt_long(argc, argv, "qi:Lh", longopts, NULL)) != -1) {
        switch (ch) {
        case 'q': report = 1; break;
        case 'L': list = 1; break;
        case 'i':
            m.only_gpu = (int)strtol(optarg, &end, 10);
            if (*end || end == optarg || m.only_gpu < 0 || m.only_gpu >= SIM_MAX_DEVICES) {
                fprintf(stderr, "simcuda-smi: -i wants a GPU index, not '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_QUERY_GPU: query_gpu = optarg; break;
        case OPT_QUERY_APPS: query_apps = optarg; break;
        case OPT_FORMAT: format = optarg; break;
        case OPT_VERSION:
            printf("simcuda-smi, simulated driver %d (CUDA %d.%d)\n", SIM_DRIVER_VERSION,
                   SIM_DRIVER_VERSION / 1000, SIM_DRIVER_VERSION % 1000 / 10);
            return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc || (query_gpu && query_apps) || ((query_gpu || query_apps) && (report || list))) {
        usage(stderr);
        return 2;
    }
    if ((query_gpu || query_apps) && !format) {
        fprintf(stderr, "simcuda-smi: --query-gpu and --query-compute-apps need --format=csv[,noheader][,nounits]\n");
        return 2;
    }
    if (format && parse_format(&m, format) < 0)
        return 2;
    n = 0;
    if ((query_gpu || query_apps) &&
        (n = parse_fields(query_gpu ? query_gpu : query_apps, query_gpu ? gpu_fields : app_fields, fields)) < 0)
        return 2;
    if (snapshot(&m) < 0)
        return 1;
    if (m.only_gpu >= m.s.ndev) {
        fprintf(stderr, "simcuda-smi: no GPU %d (there are %d)\n", m.only_gpu, m.s.ndev);
        return 6;               /* nvidia-smi's "not found" */
    }
    if (query_gpu)
        print_gpus(&m, fields, n);
    else if (query_apps)
        print_apps(&m, fields, n);
    else if (list)
        for (int d = 0; d < m.s.ndev; d++) {
            char uuid[48];
            uuid_text(&m, d, uuid);
            printf("GPU %d: %s (UUID: %s)\n", d, SIM_DEVICE_NAME, uuid);
        }
    else if (report)
        print_report(&m);
    else
        print_table(&m);
    return 0;
}
