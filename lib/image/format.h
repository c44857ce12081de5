/*
 * format.h - every on-disk structure of a tcgpu image, format v1.
 *
 * This is the one place the format is declared (as CRIU keeps its images in
 * its images/.proto files); docs/image-format.md explains it in prose and
 * `gpuckpt inspect` shows it. Nothing here is ever written to disk as a C
 * struct: the manifest is serialised field by field, little-endian, with
 * explicit lengths (lib/image/writer.c), so padding and host byte order never leak
 * into an image. The offsets in the comments below are the format.
 *
 * An image is a directory:
 *   DIR/manifest   versioned binary manifest (layout below)
 *   DIR/data.0     chunk payloads, concatenated; data.1... are reserved for
 *                  writers that spread chunks over several files
 *
 * Compatibility: a reader accepts any minor version of its major version.
 * Sections it does not know are skipped unless flagged CRITICAL, so a minor
 * version may add sections; changing a record layout needs a new major.
 */
#ifndef TCGPU_IMAGE_FORMAT_H
#define TCGPU_IMAGE_FORMAT_H

#include <stdint.h>

#define TCGPU_IMG_MANIFEST_NAME "manifest"
#define TCGPU_IMG_DATA_FMT      "data.%u"

#define TCGPU_IMG_VERSION_MAJOR 1
#define TCGPU_IMG_VERSION_MINOR 2 /* 1: DEVHASH section; 2: BLOCKHASH, PATCH chunks */

/*
 * Manifest = header, `section_count` sections, trailer.
 *
 * Header (TCGPU_IMG_HEADER_LEN bytes):
 *   0   u8[8]  magic "TCGPUIMG"
 *   8   u16    version major
 *   10  u16    version minor
 *   12  u32    header length (40; a reader skips any bytes beyond the fields it knows)
 *   16  u64    manifest length: the whole file, header to trailer
 *   24  u32    section count
 *   28  u32    flags (none defined; must be 0)
 *   32  u64    XXH3_64 of bytes 0..31
 */
#define TCGPU_IMG_MAGIC      "TCGPUIMG"
#define TCGPU_IMG_HEADER_LEN 40u

/*
 * Section (repeated):
 *   0   u32    type (enum tcgpu_img_section)
 *   4   u32    flags (TCGPU_IMG_SECTION_CRITICAL)
 *   8   u64    payload length
 *   16  payload
 */
#define TCGPU_IMG_SECTION_HDR_LEN  16u
#define TCGPU_IMG_SECTION_CRITICAL 0x1u

/*
 * Trailer (TCGPU_IMG_TRAILER_LEN bytes), the last bytes of the manifest:
 *   0   u8[8]  magic "TCGPUEND"
 *   8   u64    XXH3_128 low 64 bits  } of every manifest byte before this
 *   16  u64    XXH3_128 high 64 bits } checksum (header .. trailer magic)
 * The 16 checksum bytes are the image's identity: a child image names its
 * parent by them.
 */
#define TCGPU_IMG_TRAILER_MAGIC "TCGPUEND"
#define TCGPU_IMG_TRAILER_LEN   24u

/*
 * A string inside a section: u32 length, then that many bytes, no NUL
 * terminator, no NUL inside.
 */
enum tcgpu_img_section {
    /* once, required:
     *   u32 pid, u32 reserved(0), u64 start_time_ns (CLOCK_REALTIME at
     *   process start, 0 = unknown), u64 created_ns (CLOCK_REALTIME when the
     *   image was committed), str hostname, str executable path */
    TCGPU_IMG_SEC_PROCESS = 1,
    /* once per device; the n-th DEVICE section is device index n:
     *   i32 ordinal, u32 driver version (cuDriverGetVersion), u64 total
     *   memory in bytes, u8[16] UUID, str name */
    TCGPU_IMG_SEC_DEVICE = 2,
    /* at most once; present in incremental images only:
     *   u8[16] parent manifest checksum (its trailer), str parent path */
    TCGPU_IMG_SEC_PARENT = 3,
    /* once per data file, in index order:
     *   u32 index, u32 flags(0), u64 size in bytes, str name ("data.<index>") */
    TCGPU_IMG_SEC_DATA_FILE = 4,
    /* once, required: u32 count, u32 reserved(0), then count records:
     *   u64 id, u64 device address, u64 size, u32 kind (enum
     *   tcgpu_alloc_kind), u32 flags (opaque to the format, kept for the
     *   snapshot engine), u32 dtype hint (enum tcgpu_dtype), u32 device
     *   index, str call site (empty = none) */
    TCGPU_IMG_SEC_ALLOCATIONS = 5,
    /* once, required: u64 count, then count records of
     * TCGPU_IMG_CHUNK_REC_LEN bytes:
     *   0   u64  allocation id
     *   8   u64  offset in the allocation
     *   16  u32  raw length (1 .. TCGPU_IMG_MAX_CHUNK)
     *   20  u32  stored length
     *   24  u8   codec (enum tcgpu_codec)
     *   25  u8   reserved (0)
     *   26  u16  data file index
     *   28  u32  flags (none defined; 0)
     *   32  u64  offset in the data file
     *   40  u64  XXH3_64 of the raw bytes
     *   48  u64  XXH3_64 of the stored bytes
     * Bytes of an allocation that no chunk covers were not saved (hinted
     * free by the framework) and read back as zeros. Chunks of one
     * allocation never overlap. */
    TCGPU_IMG_SEC_CHUNKS = 6,
    /* at most once, after CHUNKS, not critical (minor 1): the device hash
     * (lib/engine/kernels/devhash.h) of chunks whose drain computed one on the
     * device, for the next incremental image to compare without copying:
     *   u64 count (= the chunk count), then count records in chunk-table
     *   order: u8 present (0/1), u64 device hash (0 when absent) */
    TCGPU_IMG_SEC_DEVHASH = 7,
    /* at most once, after CHUNKS, not critical (minor 2): device hashes of
     * every block of the chunks that have them, for the next incremental
     * image to find the blocks that changed:
     *   u32 block size (a power of two, 4 KiB .. 64 MiB), u32 reserved (0),
     *   u64 count (= the chunk count), then count records in chunk-table
     *   order: u8 present (0/1), and when present ceil(raw length / block
     *   size) u64 device hashes (devhash.h) of the chunk's blocks in order */
    TCGPU_IMG_SEC_BLOCKHASH = 8,
};
#define TCGPU_IMG_CHUNK_REC_LEN 56u

/* How a chunk's bytes are stored (the chunk record's codec byte). */
enum tcgpu_codec {
    TCGPU_CODEC_ZERO = 0,      /* all zero; nothing stored */
    TCGPU_CODEC_RAW = 1,       /* stored as is */
    TCGPU_CODEC_ZSTD = 2,      /* one zstd frame of the raw bytes */
    TCGPU_CODEC_BYTEGROUP = 3, /* byte planes, each zstd or raw (below) */
    TCGPU_CODEC_PARENT = 4,    /* unchanged since the parent image;
                                  the bytes live in the parent's chunk with the
                                  same allocation id and offset; stored length 0 */
    TCGPU_CODEC_PATCH = 5,     /* the parent's chunk at the same position and of
                                  the same length with some blocks replaced
                                  (minor 2; payload below) */
    TCGPU_CODEC_COUNT
};

/*
 * BYTEGROUP payload. The raw bytes are read as n = raw_len / esize
 * little-endian elements; with ROTATE each element is first rotated left by
 * one bit (IEEE floats: the sign moves to bit 0, so the top byte holds only
 * exponent bits). Plane p holds byte p of every element (plane 0 = lowest
 * byte). raw_len % esize trailing bytes follow the planes verbatim.
 *   0   u8   element size: 2, 4 or 8
 *   1   u8   flags: TCGPU_BG_ROTATE
 *   2   u8   zstd mask: bit p set = plane p is one zstd frame, else raw (n bytes)
 *   3   u8   reserved (0)
 *   4   u32[esize] stored length of each plane
 *   ... planes, then the tail
 */
#define TCGPU_BG_HDR_LEN(esize) (4u + 4u * (unsigned)(esize))
#define TCGPU_BG_ROTATE         0x1u

/*
 * PATCH payload: the chunk is its *base* (the parent image's chunk at the
 * same allocation and offset, of the same raw length) with k blocks
 * replaced. The blocks' new bytes (mode 0), or their XOR with the base's
 * bytes (mode 1: floats moved by one optimizer step keep their sign and
 * exponent, so the XOR is mostly zero bits), concatenated, are stored with
 * an inner codec (ZERO, RAW, ZSTD or BYTEGROUP).
 *   0   u32  block size (a power of two, 4 KiB .. 64 MiB)
 *   4   u32  k, blocks replaced (1 .. blocks of the chunk)
 *   8   u8   mode: 0 new bytes, 1 XOR with the base
 *   9   u8   inner codec
 *   10  u16  reserved (0)
 *   12  u32  inner stored length
 *   16  u64  XXH3_64 "raw checksum" of the base chunk (its record's)
 *   24  u32[k] block indices, increasing
 *   ..  u64[k] XXH3_64 of each replaced block's new bytes
 *   ..  inner payload (its length: the inner stored length, the rest)
 * The chunk record's raw checksum of a PATCH chunk is not the XXH3 of its
 * bytes (the writer never had them all): it is the XXH3_64 of payload bytes
 * [16, 24 + 12k), the base's checksum with the replaced blocks' indices and
 * checksums, which a reader checks block by block after decoding the base.
 */
#define TCGPU_PATCH_HDR_LEN            24u
#define TCGPU_PATCH_MIN_BLOCK          4096u
#define TCGPU_PATCH_MAX_BLOCK          (64u << 20)
#define TCGPU_PATCH_NEW                0u
#define TCGPU_PATCH_XOR                1u

/* Dtype hint of an allocation: enum tcgpu_dtype of the public header
 * (tcgpu.h), whose values are stored as they are and never change. */
#include "tcgpu.h"

/* Where an allocation came from; decides how restore re-creates it. */
enum tcgpu_alloc_kind {
    TCGPU_ALLOC_DEVICE = 0,      /* cuMemAlloc */
    TCGPU_ALLOC_PITCH = 1,       /* cuMemAllocPitch */
    TCGPU_ALLOC_VMM_MAPPING = 2, /* the program's own cuMemMap */
    TCGPU_ALLOC_POOL = 3,        /* cuMemAllocAsync / pools */
    TCGPU_ALLOC_HOST_PINNED = 4, /* cuMemAllocHost / cuMemHostAlloc */
    TCGPU_ALLOC_MANAGED = 5,     /* cuMemAllocManaged */
    TCGPU_ALLOC_KIND_COUNT
};

/* Limits a reader enforces on untrusted images. */
#define TCGPU_IMG_MAX_MANIFEST (1ull << 30)
#define TCGPU_IMG_MAX_CHUNK    (1u << 30)
#define TCGPU_IMG_MAX_STRING   65536u
#define TCGPU_IMG_MAX_PATH     4096u
#define TCGPU_IMG_MAX_NAME     256u
#define TCGPU_IMG_MAX_DEVICES  64u
#define TCGPU_IMG_MAX_FILES    64u

#endif /* TCGPU_IMAGE_FORMAT_H */
