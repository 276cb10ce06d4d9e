/* common/histogram.h — a fixed-bucket latency histogram for Prometheus.
 *
 * Buckets (seconds): 100 µs … 10 s, roughly ×2.5 apart, plus +Inf. Observe
 * is lock-free (relaxed atomics: counters may be momentarily inconsistent
 * with each other while read, as Prometheus clients tolerate). Zero-initialise
 * or kb_histogram_init; no teardown.
 */
#ifndef KB_COMMON_HISTOGRAM_H
#define KB_COMMON_HISTOGRAM_H

#include <stdatomic.h>
#include <stdint.h>

#define KB_HIST_BUCKETS 16

extern const double kb_histogram_bounds[KB_HIST_BUCKETS]; /* upper bounds, seconds */

typedef struct kb_histogram {
    _Atomic uint64_t counts[KB_HIST_BUCKETS + 1]; /* per bucket (not cumulative); last = +Inf */
    _Atomic uint64_t sum_ns;
    _Atomic uint64_t count;
} kb_histogram_t;

void kb_histogram_observe_ns(kb_histogram_t *h, int64_t ns);

/* A consistent-enough copy: cumulative counts as Prometheus wants them. */
typedef struct kb_histogram_snap {
    uint64_t cumulative[KB_HIST_BUCKETS + 1];
    double sum_seconds;
    uint64_t count;
} kb_histogram_snap_t;
void kb_histogram_read(const kb_histogram_t *h, kb_histogram_snap_t *out);

#endif
