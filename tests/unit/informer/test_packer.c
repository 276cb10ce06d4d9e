/* tests/unit/informer/test_packer.c — compression off the reflector thread:
 * every queued entry ends packed and expands to its bytes, an entry replaced
 * before its turn keeps the newer event, a full queue waits without a hang,
 * and stop packs what is queued. */
#include "common/event.h"
#include "common/hash.h"
#include "common/selector.h"
#include "informer/indexer.h"
#include "informer/packer.h"
#include "informer/zcache.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static kb_resource_t *res;

/* The varying parts of the objects: the hash of a counter. */
static uint64_t rnd(void) {
    static uint64_t n;
    n++;
    return kb_fnv1a64((const char *)&n, sizeof(n));
}

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

/* A small Pod-like object named pod-<i> at rv, its varying parts random. */
static kb_event_t *mk(unsigned i, unsigned rv) {
    char name[32], rvs[16], obj[2048];
    snprintf(name, sizeof(name), "pod-%u", i);
    snprintf(rvs, sizeof(rvs), "%u", rv);
    int n = snprintf(obj, sizeof(obj),
        "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"ns-%u\","
        "\"uid\":\"%016llx\",\"resourceVersion\":\"%s\",\"labels\":{\"app\":\"a%u\"}},\"spec\":{\"containers\":"
        "[{\"name\":\"app\",\"image\":\"registry.example.com/app:1.%u\",\"imagePullPolicy\":\"IfNotPresent\","
        "\"terminationMessagePath\":\"/dev/termination-log\"}],\"nodeName\":\"node-%u\",\"restartPolicy\":"
        "\"Always\",\"dnsPolicy\":\"ClusterFirst\",\"schedulerName\":\"default-scheduler\"},\"status\":{\"phase\":"
        "\"Running\",\"podIP\":\"10.244.%u.%u\",\"hostIP\":\"10.0.%u.%u\",\"qosClass\":\"BestEffort\"}}",
        name, i % 5, (unsigned long long)rnd(), rvs, i % 9, (unsigned)(rnd() % 30), (unsigned)(rnd() % 99),
        (unsigned)(rnd() % 250), (unsigned)(rnd() % 250), (unsigned)(rnd() % 250), (unsigned)(rnd() % 250));
    assert_true(n > 0 && (size_t)n < sizeof(obj));
    char ns[16];
    snprintf(ns, sizeof(ns), "ns-%u", i % 5);
    const char *lo = strstr(obj, "\"labels\":") + strlen("\"labels\":");
    const char *le = strchr(lo, '}') + 1;
    const char *uid = strstr(obj, "\"uid\":\"") + strlen("\"uid\":\"");
    kb_event_init_t in = {
        .type = KB_EV_ADDED, .res = res,
        .ns = ns, .ns_len = strlen(ns),
        .name = name, .name_len = strlen(name),
        .uid = uid, .uid_len = 16,
        .rv = rvs, .rv_len = strlen(rvs),
        .obj = obj, .obj_len = (size_t)n,
        .labels_off = (size_t)(lo - obj), .labels_len = (size_t)(le - lo),
    };
    return kb_event_new(&in);
}

/* Cache ev as it came and queue it, as the ingest step does with a packer. */
static void cache(kb_indexer_t *idx, kb_packer_t *pk, kb_event_t *ev) {
    kb_indexer_put(idx, ev, ev->obj + ev->labels_off, ev->labels_len, NULL);
    kb_packer_put(pk, ev);
}

static kb_zcache_t *zcache(kb_indexer_t *idx) {
    kb_zcache_opts_t o;
    kb_zcache_opts_default(&o);
    o.sample_objects = 200; /* ~100 KB of samples: a dictionary after 200 objects */
    return kb_zcache_new(&o, "pods", idx);
}

/* The entry of ev's key is ev's version, packed (when packed) or ev itself,
 * and expands to exactly ev's object. */
static void assert_entry_is(kb_indexer_t *idx, const kb_event_t *ev, bool packed) {
    kb_event_t *e = kb_indexer_get(idx, ev->key, ev->key_len, ev->key_hash);
    assert_non_null(e);
    if (packed)
        assert_non_null(e->zdict);
    else if (!e->zdict)
        assert_ptr_equal(e, ev);
    assert_int_equal(e->rv_len, ev->rv_len);
    assert_memory_equal(e->rv, ev->rv, ev->rv_len);
    kb_event_t *full = kb_zcache_unpack(e);
    assert_non_null(full);
    assert_int_equal(full->obj_len, ev->obj_len);
    assert_memory_equal(full->obj, ev->obj, ev->obj_len);
    kb_event_unref(full);
    kb_event_unref(e);
}

static void assert_packed_as(kb_indexer_t *idx, const kb_event_t *ev) {
    assert_entry_is(idx, ev, true);
}

static void test_packs_everything(void **state) {
    (void)state;
    enum { N = 1500 };
    kb_indexer_t *idx = kb_indexer_new(4, (const char *const[]){"app"}, 1);
    kb_zcache_t *zc = zcache(idx);
    kb_packer_t *pk = kb_packer_new(zc, idx, "pods", 1u << 20);
    kb_packer_start(pk);
    assert_true(kb_packer_running(pk));
    kb_event_t **evs = calloc(N, sizeof(*evs));
    for (unsigned i = 0; i < N; i++) {
        evs[i] = mk(i, 100 + i);
        cache(idx, pk, evs[i]);
        if (i % 64 == 63)
            kb_packer_wake(pk); /* a batch's end */
    }
    kb_packer_stop(pk); /* the last, unwoken batch too */
    assert_false(kb_packer_running(pk));
    assert_int_equal(kb_indexer_count(idx), N);
    for (unsigned i = 0; i < N; i++) {
        assert_packed_as(idx, evs[i]);
        kb_event_unref(evs[i]);
    }
    free(evs);
    /* The label index still finds the swapped entries. */
    kb_selector_t *sel = kb_selector_parse("app=a3", NULL, 0);
    assert_non_null(sel);
    kb_event_list_t l;
    kb_event_list_init(&l);
    bool exact = false;
    kb_indexer_select(idx, NULL, sel, &l, &exact);
    assert_true(exact);
    assert_int_equal(l.n, N / 9 + (N % 9 > 3));
    for (size_t k = 0; k < l.n; k++)
        assert_non_null(l.ev[k]->zdict);
    kb_event_list_fini(&l);
    kb_selector_free(sel);
    kb_packer_destroy(pk);
    kb_zcache_destroy(zc);
    kb_indexer_destroy(idx);
}

/* A key changed after its entry was queued: the newer event stays, whatever
 * the packer's thread did meanwhile. */
static void test_newer_entry_wins(void **state) {
    (void)state;
    kb_indexer_t *idx = kb_indexer_new(4, NULL, 0);
    kb_zcache_t *zc = zcache(idx);
    kb_packer_t *pk = kb_packer_new(zc, idx, "pods", 1u << 20);
    kb_packer_start(pk);
    for (unsigned i = 0; i < 300; i++) { /* past the dictionary's training */
        kb_event_t *ev = mk(1000 + i, 1);
        cache(idx, pk, ev);
        kb_event_unref(ev);
    }
    kb_event_t *v1 = mk(7, 10), *v2 = mk(7, 11), *v3 = mk(8, 10), *v4 = mk(8, 12);
    cache(idx, pk, v1);
    kb_indexer_put(idx, v2, NULL, 0, NULL); /* replaced before v1's turn, v2 not queued */
    cache(idx, pk, v3);
    cache(idx, pk, v4); /* replaced and queued */
    kb_packer_wake(pk);
    kb_packer_stop(pk);
    /* v2 as it came (or packed by the first dictionary's sweep, if the thread
     * trained after v2 was cached): never v1's frame. */
    assert_entry_is(idx, v2, false);
    assert_packed_as(idx, v4);
    uint64_t packed, stale;
    kb_packer_counts(pk, &packed, &stale);
    assert_true(packed + stale <= 304); /* the split depends on when the thread trained its dictionary */
    kb_event_unref(v1);
    kb_event_unref(v2);
    kb_event_unref(v3);
    kb_event_unref(v4);
    kb_packer_destroy(pk);
    kb_zcache_destroy(zc);
    kb_indexer_destroy(idx);
}

/* A queue over its bound makes the producer wait for the thread, which it
 * wakes itself: no kb_packer_wake is needed to get through. */
static void test_full_queue_waits(void **state) {
    (void)state;
    kb_indexer_t *idx = kb_indexer_new(4, NULL, 0);
    kb_zcache_t *zc = zcache(idx);
    kb_packer_t *pk = kb_packer_new(zc, idx, "pods", 1);
    kb_packer_start(pk);
    kb_event_t *last = NULL;
    for (unsigned i = 0; i < 500; i++) {
        kb_event_unref(last);
        last = mk(i, 5);
        cache(idx, pk, last);
    }
    kb_packer_stop(pk);
    assert_packed_as(idx, last);
    kb_event_unref(last);
    kb_packer_destroy(pk);
    kb_zcache_destroy(zc);
    kb_indexer_destroy(idx);
}

/* Never started: destroy releases what was queued. */
static void test_destroy_unstarted(void **state) {
    (void)state;
    kb_indexer_t *idx = kb_indexer_new(4, NULL, 0);
    kb_zcache_t *zc = zcache(idx);
    kb_packer_t *pk = kb_packer_new(zc, idx, "pods", 1u << 20);
    assert_false(kb_packer_running(pk));
    kb_event_t *ev = mk(1, 1);
    kb_packer_put(pk, ev);
    kb_event_unref(ev);
    kb_packer_destroy(pk);
    kb_packer_destroy(NULL);
    kb_zcache_destroy(zc);
    kb_indexer_destroy(idx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packs_everything),
        cmocka_unit_test(test_newer_entry_wins),
        cmocka_unit_test(test_full_queue_waits),
        cmocka_unit_test(test_destroy_unstarted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
