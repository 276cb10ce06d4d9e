/* common/strmap.c — string-keyed hash map (see strmap.h).
 *
 * Design: one array of slots, open addressing with linear probing, capacity
 * a power of two, load kept at or below 3/4. Deletion uses backward shift
 * (Knuth's algorithm R) instead of tombstones, so probe sequences never fill
 * up with dead slots under churn: after a delete every remaining entry is
 * still reachable from its home slot without crossing an empty one.
 *
 * The table also shrinks (down to the capacity it was created with) when it
 * drops below 1/8 full, so a map that held a million keys and was emptied
 * gives its memory back — the indexer's byte accounting depends on that.
 *
 * The caller supplies the 64-bit hash; it is stored per slot so probing
 * compares hashes before keys and growing never rehashes a key.
 *
 * Threads: none; the owner locks.
 */
#include "common/strmap.h"

#include "common/alloc.h"

#include <stdlib.h>
#include <string.h>

#define KB_STRMAP_MIN_CAP 8

typedef struct kb_strmap_slot {
    char *key;      /* owned copy, NUL-terminated; NULL marks an empty slot */
    size_t len;     /* key length without the terminator */
    uint64_t hash;  /* the caller's hash of key */
    void *value;    /* caller-owned */
} kb_strmap_slot_t;

struct kb_strmap {
    kb_strmap_slot_t *slots; /* cap slots */
    size_t cap;              /* power of two */
    size_t min_cap;          /* never shrink below this (the initial capacity) */
    size_t count;            /* occupied slots */
    size_t key_bytes;        /* sum of len + 1 over the keys, for kb_strmap_memory */
};

static size_t kb_strmap_cap_for(size_t n) {
    size_t cap = KB_STRMAP_MIN_CAP;
    /* Smallest power of two that holds n at a load of at most 3/4. */
    while (cap - cap / 4 < n)
        cap *= 2;
    return cap;
}

kb_strmap_t *kb_strmap_new(size_t initial_capacity) {
    kb_strmap_t *m = kb_calloc(1, sizeof(*m));
    m->cap = kb_strmap_cap_for(initial_capacity);
    m->min_cap = m->cap;
    m->slots = kb_calloc(m->cap, sizeof(*m->slots));
    return m;
}

void kb_strmap_destroy(kb_strmap_t *m) {
    if (!m)
        return;
    for (size_t i = 0; i < m->cap; i++)
        free(m->slots[i].key);
    free(m->slots);
    free(m);
}

size_t kb_strmap_count(const kb_strmap_t *m) {
    return m->count;
}

/* The slot holding key, or the empty slot where it would go. */
static size_t kb_strmap_find(const kb_strmap_t *m, const char *key, size_t len, uint64_t hash) {
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)hash & mask;; i = (i + 1) & mask) {
        const kb_strmap_slot_t *s = &m->slots[i];
        if (!s->key)
            return i;
        if (s->hash == hash && s->len == len && !memcmp(s->key, key, len))
            return i;
    }
}

static void kb_strmap_resize(kb_strmap_t *m, size_t cap) {
    kb_strmap_slot_t *old = m->slots;
    size_t old_cap = m->cap;
    m->slots = kb_calloc(cap, sizeof(*m->slots));
    m->cap = cap;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].key)
            continue;
        size_t mask = cap - 1;
        size_t j = (size_t)old[i].hash & mask;
        while (m->slots[j].key)
            j = (j + 1) & mask;
        m->slots[j] = old[i];
    }
    free(old);
}

void *kb_strmap_get(const kb_strmap_t *m, const char *key, size_t len, uint64_t hash) {
    const kb_strmap_slot_t *s = &m->slots[kb_strmap_find(m, key, len, hash)];
    return s->key ? s->value : NULL;
}

void *kb_strmap_put(kb_strmap_t *m, const char *key, size_t len, uint64_t hash, void *value) {
    kb_strmap_slot_t *s = &m->slots[kb_strmap_find(m, key, len, hash)];
    if (s->key) {
        void *prev = s->value;
        s->value = value;
        return prev;
    }
    if (m->count + 1 > m->cap - m->cap / 4) {
        kb_strmap_resize(m, m->cap * 2);
        s = &m->slots[kb_strmap_find(m, key, len, hash)];
    }
    s->key = kb_strndup(key, len);
    s->len = len;
    s->hash = hash;
    s->value = value;
    m->count++;
    m->key_bytes += len + 1;
    return NULL;
}

void *kb_strmap_del(kb_strmap_t *m, const char *key, size_t len, uint64_t hash) {
    size_t mask = m->cap - 1;
    size_t i = kb_strmap_find(m, key, len, hash);
    if (!m->slots[i].key)
        return NULL;
    void *value = m->slots[i].value;
    free(m->slots[i].key);
    m->count--;
    m->key_bytes -= len + 1;

    /* Backward shift: pull later entries of the cluster into the hole when
     * the hole lies on their probe path (between their home slot and them). */
    for (size_t j = (i + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
        size_t home = (size_t)m->slots[j].hash & mask;
        /* Distance from home to j vs. from home to the hole, cyclically. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    memset(&m->slots[i], 0, sizeof(m->slots[i]));

    if (m->cap > m->min_cap && m->count < m->cap / 8) {
        size_t cap = kb_strmap_cap_for(m->count * 2);
        kb_strmap_resize(m, cap > m->min_cap ? cap : m->min_cap);
    }
    return value;
}

bool kb_strmap_next(const kb_strmap_t *m, size_t *pos, const char **key, size_t *len, void **value) {
    for (size_t i = *pos; i < m->cap; i++) {
        const kb_strmap_slot_t *s = &m->slots[i];
        if (!s->key)
            continue;
        if (key)
            *key = s->key;
        if (len)
            *len = s->len;
        if (value)
            *value = s->value;
        *pos = i + 1;
        return true;
    }
    *pos = m->cap;
    return false;
}

size_t kb_strmap_memory(const kb_strmap_t *m) {
    return sizeof(*m) + m->cap * sizeof(*m->slots) + m->key_bytes;
}
