/* common/histogram.c — fixed-bucket latency histogram (see histogram.h). */
#include "common/histogram.h"

#include <stddef.h>

const double kb_histogram_bounds[KB_HIST_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,  10.0};

void kb_histogram_observe_ns(kb_histogram_t *h, int64_t ns) {
    if (ns < 0)
        ns = 0;
    double s = (double)ns / 1e9;
    size_t i = 0;
    while (i < KB_HIST_BUCKETS && s > kb_histogram_bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, (uint64_t)ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

void kb_histogram_read(const kb_histogram_t *h, kb_histogram_snap_t *out) {
    uint64_t run = 0;
    for (size_t i = 0; i <= KB_HIST_BUCKETS; i++) {
        run += atomic_load_explicit(&((kb_histogram_t *)h)->counts[i], memory_order_relaxed);
        out->cumulative[i] = run;
    }
    out->count = run;
    out->sum_seconds = (double)atomic_load_explicit(&((kb_histogram_t *)h)->sum_ns, memory_order_relaxed) / 1e9;
}
