/*
 * signals.c - names of signals and of the signal trigger's actions
 * (signals.h). Pure: no handler is installed here (core/signal_trigger.c).
 */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "macros.h"
#include "signals.h"


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
    for (unsigned i = 0; i < NELEM(action_names); i++)
        if (!strcasecmp(s, action_names[i]))
            return (int)i;
    return -EINVAL;
}

const char *tcgpu_sigaction_name(int kind)
{
    if (kind < 0 || (unsigned)kind >= NELEM(action_names))
        return "unknown";
    return action_names[kind];
}
