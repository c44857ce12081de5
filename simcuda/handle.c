/*
 * handle.c - the set of live handles.
 *
 * Handles given to the application are pointers to our structures. A real
 * driver answers CUDA_ERROR_INVALID_HANDLE (or INVALID_CONTEXT) for a handle
 * that was destroyed or never existed, rather than crashing; so every handle
 * is checked against this set before it is dereferenced.
 */
#include "sim.h"

#include <stdlib.h>

#define TOMB ((void *)1)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void **slots;
static size_t cap, used;        /* used counts tombstones too */

static size_t hash(const void *p)
{
    uint64_t v = (uint64_t)(uintptr_t)p;

    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdull;
    v ^= v >> 33;
    return (size_t)v;
}

static void **lookup(const void *p)
{
    if (!cap)
        return NULL;
    for (size_t i = hash(p) & (cap - 1), n = 0; n < cap; i = (i + 1) & (cap - 1), n++) {
        if (slots[i] == p)
            return &slots[i];
        if (!slots[i])
            return NULL;
    }
    return NULL;
}

static void put(void **tab, size_t tcap, void *p)
{
    size_t i = hash(p) & (tcap - 1);

    while (tab[i])
        i = (i + 1) & (tcap - 1);
    tab[i] = p;
}

/* Rehash into a table twice the live size; tombstones are dropped. */
static void grow(void)
{
    size_t ncap = cap ? cap * 2 : 64, live = 0;
    void **tab = calloc(ncap, sizeof(*tab));

    if (!tab)
        abort();    /* handles are tiny; out of memory here is hopeless */
    for (size_t i = 0; i < cap; i++)
        if (slots[i] && slots[i] != TOMB) {
            put(tab, ncap, slots[i]);
            live++;
        }
    free(slots);
    slots = tab;
    cap = ncap;
    used = live;
}

void sim_handle_add(void *p)
{
    pthread_mutex_lock(&lock);
    if ((used + 1) * 2 > cap)
        grow();
    put(slots, cap, p);
    used++;
    pthread_mutex_unlock(&lock);
}

void sim_handle_del(void *p)
{
    void **s;

    pthread_mutex_lock(&lock);
    if ((s = lookup(p)))
        *s = TOMB;
    pthread_mutex_unlock(&lock);
}

bool sim_handle_ok(const void *p, uint32_t magic)
{
    bool ok;

    if (!p || p == TOMB)
        return false;
    pthread_mutex_lock(&lock);
    ok = lookup(p) && *(const uint32_t *)p == magic;
    pthread_mutex_unlock(&lock);
    return ok;
}
