/*
 * index.c - the plugin's index in CRIU's images directory (tcgpu.img):
 * which processes of the dump are tcgpu's, what the dump did to each, and
 * the checksum of each one's GPU image, so that a restore verifies that the
 * images it finds are the ones this dump wrote (docs/kubernetes.md, "What
 * the plugin writes"). A sealed record file (ctl/recfile.h):
 *
 *     tcgpu_plugin version=1 created=1732900000 host=node7
 *     process pid=27657 vpid=1 uid=0 comm=train suspended=1 released=1 image_csum=92f5... tids=2,3,4
 *     checksum xxh3=ae2d5185379265ef
 *
 * Readers refuse another version and unknown records, and ignore keys they
 * do not know.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "ctl/recfile.h"
#include "common/hex.h"

#define INDEX_VERSION 1
#define INDEX_MAX_BYTES (1u << 20)

static void put_tids(struct ctl_buf *b, const struct tp_proc *p)
{
    char s[TP_MAX_TIDS * 12] = "";
    size_t n = 0;

    for (int i = 0; i < p->ntids; i++)
        n += (size_t)snprintf(s + n, sizeof(s) - n, "%s%d", i ? "," : "", (int)p->tids[i]);
    ctl_buf_put(b, "tids", s);
}

static int put_proc(struct recfile_writer *w, const struct tp_proc *p)
{
    struct ctl_buf *b = recfile_buf(w);
    char hex[33];

    ctl_buf_request(b, "process");
    ctl_buf_put_u64(b, "pid", (uint64_t)p->pid);
    ctl_buf_put_u64(b, "vpid", (uint64_t)p->vpid);
    ctl_buf_put_u64(b, "uid", (uint64_t)p->uid);
    ctl_buf_put(b, "comm", p->comm);
    ctl_buf_put_u64(b, "suspended", (uint64_t)p->suspended_by_us);
    ctl_buf_put_u64(b, "released", (uint64_t)p->released_by_us);
    hex_put16(p->image_csum, hex);
    ctl_buf_put(b, "image_csum", hex);
    put_tids(b, p);
    return recfile_put(w);
}

int tp_index_write(int imgdir, const struct tp_index *idx)
{
    struct recfile_writer w;
    char host[256] = "", err[512];
    int r;

    if ((r = recfile_writer_init(&w)) < 0) {
        log_err("cannot write %s: out of memory", TP_INDEX);
        return r;
    }
    gethostname(host, sizeof(host) - 1);
    ctl_buf_request(recfile_buf(&w), "tcgpu_plugin");
    ctl_buf_put_u64(recfile_buf(&w), "version", INDEX_VERSION);
    ctl_buf_put_u64(recfile_buf(&w), "created", (uint64_t)time(NULL));
    ctl_buf_put(recfile_buf(&w), "host", host);
    recfile_put(&w);
    for (int i = 0; i < idx->n; i++)
        put_proc(&w, &idx->proc[i]);
    r = recfile_commit(&w, imgdir, TP_INDEX, err, sizeof(err));
    recfile_writer_free(&w);
    if (r < 0)
        log_err("%s", err);
    return r;
}

static int get_flag(const struct ctl_msg *m, const char *key, int *out)
{
    uint64_t v;

    if (ctl_get_u64(m, key, &v) < 0 || v > 1)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_proc(struct tp_index *idx, const struct ctl_msg *m)
{
    struct tp_proc *p;
    uint64_t uid;
    const char *comm = ctl_get(m, "comm");

    if (idx->n >= TP_MAX_PROCS)
        return -1;
    p = &idx->proc[idx->n];
    memset(p, 0, sizeof(*p));
    if (recfile_get_pid(m, "pid", &p->pid) || recfile_get_pid(m, "vpid", &p->vpid) ||
        ctl_get_u64(m, "uid", &uid) || uid > UINT32_MAX || !comm ||
        get_flag(m, "suspended", &p->suspended_by_us) || get_flag(m, "released", &p->released_by_us) ||
        hex_get16(ctl_get(m, "image_csum"), p->image_csum) ||
        tp_tids_parse(ctl_get(m, "tids"), p->tids, &p->ntids, TP_MAX_TIDS))
        return -1;
    for (int i = 0; i < idx->n; i++)
        if (idx->proc[i].vpid == p->vpid)
            return -1;          /* vpids name the images: one each */
    p->uid = (uid_t)uid;
    snprintf(p->comm, sizeof(p->comm), "%s", comm);
    idx->n++;
    return 0;
}

static int on_record(const struct ctl_msg *m, int line, void *arg, char *why, size_t len)
{
    struct tp_index *idx = arg;
    uint64_t v;

    if (line == 1) {
        if (strcmp(m->word, "tcgpu_plugin") || ctl_get_u64(m, "version", &v) < 0) {
            snprintf(why, len, "not the index of tcgpu's CRIU plugin");
            return -EBADMSG;
        }
        if (v != INDEX_VERSION) {
            snprintf(why, len, "index version %" PRIu64 ", this plugin reads version %d", v,
                     INDEX_VERSION);
            return -EPROTONOSUPPORT;
        }
        return 0;
    }
    if (strcmp(m->word, "process") || parse_proc(idx, m) < 0) {
        snprintf(why, len, "line %d: bad or unknown '%s' record", line, m->word);
        return -EBADMSG;
    }
    return 0;
}

int tp_index_read(int imgdir, struct tp_index *idx)
{
    char err[512];
    int r;

    idx->n = 0;
    r = recfile_read(imgdir, TP_INDEX, INDEX_MAX_BYTES, on_record, idx, err, sizeof(err));
    if (r < 0 && r != -ENOENT)
        log_err("%s", err);
    return r;
}

struct tp_proc *tp_index_find_vpid(struct tp_index *idx, pid_t vpid)
{
    for (int i = 0; i < idx->n; i++)
        if (idx->proc[i].vpid == vpid)
            return &idx->proc[i];
    return NULL;
}
