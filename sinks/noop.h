/* sinks/noop.h — no-op suppression: do not send a change the consumer already has.
 *
 * One kb_noop_t per route (routes[].suppress_noop = true, the default). It
 * remembers, per object key, a 64-bit hash and the length of the object bytes
 * last delivered on that route, and answers "send it?" for each event the
 * route matched. The comparison is over the projected object (drop/redact/
 * keep already applied) with the value of metadata.resourceVersion left out:
 * every write bumps the RV, so without that a status change the user
 * projected away would never compare equal.
 *
 * The rule (see also docs/routing.md):
 *   ADDED      always sent; recorded.
 *   MODIFIED   suppressed when identical to the last delivery of the key; else sent, recorded.
 *   SYNC       like MODIFIED, unless the route lists SYNC in `types` explicitly
 *              (types_set): then always sent, because a route that asks for
 *              SYNC wants the periodic re-assertion itself. Recorded.
 *   SNAPSHOT   always sent (an explicit request); recorded.
 *   DELETED    always sent; the key is forgotten (memory stays bounded by the
 *              number of live keys).
 * A key never seen (first event after start, after a reload, after a DELETED)
 * is always sent. A suppressed event is not in flight: the caller treats it as
 * delivered and acknowledged at once, so the checkpoint does not wait on it.
 *
 * Threads: any shard worker may call concurrently. A key is handled by one
 * worker at a time, but the table is shared, so it is split into stripes
 * chosen by the key hash, each with its own mutex, held only for one lookup
 * (never across a call out). Counters are atomics.
 */
#ifndef KB_SINKS_NOOP_H
#define KB_SINKS_NOOP_H

#include "common/event.h"
#include "config/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_noop kb_noop_t;

/* Which event types may be suppressed on this route: bit (1 << kb_event_type_t).
 * 0 when the route has suppress_noop = false (the caller need not create a
 * kb_noop_t then); else MODIFIED, plus SYNC unless types lists it explicitly. */
uint32_t kb_noop_suppress_mask(const kb_config_route_t *route);

/* suppress_mask from kb_noop_suppress_mask(); only MODIFIED and SYNC bits count. */
kb_noop_t *kb_noop_new(uint32_t suppress_mask);
void kb_noop_destroy(kb_noop_t *noop); /* NULL is a no-op */

/* true = send ev (and it is now recorded as the key's last delivery);
 * false = identical to the last delivery, skip it. Call only for events the
 * route matched, just before handing them to the sink. Thread: any. Locks: one stripe. */
bool kb_noop_check_and_record(kb_noop_t *noop, const kb_event_t *ev);

/* Forget a key (it left this replica's share, or the route stopped matching
 * it); the next event of the key is sent. Thread: any. Locks: one stripe. */
void kb_noop_forget(kb_noop_t *noop, const char *key, size_t len, uint64_t key_hash);
/* Forget every key (e.g. after a server RV regression). Thread: any. Locks: each stripe in turn. */
void kb_noop_clear(kb_noop_t *noop);

typedef struct kb_noop_stats {
    uint64_t sent;       /* events answered true */
    uint64_t suppressed; /* events answered false (kbridge_noop_suppressed_total{route}) */
    size_t keys;         /* keys remembered now */
    size_t bytes;        /* memory the tables use, approximately */
} kb_noop_stats_t;

/* A consistent-enough snapshot for metrics. Thread: any. Locks: each stripe in turn. */
void kb_noop_stats(kb_noop_t *noop, kb_noop_stats_t *out);

/* The hash compared (exposed for tests): obj[0..len) with the bytes of rv
 * skipped where they follow the first "resourceVersion":" whose value equals rv. */
uint64_t kb_noop_hash(const char *obj, size_t len, const char *rv, size_t rv_len);

#endif
