/* A signal that wakes the service thread; see signal_trigger.h. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "signal_trigger.h"

/* Read by the handler: plain loads of an int are async-signal-safe. */
static volatile int trigger_efd = -1;
static int trigger_sig;
static struct sigaction trigger_old;
static pthread_mutex_t trigger_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_trigger(int sig)
{
    int saved = errno;
    int fd = trigger_efd;
    uint64_t one = 1;

    (void)sig;
    if (fd >= 0 && write(fd, &one, sizeof(one)) < 0) {
        /* counter full (EAGAIN): a wake-up is pending anyway */
    }
    errno = saved;
}

/* ---------------------------------------------------------------------------
 * The eventfd and the handler
 * ------------------------------------------------------------------------- */

int tcgpu_signal_trigger_fd(void)
{
    int fd;

    pthread_mutex_lock(&trigger_lock);
    if (trigger_efd < 0)
        trigger_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    fd = trigger_efd >= 0 ? trigger_efd : -errno;
    pthread_mutex_unlock(&trigger_lock);
    return fd;
}

uint64_t tcgpu_signal_trigger_take(void)
{
    uint64_t n = 0;
    int fd = trigger_efd;

    if (fd < 0 || read(fd, &n, sizeof(n)) != sizeof(n))
        return 0;
    return n;
}

static int handler_is_ours(const struct sigaction *sa)
{
    return (sa->sa_flags & SA_SIGINFO) == 0 && sa->sa_handler == on_trigger;
}

static void uninstall_locked(void)
{
    struct sigaction cur;

    if (trigger_sig > 0 && sigaction(trigger_sig, NULL, &cur) == 0 && handler_is_ours(&cur))
        sigaction(trigger_sig, &trigger_old, NULL);
    trigger_sig = 0;
}

int tcgpu_signal_trigger_install(int sig)
{
    struct sigaction sa, old;
    int r = 0;

    if (tcgpu_signal_trigger_fd() < 0)
        return -EMFILE;
    pthread_mutex_lock(&trigger_lock);
    if (sig == trigger_sig)
        goto out;
    uninstall_locked();
    if (sig <= 0)
        goto out;
    if (sigaction(sig, NULL, &old) < 0) {
        r = -errno;
        goto out;
    }
    if (handler_is_ours(&old)) {
        /* inherited across fork: keep it, and what it replaced is unknown */
        memset(&trigger_old, 0, sizeof(trigger_old));
        trigger_old.sa_handler = SIG_DFL;
        trigger_sig = sig;
        goto out;
    }
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
        r = -EBUSY;
        goto out;
    }
    if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction) {
        r = -EBUSY;
        goto out;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_trigger;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) < 0) {
        r = -errno;
        goto out;
    }
    trigger_old = old;
    trigger_sig = sig;
out:
    pthread_mutex_unlock(&trigger_lock);
    return r;
}

void tcgpu_signal_trigger_uninstall(void)
{
    pthread_mutex_lock(&trigger_lock);
    uninstall_locked();
    pthread_mutex_unlock(&trigger_lock);
}

int tcgpu_signal_trigger_signal(void)
{
    return __atomic_load_n(&trigger_sig, __ATOMIC_RELAXED);
}

int tcgpu_signal_trigger_in_place(void)
{
    struct sigaction cur;
    int sig = tcgpu_signal_trigger_signal();

    return sig > 0 && sigaction(sig, NULL, &cur) == 0 && handler_is_ours(&cur);
}

void tcgpu_signal_trigger_atfork_child(void)
{
    int fd;

    /* Single-threaded here: the lock may have been held by a parent thread. */
    pthread_mutex_init(&trigger_lock, NULL);
    if (trigger_efd < 0)
        return;
    fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) {
        int old = trigger_efd;
        trigger_efd = -1;       /* the handler then does nothing */
        close(old);
        return;
    }
    /* dup3 swaps the file behind the number atomically: a handler running
     * now writes to either eventfd, never to an unrelated file. */
    if (dup3(fd, trigger_efd, O_CLOEXEC) < 0) {
        int old = trigger_efd;
        trigger_efd = -1;
        close(old);
    }
    close(fd);
}
