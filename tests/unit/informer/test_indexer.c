/* tests/unit/informer/test_indexer.c — the informer cache: entries, the
 * namespace and label indexes, queries, undo, counts and byte accounting,
 * concurrent readers. */
#include "common/event.h"
#include "common/hash.h"
#include "common/selector.h"
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
/* Whether query answers are checked against the events' own labels (off
 * where the labels are handed in apart from the events). */
static bool check_own_labels = true;

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

/* An event whose object has labels (a JSON object, or NULL for none). */
static kb_event_t *mk_l(const char *ns, const char *name, unsigned rv, const char *labels) {
    char rvs[16], obj[256];
    snprintf(rvs, sizeof(rvs), "%u", rv);
    int n = snprintf(obj, sizeof(obj), "{\"metadata\":{\"name\":\"%s\",\"resourceVersion\":\"%u\"%s%s}}", name,
                     rv, labels ? ",\"labels\":" : "", labels ? labels : "");
    kb_event_init_t in = {
        .type = KB_EV_ADDED,
        .res = res,
        .ns = ns, .ns_len = strlen(ns),
        .name = name, .name_len = strlen(name),
        .uid = "u", .uid_len = 1,
        .rv = rvs, .rv_len = strlen(rvs),
        .obj = obj, .obj_len = (size_t)n,
        .labels_off = labels ? (size_t)(strstr(obj, "\"labels\":") - obj) + 9 : 0,
        .labels_len = labels ? strlen(labels) : 0,
    };
    return kb_event_new(&in);
}

static kb_event_t *mk(const char *ns, const char *name, unsigned rv) {
    return mk_l(ns, name, rv, NULL);
}

/* Store ev filed under its own labels. */
static void put_ev(kb_indexer_t *idx, kb_event_t *ev, kb_indexer_old_t *old) {
    kb_indexer_put(idx, ev, ev->labels_len ? ev->obj + ev->labels_off : NULL, ev->labels_len, old);
}

/* Store a fresh event and drop the caller's reference. */
static void put_l(kb_indexer_t *idx, const char *ns, const char *name, unsigned rv, const char *labels) {
    kb_event_t *ev = mk_l(ns, name, rv, labels);
    put_ev(idx, ev, NULL);
    kb_event_unref(ev);
}

static void put(kb_indexer_t *idx, const char *ns, const char *name, unsigned rv) {
    put_l(idx, ns, name, rv, NULL);
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
    kb_indexer_t *idx = kb_indexer_new(4, NULL, 0);
    assert_null(get(idx, "ns1/a"));

    kb_event_t *v1 = mk("ns1", "a", 1);
    kb_indexer_old_t old = {.ev = (kb_event_t *)1};
    put_ev(idx, v1, &old);
    assert_null(old.ev);
    assert_null(old.filed);
    assert_int_equal(atomic_load(&v1->refcnt), 2); /* the caller's and the cache's */

    kb_event_t *got = get(idx, "ns1/a");
    assert_ptr_equal(got, v1);
    kb_event_unref(got);

    kb_event_t *v2 = mk("ns1", "a", 2);
    put_ev(idx, v2, &old);
    assert_ptr_equal(old.ev, v1); /* handed back with the cache's reference */
    kb_indexer_old_release(&old);
    assert_null(old.ev);
    assert_int_equal(atomic_load(&v1->refcnt), 1);
    kb_event_unref(v1);
    assert_int_equal(kb_indexer_count(idx), 1);

    size_t klen = strlen("ns1/a");
    assert_true(kb_indexer_delete(idx, "ns1/a", klen, kb_fnv1a64("ns1/a", klen), &old));
    assert_ptr_equal(old.ev, v2);
    kb_indexer_old_release(&old);
    kb_indexer_old_release(&old); /* zeroed: a no-op */
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
    kb_indexer_t *idx = kb_indexer_new(0, NULL, 0);
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
    kb_indexer_t *idx = kb_indexer_new(16, NULL, 0);
    size_t base = kb_indexer_bytes(idx);
    size_t ev_sum = 0;
    char ns[16], name[16], key[40];
    for (int i = 0; i < 5000; i++) {
        snprintf(ns, sizeof(ns), "ns%d", i % 97);
        snprintf(name, sizeof(name), "pod-%d", i);
        kb_event_t *ev = mk(ns, name, (unsigned)i + 1);
        ev_sum += kb_event_size(ev);
        put_ev(idx, ev, NULL);
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

/* Keys whose hashes are equal, or equal in the bits a stripe and a home slot
 * come from, are told apart by the key itself, and deleting one of a run
 * leaves the others reachable. */
static void test_colliding_hashes(void **state) {
    (void)state;
    kb_indexer_t *idx = kb_indexer_new(4, NULL, 0);
    static const uint64_t hashes[] = {42, 42, 42 | (UINT64_C(1) << 40), 42 | (UINT64_C(7) << 32), 42};
    char name[16], key[40];
    for (size_t round = 0; round < 2; round++) {
        for (size_t i = 0; i < 5; i++) {
            snprintf(name, sizeof(name), "p%zu", i);
            kb_event_t *ev = mk("ns", name, (unsigned)(round * 10 + i + 1));
            ev->key_hash = hashes[i]; /* forged before it is shared */
            put_ev(idx, ev, NULL);
            kb_event_unref(ev);
        }
        assert_int_equal(kb_indexer_count(idx), 5);
        snprintf(key, sizeof(key), "ns/p1");
        assert_true(kb_indexer_delete(idx, key, strlen(key), hashes[1], NULL));
        for (size_t i = 0; i < 5; i++) {
            snprintf(key, sizeof(key), "ns/p%zu", i);
            kb_event_t *got = kb_indexer_get(idx, key, strlen(key), hashes[i]);
            if (i == 1) {
                assert_null(got);
                continue;
            }
            assert_non_null(got);
            assert_string_equal(got->key, key);
            assert_int_equal(got->rv_num, round * 10 + i + 1);
            kb_event_unref(got);
        }
    }
    kb_indexer_destroy(idx);
}

/* --- label indexes and queries ---------------------------------------------- */

/* Candidates of a query (text parsed as a selector), each of them ns's when
 * ns is given; names gets their names sorted and comma-joined. */
static size_t sel_names(kb_indexer_t *idx, const char *ns, const char *text, bool *exact, kb_indexer_via_t *via,
                        char *names, size_t names_size) {
    kb_selector_t *sel = kb_selector_parse(text, NULL, 0);
    assert_non_null(sel);
    kb_event_list_t l;
    kb_event_list_init(&l);
    bool ex = false;
    kb_indexer_via_t v = kb_indexer_select(idx, ns, sel, &l, &ex);
    if (exact)
        *exact = ex;
    if (via)
        *via = v;
    /* Sort by key for a stable text. */
    for (size_t i = 1; i < l.n; i++)
        for (size_t j = i; j > 0 && strcmp(l.ev[j - 1]->key, l.ev[j]->key) > 0; j--) {
            kb_event_t *t = l.ev[j];
            l.ev[j] = l.ev[j - 1];
            l.ev[j - 1] = t;
        }
    if (names) {
        names[0] = '\0';
        for (size_t i = 0; i < l.n; i++) {
            size_t at = strlen(names);
            snprintf(names + at, names_size - at, "%s%s", i ? "," : "", l.ev[i]->key);
        }
    }
    for (size_t i = 0; i < l.n; i++) {
        if (ns)
            assert_string_equal(l.ev[i]->ns, ns);
        /* An exact answer never needs the caller's check. */
        if (ex && check_own_labels)
            assert_true(kb_selector_match_json(sel, l.ev[i]->labels_len ? l.ev[i]->obj + l.ev[i]->labels_off : NULL,
                                               l.ev[i]->labels_len));
    }
    size_t n = l.n;
    kb_event_list_fini(&l);
    kb_selector_free(sel);
    return n;
}

static size_t sel_count(kb_indexer_t *idx, const char *ns, const char *text, bool *exact) {
    return sel_names(idx, ns, text, exact, NULL, NULL, 0);
}

/* The answer (sorted keys) and how, asserted in one line. */
static void expect_sel(kb_indexer_t *idx, const char *ns, const char *text, const char *want, kb_indexer_via_t via,
                       bool exact) {
    char names[512];
    bool ex = !exact;
    kb_indexer_via_t v;
    sel_names(idx, ns, text, &ex, &v, names, sizeof(names));
    assert_string_equal(names, want);
    assert_int_equal(v, via);
    assert_int_equal(ex, exact);
}

static size_t label_sets(kb_indexer_t *idx) {
    kb_indexer_stats_t st;
    kb_indexer_stats(idx, &st);
    return st.label_sets;
}

static void test_label_sets_follow_put_replace_delete(void **state) {
    (void)state;
    static const char *const keys[] = {"app", "tier", "app"}; /* a repeated key counts once */
    kb_indexer_t *idx = kb_indexer_new(4, keys, 3);
    const char *const *got_keys;
    assert_int_equal(kb_indexer_label_keys(idx, &got_keys), 2);
    assert_string_equal(got_keys[0], "app");
    assert_string_equal(got_keys[1], "tier");

    put_l(idx, "ns1", "a", 1, "{\"app\":\"web\",\"tier\":\"fe\"}");
    put_l(idx, "ns1", "b", 2, "{\"tier\":\"be\", \"app\" : \"web\"}");
    put_l(idx, "ns2", "c", 3, "{\"app\":\"db\"}");
    put_l(idx, "ns2", "d", 4, NULL);
    put_l(idx, "ns2", "e", 5, "{\"env\":\"prod\"}"); /* env is not indexed */
    assert_int_equal(label_sets(idx), 4);          /* app=web app=db tier=fe tier=be */

    expect_sel(idx, NULL, "app=web", "ns1/a,ns1/b", KB_INDEXER_BY_LABEL, true);
    expect_sel(idx, NULL, "app==db", "ns2/c", KB_INDEXER_BY_LABEL, true);
    expect_sel(idx, NULL, "app=nope", "", KB_INDEXER_BY_LABEL, true);
    /* Not indexed: every entry is a candidate, the caller checks. */
    expect_sel(idx, NULL, "env=prod", "ns1/a,ns1/b,ns2/c,ns2/d,ns2/e", KB_INDEXER_SCAN, false);

    /* Values change: a moves from app=web to app=db and loses its tier. */
    put_l(idx, "ns1", "a", 6, "{\"app\":\"db\"}");
    expect_sel(idx, NULL, "app=web", "ns1/b", KB_INDEXER_BY_LABEL, true);
    expect_sel(idx, NULL, "app=db", "ns1/a,ns2/c", KB_INDEXER_BY_LABEL, true);
    expect_sel(idx, NULL, "tier=fe", "", KB_INDEXER_BY_LABEL, true);
    assert_int_equal(label_sets(idx), 3); /* tier=fe emptied and gone */

    /* The same filing again replaces the entry in its sets (the new version is listed). */
    put_l(idx, "ns1", "a", 7, "{\"app\":\"db\"}");
    kb_event_list_t l;
    kb_event_list_init(&l);
    bool exact;
    kb_selector_t *sel = kb_selector_parse("app=db", NULL, 0);
    kb_indexer_select(idx, "ns1", sel, &l, &exact);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.ev[0]->rv_num, 7);
    kb_event_list_fini(&l);
    kb_selector_free(sel);

    /* Deletes unfile. */
    assert_true(del(idx, "ns1/b"));
    expect_sel(idx, NULL, "app=web", "", KB_INDEXER_BY_LABEL, true);
    assert_true(del(idx, "ns1/a"));
    assert_true(del(idx, "ns2/c"));
    assert_int_equal(label_sets(idx), 0);
    expect_sel(idx, NULL, "app=db", "", KB_INDEXER_BY_LABEL, true);
    kb_indexer_destroy(idx);
}

static void test_select_terms_and_namespaces(void **state) {
    (void)state;
    static const char *const keys[] = {"app", "tier"};
    kb_indexer_t *idx = kb_indexer_new(4, keys, 2);
    put_l(idx, "ns1", "a", 1, "{\"app\":\"web\",\"tier\":\"fe\"}");
    put_l(idx, "ns1", "b", 2, "{\"app\":\"web\",\"tier\":\"be\"}");
    put_l(idx, "ns2", "c", 3, "{\"app\":\"web\"}");
    put_l(idx, "ns2", "d", 4, "{\"app\":\"db\"}");
    put_l(idx, "ns3", "e", 5, "{\"app\":\"web\"}");
    put_l(idx, "", "node", 6, "{\"app\":\"web\"}");

    /* Set-based equality: the union, once each even when a value repeats. */
    expect_sel(idx, NULL, "app in (db, web)", "node,ns1/a,ns1/b,ns2/c,ns2/d,ns3/e", KB_INDEXER_BY_LABEL, true);
    expect_sel(idx, NULL, "app in (db,db)", "ns2/d", KB_INDEXER_BY_LABEL, true);
    /* Two terms: the smaller set (tier=fe, 1) is read, the other is the caller's to check. */
    expect_sel(idx, NULL, "app=web,tier=fe", "ns1/a", KB_INDEXER_BY_LABEL, false);
    expect_sel(idx, NULL, "tier=fe,app=web", "ns1/a", KB_INDEXER_BY_LABEL, false);
    /* Negative and existence terms are never answered by the index. */
    assert_int_equal(sel_count(idx, NULL, "app!=web", NULL), 6);
    assert_int_equal(sel_count(idx, NULL, "!app", NULL), 6);
    assert_int_equal(sel_count(idx, NULL, "app notin (web)", NULL), 6);
    assert_int_equal(sel_count(idx, NULL, "app", NULL), 6);
    /* With a namespace: the label set filtered to it … */
    expect_sel(idx, "ns2", "app=db", "ns2/d", KB_INDEXER_BY_LABEL, true);
    expect_sel(idx, "ns1", "app=db", "", KB_INDEXER_BY_LABEL, true);
    expect_sel(idx, "", "app=web", "node", KB_INDEXER_BY_NS, false); /* the namespace's set is smaller */
    /* … or the namespace's set when it is the smaller one. */
    expect_sel(idx, "ns3", "app=web", "ns3/e", KB_INDEXER_BY_NS, false);
    expect_sel(idx, "ns1", "app!=web", "ns1/a,ns1/b", KB_INDEXER_BY_NS, false);
    expect_sel(idx, "ns1", "", "ns1/a,ns1/b", KB_INDEXER_BY_NS, true);
    expect_sel(idx, NULL, "", "node,ns1/a,ns1/b,ns2/c,ns2/d,ns3/e", KB_INDEXER_SCAN, true);
    expect_sel(idx, "nope", "app=web", "", KB_INDEXER_BY_NS, false);

    /* The counters tell what the queries read. */
    kb_indexer_stats_t st;
    kb_indexer_stats(idx, &st);
    assert_int_equal(st.queries, 16);
    assert_int_equal(st.by_label, 6);
    assert_int_equal(st.by_ns, 5);
    assert_int_equal(st.last_candidates, 0);
    kb_indexer_destroy(idx);

    /* Without label keys every query is a scan or a namespace's set. */
    idx = kb_indexer_new(4, NULL, 0);
    put_l(idx, "ns1", "a", 1, "{\"app\":\"web\"}");
    put_l(idx, "ns2", "b", 2, "{\"app\":\"db\"}");
    expect_sel(idx, NULL, "app=web", "ns1/a,ns2/b", KB_INDEXER_SCAN, false);
    expect_sel(idx, "ns2", "app=web", "ns2/b", KB_INDEXER_BY_NS, false);
    kb_indexer_destroy(idx);
}

/* The entries may carry no readable labels (thin or compressed events): the
 * filing comes from the labels handed in, and undoing a put or a delete puts
 * it back exactly. */
static void test_restore_puts_the_filing_back(void **state) {
    (void)state;
    static const char *const keys[] = {"app"};
    kb_indexer_t *idx = kb_indexer_new(4, keys, 1);
    size_t base = kb_indexer_bytes(idx);
    check_own_labels = false;
    kb_event_t *v1 = mk("ns1", "a", 1); /* no labels in the event itself */
    kb_indexer_put(idx, v1, "{\"app\":\"web\"}", 13, NULL);
    expect_sel(idx, NULL, "app=web", "ns1/a", KB_INDEXER_BY_LABEL, true);
    size_t bytes_v1 = kb_indexer_bytes(idx);

    /* A batch replaces it (app=db), then fails: restore. */
    kb_event_t *v2 = mk("ns1", "a", 2);
    kb_indexer_old_t old = {0};
    kb_indexer_put(idx, v2, "{\"app\":\"db\"}", 12, &old);
    assert_ptr_equal(old.ev, v1);
    assert_non_null(old.filed);
    expect_sel(idx, NULL, "app=web", "", KB_INDEXER_BY_LABEL, true);
    expect_sel(idx, NULL, "app=db", "ns1/a", KB_INDEXER_BY_LABEL, true);
    kb_indexer_restore(idx, &old);
    assert_null(old.ev);
    expect_sel(idx, NULL, "app=web", "ns1/a", KB_INDEXER_BY_LABEL, true);
    expect_sel(idx, NULL, "app=db", "", KB_INDEXER_BY_LABEL, true);
    kb_event_t *got = get(idx, "ns1/a");
    assert_ptr_equal(got, v1);
    kb_event_unref(got);
    assert_int_equal(atomic_load(&v2->refcnt), 1); /* the replacement was released */
    assert_int_equal(kb_indexer_bytes(idx), bytes_v1);

    /* A delete, undone. */
    size_t klen = strlen("ns1/a");
    assert_true(kb_indexer_delete(idx, "ns1/a", klen, kb_fnv1a64("ns1/a", klen), &old));
    expect_sel(idx, NULL, "app=web", "", KB_INDEXER_BY_LABEL, true);
    kb_indexer_restore(idx, &old);
    expect_sel(idx, NULL, "app=web", "ns1/a", KB_INDEXER_BY_LABEL, true);
    assert_int_equal(kb_indexer_bytes(idx), bytes_v1);

    /* A put of an absent key hands back nothing; undoing it is a delete. */
    kb_event_t *v3 = mk("ns1", "z", 3);
    kb_indexer_put(idx, v3, "{\"app\":\"web\"}", 13, &old);
    assert_null(old.ev);
    assert_null(old.filed);
    kb_indexer_old_release(&old);
    assert_true(del(idx, "ns1/z"));
    expect_sel(idx, NULL, "app=web", "ns1/a", KB_INDEXER_BY_LABEL, true);

    /* Without label keys the same calls work on bare events. */
    kb_indexer_t *plain = kb_indexer_new(4, NULL, 0);
    kb_indexer_put(plain, v1, NULL, 0, NULL);
    kb_indexer_put(plain, v2, NULL, 0, &old);
    assert_ptr_equal(old.ev, v1);
    assert_null(old.filed);
    kb_indexer_restore(plain, &old);
    got = get(plain, "ns1/a");
    assert_ptr_equal(got, v1);
    kb_event_unref(got);
    kb_indexer_destroy(plain);

    assert_true(del(idx, "ns1/a"));
    assert_int_equal(kb_indexer_bytes(idx), base);
    kb_event_unref(v1);
    kb_event_unref(v2);
    kb_event_unref(v3);
    kb_indexer_destroy(idx);
    check_own_labels = true;
}

/* Another form of the same version (packed, thin) takes an entry's place
 * with its filing, only while the entry is still that version. */
static void test_swap_keeps_the_filing(void **state) {
    (void)state;
    static const char *const keys[] = {"app"};
    for (int labelled = 0; labelled < 2; labelled++) {
        kb_indexer_t *idx = kb_indexer_new(4, keys, (size_t)labelled);
        size_t base = kb_indexer_bytes(idx);
        kb_event_t *v1 = mk_l("ns1", "a", 1, "{\"app\":\"web\"}");
        put_ev(idx, v1, NULL);
        kb_event_t *thin = mk("ns1", "a", 1); /* no labels of its own */
        check_own_labels = false;
        assert_true(kb_indexer_swap(idx, v1, thin));
        assert_int_equal(atomic_load(&v1->refcnt), 1); /* the cache let go of it */
        kb_event_t *got = get(idx, "ns1/a");
        assert_ptr_equal(got, thin);
        kb_event_unref(got);
        if (labelled)
            expect_sel(idx, NULL, "app=web", "ns1/a", KB_INDEXER_BY_LABEL, true);
        assert_int_equal(list_ns(idx, "ns1", NULL, NULL), 1);
        /* Not the entry any more: nothing changes. */
        kb_event_t *other = mk("ns1", "a", 1);
        assert_false(kb_indexer_swap(idx, v1, other));
        got = get(idx, "ns1/a");
        assert_ptr_equal(got, thin);
        kb_event_unref(got);
        assert_true(del(idx, "ns1/a"));
        assert_false(kb_indexer_swap(idx, thin, other)); /* absent */
        assert_int_equal(kb_indexer_bytes(idx), base);
        check_own_labels = true;
        kb_event_unref(v1);
        kb_event_unref(thin);
        kb_event_unref(other);
        kb_indexer_destroy(idx);
    }
}

/* Cost per entry: without label keys it is the event and the tables, as
 * before; with them a few tens of bytes more, and nothing for the labels that
 * are not configured. */
static void test_label_index_memory(void **state) {
    (void)state;
    enum { N = 4000 };
    static const char *const keys[] = {"app"};
    kb_indexer_t *plain = kb_indexer_new(16, NULL, 0), *ix = kb_indexer_new(16, keys, 1);
    size_t base_plain = kb_indexer_bytes(plain), base_ix = kb_indexer_bytes(ix);
    size_t ev_sum = 0;
    char ns[16], name[16], labels[200], key[40];
    for (int i = 0; i < N; i++) {
        snprintf(ns, sizeof(ns), "ns%d", i % 7);
        snprintf(name, sizeof(name), "pod-%d", i);
        /* Many labels, one of them indexed. */
        snprintf(labels, sizeof(labels),
                 "{\"app\":\"app-%d\",\"pod-template-hash\":\"5d9f7c8b6d\",\"team\":\"payments\","
                 "\"version\":\"v1.2.3\",\"release\":\"stable\"}", i % 100);
        kb_event_t *ev = mk_l(ns, name, (unsigned)i + 1, labels);
        ev_sum += kb_event_size(ev);
        put_ev(plain, ev, NULL);
        put_ev(ix, ev, NULL);
        kb_event_unref(ev);
    }
    size_t per_plain = (kb_indexer_bytes(plain) - base_plain - ev_sum) / N;
    size_t per_ix = (kb_indexer_bytes(ix) - base_ix - ev_sum) / N;
    /* Plain: the stripe slot and key, the namespace set's slot and key. */
    assert_true(per_plain < 160);
    /* Indexed: plus the filing (24 bytes + "app=app-NN") and a slot in one set. */
    assert_true(per_ix > per_plain);
    assert_true(per_ix - per_plain < 120);
    print_message("per entry beyond the event: %zu B without label keys, %zu B with index_labels = [\"app\"]\n",
                  per_plain, per_ix);
    assert_int_equal(label_sets(ix), 100);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "ns%d/pod-%d", i % 7, i);
        assert_true(del(plain, key));
        assert_true(del(ix, key));
    }
    assert_int_equal(kb_indexer_bytes(plain), base_plain);
    assert_int_equal(kb_indexer_bytes(ix), base_ix);
    assert_int_equal(label_sets(ix), 0);
    kb_indexer_destroy(plain);
    kb_indexer_destroy(ix);
}

/* Random puts, deletes and undos against a model: every label set and
 * namespace set holds exactly the keys the model says (the sets' probing and
 * deletion keep every member reachable through growth and shrinking). */
static void test_sets_match_a_model(void **state) {
    (void)state;
    enum { KEYS = 3000, OPS = 60000, VALUES = 5, NSS = 3 };
    static const char *const keys[] = {"app"};
    kb_indexer_t *idx = kb_indexer_new(8, keys, 1);
    int model[KEYS]; /* -1 absent, else the app value */
    for (int k = 0; k < KEYS; k++)
        model[k] = -1;
    unsigned seed = 12345;
    char ns[8], name[16], key[32], labels[32];
    for (int op = 0; op < OPS; op++) {
        int k = (int)(rand_r(&seed) % KEYS);
        int r = (int)(rand_r(&seed) % 10); /* 0..5 put (0: then undone), 6..9 delete (6: then undone) */
        if (op >= OPS / 2 && k >= KEYS / 10) { /* the second half deletes most keys: the sets shrink */
            if (model[k] < 0)
                continue;
            r = 9;
        }
        snprintf(ns, sizeof(ns), "n%d", k % NSS);
        snprintf(name, sizeof(name), "k%d", k);
        snprintf(key, sizeof(key), "%s/%s", ns, name);
        if (r < 6) {
            int v = (int)(rand_r(&seed) % VALUES);
            snprintf(labels, sizeof(labels), "{\"app\":\"v%d\"}", v);
            kb_event_t *ev = mk_l(ns, name, (unsigned)op + 1, labels);
            kb_indexer_old_t old = {0};
            put_ev(idx, ev, &old);
            kb_event_unref(ev);
            if (r == 0 && old.ev) { /* undone: the old entry comes back */
                kb_indexer_restore(idx, &old);
            } else if (r == 0) {
                assert_true(del(idx, key));
                model[k] = -1;
            } else {
                kb_indexer_old_release(&old);
                model[k] = v;
            }
        } else {
            kb_indexer_old_t old = {0};
            bool had = kb_indexer_delete(idx, key, strlen(key), kb_fnv1a64(key, strlen(key)), &old);
            assert_int_equal(had, model[k] >= 0);
            if (had && r == 6)
                kb_indexer_restore(idx, &old);
            else
                model[k] = -1;
            kb_indexer_old_release(&old);
        }
        if (op % 5000 != 4999 && op != OPS - 1)
            continue;
        for (int v = 0; v < VALUES; v++) {
            char text[16];
            snprintf(text, sizeof(text), "app=v%d", v);
            size_t want = 0;
            for (int j = 0; j < KEYS; j++)
                want += model[j] == v;
            bool exact = false;
            assert_int_equal(sel_count(idx, NULL, text, &exact), want);
            assert_true(exact);
        }
        size_t live = 0;
        for (int j = 0; j < KEYS; j++)
            live += model[j] >= 0;
        assert_int_equal(kb_indexer_count(idx), live);
        for (int n = 0; n < NSS; n++) {
            size_t want = 0;
            for (int j = 0; j < KEYS; j++)
                want += model[j] >= 0 && j % NSS == n;
            snprintf(ns, sizeof(ns), "n%d", n);
            assert_int_equal(list_ns(idx, ns, NULL, NULL), want);
        }
    }
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

/* Writer: every round puts each key with a growing rv and an app label that
 * changes every round, deleting every third. */
static void *conc_writer(void *arg) {
    struct conc *c = arg;
    char ns[8], name[8], key[20], labels[32];
    for (unsigned r = 1; r <= CONC_ROUNDS; r++) {
        for (int k = 0; k < CONC_KEYS; k++) {
            conc_key(k, ns, sizeof(ns), name, sizeof(name));
            if ((k + (int)r) % 3 == 0) {
                snprintf(key, sizeof(key), "%s/%s", ns, name);
                del(c->idx, key);
            } else {
                snprintf(labels, sizeof(labels), "{\"app\":\"v%u\",\"x\":\"1\"}", (r + (unsigned)k) % 3);
                put_l(c->idx, ns, name, r, labels);
            }
        }
    }
    atomic_store(&c->done, true);
    return NULL;
}

/* Reader: gets never go back in rv for a key, listings stay in their
 * namespace, and what the label index answers has the label. */
static void *conc_reader(void *arg) {
    struct conc *c = arg;
    uint64_t last[CONC_KEYS] = {0};
    char ns[8], name[8], key[20];
    unsigned seed = (unsigned)(uintptr_t)&last;
    kb_selector_t *sel = kb_selector_parse("app=v1", NULL, 0);
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
        bool exact = false;
        kb_event_list_init(&l);
        kb_indexer_select(c->idx, rand_r(&seed) % 2 ? ns : NULL, sel, &l, &exact);
        for (size_t i = 0; i < l.n; i++)
            if (exact && !kb_selector_match_json(sel, l.ev[i]->obj + l.ev[i]->labels_off, l.ev[i]->labels_len))
                atomic_fetch_add(&c->bad, 1);
        kb_event_list_fini(&l);
        (void)kb_indexer_bytes(c->idx);
    } while (!atomic_load(&c->done));
    kb_selector_free(sel);
    return NULL;
}

static void test_concurrent_readers_and_writer(void **state) {
    (void)state;
    static const char *const keys[] = {"app"};
    struct conc c = {.idx = kb_indexer_new(8, keys, 1)};
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
    /* The label sets hold the last round's values exactly. */
    size_t by_label = 0;
    for (int v = 0; v < 3; v++) {
        char text[16];
        snprintf(text, sizeof(text), "app=v%d", v);
        size_t want = 0;
        for (int k = 0; k < CONC_KEYS; k++)
            want += (k + CONC_ROUNDS) % 3 != 0 && (CONC_ROUNDS + k) % 3 == v;
        assert_int_equal(sel_count(c.idx, NULL, text, NULL), want);
        by_label += want;
    }
    assert_int_equal(by_label, expect);
    kb_indexer_destroy(c.idx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_replace_delete),
        cmocka_unit_test(test_namespace_index),
        cmocka_unit_test(test_bytes_return_to_baseline),
        cmocka_unit_test(test_colliding_hashes),
        cmocka_unit_test(test_label_sets_follow_put_replace_delete),
        cmocka_unit_test(test_select_terms_and_namespaces),
        cmocka_unit_test(test_restore_puts_the_filing_back),
        cmocka_unit_test(test_swap_keeps_the_filing),
        cmocka_unit_test(test_label_index_memory),
        cmocka_unit_test(test_sets_match_a_model),
        cmocka_unit_test(test_concurrent_readers_and_writer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
