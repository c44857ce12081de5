/* Signals that must not end gpuckpt in the middle of a suspend: see interrupt.h. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>

#include "interrupt.h"

static volatile sig_atomic_t caught;
static volatile sig_atomic_t cut_fd = -1;

static void on_signal(int sig)
{
    int fd = cut_fd;

    if (!caught)
        caught = sig;
    /* async-signal-safe; the waiting recv() then sees the end of the stream */
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
}

int gpuckpt_interrupt_catch(void)
{
    static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* no SA_RESTART: a blocking wait returns EINTR (ctl_call retries it) */
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        struct sigaction old;
        /* one ignored (nohup, a background job) stays ignored */
        if (sigaction(sigs[i], NULL, &old) < 0)
            return -errno;
        if (old.sa_handler != SIG_IGN && sigaction(sigs[i], &sa, NULL) < 0)
            return -errno;
    }
    return 0;
}

int gpuckpt_interrupted(void)
{
    return caught;
}

void gpuckpt_interrupt_cut(int fd)
{
    cut_fd = fd;
}
