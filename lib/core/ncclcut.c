/*
 * ncclcut.c - per-communicator counts of what each rank issued, and the
 * consistent cut a suspend or checkpoint waits for (ncclcut.h).
 *
 * The segment of one communicator, /tcgpu-ncclcut-<uid>-<hash of the id>:
 *
 *   struct seg_hdr                 magic (written last by its creator), the
 *                                  lock, nranks, holders, attached
 *   struct seg_slot [nranks]       pid + start time, hold, collectives
 *   struct seg_pair [nranks^2]     pair[a][b]: sends a issued to b, recvs a
 *                                  posted from b
 *
 * The rank whose attach completes the count unlinks the name (as simnccl
 * and NCCL do with their rendezvous segments), so nothing is left in
 * /dev/shm once every rank has joined; the mappings live on.
 *
 * The same segment carries the vote that lets a gang's ranks release the
 * communicator's memory together (ncclcut_release_memory): each slot's
 * mem_vote, and the header's mem_round, the last round decided.
 */
#include "ncclcut.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/errmsg.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/xxh.h"
#include "settings.h"
#include "thread.h"

#define SEG_MAGIC 0x74636e63u           /* "tcnc" */
#define SEG_VERSION 2u
#define MAX_RANKS 1024                  /* pairs: 16 MiB of (sparse) shm at most */
#define ATTACH_WAIT_MS 2000             /* for a creator between O_EXCL and its magic */
#define MAX_OPS_PER_GROUP 4096
#define VOTE_NO UINT32_MAX              /* suspended with its memory: votes no more until it runs */

struct seg_hdr {
    uint32_t magic;
    uint32_t version;
    uint32_t nranks;
    uint32_t holders;                   /* slots whose hold is set (under lock) */
    uint32_t attached;
    uint32_t mem_round;                 /* release votes: the last round decided */
    uint64_t id_hash;
    pthread_mutex_t lock;               /* robust, process-shared */
};

struct seg_slot {
    int32_t pid;                        /* 0: not attached (or left) */
    uint32_t hold;
    uint64_t start_ticks;               /* with pid, names the process for good */
    uint64_t coll;
    uint32_t mem_vote;                  /* the release round it votes for; 0: none; VOTE_NO */
    uint32_t pad;
};

struct seg_pair {
    uint64_t send;
    uint64_t recv;
};

/* One communicator this process counts. */
struct comm {
    const void *comm;                   /* the program's ncclComm_t */
    struct seg_hdr *seg;
    size_t map_len;
    int rank, nranks;
    pid_t owner;                        /* a forked child inherits the table, not the rank */
    int inside;                         /* threads in the library with a counted operation */
    int launching;                      /* counted operations whose call has not returned */
    int released;                       /* its buffers released, until the resumer takes them back */
    int releasing;                      /* tcgpu's release of it under way: the program's own
                                           suspend and resume wait (program_may_enter) */
    int program_released;               /* the program's own ncclCommSuspend(NCCL_SUSPEND_MEM) */
    uint64_t splits;                    /* ncclCommSplit calls on it so far */
    bool all_here;                      /* ncclCommInitAll's: every rank is this process's */
    char name[64];
    struct comm *next;
};

/* Read-locked to use an entry (an issue, a cut), write-locked to change the
 * list: a communicator destroyed during a cut waits for the cut's end. */
static pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct comm *comms;

/* --- the segment --------------------------------------------------------- */

static struct seg_slot *slots(const struct comm *c)
{
    return (struct seg_slot *)(c->seg + 1);
}

static struct seg_pair *pair(const struct comm *c, int a, int b)
{
    struct seg_pair *p = (struct seg_pair *)(slots(c) + c->nranks);
    return &p[(size_t)a * (size_t)c->nranks + (size_t)b];
}

static size_t seg_size(int nranks)
{
    return sizeof(struct seg_hdr) + (size_t)nranks * sizeof(struct seg_slot) +
           (size_t)nranks * (size_t)nranks * sizeof(struct seg_pair);
}

/* The lock; a holder that died leaves the counts as they were (each update
 * is a few stores that do not depend on one another), so they stay usable. */
static void seg_lock(const struct comm *c)
{
    if (pthread_mutex_lock(&c->seg->lock) == EOWNERDEAD)
        pthread_mutex_consistent(&c->seg->lock);
}

static void seg_unlock(const struct comm *c)
{
    pthread_mutex_unlock(&c->seg->lock);
}

/* Whether slot i names a process that still runs (not a pid reused later). */
static bool slot_live(const struct seg_slot *s)
{
    struct tcgpu_proc_stat st;

    if (s->pid <= 0 || tcgpu_proc_stat(s->pid, &st) != 0)
        return false;
    return st.start_ticks == s->start_ticks && st.state != 'Z' && st.state != 'X';
}

static const char *slot_state(const struct seg_slot *s)
{
    struct tcgpu_proc_stat st;

    if (!slot_live(s))
        return "exited";
    if (tcgpu_proc_stat(s->pid, &st) == 0 && (st.state == 'T' || st.state == 't'))
        return "stopped";
    return "running";
}

static void seg_init(struct seg_hdr *h, int nranks, uint64_t id_hash)
{
    pthread_mutexattr_t a;

    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&h->lock, &a);
    pthread_mutexattr_destroy(&a);
    h->version = SEG_VERSION;
    h->nranks = (uint32_t)nranks;
    h->id_hash = id_hash;
    __atomic_store_n(&h->magic, SEG_MAGIC, __ATOMIC_RELEASE);
}

/* An existing segment is trusted only when it is ours alone and of the
 * expected size; waits (bounded) for a creator that has not sized it yet. */
static int seg_check_fd(int fd, size_t size)
{
    uint64_t end = now_ns() + (uint64_t)ATTACH_WAIT_MS * 1000000u;
    struct stat st;

    for (;;) {
        if (fstat(fd, &st) != 0)
            return TC_FAIL(-errno, "fstat: %s", strerror(errno));
        if (st.st_uid != geteuid() || (st.st_mode & 077))
            return TC_FAIL(-EPERM, "it belongs to uid %u with mode %03o, not to us alone",
                           (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
        if ((size_t)st.st_size == size)
            return 0;
        if (st.st_size != 0 || now_ns() > end)
            return TC_FAIL(-EINVAL, "its size is %lld bytes, not %zu", (long long)st.st_size, size);
        usleep(1000);
    }
}

static int seg_wait_magic(struct seg_hdr *h, int nranks, uint64_t id_hash)
{
    uint64_t end = now_ns() + (uint64_t)ATTACH_WAIT_MS * 1000000u;

    while (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SEG_MAGIC) {
        if (now_ns() > end)
            return TC_FAIL(-ETIMEDOUT, "its creator did not initialise it");
        usleep(1000);
    }
    if (h->version != SEG_VERSION || h->nranks != (uint32_t)nranks || h->id_hash != id_hash)
        return TC_FAIL(-EINVAL, "it is of another communicator (%u ranks)", h->nranks);
    return 0;
}

/* Opens or creates c->name and maps it into c->seg. */
static int seg_map(struct comm *c, uint64_t id_hash)
{
    size_t size = seg_size(c->nranks);
    bool created = true;
    int fd, rc;

    fd = shm_open(c->name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        created = false;
        fd = shm_open(c->name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
    }
    if (fd < 0)
        return TC_FAIL(-errno, "shm_open: %s", strerror(errno));
    rc = created ? (ftruncate(fd, (off_t)size) ? -errno : 0) : seg_check_fd(fd, size);
    if (rc == 0) {
        c->seg = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (c->seg == MAP_FAILED) {
            c->seg = NULL;
            rc = TC_FAIL(-errno, "mmap: %s", strerror(errno));
        }
    } else if (created) {
        errmsg_set("ftruncate: %s", strerror(-rc));
    }
    close(fd);
    if (rc == 0) {
        c->map_len = size;
        if (created)
            seg_init(c->seg, c->nranks, id_hash);
        else
            rc = seg_wait_magic(c->seg, c->nranks, id_hash);
    }
    if (rc && created)
        shm_unlink(c->name);
    if (rc && c->seg) {
        munmap(c->seg, size);
        c->seg = NULL;
    }
    return rc;
}

/* Takes this rank's slot; the rank completing the count unlinks the name. */
static int seg_join(struct comm *c)
{
    struct seg_slot *me = &slots(c)[c->rank];
    struct tcgpu_proc_stat st;
    int rc = 0;

    if (tcgpu_proc_stat(getpid(), &st) != 0)
        return TC_FAIL(-EIO, "cannot read our own /proc/self/stat");
    seg_lock(c);
    if (me->pid != 0 && me->pid != getpid() && slot_live(me)) {
        rc = TC_FAIL(-EEXIST, "rank %d is already process %d's", c->rank, me->pid);
    } else {
        memset(me, 0, sizeof(*me));
        me->pid = getpid();
        me->start_ticks = st.start_ticks;
        if (++c->seg->attached == c->seg->nranks)
            shm_unlink(c->name);
    }
    seg_unlock(c);
    return rc;
}

/* --- the table of communicators ------------------------------------------ */

static bool enabled(void)
{
    return settings_get()->nccl_cut >= 0;
}

/* The entry of comm in this process (table_lock read-locked), or NULL. */
static struct comm *find(const void *comm)
{
    for (struct comm *c = comms; c; c = c->next)
        if (c->comm == comm && c->owner == getpid())
            return c;
    return NULL;
}

static void attach(const void *comm, uint64_t h, int nranks, int rank, bool all_here)
{
    struct comm *c;

    if (!enabled() || !comm || nranks < 2 || rank < 0 || rank >= nranks)
        return;
    if (nranks > MAX_RANKS) {
        log_warn("NCCL communicator of %d ranks: not counted (at most %d), so a suspend cannot wait "
                 "for a consistent cut of it", nranks, MAX_RANKS);
        return;
    }
    if (!(c = calloc(1, sizeof(*c))))
        return;
    c->comm = comm;
    c->rank = rank;
    c->nranks = nranks;
    c->owner = getpid();
    c->all_here = all_here;
    snprintf(c->name, sizeof(c->name), "/tcgpu-ncclcut-%u-%016llx", (unsigned)geteuid(),
             (unsigned long long)h);
    if (seg_map(c, h) != 0 || seg_join(c) != 0) {
        log_warn("NCCL communicator %016llx (rank %d of %d): not counted, so a suspend cannot wait "
                 "for a consistent cut of it: %s %s", (unsigned long long)h, rank, nranks, c->name,
                 errmsg_get());
        if (c->seg)
            munmap(c->seg, c->map_len);
        free(c);
        return;
    }
    pthread_rwlock_wrlock(&table_lock);
    c->next = comms;
    comms = c;
    pthread_rwlock_unlock(&table_lock);
    log_debug("NCCL communicator %016llx: counting as rank %d of %d", (unsigned long long)h, rank,
              nranks);
}

void ncclcut_attach(const void *comm, const void *id, size_t id_len, int nranks, int rank)
{
    attach(comm, XXH3_64bits(id, id_len), nranks, rank, false);
}

void ncclcut_attach_all(const void *const *all, int n)
{
    uint64_t h;

    if (getrandom(&h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
        log_warn("NCCL communicators of ncclCommInitAll: not counted (getrandom: %s)", strerror(errno));
        return;
    }
    for (int i = 0; i < n; i++)
        if (all[i])
            attach(all[i], h, n, i, true);
}

static pthread_mutex_t res_lock = PTHREAD_MUTEX_INITIALIZER;   /* the resumer's pick */
static pthread_cond_t res_cond = PTHREAD_COND_INITIALIZER;
static const void *res_current;        /* the communicator the resumer is taking back */

void ncclcut_attach_split(const void *parent, int color, const void *comm, int nranks, int rank)
{
    struct {
        uint64_t parent, seq;
        int64_t color;
    } key = { 0, 0, color };
    struct comm *p;

    pthread_rwlock_rdlock(&table_lock);
    if ((p = comms ? find(parent) : NULL)) {
        key.parent = p->seg->id_hash;
        key.seq = __atomic_add_fetch(&p->splits, 1, __ATOMIC_ACQ_REL);
    }
    pthread_rwlock_unlock(&table_lock);
    if (p && comm) {
        log_info("NCCL: a communicator split from %016llx (color %d) is counted as rank %d of %d",
                 (unsigned long long)key.parent, color, rank, nranks);
        ncclcut_attach(comm, &key, sizeof(key), nranks, rank);
    }
}

void ncclcut_detach(const void *comm)
{
    struct comm **pp, *c = NULL;

    /* Not while the resumer takes it back (a destroy waits for that, as the
     * library's would for its peers); and once out of the table, the
     * resumer never picks it (it picks under res_lock too). */
    pthread_mutex_lock(&res_lock);
    while (res_current == comm)
        pthread_cond_wait(&res_cond, &res_lock);
    pthread_rwlock_wrlock(&table_lock);
    for (pp = &comms; *pp; pp = &(*pp)->next)
        if ((*pp)->comm == comm && (*pp)->owner == getpid()) {
            c = *pp;
            *pp = c->next;
            break;
        }
    pthread_rwlock_unlock(&table_lock);
    pthread_mutex_unlock(&res_lock);
    if (!c)
        return;
    seg_lock(c);
    if (slots(c)[c->rank].hold)
        c->seg->holders--;
    memset(&slots(c)[c->rank], 0, sizeof(struct seg_slot));
    if (--c->seg->attached == 0)
        shm_unlink(c->name);    /* ranks that never came: the name is still there */
    seg_unlock(c);
    munmap(c->seg, c->map_len);
    free(c);
}

/* --- issuing ------------------------------------------------------------- */

struct op {
    struct comm *c;
    enum ncclcut_kind kind;
    int peer;
};

/* What this thread is issuing: the pending group's operations, and after
 * the wait what was counted (to take back if the library refuses). */
static __thread struct op *tl_ops;
static __thread unsigned tl_nops, tl_cap;
static __thread unsigned tl_depth;
static __thread bool tl_counted;

static bool op_owed(const struct op *o)
{
    const struct comm *c = o->c;
    int me = c->rank;

    switch (o->kind) {
    case NCCLCUT_COLL:
        for (int p = 0; p < c->nranks; p++)
            if (slots(c)[p].pid && slots(c)[p].coll > slots(c)[me].coll)
                return true;
        return false;
    case NCCLCUT_SEND:
        return pair(c, o->peer, me)->recv > pair(c, me, o->peer)->send;
    case NCCLCUT_RECV:
        return pair(c, o->peer, me)->send > pair(c, me, o->peer)->recv;
    }
    return false;
}

/* Whether a live rank holds c (lock held). A dead holder's hold is dropped:
 * a rank killed while suspended must not stop its peers for ever. */
static bool held(const struct comm *c)
{
    if (!c->seg->holders)
        return false;
    for (int p = 0; p < c->nranks; p++) {
        struct seg_slot *s = &slots(c)[p];
        if (!s->hold)
            continue;
        if (p == c->rank || slot_live(s))
            return true;
        s->hold = 0;
        c->seg->holders--;
    }
    return false;
}

/*
 * Whether a peer has issued on c something that waits for this rank: more
 * collectives, a send this rank has not posted the receive of, or a receive
 * it has not sent to (lock held).
 */
static bool behind(const struct comm *c)
{
    int me = c->rank;

    for (int p = 0; p < c->nranks; p++) {
        if (p == me || !slots(c)[p].pid)
            continue;
        if (slots(c)[p].coll > slots(c)[me].coll ||
            pair(c, p, me)->send > pair(c, me, p)->recv || pair(c, p, me)->recv > pair(c, me, p)->send)
            return true;
    }
    return false;
}

/*
 * May the operations go now (every involved lock held)? On each held
 * communicator this rank must be owed one of them, or be behind there: a
 * rank that owes its peers work must go on in its own order to become level,
 * even through an operation nobody waits for yet (a receive before the sends
 * it owes: the peer's matching send then becomes owed to that peer).
 */
static bool may_go(const struct op *ops, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        bool go;
        if (!held(ops[i].c))
            continue;
        go = behind(ops[i].c);
        for (unsigned j = 0; j < n && !go; j++)
            go = ops[j].c == ops[i].c && op_owed(&ops[j]);
        if (!go)
            return false;
    }
    return true;
}

static void count(const struct op *ops, unsigned n, int by)
{
    for (unsigned i = 0; i < n; i++) {
        const struct op *o = &ops[i];
        int me = o->c->rank;
        switch (o->kind) {
        case NCCLCUT_COLL: slots(o->c)[me].coll += (uint64_t)by; break;
        case NCCLCUT_SEND: pair(o->c, me, o->peer)->send += (uint64_t)by; break;
        case NCCLCUT_RECV: pair(o->c, me, o->peer)->recv += (uint64_t)by; break;
        }
    }
}

/* The distinct communicators of ops, in one order every process agrees on
 * (the segment's id hash), so that two ranks locking several never
 * deadlock. */
static unsigned lock_order(const struct op *ops, unsigned n, struct comm **out)
{
    unsigned k = 0;

    for (unsigned i = 0; i < n; i++) {
        unsigned j = 0;
        while (j < k && out[j] != ops[i].c)
            j++;
        if (j == k)
            out[k++] = ops[i].c;
    }
    for (unsigned i = 1; i < k; i++)
        for (unsigned j = i; j > 0 && out[j - 1]->seg->id_hash > out[j]->seg->id_hash; j--) {
            struct comm *t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return k;
}

static void sleep_backoff(unsigned *us)
{
    struct timespec ts = { 0, (long)*us * 1000 };

    nanosleep(&ts, NULL);
    if (*us < 2000)
        *us *= 2;
}

/* Whether one of ops' communicators has its buffers released (the
 * resumer has not taken them back yet). */
static bool any_released(const struct op *ops, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (__atomic_load_n(&ops[i].c->released, __ATOMIC_ACQUIRE))
            return true;
    return false;
}

/* Waits while the operations may not go, then counts them. The wait has no
 * bound of its own: it lasts while a peer is suspended, as the collective
 * itself would wait for that peer on the GPU, but here in host code, where
 * this process can still be suspended. enter: the operations go into the
 * library now (not a group's, which went in as they were issued:
 * ncclcut_issue). */
static bool wait_and_count(const struct op *ops, unsigned n, bool enter)
{
    struct comm **order = malloc(n * sizeof(*order));
    unsigned k, us = 50;

    if (!order)
        return false;                   /* not counted: the operation goes as without tcgpu */
    k = lock_order(ops, n, order);
    for (;;) {
        bool go;
        for (unsigned i = 0; i < k; i++)
            seg_lock(order[i]);
        /* Released is checked here too, not only before the wait: a wait
         * for a peer's hold can last through this process's own suspend,
         * whose release the resumer takes back only after the hold is
         * gone (the library then answered "invalid usage" on a
         * communicator still suspended in it). */
        go = may_go(ops, n) && !any_released(ops, n);
        if (go) {
            count(ops, n, 1);
            for (unsigned i = 0; i < n; i++) {
                __atomic_add_fetch(&ops[i].c->launching, 1, __ATOMIC_ACQ_REL);
                if (enter)
                    __atomic_add_fetch(&ops[i].c->inside, 1, __ATOMIC_ACQ_REL);
            }
        }
        for (unsigned i = k; i-- > 0;)
            seg_unlock(order[i]);
        if (go)
            break;
        sleep_backoff(&us);
    }
    free(order);
    return true;
}

/* The library has returned from the operations (wait_and_count counted them in,
 * or a group issued them). */
static void leave(const struct op *ops, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        __atomic_sub_fetch(&ops[i].c->inside, 1, __ATOMIC_ACQ_REL);
}

/* The library's call that issues ops (counted by wait_and_count) has
 * returned: their work is on the streams. */
static void launched(const struct op *ops, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        __atomic_sub_fetch(&ops[i].c->launching, 1, __ATOMIC_ACQ_REL);
}

/* Waits while c's buffers are released, until the resumer has taken them
 * back (ncclcut_release); no bound of its own, as for a hold. */
static void wait_resumed(const struct comm *c)
{
    unsigned us = 50;

    while (__atomic_load_n(&c->released, __ATOMIC_ACQUIRE))
        sleep_backoff(&us);
}

/* Takes back what wait_and_count counted (the library refused it), one
 * lock at a time: a count going down never lets anyone go. */
static void uncount(const struct op *ops, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        seg_lock(ops[i].c);
        count(&ops[i], 1, -1);
        seg_unlock(ops[i].c);
    }
}

static bool push_op(struct comm *c, enum ncclcut_kind kind, int peer)
{
    if (tl_nops == tl_cap) {
        unsigned cap = tl_cap ? tl_cap * 2 : 8;
        struct op *ops = cap <= MAX_OPS_PER_GROUP ? realloc(tl_ops, cap * sizeof(*ops)) : NULL;
        if (!ops)
            return false;
        tl_ops = ops;
        tl_cap = cap;
    }
    tl_ops[tl_nops++] = (struct op){ c, kind, peer };
    return true;
}

void ncclcut_issue(const void *comm, enum ncclcut_kind kind, int peer)
{
    struct comm *c;

    tl_counted = false;
    pthread_rwlock_rdlock(&table_lock);
    c = comms ? find(comm) : NULL;
    pthread_rwlock_unlock(&table_lock);
    if (!c || (kind != NCCLCUT_COLL && (peer < 0 || peer >= c->nranks || peer == c->rank)))
        return;                         /* not counted; the library judges a bad peer */
    wait_resumed(c);
    if (tl_depth) {
        /* in the library from now on (its group holds it): no release of
         * c until the group has ended */
        if ((tl_counted = push_op(c, kind, peer)))
            __atomic_add_fetch(&c->inside, 1, __ATOMIC_ACQ_REL);
        return;
    }
    tl_nops = 0;
    if (!push_op(c, kind, peer))
        return;
    tl_counted = wait_and_count(tl_ops, 1, true);
}

void ncclcut_done(bool accepted)
{
    if (!tl_counted)
        return;
    tl_counted = false;
    if (tl_depth) {
        if (!accepted)
            leave(&tl_ops[--tl_nops], 1);   /* the library refused this one of the group */
        return;
    }
    leave(tl_ops, tl_nops);
    launched(tl_ops, tl_nops);
    if (!accepted)
        uncount(tl_ops, tl_nops);
}

void ncclcut_group_start(void)
{
    if (tl_depth++ == 0)
        tl_nops = 0;
}

void ncclcut_group_end_issue(void)
{
    tl_counted = false;
    if (tl_depth != 1 || !tl_nops)
        return;
    tl_counted = wait_and_count(tl_ops, tl_nops, false);
}

void ncclcut_group_end_done(bool accepted)
{
    if (tl_depth == 0)
        return;
    if (tl_depth == 1) {
        leave(tl_ops, tl_nops);         /* in the library since they were issued */
        if (tl_counted)
            launched(tl_ops, tl_nops);
        if (tl_counted && !accepted)
            uncount(tl_ops, tl_nops);
    }
    if (--tl_depth == 0)
        tl_nops = 0;
    tl_counted = false;
}

/* --- the cut ------------------------------------------------------------- */

static bool holding;                    /* this process holds its communicators (atomic) */

/* This process's communicators, as an array the caller frees (table_lock
 * read-locked by the caller until it is done with them). */
static struct comm **mine(unsigned *n)
{
    struct comm **v = NULL;
    unsigned k = 0;

    for (struct comm *c = comms; c; c = c->next)
        if (c->owner == getpid()) {
            struct comm **nv = realloc(v, (k + 1) * sizeof(*v));
            if (!nv)
                break;
            v = nv;
            v[k++] = c;
        }
    *n = k;
    return v;
}

/* Sets or clears this rank's hold. Its start time is stamped again too: a
 * process CRIU restored has its pid back but a new start time, and peers
 * must not take it for gone (every resume after a restore passes here). */
static void set_hold(struct comm *c, uint32_t on)
{
    struct tcgpu_proc_stat st;
    struct seg_slot *me;
    int stamped = tcgpu_proc_stat(getpid(), &st) == 0;

    seg_lock(c);
    me = &slots(c)[c->rank];
    if (stamped && me->pid == getpid())
        me->start_ticks = st.start_ticks;
    if (me->hold != on) {
        me->hold = on;
        c->seg->holders += on ? 1u : (uint32_t)-1;
    }
    if (!on && me->mem_vote == VOTE_NO)
        me->mem_vote = 0;
    seg_unlock(c);
}

/*
 * Whether this rank is level with every attached peer on c (lock held).
 * If not, *why says with whom; returns -EPIPE when that peer has exited,
 * so that waiting longer cannot help.
 */
static int level(const struct comm *c, char *why, size_t len)
{
    const struct seg_slot *s = slots(c);
    int me = c->rank;

    for (int p = 0; p < c->nranks; p++) {
        uint64_t mine_n, theirs;
        const char *what;
        if (p == me || !s[p].pid)
            continue;
        if (s[p].coll != s[me].coll) {
            mine_n = s[me].coll, theirs = s[p].coll, what = "collectives";
        } else if (pair(c, me, p)->send != pair(c, p, me)->recv) {
            mine_n = pair(c, me, p)->send, theirs = pair(c, p, me)->recv;
            what = "sends to it (its receives from this rank)";
        } else if (pair(c, me, p)->recv != pair(c, p, me)->send) {
            mine_n = pair(c, me, p)->recv, theirs = pair(c, p, me)->send;
            what = "receives from it (its sends to this rank)";
        } else {
            continue;
        }
        snprintf(why, len, "NCCL communicator %016llx: this rank (%d) has issued %llu %s, rank %d "
                 "(pid %d, %s) %llu",
                 (unsigned long long)c->seg->id_hash, me, (unsigned long long)mine_n, what, p,
                 s[p].pid, slot_state(&s[p]), (unsigned long long)theirs);
        return slot_live(&s[p]) ? 1 : -EPIPE;
    }
    return 0;
}

int ncclcut_hold(unsigned timeout_ms)
{
    uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000u;
    unsigned n, us = 50;
    struct comm **v;
    char why[320] = "";
    int rc = 0;

    pthread_rwlock_rdlock(&table_lock);
    v = mine(&n);
    if (!n) {
        pthread_rwlock_unlock(&table_lock);
        free(v);
        return 0;
    }
    for (unsigned i = 0; i < n; i++)
        set_hold(v[i], 1);
    __atomic_store_n(&holding, true, __ATOMIC_RELEASE);
    for (;;) {
        rc = 0;
        for (unsigned i = 0; i < n && rc == 0; i++) {
            seg_lock(v[i]);
            rc = level(v[i], why, sizeof(why));
            seg_unlock(v[i]);
        }
        /* Level by the counts, which go up before the library is called:
         * an operation counted but not yet launched would be stopped by the
         * gate inside the library, and a peer's collective (in this process
         * too: ncclCommInitAll's threads) would wait for it on its GPU. */
        for (unsigned i = 0; i < n && rc == 0; i++)
            if (__atomic_load_n(&v[i]->launching, __ATOMIC_ACQUIRE)) {
                snprintf(why, sizeof(why), "NCCL communicator %016llx: an operation of this rank "
                         "(%d) counted but still going into the library",
                         (unsigned long long)v[i]->seg->id_hash, v[i]->rank);
                rc = 1;
            }
        if (rc <= 0 || now_ns() > end)
            break;
        sleep_backoff(&us);
    }
    free(v);
    pthread_rwlock_unlock(&table_lock);
    if (rc == 0)
        return 0;
    ncclcut_release();
    if (rc == -EPIPE)
        return TC_FAIL(-EPIPE, "%s: that rank exited before the ranks were level, so this rank's "
                       "collectives cannot finish", why);
    return TC_FAIL(-ETIMEDOUT, "%s: the ranks did not become level within %u ms "
                   "(TCGPU_GATE_TIMEOUT_MS)", why, timeout_ms);
}

static void resumer_kick(void);
static int resumer_start(void);

void ncclcut_release(void)
{
    unsigned n;
    struct comm **v;
    bool any = false;

    if (!__atomic_load_n(&holding, __ATOMIC_ACQUIRE))
        return;
    pthread_rwlock_rdlock(&table_lock);
    v = mine(&n);
    for (unsigned i = 0; i < n; i++) {
        set_hold(v[i], 0);
        any |= __atomic_load_n(&v[i]->released, __ATOMIC_ACQUIRE) != 0;
    }
    pthread_rwlock_unlock(&table_lock);
    free(v);
    __atomic_store_n(&holding, false, __ATOMIC_RELEASE);
    if (any)
        resumer_kick();
}

/* --- releasing the communicators' memory ---------------------------------- */

static struct ncclcut_lib lib;

void ncclcut_set_lib(const struct ncclcut_lib *l)
{
    lib = *l;
}

/* Waits (until end) for this process's threads to come out of the library
 * on c: the library must not be entered twice on one communicator. With
 * c->releasing set first: the program's own suspend stays out from then
 * on (program_may_enter; the two sequentially consistent pairs of a store
 * and a load let at least one side see the other). */
static bool library_left(const struct comm *c, uint64_t end)
{
    unsigned us = 50;

    while (__atomic_load_n(&c->inside, __ATOMIC_SEQ_CST)) {
        if (now_ns() > end)
            return false;
        sleep_backoff(&us);
    }
    return true;
}

/* Whether every rank of c is attached here, alive and votes for round r
 * (lock held). Ranks on other machines never attach: no release then. */
static bool all_vote(const struct comm *c, uint32_t r)
{
    for (int p = 0; p < c->nranks; p++) {
        const struct seg_slot *s = &slots(c)[p];
        if (s->mem_vote != r || (p != c->rank && !slot_live(s)))
            return false;
    }
    return true;
}

/* Whether a peer of c stays suspended with its memory (lock held): it will
 * not vote before it runs again. */
static bool peer_says_no(const struct comm *c)
{
    for (int p = 0; p < c->nranks; p++)
        if (p != c->rank && slots(c)[p].mem_vote == VOTE_NO)
            return true;
    return false;
}

/*
 * The vote: true when every rank of c agreed, before end, to release its
 * memory now; then each of them calls ncclCommSuspend (a barrier of all
 * ranks in the library, which must never wait for a rank that will not
 * come). A round is decided once, under the lock, by the first rank to see
 * every vote; a rank whose time is up, or that sees a peer suspended
 * without it, withdraws under the same lock only while its round is
 * undecided, so either all go or none does. One that withdraws says no
 * until it runs again (set_hold), so that peers suspended after it do not
 * wait for its vote.
 */
static bool agree(struct comm *c, uint64_t end)
{
    struct seg_slot *me = &slots(c)[c->rank];
    unsigned us = 50;
    uint32_t round;
    int decided = -1;

    seg_lock(c);
    round = c->seg->mem_round + 1;
    me->mem_vote = round;
    seg_unlock(c);
    while (decided < 0) {
        seg_lock(c);
        if ((int32_t)(c->seg->mem_round - round) >= 0) {
            decided = 1;
        } else if (all_vote(c, round)) {
            c->seg->mem_round = round;
            decided = 1;
        } else if (now_ns() > end || peer_says_no(c)) {
            decided = 0;
        }
        if (decided >= 0)
            me->mem_vote = decided ? 0 : VOTE_NO;
        seg_unlock(c);
        if (decided < 0)
            sleep_backoff(&us);
    }
    return decided == 1;
}

/* Says no to c's round without waiting for it (lock taken here): peers
 * withdraw at once (peer_says_no), and this rank votes again once it runs
 * (set_hold). */
static void say_no(struct comm *c)
{
    seg_lock(c);
    slots(c)[c->rank].mem_vote = VOTE_NO;
    seg_unlock(c);
}

/* Whether one of the n communicators v is still released: the resumer has
 * not taken it back yet. */
static bool resumer_behind(struct comm *const *v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (__atomic_load_n(&v[i]->released, __ATOMIC_ACQUIRE))
            return true;
    return false;
}

void ncclcut_release_memory(unsigned wait_ms)
{
    uint64_t end = now_ns() + (uint64_t)wait_ms * 1000000u;
    unsigned n, released = 0, kept = 0;
    struct comm **v;
    bool behind, own;

    if (!lib.suspend_mem || settings_get()->nccl_release < 0)
        return;
    /* no release without the thread that takes it back (res_lock, which it
     * takes, comes before table_lock) */
    if (resumer_start() != 0)
        return;
    pthread_rwlock_rdlock(&table_lock);
    v = mine(&n);
    /*
     * Nothing more is released while the resumer still owes an
     * ncclCommResume from before (a suspend came before it was done, or it
     * waits in one for a peer). Every rank's resumer takes its
     * communicators back oldest first, each a barrier of that
     * communicator's ranks; if this rank released c now, a peer whose
     * resumer is done would go into c's barrier first and wait there for
     * this rank, while this rank's resumer waits in the older one's
     * barrier for that peer: neither would ever come (seen with split
     * communicators). Kept instead, every rank's resumer owes the same
     * communicators in the same order, and the ones it waits for only
     * ever wait on older ones.
     */
    behind = resumer_behind(v, n);
    /* in the order the communicators were made (the table is newest
     * first): every rank votes on its communicators in the same order */
    for (unsigned i = n; i-- > 0;) {
        struct comm *c = v[i];
        int rc;
        if (__atomic_load_n(&c->released, __ATOMIC_ACQUIRE) ||
            __atomic_load_n(&c->program_released, __ATOMIC_ACQUIRE))
            continue;                   /* still released from before, or by the program */
        if (c->all_here) {
            /* its ranks' ncclCommSuspend are one barrier, which one thread
             * cannot enter for each rank in turn */
            kept++;
            continue;
        }
        if (behind) {
            say_no(c);
            kept++;
            continue;
        }
        /* The program's own ncclCommSuspend/Resume is no operation the
         * hold stops: one entering the library now would be counted in the
         * library's barrier beside the ranks' ncclCommSuspend below, which
         * would then let some ranks go and keep the others in it for ever. */
        __atomic_store_n(&c->releasing, 1, __ATOMIC_SEQ_CST);
        own = false;
        if (!library_left(c, end) || (own = __atomic_load_n(&c->program_released, __ATOMIC_ACQUIRE))) {
            /* still in the library, or its own suspend ended while this
             * waited for it to leave (not carried then: the program's) */
            say_no(c);
            kept += !own;
        } else if (!agree(c, end)) {
            kept++;
        } else if ((rc = lib.suspend_mem(c->comm)) != 0) {
            log_warn("NCCL communicator %016llx (rank %d): ncclCommSuspend failed (%d): its buffers "
                     "are carried with the rest", (unsigned long long)c->seg->id_hash, c->rank, rc);
            kept++;
        } else {
            __atomic_store_n(&c->released, 1, __ATOMIC_RELEASE);
            released++;
        }
        __atomic_store_n(&c->releasing, 0, __ATOMIC_RELEASE);
    }
    pthread_rwlock_unlock(&table_lock);
    free(v);
    if (released || kept)
        log_info("NCCL: %u communicator(s) released with ncclCommSuspend, %u carried%s", released, kept,
                 kept ? " (not every rank of it suspends now, some are on other machines, all are in "
                        "this process (ncclCommInitAll), or one is still being taken back from before)" : "");
}

/* The first communicator of this process still released, in the order they
 * were made (res_lock held); NULL when none. */
static const void *next_released(void)
{
    const void *h = NULL;

    pthread_rwlock_rdlock(&table_lock);
    for (struct comm *c = comms; c; c = c->next)
        if (c->owner == getpid() && __atomic_load_n(&c->released, __ATOMIC_ACQUIRE))
            h = c->comm;                /* the last one listed is the oldest */
    pthread_rwlock_unlock(&table_lock);
    return h;
}

static void mark_resumed(const void *h)
{
    struct comm *c;

    pthread_rwlock_rdlock(&table_lock);
    if ((c = find(h)))
        __atomic_store_n(&c->released, 0, __ATOMIC_RELEASE);
    pthread_rwlock_unlock(&table_lock);
}

/*
 * The resumer: takes released communicators back with ncclCommResume, in
 * the order they were made, on a thread of its own. ncclCommResume is a
 * barrier of all ranks: it returns once every peer was resumed too, which
 * this rank's program must not wait for outside NCCL (it may be what lets a
 * peer go on); its operations on a released communicator wait for it
 * (wait_resumed), as they would for the peers.
 */
static bool res_work;
static pid_t res_pid;                  /* the process the resumer belongs to (fork) */

static void *resumer_main(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&res_lock);
    for (;;) {
        const void *h;
        while (!res_work)
            pthread_cond_wait(&res_cond, &res_lock);
        res_work = false;
        /* not while the process holds its communicators again (a suspend
         * began): its next run kicks this again */
        while (!__atomic_load_n(&holding, __ATOMIC_ACQUIRE) && (h = next_released())) {
            int rc;
            res_current = h;
            pthread_mutex_unlock(&res_lock);
            rc = lib.resume(h);
            if (rc)
                log_err("NCCL communicator %p: ncclCommResume failed (%d): its next operations fail",
                        h, rc);
            mark_resumed(h);            /* resumed or not, the program's calls go on */
            pthread_mutex_lock(&res_lock);
            res_current = NULL;
            pthread_cond_broadcast(&res_cond);
        }
    }
    return NULL;
}

/* The resumer of this process, started once (a forked child starts its
 * own). 0, or -errno: then nothing is released. */
static int resumer_start(void)
{
    int rc = 0;

    pthread_mutex_lock(&res_lock);
    if (res_pid != getpid()) {
        if ((rc = core_thread_start(NULL, resumer_main, "tcgpu-nccl", 0)) == 0)
            res_pid = getpid();
        else
            log_warn("NCCL: cannot start the thread that takes communicators back (%s): their "
                     "memory is carried instead", strerror(-rc));
    }
    pthread_mutex_unlock(&res_lock);
    return rc;
}

static void resumer_kick(void)
{
    pthread_mutex_lock(&res_lock);
    res_work = true;
    pthread_cond_broadcast(&res_cond);
    pthread_mutex_unlock(&res_lock);
}

bool ncclcut_resuming(const void *comm)
{
    bool r;

    pthread_mutex_lock(&res_lock);
    r = res_current == comm;
    pthread_mutex_unlock(&res_lock);
    return r;
}

/* --- the program's own ncclCommSuspend/Resume ----------------------------- */

/* The entry of comm, for the program's calls (NULL: not counted). */
static struct comm *program_comm(const void *comm)
{
    struct comm *c;

    pthread_rwlock_rdlock(&table_lock);
    c = comms ? find(comm) : NULL;
    pthread_rwlock_unlock(&table_lock);
    return c;
}

/* Counts the program's thread into the library on c, once tcgpu neither
 * releases c nor has it released (library_left's other side). */
static void program_may_enter(struct comm *c)
{
    unsigned us = 50;

    for (;;) {
        wait_resumed(c);
        __atomic_add_fetch(&c->inside, 1, __ATOMIC_SEQ_CST);
        if (!__atomic_load_n(&c->releasing, __ATOMIC_SEQ_CST) &&
            !__atomic_load_n(&c->released, __ATOMIC_ACQUIRE))
            return;
        __atomic_sub_fetch(&c->inside, 1, __ATOMIC_ACQ_REL);
        while (__atomic_load_n(&c->releasing, __ATOMIC_ACQUIRE))
            sleep_backoff(&us);
    }
}

void ncclcut_program_suspend_begin(const void *comm)
{
    struct comm *c = program_comm(comm);

    if (c)
        program_may_enter(c);
}

void ncclcut_program_suspend_end(const void *comm, int released)
{
    struct comm *c = program_comm(comm);

    if (!c)
        return;
    if (released >= 0)
        __atomic_store_n(&c->program_released, released, __ATOMIC_RELEASE);
    __atomic_sub_fetch(&c->inside, 1, __ATOMIC_ACQ_REL);
}
