/*
 * test_log.c - lib/common/log.c: the library's default lines on stderr,
 * each program's prefix (pid, clock, CRIU's tags), levels, the sink, and
 * lines longer than the stack buffer.
 */
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "common/log.h"

static char got[8192];
static size_t got_len;
static int got_level = -1, got_lines;

static void capture(enum tcgpu_log_level level, const char *line, size_t len)
{
    got_len = len < sizeof(got) - 1 ? len : sizeof(got) - 1;
    memcpy(got, line, got_len);
    got[got_len] = '\0';
    got_level = (int)level;
    got_lines++;
}

static void reset(void)
{
    got[0] = '\0';
    got_len = 0;
    got_level = -1;
    got_lines = 0;
}

static int matches(const char *text, const char *pattern)
{
    regex_t re;
    int r;

    if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
        return 0;
    r = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return r;
}

/* Never set up: "tcgpu[PID]: ", on stderr, TCGPU_LOG's level (info unset). */
static int test_library_default(void)
{
    char path[] = "/tmp/test_log.XXXXXX", want[64], buf[256] = "";
    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    ssize_t n;

    REQUIRE(fd >= 0 && saved >= 0);
    unlink(path);
    unsetenv("TCGPU_LOG");
    dup2(fd, STDERR_FILENO);
    log_debug("not shown");
    log_info("shown %d", 1);
    errno = EBADF;
    log_err("also shown");
    CHECK(errno == EBADF, "errno %d", errno);
    dup2(saved, STDERR_FILENO);
    close(saved);
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    REQUIRE(n > 0);
    snprintf(want, sizeof(want), "tcgpu[%d]: shown 1\ntcgpu[%d]: also shown\n", (int)getpid(),
             (int)getpid());
    CHECK(!strcmp(buf, want), "got \"%s\"", buf);
    return T_EXIT_PASS;
}

static int test_clock_prefix(void)
{
    tcgpu_log_setup(&(struct tcgpu_log_style){ .name = "tcgpud", .flags = TCGPU_LOG_CLOCK,
                                              .level = TCGPU_LOG_INFO, .sink = capture });
    reset();
    log_info("pid %d suspended", 42);
    CHECK(matches(got, "^tcgpud [0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}: pid 42 suspended\n$"),
          "got \"%s\"", got);
    CHECK(got_level == TCGPU_LOG_INFO && got_len == strlen(got));
    reset();
    log_debug("dropped");
    CHECK(got_lines == 0, "a debug line at level info: \"%s\"", got);
    return T_EXIT_PASS;
}

static int test_named_task(void)
{
    tcgpu_log_setup(&(struct tcgpu_log_style){ .name = "tcgpu-slurm[7.0.1]",
                                              .flags = TCGPU_LOG_CLOCK,
                                              .level = TCGPU_LOG_DEBUG, .sink = capture });
    reset();
    log_err("epilog: cannot remove %s", "/x");
    CHECK(matches(got, "^tcgpu-slurm\\[7\\.0\\.1\\] [0-9:.]{12}: epilog: cannot remove /x\n$"),
          "got \"%s\"", got);
    return T_EXIT_PASS;
}

/* The CRIU plugin's lines: errors and warnings tagged as CRIU's own. */
static int test_tagged(void)
{
    tcgpu_log_setup(&(struct tcgpu_log_style){ .name = "tcgpu_plugin", .flags = TCGPU_LOG_TAGGED,
                                              .level = TCGPU_LOG_DEBUG, .sink = capture });
    reset();
    log_err("e");
    CHECK(!strcmp(got, "Error (tcgpu_plugin): e\n") && got_level == TCGPU_LOG_ERROR, "got \"%s\"", got);
    log_warn("w");
    CHECK(!strcmp(got, "Warn  (tcgpu_plugin): w\n") && got_level == TCGPU_LOG_WARN, "got \"%s\"", got);
    log_info("i");
    CHECK(!strcmp(got, "tcgpu_plugin: i\n") && got_level == TCGPU_LOG_INFO, "got \"%s\"", got);
    log_debug("d");
    CHECK(!strcmp(got, "tcgpu_plugin: d\n") && got_level == TCGPU_LOG_DEBUG, "got \"%s\"", got);
    return T_EXIT_PASS;
}

/* A message longer than the line kept on the stack arrives whole. */
static int test_long_line(void)
{
    static char msg[5000];

    memset(msg, 'x', sizeof(msg) - 1);
    tcgpu_log_setup(&(struct tcgpu_log_style){ .name = "gpuckpt", .level = TCGPU_LOG_INFO,
                                              .sink = capture });
    reset();
    log_err("%s!", msg);
    CHECK(got_len == strlen("gpuckpt: ") + sizeof(msg) - 1 + 2, "%zu bytes", got_len);
    CHECK(!strncmp(got, "gpuckpt: xxx", 12) && !strcmp(got + got_len - 3, "x!\n"));
    return T_EXIT_PASS;
}

int main(void)
{
    RUN(test_library_default);      /* first: it needs the log never set up */
    RUN(test_clock_prefix);
    RUN(test_named_task);
    RUN(test_tagged);
    RUN(test_long_line);
    return T_EXIT_STATUS();
}
