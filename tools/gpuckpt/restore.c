/*
 * gpuckpt restore -D DIR [-d], and inspect/verify of a save directory
 * (docs/save-restore.md).
 *
 * Restore checks everything it can before CRIU touches the machine: the tree
 * manifest's checksum, every GPU image whole (every chunk's checksum) and
 * belonging to its process, CRIU's images present and each file CRIU wrote
 * of the size and checksum the manifest records (filesums.h), the devices
 * of the same model, the pids free. Then `criu restore -d` with tcgpu's CRIU
 * plugin (plugins/criu), which gives every tcgpu process its context back
 * (driver Restore + Unlock) and has it refill its memory from DIR/gpu/<pid>
 * before CRIU lets the tree run.
 *
 * Without -d gpuckpt stays the tree's parent (a child subreaper: CRIU's
 * restored root is re-parented to it when criu exits) and exits with the
 * root's status, as if the tree had been started by it; with -d it returns
 * once the tree runs.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctl/client.h"
#include "commands.h"
#include "ops.h"
#include "restore.h"
#include "ckptapi/ckptapi.h"
#include "filesums.h"
#include "tree.h"
#include "tcgpud.h"
#include "json/json.h"
#include "util.h"
#include "image/image.h"
#include "common/clock.h"
#include "common/hex.h"
#include "common/pathtrust.h"
#include "common/fdnames.h"
#include "common/proc.h"

/* ---- checks ----------------------------------------------------------------------- */

struct img_summary {
    uint64_t raw, stored;
    size_t allocs, chunks;
};

/*
 * GPU image of process p: opens it, checks that it is the image the
 * manifest names (its manifest checksum, its pid), and with `full` reads and
 * checks every chunk. err names the file and the problem.
 */
static int check_gpu_image(const char *dir, const struct tree_proc *p, int full,
                           struct img_summary *sum, char *err, size_t len)
{
    char path[PATH_MAX], why[512] = "";
    uint8_t csum[16];
    struct image *img = NULL;
    int r;

    snprintf(path, sizeof(path), "%.4000s/%.31s", dir, p->image);
    r = image_open(&img, path, 0, why, sizeof(why));
    if (r < 0) {
        snprintf(err, len, "GPU image of process %d: %s", (int)p->pid, why[0] ? why : strerror(-r));
        return r == -ENOENT ? -EBADMSG : r;
    }
    image_manifest_csum(img, csum);
    if (memcmp(csum, p->image_csum, 16) || image_process_info(img)->pid != (uint32_t)p->pid) {
        snprintf(err, len, "%s is not the image this save made for process %d (manifest checksum "
                 "or pid differ)", path, (int)p->pid);
        image_close(img);
        return -EBADMSG;
    }
    /* The stored checksums (parallel, cheap); the process checks them again
     * and the raw checksums as it decodes (docs/image-format.md). */
    if (full && (r = image_verify_stored(img, 0, why, sizeof(why))) < 0) {
        snprintf(err, len, "%s", why);
        image_close(img);
        return r == -EIO ? -EIO : -EBADMSG;
    }
    if (sum) {
        memset(sum, 0, sizeof(*sum));
        sum->allocs = image_alloc_count(img);
        sum->chunks = image_chunk_count(img);
        for (size_t i = 0; i < sum->chunks; i++) {
            sum->raw += image_chunk_at(img, i)->raw_len;
            sum->stored += image_chunk_at(img, i)->stored_len;
        }
    }
    image_close(img);
    return 0;
}

/* CRIU's images that must be there: inventory, pstree, and a core per process. */
static int check_criu_images(const char *dir, const struct tree *t, uint64_t *bytes, char *err,
                             size_t len)
{
    char path[PATH_MAX];
    struct stat st;

    *bytes = 0;
    for (int i = -2; i < t->nproc; i++) {
        if (i == -2)
            snprintf(path, sizeof(path), "%s/criu/inventory.img", dir);
        else if (i == -1)
            snprintf(path, sizeof(path), "%s/criu/pstree.img", dir);
        else
            snprintf(path, sizeof(path), "%s/criu/core-%d.img", dir, (int)t->proc[i].pid);
        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
            snprintf(err, len, "CRIU image %s is missing or empty", path);
            return -EBADMSG;
        }
    }
    snprintf(path, sizeof(path), "%s/criu", dir);
    /* total size of CRIU's images, for inspect */
    {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char f[PATH_MAX];
            snprintf(f, sizeof(f), "%.3800s/%.255s", path, e->d_name);
            if (strstr(e->d_name, ".img") && stat(f, &st) == 0)
                *bytes += (uint64_t)st.st_size;
        }
        if (d)
            closedir(d);
    }
    return 0;
}

/*
 * The devices now against those of the save: same count (at least), and at
 * each ordinal the same model (name) and memory size. Different UUIDs (another
 * GPU of the same model, another machine) are remapped at Restore.
 */
static int check_devices(const struct tree *t, char *err, size_t len)
{
    struct gdrv_device now[TREE_MAX_DEVICES];
    uint8_t olds[TREE_MAX_DEVICES][16], news[TREE_MAX_DEVICES][16];
    int n = gdrv_devices(now, TREE_MAX_DEVICES, err, len), npairs = 0;

    if (n < 0)
        return -ENODEV;
    for (int i = 0; i < t->ndev; i++) {
        const struct tree_device *d = &t->dev[i];
        if (d->ordinal >= n) {
            snprintf(err, len, "the save used device %d (%s), this machine has %d device(s)",
                     d->ordinal, d->name, n);
            return -ENODEV;
        }
        if (strcmp(now[d->ordinal].name, d->name) || now[d->ordinal].total_mem != d->total_mem) {
            snprintf(err, len, "device %d is '%s' with %" PRIu64 " bytes; the save was made on '%s' "
                     "with %" PRIu64 " bytes: a GPU image only restores onto the same model",
                     d->ordinal, now[d->ordinal].name, now[d->ordinal].total_mem, d->name,
                     d->total_mem);
            return -ENODEV;
        }
        if (memcmp(now[d->ordinal].uuid, d->uuid, 16)) {
            memcpy(olds[npairs], d->uuid, 16);
            memcpy(news[npairs], now[d->ordinal].uuid, 16);
            npairs++;
        }
    }
    gdrv_set_remap((const uint8_t(*)[16])olds, (const uint8_t(*)[16])news, npairs);
    return 0;
}

/* Every pid of the tree must be free: CRIU restores processes with their pids. */
static int check_pids_free(const struct tree *t, char *err, size_t len)
{
    size_t used = 0;

    err[0] = '\0';
    for (int i = 0; i < t->nproc; i++) {
        char comm[64] = "?";
        if (tcgpu_proc_pid_free(t->proc[i].pid))
            continue;
        tcgpu_proc_comm(t->proc[i].pid, 0, comm, sizeof(comm));
        used = strlen(err);
        snprintf(err + used, len - used, "%spid %d (%s) is in use by %s", used ? "; " : "",
                 (int)t->proc[i].pid, t->proc[i].comm, comm);
    }
    if (!err[0])
        return 0;
    used = strlen(err);
    snprintf(err + used, len - used, ": CRIU restores processes with their pids (is the saved "
             "tree still running?)");
    return -EBUSY;
}

/* Manifest, every GPU image whole, CRIU's images there and each of its files intact. */
static int verify_save_dir(const char *dir, struct tree *t, char *err, size_t len)
{
    uint64_t criu_bytes;
    int r;

    if ((r = tree_read(t, dir, err, len)) < 0)
        return r;
    for (int i = 0; i < t->nproc; i++)
        if (t->proc[i].tcgpu && (r = check_gpu_image(dir, &t->proc[i], 1, NULL, err, len)) < 0)
            return r;
    if ((r = check_criu_images(dir, t, &criu_bytes, err, len)) < 0)
        return r;
    return filesums_check(t, dir, err, len);
}

/* ---- restore ---------------------------------------------------------------------- */

/*
 * The control socket's directory must exist for CRIU to bind the socket
 * again (after a reboot /run/user/UID/tcgpu is gone). Made as the process's
 * run dir would be: 0700, owned by its user (tcgpu refuses anything else).
 */
static void prepare_socket_dirs(const struct tree *t)
{
    for (int i = 0; i < t->nproc; i++) {
        char d[PATH_MAX], *slash;
        if (!t->proc[i].tcgpu)
            continue;
        snprintf(d, sizeof(d), "%s", t->proc[i].socket);
        if ((slash = strrchr(d, '/')) && slash != d) {
            *slash = '\0';
            if (mkdir(d, 0700) == 0 && chown(d, t->proc[i].uid, (gid_t)-1) < 0)
                gpuckpt_error("restore: cannot give %s to uid %u: %s", d,
                              (unsigned)t->proc[i].uid, strerror(errno));
        }
    }
}

static int criu_restore(const char *dir, const struct tree *t, char *err, size_t len)
{
    char imgdir[PATH_MAX], log[PATH_MAX], why[4096], gpudir[PATH_MAX];
    static char plugins[PATH_MAX];
    char *argv[20];
    int n = 0, r;

    if (criu_plugin_find(plugins, sizeof(plugins)) < 0) {
        snprintf(err, len, "tcgpu's CRIU plugin (tcgpu_plugin.so) is not in %.3000s: it is built "
                 "when CRIU's plugin header is installed (scripts/setup.sh); TCGPU_CRIU_PLUGIN_DIR "
                 "names another place", plugins);
        return -ENOENT;
    }

    snprintf(imgdir, sizeof(imgdir), "%.4000s/criu", dir);
    argv[n++] = NULL;           /* the binary, filled by the caller's find */
    argv[n++] = "restore";
    argv[n++] = "-d";
    argv[n++] = "-D";
    argv[n++] = imgdir;
    argv[n++] = "-o";
    argv[n++] = "restore.log";
    argv[n++] = "-v4";
    argv[n++] = "-L";
    argv[n++] = plugins;
    argv[n++] = "--file-locks";
    if (strstr(t->criu_flags, "shell-job"))
        argv[n++] = "--shell-job";
    if (strstr(t->criu_flags, "tcp-established"))
        argv[n++] = "--tcp-established";
    argv[n] = NULL;
    {
        static char criu[PATH_MAX];
        if (criu_find(criu, sizeof(criu)) < 0) {
            snprintf(err, len, "CRIU not found (set TCGPU_CRIU, or put criu on PATH)");
            return -ENOENT;
        }
        argv[0] = criu;
    }
    snprintf(log, sizeof(log), "%.4000s/criu/restore.out", dir);
    snprintf(gpudir, sizeof(gpudir), "%.4000s/gpu", dir);
    setenv("TCGPU_CRIU_GPU_DIR", gpudir, 1);
    /* the preflight checked every chunk's stored checksum on every core:
     * the plugin, on CRIU's one thread, need not read them all again */
    setenv("TCGPU_CRIU_IMAGES_VERIFIED", "1", 1);
    r = criu_run(argv, log);
    unsetenv("TCGPU_CRIU_GPU_DIR");
    unsetenv("TCGPU_CRIU_IMAGES_VERIFIED");
    if (r == 0)
        return 0;
    {
        char printed[PATH_MAX];
        snprintf(printed, sizeof(printed), "%.4000s/criu/restore.out", dir);
        snprintf(log, sizeof(log), "%.4000s/criu/restore.log", dir);
        if (r < 0 || criu_plugin_errors(log, why, sizeof(why)) == 0)
            criu_failure(r, log, printed, 3, why, sizeof(why));
    }
    snprintf(err, len, "criu restore from %.4000s failed (exit %d):\n  %.2000s\n  (CRIU's log: %.4000s)", imgdir,
             r, why, log);
    return -EIO;
}

/*
 * A restored process that does not answer on its control socket, but whose
 * GPU came back, may have run on to its end: tcgpu removes the socket on
 * the way out, a moment before the process is gone (a suspended one always
 * answers). Whether it is gone within a second.
 */
static int ended_meanwhile(pid_t pid)
{
    for (int i = 0; i < 50 && tcgpu_proc_live(pid); i++)
        usleep(20000);
    return !tcgpu_proc_live(pid);
}

/*
 * Every restored tcgpu process should be running: the plugin gave it its GPU
 * back inside the restore. One that is not (no room on the device now) stays
 * suspended, safely; the plugin said why in CRIU's log. Returns the worst
 * exit code; *gpu_secs: the longest time a process took to be back on the
 * GPU (its context and memory, inside CRIU's restore).
 */
static int check_resumed(const char *dir, const struct tree *t, double *gpu_secs)
{
    char log[PATH_MAX], why[4096];
    int worst = CTL_EXIT_OK, said = 0, r;

    *gpu_secs = 0;
    snprintf(log, sizeof(log), "%.4000s/criu/restore.log", dir);
    for (int i = 0; i < t->nproc; i++) {
        const struct tree_proc *p = &t->proc[i];
        struct tcgpu_status st;
        int state = GDRV_NONE;

        if (!p->tcgpu || !tcgpu_proc_live(p->pid))
            continue;           /* not ours, or it ran on and has ended already */
        r = gpuckpt_call("status", p->pid, NULL, &st);
        if (r == CTL_EXIT_OK && st.state == TCGPU_STATE_RUNNING && st.last_op == TCGPU_OP_RESUME &&
            (double)st.last_total_ns / 1e9 > *gpu_secs)
            *gpu_secs = (double)st.last_total_ns / 1e9;   /* the processes refill side by side */
        if (r == CTL_EXIT_OK ? st.state == TCGPU_STATE_RUNNING : ended_meanwhile(p->pid))
            continue;
        if (!said++ && criu_plugin_errors(log, why, sizeof(why)) > 0)
            gpuckpt_error("restore: %s", why);
        gdrv_get_state(p->pid, &state, NULL, 0);
        gpuckpt_error("restore: process %d (%s) stays suspended (retry: gpuckpt resume %d -D "
                      "%.3000s/%.31s)", (int)p->pid, p->comm, (int)p->pid, dir, p->image);
        /* still checkpointed by the driver: its context found no room */
        worst = state == GDRV_CHECKPOINTED && worst != CTL_EXIT_FAILED ? CTL_EXIT_NOROOM
                                                                       : CTL_EXIT_FAILED;
    }
    return worst;
}

/* Waits for the root (re-parented to us) and returns its status as an exit code. */
static int wait_root(pid_t root)
{
    int st;
    pid_t w;

    for (;;) {
        w = waitpid(-1, &st, 0);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            gpuckpt_error("restore: cannot wait for process %d: %s", (int)root, strerror(errno));
            return CTL_EXIT_FAILED;
        }
        if (w != root)
            continue;           /* an orphan of the tree, re-parented to us: reaped */
        if (WIFEXITED(st))
            return WEXITSTATUS(st);
        return 128 + WTERMSIG(st);
    }
}

static int parse_restore_args(const struct gpuckpt_command *self, int argc, char **argv,
                              char *dir, size_t len, int *detach, long long *owner)
{
    enum { OPT_OWNER = 1000 };
    static const struct option longopts[] = {
        { "dir", required_argument, NULL, 'D' },
        { "detach", no_argument, NULL, 'd' },
        { "owner", required_argument, NULL, OPT_OWNER },
        { "json", no_argument, NULL, 'j' },
        { "output", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *d = NULL;
    int ch;

    *detach = 0;
    *owner = -1;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "hdD:o:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h': gpuckpt_command_help(self); return -1;
        case 'D': d = optarg; break;
        case 'd': *detach = 1; break;
        case OPT_OWNER:
            if ((*owner = tree_parse_uid(optarg)) < 0)
                return gpuckpt_usage_error("restore", "--owner takes a uid");
            break;
        case 'j': gpuckpt_set_json(); break;
        case 'o':
            if ((ch = gpuckpt_set_format("restore", optarg)) != 0)
                return ch;
            break;
        default: return gpuckpt_option_error("restore", argc, argv, "hdD:o:", longopts);
        }
    }
    if (optind != argc)
        return gpuckpt_usage_error("restore", "no arguments besides -D DIR and -d");
    if (!d)
        return gpuckpt_usage_error("restore", "-D DIR is required");
    if (gpuckpt_absolute_dir(d, dir, len) < 0)
        return gpuckpt_usage_error("restore", "bad directory");
    return 0;
}

/* Everything before CRIU runs: nothing is touched if this fails. With an
 * owner (tcgpud, for that user), the save must be that user's alone. */
static int preflight(const char *dir, struct tree *t, long long owner, char *err, size_t len)
{
    int r, ntc = 0;

    if ((r = verify_save_dir(dir, t, err, len)) < 0)
        return r;
    if (owner >= 0 && (r = tree_check_saved_owner(t, (uid_t)owner, err, len)) < 0)
        return r;
    for (int i = 0; i < t->nproc; i++)
        ntc += t->proc[i].tcgpu;
    if (ntc && !gdrv_available(err, len))
        return -ENODEV;
    if (ntc && (r = check_devices(t, err, len)) < 0)
        return r;
    return check_pids_free(t, err, len);
}

/*
 * A restore for another user (--owner: tcgpud runs us for them): the save
 * is opened once, its parent walked from "/" for the user (pathtrust.h),
 * and must be what only gpuckpt save makes, a directory of root's that
 * nobody else may write; everything after reads it through that
 * descriptor, which CRIU inherits (/proc/self/fd/N), so that swapping it,
 * or a directory above it, for another save after the checks (another
 * user's, whose processes CRIU would bring back as theirs) changes nothing.
 * *at is dir for root's own restore. Returns the descriptor (or -1 for
 * root's own), or -errno with err set.
 */
static int reach_save(const char *dir, long long owner, char *at, size_t atlen, char *err,
                      size_t len)
{
    char leaf[NAME_MAX + 1], why[512];
    struct stat st;
    int pfd, fd;

    snprintf(at, atlen, "%s", dir);
    if (owner < 0)
        return -1;
    pfd = pathtrust_open_parent(dir, (uid_t)owner, leaf, sizeof(leaf), why, sizeof(why));
    if (pfd < 0) {
        snprintf(err, len, "%s", why);
        return pfd == -EPERM ? -EACCES : pfd;
    }
    /* not O_CLOEXEC: CRIU reads its images through it */
    fd = openat(pfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    close(pfd);
    if (fd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
        snprintf(err, len, "%s is not a save made through tcgpud (a symbolic link, or not a "
                 "directory)", dir);
        return -EACCES;
    }
    if (fd < 0) {
        int e = errno;
        snprintf(err, len, "%s: %s", dir, strerror(e));
        return -e;
    }
    if (fstat(fd, &st) < 0 || st.st_uid != 0 || (st.st_mode & 066)) {
        close(fd);
        snprintf(err, len, "%s is not a save made through tcgpud (a directory of root that only "
                 "root may read and write)", dir);
        return -EACCES;
    }
    if (tcgpu_proc_fd_path(fd, NULL, at, atlen) < 0) {
        close(fd);
        snprintf(err, len, "%s: %s", dir, strerror(ENAMETOOLONG));
        return -ENAMETOOLONG;
    }
    return fd;
}

/* err with the descriptor's path (at) named as the user named it (dir). */
static void name_as_user(char *err, size_t len, const char *at, const char *dir)
{
    tcgpu_fdnames_show(err, len, at, dir);
}

int gpuckpt_cmd_restore(const struct gpuckpt_command *self, int argc, char **argv)
{
    struct tree *t = calloc(1, sizeof(*t));
    char dir[PATH_MAX], at[PATH_MAX], err[16384];
    uint64_t t0 = now_ns(), t_checked, t_criu;
    long long owner;
    double secs, gpu_secs;
    int detach, r, rc, savefd = -1;

    if (!t)
        return CTL_EXIT_FAILED;
    if ((r = parse_restore_args(self, argc, argv, dir, sizeof(dir), &detach, &owner)) != 0) {
        free(t);
        return r < 0 ? CTL_EXIT_OK : r;
    }
    if (geteuid() != 0) {
        /* CRIU needs root: tcgpud does it for a user's own save */
        free(t);
        return gpuckpt_tcgpud_privileged("restore", 0, dir,
                                         detach ? (const char *[]){ "detach", NULL } : NULL,
                                         "CRIU restores a process tree only as root");
    }
    if ((savefd = reach_save(dir, owner, at, sizeof(at), err, sizeof(err))) < -1 ||
        (r = preflight(at, t, owner, err, sizeof(err))) < 0) {
        r = savefd < -1 ? savefd : r;
        name_as_user(err, sizeof(err), at, dir);
        gpuckpt_error("restore %s: %s", dir, err);
        rc = r == -ENODEV ? CTL_EXIT_FAILED : tree_exit_code(r);
        goto out;
    }
    t_checked = now_ns();
    prepare_socket_dirs(t);
    /* without -d the root comes back to us when criu exits */
    if (!detach && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        detach = 1;
    if ((r = criu_restore(at, t, err, sizeof(err))) < 0) {
        name_as_user(err, sizeof(err), at, dir);
        gpuckpt_error("restore %s: %s", dir, err);
        rc = CTL_EXIT_FAILED;
        goto out;
    }
    t_criu = now_ns();
    r = check_resumed(at, t, &gpu_secs);
    secs = (double)(now_ns() - t0) / 1e9;
    if (gpuckpt_json())
        /* printed now, before the wait: the tree runs */
        gpuckpt_print_json(json_pack("{sb sI so si sf sb sb s{sf sf sf}}", "ok", r == CTL_EXIT_OK,
                                     "root", (json_int_t)t->root, "dir", tc_json_string(dir),
                                     "processes", t->nproc, "seconds", secs, "detached", detach,
                                     "all_resumed", r == CTL_EXIT_OK, "phase_seconds",
                                     "checks", (double)(t_checked - t0) / 1e9,
                                     "criu", (double)(t_criu - t_checked) / 1e9, "gpu", gpu_secs));
    else
        fprintf(detach ? stdout : stderr, "restored the tree under %d (%d process%s) from %s in "
                "%.2f s (checks %.2f s, CRIU restore %.2f s, of which GPU back %.2f s)%s\n",
                (int)t->root, t->nproc, t->nproc == 1 ? "" : "es", dir, secs,
                (double)(t_checked - t0) / 1e9, (double)(t_criu - t_checked) / 1e9, gpu_secs,
                r == CTL_EXIT_OK ? "" : " (some processes stay suspended: above)");
    fflush(NULL);
    if (savefd >= 0) {
        close(savefd);          /* the tree runs: nothing more is read from the save */
        savefd = -1;
    }
    if (!detach && r == CTL_EXIT_OK)
        r = wait_root(t->root);
    rc = r;
out:
    if (savefd >= 0)
        close(savefd);
    free(t);
    return rc;
}

/* ---- inspect and verify of a save directory ----------------------------------------- */

static void fmt_size(uint64_t b, char *out, size_t len)
{
    if (b >= (1ull << 30))
        snprintf(out, len, "%.2f GiB", (double)b / (1 << 30));
    else if (b >= (1ull << 20))
        snprintf(out, len, "%.1f MiB", (double)b / (1 << 20));
    else
        snprintf(out, len, "%.1f KiB", (double)b / 1024);
}

static void inspect_human(const char *dir, const struct tree *t, const struct img_summary *s,
                          const int *ok, uint64_t criu_bytes, int criu_ok)
{
    char a[32], b[32], hex[33];

    printf("save %s: tree under %d, %d process%s, saved %" PRIu64 " on %s, driver %d, CRIU flags %s\n",
           dir, (int)t->root, t->nproc, t->nproc == 1 ? "" : "es", t->created, t->host, t->driver,
           t->criu_flags[0] ? t->criu_flags : "-");
    for (int i = 0; i < t->ndev; i++) {
        hex_put16(t->dev[i].uuid, hex);
        fmt_size(t->dev[i].total_mem, a, sizeof(a));
        printf("device %d  %s, %s, uuid %s\n", t->dev[i].ordinal, t->dev[i].name, a, hex);
    }
    for (int i = 0; i < t->nproc; i++) {
        const struct tree_proc *p = &t->proc[i];
        printf("process %-7d ppid %-7d %-16s ", (int)p->pid, (int)p->ppid, p->comm);
        if (!p->tcgpu) {
            printf("no GPU (CRIU only)\n");
            continue;
        }
        if (!ok[i]) {
            printf("tcgpu, image %s: DAMAGED\n", p->image);
            continue;
        }
        fmt_size(s[i].raw, a, sizeof(a));
        fmt_size(s[i].stored, b, sizeof(b));
        printf("tcgpu, image %s: %zu allocations, %s -> %s (%.2fx)\n", p->image, s[i].allocs, a, b,
               s[i].stored ? (double)s[i].raw / (double)s[i].stored : 0.0);
    }
    fmt_size(criu_bytes, a, sizeof(a));
    printf("criu images: %s (%s)\n", criu_ok ? "present" : "MISSING", a);
}

/* The inspect object of a save directory (docs/cli.md, "JSON output"). */
static int inspect_json(const char *dir, const struct tree *t, const struct img_summary *s,
                        const int *ok, uint64_t criu_bytes, int criu_ok)
{
    json_t *devs = json_array(), *procs = json_array();
    char hex[33];

    for (int i = 0; devs && i < t->ndev; i++) {
        hex_put16(t->dev[i].uuid, hex);
        if (json_array_append_new(devs, json_pack("{si so sI ss}", "ordinal", t->dev[i].ordinal,
                                                  "name", tc_json_string(t->dev[i].name), "total_mem",
                                                  (json_int_t)t->dev[i].total_mem, "uuid", hex)) < 0) {
            json_decref(devs);
            devs = NULL;
        }
    }
    for (int i = 0; procs && i < t->nproc; i++) {
        const struct tree_proc *p = &t->proc[i];
        json_t *e = json_pack("{sI sI so sb}", "pid", (json_int_t)p->pid, "ppid", (json_int_t)p->ppid,
                              "comm", tc_json_string(p->comm), "tcgpu", p->tcgpu);
        if (e && p->tcgpu && (tc_json_set_string(e, "image", p->image) < 0 ||
                              tc_json_set_bool(e, "image_ok", ok[i]) < 0 ||
                              tc_json_set_uint(e, "allocations", s[i].allocs) < 0 ||
                              tc_json_set_uint(e, "raw_bytes", s[i].raw) < 0 ||
                              tc_json_set_uint(e, "stored_bytes", s[i].stored) < 0)) {
            json_decref(e);
            e = NULL;
        }
        if (json_array_append_new(procs, e) < 0) {
            json_decref(procs);
            procs = NULL;
        }
    }
    return gpuckpt_print_json(json_pack("{sb so ss sI sI so si so so so sb sI}", "ok", 1,
                                        "dir", tc_json_string(dir), "kind", "save",
                                        "root", (json_int_t)t->root, "created", (json_int_t)t->created,
                                        "host", tc_json_string(t->host), "driver", t->driver,
                                        "criu_flags", tc_json_string(t->criu_flags),
                                        "devices", devs, "processes", procs, "criu_images", criu_ok,
                                        "criu_bytes", (json_int_t)criu_bytes));
}

int gpuckpt_tree_inspect(const char *dir)
{
    struct tree *t = calloc(1, sizeof(*t));
    struct img_summary *s = calloc(TREE_MAX_PROCS, sizeof(*s));
    int *ok = calloc(TREE_MAX_PROCS, sizeof(int));
    char err[2048];
    uint64_t criu_bytes = 0;
    int r, criu_ok, bad = 0;

    if (!t || !s || !ok) {
        r = CTL_EXIT_FAILED;
        goto out;
    }
    if ((r = tree_read(t, dir, err, sizeof(err))) < 0) {
        gpuckpt_error("inspect %s: %s", dir, err);
        r = tree_exit_code(r);
        goto out;
    }
    for (int i = 0; i < t->nproc; i++) {
        if (!t->proc[i].tcgpu)
            continue;
        ok[i] = check_gpu_image(dir, &t->proc[i], 0, &s[i], err, sizeof(err)) == 0;
        if (!ok[i]) {
            gpuckpt_error("inspect %s: warning: %s", dir, err);
            bad = 1;
        }
    }
    criu_ok = check_criu_images(dir, t, &criu_bytes, err, sizeof(err)) == 0;
    if (!criu_ok) {
        gpuckpt_error("inspect %s: warning: %s", dir, err);
        bad = 1;
    }
    r = CTL_EXIT_OK;
    if (gpuckpt_json())
        r = inspect_json(dir, t, s, ok, criu_bytes, criu_ok);
    else
        inspect_human(dir, t, s, ok, criu_bytes, criu_ok);
    if (bad)
        r = CTL_EXIT_CORRUPT;
out:
    free(t);
    free(s);
    free(ok);
    return r;
}

int gpuckpt_tree_verify(const char *dir)
{
    struct tree *t = calloc(1, sizeof(*t));
    char err[2048];
    int r, ntc = 0;

    if (!t)
        return CTL_EXIT_FAILED;
    r = verify_save_dir(dir, t, err, sizeof(err));
    if (r < 0) {
        gpuckpt_error("verify %s: %s", dir, err);
        free(t);
        return tree_exit_code(r);
    }
    for (int i = 0; i < t->nproc; i++)
        ntc += t->proc[i].tcgpu;
    r = CTL_EXIT_OK;
    if (gpuckpt_json())
        r = gpuckpt_print_json(json_pack("{sb so ss si si sb si}", "ok", 1, "dir", tc_json_string(dir),
                                         "kind", "save", "processes", t->nproc, "gpu_images", ntc,
                                         "criu_images", 1, "criu_files", t->nfiles));
    else
        printf("%s: ok (save of %d processes, %d GPU images verified, %d files of CRIU's checked)\n",
               dir, t->nproc, ntc, t->nfiles);
    free(t);
    return r;
}
