/* informer/ledger.h — one informer's account of every change, from the
 * moment it is accepted to the moment it is checkpointed:
 *
 *     accepted (seq, journalled) → queued → delivered → acknowledged → checkpointed
 *
 * The ledger owns what decides whether a change may be lost, repeated or
 * reordered, so that this lives in one place and can be tested without curl,
 * a broker or threads:
 *   - sequence numbers (one per accepted change or resume-point marker);
 *   - the per-key gate: a watch change is stale when its resourceVersion is not
 *     newer than the newest the informer accepted for that key — whatever uid
 *     it carries (a re-created name keeps the RV order of the key) — using the
 *     cache's entry for live keys and graves (key → deletion RV) for deleted
 *     ones;
 *   - the journal's unacknowledged tail after a restart, each event marked as a
 *     redelivery (a sink may have it already, so compaction keeps it);
 *   - the in-flight window and the acknowledgement watermark: every seq up to
 *     acked() is acknowledged; the resume point of each scope (reflector) that
 *     goes with it;
 *   - the checkpoint written to state_dir, and the exactly-once cut a
 *     transactional sink commits with each transaction (JSON, read back with
 *     jansson).
 *
 * Scopes: one per reflector, named by its namespace (NULL = cluster-wide). A
 * resume point is stored "rv" for a cluster-wide scope and "namespace/rv" for
 * a namespaced one; several are joined with ','.
 *
 * Threads and locks. Loading, the tail and apply_cut run on the main thread
 * before the informer starts. next_seq/rewind/stale/accept/forget_graves are
 * called with the informer's ingest lock held (the ledger does not lock for
 * them). track/done/produced may come from any thread (sinks acknowledge
 * from their own threads) and take l->mtx, a leaf lock: nothing is called out
 * under it. checkpoint() runs on the checkpointer thread or on main at
 * shutdown; it takes l->mtx only to copy the watermark and writes state_dir
 * outside it.
 *
 * Invariants (asserted): seqs are tracked in increasing order; acked() never
 * goes back; acked() < every seq in the window.
 */
#ifndef KB_INFORMER_LEDGER_H
#define KB_INFORMER_LEDGER_H

#include "common/buf.h"
#include "common/err.h"
#include "common/event.h"
#include "informer/state.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_ledger kb_ledger_t;

/* scope_ns[i]: the namespace of scope i, NULL for cluster-wide (copied).
 * state: borrowed, NULL without state_dir (nothing persists; load is a no-op). */
kb_ledger_t *kb_ledger_new(const char *const *scope_ns, size_t n_scopes, kb_state_t *state);
void kb_ledger_destroy(kb_ledger_t *l); /* NULL is a no-op; frees a tail not handed out */

/* ---- start-up (main thread, before anything is ingested) ------------------ */

/* Read the checkpoint and the journal after it: the tail, marked as
 * redeliveries, its deletes noted as graves. KB_ERR_IO with errstr. */
kb_err_t kb_ledger_load(kb_ledger_t *l, kb_resource_t *res, char *errstr, size_t errstr_size);
/* The resume point of scope as the journal stores it ("rv" or "ns/rv"), appended
 * to out; nothing for scope -1 or an empty rv. Thread: any. */
void kb_ledger_tag(const kb_ledger_t *l, int scope, const char *rv, kb_buf_t *out);
/* Where scope i resumes: the newest resume point the journal holds (the
 * checkpoint's, or a later one in the tail: everything up to it is recorded
 * and delivered from the journal), "" for "list first". Resuming at the
 * checkpoint instead would replay changes already in the journal and stage
 * resume points older than the journal's, moving the watermark's back. */
const char *kb_ledger_resume_rv(const kb_ledger_t *l, size_t scope);
/* The highest decimal resume point state_dir held at load, over the newest
 * one of every scope it names — also scopes of an earlier definition (0:
 * none). A consistent list taken later in the same history is at or above it:
 * what a list of a scope with no resume point of its own (a changed
 * definition) compares with to notice a restore. */
uint64_t kb_ledger_known_rv(const kb_ledger_t *l);
size_t kb_ledger_tail_len(const kb_ledger_t *l);
/* Track every tail entry again and hand each event (a reference the callee
 * owns) to queue(), in seq order. After this the tail is empty. */
void kb_ledger_requeue_tail(kb_ledger_t *l, void (*queue)(void *opaque, kb_event_t *ev), void *opaque);

/* The exactly-once cut a transactional sink committed last (its JSON as made
 * by kb_ledger_txn_cut): journal entries it covers are dropped from the tail
 * and the watermark moves to it (the watch still resumes where the journal ends). KB_ERR_INVAL if it does not parse or is
 * ahead of this state_dir (errstr says which). */
kb_err_t kb_ledger_apply_cut(kb_ledger_t *l, const char *json, size_t len, char *errstr, size_t errstr_size);

/* ---- ingest (caller holds the informer's ingest lock) --------------------- */

uint64_t kb_ledger_next_seq(kb_ledger_t *l);
uint64_t kb_ledger_seq(const kb_ledger_t *l);       /* the last seq handed out */
void kb_ledger_rewind(kb_ledger_t *l, uint64_t seq); /* a batch that did not commit */

/* True when a watch change of key at rv is not newer than what was accepted
 * for the key: cached (the cache's entry, or NULL) for a live key, the grave
 * for a deleted one. Opaque (non-decimal) RVs are only compared for equality. */
bool kb_ledger_stale(const kb_ledger_t *l, const kb_event_t *cached, const char *key, size_t key_len,
                     uint64_t hash, const char *rv, size_t rv_len);
/* ev was staged: a DELETED leaves a grave at its RV — or at ceiling where that
 * is lower (0: no ceiling; a relist's inferred delete: the list's RV, where the
 * key was seen gone) — an ADDED/MODIFIED clears it. Returns the grave before
 * (0: none) for kb_ledger_unaccept. */
uint64_t kb_ledger_accept(kb_ledger_t *l, const kb_event_t *ev, uint64_t ceiling);
/* The grave of key (0: none). */
uint64_t kb_ledger_grave(const kb_ledger_t *l, const char *key, size_t key_len, uint64_t hash);
/* Forget key's grave if it is still at rv (the drift audit found it belongs to
 * a history the server no longer has). */
void kb_ledger_drop_grave(kb_ledger_t *l, const char *key, size_t key_len, uint64_t hash, uint64_t rv);
/* Undo kb_ledger_accept of key's change when its batch failed: grave_before back. */
void kb_ledger_unaccept(kb_ledger_t *l, const char *key, size_t key_len, uint64_t hash, uint64_t grave_before);
/* A batch committed: now and then, forget graves the checkpoint has passed. */
void kb_ledger_batch_committed(kb_ledger_t *l);
/* The server's history went back (etcd restored): old graves mean nothing.
 * (The graves the relist then leaves stand at its RV at most: see accept.) */
void kb_ledger_forget_graves(kb_ledger_t *l);
/* A complete list of scope at rv (decimal, > 0): no grave of the scope's keys
 * stands above rv any more. A consistent list is taken after every change
 * kbridge saw of that history, so in one history this changes nothing; a
 * grave above it is of a history the server went back from (etcd restored),
 * whether or not the list's RV showed the regression (a scope with no resume
 * point to compare with: a changed definition, a first list). */
void kb_ledger_cap_graves(kb_ledger_t *l, int scope, uint64_t rv);
size_t kb_ledger_graves(const kb_ledger_t *l);

/* ---- in flight (any thread; l->mtx) ---------------------------------------- */

/* seq was committed and is being queued (done: nothing will acknowledge it,
 * e.g. a resume-point marker). scope/rv_after: the resume point it completes
 * (-1 / NULL for none). */
void kb_ledger_track(kb_ledger_t *l, uint64_t seq, int scope, const char *rv_after, bool done);
/* The same, counting bytes (the event's size) against the byte bound. */
void kb_ledger_track_sized(kb_ledger_t *l, uint64_t seq, int scope, const char *rv_after, bool done, size_t bytes);
/* seq needs no more acknowledgements (all its messages were acknowledged,
 * compaction merged it away, or no route took it). */
void kb_ledger_done(kb_ledger_t *l, uint64_t seq);
/* seq is inside an open transaction of its one transactional sink. */
void kb_ledger_produced(kb_ledger_t *l, uint64_t seq);

/* ---- bounds ---------------------------------------------------------------- */

/* The window of tracked, not yet acknowledged changes is bounded: a sink that
 * stopped (or stalls) would otherwise grow it — and the journal tail behind
 * it — without end. 0 = no bound. */
void kb_ledger_set_bounds(kb_ledger_t *l, size_t max_slots, uint64_t max_bytes);
typedef struct kb_ledger_window {
    size_t slots;      /* changes tracked and not past the watermark */
    uint64_t bytes;    /* their events' bytes */
    uint64_t oldest;   /* the first of them (0: none) */
} kb_ledger_window_t;
/* Wait up to timeout_ms for the window to be under its bounds; true if it is.
 * *w (may be NULL) gets the window as it is. Call with no lock held: it is the
 * reflector's backpressure. Thread: any. */
bool kb_ledger_wait_room(kb_ledger_t *l, int timeout_ms, kb_ledger_window_t *w);

/* ---- sinks (any thread; l->mtx) ------------------------------------------ */

/* Per sink, an acknowledgement watermark: every change up to it that was
 * routed to the sink was acknowledged by it. The checkpoint (acked) is the
 * lowest of them; a restart delivers a change of the journal's tail again only
 * to the sinks whose watermark is below it. The sink table has no fixed size. */

/* The index (>= 0) of sink name in this ledger's table (added if new, with the
 * watermark state_dir recorded for it, or the checkpoint). A removed sink
 * added again gets its old index. */
int kb_ledger_add_sink(kb_ledger_t *l, const char *name);
/* A reload removed the sink: nothing waits for it any more. */
void kb_ledger_remove_sink(kb_ledger_t *l, int sink);
/* Should sink get change seq? False for a change of the journal's tail the
 * sink had acknowledged before this process started. */
bool kb_ledger_wants(kb_ledger_t *l, uint64_t seq, int sink);
/* The bridge routed seq: sinks[0..n_sinks) (indexes from kb_ledger_add_sink,
 * repeats allowed) owe acknowledgements; none = nothing to wait for. Before
 * this, a tracked seq holds every sink. */
void kb_ledger_routed(kb_ledger_t *l, uint64_t seq, const int *sinks, size_t n_sinks);
/* Sink acknowledged all its messages of seq. */
void kb_ledger_sink_done(kb_ledger_t *l, uint64_t seq, int sink);

typedef struct kb_ledger_sink {
    char name[128];
    int index;
    uint64_t watermark;
} kb_ledger_sink_t;
/* The sinks (not removed) and their watermarks now: a malloc'd array of *n
 * (free it). */
kb_ledger_sink_t *kb_ledger_sinks(kb_ledger_t *l, size_t *n);

/* ---- checkpoint ----------------------------------------------------------- */

/* Write the watermark, its resume points and every sink's watermark to
 * state_dir if any moved. */
void kb_ledger_checkpoint(kb_ledger_t *l);
/* The cut for the transaction about to commit: {"seq":N,"rv":"…","also":"a-b,…"}
 * — the watermark counting what is inside the transaction as delivered, and the
 * ranges past its first gap that are delivered or inside it. */
void kb_ledger_txn_cut(kb_ledger_t *l, kb_buf_t *json);

/* High availability (bridge/ha.h): the resourceVersion every change up to the
 * watermark is known by — the lowest resume point of the scopes at acked(), as
 * a number; 0 when a scope has none yet or it is not decimal. RVs are etcd
 * revisions, comparable across replicas where seqs are not: a standby treats a
 * change whose RV is not above the leader's as acknowledged. Thread: any. */
uint64_t kb_ledger_acked_rv(kb_ledger_t *l);
/* The newest decimal resume point tracked by this process (0: none): a
 * relist's DELETED (the object's last RV, not its deletion's) is known to the
 * leader once the leader's watermark reaches the list's. Thread: any.
 * Locks: none (an atomic read: HA workers ask before every change). */
uint64_t kb_ledger_tracked_rv(kb_ledger_t *l);

typedef struct kb_ledger_stats {
    uint64_t seq;          /* the newest tracked seq */
    uint64_t acked;        /* the watermark */
    uint64_t saved;        /* the checkpoint last written */
    uint64_t in_flight;    /* seqs tracked and not yet past the watermark */
    int64_t ack_time_ns;   /* CLOCK_REALTIME of the newest acknowledgement (0: none) */
    char resume_rv[KB_RV_MAX]; /* scope 0's resume point at the watermark */
} kb_ledger_stats_t;
void kb_ledger_stats(kb_ledger_t *l, kb_ledger_stats_t *st);

#endif
