/* informer/informer.c — reflectors, ingestion, relist diff and resync.
 *
 * Design note.
 *
 * Threads. One reflector thread per watched scope (a namespace, or the whole
 * cluster) runs list → watch → watch … and turns what the server says into
 * events; the optional resync thread queues SYNC events. Both go through
 * kb_inf_ingest/kb_inf_enqueue under inf->ingest_mtx, which makes "look at
 * the cache, queue the event, update the cache" one step: without it a
 * resync could queue a stale SYNC behind a newer MODIFIED of the same key.
 * The mutex is held across a DeltaFIFO push that may block when the queue
 * is full; that is the backpressure path and it only ever waits for shard
 * workers, which never take this mutex.
 *
 * The cache is updated when an event is queued, not when it is delivered, so
 * a relist is diffed against everything the informer has already said,
 * including what is still queued. A per-key gate refuses watch events that
 * are not newer than the cache (numeric RVs; opaque RVs are only compared
 * for equality), so a resumed watch that replays a change cannot make a key
 * go back.
 *
 * Errors follow client-go's table (research/clientgo-semantics.md §1.5) with
 * two deliberate differences, both in the direction of not losing or
 * re-sending: a watch that ends with nothing received is re-opened after a
 * backoff step rather than turned into a relist, and a malformed frame
 * re-opens the watch from the last good RV instead of relisting. Lists are
 * consistent reads (no resourceVersion) with limit/continue, so a relist is
 * always paged and never holds more than one page.
 */
#include "informer/informer.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/strmap.h"
#include "common/time.h"
#include "informer/decode.h"
#include "informer/state.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_LIST_MAX_BODY (512u << 20) /* one list page */
#define KB_WATCH_MAX_FRAME (64u << 20)
#define KB_BACKOFF_INITIAL_MS 800
#define KB_BACKOFF_CAP_MS 30000
#define KB_BACKOFF_RESET_MS 120000
#define KB_LIST_RESTARTS 5 /* expired continue tokens in a row before backing off */

static const char *const kb_watch_err_names[KB_WATCH_ERR_COUNT] = {
    "gone", "throttled", "server_error", "connect", "malformed", "http", "decode", "state"};

const char *kb_watch_err_name(kb_watch_err_t e) {
    return (unsigned)e < KB_WATCH_ERR_COUNT ? kb_watch_err_names[e] : "unknown";
}

typedef struct kb_backoff {
    int64_t base_ms;       /* next delay before jitter */
    int64_t last_ns;       /* monotonic time of the last step */
} kb_backoff_t;

/* 0.8 s doubling to 30 s, each step jittered up to +100 %; after two quiet
 * minutes it starts again from 0.8 s (client-go ≤ v0.35 rule), and also after
 * a complete list or a watch that delivered something (the server is
 * healthy again; earlier trouble should not slow the next recovery). */
static int64_t kb_backoff_next(kb_backoff_t *b) {
    int64_t now = kb_now_mono_ns();
    if (b->base_ms == 0 || now - b->last_ns > KB_BACKOFF_RESET_MS * KB_NS_PER_MS)
        b->base_ms = KB_BACKOFF_INITIAL_MS;
    int64_t d = b->base_ms + (int64_t)(kb_random_unit() * (double)b->base_ms);
    b->base_ms = b->base_ms * 2 > KB_BACKOFF_CAP_MS ? KB_BACKOFF_CAP_MS : b->base_ms * 2;
    b->last_ns = now;
    return d;
}

typedef enum { KB_SRC_WATCH, KB_SRC_LIST } kb_src_t;

typedef struct kb_inf_staged {
    kb_event_t *ev;        /* NULL for a resume-point marker */
    uint64_t seq;
    int refl;              /* reflector whose resume point rv_after is, -1 for none */
    char rv_after[64];     /* "" = the resume point does not move */
} kb_inf_staged_t;

typedef struct kb_inf_undo {
    char *key;
    size_t key_len;
    uint64_t hash;
    kb_event_t *old;       /* the entry before the batch; NULL = absent */
} kb_inf_undo_t;

typedef struct kb_ack_slot {
    bool done;
    bool produced;         /* inside an open Kafka transaction (exactly-once): done once it commits */
    int refl;
    char rv_after[64];
} kb_ack_slot_t;

typedef struct kb_reflector {
    struct kb_informer *inf;
    char *ns;              /* NULL = cluster-wide */
    char *path;            /* "/api/v1/pods", "/apis/apps/v1/namespaces/x/deployments" */
    pthread_t thread;
    bool running;          /* thread started and not yet joined (main thread only) */
    char rv[64];           /* resume point: last list RV, event RV or bookmark RV */
    pthread_mutex_t rv_mtx;/* guards rv for readers on other threads */
    kb_backoff_t backoff;
    bool listed;           /* first list done */
    /* state of the watch in progress (reflector thread only) */
    kb_buf_t stream;       /* bytes not yet parsed */
    uint64_t frames;       /* frames received in this watch */
    kb_err_t watch_err;    /* why the stream was aborted from inside */
    kb_status_t status;    /* the ERROR event's Status */
    kb_strmap_t *seen;     /* during a list: keys listed */
} kb_reflector_t;

struct kb_informer {
    const kb_config_t *cfg;
    const kb_config_informer_t *conf;
    kb_apiclient_t *api;           /* borrowed */
    kb_resource_t *res;
    kb_transform_t *tf;
    kb_indexer_t *idx;
    kb_deltafifo_t **fifos;
    size_t n_shards;
    kb_reflector_t *refl;
    size_t n_refl;
    pthread_mutex_t ingest_mtx;    /* cache check + enqueue + cache update, as one step */
    kb_buf_t scratch;              /* decode output; ingest_mtx */
    uint64_t seq;                  /* ingest_mtx */
    pthread_t resync_thread;
    bool resync_running;
    _Atomic bool stop;
    _Atomic unsigned synced_refl;  /* reflectors done with their first list */
    _Atomic uint64_t st_events[KB_EV_TYPE_COUNT];
    _Atomic uint64_t st_errors[KB_WATCH_ERR_COUNT];
    _Atomic uint64_t st_frames, st_bookmarks, st_relists, st_lists, st_pages, st_gated, st_watches;
    _Atomic uint64_t st_rv_regressions;
    pthread_mutex_t err_mtx;
    char last_error[256];          /* err_mtx */

    /* The open ingestion batch (ingest_mtx): events decided, journalled and
     * applied to the cache, queued only after the batch commits. */
    kb_state_t *state;             /* NULL without state_dir */
    kb_inf_staged_t *out;          /* staged entries, in seq order */
    size_t n_out, cap_out;
    kb_inf_undo_t *undo;           /* cache entries to restore if the commit fails */
    size_t n_undo, cap_undo;
    uint64_t batch_seq0;           /* inf->seq when the batch began */
    bool batch_open, batch_failed;
    char batch_err[256];

    /* Acknowledgement tracking → checkpoint (ack_mtx, a leaf lock). */
    pthread_mutex_t ack_mtx;
    kb_ack_slot_t *ring;           /* in-flight seqs from ack_base, ring_len of them */
    size_t ring_cap, ring_head, ring_len;
    uint64_t ack_base;             /* seq of ring[ring_head] */
    uint64_t ack_seq;              /* everything <= ack_seq is acknowledged */
    char (*ack_rv)[64];            /* per reflector: resume RV at ack_seq */
    uint64_t saved_seq;            /* the checkpoint last written to state (checkpointer) */
    int64_t ack_time_ns;           /* realtime of the newest acknowledged event */
    pthread_t ckpt_thread;
    bool ckpt_running;
    _Atomic bool ckpt_stop;
    kb_inf_staged_t *replay;       /* the journal's unacknowledged tail, queued again at start */
    size_t n_replay, cap_replay;
    /* Deleted keys → the deletion's RV (ingest_mtx). The per-key gate needs
     * them: after a restart the server replays changes from the checkpoint,
     * and a change older than a delete we already delivered must not bring
     * the key back. Kept until the checkpoint has passed the deletion. */
    kb_strmap_t *graves;
    unsigned grave_prune_tick;
    /* Live subscribers (the HTTP replay API); sub_mtx, taken inside ingest_mtx. */
    pthread_mutex_t sub_mtx;
    struct { kb_informer_sub_fn fn; void *opaque; } subs[64];
    size_t n_subs;
};

static void kb_inf_error(kb_informer_t *inf, kb_watch_err_t kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void kb_inf_error(kb_informer_t *inf, kb_watch_err_t kind, const char *fmt, ...) {
    atomic_fetch_add(&inf->st_errors[kind], 1);
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&inf->err_mtx);
    vsnprintf(inf->last_error, sizeof(inf->last_error), fmt, ap);
    pthread_mutex_unlock(&inf->err_mtx);
    va_end(ap);
}

static void kb_refl_set_rv(kb_reflector_t *r, const char *rv, size_t len) {
    if (len >= sizeof(r->rv))
        len = sizeof(r->rv) - 1;
    pthread_mutex_lock(&r->rv_mtx);
    memcpy(r->rv, rv, len);
    r->rv[len] = '\0';
    pthread_mutex_unlock(&r->rv_mtx);
}

/* ---- ingestion -------------------------------------------------------- */

static bool kb_inf_ours(const kb_informer_t *inf, uint64_t hash) {
    int n = inf->cfg->sharding_replicas;
    return n <= 1 || hash % (uint64_t)n == (uint64_t)inf->cfg->sharding_index;
}

/* ---- acknowledgement tracking ---------------------------------------- */

/* A new in-flight seq (seqs arrive in order; a gap is counted as done). */
static void kb_ack_add(kb_informer_t *inf, uint64_t seq, int refl, const char *rv_after, bool done) {
    pthread_mutex_lock(&inf->ack_mtx);
    if (inf->ring_len == 0 && seq > inf->ack_base)
        inf->ack_base = seq; /* nothing in flight: start here */
    while (inf->ack_base + inf->ring_len <= seq) {
        if (inf->ring_len == inf->ring_cap) {
            size_t cap = inf->ring_cap ? inf->ring_cap * 2 : 1024;
            kb_ack_slot_t *ring = kb_calloc(cap, sizeof(*ring));
            for (size_t i = 0; i < inf->ring_len; i++)
                ring[i] = inf->ring[(inf->ring_head + i) % inf->ring_cap];
            free(inf->ring);
            inf->ring = ring;
            inf->ring_cap = cap;
            inf->ring_head = 0;
        }
        kb_ack_slot_t *slot = &inf->ring[(inf->ring_head + inf->ring_len) % inf->ring_cap];
        bool this = inf->ack_base + inf->ring_len == seq;
        slot->done = this ? done : true;
        slot->produced = false;
        slot->refl = this ? refl : -1;
        snprintf(slot->rv_after, sizeof(slot->rv_after), "%s", this && rv_after ? rv_after : "");
        inf->ring_len++;
    }
    pthread_mutex_unlock(&inf->ack_mtx);
}

/* Advance the watermark over the done prefix. Caller holds ack_mtx. */
static void kb_ack_advance(kb_informer_t *inf) {
    while (inf->ring_len && inf->ring[inf->ring_head].done) {
        kb_ack_slot_t *slot = &inf->ring[inf->ring_head];
        if (slot->refl >= 0 && slot->rv_after[0])
            memcpy(inf->ack_rv[slot->refl], slot->rv_after, sizeof(slot->rv_after));
        inf->ack_seq = inf->ack_base;
        inf->ack_base++;
        inf->ring_head = (inf->ring_head + 1) % inf->ring_cap;
        inf->ring_len--;
    }
}

void kb_informer_done(kb_informer_t *inf, uint64_t seq) {
    pthread_mutex_lock(&inf->ack_mtx);
    if (seq >= inf->ack_base && seq < inf->ack_base + inf->ring_len) {
        inf->ring[(inf->ring_head + (seq - inf->ack_base)) % inf->ring_cap].done = true;
        inf->ack_time_ns = kb_now_real_ns();
        kb_ack_advance(inf);
    }
    pthread_mutex_unlock(&inf->ack_mtx);
}

void kb_informer_mark_produced(kb_informer_t *inf, uint64_t seq) {
    pthread_mutex_lock(&inf->ack_mtx);
    if (seq >= inf->ack_base && seq < inf->ack_base + inf->ring_len)
        inf->ring[(inf->ring_head + (seq - inf->ack_base)) % inf->ring_cap].produced = true;
    pthread_mutex_unlock(&inf->ack_mtx);
}

/* The tagged resume points of rvs (one per reflector) as one string. */
static void kb_inf_format_rvs(const kb_informer_t *inf, char (*rvs)[64], char *out, size_t size);

void kb_informer_txn_checkpoint(kb_informer_t *inf, uint64_t *seq, char *rvs_out, size_t rvs_size, kb_buf_t *also) {
    char(*rvs)[64] = kb_calloc(inf->n_refl, sizeof(*rvs));
    pthread_mutex_lock(&inf->ack_mtx);
    memcpy(rvs, inf->ack_rv, inf->n_refl * sizeof(*rvs));
    uint64_t s = inf->ack_seq;
    size_t i = 0;
    for (; i < inf->ring_len; i++) {
        kb_ack_slot_t *slot = &inf->ring[(inf->ring_head + i) % inf->ring_cap];
        if (!slot->done && !slot->produced)
            break;
        if (slot->refl >= 0 && slot->rv_after[0])
            memcpy(rvs[slot->refl], slot->rv_after, sizeof(slot->rv_after));
        s = inf->ack_base + i;
    }
    /* Past the first gap, what is delivered or in the transaction anyway, as
     * "a-b" ranges: a restart must not deliver those again. */
    uint64_t run = 0;
    for (; i <= inf->ring_len; i++) {
        kb_ack_slot_t *slot = i < inf->ring_len ? &inf->ring[(inf->ring_head + i) % inf->ring_cap] : NULL;
        uint64_t cur = inf->ack_base + i;
        bool in = slot && (slot->done || slot->produced);
        if (in && !run)
            run = cur;
        if (!in && run) {
            kb_buf_appendf(also, "%s%llu-%llu", also->len ? "," : "", (unsigned long long)run,
                           (unsigned long long)(cur - 1));
            run = 0;
        }
    }
    pthread_mutex_unlock(&inf->ack_mtx);
    *seq = s;
    kb_inf_format_rvs(inf, rvs, rvs_out, rvs_size);
    free(rvs);
}

/* Is seq inside one of the "a-b,c-d" ranges? */
static bool kb_inf_in_ranges(const char *ranges, uint64_t seq) {
    for (const char *p = ranges; p && *p;) {
        char *end;
        uint64_t a = strtoull(p, &end, 10), b = a;
        if (*end == '-')
            b = strtoull(end + 1, &end, 10);
        if (seq >= a && seq <= b)
            return true;
        p = *end == ',' ? end + 1 : NULL;
    }
    return false;
}

/* A queued event that compaction made unnecessary counts as delivered. */
static void kb_inf_dropped(void *opaque, const kb_event_t *ev) {
    kb_informer_done(opaque, ev->seq);
}

/* The resume point as the journal and checkpoint store it: "rv" for a
 * cluster-wide reflector, "namespace/rv" for a per-namespace one. */
static void kb_inf_rv_tag(const kb_informer_t *inf, int refl, const char *rv, char *out, size_t size) {
    if (refl < 0 || !rv[0])
        snprintf(out, size, "%s", rv && refl >= 0 ? rv : "");
    else if (inf->refl[refl].ns)
        snprintf(out, size, "%s/%s", inf->refl[refl].ns, rv);
    else
        snprintf(out, size, "%s", rv);
}

/* The reverse: which reflector a tagged RV belongs to (-1: none of ours). */
static int kb_inf_rv_untag(const kb_informer_t *inf, const char *tagged, const char **rv) {
    const char *slash = strchr(tagged, '/');
    *rv = slash ? slash + 1 : tagged;
    if (!tagged[0])
        return -1;
    for (size_t i = 0; i < inf->n_refl; i++) {
        const char *ns = inf->refl[i].ns;
        if (!slash && !ns)
            return (int)i;
        if (slash && ns && strlen(ns) == (size_t)(slash - tagged) && !memcmp(ns, tagged, (size_t)(slash - tagged)))
            return (int)i;
    }
    return -1;
}

/* A cache entry with its object: itself, or (when the cache keeps only
 * identity because state_dir holds the objects) read back from state_dir.
 * Never returns an event without an object: if the stored one cannot be read,
 * a minimal object with the identity is made up. Returns a new reference. */
static kb_event_t *kb_inf_full(kb_informer_t *inf, kb_event_t *ev) {
    if (ev->obj_len || !inf->state)
        return kb_event_ref(ev);
    kb_event_t *full = kb_state_get(inf->state, ev->key, ev->key_len, inf->res);
    if (full && full->uid_len == ev->uid_len && !memcmp(full->uid, ev->uid, ev->uid_len)) {
        kb_event_t *typed = kb_event_retype(full, ev->type, ev->final_state_unknown);
        typed->seq = ev->seq;
        kb_event_unref(full);
        return typed;
    }
    kb_event_unref(full);
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
    KB_WARN("informer", "informer=%s key=%s: stored object unreadable; using its identity only", inf->conf->name,
            ev->key);
    return made;
}

/* A synthesized event (type/flag) for a cache entry, with the object. */
static kb_event_t *kb_inf_retype_full(kb_informer_t *inf, kb_event_t *cached, kb_event_type_t type, bool fsu) {
    kb_event_t *full = kb_inf_full(inf, cached);
    kb_event_t *ev = kb_event_retype(full, type, fsu);
    kb_event_unref(full);
    return ev;
}

/* ---- deleted keys --------------------------------------------------- */

/* Remember a delete (or forget one when the key comes back). Caller holds ingest_mtx. */
static void kb_inf_grave_note(kb_informer_t *inf, const kb_event_t *ev) {
    if (ev->type == KB_EV_DELETED && ev->rv_num)
        kb_strmap_put(inf->graves, ev->key, ev->key_len, ev->key_hash, (void *)(uintptr_t)ev->rv_num);
    else if (ev->type == KB_EV_ADDED || ev->type == KB_EV_MODIFIED)
        kb_strmap_del(inf->graves, ev->key, ev->key_len, ev->key_hash);
}

/* Forget deletes every reflector's checkpoint has passed: no resume can
 * replay anything older. Caller holds ingest_mtx. */
static void kb_inf_graves_prune(kb_informer_t *inf) {
    if (!kb_strmap_count(inf->graves))
        return;
    uint64_t floor = UINT64_MAX;
    pthread_mutex_lock(&inf->ack_mtx);
    for (size_t i = 0; i < inf->n_refl; i++) {
        uint64_t v = kb_rv_parse(inf->ack_rv[i], strlen(inf->ack_rv[i]));
        floor = v < floor ? v : floor;
    }
    pthread_mutex_unlock(&inf->ack_mtx);
    if (floor == 0 || floor == UINT64_MAX)
        return;
    kb_strmap_t *keep = kb_strmap_new(64);
    size_t pos = 0, len;
    const char *key;
    void *v;
    while (kb_strmap_next(inf->graves, &pos, &key, &len, &v))
        if ((uintptr_t)v > floor)
            kb_strmap_put(keep, key, len, kb_fnv1a64(key, len), v);
    kb_strmap_destroy(inf->graves);
    inf->graves = keep;
}

/* ---- ingestion batches ------------------------------------------------ */

static void kb_inf_batch_begin(kb_informer_t *inf) {
    KB_ASSERT(!inf->batch_open);
    inf->batch_open = true;
    inf->batch_failed = false;
    inf->batch_seq0 = inf->seq;
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
    snprintf(o->rv_after, sizeof(o->rv_after), "%s", rv_after ? rv_after : "");
}

/* Stage ev (consumes it): journal it and make it the cache's state of its key,
 * remembering the previous entry in case the batch cannot be committed.
 * refl/rv_after: the resume point this event completes (-1/"" if none).
 * Caller holds ingest_mtx inside an open batch. */
static void kb_inf_stage(kb_informer_t *inf, kb_event_t *ev, int refl, const char *rv_after) {
    kb_inf_batch_txn(inf);
    ev->seq = ++inf->seq;
    char tag[160];
    kb_inf_rv_tag(inf, refl, rv_after, tag, sizeof(tag));
    if (inf->state && !inf->batch_failed && kb_state_put_event(inf->state, ev, tag) != KB_OK)
        kb_inf_batch_fail(inf, "state_dir write");
    if (ev->type != KB_EV_SYNC) {
        if (inf->n_undo == inf->cap_undo) {
            inf->cap_undo = inf->cap_undo ? inf->cap_undo * 2 : 64;
            inf->undo = kb_realloc(inf->undo, inf->cap_undo * sizeof(*inf->undo));
        }
        kb_inf_undo_t *u = &inf->undo[inf->n_undo++];
        u->key = kb_strndup(ev->key, ev->key_len);
        u->key_len = ev->key_len;
        u->hash = ev->key_hash;
        u->old = NULL;
        if (ev->type == KB_EV_DELETED) {
            kb_indexer_delete(inf->idx, ev->key, ev->key_len, ev->key_hash, &u->old);
        } else if (inf->state) {
            kb_event_t *thin = kb_event_thin(ev); /* the object itself lives in state_dir */
            kb_indexer_put(inf->idx, thin, &u->old);
            kb_event_unref(thin);
        } else {
            kb_indexer_put(inf->idx, ev, &u->old);
        }
    }
    kb_inf_push_staged(inf, ev, ev->seq, refl, rv_after);
}

/* Stage a resume-point marker (a bookmark, a finished list). */
static void kb_inf_stage_mark(kb_informer_t *inf, int refl, const char *rv) {
    kb_inf_batch_txn(inf);
    uint64_t seq = ++inf->seq;
    char tag[160];
    kb_inf_rv_tag(inf, refl, rv, tag, sizeof(tag));
    if (inf->state && !inf->batch_failed && kb_state_put_mark(inf->state, seq, tag) != KB_OK)
        kb_inf_batch_fail(inf, "state_dir write");
    kb_inf_push_staged(inf, NULL, seq, refl, rv);
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
    if (inf->batch_failed) {
        if (inf->state)
            kb_state_abort(inf->state);
        for (size_t i = inf->n_undo; i-- > 0;) {
            kb_inf_undo_t *u = &inf->undo[i];
            if (u->old)
                kb_indexer_put(inf->idx, u->old, NULL);
            else
                kb_indexer_delete(inf->idx, u->key, u->key_len, u->hash, NULL);
        }
        for (size_t i = 0; i < inf->n_out; i++)
            kb_event_unref(inf->out[i].ev);
        inf->seq = inf->batch_seq0;
        static kb_ratelimit_t rl;
        uint64_t sup = 0;
        if (kb_ratelimit_allow(&rl, 10000, &sup))
            KB_ERROR("informer", "informer=%s %s; nothing of this batch was delivered; retrying (suppressed=%llu)",
                     inf->conf->name, inf->batch_err, (unsigned long long)sup);
        kb_inf_error(inf, KB_WATCH_ERR_STATE, "%s", inf->batch_err);
        err = KB_ERR_IO;
    } else {
        pthread_mutex_lock(&inf->sub_mtx);
        for (size_t i = 0; i < inf->n_out; i++) {
            if (!inf->out[i].ev)
                continue;
            kb_inf_grave_note(inf, inf->out[i].ev);
            for (size_t j = 0; j < inf->n_subs; j++)
                inf->subs[j].fn(inf->subs[j].opaque, inf->out[i].ev);
        }
        pthread_mutex_unlock(&inf->sub_mtx);
        if (++inf->grave_prune_tick % 256 == 0)
            kb_inf_graves_prune(inf);
        for (size_t i = 0; i < inf->n_out; i++) {
            kb_inf_staged_t *o = &inf->out[i];
            kb_ack_add(inf, o->seq, o->refl, o->rv_after, o->ev == NULL);
            if (!o->ev)
                continue;
            kb_event_type_t type = o->ev->type;
            kb_deltafifo_t *fifo = inf->fifos[o->ev->key_hash % inf->n_shards];
            if (err != KB_OK)
                kb_event_unref(o->ev); /* not queued: unacknowledged, so delivered after a restart */
            else if (kb_deltafifo_push(fifo, o->ev, -1) == KB_OK)
                atomic_fetch_add(&inf->st_events[type], 1);
            else
                err = KB_ERR_STOPPED; /* closed (the push released it) */
        }
        if (inf->n_out) {
            pthread_mutex_lock(&inf->ack_mtx);
            kb_ack_advance(inf);
            pthread_mutex_unlock(&inf->ack_mtx);
        }
    }
    for (size_t i = 0; i < inf->n_undo; i++) {
        free(inf->undo[i].key);
        kb_event_unref(inf->undo[i].old);
    }
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
        kb_inf_error(inf, KB_WATCH_ERR_DECODE, "object skipped: %s", why);
        if (kb_ratelimit_allow(&rl, 10000, NULL))
            KB_WARN("informer", "informer=%s object skipped: %s", inf->conf->name, why);
        kb_span_t rv;
        if (src == KB_SRC_WATCH && kb_decode_object_rv(obj, len, &rv))
            kb_refl_set_rv(r, obj + rv.off, rv.len);
        return KB_INGEST_BAD;
    }
    if (!kind[0] && m.kind.len)
        kb_resource_set_kind(inf->res, out->data + m.kind.off, m.kind.len);
    if (src == KB_SRC_WATCH) /* every accepted frame moves the resume point, whatever it leads to */
        kb_refl_set_rv(r, out->data + m.rv.off, m.rv.len);
    /* A watch event completes a resume point; list items do not (the list does, when it ends). */
    int refl = src == KB_SRC_WATCH ? kb_refl_index(r) : -1;
    char rv_after[64] = "";
    if (src == KB_SRC_WATCH)
        snprintf(rv_after, sizeof(rv_after), "%.*s", (int)m.rv.len, out->data + m.rv.off);

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
        kb_inf_error(inf, KB_WATCH_ERR_DECODE, "object skipped: key of %zu bytes is not a Kubernetes name", key_len);
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
    if (!kb_inf_ours(inf, hash))
        goto out;
    if (src == KB_SRC_LIST && r->seen)
        kb_strmap_put(r->seen, key, key_len, hash, (void *)1);

    kb_event_t *old = kb_indexer_get(inf->idx, key, key_len, hash);
    bool same_uid = old && old->uid_len == in.uid_len && !memcmp(old->uid, in.uid, in.uid_len);
    bool same_rv = old && old->rv_len == in.rv_len && !memcmp(old->rv, in.rv, in.rv_len);
    uint64_t new_rv = kb_rv_parse(in.rv, in.rv_len);

    uintptr_t grave = !old && src == KB_SRC_WATCH ? (uintptr_t)kb_strmap_get(inf->graves, key, key_len, hash) : 0;
    if (grave && new_rv && new_rv <= grave) {
        atomic_fetch_add(&inf->st_gated, 1);
        KB_DEBUG("informer", "informer=%s key=%s rv=%.*s is older than its delete at rv=%llu: skipped", inf->conf->name,
                 key, (int)in.rv_len, in.rv, (unsigned long long)grave);
        goto done;
    }
    if (src == KB_SRC_WATCH && old && same_uid && (same_rv || (new_rv && old->rv_num && new_rv < old->rv_num))) {
        atomic_fetch_add(&inf->st_gated, 1);
        KB_DEBUG("informer", "informer=%s key=%s rv=%.*s not newer than cached rv=%s: skipped", inf->conf->name,
                 key, (int)in.rv_len, in.rv, old->rv);
        goto done;
    }
    if (server_type == KB_WATCH_DELETED) {
        in.type = KB_EV_DELETED;
        kb_inf_stage(inf, kb_event_new(&in), refl, rv_after);
        goto done;
    }
    if (src == KB_SRC_LIST && same_uid && same_rv)
        goto done; /* unchanged since we last said anything about it */
    if (old && !same_uid) {
        /* The name was deleted and re-created while we did not watch. */
        kb_inf_stage(inf, kb_inf_retype_full(inf, old, KB_EV_DELETED, true), -1, "");
        kb_event_unref(old);
        old = NULL;
    }
    in.type = old ? KB_EV_MODIFIED : KB_EV_ADDED;
    kb_inf_stage(inf, kb_event_new(&in), refl, rv_after);
done:
    kb_event_unref(old);
out:
    return inf->batch_failed ? KB_INGEST_STOPPED : KB_INGEST_OK;
}

/* After a complete list: every cached key of this reflector's scope that the
 * list did not contain was deleted while we were not watching. */
static void kb_inf_delete_unseen(kb_reflector_t *r) {
    kb_informer_t *inf = r->inf;
    kb_event_list_t cached;
    kb_event_list_init(&cached);
    kb_indexer_list(inf->idx, r->ns, &cached);
    size_t n = 0;
    for (size_t i = 0; i < cached.n; i++) {
        kb_event_t *ev = cached.ev[i];
        if (kb_strmap_get(r->seen, ev->key, ev->key_len, ev->key_hash))
            continue;
        kb_inf_stage(inf, kb_inf_retype_full(inf, ev, KB_EV_DELETED, true), -1, "");
        n++;
    }
    kb_event_list_fini(&cached);
    if (n)
        KB_INFO("informer", "informer=%s relist found %zu deleted object(s); delivered as DELETED finalStateUnknown",
                inf->conf->name, n);
}

/* ---- requests --------------------------------------------------------- */

static void kb_refl_query_common(const kb_reflector_t *r, kb_buf_t *q) {
    const kb_config_informer_t *c = r->inf->conf;
    if (c->label_selector && c->label_selector[0])
        kb_api_query_add(q, "labelSelector", c->label_selector);
    if (c->field_selector && c->field_selector[0])
        kb_api_query_add(q, "fieldSelector", c->field_selector);
}

/* Turn a failed response into an error class, logging what the server said. */
static kb_err_t kb_refl_failed(kb_reflector_t *r, const char *what, const kb_api_response_t *resp,
                               const kb_buf_t *body, kb_status_t *st) {
    kb_informer_t *inf = r->inf;
    memset(st, 0, sizeof(*st));
    if (resp->err != KB_OK) {
        kb_inf_error(inf, KB_WATCH_ERR_CONNECT, "%s %s%s: %s", what, kb_apiclient_server(inf->api), r->path,
                     resp->errmsg);
        static kb_ratelimit_t rl;
        uint64_t sup = 0;
        if (kb_ratelimit_allow(&rl, 5000, &sup))
            KB_WARN("reflector", "informer=%s %s %s%s failed: %s (will retry; suppressed=%llu)", inf->conf->name,
                    what, kb_apiclient_server(inf->api), r->path, resp->errmsg, (unsigned long long)sup);
        return resp->err == KB_ERR_STOPPED ? KB_ERR_STOPPED : KB_ERR_CONNECT;
    }
    if (body && body->len)
        kb_decode_status(body->data, body->len, st);
    kb_err_t err = kb_api_status_err(resp->status);
    if (resp->status == 504 && !strcmp(st->cause_reason, "ResourceVersionTooLarge"))
        err = KB_ERR_TOO_LARGE_RV;
    kb_watch_err_t kind = err == KB_ERR_GONE          ? KB_WATCH_ERR_GONE
                          : err == KB_ERR_THROTTLED   ? KB_WATCH_ERR_THROTTLED
                          : err == KB_ERR_UNAVAILABLE ? KB_WATCH_ERR_SERVER
                                                      : KB_WATCH_ERR_HTTP;
    kb_inf_error(inf, kind, "%s: HTTP %ld %s %s", what, resp->status, st->reason, st->message);
    if (err == KB_ERR_GONE)
        KB_INFO("reflector", "informer=%s %s: HTTP 410 %s: %s", inf->conf->name, what, st->reason, st->message);
    else
        KB_WARN("reflector", "informer=%s %s %s: HTTP %ld %s: %s%s", inf->conf->name, what, r->path,
                resp->status, st->reason[0] ? st->reason : "", st->message,
                resp->retry_after >= 0 ? " (Retry-After given)" : "");
    return err;
}

/* One complete paged list, diffed against the cache. */
static kb_err_t kb_refl_list(kb_reflector_t *r, int *retry_after) {
    kb_informer_t *inf = r->inf;
    kb_buf_t q = KB_BUF_INIT, body = KB_BUF_INIT, path = KB_BUF_INIT, cont = KB_BUF_INIT;
    kb_err_t err = KB_OK;
    int restarts = 0;
    size_t items = 0, pages = 0;
    char list_rv[64] = "";
    *retry_after = -1;
restart:
    kb_strmap_destroy(r->seen);
    r->seen = kb_strmap_new(1024);
    kb_buf_reset(&cont);
    items = pages = 0;
    for (;;) {
        kb_buf_reset(&q);
        kb_buf_reset(&body);
        kb_buf_reset(&path);
        char limit[16];
        snprintf(limit, sizeof(limit), "%d", inf->conf->page_size);
        kb_api_query_add(&q, "limit", limit);
        if (cont.len)
            kb_api_query_add(&q, "continue", cont.data);
        kb_refl_query_common(r, &q);
        kb_buf_append_str(&path, r->path);
        kb_buf_append(&path, q.data, q.len);
        kb_api_response_t resp;
        kb_apiclient_get(inf->api, path.data, NULL, NULL, &body, KB_LIST_MAX_BODY, 120, &inf->stop, &resp);
        if (atomic_load(&inf->stop)) {
            err = KB_ERR_STOPPED;
            goto out;
        }
        if (resp.err == KB_ERR_TOOBIG) {
            kb_inf_error(inf, KB_WATCH_ERR_HTTP, "list page larger than %u bytes", KB_LIST_MAX_BODY);
            KB_ERROR("reflector", "informer=%s list page over %u MiB; lower page_size", inf->conf->name,
                     KB_LIST_MAX_BODY >> 20);
            err = KB_ERR_TOOBIG;
            goto out;
        }
        if (resp.err != KB_OK || resp.status != 200) {
            kb_status_t st;
            err = kb_refl_failed(r, cont.len ? "list (continue)" : "list", &resp, &body, &st);
            *retry_after = resp.retry_after >= 0 ? resp.retry_after : st.retry_after > 0 ? st.retry_after : -1;
            if (err == KB_ERR_GONE && cont.len && restarts++ < KB_LIST_RESTARTS) {
                KB_INFO("reflector", "informer=%s continue token expired after %zu page(s); restarting the list",
                        inf->conf->name, pages);
                err = KB_OK;
                goto restart;
            }
            goto out;
        }
        kb_list_page_t page;
        memset(&page, 0, sizeof(page));
        char why[256];
        if (kb_decode_list(body.data, body.len, &page, why, sizeof(why)) != KB_OK) {
            kb_inf_error(inf, KB_WATCH_ERR_MALFORMED, "list response: %s", why);
            KB_ERROR("reflector", "informer=%s list response does not parse: %s", inf->conf->name, why);
            kb_list_page_fini(&page);
            err = KB_ERR_PARSE;
            goto out;
        }
        if (page.kind.len > 4 && !memcmp(body.data + page.kind.off + page.kind.len - 4, "List", 4))
            kb_resource_set_kind(inf->res, body.data + page.kind.off, page.kind.len - 4);
        if (pages == 0) {
            size_t n = page.rv.len < sizeof(list_rv) ? page.rv.len : sizeof(list_rv) - 1;
            memcpy(list_rv, body.data + page.rv.off, n);
            list_rv[n] = '\0';
        }
        int64_t now = kb_now_mono_ns();
        pthread_mutex_lock(&inf->ingest_mtx);
        kb_inf_batch_begin(inf);
        for (size_t i = 0; i < page.n_items && !inf->batch_failed; i++)
            kb_inf_ingest(r, KB_SRC_LIST, KB_WATCH_ADDED, body.data + page.items[i].off, page.items[i].len, now,
                          false);
        kb_err_t berr = kb_inf_batch_end(inf);
        pthread_mutex_unlock(&inf->ingest_mtx);
        items += page.n_items;
        pages++;
        atomic_fetch_add(&inf->st_pages, 1);
        kb_buf_reset(&cont);
        if (page.cont.len)
            kb_buf_append(&cont, body.data + page.cont.off, page.cont.len);
        kb_list_page_fini(&page);
        if (berr != KB_OK) {
            err = berr;
            goto out;
        }
        if (!cont.len)
            break;
    }
    /* A list below where we were: the server's history went back (etcd restored). */
    uint64_t prev = kb_rv_parse(r->rv, strlen(r->rv)), now_rv = kb_rv_parse(list_rv, strlen(list_rv));
    if (prev && now_rv && now_rv < prev) {
        atomic_fetch_add(&inf->st_rv_regressions, 1);
        /* Forget the deletes we remember: their RVs belong to the old history. */
        pthread_mutex_lock(&inf->ingest_mtx);
        kb_strmap_destroy(inf->graves);
        inf->graves = kb_strmap_new(64);
        pthread_mutex_unlock(&inf->ingest_mtx);
        KB_WARN("reflector",
                "informer=%s resourceVersion went back from %s to %s (server restored from a backup?); "
                "delivering the difference by content, some keys' RVs will go down",
                inf->conf->name, r->rv, list_rv);
    }
    pthread_mutex_lock(&inf->ingest_mtx);
    kb_inf_batch_begin(inf);
    kb_inf_delete_unseen(r);
    kb_inf_stage_mark(inf, kb_refl_index(r), list_rv);
    err = kb_inf_batch_end(inf);
    pthread_mutex_unlock(&inf->ingest_mtx);
    if (err != KB_OK)
        goto out;
    kb_refl_set_rv(r, list_rv, strlen(list_rv));
    atomic_fetch_add(&inf->st_lists, 1);
    KB_INFO("reflector", "informer=%s%s%s listed items=%zu pages=%zu rv=%s", inf->conf->name, r->ns ? " namespace=" : "",
            r->ns ? r->ns : "", items, pages, list_rv);
out:
    kb_strmap_destroy(r->seen);
    r->seen = NULL;
    kb_buf_fini(&q);
    kb_buf_fini(&body);
    kb_buf_fini(&path);
    kb_buf_fini(&cont);
    return err;
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

/* Handle one watch frame. KB_INGEST_BAD if the bytes are not one valid
 * frame (nothing was counted or queued); KB_INGEST_STOPPED aborts the
 * stream (r->watch_err says why). */
static kb_ingest_t kb_refl_frame(kb_reflector_t *r, const char *frame, size_t len, int64_t read_ns) {
    kb_informer_t *inf = r->inf;
    kb_watch_frame_t f;
    char why[256];
    kb_ingest_t res;
    if (kb_refl_fast_frame(frame, len, &f.type, &f.object)) {
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
        r->watch_err = r->status.code == 410                                          ? KB_ERR_GONE
                       : r->status.code == 429                                        ? KB_ERR_THROTTLED
                       : !strcmp(r->status.cause_reason, "ResourceVersionTooLarge")   ? KB_ERR_TOO_LARGE_RV
                       : r->status.code >= 500                                        ? KB_ERR_UNAVAILABLE
                                                                                      : KB_ERR_HTTP;
        res = KB_INGEST_STOPPED;
        goto counted;
    case KB_WATCH_BOOKMARK: {
        kb_span_t rv;
        atomic_fetch_add(&inf->st_bookmarks, 1);
        if (kb_decode_object_rv(obj, f.object.len, &rv))
            kb_refl_set_rv(r, obj + rv.off, rv.len);
        res = KB_INGEST_OK;
        goto counted;
    }
    default:
        break;
    }
    res = kb_inf_ingest(r, KB_SRC_WATCH, f.type, obj, f.object.len, read_ns, false);
    if (res == KB_INGEST_BAD)
        res = KB_INGEST_OK; /* a well-formed frame whose object we cannot use: counted, skipped */
    else if (res == KB_INGEST_STOPPED)
        r->watch_err = KB_ERR_IO;
counted:
    r->frames++;
    atomic_fetch_add(&inf->st_frames, 1);
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
    kb_inf_error(r->inf, KB_WATCH_ERR_MALFORMED, "watch frame: %s", why);
    KB_WARN("reflector", "informer=%s malformed watch frame (%s): %.*s; re-watching from rv=%s", r->inf->conf->name,
            why, (int)(r->inf->conf->redact_fields.n ? 0 : len > 120 ? 120 : len), line, r->rv); /* redacted: no bytes */
    r->watch_err = KB_ERR_PARSE;
    return false;
}

/* curl write callback for watches: the server ends each frame with '\n'.
 * One call is one ingestion batch: its events are committed to state_dir
 * together and only then queued. */
static bool kb_refl_stream(void *opaque, const char *data, size_t len) {
    kb_reflector_t *r = opaque;
    kb_informer_t *inf = r->inf;
    int64_t now = kb_now_mono_ns();
    kb_buf_append(&r->stream, data, len);
    if (!memchr(data, '\n', len) && r->stream.len < KB_WATCH_MAX_FRAME)
        return true;
    size_t had = r->stream.len - len;
    char rv0[sizeof(r->rv)];
    memcpy(rv0, r->rv, sizeof(rv0));
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
    }
    if (ok && r->stream.len - pos >= KB_WATCH_MAX_FRAME) {
        kb_inf_error(inf, KB_WATCH_ERR_MALFORMED, "watch frame over %u bytes without a newline", KB_WATCH_MAX_FRAME);
        r->watch_err = KB_ERR_PARSE;
        ok = false;
    }
    kb_buf_consume(&r->stream, pos);
    return ok;
}

/* One watch request from r->rv. KB_OK when it ended normally. */
static kb_err_t kb_refl_watch(kb_reflector_t *r, int *retry_after) {
    kb_informer_t *inf = r->inf;
    kb_buf_t q = KB_BUF_INIT, path = KB_BUF_INIT, body = KB_BUF_INIT;
    char rv[64];
    pthread_mutex_lock(&r->rv_mtx);
    memcpy(rv, r->rv, sizeof(rv));
    pthread_mutex_unlock(&r->rv_mtx);
    int timeout = 300 + (int)(kb_random_unit() * 300.0);
    char ts[16];
    snprintf(ts, sizeof(ts), "%d", timeout);
    kb_api_query_add(&q, "watch", "true");
    kb_api_query_add(&q, "resourceVersion", rv);
    kb_api_query_add(&q, "allowWatchBookmarks", "true");
    kb_api_query_add(&q, "timeoutSeconds", ts);
    kb_refl_query_common(r, &q);
    kb_buf_append_str(&path, r->path);
    kb_buf_append(&path, q.data, q.len);

    kb_buf_reset(&r->stream);
    r->frames = 0;
    r->watch_err = KB_OK;
    memset(&r->status, 0, sizeof(r->status));
    atomic_fetch_add(&inf->st_watches, 1);
    KB_DEBUG("reflector", "informer=%s watch rv=%s timeout=%ds", inf->conf->name, rv, timeout);
    kb_api_response_t resp;
    kb_apiclient_get(inf->api, path.data, kb_refl_stream, r, &body, 1u << 20, timeout + 60, &inf->stop, &resp);
    *retry_after = resp.retry_after;
    kb_err_t err = KB_OK;
    if (atomic_load(&inf->stop)) {
        err = KB_ERR_STOPPED;
    } else if (resp.aborted) {
        err = r->watch_err;
        if (err == KB_ERR_GONE || err == KB_ERR_THROTTLED || err == KB_ERR_UNAVAILABLE || err == KB_ERR_HTTP ||
            err == KB_ERR_TOO_LARGE_RV) {
            kb_watch_err_t kind = err == KB_ERR_GONE        ? KB_WATCH_ERR_GONE
                                  : err == KB_ERR_THROTTLED ? KB_WATCH_ERR_THROTTLED
                                  : err == KB_ERR_HTTP      ? KB_WATCH_ERR_HTTP
                                                            : KB_WATCH_ERR_SERVER;
            kb_inf_error(inf, kind, "watch ERROR event: %d %s %s", r->status.code, r->status.reason,
                         r->status.message);
            KB_INFO("reflector", "informer=%s watch ERROR event code=%d reason=%s: %s", inf->conf->name,
                    r->status.code, r->status.reason, r->status.message);
            if (r->status.retry_after > 0)
                *retry_after = r->status.retry_after;
        }
    } else if (resp.err != KB_OK && resp.status == 200 && r->frames > 0) {
        /* A dropped connection mid-stream after progress: resume at once. */
        KB_INFO("reflector", "informer=%s watch connection lost after %llu frame(s) (%s); resuming from rv=%s",
                inf->conf->name, (unsigned long long)r->frames, resp.errmsg, r->rv);
        err = KB_OK;
    } else if (resp.err != KB_OK || resp.status != 200) {
        kb_status_t st;
        err = kb_refl_failed(r, "watch", &resp, &body, &st);
        if (*retry_after < 0 && st.retry_after > 0)
            *retry_after = st.retry_after;
        if (err == KB_ERR_CONNECT && resp.status == 200)
            err = KB_ERR_IO; /* broke before any frame */
    } else if (r->frames == 0) {
        err = KB_ERR_TIMEDOUT; /* ended with nothing at all: do not spin */
    }
    kb_buf_fini(&q);
    kb_buf_fini(&path);
    kb_buf_fini(&body);
    return err;
}

static void kb_refl_sleep(kb_reflector_t *r, int64_t ms) {
    kb_sleep_ms_interruptible(ms, &r->inf->stop);
}

/* The delay before retrying after a throttle or server error: Retry-After
 * when given (with up to 20 % jitter so replicas do not return together),
 * never less than the next backoff step. */
static int64_t kb_refl_retry_delay(kb_reflector_t *r, int retry_after) {
    int64_t b = kb_backoff_next(&r->backoff);
    if (retry_after > 0) {
        int64_t ra = (int64_t)retry_after * 1000;
        ra += (int64_t)(kb_random_unit() * 0.2 * (double)ra);
        return ra > b ? ra : b;
    }
    return b;
}

static void *kb_refl_main(void *arg) {
    kb_reflector_t *r = arg;
    kb_informer_t *inf = r->inf;
    char tname[32];
    snprintf(tname, sizeof(tname), "kb:refl/%s", inf->conf->name);
    kb_thread_set_name(tname);
    bool need_list = !r->rv[0]; /* a checkpoint to resume from: watch first */
    if (!need_list) {
        KB_INFO("reflector", "informer=%s%s%s resuming from the checkpoint at rv=%s", inf->conf->name,
                r->ns ? " namespace=" : "", r->ns ? r->ns : "", r->rv);
        r->listed = true;
        atomic_fetch_add(&inf->synced_refl, 1);
    }
    int malformed_in_row = 0;
    while (!atomic_load(&inf->stop)) {
        int retry_after = -1;
        if (need_list) {
            kb_err_t err = kb_refl_list(r, &retry_after);
            if (err == KB_ERR_STOPPED)
                break;
            if (err != KB_OK) {
                kb_refl_sleep(r, kb_refl_retry_delay(r, retry_after));
                continue;
            }
            r->backoff.base_ms = 0; /* the server answered in full: start backing off from scratch */
            if (r->listed)
                atomic_fetch_add(&inf->st_relists, 1);
            if (!r->listed) {
                r->listed = true;
                atomic_fetch_add(&inf->synced_refl, 1);
            }
            need_list = false;
        }
        kb_err_t err = kb_refl_watch(r, &retry_after);
        if (err != KB_ERR_PARSE)
            malformed_in_row = 0;
        if (r->frames > 0 && err != KB_ERR_PARSE)
            r->backoff.base_ms = 0; /* the watch made progress: the server is healthy */
        switch (err) {
        case KB_OK:
            break; /* a normal end: resume at once from the last RV */
        case KB_ERR_STOPPED:
            break;
        case KB_ERR_PARSE:
            /* Re-watch from the last good RV; back off only if it keeps happening. */
            if (malformed_in_row++ > 0)
                kb_refl_sleep(r, kb_backoff_next(&r->backoff));
            break;
        case KB_ERR_GONE:
        case KB_ERR_TOO_LARGE_RV:
        case KB_ERR_HTTP:
        case KB_ERR_UNAUTHORIZED:
        case KB_ERR_FORBIDDEN:
        case KB_ERR_NOTFOUND:
            if (err == KB_ERR_GONE)
                KB_INFO("reflector", "informer=%s history expired at rv=%s; relisting", inf->conf->name, r->rv);
            need_list = true;
            kb_refl_sleep(r, kb_backoff_next(&r->backoff));
            break;
        case KB_ERR_THROTTLED:
        case KB_ERR_UNAVAILABLE:
            kb_refl_sleep(r, kb_refl_retry_delay(r, retry_after));
            break;
        default: /* connection trouble or an empty watch: same RV after a backoff step */
            kb_refl_sleep(r, kb_backoff_next(&r->backoff));
            break;
        }
    }
    return NULL;
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
                kb_inf_stage(inf, kb_inf_retype_full(inf, cur, KB_EV_SYNC, false), -1, "");
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

static char *kb_inf_path(const kb_config_informer_t *c, const char *ns) {
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
    kb_event_t *thin = ev->obj_len ? kb_event_thin(ev) : kb_event_ref(ev);
    kb_indexer_put(inf->idx, thin, NULL);
    kb_event_unref(thin);
    if (!kb_resource_kind(inf->res)[0] && ev->obj_len) {
        kb_span_t k;
        if (kb_json_object_get(ev->obj, ev->obj_len, "kind", &k) && k.len > 2)
            kb_resource_set_kind(inf->res, ev->obj + k.off + 1, k.len - 2);
    }
    kb_event_unref(ev);
}

static void kb_inf_load_tail_cb(void *opaque, uint64_t seq, kb_event_t *ev, const char *rv_after) {
    kb_informer_t *inf = opaque;
    if (inf->n_replay == inf->cap_replay) {
        inf->cap_replay = inf->cap_replay ? inf->cap_replay * 2 : 256;
        inf->replay = kb_realloc(inf->replay, inf->cap_replay * sizeof(*inf->replay));
    }
    kb_inf_staged_t *o = &inf->replay[inf->n_replay++];
    const char *rv;
    if (ev)
        kb_inf_grave_note(inf, ev); /* deletes not yet checkpointed still gate replays */
    o->ev = ev;
    o->seq = seq;
    o->refl = kb_inf_rv_untag(inf, rv_after, &rv);
    snprintf(o->rv_after, sizeof(o->rv_after), "%s", o->refl >= 0 ? rv : "");
}

/* Set the checkpoint's resume points ("rv", or "ns/rv,ns/rv" per namespace)
 * as the acknowledged RVs and the reflectors' starting RVs. Before start only. */
static void kb_inf_set_resume_points(kb_informer_t *inf, const char *rvs) {
    char *list = kb_strdup(rvs), *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const char *rv;
        int i = kb_inf_rv_untag(inf, tok, &rv);
        if (i >= 0) {
            snprintf(inf->ack_rv[i], sizeof(inf->ack_rv[i]), "%s", rv);
            snprintf(inf->refl[i].rv, sizeof(inf->refl[i].rv), "%s", rv);
        }
    }
    free(list);
}

/* Open state_dir/<informer>[.replica-<i>-of-<n>], load the cache, the
 * checkpoint and the journal's unacknowledged tail. */
static kb_err_t kb_inf_open_state(kb_informer_t *inf, char *errstr, size_t errstr_size) {
    const kb_config_t *cfg = inf->cfg;
    char dir[4096], why[512];
    if (cfg->sharding_replicas > 1)
        snprintf(dir, sizeof(dir), "%s/%s.replica-%d-of-%d", cfg->state_dir, inf->conf->name, cfg->sharding_index,
                 cfg->sharding_replicas);
    else
        snprintf(dir, sizeof(dir), "%s/%s", cfg->state_dir, inf->conf->name);
    kb_state_opts_t so = {.dir = dir, .map_bytes = UINT64_C(64) << 30,
                          .journal_max_bytes = (uint64_t)cfg->journal_max_bytes,
                          .journal_max_age_s = cfg->journal_max_age};
    inf->state = kb_state_open(&so, why, sizeof(why));
    if (!inf->state) {
        snprintf(errstr, errstr_size, "%s: %s", cfg->path, why);
        return KB_ERR_IO;
    }
    kb_state_checkpoint_t cp;
    if (kb_state_read_checkpoint(inf->state, &cp) != KB_OK ||
        kb_state_load_index(inf->state, inf->res, true, kb_inf_load_index_cb, inf) != KB_OK ||
        kb_state_load_journal(inf->state, cp.seq, 0, inf->res, kb_inf_load_tail_cb, inf) != KB_OK) {
        snprintf(errstr, errstr_size, "%s: state_dir \"%s\": %s", cfg->path, dir, kb_state_error(inf->state));
        return KB_ERR_IO;
    }
    inf->seq = cp.last_seq;
    inf->ack_seq = inf->saved_seq = cp.seq;
    inf->ack_base = cp.seq + 1;
    kb_inf_set_resume_points(inf, cp.rv);
    KB_INFO("informer", "informer=%s state_dir=%s: %zu cached object(s), checkpoint seq=%llu rv=%s, %zu change(s) to "
            "deliver again", inf->conf->name, dir, kb_indexer_count(inf->idx), (unsigned long long)cp.seq,
            cp.rv[0] ? cp.rv : "(none: list first)", inf->n_replay);
    return KB_OK;
}

static void kb_inf_format_rvs(const kb_informer_t *inf, char (*rvs)[64], char *out, size_t size) {
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < inf->n_refl; i++) {
        char tag[160];
        if (!rvs[i][0])
            continue;
        kb_inf_rv_tag(inf, (int)i, rvs[i], tag, sizeof(tag));
        n += (size_t)snprintf(out + n, n < size ? size - n : 0, "%s%s", n ? "," : "", tag);
    }
}

/* Write the checkpoint if it moved. Thread: checkpointer, or main at shutdown. */
static void kb_inf_write_checkpoint(kb_informer_t *inf) {
    if (!inf->state)
        return;
    char rvs[1024] = "";
    pthread_mutex_lock(&inf->ack_mtx);
    uint64_t seq = inf->ack_seq;
    kb_inf_format_rvs(inf, inf->ack_rv, rvs, sizeof(rvs));
    pthread_mutex_unlock(&inf->ack_mtx);
    if (seq == inf->saved_seq)
        return;
    if (kb_state_set_checkpoint(inf->state, seq, rvs) == KB_OK) {
        inf->saved_seq = seq;
    } else {
        static kb_ratelimit_t rl;
        if (kb_ratelimit_allow(&rl, 10000, NULL))
            KB_ERROR("informer", "informer=%s cannot write the checkpoint: %s", inf->conf->name,
                     kb_state_error(inf->state));
    }
}

static void *kb_ckpt_main(void *arg) {
    kb_informer_t *inf = arg;
    char tname[32];
    snprintf(tname, sizeof(tname), "kb:ckpt/%s", inf->conf->name);
    kb_thread_set_name(tname);
    while (!kb_sleep_ms_interruptible(200, &inf->ckpt_stop))
        kb_inf_write_checkpoint(inf);
    return NULL;
}

kb_err_t kb_informer_apply_checkpoint(kb_informer_t *inf, uint64_t seq, const char *rvs, const char *also) {
    if (seq <= inf->ack_seq && (!also || !*also))
        return KB_OK;
    if (seq > inf->seq) {
        KB_WARN("informer", "informer=%s the sink's checkpoint (seq %llu) is ahead of this state_dir (seq %llu); "
                "ignoring it", inf->conf->name, (unsigned long long)seq, (unsigned long long)inf->seq);
        return KB_ERR_INVAL;
    }
    size_t dropped = 0, keep = 0;
    for (size_t i = 0; i < inf->n_replay; i++) {
        kb_inf_staged_t *o = &inf->replay[i];
        if (o->seq <= seq || (o->ev && kb_inf_in_ranges(also, o->seq))) {
            kb_event_unref(o->ev);
            dropped++;
        } else {
            inf->replay[keep++] = *o;
        }
    }
    inf->n_replay = keep;
    kb_inf_set_resume_points(inf, rvs);
    if (seq > inf->ack_seq) {
        inf->ack_seq = seq;
        inf->ack_base = seq + 1;
    }
    KB_INFO("informer", "informer=%s the sink's committed checkpoint is seq=%llu rv=%s: %zu change(s) of the journal "
            "were already committed there and are not delivered again", inf->conf->name, (unsigned long long)seq, rvs,
            dropped);
    kb_inf_write_checkpoint(inf);
    return KB_OK;
}

void kb_informer_save_checkpoint(kb_informer_t *inf) {
    kb_inf_write_checkpoint(inf);
}

void kb_informer_close_state(kb_informer_t *inf) {
    atomic_store(&inf->ckpt_stop, true);
    if (inf->ckpt_running)
        pthread_join(inf->ckpt_thread, NULL);
    inf->ckpt_running = false;
    kb_inf_write_checkpoint(inf);
    kb_state_close(inf->state);
    inf->state = NULL;
}

kb_informer_t *kb_informer_new(const kb_config_t *cfg, const kb_config_informer_t *conf, kb_apiclient_t *api,
                               char *errstr, size_t errstr_size) {
    char why[256];
    kb_transform_t *tf = kb_transform_new_keep((const char *const *)conf->drop_fields.v, conf->drop_fields.n,
                                               (const char *const *)conf->redact_fields.v, conf->redact_fields.n,
                                               (const char *const *)conf->keep_fields.v, conf->keep_fields.n, why,
                                               sizeof(why));
    if (!tf) {
        snprintf(errstr, errstr_size, "%s:%d: informers.%s: %s", cfg->path, conf->line, conf->name, why);
        return NULL;
    }
    kb_informer_t *inf = kb_calloc(1, sizeof(*inf));
    inf->cfg = cfg;
    inf->conf = conf;
    inf->api = api;
    inf->tf = tf;
    inf->res = kb_resource_new(cfg->cluster.name, conf->name, conf->group, conf->version, conf->resource);
    inf->idx = kb_indexer_new(16);
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
        r->path = kb_inf_path(conf, r->ns);
        pthread_mutex_init(&r->rv_mtx, NULL);
    }
    pthread_mutex_init(&inf->ack_mtx, NULL);
    pthread_mutex_init(&inf->sub_mtx, NULL);
    inf->graves = kb_strmap_new(64);
    inf->ack_rv = kb_calloc(inf->n_refl, sizeof(*inf->ack_rv));
    inf->ack_base = 1;
    for (size_t i = 0; i < inf->n_shards; i++)
        kb_deltafifo_set_drop(inf->fifos[i], kb_inf_dropped, inf);
    if (conf->secrets_unredacted)
        KB_WARN("informer", "informer=%s watches secrets with redact_fields = []: Secret values are sent in clear",
                conf->name);
    if (cfg->state_dir && cfg->state_dir[0] && kb_inf_open_state(inf, errstr, errstr_size) != KB_OK) {
        kb_informer_destroy(inf);
        return NULL;
    }
    return inf;
}

kb_err_t kb_informer_start(kb_informer_t *inf) {
    if (inf->n_replay) {
        KB_INFO("informer", "informer=%s delivering %zu unacknowledged change(s) from the journal again",
                inf->conf->name, inf->n_replay);
        for (size_t i = 0; i < inf->n_replay; i++) {
            kb_inf_staged_t *o = &inf->replay[i];
            kb_ack_add(inf, o->seq, o->refl, o->rv_after, o->ev == NULL);
            if (o->ev) {
                kb_event_type_t type = o->ev->type; /* the push hands the event to a worker */
                if (kb_deltafifo_push(inf->fifos[o->ev->key_hash % inf->n_shards], o->ev, -1) == KB_OK)
                    atomic_fetch_add(&inf->st_events[type], 1);
            }
            o->ev = NULL;
        }
        pthread_mutex_lock(&inf->ack_mtx);
        kb_ack_advance(inf);
        pthread_mutex_unlock(&inf->ack_mtx);
        inf->n_replay = 0;
    }
    if (inf->state) {
        if (pthread_create(&inf->ckpt_thread, NULL, kb_ckpt_main, inf) != 0)
            KB_FATAL("cannot start the checkpoint thread");
        inf->ckpt_running = true;
    }
    for (size_t i = 0; i < inf->n_refl; i++) {
        if (pthread_create(&inf->refl[i].thread, NULL, kb_refl_main, &inf->refl[i]) != 0)
            KB_FATAL("cannot start a reflector thread");
        inf->refl[i].running = true;
    }
    if (inf->conf->resync_seconds > 0) {
        if (pthread_create(&inf->resync_thread, NULL, kb_resync_main, inf) != 0)
            KB_FATAL("cannot start the resync thread");
        inf->resync_running = true;
    }
    KB_INFO("informer", "informer=%s started: %s%s reflectors=%zu shards=%zu compaction=%s", inf->conf->name,
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
}

void kb_informer_destroy(kb_informer_t *inf) {
    if (!inf)
        return;
    kb_informer_close_state(inf);
    for (size_t i = 0; i < inf->n_replay; i++)
        kb_event_unref(inf->replay[i].ev);
    free(inf->replay);
    kb_strmap_destroy(inf->graves);
    free(inf->ring);
    free(inf->ack_rv);
    free(inf->out);
    free(inf->undo);
    pthread_mutex_destroy(&inf->ack_mtx);
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
    kb_indexer_destroy(inf->idx);
    kb_transform_free(inf->tf);
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
    st->lists = atomic_load(&inf->st_lists);
    st->list_pages = atomic_load(&inf->st_pages);
    st->gated = atomic_load(&inf->st_gated);
    st->watches = atomic_load(&inf->st_watches);
    st->rv_regressions = atomic_load(&inf->st_rv_regressions);
    st->persistent = inf->state != NULL;
    pthread_mutex_lock(&inf->ack_mtx);
    st->ack_seq = inf->ack_seq;
    st->seq = inf->ack_base + inf->ring_len - 1;
    st->ack_time_ns = inf->ack_time_ns;
    memcpy(st->checkpoint_rv, inf->ack_rv[0], sizeof(st->checkpoint_rv));
    pthread_mutex_unlock(&inf->ack_mtx);
    st->objects = kb_indexer_count(inf->idx);
    st->cache_bytes = kb_indexer_bytes(inf->idx);
    for (size_t i = 0; i < inf->n_shards; i++) {
        kb_deltafifo_stats_t fs;
        kb_deltafifo_stats(inf->fifos[i], &fs);
        st->pending_deltas += fs.deltas;
        st->pending_bytes += fs.bytes;
    }
    st->synced = kb_informer_synced(inf);
    pthread_mutex_lock(&inf->refl[0].rv_mtx);
    memcpy(st->last_rv, inf->refl[0].rv, sizeof(st->last_rv));
    pthread_mutex_unlock(&inf->refl[0].rv_mtx);
    pthread_mutex_lock(&inf->err_mtx);
    memcpy(st->last_error, inf->last_error, sizeof(st->last_error));
    pthread_mutex_unlock(&inf->err_mtx);
}

/* ---- additions for the Kubernetes API surface (bridge/kapi.c) ---------- */

void kb_informer_cut(kb_informer_t *inf, const char *ns, kb_event_list_t *out, char *rv, size_t rv_size,
                     uint64_t *seq) {
    pthread_mutex_lock(&inf->ingest_mtx);
    if (seq)
        *seq = inf->seq;
    size_t first = out ? out->n : 0;
    if (out)
        kb_indexer_list(inf->idx, ns, out);
    for (size_t i = first; out && i < out->n; i++) {
        if (out->ev[i]->obj_len)
            continue;
        kb_event_t *full = kb_inf_full(inf, out->ev[i]);
        kb_event_unref(out->ev[i]);
        out->ev[i] = full;
    }
    /* The newest resume point over the reflectors (one RV space per cluster). */
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
    pthread_mutex_unlock(&inf->ingest_mtx);
}

kb_event_t *kb_informer_get(kb_informer_t *inf, const char *key, size_t len) {
    kb_event_t *ev = kb_indexer_get(inf->idx, key, len, kb_fnv1a64(key, len));
    if (!ev || ev->obj_len)
        return ev;
    kb_event_t *full = kb_inf_full(inf, ev);
    kb_event_unref(ev);
    return full;
}
