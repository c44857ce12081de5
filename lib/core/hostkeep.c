/*
 * hostkeep.c - host memory kept between operations, within a budget,
 * released under memory pressure; see hostkeep.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/units.h"
#include "driver/gate.h"
#include "engine/pipeline.h"
#include "hostkeep.h"
#include "settings.h"
#include "thread.h"

#define DEFAULT_POLL_MS 250u
#define MIN_FREE_FLOOR (256ull << 20)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static struct pipe_store *kept_store;     /* guarded by mu */
static struct pipe *kept_pipe;
static pid_t owner;                       /* the process the kept objects belong to */
static int monitor_running;

/* MemTotal or MemAvailable of /proc/meminfo in bytes; 0 when unknown. */
static uint64_t meminfo(const char *key)
{
    char line[256];
    size_t klen = strlen(key);
    uint64_t kb = 0;
    FILE *f = fopen("/proc/meminfo", "re");

    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, key, klen) && line[klen] == ':') {
            kb = strtoull(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb << 10;
}

/* The size setting `name` says (its value v), or `dflt` when v is empty or
 * malformed. */
static uint64_t size_setting(const char *name, const char *v, uint64_t dflt)
{
    uint64_t b;

    if (!*v)
        return dflt;
    if (units_parse_size(v, &b) != 0) {
        log_info("%s=%s is not a size; using the default", name, v);
        return dflt;
    }
    return b;
}

static uint64_t budget(void)
{
    return size_setting("TCGPU_HOST_KEEP", settings_get()->host_keep, meminfo("MemTotal") / 2);
}

static uint64_t min_free(void)
{
    uint64_t d = meminfo("MemTotal") / 20;

    return size_setting("TCGPU_HOST_KEEP_MIN_FREE", settings_get()->host_keep_min_free,
                        d > MIN_FREE_FLOOR ? d : MIN_FREE_FLOOR);
}

/* Whether the machine is short of memory now (MemAvailable unknown: no). */
static int memory_short(uint64_t *avail, uint64_t *floor)
{
    *avail = meminfo("MemAvailable");
    *floor = min_free();
    return *avail && *avail < *floor;
}

/*
 * Whether memory is getting short: less than twice the floor available.
 * From there a burst may cross the floor within a poll, so the kept pages
 * are handed to the kernel (pipe_store_make_reclaimable) to take at once if
 * it needs them; above it they stay plain, and the next suspend writes them
 * at a memcpy's speed.
 */
static int memory_tight(uint64_t avail, uint64_t floor)
{
    return avail && avail / 2 < floor;
}

/* Marks the kept store reclaimable when memory is tight; mu held. */
static void reclaimable_if_tight(uint64_t avail, uint64_t floor)
{
    char a[32], f[32];

    if (!kept_store || pipe_store_is_reclaimable(kept_store) || !memory_tight(avail, floor))
        return;
    pipe_store_make_reclaimable(kept_store);
    log_debug("the host memory kept for the next suspend is the kernel's to take (MADV_FREE): "
              "memory available %s, under twice %s", units_format_bytes(avail, a, sizeof(a)),
              units_format_bytes(floor, f, sizeof(f)));
}

/* After a fork the kept objects are the parent's (its threads are not
 * here): forgotten, not freed (their driver state is not the child's). */
static void check_owner(void)
{
    if (owner == getpid())
        return;
    kept_store = NULL;
    kept_pipe = NULL;
    monitor_running = 0;
    owner = getpid();
}

/* Frees what is kept; mu held. Returns the store bytes freed. */
static uint64_t release_locked(void)
{
    uint64_t bytes = pipe_store_kept_bytes(kept_store);

    pipe_store_free(kept_store);
    kept_store = NULL;
    pipe_free(kept_pipe);
    kept_pipe = NULL;
    return bytes;
}

uint64_t hostkeep_release(const char *why)
{
    char b[32];
    uint64_t bytes;

    pthread_mutex_lock(&mu);
    check_owner();
    bytes = release_locked();
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&mu);
    if (bytes)
        log_info("released the host memory kept for the next suspend (%s): %s",
                 units_format_bytes(bytes, b, sizeof(b)), why);
    return bytes;
}

static unsigned poll_ms(void)
{
    unsigned long long n = settings_get()->host_keep_poll_ms;

    return n >= 10 && n <= 60000 ? (unsigned)n : DEFAULT_POLL_MS;
}

/* Releases what is kept when the machine is short of memory, and makes it
 * reclaimable when memory is tight; mu held, dropped while /proc/meminfo is
 * read and while releasing. */
static void release_if_short(void)
{
    uint64_t avail, floor;
    char a[32], f[32], why[128];
    int is_short;

    pthread_mutex_unlock(&mu);
    is_short = memory_short(&avail, &floor);
    if (is_short) {
        snprintf(why, sizeof(why), "memory available %s, below %s",
                 units_format_bytes(avail, a, sizeof(a)), units_format_bytes(floor, f, sizeof(f)));
        hostkeep_release(why);
    }
    pthread_mutex_lock(&mu);
    if (!is_short)
        reclaimable_if_tight(avail, floor);
}

/* Watches the machine's available memory while anything is kept, and waits
 * for something to be kept otherwise. It never ends: it is a service thread
 * (core/thread.h), which the CRIU plugin lets run for a resume, and a
 * thread that ended in between would fail the restore. */
static void *monitor_main(void *arg)
{
    unsigned ms = poll_ms();

    (void)arg;
    tcgpu_gate_set_exempt(true);
    pthread_mutex_lock(&mu);
    for (;;) {
        struct timespec until;

        if (!(kept_store || kept_pipe)) {
            pthread_cond_wait(&wake, &mu);
            continue;
        }
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)(ms % 1000) * 1000000L;
        until.tv_sec += ms / 1000 + until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&wake, &mu, &until);
        if (kept_store || kept_pipe)
            release_if_short();
    }
    return NULL;
}

/* In a fork child: the parent's monitor may have held mu or waited on wake
 * at the fork; the child's copies start afresh (check_owner then forgets
 * what was kept). Not a lock across fork: that would hold up the program's
 * forks (a data loader's) behind a release of gigabytes. */
static void atfork_child(void)
{
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&wake, NULL);
}

/* Starts the monitor the first time something is kept, wakes it after; mu
 * held. */
static void ensure_monitor(void)
{
    static int atfork_set;

    if (monitor_running) {
        pthread_cond_broadcast(&wake);
        return;
    }
    if (!atfork_set)
        atfork_set = pthread_atfork(NULL, NULL, atfork_child) == 0;
    if (core_thread_start(NULL, monitor_main, "tcgpu-hostkeep", 0) == 0)
        monitor_running = 1;
    else
        release_locked();       /* no watcher, no keeping: the memory could not be given back */
}

struct pipe_store *hostkeep_take_store(void)
{
    struct pipe_store *s;

    pthread_mutex_lock(&mu);
    check_owner();
    s = kept_store;
    kept_store = NULL;
    pthread_mutex_unlock(&mu);
    return s;
}

void hostkeep_offer_store(struct pipe_store *s)
{
    uint64_t bytes = pipe_store_kept_bytes(s), avail = 0, floor = 0, max = budget();
    char b[32];

    if (!s)
        return;
    if (!bytes || bytes > max || memory_short(&avail, &floor)) {
        char a[32], f[32];

        if (bytes > max)
            log_debug("not keeping %s of host memory: over the budget of %s (TCGPU_HOST_KEEP)",
                      units_format_bytes(bytes, b, sizeof(b)), units_format_bytes(max, f, sizeof(f)));
        else if (bytes)
            log_debug("not keeping %s of host memory: memory available %s, below %s",
                      units_format_bytes(bytes, b, sizeof(b)),
                      units_format_bytes(avail, a, sizeof(a)), units_format_bytes(floor, f, sizeof(f)));
        pipe_store_free(s);
        return;
    }
    pipe_store_empty(s);
    pthread_mutex_lock(&mu);
    check_owner();
    pipe_store_free(kept_store);   /* none: take and offer alternate */
    kept_store = s;
    reclaimable_if_tight(avail, floor);
    ensure_monitor();
    pthread_mutex_unlock(&mu);
    log_debug("keeping %s of host memory for the next suspend",
              units_format_bytes(bytes, b, sizeof(b)));
}

struct pipe *hostkeep_take_pipe(void)
{
    struct pipe *p;

    pthread_mutex_lock(&mu);
    check_owner();
    p = kept_pipe;
    kept_pipe = NULL;
    pthread_mutex_unlock(&mu);
    return p;
}

void hostkeep_offer_pipe(struct pipe *p)
{
    uint64_t avail, floor;

    if (!p)
        return;
    if (!strcmp(settings_get()->host_keep, "0") || memory_short(&avail, &floor)) {
        pipe_free(p);
        return;
    }
    pthread_mutex_lock(&mu);
    check_owner();
    pipe_free(kept_pipe);
    kept_pipe = p;
    ensure_monitor();
    pthread_mutex_unlock(&mu);
}

uint64_t hostkeep_store_bytes(void)
{
    uint64_t b;

    pthread_mutex_lock(&mu);
    check_owner();
    b = pipe_store_kept_bytes(kept_store);
    pthread_mutex_unlock(&mu);
    return b;
}
