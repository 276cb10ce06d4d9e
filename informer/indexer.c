/* informer/indexer.c — the informer's cache, striped, with a namespace index
 * and label indexes (see indexer.h).
 *
 * Design: the key space is split into a power-of-two number of stripes by
 * key hash; each stripe is a table key → entry under its own rwlock, so
 * readers of different keys never contend and a full listing only
 * read-locks one stripe at a time. A stripe's table (kb_ix_tab_t) holds the
 * key's hash and the entry, 16 bytes a slot: the key is compared in the
 * entry's event, never copied (a strmap's slot and key copy cost about 110
 * bytes per cached object at a million). Its homes mix every bit of the
 * hash: some of them chose the stripe, so all keys of a stripe share those.
 *
 * The namespace index is a strmap ns → set, and each label index a strmap
 * "key=value" → set (all configured keys share one map: a key has no '='),
 * where a set holds kb_event_t* (borrowed: the stripe owns the reference),
 * hashed by the event's key hash and compared by pointer — eight bytes a
 * slot, no second copy of the key. They sit under one mutex taken after a
 * stripe's write lock (order: stripe → index), and are updated in the same
 * critical section as the stripe, before the replaced event is released. So while a lister holds
 * ix_mtx every pointer in a set is still owned by a stripe, and it can take
 * its own references without going back to the stripes (which would invert
 * the lock order). Empty sets are removed at once, so churn does not leak.
 *
 * What an entry was filed under must be known to unfile it later, and the
 * entry may not carry readable labels (a thin or compressed event), so the
 * caller hands the labels in with the put. Without label keys a stripe value
 * is the event itself: no per-entry cost. With them it is a kb_ix_entry_t:
 * the event and the "key=value\0" strings of the configured keys the object
 * had (one block of the indexer's slab, tens of bytes: common/slab.h, so a
 * million of them cost no malloc header each and their churn stays out of
 * the general heap) — never a copy of all its labels. A
 * put or delete hands the replaced entry's filing back with the old event
 * (kb_indexer_old_t), so undoing a failed batch puts it back exactly, even
 * though the old event's own labels are not readable.
 *
 * Byte accounting: each stripe keeps the kb_event_size sum of its entries
 * plus their filings; kb_indexer_bytes adds the strmaps' and the sets' own
 * memory. Strmaps shrink back to their initial size when emptied and empty
 * sets are freed, so an emptied indexer is back to its starting size.
 *
 * Events are released (kb_event_unref) only after every lock is dropped.
 */
#include "informer/indexer.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/slab.h"
#include "common/strmap.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define KB_INDEXER_DEFAULT_STRIPES 16u
/* Label filings up to this size come from the indexer's slab. */
#define KB_IX_FILING_SLAB_MAX 1024u

/* One slot of a stripe's table: v NULL marks an empty one. */
typedef struct kb_ix_slot {
    uint64_t hash;         /* the key's kb_fnv1a64 (ev->key_hash) */
    void *v;               /* the entry: kb_event_t*, or kb_ix_entry_t* with label keys */
} kb_ix_slot_t;

/* Open addressing, linear probing, load at most 3/4, backward-shift
 * deletion, shrinking below 1/8 full (down to KB_IX_TAB_MIN). */
typedef struct kb_ix_tab {
    kb_ix_slot_t *slot;    /* cap of them */
    size_t cap;            /* power of two */
    size_t n;
} kb_ix_tab_t;

#define KB_IX_TAB_MIN 8u

typedef struct kb_stripe {
    pthread_rwlock_t lock; /* guards the two fields below */
    kb_ix_tab_t tab;       /* key → entry */
    size_t ev_bytes;       /* kb_event_size sum of the entries, plus their filings */
} kb_stripe_t;

/* An entry when labels are indexed: the event and what it is filed under. */
typedef struct kb_ix_entry {
    kb_event_t *ev;        /* the one reference the stripe owns */
    uint32_t filed_len;    /* bytes of filed */
    char filed[];          /* "key=value\0" per configured key the object has, in key order */
} kb_ix_entry_t;

struct kb_indexer {
    unsigned nstripes;     /* power of two */
    kb_stripe_t *stripes;  /* nstripes of them, indexed by kb_stripe_of (the hash's high half) */
    char **label_keys;     /* the configured keys (owned), n_label_keys of them */
    size_t n_label_keys;   /* 0: stripe values are bare events, no label index */
    kb_slab_t *filings;    /* the kb_ix_entry_t blocks (NULL without label keys); own lock */
    pthread_mutex_t ix_mtx;/* guards by_ns, by_label and every set in them; taken after a stripe lock */
    kb_strmap_t *by_ns;    /* namespace → kb_ix_set_t* of kb_event_t* (borrowed) */
    kb_strmap_t *by_label; /* "key=value" → kb_ix_set_t* of kb_event_t* (borrowed) */
    _Atomic uint64_t st_queries, st_by_label, st_by_ns, st_candidates, st_last;
};

static bool kb_ix_has_key(const kb_indexer_t *idx, const char *key) {
    for (size_t i = 0; i < idx->n_label_keys; i++)
        if (!strcmp(idx->label_keys[i], key))
            return true;
    return false;
}

static void kb_ix_tab_init(kb_ix_tab_t *t);

kb_indexer_t *kb_indexer_new(unsigned stripes, const char *const *label_keys, size_t n_label_keys) {
    unsigned n = 1;
    while (n < (stripes ? stripes : KB_INDEXER_DEFAULT_STRIPES))
        n *= 2;
    kb_indexer_t *idx = kb_calloc(1, sizeof(*idx));
    idx->nstripes = n;
    idx->stripes = kb_calloc(n, sizeof(*idx->stripes));
    for (unsigned i = 0; i < n; i++) {
        pthread_rwlock_init(&idx->stripes[i].lock, NULL);
        kb_ix_tab_init(&idx->stripes[i].tab);
    }
    pthread_mutex_init(&idx->ix_mtx, NULL);
    idx->by_ns = kb_strmap_new(0);
    idx->by_label = kb_strmap_new(0);
    KB_ASSERT(n_label_keys <= KB_INDEXER_MAX_LABELS);
    idx->label_keys = kb_calloc(n_label_keys ? n_label_keys : 1, sizeof(char *));
    for (size_t i = 0; i < n_label_keys; i++)
        if (label_keys[i][0] && !kb_ix_has_key(idx, label_keys[i]))
            idx->label_keys[idx->n_label_keys++] = kb_strdup(label_keys[i]);
    if (idx->n_label_keys)
        idx->filings = kb_slab_new(KB_IX_FILING_SLAB_MAX);
    return idx;
}

typedef struct kb_ix_set kb_ix_set_t;
static void kb_ix_set_free(kb_ix_set_t *set);

/* The event of a stripe value. */
static kb_event_t *kb_ix_ev(const kb_indexer_t *idx, void *v) {
    return idx->n_label_keys ? ((kb_ix_entry_t *)v)->ev : v;
}

/* Bytes a stripe value costs beyond its event. */
static size_t kb_ix_extra(const kb_indexer_t *idx, const void *v) {
    return idx->n_label_keys ? sizeof(kb_ix_entry_t) + ((const kb_ix_entry_t *)v)->filed_len : 0;
}

static size_t kb_ix_size(const kb_indexer_t *idx, void *v) {
    return kb_event_size(kb_ix_ev(idx, v)) + kb_ix_extra(idx, v);
}

/* Release a stripe value (NULL is a no-op). Call without locks. */
static void kb_ix_release(const kb_indexer_t *idx, void *v) {
    if (!v)
        return;
    kb_event_unref(kb_ix_ev(idx, v));
    if (idx->n_label_keys)
        kb_slab_free(idx->filings, v, kb_ix_extra(idx, v));
}

/* --- a stripe's table (its lock held) ------------------------------------ */

static void kb_ix_tab_init(kb_ix_tab_t *t) {
    t->cap = KB_IX_TAB_MIN;
    t->n = 0;
    t->slot = kb_calloc(t->cap, sizeof(*t->slot));
}

/* The hash times 2^64/φ, bits 32 and up: they depend on every bit below
 * them, so whichever bits chose the stripe, its keys do not share homes. */
static size_t kb_ix_tab_home(uint64_t hash, size_t cap) {
    return (size_t)((hash * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (cap - 1);
}

/* The slot holding key, or the empty slot where it would go. */
static size_t kb_ix_tab_find(const kb_indexer_t *idx, const kb_ix_tab_t *t, const char *key, size_t len,
                             uint64_t hash) {
    size_t mask = t->cap - 1;
    for (size_t i = kb_ix_tab_home(hash, t->cap);; i = (i + 1) & mask) {
        const kb_ix_slot_t *sl = &t->slot[i];
        if (!sl->v)
            return i;
        if (sl->hash == hash) {
            const kb_event_t *ev = kb_ix_ev(idx, sl->v);
            if (ev->key_len == len && !memcmp(ev->key, key, len))
                return i;
        }
    }
}

static void kb_ix_tab_resize(kb_ix_tab_t *t, size_t cap) {
    kb_ix_slot_t *slot = kb_calloc(cap, sizeof(*slot));
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slot[i].v)
            continue;
        size_t j = kb_ix_tab_home(t->slot[i].hash, cap);
        while (slot[j].v)
            j = (j + 1) & (cap - 1);
        slot[j] = t->slot[i];
    }
    free(t->slot);
    t->slot = slot;
    t->cap = cap;
}

static void *kb_ix_tab_get(const kb_indexer_t *idx, const kb_ix_tab_t *t, const char *key, size_t len,
                           uint64_t hash) {
    return t->slot[kb_ix_tab_find(idx, t, key, len, hash)].v;
}

/* Make v (whose event has the key) the entry of its key: the one it replaces, or NULL. */
static void *kb_ix_tab_put(const kb_indexer_t *idx, kb_ix_tab_t *t, void *v) {
    const kb_event_t *ev = kb_ix_ev(idx, v);
    size_t i = kb_ix_tab_find(idx, t, ev->key, ev->key_len, ev->key_hash);
    void *prev = t->slot[i].v;
    if (!prev && (t->n + 1) * 4 > t->cap * 3) {
        kb_ix_tab_resize(t, t->cap * 2);
        i = kb_ix_tab_find(idx, t, ev->key, ev->key_len, ev->key_hash);
    }
    t->slot[i].hash = ev->key_hash;
    t->slot[i].v = v;
    t->n += prev == NULL;
    return prev;
}

/* Take key's entry out: it, or NULL. */
static void *kb_ix_tab_del(const kb_indexer_t *idx, kb_ix_tab_t *t, const char *key, size_t len, uint64_t hash) {
    size_t mask = t->cap - 1, i = kb_ix_tab_find(idx, t, key, len, hash);
    void *v = t->slot[i].v;
    if (!v)
        return NULL;
    t->slot[i].v = NULL;
    t->n--;
    /* Knuth's algorithm R, as the sets below. */
    for (size_t j = (i + 1) & mask; t->slot[j].v; j = (j + 1) & mask) {
        size_t k = kb_ix_tab_home(t->slot[j].hash, t->cap);
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            t->slot[i] = t->slot[j];
            t->slot[j].v = NULL;
            i = j;
        }
    }
    if (t->cap > KB_IX_TAB_MIN && t->n * 8 < t->cap)
        kb_ix_tab_resize(t, t->cap / 2);
    return v;
}

static size_t kb_ix_tab_memory(const kb_ix_tab_t *t) {
    return t->cap * sizeof(*t->slot);
}

static void kb_ix_destroy_sets(kb_strmap_t *m) {
    size_t pos = 0;
    void *set;
    while (kb_strmap_next(m, &pos, NULL, NULL, &set))
        kb_ix_set_free(set);
    kb_strmap_destroy(m);
}

void kb_indexer_destroy(kb_indexer_t *idx) {
    if (!idx)
        return;
    for (unsigned i = 0; i < idx->nstripes; i++) {
        kb_stripe_t *s = &idx->stripes[i];
        for (size_t j = 0; j < s->tab.cap; j++)
            kb_ix_release(idx, s->tab.slot[j].v);
        free(s->tab.slot);
        pthread_rwlock_destroy(&s->lock);
    }
    kb_ix_destroy_sets(idx->by_ns);
    kb_ix_destroy_sets(idx->by_label);
    kb_slab_destroy(idx->filings);
    pthread_mutex_destroy(&idx->ix_mtx);
    for (size_t i = 0; i < idx->n_label_keys; i++)
        free(idx->label_keys[i]);
    free(idx->label_keys);
    free(idx->stripes);
    free(idx);
}

/* The stripe takes its bits from the high half of the hash: a stripe's map
 * places keys by the low bits, and if the stripe had taken those too, every
 * key of a stripe would share them — with 16 stripes only one slot in 16 a
 * home, runs of 4-5 slots probed per lookup instead of 1.3. */
static kb_stripe_t *kb_stripe_of(kb_indexer_t *idx, uint64_t hash) {
    return &idx->stripes[(hash >> 32) & (idx->nstripes - 1)];
}

/* --- sets (ix_mtx held) ---------------------------------------------------- */

/* A set of cache entries: open addressing by the event's key hash, compared
 * by pointer (the stripe owns the events), linear probing, load at most 3/4,
 * backward-shift deletion, shrinking below 1/8 full. Eight bytes a slot:
 * a strmap would copy every key once more per index. */
struct kb_ix_set {
    kb_event_t **slot; /* cap of them, NULL = empty; an event's home is key_hash & (cap - 1) */
    size_t cap;        /* power of two, at least KB_IX_SET_MIN */
    size_t n;
};

#define KB_IX_SET_MIN 4u

static kb_ix_set_t *kb_ix_set_new(void) {
    kb_ix_set_t *set = kb_calloc(1, sizeof(*set));
    set->cap = KB_IX_SET_MIN;
    set->slot = kb_calloc(set->cap, sizeof(*set->slot));
    return set;
}

static void kb_ix_set_free(kb_ix_set_t *set) {
    free(set->slot);
    free(set);
}

static void kb_ix_set_place(kb_event_t **slot, size_t cap, kb_event_t *ev) {
    size_t i = ev->key_hash & (cap - 1);
    while (slot[i])
        i = (i + 1) & (cap - 1);
    slot[i] = ev;
}

static void kb_ix_set_resize(kb_ix_set_t *set, size_t cap) {
    kb_event_t **slot = kb_calloc(cap, sizeof(*slot));
    for (size_t i = 0; i < set->cap; i++)
        if (set->slot[i])
            kb_ix_set_place(slot, cap, set->slot[i]);
    free(set->slot);
    set->slot = slot;
    set->cap = cap;
}

/* The slot holding ev, or SIZE_MAX. */
static size_t kb_ix_set_find(const kb_ix_set_t *set, const kb_event_t *ev) {
    size_t mask = set->cap - 1;
    for (size_t i = ev->key_hash & mask; set->slot[i]; i = (i + 1) & mask)
        if (set->slot[i] == ev)
            return i;
    return SIZE_MAX;
}

static void kb_ix_set_insert(kb_ix_set_t *set, kb_event_t *ev) {
    KB_ASSERT(kb_ix_set_find(set, ev) == SIZE_MAX);
    if ((set->n + 1) * 4 > set->cap * 3)
        kb_ix_set_resize(set, set->cap * 2);
    kb_ix_set_place(set->slot, set->cap, ev);
    set->n++;
}

static void kb_ix_set_remove(kb_ix_set_t *set, const kb_event_t *ev) {
    size_t i = kb_ix_set_find(set, ev), mask = set->cap - 1;
    if (i == SIZE_MAX)
        return;
    set->slot[i] = NULL;
    set->n--;
    /* Knuth's algorithm R: move back each later entry of the run whose home
     * is not cyclically in (i, j], so every entry stays reachable. */
    for (size_t j = (i + 1) & mask; set->slot[j]; j = (j + 1) & mask) {
        size_t k = set->slot[j]->key_hash & mask;
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            set->slot[i] = set->slot[j];
            set->slot[j] = NULL;
            i = j;
        }
    }
    if (set->cap > KB_IX_SET_MIN && set->n * 8 < set->cap)
        kb_ix_set_resize(set, set->cap / 2);
}

static size_t kb_ix_set_memory(const kb_ix_set_t *set) {
    return sizeof(*set) + set->cap * sizeof(*set->slot);
}

/* File ev in the set called name of m (made when missing), in prev's place if
 * prev (the entry ev replaces: the same key, so the same home) is in it. */
static void kb_ix_file_in(kb_strmap_t *m, const char *name, size_t len, const kb_event_t *prev, kb_event_t *ev) {
    uint64_t h = kb_fnv1a64(name, len);
    kb_ix_set_t *set = kb_strmap_get(m, name, len, h);
    if (!set) {
        set = kb_ix_set_new();
        kb_strmap_put(m, name, len, h, set);
    }
    size_t at = prev ? kb_ix_set_find(set, prev) : SIZE_MAX;
    if (at != SIZE_MAX)
        set->slot[at] = ev;
    else
        kb_ix_set_insert(set, ev);
}

/* Take ev out of the set called name; an emptied set goes at once. */
static void kb_ix_unfile_from(kb_strmap_t *m, const char *name, size_t len, const kb_event_t *ev) {
    uint64_t h = kb_fnv1a64(name, len);
    kb_ix_set_t *set = kb_strmap_get(m, name, len, h);
    if (!set)
        return;
    kb_ix_set_remove(set, ev);
    if (set->n == 0) {
        kb_strmap_del(m, name, len, h);
        kb_ix_set_free(set);
    }
}

static const kb_ix_set_t *kb_ix_set_of(const kb_strmap_t *m, const char *name, size_t len) {
    return kb_strmap_get(m, name, len, kb_fnv1a64(name, len));
}

static size_t kb_ix_set_count(const kb_strmap_t *m, const char *name, size_t len) {
    const kb_ix_set_t *set = kb_ix_set_of(m, name, len);
    return set ? set->n : 0;
}

static bool kb_same_ns(const kb_event_t *a, const kb_event_t *b) {
    return a->ns_len == b->ns_len && !memcmp(a->ns, b->ns, a->ns_len);
}

/* --- label filings -------------------------------------------------------- */

/* Is "key=value" s one of e's filings? */
static bool kb_ix_filed_has(const kb_ix_entry_t *e, const char *s, size_t len) {
    for (const char *p = e->filed; p < e->filed + e->filed_len; p += strlen(p) + 1)
        if (strlen(p) == len && !memcmp(p, s, len))
            return true;
    return false;
}

/* File e's event under each of its label strings, in place of prev's where
 * prev (the entry e replaces, or NULL) is filed too (ix_mtx held). */
static void kb_ix_file(kb_indexer_t *idx, const kb_ix_entry_t *e, const kb_ix_entry_t *prev) {
    for (const char *p = e->filed; p < e->filed + e->filed_len; p += strlen(p) + 1)
        kb_ix_file_in(idx->by_label, p, strlen(p), prev ? prev->ev : NULL, e->ev);
}

/* Unfile prev's strings that next is not filed under (next NULL: all of them). */
static void kb_ix_unfile(kb_indexer_t *idx, const kb_ix_entry_t *prev, const kb_ix_entry_t *next) {
    for (const char *p = prev->filed; p < prev->filed + prev->filed_len; p += strlen(p) + 1)
        if (!next || !kb_ix_filed_has(next, p, strlen(p)))
            kb_ix_unfile_from(idx->by_label, p, strlen(p), prev->ev);
}

/* The stripe value for ev: its filing under the configured keys labels has. */
static kb_ix_entry_t *kb_ix_entry_new(const kb_indexer_t *idx, kb_event_t *ev, const char *labels, size_t len) {
    const char *val[KB_INDEXER_MAX_LABELS];
    size_t vlen[KB_INDEXER_MAX_LABELS];
    bool has[KB_INDEXER_MAX_LABELS];
    size_t total = 0;
    for (size_t i = 0; i < idx->n_label_keys; i++) {
        has[i] = labels && len && kb_selector_label(labels, len, idx->label_keys[i], &val[i], &vlen[i]);
        if (has[i])
            total += strlen(idx->label_keys[i]) + 1 + vlen[i] + 1;
    }
    KB_ASSERT(total <= UINT32_MAX);
    kb_ix_entry_t *e = kb_slab_alloc(idx->filings, sizeof(*e) + total);
    e->ev = ev;
    e->filed_len = (uint32_t)total;
    char *w = e->filed;
    for (size_t i = 0; i < idx->n_label_keys; i++) {
        if (!has[i])
            continue;
        size_t kl = strlen(idx->label_keys[i]);
        memcpy(w, idx->label_keys[i], kl);
        w[kl] = '=';
        memcpy(w + kl + 1, val[i], vlen[i]);
        w[kl + 1 + vlen[i]] = '\0';
        w += kl + vlen[i] + 2;
    }
    return e;
}

/* --- entries --------------------------------------------------------------- */

/* Make v (owning its event's reference) the stripe value of its key and file
 * it; returns the value it replaced, unfiled (or NULL). */
static void *kb_ix_store(kb_indexer_t *idx, void *v) {
    kb_event_t *ev = kb_ix_ev(idx, v);
    kb_stripe_t *s = kb_stripe_of(idx, ev->key_hash);
    pthread_rwlock_wrlock(&s->lock);
    void *prev = kb_ix_tab_put(idx, &s->tab, v);
    s->ev_bytes += kb_ix_size(idx, v);
    if (prev)
        s->ev_bytes -= kb_ix_size(idx, prev);
    kb_event_t *pev = prev ? kb_ix_ev(idx, prev) : NULL;
    pthread_mutex_lock(&idx->ix_mtx);
    /* The namespace is part of the key, so it cannot change; be safe anyway. */
    if (pev && !kb_same_ns(pev, ev))
        kb_ix_unfile_from(idx->by_ns, pev->ns, pev->ns_len, pev);
    kb_ix_file_in(idx->by_ns, ev->ns, ev->ns_len, pev, ev);
    if (idx->n_label_keys) {
        kb_ix_file(idx, v, prev); /* in prev's place in the sets both are in */
        if (prev)
            kb_ix_unfile(idx, prev, v);
    }
    pthread_mutex_unlock(&idx->ix_mtx);
    pthread_rwlock_unlock(&s->lock);
    return prev;
}

/* Hand a replaced stripe value to *old, or release it. Call without locks. */
static void kb_ix_hand_back(kb_indexer_t *idx, void *prev, kb_indexer_old_t *old) {
    if (!old) {
        kb_ix_release(idx, prev);
        return;
    }
    old->ev = prev ? kb_ix_ev(idx, prev) : NULL;
    old->filed = idx->n_label_keys ? prev : NULL;
    old->idx = idx;
}

void kb_indexer_put(kb_indexer_t *idx, kb_event_t *ev, const char *labels, size_t labels_len,
                    kb_indexer_old_t *old) {
    kb_event_ref(ev);
    void *v = idx->n_label_keys ? (void *)kb_ix_entry_new(idx, ev, labels, labels_len) : (void *)ev;
    kb_ix_hand_back(idx, kb_ix_store(idx, v), old);
}

void kb_indexer_restore(kb_indexer_t *idx, kb_indexer_old_t *old) {
    KB_ASSERT(old->ev);
    KB_ASSERT(!idx->n_label_keys || (old->filed && ((kb_ix_entry_t *)old->filed)->ev == old->ev));
    void *v = idx->n_label_keys ? old->filed : (void *)old->ev;
    old->ev = NULL;
    old->filed = NULL;
    kb_ix_release(idx, kb_ix_store(idx, v));
}

void kb_indexer_old_release(kb_indexer_old_t *old) {
    if (!old)
        return;
    kb_event_unref(old->ev);
    if (old->filed) /* its event pointer was old->ev's */
        kb_slab_free(old->idx->filings, old->filed, kb_ix_extra(old->idx, old->filed));
    old->ev = NULL;
    old->filed = NULL;
}

bool kb_indexer_swap(kb_indexer_t *idx, kb_event_t *cur, kb_event_t *repl) {
    KB_ASSERT(cur->key_hash == repl->key_hash && cur->key_len == repl->key_len &&
              !memcmp(cur->key, repl->key, cur->key_len));
    kb_stripe_t *s = kb_stripe_of(idx, cur->key_hash);
    pthread_rwlock_wrlock(&s->lock);
    void *v = kb_ix_tab_get(idx, &s->tab, cur->key, cur->key_len, cur->key_hash);
    bool swapped = v && kb_ix_ev(idx, v) == cur;
    if (swapped) {
        kb_event_ref(repl);
        s->ev_bytes += kb_event_size(repl);
        s->ev_bytes -= kb_event_size(cur);
        pthread_mutex_lock(&idx->ix_mtx);
        /* Same key, same filing: repl takes cur's slot in each set. */
        kb_ix_file_in(idx->by_ns, cur->ns, cur->ns_len, cur, repl);
        if (idx->n_label_keys) {
            kb_ix_entry_t *e = v;
            for (const char *p = e->filed; p < e->filed + e->filed_len; p += strlen(p) + 1)
                kb_ix_file_in(idx->by_label, p, strlen(p), cur, repl);
            e->ev = repl;
        } else {
            kb_ix_tab_put(idx, &s->tab, repl);
        }
        pthread_mutex_unlock(&idx->ix_mtx);
    }
    pthread_rwlock_unlock(&s->lock);
    if (swapped)
        kb_event_unref(cur);
    return swapped;
}

bool kb_indexer_delete(kb_indexer_t *idx, const char *key, size_t len, uint64_t hash, kb_indexer_old_t *old) {
    kb_stripe_t *s = kb_stripe_of(idx, hash);
    pthread_rwlock_wrlock(&s->lock);
    void *prev = kb_ix_tab_del(idx, &s->tab, key, len, hash);
    if (prev) {
        kb_event_t *pev = kb_ix_ev(idx, prev);
        s->ev_bytes -= kb_ix_size(idx, prev);
        pthread_mutex_lock(&idx->ix_mtx);
        kb_ix_unfile_from(idx->by_ns, pev->ns, pev->ns_len, pev);
        if (idx->n_label_keys)
            kb_ix_unfile(idx, prev, NULL);
        pthread_mutex_unlock(&idx->ix_mtx);
    }
    pthread_rwlock_unlock(&s->lock);
    kb_ix_hand_back(idx, prev, old);
    return prev != NULL;
}

kb_event_t *kb_indexer_get(kb_indexer_t *idx, const char *key, size_t len, uint64_t hash) {
    kb_stripe_t *s = kb_stripe_of(idx, hash);
    pthread_rwlock_rdlock(&s->lock);
    void *v = kb_ix_tab_get(idx, &s->tab, key, len, hash);
    kb_event_t *ev = v ? kb_event_ref(kb_ix_ev(idx, v)) : NULL;
    pthread_rwlock_unlock(&s->lock);
    return ev;
}

size_t kb_indexer_count(kb_indexer_t *idx) {
    size_t n = 0;
    for (unsigned i = 0; i < idx->nstripes; i++) {
        kb_stripe_t *s = &idx->stripes[i];
        pthread_rwlock_rdlock(&s->lock);
        n += s->tab.n;
        pthread_rwlock_unlock(&s->lock);
    }
    return n;
}

/* A map of sets and the sets' own memory (ix_mtx held). */
static size_t kb_ix_sets_memory(const kb_strmap_t *m) {
    size_t n = kb_strmap_memory(m);
    size_t pos = 0;
    void *set;
    while (kb_strmap_next(m, &pos, NULL, NULL, &set))
        n += kb_ix_set_memory(set);
    return n;
}

size_t kb_indexer_bytes(kb_indexer_t *idx) {
    size_t n = sizeof(*idx) + idx->nstripes * sizeof(*idx->stripes);
    for (unsigned i = 0; i < idx->nstripes; i++) {
        kb_stripe_t *s = &idx->stripes[i];
        pthread_rwlock_rdlock(&s->lock);
        n += s->ev_bytes + kb_ix_tab_memory(&s->tab);
        pthread_rwlock_unlock(&s->lock);
    }
    pthread_mutex_lock(&idx->ix_mtx);
    n += kb_ix_sets_memory(idx->by_ns) + kb_ix_sets_memory(idx->by_label);
    pthread_mutex_unlock(&idx->ix_mtx);
    return n;
}

size_t kb_indexer_label_keys(const kb_indexer_t *idx, const char *const **keys) {
    *keys = (const char *const *)idx->label_keys;
    return idx->n_label_keys;
}

/* --- listing --------------------------------------------------------------- */

void kb_event_list_init(kb_event_list_t *l) {
    l->ev = NULL;
    l->n = 0;
    l->cap = 0;
}

void kb_event_list_push(kb_event_list_t *l, kb_event_t *ev) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->ev = kb_realloc(l->ev, l->cap * sizeof(*l->ev));
    }
    l->ev[l->n++] = ev;
}

void kb_event_list_fini(kb_event_list_t *l) {
    for (size_t i = 0; i < l->n; i++)
        kb_event_unref(l->ev[i]);
    free(l->ev);
    kb_event_list_init(l);
}

/* Append a reference to every event of set (ix_mtx held; NULL: none), of namespace ns only when not NULL. */
static void kb_ix_list_set(const kb_ix_set_t *set, const char *ns, size_t ns_len, kb_event_list_t *out) {
    for (size_t i = 0; set && i < set->cap; i++) {
        kb_event_t *ev = set->slot[i];
        if (ev && (!ns || (ev->ns_len == ns_len && !memcmp(ev->ns, ns, ns_len))))
            kb_event_list_push(out, kb_event_ref(ev));
    }
}

/* Every entry, a stripe at a time. */
static void kb_ix_list_all(kb_indexer_t *idx, kb_event_list_t *out) {
    for (unsigned i = 0; i < idx->nstripes; i++) {
        kb_stripe_t *s = &idx->stripes[i];
        pthread_rwlock_rdlock(&s->lock);
        for (size_t j = 0; j < s->tab.cap; j++)
            if (s->tab.slot[j].v)
                kb_event_list_push(out, kb_event_ref(kb_ix_ev(idx, s->tab.slot[j].v)));
        pthread_rwlock_unlock(&s->lock);
    }
}

void kb_indexer_list(kb_indexer_t *idx, const char *ns, kb_event_list_t *out) {
    if (!ns) {
        kb_ix_list_all(idx, out);
        return;
    }
    pthread_mutex_lock(&idx->ix_mtx);
    kb_ix_list_set(kb_ix_set_of(idx->by_ns, ns, strlen(ns)), NULL, 0, out);
    pthread_mutex_unlock(&idx->ix_mtx);
}

/* --- queries --------------------------------------------------------------- */

/* "key=value" of term value j into b. */
static void kb_ix_name(kb_buf_t *b, const char *key, const char *value) {
    kb_buf_reset(b);
    kb_buf_append_str(b, key);
    kb_buf_append_char(b, '=');
    kb_buf_append_str(b, value);
}

/* Is values[j] one of values[0..j)? ("in (a, a)" must not list a twice.) */
static bool kb_ix_repeated(const char *const *values, size_t j) {
    for (size_t i = 0; i < j; i++)
        if (!strcmp(values[i], values[j]))
            return true;
    return false;
}

/* Entries an equality term on an indexed key covers (ix_mtx held); SIZE_MAX if
 * term i is not one. */
static size_t kb_ix_term_count(kb_indexer_t *idx, const kb_selector_t *sel, size_t i, kb_buf_t *b) {
    const char *key;
    const char *const *values;
    size_t n_values;
    if (!kb_selector_equality(sel, i, &key, &values, &n_values) || !kb_ix_has_key(idx, key))
        return SIZE_MAX;
    size_t n = 0;
    for (size_t j = 0; j < n_values; j++) {
        if (kb_ix_repeated(values, j))
            continue;
        kb_ix_name(b, key, values[j]);
        n += kb_ix_set_count(idx->by_label, b->data, b->len);
    }
    return n;
}

static void kb_ix_list_term(kb_indexer_t *idx, const kb_selector_t *sel, size_t i, const char *ns,
                            kb_event_list_t *out, kb_buf_t *b) {
    const char *key;
    const char *const *values;
    size_t n_values;
    KB_ASSERT(kb_selector_equality(sel, i, &key, &values, &n_values));
    for (size_t j = 0; j < n_values; j++) {
        if (kb_ix_repeated(values, j))
            continue;
        kb_ix_name(b, key, values[j]);
        kb_ix_list_set(kb_ix_set_of(idx->by_label, b->data, b->len), ns, ns ? strlen(ns) : 0, out);
    }
}

kb_indexer_via_t kb_indexer_select(kb_indexer_t *idx, const char *ns, const kb_selector_t *sel, kb_event_list_t *out,
                                   bool *exact) {
    size_t n_req = kb_selector_count(sel);
    size_t first = out->n;
    kb_indexer_via_t via = KB_INDEXER_SCAN;
    kb_buf_t b = KB_BUF_INIT;
    pthread_mutex_lock(&idx->ix_mtx);
    size_t best = SIZE_MAX, best_n = SIZE_MAX;
    for (size_t i = 0; idx->n_label_keys && i < n_req; i++) {
        size_t n = kb_ix_term_count(idx, sel, i, &b);
        if (n < best_n) {
            best = i;
            best_n = n;
        }
    }
    size_t ns_n = ns ? kb_ix_set_count(idx->by_ns, ns, strlen(ns)) : SIZE_MAX;
    if (best != SIZE_MAX && best_n <= ns_n) {
        kb_ix_list_term(idx, sel, best, ns, out, &b);
        via = KB_INDEXER_BY_LABEL;
        *exact = n_req == 1;
    } else if (ns) {
        kb_ix_list_set(kb_ix_set_of(idx->by_ns, ns, strlen(ns)), NULL, 0, out);
        via = KB_INDEXER_BY_NS;
        *exact = n_req == 0;
    }
    pthread_mutex_unlock(&idx->ix_mtx);
    kb_buf_fini(&b);
    if (via == KB_INDEXER_SCAN) {
        kb_ix_list_all(idx, out);
        *exact = n_req == 0;
    }
    atomic_fetch_add(&idx->st_queries, 1);
    atomic_fetch_add(&idx->st_by_label, via == KB_INDEXER_BY_LABEL);
    atomic_fetch_add(&idx->st_by_ns, via == KB_INDEXER_BY_NS);
    atomic_fetch_add(&idx->st_candidates, out->n - first);
    atomic_store(&idx->st_last, out->n - first);
    return via;
}

void kb_indexer_stats(kb_indexer_t *idx, kb_indexer_stats_t *st) {
    st->queries = atomic_load(&idx->st_queries);
    st->by_label = atomic_load(&idx->st_by_label);
    st->by_ns = atomic_load(&idx->st_by_ns);
    st->candidates = atomic_load(&idx->st_candidates);
    st->last_candidates = atomic_load(&idx->st_last);
    pthread_mutex_lock(&idx->ix_mtx);
    st->label_sets = kb_strmap_count(idx->by_label);
    pthread_mutex_unlock(&idx->ix_mtx);
}
