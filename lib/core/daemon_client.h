/*
 * daemon_client.h - the job's side of tcgpud, in libtcgpu.so: registration,
 * the job's memory limit, and asking tcgpud to make room. The transport it
 * talks over is ctl/daemon_io.h.
 */
#ifndef TCGPU_DAEMON_CLIENT_H
#define TCGPU_DAEMON_CLIENT_H

#include <stdint.h>

/* ---------------------------------------------------------------------------
 * Settings (settings.h; set by `gpuckpt run --project P ...`):
 *   TCGPU_PROJECT         the project; without it the job does not register
 *   TCGPU_PRIORITY        its priority (default: the project's)
 *   TCGPU_GPU_MEM         its memory limit (e.g. 8G); enforced even without tcgpud
 *   TCGPU_DAEMON_SOCKET   tcgpud's socket (default /run/tcgpud.sock)
 *   TCGPU_WAIT_TIMEOUT    when no room can be made, wait this long (e.g. 60s) before
 *                         failing the allocation (default: fail at once)
 *   TCGPU_DAEMON_TIMEOUT  how long an allocation waits for tcgpud's answer (default 120s)
 * ------------------------------------------------------------------------- */

/*
 * Register with tcgpud (after the control socket is up, at cuInit). Reads
 * the settings; without TCGPU_PROJECT it only applies TCGPU_GPU_MEM.
 * Never fails the program: problems are logged once and the job runs on
 * without policy. Idempotent.
 */
void tcgpu_daemon_register(void);

/* The job's memory limit in bytes (0: none). Lock-free. */
uint64_t tcgpu_daemon_limit(void);

/*
 * An allocation of `bytes` on `device` does not fit: over the job's limit
 * (over_limit: it fails, and the job's log says which limit, at most every
 * 10 s; a limit is hard), or the driver said out of memory: then, `used`
 * being what the job holds, asks tcgpud to make room (it may suspend other
 * jobs) and waits for the answer. The calling thread leaves the API gate while it waits (when
 * it is its outermost call), so that the job itself can be suspended
 * meanwhile. Returns 1: retry the allocation; 0: fail it.
 */
int tcgpu_daemon_make_room(int device, uint64_t bytes, uint64_t used, int over_limit);

#endif
