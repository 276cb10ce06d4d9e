/* tests/unit/informer/test_indexer.c — the informer cache: entries, the
 * namespace index, counts and byte accounting, concurrent readers. */
#include "common/event.h"
#include "common/hash.h"
#include "informer/indexer.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
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

static kb_event_t *mk(const char *ns, const char *name, unsigned rv) {
    char rvs[16], obj[80];
    snprintf(rvs, sizeof(rvs), "%u", rv);
    int n = snprintf(obj, sizeof(obj), "{\"metadata\":{\"name\":\"%s\",\"resourceVersion\":\"%u\"}}", name, rv);
    kb_event_init_t in = {
        .type = KB_EV_ADDED,
        .res = res,
        .ns = ns, .ns_len = strlen(ns),
        .name = name, .name_len = strlen(name),
        .uid = "u", .uid_len = 1,
        .rv = rvs, .rv_len = strlen(rvs),
        .obj = obj, .obj_len = (size_t)n,
    };
    return kb_event_new(&in);
}

/* Store a fresh event and drop the caller's reference. */
static void put(kb_indexer_t *idx, const char *ns, const char *name, unsigned rv) {
    kb_event_t *ev = mk(ns, name, rv);
    kb_indexer_put(idx, ev, NULL);
    kb_event_unref(ev);
}

static kb_event_t *get(kb_indexer_t *idx, const char *key) {
    size_t len = strlen(key);
    return kb_indexer_get(idx, key, len, kb_fnv1a64(key, len));
}

static bool del(kb_indexer_t *idx, const char *key) {
    size_t len = strlen(key);
    return kb_indexer_delete(idx, key, len, kb_fnv1a64(key, len), NULL);
}

static void test_put_get_replace_delete(void **state) {
    (void)state;
    kb_indexer_t *idx = kb_indexer_new(4);
    assert_null(get(idx, "ns1/a"));

    kb_event_t *v1 = mk("ns1", "a", 1);
    kb_event_t *old = (kb_event_t *)1;
    kb_indexer_put(idx, v1, &old);
    assert_null(old);
    assert_int_equal(atomic_load(&v1->refcnt), 2); /* the caller's and the cache's */

    kb_event_t *got = get(idx, "ns1/a");
    assert_ptr_equal(got, v1);
    kb_event_unref(got);

    kb_event_t *v2 = mk("ns1", "a", 2);
    kb_indexer_put(idx, v2, &old);
    assert_ptr_equal(old, v1); /* handed back with the cache's reference */
    kb_event_unref(old);
    assert_int_equal(atomic_load(&v1->refcnt), 1);
    kb_event_unref(v1);
    assert_int_equal(kb_indexer_count(idx), 1);

    size_t klen = strlen("ns1/a");
    assert_true(kb_indexer_delete(idx, "ns1/a", klen, kb_fnv1a64("ns1/a", klen), &old));
    assert_ptr_equal(old, v2);
    kb_event_unref(old);
    assert_false(del(idx, "ns1/a"));
    assert_null(get(idx, "ns1/a"));
    assert_int_equal(kb_indexer_count(idx), 0);
    kb_event_unref(v2);
    kb_indexer_destroy(idx);
    kb_indexer_destroy(NULL);
}

/* Number of entries listed for ns, checking each belongs to it; *rv_of gets
 * the rv of the entry named name, if listed. */
static size_t list_ns(kb_indexer_t *idx, const char *ns, const char *name, uint64_t *rv_of) {
    kb_event_list_t l;
    kb_event_list_init(&l);
    kb_indexer_list(idx, ns, &l);
    size_t n = l.n;
    for (size_t i = 0; i < l.n; i++) {
        if (ns)
            assert_string_equal(l.ev[i]->ns, ns);
        if (name && rv_of && !strcmp(l.ev[i]->name, name))
            *rv_of = l.ev[i]->rv_num;
    }
    kb_event_list_fini(&l);
    return n;
}

static void test_namespace_index(void **state) {
    (void)state;
    kb_indexer_t *idx = kb_indexer_new(0);
    put(idx, "ns1", "a", 1);
    put(idx, "ns1", "b", 2);
    put(idx, "ns2", "c", 3);
    put(idx, "", "node1", 4); /* cluster-scoped: key "node1", namespace "" */
    assert_int_equal(kb_indexer_count(idx), 4);
    assert_int_equal(list_ns(idx, NULL, NULL, NULL), 4);
    assert_int_equal(list_ns(idx, "ns1", NULL, NULL), 2);
    assert_int_equal(list_ns(idx, "ns2", NULL, NULL), 1);
    assert_int_equal(list_ns(idx, "", NULL, NULL), 1);
    assert_int_equal(list_ns(idx, "nope", NULL, NULL), 0);

    kb_event_t *node = get(idx, "node1");
    assert_non_null(node);
    kb_event_unref(node);

    /* A replaced entry is listed in its new version. */
    uint64_t rv = 0;
    put(idx, "ns1", "b", 20);
    assert_int_equal(list_ns(idx, "ns1", "b", &rv), 2);
    assert_int_equal(rv, 20);

    /* Deletes shrink the namespace, down to nothing. */
    assert_true(del(idx, "ns1/a"));
    assert_int_equal(list_ns(idx, "ns1", NULL, NULL), 1);
    assert_true(del(idx, "ns1/b"));
    assert_int_equal(list_ns(idx, "ns1", NULL, NULL), 0);

    /* "Moving" c: deleted from ns2, created in ns3. */
    assert_true(del(idx, "ns2/c"));
    put(idx, "ns3", "c", 5);
    assert_int_equal(list_ns(idx, "ns2", NULL, NULL), 0);
    assert_int_equal(list_ns(idx, "ns3", "c", &rv), 1);
    assert_int_equal(rv, 5);
    assert_int_equal(list_ns(idx, NULL, NULL, NULL), 2);

    /* A list appends to what the caller already has. */
    kb_event_list_t l;
    kb_event_list_init(&l);
    kb_indexer_list(idx, "ns3", &l);
    kb_indexer_list(idx, "", &l);
    assert_int_equal(l.n, 2);
    kb_event_list_fini(&l);
    kb_indexer_destroy(idx);
}

/* Bytes count the entries and the tables; emptied, the indexer is back at
 * its starting size — also after churning through many namespaces. */
static void test_bytes_return_to_baseline(void **state) {
    (void)state;
    kb_indexer_t *idx = kb_indexer_new(16);
    size_t base = kb_indexer_bytes(idx);
    size_t ev_sum = 0;
    char ns[16], name[16], key[40];
    for (int i = 0; i < 5000; i++) {
        snprintf(ns, sizeof(ns), "ns%d", i % 97);
        snprintf(name, sizeof(name), "pod-%d", i);
        kb_event_t *ev = mk(ns, name, (unsigned)i + 1);
        ev_sum += kb_event_size(ev);
        kb_indexer_put(idx, ev, NULL);
        kb_event_unref(ev);
    }
    assert_int_equal(kb_indexer_count(idx), 5000);
    assert_true(kb_indexer_bytes(idx) >= base + ev_sum);
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "ns%d/pod-%d", i % 97, i);
        assert_true(del(idx, key));
    }
    assert_int_equal(kb_indexer_count(idx), 0);
    assert_int_equal(kb_indexer_bytes(idx), base);

    /* High-cardinality namespaces: each one created and emptied. */
    for (int i = 0; i < 20000; i++) {
        snprintf(ns, sizeof(ns), "tmp%d", i);
        put(idx, ns, "x", 1);
        if (i >= 8) {
            snprintf(key, sizeof(key), "tmp%d/x", i - 8);
            assert_true(del(idx, key));
        }
    }
    assert_int_equal(kb_indexer_count(idx), 8);
    for (int i = 20000 - 8; i < 20000; i++) {
        snprintf(key, sizeof(key), "tmp%d/x", i);
        assert_true(del(idx, key));
    }
    assert_int_equal(kb_indexer_bytes(idx), base);
    kb_indexer_destroy(idx);
}

/* --- concurrency ---------------------------------------------------------- */

enum { CONC_KEYS = 64, CONC_NS = 4, CONC_ROUNDS = 200, CONC_READERS = 4 };

struct conc {
    kb_indexer_t *idx;
    atomic_bool done;      /* the writer finished */
    atomic_int bad;        /* inconsistencies seen by readers */
};

static void conc_key(int k, char *ns, size_t nsz, char *name, size_t namesz) {
    snprintf(ns, nsz, "ns%d", k % CONC_NS);
    snprintf(name, namesz, "k%d", k);
}

/* Writer: every round puts each key with a growing rv, deleting every third. */
static void *conc_writer(void *arg) {
    struct conc *c = arg;
    char ns[8], name[8], key[20];
    for (unsigned r = 1; r <= CONC_ROUNDS; r++) {
        for (int k = 0; k < CONC_KEYS; k++) {
            conc_key(k, ns, sizeof(ns), name, sizeof(name));
            if ((k + (int)r) % 3 == 0) {
                snprintf(key, sizeof(key), "%s/%s", ns, name);
                del(c->idx, key);
            } else {
                put(c->idx, ns, name, r);
            }
        }
    }
    atomic_store(&c->done, true);
    return NULL;
}

/* Reader: gets never go back in rv for a key, and listings stay in their namespace. */
static void *conc_reader(void *arg) {
    struct conc *c = arg;
    uint64_t last[CONC_KEYS] = {0};
    char ns[8], name[8], key[20];
    unsigned seed = (unsigned)(uintptr_t)&last;
    do {
        int k = rand_r(&seed) % CONC_KEYS;
        conc_key(k, ns, sizeof(ns), name, sizeof(name));
        snprintf(key, sizeof(key), "%s/%s", ns, name);
        kb_event_t *ev = get(c->idx, key);
        if (ev) {
            if (strcmp(ev->key, key) || ev->rv_num < last[k])
                atomic_fetch_add(&c->bad, 1);
            last[k] = ev->rv_num;
            kb_event_unref(ev);
        }
        kb_event_list_t l;
        kb_event_list_init(&l);
        kb_indexer_list(c->idx, ns, &l);
        for (size_t i = 0; i < l.n; i++)
            if (strcmp(l.ev[i]->ns, ns))
                atomic_fetch_add(&c->bad, 1);
        kb_event_list_fini(&l);
        (void)kb_indexer_bytes(c->idx);
    } while (!atomic_load(&c->done));
    return NULL;
}

static void test_concurrent_readers_and_writer(void **state) {
    (void)state;
    struct conc c = {.idx = kb_indexer_new(8)};
    atomic_init(&c.done, false);
    atomic_init(&c.bad, 0);
    pthread_t w, r[CONC_READERS];
    for (int i = 0; i < CONC_READERS; i++)
        pthread_create(&r[i], NULL, conc_reader, &c);
    pthread_create(&w, NULL, conc_writer, &c);
    pthread_join(w, NULL);
    for (int i = 0; i < CONC_READERS; i++)
        pthread_join(r[i], NULL);
    assert_int_equal(atomic_load(&c.bad), 0);

    /* The final state is the last round's. */
    size_t expect = 0;
    for (int k = 0; k < CONC_KEYS; k++)
        expect += (k + CONC_ROUNDS) % 3 != 0;
    assert_int_equal(kb_indexer_count(c.idx), expect);
    size_t listed = 0;
    for (int n = 0; n < CONC_NS; n++) {
        char ns[8];
        snprintf(ns, sizeof(ns), "ns%d", n);
        listed += list_ns(c.idx, ns, NULL, NULL);
    }
    assert_int_equal(listed, expect);
    kb_indexer_destroy(c.idx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_replace_delete),
        cmocka_unit_test(test_namespace_index),
        cmocka_unit_test(test_bytes_return_to_baseline),
        cmocka_unit_test(test_concurrent_readers_and_writer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
