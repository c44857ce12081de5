/* What stops a checkpoint now. Contract in blockers.h. */
#include "blockers.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/units.h"
#include "ctl/proto.h"
#include "driver/driver.h"
#include "driver/unsupported.h"

/* tcgpu_unsupported_given_to(TCGPU_HELD_BY_GRAPH) when the driver last said
 * that no graph memory is allocated: graphs with memory nodes made since are
 * what may have left some. */
static _Atomic uint64_t graph_notes_settled;

/*
 * Bytes of graph memory the driver has allocated now, on every device; -1
 * when it cannot say. The driver counts memory a graph freed as used until
 * cuDeviceGraphMemTrim gives it back, so trim first: no graph that could
 * use the cache is left (the caller checks), and freed memory is no state.
 */
static int64_t driver_graph_memory(void)
{
    int64_t sum = 0;
    int n = 0;

    if (TCGPU_REAL(cuDeviceGetCount)(&n) != CUDA_SUCCESS)
        return -1;
    for (int i = 0; i < n; i++) {
        cuuint64_t used = 0;
        CUdevice d;

        if (TCGPU_REAL(cuDeviceGet)(&d, i) != CUDA_SUCCESS)
            return -1;
        TCGPU_REAL(cuDeviceGraphMemTrim)(d);
        if (TCGPU_REAL(cuDeviceGetGraphMemAttribute)(d, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS)
            return -1;
        sum += (int64_t)used;
    }
    return sum;
}

/* Graph memory that graphs with memory nodes of the driver's, all gone now,
 * left allocated: its bytes (-1: the driver cannot say), 0 when none. While
 * such graphs live, their own notes block. */
static int64_t graph_memory_left(void)
{
    uint64_t given = tcgpu_unsupported_given_to(TCGPU_HELD_BY_GRAPH);
    int64_t left;

    if (given == atomic_load(&graph_notes_settled) || tcgpu_unsupported_any_held_by(TCGPU_HELD_BY_GRAPH) ||
        tcgpu_unsupported_any_held_by(TCGPU_HELD_BY_GRAPH_EXEC))
        return 0;
    left = driver_graph_memory();
    if (left == 0)
        atomic_store(&graph_notes_settled, given);
    return left;
}

static void format_graph_memory(int64_t left, char *buf, size_t len)
{
    char b[32];

    if (left < 0)
        snprintf(buf, len, "cuGraphAddMemAllocNode: the graphs with memory nodes of the driver's were "
                           "destroyed, and the driver cannot say whether their memory is still allocated");
    else
        snprintf(buf, len, "cuGraphAddMemAllocNode: %s of graph memory is still allocated after its graphs "
                           "were destroyed (the driver's, which a checkpoint cannot restore): the program "
                           "frees it with cuMemFree or cuMemFreeAsync",
                 units_format_bytes((uint64_t)left, b, sizeof(b)));
}

static void format_note(const struct tcgpu_unsupported_note *n, char *buf, size_t len)
{
    if (n->held_by == TCGPU_HELD_BY_PROCESS)
        snprintf(buf, len, "%s: %s (for the process's life)", n->call, n->what);
    else if (n->held_by == TCGPU_HELD_BY_IPC_IMPORTER)
        snprintf(buf, len, "%s: %s: process %llu maps it (until it closes the memory or exits)",
                 n->call, n->what, (unsigned long long)n->object);
    else if (n->held_by == TCGPU_HELD_BY_IPC_EXPORTER)
        snprintf(buf, len, "%s: %s: process %llu exported it (until the program closes it)",
                 n->call, n->what, (unsigned long long)n->object);
    else
        snprintf(buf, len, "%s: %s (until the program %s %s 0x%llx)", n->call, n->what,
                 n->held_by == TCGPU_HELD_BY_IPC_MEMORY ? "closes" : "destroys",
                 tcgpu_holder_name(n->held_by), (unsigned long long)n->object);
}

static bool is_ipc_note(const struct tcgpu_unsupported_note *n)
{
    return n->held_by == TCGPU_HELD_BY_IPC_IMPORTER || n->held_by == TCGPU_HELD_BY_IPC_EXPORTER;
}

/* The first note in force, IPC ones passed over when skip_ipc: true with
 * *note, else false. A list that cannot be copied (no memory) answers with
 * its first note, whatever it is: a refusal too many, never a suspend too
 * many. */
static bool first_note(struct tcgpu_unsupported_note *note, bool skip_ipc)
{
    struct tcgpu_unsupported_note *v;
    size_t n = tcgpu_unsupported_list(note, 1), got;
    bool found = false;

    if (n == 0 || !skip_ipc || !is_ipc_note(note))
        return n != 0;
    if (!(v = calloc(n, sizeof(*v))))
        return true;
    got = tcgpu_unsupported_list(v, n);    /* notes may have come or gone meanwhile */
    for (size_t i = 0; i < got && i < n && !found; i++)
        if (!is_ipc_note(&v[i])) {
            *note = v[i];
            found = true;
        }
    free(v);
    return found;
}

static bool first_blocker(char *why, size_t len, bool skip_ipc)
{
    struct tcgpu_unsupported_note note;
    int64_t left;

    if (first_note(&note, skip_ipc)) {
        format_note(&note, why, len);
        return true;
    }
    if ((left = graph_memory_left()) != 0) {
        format_graph_memory(left, why, len);
        return true;
    }
    return false;
}

bool blockers_first(char *why, size_t len)
{
    return first_blocker(why, len, false);
}

bool blockers_first_suspend(char *why, size_t len)
{
    return first_blocker(why, len, true);
}

static void put_since(struct ctl_buf *b, uint64_t realtime_ns)
{
    time_t t = (time_t)(realtime_ns / 1000000000u);
    char at[32];
    struct tm tm;

    if (!gmtime_r(&t, &tm) || !strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm))
        return;
    ctl_buf_put(b, "blocker_since", at);
}

void blockers_put(struct ctl_buf *b)
{
    struct tcgpu_unsupported_note note;
    size_t n = tcgpu_unsupported_list(&note, 1);
    int64_t left = graph_memory_left();
    char why[512];

    ctl_buf_put_u64(b, "blockers", (uint64_t)n + (left != 0));
    if (n) {
        format_note(&note, why, sizeof(why));
        ctl_buf_put(b, "blocker", why);
        ctl_buf_put(b, "blocker_call", note.call);
        put_since(b, note.realtime_ns);
        if (note.site[0])
            ctl_buf_put(b, "blocker_site", note.site);
    } else if (left) {
        format_graph_memory(left, why, sizeof(why));
        ctl_buf_put(b, "blocker", why);
        ctl_buf_put(b, "blocker_call", "cuGraphAddMemAllocNode");
    }
}
