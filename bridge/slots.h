/* bridge/slots.h — the HTTP server's body slots (http.max_streams), shared
 * by its own snapshot/replay streams and the Kubernetes API's lists and
 * watch initial events.
 *
 * Why one counter for both: each body being sent holds memory until its
 * client reads it (a page of the journal, the references of a cut, a block
 * of unsent output), and a client that never reads holds it for as long as
 * it likes; a bound per surface would let one surface's clients add to the
 * other's. bridge/http.c owns the slots and passes them to bridge/kapi.c.
 * Thread: any (atomics only).
 */
#ifndef KB_BRIDGE_SLOTS_H
#define KB_BRIDGE_SLOTS_H

#include <stdatomic.h>
#include <stdbool.h>

typedef struct kb_slots {
    atomic_int in_use;       /* bodies being sent (kbridge_http_streams) */
    int max;                 /* http.max_streams */
    atomic_ullong refused;   /* answered 429 for want of a slot */
} kb_slots_t;

/* The 429's message when every slot is taken (a printf format of max), the
 * same from /v1 and from the kube API. */
#define KB_SLOTS_BUSY_FMT "%d snapshot/replay/list streams are being sent already (http.max_streams); retry later"

/* Take a slot; false (counted as refused) when all max are taken. */
static inline bool kb_slots_take(kb_slots_t *sl) {
    if (atomic_fetch_add(&sl->in_use, 1) < sl->max)
        return true;
    atomic_fetch_sub(&sl->in_use, 1);
    atomic_fetch_add(&sl->refused, 1);
    return false;
}

/* Give back a slot taken with kb_slots_take. */
static inline void kb_slots_give(kb_slots_t *sl) {
    atomic_fetch_sub(&sl->in_use, 1);
}

#endif
