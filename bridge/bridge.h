/* bridge/bridge.h — the running bridge: informers, routers, sinks, workers.
 *
 * kb_bridge_new() builds everything from a loaded config without starting a
 * thread (so every error can still be a clean exit 2); kb_bridge_start()
 * starts sinks' delivery, shard workers and reflectors; kb_bridge_stop()
 * drains: reflectors stop reading, workers hand what is queued to the sinks,
 * sinks flush, all within timeout_ms; kb_bridge_destroy() frees.
 *
 * Threads: all four are called from the main thread only, never while a
 * reload runs (kb_bridge_reload's thread is joined first). The config must
 * outlive the bridge.
 *
 * Lifecycle steps are ledger transitions (informer/ledger.h). Each decides
 * the fate of every change in flight — a message a worker holds or a sink
 * has not acknowledged — as one of: DELIVERED (acknowledged; the watermark
 * passes it), HANDED OVER (sent again to a successor, in order), or LEFT
 * (unacknowledged: the sink's bit stays set in the ledger, the watermark and
 * the checkpoint stay below it, and with state_dir the next start or a
 * reopen delivers it again). A change is never skipped: no step marks a
 * change done that no sink acknowledged. Each step touches only what it
 * names — the pipeline it drains, the sink instance it retires — through
 * flags of that object (kb_pipeline_t.abandon, kb_bsink_t.collect/held);
 * there is no flag of the whole bridge.
 *
 *   step (who)                         in flight in the step's scope    elsewhere
 *   ---------------------------------  -------------------------------  ---------
 *   stop (SIGTERM), before deadline    DELIVERED                        —
 *   stop, at the deadline              LEFT: workers abandon, sinks     —
 *     (kb_bridge_stop)                 give lines back KB_ERR_STOPPED
 *   reload removes an informer         drained into its sinks until     untouched
 *     (kb_reload_drain_removed)        shutdown_timeout, then LEFT in
 *                                      its own state_dir
 *   reload rebuilds a sink             old instance flushes until       workers
 *     (kb_reload_retire_sinks)         shutdown_timeout, the rest is    wait for
 *                                      HANDED OVER (seq order) before   the hand-
 *                                      the new instance takes anything  over
 *   reload removes a sink              LEFT; the ledger waits for that  untouched
 *                                      sink no more
 *   stopped-sink retry (SIGHUP)        its informers drained, reopened  untouched
 *     (kb_bridge_retry_sinks)          on state_dir: LEFT, delivered
 *                                      again from the journal
 *   a sink refuses (its verdict)       on_refused: stop (LEFT) or dead  —
 *                                      letter (DELIVERED to that sink)
 *   a sink gives up without verdict    LEFT, and the sink is held like  —
 *     (KB_ERR_TIMEDOUT, retry limit)   a stopped one (SIGHUP retries)
 *   HA standby at stop or abandon      LEFT (kb_ha_admit → DROP)        —
 */
#ifndef KB_BRIDGE_BRIDGE_H
#define KB_BRIDGE_BRIDGE_H

#include "common/err.h"
#include "config/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_bridge kb_bridge_t;

/* Check what the loader cannot: sink settings and route/sink compatibility. */
kb_err_t kb_bridge_validate(const kb_config_t *cfg, char *errstr, size_t errstr_size);
/* --check: kb_bridge_validate plus what start-up would refuse without
 * talking to anyone: the cluster credentials (kubeconfig, token and CA
 * files; the service account when in_cluster and inside a pod),
 * http.token_file, a state_dir that names a file.
 * Starts no thread; no network. Thread: main. */
kb_err_t kb_bridge_check(const kb_config_t *cfg, char *errstr, size_t errstr_size);

kb_bridge_t *kb_bridge_new(const kb_config_t *cfg, char *errstr, size_t errstr_size);
kb_err_t kb_bridge_start(kb_bridge_t *b);
/* Drain and stop within timeout_ms. KB_ERR_TIMEDOUT if something was left
 * undelivered (it is logged). */
kb_err_t kb_bridge_stop(kb_bridge_t *b, int timeout_ms);
void kb_bridge_destroy(kb_bridge_t *b);
/* Messages handed to sinks that were not acknowledged: still in flight, or
 * given up by the sink (a failed delivery) since start, over all informers.
 * Without state_dir nothing delivers them again. Thread: any. Locks: b->lock
 * (read), waited for at most 1 s: UINT64_MAX (unknown) if it was not had. */
uint64_t kb_bridge_unacknowledged(kb_bridge_t *b);
/* SIGHUP: ask every running sink that can to reopen its output (the file
 * sink's path after logrotate). Never blocks. Thread: the reload thread. */
void kb_bridge_reopen_sinks(kb_bridge_t *b);
/* One log line per informer and sink with the counters. */
void kb_bridge_log_stats(kb_bridge_t *b);

/* Apply a new config (SIGHUP): informers and sinks whose definition is
 * unchanged keep running (no relist), others are added or removed, routes are
 * replaced. Everything is validated and built first: on any error nothing
 * changes, KB_ERR_CONFIG is returned with "FILE:LINE: …" in errstr, and the
 * caller keeps ownership of cfg. On success the bridge owns cfg (freed by
 * kb_bridge_destroy). Changes to cluster, state_dir/journal, sharding or http
 * are refused: they need a restart.
 *
 * The steps, in order (each row's exit is the next row, or the end):
 *
 *   step     does                                             waits for               exits early
 *   BUILD    validate; build new sinks and informers          nothing unbounded       KB_ERR_CONFIG
 *   LOCK     every route lock of the new config's informers,  a worker's batch, in    KB_ERR_STOPPED when
 *            all at once or none, attempt after attempt       200 ms slices           *abandon is set
 *   SWAP     new routes in, each route lock given back        —                       —
 *   PUBLISH  new informers/sinks/config under b->lock         short reader sections   —
 *   DRAIN    removed informers drained and closed             shutdown_timeout        —
 *   START    new informers started                            —                       —
 *   CLOSE    sinks nothing routes to flushed and closed       shutdown_timeout        —
 *
 * Nothing running changes before SWAP, so giving up (*abandon: a stop, or a
 * newer SIGHUP that supersedes this one) is only possible until then;
 * KB_ERR_STOPPED then, and the caller keeps cfg. Thread: one reload thread,
 * never the one that takes signals, never alongside kb_bridge_stop. */
kb_err_t kb_bridge_reload(kb_bridge_t *b, kb_config_t *cfg, const _Atomic bool *abandon, char *errstr,
                          size_t errstr_size);

/* ---- introspection, for the HTTP API (bridge/http.c) ------------------ *
 * Call these from any thread while the bridge runs, holding the bridge's
 * read lock (kb_bridge_rdlock … kb_bridge_unlock) for as long as the result is
 * used: a reload swaps informers and sinks under the write lock. Objects a
 * reload replaced stay allocated until kb_bridge_destroy. */
/* The names of the sinks that stopped after refusing a message (on_refused =
 * "stop"), malloc'd (free each and the array). Thread: the reload thread. */
size_t kb_bridge_stopped_sinks(kb_bridge_t *b, char ***names);
/* Try the named sinks again (SIGHUP, after a reload): every informer that
 * routes to one is drained, closed and opened again on its state_dir, so the
 * journal's tail goes again to the sinks whose watermark is below it — the
 * stopped ones — and the sinks take messages again. Returns the informers
 * reopened. Thread: the reload thread. Locks: b->lock (write) to close and
 * reopen, not while it drains (up to shutdown_timeout). */
size_t kb_bridge_retry_sinks(kb_bridge_t *b, char *const *names, size_t n);

void kb_bridge_rdlock(kb_bridge_t *b);
void kb_bridge_unlock(kb_bridge_t *b);
struct kb_informer;
struct kb_sink;
struct kb_histogram;

size_t kb_bridge_informer_count(const kb_bridge_t *b);
struct kb_informer *kb_bridge_informer(kb_bridge_t *b, size_t i);      /* in cfg->informers order */
struct kb_informer *kb_bridge_find_informer(kb_bridge_t *b, const char *name);
const kb_config_t *kb_bridge_config(const kb_bridge_t *b);
struct kb_ha;
/* The leader election (bridge/ha.h) when ha.enabled, else NULL. Lives as long as b. */
struct kb_ha *kb_bridge_ha(kb_bridge_t *b);

typedef struct kb_pipeline_stats {
    uint64_t delivered, failed, routed, unrouted;
    int64_t inflight;
    int64_t last_change_real_ns; /* wall time of the newest ADDED/MODIFIED/DELETED routed (0: none yet) */
} kb_pipeline_stats_t;
void kb_bridge_pipeline_stats(kb_bridge_t *b, size_t informer, kb_pipeline_stats_t *st);
/* Time a shard worker spends per event (routing + handing to sinks), by event type. */
const struct kb_histogram *kb_bridge_handle_histogram(kb_bridge_t *b, size_t informer, int type);

/* Per route of informer i that suppresses no-ops (suppress_noop = true): its
 * name (valid while the read lock is held) and how many changes it skipped.
 * Returns how many were written (at most max). */
size_t kb_bridge_noop_counts(kb_bridge_t *b, size_t informer, const char **routes, uint64_t *suppressed, size_t max);

struct kb_sink *kb_bridge_sink(kb_bridge_t *b, size_t i);             /* in cfg->sinks order */
/* Watch read → sink acknowledgement, per sink. */
const struct kb_histogram *kb_bridge_delivery_histogram(kb_bridge_t *b, size_t sink);
void kb_bridge_sink_counts(kb_bridge_t *b, size_t sink, uint64_t *acked, uint64_t *failed);

/* What a sink refused for good (on_refused), by reason (kb_err_name: "TOOBIG",
 * "DELIVERY", …), and whether it is stopped now, with what stopped it. */
typedef struct kb_sink_refusals {
    bool stopped;
    char why[512];            /* "refused ns/name rv=R: reason" while stopped */
    uint64_t dead_letters;    /* refused messages handed to its dead-letter sink */
    size_t n;
    const char *reason[8];    /* static strings */
    uint64_t count[8];
} kb_sink_refusals_t;
/* Fills *out; returns out->stopped. Caller holds kb_bridge_rdlock. Thread: any. */
bool kb_bridge_sink_refusals(kb_bridge_t *b, size_t sink, kb_sink_refusals_t *out);

/* Publish every cached object of informer that route matches (namespaces,
 * label_selector: kb_route_match, as live delivery) as SNAPSHOT to the
 * route's sink (a consistent cut; *count gets how many). The messages bypass
 * the checkpoint (they repeat state, they are no new change). KB_ERR_NOTFOUND
 * with a reason for an unknown informer or route, or a route of another
 * informer; KB_ERR_CONFIG when the route's types leave SNAPSHOT out.
 * Thread: any. */
kb_err_t kb_bridge_publish_snapshot(kb_bridge_t *b, const char *informer, const char *route, size_t *count,
                                    char *errstr, size_t errstr_size);

/* The embedded default configuration of `kbridge --demo`, for a simulator on port. */
char *kb_demo_config_text(int port);

#endif
