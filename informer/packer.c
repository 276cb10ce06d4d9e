/* informer/packer.c — cache entries compressed off the reflector thread
 * (see packer.h).
 *
 * Design note. A thin shell around two existing steps, kb_zcache_pack and
 * kb_indexer_swap: everything the cache means is decided by the ingest step
 * as before (the deterministic simulation, which starts no threads, packs
 * inline and covers it); this file only moves the compression to a second
 * core. On a two-core box the reflector thread was the serial part of a
 * large list (decode, compress, cache update per object) while the shard
 * workers and the sink took the other core.
 *
 * Hand-off. The producer appends to `q` under mtx; the thread takes the whole
 * queue at once (swapping arrays) and packs it without the lock. It is woken
 * at a batch's end (kb_packer_wake), not per object, and once woken it
 * lingers up to KB_PK_LINGER_MS for KB_PK_BATCH entries, so the batches of a
 * list cost a wake-up every few hundred objects. A full queue wakes the
 * thread and waits on room_cv.
 *
 * Order. Entries are packed in the order they were cached. A swap happens
 * only while the entry is still the event that was queued, so an entry
 * replaced or deleted meanwhile is left to its successor; packing never
 * changes the identity, RV or filing of an entry, only how its object is
 * held.
 */
#include "informer/packer.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/time.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A woken thread waits up to KB_PK_LINGER_MS for the queue to reach
 * KB_PK_BATCH entries before it packs: a list's batches come a few
 * milliseconds apart, and one wake-up per batch was a context switch per
 * few objects on two cores. */
#define KB_PK_BATCH 256
#define KB_PK_LINGER_MS 2

typedef struct kb_pk_queue {
    kb_event_t **ev;  /* references held, oldest first */
    size_t n, cap;
} kb_pk_queue_t;

struct kb_packer {
    kb_zcache_t *zc;       /* borrowed; only this thread packs while it runs */
    kb_indexer_t *idx;     /* borrowed */
    char name[64];
    size_t max_bytes;      /* kb_packer_put waits while bytes is over */
    pthread_mutex_t mtx;   /* guards the fields below */
    pthread_cond_t work_cv;  /* the thread waits for work or stop */
    pthread_cond_t room_cv;  /* the producer waits for room */
    kb_pk_queue_t q;       /* queued, not yet taken by the thread */
    size_t bytes;          /* kb_event_size sum of q and of the batch being packed */
    bool idle;             /* the thread waits on work_cv for a first entry */
    bool lingering;        /* the thread waits on work_cv for KB_PK_BATCH entries (or KB_PK_LINGER_MS) */
    bool stopping;
    bool running;          /* started and not stopped */
    pthread_t thread;
    _Atomic uint64_t packed, stale;
};

static void kb_pk_queue_push(kb_pk_queue_t *q, kb_event_t *ev) {
    if (q->n == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 256;
        q->ev = kb_realloc(q->ev, q->cap * sizeof(*q->ev));
    }
    q->ev[q->n++] = ev;
}

kb_packer_t *kb_packer_new(kb_zcache_t *zc, kb_indexer_t *idx, const char *name, size_t max_bytes) {
    KB_ASSERT(zc && idx);
    kb_packer_t *pk = kb_calloc(1, sizeof(*pk));
    pk->zc = zc;
    pk->idx = idx;
    snprintf(pk->name, sizeof(pk->name), "%s", name ? name : "");
    pk->max_bytes = max_bytes;
    pthread_mutex_init(&pk->mtx, NULL);
    kb_cond_init_mono(&pk->work_cv);
    kb_cond_init_mono(&pk->room_cv);
    return pk;
}

/* Pack one queued event into the cache if its entry is still that event. */
static void kb_pk_one(kb_packer_t *pk, kb_event_t *ev) {
    kb_event_t *p = kb_zcache_pack(pk->zc, ev);
    if (p != ev) {
        if (kb_indexer_swap(pk->idx, ev, p))
            atomic_fetch_add(&pk->packed, 1);
        else
            atomic_fetch_add(&pk->stale, 1);
    }
    kb_event_unref(p);
}

static void *kb_pk_main(void *arg) {
    kb_packer_t *pk = arg;
    char tname[32];
    snprintf(tname, sizeof(tname), "kb:pack/%.20s", pk->name);
    kb_thread_set_name(tname);
    kb_pk_queue_t mine = {0};
    pthread_mutex_lock(&pk->mtx);
    for (;;) {
        while (!pk->q.n && !pk->stopping) {
            pk->idle = true;
            pthread_cond_wait(&pk->work_cv, &pk->mtx);
            pk->idle = false;
        }
        if (!pk->q.n)
            break; /* stopping, and everything is packed */
        if (pk->q.n < KB_PK_BATCH && !pk->stopping) {
            struct timespec until = kb_deadline_mono(KB_PK_LINGER_MS);
            pk->lingering = true;
            pthread_cond_timedwait(&pk->work_cv, &pk->mtx, &until);
            pk->lingering = false;
        }
        kb_pk_queue_t t = pk->q; /* take the whole queue; hand back the emptied array */
        pk->q = mine;
        mine = t;
        pthread_mutex_unlock(&pk->mtx);
        size_t done = 0;
        for (size_t i = 0; i < mine.n; i++) {
            done += kb_event_size(mine.ev[i]);
            kb_pk_one(pk, mine.ev[i]);
            kb_event_unref(mine.ev[i]);
        }
        mine.n = 0;
        pthread_mutex_lock(&pk->mtx);
        pk->bytes -= done;
        pthread_cond_broadcast(&pk->room_cv);
    }
    pthread_mutex_unlock(&pk->mtx);
    free(mine.ev);
    return NULL;
}

void kb_packer_start(kb_packer_t *pk) {
    KB_ASSERT(!pk->running);
    pk->stopping = false;
    if (pthread_create(&pk->thread, NULL, kb_pk_main, pk) != 0)
        KB_FATAL("cannot start the cache packer thread");
    pk->running = true;
}

void kb_packer_stop(kb_packer_t *pk) {
    if (!pk || !pk->running)
        return;
    pthread_mutex_lock(&pk->mtx);
    pk->stopping = true;
    pthread_cond_signal(&pk->work_cv); /* idle or lingering: either way it packs the rest and ends */
    pthread_mutex_unlock(&pk->mtx);
    pthread_join(pk->thread, NULL);
    pk->running = false;
}

bool kb_packer_running(const kb_packer_t *pk) {
    return pk && pk->running;
}

void kb_packer_put(kb_packer_t *pk, kb_event_t *ev) {
    size_t size = kb_event_size(ev);
    pthread_mutex_lock(&pk->mtx);
    while (pk->bytes > pk->max_bytes && !pk->stopping) {
        if (pk->idle || pk->lingering)
            pthread_cond_signal(&pk->work_cv); /* it packs what it holds, then makes room */
        pthread_cond_wait(&pk->room_cv, &pk->mtx);
    }
    kb_pk_queue_push(&pk->q, kb_event_ref(ev));
    pk->bytes += size;
    pthread_mutex_unlock(&pk->mtx);
}

void kb_packer_wake(kb_packer_t *pk) {
    pthread_mutex_lock(&pk->mtx);
    if ((pk->idle && pk->q.n) || (pk->lingering && pk->q.n >= KB_PK_BATCH))
        pthread_cond_signal(&pk->work_cv);
    pthread_mutex_unlock(&pk->mtx);
}

void kb_packer_counts(kb_packer_t *pk, uint64_t *packed, uint64_t *stale) {
    *packed = atomic_load(&pk->packed);
    *stale = atomic_load(&pk->stale);
}

void kb_packer_destroy(kb_packer_t *pk) {
    if (!pk)
        return;
    kb_packer_stop(pk);
    for (size_t i = 0; i < pk->q.n; i++) /* queued after the thread stopped: left as they are */
        kb_event_unref(pk->q.ev[i]);
    free(pk->q.ev);
    pthread_mutex_destroy(&pk->mtx);
    pthread_cond_destroy(&pk->work_cv);
    pthread_cond_destroy(&pk->room_cv);
    free(pk);
}
