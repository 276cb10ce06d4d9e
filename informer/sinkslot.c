/* informer/sinkslot.c — the fate of a sink's messages through its lifecycle.
 *
 * Design note. These decisions used to sit in bridge/bridge.c between
 * threads, condition variables and clocks, where a simulation cannot step
 * them; each of the lifecycle bugs of issue 24 was one of them taken wrong
 * (a stop dead-lettered, a retired instance's messages dropped with the sink
 * stopped, a bridge-wide abandon). Here they are plain functions of their
 * inputs, called by the bridge and by tests/sim alike. See sinkslot.h.
 */
#include "informer/sinkslot.h"

#include "common/alloc.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

kb_fate_t kb_sinkslot_fate(const kb_verdict_t *v) {
    if (v->err == KB_OK)
        return KB_FATE_ACKED;
    if (v->refusal)
        return !v->dead_letter && v->to_dead_letter ? KB_FATE_DEAD_LETTER : KB_FATE_REFUSED;
    if (v->collecting && !v->dead_letter) /* a dead letter goes to another sink: nothing to hand over */
        return KB_FATE_PARK;
    return v->err == KB_ERR_STOPPED || v->sender_retired ? KB_FATE_LEAVE : KB_FATE_HOLD;
}

const char *kb_fate_name(kb_fate_t f) {
    static const char *const names[] = {"acked", "dead-letter", "refused", "park", "hold", "leave"};
    return (size_t)f < sizeof(names) / sizeof(names[0]) ? names[f] : "?";
}

void kb_handover_init(kb_handover_t *h) {
    memset(h, 0, sizeof(*h));
    atomic_init(&h->collect, false);
    atomic_init(&h->held, false);
    atomic_init(&h->successor, NULL);
}

void kb_handover_fini(kb_handover_t *h) {
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}

void kb_handover_hold(kb_handover_t *h) {
    atomic_store(&h->held, true);
}

bool kb_handover_held(const kb_handover_t *h) {
    return atomic_load(&h->held);
}

void kb_handover_retire(kb_handover_t *h, void *successor) {
    atomic_store(&h->successor, successor);
    atomic_store(&h->collect, successor != NULL);
}

void *kb_handover_stops(const kb_handover_t *h, void *self) {
    void *succ = atomic_load(&h->successor);
    return succ ? succ : self;
}

bool kb_handover_collecting(const kb_handover_t *h) {
    return atomic_load(&h->collect);
}

bool kb_handover_park(kb_handover_t *h, void *msg, uintptr_t owner, uint64_t seq) {
    if (!atomic_load(&h->collect))
        return false;
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 16;
        h->v = kb_realloc(h->v, h->cap * sizeof(*h->v));
    }
    h->v[h->n] = (kb_parked_t){msg, owner, seq, h->n};
    h->n++;
    return true;
}

/* By owner, then seq (a key's changes in the order they were accepted), then
 * the order the sink gave them back. */
static int kb_parked_cmp(const void *a, const void *b) {
    const kb_parked_t *x = a, *y = b;
    if (x->owner != y->owner)
        return x->owner < y->owner ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

kb_parked_t *kb_handover_take(kb_handover_t *h, size_t *n) {
    atomic_store(&h->collect, false);
    kb_parked_t *v = h->v ? h->v : kb_calloc(1, sizeof(*v));
    *n = h->n;
    h->v = NULL;
    h->n = h->cap = 0;
    qsort(v, *n, sizeof(*v), kb_parked_cmp);
    return v;
}

void kb_handover_release(kb_handover_t *h) {
    bool was = atomic_exchange(&h->held, false);
    KB_ASSERT(was); /* released once, and only a held successor */
}

void kb_drain_init(kb_drain_t *dr) {
    atomic_init(&dr->abandon, false);
    atomic_init(&dr->retired, false);
}

kb_drain_step_t kb_drain_look(kb_drain_t *dr, bool workers_done, int64_t now, int64_t deadline) {
    if (workers_done)
        return KB_DRAIN_DONE;
    if (now < deadline)
        return KB_DRAIN_WAIT;
    atomic_store(&dr->abandon, true);
    return KB_DRAIN_ABANDON;
}

bool kb_drain_abandoned(const kb_drain_t *dr) {
    return atomic_load(&dr->abandon);
}

void kb_drain_retire(kb_drain_t *dr) {
    atomic_store(&dr->retired, true);
}

bool kb_drain_retired(const kb_drain_t *dr) {
    return atomic_load(&dr->retired);
}
