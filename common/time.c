/* common/time.c — clocks, timestamps, interruptible sleeps, jitter source. */
#include "common/time.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

int64_t kb_now_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * KB_NS_PER_SEC + ts.tv_nsec;
}

int64_t kb_now_real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * KB_NS_PER_SEC + ts.tv_nsec;
}

void kb_format_rfc3339_us(int64_t real_ns, char *buf, size_t size) {
    time_t secs = (time_t)(real_ns / KB_NS_PER_SEC);
    long us = (long)((real_ns % KB_NS_PER_SEC) / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, us);
}

struct timespec kb_deadline_mono(int64_t timeout_ms) {
    int64_t t = kb_now_mono_ns() + timeout_ms * KB_NS_PER_MS;
    struct timespec ts = {.tv_sec = (time_t)(t / KB_NS_PER_SEC), .tv_nsec = (long)(t % KB_NS_PER_SEC)};
    return ts;
}

void kb_cond_init_mono(pthread_cond_t *cv) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

int kb_sleep_ms_interruptible(int64_t ms, const _Atomic _Bool *stop) {
    int64_t end = kb_now_mono_ns() + ms * KB_NS_PER_MS;
    for (;;) {
        if (stop && atomic_load(stop))
            return 1;
        int64_t left = end - kb_now_mono_ns();
        if (left <= 0)
            return 0;
        int64_t step = left < 50 * KB_NS_PER_MS ? left : 50 * KB_NS_PER_MS;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)step};
        nanosleep(&ts, NULL);
    }
}

double kb_random_unit(void) {
    static _Thread_local uint64_t state;
    if (state == 0)
        state = (uint64_t)kb_now_mono_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&state;
    /* xorshift64* */
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    uint64_t r = state * UINT64_C(2685821657736338717);
    return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}
