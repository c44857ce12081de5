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
 * Names
 * ------------------------------------------------------------------------- */

static int refused_signal(int sig)
{
    switch (sig) {
    case SIGKILL: case SIGSTOP:                             /* cannot be caught */
    case SIGSEGV: case SIGBUS: case SIGFPE: case SIGILL:    /* faults: the program's or the runtime's */
    case SIGTRAP: case SIGSYS: case SIGABRT:
        return 1;
    }
    return sig > 31 && sig < SIGRTMIN;                      /* reserved by glibc's threads */
}

static int parse_num(const char *s, int *v)
{
    long x = 0;

    if (!*s)
        return -1;
    for (; *s; s++) {
        if (!isdigit((unsigned char)*s))
            return -1;
        x = x * 10 + (*s - '0');
        if (x > 1000)
            return -1;
    }
    *v = (int)x;
    return 0;
}

int tcgpu_signal_parse(const char *spec)
{
    const char *s = spec;
    int sig = -1, off;

    if (!s || !*s || !strcasecmp(s, "off") || !strcasecmp(s, "none") || !strcmp(s, "0"))
        return 0;
    if (isdigit((unsigned char)*s)) {
        if (parse_num(s, &sig) < 0)
            return -EINVAL;
    } else {
        if (!strncasecmp(s, "SIG", 3))
            s += 3;
        if (!strncasecmp(s, "RTMIN", 5) || !strncasecmp(s, "RTMAX", 5)) {
            int max = !strncasecmp(s, "RTMAX", 5);
            s += 5;
            off = 0;
            if (*s) {
                if (*s != (max ? '-' : '+') || parse_num(s + 1, &off) < 0)
                    return -EINVAL;
            }
            sig = max ? SIGRTMAX - off : SIGRTMIN + off;
            if (sig < SIGRTMIN || sig > SIGRTMAX)
                return -EINVAL;
        } else {
            for (int i = 1; i < 32; i++) {
                const char *n = sigabbrev_np(i);
                if (n && !strcasecmp(n, s)) {
                    sig = i;
                    break;
                }
            }
        }
    }
    if (sig <= 0 || sig > SIGRTMAX || refused_signal(sig))
        return -EINVAL;
    return sig;
}

const char *tcgpu_signal_name(int sig, char *buf, size_t len)
{
    const char *n;

    if (sig <= 0)
        snprintf(buf, len, "off");
    else if (sig >= SIGRTMIN && sig <= SIGRTMAX) {
        int lo = sig - SIGRTMIN, hi = SIGRTMAX - sig;
        if (lo == 0)
            snprintf(buf, len, "SIGRTMIN");
        else if (hi == 0)
            snprintf(buf, len, "SIGRTMAX");
        else if (lo <= hi)
            snprintf(buf, len, "SIGRTMIN+%d", lo);
        else
            snprintf(buf, len, "SIGRTMAX-%d", hi);
    } else if ((n = sigabbrev_np(sig)))
        snprintf(buf, len, "SIG%s", n);
    else
        snprintf(buf, len, "signal %d", sig);
    return buf;
}

static const char *const action_names[] = {
    [TCGPU_SIGACT_TOGGLE] = "toggle",
    [TCGPU_SIGACT_SUSPEND] = "suspend",
    [TCGPU_SIGACT_RESUME] = "resume",
    [TCGPU_SIGACT_CHECKPOINT] = "checkpoint",
};

int tcgpu_sigaction_parse(const char *s)
{
    if (!s || !*s)
        return TCGPU_SIGACT_TOGGLE;
    for (unsigned i = 0; i < sizeof(action_names) / sizeof(action_names[0]); i++)
        if (!strcasecmp(s, action_names[i]))
            return (int)i;
    return -EINVAL;
}

const char *tcgpu_sigaction_name(int kind)
{
    if (kind < 0 || (unsigned)kind >= sizeof(action_names) / sizeof(action_names[0]))
        return "unknown";
    return action_names[kind];
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
