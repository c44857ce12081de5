/* Talking to tcgpud: the transport; see daemon_io.h. No globals. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "common/clock.h"
#include "daemon_io.h"

const char *tcgpud_socket_path(const char *setting)
{
    if (setting && !strcmp(setting, "off"))
        return "";
    return setting && *setting ? setting : TCGPUD_SOCKET_DEFAULT;
}

int tcgpud_connect(const char *path, char *err, size_t errlen)
{
    int fd = ctl_socket_connect(path);

    if (fd == -EINVAL)
        snprintf(err, errlen, "tcgpud socket path '%s' is empty or too long", path ? path : "");
    else if (fd == -ENOENT)
        snprintf(err, errlen, "no tcgpud socket at %s (is tcgpud running?)", path);
    else if (fd == -ECONNREFUSED)
        snprintf(err, errlen, "tcgpud does not answer on %s (stale socket)", path);
    else if (fd < 0)
        snprintf(err, errlen, "cannot connect to tcgpud at %s: %s", path, strerror(-fd));
    return fd;
}

int tcgpud_send(int fd, const struct ctl_buf *b)
{
    long n = ctl_buf_finish(b);

    if (n < 0)
        return (int)n;
    if (send(fd, b->data, (size_t)n, MSG_NOSIGNAL) < 0)
        return -errno;
    return 0;
}

int tcgpud_recv(int fd, struct ctl_msg *m, int timeout_ms)
{
    char *buf;
    long long deadline = timeout_ms < 0 ? -1 : (long long)now_ms() + timeout_ms;
    ssize_t n;
    int r;

    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int wait = deadline < 0 ? -1 : (int)(deadline - (long long)now_ms());
        if (deadline >= 0 && wait < 0)
            wait = 0;
        r = poll(&p, 1, wait);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -ETIMEDOUT;
        break;
    }
    buf = malloc(CTL_MSG_MAX + 1);
    if (!buf)
        return -ENOMEM;
    n = recv(fd, buf, CTL_MSG_MAX + 1, MSG_TRUNC);
    if (n < 0)
        r = -errno;
    else if (n == 0)
        r = -ECONNRESET;
    else if (n > CTL_MSG_MAX)
        r = -EPROTO;
    else
        r = ctl_parse(buf, (size_t)n, m) < 0 ? -EPROTO : 0;
    free(buf);
    return r;
}

int tcgpud_call(int fd, const struct ctl_buf *b, struct ctl_msg *reply, int timeout_ms,
                tcgpud_msg_fn fn, void *arg)
{
    long long deadline = timeout_ms < 0 ? -1 : (long long)now_ms() + timeout_ms;
    int r = tcgpud_send(fd, b);

    if (r == -EPIPE || r == -ECONNRESET) {
        /* Closed before it read the request: tcgpud turned the connection
         * away, and its reason may be waiting for us. */
        if (tcgpud_recv(fd, reply, 0) == 0 && !strcmp(reply->word, "error"))
            return 0;
        return -ECONNRESET;
    }
    while (r == 0) {
        int left = deadline < 0 ? -1 : (int)(deadline - (long long)now_ms());
        if (deadline >= 0 && left < 0)
            return -ETIMEDOUT;
        r = tcgpud_recv(fd, reply, left);
        if (r < 0)
            return r;
        if (!strcmp(reply->word, "ok") || !strcmp(reply->word, "error"))
            return 0;
        if (fn)
            fn(reply, arg);
    }
    return r;
}
