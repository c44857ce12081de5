/*
 * pipeline.h - the pipelined drain/refill engine (docs/engine.md).
 *
 * The snapshot engine (snapshot.c) decides *what* to save and when the device
 * memory is released; this module moves the bytes:
 *
 *   drain to host     device -> host store, asynchronous copies on the
 *                     library's own stream straight into the store (one copy
 *                     per contiguous run, several in flight); chunks the
 *                     device-side helpers find all zero are not copied.
 *   drain to image    device -> pinned staging ring (a few slots, async
 *                     copies + an event per slot) -> chunk workers
 *                     (chunk_encode, one codec context each) -> the chunk
 *                     sink (the image writer, io_uring), in order. Used by
 *                     checkpoint: copies of slot k+1 overlap the encoding of
 *                     slot k.
 *   write a store     host store -> chunk workers -> chunk sink: suspend to
 *                     an image releases the device after the raw drain and
 *                     compresses afterwards.
 *   refill            chunk source (an image) or host store -> read ahead
 *                     and decode in the workers into pinned slots -> async
 *                     uploads while the next slots decode; ZERO chunks
 *                     become cuMemsetD8Async.
 *
 * Images: the engine sees them only through image/chunks.h, a sink to write
 * chunks to (which also answers for the parent's chunks) and a source to
 * read them from; the caller opens the images and builds both.
 *
 * Chunks: every extent is cut at multiples of the chunk size (4 MiB) of the
 * *allocation offset*, so one allocation's chunks line up from one
 * checkpoint to the next (incremental images compare them by position).
 *
 * Incremental: with a parent image, a chunk whose raw XXH3_64 (host) or
 * device hash (devhash.h, device side; never copied) equals the parent's
 * chunk at the same allocation and offset is stored as a PARENT chunk.
 *
 * Threads: one thread (the operation's) calls the functions of one pipe; it
 * is the only one that calls the driver. Workers (pipe_opts.workers, default
 * the online CPUs) only encode and decode; they are gate-exempt.
 *
 * Errors: 0 or -errno; pipe_error() names the extent, chunk or driver call.
 * The caller holds a context of each extent's device current through the
 * ctx_enter/ctx_leave callbacks.
 */
#ifndef TCGPU_PIPELINE_H
#define TCGPU_PIPELINE_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#include "image/chunks.h"

/* A range of device memory to save: a part of an allocation. */
struct pipe_ext {
    CUdeviceptr va;
    size_t len;
    uint64_t alloc_id;
    uint64_t offset;              /* of va in the allocation */
    uint32_t dtype;               /* enum tcgpu_dtype */
    int device;                   /* ordinal */
};

/*
 * What a pipe does, as its caller wants it (libtcgpu: core/snapshot.c, from
 * the settings, core/settings.def). Zero is the default of every field; the
 * engine reads no environment.
 */
struct pipe_opts {
    size_t chunk_size;            /* 0 = 4 MiB */
    unsigned workers;             /* 0 = the online CPUs; at most 64 */
    size_t slot_size;             /* staging slot; 0 = 16 MiB; at least a chunk */
    unsigned slots;               /* staging slots; 0 = 4; at least 2 */
    size_t block_size;            /* block of the block hashes; 0 or not a power
                                     of two = 64 KiB; halved until a chunk holds it */
    int no_helpers;               /* 1: never load the device-side helpers;
                                     -1: also the simcuda twin, for every drain;
                                     0: the GPU's kernels, the twin only where
                                     the parent's block hashes save copies */
    int device_hash;              /* drain to an image: 0 = hash blocks (or
                                     chunks) on the device when the helpers are a
                                     real GPU's, or the parent has device hashes;
                                     1 = always, as a GPU; -1 = never */
    int patch_xor;                /* a PATCH chunk's blocks as their XOR with the
                                     parent's bytes: 1 always, -1 never, 0 when
                                     half its blocks changed */
    int prefault;                 /* host drain: fault a fresh store's pages in
                                     on a thread of its own while the copies run:
                                     0 or 1 yes, -1 no */
    int store_thp;                /* a fresh host store asks for huge pages: 1
                                     yes, -1 no, 0 unless the guest reports free
                                     pages to its hypervisor */
    int host_register;            /* register the host store with the driver: 0
                                     or 1 yes, -1 no */
    /* Makes a context of `device` current (push) / pops it. */
    int (*ctx_enter)(int device, void *arg);
    void (*ctx_leave)(void *arg);
    void *ctx_arg;
    /* Bytes moved so far (may be NULL). */
    void (*progress)(uint64_t bytes, void *arg);
    void *progress_arg;
};

/* Statistics of the last call, for status, logs and the benchmark. */
struct pipe_stats {
    uint64_t raw_bytes;           /* bytes of the extents */
    uint64_t copied_bytes;        /* bytes that crossed the host link */
    uint64_t zero_chunks;         /* found zero (device side or codec) */
    uint64_t parent_chunks;       /* unchanged since the parent */
    uint64_t patched_chunks;      /* stored as their changed blocks (PATCH) */
    uint64_t device_skipped;      /* chunks the device helpers kept on the device */
    uint64_t stored_bytes;        /* encoded bytes written or held */
    uint64_t encoded_chunks;      /* chunks the workers encoded */
    uint64_t device_hashed;       /* blocks the device hashed (the scan kernel) */
    int helpers;                  /* 0 none, 1 simcuda twin, 2 cubin */
    int store_reused;             /* host drain: into the pages of an emptied store */
};

struct pipe;
struct pipe_store;

/*
 * Starts the workers. Returns 0 and *out (caller owns it: pipe_free), or
 * -ENOMEM / -EAGAIN.
 */
int pipe_new(struct pipe **out, const struct pipe_opts *o);

/* Stops the workers and frees; NULL is fine. */
void pipe_free(struct pipe *p);

/* Where the next calls report their progress (pipe_opts.progress). */
void pipe_set_progress(struct pipe *p, void (*progress)(uint64_t bytes, void *arg), void *arg);

/*
 * The context the staging ring's pinned memory was made in (NULL: none
 * yet). A pipe kept between operations is good only while that context
 * lives: its pinned memory goes with it.
 */
CUcontext pipe_ring_context(const struct pipe *p);

/* Message for the last failure, "" if none. */
const char *pipe_error(const struct pipe *p);

/* Statistics of the last drain/write/refill call. */
void pipe_get_stats(const struct pipe *p, struct pipe_stats *st);

/*
 * Copies the extents to a new host store (raw). Returns 0 and *out (caller
 * owns it: pipe_store_free), or -ENOMEM / -EIO with nothing allocated.
 */
int pipe_drain_host(struct pipe *p, const struct pipe_ext *e, size_t n, struct pipe_store **out);

/*
 * pipe_drain_host into the pages of `spare` (a store emptied with
 * pipe_store_empty, or NULL): pages it still has are written again without
 * a fault; it grows when the extents need more. `spare` is taken in all
 * cases: it is *out on success, freed on failure.
 */
int pipe_drain_host_reuse(struct pipe *p, const struct pipe_ext *e, size_t n,
                          struct pipe_store *spare, struct pipe_store **out);

/*
 * Streams the extents into `sink` (chunk_sink_init: an image writer whose
 * allocations and devices are added, and its parent or none). With a
 * parent, unchanged chunks become PARENT chunks. The image is not committed
 * here.
 */
int pipe_drain_image(struct pipe *p, const struct pipe_ext *e, size_t n, struct chunk_sink *sink);

/* Encodes a raw store into `sink`, as pipe_drain_image (no device access). */
int pipe_write_store(struct pipe *p, struct pipe_store *s, struct chunk_sink *sink);

/* Puts a store's bytes back at their device addresses (the memory mapped). */
int pipe_refill_host(struct pipe *p, struct pipe_store *s);

/*
 * Puts every chunk of the allocations in `allocs` (one extent per whole
 * allocation: va, len = size, alloc_id) back from `src` (chunk_source_init
 * over an image the caller verified). Bytes no chunk covers are left as
 * they are.
 */
int pipe_refill_image(struct pipe *p, const struct chunk_source *src,
                      const struct pipe_ext *allocs, size_t n);

/*
 * Compresses a raw store in the background, in memory (libtcgpu: with
 * TCGPU_HOST_COMPRESS=1): `threads` threads of its own (0 = as many as
 * pipe_worker_count(0)), each chunk's raw pages released once its encoded
 * form is kept. 0 or -errno (nothing started). pipe_store_compress_stop is
 * implied by refill and free.
 */
int pipe_store_compress_start(struct pipe_store *s, unsigned threads);
/* Stops (finishes the chunks in progress) and joins; safe if not started. */
void pipe_store_compress_stop(struct pipe_store *s);

/* Bytes the store holds now (raw + encoded; zero chunks hold nothing). */
uint64_t pipe_store_bytes(const struct pipe_store *s);
uint64_t pipe_store_raw_bytes(const struct pipe_store *s);

/* Reads the store's copy of [offset, offset+len) of allocation `alloc_id`
 * into dst (tests). 0, -ENOENT (not covered). */
int pipe_store_read(struct pipe_store *s, uint64_t alloc_id, uint64_t offset, void *dst,
                    size_t len);

void pipe_store_free(struct pipe_store *s);

/*
 * Drops a store's contents but keeps its memory for pipe_drain_host_reuse:
 * the pages stay as they are (written again without a fault), the driver
 * registration stays. Returns the bytes kept.
 */
uint64_t pipe_store_empty(struct pipe_store *s);

/*
 * Lets the kernel take an emptied store's pages back whenever memory runs
 * short, before it would swap or kill anything (MADV_FREE; NULL is fine).
 * Not done by pipe_store_empty because it costs the next drain: its first
 * write to each such page takes a trip through the page tables, 512 MiB of
 * 4 KiB pages in 150 ms where the same copy into plain kept pages took 85.
 * Once per emptying: later calls do nothing until a drain reuses the store.
 */
void pipe_store_make_reclaimable(struct pipe_store *s);

/* Whether pipe_store_make_reclaimable was called since the last drain. */
int pipe_store_is_reclaimable(const struct pipe_store *s);

/* Bytes of host memory the store's arena holds (0 for NULL). */
uint64_t pipe_store_kept_bytes(const struct pipe_store *s);

/* The workers a pipe of pipe_opts.workers = `wanted` starts: `wanted` (0:
 * the online CPUs), at most 64. */
unsigned pipe_worker_count(unsigned wanted);

#endif
