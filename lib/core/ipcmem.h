/*
 * ipcmem.h - legacy CUDA IPC (cuIpcGetMemHandle, cuIpcOpenMemHandle,
 * cuIpcCloseMemHandle) of the memory tcgpu serves, and shareable handles of
 * the program's own allocations (below, "Shareable handles").
 *
 * That memory is VMM memory (devmem.h), which the driver's legacy IPC does
 * not export. Unless TCGPU_IPC=0 its segments are created exportable (POSIX
 * file-descriptor handles), and tcgpu carries IPC itself:
 *
 *   exporter  cuIpcGetMemHandle on the base of an allocation writes a
 *             handle of ours into the 64 bytes: a magic ("tcgpuIPC"), the
 *             exporter's pid, an export id, the allocation's size and 16
 *             random bytes (the token: a handle nobody gave you cannot be
 *             guessed). The same allocation gives the same handle.
 *   opener    cuIpcOpenMemHandle of such a handle connects to the
 *             exporter's control socket (ctl/client.h: same uid or root,
 *             checked on both ends) and sends `ipc_export id=N token=HEX`.
 *             The exporter checks the token, exports the segment's
 *             physical allocation (cuMemExportToShareableHandle) and sends
 *             the descriptor with its reply (SCM_RIGHTS), with the pages
 *             that hold the allocation (window_offset, window_size) and its
 *             place in them (offset). The opener imports it, reserves
 *             address space of its own, maps the window and grants access,
 *             and returns base + offset. The connection stays open while
 *             the opener maps the memory: its end (cuIpcCloseMemHandle's
 *             last close, or the opener's death) tells the exporter.
 *
 * Processes that share memory are suspended together, the openers first:
 *
 *   opener    its suspend (gate closed, device idle) unmaps what it opened,
 *             releases the imported allocations and closes the connections
 *             (the exporter learns it at once), but keeps each address
 *             reserved. Its resume, once its own memory is back and before
 *             the program runs again, asks the exporter again (same id and
 *             token), imports the new descriptor and maps it at the same
 *             address; while the exporter refuses as suspended it asks
 *             again until TCGPU_GATE_TIMEOUT_MS, then fails (EAGAIN), and
 *             the process stays suspended: resume the exporter first.
 *   exporter  its suspend waits (TCGPU_GATE_TIMEOUT_MS) until no opener
 *             maps its memory, as long as each opener is suspending
 *             (asked over its control socket); one that stays running for
 *             PEER_GRACE_MS refuses the suspend (ENOTSUP), naming it. While
 *             suspended it refuses ipc_export; its resume re-creates the
 *             segments at the same addresses, exportable as before, and
 *             serves ipc_export from then on, before its gate opens.
 *
 * A checkpoint (to an image, the process running on) of either process is
 * still refused, naming the other (notes held by
 * TCGPU_HELD_BY_IPC_IMPORTER on the exporter's side,
 * TCGPU_HELD_BY_IPC_EXPORTER on the opener's): the memory is shared, and
 * an image of one side alone cannot carry it. A suspend passes those notes
 * over (blockers_first_suspend).
 *
 * Opened memory is not tracked as the opener's allocation: the exporter
 * holds it and counts it (status, limits); the opener's cuMemGetInfo is the
 * driver's. Thread-safe (one mutex each side). A forked child does not
 * inherit what its parent opened (its connections are the parent's).
 */
#ifndef TCGPU_IPCMEM_H
#define TCGPU_IPCMEM_H

#include <sys/types.h>
#include <cuda.h>

struct ctl_buf;
struct ctl_msg;

/*
 * cuIpcGetMemHandle of memory tcgpu serves. CUDA_ERROR_NOT_FOUND when dptr
 * is not ours (the caller asks the driver); CUDA_ERROR_INVALID_VALUE when
 * it is not the base of a live allocation; CUDA_ERROR_NOT_SUPPORTED when
 * its segment is not exportable (TCGPU_IPC off, or the device has no POSIX
 * file-descriptor handles); CUDA_SUCCESS with *h filled.
 */
CUresult ipcmem_get_handle(CUipcMemHandle *h, CUdeviceptr dptr);

/* Whether memory tcgpu serves at va can be exported (its segment is):
 * CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE. */
int ipcmem_capable(CUdeviceptr va);

/*
 * Shareable handles (cuMemExportToShareableHandle with POSIX descriptors) of
 * allocations the program created, carried the same way. The exporter's
 * descriptor is ours: a sealed memfd of the same 64 bytes (magic "tcgpuVMM",
 * pid, export id, size, token), which the program passes to another process
 * as it would the driver's (over a socket, pidfd_getfd). That process's
 * cuMemImportFromShareableHandle asks us over the control socket as an
 * opener does, imports the real descriptor, and gives the program a handle
 * of the registry's (TC_OWNER_IMPORTED), whose mappings the program makes
 * itself (cuMemMap, recorded). A suspend there unmaps them and releases the
 * import; its resume imports again and maps them at the same addresses with
 * the same access. Every process that imports must run under tcgpu (the
 * driver does not know our descriptor), and the exporter must still hold
 * the allocation (a handle or a mapping) when it is imported: the driver
 * would keep it alive for the descriptor alone.
 */

/* cuMemExportToShareableHandle of the program's allocation phys_id (the
 * registry's handle, TC_OWNER_USER) of size bytes: *fd, a descriptor of
 * ours, or CUDA_ERROR_OUT_OF_MEMORY / CUDA_ERROR_OPERATING_SYSTEM. */
CUresult ipcmem_export_phys(uint64_t phys_id, size_t size, int *fd);

/*
 * cuMemImportFromShareableHandle of fd. CUDA_ERROR_NOT_FOUND when it is not
 * a descriptor of ours (the caller asks the driver); CUDA_ERROR_INVALID_VALUE
 * when the exporter refuses (the log says why); else CUDA_SUCCESS with
 * *handle, the registry's. Our own export imported again is the driver's
 * import of the real allocation, noted for the process's life (one
 * allocation under two handles is not carried). The caller holds the API
 * gate and not the registry's lock.
 */
CUresult ipcmem_import_phys(int fd, CUmemGenericAllocationHandle *handle);

/* The program let go of imported allocation phys_id (its last handle and
 * mapping; the registry forgot it): the exporter learns it (ipc_forget).
 * Registry's lock not held. */
void ipcmem_import_forget(uint64_t phys_id);

/*
 * The exporter's side of that. A process that imported our allocation and
 * is suspended has closed its connection but will import it again, so an
 * allocation the program let go of (its last handle and mapping) stays
 * ours, saved and put back with the rest, while any process that imported
 * it has neither told us it let go for good (ipc_forget) nor died.
 * ipcmem_export_held says whether that is so now (the registry's lock may
 * be held); ipcmem_export_forget drops the export of a freed allocation.
 * ipcmem_orphans_mark says that the program let go of one (the registry's
 * lock may be held); ipcmem_orphans_free frees those that nobody holds,
 * when a holder went or one was marked since it last ran. It must run
 * where no operation holds a snapshot of the registry: inside a program's
 * driver call (the gate is open), or in the service thread while the
 * process runs and no operation can start (core/ops.c). Registry's lock
 * not held.
 */
int ipcmem_export_held(uint64_t phys_id);
void ipcmem_export_forget(uint64_t phys_id);
void ipcmem_orphans_mark(void);
void ipcmem_orphans_free(void);
int ipcmem_serve_forget(const struct ctl_msg *req, pid_t peer, struct ctl_buf *reply);

/*
 * cuIpcOpenMemHandle. CUDA_ERROR_NOT_FOUND when h is not a handle of ours
 * (the caller asks the driver). CUDA_ERROR_INVALID_CONTEXT when it is this
 * process's own; CUDA_ERROR_INVALID_VALUE when the exporter refuses it (a
 * forged token, freed memory, a process gone or suspended: the log says
 * which); CUDA_SUCCESS with *dptr. Opening the same handle again returns
 * the same address, counted. The caller holds the API gate.
 */
CUresult ipcmem_open(CUdeviceptr *dptr, const CUipcMemHandle *h);

/* cuIpcCloseMemHandle: CUDA_ERROR_NOT_FOUND when dptr is not memory we
 * opened; else CUDA_SUCCESS, unmapped at the last close. */
CUresult ipcmem_close(CUdeviceptr dptr);

/* The opened allocation containing p (cuMemGetAddressRange): 0 with its
 * base and size, or -ENOENT. */
int ipcmem_range(CUdeviceptr p, CUdeviceptr *base, size_t *size);

/*
 * A suspend of the exporter, gate closed: wait until no process maps our
 * memory. 0; -ENOTSUP when an opener stays running (not suspending) for
 * PEER_GRACE_MS; -ETIMEDOUT when openers that are suspending have not
 * released it within timeout_ms. The message names them.
 */
int ipcmem_wait_importers(unsigned timeout_ms);

/* A suspend of the opener, device idle: unmap and release what it opened
 * and close the connections, keeping the addresses reserved. Returns how
 * many allocations it released. */
size_t ipcmem_release_opened(void);

/*
 * The reverse, before the program runs again (a resume, or a suspend that
 * failed after ipcmem_release_opened): open each released allocation again
 * at its address. Asks again while an exporter refuses as suspended, until
 * timeout_ms. 0, or -errno with the message set, everything released again:
 * -EAGAIN (an exporter stayed suspended), -ESRCH (an exporter is gone or
 * freed the memory), -EIO (it cannot be mapped there again), -ETIMEDOUT.
 */
int ipcmem_reopen(unsigned timeout_ms);

/*
 * A resume put our memory back: serve ipc_export from now on, though the
 * gate stays closed while we open what we opened from others (two processes
 * that map each other's memory resume together that way).
 * ipcmem_exports_close stops it (the gate decides again) and returns how
 * many exports were served since: 0 when nobody maps the memory put back,
 * which may then be released again.
 */
void ipcmem_exports_open(void);
unsigned ipcmem_exports_close(void);

/* The exporter's side of ipc_export (core/ops.h, tcgpu_op_ipc_export). */
int ipcmem_serve(const struct ctl_msg *req, pid_t peer, struct ctl_buf *reply);
void ipcmem_peer_closed(pid_t peer);

#endif
