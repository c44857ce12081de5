/*
 * cxx_throw.cpp - a C++ library that throws and catches, for cxx_unwind.c:
 * what any C++ framework a C host dlopens does (Python loading a torch
 * extension). Each function returns 1 when C++ behaved as the language says
 * and 0 otherwise; a broken unwinder aborts the process instead (issue 35:
 * two unwinders in one unwind).
 */
#include <atomic>
#include <cerrno>
#include <mutex>
#include <pthread.h>
#include <stdexcept>
#include <unistd.h>

extern "C" {
#include "cxx_cframe.h"
}

/* Throws out of std::call_once (glibc's pthread_once frames in between),
 * then checks that the flag was left unset, as [thread.once.callonce] says
 * of an exceptional call: the next call_once runs its function. Not under
 * TSan, whose pthread_once interceptor stays "in progress" after a throw
 * (the second call would wait forever, with or without tcgpu). */
extern "C" int cxx_call_once_throws(void)
{
    std::once_flag flag;
    bool caught = false, ran = false;

    try {
        std::call_once(flag, [] { throw std::runtime_error("once"); });
    } catch (const std::runtime_error &e) {
        caught = true;
    }
#if defined(__SANITIZE_THREAD__)
    ran = true;
#else
    std::call_once(flag, [&ran] { ran = true; });
#endif
    return caught && ran;
}

static void throw_from_callback(void *arg)
{
    throw std::invalid_argument(static_cast<const char *>(arg));
}

/* Throws from a callback through C frames (cxx_cframe.c, built with
 * -fexceptions as glibc and CPython's C are not: these are). */
extern "C" int cxx_throw_through_c(void)
{
    try {
        cframe_call(throw_from_callback, const_cast<char *>("through C"));
    } catch (const std::invalid_argument &e) {
        return 1;
    }
    return 0;
}

struct cancel_state {
    std::atomic<bool> started{false};
    std::atomic<bool> destroyed{false};
};

struct set_on_destroy {
    std::atomic<bool> &flag;
    ~set_on_destroy() { flag = true; }
};

static void *wait_for_cancel(void *arg)
{
    auto *st = static_cast<cancel_state *>(arg);
    set_on_destroy guard{st->destroyed};

    st->started = true;
    try {
        for (;;)
            pause();            /* a cancellation point */
    } catch (...) {
        throw;                  /* the forced unwind must go on (abi::__forced_unwind) */
    }
    return nullptr;
}

/* Cancels a thread blocked in C++ code: glibc unwinds it with a forced
 * unwind that runs its destructors and passes through catch (...). */
extern "C" int cxx_cancel_unwinds(void)
{
    cancel_state st;
    pthread_t t;
    void *ret = nullptr;

    if (pthread_create(&t, nullptr, wait_for_cancel, &st))
        return 0;
    while (!st.started)
        sched_yield();
    if (pthread_cancel(t) || pthread_join(t, &ret))
        return 0;
    return ret == PTHREAD_CANCELED && st.destroyed;
}
