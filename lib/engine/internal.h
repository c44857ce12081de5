/*
 * internal.h - what the engine's files share: the pipe, its staging ring,
 * its job ring and the pieces (chunks) of a drain or a store; and the
 * functions one file of the engine calls in another. Not for other folders:
 * pipeline.h is the engine's face.
 *
 *   pipeline.c  pipe_new/free, messages, contexts and stream, staging ring, pieces
 *   pool.c      the worker pool
 *   store.c     the host store and its background compression
 *   drain.c     device (or store) to the host store or an image
 *   refill.c    image or store back to the device
 *
 * Threads as in pipeline.h: everything here runs on the operation's thread,
 * except what a task's fn does on a worker.
 */
#ifndef TCGPU_ENGINE_INTERNAL_H
#define TCGPU_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#include "common/helper_thread.h"
#include "pipeline.h"

#define DEFAULT_CHUNK (4u << 20)
#define DEFAULT_SLOT (16u << 20)
#define DEFAULT_SLOTS 4u
#define MAX_WORKERS 64u
#define HOST_COPY_MAX (64u << 20)      /* one async copy at most (host drain) */
/* Progress granularity of the host drain: a stream sync every 256 MiB costs
 * microseconds against milliseconds of copying at the host link's speed. */
#define HOST_SYNC_EVERY (256ull << 20)
#define SCAN_BATCH 4096u               /* chunks per device-side scan */

/* --- chunks ---------------------------------------------------------------- */

enum piece_state { P_RAW = 0, P_ZERO, P_ENC };

/* What the device-side scan (pipe_scan_pieces) found out about a piece. */
enum piece_scan {
    SCAN_NONE = 0,                /* not scanned (no helpers): nothing known */
    SCAN_ZERO_FLAG,               /* nonzero is valid */
    SCAN_DEVHASH,                 /* nonzero and devhash are valid */
    SCAN_BLOCKS,                  /* nonzero and the block hashes (bh) are valid */
};

struct piece {
    CUdeviceptr va;
    size_t len;
    uint64_t alloc_id, offset;
    uint32_t dtype;
    int device;
    uint8_t *host;                /* store: raw copy (NULL once encoded) */
    uint8_t *enc;                 /* store: encoded bytes (P_ENC) */
    uint32_t enc_len;
    uint8_t codec;
    uint8_t state;                /* enum piece_state */
    uint8_t scan;                 /* enum piece_scan */
    uint8_t nonzero;
    uint64_t devhash;
    /* block hashes (blocks.c): nblocks of them at bh, valid when bh_valid */
    uint64_t *bh;
    uint32_t nblocks;
    uint8_t bh_valid;
    uint32_t *changed;            /* a patch's changed block indices (nblocks room) */
    uint32_t nchanged;
};

/* The device-side scan found every byte of the piece zero. */
static inline int piece_found_zero(const struct piece *q)
{
    return q->scan != SCAN_NONE && !q->nonzero;
}

struct pipe_store {
    struct piece *pc;
    size_t n;
    uint64_t raw_bytes;
    /* the arena (store.c): every piece's raw copy lives in it */
    uint8_t *mem;
    size_t cap;
    int registered;               /* cuMemHostRegister'ed, in reg_ctx */
    CUcontext reg_ctx;
    int reused;                   /* the arena came from an emptied store */
    int faulted;                  /* its pages are in (fault_in_parallel) */
    int reclaimable;              /* emptied and MADV_FREE (pipe_store_make_reclaimable) */
    /* background compression */
    struct helper_thread *th;
    unsigned nth;
    size_t next;                  /* guarded by mu */
    int stop;                     /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t stopping;      /* stop was set */
};

/* --- the worker pool --------------------------------------------------------- */

struct pipe;
struct worker;

struct task {
    void (*fn)(struct pipe *p, struct worker *w, struct task *t);
    struct task *next;
    int done;                     /* guarded by the pipe's mutex */
    int rc;
};

struct worker {
    struct pipe *p;
    struct helper_thread th;
    struct codec_ctx *ctx;
    uint8_t *buf;                 /* stored bytes of a chunk being read */
    size_t buf_cap;
    uint8_t *base, *xor_buf;      /* a patch's base bytes and XOR (chunk-sized) */
};

/* --- staging ring ------------------------------------------------------------ */

enum slot_state { S_FREE = 0, S_COPYING, S_WORKING, S_UPLOADING };

/* How a slot's memory was made (and so how it is freed). */
enum slot_mem { SLOT_NONE = 0, SLOT_PINNED, SLOT_REGISTERED, SLOT_PLAIN };

struct slot {
    uint8_t *mem;                 /* staging memory, enum slot_mem */
    enum slot_mem mem_kind;
    uint8_t *enc;                 /* encode output, ENC_SIZE(slot_size) bytes (drain) */
    CUevent ev;
    enum slot_state state;
    size_t fill;                  /* bytes used */
    size_t enc_fill;              /* bytes of `enc` promised to jobs */
    size_t pending;               /* jobs not yet written / uploaded */
    uint64_t io_ticket;           /* drain: the writer reads mem/enc until this write is done */
};

/*
 * A slot's encode buffer: every job's output starts aligned and has room
 * to the next multiple of CHUNK_WRITE_ALIGN, so the writer sends it to the
 * file from there, padded, without a copy (chunk_sink_add_ref). The slack
 * is that rounding for 64 jobs; a slot that runs out of it takes fewer
 * jobs.
 */
#define ENC_ALIGN CHUNK_WRITE_ALIGN
#define ENC_ROOM(len) (((len) + ENC_ALIGN - 1) & ~(size_t)(ENC_ALIGN - 1))
#define ENC_SIZE(slot_size) (ENC_ROOM(slot_size) + 64 * (size_t)ENC_ALIGN)

/* Where a job is (drain). */
enum job_state { J_EMPTY = 0, J_READY, J_QUEUED, J_WAITING_COPY };
/* How a refill job's bytes go back (0: a drain's job). */
enum refill_kind { R_ZERO = 1, R_DIRECT, R_DECODE_IMAGE, R_DECODE_STORE };

/* One chunk on its way: to the writer (drain) or to the device (refill). */
struct job {
    struct task t;
    struct piece *pc;             /* drain: the chunk */
    const uint8_t *src;           /* drain: raw bytes */
    uint8_t *dst;                 /* encode output / decode target */
    size_t dst_cap;               /* drain: room at dst for the encoder */
    int slot;                     /* -1: none */
    enum job_state state;
    const struct image_chunk *parent;  /* drain: the parent's chunk here, or NULL */
    int patch;                    /* drain: src holds piece->changed blocks only */
    struct chunk_sink *sink;      /* drain, patch: for the parent's bytes */
    struct image_chunk c;
    const void *stored;
    /* refill */
    const struct chunk_source *source;  /* NULL: from a store */
    size_t index;                 /* of the chunk in the source; a store's: the order */
    CUdeviceptr va;
    size_t len;
    enum refill_kind kind;
    char err[200];                /* a failed decode's message */
};

struct pipe {
    struct pipe_opts o;
    size_t chunk;
    uint32_t block;               /* block of the block hashes; 0: none (blocks.c) */
    size_t slot_size;
    unsigned nslots;
    struct worker *w;
    unsigned nw, nw_alloc;        /* running, allocated */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    struct task *head, *tail;
    int quit;
    char msg[512];
    struct pipe_stats st;
    uint64_t progress;
    /* per call */
    CUstream stream;
    int cur_dev;                  /* -1: no context entered */
    struct pdev *dev;
    struct slot *slots;           /* kept between calls (pipe_make_ring) */
    CUcontext ring_ctx;           /* where the slots' pinned memory was made */
    struct job *jobs;
    size_t njobs;
    uint8_t *zeros;               /* chunk-sized zero pages (untouched) */
    uint64_t zero_csum;           /* XXH3 of `chunk` zero bytes */
};

/* --- pipeline.c ------------------------------------------------------------ */

/* Sets the pipe's message (pipe_error). */
void __attribute__((format(printf, 2, 3))) pipe_say(struct pipe *p, const char *fmt, ...);
/* Adds `bytes` to the call's progress and reports it. */
void pipe_add_progress(struct pipe *p, uint64_t bytes);
/* Makes a context of `device` current with a stream of the pipe's (and, if
 * `helpers`, the device-side helpers); pipe_leave_device syncs and undoes it. */
int pipe_use_device(struct pipe *p, int device, int helpers);
int pipe_leave_device(struct pipe *p);
/* The staging ring and the job ring, kept from one call to the next until
 * pipe_free: encode buffers if `with_enc`; with `with_mem`, the pinned
 * slot memory (made in the current context: the first call's) and the
 * slots' events (the current context's; pipe_leave_device drops them).
 * Resets every slot to free. */
int pipe_make_ring(struct pipe *p, int with_enc, int with_mem);
/* What `call` (an async copy of `len` bytes at device address `va` on the
 * pipe's stream) returned: 0, the bytes counted as copied; or -EIO, with the
 * pipe's message naming the call. */
int pipe_copy_issued(struct pipe *p, CUresult rc, const char *call, CUdeviceptr va, size_t len);
/* Waits for the pipe's stream. */
int pipe_stream_sync(struct pipe *p);
/* The chunk-sized zero pages; pipe_zero_csum: the XXH3 of `len` zero bytes. */
int pipe_zeros_init(struct pipe *p);
uint64_t pipe_zero_csum(struct pipe *p, size_t len);
/* Cuts extents into pieces at multiples of the chunk size of their offset. */
int pipe_make_pieces(struct pipe *p, const struct pipe_ext *e, size_t n, struct piece **out,
                     size_t *nout);
/* A scan's descriptor and result arrays, SCAN_BATCH entries each (free
 * both); 0 or -ENOMEM (neither allocated). */
struct pdev_desc;
struct pdev_result;
int pipe_scan_buffers(struct pdev_desc **d, struct pdev_result **r);
/* The device-side scan of pc[from, to): zero flags, device hashes if `hash`. */
int pipe_scan_pieces(struct pipe *p, struct piece *pc, size_t from, size_t to, int hash);
/* End index of the run of pieces on the same device as pc[i]. */
size_t pipe_device_run(const struct piece *pc, size_t n, size_t i);

/* --- blocks.c --------------------------------------------------------------- */

/* The block size for a chunk size: `wanted` (pipe_opts.block_size) when it
 * is a power of two, else 64 KiB; halved until the chunk holds it; 0 (no
 * block hashes) when that is below 4 KiB. */
uint32_t pipe_block_size(size_t wanted, size_t chunk);
/* Room for every piece's block hashes and changed list; freed with blocks_free. */
int pipe_blocks_alloc(struct pipe *p, struct piece *pc, size_t n, uint64_t **bh, uint32_t **idx);
/* The device-side scan of pc[from, to) block by block: bh, nonzero. */
int pipe_scan_blocks(struct pipe *p, struct piece *pc, size_t from, size_t to);
/* The host's block hashes of a piece whose raw bytes are at src, and in
 * the same pass their XXH3_64 into *xxh: 1, or 0 (nothing done: the piece
 * has its hashes, or no blocks). */
int pipe_hash_blocks(const struct pipe *p, struct piece *q, const uint8_t *src, uint64_t *xxh);
/* Compares the piece's block hashes with the parent chunk's: fills
 * q->changed/nchanged; -1 when they cannot be compared. */
int pipe_blocks_changed(const struct pipe *p, struct piece *q, const uint64_t *parent_bh,
                        uint32_t parent_n, uint32_t parent_bs);

/* --- pool.c ---------------------------------------------------------------- */

/* A worker's thread (pipe_new starts them). */
void *pool_worker_main(void *arg);
/* Queues t for the workers; pool_task_done polls it, pool_task_wait waits for it. */
void pool_submit(struct pipe *p, struct task *t);
int pool_task_done(struct pipe *p, struct task *t);
void pool_task_wait(struct pipe *p, struct task *t);

/* --- store.c --------------------------------------------------------------- */

/* A store for the extents, its pieces pointing into its arena (no copy
 * yet); the arena of `spare` (an emptied store, may be NULL) is reused and
 * grown as needed. `spare` is taken in all cases (freed on failure). */
int pipe_store_new(struct pipe *p, const struct pipe_ext *e, size_t n, struct pipe_store *spare,
                   struct pipe_store **out);
/* Registers the arena with the driver (the current context), once: copies
 * into it then run at the link's speed. Failure is not an error (0). */
int pipe_store_register(struct pipe *p, struct pipe_store *s);

#endif
