/*
 * tcgpud's configuration (tools/tcgpud/config.c): the shipped example parses
 * to what it says; every kind of mistake is refused with the right line.
 * And its state file (tools/tcgpud/state.c): every field of a job comes back
 * as it was saved, and a malformed line is refused with its number.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tcgpud/config.h"
#include "tcgpud/state.h"
#include "../common/check.h"

#define GiB (1ull << 30)

static int test_example(void)
{
    const char *src = getenv("TCGPU_SOURCE_ROOT");
    char path[4096], err[512];
    struct tcgpud_config c;
    const struct tcgpud_project *p;
    const char *groups[] = { "users", "ml-interns" };

    REQUIRE(src != NULL, "TCGPU_SOURCE_ROOT not set (run through meson test)");
    snprintf(path, sizeof(path), "%s/examples/tcgpud.ini", src);
    REQUIRE(tcgpud_config_load(&c, path, err, sizeof(err)) == 0, "%s", err);
    REQUIRE(!strcmp(c.socket, "/run/tcgpud.sock") && !strcmp(c.admins, "gpuadmin"), "daemon keys");
    REQUIRE(c.min_runtime_ns == 30000000000ull && c.resume_retry_ns == 5000000000ull, "durations");
    REQUIRE(c.max_connections_per_user == 16 && c.max_jobs_per_user == 128, "limits");
    REQUIRE(c.ngpus == 2 && c.gpus[1].id == 1 && c.gpus[1].capacity == 80 * GiB, "gpus");
    REQUIRE(c.nprojects == 4, "projects: %d", c.nprojects);
    REQUIRE(c.backfill == 1, "backfill");
    p = tcgpud_config_project(&c, "prod");
    REQUIRE(p && (p->pol.quota_flags & POL_Q_LENDING_LIMIT) && p->pol.lend_pct == 75 &&
            pol_project_lendable(&p->pol, 0) == 30 * GiB && p->pol.compute == 200,
            "prod: lends 75%% of 40G, 20%% compute");
    p = tcgpud_config_project(&c, "vision");
    REQUIRE(p && !strcmp(p->pol.cohort, "ml") && p->pol.weight == 0, "vision in cohort ml");
    p = tcgpud_config_project(&c, "research");
    REQUIRE(p && p->pol.priority == 50 && p->pol.nreserve == 2 && p->pol.reserve[1].device == 1 &&
          p->pol.reserve[1].bytes == 20 * GiB && p->pol.default_limit == 24 * GiB, "research");
    REQUIRE(p->nmembers == 4, "members over two lines: %d", p->nmembers);
    REQUIRE(!strcmp(p->pol.cohort, "ml") && p->pol.weight == 2, "research: cohort ml, weight 2");
    REQUIRE(tcgpud_project_has_member(p, "carol", NULL, 0), "carol");
    REQUIRE(tcgpud_project_has_member(p, "zed", groups, 2), "@ml-interns");
    REQUIRE(!tcgpud_project_has_member(p, "zed", groups, 1), "zed is not");
    p = tcgpud_config_project(&c, "batch");
    REQUIRE(p && tcgpud_project_has_member(p, "anyone", NULL, 0), "* is everyone");
    REQUIRE((p->pol.quota_flags & POL_Q_BORROWING_LIMIT) && p->pol.borrow_bytes == 60 * GiB,
            "batch: borrowing limit 60G");
    tcgpud_config_free(&c);
    REQUIRE(tcgpud_config_load(&c, "/nonexistent/tcgpud.ini", err, sizeof(err)) == -ENOENT &&
          strstr(err, "/nonexistent/tcgpud.ini"), "missing file: %s", err);
    tcgpud_config_free(&c);
    return 0;
}

struct bad {
    const char *text;
    const char *want;             /* substring of the message, with the line */
};

static int test_errors(void)
{
    static const struct bad cases[] = {
        { "[daemon]\nsocket = /a\nsockett = /b\n", "t.ini:3: [daemon]: unknown key 'sockett'" },
        { "[daemon]\nmax_connections_per_user = 0\n", "t.ini:2: max_connections_per_user: '0' is not a number in 1..512" },
        { "[daemon]\nmax_jobs_per_user = 0x10\n", "t.ini:2: max_jobs_per_user: '0x10' is not a number" },
        { "[daemon]\nsocket = relative\n", "t.ini:2: socket: 'relative' must be an absolute path" },
        { "[daemon]\nmin_runtime = 3 weeks\n", "t.ini:2: min_runtime: '3 weeks' is not a duration" },
        { "[daemon]\nsocket = /a\nsocket = /b\n", "t.ini:3: [daemon]: 'socket' given twice" },
        { "[daemon]\n[daemon]\nsocket = /a\n", "t.ini:2: [daemon] appears twice" },
        { "socket = /a\n", "t.ini:1: a key before any section" },
        { "[demon]\nsocket = /a\n", "t.ini:1: unknown section [demon]" },
        { "[gpu x]\ncapacity = 1G\n", "t.ini:1: [gpu x]: want a GPU number" },
        { "[gpu 0]\ncapacity = lots\n", "t.ini:2: capacity: 'lots' is not a size" },
        { "\n[gpu 1]\n", "t.ini:2: [gpu 1]: capacity is missing" },
        { "[project a]\npriority = high\nmembers = *\n", "t.ini:2: priority: 'high' is not an integer" },
        { "[project a]\nmembers = *\nreservation = 8G\n", "t.ini:3: reservation '8G': want SIZE on GPU" },
        { "[project a]\nmembers = *\nreservation = 8Q on 0\n", "t.ini:3: reservation: '8Q' is not a size" },
        { "[project a]\nmembers = *\nreservation = 1G on 0, 2G on 0\n", "GPU 0 given twice" },
        { "[project a]\nmembers = *\nborrow = maybe\n", "t.ini:3: borrow: 'maybe' is not yes or no" },
        { "[project a]\nmembers = a b!\n", "t.ini:2: members: 'b!' is not a user, @group or *" },
        { "[project a]\npriority = 1\n", "t.ini:1: [project a]: members is missing" },
        { "[project a]\nmembers = *\n[project a]\nmembers = *\n", "t.ini:3: [project a] appears twice" },
        { "[project a]\nmembers = *\npriority = 1\npriority = 2\n", "t.ini:4: [project a]: 'priority' given twice" },
        { "[project a]\nmembers = *\ncolour = red\n", "t.ini:3: [project a]: unknown key 'colour'" },
        { "[project a b]\nmembers = *\n", "t.ini:1: [project a b]: a project name" },
        { "[gpu 0]\ncapacity = 10G\n[project a]\nmembers = *\nreservation = 8G on 0\n"
          "[project b]\nmembers = *\nreservation = 4G on 0\n",
          "t.ini:1: [gpu 0]: the projects reserve 12288 MiB, more than its capacity of 10240 MiB" },
        { "[daemon]\nthis is not ini\n", "t.ini:2: not a section header or key = value line" },
        { "[daemon]\nadmins =\n", "t.ini:2: 'admins' has no value" },
        { "[daemon]\nbackfill = often\n", "t.ini:2: backfill: 'often' is not yes or no" },
        { "[project a]\nmembers = *\nreservation = 8G on 0\nlending_limit = 120%\n",
          "t.ini:4: lending_limit: '120%' is not a percentage" },
        { "[project a]\nmembers = *\nreservation = 8G on 0\nlending_limit = half\n",
          "t.ini:4: lending_limit: 'half' is not a size or a percentage" },
        { "[project a]\nmembers = *\nlending_limit = 4G\n",
          "t.ini:3: [project a]: lending_limit: the project reserves nothing to lend" },
        { "[project a]\nmembers = *\nborrowing_limit = lots\n", "t.ini:3: borrowing_limit: 'lots' is not a size" },
        { "[project a]\nmembers = *\nborrow = no\nborrowing_limit = 4G\n",
          "t.ini:4: [project a]: borrowing_limit 4096 MiB, but borrow = no" },
        { "[project a]\nmembers = *\nweight = 0\n", "t.ini:3: weight: '0' is not an integer in 1..1000" },
        { "[project a]\nmembers = *\ncohort = m l\n", "t.ini:3: cohort: 'm l' is not a name" },
        { "[project a]\nmembers = *\ndefault_compute = 30\n",
          "t.ini:3: default_compute: '30' is not a percentage in 1%..100%" },
        { "[project a]\nmembers = *\ndefault_compute = 0%\n", "t.ini:3: default_compute: '0%'" },
    };
    char err[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tcgpud_config c;
        int r = tcgpud_config_parse(&c, cases[i].text, "t.ini", err, sizeof(err));
        tcgpud_config_free(&c);
        REQUIRE(r == -EINVAL, "case %zu accepted:\n%s", i, cases[i].text);
        REQUIRE(strstr(err, cases[i].want), "case %zu: got '%s', want '%s'", i, err, cases[i].want);
    }
    /* an overlong line */
    char *big = malloc(1000);
    strcpy(big, "[project a]\nmembers = ");
    memset(big + strlen(big), 'x', 400);
    strcpy(big + 22 + 400, "\n");
    struct tcgpud_config c;
    int r = tcgpud_config_parse(&c, big, "t.ini", err, sizeof(err));
    tcgpud_config_free(&c);
    free(big);
    REQUIRE(r == -EINVAL && strstr(err, "t.ini:2: line longer"), "long line: %s", err);
    return 0;
}

/* Every error of a file, each with its line; keys under a wrong header skipped, not misfiled. */
static int test_all_errors(void)
{
    static const char text[] =
        "[daemon]\n"
        "socket = relative\n"                 /* 2 */
        "sockett = /b\n"                      /* 3 */
        "http = 99999\n"                      /* 4 */
        "[gpu x]\n"                           /* 5 */
        "capacity = 1G\n"                     /* 6: skipped, not "unknown key" */
        "[project prod]\n"
        "priority = high\n"                   /* 8 */
        "members = alice, b!, root\n"         /* 9 */
        "this is not ini\n"                   /* 10 */
        "[project ok]\n"
        "members = *\n"
        "reservation = 8Q on 0\n";            /* 13 */
    static const char *const want[] = {
        "t.ini:2: socket:", "t.ini:3: [daemon]: unknown key 'sockett'", "t.ini:4: http:",
        "t.ini:5: [gpu x]", "t.ini:8: priority:", "t.ini:9: members: 'b!'",
        "t.ini:10: not a section header", "t.ini:13: reservation: '8Q'",
    };
    struct tcgpud_config c;
    char err[TCGPUD_CONFIG_ERR_MAX];
    const char *at = err;
    int r = tcgpud_config_parse(&c, text, "t.ini", err, sizeof(err));

    REQUIRE(r == -EINVAL && c.nerrors == 8, "want 8 errors, got %d:\n%s", c.nerrors, err);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const char *p = strstr(at, want[i]);
        REQUIRE(p, "error %zu (%s) missing or out of order:\n%s", i, want[i], err);
        at = p;
    }
    CHECK(!strstr(err, ":6:"), "the keys of a bad section are skipped:\n%s", err);
    /* the valid members of the broken project are still there, for the warnings */
    CHECK(c.nprojects == 2 && c.projects[0].nmembers == 2 && c.projects[0].members[1].line == 9);
    tcgpud_config_free(&c);
    return 0;
}

static void count_warning(const char *msg, void *arg)
{
    char *all = arg;
    strncat(all, msg, 1024 - strlen(all) - 2);
    strcat(all, "\n");
}

/* Members, @groups and admins that do not exist here: warnings with their lines; root is fine. */
static int test_warnings(void)
{
    static const char text[] =
        "[daemon]\n"
        "admins = tcgpu-no-such-group\n"
        "[project a]\n"
        "members = root, tcgpu-no-such-user,\n"
        "    @root, @tcgpu-no-such-group, *\n";
    struct tcgpud_config c;
    char err[512], all[1024] = "";
    int n;

    REQUIRE(tcgpud_config_parse(&c, text, "t.ini", err, sizeof(err)) == 0, "%s", err);
    n = tcgpud_config_warnings(&c, count_warning, all);
    CHECK(n == 3, "%d warnings:\n%s", n, all);
    CHECK(strstr(all, "t.ini:2: warning: admins: no group 'tcgpu-no-such-group'"), "%s", all);
    CHECK(strstr(all, "t.ini:4: warning: [project a]: no user 'tcgpu-no-such-user'"), "%s", all);
    CHECK(strstr(all, "t.ini:5: warning: [project a]: no group 'tcgpu-no-such-group'"), "%s", all);
    CHECK(!strstr(all, "'root'"), "root exists: %s", all);
    tcgpud_config_free(&c);
    return 0;
}

/* http = [ADDR:]PORT, loopback unless asked otherwise; dashboard needs http. */
static int test_listen(void)
{
    static const struct { const char *in, *host; int port; } ok[] = {
        { "9466", "127.0.0.1", 9466 }, { "0.0.0.0:80", "0.0.0.0", 80 },
        { "[::1]:9466", "::1", 9466 }, { "10.1.2.3:0", "10.1.2.3", 0 },
    };
    static const char *const bad[] = { "", "x", "70000", "host.example:80", "[::1]9466", "[zz]:1",
                                       "1.2.3:4", "-1" };
    char host[64], err[256];
    int port;
    struct tcgpud_config c;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        CHECK(tcgpud_parse_listen(ok[i].in, host, sizeof(host), &port, err, sizeof(err)) == 0 &&
              !strcmp(host, ok[i].host) && port == ok[i].port, "%s: %s", ok[i].in, err);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(tcgpud_parse_listen(bad[i], host, sizeof(host), &port, err, sizeof(err)) == -EINVAL,
              "'%s' accepted", bad[i]);
    CHECK(tcgpud_config_parse(&c, "[daemon]\nhttp = 9466\ndashboard = yes\n", "t.ini", err,
                              sizeof(err)) == 0 && c.dashboard && !strcmp(c.http_host, "127.0.0.1"),
          "%s", err);
    tcgpud_config_free(&c);
    CHECK(tcgpud_config_parse(&c, "[daemon]\ndashboard = yes\n", "t.ini", err, sizeof(err)) == -EINVAL &&
          strstr(err, "t.ini:1: dashboard = yes needs http"), "%s", err);
    tcgpud_config_free(&c);
    return 0;
}

static int test_values(void)
{
    uint64_t v;

    REQUIRE(units_parse_size("8G", &v) == 0 && v == 8 * GiB, "8G");
    REQUIRE(units_parse_size("512 MiB", &v) == 0 && v == 512ull << 20, "512 MiB");
    REQUIRE(units_parse_size("1.5T", &v) == 0 && v == 3ull << 39, "1.5T");
    REQUIRE(units_parse_size("4096", &v) == 0 && v == 4096, "bytes");
    REQUIRE(units_parse_size("0", &v) == 0 && v == 0, "0");
    REQUIRE(units_parse_size("-1G", &v) < 0, "negative");
    REQUIRE(units_parse_size("0.5", &v) < 0, "half a byte");
    REQUIRE(units_parse_size("99999999T", &v) < 0, "overflow");
    REQUIRE(units_parse_size("8X", &v) < 0, "unit");
    /* decimal only: strtod's hex, exponents and words are not sizes */
    REQUIRE(units_parse_size("0x10", &v) < 0, "hex");
    REQUIRE(units_parse_size("1e3", &v) < 0 && units_parse_size("1E3M", &v) < 0, "exponent");
    REQUIRE(units_parse_size("inf", &v) < 0 && units_parse_size("nan", &v) < 0, "words");
    REQUIRE(units_parse_size("1.", &v) < 0 && units_parse_size(".5G", &v) < 0, "bare point");
    REQUIRE(units_parse_duration("0x10s", &v) < 0 && units_parse_duration("1e3", &v) < 0,
            "durations too");
    REQUIRE(units_parse_duration("1.5s", &v) == 0 && v == 1500000000ull, "1.5s");
    REQUIRE(units_parse_duration("500ms", &v) == 0 && v == 500000000ull, "ms");
    REQUIRE(units_parse_duration("2m", &v) == 0 && v == 120000000000ull, "m");
    REQUIRE(units_parse_duration("10", &v) == 0 && v == 10000000000ull, "plain seconds");
    REQUIRE(units_parse_duration("1d", &v) < 0, "days are not a unit");
    uint32_t ppm;
    REQUIRE(units_parse_percent("25%", &ppm) == 0 && ppm == 250000, "25%%");
    REQUIRE(units_parse_percent("33.3333%", &ppm) == 0 && ppm == 333333, "33.3333%%: %u", ppm);
    REQUIRE(units_parse_percent(" 100 % ", &ppm) == 0 && ppm == 1000000, "100%%");
    REQUIRE(units_parse_percent("0.0001%", &ppm) == 0 && ppm == 1, "a millionth");
    REQUIRE(units_parse_percent("0%", &ppm) < 0 && units_parse_percent("100.01%", &ppm) < 0,
            "nothing, more than the whole");
    REQUIRE(units_parse_percent("33.33333%", &ppm) < 0, "finer than a millionth");
    REQUIRE(units_parse_percent("25", &ppm) < 0 && units_parse_percent("8G", &ppm) < 0 &&
            units_parse_percent("25%%", &ppm) < 0 && units_parse_percent("1e1%", &ppm) < 0,
            "not a percentage");
    return 0;
}

/* A state file of its own, "" when none could be made. */
static void state_path(char *path, size_t len)
{
    char dir[] = "/tmp/tcgpud-state-XXXXXX";

    path[0] = '\0';
    if (mkdtemp(dir))
        snprintf(path, len, "%s/state", dir);
}

static void state_path_free(const char *path)
{
    char dir[4096];

    unlink(path);
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    rmdir(dir);
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    if (!f)
        return -errno;
    fputs(text, f);
    return fclose(f) == 0 ? 0 : -EIO;
}

static int test_state_round_trip(void)
{
    struct tcgpud_saved_job in[2], *out = NULL;
    char path[4096], err[512];
    size_t n = 0;

    state_path(path, sizeof(path));
    REQUIRE(path[0], "mkdtemp: %s", strerror(errno));
    /* every field its own value; a negative priority and "no device" */
    memset(in, 0, sizeof(in));
    in[0] = (struct tcgpud_saved_job){ .pid = 4242, .start_ticks = 123456789012ull, .uid = 1000,
                                       .priority = -5, .limit = 8ull << 30, .device = -1,
                                       .dev_capacity = 80ull << 30, .mem = 3ull << 30,
                                       .auto_resume = 1, .preemptions = 7, .run_ns = 99,
                                       .since_ns = 5000000000ull, .queued_ns = 6000000000ull };
    snprintf(in[0].user, sizeof(in[0].user), "alice b");
    snprintf(in[0].project, sizeof(in[0].project), "prod=1%%");
    snprintf(in[0].state, sizeof(in[0].state), "suspended");
    snprintf(in[0].suspended_by, sizeof(in[0].suspended_by), "manual");
    snprintf(in[0].job, sizeof(in[0].job), "slurm:4242");      /* a task of a gang */
    in[0].compute = 300;
    /* the ends of each range */
    in[1] = (struct tcgpud_saved_job){ .pid = INT32_MAX, .start_ticks = UINT64_MAX,
                                       .uid = UINT32_MAX, .priority = INT32_MIN,
                                       .limit = UINT64_MAX, .device = 4095, .mem = UINT64_MAX,
                                       .preemptions = UINT32_MAX, .run_ns = UINT64_MAX,
                                       .compute = 1000 };
    snprintf(in[1].user, sizeof(in[1].user), "root");
    snprintf(in[1].project, sizeof(in[1].project), "batch");
    snprintf(in[1].state, sizeof(in[1].state), "running");
    snprintf(in[1].suspended_by, sizeof(in[1].suspended_by), "none");
    REQUIRE(tcgpud_state_save(path, in, 2, err, sizeof(err)) == 0, "%s", err);
    REQUIRE(tcgpud_state_load(path, &out, &n, err, sizeof(err)) == 0, "%s", err);
    CHECK(n == 2);
    for (size_t i = 0; i < n && i < 2; i++)
        CHECK(memcmp(&in[i], &out[i], sizeof(in[i])) == 0, "job %zu changed on its way back", i);
    free(out);

    /* a file of an older tcgpud, without dev_capacity */
    CHECK(write_file(path, "tcgpud-state 1\njob pid=7 start=1 uid=0 user=root project=p "
                           "priority=-3 limit=0 device=0 mem=0 state=running suspended_by=none "
                           "auto_resume=5 preemptions=0 run_ns=0\n") == 0);
    CHECK(tcgpud_state_load(path, &out, &n, err, sizeof(err)) == 0 && n == 1 &&
          out[0].dev_capacity == 0 && out[0].priority == -3 && out[0].auto_resume == 1 &&
          !out[0].job[0] && out[0].compute == 0, "%s", err);
    free(out);

    /* malformed: the line is named */
    CHECK(write_file(path, "tcgpud-state 1\njob pid=7 start=1 uid=0 user=root project=p "
                           "priority=-3 limit=0 device=-2 mem=0 state=running suspended_by=none "
                           "auto_resume=0 preemptions=0 run_ns=0\n") == 0);
    CHECK(tcgpud_state_load(path, &out, &n, err, sizeof(err)) == -EBADMSG && n == 0 &&
          strstr(err, ":2: malformed job line"), "%s", err);
    CHECK(write_file(path, "tcgpud-state 1\njob pid=7 start=1 uid=0 project=p "
                           "priority=-3 limit=0 device=0 mem=0 state=running suspended_by=none "
                           "auto_resume=0 preemptions=0 run_ns=0\n") == 0);
    CHECK(tcgpud_state_load(path, &out, &n, err, sizeof(err)) == -EBADMSG, "no user: %s", err);
    state_path_free(path);
    return 0;
}

int main(void)
{

    RUN(test_example);
    RUN(test_errors);
    RUN(test_all_errors);
    RUN(test_warnings);
    RUN(test_listen);
    RUN(test_values);
    RUN(test_state_round_trip);
    return T_EXIT_STATUS();
}
