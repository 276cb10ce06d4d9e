/* informer/deltafifo.h — one shard's queue of pending changes, per key.
 *
 * Keys wait in FIFO order; each key holds the list of its pending events
 * (deltas), oldest first. A key keeps its queue slot while more deltas
 * arrive for it; pop hands out all pending deltas of the oldest key at once,
 * so one key is never processed by two pops at the same time and per-key
 * order holds by construction.
 *
 * Compaction (informers[].compaction), applied on push to the deltas still queued:
 *   NONE:   every event is kept.
 *   LATEST: Added + Modified…   → Added(latest)
 *           Modified + Modified → Modified(latest)
 *           Added + Modified, or Modified + Added, at one RV → both kept
 *                                 (the consumer rule reads the type there:
 *                                 deltafifo.c's note on acknowledgement)
 *           Sync/Snapshot + X   → X
 *           …+ Deleted          → Deleted (latest object); an Added still
 *                                 queued and then Deleted vanishes entirely
 *                                 (the key leaves the queue if nothing remains)
 *                                 — unless the Added is a redelivery from the
 *                                 journal (ev->redelivery): a sink may have it,
 *                                 so the Deleted stays
 *           merges keep the redelivery mark of what they replace
 *           Deleted + Deleted   → one if the same uid; deletes of two
 *                                 incarnations of the name are both kept
 *           Deleted + Added     → both kept (a new uid is a new object)
 *
 * Coalescing window (informers[].coalesce_ms, LATEST only): a key's deltas
 * wait until window_ns after its FIRST pending delta arrived, so a burst
 * merges into one pop. The window starts with the first delta and does not
 * restart (a change waits at most window_ns: no starvation under a burst); a
 * DELETED makes its key ready at once; keys whose window ended and keys made
 * ready go in the order their first delta came; close ends all windows.
 *
 * Bounded in bytes (kb_event_size): push blocks while the queue holds more
 * than max_bytes, which stops the reflector reading its socket (TCP
 * backpressure). An event is always accepted into an empty queue, however
 * large, so a huge object cannot wedge it.
 *
 * Threads: any number of pushers, one popper (the shard's worker).
 * Locks: one mutex per fifo (fifo->mtx), never held while calling out.
 */
#ifndef KB_INFORMER_DELTAFIFO_H
#define KB_INFORMER_DELTAFIFO_H

#include "common/err.h"
#include "common/event.h"
#include "config/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_deltafifo kb_deltafifo_t;

typedef struct kb_deltas {
    kb_event_t **ev; /* n events of one key, oldest first; references owned */
    size_t n;
    size_t cap;
} kb_deltas_t;

void kb_deltas_init(kb_deltas_t *d);
void kb_deltas_fini(kb_deltas_t *d); /* unrefs the events */

kb_deltafifo_t *kb_deltafifo_new(kb_compaction_t mode, size_t max_bytes);
/* Frees whatever is still queued. NULL is a no-op. */
void kb_deltafifo_destroy(kb_deltafifo_t *fifo);

/* Queue ev (always consumes the reference, also on error). Waits up to
 * timeout_ms (-1 forever) while the queue is over its byte bound. Returns
 * KB_OK, KB_ERR_TIMEDOUT (ev dropped — the caller decides), or KB_ERR_CLOSED.
 * Thread: any. Locks: fifo->mtx. */
kb_err_t kb_deltafifo_push(kb_deltafifo_t *fifo, kb_event_t *ev, int timeout_ms);
/* kb_deltafifo_push without waking the popper: a batch's pushes are followed
 * by one kb_deltafifo_wake (which the pusher owes: until it, the popper may
 * sleep on what was queued; a push that waits for room pays it first). */
kb_err_t kb_deltafifo_push_held(kb_deltafifo_t *fifo, kb_event_t *ev, int timeout_ms);
/* Wake the popper for what kb_deltafifo_push_held queued (nothing held: a no-op). */
void kb_deltafifo_wake(kb_deltafifo_t *fifo);

/* Move all pending deltas of the oldest key whose window has ended (or that a
 * delete made ready) into *out (which must be empty;
 * reuse it after kb_deltas_fini). Waits up to timeout_ms (-1 forever).
 * Returns KB_OK, KB_ERR_TIMEDOUT, or KB_ERR_CLOSED once closed and empty.
 * Thread: the shard's worker. Locks: fifo->mtx. */
kb_err_t kb_deltafifo_pop(kb_deltafifo_t *fifo, kb_deltas_t *out, int timeout_ms);

/* True if key has deltas waiting (resync skips such keys). Thread: any. */
bool kb_deltafifo_has_pending(kb_deltafifo_t *fifo, const char *key, size_t len, uint64_t hash);

/* Called (with fifo->mtx held: keep it short, take no lock that a pusher may
 * hold) for every queued event LATEST compaction removes — merged into a later
 * event of its key or cancelled by a delete — so the owner can count it done.
 * The event is borrowed. */
typedef void (*kb_deltafifo_drop_fn)(void *opaque, const kb_event_t *ev);
void kb_deltafifo_set_drop(kb_deltafifo_t *fifo, kb_deltafifo_drop_fn fn, void *opaque);

/* The clock of the coalescing window, in nanoseconds of any monotonic scale. */
typedef int64_t (*kb_deltafifo_clock_fn)(void *opaque);
/* Hold each key's deltas until window_ns after its first one (0 = off; ignored
 * unless the mode is LATEST). now: the clock (NULL = CLOCK_MONOTONIC); pop
 * waits in real time for at most the remaining window, so a clock that is not
 * real time suits only pops with timeout 0. Call before pushes start; keys
 * already queued are not held. Thread: any. Locks: fifo->mtx. */
void kb_deltafifo_set_coalesce(kb_deltafifo_t *fifo, int64_t window_ns, kb_deltafifo_clock_fn now, void *opaque);

/* Wake all waiters; pushes fail with KB_ERR_CLOSED; pops drain what is left
 * and then return KB_ERR_CLOSED. Thread: any. */
void kb_deltafifo_close(kb_deltafifo_t *fifo);

typedef struct kb_deltafifo_stats {
    size_t keys;        /* keys waiting */
    size_t deltas;      /* events waiting */
    size_t bytes;       /* kb_event_size sum of events waiting */
    uint64_t pushed;    /* events accepted */
    uint64_t compacted; /* events merged away by LATEST */
    uint64_t full_waits;/* pushes that had to wait for room */
    uint64_t pop_waits; /* pops that found nothing to take and slept */
} kb_deltafifo_stats_t;

void kb_deltafifo_stats(kb_deltafifo_t *fifo, kb_deltafifo_stats_t *st);

#endif
