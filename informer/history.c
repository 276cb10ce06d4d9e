/* informer/history.c — the in-memory window of recent changes (history.h).
 *
 * DESIGN. Why a ring of the informer's own events and not a journal read:
 * without state_dir there is no journal, and even with one a watch that
 * resumes seconds ago should not touch the disk. The ring holds references,
 * so a change costs one pointer here however many watchers read it, and the
 * watchers share the object bytes the informer already shaped for the sinks.
 *
 * Why the labels map: a label-selected watch must turn an update that moves
 * an object out of the selector into a DELETED (and into it, an ADDED), which
 * needs the labels before the change. The informer's cache has already moved
 * on when the subscriber runs, and with state_dir it keeps no labels at all,
 * so the history keeps key → labels itself (small, refcounted blobs that the
 * ring entries share). The same holds for a field-selected watch (a pod that
 * moves off a node leaves a spec.nodeName selector), so for a kind with
 * selectable fields of its own (common/fieldsel.h) each blob also holds the object's
 * field record, read once per change here rather than once per watcher.
 *
 * Building: subscribe first, then take a cut; events that arrive in between
 * are parked and applied after the cut's labels if their seq is above the
 * cut's, so nothing is lost or counted twice.
 *
 * Dispatch. Why an index and a queue per watcher, not one condition variable
 * for all: the kube API's largest fan-out is node agents, thousands of
 * watches of spec.nodeName=<their node>, each concerned by a few changes a
 * minute. A broadcast per change woke every watcher's thread to test its own
 * selector (5,000 wake-ups per change, seconds of delay under churn). Here a
 * watcher is filed under one term its filter implies (kb_history_watch picks
 * the most selective: a field equality, first in the kind's table — a pod's
 * spec.nodeName —, then an equality on an index_labels key, then the
 * namespace; else the everything list), and an append visits the everything
 * list plus, per term kind in use, the bucket of the change's value after it
 * and the bucket of its value before it (so a pod moving from node A to node
 * B reaches A's watchers, as a DELETED, and B's, as an ADDED). For each
 * visited watcher the enter/leave rule is decided here, once, on the shared
 * labels/field blobs; a watcher that sees the change gets its position and
 * type queued and, if it waits, a signal on its own condition variable. So
 * a change costs in proportion to the watchers it reaches, and a watcher
 * whose node is quiet is never woken. The queue holds positions, not bytes:
 * the object is the informer's, serialized once and shared; a watcher whose
 * oldest queued position is evicted, or with more queued than the ring
 * holds, is lost (it ends; the client resumes), which bounds every queue.
 * The index is only a filter of candidates: the decision is always the full
 * filter, so a term that cannot be indexed (a label value in several values,
 * a kind without fields) only costs speed, never correctness.
 */
#include "informer/history.h"

#include "common/alloc.h"
#include "common/fieldsel.h"
#include "common/hash.h"
#include "common/strmap.h"
#include "common/time.h"
#include "informer/decode.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kb_history_labels {
    _Atomic unsigned refcnt;
    size_t len;   /* labels: s[0..len) */
    size_t flen;  /* the field record: s[len + 1 .. len + 1 + flen) */
    char s[];
};

typedef struct kb_hslot {
    kb_event_t *ev;
    kb_history_labels_t *prev; /* NULL: the key did not exist before */
    kb_history_labels_t *now;  /* ev's own labels and fields */
    uint64_t rv;               /* kb_history_order_rv(ev) */
} kb_hslot_t;

/* A kind of index term in use: watchers filed under a value of it. */
typedef enum { KB_HDIM_NS, KB_HDIM_FIELD, KB_HDIM_LABEL } kb_hdim_kind_t;
#define KB_HISTORY_DIMS 24 /* term kinds at once: the namespace, a kind's fields, index_labels */

typedef struct kb_hdim {
    kb_hdim_kind_t kind;
    int field;          /* KB_HDIM_FIELD: index in the kind's record */
    const char *label;  /* KB_HDIM_LABEL: the key (the informer's index_labels entry) */
    size_t watchers;    /* filed under this kind of term; 0: a free row */
} kb_hdim_t;

/* The watchers filed under one term value (a map value; freed when empty). */
typedef struct kb_hbucket {
    struct kb_history_watcher *head;
} kb_hbucket_t;

typedef struct kb_hq_item {
    uint64_t pos;
    kb_event_type_t type; /* what this watcher sees */
} kb_hq_item_t;

struct kb_history_watcher {
    kb_history_t *h;
    kb_history_filter_t f;       /* borrowed from the reader */
    int dim;                     /* row of h->dims, -1: the everything list */
    char *term;                  /* the bucket's map key (dim byte + value), NULL for -1 */
    size_t term_len;
    uint64_t term_hash;
    struct kb_history_watcher *prev, *next; /* in its bucket or h->all; under h->mtx */
    pthread_cond_t cond;         /* signalled when something is queued or on wake */
    void (*notify)(void *arg);   /* instead of cond: called after mtx is let go (kb_history_watch_notify) */
    void *notify_arg;
    bool waiting, kicked, lost;  /* under h->mtx; with notify, waiting means "read to empty, not told since" */
    uint64_t gen;                /* the last dispatch that visited it (visits once per change) */
    kb_hq_item_t *q;             /* ring of q_cap; q_len from q_head; under h->mtx */
    size_t q_cap, q_head, q_len;
};

struct kb_history {
    kb_informer_t *inf;
    const kb_fields_kind_t *kind; /* which fields a record holds, as of the last dispatch; under mtx */
    pthread_mutex_t mtx;
    bool ready;               /* the first cut is applied */
    kb_event_list_t parked;   /* events that came before ready */
    kb_strmap_t *labels;      /* key → kb_history_labels_t (a reference) */
    kb_hslot_t *ring;
    size_t cap;
    uint64_t first, next;     /* positions: [first, next) are held */
    uint64_t floor_rv;        /* every change above it is held */
    uint64_t evicted_seq;     /* seq of the newest evicted entry (0: none) */
    uint64_t rv_num;          /* the newest progress seen */
    char rv[64];
    kb_history_watcher_t *all; /* watchers of everything (no index term) */
    kb_hdim_t dims[KB_HISTORY_DIMS];
    kb_strmap_t *buckets;     /* term (dim byte + value) → kb_hbucket_t */
    uint64_t gen;             /* dispatch counter */
    atomic_ullong wakeups;
    kb_history_watcher_t **wake; /* waiting watchers an append queued for: signalled after mtx is let go */
    size_t n_wake, cap_wake;
    pthread_mutex_t sig_mtx;  /* held while signalling them; unwatch takes it so w outlives a signal */
};

static void kb_history_dispatch(kb_history_t *h, uint64_t pos);
static void kb_history_unlock_wake(kb_history_t *h);

static kb_history_labels_t *kb_hl_new(const char *s, size_t len, const kb_buf_t *rec) {
    kb_history_labels_t *l = kb_malloc(sizeof(*l) + len + 1 + rec->len);
    atomic_init(&l->refcnt, 1);
    l->len = len;
    l->flen = rec->len;
    if (len)
        memcpy(l->s, s, len);
    l->s[len] = '\0';
    if (rec->len)
        memcpy(l->s + len + 1, rec->data, rec->len);
    return l;
}

/* The informer's kind, looked up each time: a custom resource's row is learned
 * from its CRD (bridge/kcrd.h) in the background, possibly after this history
 * began. */
static const kb_fields_kind_t *kb_history_kind(const kb_history_t *h) {
    const kb_config_informer_t *conf = kb_informer_conf(h->inf);
    return kb_fields_kind(conf->group, conf->resource);
}

/* The blob of full (labels and, when the kind has any, its field record): an
 * event with its object readable (a subscriber's, or one of a kb_informer_cut). */
static kb_history_labels_t *kb_hl_of(const kb_history_t *h, const kb_event_t *full) {
    kb_buf_t rec;
    kb_buf_init(&rec);
    const kb_fields_kind_t *kind = kb_history_kind(h);
    if (kb_fields_kind_has_own(kind) && full->obj_len)
        kb_fields_extract(kind, full->obj, full->obj_len, &rec);
    kb_history_labels_t *l = kb_hl_new(full->labels_len ? full->obj + full->labels_off : NULL, full->labels_len, &rec);
    kb_buf_fini(&rec);
    return l;
}

static kb_history_labels_t *kb_hl_ref(kb_history_labels_t *l) {
    if (l)
        atomic_fetch_add(&l->refcnt, 1);
    return l;
}

static void kb_hl_unref(kb_history_labels_t *l) {
    if (l && atomic_fetch_sub(&l->refcnt, 1) == 1)
        free(l);
}

/* The key's blob before ev; now (consumed: ev's own blob) is the key's
 * afterwards unless ev deletes it. Caller holds mtx. */
static kb_history_labels_t *kb_history_swap_labels(kb_history_t *h, const kb_event_t *ev, kb_history_labels_t *now) {
    if (ev->type == KB_EV_DELETED) {
        kb_hl_unref(now);
        return kb_strmap_del(h->labels, ev->key, ev->key_len, ev->key_hash);
    }
    return kb_strmap_put(h->labels, ev->key, ev->key_len, ev->key_hash, now);
}

static void kb_history_note_rv(kb_history_t *h, const char *rv, uint64_t num) {
    if (num < h->rv_num)
        return;
    h->rv_num = num;
    snprintf(h->rv, sizeof(h->rv), "%s", rv);
}

/* Does ev change what a watch sees? (A resync's SYNC and SNAPSHOT repeat state.) */
static bool kb_history_is_change(const kb_event_t *ev) {
    return ev->type == KB_EV_ADDED || ev->type == KB_EV_MODIFIED || ev->type == KB_EV_DELETED;
}

uint64_t kb_history_order_rv(const kb_event_t *ev) {
    kb_span_t rv;
    if (!ev->final_state_unknown || !ev->obj_len || !kb_decode_object_rv(ev->obj, ev->obj_len, &rv))
        return ev->rv_num;
    uint64_t own = kb_rv_parse(ev->obj + rv.off, rv.len);
    return own && own < ev->rv_num ? own : ev->rv_num;
}

/* Append one accepted change; now (consumed, NULL: made here) is ev's blob
 * (kb_hl_of), which the informer's subscriber makes before it takes mtx: a
 * field record reads the whole object, and every watcher waits on mtx.
 * Caller holds mtx and the history is ready. */
static void kb_history_push(kb_history_t *h, kb_event_t *ev, kb_history_labels_t *now) {
    if (!kb_history_is_change(ev)) {
        kb_hl_unref(now);
        return;
    }
    if (h->next - h->first == h->cap) {
        kb_hslot_t *old = &h->ring[h->first % h->cap];
        if (old->rv > h->floor_rv)
            h->floor_rv = old->rv;
        h->evicted_seq = old->ev->seq;
        kb_event_unref(old->ev);
        kb_hl_unref(old->prev);
        kb_hl_unref(old->now);
        h->first++;
    }
    /* A change that does not move past the progress so far comes from the
     * informer's relist (a diff against its cache, or a delete it missed):
     * where it falls in resourceVersion order is unknown, so no watch may
     * resume from before it — such watches get 410 and list again. */
    uint64_t rv = kb_history_order_rv(ev);
    if ((rv <= h->rv_num || ev->final_state_unknown) && h->floor_rv <= h->rv_num)
        h->floor_rv = h->rv_num + 1;
    kb_hslot_t *s = &h->ring[h->next % h->cap];
    s->ev = kb_event_ref(ev);
    s->rv = rv;
    s->now = now ? now : kb_hl_of(h, ev);
    s->prev = kb_history_swap_labels(h, ev, kb_hl_ref(s->now));
    h->next++;
    if (rv == ev->rv_num)
        kb_history_note_rv(h, ev->rv, ev->rv_num);
    kb_history_dispatch(h, h->next - 1);
}

static void kb_history_free(kb_history_t *h);

static void kb_history_sub(void *opaque, kb_event_t *ev) {
    kb_history_t *h = opaque;
    kb_history_labels_t *now = kb_history_is_change(ev) ? kb_hl_of(h, ev) : NULL;
    pthread_mutex_lock(&h->mtx);
    if (h->ready) {
        kb_history_push(h, ev, now);
    } else {
        kb_event_list_push(&h->parked, kb_event_ref(ev));
        kb_hl_unref(now);
    }
    kb_history_unlock_wake(h);
}

kb_history_t *kb_history_new(kb_informer_t *inf, size_t capacity) {
    KB_ASSERT(capacity >= 1);
    kb_history_t *h = kb_calloc(1, sizeof(*h));
    h->inf = inf;
    h->cap = capacity;
    h->ring = kb_calloc(capacity, sizeof(*h->ring));
    h->labels = kb_strmap_new(1024);
    h->buckets = kb_strmap_new(64);
    atomic_init(&h->wakeups, 0);
    kb_event_list_init(&h->parked);
    pthread_mutex_init(&h->mtx, NULL);
    pthread_mutex_init(&h->sig_mtx, NULL);
    if (!kb_informer_subscribe(inf, kb_history_sub, h)) {
        kb_history_free(h);
        return NULL;
    }
    kb_event_list_t cut;
    kb_event_list_init(&cut);
    char rv[64];
    uint64_t seq = 0;
    kb_informer_cut(inf, NULL, &cut, rv, sizeof(rv), &seq); /* objects readable */
    pthread_mutex_lock(&h->mtx);
    for (size_t i = 0; i < cut.n; i++)
        kb_hl_unref(kb_history_swap_labels(h, cut.ev[i], kb_hl_of(h, cut.ev[i])));
    h->floor_rv = kb_rv_parse(rv, strlen(rv));
    kb_history_note_rv(h, rv, h->floor_rv);
    h->ready = true;
    for (size_t i = 0; i < h->parked.n; i++)
        if (h->parked.ev[i]->seq > seq)
            kb_history_push(h, h->parked.ev[i], NULL);
    kb_event_list_fini(&h->parked);
    kb_event_list_init(&h->parked);
    kb_history_unlock_wake(h);
    kb_event_list_fini(&cut);
    return h;
}

/* Everything but the subscription. */
static void kb_history_free(kb_history_t *h) {
    for (uint64_t p = h->first; p < h->next; p++) {
        kb_event_unref(h->ring[p % h->cap].ev);
        kb_hl_unref(h->ring[p % h->cap].prev);
        kb_hl_unref(h->ring[p % h->cap].now);
    }
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (kb_strmap_next(h->labels, &it, &k, &kl, &v))
        kb_hl_unref(v);
    kb_strmap_destroy(h->labels);
    KB_ASSERT(!h->all && !kb_strmap_count(h->buckets)); /* every watcher unregistered */
    kb_strmap_destroy(h->buckets);
    kb_event_list_fini(&h->parked);
    free(h->wake);
    pthread_mutex_destroy(&h->sig_mtx);
    pthread_mutex_destroy(&h->mtx);
    free(h->ring);
    free(h);
}

void kb_history_destroy(kb_history_t *h) {
    if (!h)
        return;
    kb_informer_unsubscribe(h->inf, kb_history_sub, h); /* waits out a running callback */
    kb_history_free(h);
}

kb_informer_t *kb_history_informer(const kb_history_t *h) {
    return h->inf;
}

void kb_history_entry_fini(kb_history_entry_t *e) {
    kb_event_unref(e->ev);
    kb_hl_unref(e->prev_ref);
    kb_hl_unref(e->now_ref);
    memset(e, 0, sizeof(*e));
}

kb_history_pos_t kb_history_after_rv(kb_history_t *h, uint64_t rv, uint64_t *pos) {
    pthread_mutex_lock(&h->mtx);
    kb_history_pos_t r = KB_HISTORY_OK;
    if (rv < h->floor_rv) {
        r = KB_HISTORY_GONE;
    } else {
        /* The first change above rv (after the last relist the ring is in
         * resourceVersion order, and what comes before it is below floor_rv). */
        uint64_t p = h->first;
        while (p < h->next && h->ring[p % h->cap].rv <= rv)
            p++;
        *pos = p;
    }
    pthread_mutex_unlock(&h->mtx);
    return r;
}

uint64_t kb_history_after_seq(kb_history_t *h, uint64_t seq) {
    pthread_mutex_lock(&h->mtx);
    uint64_t p = h->next;
    while (p > h->first && h->ring[(p - 1) % h->cap].ev->seq > seq)
        p--;
    if (p == h->first && h->evicted_seq > seq)
        p = h->first - 1; /* what comes next was evicted: the reader is too slow already */
    pthread_mutex_unlock(&h->mtx);
    return p;
}

void kb_history_stats(kb_history_t *h, uint64_t *floor_rv, size_t *entries) {
    pthread_mutex_lock(&h->mtx);
    *floor_rv = h->floor_rv;
    *entries = (size_t)(h->next - h->first);
    pthread_mutex_unlock(&h->mtx);
}

/* ---- watchers ------------------------------------------------------------- */

bool kb_history_matches(const kb_fields_kind_t *kind, const kb_history_filter_t *f, const kb_event_t *ev,
                        const char *rec, size_t rec_len) {
    kb_buf_t own;
    kb_buf_init(&own);
    if (!rec && kb_fieldsel_needs_record(f->fsel)) {
        kb_fields_extract(kind, ev->obj, ev->obj_len, &own);
        rec = own.data;
        rec_len = own.len;
    }
    bool ok = kb_fieldsel_match(f->fsel, ev->ns, ev->ns_len, ev->name, ev->name_len, rec, rec_len) &&
              (!f->sel || kb_selector_match_json(f->sel, ev->labels_len ? ev->obj + ev->labels_off : NULL,
                                                 ev->labels_len));
    kb_buf_fini(&own);
    return ok;
}

int kb_history_entry_type(const kb_fields_kind_t *kind, const kb_history_filter_t *f, const kb_history_entry_t *e) {
    const kb_event_t *ev = e->ev;
    if (f->ns && f->ns[0] && (strlen(f->ns) != ev->ns_len || memcmp(f->ns, ev->ns, ev->ns_len)))
        return -1;
    if (!f->sel && !f->fsel)
        return (int)ev->type;
    bool obj = kb_history_matches(kind, f, ev, e->fields, e->fields_len);
    bool now = ev->type != KB_EV_DELETED && obj;
    bool before = ev->type == KB_EV_DELETED && obj;
    if (e->prev_exists)
        before = kb_fieldsel_match(f->fsel, ev->ns, ev->ns_len, ev->name, ev->name_len, e->prev_fields,
                                   e->prev_fields_len) &&
                 (!f->sel || kb_selector_match_json(f->sel, e->prev_labels, e->prev_labels_len));
    if (now)
        return before ? KB_EV_MODIFIED : KB_EV_ADDED;
    return before ? KB_EV_DELETED : -1;
}

/* The entry of slot s, borrowing its references (valid under mtx). */
static void kb_history_view(const kb_hslot_t *s, kb_history_entry_t *out) {
    memset(out, 0, sizeof(*out));
    out->ev = s->ev;
    out->prev_exists = s->prev != NULL;
    out->prev_labels = s->prev ? s->prev->s : NULL;
    out->prev_labels_len = s->prev ? s->prev->len : 0;
    out->prev_fields = s->prev ? s->prev->s + s->prev->len + 1 : NULL;
    out->prev_fields_len = s->prev ? s->prev->flen : 0;
    out->fields = s->now->s + s->now->len + 1;
    out->fields_len = s->now->flen;
}

/* Room for one more in w's queue (at most h->cap: more means the oldest was evicted). */
static bool kb_history_q_room(kb_history_t *h, kb_history_watcher_t *w) {
    if (w->q_len < w->q_cap)
        return true;
    if (w->q_len >= h->cap)
        return false;
    size_t cap = w->q_cap ? w->q_cap * 2 : 8;
    if (cap > h->cap)
        cap = h->cap;
    kb_hq_item_t *q = kb_malloc(cap * sizeof(*q));
    for (size_t i = 0; i < w->q_len; i++)
        q[i] = w->q[(w->q_head + i) % w->q_cap];
    free(w->q);
    w->q = q;
    w->q_cap = cap;
    w->q_head = 0;
    return true;
}

/* Note w to be woken once mtx is let go (signalling under it would wake w
 * only to block on mtx). Caller holds mtx. */
static void kb_history_signal(kb_history_t *h, kb_history_watcher_t *w) {
    if (!w->waiting)
        return;
    w->waiting = false; /* once per wait */
    if (h->n_wake == h->cap_wake) {
        h->cap_wake = h->cap_wake ? h->cap_wake * 2 : 16;
        h->wake = kb_realloc(h->wake, h->cap_wake * sizeof(*h->wake));
    }
    h->wake[h->n_wake++] = w;
}

/* Let go of mtx and wake the watchers noted meanwhile. A watcher's reader
 * may return before its signal (a timeout): the signal is then spurious,
 * which its wait tolerates; kb_history_unwatch waits on sig_mtx, so the
 * watcher is not freed under the signal. */
static void kb_history_unlock_wake(kb_history_t *h) {
    if (!h->n_wake) {
        pthread_mutex_unlock(&h->mtx);
        return;
    }
    pthread_mutex_lock(&h->sig_mtx);
    size_t n = h->n_wake;
    kb_history_watcher_t *few[64];
    kb_history_watcher_t **ws = n <= 64 ? few : kb_malloc(n * sizeof(*ws));
    memcpy(ws, h->wake, n * sizeof(*ws));
    h->n_wake = 0;
    pthread_mutex_unlock(&h->mtx);
    for (size_t i = 0; i < n; i++) {
        if (ws[i]->notify)
            ws[i]->notify(ws[i]->notify_arg);
        else
            pthread_cond_signal(&ws[i]->cond);
    }
    pthread_mutex_unlock(&h->sig_mtx);
    atomic_fetch_add(&h->wakeups, n);
    if (ws != few)
        free(ws);
}

/* Decide what w sees of the change at pos and queue it (once per dispatch
 * gen). Caller holds mtx. */
static void kb_history_offer(kb_history_t *h, kb_history_watcher_t *w, uint64_t pos, uint64_t gen) {
    if (w->gen == gen || w->lost)
        return;
    w->gen = gen;
    kb_history_entry_t view;
    kb_history_view(&h->ring[pos % h->cap], &view);
    int type = kb_history_entry_type(h->kind, &w->f, &view);
    if (type < 0)
        return;
    if (!kb_history_q_room(h, w)) {
        w->lost = true;
        w->q_len = 0;
    } else {
        w->q[(w->q_head + w->q_len++) % w->q_cap] = (kb_hq_item_t){pos, (kb_event_type_t)type};
    }
    kb_history_signal(h, w);
}

/* The map key of a term: the dim's row as one byte, then the value. */
static void kb_history_term_key(kb_buf_t *key, int dim, const char *val, size_t len) {
    kb_buf_reset(key);
    kb_buf_append_char(key, (char)(dim + 1));
    kb_buf_append(key, val, len);
}

static void kb_history_offer_bucket(kb_history_t *h, int dim, const char *val, size_t len, uint64_t pos,
                                    uint64_t gen) {
    kb_buf_t key = KB_BUF_INIT;
    kb_history_term_key(&key, dim, val, len);
    kb_hbucket_t *b = kb_strmap_get(h->buckets, key.data, key.len, kb_fnv1a64(key.data, key.len));
    kb_buf_fini(&key);
    for (kb_history_watcher_t *w = b ? b->head : NULL; w; w = w->next)
        kb_history_offer(h, w, pos, gen);
}

/* The value of dim d in blob l (a key's labels and field record); false when
 * it has none (an absent label: no equality term on it matches). */
static bool kb_history_dim_value(const kb_hdim_t *d, const kb_history_labels_t *l, const char **val, size_t *len) {
    if (d->kind == KB_HDIM_FIELD) {
        *val = kb_fields_rec_value(l->s + l->len + 1, l->flen, d->field, len);
        return true;
    }
    /* Label values are validated to [A-Za-z0-9._-]: the raw JSON bytes are the value. */
    return l->len && kb_selector_label(l->s, l->len, d->label, val, len);
}

/* Hand the change at pos to the watchers it can concern. Caller holds mtx. */
static void kb_history_dispatch(kb_history_t *h, uint64_t pos) {
    const kb_hslot_t *s = &h->ring[pos % h->cap];
    uint64_t gen = ++h->gen;
    h->kind = kb_history_kind(h);
    for (kb_history_watcher_t *w = h->all; w; w = w->next)
        kb_history_offer(h, w, pos, gen);
    for (int d = 0; d < KB_HISTORY_DIMS; d++) {
        const kb_hdim_t *dim = &h->dims[d];
        if (!dim->watchers)
            continue;
        if (dim->kind == KB_HDIM_NS) {
            kb_history_offer_bucket(h, d, s->ev->ns, s->ev->ns_len, pos, gen);
            continue;
        }
        const char *v;
        size_t len;
        if (kb_history_dim_value(dim, s->now, &v, &len))
            kb_history_offer_bucket(h, d, v, len, pos, gen);
        if (s->prev && kb_history_dim_value(dim, s->prev, &v, &len))
            kb_history_offer_bucket(h, d, v, len, pos, gen); /* a watcher met already is skipped */
    }
}

/* The term f implies that h can index: *d's kind and field/label, and the
 * value. False: none (the watcher takes everything). */
static bool kb_history_term(const kb_history_t *h, const kb_history_filter_t *f, kb_hdim_t *d, const char **val,
                            size_t *len) {
    memset(d, 0, sizeof(*d));
    if (kb_fieldsel_own_equality(f->fsel, &d->field, val, len)) {
        d->kind = KB_HDIM_FIELD;
        return true;
    }
    const kb_strlist_t *il = &kb_informer_conf(h->inf)->index_labels;
    for (size_t i = 0; f->sel && i < kb_selector_count(f->sel); i++) {
        const char *key;
        const char *const *vals;
        size_t nv;
        if (!kb_selector_equality(f->sel, i, &key, &vals, &nv) || nv != 1)
            continue;
        for (size_t j = 0; j < il->n; j++) {
            if (!strcmp(il->v[j], key)) {
                d->kind = KB_HDIM_LABEL;
                d->label = il->v[j];
                *val = vals[0];
                *len = strlen(vals[0]);
                return true;
            }
        }
    }
    if (f->ns && f->ns[0]) {
        d->kind = KB_HDIM_NS;
        *val = f->ns;
        *len = strlen(f->ns);
        return true;
    }
    return false;
}

/* The row of h->dims for d (taken if new), -1 when all rows are taken. Caller holds mtx. */
static int kb_history_dim(kb_history_t *h, const kb_hdim_t *d) {
    int free_row = -1;
    for (int i = 0; i < KB_HISTORY_DIMS; i++) {
        kb_hdim_t *r = &h->dims[i];
        if (!r->watchers) {
            if (free_row < 0)
                free_row = i;
            continue;
        }
        if (r->kind == d->kind && r->field == d->field && r->label == d->label)
            return i;
    }
    if (free_row >= 0) {
        h->dims[free_row] = *d;
        h->dims[free_row].watchers = 0;
    }
    return free_row;
}

/* File w under its term, or in the everything list. Caller holds mtx. */
static void kb_history_file(kb_history_t *h, kb_history_watcher_t *w) {
    kb_hdim_t d;
    const char *val = NULL;
    size_t len = 0;
    w->dim = kb_history_term(h, &w->f, &d, &val, &len) ? kb_history_dim(h, &d) : -1;
    kb_history_watcher_t **head = &h->all;
    if (w->dim >= 0) {
        kb_buf_t key = KB_BUF_INIT;
        kb_history_term_key(&key, w->dim, val, len);
        w->term_len = key.len;
        w->term = kb_buf_steal(&key, NULL);
        w->term_hash = kb_fnv1a64(w->term, w->term_len);
        kb_hbucket_t *b = kb_strmap_get(h->buckets, w->term, w->term_len, w->term_hash);
        if (!b) {
            b = kb_calloc(1, sizeof(*b));
            kb_strmap_put(h->buckets, w->term, w->term_len, w->term_hash, b);
        }
        h->dims[w->dim].watchers++;
        head = &b->head;
    }
    w->next = *head;
    if (*head)
        (*head)->prev = w;
    *head = w;
}

static void kb_history_unfile(kb_history_t *h, kb_history_watcher_t *w) {
    kb_hbucket_t *b = w->dim >= 0 ? kb_strmap_get(h->buckets, w->term, w->term_len, w->term_hash) : NULL;
    kb_history_watcher_t **head = b ? &b->head : &h->all;
    if (w->prev)
        w->prev->next = w->next;
    else
        *head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    if (b && !b->head)
        free(kb_strmap_del(h->buckets, w->term, w->term_len, w->term_hash));
    if (w->dim >= 0)
        h->dims[w->dim].watchers--;
}

kb_history_watcher_t *kb_history_watch(kb_history_t *h, uint64_t pos, const kb_history_filter_t *f) {
    return kb_history_watch_notify(h, pos, f, NULL, NULL);
}

kb_history_watcher_t *kb_history_watch_notify(kb_history_t *h, uint64_t pos, const kb_history_filter_t *f,
                                              void (*notify)(void *arg), void *arg) {
    kb_history_watcher_t *w = kb_calloc(1, sizeof(*w));
    w->h = h;
    w->f = *f;
    w->notify = notify;
    w->notify_arg = arg;
    kb_cond_init_mono(&w->cond);
    pthread_mutex_lock(&h->mtx);
    kb_history_file(h, w);
    h->kind = kb_history_kind(h);
    w->lost = pos < h->first;
    for (uint64_t p = pos; p < h->next && !w->lost; p++)
        kb_history_offer(h, w, p, ++h->gen);
    kb_history_unlock_wake(h);
    return w;
}

void kb_history_unwatch(kb_history_watcher_t *w) {
    if (!w)
        return;
    kb_history_t *h = w->h;
    pthread_mutex_lock(&h->mtx);
    kb_history_unfile(h, w);
    for (size_t i = 0; i < h->n_wake; i++) /* (none: every append signals before it returns) */
        if (h->wake[i] == w)
            h->wake[i] = h->wake[--h->n_wake];
    pthread_mutex_unlock(&h->mtx);
    pthread_mutex_lock(&h->sig_mtx); /* an append signalling w (noted before it was unfiled) is done */
    pthread_mutex_unlock(&h->sig_mtx);
    pthread_cond_destroy(&w->cond);
    free(w->q);
    free(w->term);
    free(w);
}

/* Whether w lost changes. Caller holds mtx. */
static bool kb_history_lost_locked(const kb_history_t *h, const kb_history_watcher_t *w) {
    return w->lost || (w->q_len && w->q[w->q_head].pos < h->first);
}

int kb_history_watcher_next(kb_history_watcher_t *w, int wait_ms, kb_history_entry_t *out, kb_event_type_t *type) {
    kb_history_t *h = w->h;
    pthread_mutex_lock(&h->mtx);
    if (!w->q_len && !w->lost && !w->kicked && wait_ms > 0) {
        struct timespec dl = kb_deadline_mono(wait_ms);
        w->waiting = true;
        pthread_cond_timedwait(&w->cond, &h->mtx, &dl);
        w->waiting = false;
    }
    w->kicked = false;
    int r = 0;
    if (kb_history_lost_locked(h, w)) {
        w->lost = true;
        r = -1;
    } else if (w->q_len) {
        kb_hq_item_t it = w->q[w->q_head];
        w->q_head = (w->q_head + 1) % w->q_cap;
        w->q_len--;
        const kb_hslot_t *s = &h->ring[it.pos % h->cap];
        kb_history_view(s, out);
        kb_event_ref(out->ev);
        out->prev_ref = kb_hl_ref(s->prev);
        out->now_ref = kb_hl_ref(s->now);
        *type = it.type;
        r = 1;
    } else if (w->notify) {
        w->waiting = true; /* read to empty: the next change queued for it calls notify */
    }
    pthread_mutex_unlock(&h->mtx);
    return r;
}

void kb_history_watcher_wake(kb_history_watcher_t *w) {
    pthread_mutex_lock(&w->h->mtx);
    w->kicked = true;
    kb_history_signal(w->h, w);
    kb_history_unlock_wake(w->h);
}

bool kb_history_watcher_lost(kb_history_watcher_t *w) {
    pthread_mutex_lock(&w->h->mtx);
    bool lost = kb_history_lost_locked(w->h, w);
    pthread_mutex_unlock(&w->h->mtx);
    return lost;
}

bool kb_history_watcher_rv(kb_history_watcher_t *w, char *rv, size_t rv_size) {
    kb_history_t *h = w->h;
    char cut[64];
    uint64_t seq = 0;
    kb_informer_cut(h->inf, NULL, NULL, cut, sizeof(cut), &seq);
    /* Every event up to seq was appended and dispatched before the cut
     * returned (the subscriber runs inside the ingest lock the cut took). */
    pthread_mutex_lock(&h->mtx);
    kb_history_note_rv(h, cut, kb_rv_parse(cut, strlen(cut)));
    bool caught_up = !w->q_len && !w->lost && h->rv[0];
    if (caught_up)
        snprintf(rv, rv_size, "%s", h->rv);
    pthread_mutex_unlock(&h->mtx);
    return caught_up;
}

size_t kb_history_watcher_queued(kb_history_watcher_t *w) {
    pthread_mutex_lock(&w->h->mtx);
    size_t n = w->q_len;
    pthread_mutex_unlock(&w->h->mtx);
    return n;
}

void kb_history_watcher_index(kb_history_watcher_t *w, char *out, size_t out_size) {
    kb_history_t *h = w->h;
    pthread_mutex_lock(&h->mtx);
    if (w->dim < 0) {
        snprintf(out, out_size, "*");
    } else {
        const kb_hdim_t *d = &h->dims[w->dim];
        int vl = (int)(w->term_len - 1);
        if (d->kind == KB_HDIM_NS)
            snprintf(out, out_size, "ns=%.*s", vl, w->term + 1);
        else if (d->kind == KB_HDIM_FIELD)
            snprintf(out, out_size, "field#%d=%.*s", d->field, vl, w->term + 1);
        else
            snprintf(out, out_size, "label:%s=%.*s", d->label, vl, w->term + 1);
    }
    pthread_mutex_unlock(&h->mtx);
}

uint64_t kb_history_wakeups(kb_history_t *h) {
    return atomic_load(&h->wakeups);
}
