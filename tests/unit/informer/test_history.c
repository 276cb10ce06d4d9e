/* tests/unit/informer/test_history.c — the watch history's dispatch
 * (informer/history.h) on an informer that runs no thread, fed through the
 * reflector's steps (informer/ingest.h): a change reaches only the watchers
 * its values before and after it are filed under — a change on node A queues
 * nothing for (and so never wakes) a watcher of node B —, a pod moving from
 * node A to node B is a DELETED to A's watcher and an ADDED to B's, and a
 * watcher that does not read is lost alone, without holding up the others;
 * a relist's DELETED is ordered by its object's resourceVersion, not the
 * list's RV its envelope carries (a client-go watcher's RV never goes back). */
#include "common/buf.h"
#include "common/fieldsel.h"
#include "common/selector.h"
#include "config/config.h"
#include "informer/history.h"
#include "informer/informer.h"
#include "informer/ingest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char cfgtext[] =
    "cluster = { name = \"t\"; server = \"http://127.0.0.1:9\"; };\n"
    "informers = ( { name = \"pods\"; version = \"v1\"; resource = \"pods\"; shards = 1;\n"
    "                index_labels = [ \"app\" ]; } );\n"
    "sinks = ( { name = \"out\"; type = \"file\"; path = \"/dev/null\"; } );\n"
    "routes = ( { informer = \"pods\"; sink = \"out\"; } );\n";

static void pod(kb_buf_t *b, const char *name, const char *rv, const char *app, const char *node) {
    kb_buf_appendf(b, "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"d\","
                      "\"uid\":\"u-%s\",\"resourceVersion\":\"%s\",\"labels\":{\"app\":\"%s\"}},"
                      "\"spec\":{\"nodeName\":\"%s\"}}", name, name, rv, app, node);
}

static void watch_event(kb_informer_t *inf, const char *type, const char *name, const char *rv, const char *app,
                        const char *node) {
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_appendf(&b, "{\"type\":\"%s\",\"object\":", type);
    pod(&b, name, rv, app, node);
    kb_buf_append_str(&b, "}\n");
    assert_int_equal(kb_ingest_watch_bytes(inf, 0, b.data, b.len), KB_OK);
    kb_buf_fini(&b);
}

typedef struct fixture {
    kb_config_t *cfg;
    kb_informer_t *inf;
    kb_history_t *h;
    const kb_fields_kind_t *kind;
} fixture_t;

/* Pods a (node-a, app=web) and b (node-b, app=db) listed at RV 10; a history of capacity cap. */
static void setup(fixture_t *fx, size_t cap) {
    char err[512];
    fx->cfg = kb_config_load_string(cfgtext, "t.cfg", err, sizeof(err));
    assert_non_null(fx->cfg);
    fx->inf = kb_informer_new(fx->cfg, &fx->cfg->informers[0], NULL, err, sizeof(err));
    assert_non_null(fx->inf);
    kb_buf_t b = KB_BUF_INIT, cont = KB_BUF_INIT;
    kb_buf_append_str(&b, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"10\"},"
                          "\"items\":[");
    pod(&b, "a", "8", "web", "node-a");
    kb_buf_append_char(&b, ',');
    pod(&b, "b", "9", "db", "node-b");
    kb_buf_append_str(&b, "]}");
    kb_ingest_list_begin(fx->inf, 0);
    assert_int_equal(kb_ingest_list_page(fx->inf, 0, b.data, b.len, &cont), KB_OK);
    assert_int_equal(kb_ingest_list_end(fx->inf, 0), KB_OK);
    char rv[KB_RV_MAX];
    kb_ingest_watch_begin(fx->inf, 0, rv, sizeof(rv));
    assert_string_equal(rv, "10");
    fx->h = kb_history_new(fx->inf, cap);
    assert_non_null(fx->h);
    fx->kind = kb_fields_kind("", "pods");
    kb_buf_fini(&b);
    kb_buf_fini(&cont);
}

static void teardown(fixture_t *fx) {
    kb_history_destroy(fx->h);
    kb_informer_destroy(fx->inf);
    kb_config_free(fx->cfg);
}

/* A watcher from now (RV 10) with a fieldSelector and/or labelSelector. */
typedef struct watcher {
    kb_fieldsel_t *fsel;
    kb_selector_t *sel;
    kb_history_filter_t f;
    kb_history_watcher_t *w;
} watcher_t;

static void watcher_open(fixture_t *fx, watcher_t *wt, const char *ns, const char *fsel, const char *sel) {
    char err[256];
    memset(wt, 0, sizeof(*wt));
    assert_true(kb_fieldsel_parse(fx->kind, fsel, &wt->fsel, err, sizeof(err)));
    if (sel)
        assert_non_null(wt->sel = kb_selector_parse(sel, err, sizeof(err)));
    wt->f = (kb_history_filter_t){.ns = ns, .sel = wt->sel, .fsel = wt->fsel};
    uint64_t pos = 0;
    assert_int_equal(kb_history_after_rv(fx->h, 10, &pos), KB_HISTORY_OK);
    wt->w = kb_history_watch(fx->h, pos, &wt->f);
}

static void watcher_close(watcher_t *wt) {
    kb_history_unwatch(wt->w);
    kb_fieldsel_free(wt->fsel);
    kb_selector_free(wt->sel);
}

/* The next change queued for wt: its type and name ("" when none is queued). */
static int next_type(watcher_t *wt, char *name, size_t name_size) {
    kb_history_entry_t e = {0};
    kb_event_type_t type = KB_EV_SYNC;
    int got = kb_history_watcher_next(wt->w, 0, &e, &type);
    snprintf(name, name_size, "%.*s", got > 0 ? (int)e.ev->name_len : 0, got > 0 ? e.ev->name : "");
    if (got > 0)
        kb_history_entry_fini(&e);
    return got > 0 ? (int)type : got;
}

static void test_dispatch_by_node(void **state) {
    (void)state;
    fixture_t fx;
    setup(&fx, 100);
    watcher_t wa, wb, wall, wweb, wns;
    watcher_open(&fx, &wa, "d", "spec.nodeName=node-a", NULL);
    watcher_open(&fx, &wb, "d", "spec.nodeName=node-b", NULL);
    watcher_open(&fx, &wall, NULL, NULL, NULL);
    watcher_open(&fx, &wweb, NULL, NULL, "app=web");
    watcher_open(&fx, &wns, "d", NULL, NULL);
    char idx[128], name[64];
    kb_history_watcher_index(wa.w, idx, sizeof(idx));
    assert_string_equal(idx, "field#0=node-a");
    kb_history_watcher_index(wweb.w, idx, sizeof(idx));
    assert_string_equal(idx, "label:app=web");
    kb_history_watcher_index(wns.w, idx, sizeof(idx));
    assert_string_equal(idx, "ns=d");
    kb_history_watcher_index(wall.w, idx, sizeof(idx));
    assert_string_equal(idx, "*");

    /* A change on node A: node A's watcher, not node B's. */
    watch_event(fx.inf, "MODIFIED", "a", "11", "web", "node-a");
    assert_int_equal(kb_history_watcher_queued(wa.w), 1);
    assert_int_equal(kb_history_watcher_queued(wb.w), 0);
    assert_int_equal(next_type(&wa, name, sizeof(name)), KB_EV_MODIFIED);
    assert_string_equal(name, "a");
    assert_int_equal(next_type(&wb, name, sizeof(name)), 0);

    /* Pod a moves from node A to node B: a DELETED to A's watcher, an ADDED to B's. */
    watch_event(fx.inf, "MODIFIED", "a", "12", "web", "node-b");
    assert_int_equal(next_type(&wa, name, sizeof(name)), KB_EV_DELETED);
    assert_string_equal(name, "a");
    assert_int_equal(next_type(&wb, name, sizeof(name)), KB_EV_ADDED);
    assert_string_equal(name, "a");
    /* And its label leaves app=web: a DELETED there too. */
    watch_event(fx.inf, "MODIFIED", "a", "13", "db", "node-b");
    assert_int_equal(kb_history_watcher_queued(wa.w), 0);
    assert_int_equal(next_type(&wb, name, sizeof(name)), KB_EV_MODIFIED);
    assert_int_equal(next_type(&wweb, name, sizeof(name)), KB_EV_MODIFIED); /* (rv 11) */
    assert_int_equal(next_type(&wweb, name, sizeof(name)), KB_EV_MODIFIED); /* (rv 12) */
    assert_int_equal(next_type(&wweb, name, sizeof(name)), KB_EV_DELETED);
    assert_int_equal(kb_history_watcher_queued(wweb.w), 0);

    /* A delete and a create on another node (how a pod "moves" for real). */
    watch_event(fx.inf, "DELETED", "b", "14", "db", "node-b");
    watch_event(fx.inf, "ADDED", "b", "15", "db", "node-a");
    assert_int_equal(next_type(&wb, name, sizeof(name)), KB_EV_DELETED);
    assert_string_equal(name, "b");
    assert_int_equal(next_type(&wb, name, sizeof(name)), 0);
    assert_int_equal(next_type(&wa, name, sizeof(name)), KB_EV_ADDED);
    assert_string_equal(name, "b");
    assert_int_equal(next_type(&wa, name, sizeof(name)), 0);

    /* The everything and namespace watchers got all five changes, as they came. */
    const int want[] = {KB_EV_MODIFIED, KB_EV_MODIFIED, KB_EV_MODIFIED, KB_EV_DELETED, KB_EV_ADDED};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(next_type(&wall, name, sizeof(name)), want[i]);
        assert_int_equal(next_type(&wns, name, sizeof(name)), want[i]);
    }
    assert_int_equal(next_type(&wall, name, sizeof(name)), 0);
    /* Nobody waited, so nobody was woken. */
    assert_int_equal(kb_history_wakeups(fx.h), 0);

    /* Bookmarks: a watcher with nothing queued may announce the progress. */
    char rv[64];
    assert_true(kb_history_watcher_rv(wb.w, rv, sizeof(rv)));
    assert_string_equal(rv, "15");

    watcher_close(&wa);
    watcher_close(&wb);
    watcher_close(&wall);
    watcher_close(&wweb);
    watcher_close(&wns);
    teardown(&fx);
}

/* A watcher registered behind the newest change gets the ring's changes from
 * its position, filtered the same way. */
static void test_register_from_past(void **state) {
    (void)state;
    fixture_t fx;
    setup(&fx, 100);
    watch_event(fx.inf, "MODIFIED", "a", "11", "web", "node-a");
    watch_event(fx.inf, "MODIFIED", "b", "12", "db", "node-b");
    watcher_t wb;
    watcher_open(&fx, &wb, "d", "spec.nodeName=node-b", NULL); /* from RV 10 */
    char name[64];
    assert_int_equal(next_type(&wb, name, sizeof(name)), KB_EV_MODIFIED);
    assert_string_equal(name, "b");
    assert_int_equal(next_type(&wb, name, sizeof(name)), 0);
    watcher_close(&wb);
    teardown(&fx);
}

/* A watcher that does not read is lost once its changes leave the window;
 * the others go on, and a quiet node's watcher is not lost by churn elsewhere. */
static void test_slow_watcher_alone(void **state) {
    (void)state;
    fixture_t fx;
    setup(&fx, 4);
    watcher_t slow, fast, quiet;
    watcher_open(&fx, &slow, "d", "spec.nodeName=node-a", NULL);
    watcher_open(&fx, &fast, "d", "spec.nodeName=node-a", NULL);
    watcher_open(&fx, &quiet, "d", "spec.nodeName=node-c", NULL);
    char name[64], rv[16];
    for (int i = 0; i < 10; i++) {
        snprintf(rv, sizeof(rv), "%d", 11 + i);
        watch_event(fx.inf, "MODIFIED", "a", rv, "web", "node-a");
        assert_int_equal(next_type(&fast, name, sizeof(name)), KB_EV_MODIFIED);
    }
    assert_true(kb_history_watcher_lost(slow.w));
    assert_int_equal(next_type(&slow, name, sizeof(name)), -1);
    assert_false(kb_history_watcher_lost(fast.w));
    assert_false(kb_history_watcher_lost(quiet.w));
    assert_int_equal(next_type(&quiet, name, sizeof(name)), 0);
    watcher_close(&slow);
    watcher_close(&fast);
    watcher_close(&quiet);
    teardown(&fx);
}

static void count_notify(void *arg) {
    (*(int *)arg)++;
}

/* A watcher registered with a notify (a reader that parks its connection
 * instead of blocking) is told once it has read to empty and a change is
 * queued for it — once per emptying, however many follow —, never for a
 * change on another node, and when it is woken (a hang-up, a stop). */
static void test_notify_after_empty(void **state) {
    (void)state;
    fixture_t fx;
    setup(&fx, 100);
    kb_fieldsel_t *fsel = NULL;
    char err[256], name[64];
    assert_true(kb_fieldsel_parse(fx.kind, "spec.nodeName=node-a", &fsel, err, sizeof(err)));
    kb_history_filter_t f = {.ns = "d", .fsel = fsel};
    uint64_t pos = 0;
    assert_int_equal(kb_history_after_rv(fx.h, 10, &pos), KB_HISTORY_OK);
    int told = 0;
    watcher_t wa = {.fsel = fsel, .f = f};
    wa.w = kb_history_watch_notify(fx.h, pos, &wa.f, count_notify, &told);
    assert_int_equal(next_type(&wa, name, sizeof(name)), 0); /* read to empty: armed */
    watch_event(fx.inf, "MODIFIED", "b", "11", "db", "node-b");
    assert_int_equal(told, 0);
    watch_event(fx.inf, "MODIFIED", "a", "12", "web", "node-a");
    assert_int_equal(told, 1);
    watch_event(fx.inf, "MODIFIED", "a", "13", "web", "node-a");
    assert_int_equal(told, 1);
    assert_int_equal(next_type(&wa, name, sizeof(name)), KB_EV_MODIFIED);
    assert_int_equal(next_type(&wa, name, sizeof(name)), KB_EV_MODIFIED);
    assert_int_equal(next_type(&wa, name, sizeof(name)), 0);
    kb_history_watcher_wake(wa.w);
    assert_int_equal(told, 2);
    watcher_close(&wa);
    teardown(&fx);
}

/* kb_history_order_rv: a DELETED a relist inferred at the list's RV (20) is
 * ordered by its object's own resourceVersion (4); any other event by its RV. */
static void test_order_rv_of_an_inferred_delete(void **state) {
    (void)state;
    kb_resource_t *res = kb_resource_new("t", "pods", "", "v1", "pods");
    static const char obj[] = "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"resourceVersion\":\"4\"}}";
    kb_event_init_t in = {.type = KB_EV_DELETED, .final_state_unknown = true, .res = res, .ns = "d", .ns_len = 1,
                          .name = "p", .name_len = 1, .uid = "u", .uid_len = 1, .rv = "20", .rv_len = 2,
                          .obj = obj, .obj_len = sizeof(obj) - 1};
    kb_event_t *ev = kb_event_new(&in);
    assert_int_equal(ev->rv_num, 20);
    assert_int_equal(kb_history_order_rv(ev), 4);
    kb_event_unref(ev);
    in.final_state_unknown = false; /* a watched DELETED: its own RV */
    ev = kb_event_new(&in);
    assert_int_equal(kb_history_order_rv(ev), 20);
    kb_event_unref(ev);
    kb_resource_unref(res);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch_by_node),
        cmocka_unit_test(test_order_rv_of_an_inferred_delete),
        cmocka_unit_test(test_register_from_past),
        cmocka_unit_test(test_slow_watcher_alone),
        cmocka_unit_test(test_notify_after_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
