/*
 * gpuckpt inspect and verify on images written by lib/image/image.h: exit 0 for a
 * whole image, 7 for a corrupt one, 1 for a missing one; --json is JSON.
 *
 *   test_gpuckpt_image PATH-TO-GPUCKPT
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "image/image.h"

#include "../common/check.h"

static int write_image(const char *dir)
{
    struct image_writer *w;
    struct image_process p = { .pid = 4242 };
    struct image_device d = { .ordinal = 0, .total_mem = 1ull << 30 };
    struct image_alloc a = { .id = 1, .addr = 0x7f0000000000ull, .size = 1 << 20 };
    char err[256];
    char *buf = malloc(1 << 20);
    uint32_t di;
    int r;

    for (int i = 0; i < 1 << 20; i++)
        buf[i] = (char)(i * 7 + (i >> 9));
    snprintf(p.hostname, sizeof(p.hostname), "testhost");
    snprintf(p.exe, sizeof(p.exe), "/bin/train");
    snprintf(d.name, sizeof(d.name), "simulated");
    r = image_writer_begin(&w, dir, NULL, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "image_writer_begin: %s\n", err);
        free(buf);
        return r;
    }
    if ((r = image_writer_set_process(w, &p)) == 0 && (r = image_writer_add_device(w, &d, &di)) == 0) {
        a.device = di;
        if ((r = image_writer_add_allocation(w, &a)) == 0 &&
            (r = image_writer_add_data(w, 1, 0, buf, 1 << 20)) == 0)
            r = image_writer_commit(w);
    }
    if (r < 0)
        fprintf(stderr, "image writer: %s\n", image_writer_error(w));
    image_writer_free(w);
    free(buf);
    return r;
}

static int run(const char *exe, char *out, size_t outlen, const char *a1, const char *a2, const char *a3)
{
    int fds[2], status;
    size_t got = 0;
    ssize_t n;
    char sink[4096];
    pid_t pid;

    if (pipe(fds) < 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execl(exe, exe, a1, a2, a3, (char *)NULL);
        _exit(99);
    }
    close(fds[1]);
    while ((n = read(fds[0], got < outlen - 1 ? out + got : sink,
                     got < outlen - 1 ? outlen - 1 - got : sizeof(sink))) > 0)
        if (got < outlen - 1)
            got += (size_t)n;
    out[got] = '\0';
    close(fds[0]);
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int main(int argc, char **argv)
{
    char tmp[] = "/tmp/tcgpu-gpuckpt-image-XXXXXX", dir[128], data[160], out[65536], cmd[200];
    int fd;

    if (argc < 2)
        return 2;
    if (!mkdtemp(tmp))
        return 1;
    snprintf(dir, sizeof(dir), "%s/img", tmp);
    CHECK(write_image(dir) == 0);

    CHECK(run(argv[1], out, sizeof(out), "inspect", dir, NULL) == 0);
    CHECK(strstr(out, "pid 4242") && strstr(out, "0x00007f0000000000"));
    CHECK(run(argv[1], out, sizeof(out), "inspect", dir, "--json") == 0);
    CHECK(out[0] == '{' && strstr(out, "\"pid\":4242"));
    CHECK(run(argv[1], out, sizeof(out), "verify", dir, NULL) == 0 && strstr(out, "ok"));
    CHECK(run(argv[1], out, sizeof(out), "verify", "/nonexistent/img", NULL) == 1);
    CHECK(run(argv[1], out, sizeof(out), "inspect", "--bogus", dir) == 2);

    /* flip bytes in the data file: verify says corrupt (7); inspect still shows the manifest */
    snprintf(data, sizeof(data), "%s/data.0", dir);
    fd = open(data, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "XXXX", 4, 64) == 4);
    close(fd);
    CHECK(run(argv[1], out, sizeof(out), "verify", dir, NULL) == 7);
    CHECK(run(argv[1], out, sizeof(out), "inspect", dir, NULL) == 0);
    /* a damaged manifest: corrupt for both */
    snprintf(data, sizeof(data), "%s/manifest", dir);
    fd = open(data, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "XXXX", 4, 40) == 4);
    close(fd);
    CHECK(run(argv[1], out, sizeof(out), "verify", dir, NULL) == 7);
    CHECK(run(argv[1], out, sizeof(out), "inspect", dir, NULL) == 7);

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("gpuckpt inspect/verify: all checks passed\n");
    return 0;
}
