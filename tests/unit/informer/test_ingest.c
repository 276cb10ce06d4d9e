/* tests/unit/informer/test_ingest.c — the reflector's list and watch steps
 * (informer/ingest.h) on an informer that runs no thread: resourceVersions
 * longer than 63 bytes are kept whole (they were truncated), ones longer than
 * kbridge supports are refused loudly instead of cut. */
#include "common/buf.h"
#include "config/config.h"
#include "informer/informer.h"
#include "informer/ingest.h"

#include <setjmp.h>
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

/* The informer of cfgtext, running no thread (*cfg: its config, to free after it). */
static kb_informer_t *new_informer(kb_config_t **cfg) {
    char err[512];
    *cfg = kb_config_load_string(cfgtext, "t.cfg", err, sizeof(err));
    assert_non_null(*cfg);
    kb_informer_t *inf = kb_informer_new(*cfg, &(*cfg)->informers[0], NULL, err, sizeof(err));
    assert_non_null(inf);
    return inf;
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

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_long_resource_versions),
                                       cmocka_unit_test(test_first_list_diffs_only_what_was_cached)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
