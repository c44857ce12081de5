/*
 * job.c - one tcgpu process, seen from the plugin: requests over its
 * control socket (found in its own root and pid namespace when it lives in
 * a container: ctl/client.h), and giving it back what a dump took.
 *
 * GPU images are written and read by the process itself. It may live in
 * another mount namespace and cannot see CRIU's images directory, so the
 * directory goes with the request as a descriptor and dir= names an entry
 * of it (the control protocol's relative dir=, docs/cli.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "ctl/client.h"
#include "ctl/proto.h"
#include "common/proc.h"

/* tp_job_call's exchange: the reply in *rep (the caller's), its error as
 * the return value with the message in err. */
static int job_request(pid_t pid, const char *cmd, int dirfd, const char *name, int timeout_ms,
                       struct ctl_msg *rep, char *err, size_t len)
{
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_conn c;
    long n;
    int r;

    if (!req) {
        snprintf(err, len, "out of memory");
        return -ENOMEM;
    }
    if ((r = ctl_connect(pid, getenv("TCGPU_RUN_DIR"), &c, err, len)) < 0)
        goto out;
    ctl_buf_request(req, cmd);
    if (name) {
        char shown[PATH_MAX];

        ctl_buf_put(req, "dir", name);
        /* so that its messages name the directory as we know it */
        if (tcgpu_proc_fd_target(dirfd, shown, sizeof(shown)) > 0)
            ctl_buf_put(req, "passed_dir", shown);
        c.pass_fd = dirfd;
    }
    n = ctl_buf_finish(req);
    r = n < 0 ? -EMSGSIZE : ctl_call(&c, req->data, (size_t)n, rep, timeout_ms ? timeout_ms : -1,
                                     NULL, NULL);
    ctl_close(&c);
    if (r == -ETIMEDOUT) {
        snprintf(err, len, "%s: no reply within %d s (it goes on in the process)", cmd,
                 timeout_ms / 1000);
        goto out;
    }
    if (r < 0) {
        snprintf(err, len, "%s: %s", cmd, r == -ECONNRESET ? "the process closed the connection "
                 "without a reply" : strerror(-r));
        goto out;
    }
    if (rep->err) {
        snprintf(err, len, "%s: %s: %s", cmd, rep->err_name, rep->err_text);
        r = rep->err;
    }
out:
    free(req);
    return r;
}

int tp_job_call(pid_t pid, const char *cmd, int dirfd, const char *name, int timeout_ms,
                struct tcgpu_status *st, char *err, size_t len)
{
    struct ctl_msg *rep = calloc(1, sizeof(*rep));   /* no reply: no status, no error */
    int r;

    if (!rep) {
        snprintf(err, len, "out of memory");
        return -ENOMEM;
    }
    r = job_request(pid, cmd, dirfd, name, timeout_ms, rep, err, len);
    if (st && ((r < 0 && !rep->err) || ctl_get_status(rep, st) < 0))
        memset(st, 0, sizeof(*st));
    free(rep);
    return r;
}

int tp_job_service_threads(pid_t pid, pid_t *tids, int *n, int max, int timeout_ms, char *err,
                           size_t len)
{
    struct ctl_msg *rep = malloc(sizeof(*rep));
    const char *list;
    int r;

    if (!rep) {
        snprintf(err, len, "out of memory");
        return -ENOMEM;
    }
    if ((r = job_request(pid, "status", -1, NULL, timeout_ms, rep, err, len)) < 0)
        goto out;
    if (!(list = ctl_get(rep, "service_threads"))) {
        r = -ENOENT;            /* an older libtcgpu.so does not list them */
        goto out;
    }
    if (tp_tids_parse(list, tids, n, max) < 0) {
        snprintf(err, len, "status: bad service_threads '%.64s'", list);
        r = -EBADMSG;
    }
out:
    free(rep);
    return r;
}

pid_t tp_job_vpid(pid_t pid)
{
    struct tcgpu_proc_ns ns;

    return tcgpu_proc_ns(pid, &ns) == 0 ? ns.nspid : pid;
}

/* Where an image is, for the message a person reads: the directory's path here. */
static void image_path(int gpudir, pid_t vpid, char *out, size_t len)
{
    char dir[PATH_MAX];

    if (tcgpu_proc_fd_target(gpudir, dir, sizeof(dir)) <= 0)
        snprintf(dir, sizeof(dir), "?");
    snprintf(out, len, "%s/%d", dir, (int)vpid);
}

int tp_job_give_back(const struct tp_proc *p, pid_t pid, int gpudir, int timeout_ms,
                     const struct tp_driver *drv)
{
    char err[PATH_MAX + 1024], name[16], img[PATH_MAX + 16];
    int r, imgfd;

    image_path(gpudir, p->vpid, img, sizeof(img));
    if (p->released_by_us && (r = drv->reacquire(pid, err, sizeof(err))) < 0) {
        log_err("process %d (%s): cannot take its CUDA context back from the driver: %s; it stays "
                "suspended (retry: gpuckpt resume %d -D %s)", (int)pid, p->comm, err, (int)pid, img);
        return r;
    }
    if (!p->suspended_by_us)
        return 0;
    /* the image itself goes with the request: the process may not be allowed into gpudir */
    snprintf(name, sizeof(name), "%d", (int)p->vpid);
    if ((imgfd = openat(gpudir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        r = -errno;
        snprintf(err, sizeof(err), "its image %s: %s", img, strerror(errno));
    } else {
        r = tp_job_call(pid, "resume", imgfd, ".", timeout_ms, NULL, err, sizeof(err));
        close(imgfd);
    }
    if (r < 0) {
        log_err("process %d (%s): %s; it stays suspended (retry: gpuckpt resume %d -D %s)", (int)pid,
                p->comm, err, (int)pid, img);
        return r;
    }
    log_info("process %d (%s): back on the GPU from %s", (int)pid, p->comm, img);
    return 0;
}
