/* common/time.h — clocks and timestamps. */
#ifndef KB_COMMON_TIME_H
#define KB_COMMON_TIME_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define KB_NS_PER_MS INT64_C(1000000)
#define KB_NS_PER_SEC INT64_C(1000000000)

int64_t kb_now_mono_ns(void);  /* CLOCK_MONOTONIC */
int64_t kb_now_real_ns(void);  /* CLOCK_REALTIME */
/* "2026-11-30T08:00:00.123456Z" (microseconds, UTC) into buf (>= 32 bytes). */
void kb_format_rfc3339_us(int64_t real_ns, char *buf, size_t size);
/* An absolute CLOCK_MONOTONIC deadline timeout_ms from now, for pthread_cond_timedwait
 * on a condition variable created with kb_cond_init_mono(). */
struct timespec kb_deadline_mono(int64_t timeout_ms);
/* Initialise cv to wait against CLOCK_MONOTONIC (immune to wall-clock jumps);
 * destroy with pthread_cond_destroy. */
void kb_cond_init_mono(pthread_cond_t *cv);
/* Sleep up to ms, returning early (non-zero) if *stop becomes true. Polls every 50 ms at most. */
int kb_sleep_ms_interruptible(int64_t ms, const _Atomic _Bool *stop);
/* A uniform random double in [0, 1), thread-safe (per-thread state). */
double kb_random_unit(void);

#endif
