/* sinks/heartbeat.h — periodic HEARTBEAT records on a route, so a consumer
 * can tell "nothing changed" from "the bridge is gone".
 *
 * One kb_heartbeat_t per route with routes[].heartbeat_seconds > 0. Its
 * thread ("kb:hb/<route>") builds, every interval, one compact JSON object
 *
 *   {"type":"HEARTBEAT","cluster":"prod","informer":"pods","route":"audit",
 *    "resourceVersion":"12345","time":"2026-11-30T08:00:00.123456Z","seq":1}
 *
 * and hands it to the emit callback, which the owner (bridge/) publishes on
 * the route's sink. resourceVersion is the informer's last RV as given by the
 * last_rv callback (or, without one, the last kb_heartbeat_set_rv()); "" until
 * known. seq counts from 1 per kb_heartbeat_t. Beats are spaced on a
 * CLOCK_MONOTONIC schedule (start + k·interval, no drift); a slow emit skips
 * the beats it overran instead of bunching them.
 *
 * Lifecycle: _new (no thread) → _start → _stop (joins; no callback runs
 * after it returns) → _destroy. Callbacks run on the heartbeat thread with no
 * heartbeat lock held; they may block for a while (a full sink queue) but
 * must not call _stop or _destroy of the same heartbeat.
 */
#ifndef KB_SINKS_HEARTBEAT_H
#define KB_SINKS_HEARTBEAT_H

#include "common/buf.h"
#include "common/err.h"
#include "config/config.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kb_heartbeat kb_heartbeat_t;

/* Publish one record (json[0..len), NUL-terminated, valid during the call). */
typedef void kb_heartbeat_emit_fn(void *opaque, const char *json, size_t len);
/* Write the informer's last resourceVersion, NUL-terminated, into buf ("" if unknown). */
typedef void kb_heartbeat_rv_fn(void *opaque, char *buf, size_t size);

/* route: its name and informer are copied; cluster is copied. interval_ms > 0
 * (route->heartbeat_seconds * 1000). last_rv may be NULL (then set_rv feeds it).
 * Thread: any. */
kb_heartbeat_t *kb_heartbeat_new(const kb_config_route_t *route, const char *cluster, int64_t interval_ms,
                                 kb_heartbeat_emit_fn *emit, kb_heartbeat_rv_fn *last_rv, void *opaque);
/* Start the thread; the first beat comes one interval later. KB_ERR_* if the
 * thread cannot be created. Thread: the owner. */
kb_err_t kb_heartbeat_start(kb_heartbeat_t *hb);
/* Stop and join (waits for a running emit to return). Idempotent. Thread: the owner. */
void kb_heartbeat_stop(kb_heartbeat_t *hb);
/* Stops first if needed; NULL is a no-op. Thread: the owner. */
void kb_heartbeat_destroy(kb_heartbeat_t *hb);

/* Remember the last RV (used when no last_rv callback was given). Thread: any. Locks: hb->mtx. */
void kb_heartbeat_set_rv(kb_heartbeat_t *hb, const char *rv, size_t len);
/* Beats emitted so far. Thread: any. */
uint64_t kb_heartbeat_count(const kb_heartbeat_t *hb);

/* The record for the given values (exposed for tests and for a beat on demand). */
void kb_heartbeat_format(kb_buf_t *out, const char *cluster, const char *informer, const char *route,
                         const char *rv, int64_t real_ns, uint64_t seq);

#endif
