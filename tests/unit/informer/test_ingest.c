/* tests/unit/informer/test_ingest.c — the reflector's list and watch steps
 * (informer/ingest.h) on an informer that runs no thread: resourceVersions
 * longer than 63 bytes are kept whole (they were truncated), ones longer than
 * kbridge supports are refused loudly instead of cut; a relist's inferred
 * DELETED carries the list's RV (issue 24: after an HA takeover it was below
 * what the old leader delivered); the window a relist did not watch is known
 * (kb_informer_blind); what an HA standby queues is never merged away
 * (kb_informer_ha_shared); and after an etcd restore, an object the new
 * history has at the uid and RV of the old one's state, with other content,
 * is sent (paged and streamed lists), also when the restore is below an
 * object seen rather than below the resume point. */
#include "common/buf.h"
#include "config/config.h"
#include "informer/informer.h"
#include "informer/ingest.h"

#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

static const char cfgtext[] =
    "cluster = { name = \"t\"; server = \"http://127.0.0.1:9\"; };\n"
    "informers = ( { name = \"pods\"; version = \"v1\"; resource = \"pods\"; shards = 1; } );\n"
    "sinks = ( { name = \"out\"; type = \"file\"; path = \"/dev/null\"; } );\n"
    "routes = ( { informer = \"pods\"; sink = \"out\"; } );\n";

/* A list page at list_rv holding Pod d/name at item_rv. */
static void page_of(kb_buf_t *b, const char *list_rv, const char *name, const char *item_rv) {
    kb_buf_reset(b);
    kb_buf_appendf(b, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"%s\"},"
                      "\"items\":[{\"metadata\":{\"name\":\"%s\",\"namespace\":\"d\",\"uid\":\"u-%s\","
                      "\"resourceVersion\":\"%s\"}}]}", list_rv, name, name, item_rv);
}

static void page(kb_buf_t *b, const char *list_rv, const char *item_rv) {
    page_of(b, list_rv, "p", item_rv);
}

/* The informer of text, running no thread (*cfg: its config, to free after it). */
static kb_informer_t *new_informer_of(const char *text, kb_config_t **cfg) {
    char err[512];
    *cfg = kb_config_load_string(text, "t.cfg", err, sizeof(err));
    assert_non_null(*cfg);
    kb_informer_t *inf = kb_informer_new(*cfg, &(*cfg)->informers[0], NULL, err, sizeof(err));
    assert_non_null(inf);
    return inf;
}

static kb_informer_t *new_informer(kb_config_t **cfg) {
    return new_informer_of(cfgtext, cfg);
}

/* A list at list_rv: a complete one of one page. */
static void list(kb_informer_t *inf, const kb_buf_t *b) {
    kb_buf_t cont = KB_BUF_INIT;
    kb_ingest_list_begin(inf, 0);
    assert_int_equal(kb_ingest_list_page(inf, 0, b->data, b->len, &cont), KB_OK);
    assert_int_equal(kb_ingest_list_end(inf, 0), KB_OK);
    kb_buf_fini(&cont);
}

/* Pop what shard 0 holds into d (empty when nothing). */
static void pop_all(kb_informer_t *inf, kb_event_list_t *d) {
    kb_event_list_init(d);
    kb_deltas_t one;
    for (;;) {
        kb_deltas_init(&one);
        if (kb_deltafifo_pop(kb_informer_fifo(inf, 0), &one, 0) != KB_OK) {
            kb_deltas_fini(&one);
            return;
        }
        for (size_t i = 0; i < one.n; i++)
            kb_event_list_push(d, kb_event_ref(one.ev[i]));
        kb_deltas_fini(&one);
    }
}

static const kb_event_t *find(const kb_event_list_t *d, kb_event_type_t type, const char *key) {
    for (size_t i = 0; i < d->n; i++)
        if (d->ev[i]->type == type && !strcmp(d->ev[i]->key, key))
            return d->ev[i];
    return NULL;
}

static void test_long_resource_versions(void **state) {
    (void)state;
    kb_config_t *cfg;
    kb_informer_t *inf = new_informer(&cfg);
    char rv100[101], rv300[301];
    memset(rv100, 'r', 100);
    rv100[100] = '\0';
    memset(rv300, 'x', 300);
    rv300[300] = '\0';
    kb_buf_t b = KB_BUF_INIT, cont = KB_BUF_INIT;

    /* 100 bytes: kept whole as the item's RV and as the resume point. */
    kb_ingest_list_begin(inf, 0);
    page(&b, rv100, rv100);
    assert_int_equal(kb_ingest_list_page(inf, 0, b.data, b.len, &cont), KB_OK);
    assert_int_equal(kb_ingest_list_end(inf, 0), KB_OK);
    char rv[KB_RV_MAX];
    kb_ingest_watch_begin(inf, 0, rv, sizeof(rv));
    assert_string_equal(rv, rv100);
    kb_deltas_t d;
    kb_deltas_init(&d);
    assert_int_equal(kb_deltafifo_pop(kb_informer_fifo(inf, 0), &d, 0), KB_OK);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.ev[0]->rv_len, 100);
    kb_deltas_fini(&d);

    /* 300 bytes: the list is refused (a parse error), not cut to a wrong resume point. */
    kb_ingest_list_begin(inf, 0);
    page(&b, rv300, "5");
    assert_int_equal(kb_ingest_list_page(inf, 0, b.data, b.len, &cont), KB_ERR_PARSE);
    /* An object whose RV is too long is skipped and counted; nothing is queued for it. */
    kb_ingest_list_begin(inf, 0);
    page(&b, "7", rv300);
    assert_int_equal(kb_ingest_list_page(inf, 0, b.data, b.len, &cont), KB_OK);
    kb_informer_stats_t st;
    kb_informer_stats(inf, &st);
    assert_true(st.errors[KB_WATCH_ERR_DECODE] >= 1);
    kb_deltas_init(&d);
    assert_int_equal(kb_deltafifo_pop(kb_informer_fifo(inf, 0), &d, 0), KB_ERR_TIMEDOUT);
    kb_deltas_fini(&d);
    /* A watch event with a 100-byte RV moves the resume point to it, whole. */
    kb_ingest_watch_begin(inf, 0, rv, sizeof(rv));
    kb_buf_reset(&b);
    kb_buf_appendf(&b, "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"%.99sz\"}}}\n", rv100);
    assert_int_equal(kb_ingest_watch_bytes(inf, 0, b.data, b.len), KB_OK);
    kb_ingest_watch_begin(inf, 0, rv, sizeof(rv));
    assert_int_equal(strlen(rv), 100);
    assert_int_equal(rv[99], 'z');

    kb_buf_fini(&b);
    kb_buf_fini(&cont);
    kb_informer_destroy(inf);
    kb_config_free(cfg);
}

static bool cached(kb_informer_t *inf, const char *key) {
    kb_event_t *ev = kb_informer_get(inf, key, strlen(key));
    kb_event_unref(ev);
    return ev != NULL;
}

/* A first list into an empty cache remembers no listed keys (nothing can be
 * left unseen); one that starts over after a partial attempt does, and what
 * the attempt cached but the new list lacks is deleted; so is what a relist lacks. */
static void test_first_list_diffs_only_what_was_cached(void **state) {
    (void)state;
    kb_config_t *cfg;
    kb_informer_t *inf = new_informer(&cfg);
    kb_buf_t b = KB_BUF_INIT, cont = KB_BUF_INIT;
    kb_ingest_list_begin(inf, 0); /* attempt 1: one page of two, then the list starts over */
    page_of(&b, "5", "a", "4");
    assert_int_equal(kb_ingest_list_page(inf, 0, b.data, b.len, &cont), KB_OK);
    kb_ingest_list_begin(inf, 0);
    page_of(&b, "6", "b", "6");
    assert_int_equal(kb_ingest_list_page(inf, 0, b.data, b.len, &cont), KB_OK);
    assert_int_equal(kb_ingest_list_end(inf, 0), KB_OK);
    assert_false(cached(inf, "d/a")); /* deleted while the list started over */
    assert_true(cached(inf, "d/b"));
    kb_ingest_list_begin(inf, 0); /* a relist without d/b */
    page_of(&b, "8", "c", "7");
    assert_int_equal(kb_ingest_list_page(inf, 0, b.data, b.len, &cont), KB_OK);
    assert_int_equal(kb_ingest_list_end(inf, 0), KB_OK);
    assert_false(cached(inf, "d/b"));
    assert_true(cached(inf, "d/c"));
    kb_buf_fini(&b);
    kb_buf_fini(&cont);
    kb_informer_destroy(inf);
    kb_config_free(cfg);
}

/* A relist that finds an object gone: the DELETED (finalStateUnknown) carries
 * the list's RV — the object was absent there, so every state of it anyone
 * delivered is at or below it — and the last known object, its own
 * resourceVersion unchanged. A name re-created meanwhile keeps the old
 * incarnation's RV on its DELETED: the new one's ADDED, below the list's RV,
 * must still order after it. */
static void test_relist_delete_at_the_list_rv(void **state) {
    (void)state;
    kb_config_t *cfg;
    kb_informer_t *inf = new_informer(&cfg);
    kb_buf_t b = KB_BUF_INIT;
    kb_event_list_t d;
    kb_buf_appendf(&b, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"5\"},"
                       "\"items\":[{\"metadata\":{\"name\":\"p\",\"namespace\":\"d\",\"uid\":\"u-p\","
                       "\"resourceVersion\":\"4\"}},{\"metadata\":{\"name\":\"q\",\"namespace\":\"d\","
                       "\"uid\":\"u-q\",\"resourceVersion\":\"3\"}}]}");
    list(inf, &b);
    pop_all(inf, &d);
    assert_int_equal(d.n, 2);
    kb_event_list_fini(&d);
    kb_buf_reset(&b); /* at 20: p gone, q re-created at 15 */
    kb_buf_appendf(&b, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"20\"},"
                       "\"items\":[{\"metadata\":{\"name\":\"q\",\"namespace\":\"d\",\"uid\":\"u-q2\","
                       "\"resourceVersion\":\"15\"}}]}");
    list(inf, &b);
    pop_all(inf, &d);
    const kb_event_t *gone = find(&d, KB_EV_DELETED, "d/p");
    assert_non_null(gone);
    assert_true(gone->final_state_unknown);
    assert_string_equal(gone->rv, "20");
    assert_int_equal(gone->rv_num, 20);
    assert_non_null(strstr(gone->obj, "\"resourceVersion\":\"4\""));
    const kb_event_t *old = find(&d, KB_EV_DELETED, "d/q");
    assert_non_null(old);
    assert_string_equal(old->rv, "3");
    assert_non_null(find(&d, KB_EV_ADDED, "d/q"));
    kb_event_list_fini(&d);
    kb_buf_fini(&b);
    kb_informer_destroy(inf);
    kb_config_free(cfg);
}

/* Watch one MODIFIED of d/p at rv. */
static void watch_to(kb_informer_t *inf, kb_buf_t *b, const char *rv) {
    char at[KB_RV_MAX];
    kb_ingest_watch_begin(inf, 0, at, sizeof(at));
    kb_buf_reset(b);
    kb_buf_appendf(b, "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"p\",\"namespace\":\"d\","
                      "\"uid\":\"u-p\",\"resourceVersion\":\"%s\"}}}\n", rv);
    assert_int_equal(kb_ingest_watch_bytes(inf, 0, b->data, b->len), KB_OK);
}

/* Watch frames: d/p MODIFIED at 10 with spec.v "old", then d/q ADDED at 12
 * (the resume point). */
static void watch_old_history(kb_informer_t *inf, kb_buf_t *b) {
    char at[KB_RV_MAX];
    kb_ingest_watch_begin(inf, 0, at, sizeof(at));
    kb_buf_reset(b);
    kb_buf_appendf(b, "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"p\",\"namespace\":\"d\","
                      "\"uid\":\"u-p\",\"resourceVersion\":\"10\"},\"spec\":{\"v\":\"old\"}}}\n"
                      "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"q\",\"namespace\":\"d\","
                      "\"uid\":\"u-q\",\"resourceVersion\":\"12\"}}}\n");
    assert_int_equal(kb_ingest_watch_bytes(inf, 0, b->data, b->len), KB_OK);
}

static const char restored_p[] = "{\"metadata\":{\"name\":\"p\",\"namespace\":\"d\",\"uid\":\"u-p\","
                                 "\"resourceVersion\":\"10\"},\"spec\":{\"v\":\"new\"}}";

/* etcd restored from a backup at 5: the new history modified p at 10 too
 * (same uid, the RV the old history gave its own change of p), and lists at
 * 11, below the resume point 12. Same uid and RV, other content: the
 * consumer must get the new history's p (it had the old one's, for good). */
static void test_restore_reusing_an_rv_sends_the_new_object(void **state) {
    (void)state;
    for (int streamed = 0; streamed < 2; streamed++) {
        kb_config_t *cfg;
        kb_informer_t *inf = new_informer(&cfg);
        kb_buf_t b = KB_BUF_INIT;
        kb_event_list_t d;
        page(&b, "5", "4");
        list(inf, &b);
        watch_old_history(inf, &b);
        pop_all(inf, &d);
        kb_event_list_fini(&d);
        kb_buf_reset(&b);
        if (streamed) {
            kb_ingest_stream_begin(inf, 0);
            kb_buf_appendf(&b, "{\"type\":\"ADDED\",\"object\":%s}\n{\"type\":\"BOOKMARK\",\"object\":{\"kind\":"
                               "\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"11\","
                               "\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n", restored_p);
            assert_int_equal(kb_ingest_watch_bytes(inf, 0, b.data, b.len), KB_OK);
            assert_true(kb_ingest_stream_listed(inf, 0));
            assert_true(kb_ingest_stream_end(inf, 0));
        } else {
            kb_buf_appendf(&b, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"
                               "\"11\"},\"items\":[%s]}", restored_p);
            list(inf, &b);
        }
        pop_all(inf, &d);
        assert_non_null(find(&d, KB_EV_DELETED, "d/q"));
        const kb_event_t *p = find(&d, KB_EV_MODIFIED, "d/p");
        if (!p)
            fail_msg("%s list: d/p at 10 in the restored history was not sent (the consumer keeps the old "
                     "history's object)", streamed ? "streamed" : "paged");
        assert_string_equal(p->rv, "10");
        assert_non_null(strstr(p->obj, "\"new\""));
        kb_event_list_fini(&d);
        kb_buf_fini(&b);
        kb_informer_destroy(inf);
        kb_config_free(cfg);
    }
}

/* A streamed list cut short before its end moves no resume point (5 here),
 * but its objects (p at 10, q at 12) are the old history's: a paged list at
 * 11 after the restore is of a new history, though above the resume point,
 * and its p at 10 with other content is sent. */
static void test_restore_below_an_object_seen_is_noticed(void **state) {
    (void)state;
    kb_config_t *cfg;
    kb_informer_t *inf = new_informer(&cfg);
    kb_buf_t b = KB_BUF_INIT;
    kb_event_list_t d;
    page(&b, "5", "4");
    list(inf, &b);
    kb_ingest_stream_begin(inf, 0);
    kb_buf_reset(&b);
    kb_buf_appendf(&b, "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"p\",\"namespace\":\"d\","
                       "\"uid\":\"u-p\",\"resourceVersion\":\"10\"},\"spec\":{\"v\":\"old\"}}}\n"
                       "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"q\",\"namespace\":\"d\","
                       "\"uid\":\"u-q\",\"resourceVersion\":\"12\"}}}\n");
    assert_int_equal(kb_ingest_watch_bytes(inf, 0, b.data, b.len), KB_OK);
    assert_false(kb_ingest_stream_end(inf, 0));
    pop_all(inf, &d);
    kb_event_list_fini(&d);
    kb_buf_reset(&b);
    kb_buf_appendf(&b, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"11\"},"
                       "\"items\":[%s]}", restored_p);
    list(inf, &b);
    kb_informer_stats_t st;
    kb_informer_stats(inf, &st);
    assert_int_equal(st.rv_regressions, 1);
    pop_all(inf, &d);
    const kb_event_t *p = find(&d, KB_EV_MODIFIED, "d/p");
    if (!p)
        fail_msg("d/p at 10 in the restored history was not sent (the consumer keeps the old history's object)");
    assert_non_null(strstr(p->obj, "\"new\""));
    kb_event_list_fini(&d);
    kb_buf_fini(&b);
    kb_informer_destroy(inf);
    kb_config_free(cfg);
}

/* After an HA takeover (trusted mark 6, at RV 20) the windows a list did not
 * watch are weighed: the first list's (0, 5] is below the mark (the old
 * leader published all of it); a relist's (8, 12] reaches above the mark and
 * starts below the takeover (an object the old leader delivered can have
 * been created and deleted there unseen): counted; one after the takeover
 * (25, 30] cannot hold what the old leader delivered: not counted. */
static void test_blind_window(void **state) {
    (void)state;
    kb_config_t *cfg;
    kb_informer_t *inf = new_informer(&cfg);
    kb_buf_t b = KB_BUF_INIT;
    uint64_t lo, hi;
    page(&b, "5", "4");
    list(inf, &b);
    watch_to(inf, &b, "8");
    kb_informer_ha_took(inf, 6, 20, true);
    assert_int_equal(kb_informer_blind(inf, &lo, &hi), 0);
    page(&b, "12", "8"); /* the watch got 410: a relist at 12 */
    list(inf, &b);
    assert_int_equal(kb_informer_blind(inf, &lo, &hi), 1);
    assert_int_equal(lo, 8);
    assert_int_equal(hi, 12);
    watch_to(inf, &b, "25");
    page(&b, "30", "25");
    list(inf, &b);
    assert_int_equal(kb_informer_blind(inf, &lo, &hi), 1);
    kb_buf_fini(&b);
    kb_informer_destroy(inf);
    kb_config_free(cfg);
}

/* With compaction "latest", a queued ADDED that meets the relist's DELETED
 * vanishes with it — never delivered. On an HA standby (and after a takeover,
 * up to the takeover's RV) the leader may have delivered it: the DELETED
 * stays. */
static void test_ha_shared_keeps_the_delete(void **state) {
    (void)state;
    static const char latest[] =
        "cluster = { name = \"t\"; server = \"http://127.0.0.1:9\"; };\n"
        "informers = ( { name = \"pods\"; version = \"v1\"; resource = \"pods\"; shards = 1; "
        "compaction = \"latest\"; } );\n"
        "sinks = ( { name = \"out\"; type = \"file\"; path = \"/dev/null\"; } );\n"
        "routes = ( { informer = \"pods\"; sink = \"out\"; } );\n";
    for (int shared = 0; shared < 3; shared++) {
        kb_config_t *cfg;
        kb_informer_t *inf = new_informer_of(latest, &cfg);
        _Atomic uint64_t upto = shared == 1 ? UINT64_MAX : 3; /* 2: a takeover at 3, below the ADDED's 4 */
        if (shared)
            kb_informer_ha_shared(inf, &upto);
        kb_buf_t b = KB_BUF_INIT;
        page_of(&b, "5", "q", "3");
        list(inf, &b);
        kb_event_list_t d;
        pop_all(inf, &d);
        kb_event_list_fini(&d);
        page_of(&b, "6", "p", "4"); /* p@4 queued; q gone at 6 */
        list(inf, &b);
        page_of(&b, "9", "q2", "8"); /* p gone at 9, while its ADDED is still queued */
        list(inf, &b);
        pop_all(inf, &d);
        const kb_event_t *del = find(&d, KB_EV_DELETED, "d/p");
        if (shared == 1) {
            assert_non_null(del);
            assert_string_equal(del->rv, "9");
        } else {
            assert_null(del);
        }
        assert_null(find(&d, KB_EV_ADDED, "d/p"));
        kb_event_list_fini(&d);
        kb_buf_fini(&b);
        kb_informer_destroy(inf);
        kb_config_free(cfg);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_long_resource_versions),
                                       cmocka_unit_test(test_first_list_diffs_only_what_was_cached),
                                       cmocka_unit_test(test_relist_delete_at_the_list_rv),
                                       cmocka_unit_test(test_blind_window),
                                       cmocka_unit_test(test_ha_shared_keeps_the_delete),
                                       cmocka_unit_test(test_restore_reusing_an_rv_sends_the_new_object),
                                       cmocka_unit_test(test_restore_below_an_object_seen_is_noticed)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
