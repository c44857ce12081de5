/*
 * check.c - gpuckpt check: is this machine ready for tcgpu? (as `criu
 * check` is for CRIU; docs/cli.md). Each check says ok, warning or FAILED,
 * what it found, and for anything short of ok what to do about it.
 *
 * A failure is something tcgpu cannot work without (the driver, the
 * library, a safe run dir); a warning is something only some commands need
 * (the driver's checkpoint API, CRIU, tcgpud). Exit 0 when nothing failed,
 * 1 otherwise.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "ckptapi/ckptapi.h"
#include "library.h"
#include "tcgpud.h"
#include "tree.h"
#include "util.h"
#include "ctl/client.h"
#include "ctl/daemon_io.h"
#include "ctl/rundir.h"
#include "common/macros.h"
#include "json/json.h"

enum verdict { CHECK_OK, CHECK_WARN, CHECK_FAIL, CHECK_SKIP };

static const char *const verdict_names[] = { "ok", "warning", "failed", "skipped" };

struct check {
    const char *name;
    enum verdict verdict;
    char detail[1024];          /* what was found */
    char fix[512];              /* what to do; "" when ok */
};

static void set(struct check *c, enum verdict v, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void set(struct check *c, enum verdict v, const char *fix, const char *fmt, ...)
{
    va_list ap;

    c->verdict = v;
    snprintf(c->fix, sizeof(c->fix), "%s", fix ? fix : "");
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof(c->detail), fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------------------
 * The checks
 * ------------------------------------------------------------------------- */

static void check_driver(struct check *c, const struct gdrv_probe *p)
{
    if (p->usable)
        set(c, CHECK_OK, NULL, "%s loads, cuInit succeeds, driver version %d.%d", p->library,
            p->version / 1000, p->version % 1000 / 10);
    else
        set(c, CHECK_FAIL,
            "install the NVIDIA driver (it provides libcuda.so.1), or point TCGPU_REAL_LIBCUDA at "
            "the driver library", "%s", p->why);
}

static void check_checkpoint_api(struct check *c, const struct gdrv_probe *p)
{
    if (!p->usable)
        set(c, CHECK_SKIP, NULL, "no driver to ask");
    else if (p->checkpoint_api)
        set(c, CHECK_OK, NULL, "cuCheckpointProcess* present: suspend releases contexts too");
    else
        set(c, CHECK_WARN,
            "a driver r570 or later (CUDA 12.8+) has it; without it suspend frees device memory but "
            "not the context, and save/restore cannot work", "%s", p->why);
}

static void check_library(struct check *c)
{
    char lib[PATH_MAX], err[5 * PATH_MAX];

    if (gpuckpt_find_library(lib, err, sizeof(err)) == 0)
        set(c, CHECK_OK, NULL, "%s (gpuckpt run preloads it)", lib);
    else
        set(c, CHECK_FAIL, "reinstall tcgpu, or set TCGPU_LIB=/path/to/libtcgpu.so", "%s", err);
}

/* criu --version's "Version: 4.1.1" into version (a file, since criu_run writes to one). */
static int criu_version(const char *criu, char *version, size_t len)
{
    char log[] = "/tmp/gpuckpt-check-XXXXXX", line[256];
    char *argv[] = { (char *)criu, "--version", NULL };
    int fd = mkstemp(log), r;
    FILE *f;

    version[0] = '\0';
    if (fd < 0)
        return -errno;
    close(fd);
    r = criu_run(argv, log);
    if ((f = fopen(log, "re"))) {
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "Version: %63s", version) == 1)
                break;
        fclose(f);
    }
    unlink(log);
    return r == 0 && version[0] ? 0 : -EIO;
}

/* `criu check` as root: 0, or its last error line in why. */
static int criu_check(const char *criu, char *why, size_t len)
{
    char log[] = "/tmp/gpuckpt-check-XXXXXX";
    char *argv[] = { (char *)criu, "check", NULL };
    int fd = mkstemp(log), r;

    why[0] = '\0';
    if (fd < 0)
        return -errno;
    close(fd);
    r = criu_run(argv, log);
    if (r != 0)     /* criu check prints its errors: there is no log but this */
        criu_failure(r, log, log, 1, why, len);
    unlink(log);
    return r == 0 ? 0 : -EIO;
}

/* CRIU itself is fine (found): then tcgpu's plugin, which save and restore load into it. */
static void check_criu_plugin(struct check *c, const char *criu_found)
{
    char dir[4096];

    if (criu_plugin_find(dir, sizeof(dir)) < 0)
        set(c, CHECK_WARN, "gpuckpt save and restore need tcgpu's CRIU plugin: reinstall tcgpu "
            "(it is built when CRIU's plugin header is installed: scripts/setup.sh), or set "
            "TCGPU_CRIU_PLUGIN_DIR", "%s; tcgpu's plugin (tcgpu_plugin.so) is not in %s", criu_found,
            dir);
    else
        set(c, CHECK_OK, NULL, "%s; tcgpu's plugin: %s/tcgpu_plugin.so", criu_found, dir);
}

static void check_criu(struct check *c)
{
    char criu[PATH_MAX], version[64], why[1024], found[PATH_MAX + 1024];

    if (criu_find(criu, sizeof(criu)) < 0) {
        set(c, CHECK_WARN, "gpuckpt save and restore need CRIU 4.0 or later: install it (scripts/"
            "setup.sh builds 4.1.1), or set TCGPU_CRIU", "CRIU not found (TCGPU_CRIU, PATH, "
            "/usr/local/sbin, /usr/sbin)");
        return;
    }
    if (criu_version(criu, version, sizeof(version)) < 0) {
        set(c, CHECK_WARN, "check that it is a working CRIU binary", "%s --version failed", criu);
        return;
    }
    if (atoi(version) < 4) {
        set(c, CHECK_WARN, "CRIU 3.x fails on current kernels: install 4.0 or later (scripts/setup.sh "
            "builds 4.1.1)", "%s is version %s", criu, version);
        return;
    }
    if (geteuid() != 0) {
        snprintf(found, sizeof(found), "%s, version %s (run gpuckpt check as root to have CRIU check "
                 "the kernel)", criu, version);
    } else if (criu_check(criu, why, sizeof(why)) < 0) {
        set(c, CHECK_WARN, "CRIU cannot dump processes on this kernel; see `criu check`",
            "%s, version %s: criu check fails: %s", criu, version, why[0] ? why : "(no reason given)");
        return;
    } else {
        snprintf(found, sizeof(found), "%s, version %s; criu check passes", criu, version);
    }
    check_criu_plugin(c, found);
}

static void check_run_dir(struct check *c)
{
    struct tcgpu_rundir_env env = { getenv("TCGPU_RUN_DIR"), getenv("XDG_RUNTIME_DIR") };
    char dir[PATH_MAX], err[PATH_MAX + 256];
    uid_t uid = geteuid();
    int r;

    if (tcgpu_rundir_choose(&env, dir, sizeof(dir), uid) < 0) {
        set(c, CHECK_FAIL, "shorten TCGPU_RUN_DIR or XDG_RUNTIME_DIR",
            "the run dir's path is too long");
        return;
    }
    r = tcgpu_rundir_check(dir, uid, err, sizeof(err));
    if (r == 0)
        set(c, CHECK_OK, NULL, "%s: private to uid %u", dir, (unsigned)uid);
    else if (r == -ENOENT)
        set(c, CHECK_OK, NULL, "%s does not exist yet: the first tcgpu process creates it (mode 0700)",
            dir);
    else
        set(c, CHECK_FAIL,
            "a tcgpu process refuses this directory and has no control socket: make it a directory "
            "of yours with mode 0700 (chmod 700), or remove it, or set TCGPU_RUN_DIR elsewhere",
            "%s", err);
}

static void check_tcgpud(struct check *c)
{
    const char *path = gpuckpt_daemon_socket();
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    struct ucred peer = { 0 };
    socklen_t plen = sizeof(peer);
    char err[512];
    int fd = -1, r;

    if (!req || !rep) {
        set(c, CHECK_SKIP, NULL, "out of memory");
        goto out;
    }
    if (!path[0]) {
        set(c, CHECK_SKIP, NULL, "TCGPU_DAEMON_SOCKET=off: jobs never contact tcgpud");
        goto out;
    }
    if ((fd = tcgpud_connect(path, err, sizeof(err))) < 0) {
        set(c, CHECK_WARN, "only needed to share GPUs between projects: start tcgpud (systemctl "
            "start tcgpud), or set TCGPU_DAEMON_SOCKET to its socket", "%s", err);
        goto out;
    }
    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &plen);
    ctl_buf_request(req, "status");
    r = tcgpud_call(fd, req, rep, 5000, NULL, NULL);
    if (r < 0 || rep->err) {
        set(c, CHECK_FAIL, "restart tcgpud; its log says why it does not answer",
            "%s: %s", path, r < 0 ? strerror(-r) : rep->err_text);
        goto out;
    }
    if (peer.uid != 0)
        set(c, CHECK_WARN, "run tcgpud as root, so that it can suspend every user's jobs",
            "%s: tcgpud %s (pid %d) runs as uid %u, not root; %s jobs", path,
            ctl_get(rep, "version") ? ctl_get(rep, "version") : "?", (int)peer.pid,
            (unsigned)peer.uid, ctl_get(rep, "jobs") ? ctl_get(rep, "jobs") : "?");
    else
        set(c, CHECK_OK, NULL, "%s: tcgpud %s (pid %d), %s jobs, config %s", path,
            ctl_get(rep, "version") ? ctl_get(rep, "version") : "?", (int)peer.pid,
            ctl_get(rep, "jobs") ? ctl_get(rep, "jobs") : "?",
            ctl_get(rep, "config") ? ctl_get(rep, "config") : "?");
out:
    if (fd >= 0)
        close(fd);
    free(req);
    free(rep);
}

/* ---------------------------------------------------------------------------
 * The command
 * ------------------------------------------------------------------------- */

static int print_text(const struct check *v, size_t n, int failed, int warned)
{
    for (size_t i = 0; i < n; i++) {
        printf("%-8s %-15s %s\n", verdict_names[v[i].verdict], v[i].name, v[i].detail);
        if (v[i].fix[0])
            printf("%-8s %-15s fix: %s\n", "", "", v[i].fix);
    }
    if (failed)
        printf("%d check%s failed: tcgpu will not work here until %s fixed\n", failed,
               failed == 1 ? "" : "s", failed == 1 ? "it is" : "they are");
    else if (warned)
        printf("Looks good, with %d warning%s (above)\n", warned, warned == 1 ? "" : "s");
    else
        printf("Looks good.\n");
    return failed ? CTL_EXIT_FAILED : CTL_EXIT_OK;
}

/* {"ok": bool, "checks": [{"name", "result", "detail", "fix"}]} */
static int print_json(const struct check *v, size_t n, int failed)
{
    json_t *a = json_array();

    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_pack("{ss ss so so}", "name", v[i].name, "result",
                                               verdict_names[v[i].verdict], "detail",
                                               tc_json_string(v[i].detail), "fix",
                                               v[i].fix[0] ? tc_json_string(v[i].fix) : json_null())) < 0) {
            json_decref(a);
            a = NULL;
        }
    if (gpuckpt_print_json(json_pack("{sb so}", "ok", !failed, "checks", a)) != CTL_EXIT_OK)
        return CTL_EXIT_FAILED;
    return failed ? CTL_EXIT_FAILED : CTL_EXIT_OK;
}

int gpuckpt_cmd_check(const struct gpuckpt_command *self, int argc, char **argv)
{
    static const struct option longopts[] = {
        GPUCKPT_OUTPUT_LONGOPTS,
        { 0 },
    };
    struct check v[] = {
        { .name = "driver" }, { .name = "checkpoint-api" }, { .name = "library" },
        { .name = "run-dir" }, { .name = "criu" }, { .name = "tcgpud" },
    };
    struct gdrv_probe probe;
    int ch, r, failed = 0, warned = 0;

    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "hjo:", longopts, NULL)) != -1) {
        r = gpuckpt_output_option(self, ch);
        if (r == GPUCKPT_NOT_OUTPUT_OPTION)
            return gpuckpt_option_error(self->name, argc, argv, "hjo:", longopts);
        if (r)
            return r < 0 ? CTL_EXIT_OK : r;
    }
    if (optind != argc)
        return gpuckpt_usage_error(self->name, "no arguments, please");
    gdrv_probe(&probe);
    check_driver(&v[0], &probe);
    check_checkpoint_api(&v[1], &probe);
    check_library(&v[2]);
    check_run_dir(&v[3]);
    check_criu(&v[4]);
    check_tcgpud(&v[5]);
    for (size_t i = 0; i < NELEM(v); i++) {
        failed += v[i].verdict == CHECK_FAIL;
        warned += v[i].verdict == CHECK_WARN;
    }
    return gpuckpt_json() ? print_json(v, NELEM(v), failed) : print_text(v, NELEM(v), failed, warned);
}
