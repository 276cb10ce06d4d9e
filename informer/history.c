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
 */
#include "informer/history.h"

#include "common/alloc.h"
#include "common/fieldsel.h"
#include "common/hash.h"
#include "common/strmap.h"
#include "common/time.h"

#include <stdatomic.h>
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
} kb_hslot_t;

struct kb_history {
    kb_informer_t *inf;
    const kb_fields_kind_t *kind; /* the informer's resource: which fields a record holds */
    pthread_mutex_t mtx;
    pthread_cond_t cond;
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
};

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

/* The blob of full (labels and, when the kind has any, its field record): an
 * event with its object readable (a subscriber's, or one of a kb_informer_cut). */
static kb_history_labels_t *kb_hl_of(const kb_history_t *h, const kb_event_t *full) {
    kb_buf_t rec;
    kb_buf_init(&rec);
    if (kb_fields_kind_has_own(h->kind) && full->obj_len)
        kb_fields_extract(h->kind, full->obj, full->obj_len, &rec);
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
        if (old->ev->rv_num > h->floor_rv)
            h->floor_rv = old->ev->rv_num;
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
    if ((ev->rv_num <= h->rv_num || ev->final_state_unknown) && h->floor_rv <= h->rv_num)
        h->floor_rv = h->rv_num + 1;
    kb_hslot_t *s = &h->ring[h->next % h->cap];
    s->ev = kb_event_ref(ev);
    s->now = now ? now : kb_hl_of(h, ev);
    s->prev = kb_history_swap_labels(h, ev, kb_hl_ref(s->now));
    h->next++;
    kb_history_note_rv(h, ev->rv, ev->rv_num);
    pthread_cond_broadcast(&h->cond);
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
    pthread_mutex_unlock(&h->mtx);
}

kb_history_t *kb_history_new(kb_informer_t *inf, size_t capacity) {
    KB_ASSERT(capacity >= 1);
    kb_history_t *h = kb_calloc(1, sizeof(*h));
    h->inf = inf;
    h->kind = kb_fields_kind(kb_informer_conf(inf)->group, kb_informer_conf(inf)->resource);
    h->cap = capacity;
    h->ring = kb_calloc(capacity, sizeof(*h->ring));
    h->labels = kb_strmap_new(1024);
    kb_event_list_init(&h->parked);
    pthread_mutex_init(&h->mtx, NULL);
    kb_cond_init_mono(&h->cond);
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
    pthread_mutex_unlock(&h->mtx);
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
    kb_event_list_fini(&h->parked);
    pthread_cond_destroy(&h->cond);
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
        while (p < h->next && h->ring[p % h->cap].ev->rv_num <= rv)
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

int kb_history_next(kb_history_t *h, uint64_t *pos, int wait_ms, kb_history_entry_t *out) {
    pthread_mutex_lock(&h->mtx);
    if (*pos >= h->next && wait_ms > 0) {
        struct timespec dl = kb_deadline_mono(wait_ms);
        pthread_cond_timedwait(&h->cond, &h->mtx, &dl);
    }
    int r = 0;
    if (*pos < h->first) {
        r = -1;
    } else if (*pos < h->next) {
        kb_hslot_t *s = &h->ring[*pos % h->cap];
        out->ev = kb_event_ref(s->ev);
        out->prev_ref = kb_hl_ref(s->prev);
        out->prev_exists = s->prev != NULL;
        out->prev_labels = s->prev ? s->prev->s : NULL;
        out->prev_labels_len = s->prev ? s->prev->len : 0;
        out->prev_fields = s->prev ? s->prev->s + s->prev->len + 1 : NULL;
        out->prev_fields_len = s->prev ? s->prev->flen : 0;
        out->now_ref = kb_hl_ref(s->now);
        out->fields = s->now->s + s->now->len + 1;
        out->fields_len = s->now->flen;
        (*pos)++;
        r = 1;
    }
    pthread_mutex_unlock(&h->mtx);
    return r;
}

bool kb_history_rv(kb_history_t *h, uint64_t pos, char *rv, size_t rv_size) {
    char cut[64];
    uint64_t seq = 0;
    kb_informer_cut(h->inf, NULL, NULL, cut, sizeof(cut), &seq);
    /* Every event up to seq was appended before the cut returned (the
     * subscriber runs inside the ingest lock the cut took). */
    pthread_mutex_lock(&h->mtx);
    kb_history_note_rv(h, cut, kb_rv_parse(cut, strlen(cut)));
    bool caught_up = pos >= h->next && h->rv[0];
    if (caught_up)
        snprintf(rv, rv_size, "%s", h->rv);
    pthread_mutex_unlock(&h->mtx);
    return caught_up;
}

uint64_t kb_history_oldest(kb_history_t *h) {
    pthread_mutex_lock(&h->mtx);
    uint64_t first = h->first;
    pthread_mutex_unlock(&h->mtx);
    return first;
}

void kb_history_stats(kb_history_t *h, uint64_t *floor_rv, size_t *entries) {
    pthread_mutex_lock(&h->mtx);
    *floor_rv = h->floor_rv;
    *entries = (size_t)(h->next - h->first);
    pthread_mutex_unlock(&h->mtx);
}
