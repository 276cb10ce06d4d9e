/* informer/ledger.c — accepted → delivered → acknowledged → checkpointed
 * (see ledger.h).
 *
 * Design note.
 *
 * The in-flight window is a ring of slots from base (the oldest seq not yet
 * past the watermark) on; seqs arrive in increasing order, so a slot is
 * appended per tracked seq and a skipped seq (a batch that did not commit
 * reused nothing: rewind only happens before anything was tracked) is filled
 * as done. The watermark moves over the done prefix; each slot that passes
 * it carries the resume point its change completed, so "acknowledged up to
 * seq" and "resume at RV" always describe the same cut.
 *
 * Why the gate is by RV across uids: Kubernetes RVs are etcd revisions, one
 * counter for every object of a resource, so the order of a key's changes is
 * the order of their RVs even when the name was deleted and created again.
 * Gating on "same uid and not newer" let a resumed watch replay the old
 * incarnation's changes over the new one (DELETED of the live object, then
 * the dead one back). Graves keep the RV of a delete until the checkpoint has
 * passed it: no resume can then replay anything older.
 *
 * Epochs: a restore is a new history. "Not newer than the grave" holds within
 * one history of the server's; after an etcd restore the server's RVs start
 * again below the ones kbridge saw, and a grave of the old history would take
 * the new history's object of that name, created at a lower RV, for a replay —
 * and the drift audit, asking the same grave, would agree. So no grave may
 * stand above the resume point of its scope (the watch brings only RVs above
 * it; in one history every delete is at or below it, so the rule changes
 * nothing there). Four places keep it: the relist that sees the RV go back
 * (informer.c) forgets every grave, and its inferred DELETEs — which carry
 * the old history's last RV of the object — leave graves at the list's RV at
 * most (accept's ceiling); every complete list caps its scope's graves at its
 * RV (kb_ledger_cap_graves: a consistent list comes after every delete of its
 * history kbridge saw, so only another history's graves are above it — this
 * holds where the regression is not visible, say a scope that lists with no
 * resume point after a changed definition); at start-up the journal's tail
 * graves are capped at the scope's resume point, so a restart after a restore
 * does not bring the old history's deletes back as a gate (the epoch persists
 * as the journal's resume points: nothing else needs storing); and the audit
 * (audit.c) takes a grave its list contradicts for one of another history and
 * drops it before its repair meets the gate.
 *
 * Why redeliveries are marked: after a crash the journal's tail is queued
 * again, and some of it may already be at a sink. LATEST compaction would let
 * a re-queued ADDED and the watch's DELETED annihilate ("never delivered, now
 * gone") — a consumer that had the ADDED would never hear of the delete.
 *
 * The exactly-once cut is JSON made and read with jansson: a resume point may
 * hold any byte a server puts in an RV.
 */
#include "informer/ledger.h"

#include "common/alloc.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/strmap.h"
#include "common/time.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kb_slot {
    bool done;       /* nothing more to wait for */
    bool routed;     /* the bridge handed it to its sinks: its waiting bits say which still owe an ack */
    bool produced;   /* inside an open transaction (exactly-once) */
    int scope;       /* the resume point this change completes, -1 none */
    uint32_t bytes;  /* of its event (the bound on what the window holds) */
    char *rv_after;  /* its RV (malloc'd), NULL none */
} kb_slot_t;

/* A sink this informer's routes deliver to. Its watermark is the seq up to
 * which it acknowledged everything routed to it; a restart delivers the
 * journal's tail again only to sinks whose watermark is below a change. */
typedef struct kb_lsink {
    char *name;
    uint64_t start_wm;  /* its watermark when this process started (wants) */
    uint64_t saved_wm;  /* the watermark last written (checkpointer) */
    bool gone;          /* removed by a reload: it holds nothing back */
} kb_lsink_t;

typedef struct kb_tail_entry {
    kb_event_t *ev;  /* NULL for a resume-point marker */
    uint64_t seq;
    int scope;
    char *rv_after;
} kb_tail_entry_t;

struct kb_ledger {
    kb_state_t *state;          /* borrowed; NULL without state_dir */
    char **scope_ns;            /* n_scopes namespaces, NULL entries = cluster-wide */
    size_t n_scopes;
    /* The newest decimal resume point tracked: written under l->mtx, read
     * without it (an HA worker asks before every change it delivers). */
    _Atomic uint64_t tracked_rv;

    /* ingest lock (the caller's) */
    uint64_t seq;               /* last seq handed out */
    kb_strmap_t *graves;        /* key → deletion RV (uintptr_t) */
    unsigned prune_tick;

    /* start-up only */
    kb_tail_entry_t *tail;
    size_t n_tail, cap_tail;
    char (*start_rv)[KB_RV_MAX]; /* per scope: where the checkpoint resumes */
    kb_strmap_t *last_rvs;       /* every scope the journal names, ours or not ("" or "ns") → its newest decimal
                                  * resume point (uintptr_t), while loading */
    uint64_t known_rv;           /* the highest of those (kb_ledger_known_rv) */

    pthread_mutex_t mtx;        /* guards what follows; a leaf lock */
    kb_slot_t *ring;
    size_t ring_cap, ring_head, ring_len;
    /* Which sinks still owe an acknowledgement of each slot: words 64-bit
     * words per ring position (ring_cap × words), bit i = sink i of the sink
     * table. One word covers the usual handful of sinks; the table growing
     * past words × 64 widens every slot by a word (kb_waits_widen). */
    uint64_t *waits;
    size_t words;
    uint64_t base;              /* seq of ring[ring_head] */
    uint64_t acked;             /* every seq <= acked is acknowledged */
    char (*ack_rv)[KB_RV_MAX];  /* per scope: resume point at acked */
    int64_t ack_time_ns;
    uint64_t saved;             /* the checkpoint in state_dir (checkpointer only) */
    kb_lsink_t *sinks;          /* the sink table; an index never changes once given */
    size_t n_sinks, cap_sinks;
    uint64_t loaded;            /* the checkpoint this process started from */
    pthread_cond_t room_cv;     /* signalled when the watermark moves (kb_ledger_wait_room) */
    size_t max_slots;           /* bounds of the window; 0 = none */
    uint64_t max_bytes;
    uint64_t window_bytes;      /* bytes of the events in the window */
};

kb_ledger_t *kb_ledger_new(const char *const *scope_ns, size_t n_scopes, kb_state_t *state) {
    KB_ASSERT(n_scopes > 0);
    kb_ledger_t *l = kb_calloc(1, sizeof(*l));
    atomic_init(&l->tracked_rv, 0);
    l->state = state;
    l->n_scopes = n_scopes;
    l->scope_ns = kb_calloc(n_scopes, sizeof(*l->scope_ns));
    for (size_t i = 0; i < n_scopes; i++)
        l->scope_ns[i] = scope_ns && scope_ns[i] ? kb_strdup(scope_ns[i]) : NULL;
    l->graves = kb_strmap_new(64);
    l->start_rv = kb_calloc(n_scopes, sizeof(*l->start_rv));
    l->ack_rv = kb_calloc(n_scopes, sizeof(*l->ack_rv));
    l->base = 1;
    l->words = 1;
    pthread_mutex_init(&l->mtx, NULL);
    kb_cond_init_mono(&l->room_cv);
    return l;
}

static void kb_tail_clear(kb_ledger_t *l) {
    for (size_t i = 0; i < l->n_tail; i++) {
        kb_event_unref(l->tail[i].ev);
        free(l->tail[i].rv_after);
    }
    l->n_tail = 0;
}

void kb_ledger_destroy(kb_ledger_t *l) {
    if (!l)
        return;
    kb_tail_clear(l);
    free(l->tail);
    for (size_t i = 0; i < l->ring_len; i++)
        free(l->ring[(l->ring_head + i) % l->ring_cap].rv_after);
    free(l->ring);
    free(l->waits);
    for (size_t i = 0; i < l->n_scopes; i++)
        free(l->scope_ns[i]);
    free(l->scope_ns);
    for (size_t i = 0; i < l->n_sinks; i++)
        free(l->sinks[i].name);
    free(l->sinks);
    free(l->start_rv);
    free(l->ack_rv);
    kb_strmap_destroy(l->graves);
    pthread_cond_destroy(&l->room_cv);
    pthread_mutex_destroy(&l->mtx);
    free(l);
}

/* ---- resume points: "rv" or "namespace/rv", joined with ',' ----------------- */

/* Which scope a stored resume point belongs to (-1: none of ours); *rv → its RV. */
static int kb_scope_of(const kb_ledger_t *l, const char *tagged, size_t len, const char **rv, size_t *rv_len) {
    const char *slash = memchr(tagged, '/', len);
    *rv = slash ? slash + 1 : tagged;
    *rv_len = len - (size_t)(*rv - tagged);
    if (!len)
        return -1;
    for (size_t i = 0; i < l->n_scopes; i++) {
        const char *ns = l->scope_ns[i];
        if (!slash && !ns)
            return (int)i;
        if (slash && ns && strlen(ns) == (size_t)(slash - tagged) && !memcmp(ns, tagged, (size_t)(slash - tagged)))
            return (int)i;
    }
    return -1;
}

void kb_ledger_tag(const kb_ledger_t *l, int scope, const char *rv, kb_buf_t *out) {
    if (scope < 0 || !rv || !rv[0])
        return;
    if (l->scope_ns[scope])
        kb_buf_appendf(out, "%s/", l->scope_ns[scope]);
    kb_buf_append_str(out, rv);
}

static void kb_format_rvs(const kb_ledger_t *l, char (*rvs)[KB_RV_MAX], kb_buf_t *out) {
    for (size_t i = 0; i < l->n_scopes; i++) {
        if (!rvs[i][0])
            continue;
        if (out->len)
            kb_buf_append_char(out, ',');
        kb_ledger_tag(l, (int)i, rvs[i], out);
    }
}

/* Set rvs[scope] from each resume point of a stored list. */
static void kb_parse_rvs(const kb_ledger_t *l, const char *list, char (*rvs)[KB_RV_MAX]) {
    for (const char *p = list; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *rv;
        size_t rv_len;
        int i = kb_scope_of(l, p, len, &rv, &rv_len);
        if (i >= 0 && rv_len < KB_RV_MAX) {
            memcpy(rvs[i], rv, rv_len);
            rvs[i][rv_len] = '\0';
        }
        p = comma ? comma + 1 : NULL;
    }
}

/* ---- start-up ------------------------------------------------------------ */

/* Note each resume point of a stored list ("rv" or "ns/rv", joined with ','),
 * whatever scope it names, as that scope's newest (kb_ledger_known_rv). */
static void kb_note_rvs(kb_ledger_t *l, const char *list) {
    for (const char *p = list; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *slash = memchr(p, '/', len), *rv = slash ? slash + 1 : p;
        size_t ns_len = slash ? (size_t)(slash - p) : 0;
        uint64_t n = kb_rv_parse(rv, len - (size_t)(rv - p));
        if (n)
            kb_strmap_put(l->last_rvs, p, ns_len, kb_fnv1a64(p, ns_len), (void *)(uintptr_t)n);
        p = comma ? comma + 1 : NULL;
    }
}

static void kb_tail_cb(void *opaque, uint64_t seq, kb_event_t *ev, const char *rv_after) {
    kb_ledger_t *l = opaque;
    if (l->n_tail == l->cap_tail) {
        l->cap_tail = l->cap_tail ? l->cap_tail * 2 : 256;
        l->tail = kb_realloc(l->tail, l->cap_tail * sizeof(*l->tail));
    }
    kb_tail_entry_t *t = &l->tail[l->n_tail++];
    const char *rv;
    size_t rv_len;
    t->ev = ev;
    t->seq = seq;
    t->scope = kb_scope_of(l, rv_after, strlen(rv_after), &rv, &rv_len);
    kb_note_rvs(l, rv_after);
    t->rv_after = t->scope >= 0 && rv_len ? kb_strndup(rv, rv_len) : NULL;
    if (t->rv_after) /* the journal is ahead of the checkpoint: resume where it ends */
        snprintf(l->start_rv[t->scope], KB_RV_MAX, "%s", t->rv_after);
    if (ev) {
        ev->redelivery = true; /* not yet shared: the mark is set before anyone sees it */
        kb_ledger_accept(l, ev, 0); /* deletes not yet checkpointed still gate replays */
    }
}

/* Which scope key belongs to (-1: none of ours). */
static int kb_key_scope(const kb_ledger_t *l, const char *key, size_t len) {
    const char *slash = memchr(key, '/', len);
    for (size_t i = 0; i < l->n_scopes; i++) {
        const char *ns = l->scope_ns[i];
        if (!ns || (slash && strlen(ns) == (size_t)(slash - key) && !memcmp(ns, key, (size_t)(slash - key))))
            return (int)i;
    }
    return -1;
}

/* Lower to ceiling[scope of the key] every grave above it (a ceiling of 0
 * leaves the scope's graves as they are). */
static void kb_graves_cap(kb_ledger_t *l, const uint64_t *ceiling) {
    kb_strmap_t *capped = kb_strmap_new(64);
    size_t pos = 0, len;
    const char *key;
    void *v;
    while (kb_strmap_next(l->graves, &pos, &key, &len, &v)) {
        int scope = kb_key_scope(l, key, len);
        if (scope >= 0 && ceiling[scope] && (uintptr_t)v > ceiling[scope])
            v = (void *)(uintptr_t)ceiling[scope];
        kb_strmap_put(capped, key, len, kb_fnv1a64(key, len), v);
    }
    kb_strmap_destroy(l->graves);
    l->graves = capped;
}

/* No grave stands above where its scope resumes (the design note's epochs):
 * the watch brings only RVs above that point, and in one history every delete
 * the journal holds is at or below it. A tail grave higher than that is a
 * delete of a history the server went back from (etcd restored), journalled
 * before the relist that saw the restore; left as it is, it would refuse the
 * new history's objects of that name. A scope without a resume point lists
 * first, and its list caps them (kb_ledger_cap_graves). */
static void kb_graves_cap_at_resume(kb_ledger_t *l) {
    uint64_t *ceiling = kb_calloc(l->n_scopes, sizeof(*ceiling));
    for (size_t i = 0; i < l->n_scopes; i++)
        ceiling[i] = kb_rv_parse(l->start_rv[i], strlen(l->start_rv[i]));
    kb_graves_cap(l, ceiling);
    free(ceiling);
}

void kb_ledger_cap_graves(kb_ledger_t *l, int scope, uint64_t rv) {
    if (scope < 0 || !rv || !kb_strmap_count(l->graves))
        return;
    uint64_t *ceiling = kb_calloc(l->n_scopes, sizeof(*ceiling));
    ceiling[scope] = rv;
    kb_graves_cap(l, ceiling);
    free(ceiling);
}

/* known_rv: the highest of every scope's newest resume point. */
static void kb_known_rv_settle(kb_ledger_t *l) {
    size_t pos = 0, len;
    const char *ns;
    void *v;
    while (kb_strmap_next(l->last_rvs, &pos, &ns, &len, &v))
        l->known_rv = (uintptr_t)v > l->known_rv ? (uintptr_t)v : l->known_rv;
    kb_strmap_destroy(l->last_rvs);
    l->last_rvs = NULL;
}

kb_err_t kb_ledger_load(kb_ledger_t *l, kb_resource_t *res, char *errstr, size_t errstr_size) {
    if (!l->state)
        return KB_OK;
    kb_state_checkpoint_t cp;
    kb_err_t err = kb_state_read_checkpoint(l->state, &cp);
    l->last_rvs = kb_strmap_new(16);
    if (err == KB_OK) {
        kb_parse_rvs(l, cp.rv, l->start_rv); /* the tail's resume points, read next, are newer */
        kb_note_rvs(l, cp.rv);
    }
    if (err != KB_OK || kb_state_load_journal(l->state, cp.seq, 0, res, kb_tail_cb, l) != KB_OK) {
        snprintf(errstr, errstr_size, "%s", kb_state_error(l->state));
        kb_state_checkpoint_fini(&cp);
        kb_known_rv_settle(l);
        return KB_ERR_IO;
    }
    kb_graves_cap_at_resume(l);
    kb_known_rv_settle(l);
    l->seq = cp.last_seq;
    l->acked = l->saved = l->loaded = cp.seq;
    l->base = cp.seq + 1;
    kb_parse_rvs(l, cp.rv, l->ack_rv);
    kb_state_checkpoint_fini(&cp);
    return KB_OK;
}

uint64_t kb_ledger_known_rv(const kb_ledger_t *l) {
    return l->known_rv;
}

const char *kb_ledger_resume_rv(const kb_ledger_t *l, size_t scope) {
    KB_ASSERT(scope < l->n_scopes);
    return l->start_rv[scope];
}

size_t kb_ledger_tail_len(const kb_ledger_t *l) {
    return l->n_tail;
}

void kb_ledger_requeue_tail(kb_ledger_t *l, void (*queue)(void *opaque, kb_event_t *ev), void *opaque) {
    for (size_t i = 0; i < l->n_tail; i++) {
        kb_tail_entry_t *t = &l->tail[i];
        kb_ledger_track(l, t->seq, t->scope, t->rv_after, t->ev == NULL);
        if (t->ev)
            queue(opaque, t->ev);
        t->ev = NULL;
    }
    kb_tail_clear(l);
}

/* Is seq inside one of the "a-b,c-d" ranges? */
static bool kb_in_ranges(const char *ranges, uint64_t seq) {
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

kb_err_t kb_ledger_apply_cut(kb_ledger_t *l, const char *json, size_t len, char *errstr, size_t errstr_size) {
    json_error_t jerr;
    json_t *j = json_loadb(json, len, 0, &jerr);
    json_t *jseq = j ? json_object_get(j, "seq") : NULL, *jrv = j ? json_object_get(j, "rv") : NULL;
    json_t *jalso = j ? json_object_get(j, "also") : NULL;
    if (!json_is_integer(jseq) || json_integer_value(jseq) < 0 || !json_is_string(jrv) ||
        (jalso && !json_is_string(jalso))) {
        snprintf(errstr, errstr_size, "checkpoint record does not parse (%s): %.200s",
                 j ? "want {\"seq\":N,\"rv\":\"…\",\"also\":\"…\"}" : jerr.text, json);
        json_decref(j);
        return KB_ERR_INVAL;
    }
    uint64_t seq = (uint64_t)json_integer_value(jseq);
    const char *also = jalso ? json_string_value(jalso) : "";
    kb_err_t err = KB_OK;
    if (seq > l->seq) {
        snprintf(errstr, errstr_size, "the sink's checkpoint (seq %llu) is ahead of this state_dir (seq %llu)",
                 (unsigned long long)seq, (unsigned long long)l->seq);
        err = KB_ERR_INVAL;
        goto out;
    }
    size_t keep = 0;
    for (size_t i = 0; i < l->n_tail; i++) {
        kb_tail_entry_t *t = &l->tail[i];
        if (t->seq <= seq || (t->ev && kb_in_ranges(also, t->seq))) {
            kb_event_unref(t->ev);
            free(t->rv_after);
        } else {
            l->tail[keep++] = *t;
        }
    }
    l->n_tail = keep;
    /* The watch still resumes where the journal ends: what the cut does not
     * cover is delivered from the journal. */
    kb_parse_rvs(l, json_string_value(jrv), l->ack_rv);
    if (seq > l->acked) {
        l->acked = seq;
        l->base = seq + 1;
    }
out:
    json_decref(j);
    return err;
}

/* ---- ingest --------------------------------------------------------------- */

uint64_t kb_ledger_next_seq(kb_ledger_t *l) {
    return ++l->seq;
}

uint64_t kb_ledger_seq(const kb_ledger_t *l) {
    return l->seq;
}

void kb_ledger_rewind(kb_ledger_t *l, uint64_t seq) {
    KB_ASSERT(seq <= l->seq);
    l->seq = seq;
}

bool kb_ledger_stale(const kb_ledger_t *l, const kb_event_t *cached, const char *key, size_t key_len,
                     uint64_t hash, const char *rv, size_t rv_len) {
    uint64_t n = kb_rv_parse(rv, rv_len);
    if (!n) /* opaque RVs have no order: only a repeat of the cached state is known to be one */
        return cached && cached->rv_len == rv_len && !memcmp(cached->rv, rv, rv_len);
    uint64_t floor = cached ? cached->rv_num : 0;
    uint64_t grave = (uintptr_t)kb_strmap_get(l->graves, key, key_len, hash);
    if (grave > floor)
        floor = grave;
    return floor && n <= floor;
}

uint64_t kb_ledger_grave(const kb_ledger_t *l, const char *key, size_t key_len, uint64_t hash) {
    return (uintptr_t)kb_strmap_get(l->graves, key, key_len, hash);
}

void kb_ledger_drop_grave(kb_ledger_t *l, const char *key, size_t key_len, uint64_t hash, uint64_t rv) {
    if (rv && kb_ledger_grave(l, key, key_len, hash) == rv)
        kb_strmap_del(l->graves, key, key_len, hash);
}

uint64_t kb_ledger_accept(kb_ledger_t *l, const kb_event_t *ev, uint64_t ceiling) {
    uint64_t before = kb_ledger_grave(l, ev->key, ev->key_len, ev->key_hash);
    uint64_t at = ceiling && ceiling < ev->rv_num ? ceiling : ev->rv_num;
    if (ev->type == KB_EV_DELETED && at)
        kb_strmap_put(l->graves, ev->key, ev->key_len, ev->key_hash, (void *)(uintptr_t)at);
    else if (ev->type == KB_EV_ADDED || ev->type == KB_EV_MODIFIED)
        kb_strmap_del(l->graves, ev->key, ev->key_len, ev->key_hash);
    return before;
}

void kb_ledger_unaccept(kb_ledger_t *l, const char *key, size_t key_len, uint64_t hash, uint64_t grave_before) {
    if (grave_before)
        kb_strmap_put(l->graves, key, key_len, hash, (void *)(uintptr_t)grave_before);
    else
        kb_strmap_del(l->graves, key, key_len, hash);
}

void kb_ledger_forget_graves(kb_ledger_t *l) {
    kb_strmap_destroy(l->graves);
    l->graves = kb_strmap_new(64);
}

size_t kb_ledger_graves(const kb_ledger_t *l) {
    return kb_strmap_count(l->graves);
}

/* Forget deletes every scope's acknowledged resume point has passed: no
 * resume can replay anything older. Caller holds the ingest lock. */
static void kb_graves_prune(kb_ledger_t *l) {
    if (!kb_strmap_count(l->graves))
        return;
    uint64_t floor = kb_ledger_acked_rv(l); /* 0 while any scope has no numeric resume point */
    if (floor == 0)
        return;
    kb_strmap_t *keep = kb_strmap_new(64);
    size_t pos = 0, len;
    const char *key;
    void *v;
    while (kb_strmap_next(l->graves, &pos, &key, &len, &v))
        if ((uintptr_t)v > floor)
            kb_strmap_put(keep, key, len, kb_fnv1a64(key, len), v);
    kb_strmap_destroy(l->graves);
    l->graves = keep;
}

/* ---- in flight ----------------------------------------------------------- */

static kb_slot_t *kb_slot(kb_ledger_t *l, uint64_t seq) {
    if (seq < l->base || seq >= l->base + l->ring_len)
        return NULL;
    return &l->ring[(l->ring_head + (seq - l->base)) % l->ring_cap];
}

/* The waiting bits of slot s (of l->ring). l->mtx held. */
static uint64_t *kb_waits(const kb_ledger_t *l, const kb_slot_t *s) {
    return &l->waits[(size_t)(s - l->ring) * l->words];
}

static bool kb_waits_none(const kb_ledger_t *l, const kb_slot_t *s) {
    const uint64_t *w = kb_waits(l, s);
    for (size_t i = 0; i < l->words; i++)
        if (w[i])
            return false;
    return true;
}

static bool kb_waits_has(const kb_ledger_t *l, const kb_slot_t *s, size_t sink) {
    return kb_waits(l, s)[sink / 64] & (UINT64_C(1) << (sink % 64));
}

static void kb_waits_clear(const kb_ledger_t *l, const kb_slot_t *s, size_t sink) {
    kb_waits(l, s)[sink / 64] &= ~(UINT64_C(1) << (sink % 64));
}

/* Copy the window into a ring of cap slots of words waiting words each, in
 * seq order from position 0. l->mtx held. */
static void kb_ring_rebuild(kb_ledger_t *l, size_t cap, size_t words) {
    kb_slot_t *ring = kb_calloc(cap, sizeof(*ring));
    uint64_t *waits = kb_calloc(cap * words, sizeof(*waits));
    for (size_t i = 0; i < l->ring_len; i++) {
        size_t from = (l->ring_head + i) % l->ring_cap;
        ring[i] = l->ring[from];
        memcpy(&waits[i * words], &l->waits[from * l->words], l->words * sizeof(*waits));
    }
    free(l->ring);
    free(l->waits);
    l->ring = ring;
    l->waits = waits;
    l->ring_cap = cap;
    l->ring_head = 0;
    l->words = words;
}

/* The sink table outgrew the waiting bits: one more word per slot. l->mtx held. */
static void kb_waits_widen(kb_ledger_t *l) {
    if (l->ring_cap)
        kb_ring_rebuild(l, l->ring_cap, l->words + 1);
    else
        l->words++;
}

/* Move the watermark over the done prefix. l->mtx held. */
static void kb_advance(kb_ledger_t *l) {
    if (l->ring_len && l->ring[l->ring_head].done)
        pthread_cond_broadcast(&l->room_cv);
    while (l->ring_len && l->ring[l->ring_head].done) {
        kb_slot_t *s = &l->ring[l->ring_head];
        if (s->scope >= 0 && s->rv_after)
            snprintf(l->ack_rv[s->scope], KB_RV_MAX, "%s", s->rv_after);
        free(s->rv_after);
        s->rv_after = NULL;
        l->window_bytes -= s->bytes;
        KB_ASSERT(l->base > l->acked);
        l->acked = l->base++;
        l->ring_head = (l->ring_head + 1) % l->ring_cap;
        l->ring_len--;
    }
}

void kb_ledger_track(kb_ledger_t *l, uint64_t seq, int scope, const char *rv_after, bool done) {
    kb_ledger_track_sized(l, seq, scope, rv_after, done, 0);
}

void kb_ledger_track_sized(kb_ledger_t *l, uint64_t seq, int scope, const char *rv_after, bool done, size_t bytes) {
    KB_ASSERT(scope < (int)l->n_scopes);
    pthread_mutex_lock(&l->mtx);
    KB_ASSERT(seq > l->acked && seq >= l->base + l->ring_len);
    uint64_t rv_num = scope >= 0 && rv_after ? kb_rv_parse(rv_after, strlen(rv_after)) : 0;
    if (rv_num > atomic_load_explicit(&l->tracked_rv, memory_order_relaxed))
        atomic_store_explicit(&l->tracked_rv, rv_num, memory_order_release);
    if (l->ring_len == 0)
        l->base = seq; /* nothing in flight: the window starts here (seqs before were done) */
    while (l->base + l->ring_len <= seq) {
        if (l->ring_len == l->ring_cap)
            kb_ring_rebuild(l, l->ring_cap ? l->ring_cap * 2 : 1024, l->words);
        kb_slot_t *s = &l->ring[(l->ring_head + l->ring_len) % l->ring_cap];
        bool this = l->base + l->ring_len == seq;
        s->done = this ? done : true; /* a seq no batch committed: nothing to wait for */
        s->routed = false;
        memset(kb_waits(l, s), 0, l->words * sizeof(uint64_t));
        s->produced = false;
        s->scope = this ? scope : -1;
        s->rv_after = this && scope >= 0 && rv_after && rv_after[0] ? kb_strdup(rv_after) : NULL;
        s->bytes = this && bytes < UINT32_MAX ? (uint32_t)bytes : 0;
        l->window_bytes += s->bytes;
        l->ring_len++;
    }
    kb_advance(l);
    pthread_mutex_unlock(&l->mtx);
}

void kb_ledger_done(kb_ledger_t *l, uint64_t seq) {
    pthread_mutex_lock(&l->mtx);
    kb_slot_t *s = kb_slot(l, seq);
    if (s) {
        s->done = true;
        l->ack_time_ns = kb_now_real_ns();
        kb_advance(l);
    }
    pthread_mutex_unlock(&l->mtx);
}

void kb_ledger_produced(kb_ledger_t *l, uint64_t seq) {
    pthread_mutex_lock(&l->mtx);
    kb_slot_t *s = kb_slot(l, seq);
    if (s)
        s->produced = true;
    pthread_mutex_unlock(&l->mtx);
}

/* ---- bounds ---------------------------------------------------------------- */

void kb_ledger_set_bounds(kb_ledger_t *l, size_t max_slots, uint64_t max_bytes) {
    pthread_mutex_lock(&l->mtx);
    l->max_slots = max_slots;
    l->max_bytes = max_bytes;
    pthread_mutex_unlock(&l->mtx);
}

static bool kb_full(const kb_ledger_t *l) {
    return (l->max_slots && l->ring_len >= l->max_slots) || (l->max_bytes && l->window_bytes >= l->max_bytes);
}

bool kb_ledger_wait_room(kb_ledger_t *l, int timeout_ms, kb_ledger_window_t *w) {
    pthread_mutex_lock(&l->mtx);
    if (kb_full(l) && timeout_ms > 0) {
        struct timespec deadline = kb_deadline_mono(timeout_ms);
        while (kb_full(l) && pthread_cond_timedwait(&l->room_cv, &l->mtx, &deadline) == 0)
            ;
    }
    bool room = !kb_full(l);
    if (w) {
        w->slots = l->ring_len;
        w->bytes = l->window_bytes;
        w->oldest = l->ring_len ? l->base : 0;
    }
    pthread_mutex_unlock(&l->mtx);
    return room;
}

/* ---- sinks --------------------------------------------------------------- */

int kb_ledger_add_sink(kb_ledger_t *l, const char *name) {
    pthread_mutex_lock(&l->mtx);
    int idx = -1;
    for (size_t i = 0; i < l->n_sinks && idx < 0; i++)
        if (!strcmp(l->sinks[i].name, name))
            idx = (int)i;
    if (idx >= 0) {
        l->sinks[idx].gone = false;
        pthread_mutex_unlock(&l->mtx);
        return idx;
    }
    KB_ASSERT(l->n_sinks < INT_MAX);
    if (l->n_sinks == l->cap_sinks) {
        l->cap_sinks = l->cap_sinks ? l->cap_sinks * 2 : 8;
        l->sinks = kb_realloc(l->sinks, l->cap_sinks * sizeof(*l->sinks));
    }
    if (l->n_sinks == l->words * 64)
        kb_waits_widen(l);
    idx = (int)l->n_sinks++;
    kb_lsink_t *k = &l->sinks[idx];
    k->name = kb_strdup(name);
    k->gone = false;
    /* A sink with no watermark of its own (new, or a state_dir from before
     * per-sink watermarks) starts from the checkpoint. */
    k->start_wm = k->saved_wm = l->loaded;
    uint64_t wm;
    if (l->state && kb_state_read_sink_seq(l->state, name, &wm) == KB_OK && wm > k->start_wm)
        k->start_wm = k->saved_wm = wm;
    pthread_mutex_unlock(&l->mtx);
    return idx;
}

void kb_ledger_remove_sink(kb_ledger_t *l, int sink) {
    pthread_mutex_lock(&l->mtx);
    KB_ASSERT(sink >= 0 && (size_t)sink < l->n_sinks);
    l->sinks[sink].gone = true;
    for (size_t i = 0; i < l->ring_len; i++) {
        kb_slot_t *s = &l->ring[(l->ring_head + i) % l->ring_cap];
        kb_waits_clear(l, s, (size_t)sink);
        if (s->routed && kb_waits_none(l, s))
            s->done = true;
    }
    kb_advance(l);
    pthread_mutex_unlock(&l->mtx);
}

bool kb_ledger_wants(kb_ledger_t *l, uint64_t seq, int sink) {
    pthread_mutex_lock(&l->mtx);
    KB_ASSERT(sink >= 0 && (size_t)sink < l->n_sinks);
    bool wants = seq > l->sinks[sink].start_wm;
    pthread_mutex_unlock(&l->mtx);
    return wants;
}

void kb_ledger_routed(kb_ledger_t *l, uint64_t seq, const int *sinks, size_t n_sinks) {
    pthread_mutex_lock(&l->mtx);
    kb_slot_t *s = kb_slot(l, seq);
    if (s) {
        s->routed = true;
        uint64_t *w = kb_waits(l, s);
        memset(w, 0, l->words * sizeof(*w));
        for (size_t i = 0; i < n_sinks; i++) {
            KB_ASSERT(sinks[i] >= 0 && (size_t)sinks[i] < l->n_sinks);
            w[(size_t)sinks[i] / 64] |= UINT64_C(1) << ((size_t)sinks[i] % 64);
        }
        if (!n_sinks) {
            s->done = true;
            kb_advance(l);
        }
    }
    pthread_mutex_unlock(&l->mtx);
}

void kb_ledger_sink_done(kb_ledger_t *l, uint64_t seq, int sink) {
    pthread_mutex_lock(&l->mtx);
    KB_ASSERT(sink >= 0 && (size_t)sink < l->n_sinks);
    kb_slot_t *s = kb_slot(l, seq);
    if (s) {
        kb_waits_clear(l, s, (size_t)sink);
        l->ack_time_ns = kb_now_real_ns();
        if (s->routed && kb_waits_none(l, s)) {
            s->done = true;
            kb_advance(l);
        }
    }
    pthread_mutex_unlock(&l->mtx);
}

/* Sink i's watermark: the first change it still owes (routed to it and not
 * acknowledged, or not routed yet), less one. l->mtx held. */
static uint64_t kb_sink_wm(const kb_ledger_t *l, size_t sink) {
    for (size_t i = 0; i < l->ring_len; i++) {
        const kb_slot_t *s = &l->ring[(l->ring_head + i) % l->ring_cap];
        if (!s->done && (!s->routed || kb_waits_has(l, s, sink)))
            return l->base + i - 1;
    }
    return l->ring_len ? l->base + l->ring_len - 1 : l->acked;
}

kb_ledger_sink_t *kb_ledger_sinks(kb_ledger_t *l, size_t *n_out) {
    pthread_mutex_lock(&l->mtx);
    kb_ledger_sink_t *out = kb_malloc((l->n_sinks ? l->n_sinks : 1) * sizeof(*out));
    size_t n = 0;
    for (size_t i = 0; i < l->n_sinks; i++) {
        if (l->sinks[i].gone)
            continue;
        snprintf(out[n].name, sizeof(out[n].name), "%s", l->sinks[i].name);
        out[n].watermark = kb_sink_wm(l, i);
        out[n].index = (int)i;
        n++;
    }
    pthread_mutex_unlock(&l->mtx);
    *n_out = n;
    return out;
}

/* ---- checkpoint ------------------------------------------------------------ */

void kb_ledger_checkpoint(kb_ledger_t *l) {
    if (!l->state)
        return;
    kb_buf_t rvs = KB_BUF_INIT;
    size_t n = 0;
    bool moved = false;
    pthread_mutex_lock(&l->mtx);
    kb_state_sink_seq_t *wms = kb_malloc((l->n_sinks ? l->n_sinks : 1) * sizeof(*wms));
    uint64_t seq = l->acked;
    for (size_t i = 0; i < l->n_sinks; i++) {
        if (l->sinks[i].gone)
            continue;
        wms[n].sink = l->sinks[i].name; /* names live as long as the ledger */
        wms[n].seq = kb_sink_wm(l, i);
        moved |= wms[n].seq != l->sinks[i].saved_wm;
        n++;
    }
    moved |= seq != l->saved;
    if (moved)
        kb_format_rvs(l, l->ack_rv, &rvs);
    pthread_mutex_unlock(&l->mtx);
    if (moved) {
        if (kb_state_set_checkpoint(l->state, seq, rvs.data ? rvs.data : "", wms, n) == KB_OK) {
            l->saved = seq;
            pthread_mutex_lock(&l->mtx);
            /* By name, not by position: a sink may have gone (or come) while
             * the lock was let go; the table keeps its order. */
            for (size_t i = 0, j = 0; i < l->n_sinks && j < n; i++)
                if (l->sinks[i].name == wms[j].sink)
                    l->sinks[i].saved_wm = wms[j++].seq;
            pthread_mutex_unlock(&l->mtx);
        } else {
            static kb_ratelimit_t rl;
            if (kb_ratelimit_allow(&rl, 10000, NULL))
                KB_ERROR("ledger", "dir=%s cannot write the checkpoint: %s", kb_state_dir(l->state),
                         kb_state_error(l->state));
        }
    }
    kb_buf_fini(&rvs);
    free(wms);
}

void kb_ledger_txn_cut(kb_ledger_t *l, kb_buf_t *json) {
    char(*rvs)[KB_RV_MAX] = kb_calloc(l->n_scopes, sizeof(*rvs));
    kb_buf_t also = KB_BUF_INIT, tagged = KB_BUF_INIT;
    pthread_mutex_lock(&l->mtx);
    memcpy(rvs, l->ack_rv, l->n_scopes * sizeof(*rvs));
    uint64_t seq = l->acked;
    size_t i = 0;
    for (; i < l->ring_len; i++) {
        kb_slot_t *s = &l->ring[(l->ring_head + i) % l->ring_cap];
        if (!s->done && !s->produced)
            break;
        if (s->scope >= 0 && s->rv_after)
            snprintf(rvs[s->scope], KB_RV_MAX, "%s", s->rv_after);
        seq = l->base + i;
    }
    /* Past the first gap, what is delivered or in the transaction anyway:
     * a restart must not deliver those again. */
    uint64_t run = 0;
    for (; i <= l->ring_len; i++) {
        kb_slot_t *s = i < l->ring_len ? &l->ring[(l->ring_head + i) % l->ring_cap] : NULL;
        uint64_t cur = l->base + i;
        bool in = s && (s->done || s->produced);
        if (in && !run)
            run = cur;
        if (!in && run) {
            kb_buf_appendf(&also, "%s%llu-%llu", also.len ? "," : "", (unsigned long long)run,
                           (unsigned long long)(cur - 1));
            run = 0;
        }
    }
    pthread_mutex_unlock(&l->mtx);
    kb_format_rvs(l, rvs, &tagged);
    json_t *j = json_pack("{s:I,s:s%,s:s%}", "seq", (json_int_t)seq, "rv", tagged.data ? tagged.data : "",
                          tagged.len, "also", also.data ? also.data : "", also.len);
    char *text = json_dumps(j, JSON_COMPACT);
    kb_buf_append_str(json, text);
    free(text);
    json_decref(j);
    kb_buf_fini(&also);
    kb_buf_fini(&tagged);
    free(rvs);
}

void kb_ledger_stats(kb_ledger_t *l, kb_ledger_stats_t *st) {
    pthread_mutex_lock(&l->mtx);
    st->acked = l->acked;
    st->seq = l->ring_len ? l->base + l->ring_len - 1 : l->acked;
    st->in_flight = l->ring_len;
    st->ack_time_ns = l->ack_time_ns;
    st->saved = l->saved;
    memcpy(st->resume_rv, l->ack_rv[0], sizeof(st->resume_rv));
    pthread_mutex_unlock(&l->mtx);
}

void kb_ledger_batch_committed(kb_ledger_t *l) {
    if (++l->prune_tick % 256 == 0)
        kb_graves_prune(l);
}

uint64_t kb_ledger_acked_rv(kb_ledger_t *l) {
    uint64_t low = UINT64_MAX;
    pthread_mutex_lock(&l->mtx);
    for (size_t i = 0; i < l->n_scopes; i++) {
        uint64_t v = kb_rv_parse(l->ack_rv[i], strlen(l->ack_rv[i]));
        low = v < low ? v : low;
    }
    pthread_mutex_unlock(&l->mtx);
    return low == UINT64_MAX ? 0 : low;
}

uint64_t kb_ledger_tracked_rv(kb_ledger_t *l) {
    return atomic_load_explicit(&l->tracked_rv, memory_order_acquire);
}
