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
#include "common/macros.h"
#include "common/proc.h"
#include "ctl/proto.h"
#include "state.h"

#define HEADER "tcgpud-state"

_Static_assert(sizeof(pid_t) == sizeof(int32_t) && sizeof(uid_t) == sizeof(uint32_t),
               "the job table reads pid_t as CTL_I32 and uid_t as CTL_U32");

#define JOB_FIELD(member, key, kind, ...) \
    CTL_FIELD(struct tcgpud_saved_job, member, key, kind, .required = 1, __VA_ARGS__)

/* A job's line after its word "job", in this order. Every field is required
 * but dev_capacity, uuid, since, queued, job and compute, which came later. */
static const struct ctl_field_desc job_fields[] = {
    JOB_FIELD(pid, "pid", CTL_I32, .min = 1, .max = INT_MAX),
    JOB_FIELD(start_ticks, "start", CTL_U64),
    JOB_FIELD(uid, "uid", CTL_U32),
    JOB_FIELD(user, "user", CTL_TEXT),
    JOB_FIELD(project, "project", CTL_TEXT),
    JOB_FIELD(priority, "priority", CTL_I32, .min = INT_MIN, .max = INT_MAX),
    JOB_FIELD(limit, "limit", CTL_U64),
    JOB_FIELD(device, "device", CTL_I32, .min = -1, .max = 4095),
    CTL_FIELD(struct tcgpud_saved_job, dev_capacity, "dev_capacity", CTL_U64),
    CTL_FIELD(struct tcgpud_saved_job, uuid, "uuid", CTL_TEXT),
    JOB_FIELD(mem, "mem", CTL_U64),
    JOB_FIELD(state, "state", CTL_TEXT),
    JOB_FIELD(suspended_by, "suspended_by", CTL_TEXT),
    JOB_FIELD(auto_resume, "auto_resume", CTL_FLAG),
    JOB_FIELD(preemptions, "preemptions", CTL_U32),
    JOB_FIELD(run_ns, "run_ns", CTL_U64),
    CTL_FIELD(struct tcgpud_saved_job, since_ns, "since", CTL_U64),
    CTL_FIELD(struct tcgpud_saved_job, queued_ns, "queued", CTL_U64),
    CTL_FIELD(struct tcgpud_saved_job, job, "job", CTL_TEXT),
    CTL_FIELD(struct tcgpud_saved_job, compute, "compute", CTL_U32),
};

static void put_saved_job(struct ctl_buf *b, const struct tcgpud_saved_job *j)
{
    ctl_buf_request(b, "job");
    ctl_put_fields(b, job_fields, NELEM(job_fields), j);
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
        put_saved_job(b, &jobs[i]);
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
    if (ctl_parse(line, len, m) < 0 || strcmp(m->word, "job"))
        return -EBADMSG;
    memset(j, 0, sizeof(*j));
    if (ctl_get_fields(m, job_fields, NELEM(job_fields), j) < 0)
        return -EBADMSG;
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
    struct tcgpu_proc_stat st;

    /* A zombie is gone for our purposes: it holds no GPU memory. */
    if (tcgpu_proc_stat(pid, &st) < 0 || st.state == 'Z')
        return 0;
    return st.start_ticks;
}
