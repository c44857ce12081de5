/* Notes of driver calls a checkpoint cannot restore. Contract in unsupported.h. */
#include "common/clock.h"
#include "unsupported.h"

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

struct slot {
    _Atomic(const char *) call;     /* set last: a slot is valid once call != NULL */
    const char *what;
    uint64_t realtime_ns;
};

static struct slot slots[TCGPU_UNSUPPORTED_KEEP];
static _Atomic uint64_t taken;      /* slots handed out, then only counted */

void tcgpu_note_unsupported(const char *call, const char *what)
{
    uint64_t i = atomic_fetch_add_explicit(&taken, 1, memory_order_relaxed);
    if (i >= TCGPU_UNSUPPORTED_KEEP)
        return;
    slots[i].what = what;
    slots[i].realtime_ns = wall_ns();
    atomic_store_explicit(&slots[i].call, call, memory_order_release);
}

size_t tcgpu_unsupported_list(struct tcgpu_unsupported_note *notes, size_t max)
{
    uint64_t n = atomic_load_explicit(&taken, memory_order_relaxed);
    size_t got = 0;
    for (uint64_t i = 0; i < n && i < TCGPU_UNSUPPORTED_KEEP && got < max; i++) {
        const char *call = atomic_load_explicit(&slots[i].call, memory_order_acquire);
        if (!call)
            continue;          /* being written right now */
        notes[got].call = call;
        notes[got].what = slots[i].what;
        notes[got].realtime_ns = slots[i].realtime_ns;
        got++;
    }
    return got;
}

bool tcgpu_unsupported_first(struct tcgpu_unsupported_note *note)
{
    struct tcgpu_unsupported_note n;
    if (tcgpu_unsupported_list(&n, 1) == 0)
        return false;
    if (note)
        *note = n;
    return true;
}

uint64_t tcgpu_unsupported_count(void)
{
    return atomic_load_explicit(&taken, memory_order_relaxed);
}

void tcgpu_unsupported_format(const struct tcgpu_unsupported_note *note, char *buf, size_t len)
{
    snprintf(buf, len, "%s: %s", note->call, note->what);
}

void tcgpu_unsupported_reset(void)
{
    for (size_t i = 0; i < TCGPU_UNSUPPORTED_KEEP; i++)
        atomic_store_explicit(&slots[i].call, NULL, memory_order_relaxed);
    atomic_store_explicit(&taken, 0, memory_order_release);
}
