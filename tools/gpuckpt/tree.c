/* tree.c - the tree manifest, the process tree, CRIU; see tree.h. */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctl/client.h"
#include "ctl/proto.h"
#include "ctl/recfile.h"
#include "tree.h"
#include "common/companion.h"
#include "common/fileio.h"
#include "common/hex.h"
#include "common/install_dirs.h"
#include "common/proc.h"

/* ---- the process tree ---------------------------------------------------- */

/* ppid, comm and uid of pid from /proc. */
static int proc_identity(pid_t pid, struct tree_proc *p)
{
    struct tcgpu_proc_stat st;

    memset(p, 0, sizeof(*p));
    p->pid = pid;
    if (tcgpu_proc_stat(pid, &st) < 0)
        return -ESRCH;
    p->ppid = st.ppid;
    tcgpu_proc_comm(pid, 0, p->comm, sizeof(p->comm));
    if (tcgpu_proc_uid(pid, &p->uid) < 0)
        p->uid = 0;
    return 0;
}

long long tree_parse_uid(const char *s)
{
    char *end;
    unsigned long long v;

    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    return errno || *end || v >= UINT32_MAX ? -1 : (long long)v;
}

int tree_check_owner(const struct tree *t, uid_t uid, char *err, size_t len)
{
    for (int i = 0; i < t->nproc; i++) {
        struct tcgpu_proc_status st;
        const uid_t *u = st.uid;
        int found = tcgpu_proc_status(t->proc[i].pid, 0, &st) == 0;

        if (!found || u[0] != uid || u[1] != uid || u[2] != uid || u[3] != uid) {
            snprintf(err, len, "process %d (%s) is not uid %u's (uids %u %u %u %u): only a "
                     "tree of the caller's own processes is saved for it", (int)t->proc[i].pid,
                     t->proc[i].comm, (unsigned)uid, (unsigned)u[0], (unsigned)u[1],
                     (unsigned)u[2], (unsigned)u[3]);
            return -EACCES;
        }
    }
    return 0;
}

int tree_check_saved_owner(const struct tree *t, uid_t uid, char *err, size_t len)
{
    if (t->owner >= 0 && t->owner != (long long)uid) {
        snprintf(err, len, "the save was made for uid %lld, not %u", t->owner, (unsigned)uid);
        return -EACCES;
    }
    for (int i = 0; i < t->nproc; i++)
        if (t->proc[i].uid != uid) {
            snprintf(err, len, "process %d (%s) of the save was uid %u's, not %u's",
                     (int)t->proc[i].pid, t->proc[i].comm, (unsigned)t->proc[i].uid, (unsigned)uid);
            return -EACCES;
        }
    return 0;
}

int tree_walk(struct tree *t, pid_t root)
{
    pid_t pids[TREE_MAX_PROCS];
    int n = tcgpu_proc_tree(root, pids, TREE_MAX_PROCS);

    t->root = root;
    if (n > 0 && proc_identity(root, &t->proc[0]) < 0)
        n = -ESRCH;
    t->nproc = n > 0;
    /* a descendant that exited meanwhile is left out: CRIU will say so if it mattered */
    for (int i = 1; i < n; i++)
        if (proc_identity(pids[i], &t->proc[t->nproc]) == 0)
            t->nproc++;
    return n < 0 ? n : 0;
}

/* ---- the manifest ---------------------------------------------------------- */

/* The manifest's records (its last line, the checksum, is the writer's). */
static int format_tree(const struct tree *t, struct recfile_writer *w)
{
    struct ctl_buf *b = recfile_buf(w);
    char hex[33];
    int r;

    ctl_buf_request(b, "tcgpu_tree");
    ctl_buf_put_u64(b, "version", TREE_VERSION);
    ctl_buf_put_u64(b, "root", (uint64_t)t->root);
    ctl_buf_put_u64(b, "created", t->created);
    ctl_buf_put(b, "host", t->host);
    ctl_buf_put_i64(b, "driver", t->driver);
    ctl_buf_put(b, "criu_flags", t->criu_flags);
    if (t->owner >= 0)
        ctl_buf_put_u64(b, "owner", (uint64_t)t->owner);
    if ((r = recfile_put(w)) < 0)
        return r;
    for (int i = 0; i < t->ndev; i++) {
        ctl_buf_request(b, "device");
        ctl_buf_put_u64(b, "ordinal", (uint64_t)t->dev[i].ordinal);
        ctl_buf_put(b, "name", t->dev[i].name);
        ctl_buf_put_u64(b, "total_mem", t->dev[i].total_mem);
        hex_put16(t->dev[i].uuid, hex);
        ctl_buf_put(b, "uuid", hex);
        if ((r = recfile_put(w)) < 0)
            return r;
    }
    for (int i = 0; i < t->nproc; i++) {
        const struct tree_proc *p = &t->proc[i];
        ctl_buf_request(b, "process");
        ctl_buf_put_u64(b, "pid", (uint64_t)p->pid);
        ctl_buf_put_u64(b, "ppid", (uint64_t)p->ppid);
        ctl_buf_put_u64(b, "uid", (uint64_t)p->uid);
        ctl_buf_put(b, "comm", p->comm);
        ctl_buf_put_u64(b, "tcgpu", (uint64_t)p->tcgpu);
        if (p->tcgpu) {
            ctl_buf_put(b, "image", p->image);
            hex_put16(p->image_csum, hex);
            ctl_buf_put(b, "image_csum", hex);
            ctl_buf_put(b, "socket", p->socket);
        }
        if ((r = recfile_put(w)) < 0)
            return r;
    }
    for (int i = 0; i < t->nfiles; i++) {
        char sum[17];
        snprintf(sum, sizeof(sum), "%016" PRIx64, t->file[i].xxh3);
        ctl_buf_request(b, "file");
        ctl_buf_put(b, "path", t->file[i].path);
        ctl_buf_put_u64(b, "size", t->file[i].size);
        ctl_buf_put(b, "xxh3", sum);
        if ((r = recfile_put(w)) < 0)
            return r;
    }
    return 0;
}

int tree_write(const struct tree *t, const char *dir, char *err, size_t len)
{
    struct recfile_writer w;
    char why[512] = "";
    int fd, r;

    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        r = -errno;
        snprintf(err, len, "cannot write %s/" TREE_FILE ": %s", dir, strerror(errno));
        return r;
    }
    if ((r = recfile_writer_init(&w)) == 0) {
        r = format_tree(t, &w);
        if (r == 0)
            r = recfile_commit(&w, fd, TREE_FILE, why, sizeof(why));
        else
            snprintf(why, sizeof(why), "%s", strerror(-r));
        recfile_writer_free(&w);
    }
    close(fd);
    if (r < 0)
        snprintf(err, len, "%s: %s", dir, why[0] ? why : strerror(-r));
    return r;
}

static int parse_device(struct tree *t, const struct ctl_msg *m)
{
    struct tree_device *d;
    uint64_t v;
    const char *name = ctl_get(m, "name");

    if (t->ndev >= TREE_MAX_DEVICES)
        return -1;
    d = &t->dev[t->ndev];
    if (ctl_get_u64(m, "ordinal", &v) || v > 64 || ctl_get_u64(m, "total_mem", &d->total_mem) || !name ||
        hex_get16(ctl_get(m, "uuid"), d->uuid))
        return -1;
    d->ordinal = (int)v;
    snprintf(d->name, sizeof(d->name), "%s", name);
    t->ndev++;
    return 0;
}

static int parse_process(struct tree *t, const struct ctl_msg *m)
{
    struct tree_proc *p;
    uint64_t ppid, tc, uid;
    const char *comm = ctl_get(m, "comm"), *image = ctl_get(m, "image"), *sock = ctl_get(m, "socket");

    if (t->nproc >= TREE_MAX_PROCS)
        return -1;
    p = &t->proc[t->nproc];
    memset(p, 0, sizeof(*p));
    if (recfile_get_pid(m, "pid", &p->pid) || ctl_get_u64(m, "ppid", &ppid) ||
        ppid > INT32_MAX || ctl_get_u64(m, "tcgpu", &tc) || tc > 1 || !comm)
        return -1;
    p->ppid = (pid_t)ppid;
    /* uid is optional (the first saves lacked it): absent means root */
    if (ctl_get_u64(m, "uid", &uid) == 0 && uid <= UINT32_MAX)
        p->uid = (uid_t)uid;
    p->tcgpu = (int)tc;
    snprintf(p->comm, sizeof(p->comm), "%s", comm);
    if (p->tcgpu) {
        char want[32];
        /* the image must be where save puts it: never a path out of DIR */
        snprintf(want, sizeof(want), "gpu/%d", (int)p->pid);
        if (!image || strcmp(image, want) || hex_get16(ctl_get(m, "image_csum"), p->image_csum) ||
            !sock || sock[0] != '/')
            return -1;
        snprintf(p->image, sizeof(p->image), "%s", want);
        snprintf(p->socket, sizeof(p->socket), "%s", sock);
    }
    t->nproc++;
    return 0;
}

/* A `file` record: a path inside DIR/criu only (never a way out of DIR),
 * its size and checksum. */
static int parse_file(struct tree *t, const struct ctl_msg *m)
{
    const char *path = ctl_get(m, "path"), *sum = ctl_get(m, "xxh3");
    struct tree_file *f;
    char *end;

    if (t->nfiles >= TREE_MAX_FILES || !path || !sum || strlen(sum) != 16)
        return -1;
    f = &t->file[t->nfiles];
    if (strncmp(path, "criu/", 5) || !path[5] || strchr(path + 5, '/') ||
        !strcmp(path + 5, ".") || !strcmp(path + 5, "..") || strlen(path) >= sizeof(f->path) ||
        ctl_get_u64(m, "size", &f->size))
        return -1;
    errno = 0;
    f->xxh3 = strtoull(sum, &end, 16);
    if (errno || *end)
        return -1;
    /* sorted, as written: filesums looks them up by name */
    if (t->nfiles && strcmp(t->file[t->nfiles - 1].path, path) >= 0)
        return -1;
    snprintf(f->path, sizeof(f->path), "%s", path);
    t->nfiles++;
    return 0;
}

static int parse_header(struct tree *t, const struct ctl_msg *m, char *why, size_t len)
{
    uint64_t v, created;
    int64_t drv;
    const char *host = ctl_get(m, "host"), *flags = ctl_get(m, "criu_flags");

    if (strcmp(m->word, "tcgpu_tree") || ctl_get_u64(m, "version", &v)) {
        snprintf(why, len, "not a tcgpu tree manifest");
        return -EBADMSG;
    }
    if (v != TREE_VERSION) {
        snprintf(why, len, "manifest version %" PRIu64 ", this gpuckpt reads version %d", v,
                 TREE_VERSION);
        return -EPROTONOSUPPORT;
    }
    if (recfile_get_pid(m, "root", &t->root) || ctl_get_u64(m, "created", &created) ||
        ctl_get_i64(m, "driver", &drv) || !host || !flags) {
        snprintf(why, len, "header record incomplete");
        return -EBADMSG;
    }
    t->created = created;
    /* owner: only in saves made through tcgpud for a user */
    t->owner = ctl_get(m, "owner") ? tree_parse_uid(ctl_get(m, "owner")) : -1;
    if (ctl_get(m, "owner") && t->owner < 0) {
        snprintf(why, len, "header record: bad owner");
        return -EBADMSG;
    }
    t->driver = (int)drv;
    snprintf(t->host, sizeof(t->host), "%s", host);
    snprintf(t->criu_flags, sizeof(t->criu_flags), "%s", flags);
    return 0;
}

struct read_ctx {
    struct tree *t;
};

static int on_record(const struct ctl_msg *m, int line, void *arg, char *why, size_t len)
{
    struct tree *t = ((struct read_ctx *)arg)->t;
    int r;

    if (line == 1)
        return (r = parse_header(t, m, why, len)) < 0 ? r : 0;
    if (!strcmp(m->word, "device") ? parse_device(t, m) < 0
        : !strcmp(m->word, "process") ? parse_process(t, m) < 0
        : !strcmp(m->word, "file") ? parse_file(t, m) < 0 : 1) {
        snprintf(why, len, "line %d: bad or unknown '%s' record", line, m->word);
        return -EBADMSG;
    }
    return 0;
}

int tree_read(struct tree *t, const char *dir, char *err, size_t len)
{
    struct read_ctx ctx = { .t = t };
    char why[512] = "";
    int fd, r;

    memset(t, 0, offsetof(struct tree, proc));
    t->nproc = 0;
    t->nfiles = 0;
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        r = -errno;
        snprintf(err, len, "%s/" TREE_FILE ": %s", dir, strerror(errno));
        return r;
    }
    /* 4 MiB: far above TREE_MAX_PROCS lines */
    r = recfile_read(fd, TREE_FILE, 1u << 22, on_record, &ctx, why, sizeof(why));
    close(fd);
    if (r == 0 && (t->nproc == 0 || t->proc[0].pid != t->root)) {
        snprintf(why, sizeof(why), TREE_FILE ": no processes, or the first is not the root");
        r = -EBADMSG;
    }
    if (r < 0)
        snprintf(err, len, "%s/%s", dir, why);
    return r;
}

int tree_is_save_dir(const char *dir)
{
    char path[PATH_MAX];
    struct stat st;

    snprintf(path, sizeof(path), "%s/" TREE_FILE, dir);
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---- CRIU ---------------------------------------------------------------------- */

static int executable_file(const char *p)
{
    struct stat st;

    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

int criu_find(char *path, size_t len)
{
    const char *env = getenv("TCGPU_CRIU"), *pathvar = getenv("PATH");
    static const char *const fixed[] = { "/usr/local/sbin/criu", "/usr/sbin/criu", "/sbin/criu" };

    if (env && *env) {
        snprintf(path, len, "%s", env);
        return executable_file(path) ? 0 : -ENOENT;
    }
    if (pathvar) {
        char *copy = strdup(pathvar), *save = NULL;
        for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d; d = strtok_r(NULL, ":", &save)) {
            snprintf(path, len, "%s/criu", d);
            if (executable_file(path)) {
                free(copy);
                return 0;
            }
        }
        free(copy);
    }
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        snprintf(path, len, "%s", fixed[i]);
        if (executable_file(path))
            return 0;
    }
    return -ENOENT;
}

#define RLIMITS_SHIM "libtcgpu-criu-rlimits.so"

/* Does this process have CAP_SYS_RESOURCE (bit 24 of CapEff)? */
static int has_sys_resource(void)
{
    struct tcgpu_proc_status st;

    return tcgpu_proc_status(0, 0, &st) == 0 && (st.cap_eff >> 24) & 1;
}

int criu_dump_preload(const struct tree *t, char *path, size_t len)
{
    /* beside gpuckpt (the build tree), else where it is installed */
    static const char *const dirs[] = { ".", TCGPU_BINDIR_TO_PKGLIBDIR, TCGPU_PKGLIBDIR, NULL };
    int foreign = 0;

    path[0] = '\0';
    for (int i = 0; i < t->nproc; i++)
        foreign |= t->proc[i].uid != geteuid();
    if (!foreign || has_sys_resource())
        return 0;
    if (tcgpu_companion_find(dirs, RLIMITS_SHIM, NULL, path, len) == 0)
        return 0;
    path[0] = '\0';
    return -ENOENT;
}

static int run_criu(char *const argv[], const char *log, const char *preload)
{
    int st, fd;
    pid_t pid;

    fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        if (preload && *preload)
            setenv("LD_PRELOAD", preload, 1);
        execv(argv[0], argv);
        dprintf(2, "gpuckpt: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fd);
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -errno;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

int criu_run(char *const argv[], const char *log)
{
    return run_criu(argv, log, NULL);
}

int criu_run_preloaded(char *const argv[], const char *log, const char *preload)
{
    return run_criu(argv, log, preload);
}

/* CRIU's "Error (file:line): text"; the rlimit line is noise an
 * unprivileged-looking environment always prints. */
static int is_criu_error(const char *line)
{
    return strstr(line, "Error") && !strstr(line, "RLIMIT_NOFILE");
}

static int is_not_empty(const char *line)
{
    return line[0] != '\0';
}

/* The last n (at most 8) lines of a file that `keep` accepts, joined by
 * "\n  ": how many it had, or -errno when unreadable. */
static int last_lines_kept(const char *path, int n, int (*keep)(const char *), char *out, size_t len)
{
    char line[1024], ring[8][512];
    int count = 0;
    FILE *f = fopen(path, "r");

    out[0] = '\0';
    if (!f)
        return -errno;
    if (n > 8)
        n = 8;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!keep(line))
            continue;
        snprintf(ring[count % 8], sizeof(ring[0]), "%.511s", line);
        count++;
    }
    fclose(f);
    for (int i = count > n ? count - n : 0; i < count; i++) {
        size_t l = strlen(out);
        snprintf(out + l, len - l, "%s%s", l ? "\n  " : "", ring[i % 8]);
    }
    return count;
}

void criu_log_errors(const char *log, int n, char *out, size_t len)
{
    int r = last_lines_kept(log, n, is_criu_error, out, len);

    if (r < 0)
        snprintf(out, len, "(no log at %s: %s)", log, strerror(-r));
    else if (!r)
        snprintf(out, len, "(no Error lines in the log)");
}

/* The last n non-empty lines of a file, joined by "\n  "; -errno when unreadable. */
static int last_lines(const char *path, int n, char *out, size_t len)
{
    return last_lines_kept(path, n, is_not_empty, out, len);
}

void criu_failure(int r, const char *log, const char *printed, int n, char *out, size_t len)
{
    char said[4096];
    int e;

    if (r < 0) {
        snprintf(out, len, "CRIU did not run: %s (its output file %s)", strerror(-r), printed);
        return;
    }
    if (access(log, F_OK) == 0) {
        criu_log_errors(log, n, out, len);
        return;
    }
    e = errno;
    if (last_lines(printed, n, said, sizeof(said)) > 0)
        snprintf(out, len, "%s\n  (CRIU wrote no log at %s: %s)", said, log, strerror(e));
    else
        snprintf(out, len, "CRIU wrote no log at %s (%s) and printed nothing", log, strerror(e));
}

static int holds_plugin(const char *dir)
{
    char p[PATH_MAX];
    struct stat st;

    snprintf(p, sizeof(p), "%.4000s/tcgpu_plugin.so", dir);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int criu_plugin_find(char *dir, size_t len)
{
    static const char *const dirs[] = {
        "../../plugins/criu",               /* the build tree: tools/gpuckpt/gpuckpt */
        TCGPU_BINDIR_TO_CRIU_PLUGIN_DIR,    /* installed, wherever the tree lies */
        TCGPU_CRIU_PLUGIN_DIR,
        NULL,
    };
    const char *env = getenv("TCGPU_CRIU_PLUGIN_DIR");
    char *slash;
    int r;

    if (env && *env) {
        snprintf(dir, len, "%s", env);
        return holds_plugin(dir) ? 0 : -ENOENT;
    }
    if ((r = tcgpu_companion_find(dirs, "tcgpu_plugin.so", NULL, dir, len)) == 0 &&
        (slash = strrchr(dir, '/')))
        *slash = '\0';
    return r;
}

int criu_plugin_errors(const char *log, char *out, size_t len)
{
    static const char lead[] = "Error (tcgpu_plugin): ";
    char line[2048];
    FILE *f = fopen(log, "r");
    int count = 0;

    out[0] = '\0';
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f)) {
        char *e = strstr(line, lead);
        size_t l = strlen(out);
        if (!e)
            continue;
        e[strcspn(e, "\n")] = '\0';
        snprintf(out + l, len - l, "%s%s", l ? "\n  " : "", e + sizeof(lead) - 1);
        count++;
    }
    fclose(f);
    return count;
}

double criu_plugin_gpu_seconds(const char *log)
{
    char line[2048];
    FILE *f = fopen(log, "r");
    double sum = 0, s;

    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f)) {
        char *at = strstr(line, "off the GPU in ");
        if (strstr(line, "tcgpu_plugin: ") && at && sscanf(at, "off the GPU in %lf s", &s) == 1)
            sum += s;
    }
    fclose(f);
    return sum;
}

/* ---- files --------------------------------------------------------------------- */

void tree_remove_all(const char *path)
{
    struct stat st;
    DIR *d;
    struct dirent *e;
    char sub[PATH_MAX];

    if (lstat(path, &st) < 0)
        return;
    if (!S_ISDIR(st.st_mode)) {
        unlink(path);
        return;
    }
    if ((d = opendir(path))) {
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
            tree_remove_all(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

int tree_mkdir(const char *path)
{
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int tree_fsync_all(const char *path)
{
    struct stat st;
    DIR *d;
    struct dirent *e;
    char sub[PATH_MAX];
    int r = 0, fd;

    if (lstat(path, &st) < 0)
        return -errno;
    if (S_ISREG(st.st_mode)) {
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            return -errno;
        if (fsync(fd) < 0)
            r = -errno;
        close(fd);
        return r;
    }
    if (!S_ISDIR(st.st_mode))
        return 0;
    if (!(d = opendir(path)))
        return -errno;
    while (r == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        r = tree_fsync_all(sub);
    }
    closedir(d);
    return r ? r : fileio_fsync_dir(path);
}

int tree_exit_code(int err)
{
    switch (err < 0 ? -err : err) {
    case 0: return CTL_EXIT_OK;
    case EBADMSG:
    case EPROTONOSUPPORT: return CTL_EXIT_CORRUPT;
    case EACCES:
    case EPERM: return CTL_EXIT_PERM;
    case ESRCH: return CTL_EXIT_NOPROC;
    case ENOTSUP:
    case EBUSY:
    case EALREADY: return CTL_EXIT_REFUSED;
    case ETIMEDOUT: return CTL_EXIT_TIMEOUT;
    case ENOMEM: return CTL_EXIT_NOROOM;
    default: return CTL_EXIT_FAILED;
    }
}
