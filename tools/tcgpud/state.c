/* tcgpud's persisted state; see state.h. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "ctl/proto.h"
#include "state.h"

#define HEADER "tcgpud-state"

static void put_job(struct ctl_buf *b, const struct tcgpud_saved_job *j)
{
    ctl_buf_request(b, "job");
    ctl_buf_put_u64(b, "pid", (uint64_t)j->pid);
    ctl_buf_put_u64(b, "start", j->start_ticks);
    ctl_buf_put_u64(b, "uid", (uint64_t)j->uid);
    ctl_buf_put(b, "user", j->user);
    ctl_buf_put(b, "project", j->project);
    ctl_buf_put_i64(b, "priority", j->priority);
    ctl_buf_put_u64(b, "limit", j->limit);
    ctl_buf_put_i64(b, "device", j->device);
    ctl_buf_put_u64(b, "dev_capacity", j->dev_capacity);
    ctl_buf_put_u64(b, "mem", j->mem);
    ctl_buf_put(b, "state", j->state);
    ctl_buf_put(b, "suspended_by", j->suspended_by);
    ctl_buf_put_u64(b, "auto_resume", (uint64_t)j->auto_resume);
    ctl_buf_put_u64(b, "preemptions", j->preemptions);
    ctl_buf_put_u64(b, "run_ns", j->run_ns);
}

static int write_jobs(int fd, const struct tcgpud_saved_job *jobs, size_t n)
{
    struct ctl_buf *b = malloc(sizeof(*b));
    char head[64];
    int r;

    if (!b)
        return -ENOMEM;
    snprintf(head, sizeof(head), "%s %d\n", HEADER, TCGPUD_STATE_VERSION);
    r = fileio_write_all(fd, head, strlen(head));
    for (size_t i = 0; i < n && r == 0; i++) {
        long len;
        put_job(b, &jobs[i]);
        len = ctl_buf_finish(b);
        if (len < 0) {
            r = (int)len;
            break;
        }
        b->data[len] = '\n';
        r = fileio_write_all(fd, b->data, (size_t)len + 1);
    }
    free(b);
    return r;
}

struct jobs_out {
    const struct tcgpud_saved_job *jobs;
    size_t n;
};

static int fill_jobs(int fd, void *arg)
{
    const struct jobs_out *o = arg;

    return write_jobs(fd, o->jobs, o->n);
}

int tcgpud_state_save(const char *path, const struct tcgpud_saved_job *jobs, size_t n, char *err,
                      size_t errlen)
{
    struct jobs_out o = { jobs, n };
    const char *stage = "write";
    int r = fileio_replace(path, 0600, fill_jobs, &o, &stage);

    if (r == -ENAMETOOLONG && !strcmp(stage, "create"))
        snprintf(err, errlen, "%s: path too long", path);
    else if (r && !strcmp(stage, "fsync-dir"))
        snprintf(err, errlen, "fsync of the directory of %s: %s", path, strerror(-r));
    else if (r)
        snprintf(err, errlen, "cannot write %s (%s): %s", path, stage, strerror(-r));
    return r;
}

/* One "job ..." line into *j. 0 or -EBADMSG. */
static int parse_job(const char *line, size_t len, struct ctl_msg *m, struct tcgpud_saved_job *j)
{
    uint64_t pid, start, uid, limit, mem, ar, pre, run, cap = 0;
    int64_t prio, dev;
    const char *user, *proj, *state, *by;

    if (ctl_parse(line, len, m) < 0 || strcmp(m->word, "job"))
        return -EBADMSG;
    user = ctl_get(m, "user");
    proj = ctl_get(m, "project");
    state = ctl_get(m, "state");
    by = ctl_get(m, "suspended_by");
    if (ctl_get_u64(m, "pid", &pid) || ctl_get_u64(m, "start", &start) ||
        ctl_get_u64(m, "uid", &uid) || ctl_get_i64(m, "priority", &prio) ||
        ctl_get_u64(m, "limit", &limit) || ctl_get_i64(m, "device", &dev) ||
        ctl_get_u64(m, "mem", &mem) || ctl_get_u64(m, "auto_resume", &ar) ||
        ctl_get_u64(m, "preemptions", &pre) || ctl_get_u64(m, "run_ns", &run) || !user || !proj ||
        !state || !by || pid == 0 || pid > INT_MAX || uid > UINT32_MAX || prio < INT_MIN ||
        prio > INT_MAX || dev < -1 || dev > 4095)
        return -EBADMSG;
    if (ctl_get(m, "dev_capacity") && ctl_get_u64(m, "dev_capacity", &cap))
        return -EBADMSG;
    memset(j, 0, sizeof(*j));
    j->dev_capacity = cap;
    j->pid = (pid_t)pid;
    j->start_ticks = start;
    j->uid = (uid_t)uid;
    snprintf(j->user, sizeof(j->user), "%s", user);
    snprintf(j->project, sizeof(j->project), "%s", proj);
    j->priority = (int)prio;
    j->limit = limit;
    j->device = (int)dev;
    j->mem = mem;
    snprintf(j->state, sizeof(j->state), "%s", state);
    snprintf(j->suspended_by, sizeof(j->suspended_by), "%s", by);
    j->auto_resume = ar != 0;
    j->preemptions = (unsigned)pre;
    j->run_ns = run;
    return 0;
}

static int parse_lines(FILE *f, const char *path, struct tcgpud_saved_job **jobs, size_t *n,
                       char *err, size_t errlen)
{
    struct ctl_msg *m = malloc(sizeof(*m));
    char *line = NULL;
    size_t cap = 0, alloc = 0;
    ssize_t len;
    int lineno = 0, r = 0, version;

    if (!m)
        return -ENOMEM;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len && line[len - 1] == '\n')
            line[--len] = '\0';
        if (lineno == 1) {
            if (sscanf(line, HEADER " %d", &version) != 1 || version != TCGPUD_STATE_VERSION) {
                snprintf(err, errlen, "%s:1: not a tcgpud state file (version %d)", path,
                         TCGPUD_STATE_VERSION);
                r = -EBADMSG;
                break;
            }
            continue;
        }
        if (len == 0)
            continue;
        if (*n == alloc) {
            alloc = alloc ? alloc * 2 : 16;
            struct tcgpud_saved_job *v = realloc(*jobs, alloc * sizeof(*v));
            if (!v) {
                r = -ENOMEM;
                break;
            }
            *jobs = v;
        }
        if (parse_job(line, (size_t)len, m, &(*jobs)[*n]) < 0) {
            snprintf(err, errlen, "%s:%d: malformed job line", path, lineno);
            r = -EBADMSG;
            break;
        }
        (*n)++;
    }
    if (r == 0 && ferror(f)) {
        r = -EIO;
        snprintf(err, errlen, "%s: read error", path);
    }
    free(line);
    free(m);
    return r;
}

int tcgpud_state_load(const char *path, struct tcgpud_saved_job **jobs, size_t *n, char *err,
                      size_t errlen)
{
    FILE *f = fopen(path, "re");
    int r;

    *jobs = NULL;
    *n = 0;
    if (!f) {
        if (errno == ENOENT)
            return 0;
        r = -errno;
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(-r));
        return r;
    }
    r = parse_lines(f, path, jobs, n, err, errlen);
    fclose(f);
    if (r < 0) {
        free(*jobs);
        *jobs = NULL;
        *n = 0;
    }
    return r;
}

uint64_t tcgpud_proc_start_ticks(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long ticks = 0;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "re");
    if (!f)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: count from the last ')'. */
    p = strrchr(buf, ')');
    if (!p)
        return 0;
    /* fields 3.. follow; starttime is field 22, the 20th after ')' */
    for (int field = 3; field <= 22 && p; field++)
        p = strchr(p + 1, ' ');
    if (!p || sscanf(p + 1, "%llu", &ticks) != 1)
        return 0;
    /* A zombie is gone for our purposes: it holds no GPU memory. */
    char *st = strrchr(buf, ')');
    if (st && st[1] == ' ' && st[2] == 'Z')
        return 0;
    return ticks;
}
