/* informer/informer.h — list + watch one resource into sharded queues.
 *
 * An informer owns: one reflector thread per watched namespace (or one for
 * the whole cluster), an indexer (the latest accepted state per key), one
 * DeltaFIFO per shard, and an optional resync thread. It does not deliver:
 * the bridge's shard workers pop the FIFOs (kb_informer_fifo) and route.
 *
 * Every change the server reports becomes at most one event per key, in
 * resourceVersion order per key:
 *   - a per-key gate (informer/ledger.h) drops a watch event whose numeric RV
 *     is not newer than what the key last had, live or deleted, whatever its
 *     uid (a replay after a resume can never go backwards);
 *   - a relist is diffed against the indexer: ADDED for new keys, MODIFIED
 *     for changed RVs, nothing for unchanged keys, DELETED with
 *     finalStateUnknown for keys that vanished, DELETED(old uid) + ADDED(new
 *     uid) when a name was re-created;
 *   - events go to shard (FNV-1a(key) % shards); objects another replica
 *     owns (informer/shard.h: by name, or by uid/namespace hash range when
 *     the server is asked to shard) are not taken at all.
 *
 * With state_dir set, every accepted change is journalled (LMDB, group
 * commit) before it is queued and the cache is persisted. The bridge
 * acknowledges each change per sink into the informer's ledger
 * (kb_informer_ledger); each sink's watermark and the checkpoint (the lowest
 * of them) are written to state_dir. A restart loads the cache, queues the
 * journal's unacknowledged tail again — to the sinks below each change only —
 * and resumes the watch where the journal ends; a 410 there relists and diffs.
 *
 * Threads: kb_informer_* calls come from the bridge's main thread; stats,
 * done and the accessors may be called from any thread.
 */
#ifndef KB_INFORMER_INFORMER_H
#define KB_INFORMER_INFORMER_H

#include "common/buf.h"
#include "common/err.h"
#include "common/event.h"
#include "common/selector.h"
#include "config/config.h"
#include "informer/apiclient.h"
#include "informer/deltafifo.h"
#include "informer/indexer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_informer kb_informer_t;

/* Why a watch or list ended badly; index into kb_informer_stats_t.errors. */
typedef enum {
    KB_WATCH_ERR_GONE,        /* 410 (HTTP or ERROR event) */
    KB_WATCH_ERR_THROTTLED,   /* 429 */
    KB_WATCH_ERR_SERVER,      /* 5xx or an ERROR event with code 500 */
    KB_WATCH_ERR_CONNECT,     /* connection refused, DNS, TLS handshake, reset */
    KB_WATCH_ERR_MALFORMED,   /* a frame that is not a watch event */
    KB_WATCH_ERR_HTTP,        /* other statuses: 400, 401, 403, 404 … */
    KB_WATCH_ERR_DECODE,      /* an object without name/metadata (skipped) */
    KB_WATCH_ERR_STATE,       /* state_dir could not be written (the changes are read again) */
    KB_WATCH_ERR_COUNT
} kb_watch_err_t;

const char *kb_watch_err_name(kb_watch_err_t e);

typedef struct kb_informer_stats {
    uint64_t events[KB_EV_TYPE_COUNT]; /* events queued, by output type */
    uint64_t watch_events;             /* frames received (all types, bookmarks included) */
    uint64_t bookmarks;
    int64_t heard_ns;                  /* realtime of the newest list page or watch frame (a bookmark too)
                                        * from the API server, 0: none yet — how fresh the cache is known to be */
    uint64_t errors[KB_WATCH_ERR_COUNT];
    uint64_t relists;                  /* lists after the first */
    uint64_t lists;                    /* completed lists */
    uint64_t list_pages;
    uint64_t gated;                    /* watch events refused as not newer than the cache */
    uint64_t watches;                  /* watch requests opened */
    uint64_t rv_regressions;           /* lists below the previous resume point */
    const char *sharding;              /* "none" (one replica); "server": asked with shardSelector and nothing
                                        * of another replica came; "client": filtered here (by name, or the
                                        * server ignored shardSelector) */
    const char *shard_basis;           /* what ownership hashes: "name", "uid" or "namespace" */
    uint64_t shard_foreign;            /* objects received that another replica owns (dropped) */
    uint64_t seq;                      /* the newest event or marker accepted */
    uint64_t ack_seq;                  /* everything up to here is acknowledged by every sink */
    int64_t ack_time_ns;               /* realtime of the newest acknowledgement (0: none) */
    char checkpoint_rv[KB_RV_MAX];            /* resume RV at ack_seq (of the first reflector) */
    bool persistent;                   /* state_dir is in use */
    size_t objects;                    /* keys in the indexer */
    size_t cache_bytes;                /* memory of the cache: entries, table, dictionaries */
    /* The compressed cache (informer/zcache.h; all 0 when off or with state_dir). */
    bool cache_compression;            /* the cache compresses its objects */
    size_t cache_raw_bytes;            /* what cache_bytes would be with every object uncompressed */
    size_t cache_packed;               /* entries held compressed */
    size_t cache_dict_bytes;           /* memory of the dictionaries (included in cache_bytes) */
    size_t cache_dicts;                /* dictionaries alive (older ones live while entries use them) */
    uint64_t cache_dict_trainings;     /* dictionaries trained */
    size_t pending_deltas, pending_bytes;
    bool synced;                       /* every reflector finished its first list */
    uint64_t sync_objects;             /* while not synced: objects the first lists received so far; else 0 */
    bool paused;                       /* reading waits: the window of unacknowledged changes is full */
    uint64_t window;                   /* changes not acknowledged by every sink */
    char last_rv[KB_RV_MAX];                  /* of the cluster-wide (or first) reflector */
    char last_error[256];              /* the latest error, "" if none since start */
    /* The drift audit (informer/audit.h): totals, and what the last run found. */
    uint64_t audit_runs;
    uint64_t audit_drift[3];           /* by kb_audit_kind_t: missing, stale, unknown */
    int64_t audit_last_ns;             /* realtime the last audit ended, 0: none yet */
    uint64_t audit_last_drift[3];
    bool audit_last_relisted;          /* the last audit asked for a full relist */
} kb_informer_stats_t;

/* Build (no threads yet). NULL with "FILE:LINE: …" in errstr on bad settings. */
kb_informer_t *kb_informer_new(const kb_config_t *cfg, const kb_config_informer_t *conf, kb_apiclient_t *api,
                               char *errstr, size_t errstr_size);
/* Start the reflector (and resync) threads. */
kb_err_t kb_informer_start(kb_informer_t *inf);
/* Stop reading from the server: join reflectors and resync, then close the
 * FIFOs so workers drain what is queued and see KB_ERR_CLOSED. */
void kb_informer_stop(kb_informer_t *inf);
void kb_informer_destroy(kb_informer_t *inf); /* after stop; NULL is a no-op */

/* seq needs nothing more from any sink (kb_ledger_done): a change LATEST
 * compaction merged away, for instance. Thread: any. Locks: the ledger's (leaf). */
void kb_informer_done(kb_informer_t *inf, uint64_t seq);

/* The informer's ledger (informer/ledger.h): sinks acknowledge into it.
 * Valid for the informer's life. Thread: any. */
struct kb_ledger *kb_informer_ledger(kb_informer_t *inf);
/* HA: this replica took over at took_rv (the RV of its Lease write), trusting
 * the old leader's mark up to trusted. From now on every window of RVs it
 * lists without watching (a first list (0, its RV]; a relist after 410, from
 * where the watch was) that reaches into what the old leader may have
 * delivered without publishing it — above trusted, an object created at or
 * below took_rv — is logged (WARN) and counted: such an object's DELETED is
 * never sent (kb_hatable_blind). The windows this process listed before are
 * weighed now, as their hull; now: also what came before this process started
 * from state_dir, (0, its resume point] (at the takeover itself); false when
 * a restarted leader re-arms it (its last process weighed those). Thread: the
 * HA thread. */
void kb_informer_ha_took(kb_informer_t *inf, uint64_t trusted, uint64_t took_rv, bool now);
/* Since kb_informer_ha_took: how many such windows, and their hull (*lo, *hi]
 * (from above the trusted mark). Thread: any; no lock (the ingest lock may be
 * held across a full queue's push). */
uint64_t kb_informer_blind(kb_informer_t *inf, uint64_t *lo, uint64_t *hi);

/* The exactly-once cut for the transaction about to commit, as JSON appended
 * to json (kb_ledger_txn_cut). Thread: any. Locks: the ledger's. */
void kb_informer_txn_cut(kb_informer_t *inf, kb_buf_t *json);
/* Before start: a cut read back from a transactional sink (its JSON). Journal
 * entries it covers were committed there and are not delivered again; the
 * watch resumes at its RVs. KB_ERR_INVAL (errstr) if it does not parse or is
 * ahead of state_dir. Thread: main, before kb_informer_start. */
kb_err_t kb_informer_apply_cut(kb_informer_t *inf, const char *json, size_t len, char *errstr, size_t errstr_size);
/* HA: a change staged here at or below *shared_rv (read at each change; the
 * replica's role sets it: UINT64_MAX while it stands by, the Lease's RV at
 * its takeover once it leads) may have been delivered by another replica — a
 * leader delivers what a standby holds. Such a change is queued marked as a
 * redelivery, as the journal's tail after a restart is, so compaction never
 * merges an ADDED a consumer may have away with its DELETED. shared_rv
 * (borrowed, outlives inf; NULL: none) is set once, before kb_informer_start.
 * Thread: main. */
void kb_informer_ha_shared(kb_informer_t *inf, const _Atomic uint64_t *shared_rv);
/* Queue the journal's unacknowledged tail again (kb_informer_start does it;
 * exposed for the deterministic simulation, which runs no threads). */
void kb_informer_requeue_tail(kb_informer_t *inf);

/* Write the checkpoint now (after the sinks flushed at shutdown). */
void kb_informer_save_checkpoint(kb_informer_t *inf);
/* After stop and a drain: write the last checkpoint and close state_dir, so
 * the same informer may be opened again (hot reload). Idempotent. */
void kb_informer_close_state(kb_informer_t *inf);

/* A consistent cut of the cache: references to every cached object (of one
 * namespace when ns is not NULL) into *out, each with its object readable,
 * and in rv the resume RV the cut corresponds to (a replay from rv continues
 * exactly after it). Thread: any. Locks: the ingest lock, only while taking
 * references (no event is accepted meanwhile); objects are read (state_dir,
 * decompression) after it is released, each as it was at the cut. */
void kb_informer_snapshot(kb_informer_t *inf, const char *ns, kb_event_list_t *out, char *rv, size_t rv_size);

/* Called for every event the informer accepts, right after it is committed
 * and before it is queued, in acceptance order. It runs under the ingest lock
 * on the reflector's thread: take a reference and return at once (never
 * block). */
typedef void (*kb_informer_sub_fn)(void *opaque, kb_event_t *ev);
/* Register / remove a subscriber (at most 64). subscribe returns false when full.
 * Thread: any. Locks: the subscriber lock (taken inside the ingest lock). */
bool kb_informer_subscribe(kb_informer_t *inf, kb_informer_sub_fn fn, void *opaque);
void kb_informer_unsubscribe(kb_informer_t *inf, kb_informer_sub_fn fn, void *opaque);

/* Journal replay, a page at a time: the events accepted after the cut at rv
 * (see kb_informer_snapshot), oldest first, to fn (a new reference each),
 * at most limit journal entries per call. *after is 0 on the first call
 * (the start is found from rv) and is advanced past what was read: call
 * again with it for the next page; a call that leaves it unchanged read
 * nothing (the end, for now). KB_ERR_GONE when rv, or the next page, is
 * older than the journal still holds; KB_ERR_UNSUPPORTED without state_dir.
 * To continue live without a gap, subscribe first, then replay, and drop
 * live events whose seq is <= the last replayed seq.
 * Thread: any (reads only; each page is its own read transaction). */
typedef void (*kb_informer_replay_fn)(void *opaque, kb_event_t *ev);
kb_err_t kb_informer_replay(kb_informer_t *inf, uint64_t rv, uint64_t *after, size_t limit,
                            kb_informer_replay_fn fn, void *opaque);

const kb_config_informer_t *kb_informer_conf(const kb_informer_t *inf);
size_t kb_informer_shards(const kb_informer_t *inf);
kb_deltafifo_t *kb_informer_fifo(kb_informer_t *inf, size_t shard);
kb_indexer_t *kb_informer_indexer(kb_informer_t *inf);
kb_resource_t *kb_informer_resource(kb_informer_t *inf);
bool kb_informer_synced(const kb_informer_t *inf);
void kb_informer_stats(kb_informer_t *inf, kb_informer_stats_t *st);

/* kb_informer_snapshot that also tells where the cut lies in the subscriber
 * stream: *seq (when not NULL) gets the seq of the newest event accepted
 * before the cut, so a subscriber's events with a larger seq came after it.
 * out may be NULL for the position alone (rv and seq, no objects).
 * Thread: any. Locks: the ingest lock, briefly (references only). */
void kb_informer_cut(kb_informer_t *inf, const char *ns, kb_event_list_t *out, char *rv, size_t rv_size,
                     uint64_t *seq);
/* kb_informer_cut narrowed by a label selector, through the indexes
 * (kb_indexer_select): the candidates that may match sel (NULL: all), as the
 * cache holds them — their objects may not be readable: materialize each with
 * kb_informer_full, and check sel on it unless *exact (when not NULL) says the
 * index answered it. rv and seq as for kb_informer_cut; out may be NULL.
 * Thread: any. Locks: the ingest lock, briefly (references only). */
void kb_informer_select(kb_informer_t *inf, const char *ns, const kb_selector_t *sel, kb_event_list_t *out,
                        bool *exact, char *rv, size_t rv_size, uint64_t *seq);
/* A new reference to entry (a cache entry: from kb_indexer_get/list or a
 * cut) with its object readable: entry itself when it has it, else its
 * expanded form (a compressed entry, zcache.h) or the object read back from
 * state_dir; an object that cannot be read is replaced by a minimal one with
 * the identity (and a warning). Every reader of a cache entry's obj or labels
 * goes through this first. Thread: any. Takes no informer lock. */
kb_event_t *kb_informer_full(kb_informer_t *inf, kb_event_t *entry);

/* The cached state of key ("ns/name" or "name") with its object (read back
 * from state_dir when the cache keeps identity only), or NULL. A new reference.
 * Thread: any. */
kb_event_t *kb_informer_get(kb_informer_t *inf, const char *key, size_t len);

#endif
