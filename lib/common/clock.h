/*
 * clock.h - the two clocks tcgpu reads.
 *
 * now_*: CLOCK_MONOTONIC, for durations, deadlines and timeouts (never goes
 * back, not affected by settimeofday). wall_*: CLOCK_REALTIME, for what is
 * shown to people or written into images and state files ("when"). Using the
 * wrong one is a bug: a deadline on the wall clock jumps with NTP; a
 * timestamp on the monotonic clock means nothing after a reboot.
 *
 * All but wall_hms (localtime_r) are async-signal-safe (clock_gettime is);
 * all are thread-safe.
 */
#ifndef TCGPU_COMMON_CLOCK_H
#define TCGPU_COMMON_CLOCK_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

static inline uint64_t clock_ns_of(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Monotonic time in nanoseconds / milliseconds. */
static inline uint64_t now_ns(void) { return clock_ns_of(CLOCK_MONOTONIC); }
static inline uint64_t now_ms(void) { return now_ns() / 1000000u; }

/* Wall-clock time (since the epoch) in nanoseconds / milliseconds. */
static inline uint64_t wall_ns(void) { return clock_ns_of(CLOCK_REALTIME); }
static inline uint64_t wall_ms(void) { return wall_ns() / 1000000u; }

/* The local time of day now, "HH:MM:SS.mmm", for log lines, into buf (16 bytes). */
static inline const char *wall_hms(char buf[16])
{
    struct timespec ts;
    struct tm tm;
    char hms[9];

    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    strftime(hms, sizeof(hms), "%H:%M:%S", &tm);
    snprintf(buf, 16, "%.8s.%03u", hms, (unsigned)(ts.tv_nsec / 1000000) % 1000u);
    return buf;
}

#endif
