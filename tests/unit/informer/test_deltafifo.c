/* tests/unit/informer/test_deltafifo.c — the per-shard queue: queue order,
 * every LATEST compaction rule on its own, the byte bound and its blocking,
 * close and timeouts, and a multi-threaded stress for order, loss and the
 * final state per key. */
#include "common/event.h"
#include "common/hash.h"
#include "common/time.h"
#include "informer/deltafifo.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static kb_resource_t *res;

static int setup(void **state) {
    (void)state;
    res = kb_resource_new("c1", "pods", "", "v1", "pods");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kb_resource_unref(res);
    return 0;
}

/* An event for ns/name with uid and resourceVersion rv; the object names the rv. */
static kb_event_t *mk(kb_event_type_t type, const char *ns, const char *name, const char *uid, unsigned rv) {
    char rvs[16], obj[64];
    snprintf(rvs, sizeof(rvs), "%u", rv);
    int n = snprintf(obj, sizeof(obj), "{\"metadata\":{\"resourceVersion\":\"%u\"}}", rv);
    kb_event_init_t in = {
        .type = type,
        .res = res,
        .ns = ns, .ns_len = strlen(ns),
        .name = name, .name_len = strlen(name),
        .uid = uid, .uid_len = strlen(uid),
        .rv = rvs, .rv_len = strlen(rvs),
        .obj = obj, .obj_len = (size_t)n,
    };
    return kb_event_new(&in);
}

static void push(kb_deltafifo_t *fifo, kb_event_type_t type, const char *name, const char *uid, unsigned rv) {
    assert_int_equal(kb_deltafifo_push(fifo, mk(type, "ns", name, uid, rv), 0), KB_OK);
}

/* Pop one key and check its deltas: types[i] at rvs[i], n of them. */
static void expect_pop(kb_deltafifo_t *fifo, const char *key, size_t n, const kb_event_type_t *types,
                       const unsigned *rvs) {
    kb_deltas_t d;
    kb_deltas_init(&d);
    assert_int_equal(kb_deltafifo_pop(fifo, &d, 0), KB_OK);
    assert_string_equal(d.ev[0]->key, key);
    assert_int_equal(d.n, n);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(kb_event_type_name(d.ev[i]->type), kb_event_type_name(types[i]));
        assert_int_equal(d.ev[i]->rv_num, rvs[i]);
        assert_string_equal(d.ev[i]->key, key);
    }
    kb_deltas_fini(&d);
}

static void expect_empty(kb_deltafifo_t *fifo) {
    kb_deltas_t d;
    kb_deltas_init(&d);
    assert_int_equal(kb_deltafifo_pop(fifo, &d, 0), KB_ERR_TIMEDOUT);
    kb_deltafifo_stats_t st;
    kb_deltafifo_stats(fifo, &st);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.deltas, 0);
    assert_int_equal(st.bytes, 0);
}

#define TYPES(...) ((const kb_event_type_t[]){__VA_ARGS__})
#define RVS(...) ((const unsigned[]){__VA_ARGS__})
#define A KB_EV_ADDED
#define M KB_EV_MODIFIED
#define D KB_EV_DELETED
#define S KB_EV_SYNC

static void test_none_keeps_everything(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = kb_deltafifo_new(KB_COMPACTION_NONE, 1 << 20);
    push(fifo, A, "foo", "u1", 1);
    push(fifo, M, "foo", "u1", 2);
    push(fifo, M, "foo", "u1", 3);
    push(fifo, D, "foo", "u1", 4);
    push(fifo, A, "foo", "u2", 5);
    kb_deltafifo_stats_t st;
    kb_deltafifo_stats(fifo, &st);
    assert_int_equal(st.keys, 1);
    assert_int_equal(st.deltas, 5);
    assert_int_equal(st.pushed, 5);
    assert_int_equal(st.compacted, 0);
    expect_pop(fifo, "ns/foo", 5, TYPES(A, M, M, D, A), RVS(1, 2, 3, 4, 5));
    expect_empty(fifo);
    kb_deltafifo_destroy(fifo);
}

/* A key keeps its slot while deltas arrive (client-go behaviour 32); once
 * popped it comes back at the tail. */
static void test_queue_slot(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = kb_deltafifo_new(KB_COMPACTION_NONE, 1 << 20);
    push(fifo, A, "foo", "u", 10);
    push(fifo, A, "bar", "u", 1);
    push(fifo, A, "foo", "u", 11);
    push(fifo, A, "foo", "u", 13);
    push(fifo, A, "zab", "u", 30);
    assert_true(kb_deltafifo_has_pending(fifo, "ns/foo", 6, kb_fnv1a64("ns/foo", 6)));
    expect_pop(fifo, "ns/foo", 3, TYPES(A, A, A), RVS(10, 11, 13));
    assert_false(kb_deltafifo_has_pending(fifo, "ns/foo", 6, kb_fnv1a64("ns/foo", 6)));
    push(fifo, A, "foo", "u", 14);
    expect_pop(fifo, "ns/bar", 1, TYPES(A), RVS(1));
    expect_pop(fifo, "ns/zab", 1, TYPES(A), RVS(30));
    expect_pop(fifo, "ns/foo", 1, TYPES(A), RVS(14));
    expect_empty(fifo);
    kb_deltafifo_destroy(fifo);
}

static kb_deltafifo_t *latest(void) {
    return kb_deltafifo_new(KB_COMPACTION_LATEST, 1 << 20);
}

static void expect_compacted(kb_deltafifo_t *fifo, uint64_t n) {
    kb_deltafifo_stats_t st;
    kb_deltafifo_stats(fifo, &st);
    assert_int_equal(st.compacted, n);
}

static void test_latest_added_modified(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = latest();
    push(fifo, A, "foo", "u1", 1);
    push(fifo, M, "foo", "u1", 2);
    push(fifo, M, "foo", "u1", 3);
    expect_compacted(fifo, 2);
    expect_pop(fifo, "ns/foo", 1, TYPES(A), RVS(3));
    kb_deltafifo_destroy(fifo);
}

static void test_latest_modified_modified(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = latest();
    push(fifo, M, "foo", "u1", 2);
    push(fifo, M, "foo", "u1", 3);
    expect_compacted(fifo, 1);
    expect_pop(fifo, "ns/foo", 1, TYPES(M), RVS(3));
    kb_deltafifo_destroy(fifo);
}

/* Added, Modified, Deleted while queued: the key leaves the queue, and the
 * keys behind it move up. */
static void test_latest_added_deleted_vanishes(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = latest();
    push(fifo, A, "foo", "u1", 1);
    push(fifo, A, "bar", "u1", 2);
    push(fifo, M, "foo", "u1", 3);
    push(fifo, D, "foo", "u1", 4);
    assert_false(kb_deltafifo_has_pending(fifo, "ns/foo", 6, kb_fnv1a64("ns/foo", 6)));
    expect_compacted(fifo, 3);
    /* foo lost its slot: pushed again, it queues behind bar. */
    push(fifo, A, "foo", "u2", 5);
    expect_pop(fifo, "ns/bar", 1, TYPES(A), RVS(2));
    expect_pop(fifo, "ns/foo", 1, TYPES(A), RVS(5));
    expect_empty(fifo);
    kb_deltafifo_destroy(fifo);
}

/* The journal's unacknowledged tail, queued again after a restart, may have
 * reached a sink before the crash: an ADDED from it that meets its DELETED
 * must leave the DELETED (issue: compaction = "latest" + restart lost a
 * delete for ever). Merges keep the mark. */
static void test_latest_redelivered_added_deleted_keeps_delete(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = latest();
    kb_event_t *a = mk(A, "ns", "foo", "u1", 1);
    a->redelivery = true;
    assert_int_equal(kb_deltafifo_push(fifo, a, 0), KB_OK);
    push(fifo, D, "foo", "u1", 4);
    expect_pop(fifo, "ns/foo", 1, TYPES(D), RVS(4));

    a = mk(A, "ns", "foo", "u1", 5);
    a->redelivery = true;
    assert_int_equal(kb_deltafifo_push(fifo, a, 0), KB_OK);
    push(fifo, M, "foo", "u1", 6); /* merged into the redelivered ADDED: the mark stays */
    push(fifo, D, "foo", "u1", 7);
    expect_pop(fifo, "ns/foo", 1, TYPES(D), RVS(7));
    expect_empty(fifo);
    kb_deltafifo_destroy(fifo);
}

/* After a crash the journal's tail is queued at once, so a key's redeliveries
 * merge into its newest state — which also drops changes that were compacted
 * away (never sent) before the crash, instead of sending them behind newer
 * ones. Found by the simulation: a compacted MODIFIED@7 came back after @8. */
static void test_latest_redeliveries_merge_to_the_newest(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = latest();
    unsigned rvs[] = {5, 7, 8};
    kb_event_type_t types[] = {A, M, M};
    for (int i = 0; i < 3; i++) {
        kb_event_t *e = mk(types[i], "ns", "foo", "u1", rvs[i]);
        e->redelivery = true;
        assert_int_equal(kb_deltafifo_push(fifo, e, 0), KB_OK);
    }
    kb_deltas_t d;
    kb_deltas_init(&d);
    assert_int_equal(kb_deltafifo_pop(fifo, &d, 0), KB_OK);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.ev[0]->type, A);
    assert_int_equal(d.ev[0]->rv_num, 8);
    assert_true(d.ev[0]->redelivery);
    kb_deltas_fini(&d);
    kb_deltafifo_destroy(fifo);
}

/* Deletes of two incarnations of a name are two deletes: merging them lost
 * the first one (uid u1's DELETED replaced by u2's). Found by the simulation. */
static void test_latest_deletes_of_two_uids_stay_two(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = latest();
    kb_event_t *fsu = mk(D, "ns", "foo", "u1", 4);
    kb_event_t *gone = kb_event_retype(fsu, D, true);
    kb_event_unref(fsu);
    assert_int_equal(kb_deltafifo_push(fifo, gone, 0), KB_OK);
    kb_event_t *a = mk(A, "ns", "foo", "u2", 5), *d = mk(D, "ns", "foo", "u2", 6);
    a->redelivery = d->redelivery = true; /* u2's ADDED may be at a sink: its DELETED must stay */
    assert_int_equal(kb_deltafifo_push(fifo, a, 0), KB_OK);
    assert_int_equal(kb_deltafifo_push(fifo, d, 0), KB_OK);
    push(fifo, D, "foo", "u3", 7);
    expect_pop(fifo, "ns/foo", 3, TYPES(D, D, D), RVS(4, 6, 7));
    expect_empty(fifo);
    kb_deltafifo_destroy(fifo);
}

static void test_latest_modified_deleted(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = latest();
    push(fifo, M, "foo", "u1", 2);
    push(fifo, M, "foo", "u1", 3);
    push(fifo, D, "foo", "u1", 4);
    expect_pop(fifo, "ns/foo", 1, TYPES(D), RVS(4));
    kb_deltafifo_destroy(fifo);
}

static void test_latest_deleted_added_stays_two(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = latest();
    push(fifo, D, "foo", "u1", 4);
    push(fifo, A, "foo", "u2", 5);
    expect_compacted(fifo, 0);
    expect_pop(fifo, "ns/foo", 2, TYPES(D, A), RVS(4, 5));
    kb_deltafifo_destroy(fifo);
}

static void test_latest_deleted_added_modified(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = latest();
    push(fifo, D, "foo", "u1", 4);
    push(fifo, A, "foo", "u2", 5);
    push(fifo, M, "foo", "u2", 6);
    expect_pop(fifo, "ns/foo", 2, TYPES(D, A), RVS(4, 6));
    /* … and a delete of the new object leaves only the old delete. */
    push(fifo, D, "foo", "u1", 7);
    push(fifo, A, "foo", "u2", 8);
    push(fifo, D, "foo", "u2", 9);
    expect_pop(fifo, "ns/foo", 1, TYPES(D), RVS(7));
    kb_deltafifo_destroy(fifo);
}

static void test_latest_sync(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = latest();
    push(fifo, S, "foo", "u1", 2);
    push(fifo, M, "foo", "u1", 3);
    expect_pop(fifo, "ns/foo", 1, TYPES(M), RVS(3));
    push(fifo, S, "foo", "u1", 3);
    push(fifo, KB_EV_SNAPSHOT, "foo", "u1", 3);
    push(fifo, D, "foo", "u1", 4);
    expect_pop(fifo, "ns/foo", 1, TYPES(D), RVS(4));
    /* A Sync behind a pending change adds nothing. */
    push(fifo, M, "foo", "u1", 5);
    push(fifo, S, "foo", "u1", 5);
    expect_pop(fifo, "ns/foo", 1, TYPES(M), RVS(5));
    kb_deltafifo_destroy(fifo);
}

/* A crash after a merged message was sent and before it was acknowledged,
 * as the informer lives it: every push is journalled with its seq and type,
 * a delta the queue drops counts done at once (the drop callback), the
 * checkpoint is the done prefix, and the next start queues the journal past
 * it again (marked redeliveries) and sends what that pops. */
typedef struct crash_case {
    kb_event_t *journal[8]; /* journal[seq - 1]: the change of seq, as pushed */
    bool done[8];
    size_t n;
} crash_case_t;

static void mark_done(void *opaque, const kb_event_t *ev) {
    ((crash_case_t *)opaque)->done[ev->seq - 1] = true;
}

static void crash_push(kb_deltafifo_t *fifo, crash_case_t *c, kb_event_t *ev) {
    ev->seq = c->n + 1;
    c->journal[c->n++] = kb_event_ref(ev);
    assert_int_equal(kb_deltafifo_push(fifo, ev, 0), KB_OK);
}

/* The consumer rule of docs/guarantees.md, for one key. */
typedef struct rule_view {
    uint64_t rv;
    bool deleted, fsu, live;
} rule_view_t;

static void rule_apply(rule_view_t *v, const kb_event_t *m) {
    bool del = m->type == KB_EV_DELETED;
    bool ge = m->rv_num > v->rv || (m->rv_num == v->rv && (del || !v->deleted));
    bool exception = m->type == KB_EV_ADDED && m->rv_num == v->rv && v->deleted && v->fsu;
    if (!ge && !exception)
        return;
    v->rv = m->rv_num;
    v->deleted = del;
    v->fsu = del && m->final_state_unknown;
    v->live = !del;
}

/* Pop every key of fifo (nothing acknowledged) and drop what was popped. */
static void pop_all_unacked(kb_deltafifo_t *fifo) {
    kb_deltas_t d;
    kb_deltas_init(&d);
    while (kb_deltafifo_pop(fifo, &d, 0) == KB_OK)
        kb_deltas_fini(&d);
}

/* The next start: the journal past the checkpoint, queued again, applied. */
static void replay_after_crash(crash_case_t *c, rule_view_t *v) {
    size_t cp = 0;
    while (cp < c->n && c->done[cp])
        cp++;
    kb_deltafifo_t *fifo = latest();
    for (size_t i = cp; i < c->n; i++) {
        kb_event_t *e = kb_event_retype(c->journal[i], c->journal[i]->type, c->journal[i]->final_state_unknown);
        e->seq = i + 1;
        e->redelivery = true;
        assert_int_equal(kb_deltafifo_push(fifo, e, 0), KB_OK);
    }
    kb_deltas_t d;
    kb_deltas_init(&d);
    while (kb_deltafifo_pop(fifo, &d, 0) == KB_OK) {
        for (size_t i = 0; i < d.n; i++)
            rule_apply(v, d.ev[i]);
        kb_deltas_fini(&d);
    }
    kb_deltafifo_destroy(fifo);
    for (size_t i = 0; i < c->n; i++)
        kb_event_unref(c->journal[i]);
}

/* A changed definition took an object in again unchanged: ADDED at the RV of
 * the DELETED (finalStateUnknown) the consumer applied last — the rule's
 * exception — then re-sent it in a new shape: MODIFIED at that same RV. Merged
 * into one ADDED that carried the MODIFIED's seq, the ADDED's seq counted
 * done, the checkpoint passed it, and after a crash the journal replayed the
 * MODIFIED alone, which the rule skips: the consumer lost the object (found by
 * the simulation, seeds 10290 and 15905). The rule reads the type only at an
 * equal RV, so there the two stay two; at a newer RV they still merge. */
static void test_latest_equal_rv_reshape_of_readded_survives_crash(void **state) {
    (void)state;
    crash_case_t c = {0};
    kb_deltafifo_t *fifo = latest();
    kb_deltafifo_set_drop(fifo, mark_done, &c);
    crash_push(fifo, &c, mk(A, "ns", "foo", "u1", 5));
    crash_push(fifo, &c, mk(M, "ns", "foo", "u1", 5));
    pop_all_unacked(fifo); /* sent, then the crash: nothing acknowledged */
    kb_deltafifo_destroy(fifo);
    rule_view_t v = {.rv = 5, .deleted = true, .fsu = true}; /* it left: DELETED finalStateUnknown @5 */
    replay_after_crash(&c, &v);
    assert_true(v.live);
    assert_int_equal(v.rv, 5);

    fifo = latest();
    push(fifo, A, "foo", "u1", 5);
    push(fifo, M, "foo", "u1", 5);
    push(fifo, M, "foo", "u1", 6);
    expect_pop(fifo, "ns/foo", 2, TYPES(A, M), RVS(5, 6));
    /* The other way round the merged MODIFIED would be sent where the rule
     * applies only the ADDED. */
    push(fifo, M, "foo", "u1", 7);
    push(fifo, A, "foo", "u1", 7);
    expect_pop(fifo, "ns/foo", 2, TYPES(M, A), RVS(7, 7));
    kb_deltafifo_destroy(fifo);
}

/* Two deletes fold into one; a real delete beats a relist tombstone. */
static void test_latest_deleted_deleted(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = latest();
    push(fifo, D, "foo", "u1", 4);
    kb_event_t *ev = mk(D, "ns", "foo", "u1", 3);
    kb_event_t *tomb = kb_event_retype(ev, KB_EV_DELETED, true);
    kb_event_unref(ev);
    assert_int_equal(kb_deltafifo_push(fifo, tomb, 0), KB_OK);
    kb_deltas_t d;
    kb_deltas_init(&d);
    assert_int_equal(kb_deltafifo_pop(fifo, &d, 0), KB_OK);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.ev[0]->rv_num, 4);
    assert_false(d.ev[0]->final_state_unknown);
    kb_deltas_fini(&d);
    kb_deltafifo_destroy(fifo);
}

/* Merged events are new objects; the originals are released (ASan/LSan
 * would report a leak otherwise) and bytes track what is queued. */
static void test_latest_bytes(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = latest();
    kb_event_t *a = mk(A, "ns", "foo", "u1", 1);
    kb_event_t *m = mk(M, "ns", "foo", "u1", 22);
    size_t msize = kb_event_size(m);
    assert_int_equal(kb_deltafifo_push(fifo, a, 0), KB_OK);
    assert_int_equal(kb_deltafifo_push(fifo, m, 0), KB_OK);
    kb_deltafifo_stats_t st;
    kb_deltafifo_stats(fifo, &st);
    assert_int_equal(st.deltas, 1);
    assert_int_equal(st.bytes, msize);
    kb_deltafifo_destroy(fifo); /* frees what is queued */
}

/* --- byte bound, blocking, close, timeouts ------------------------------- */

struct pusher_arg {
    kb_deltafifo_t *fifo;
    kb_event_t *ev;
    int timeout_ms;
    kb_err_t rc;
};

static void *pusher_once(void *p) {
    struct pusher_arg *a = p;
    a->rc = kb_deltafifo_push(a->fifo, a->ev, a->timeout_ms);
    return NULL;
}

struct popper_arg {
    kb_deltafifo_t *fifo;
    kb_err_t rc;
};

static void *popper_once(void *p) {
    struct popper_arg *a = p;
    kb_deltas_t d;
    kb_deltas_init(&d);
    a->rc = kb_deltafifo_pop(a->fifo, &d, -1);
    kb_deltas_fini(&d);
    return NULL;
}

/* Poll until the stats counter at offset off reaches n, 10 s at most. */
static void wait_counter(kb_deltafifo_t *fifo, size_t off, uint64_t n, const char *what) {
    int64_t end = kb_now_mono_ns() + 10 * KB_NS_PER_SEC;
    kb_deltafifo_stats_t st;
    do {
        kb_deltafifo_stats(fifo, &st);
        uint64_t v;
        memcpy(&v, (const char *)&st + off, sizeof(v));
        if (v >= n)
            return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    } while (kb_now_mono_ns() < end);
    fail_msg("%s", what);
}

/* A pusher is parked (full_waits reached n). */
static void wait_full_waits(kb_deltafifo_t *fifo, uint64_t n) {
    wait_counter(fifo, offsetof(kb_deltafifo_stats_t, full_waits), n, "no pusher waited for room");
}

/* The popper sleeps (pop_waits reached n). */
static void wait_pop_waits(kb_deltafifo_t *fifo, uint64_t n) {
    wait_counter(fifo, offsetof(kb_deltafifo_stats_t, pop_waits), n, "the popper did not wait");
}

static void test_bound_blocks_until_pop(void **state) {
    (void)state;
    /* A bound smaller than any event: the empty queue still takes one. */
    kb_deltafifo_t *fifo = kb_deltafifo_new(KB_COMPACTION_NONE, 1);
    push(fifo, A, "a", "u", 1);
    /* Full: try once, and a short timeout, both give up and drop the event. */
    assert_int_equal(kb_deltafifo_push(fifo, mk(A, "ns", "b", "u", 2), 0), KB_ERR_TIMEDOUT);
    assert_int_equal(kb_deltafifo_push(fifo, mk(A, "ns", "b", "u", 2), 20), KB_ERR_TIMEDOUT);

    struct pusher_arg pa = {fifo, mk(A, "ns", "c", "u", 3), -1, KB_ERR_INTERNAL};
    pthread_t t;
    pthread_create(&t, NULL, pusher_once, &pa);
    wait_full_waits(fifo, 2);
    expect_pop(fifo, "ns/a", 1, TYPES(A), RVS(1)); /* makes room and wakes it */
    pthread_join(t, NULL);
    assert_int_equal(pa.rc, KB_OK);
    expect_pop(fifo, "ns/c", 1, TYPES(A), RVS(3));
    kb_deltafifo_stats_t st;
    kb_deltafifo_stats(fifo, &st);
    assert_int_equal(st.pushed, 2);
    kb_deltafifo_destroy(fifo);
}

static void test_close_wakes_pusher_and_drains(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = kb_deltafifo_new(KB_COMPACTION_NONE, 1);
    push(fifo, A, "a", "u", 1);
    struct pusher_arg pa = {fifo, mk(A, "ns", "b", "u", 2), -1, KB_ERR_INTERNAL};
    pthread_t t;
    pthread_create(&t, NULL, pusher_once, &pa);
    wait_full_waits(fifo, 1);
    kb_deltafifo_close(fifo);
    pthread_join(t, NULL);
    assert_int_equal(pa.rc, KB_ERR_CLOSED);
    /* After close: pushes fail (and release the event), pops drain. */
    assert_int_equal(kb_deltafifo_push(fifo, mk(A, "ns", "c", "u", 3), -1), KB_ERR_CLOSED);
    expect_pop(fifo, "ns/a", 1, TYPES(A), RVS(1));
    kb_deltas_t d;
    kb_deltas_init(&d);
    assert_int_equal(kb_deltafifo_pop(fifo, &d, -1), KB_ERR_CLOSED);
    assert_int_equal(kb_deltafifo_pop(fifo, &d, 0), KB_ERR_CLOSED);
    kb_deltafifo_destroy(fifo);
}

static void test_close_wakes_popper(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = kb_deltafifo_new(KB_COMPACTION_NONE, 1 << 20);
    kb_deltas_t d;
    kb_deltas_init(&d);
    assert_int_equal(kb_deltafifo_pop(fifo, &d, 0), KB_ERR_TIMEDOUT);
    assert_int_equal(kb_deltafifo_pop(fifo, &d, 20), KB_ERR_TIMEDOUT);
    struct popper_arg pa = {fifo, KB_ERR_INTERNAL};
    pthread_t t;
    pthread_create(&t, NULL, popper_once, &pa);
    kb_deltafifo_close(fifo);
    pthread_join(t, NULL);
    assert_int_equal(pa.rc, KB_ERR_CLOSED);
    kb_deltafifo_destroy(fifo);
    kb_deltafifo_destroy(NULL);
}

/* A blocked pop is released by a push from another thread. */
static void test_push_wakes_popper(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = kb_deltafifo_new(KB_COMPACTION_NONE, 1 << 20);
    struct popper_arg pa = {fifo, KB_ERR_INTERNAL};
    pthread_t t;
    pthread_create(&t, NULL, popper_once, &pa);
    push(fifo, A, "a", "u", 1);
    pthread_join(t, NULL);
    assert_int_equal(pa.rc, KB_OK);
    kb_deltafifo_destroy(fifo);
}

struct popper_n_arg {
    kb_deltafifo_t *fifo;
    int n;       /* pops to make */
    int popped;  /* that returned KB_OK */
};

static void *popper_n(void *p) {
    struct popper_n_arg *a = p;
    for (int i = 0; i < a->n; i++) {
        kb_deltas_t d;
        kb_deltas_init(&d);
        if (kb_deltafifo_pop(a->fifo, &d, -1) == KB_OK)
            a->popped++;
        kb_deltas_fini(&d);
    }
    return NULL;
}

/* Held pushes queue a batch; one wake releases the blocked popper for all of it. */
static void test_held_pushes_then_one_wake(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = kb_deltafifo_new(KB_COMPACTION_NONE, 1 << 20);
    kb_deltafifo_wake(fifo); /* nothing held: a no-op */
    struct popper_n_arg pa = {fifo, 3, 0};
    pthread_t t;
    pthread_create(&t, NULL, popper_n, &pa);
    wait_pop_waits(fifo, 1);
    for (unsigned i = 1; i <= 3; i++) {
        char name[8];
        snprintf(name, sizeof(name), "k%u", i);
        assert_int_equal(kb_deltafifo_push_held(fifo, mk(A, "ns", name, "u", i), -1), KB_OK);
    }
    kb_deltafifo_wake(fifo);
    pthread_join(t, NULL);
    assert_int_equal(pa.popped, 3);
    kb_deltafifo_destroy(fifo);
}

/* A held push that must wait for room wakes the popper for what it holds
 * first: otherwise the popper sleeps on a full queue and the pusher waits
 * for room for ever. */
static void test_held_push_waiting_for_room_wakes_popper(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = kb_deltafifo_new(KB_COMPACTION_NONE, 1); /* full after one event */
    struct popper_n_arg pa = {fifo, 2, 0};
    pthread_t t;
    pthread_create(&t, NULL, popper_n, &pa);
    wait_pop_waits(fifo, 1); /* asleep before anything is queued: only a wake moves it */
    assert_int_equal(kb_deltafifo_push_held(fifo, mk(A, "ns", "a", "u", 1), -1), KB_OK);
    assert_int_equal(kb_deltafifo_push_held(fifo, mk(A, "ns", "b", "u", 2), -1), KB_OK);
    kb_deltafifo_wake(fifo);
    pthread_join(t, NULL);
    assert_int_equal(pa.popped, 2);
    kb_deltafifo_destroy(fifo);
}

/* --- the coalescing window (an injected clock) ---------------------------- */

static int64_t fake_now;
static int64_t fake_clock(void *opaque) {
    (void)opaque;
    return fake_now;
}

#define MS 1000000LL

static kb_deltafifo_t *windowed(int64_t window_ms) {
    kb_deltafifo_t *fifo = kb_deltafifo_new(KB_COMPACTION_LATEST, 1 << 20);
    fake_now = 1000 * MS;
    kb_deltafifo_set_coalesce(fifo, window_ms * MS, fake_clock, NULL);
    return fifo;
}

static void expect_held(kb_deltafifo_t *fifo) {
    kb_deltas_t d;
    kb_deltas_init(&d);
    assert_int_equal(kb_deltafifo_pop(fifo, &d, 0), KB_ERR_TIMEDOUT);
    assert_int_equal(d.n, 0);
}

/* A burst inside the window is one pop of the latest state, not before the window ends. */
static void test_window_merges_burst(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = windowed(1000);
    push(fifo, A, "a", "u", 1);
    for (unsigned rv = 2; rv <= 40; rv++) {
        fake_now += 7 * MS;
        push(fifo, M, "a", "u", rv);
        expect_held(fifo);
    }
    fake_now = 1000 * MS + 999 * MS;
    expect_held(fifo);
    fake_now += MS;
    expect_pop(fifo, "ns/a", 1, TYPES(A), RVS(40));
    expect_empty(fifo);
    kb_deltafifo_destroy(fifo);
}

/* The window starts at the first delta and is not restarted by later ones. */
static void test_window_no_starvation(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = windowed(100);
    int64_t t0 = fake_now;
    unsigned rv = 1;
    push(fifo, A, "a", "u", rv++);
    while (fake_now < t0 + 99 * MS) {
        fake_now += MS;
        push(fifo, M, "a", "u", rv++);
        expect_held(fifo);
    }
    fake_now = t0 + 100 * MS;
    expect_pop(fifo, "ns/a", 1, TYPES(A), RVS(rv - 1));
    /* The burst goes on: the next window starts at the next delta. */
    push(fifo, M, "a", "u", rv++);
    expect_held(fifo);
    fake_now += 100 * MS;
    expect_pop(fifo, "ns/a", 1, TYPES(M), RVS(rv - 1));
    kb_deltafifo_destroy(fifo);
}

/* Keys come out in the order their windows end; a delete goes at once and
 * takes its older changes with it, in order; held keys stay held. */
static void test_window_delete_not_held(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = windowed(1000);
    push(fifo, M, "a", "u", 1);
    fake_now += 10 * MS;
    push(fifo, M, "b", "u", 2);
    push(fifo, M, "b", "u", 3);
    push(fifo, D, "b", "u", 4);
    expect_pop(fifo, "ns/b", 1, TYPES(D), RVS(4));
    expect_held(fifo);
    /* Deleted then Added (a new uid) stays two, in order, at once. */
    push(fifo, D, "c", "u1", 5);
    push(fifo, A, "c", "u2", 6);
    expect_pop(fifo, "ns/c", 2, TYPES(D, A), RVS(5, 6));
    expect_held(fifo);
    fake_now += 990 * MS;
    expect_pop(fifo, "ns/a", 1, TYPES(M), RVS(1));
    expect_empty(fifo);
    kb_deltafifo_destroy(fifo);
}

/* Ready keys and keys whose window ended go in the order they came. */
static void test_window_order(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = windowed(100);
    push(fifo, M, "a", "u", 1);
    fake_now += 50 * MS;
    push(fifo, M, "b", "u", 2);
    push(fifo, D, "c", "u", 3);
    fake_now += 60 * MS;
    push(fifo, M, "d", "u", 4);
    expect_pop(fifo, "ns/a", 1, TYPES(M), RVS(1));
    expect_pop(fifo, "ns/c", 1, TYPES(D), RVS(3));
    expect_held(fifo);
    fake_now += 40 * MS;
    expect_pop(fifo, "ns/b", 1, TYPES(M), RVS(2));
    expect_held(fifo);
    fake_now += 60 * MS;
    expect_pop(fifo, "ns/d", 1, TYPES(M), RVS(4));
    kb_deltafifo_destroy(fifo);
}

/* close ends every window: shutdown drains at once. */
static void test_window_close_drains(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = windowed(60000);
    push(fifo, A, "a", "u", 1);
    push(fifo, M, "a", "u", 2);
    push(fifo, M, "b", "u", 3);
    expect_held(fifo);
    kb_deltafifo_close(fifo);
    expect_pop(fifo, "ns/a", 1, TYPES(A), RVS(2));
    expect_pop(fifo, "ns/b", 1, TYPES(M), RVS(3));
    kb_deltas_t d;
    kb_deltas_init(&d);
    assert_int_equal(kb_deltafifo_pop(fifo, &d, 0), KB_ERR_CLOSED);
    kb_deltafifo_destroy(fifo);
}

/* Merged-away deltas are reported to the drop callback (the ledger counts them
 * done) while the merged delta is still queued, window or not. */
static void count_drop(void *opaque, const kb_event_t *ev) {
    (void)ev;
    (*(int *)opaque)++;
}

static void test_window_drop_callback(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = windowed(1000);
    int drops = 0;
    kb_deltafifo_set_drop(fifo, count_drop, &drops);
    for (unsigned rv = 1; rv <= 5; rv++)
        push(fifo, M, "a", "u", rv);
    assert_int_equal(drops, 4);
    fake_now += 1000 * MS;
    expect_pop(fifo, "ns/a", 1, TYPES(M), RVS(5));
    assert_int_equal(drops, 4);
    kb_deltafifo_destroy(fifo);
}

/* With the real clock, a blocking pop sleeps until the window ends, no longer
 * than its own timeout, and a delete pushed meanwhile wakes it. The window is
 * measured from the push: a lower bound that holds however slow the machine is. */
static void test_window_real_clock(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = kb_deltafifo_new(KB_COMPACTION_LATEST, 1 << 20);
    kb_deltafifo_set_coalesce(fifo, 50 * MS, NULL, NULL);
    int64_t t0 = kb_now_mono_ns();
    push(fifo, M, "a", "u", 1);
    kb_deltas_t d;
    kb_deltas_init(&d);
    /* Within the window a short pop times out; on a machine so slow that the
     * window has ended by then, it pops — but never before the window's end. */
    kb_err_t err = kb_deltafifo_pop(fifo, &d, 1);
    if (err == KB_ERR_TIMEDOUT)
        err = kb_deltafifo_pop(fifo, &d, -1);
    assert_int_equal(err, KB_OK);
    assert_true(kb_now_mono_ns() - t0 >= 50 * MS);
    kb_deltas_fini(&d);
    /* A window of a minute: the delete wakes the popper. */
    kb_deltafifo_set_coalesce(fifo, 60000 * MS, NULL, NULL);
    push(fifo, M, "b", "u", 2);
    struct popper_arg pa = {fifo, KB_ERR_INTERNAL};
    pthread_t t;
    pthread_create(&t, NULL, popper_once, &pa);
    push(fifo, D, "b", "u", 3);
    pthread_join(t, NULL);
    assert_int_equal(pa.rc, KB_OK);
    kb_deltafifo_destroy(fifo);
}

/* Without compaction the window is ignored. */
static void test_window_needs_latest(void **state) {
    (void)state;
    kb_deltafifo_t *fifo = kb_deltafifo_new(KB_COMPACTION_NONE, 1 << 20);
    kb_deltafifo_set_coalesce(fifo, 60000 * MS, fake_clock, NULL);
    push(fifo, M, "a", "u", 1);
    expect_pop(fifo, "ns/a", 1, TYPES(M), RVS(1));
    kb_deltafifo_destroy(fifo);
}

/* --- stress --------------------------------------------------------------- */

enum { STRESS_KEYS = 17, STRESS_ITERS = 1000, STRESS_PUSHERS = 2 };
#define STRESS_EVENTS (STRESS_ITERS * STRESS_KEYS / 4)

struct stress_pusher {
    kb_deltafifo_t *fifo;
    int id;
    bool lifecycle;                 /* LATEST: Added/Modified/Deleted per key lifecycle */
    kb_err_t rc;                    /* first push failure (asserted in the main thread) */
    unsigned last_rv[STRESS_KEYS];  /* rv of the last event pushed per key */
    bool present[STRESS_KEYS];      /* the key exists after the last event */
};

/* Pusher p owns namespace "p<id>", so per-key order is its push order. */
static void *stress_push(void *arg) {
    struct stress_pusher *sp = arg;
    unsigned seed = (unsigned)sp->id * 7919u + 1;
    char ns[8], name[16], uid[16];
    snprintf(ns, sizeof(ns), "p%d", sp->id);
    for (unsigned i = 0; i < STRESS_EVENTS; i++) {
        int k = rand_r(&seed) % STRESS_KEYS;
        snprintf(name, sizeof(name), "k%d", k);
        kb_event_type_t type = KB_EV_MODIFIED;
        if (sp->lifecycle) {
            if (!sp->present[k])
                type = KB_EV_ADDED;
            else if (rand_r(&seed) % 4 == 0)
                type = KB_EV_DELETED;
        }
        /* rv grows per key; a new uid after each delete. */
        unsigned rv = ++sp->last_rv[k];
        snprintf(uid, sizeof(uid), "u%u", type == KB_EV_ADDED ? rv : 0);
        kb_err_t rc = kb_deltafifo_push(sp->fifo, mk(type, ns, name, uid, rv), -1);
        if (rc != KB_OK && sp->rc == KB_OK)
            sp->rc = rc;
        sp->present[k] = type != KB_EV_DELETED;
    }
    return NULL;
}

struct stress_closer {
    kb_deltafifo_t *fifo;
    pthread_t pushers[STRESS_PUSHERS];
};

/* Close the queue once every pusher is done; the popper then drains it. */
static void *stress_close(void *arg) {
    struct stress_closer *sc = arg;
    for (int i = 0; i < STRESS_PUSHERS; i++)
        pthread_join(sc->pushers[i], NULL);
    kb_deltafifo_close(sc->fifo);
    return NULL;
}

static void run_stress(kb_compaction_t mode) {
    /* A small bound so pushers block and are woken by pops all along. */
    kb_deltafifo_t *fifo = kb_deltafifo_new(mode, 2048);
    struct stress_pusher sp[STRESS_PUSHERS];
    struct stress_closer sc = {.fifo = fifo};
    for (int i = 0; i < STRESS_PUSHERS; i++) {
        memset(&sp[i], 0, sizeof(sp[i]));
        sp[i].fifo = fifo;
        sp[i].id = i;
        sp[i].lifecycle = mode == KB_COMPACTION_LATEST;
        pthread_create(&sc.pushers[i], NULL, stress_push, &sp[i]);
    }
    pthread_t closer;
    pthread_create(&closer, NULL, stress_close, &sc);

    /* The popper (this thread) applies what it pops to its own view. */
    unsigned seen_rv[STRESS_PUSHERS][STRESS_KEYS] = {{0}};
    bool seen_present[STRESS_PUSHERS][STRESS_KEYS] = {{false}};
    size_t total = 0;
    kb_deltas_t d;
    kb_deltas_init(&d);
    kb_err_t rc;
    while ((rc = kb_deltafifo_pop(fifo, &d, -1)) == KB_OK) {
        int p = d.ev[0]->ns[1] - '0';
        int k = atoi(d.ev[0]->name + 1);
        for (size_t i = 0; i < d.n; i++) {
            const kb_event_t *ev = d.ev[i];
            assert_string_equal(ev->key, d.ev[0]->key);
            /* Per-key order: oldest first; NONE loses nothing in between. */
            if (mode == KB_COMPACTION_NONE)
                assert_int_equal(ev->rv_num, seen_rv[p][k] + 1);
            else
                assert_true(ev->rv_num > seen_rv[p][k]);
            seen_rv[p][k] = (unsigned)ev->rv_num;
            seen_present[p][k] = ev->type != KB_EV_DELETED;
            total++;
        }
        kb_deltas_fini(&d);
    }
    assert_int_equal(rc, KB_ERR_CLOSED);
    pthread_join(closer, NULL);

    size_t expected = (size_t)STRESS_PUSHERS * STRESS_EVENTS;
    kb_deltafifo_stats_t st;
    kb_deltafifo_stats(fifo, &st);
    assert_int_equal(st.pushed, expected);
    assert_int_equal(st.deltas, 0);
    assert_int_equal(st.bytes, 0);
    assert_true(st.full_waits > 0);
    assert_int_equal(total + st.compacted, expected);
    if (mode == KB_COMPACTION_NONE)
        assert_int_equal(st.compacted, 0); /* every event delivered */
    else
        assert_true(st.compacted > 0);
    /* The last popped state per key is the last pushed state. */
    for (int p = 0; p < STRESS_PUSHERS; p++) {
        assert_int_equal(sp[p].rc, KB_OK);
        for (int k = 0; k < STRESS_KEYS; k++) {
            assert_int_equal(seen_present[p][k], sp[p].present[k]);
            if (sp[p].present[k])
                assert_int_equal(seen_rv[p][k], sp[p].last_rv[k]);
        }
    }
    kb_deltafifo_destroy(fifo);
}

static void test_stress_none(void **state) {
    (void)state;
    run_stress(KB_COMPACTION_NONE);
}

static void test_stress_latest(void **state) {
    (void)state;
    run_stress(KB_COMPACTION_LATEST);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none_keeps_everything),
        cmocka_unit_test(test_queue_slot),
        cmocka_unit_test(test_latest_added_modified),
        cmocka_unit_test(test_latest_modified_modified),
        cmocka_unit_test(test_latest_added_deleted_vanishes),
        cmocka_unit_test(test_latest_redelivered_added_deleted_keeps_delete),
        cmocka_unit_test(test_latest_redeliveries_merge_to_the_newest),
        cmocka_unit_test(test_latest_deletes_of_two_uids_stay_two),
        cmocka_unit_test(test_latest_modified_deleted),
        cmocka_unit_test(test_latest_deleted_added_stays_two),
        cmocka_unit_test(test_latest_deleted_added_modified),
        cmocka_unit_test(test_latest_sync),
        cmocka_unit_test(test_latest_deleted_deleted),
        cmocka_unit_test(test_latest_equal_rv_reshape_of_readded_survives_crash),
        cmocka_unit_test(test_latest_bytes),
        cmocka_unit_test(test_bound_blocks_until_pop),
        cmocka_unit_test(test_close_wakes_pusher_and_drains),
        cmocka_unit_test(test_close_wakes_popper),
        cmocka_unit_test(test_push_wakes_popper),
        cmocka_unit_test(test_held_pushes_then_one_wake),
        cmocka_unit_test(test_held_push_waiting_for_room_wakes_popper),
        cmocka_unit_test(test_window_merges_burst),
        cmocka_unit_test(test_window_no_starvation),
        cmocka_unit_test(test_window_delete_not_held),
        cmocka_unit_test(test_window_order),
        cmocka_unit_test(test_window_close_drains),
        cmocka_unit_test(test_window_drop_callback),
        cmocka_unit_test(test_window_real_clock),
        cmocka_unit_test(test_window_needs_latest),
        cmocka_unit_test(test_stress_none),
        cmocka_unit_test(test_stress_latest),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
