/* informer/indexer.c — the informer's cache, striped, with a namespace index
 * (see indexer.h).
 *
 * Design: the key space is split into a power-of-two number of stripes by
 * key hash; each stripe is a strmap key → kb_event_t* (one reference owned)
 * under its own rwlock, so readers of different keys never contend and a
 * full listing only read-locks one stripe at a time.
 *
 * The namespace index is a strmap ns → set, where a set is a strmap
 * key → kb_event_t* (borrowed: the stripe owns the reference). It sits under
 * one mutex taken after a stripe's write lock (order: stripe → ns), and it
 * is updated in the same critical section as the stripe, before the
 * replaced event is released. So while a lister holds ns_mtx every pointer
 * in a set is still owned by a stripe, and it can take its own references
 * without going back to the stripes (which would invert the lock order).
 * Empty sets are removed at once, so namespace churn does not leak.
 *
 * Byte accounting: each stripe keeps the kb_event_size sum of its entries;
 * kb_indexer_bytes adds the strmaps' own memory. Strmaps shrink back to
 * their initial size when emptied, so an emptied indexer is back to its
 * starting size.
 *
 * Events are released (kb_event_unref) only after every lock is dropped.
 */
#include "informer/indexer.h"

#include "common/alloc.h"
#include "common/hash.h"
#include "common/strmap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KB_INDEXER_DEFAULT_STRIPES 16u

typedef struct kb_stripe {
    pthread_rwlock_t lock; /* guards the two fields below */
    kb_strmap_t *map;      /* key → kb_event_t*, one reference owned per entry */
    size_t ev_bytes;       /* kb_event_size sum of the entries */
} kb_stripe_t;

struct kb_indexer {
    unsigned nstripes;     /* power of two */
    kb_stripe_t *stripes;  /* nstripes of them, indexed by key_hash & (nstripes - 1) */
    pthread_mutex_t ns_mtx;/* guards by_ns and every set in it; taken after a stripe lock */
    kb_strmap_t *by_ns;    /* namespace → kb_strmap_t* set of key → kb_event_t* (borrowed) */
};

kb_indexer_t *kb_indexer_new(unsigned stripes) {
    unsigned n = 1;
    while (n < (stripes ? stripes : KB_INDEXER_DEFAULT_STRIPES))
        n *= 2;
    kb_indexer_t *idx = kb_calloc(1, sizeof(*idx));
    idx->nstripes = n;
    idx->stripes = kb_calloc(n, sizeof(*idx->stripes));
    for (unsigned i = 0; i < n; i++) {
        pthread_rwlock_init(&idx->stripes[i].lock, NULL);
        idx->stripes[i].map = kb_strmap_new(0);
    }
    pthread_mutex_init(&idx->ns_mtx, NULL);
    idx->by_ns = kb_strmap_new(0);
    return idx;
}

void kb_indexer_destroy(kb_indexer_t *idx) {
    if (!idx)
        return;
    for (unsigned i = 0; i < idx->nstripes; i++) {
        kb_stripe_t *s = &idx->stripes[i];
        size_t pos = 0;
        void *v;
        while (kb_strmap_next(s->map, &pos, NULL, NULL, &v))
            kb_event_unref(v);
        kb_strmap_destroy(s->map);
        pthread_rwlock_destroy(&s->lock);
    }
    size_t pos = 0;
    void *set;
    while (kb_strmap_next(idx->by_ns, &pos, NULL, NULL, &set))
        kb_strmap_destroy(set);
    kb_strmap_destroy(idx->by_ns);
    pthread_mutex_destroy(&idx->ns_mtx);
    free(idx->stripes);
    free(idx);
}

static kb_stripe_t *kb_stripe_of(kb_indexer_t *idx, uint64_t hash) {
    return &idx->stripes[hash & (idx->nstripes - 1)];
}

/* --- namespace index (ns_mtx held) ---------------------------------------- */

static void kb_ns_set(kb_indexer_t *idx, kb_event_t *ev) {
    uint64_t h = kb_fnv1a64(ev->ns, ev->ns_len);
    kb_strmap_t *set = kb_strmap_get(idx->by_ns, ev->ns, ev->ns_len, h);
    if (!set) {
        set = kb_strmap_new(0);
        kb_strmap_put(idx->by_ns, ev->ns, ev->ns_len, h, set);
    }
    kb_strmap_put(set, ev->key, ev->key_len, ev->key_hash, ev);
}

static void kb_ns_unset(kb_indexer_t *idx, const kb_event_t *ev) {
    uint64_t h = kb_fnv1a64(ev->ns, ev->ns_len);
    kb_strmap_t *set = kb_strmap_get(idx->by_ns, ev->ns, ev->ns_len, h);
    if (!set)
        return;
    kb_strmap_del(set, ev->key, ev->key_len, ev->key_hash);
    if (kb_strmap_count(set) == 0) {
        kb_strmap_del(idx->by_ns, ev->ns, ev->ns_len, h);
        kb_strmap_destroy(set);
    }
}

static bool kb_same_ns(const kb_event_t *a, const kb_event_t *b) {
    return a->ns_len == b->ns_len && !memcmp(a->ns, b->ns, a->ns_len);
}

/* --- entries --------------------------------------------------------------- */

void kb_indexer_put(kb_indexer_t *idx, kb_event_t *ev, kb_event_t **old) {
    kb_stripe_t *s = kb_stripe_of(idx, ev->key_hash);
    kb_event_ref(ev);
    pthread_rwlock_wrlock(&s->lock);
    kb_event_t *prev = kb_strmap_put(s->map, ev->key, ev->key_len, ev->key_hash, ev);
    s->ev_bytes += kb_event_size(ev);
    if (prev)
        s->ev_bytes -= kb_event_size(prev);
    pthread_mutex_lock(&idx->ns_mtx);
    /* The namespace is part of the key, so it cannot change; be safe anyway. */
    if (prev && !kb_same_ns(prev, ev))
        kb_ns_unset(idx, prev);
    kb_ns_set(idx, ev);
    pthread_mutex_unlock(&idx->ns_mtx);
    pthread_rwlock_unlock(&s->lock);
    if (old)
        *old = prev;
    else
        kb_event_unref(prev);
}

bool kb_indexer_delete(kb_indexer_t *idx, const char *key, size_t len, uint64_t hash, kb_event_t **old) {
    kb_stripe_t *s = kb_stripe_of(idx, hash);
    pthread_rwlock_wrlock(&s->lock);
    kb_event_t *prev = kb_strmap_del(s->map, key, len, hash);
    if (prev) {
        s->ev_bytes -= kb_event_size(prev);
        pthread_mutex_lock(&idx->ns_mtx);
        kb_ns_unset(idx, prev);
        pthread_mutex_unlock(&idx->ns_mtx);
    }
    pthread_rwlock_unlock(&s->lock);
    if (old)
        *old = prev;
    else
        kb_event_unref(prev);
    return prev != NULL;
}

kb_event_t *kb_indexer_get(kb_indexer_t *idx, const char *key, size_t len, uint64_t hash) {
    kb_stripe_t *s = kb_stripe_of(idx, hash);
    pthread_rwlock_rdlock(&s->lock);
    kb_event_t *ev = kb_strmap_get(s->map, key, len, hash);
    if (ev)
        kb_event_ref(ev);
    pthread_rwlock_unlock(&s->lock);
    return ev;
}

size_t kb_indexer_count(kb_indexer_t *idx) {
    size_t n = 0;
    for (unsigned i = 0; i < idx->nstripes; i++) {
        kb_stripe_t *s = &idx->stripes[i];
        pthread_rwlock_rdlock(&s->lock);
        n += kb_strmap_count(s->map);
        pthread_rwlock_unlock(&s->lock);
    }
    return n;
}

size_t kb_indexer_bytes(kb_indexer_t *idx) {
    size_t n = sizeof(*idx) + idx->nstripes * sizeof(*idx->stripes);
    for (unsigned i = 0; i < idx->nstripes; i++) {
        kb_stripe_t *s = &idx->stripes[i];
        pthread_rwlock_rdlock(&s->lock);
        n += s->ev_bytes + kb_strmap_memory(s->map);
        pthread_rwlock_unlock(&s->lock);
    }
    pthread_mutex_lock(&idx->ns_mtx);
    n += kb_strmap_memory(idx->by_ns);
    size_t pos = 0;
    void *set;
    while (kb_strmap_next(idx->by_ns, &pos, NULL, NULL, &set))
        n += kb_strmap_memory(set);
    pthread_mutex_unlock(&idx->ns_mtx);
    return n;
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

/* Append a reference to every value of m (its lock held by the caller). */
static void kb_list_map(const kb_strmap_t *m, kb_event_list_t *out) {
    size_t pos = 0;
    void *v;
    while (kb_strmap_next(m, &pos, NULL, NULL, &v))
        kb_event_list_push(out, kb_event_ref(v));
}

void kb_indexer_list(kb_indexer_t *idx, const char *ns, kb_event_list_t *out) {
    if (ns) {
        size_t len = strlen(ns);
        pthread_mutex_lock(&idx->ns_mtx);
        kb_strmap_t *set = kb_strmap_get(idx->by_ns, ns, len, kb_fnv1a64(ns, len));
        if (set)
            kb_list_map(set, out);
        pthread_mutex_unlock(&idx->ns_mtx);
        return;
    }
    for (unsigned i = 0; i < idx->nstripes; i++) {
        kb_stripe_t *s = &idx->stripes[i];
        pthread_rwlock_rdlock(&s->lock);
        kb_list_map(s->map, out);
        pthread_rwlock_unlock(&s->lock);
    }
}
