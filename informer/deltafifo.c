/* informer/deltafifo.c — per-key delta queue with compaction and a byte bound
 * (see deltafifo.h).
 *
 * Design: a strmap key → node, and the nodes linked in an intrusive doubly
 * linked list in queue order. A node holds one key's pending deltas, so
 * push (lookup + append or link at the tail), pop (unlink the head) and
 * "drop a key whose deltas all compacted away" (unlink from the middle) are
 * all O(1) apart from the per-key merge, which only looks at the last delta.
 *
 * Invariants, all under fifo->mtx:
 *   - a key is in the map iff its node is in the list iff it has ≥1 delta;
 *   - a key keeps its place in the list while deltas arrive for it; a key
 *     that is popped, or compacted down to nothing, goes to the tail when it
 *     comes back (client-go's DeltaFIFO: no line-jumping back);
 *   - bytes and deltas are the sums over all nodes.
 * Events are immutable, so a merge builds its replacement with
 * kb_event_retype() and releases the events it replaces.
 *
 * The coalescing window (kb_deltafifo_set_coalesce). Why the queue and not
 * the worker: LATEST already merges what waits here, so holding a key back
 * here is all a window needs — the worker stays a plain loop, and the merge
 * rules (and the drop callback) are the same with and without it.
 *   - A key's window starts when its node is created (its first pending
 *     delta) and is never restarted by later deltas: a change waits at most
 *     window_ns beyond its arrival, even under a burst that never ends.
 *   - Keys are kept in creation order, so the head of `waiting` is the key
 *     whose window ends first: pop looks at one node, not all of them.
 *   - A DELETED moves its key to `ready` at once (a delete is never held
 *     behind a window; client-go's reason to coalesce is updates, and a
 *     consumer waiting for a delete is one waiting for a zombie to go). pop
 *     takes from whichever of the two heads was created first, so ready keys
 *     cannot starve keys whose window has ended.
 *   - close ends every window: shutdown drains at once.
 *   - The time comes from the owner's clock function (the bridge passes the
 *     monotonic clock, the simulation its own step counter), read only under
 *     the lock; the condition variable waits in real monotonic time for at
 *     most the remaining window.
 * Acknowledgement: a delta merged away is reported done through drop_fn when
 * it is merged, window or not. That is safe because the ledger's watermark is
 * a prefix of seqs: the delta that replaced it has a higher seq and stays in
 * flight until the merged message is acknowledged, so the watermark cannot
 * pass the replacement, and a restart replays the journal from the watermark
 * on — which holds the replacement, carrying the newer state of the same key.
 * The window only lengthens how long the replacement stays in flight.
 * It holds only if the consumer rule (docs/guarantees.md) treats the
 * replacement as journalled — its own type — as it treats the merged message:
 * after a crash that is all it gets. A merge keeps the older delta's type
 * (Added + Modified → Added), and the rule reads ADDED vs MODIFIED only at an
 * equal RV (its one exception: an ADDED at the RV of a finalStateUnknown
 * DELETED — an object a changed definition takes in again — is applied, a
 * MODIFIED is not). So an Added and a Modified at one RV (that object re-sent
 * in a new shape) are never merged: merged, the Added counted done, the
 * checkpoint passed it, and a crash replayed the Modified alone, which the
 * rule skips (the simulation, seeds 10290 and 15905). Why not keep the merge
 * and hold the checkpoint instead: the merged message keeping the older seq
 * would hide the newer change from a sink whose own watermark lies between
 * the two (kb_ledger_wants), and tying the older seq's completion to the
 * newer's acknowledgement would have to reach every sink's bits and the
 * exactly-once cut; one more message in a rare case is cheaper. The other
 * merges keep their type or end in a DELETED, which the rule applies the same
 * whether merged or replayed; an Added cancelled by its Deleted leaves
 * nothing for either.
 *
 * Threads: pushers (reflector, resync) block on room_cv while the queue is
 * over its byte bound; the single popper blocks on data_cv while it is empty
 * or while no key's window has ended.
 * Held wakes (kb_deltafifo_push_held): a pusher with a batch in hand queues
 * all of it before the popper is woken once (kb_deltafifo_wake). Woken per
 * event, a worker that is faster than the reflector empties the queue and
 * sleeps again after every one: a context switch or two per change, which on
 * a small box cost more than the change itself. A pusher that has to wait
 * for room first wakes the popper for what it holds (else neither moves).
 * Both condition variables run on CLOCK_MONOTONIC so timeouts survive wall
 * clock jumps. Nothing is called out under the lock except kb_event_* (plain
 * memory operations).
 */
#include "informer/deltafifo.h"

#include "common/alloc.h"
#include "common/strmap.h"
#include "common/time.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct kb_dfnode kb_dfnode_t;

typedef struct kb_dflist {
    kb_dfnode_t *head, *tail; /* head is the oldest key */
} kb_dflist_t;

struct kb_dfnode {
    struct kb_dfnode *prev, *next; /* queue order; head is the oldest key */
    kb_deltas_t deltas;            /* ≥1 pending event of this key, oldest first */
    int64_t first_ns;              /* fifo clock when the node was created: its window starts here */
    bool ready;                    /* in fifo->ready (a delete came), else in fifo->waiting */
    size_t bytes;                  /* kb_event_size sum of deltas */
    uint64_t hash;                 /* kb_fnv1a64 of key */
    size_t key_len;
    char key[];                    /* the key, NUL-terminated (the map holds its own copy) */
};

struct kb_deltafifo {
    pthread_mutex_t mtx;      /* guards everything below */
    pthread_cond_t data_cv;   /* signalled when a key is queued or on close (the popper waits) */
    pthread_cond_t room_cv;   /* broadcast when bytes fall to max_bytes or on close (pushers wait) */
    kb_strmap_t *keys;        /* key → kb_dfnode_t*, owned nodes */
    kb_dflist_t waiting;      /* keys in creation order (all keys when there is no window) */
    kb_dflist_t ready;        /* keys a delete made ready, in the order it came; empty without a window */
    int64_t window_ns;        /* coalescing window; 0 = off */
    kb_deltafifo_clock_fn now_fn; /* the clock of first_ns and of pop's "has the window ended" */
    void *now_opaque;
    kb_compaction_t mode;     /* fixed at creation */
    size_t max_bytes;         /* push waits while bytes > max_bytes */
    size_t bytes;             /* kb_event_size sum of all queued events */
    size_t deltas;            /* queued events */
    unsigned room_waiters;    /* pushers inside a wait on room_cv */
    bool wake_owed;           /* a held push queued what the popper may take: kb_deltafifo_wake signals */
    bool closed;              /* set once by close; never cleared */
    uint64_t pushed, compacted, full_waits, pop_waits; /* counters for stats */
    kb_deltafifo_drop_fn drop_fn;            /* told of every event compaction removes */
    void *drop_opaque;
};

void kb_deltas_init(kb_deltas_t *d) {
    d->ev = NULL;
    d->n = 0;
    d->cap = 0;
}

void kb_deltas_fini(kb_deltas_t *d) {
    for (size_t i = 0; i < d->n; i++)
        kb_event_unref(d->ev[i]);
    free(d->ev);
    kb_deltas_init(d);
}

kb_deltafifo_t *kb_deltafifo_new(kb_compaction_t mode, size_t max_bytes) {
    kb_deltafifo_t *fifo = kb_calloc(1, sizeof(*fifo));
    pthread_mutex_init(&fifo->mtx, NULL);
    kb_cond_init_mono(&fifo->data_cv);
    kb_cond_init_mono(&fifo->room_cv);
    fifo->keys = kb_strmap_new(64);
    fifo->mode = mode;
    fifo->max_bytes = max_bytes;
    return fifo;
}

static void kb_dfnode_free(kb_dfnode_t *node) {
    kb_deltas_fini(&node->deltas);
    free(node);
}

void kb_deltafifo_destroy(kb_deltafifo_t *fifo) {
    if (!fifo)
        return;
    kb_dflist_t *lists[] = {&fifo->waiting, &fifo->ready};
    for (size_t i = 0; i < KB_ARRAY_LEN(lists); i++)
        for (kb_dfnode_t *node = lists[i]->head, *next; node; node = next) {
            next = node->next;
            kb_dfnode_free(node);
        }
    kb_strmap_destroy(fifo->keys);
    pthread_cond_destroy(&fifo->data_cv);
    pthread_cond_destroy(&fifo->room_cv);
    pthread_mutex_destroy(&fifo->mtx);
    free(fifo);
}

/* --- one key's deltas (fifo->mtx held) ----------------------------------- */

static void kb_df_append(kb_deltafifo_t *fifo, kb_dfnode_t *node, kb_event_t *ev) {
    kb_deltas_t *d = &node->deltas;
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 2;
        d->ev = kb_realloc(d->ev, d->cap * sizeof(*d->ev));
    }
    d->ev[d->n++] = ev;
    size_t sz = kb_event_size(ev);
    node->bytes += sz;
    fifo->bytes += sz;
    fifo->deltas++;
}

/* An event compaction made unnecessary: tell the owner, then let it go. */
static void kb_df_discard(kb_deltafifo_t *fifo, kb_event_t *ev) {
    if (fifo->drop_fn)
        fifo->drop_fn(fifo->drop_opaque, ev);
    kb_event_unref(ev);
}

static void kb_df_drop_last(kb_deltafifo_t *fifo, kb_dfnode_t *node) {
    kb_event_t *ev = node->deltas.ev[--node->deltas.n];
    size_t sz = kb_event_size(ev);
    node->bytes -= sz;
    fifo->bytes -= sz;
    fifo->deltas--;
    kb_df_discard(fifo, ev);
}

/* Replace the last delta with ev retyped as type (consumes ev). The result
 * stays marked as a redelivery if the delta it replaces was one: it may
 * stand for a message a sink already has. ev may be shared (the cache), so a
 * change of type or mark is made on a copy. */
static void kb_df_replace_last(kb_deltafifo_t *fifo, kb_dfnode_t *node, kb_event_t *ev, kb_event_type_t type) {
    bool redelivery = node->deltas.ev[node->deltas.n - 1]->redelivery;
    kb_df_drop_last(fifo, node);
    if (ev->type != type || (redelivery && !ev->redelivery)) {
        kb_event_t *copy = kb_event_retype(ev, type, ev->final_state_unknown);
        copy->redelivery = copy->redelivery || redelivery;
        kb_event_unref(ev);
        ev = copy;
    }
    kb_df_append(fifo, node, ev);
}

static bool kb_same_uid(const kb_event_t *a, const kb_event_t *b) {
    return a->uid_len == b->uid_len && !memcmp(a->uid, b->uid, a->uid_len);
}

/* Would folding ev into last send a type the rule reads differently from
 * ev's own? The consumer rule looks at ADDED vs MODIFIED only at an equal RV
 * (an ADDED at the RV of a finalStateUnknown DELETED is applied, a MODIFIED
 * is not), and a merge sends last's type with ev's seq and RV: after a crash
 * the journal replays ev in its own type (see the design note). */
static bool kb_df_type_counts(const kb_event_t *last, const kb_event_t *ev) {
    return last->type != ev->type && last->rv_len == ev->rv_len && !memcmp(last->rv, ev->rv, ev->rv_len);
}

/* LATEST: fold ev into the key's pending deltas, looking at the newest one
 * (consumes ev). The loop runs again only after a delta was dropped, so it
 * ends after at most n + 1 rounds. */
static void kb_df_merge(kb_deltafifo_t *fifo, kb_dfnode_t *node, kb_event_t *ev) {
    kb_deltas_t *d = &node->deltas;
    for (;;) {
        if (d->n == 0) {
            kb_df_append(fifo, node, ev);
            return;
        }
        kb_event_t *last = d->ev[d->n - 1];
        if (last->type == KB_EV_SYNC || last->type == KB_EV_SNAPSHOT) {
            /* Sync/Snapshot + X → X. */
            kb_df_drop_last(fifo, node);
            continue;
        }
        switch (ev->type) {
        case KB_EV_SYNC:
        case KB_EV_SNAPSHOT:
            /* A pending Added/Modified already delivers the state. */
            if (last->type != KB_EV_DELETED) {
                kb_df_discard(fifo, ev);
                return;
            }
            break;
        case KB_EV_MODIFIED:
            /* Added + Modified → Added(latest); Modified + Modified → Modified(latest);
             * an Added and a Modified at one RV stay two. */
            if (last->type != KB_EV_DELETED && !kb_df_type_counts(last, ev)) {
                kb_df_replace_last(fifo, node, ev, last->type);
                return;
            }
            break;
        case KB_EV_ADDED:
            /* Deleted + Added stays two; so does another uid without a delete
             * between, and a Modified and an Added at one RV. */
            if (last->type != KB_EV_DELETED && kb_same_uid(last, ev) && !kb_df_type_counts(last, ev)) {
                kb_df_replace_last(fifo, node, ev, last->type);
                return;
            }
            break;
        case KB_EV_DELETED:
            if (last->type == KB_EV_ADDED && !last->redelivery) {
                /* Never delivered, now gone: both vanish. Anything older that
                 * is not itself a delete still needs this Deleted. */
                kb_df_drop_last(fifo, node);
                if (d->n > 0 && d->ev[d->n - 1]->type != KB_EV_DELETED)
                    continue;
                kb_df_discard(fifo, ev);
                return;
            }
            if (last->type == KB_EV_MODIFIED || last->type == KB_EV_ADDED) {
                /* The change is superseded, but not the delete: a redelivered
                 * ADDED may already be at a sink, which must then hear of
                 * the delete. */
                kb_df_drop_last(fifo, node);
                continue;
            }
            /* Deletes of two incarnations of the name are two deletes. */
            if (!kb_same_uid(last, ev))
                break;
            /* Deleted + Deleted → one; a real delete beats a relist tombstone. */
            if (ev->final_state_unknown && !last->final_state_unknown)
                kb_df_discard(fifo, ev);
            else
                kb_df_replace_last(fifo, node, ev, KB_EV_DELETED);
            return;
        }
        kb_df_append(fifo, node, ev);
        return;
    }
}

/* --- the queue of keys (fifo->mtx held) ---------------------------------- */

static void kb_dflist_link_tail(kb_dflist_t *l, kb_dfnode_t *node) {
    node->next = NULL;
    node->prev = l->tail;
    if (l->tail)
        l->tail->next = node;
    else
        l->head = node;
    l->tail = node;
}

static void kb_dflist_unlink(kb_dflist_t *l, kb_dfnode_t *node) {
    if (node->prev)
        node->prev->next = node->next;
    else
        l->head = node->next;
    if (node->next)
        node->next->prev = node->prev;
    else
        l->tail = node->prev;
}

static kb_dflist_t *kb_df_list_of(kb_deltafifo_t *fifo, const kb_dfnode_t *node) {
    return node->ready ? &fifo->ready : &fifo->waiting;
}

static void kb_df_unlink(kb_deltafifo_t *fifo, kb_dfnode_t *node) {
    kb_dflist_unlink(kb_df_list_of(fifo, node), node);
    kb_strmap_del(fifo->keys, node->key, node->key_len, node->hash);
}

static bool kb_df_empty(const kb_deltafifo_t *fifo) {
    return !fifo->waiting.head && !fifo->ready.head;
}

static int64_t kb_df_now(const kb_deltafifo_t *fifo) {
    return fifo->now_fn ? fifo->now_fn(fifo->now_opaque) : kb_now_mono_ns();
}

/* A delete came for node: its window ends now. */
static void kb_df_make_ready(kb_deltafifo_t *fifo, kb_dfnode_t *node) {
    if (node->ready || fifo->window_ns == 0)
        return;
    kb_dflist_unlink(&fifo->waiting, node);
    node->ready = true;
    kb_dflist_link_tail(&fifo->ready, node);
}

/* The key pop may hand out now, or NULL; *wait_ns is then how long until the
 * first window ends (-1: nothing queued). Ready keys and keys whose window
 * has ended go in creation order. */
static kb_dfnode_t *kb_df_next(kb_deltafifo_t *fifo, int64_t *wait_ns) {
    kb_dfnode_t *w = fifo->waiting.head, *r = fifo->ready.head;
    *wait_ns = -1;
    if (w && fifo->window_ns > 0 && !fifo->closed) {
        int64_t left = w->first_ns + fifo->window_ns - kb_df_now(fifo);
        if (left > 0) {
            *wait_ns = left;
            w = NULL;
        }
    }
    if (w && r)
        return r->first_ns < w->first_ns ? r : w;
    return w ? w : r;
}

/* Wait on cv until woken or the deadline passes; false on timeout. */
static bool kb_df_wait(kb_deltafifo_t *fifo, pthread_cond_t *cv, int timeout_ms, const struct timespec *deadline) {
    if (timeout_ms < 0) {
        pthread_cond_wait(cv, &fifo->mtx);
        return true;
    }
    return pthread_cond_timedwait(cv, &fifo->mtx, deadline) != ETIMEDOUT;
}

static bool kb_df_full(const kb_deltafifo_t *fifo) {
    return fifo->bytes > fifo->max_bytes && fifo->deltas > 0;
}

static void kb_df_room_changed(kb_deltafifo_t *fifo) {
    if (fifo->room_waiters && !kb_df_full(fifo))
        pthread_cond_broadcast(&fifo->room_cv);
}

/* Signal the popper for the held pushes (fifo->mtx held). */
static void kb_df_pay_wake(kb_deltafifo_t *fifo) {
    if (fifo->wake_owed && !kb_df_empty(fifo))
        pthread_cond_signal(&fifo->data_cv);
    fifo->wake_owed = false;
}

static kb_err_t kb_df_push(kb_deltafifo_t *fifo, kb_event_t *ev, int timeout_ms, bool wake) {
    kb_err_t err = KB_OK;
    pthread_mutex_lock(&fifo->mtx);
    if (!fifo->closed && kb_df_full(fifo)) {
        kb_df_pay_wake(fifo); /* the popper makes the room: it must know of what it holds */
        if (timeout_ms != 0)
            fifo->full_waits++;
        struct timespec deadline = {0, 0};
        if (timeout_ms > 0)
            deadline = kb_deadline_mono(timeout_ms);
        fifo->room_waiters++;
        while (!fifo->closed && kb_df_full(fifo)) {
            if (timeout_ms == 0 || !kb_df_wait(fifo, &fifo->room_cv, timeout_ms, &deadline)) {
                if (kb_df_full(fifo))
                    err = KB_ERR_TIMEDOUT;
                break;
            }
        }
        fifo->room_waiters--;
    }
    if (fifo->closed)
        err = KB_ERR_CLOSED;
    if (err != KB_OK)
        goto out;

    kb_dfnode_t *node = kb_strmap_get(fifo->keys, ev->key, ev->key_len, ev->key_hash);
    bool is_delete = ev->type == KB_EV_DELETED, created = !node;
    size_t before = fifo->deltas + 1;
    size_t bytes_before = fifo->bytes;
    if (!node) {
        node = kb_calloc(1, sizeof(*node) + ev->key_len + 1);
        memcpy(node->key, ev->key, ev->key_len);
        node->key_len = ev->key_len;
        node->hash = ev->key_hash;
        node->first_ns = fifo->window_ns > 0 ? kb_df_now(fifo) : 0;
        kb_strmap_put(fifo->keys, node->key, node->key_len, node->hash, node);
        kb_dflist_link_tail(&fifo->waiting, node);
    }
    if (fifo->mode == KB_COMPACTION_LATEST)
        kb_df_merge(fifo, node, ev);
    else
        kb_df_append(fifo, node, ev);
    ev = NULL;
    fifo->pushed++;
    fifo->compacted += before - fifo->deltas;
    if (node->deltas.n == 0) {
        kb_df_unlink(fifo, node);
        kb_dfnode_free(node);
    } else if (is_delete) {
        kb_df_make_ready(fifo, node);
    }
    /* Under a window only a new key or a delete can change what pop may take
     * (or how long it sleeps): a burst into a held key wakes nobody. */
    if (!kb_df_empty(fifo) && (fifo->window_ns == 0 || created || is_delete)) {
        if (wake)
            pthread_cond_signal(&fifo->data_cv);
        else
            fifo->wake_owed = true;
    }
    if (fifo->bytes < bytes_before)
        kb_df_room_changed(fifo);
out:
    pthread_mutex_unlock(&fifo->mtx);
    kb_event_unref(ev);
    return err;
}

kb_err_t kb_deltafifo_push(kb_deltafifo_t *fifo, kb_event_t *ev, int timeout_ms) {
    return kb_df_push(fifo, ev, timeout_ms, true);
}

kb_err_t kb_deltafifo_push_held(kb_deltafifo_t *fifo, kb_event_t *ev, int timeout_ms) {
    return kb_df_push(fifo, ev, timeout_ms, false);
}

void kb_deltafifo_wake(kb_deltafifo_t *fifo) {
    pthread_mutex_lock(&fifo->mtx);
    kb_df_pay_wake(fifo);
    pthread_mutex_unlock(&fifo->mtx);
}

kb_err_t kb_deltafifo_pop(kb_deltafifo_t *fifo, kb_deltas_t *out, int timeout_ms) {
    KB_ASSERT(out->n == 0);
    struct timespec deadline = {0, 0};
    if (timeout_ms > 0)
        deadline = kb_deadline_mono(timeout_ms);
    pthread_mutex_lock(&fifo->mtx);
    kb_dfnode_t *node;
    int64_t wait_ns;
    while (!(node = kb_df_next(fifo, &wait_ns)) && !fifo->closed && timeout_ms != 0) {
        fifo->pop_waits++;
        if (wait_ns < 0) {
            if (!kb_df_wait(fifo, &fifo->data_cv, timeout_ms, &deadline))
                break;
            continue;
        }
        /* A window is running: sleep until it ends or the caller's deadline, whichever is first. */
        struct timespec until = kb_deadline_mono((wait_ns + 999999) / 1000000);
        bool caller_first = timeout_ms > 0 && (deadline.tv_sec < until.tv_sec ||
                                               (deadline.tv_sec == until.tv_sec && deadline.tv_nsec < until.tv_nsec));
        if (pthread_cond_timedwait(&fifo->data_cv, &fifo->mtx, caller_first ? &deadline : &until) == ETIMEDOUT &&
            caller_first)
            break;
    }
    if (!node)
        node = kb_df_next(fifo, &wait_ns);
    if (!node) {
        kb_err_t err = fifo->closed ? KB_ERR_CLOSED : KB_ERR_TIMEDOUT;
        pthread_mutex_unlock(&fifo->mtx);
        return err;
    }
    kb_df_unlink(fifo, node);
    fifo->bytes -= node->bytes;
    fifo->deltas -= node->deltas.n;
    kb_df_room_changed(fifo);
    pthread_mutex_unlock(&fifo->mtx);

    free(out->ev);
    *out = node->deltas;
    free(node);
    return KB_OK;
}

bool kb_deltafifo_has_pending(kb_deltafifo_t *fifo, const char *key, size_t len, uint64_t hash) {
    pthread_mutex_lock(&fifo->mtx);
    bool pending = kb_strmap_get(fifo->keys, key, len, hash) != NULL;
    pthread_mutex_unlock(&fifo->mtx);
    return pending;
}

void kb_deltafifo_set_drop(kb_deltafifo_t *fifo, kb_deltafifo_drop_fn fn, void *opaque) {
    pthread_mutex_lock(&fifo->mtx);
    fifo->drop_fn = fn;
    fifo->drop_opaque = opaque;
    pthread_mutex_unlock(&fifo->mtx);
}

void kb_deltafifo_set_coalesce(kb_deltafifo_t *fifo, int64_t window_ns, kb_deltafifo_clock_fn now, void *opaque) {
    KB_ASSERT(window_ns >= 0);
    pthread_mutex_lock(&fifo->mtx);
    /* Keys queued before have first_ns 0: their window has long ended. */
    fifo->window_ns = fifo->mode == KB_COMPACTION_LATEST ? window_ns : 0;
    fifo->now_fn = now;
    fifo->now_opaque = opaque;
    pthread_cond_signal(&fifo->data_cv);
    pthread_mutex_unlock(&fifo->mtx);
}

void kb_deltafifo_close(kb_deltafifo_t *fifo) {
    pthread_mutex_lock(&fifo->mtx);
    fifo->closed = true;
    pthread_cond_broadcast(&fifo->data_cv);
    pthread_cond_broadcast(&fifo->room_cv);
    pthread_mutex_unlock(&fifo->mtx);
}

void kb_deltafifo_stats(kb_deltafifo_t *fifo, kb_deltafifo_stats_t *st) {
    pthread_mutex_lock(&fifo->mtx);
    st->keys = kb_strmap_count(fifo->keys);
    st->deltas = fifo->deltas;
    st->bytes = fifo->bytes;
    st->pushed = fifo->pushed;
    st->compacted = fifo->compacted;
    st->full_waits = fifo->full_waits;
    st->pop_waits = fifo->pop_waits;
    pthread_mutex_unlock(&fifo->mtx);
}
