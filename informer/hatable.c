/* informer/hatable.c — see hatable.h: the decisions a standby and a new
 * leader take, apart from the Lease, the locks and the clock (bridge/ha.c). */
#include "informer/hatable.h"

#include "common/alloc.h"
#include "common/hash.h"
#include "informer/ledger.h"

#include <stdlib.h>
#include <zstd.h>

static char kb_owed_live; /* an owed key's value when the change skipped was not a deletion */

uint64_t kb_hatable_published(kb_ledger_t *ledger) {
    return kb_ledger_acked_rv(ledger);
}

uint64_t kb_hatable_need(const kb_event_t *ev, uint64_t tracked_rv) {
    if (ev->final_state_unknown && tracked_rv > ev->rv_num)
        return tracked_rv;
    return ev->rv_num;
}

uint64_t kb_hamark_trust(kb_hamark_t *m, uint64_t seen) {
    if (m->rv <= seen && m->rv > m->trusted)
        m->trusted = m->rv;
    return m->trusted;
}

bool kb_hamark_above(kb_hamark_t *m, uint64_t seen) {
    return m->rv > kb_hamark_trust(m, seen);
}

bool kb_hamark_takeover(kb_hamark_t *m, uint64_t seen) {
    if (!kb_hamark_above(m, seen))
        return false;
    m->rv = m->trusted;
    return true;
}

void kb_hamark_commit(kb_hamark_t *m, uint64_t rv) {
    if (rv > m->committed)
        m->committed = rv;
    if (rv > m->trusted)
        m->trusted = rv;
    if (rv > m->rv)
        m->rv = rv;
}

bool kb_hatable_blind(uint64_t lo, uint64_t hi, uint64_t trusted, uint64_t shared, uint64_t *from) {
    if (hi <= trusted || lo >= shared)
        return false;
    *from = lo > trusted ? lo : trusted;
    return true;
}

bool kb_hamark_skips(kb_hamark_t *m, uint64_t need, uint64_t seen, bool leads) {
    uint64_t known = leads ? m->committed : kb_hamark_trust(m, seen);
    return need && known && need <= known;
}

/* A DELETED owed, compressed. Why: the table keeps it until the next
 * takeover — for a standby that runs for weeks, one whole object per key
 * deleted meanwhile, which the rest of kbridge let go long ago. Trimming it to
 * what routes and templates read is not safe (a template may name any field),
 * so the whole object is kept, zstd-compressed on its own (a Pod of 5.4 KB
 * keeps 2 KB at level 3; no dictionary: the informer's zcache may not exist,
 * and this is paid once per takeover), beside a copy without the object. */
typedef struct kb_owed_del {
    kb_event_t *thin;   /* identity, type, flags, seq (kb_event_thin) */
    void *z;            /* the object, a zstd frame (NULL: kept whole in whole) */
    size_t zlen;
    size_t labels_off, labels_len;
    kb_event_t *whole;  /* an event that could not be compressed (packed, or no object), by reference */
} kb_owed_del_t;

static kb_owed_del_t *kb_owed_del_new(kb_event_t *ev) {
    kb_owed_del_t *d = kb_calloc(1, sizeof(*d));
    size_t cap = ZSTD_compressBound(ev->obj_len);
    void *z = ev->zdict || !ev->obj_len ? NULL : kb_malloc(cap);
    size_t n = z ? ZSTD_compress(z, cap, ev->obj, ev->obj_len, 3) : 0;
    if (!z || ZSTD_isError(n) || n >= ev->obj_len) {
        free(z);
        d->whole = kb_event_ref(ev);
        return d;
    }
    d->z = kb_realloc(z, n);
    d->zlen = n;
    d->thin = kb_event_thin(ev);
    d->labels_off = ev->labels_off;
    d->labels_len = ev->labels_len;
    return d;
}

/* The DELETED again (a new reference). */
static kb_event_t *kb_owed_del_get(const kb_owed_del_t *d) {
    if (d->whole)
        return kb_event_ref(d->whole);
    const kb_event_t *t = d->thin;
    unsigned long long raw = ZSTD_getFrameContentSize(d->z, d->zlen);
    char *obj = kb_malloc((size_t)raw + 1);
    size_t n = ZSTD_decompress(obj, (size_t)raw, d->z, d->zlen);
    KB_ASSERT(!ZSTD_isError(n) && n == raw); /* our own frame */
    kb_event_init_t in = {
        .type = t->type, .final_state_unknown = t->final_state_unknown, .res = t->res,
        .ns = t->ns, .ns_len = t->ns_len, .name = t->name, .name_len = t->name_len,
        .uid = t->uid, .uid_len = t->uid_len, .rv = t->rv, .rv_len = t->rv_len,
        .obj = obj, .obj_len = n, .labels_off = d->labels_off, .labels_len = d->labels_len,
        .observed_ns = t->observed_ns, .read_mono_ns = t->read_mono_ns,
    };
    kb_event_t *ev = kb_event_new(&in);
    ev->seq = t->seq;
    ev->redelivery = t->redelivery;
    free(obj);
    return ev;
}

static void kb_owed_unref(void *v) {
    kb_owed_del_t *d = v;
    if (!d || v == &kb_owed_live)
        return;
    kb_event_unref(d->whole);
    kb_event_unref(d->thin);
    free(d->z);
    free(d);
}

void kb_owed_put(kb_owed_t *o, const char *key, size_t len, kb_event_t *deleted, bool replace) {
    uint64_t h = kb_fnv1a64(key, len);
    if (!o->keys)
        o->keys = kb_strmap_new(64);
    bool known = kb_strmap_get(o->keys, key, len, h) != NULL;
    if (known && !replace)
        return;
    if (!known && kb_strmap_count(o->keys) >= KB_OWED_MAX) {
        o->dropped++;
        return;
    }
    void *v = deleted ? (void *)kb_owed_del_new(deleted) : (void *)&kb_owed_live;
    kb_owed_unref(kb_strmap_put(o->keys, key, len, h, v));
}

void kb_owed_add(kb_owed_t *o, kb_event_t *ev) {
    kb_owed_put(o, ev->key, ev->key_len, ev->type == KB_EV_DELETED ? ev : NULL, true);
}

kb_owed_t kb_owed_take(kb_owed_t *o) {
    kb_owed_t t = *o;
    *o = (kb_owed_t){NULL, 0};
    return t;
}

size_t kb_owed_count(const kb_owed_t *o) {
    return o->keys ? kb_strmap_count(o->keys) : 0;
}

bool kb_owed_next(const kb_owed_t *o, size_t *pos, const char **key, size_t *len, kb_event_t **deleted) {
    void *v;
    if (!o->keys || !kb_strmap_next(o->keys, pos, key, len, &v))
        return false;
    *deleted = v == &kb_owed_live ? NULL : kb_owed_del_get(v);
    return true;
}

void kb_owed_fini(kb_owed_t *o) {
    size_t pos = 0, len;
    const char *key;
    void *v;
    while (o->keys && kb_strmap_next(o->keys, &pos, &key, &len, &v))
        kb_owed_unref(v);
    kb_strmap_destroy(o->keys);
    *o = (kb_owed_t){NULL, 0};
}
