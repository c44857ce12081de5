/*
 * tree.h - what gpuckpt save/restore share: the save directory's
 * tree manifest, walking a process tree, and running CRIU.
 *
 * A save directory (docs/save-restore.md):
 *
 *     DIR/            mode 0700
 *       tree          the tree manifest (below)
 *       gpu/<pid>/    one tcgpu image per tcgpu process (image-format.md)
 *       criu/         CRIU's images, dump.log (and restore.log after a restore)
 *
 * The tree manifest is text, one record per line, each line in the control
 * protocol's message syntax (ctl/proto.h: a word, then key=value pairs with
 * percent-encoded values), so it is easy to read and hard to misparse:
 *
 *     tcgpu_tree version=1 root=1234 created=1732900000 host=node7 driver=12080 criu_flags=shell-job
 *     device ordinal=0 name=NVIDIA%20H200 total_mem=150754820096 uuid=5f1c...
 *     process pid=1234 ppid=1 uid=1000 comm=train tcgpu=1 image=gpu/1234 image_csum=... socket=/run/...
 *     process pid=1240 ppid=1234 comm=sh tcgpu=0
 *     file path=criu/pages-1.img size=268435456 xxh3=89abcdef01234567
 *     checksum xxh3=0123456789abcdef
 *
 * The last line is the XXH3-64 of every byte before it. Readers refuse any
 * other major version, a missing or wrong checksum, and unknown record words;
 * they ignore keys they do not know (minor additions). `file` records (one
 * per file CRIU wrote, filesums.h) came after the first saves: a save
 * without them was made before, and its CRIU files are not checked.
 */
#ifndef GPUCKPT_TREE_H
#define GPUCKPT_TREE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TREE_VERSION 1
#define TREE_FILE "tree"
#define TREE_MAX_PROCS 1024
#define TREE_MAX_DEVICES 16
#define TREE_MAX_FILES 16384

struct tree_device {
    int ordinal;
    uint64_t total_mem;
    uint8_t uuid[16];
    char name[256];
};

struct tree_proc {
    pid_t pid, ppid;
    uid_t uid;                  /* effective uid (owner of its socket directory) */
    char comm[64];
    int tcgpu;                  /* under tcgpu with a control socket: has a GPU image */
    char image[32];             /* "gpu/<pid>", relative to DIR */
    uint8_t image_csum[16];     /* the GPU image's manifest checksum */
    char socket[PATH_MAX];      /* its control socket path (CRIU restores it there) */
    /* not stored: what save did to it, for the rollback */
    int suspended, released;
};

/* A file of the save whose bytes the tree manifest vouches for (filesums.h). */
struct tree_file {
    char path[128];             /* relative to DIR: "criu/pages-1.img" */
    uint64_t size;
    uint64_t xxh3;
};

struct tree {
    pid_t root;
    long long owner;            /* the user a privileged save was made for (tcgpud), or -1 */
    uint64_t created;           /* seconds since the epoch */
    char host[256];
    int driver;                 /* driver version at save */
    char criu_flags[128];       /* comma-separated: shell-job, tcp-established */
    int ndev;
    struct tree_device dev[TREE_MAX_DEVICES];
    int nproc;
    struct tree_proc proc[TREE_MAX_PROCS];
    int nfiles;
    struct tree_file file[TREE_MAX_FILES];
};

/*
 * Fills t->proc with root and every descendant (children of every thread,
 * breadth first: parents before children), pid, ppid and comm. Returns 0,
 * -ESRCH (root does not exist), -E2BIG (more than TREE_MAX_PROCS).
 */
int tree_walk(struct tree *t, pid_t root);

/* Writes t to DIR/tree (0600, fsynced). 0 or -errno with a message in err. */
int tree_write(const struct tree *t, const char *dir, char *err, size_t len);

/*
 * Reads DIR/tree into *t, checking version and checksum. 0, -ENOENT (no
 * manifest: not a save dir), -EBADMSG (corrupt: err names the file and the
 * problem), -EPROTONOSUPPORT (another major version), or -errno.
 */
int tree_read(struct tree *t, const char *dir, char *err, size_t len);

/* A uid in decimal (0 to 2^32-2), or -1. */
long long tree_parse_uid(const char *s);

/*
 * Every process of t belongs to uid. tree_check_owner: a walked tree, its
 * processes' real, effective, saved and filesystem uids (from /proc).
 * tree_check_saved_owner: a read manifest, its owner (when recorded) and
 * every process's recorded uid. 0, or -EACCES with the first process that is
 * not uid's in err.
 */
int tree_check_owner(const struct tree *t, uid_t uid, char *err, size_t len);
int tree_check_saved_owner(const struct tree *t, uid_t uid, char *err, size_t len);

/* 1 when DIR holds a tree manifest (a save directory rather than one image). */
int tree_is_save_dir(const char *dir);

/* The CRIU binary: $TCGPU_CRIU, else criu on PATH, /usr/local/sbin, /usr/sbin. 0 or -ENOENT. */
int criu_find(char *path, size_t len);

/*
 * Runs CRIU with argv (argv[0] is the binary; NULL-terminated), stdin from
 * /dev/null and its stdout/stderr appended to `log`. Returns its exit status
 * (0 ok), or -errno when it could not be run.
 */
int criu_run(char *const argv[], const char *log);

/*
 * The library CRIU needs preloaded to dump t, in path (PATH_MAX bytes), or
 * "" when it needs none: libtcgpu-criu-rlimits.so (criu_rlimits.c), when t
 * has processes of another user and gpuckpt lacks CAP_SYS_RESOURCE, so that
 * the kernel would refuse CRIU their resource limits. -ENOENT when it is
 * needed and cannot be found (next to gpuckpt, or in the install's
 * libdir/tcgpu).
 */
int criu_dump_preload(const struct tree *t, char *path, size_t len);

/* criu_run with LD_PRELOAD=preload for CRIU ("" or NULL: as criu_run). */
int criu_run_preloaded(char *const argv[], const char *log, const char *preload);

/* CRIU's own reason: the last `n` "Error" lines of its log, joined by "\n  ". */
void criu_log_errors(const char *log, int n, char *out, size_t len);

/*
 * Why CRIU failed, in CRIU's words, for a message: r is criu_run's result
 * (a negative errno: CRIU did not run, and why); else the last `n` Error
 * lines of its log `log`; when it wrote no log (CRIU fails before it opens
 * one: options, privileges, kernel probes), why the log is missing and the
 * last lines CRIU printed instead (criu_run's file `printed`).
 */
void criu_failure(int r, const char *log, const char *printed, int n, char *out, size_t len);

/*
 * tcgpu's CRIU plugin, which does the GPU side of save and restore
 * (docs/save-restore.md): the directory holding tcgpu_plugin.so, for criu -L:
 * $TCGPU_CRIU_PLUGIN_DIR, else the build tree's beside gpuckpt
 * (../../plugins/criu), else the installed one relative to gpuckpt, else
 * the configured one (common/companion.h). 0 or -ENOENT (dir then names
 * the places looked in).
 */
int criu_plugin_find(char *dir, size_t len);

/* The plugin's "Error (tcgpu_plugin): ..." lines of a CRIU log, without that
 * lead, joined by "\n  "; returns how many. */
int criu_plugin_errors(const char *log, char *out, size_t len);

/* The GPU's part of a dump: the sum of the plugin's "off the GPU in S s" lines. */
double criu_plugin_gpu_seconds(const char *log);

/* rm -rf without following symlinks; best effort. */
void tree_remove_all(const char *path);

/* mkdir -p for one level, mode 0700; EEXIST is fine. */
int tree_mkdir(const char *path);

/* Recursively fsync every regular file and directory under path (a save must be durable). */
int tree_fsync_all(const char *path);

/* Exit code for a save/restore failure errno. */
int tree_exit_code(int err);

#endif
