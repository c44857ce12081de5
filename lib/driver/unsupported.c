/* Notes of driver state a checkpoint cannot restore. Contract in unsupported.h. */
#include "common/clock.h"
#include "common/frames.h"
#include "unsupported.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SITE_FRAMES 3

/* Notes in force, oldest first (a release keeps the order); `held[k]`
 * counts those held by objects of kind k, read without the lock so that a
 * release of an object of a kind nobody noted costs one atomic load. */
static struct {
    pthread_mutex_t lock;
    struct tcgpu_unsupported_note *v;
    size_t n, cap;
    int for_life;                       /* a note that could not be kept as held */
    _Atomic size_t held[TCGPU_HOLDER_KINDS];
    _Atomic uint64_t given[TCGPU_HOLDER_KINDS];
} notes = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The note kept when memory runs out: for the process's life, by design. */
static const struct tcgpu_unsupported_note no_memory_note = {
    .call = "tcgpu", .what = "out of host memory noting driver state that cannot be checkpointed",
};

static struct tcgpu_unsupported_note *find(enum tcgpu_holder kind, uint64_t object)
{
    for (size_t i = 0; i < notes.n; i++)
        if (notes.v[i].held_by == kind && notes.v[i].object == object)
            return &notes.v[i];
    return NULL;
}

/* Appends *note under the lock; 0, or -1 without memory. */
static int append(const struct tcgpu_unsupported_note *note)
{
    if (notes.n == notes.cap) {
        size_t cap = notes.cap ? 2 * notes.cap : 8;
        struct tcgpu_unsupported_note *v = realloc(notes.v, cap * sizeof(*v));
        if (!v)
            return -1;
        notes.v = v;
        notes.cap = cap;
    }
    notes.v[notes.n++] = *note;
    atomic_fetch_add_explicit(&notes.held[note->held_by], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&notes.given[note->held_by], 1, memory_order_relaxed);
    return 0;
}

void tcgpu_note_unsupported_held(const char *call, const char *what, enum tcgpu_holder kind, uint64_t object)
{
    struct tcgpu_unsupported_note note = {
        .call = call, .what = what, .held_by = kind, .object = object, .realtime_ns = wall_ns(),
    };

    if ((unsigned)kind >= TCGPU_HOLDER_KINDS || kind == TCGPU_HELD_BY_PROCESS) {
        note.held_by = TCGPU_HELD_BY_PROCESS;
        note.object = 0;
    }
    tcgpu_frames_caller(note.site, sizeof(note.site), SITE_FRAMES);
    pthread_mutex_lock(&notes.lock);
    if ((note.held_by == TCGPU_HELD_BY_PROCESS || !find(note.held_by, note.object)) && append(&note) < 0)
        notes.for_life = 1;
    pthread_mutex_unlock(&notes.lock);
}

void tcgpu_note_unsupported(const char *call, const char *what)
{
    tcgpu_note_unsupported_held(call, what, TCGPU_HELD_BY_PROCESS, 0);
}

void tcgpu_unsupported_release(enum tcgpu_holder kind, uint64_t object)
{
    size_t kept = 0;

    if ((unsigned)kind >= TCGPU_HOLDER_KINDS || kind == TCGPU_HELD_BY_PROCESS ||
        !atomic_load_explicit(&notes.held[kind], memory_order_relaxed))
        return;
    pthread_mutex_lock(&notes.lock);
    for (size_t i = 0; i < notes.n; i++) {
        if (notes.v[i].held_by == kind && notes.v[i].object == object) {
            atomic_fetch_sub_explicit(&notes.held[kind], 1, memory_order_relaxed);
            continue;
        }
        notes.v[kept++] = notes.v[i];
    }
    notes.n = kept;
    pthread_mutex_unlock(&notes.lock);
}

void tcgpu_unsupported_inherit(enum tcgpu_holder from_kind, uint64_t from, enum tcgpu_holder to_kind, uint64_t to)
{
    struct tcgpu_unsupported_note note;

    if ((unsigned)from_kind >= TCGPU_HOLDER_KINDS || (unsigned)to_kind >= TCGPU_HOLDER_KINDS ||
        from_kind == TCGPU_HELD_BY_PROCESS || to_kind == TCGPU_HELD_BY_PROCESS ||
        !atomic_load_explicit(&notes.held[from_kind], memory_order_relaxed))
        return;
    pthread_mutex_lock(&notes.lock);
    struct tcgpu_unsupported_note *src = find(from_kind, from);
    if (src && !find(to_kind, to)) {
        note = *src;                    /* the call, its reason, time and site */
        note.held_by = to_kind;
        note.object = to;
        if (append(&note) < 0)
            notes.for_life = 1;
    }
    pthread_mutex_unlock(&notes.lock);
}

bool tcgpu_unsupported_any_held_by(enum tcgpu_holder kind)
{
    return (unsigned)kind < TCGPU_HOLDER_KINDS && kind != TCGPU_HELD_BY_PROCESS &&
           atomic_load_explicit(&notes.held[kind], memory_order_relaxed) > 0;
}

uint64_t tcgpu_unsupported_given_to(enum tcgpu_holder kind)
{
    return (unsigned)kind < TCGPU_HOLDER_KINDS ? atomic_load_explicit(&notes.given[kind], memory_order_relaxed) : 0;
}

size_t tcgpu_unsupported_list(struct tcgpu_unsupported_note *out, size_t max)
{
    size_t total, got = 0;

    pthread_mutex_lock(&notes.lock);
    total = notes.n + (size_t)notes.for_life;
    if (notes.for_life && got < max)
        out[got++] = no_memory_note;
    for (size_t i = 0; i < notes.n && got < max; i++)
        out[got++] = notes.v[i];
    pthread_mutex_unlock(&notes.lock);
    return total;
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

void tcgpu_unsupported_format(const struct tcgpu_unsupported_note *note, char *buf, size_t len)
{
    snprintf(buf, len, "%s: %s", note->call, note->what);
}

const char *tcgpu_holder_name(enum tcgpu_holder kind)
{
    static const char *const names[TCGPU_HOLDER_KINDS] = {
        [TCGPU_HELD_BY_PROCESS] = "process",
        [TCGPU_HELD_BY_EVENT] = "event",
        [TCGPU_HELD_BY_IPC_MEMORY] = "IPC memory",
        [TCGPU_HELD_BY_GRAPH] = "graph",
        [TCGPU_HELD_BY_GRAPH_EXEC] = "executable graph",
        [TCGPU_HELD_BY_EXTERNAL_MEMORY] = "external memory",
        [TCGPU_HELD_BY_EXTERNAL_SEMAPHORE] = "external semaphore",
        [TCGPU_HELD_BY_ARRAY] = "array",
        [TCGPU_HELD_BY_MIPMAPPED_ARRAY] = "mipmapped array",
        [TCGPU_HELD_BY_TEXTURE] = "texture object",
        [TCGPU_HELD_BY_SURFACE] = "surface object",
        [TCGPU_HELD_BY_IPC_IMPORTER] = "process",
        [TCGPU_HELD_BY_IPC_EXPORTER] = "process",
    };

    return (unsigned)kind < TCGPU_HOLDER_KINDS ? names[kind] : "?";
}

void tcgpu_unsupported_reset(void)
{
    pthread_mutex_lock(&notes.lock);
    notes.n = 0;
    notes.for_life = 0;
    for (size_t k = 0; k < TCGPU_HOLDER_KINDS; k++)
        atomic_store_explicit(&notes.held[k], 0, memory_order_relaxed);
    pthread_mutex_unlock(&notes.lock);
}
