/*
 * restore.c - the plugin's side of criu restore.
 *
 * init(RESTORE), before CRIU restores anything: the index, every GPU image
 * read and checked (every chunk's stored checksum; the refill checks the
 * raw ones), each the image this dump wrote for its process, and the
 * device model the same. Any problem
 * fails the restore, naming the file and the problem: a corrupt or swapped
 * image is refused while nothing has been touched.
 *
 * RESUME_DEVICES_LATE(pid), with the task restored but still held by CRIU:
 * its restore thread and tcgpu's own threads are let run (threads.c), the
 * driver gives the context back (Restore + Unlock), the process refills its
 * memory at the same addresses from its image, and the threads are stopped
 * again for CRIU, which then lets the whole task go. CRIU ignores what this
 * hook returns, so a process that cannot come back (no room on the device)
 * stays suspended, safely, and the log says how to retry.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "criu-plugin.h"
#include "ckptapi/ckptapi.h"
#include "common/proc.h"
#include "image/image.h"

static struct {
    const struct tp_config *cfg;
    int enabled;
    int verified;               /* gpuckpt restore checked the images' chunks already */
    int gpudir;
    struct tp_index idx;
    int ndev;                   /* the devices here, asked once: -1 until then */
    struct gdrv_device dev[16];
    int nremap;                 /* devices of the images that are other GPUs here */
    uint8_t remap_old[16][16], remap_new[16][16];
} rs = { .gpudir = -1, .ndev = -1 };

/* We are in the inventory: tell CRIU we are here, or it refuses the restore. */
static void leave_inventory(void)
{
    int (*check)(const char *, size_t) =
        (int (*)(const char *, size_t))dlsym(RTLD_DEFAULT, "check_and_remove_inventory_plugin");

    if (check)
        check(TP_NAME, strlen(TP_NAME));
}

/* Another GPU of the same model (another machine): the driver remaps it at Restore. */
static void add_remap(const uint8_t old_uuid[16], const uint8_t new_uuid[16])
{
    for (int i = 0; i < rs.nremap; i++)
        if (!memcmp(rs.remap_old[i], old_uuid, 16))
            return;
    if (rs.nremap < 16) {
        memcpy(rs.remap_old[rs.nremap], old_uuid, 16);
        memcpy(rs.remap_new[rs.nremap++], new_uuid, 16);
    }
}

/* The devices an image was made on must be the same model here. */
static int check_devices(const struct tp_proc *p, const struct image *img)
{
    const struct gdrv_device *now = rs.dev;
    char err[512];
    int n = rs.ndev;

    if (n < 0 && (n = rs.ndev = tp_driver_helper.devices(rs.dev, 16, err, sizeof(err))) < 0) {
        log_err("cannot list the GPUs: %s", err);
        return -ENODEV;
    }
    for (uint32_t i = 0; i < image_device_count(img); i++) {
        const struct image_device *d = image_device_info(img, i);

        if (d->ordinal >= n) {
            log_err("process %d (%s) used GPU %d (%s); this machine has %d", (int)p->vpid, p->comm,
                    d->ordinal, d->name, n);
            return -ENODEV;
        }
        if (strcmp(now[d->ordinal].name, d->name) || now[d->ordinal].total_mem != d->total_mem) {
            log_err("GPU %d is '%s' with %" PRIu64 " bytes; process %d (%s) was dumped on '%s' with "
                    "%" PRIu64 " bytes: a GPU image only restores onto the same model", d->ordinal,
                    now[d->ordinal].name, now[d->ordinal].total_mem, (int)p->vpid, p->comm, d->name,
                    d->total_mem);
            return -ENODEV;
        }
        if (memcmp(now[d->ordinal].uuid, d->uuid, 16))
            add_remap(d->uuid, now[d->ordinal].uuid);
    }
    tp_driver_remap((const uint8_t(*)[16])rs.remap_old, (const uint8_t(*)[16])rs.remap_new, rs.nremap);
    return 0;
}

/* gpuckpt restore's word that it checked every GPU image's stored
 * checksums just before it ran CRIU (its preflight): criu restore run by
 * anything else (podman, CRI-O) gets the check here. */
static int images_verified_before(void)
{
    const char *env = getenv("TCGPU_CRIU_IMAGES_VERIFIED");

    return env && !strcmp(env, "1");
}

/* One process's image: there, a directory, the one the dump wrote, whole. */
static int verify_image(const struct tp_proc *p)
{
    struct image *img = NULL;
    char name[16], path[64], err[1024];
    uint8_t csum[16];
    int fd, r;

    snprintf(name, sizeof(name), "%d", (int)p->vpid);
    if ((fd = openat(rs.gpudir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        r = -errno;
        log_err("the GPU image of process %d (%s), %s/%s: %s", (int)p->vpid, p->comm, TP_GPU_SUBDIR,
                name, errno == ENOENT ? "missing" : "not a directory");
        return r;
    }
    tcgpu_proc_fd_path(fd, NULL, path, sizeof(path));
    r = image_open(&img, path, 0, err, sizeof(err));
    if (r == 0) {
        image_manifest_csum(img, csum);
        if (memcmp(csum, p->image_csum, 16)) {
            snprintf(err, sizeof(err), "not the image this dump wrote (manifest checksum differs)");
            r = -EBADMSG;
        }
    }
    /* The stored checksums: a damaged, truncated or swapped file is refused
     * here, before CRIU restores anything. Decoding every chunk as well
     * (image_verify_all) took a third of a 512 MiB restore on one thread;
     * the raw checksums are checked by the refill, and a chunk that fails
     * them leaves its process suspended (tp_restore_resume), not wrong.
     * gpuckpt restore has checked them just before, on every core
     * (rs.verified); the manifest, which holds every chunk's raw checksum,
     * is still checked here. */
    if (r == 0 && !rs.verified)
        r = image_verify_stored(img, 1, err, sizeof(err));
    if (r == 0)
        r = check_devices(p, img);
    else
        log_err("the GPU image of process %d (%s), %s/%s, is refused: %s", (int)p->vpid, p->comm,
                TP_GPU_SUBDIR, name, err);
    image_close(img);
    close(fd);
    return r;
}

int tp_restore_init(const struct tp_config *c)
{
    int imgdir = criu_get_image_dir(), r;

    rs.cfg = c;
    rs.enabled = 0;
    rs.verified = images_verified_before();
    rs.ndev = -1;
    rs.nremap = 0;
    if ((r = tp_index_read(imgdir, &rs.idx)) == -ENOENT)
        return 0;               /* no tcgpu process in this dump */
    if (r < 0)
        return r;
    leave_inventory();
    if (rs.idx.n == 0)
        return 0;
    if ((rs.gpudir = tp_gpu_dir_open(imgdir, 0)) < 0)
        return rs.gpudir;
    for (int i = 0; i < rs.idx.n; i++)
        if ((r = verify_image(&rs.idx.proc[i])) < 0)
            return r;
    log_info("%d GPU images verified%s", rs.idx.n, rs.verified ? " (their chunks by gpuckpt restore)"
                                                              : "");
    rs.enabled = 1;
    return 0;
}

int tp_restore_resume(pid_t pid)
{
    struct tp_running run;
    struct tp_proc *p;

    if (!rs.enabled || !(p = tp_index_find_vpid(&rs.idx, tp_job_vpid(pid))))
        return -ENOTSUP;
    if (tp_threads_run(pid, p->tids, p->ntids, &run) < 0)
        return 0;               /* logged; the process stays suspended */
    tp_job_give_back(p, pid, rs.gpudir, rs.cfg->timeout_ms, &tp_driver_helper);
    tp_threads_hold(&run);
    return 0;
}

void tp_restore_fini(void)
{
    if (rs.gpudir >= 0)
        close(rs.gpudir);
    rs.gpudir = -1;
    rs.enabled = 0;
}
