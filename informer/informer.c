/* informer/informer.c — ingestion: from a list page or watch bytes to the
 * cache, the journal and the queues; the relist diff; resync; the informer's
 * lifecycle.
 *
 * Design note.
 *
 * Three files share the work: reflector.c talks HTTP (list, watch, errors,
 * backoff) and hands bytes here; this file decides what they mean; ledger.c
 * owns what happens to a change after that (seqs, the per-key gate, graves,
 * acknowledgements, the checkpoint). informer/ingest.h exposes the steps here
 * so the simulation can drive them without a server.
 *
 * Threads. The reflector threads and the optional resync thread go through
 * the ingest steps under inf->ingest_mtx, which makes "look at the cache,
 * stage the change, update the cache" one step: without it a resync could
 * queue a stale SYNC behind a newer MODIFIED of the same key. The mutex is
 * held across a DeltaFIFO push that may block when the queue is full; that is
 * the backpressure path and it only ever waits for shard workers, which never
 * take this mutex. A full ledger window is waited for before the mutex is
 * taken (kb_refl_wait_room).
 *
 * Batches. A watch chunk or a list page is one batch: its changes are decided,
 * journalled and applied to the cache, committed to state_dir in one
 * transaction, and only then queued. A failed commit puts the cache and the
 * ledger's graves back and queues nothing; the reflector reads the changes
 * again. So the cache — updated when a change is staged, not when it is
 * delivered — is what the relist is diffed against: everything the informer
 * has already said, including what is still queued.
 *
 * The gate (kb_ledger_stale): a watch change not newer than what the key last
 * had, live or deleted, whatever its uid, is a replay and is dropped; opaque
 * RVs are only compared for equality. A list whose RV is below the resume
 * point (or below an object of the scope seen before) means the server's
 * history went back (etcd restored): a new epoch. The relist forgets the old
 * graves and the deletes it infers leave graves at its RV at most, so a name
 * created again in the new history below its old RV is delivered (ledger.c,
 * "Epochs"). The new history reuses RVs, so a list that may be of one
 * compares objects at the cached uid and RV by content (kb_inf_list_same).
 */
#include "informer/informer_int.h"
#include "informer/audit.h"
#include "informer/kstatus.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/strmap.h"
#include "common/time.h"
#include "informer/decode.h"
#include "informer/definition.h"
#include "informer/hatable.h"
#include "informer/ingest.h"
#include "informer/ledger.h"
#include "informer/packer.h"
#include "informer/state.h"
#include "informer/zcache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>



static const char *const kb_watch_err_names[KB_WATCH_ERR_COUNT] = {
    "gone", "throttled", "server_error", "connect", "malformed", "http", "decode", "state"};

const char *kb_watch_err_name(kb_watch_err_t e) {
    return (unsigned)e < KB_WATCH_ERR_COUNT ? kb_watch_err_names[e] : "unknown";
}

void kb_inf__error(kb_informer_t *inf, kb_watch_err_t kind, const char *fmt, ...) {
    atomic_fetch_add(&inf->st_errors[kind], 1);
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&inf->err_mtx);
    vsnprintf(inf->last_error, sizeof(inf->last_error), fmt, ap);
    pthread_mutex_unlock(&inf->err_mtx);
    va_end(ap);
}

static void kb_refl_set_rv(kb_reflector_t *r, const char *rv, size_t len) {
    if (len >= sizeof(r->rv)) { /* never a truncated resume point: keep the last good one */
        KB_ERROR("reflector", "informer=%s resourceVersion of %zu bytes ignored (at most %d supported)",
                 r->inf->conf->name, len, KB_RV_MAX - 1);
        return;
    }
    pthread_mutex_lock(&r->rv_mtx);
    memcpy(r->rv, rv, len);
    r->rv[len] = '\0';
    pthread_mutex_unlock(&r->rv_mtx);
}

/* ---- ingestion -------------------------------------------------------- */

bool kb_inf__shard_asks(const kb_informer_t *inf) {
    kb_shard_server_t mode = inf->cfg->sharding_server_side;
    if (inf->shard.replicas <= 1 || mode == KB_SHARD_SERVER_OFF)
        return false;
    return mode == KB_SHARD_SERVER_ON || !atomic_load(&((kb_informer_t *)inf)->shard_fallback);
}

/* An object of another replica arrived although the server was asked for
 * ours only: it ignores shardSelector (the gate is off, or it is older).
 * Ownership does not change (the same range, applied here), so nothing is
 * lost or sent twice; auto stops asking, on keeps asking and says so. */
static void kb_inf_shard_ignored(kb_informer_t *inf, const char *uid, size_t uid_len) {
    if (atomic_exchange(&inf->shard_fallback, true))
        return;
    char sel[160];
    kb_shard_selector(&inf->shard, sel, sizeof(sel));
    if (inf->cfg->sharding_server_side == KB_SHARD_SERVER_ON) {
        kb_inf__error(inf, KB_WATCH_ERR_HTTP, "sharding.server_side = \"on\" but the server ignores "
                      "shardSelector (is the ShardedListAndWatch feature gate on?); filtering here");
        KB_ERROR("informer", "informer=%s the server ignored shardSelector=%s (object uid=%.*s is another "
                 "replica's); filtering here, still asking (sharding.server_side = \"on\")", inf->conf->name, sel,
                 (int)uid_len, uid);
        return;
    }
    KB_INFO("informer", "informer=%s the server ignored shardSelector=%s (object uid=%.*s is another replica's): "
            "it does not offer sharded lists and watches (feature gate ShardedListAndWatch); filtering here by "
            "the same ranges from now on", inf->conf->name, sel, (int)uid_len, uid);
}

bool kb_inf__ours(kb_informer_t *inf, uint64_t key_hash, const char *uid, size_t uid_len, const char *ns,
                  size_t ns_len) {
    if (kb_shard_owns(&inf->shard, key_hash, uid, uid_len, ns, ns_len))
        return true;
    atomic_fetch_add(&inf->st_shard_foreign, 1);
    if (kb_inf__shard_asks(inf))
        kb_inf_shard_ignored(inf, uid, uid_len);
    return false;
}

/* ---- acknowledgements: the ledger's ---------------------------------- */

void kb_informer_done(kb_informer_t *inf, uint64_t seq) {
    kb_ledger_done(inf->ledger, seq);
}

kb_ledger_t *kb_informer_ledger(kb_informer_t *inf) {
    return inf->ledger;
}

void kb_informer_txn_cut(kb_informer_t *inf, kb_buf_t *json) {
    kb_ledger_txn_cut(inf->ledger, json);
}

/* A queued event that compaction made unnecessary counts as delivered. */
static void kb_inf_dropped(void *opaque, const kb_event_t *ev) {
    kb_informer_done(opaque, ev->seq);
}

typedef struct kb_inf_at {
    const kb_event_t *entry;
    kb_event_t *found;
} kb_inf_at_t;

/* ev is entry's version (same key, uid and RV) with an object: keep it as entry's type. */
static void kb_inf_at_take(kb_inf_at_t *at, const kb_event_t *ev) {
    const kb_event_t *e = at->entry;
    if (!ev || at->found || !ev->obj_len || ev->key_len != e->key_len || memcmp(ev->key, e->key, e->key_len) ||
        ev->uid_len != e->uid_len || memcmp(ev->uid, e->uid, e->uid_len) || ev->rv_len != e->rv_len ||
        memcmp(ev->rv, e->rv, e->rv_len))
        return;
    at->found = kb_event_retype(ev, e->type, e->final_state_unknown);
    at->found->seq = e->seq;
}

static void kb_inf_at_cb(void *opaque, uint64_t seq, kb_event_t *ev, const char *rv_after) {
    kb_inf_at_t *at = opaque;
    KB_UNUSED(rv_after);
    if (seq == at->entry->seq)
        kb_inf_at_take(at, ev);
    kb_event_unref(ev);
}

/* The stored object of a thin entry as it was when the entry was cached,
 * given the entry's type, flag and seq: state_dir's index if the key has not
 * changed since, else the journal at the entry's seq (a cut read after the
 * ingest lock was released), else (trimmed) the index's newer version of the
 * same uid; NULL if it cannot be read. */
static kb_event_t *kb_inf_stored(kb_informer_t *inf, kb_event_t *ev) {
    kb_inf_at_t at = {.entry = ev};
    kb_event_t *now = kb_state_get(inf->state, ev->key, ev->key_len, inf->res);
    kb_inf_at_take(&at, now);
    if (!at.found && ev->seq)
        (void)kb_state_load_journal(inf->state, ev->seq - 1, 1, inf->res, kb_inf_at_cb, &at);
    if (!at.found && now && now->uid_len == ev->uid_len && !memcmp(now->uid, ev->uid, ev->uid_len)) {
        at.found = kb_event_retype(now, ev->type, ev->final_state_unknown);
        at.found->seq = ev->seq;
    }
    kb_event_unref(now);
    return at.found;
}

/* A cache entry with its object: itself; expanded when packed (zcache.h);
 * or (when the cache keeps only identity because state_dir holds the
 * objects) read back from state_dir. Never returns an event without an
 * object: if the packed or stored one cannot be read, a minimal object with
 * the identity is made up. */
kb_event_t *kb_informer_full(kb_informer_t *inf, kb_event_t *ev) {
    if (ev->obj_len || (!ev->zdict && !inf->state))
        return kb_event_ref(ev);
    kb_event_t *full = ev->zdict ? kb_zcache_unpack(ev) : kb_inf_stored(inf, ev);
    if (full)
        return full;
    kb_buf_t o = KB_BUF_INIT;
    kb_buf_appendf(&o, "{\"kind\":\"%s\",\"apiVersion\":\"%s\",\"metadata\":{\"name\":", kb_resource_kind(inf->res),
                   inf->res->api_version);
    kb_buf_append_json_str(&o, ev->name, ev->name_len);
    if (ev->ns_len) {
        kb_buf_append_str(&o, ",\"namespace\":");
        kb_buf_append_json_str(&o, ev->ns, ev->ns_len);
    }
    kb_buf_append_str(&o, ",\"uid\":");
    kb_buf_append_json_str(&o, ev->uid, ev->uid_len);
    kb_buf_append_str(&o, ",\"resourceVersion\":");
    kb_buf_append_json_str(&o, ev->rv, ev->rv_len);
    kb_buf_append_str(&o, "}}");
    kb_event_init_t in = {.type = ev->type, .final_state_unknown = ev->final_state_unknown, .res = ev->res,
                          .ns = ev->ns, .ns_len = ev->ns_len, .name = ev->name, .name_len = ev->name_len,
                          .uid = ev->uid, .uid_len = ev->uid_len, .rv = ev->rv, .rv_len = ev->rv_len,
                          .obj = o.data, .obj_len = o.len, .observed_ns = ev->observed_ns,
                          .read_mono_ns = ev->read_mono_ns};
    kb_event_t *made = kb_event_new(&in);
    kb_buf_fini(&o);
    KB_WARN("informer", "informer=%s key=%s: %s object unreadable; using its identity only", inf->conf->name,
            ev->key, ev->zdict ? "compressed" : "stored");
    return made;
}

/* A synthesized event (type/flag) for a cache entry, with the object. */
static kb_event_t *kb_inf_retype_full(kb_informer_t *inf, kb_event_t *cached, kb_event_type_t type, bool fsu) {
    kb_event_t *full = kb_informer_full(inf, cached);
    kb_event_t *ev = kb_event_retype(full, type, fsu);
    kb_event_unref(full);
    return ev;
}

/* ---- ingestion batches ------------------------------------------------ */

static void kb_inf_batch_begin(kb_informer_t *inf) {
    KB_ASSERT(!inf->batch_open);
    inf->batch_open = true;
    inf->batch_failed = false;
    inf->batch_seq0 = kb_ledger_seq(inf->ledger);
}

static void kb_inf_batch_fail(kb_informer_t *inf, const char *what) {
    if (!inf->batch_failed)
        snprintf(inf->batch_err, sizeof(inf->batch_err), "%s: %s", what,
                 inf->state ? kb_state_error(inf->state) : "");
    inf->batch_failed = true;
}

/* Open the state transaction lazily: a batch that stages nothing costs nothing. */
static void kb_inf_batch_txn(kb_informer_t *inf) {
    if (inf->state && inf->n_out == 0 && !inf->batch_failed && kb_state_begin(inf->state) != KB_OK)
        kb_inf_batch_fail(inf, "state_dir begin");
}

static void kb_inf_push_staged(kb_informer_t *inf, kb_event_t *ev, uint64_t seq, int refl, const char *rv_after) {
    if (inf->n_out == inf->cap_out) {
        inf->cap_out = inf->cap_out ? inf->cap_out * 2 : 64;
        inf->out = kb_realloc(inf->out, inf->cap_out * sizeof(*inf->out));
    }
    kb_inf_staged_t *o = &inf->out[inf->n_out++];
    o->ev = ev;
    o->seq = seq;
    o->refl = refl;
    size_t n = rv_after ? strnlen(rv_after, sizeof(o->rv_after) - 1) : 0; /* a copy per change: no printf */
    memcpy(o->rv_after, rv_after ? rv_after : "", n);
    o->rv_after[n] = '\0';
}

void kb_informer_ha_shared(kb_informer_t *inf, const _Atomic uint64_t *shared_rv) {
    inf->ha_shared = shared_rv;
}

/* May another replica (the HA leader while we stand by, the old leader after
 * a takeover) have delivered ev already? Then a consumer may hold its ADDED,
 * and compaction must not let it vanish with its DELETED: with "latest" an
 * ADDED still queued here that meets the DELETED a relist infers would
 * otherwise be taken for never delivered (docs/cluster.md, section 9). */
static bool kb_inf_shared(const kb_informer_t *inf, const kb_event_t *ev) {
    if (!inf->ha_shared || ev->type == KB_EV_DELETED)
        return false;
    uint64_t upto = atomic_load(inf->ha_shared);
    return upto && (ev->rv_num <= upto || !ev->rv_num);
}

/* After an HA takeover, does this list reach below the takeover (it did not
 * watch from before it)? Then what it finds may be an object the old leader
 * delivered in an older state — its ADDED here is its first word from this
 * replica, and must not vanish with a DELETED under "latest" compaction. */
static bool kb_inf_list_shared(const kb_reflector_t *r) {
    const kb_informer_t *inf = r->inf;
    return atomic_load(&inf->ha_took) && r->list_from < atomic_load(&inf->ha_took_rv);
}

/* Stage ev (consumes it): journal it and make it the cache's state of its key,
 * remembering the previous entry in case the batch cannot be committed.
 * refl/rv_after: the resume point this event completes (-1/"" if none);
 * grave_max: for a DELETED, the highest RV its grave may stand at (0: its own;
 * see kb_ledger_accept). Caller holds ingest_mtx inside an open batch. */
static void kb_inf_stage(kb_informer_t *inf, kb_event_t *ev, int refl, const char *rv_after, uint64_t grave_max) {
    kb_inf_batch_txn(inf);
    ev->seq = kb_ledger_next_seq(inf->ledger);
    if (kb_inf_shared(inf, ev))
        ev->redelivery = true; /* not yet shared: see kb_informer_ha_shared */
    if (inf->state) { /* the journal's resume-point tag: nothing to build without one */
        kb_buf_t tag = KB_BUF_INIT;
        kb_ledger_tag(inf->ledger, refl, rv_after, &tag);
        if (!inf->batch_failed && kb_state_put_event(inf->state, ev, tag.data ? tag.data : "") != KB_OK)
            kb_inf_batch_fail(inf, "state_dir write");
        kb_buf_fini(&tag);
    }
    if (ev->type != KB_EV_SYNC) {
        if (inf->n_undo == inf->cap_undo) {
            inf->cap_undo = inf->cap_undo ? inf->cap_undo * 2 : 64;
            inf->undo = kb_realloc(inf->undo, inf->cap_undo * sizeof(*inf->undo));
        }
        kb_inf_undo_t *u = &inf->undo[inf->n_undo++];
        u->key = ev->key; /* ev stays in inf->out until the batch ends */
        u->key_len = ev->key_len;
        u->hash = ev->key_hash;
        u->old = (kb_indexer_old_t){0};
        u->grave_before = kb_ledger_accept(inf->ledger, ev, grave_max);
        const char *labels = ev->labels_len ? ev->obj + ev->labels_off : NULL;
        /* Only a batch with state_dir can fail and be undone. Without one the
         * replaced entry is freed now, while its memory is still in the CPU's
         * cache and the next change's allocations can take it, not at the
         * batch's end among all the others (docs/performance.md). */
        kb_indexer_old_t *old = inf->state ? &u->old : NULL;
        if (ev->type == KB_EV_DELETED) {
            kb_indexer_delete(inf->idx, ev->key, ev->key_len, ev->key_hash, old);
        } else if (inf->state) {
            kb_event_t *thin = kb_event_thin(ev); /* the object itself lives in state_dir */
            kb_indexer_put(inf->idx, thin, labels, ev->labels_len, &u->old);
            kb_event_unref(thin);
        } else if (kb_packer_running(inf->packer)) {
            kb_indexer_put(inf->idx, ev, labels, ev->labels_len, old); /* packed on the packer's thread */
            kb_packer_put(inf->packer, ev);
        } else {
            kb_event_t *entry = inf->zc ? kb_zcache_pack(inf->zc, ev) : kb_event_ref(ev); /* zcache.h */
            kb_indexer_put(inf->idx, entry, labels, ev->labels_len, old);
            kb_event_unref(entry);
        }
    }
    kb_inf_push_staged(inf, ev, ev->seq, refl, rv_after);
}

/* The inferred delete of a cache entry: its last known object, and as the
 * envelope's RV the list's (gone_at, the RV of the list or audit that found
 * it absent) where that is higher. Why: the object is absent at the list's
 * RV, so it was deleted at or before it — and every state anyone delivered
 * of it, another replica included (an HA takeover), is at or below it; with
 * the object's last RV the consumer rule would skip the DELETED after a newer
 * state someone else delivered. gone_at NULL keeps the last RV: a changed
 * definition (the rule's "ADDED at the RV of the DELETED finalStateUnknown"
 * takes the object in again), a name re-created (its new incarnation's ADDED
 * follows, perhaps below the list's RV). */
static kb_event_t *kb_inf_gone_event(kb_informer_t *inf, kb_event_t *cached, const char *gone_at) {
    uint64_t at = gone_at ? kb_rv_parse(gone_at, strlen(gone_at)) : 0;
    if (at <= cached->rv_num)
        return kb_inf_retype_full(inf, cached, KB_EV_DELETED, true);
    kb_event_t *full = kb_informer_full(inf, cached);
    kb_event_init_t in = {.type = KB_EV_DELETED, .final_state_unknown = true, .res = full->res,
                          .ns = full->ns, .ns_len = full->ns_len, .name = full->name, .name_len = full->name_len,
                          .uid = full->uid, .uid_len = full->uid_len, .rv = gone_at, .rv_len = strlen(gone_at),
                          .obj = full->obj, .obj_len = full->obj_len, .labels_off = full->labels_off,
                          .labels_len = full->labels_len, .observed_ns = full->observed_ns,
                          .read_mono_ns = full->read_mono_ns};
    kb_event_t *ev = kb_event_new(&in);
    ev->seq = full->seq;
    ev->redelivery = full->redelivery;
    kb_event_unref(full);
    return ev;
}

/* Stage the inferred delete of a cache entry (finalStateUnknown, its last
 * known object, at gone_at: kb_inf_gone_event), its grave at grave_max at
 * most (0: at the DELETED's RV). */
static void kb_inf_stage_gone(kb_informer_t *inf, kb_event_t *cached, uint64_t grave_max, const char *gone_at) {
    kb_inf_stage(inf, kb_inf_gone_event(inf, cached, gone_at), -1, "", grave_max);
}

/* Stage a resume-point marker (a bookmark, a finished list). */
static void kb_inf_stage_mark(kb_informer_t *inf, int refl, const char *rv) {
    kb_inf_batch_txn(inf);
    uint64_t seq = kb_ledger_next_seq(inf->ledger);
    kb_buf_t tag = KB_BUF_INIT;
    kb_ledger_tag(inf->ledger, refl, rv, &tag);
    if (inf->state && !inf->batch_failed && kb_state_put_mark(inf->state, seq, tag.data ? tag.data : "") != KB_OK)
        kb_inf_batch_fail(inf, "state_dir write");
    kb_buf_fini(&tag);
    kb_inf_push_staged(inf, NULL, seq, refl, rv);
}

/* The batch that completes a list under a changed definition committed (or
 * not): that reflector's scope is converged; when it was the last one, the
 * new definition was stored with it (kb_inf_list_close). Caller holds
 * ingest_mtx. */
static void kb_inf_def_settle(kb_informer_t *inf, bool committed) {
    int i = inf->def_closing;
    inf->def_closing = -1;
    if (i < 0 || !committed)
        return;
    inf->refl[i].def_stale = false;
    if (--inf->def_stale == 0)
        KB_INFO("informer", "informer=%s converged to its new definition (listed and diffed); state_dir records it",
                inf->conf->name);
}

/* Commit the batch, then queue its events. On a failed commit the cache is
 * put back as it was and nothing is queued: the caller re-reads the changes
 * from the server. Returns KB_OK, KB_ERR_STOPPED, or KB_ERR_IO (state_dir). */
static kb_err_t kb_inf_batch_end(kb_informer_t *inf) {
    KB_ASSERT(inf->batch_open);
    inf->batch_open = false;
    kb_err_t err = KB_OK;
    if (inf->state && inf->n_out && !inf->batch_failed && kb_state_commit(inf->state) != KB_OK)
        kb_inf_batch_fail(inf, "state_dir commit");
    kb_inf_def_settle(inf, !inf->batch_failed);
    if (inf->batch_failed) {
        if (inf->state)
            kb_state_abort(inf->state);
        for (size_t i = inf->n_undo; i-- > 0;) {
            kb_inf_undo_t *u = &inf->undo[i];
            kb_ledger_unaccept(inf->ledger, u->key, u->key_len, u->hash, u->grave_before);
            if (u->old.ev)
                kb_indexer_restore(inf->idx, &u->old);
            else
                kb_indexer_delete(inf->idx, u->key, u->key_len, u->hash, NULL);
        }
        for (size_t i = 0; i < inf->n_out; i++)
            kb_event_unref(inf->out[i].ev);
        kb_ledger_rewind(inf->ledger, inf->batch_seq0);
        static kb_ratelimit_t rl;
        uint64_t sup = 0;
        if (kb_ratelimit_allow(&rl, 10000, &sup))
            KB_ERROR("informer", "informer=%s %s; nothing of this batch was delivered; retrying (suppressed=%llu)",
                     inf->conf->name, inf->batch_err, (unsigned long long)sup);
        kb_inf__error(inf, KB_WATCH_ERR_STATE, "%s", inf->batch_err);
        err = KB_ERR_IO;
    } else {
        pthread_mutex_lock(&inf->sub_mtx);
        for (size_t i = 0; i < inf->n_out; i++) {
            if (!inf->out[i].ev)
                continue;
            for (size_t j = 0; j < inf->n_subs; j++)
                inf->subs[j].fn(inf->subs[j].opaque, inf->out[i].ev);
        }
        pthread_mutex_unlock(&inf->sub_mtx);
        kb_ledger_batch_committed(inf->ledger);
        /* The whole batch is tracked before any of it is queued: a worker
         * that pops a relist's DELETED already sees the list's resume point
         * (bridge/ha.c compares it with the leader's). */
        for (size_t i = 0; i < inf->n_out; i++) {
            kb_inf_staged_t *o = &inf->out[i];
            kb_ledger_track_sized(inf->ledger, o->seq, o->refl, o->rv_after, o->ev == NULL,
                                  o->ev ? kb_event_size(o->ev) : 0);
        }
        /* Each worker is woken once for the whole batch, not once per event
         * (deltafifo.c: held wakes). */
        for (size_t i = 0; i < inf->n_out; i++) {
            kb_inf_staged_t *o = &inf->out[i];
            if (!o->ev)
                continue;
            kb_event_type_t type = o->ev->type;
            kb_deltafifo_t *fifo = inf->fifos[o->ev->key_hash % inf->n_shards];
            if (err != KB_OK)
                kb_event_unref(o->ev); /* not queued: unacknowledged, so delivered after a restart */
            else if (kb_deltafifo_push_held(fifo, o->ev, -1) == KB_OK)
                atomic_fetch_add(&inf->st_events[type], 1);
            else
                err = KB_ERR_STOPPED; /* closed (the push released it) */
        }
        for (size_t i = 0; i < inf->n_shards && inf->n_out; i++)
            kb_deltafifo_wake(inf->fifos[i]);
        if (inf->n_out && kb_packer_running(inf->packer))
            kb_packer_wake(inf->packer);
    }
    for (size_t i = 0; i < inf->n_undo; i++)
        kb_indexer_old_release(&inf->undo[i].old);
    inf->n_undo = 0;
    inf->n_out = 0;
    return err;
}

typedef enum {
    KB_INGEST_OK,       /* staged, or nothing to say */
    KB_INGEST_STOPPED,  /* the informer is stopping, or the batch cannot be committed */
    KB_INGEST_BAD,      /* the bytes are not one valid object (nothing was staged) */
} kb_ingest_t;

static int kb_refl_index(const kb_reflector_t *r) {
    return (int)(r - r->inf->refl);
}

/* A list at list_rv is of a new history: below where the scope resumes
 * from, where state_dir was when this process started, or an object of the
 * scope seen before (a list is taken after all of that; a restart resumes a
 * scope from its checkpoint, and a streamed list cut short moved no resume
 * point, so the scope's objects can be newer than its resume point), or from
 * another API server. */
static uint64_t kb_inf_list_floor(const kb_reflector_t *r) {
    uint64_t prev = kb_rv_parse(r->rv, strlen(r->rv));
    if (prev < r->inf->prior_rv)
        prev = r->inf->prior_rv;
    return prev > r->seen_rv ? prev : r->seen_rv;
}

static bool kb_inf_list_back(const kb_reflector_t *r, const char *list_rv) {
    uint64_t prev = r->list_floor, now_rv = kb_rv_parse(list_rv, strlen(list_rv));
    return (prev && now_rv && now_rv < prev) || r->inf->def_new_server;
}

/* Is the listed object (obj, len; the cached one old has its uid and RV)
 * the one the consumer has? Within one history an RV names one state of an
 * object. A new history (etcd restored from a backup) numbers its changes
 * again from the backup's RV, so the same uid at the same RV can be another
 * state of it: a list that may be of a new history compares the objects.
 * A paged list knows at its first page (list_back); a streamed one only at
 * its end, so every streamed list compares. */
static bool kb_inf_list_same(kb_reflector_t *r, kb_src_t src, kb_event_t *old, const char *obj, size_t len) {
    if (src != KB_SRC_LIST || (!r->list_back && !r->initial))
        return true;
    kb_event_t *full = kb_informer_full(r->inf, old);
    bool same = full->obj_len == len && !memcmp(full->obj, obj, len);
    kb_event_unref(full);
    return same;
}

/* Decode one object and stage what it means for the cache.
 * server_type: for watch events, the frame type; for list items, ADDED.
 * A bad object is counted and skipped unless quiet_bad (the caller will
 * try another reading of the bytes). Caller holds ingest_mtx in a batch. */
static kb_ingest_t kb_inf_ingest(kb_reflector_t *r, kb_src_t src, kb_watch_type_t server_type, const char *obj,
                                 size_t len, int64_t read_ns, bool quiet_bad) {
    kb_informer_t *inf = r->inf;
    kb_buf_t *out = &inf->scratch;
    kb_buf_reset(out);
    kb_objmeta_t m;
    char why[256];
    const char *kind = kb_resource_kind(inf->res);
    if (kb_decode_object(inf->tf, obj, len, kind[0] ? kind : NULL, inf->res->api_version, out, &m, why,
                         sizeof(why)) != KB_OK) {
        if (quiet_bad)
            return KB_INGEST_BAD;
        static kb_ratelimit_t rl;
        kb_inf__error(inf, KB_WATCH_ERR_DECODE, "object skipped: %s", why);
        if (kb_ratelimit_allow(&rl, 10000, NULL))
            KB_WARN("informer", "informer=%s object skipped: %s", inf->conf->name, why);
        kb_span_t rv;
        if (src == KB_SRC_WATCH && kb_decode_object_rv(obj, len, &rv))
            kb_refl_set_rv(r, obj + rv.off, rv.len);
        return KB_INGEST_BAD;
    }
    if (m.rv.len >= KB_RV_MAX) {
        /* Truncating it would make a wrong resume point and a wrong gate. */
        kb_inf__error(inf, KB_WATCH_ERR_DECODE, "object skipped: resourceVersion of %zu bytes (at most %d supported)",
                     m.rv.len, KB_RV_MAX - 1);
        static kb_ratelimit_t rl;
        if (kb_ratelimit_allow(&rl, 10000, NULL))
            KB_ERROR("informer", "informer=%s object skipped: its resourceVersion has %zu bytes, more than the %d "
                     "kbridge supports", inf->conf->name, m.rv.len, KB_RV_MAX - 1);
        return KB_INGEST_BAD;
    }
    if (!kind[0] && m.kind.len)
        kb_resource_set_kind(inf->res, out->data + m.kind.off, m.kind.len);
    if (src == KB_SRC_WATCH) /* every accepted frame moves the resume point, whatever it leads to */
        kb_refl_set_rv(r, out->data + m.rv.off, m.rv.len);
    if (src != KB_SRC_AUDIT) { /* the audit lists on its own: its RVs may be past a list in progress */
        uint64_t rv_num = kb_rv_parse(out->data + m.rv.off, m.rv.len);
        r->seen_rv = rv_num > r->seen_rv ? rv_num : r->seen_rv;
    }
    /* A watch event completes a resume point; list items do not (the list does, when it ends). */
    int refl = src == KB_SRC_WATCH ? kb_refl_index(r) : -1;
    char rv_after[KB_RV_MAX]; /* m.rv.len < KB_RV_MAX (above); no printf per change */
    size_t rv_after_len = src == KB_SRC_WATCH ? m.rv.len : 0;
    memcpy(rv_after, out->data + m.rv.off, rv_after_len);
    rv_after[rv_after_len] = '\0';

    kb_event_init_t in = {
        .res = inf->res,
        .ns = out->data + m.ns.off, .ns_len = m.ns.len,
        .name = out->data + m.name.off, .name_len = m.name.len,
        .uid = out->data + m.uid.off, .uid_len = m.uid.len,
        .rv = out->data + m.rv.off, .rv_len = m.rv.len,
        .obj = out->data, .obj_len = out->len,
        .labels_off = m.labels.off, .labels_len = m.labels.len,
        .observed_ns = kb_now_real_ns(),
        .read_mono_ns = read_ns,
    };
    /* The key decides shard, replica and cache slot. Kubernetes bounds it
     * (namespace <= 63, name <= 253 bytes), so it lives on the stack. */
    char key[512];
    size_t key_len = in.ns_len ? in.ns_len + 1 + in.name_len : in.name_len;
    if (key_len >= sizeof(key)) {
        kb_inf__error(inf, KB_WATCH_ERR_DECODE, "object skipped: key of %zu bytes is not a Kubernetes name", key_len);
        return KB_INGEST_OK;
    }
    if (in.ns_len) {
        memcpy(key, in.ns, in.ns_len);
        key[in.ns_len] = '/';
        memcpy(key + in.ns_len + 1, in.name, in.name_len);
    } else {
        memcpy(key, in.name, in.name_len);
    }
    key[key_len] = '\0';
    uint64_t hash = kb_fnv1a64(key, key_len);
    if (!kb_inf__ours(inf, hash, in.uid, in.uid_len, in.ns, in.ns_len))
        goto out;
    if (src == KB_SRC_LIST && r->seen)
        kb_strmap_put(r->seen, key, key_len, hash, (void *)1);

    kb_event_t *old = kb_indexer_get(inf->idx, key, key_len, hash);
    bool same_uid = old && old->uid_len == in.uid_len && !memcmp(old->uid, in.uid, in.uid_len);
    bool same_rv = old && old->rv_len == in.rv_len && !memcmp(old->rv, in.rv, in.rv_len);

    /* The gate: a watch change not newer than what the key last had — live
     * or deleted, whatever its uid — is a replay (a resumed watch, a restart
     * from the checkpoint) and must not make the key go back. */
    if (src != KB_SRC_LIST && kb_ledger_stale(inf->ledger, old, key, key_len, hash, in.rv, in.rv_len)) {
        atomic_fetch_add(&inf->st_gated, 1);
        KB_DEBUG("informer", "informer=%s key=%s rv=%.*s is not newer than what the key had: skipped",
                 inf->conf->name, key, (int)in.rv_len, in.rv);
        goto done;
    }
    /* Unchanged since we last said anything about it — unless a changed
     * definition reshaped the objects (drop/redact/keep fields), or the list
     * may be of a new history (kb_inf_list_same). */
    bool reshape = src == KB_SRC_LIST && r->def_stale && inf->def_reshape;
    if (src != KB_SRC_WATCH && same_uid && same_rv && !reshape && kb_inf_list_same(r, src, old, out->data, out->len))
        goto done;
    if (old && !same_uid) {
        /* The name was deleted and re-created while we did not watch (or the
         * watch deletes an incarnation we never saw): the one we had is gone. */
        kb_inf_stage_gone(inf, old, 0, NULL);
        kb_event_unref(old);
        old = NULL;
    }
    in.type = server_type == KB_WATCH_DELETED ? KB_EV_DELETED : old ? KB_EV_MODIFIED : KB_EV_ADDED;
    kb_event_t *ev = kb_event_new(&in);
    if (src == KB_SRC_LIST && kb_inf_list_shared(r))
        ev->redelivery = true; /* not yet shared */
    kb_inf_stage(inf, ev, refl, rv_after, 0);
done:
    kb_event_unref(old);
out:
    return inf->batch_failed ? KB_INGEST_STOPPED : KB_INGEST_OK;
}

/* After a complete list (at list_rv, 0 if not decimal): every cached key of
 * this reflector's scope that the list did not contain was deleted while we
 * were not watching. Each grave stands at the list's RV at most: the list is
 * where the key was seen gone, and after the server's history went back the
 * object's own RV belongs to the old history and would refuse the new one's
 * objects of that name (the design note's epochs). */
static void kb_inf_delete_unseen(kb_reflector_t *r, uint64_t list_rv) {
    kb_informer_t *inf = r->inf;
    if (!r->seen)
        return; /* nothing was cached before the list (kb_inf__list_begin) */
    kb_event_list_t cached;
    kb_event_list_init(&cached);
    kb_indexer_list(inf->idx, r->ns, &cached);
    size_t n = 0;
    for (size_t i = 0; i < cached.n; i++) {
        kb_event_t *ev = cached.ev[i];
        if (kb_strmap_get(r->seen, ev->key, ev->key_len, ev->key_hash))
            continue;
        kb_inf_stage_gone(inf, ev, list_rv, r->def_stale ? NULL : r->list_rv);
        n++;
    }
    kb_event_list_fini(&cached);
    if (n)
        KB_INFOF("informer", KB_FIELDS(KB_F("informer", inf->conf->name), KB_F("rv", r->list_rv)),
                 "informer=%s relist found %zu %s; delivered as DELETED finalStateUnknown",
                inf->conf->name, n,
                r->def_stale ? "object(s) gone or outside the new definition" : "deleted object(s)");
}

/* Is a key of namespace ns (ns_len bytes) in some reflector's scope? */
static bool kb_inf_in_scope(const kb_informer_t *inf, const char *ns, size_t ns_len) {
    for (size_t i = 0; i < inf->n_refl; i++) {
        const char *rns = inf->refl[i].ns;
        if (!rns || (strlen(rns) == ns_len && !memcmp(rns, ns, ns_len)))
            return true;
    }
    return false;
}

/* After a change of namespaces: cached keys no reflector lists any more
 * leave as DELETED finalStateUnknown (no relist diff would reach them), their
 * graves at the list's RV at most, as kb_inf_delete_unseen's. */
static void kb_inf_delete_unscoped(kb_informer_t *inf, uint64_t list_rv) {
    kb_event_list_t cached;
    kb_event_list_init(&cached);
    kb_indexer_list(inf->idx, NULL, &cached);
    size_t n = 0;
    for (size_t i = 0; i < cached.n; i++) {
        kb_event_t *ev = cached.ev[i];
        if (kb_inf_in_scope(inf, ev->ns, ev->ns_len))
            continue;
        kb_inf_stage_gone(inf, ev, list_rv, NULL);
        n++;
    }
    kb_event_list_fini(&cached);
    if (n)
        KB_INFO("informer", "informer=%s %zu object(s) outside the new definition's namespaces; delivered as DELETED "
                "finalStateUnknown", inf->conf->name, n);
}

/* A list of r's scope completes (in its closing batch): under a changed
 * definition, that scope converges with this batch. True when it is the last
 * such scope: the caller then also removes what no namespace covers any more
 * and stores the new definition in the same transaction, so a crash before
 * the commit lists again, and one after it resumes where these lists ended. */
static bool kb_inf_def_list_close(kb_reflector_t *r) {
    kb_informer_t *inf = r->inf;
    if (!r->def_stale)
        return false;
    inf->def_closing = kb_refl_index(r);
    return inf->def_stale == 1;
}

/* Before a batch: wait while the ledger's window is full (a sink stopped or
 * stalls), so reading stops instead of the window and the journal growing.
 * False when the informer stops. Called with no lock held. */
static bool kb_refl_wait_room(kb_reflector_t *r) {
    kb_informer_t *inf = r->inf;
    kb_ledger_window_t w;
    if (kb_ledger_wait_room(inf->ledger, 0, &w))
        return true;
    atomic_store(&inf->paused, true);
    KB_WARN("reflector", "informer=%s paused reading: %zu change(s), %llu bytes, from seq %llu on, are not "
            "acknowledged by every sink (a stopped or stalled sink holds them; see /readyz)", inf->conf->name,
            w.slots, (unsigned long long)w.bytes, (unsigned long long)w.oldest);
    while (!atomic_load(&inf->stop) && !kb_ledger_wait_room(inf->ledger, 200, NULL))
        ;
    atomic_store(&inf->paused, false);
    if (!atomic_load(&inf->stop))
        KB_INFO("reflector", "informer=%s reading again: the sinks caught up", inf->conf->name);
    return !atomic_load(&inf->stop);
}

/* ---- the drift audit's repairs (informer/audit.c) ------------------------ */

kb_err_t kb_inf__audit_ingest(kb_reflector_t *r, const char *obj, size_t len, const char *key, size_t key_len,
                              uint64_t stale_grave, bool *staged) {
    kb_informer_t *inf = r->inf;
    *staged = false;
    if (!kb_refl_wait_room(r))
        return KB_ERR_STOPPED;
    pthread_mutex_lock(&inf->ingest_mtx);
    kb_ledger_drop_grave(inf->ledger, key, key_len, kb_fnv1a64(key, key_len), stale_grave);
    kb_inf_batch_begin(inf);
    kb_inf_ingest(r, KB_SRC_AUDIT, KB_WATCH_MODIFIED, obj, len, kb_now_mono_ns(), false);
    *staged = inf->n_out > 0;
    kb_err_t err = kb_inf_batch_end(inf);
    *staged = *staged && err == KB_OK;
    pthread_mutex_unlock(&inf->ingest_mtx);
    return err;
}

kb_err_t kb_inf__audit_delete(kb_reflector_t *r, const char *key, size_t key_len, const char *rv, const char *audit_rv,
                              bool *done) {
    kb_informer_t *inf = r->inf;
    *done = false;
    if (!kb_refl_wait_room(r))
        return KB_ERR_STOPPED;
    uint64_t hash = kb_fnv1a64(key, key_len);
    pthread_mutex_lock(&inf->ingest_mtx);
    kb_event_t *old = kb_indexer_get(inf->idx, key, key_len, hash);
    kb_err_t err = KB_OK;
    if (old && old->rv_len == strlen(rv) && !memcmp(old->rv, rv, old->rv_len)) {
        kb_inf_batch_begin(inf);
        kb_inf_stage_gone(inf, old, 0, r->def_stale ? NULL : audit_rv);
        err = kb_inf_batch_end(inf);
        *done = err == KB_OK;
    }
    pthread_mutex_unlock(&inf->ingest_mtx);
    kb_event_unref(old);
    return err;
}

/* ---- a list, step by step (the HTTP loop below and the simulation) ------- */

/* Has the scope of r anything cached? */
static bool kb_inf_scope_cached(kb_reflector_t *r) {
    if (!r->ns)
        return kb_indexer_count(r->inf->idx) > 0;
    kb_event_list_t cached;
    kb_event_list_init(&cached);
    kb_indexer_list(r->inf->idx, r->ns, &cached);
    bool any = cached.n > 0;
    kb_event_list_fini(&cached);
    return any;
}

/* The listed keys are remembered only to find the cached ones a list did not
 * contain. Before a reflector's first list completes nothing else writes its
 * scope (the drift audit waits for every first list), so when nothing of the
 * scope is cached as the first list begins, nothing can be left unseen at its
 * end: a first sync of a million objects then holds no second table of their
 * keys (about 110 bytes an object at its peak, and the holes its key copies
 * left in the heap after it). */
void kb_inf__list_begin(kb_reflector_t *r) {
    kb_strmap_destroy(r->seen);
    r->seen = r->listed || kb_inf_scope_cached(r) ? kb_strmap_new(1024) : NULL;
    r->list_open = true;
    if (!r->list_from_set) { /* a list started over keeps where the watch stopped */
        r->list_from = kb_rv_parse(r->rv, strlen(r->rv));
        r->list_from_set = true;
    }
    r->list_rv[0] = '\0';
    r->list_back = false;
    pthread_mutex_lock(&r->inf->ingest_mtx); /* prior_rv; seen_rv moves under it too */
    r->list_floor = kb_inf_list_floor(r);
    pthread_mutex_unlock(&r->inf->ingest_mtx);
    if (!r->listed) /* an unfinished first list starts over: its objects are counted again */
        atomic_fetch_sub(&r->inf->st_sync_objects, r->list_items);
    r->list_items = r->list_pages = 0;
    r->list_bytes = 0;
    r->list_t0_ns = r->list_log_ns = kb_now_mono_ns();
}

/* Every KB_SYNC_PROGRESS_MS (or KB_TEST_SYNC_PROGRESS_MS, for the test
 * suite) while a first list runs: how far it got, so a sync of a million
 * objects is not minutes of silence. */
#define KB_SYNC_PROGRESS_MS 5000
static void kb_inf_list_progress(kb_reflector_t *r, size_t items, size_t bytes) {
    kb_informer_t *inf = r->inf;
    r->list_items += items;
    r->list_bytes += bytes;
    if (r->listed)
        return;
    atomic_fetch_add(&inf->st_sync_objects, items);
    const char *env = getenv("KB_TEST_SYNC_PROGRESS_MS");
    int64_t every_ms = env && *env ? strtoll(env, NULL, 10) : KB_SYNC_PROGRESS_MS;
    int64_t now = kb_now_mono_ns();
    if (now - r->list_log_ns < every_ms * KB_NS_PER_MS)
        return;
    r->list_log_ns = now;
    double secs = (double)(now - r->list_t0_ns) / 1e9;
    KB_INFO("reflector", "informer=%s%s%s syncing: %zu object(s) so far (%.0f/s), %zu %s, %llu bytes, %.1f s",
            inf->conf->name, r->ns ? " namespace=" : "", r->ns ? r->ns : "", r->list_items,
            secs > 0 ? (double)r->list_items / secs : 0.0, r->initial ? r->list_items : r->list_pages,
            r->initial ? "initial event(s) (streamed list)" : "page(s)", (unsigned long long)r->list_bytes, secs);
}

/* Every reflector has its first list: compress on the ingest step from now
 * on (packer.h). The packer's thread pays where one list's objects arrive
 * back to back; for the changes after it, handing each one over cost more
 * CPU than compressing it where it was decoded (docs/performance.md). Under
 * ingest_mtx, so nothing is staged while the packer packs its rest. */
static void kb_inf_first_lists_done(kb_informer_t *inf) {
    pthread_mutex_lock(&inf->ingest_mtx);
    if (kb_informer_synced(inf) && kb_packer_running(inf->packer))
        kb_packer_stop(inf->packer);
    pthread_mutex_unlock(&inf->ingest_mtx);
}

void kb_inf__list_synced(kb_reflector_t *r) {
    if (r->listed) {
        atomic_fetch_add(&r->inf->st_relists, 1);
        return;
    }
    r->listed = true;
    atomic_fetch_add(&r->inf->synced_refl, 1);
    kb_inf_first_lists_done(r->inf);
}

void kb_inf__stream_begin(kb_reflector_t *r) {
    r->stream_listed = r->stream_ignored = false;
    kb_inf__list_begin(r);
    r->initial = true;
}

bool kb_inf__stream_end(kb_reflector_t *r) {
    r->initial = false;
    kb_inf__list_done(r);
    return r->stream_listed;
}

void kb_inf__list_done(kb_reflector_t *r) {
    kb_strmap_destroy(r->seen);
    r->seen = NULL;
    r->list_open = false;
}

/* One page of the list (the response body; src names the request for error
 * texts): its items are ingested as one batch; cont gets its continue token
 * ("" on the last page). KB_ERR_PARSE,
 * KB_ERR_IO (state_dir) or KB_ERR_STOPPED end the list. */
kb_err_t kb_inf__list_page(kb_reflector_t *r, const char *src, const char *data, size_t len, kb_buf_t *cont) {
    kb_informer_t *inf = r->inf;
    kb_list_page_t page;
    memset(&page, 0, sizeof(page));
    char why[256];
    if (!kb_refl_wait_room(r))
        return KB_ERR_STOPPED;
    kb_err_t derr = kb_decode_list(data, len, &page, why, sizeof(why));
    if (derr == KB_OK && r->list_pages == 0 && page.rv.len >= sizeof(r->list_rv)) {
        snprintf(why, sizeof(why), "metadata.resourceVersion of %zu bytes (at most %d supported)", page.rv.len,
                 KB_RV_MAX - 1);
        derr = KB_ERR_PARSE;
    }
    if (derr != KB_OK) {
        char first[160];
        kb_api_body_excerpt(data, len, 120, first, sizeof(first));
        kb_inf__error(inf, KB_WATCH_ERR_MALFORMED, "list response of %s: %s", src, why);
        KB_ERROR("reflector", "informer=%s list response of %s does not parse: %s (%zu bytes: \"%s\")",
                 inf->conf->name, src, why, len, first);
        kb_list_page_fini(&page);
        return KB_ERR_PARSE;
    }
    if (page.kind.len > 4 && !memcmp(data + page.kind.off + page.kind.len - 4, "List", 4))
        kb_resource_set_kind(inf->res, data + page.kind.off, page.kind.len - 4);
    if (r->list_pages == 0) {
        memcpy(r->list_rv, data + page.rv.off, page.rv.len);
        r->list_rv[page.rv.len] = '\0';
        r->list_back = kb_inf_list_back(r, r->list_rv);
    }
    int64_t now = kb_now_mono_ns();
    pthread_mutex_lock(&inf->ingest_mtx);
    kb_inf_batch_begin(inf);
    for (size_t i = 0; i < page.n_items && !inf->batch_failed; i++)
        kb_inf_ingest(r, KB_SRC_LIST, KB_WATCH_ADDED, data + page.items[i].off, page.items[i].len, now, false);
    kb_err_t berr = kb_inf_batch_end(inf);
    pthread_mutex_unlock(&inf->ingest_mtx);
    r->list_pages++;
    kb_inf_list_progress(r, page.n_items, len);
    atomic_fetch_add(&inf->st_pages, 1);
    atomic_store(&inf->st_heard_ns, kb_now_real_ns());
    kb_buf_reset(cont);
    if (page.cont.len)
        kb_buf_append(cont, data + page.cont.off, page.cont.len);
    kb_list_page_fini(&page);
    return berr;
}

/* A window (lo, hi] listed, not watched, after an HA takeover: if an object
 * the old leader delivered can have been created and deleted in it unseen
 * (kb_hatable_blind), it joins what kb_informer_blind reports. */
static void kb_inf_expose(kb_informer_t *inf, uint64_t lo, uint64_t hi) {
    uint64_t from;
    if (!atomic_load(&inf->ha_took) ||
        !kb_hatable_blind(lo, hi, atomic_load(&inf->ha_trusted), atomic_load(&inf->ha_took_rv), &from))
        return;
    uint64_t n = atomic_load(&inf->exposed_n), elo = atomic_load(&inf->exposed_lo);
    atomic_store(&inf->exposed_lo, n == 0 || from < elo ? from : elo);
    if (hi > atomic_load(&inf->exposed_hi))
        atomic_store(&inf->exposed_hi, hi);
    atomic_fetch_add(&inf->exposed_n, 1);
    KB_WARN("informer", "informer=%s blind takeover: resourceVersions (%llu, %llu] were listed here, not watched, "
            "above the watermark taken over (%llu): an object created and deleted there that the old leader "
            "delivered gets no DELETED (no replica knows it; docs/cluster.md, section 9)", inf->conf->name,
            (unsigned long long)from, (unsigned long long)hi, (unsigned long long)atomic_load(&inf->ha_trusted));
}

/* A list at now_rv of a scope that was watched up to prev (0: never): what
 * changed in (prev, now_rv] was not watched here, only listed — an object
 * created and deleted in it was never known. Their hull is kept (a takeover
 * compares it with the mark it takes over), and after a takeover each one is
 * weighed as it completes (kb_inf_expose). Caller holds ingest_mtx. */
static void kb_inf_note_blind(kb_informer_t *inf, uint64_t prev, uint64_t now_rv) {
    uint64_t lo = atomic_load(&inf->blind_lo), hi = atomic_load(&inf->blind_hi);
    if (now_rv <= prev)
        return;
    /* The hull of every window this process listed: at a takeover (or when
     * a restarted leader re-arms), whether one reaches above the mark is
     * exactly whether the hull does (the newest alone is not enough: an
     * older one of another scope may reach further down); the range reported
     * is the hull's part above the mark. */
    atomic_store(&inf->blind_lo, hi == 0 || prev < lo ? prev : lo);
    atomic_store(&inf->blind_hi, now_rv > hi ? now_rv : hi);
    kb_inf_expose(inf, prev, now_rv);
}

void kb_informer_ha_took(kb_informer_t *inf, uint64_t trusted, uint64_t took_rv, bool now) {
    atomic_store(&inf->ha_trusted, trusted);
    atomic_store(&inf->ha_took_rv, took_rv);
    atomic_store(&inf->exposed_n, 0);
    atomic_store(&inf->exposed_lo, 0);
    atomic_store(&inf->exposed_hi, 0);
    atomic_store(&inf->ha_took, true);
    if (now && atomic_load(&inf->blind_start))
        kb_inf_expose(inf, 0, atomic_load(&inf->blind_start));
    if (atomic_load(&inf->blind_hi))
        kb_inf_expose(inf, atomic_load(&inf->blind_lo), atomic_load(&inf->blind_hi));
}

uint64_t kb_informer_blind(kb_informer_t *inf, uint64_t *lo, uint64_t *hi) {
    uint64_t n = atomic_load(&inf->exposed_n);
    *lo = atomic_load(&inf->exposed_lo);
    *hi = atomic_load(&inf->exposed_hi);
    return n;
}

/* The list is complete (its RV in r->list_rv): stage the deletes of what it
 * did not contain (deleted while we did not watch) and the resume point at
 * the list's RV. Caller holds ingest_mtx in a batch. */
static void kb_inf_list_close(kb_reflector_t *r) {
    kb_informer_t *inf = r->inf;
    const char *list_rv = r->list_rv;
    /* A list below where we were: the server's history went back (etcd
     * restored): kb_inf_list_back. */
    uint64_t prev = kb_rv_parse(r->rv, strlen(r->rv)), now_rv = kb_rv_parse(list_rv, strlen(list_rv));
    kb_inf_note_blind(inf, r->list_from < prev ? r->list_from : prev, now_rv);
    r->list_from_set = false;
    r->list_back = false;
    prev = r->list_floor;
    if (kb_inf_list_back(r, list_rv)) {
        inf->prior_rv = 0;
        r->seen_rv = now_rv; /* the new epoch */
        atomic_fetch_add(&inf->st_rv_regressions, 1);
        /* Forget the deletes we remember: their RVs belong to the old history. */
        kb_ledger_forget_graves(inf->ledger);
        if (inf->def_new_server)
            KB_WARN("reflector", "informer=%s another API server than state_dir's: a new history (counted as a "
                    "restore); delivering the difference by content, some keys' RVs will go down", inf->conf->name);
        else
            KB_WARN("reflector",
                    "informer=%s resourceVersion went back from %llu to %s (server restored from a backup?); "
                    "delivering the difference by content, some keys' RVs will go down",
                    inf->conf->name, (unsigned long long)prev, list_rv);
        inf->def_new_server = false;
    }
    kb_ledger_cap_graves(inf->ledger, kb_refl_index(r), now_rv);
    kb_inf_delete_unseen(r, now_rv);
    bool def_last = kb_inf_def_list_close(r);
    if (def_last)
        kb_inf_delete_unscoped(inf, now_rv);
    kb_inf_stage_mark(inf, kb_refl_index(r), list_rv);
    if (def_last && !inf->batch_failed && kb_state_put_definition(inf->state, inf->def, NULL) != KB_OK)
        kb_inf_batch_fail(inf, "state_dir write");
}

/* After the batch of kb_inf_list_close committed. */
static void kb_inf_list_closed(kb_reflector_t *r, bool streamed) {
    kb_informer_t *inf = r->inf;
    kb_refl_set_rv(r, r->list_rv, strlen(r->list_rv));
    atomic_fetch_add(&inf->st_lists, 1);
    char pages[32] = "streamed";
    if (!streamed)
        snprintf(pages, sizeof(pages), "pages=%zu", r->list_pages);
    KB_INFOF("reflector",
             KB_FIELDS(KB_F("informer", inf->conf->name), KB_F("namespace", r->ns), KB_FU("items", r->list_items),
                       KB_F("rv", r->list_rv)),
             "informer=%s%s%s listed items=%zu %s bytes=%llu rv=%s in %.1f s", inf->conf->name,
            r->ns ? " namespace=" : "", r->ns ? r->ns : "", r->list_items, pages, (unsigned long long)r->list_bytes,
            r->list_rv, (double)(kb_now_mono_ns() - r->list_t0_ns) / 1e9);
}

/* The list is complete: what it did not contain was deleted while we did not
 * watch; the reflector resumes at the list's RV. */
kb_err_t kb_inf__list_end(kb_reflector_t *r) {
    kb_informer_t *inf = r->inf;
    pthread_mutex_lock(&inf->ingest_mtx);
    kb_inf_batch_begin(inf);
    kb_inf_list_close(r);
    kb_err_t err = kb_inf_batch_end(inf);
    pthread_mutex_unlock(&inf->ingest_mtx);
    if (err != KB_OK)
        return err;
    kb_inf_list_closed(r, false);
    return KB_OK;
}

/* The API server writes every frame as {"type":"T","object":{…}}. For that
 * shape the object's span is known without scanning, and kb_decode_object
 * (which validates the object and refuses trailing bytes) is the one pass
 * over it. Anything else takes the general decoder. */
static bool kb_refl_fast_frame(const char *f, size_t len, kb_watch_type_t *type, kb_span_t *obj) {
    static const char pre[] = "{\"type\":\"";
    static const struct {
        const char *name;
        size_t len;
        kb_watch_type_t type;
    } types[] = {{"ADDED", 5, KB_WATCH_ADDED}, {"MODIFIED", 8, KB_WATCH_MODIFIED}, {"DELETED", 7, KB_WATCH_DELETED}};
    static const char mid[] = "\",\"object\":";
    if (len < sizeof(pre) + sizeof(mid) + 8 || memcmp(f, pre, sizeof(pre) - 1) != 0 || f[len - 1] != '}')
        return false;
    size_t at = sizeof(pre) - 1;
    for (size_t i = 0; i < KB_ARRAY_LEN(types); i++) {
        if (len - at > types[i].len + sizeof(mid) && !memcmp(f + at, types[i].name, types[i].len) &&
            !memcmp(f + at + types[i].len, mid, sizeof(mid) - 1)) {
            obj->off = at + types[i].len + sizeof(mid) - 1;
            obj->len = len - 1 - obj->off;
            *type = types[i].type;
            return true;
        }
    }
    return false;
}

/* A bookmark only ever moves the resume point forward: one below it (a
 * lagging cache replica, a proxy replaying an old frame) would make the next
 * watch ask for history already delivered. Numbers only refuse going back;
 * an RV that is not a number is taken as it is. */
static bool kb_refl_bookmark_forward(kb_reflector_t *r, const char *rv, size_t len) {
    uint64_t to = kb_rv_parse(rv, len), from = kb_rv_parse(r->rv, strlen(r->rv));
    if (!to || !from || to >= from)
        return true;
    static kb_ratelimit_t rl;
    uint64_t sup = 0;
    if (kb_ratelimit_allow(&rl, 10000, &sup))
        KB_WARN("reflector", "informer=%s BOOKMARK rv=%.*s is below the resume point rv=%s: ignored (suppressed=%llu)",
                r->inf->conf->name, (int)len, rv, r->rv, (unsigned long long)sup);
    return false;
}

/* A frame of a streamed list before its end: an ADDED is one list item (the
 * same ingestion as a list page's items). Any other change means the server
 * answered with a normal watch, not the initial events: the stream is ended
 * and not taken as a list. */
static kb_ingest_t kb_refl_initial_event(kb_reflector_t *r, kb_watch_type_t type, const char *obj, size_t len,
                                         int64_t read_ns, bool quiet_bad) {
    if (type != KB_WATCH_ADDED) {
        r->stream_ignored = true;
        r->watch_err = KB_ERR_UNSUPPORTED;
        return KB_INGEST_STOPPED;
    }
    kb_ingest_t res = kb_inf_ingest(r, KB_SRC_LIST, KB_WATCH_ADDED, obj, len, read_ns, quiet_bad);
    if (res == KB_INGEST_STOPPED)
        r->watch_err = KB_ERR_IO;
    if (res != KB_INGEST_BAD)
        kb_inf_list_progress(r, 1, 0); /* the bytes are counted per chunk */
    return res;
}

/* Does this BOOKMARK object carry "k8s.io/initial-events-end": "true"? A
 * bookmark holds only kind, apiVersion, its RV and annotations, so the
 * member is looked for as text. */
static bool kb_refl_initial_end(const char *obj, size_t len) {
    static const char key[] = "\"k8s.io/initial-events-end\"";
    const char *p = memmem(obj, len, key, sizeof(key) - 1);
    if (!p)
        return false;
    const char *end = obj + len;
    p += sizeof(key) - 1;
    while (p < end && (*p == ' ' || *p == ':' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return end - p >= 6 && !memcmp(p, "\"true\"", 6);
}

/* The initial-events-end BOOKMARK of a streamed list: the list is complete at
 * its RV; what it did not contain is staged as deleted in this batch, and the
 * frames after it are normal watch events. */
static kb_ingest_t kb_refl_stream_end(kb_reflector_t *r, const char *obj, size_t len) {
    kb_span_t rv;
    if (!kb_decode_object_rv(obj, len, &rv) || rv.len == 0 || rv.len >= sizeof(r->list_rv)) {
        kb_inf__error(r->inf, KB_WATCH_ERR_MALFORMED, "initial-events-end BOOKMARK without a usable resourceVersion");
        r->watch_err = KB_ERR_PARSE;
        return KB_INGEST_STOPPED;
    }
    memcpy(r->list_rv, obj + rv.off, rv.len);
    r->list_rv[rv.len] = '\0';
    kb_inf_list_close(r);
    kb_refl_set_rv(r, r->list_rv, rv.len);
    r->initial = false;
    r->stream_listed = true; /* undone if the batch does not commit */
    return KB_INGEST_OK;
}

/* Handle one watch frame. KB_INGEST_BAD if the bytes are not one valid
 * frame (nothing was counted or queued); KB_INGEST_STOPPED aborts the
 * stream (r->watch_err says why). */
static kb_ingest_t kb_refl_frame(kb_reflector_t *r, const char *frame, size_t len, int64_t read_ns) {
    kb_informer_t *inf = r->inf;
    kb_watch_frame_t f;
    char why[256];
    kb_ingest_t res;
    if (kb_refl_fast_frame(frame, len, &f.type, &f.object)) {
        if (r->initial)
            res = kb_refl_initial_event(r, f.type, frame + f.object.off, f.object.len, read_ns, true);
        else
            res = kb_inf_ingest(r, KB_SRC_WATCH, f.type, frame + f.object.off, f.object.len, read_ns, true);
        if (res == KB_INGEST_STOPPED)
            r->watch_err = KB_ERR_IO;
        if (res != KB_INGEST_BAD)
            goto counted;
        /* Not the canonical shape after all (say, a member after "object"). */
    }
    if (kb_decode_watch_frame(frame, len, &f, why, sizeof(why)) != KB_OK)
        return KB_INGEST_BAD;
    const char *obj = frame + f.object.off;
    switch (f.type) {
    case KB_WATCH_ERROR:
        kb_decode_status(obj, f.object.len, &r->status);
        r->cls = kb_kstatus_classify(r->status.code, r->status.reason, r->status.cause_reason);
        r->has_cls = true;
        r->watch_err = r->cls.err == KB_OK ? KB_ERR_HTTP : r->cls.err; /* an ERROR event is never a success */
        r->watch_error_event = true;
        res = KB_INGEST_STOPPED;
        goto counted;
    case KB_WATCH_BOOKMARK: {
        kb_span_t rv;
        atomic_fetch_add(&inf->st_bookmarks, 1);
        if (r->initial) { /* the resume point moves only when the list is complete */
            res = kb_refl_initial_end(obj, f.object.len) ? kb_refl_stream_end(r, obj, f.object.len) : KB_INGEST_OK;
            goto counted;
        }
        if (kb_decode_object_rv(obj, f.object.len, &rv) && kb_refl_bookmark_forward(r, obj + rv.off, rv.len))
            kb_refl_set_rv(r, obj + rv.off, rv.len);
        res = KB_INGEST_OK;
        goto counted;
    }
    default:
        break;
    }
    if (r->initial)
        res = kb_refl_initial_event(r, f.type, obj, f.object.len, read_ns, false);
    else
        res = kb_inf_ingest(r, KB_SRC_WATCH, f.type, obj, f.object.len, read_ns, false);
    if (res == KB_INGEST_BAD)
        res = KB_INGEST_OK; /* a well-formed frame whose object we cannot use: counted, skipped */
    else if (res == KB_INGEST_STOPPED)
        r->watch_err = KB_ERR_IO;
counted:
    r->frames++;
    atomic_fetch_add(&inf->st_frames, 1);
    atomic_store(&inf->st_heard_ns, kb_now_real_ns());
    return res;
}

/* One line of the stream: normally one frame. A line holding several JSON
 * values (the framing is self-delimiting) is split value by value; bytes
 * that are not JSON end the watch as malformed. */
static bool kb_refl_line(kb_reflector_t *r, const char *line, size_t len, int64_t read_ns) {
    while (len && (line[len - 1] == ' ' || line[len - 1] == '\r' || line[len - 1] == '\t'))
        len--;
    while (len && (line[0] == ' ' || line[0] == '\r' || line[0] == '\t')) {
        line++;
        len--;
    }
    if (!len)
        return true;
    kb_ingest_t res = kb_refl_frame(r, line, len, read_ns);
    if (res != KB_INGEST_BAD)
        return res == KB_INGEST_OK;
    size_t pos = 0, start, end;
    const char *why = "not a watch event";
    while (pos < len) {
        kb_json_status_t st = kb_json_scan_value(line + pos, len - pos, &start, &end);
        if (st != KB_JSON_OK) {
            why = st == KB_JSON_INCOMPLETE ? "truncated JSON" : "not JSON";
            break;
        }
        if (start == 0 && end == len)
            break; /* one whole value, and it was not a frame */
        res = kb_refl_frame(r, line + pos + start, end - start, read_ns);
        if (res != KB_INGEST_OK)
            break;
        pos += end;
        while (pos < len && (line[pos] == ' ' || line[pos] == '\t' || line[pos] == '\r'))
            pos++;
        if (pos == len)
            return true;
    }
    if (res == KB_INGEST_STOPPED)
        return false;
    kb_inf__error(r->inf, KB_WATCH_ERR_MALFORMED, "watch frame: %s", why);
    KB_WARN("reflector", "informer=%s malformed watch frame (%s): %.*s; re-watching from rv=%s", r->inf->conf->name,
            why, (int)(r->inf->conf->redact_fields.n ? 0 : len > 120 ? 120 : len), line, r->rv); /* redacted: no bytes */
    r->watch_err = KB_ERR_PARSE;
    return false;
}

/* curl write callback for watches: the server ends each frame with '\n'.
 * One call is one ingestion batch: its events are committed to state_dir
 * together and only then queued. */
bool kb_inf__watch_bytes(void *opaque, const char *data, size_t len) {
    kb_reflector_t *r = opaque;
    kb_informer_t *inf = r->inf;
    int64_t now = kb_now_mono_ns();
    if (atomic_load(&r->relist_asked)) { /* the audit found too much drift: end here, relist */
        r->watch_err = KB_ERR_GONE;
        return false;
    }
    kb_buf_append(&r->stream, data, len);
    if (!memchr(data, '\n', len) && r->stream.len < KB_WATCH_MAX_FRAME)
        return true;
    size_t had = r->stream.len - len;
    if (!kb_refl_wait_room(r)) {
        r->watch_err = KB_ERR_STOPPED;
        return false;
    }
    char rv0[sizeof(r->rv)];
    memcpy(rv0, r->rv, sizeof(rv0));
    bool was_initial = r->initial;
    if (was_initial)
        r->list_bytes += len;
    pthread_mutex_lock(&inf->ingest_mtx);
    kb_inf_batch_begin(inf);
    const char *buf = r->stream.data;
    size_t pos = 0, scan = had; /* bytes before `had` hold no '\n' */
    bool ok = true;
    for (;;) {
        const char *nl = memchr(buf + scan, '\n', r->stream.len - scan);
        if (!nl)
            break;
        size_t end = (size_t)(nl - buf);
        ok = kb_refl_line(r, buf + pos, end - pos, now);
        pos = scan = end + 1;
        if (!ok)
            break;
    }
    /* Bookmarks and skipped events move the resume point too: record it. */
    int idx = kb_refl_index(r);
    bool staged = inf->n_out && inf->out[inf->n_out - 1].refl == idx && !strcmp(inf->out[inf->n_out - 1].rv_after, r->rv);
    if (ok && !staged && strcmp(rv0, r->rv) != 0)
        kb_inf_stage_mark(inf, idx, r->rv);
    kb_err_t berr = kb_inf_batch_end(inf);
    pthread_mutex_unlock(&inf->ingest_mtx);
    if (berr != KB_OK) {
        if (berr == KB_ERR_IO) /* nothing of this chunk counts: read it again */
            kb_refl_set_rv(r, rv0, strlen(rv0));
        r->watch_err = berr;
        ok = false;
        r->stream_listed = r->stream_listed && !was_initial; /* a streamed list's end did not commit */
    } else if (was_initial && r->stream_listed) {
        kb_inf_list_closed(r, true);
        kb_inf__list_done(r);
        kb_inf__list_synced(r);
    }
    if (ok && r->stream.len - pos >= KB_WATCH_MAX_FRAME) {
        kb_inf__error(inf, KB_WATCH_ERR_MALFORMED, "watch frame over %u bytes without a newline", KB_WATCH_MAX_FRAME);
        r->watch_err = KB_ERR_PARSE;
        ok = false;
    }
    kb_buf_consume(&r->stream, pos);
    return ok;
}

/* ---- resync ----------------------------------------------------------- */

static void *kb_resync_main(void *arg) {
    kb_informer_t *inf = arg;
    char tname[32];
    snprintf(tname, sizeof(tname), "kb:resync/%s", inf->conf->name);
    kb_thread_set_name(tname);
    int64_t period_ms = (int64_t)inf->conf->resync_seconds * 1000;
    while (!kb_sleep_ms_interruptible(period_ms, &inf->stop)) {
        kb_event_list_t all;
        kb_event_list_init(&all);
        kb_indexer_list(inf->idx, NULL, &all);
        size_t queued = 0;
        for (size_t i = 0; i < all.n && !atomic_load(&inf->stop); i++) {
            kb_event_t *ev = all.ev[i];
            pthread_mutex_lock(&inf->ingest_mtx);
            /* Re-check under the lock: the reflector may have moved on. */
            kb_event_t *cur = kb_indexer_get(inf->idx, ev->key, ev->key_len, ev->key_hash);
            kb_deltafifo_t *fifo = inf->fifos[ev->key_hash % inf->n_shards];
            if (cur && !kb_deltafifo_has_pending(fifo, cur->key, cur->key_len, cur->key_hash)) {
                kb_inf_batch_begin(inf);
                kb_inf_stage(inf, kb_inf_retype_full(inf, cur, KB_EV_SYNC, false), -1, "", 0);
                if (kb_inf_batch_end(inf) == KB_OK)
                    queued++;
            }
            pthread_mutex_unlock(&inf->ingest_mtx);
            kb_event_unref(cur);
        }
        kb_event_list_fini(&all);
        KB_DEBUG("informer", "informer=%s resync queued=%zu", inf->conf->name, queued);
    }
    return NULL;
}

/* ---- lifecycle -------------------------------------------------------- */

char *kb_inf__path(const kb_config_informer_t *c, const char *ns) {
    kb_buf_t p = KB_BUF_INIT;
    if (c->group && c->group[0])
        kb_buf_appendf(&p, "/apis/%s/%s", c->group, c->version);
    else
        kb_buf_appendf(&p, "/api/%s", c->version);
    if (ns)
        kb_buf_appendf(&p, "/namespaces/%s", ns);
    kb_buf_appendf(&p, "/%s", c->resource);
    return kb_buf_steal(&p, NULL);
}

static void kb_inf_load_index_cb(void *opaque, uint64_t seq, kb_event_t *ev, const char *rv_after) {
    kb_informer_t *inf = opaque;
    KB_UNUSED(seq);
    KB_UNUSED(rv_after);
    for (size_t i = 0; i < inf->n_refl; i++) { /* its scope's newest object (kb_inf_list_back) */
        kb_reflector_t *r = &inf->refl[i];
        bool ours = !r->ns || (strlen(r->ns) == ev->ns_len && !memcmp(r->ns, ev->ns, ev->ns_len));
        if (ours && ev->rv_num > r->seen_rv)
            r->seen_rv = ev->rv_num;
    }
    kb_event_t *thin = ev->obj_len ? kb_event_thin(ev) : kb_event_ref(ev);
    kb_indexer_put(inf->idx, thin, ev->labels_len ? ev->obj + ev->labels_off : NULL, ev->labels_len, NULL);
    kb_event_unref(thin);
    if (!kb_resource_kind(inf->res)[0] && ev->obj_len) {
        kb_span_t k;
        if (kb_json_object_get(ev->obj, ev->obj_len, "kind", &k) && k.len > 2)
            kb_resource_set_kind(inf->res, ev->obj + k.off + 1, k.len - 2);
    }
    kb_event_unref(ev);
}

static kb_ledger_t *kb_inf_ledger_new(kb_informer_t *inf) {
    const char **ns = kb_calloc(inf->n_refl, sizeof(*ns));
    for (size_t i = 0; i < inf->n_refl; i++)
        ns[i] = inf->refl[i].ns;
    kb_ledger_t *l = kb_ledger_new(ns, inf->n_refl, inf->state);
    free(ns);
    /* KB_TEST_MAX_WINDOW lowers the bound for tests; never set in production. */
    const char *test = getenv("KB_TEST_MAX_WINDOW");
    size_t slots = test && atol(test) > 0 ? (size_t)atol(test) : KB_INF_MAX_WINDOW;
    kb_ledger_set_bounds(l, slots, inf->state ? (uint64_t)inf->cfg->journal_max_bytes : 0);
    return l;
}

/* The reflectors start where the ledger's checkpoint resumes — or with a
 * list, under a changed definition. Before start only. */
static void kb_inf_set_resume_points(kb_informer_t *inf) {
    for (size_t i = 0; i < inf->n_refl; i++)
        snprintf(inf->refl[i].rv, sizeof(inf->refl[i].rv), "%s",
                 inf->refl[i].def_stale ? "" : kb_ledger_resume_rv(inf->ledger, i));
}

/* Does state_dir hold anything of an earlier run (objects, a resume point, a tail)? */
static bool kb_inf_has_state(kb_informer_t *inf) {
    if (kb_indexer_count(inf->idx) || kb_ledger_tail_len(inf->ledger))
        return true;
    for (size_t i = 0; i < inf->n_refl; i++)
        if (kb_ledger_resume_rv(inf->ledger, i)[0])
            return true;
    return false;
}

/* Record this definition as pending. When its lists re-send every object
 * (a reshape), the record says so (KB_DEF_RESEND_LINE): a start interrupted
 * after it sent some objects in this shape leaves the next start, whatever
 * its definition — the same one, the stored one, a third — owing every object
 * again in its own shape, also when that next start is interrupted too. */
static kb_err_t kb_inf_put_pending(kb_informer_t *inf) {
    if (!inf->def_reshape)
        return kb_state_put_definition(inf->state, NULL, inf->def);
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_appendf(&b, "%s%s", inf->def, KB_DEF_RESEND_LINE);
    kb_err_t err = kb_state_put_definition(inf->state, NULL, b.data);
    kb_buf_fini(&b);
    return err;
}

/* Definitions an older kbridge stored without the API server are taken to be
 * of the one configured now (kb_definition_adopt): the stored one is written
 * back so, a pending one only read so. *stored and *pending are replaced. */
static kb_err_t kb_inf_adopt_server(kb_informer_t *inf, const char *dir, char **stored, char **pending) {
    char *pending_adopted = *pending ? kb_definition_adopt(*pending, inf->def) : NULL;
    if (pending_adopted) {
        free(*pending);
        *pending = pending_adopted;
    }
    char *adopted = kb_definition_adopt(*stored, inf->def);
    if (!adopted)
        return KB_OK;
    KB_INFO("informer", "informer=%s state_dir=%s records no API server (written by an older kbridge): taking it to "
            "be the one configured now", inf->conf->name, dir);
    free(*stored);
    *stored = adopted;
    return kb_state_put_definition(inf->state, *stored, *pending);
}

/* Compare the definition state_dir was written under with this one
 * (informer/definition.h). A change makes every reflector list first and
 * diff, whatever the checkpoint says; the new definition is stored with the
 * last of those lists (kb_inf_list_close). Until then it is recorded as
 * pending — before anything of it is delivered — so a start after an
 * interruption lists and diffs too, whatever its own definition: the
 * persisted index holds everything the pending one let in, and the diff takes
 * out what the next definition does not cover. None stored: a new state_dir
 * (store it), or one from before definitions were kept (adopt it: store this
 * one and resume). Before start only. */
static kb_err_t kb_inf_check_definition(kb_informer_t *inf, const char *dir) {
    char *stored = NULL, *pending = NULL;
    if (kb_state_read_definition(inf->state, &stored, &pending) != KB_OK)
        return KB_ERR_IO;
    if (!stored) {
        if (kb_inf_has_state(inf))
            KB_WARN("informer", "informer=%s state_dir=%s records no definition (written by an older kbridge): "
                    "adopting the current one and resuming; a definition changed before this start is not noticed",
                    inf->conf->name, dir);
        free(pending);
        return kb_state_put_definition(inf->state, inf->def, NULL);
    }
    if (kb_inf_adopt_server(inf, dir, &stored, &pending) != KB_OK) {
        free(stored);
        free(pending);
        return KB_ERR_IO;
    }
    kb_buf_t what = KB_BUF_INIT;
    unsigned diff = kb_definition_diff(stored, inf->def, &what);
    if (pending) {
        kb_buf_t since = KB_BUF_INIT;
        diff |= kb_definition_diff(pending, inf->def, &since) | KB_DEF_CHANGED;
        kb_buf_appendf(&what, "%sa start under another definition did not converge%s%s", what.len ? "; " : "",
                       since.len ? " (it had: " : "", since.len ? since.data : "");
        kb_buf_append_str(&what, since.len ? ")" : "");
        kb_buf_fini(&since);
    }
    free(stored);
    free(pending);
    kb_err_t err = KB_OK;
    if (diff) {
        inf->def_stale = inf->n_refl;
        for (size_t i = 0; i < inf->n_refl; i++)
            inf->refl[i].def_stale = true;
        inf->def_reshape = (diff & KB_DEF_RESHAPED) != 0;
        inf->def_new_server = (diff & KB_DEF_SERVER) != 0;
        KB_WARN("informer", "informer=%s definition changed since state_dir was written: %s; listing again instead "
                "of resuming: objects that no longer match leave as DELETED finalStateUnknown, new matches arrive as "
                "ADDED%s", inf->conf->name, what.data, inf->def_reshape ? ", every object is sent again in its new "
                "shape" : "");
        err = kb_inf_put_pending(inf);
    }
    kb_buf_fini(&what);
    return err;
}

/* Open state_dir/<informer>[.replica-<i>-of-<n>[.by-uid|.by-namespace]] (a
 * change of shard function is a new directory, as a change of replicas is),
 * load the cache, the
 * checkpoint and the journal's unacknowledged tail (into the ledger). */
static kb_err_t kb_inf_open_state(kb_informer_t *inf, char *errstr, size_t errstr_size) {
    const kb_config_t *cfg = inf->cfg;
    char dir[4096], why[512];
    if (cfg->sharding_replicas > 1)
        snprintf(dir, sizeof(dir), "%s/%s.replica-%d-of-%d%s%s", cfg->state_dir, inf->conf->name,
                 cfg->sharding_index, cfg->sharding_replicas, inf->shard.by_range ? ".by-" : "",
                 inf->shard.by_range ? kb_shard_basis(&inf->shard) : "");
    else
        snprintf(dir, sizeof(dir), "%s/%s", cfg->state_dir, inf->conf->name);
    kb_state_opts_t so = {.dir = dir, .map_bytes = UINT64_C(64) << 30,
                          .journal_max_bytes = (uint64_t)cfg->journal_max_bytes,
                          .journal_max_age_s = cfg->journal_max_age,
                          .dictionaries = inf->conf->cache_compression != KB_CACHE_COMPRESSION_OFF};
    inf->state = kb_state_open(&so, why, sizeof(why));
    if (!inf->state) {
        snprintf(errstr, errstr_size, "%s: %s", cfg->path, why);
        return KB_ERR_IO;
    }
    inf->ledger = kb_inf_ledger_new(inf);
    /* Label indexes need each object's labels: read the objects then (slower). */
    bool identity_only = inf->conf->index_labels.n == 0;
    if (kb_state_load_index(inf->state, inf->res, identity_only, kb_inf_load_index_cb, inf) != KB_OK ||
        kb_ledger_load(inf->ledger, inf->res, why, sizeof(why)) != KB_OK ||
        kb_inf_check_definition(inf, dir) != KB_OK) {
        snprintf(errstr, errstr_size, "%s: state_dir \"%s\": %s", cfg->path, dir, kb_state_error(inf->state));
        return KB_ERR_IO;
    }
    kb_inf_set_resume_points(inf);
    inf->prior_rv = kb_ledger_known_rv(inf->ledger);
    atomic_store(&inf->blind_start, inf->prior_rv); /* which lists came before this start is not known: all of it */
    kb_ledger_stats_t ls;
    kb_ledger_stats(inf->ledger, &ls);
    KB_INFOF("informer",
             KB_FIELDS(KB_F("informer", inf->conf->name), KB_F("state_dir", dir), KB_FU("seq", ls.acked),
                       KB_F("rv", ls.resume_rv[0] ? ls.resume_rv : NULL)),
             "informer=%s state_dir=%s: %zu cached object(s), checkpoint seq=%llu rv=%s, %zu change(s) to "
            "deliver again", inf->conf->name, dir, kb_indexer_count(inf->idx), (unsigned long long)ls.acked,
            ls.resume_rv[0] ? ls.resume_rv : "(none: list first)", kb_ledger_tail_len(inf->ledger));
    return KB_OK;
}

static void *kb_ckpt_main(void *arg) {
    kb_informer_t *inf = arg;
    char tname[32];
    snprintf(tname, sizeof(tname), "kb:ckpt/%s", inf->conf->name);
    kb_thread_set_name(tname);
    while (!kb_sleep_ms_interruptible(200, &inf->ckpt_stop))
        kb_ledger_checkpoint(inf->ledger);
    return NULL;
}

kb_err_t kb_informer_apply_cut(kb_informer_t *inf, const char *json, size_t len, char *errstr, size_t errstr_size) {
    size_t before = kb_ledger_tail_len(inf->ledger);
    kb_err_t err = kb_ledger_apply_cut(inf->ledger, json, len, errstr, errstr_size);
    if (err != KB_OK)
        return err;
    kb_inf_set_resume_points(inf);
    KB_INFO("informer", "informer=%s the sink's committed checkpoint: %zu change(s) of the journal were already "
            "committed there and are not delivered again", inf->conf->name, before - kb_ledger_tail_len(inf->ledger));
    kb_ledger_checkpoint(inf->ledger);
    return KB_OK;
}

void kb_informer_save_checkpoint(kb_informer_t *inf) {
    kb_ledger_checkpoint(inf->ledger);
}

void kb_informer_close_state(kb_informer_t *inf) {
    atomic_store(&inf->ckpt_stop, true);
    if (inf->ckpt_running)
        pthread_join(inf->ckpt_thread, NULL);
    inf->ckpt_running = false;
    if (inf->ledger && !inf->crashed)
        kb_ledger_checkpoint(inf->ledger);
    kb_state_close(inf->state);
    inf->state = NULL;
}

kb_informer_t *kb_informer_new(const kb_config_t *cfg, const kb_config_informer_t *conf, kb_apiclient_t *api,
                               char *errstr, size_t errstr_size) {
    char why[256];
    kb_transform_paths_t paths = {
        .drop = (const char *const *)conf->drop_fields.v, .n_drop = conf->drop_fields.n,
        .redact = (const char *const *)conf->redact_fields.v, .n_redact = conf->redact_fields.n,
        .keep = (const char *const *)conf->keep_fields.v, .n_keep = conf->keep_fields.n};
    paths.base64 = kb_transform_base64_fields(conf->group, conf->resource, &paths.n_base64);
    kb_transform_t *tf = kb_transform_new_paths(&paths, why, sizeof(why));
    if (!tf) {
        snprintf(errstr, errstr_size, "%s:%d: informers.%s: %s", cfg->path, conf->line, conf->name, why);
        return NULL;
    }
    kb_informer_t *inf = kb_calloc(1, sizeof(*inf));
    inf->cfg = cfg;
    kb_shard_from_config(&inf->shard, cfg);
    inf->conf = conf;
    inf->api = api;
    inf->tf = tf;
    inf->def = kb_definition_text(conf, api ? kb_apiclient_server(api) : cfg->cluster.server);
    inf->def_closing = -1;
    inf->res = kb_resource_new(cfg->cluster.name, conf->name, conf->group, conf->version, conf->resource);
    _Static_assert(KB_CONFIG_INDEX_LABELS_MAX <= KB_INDEXER_MAX_LABELS, "index_labels fit the indexer");
    inf->idx = kb_indexer_new(16, (const char *const *)conf->index_labels.v, conf->index_labels.n);
    inf->n_shards = (size_t)(conf->shards > 0 ? conf->shards : 1);
    inf->fifos = kb_calloc(inf->n_shards, sizeof(*inf->fifos));
    size_t per_shard = (size_t)conf->queue_bytes / inf->n_shards;
    for (size_t i = 0; i < inf->n_shards; i++)
        inf->fifos[i] = kb_deltafifo_new(conf->compaction, per_shard);
    pthread_mutex_init(&inf->ingest_mtx, NULL);
    pthread_mutex_init(&inf->err_mtx, NULL);
    inf->n_refl = conf->namespaces.n ? conf->namespaces.n : 1;
    inf->refl = kb_calloc(inf->n_refl, sizeof(*inf->refl));
    for (size_t i = 0; i < inf->n_refl; i++) {
        kb_reflector_t *r = &inf->refl[i];
        r->inf = inf;
        r->ns = conf->namespaces.n ? kb_strdup(conf->namespaces.v[i]) : NULL;
        r->path = kb_inf__path(conf, r->ns);
        pthread_mutex_init(&r->rv_mtx, NULL);
    }
    pthread_mutex_init(&inf->sub_mtx, NULL);
    for (size_t i = 0; i < inf->n_shards; i++)
        kb_deltafifo_set_drop(inf->fifos[i], kb_inf_dropped, inf);
    if (conf->emit_secret_values)
        KB_WARN("informer", "informer=%s emit_secret_values = true: Secret values are sent in clear", conf->name);
    if (cfg->state_dir && cfg->state_dir[0]) {
        if (kb_inf_open_state(inf, errstr, errstr_size) != KB_OK) {
            kb_informer_destroy(inf);
            return NULL;
        }
    } else {
        inf->ledger = kb_inf_ledger_new(inf);
        if (conf->cache_compression != KB_CACHE_COMPRESSION_OFF) {
            inf->zc = kb_zcache_new(NULL, conf->name, inf->idx);
            inf->packer = kb_packer_new(inf->zc, inf->idx, conf->name, KB_PACKER_MAX_BYTES);
        }
    }
    return inf;
}

/* One change of the journal's unacknowledged tail, queued again. */
static void kb_inf_requeue(void *opaque, kb_event_t *ev) {
    kb_informer_t *inf = opaque;
    kb_event_type_t type = ev->type; /* the push hands the event to a worker */
    if (kb_deltafifo_push(inf->fifos[ev->key_hash % inf->n_shards], ev, -1) == KB_OK)
        atomic_fetch_add(&inf->st_events[type], 1);
}

void kb_informer_requeue_tail(kb_informer_t *inf) {
    size_t n = kb_ledger_tail_len(inf->ledger);
    if (n)
        KB_INFO("informer", "informer=%s delivering %zu unacknowledged change(s) from the journal again",
                inf->conf->name, n);
    kb_ledger_requeue_tail(inf->ledger, kb_inf_requeue, inf);
}

kb_err_t kb_informer_start(kb_informer_t *inf) {
    kb_informer_requeue_tail(inf);
    if (inf->state) {
        if (pthread_create(&inf->ckpt_thread, NULL, kb_ckpt_main, inf) != 0)
            KB_FATAL("cannot start the checkpoint thread");
        inf->ckpt_running = true;
    }
    if (inf->packer)
        kb_packer_start(inf->packer);
    for (size_t i = 0; i < inf->n_refl; i++) {
        if (pthread_create(&inf->refl[i].thread, NULL, kb_inf__reflector_main, &inf->refl[i]) != 0)
            KB_FATAL("cannot start a reflector thread");
        inf->refl[i].running = true;
    }
    if (inf->conf->resync_seconds > 0) {
        if (pthread_create(&inf->resync_thread, NULL, kb_resync_main, inf) != 0)
            KB_FATAL("cannot start the resync thread");
        inf->resync_running = true;
    }
    kb_audit_start(inf);
    KB_INFOF("informer", KB_FIELDS(KB_F("informer", inf->conf->name), KB_F("server", kb_apiclient_server(inf->api))),
             "informer=%s started: %s%s reflectors=%zu shards=%zu compaction=%s", inf->conf->name,
            kb_apiclient_server(inf->api), inf->refl[0].path, inf->n_refl, inf->n_shards,
            inf->conf->compaction == KB_COMPACTION_LATEST ? "latest" : "none");
    return KB_OK;
}

void kb_informer_stop(kb_informer_t *inf) {
    atomic_store(&inf->stop, true);
    /* Closing the queues releases a reflector blocked on a full one. */
    for (size_t i = 0; i < inf->n_shards; i++)
        kb_deltafifo_close(inf->fifos[i]);
    for (size_t i = 0; i < inf->n_refl; i++)
        if (inf->refl[i].running) {
            pthread_join(inf->refl[i].thread, NULL);
            inf->refl[i].running = false;
        }
    if (inf->resync_running)
        pthread_join(inf->resync_thread, NULL);
    inf->resync_running = false;
    kb_audit_stop(inf);
    kb_packer_stop(inf->packer); /* nothing stages any more: pack what is queued */
}

void kb_informer_destroy(kb_informer_t *inf) {
    if (!inf)
        return;
    kb_informer_close_state(inf);
    kb_ledger_destroy(inf->ledger);
    free(inf->out);
    free(inf->undo);
    pthread_mutex_destroy(&inf->sub_mtx);
    for (size_t i = 0; i < inf->n_refl; i++) {
        kb_reflector_t *r = &inf->refl[i];
        free(r->ns);
        free(r->path);
        kb_buf_fini(&r->stream);
        kb_strmap_destroy(r->seen);
        pthread_mutex_destroy(&r->rv_mtx);
    }
    free(inf->refl);
    for (size_t i = 0; i < inf->n_shards; i++)
        kb_deltafifo_destroy(inf->fifos[i]);
    free(inf->fifos);
    kb_packer_destroy(inf->packer);
    kb_zcache_destroy(inf->zc);
    kb_indexer_destroy(inf->idx);
    kb_transform_free(inf->tf);
    free(inf->def);
    kb_resource_unref(inf->res);
    kb_buf_fini(&inf->scratch);
    pthread_mutex_destroy(&inf->ingest_mtx);
    pthread_mutex_destroy(&inf->err_mtx);
    free(inf);
}

void kb_informer_snapshot(kb_informer_t *inf, const char *ns, kb_event_list_t *out, char *rv, size_t rv_size) {
    kb_informer_cut(inf, ns, out, rv, rv_size, NULL);
}

bool kb_informer_subscribe(kb_informer_t *inf, kb_informer_sub_fn fn, void *opaque) {
    pthread_mutex_lock(&inf->sub_mtx);
    bool ok = inf->n_subs < KB_ARRAY_LEN(inf->subs);
    if (ok) {
        inf->subs[inf->n_subs].fn = fn;
        inf->subs[inf->n_subs].opaque = opaque;
        inf->n_subs++;
    }
    pthread_mutex_unlock(&inf->sub_mtx);
    return ok;
}

void kb_informer_unsubscribe(kb_informer_t *inf, kb_informer_sub_fn fn, void *opaque) {
    pthread_mutex_lock(&inf->sub_mtx);
    for (size_t i = 0; i < inf->n_subs; i++) {
        if (inf->subs[i].fn == fn && inf->subs[i].opaque == opaque) {
            inf->subs[i] = inf->subs[--inf->n_subs];
            break;
        }
    }
    pthread_mutex_unlock(&inf->sub_mtx);
}

typedef struct kb_replay_ctx {
    kb_informer_replay_fn fn;
    void *opaque;
    uint64_t first, last; /* seqs of the page's first and last entries (0: none) */
} kb_replay_ctx_t;

static void kb_inf_replay_cb(void *opaque, uint64_t seq, kb_event_t *ev, const char *rv_after) {
    kb_replay_ctx_t *ctx = opaque;
    KB_UNUSED(rv_after);
    if (!ctx->first)
        ctx->first = seq;
    ctx->last = seq;
    if (ev)
        ctx->fn(ctx->opaque, ev);
}

kb_err_t kb_informer_replay(kb_informer_t *inf, uint64_t rv, uint64_t *after, size_t limit,
                            kb_informer_replay_fn fn, void *opaque) {
    if (!inf->state)
        return KB_ERR_UNSUPPORTED;
    uint64_t from = *after + 1;
    if (!*after) {
        kb_err_t err = kb_state_journal_seek(inf->state, rv, &from);
        if (err != KB_OK)
            return err;
        from = from ? from : 1;
    }
    kb_replay_ctx_t ctx = {fn, opaque, 0, 0};
    kb_err_t err = kb_state_load_journal(inf->state, from - 1, limit, inf->res, kb_inf_replay_cb, &ctx);
    if (err != KB_OK)
        return err;
    if (*after && ctx.first > from)
        return KB_ERR_GONE; /* seqs are contiguous: the entries in between were trimmed */
    if (ctx.last)
        *after = ctx.last;
    return KB_OK;
}

const kb_config_informer_t *kb_informer_conf(const kb_informer_t *inf) {
    return inf->conf;
}

size_t kb_informer_shards(const kb_informer_t *inf) {
    return inf->n_shards;
}

kb_deltafifo_t *kb_informer_fifo(kb_informer_t *inf, size_t shard) {
    return shard < inf->n_shards ? inf->fifos[shard] : NULL;
}

kb_indexer_t *kb_informer_indexer(kb_informer_t *inf) {
    return inf->idx;
}

kb_resource_t *kb_informer_resource(kb_informer_t *inf) {
    return inf->res;
}

bool kb_informer_synced(const kb_informer_t *inf) {
    return atomic_load(&((kb_informer_t *)inf)->synced_refl) == inf->n_refl;
}

void kb_informer_stats(kb_informer_t *inf, kb_informer_stats_t *st) {
    memset(st, 0, sizeof(*st));
    for (int i = 0; i < KB_EV_TYPE_COUNT; i++)
        st->events[i] = atomic_load(&inf->st_events[i]);
    for (int i = 0; i < KB_WATCH_ERR_COUNT; i++)
        st->errors[i] = atomic_load(&inf->st_errors[i]);
    st->watch_events = atomic_load(&inf->st_frames);
    st->bookmarks = atomic_load(&inf->st_bookmarks);
    st->relists = atomic_load(&inf->st_relists);
    st->audit_runs = atomic_load(&inf->st_audit_runs);
    for (int k = 0; k < KB_AUDIT_KINDS; k++)
        st->audit_drift[k] = atomic_load(&inf->st_audit_drift[k]);
    pthread_mutex_lock(&inf->err_mtx);
    st->audit_last_ns = inf->audit_last_ns;
    memcpy(st->audit_last_drift, inf->audit_last_drift, sizeof(st->audit_last_drift));
    st->audit_last_relisted = inf->audit_last_relisted;
    pthread_mutex_unlock(&inf->err_mtx);
    st->lists = atomic_load(&inf->st_lists);
    st->list_pages = atomic_load(&inf->st_pages);
    st->heard_ns = atomic_load(&inf->st_heard_ns);
    st->gated = atomic_load(&inf->st_gated);
    st->watches = atomic_load(&inf->st_watches);
    st->rv_regressions = atomic_load(&inf->st_rv_regressions);
    st->sharding = inf->shard.replicas <= 1                                     ? "none"
                   : !inf->shard.by_range || atomic_load(&inf->shard_fallback) ? "client"
                                                                               : "server";
    st->shard_basis = kb_shard_basis(&inf->shard);
    st->shard_foreign = atomic_load(&inf->st_shard_foreign);
    st->persistent = inf->state != NULL;
    kb_ledger_stats_t ls;
    kb_ledger_stats(inf->ledger, &ls);
    st->ack_seq = ls.acked;
    st->seq = ls.seq;
    st->ack_time_ns = ls.ack_time_ns;
    memcpy(st->checkpoint_rv, ls.resume_rv, sizeof(st->checkpoint_rv));
    st->objects = kb_indexer_count(inf->idx);
    kb_zcache_stats_t zs;
    kb_zcache_stats(inf->zc, &zs);
    size_t entries = kb_indexer_bytes(inf->idx);
    st->cache_bytes = entries + zs.dict_bytes;
    st->cache_raw_bytes = entries + zs.packed_raw - zs.packed_bytes;
    st->cache_packed = zs.packed;
    st->cache_dict_bytes = zs.dict_bytes;
    st->cache_dicts = zs.dicts;
    st->cache_dict_trainings = zs.trainings;
    st->cache_compression = inf->zc != NULL;
    for (size_t i = 0; i < inf->n_shards; i++) {
        kb_deltafifo_stats_t fs;
        kb_deltafifo_stats(inf->fifos[i], &fs);
        st->pending_deltas += fs.deltas;
        st->pending_bytes += fs.bytes;
    }
    st->synced = kb_informer_synced(inf);
    st->sync_objects = st->synced ? 0 : atomic_load(&inf->st_sync_objects);
    st->paused = atomic_load(&inf->paused);
    st->window = ls.in_flight;
    pthread_mutex_lock(&inf->refl[0].rv_mtx);
    memcpy(st->last_rv, inf->refl[0].rv, sizeof(st->last_rv));
    pthread_mutex_unlock(&inf->refl[0].rv_mtx);
    pthread_mutex_lock(&inf->err_mtx);
    memcpy(st->last_error, inf->last_error, sizeof(st->last_error));
    pthread_mutex_unlock(&inf->err_mtx);
}

/* ---- additions for the Kubernetes API surface (bridge/kapi.c) ---------- */

/* The newest resume point over the reflectors (one RV space per cluster). */
static void kb_inf_cut_rv(kb_informer_t *inf, char *rv, size_t rv_size) {
    uint64_t best = 0;
    rv[0] = '\0';
    for (size_t i = 0; i < inf->n_refl; i++) {
        pthread_mutex_lock(&inf->refl[i].rv_mtx);
        uint64_t v = kb_rv_parse(inf->refl[i].rv, strlen(inf->refl[i].rv));
        if (v >= best && inf->refl[i].rv[0]) {
            best = v;
            snprintf(rv, rv_size, "%s", inf->refl[i].rv);
        }
        pthread_mutex_unlock(&inf->refl[i].rv_mtx);
    }
}

void kb_informer_select(kb_informer_t *inf, const char *ns, const kb_selector_t *sel, kb_event_list_t *out,
                        bool *exact, char *rv, size_t rv_size, uint64_t *seq) {
    bool ex = true;
    pthread_mutex_lock(&inf->ingest_mtx);
    if (seq)
        *seq = kb_ledger_seq(inf->ledger);
    if (out)
        kb_indexer_select(inf->idx, ns, sel, out, &ex);
    kb_inf_cut_rv(inf, rv, rv_size);
    pthread_mutex_unlock(&inf->ingest_mtx);
    if (exact)
        *exact = ex;
}

void kb_informer_cut(kb_informer_t *inf, const char *ns, kb_event_list_t *out, char *rv, size_t rv_size,
                     uint64_t *seq) {
    size_t first = out ? out->n : 0;
    kb_informer_select(inf, ns, NULL, out, NULL, rv, rv_size, seq);
    /* References only under the ingest lock; objects are read after it. */
    for (size_t i = first; out && i < out->n; i++) {
        kb_event_t *full = kb_informer_full(inf, out->ev[i]);
        kb_event_unref(out->ev[i]);
        out->ev[i] = full;
    }
}

kb_event_t *kb_informer_get(kb_informer_t *inf, const char *key, size_t len) {
    kb_event_t *ev = kb_indexer_get(inf->idx, key, len, kb_fnv1a64(key, len));
    if (!ev || ev->obj_len)
        return ev;
    kb_event_t *full = kb_informer_full(inf, ev);
    kb_event_unref(ev);
    return full;
}

/* ---- ingest.h: the reflector's steps for the simulation ------------------- */

void kb_ingest_list_begin(kb_informer_t *inf, size_t refl) {
    KB_ASSERT(refl < inf->n_refl);
    kb_inf__list_begin(&inf->refl[refl]);
}

kb_err_t kb_ingest_list_page(kb_informer_t *inf, size_t refl, const char *body, size_t len, kb_buf_t *cont) {
    KB_ASSERT(refl < inf->n_refl && inf->refl[refl].list_open);
    return kb_inf__list_page(&inf->refl[refl], "a page handed in by kb_ingest_list_page", body, len, cont);
}

kb_err_t kb_ingest_list_end(kb_informer_t *inf, size_t refl) {
    kb_reflector_t *r = &inf->refl[refl];
    kb_err_t err = kb_inf__list_end(r);
    kb_inf__list_done(r);
    if (err == KB_OK && !r->listed) {
        r->listed = true;
        atomic_fetch_add(&inf->synced_refl, 1);
    }
    return err;
}

void kb_ingest_watch_begin(kb_informer_t *inf, size_t refl, char *rv, size_t rv_size) {
    kb_reflector_t *r = &inf->refl[refl];
    kb_buf_reset(&r->stream);
    r->frames = 0;
    r->watch_err = KB_OK;
    snprintf(rv, rv_size, "%s", r->rv);
}

kb_err_t kb_ingest_watch_bytes(kb_informer_t *inf, size_t refl, const char *data, size_t len) {
    kb_reflector_t *r = &inf->refl[refl];
    if (kb_inf__watch_bytes(r, data, len))
        return KB_OK;
    return r->watch_err != KB_OK ? r->watch_err : KB_ERR_PARSE;
}

void kb_ingest_stream_begin(kb_informer_t *inf, size_t refl) {
    KB_ASSERT(refl < inf->n_refl);
    kb_reflector_t *r = &inf->refl[refl];
    kb_buf_reset(&r->stream);
    r->frames = 0;
    r->watch_err = KB_OK;
    kb_inf__stream_begin(r);
}

bool kb_ingest_stream_listed(kb_informer_t *inf, size_t refl) {
    KB_ASSERT(refl < inf->n_refl);
    return inf->refl[refl].stream_listed && !inf->refl[refl].initial;
}

bool kb_ingest_stream_end(kb_informer_t *inf, size_t refl) {
    KB_ASSERT(refl < inf->n_refl);
    return kb_inf__stream_end(&inf->refl[refl]);
}

void kb_ingest_crash(kb_informer_t *inf) {
    inf->crashed = true;
    kb_informer_destroy(inf);
}
