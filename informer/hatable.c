/* informer/hatable.c — see hatable.h: the decisions a standby and a new
 * leader take, apart from the Lease, the locks and the clock (bridge/ha.c). */
#include "informer/hatable.h"

#include "common/hash.h"
#include "informer/ledger.h"

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

bool kb_hamark_skips(kb_hamark_t *m, uint64_t need, uint64_t seen, bool leads) {
    uint64_t known = leads ? m->committed : kb_hamark_trust(m, seen);
    return need && known && need <= known;
}

static void kb_owed_unref(void *v) {
    if (v && v != &kb_owed_live)
        kb_event_unref(v);
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
    void *v = deleted ? (void *)kb_event_ref(deleted) : (void *)&kb_owed_live;
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
    *deleted = v == &kb_owed_live ? NULL : v;
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
