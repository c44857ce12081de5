/*
 * config.h - tcgpud's configuration file: INI, parsed by libinih,
 * validated strictly (every error names the file and line).
 *
 *     [daemon]
 *     socket = /run/tcgpud.sock          ; where jobs and gpuckpt reach tcgpud
 *     state_file = /var/lib/tcgpud/state ; jobs and manual suspensions, kept across restarts
 *     admins = gpuadmin                  ; a group whose members may act on every job (root always may)
 *     min_runtime = 30s                  ; never preempt a job that ran less since its (re)start
 *     resume_retry = 5s                  ; after a failed resume, wait this long
 *     metrics = /var/lib/node_exporter/textfile/tcgpud.prom
 *     max_connections_per_user = 16      ; at once, per uid (root and jobs' own requests apart)
 *     max_jobs_per_user = 128            ; registered at once, per uid (root apart)
 *     backfill = yes                     ; jobs that fit start while bigger ones wait (they make way)
 *     http = 127.0.0.1:9466              ; /metrics (and the dashboard) over HTTP; a bare port: loopback
 *     dashboard = yes                    ; the read-only web page at / (default no)
 *
 *     [gpu 0]
 *     capacity = 80G                     ; else the device's memory, as the driver says
 *
 *     [project prod]
 *     priority = 100
 *     reservation = 40G on 0, 20G on 1
 *     members = alice, bob, @ml-team     ; users, @groups, or *
 *     borrow = yes
 *     default_limit = 40G                ; a job's memory limit unless it asks (0: none)
 *     lending_limit = 50%                ; of its reservation others may use (or a size)
 *     borrowing_limit = 40G              ; the most it may use beyond its reservation, per GPU
 *     weight = 2                         ; its share of idle memory among equal-priority borrowers
 *     cohort = ml                        ; projects of a cohort lend to each other first
 *     default_compute = 30%              ; a job's share of the GPU's compute unless it asks
 *
 * Sizes: a number with an optional K, M, G or T (powers of 1024; "KiB",
 * "GB"... accepted alike). Durations: a number with ms, s, m or h (plain: s).
 * See docs/tcgpud.md.
 */
#ifndef TCGPU_TCGPUD_CONFIG_H
#define TCGPU_TCGPUD_CONFIG_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "policy/policy.h"
#include "common/install_dirs.h"
#include "common/units.h"

/* SYSCONFDIR/tcgpud.ini: /etc/tcgpud.ini for --prefix=/usr */
#define TCGPUD_DEFAULT_CONFIG     TCGPU_SYSCONFDIR "/tcgpud.ini"
#define TCGPUD_DEFAULT_SOCKET     "/run/tcgpud.sock"
#define TCGPUD_DEFAULT_STATE      "/var/lib/tcgpud/state"
#define TCGPUD_DEFAULT_MIN_RUNTIME_NS (30ull * 1000000000ull)
#define TCGPUD_DEFAULT_RETRY_NS       (5ull * 1000000000ull)
#define TCGPUD_DEFAULT_CONNS_PER_USER 16
#define TCGPUD_DEFAULT_JOBS_PER_USER  128
#define TCGPUD_MAX_GPUS           64
#define TCGPUD_MAX_PROJECTS       256
#define TCGPUD_MAX_MEMBERS        256
#define TCGPUD_CONFIG_ERR_MAX     4096    /* bytes of error messages kept */

struct tcgpud_member {
    char name[64];
    int is_group;                 /* @name */
    int everyone;                 /* * */
    int line;                     /* where it is given, for warnings */
};

struct tcgpud_project {
    struct pol_project pol;       /* name, priority, reservation, may_borrow, default_limit */
    struct tcgpud_member members[TCGPUD_MAX_MEMBERS];
    int nmembers;
    int line;                     /* of its section, for messages */
    unsigned seen;                /* keys given (bit per key), for duplicate checks */
    int key_line[16];             /* line of each key given (0: not given), for messages */
};

struct tcgpud_config {
    char path[PATH_MAX];
    char socket[108];
    char state_file[PATH_MAX];
    char admins[64];              /* group name, "" for root only */
    int admins_line;
    char metrics[PATH_MAX];       /* "" for none */
    char http_host[64];           /* numeric address to listen on; "" for no HTTP */
    int http_port;                /* 0: any free port (logged) */
    int dashboard;                /* serve the dashboard at / */
    int nerrors;                  /* of the last load or parse */
    uint64_t min_runtime_ns;
    uint64_t resume_retry_ns;
    int max_connections_per_user; /* 1..512 */
    int max_jobs_per_user;        /* 1..100000 */
    int backfill;                 /* [daemon] backfill (policy.h, "Resume") */
    int ngpus;
    struct { int id; uint64_t capacity; int line; } gpus[TCGPUD_MAX_GPUS];
    int nprojects;
    struct tcgpud_project *projects;
};

/* Defaults (no projects, no GPUs). */
void tcgpud_config_defaults(struct tcgpud_config *c);

/*
 * Load and validate the file at path into *c (defaults first; c->path is
 * path even when it cannot be opened). Returns 0,
 * or -errno with "FILE:LINE: message" in err: -ENOENT/-EACCES (cannot
 * open), -EINVAL (anything invalid: every error, one a line, in the order of
 * the file, c->nerrors of them; up to TCGPUD_CONFIG_ERR_MAX bytes, then a
 * line saying more follow). *c holds allocations either way:
 * tcgpud_config_free().
 */
int tcgpud_config_load(struct tcgpud_config *c, const char *path, char *err, size_t errlen);

/* The same from a string; `name` stands for the file name in messages. */
int tcgpud_config_parse(struct tcgpud_config *c, const char *text, const char *name, char *err,
                        size_t errlen);

void tcgpud_config_free(struct tcgpud_config *c);

/*
 * What a valid configuration may still have wrong on this machine (tcgpud
 * --check-config): members, @groups and admins that name no user or group
 * here (the system's user database: getpwnam_r, getgrnam_r). Calls fn with
 * "FILE:LINE: warning: ..." for each, returns how many.
 */
int tcgpud_config_warnings(const struct tcgpud_config *c, void (*fn)(const char *msg, void *arg),
                           void *arg);

/*
 * "[ADDR:]PORT" (http =) into a numeric host and a port: a bare port means
 * 127.0.0.1 (loopback unless asked otherwise); "[::1]:9466" for IPv6;
 * "0.0.0.0:9466" for every interface. 0, or -EINVAL with a message.
 */
int tcgpud_parse_listen(const char *s, char *host, size_t hostlen, int *port, char *err, size_t errlen);

/* The project named `name`, or NULL. */
const struct tcgpud_project *tcgpud_config_project(const struct tcgpud_config *c, const char *name);

/* Whether a user (name, and the names of all its groups) is a member of p. Pure. */
int tcgpud_project_has_member(const struct tcgpud_project *p, const char *user,
                              const char *const *groups, int ngroups);

/* "8G on 0, 4G on 1" -> pol_project reservations. 0 or -EINVAL with a message. */
int tcgpud_parse_reservation(const char *s, struct pol_project *p, char *err, size_t errlen);

#endif
