/* tests/unit/informer/test_cut.c — cuts through the indexes (kb_informer_select,
 * kb_informer_cut, kb_informer_full) on an informer that runs no thread: the
 * label index follows what is ingested, a cut's references read later give
 * the objects as they were at the cut (also after the key changed or went,
 * with state_dir), and a restart refiles the labels from state_dir. */
#include "common/buf.h"
#include "common/selector.h"
#include "config/config.h"
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

static kb_config_t *load(const char *state_dir) {
    char text[1024], err[512];
    snprintf(text, sizeof(text),
             "cluster = { name = \"t\"; server = \"http://127.0.0.1:9\"; };\n%s%s%s"
             "informers = ( { name = \"pods\"; version = \"v1\"; resource = \"pods\"; shards = 1; "
             "index_labels = [ \"app\" ]; } );\n"
             "sinks = ( { name = \"out\"; type = \"file\"; path = \"/dev/null\"; } );\n"
             "routes = ( { informer = \"pods\"; sink = \"out\"; } );\n",
             state_dir ? "state_dir = \"" : "", state_dir ? state_dir : "", state_dir ? "\";\n" : "");
    kb_config_t *cfg = kb_config_load_string(text, "t.cfg", err, sizeof(err));
    if (!cfg)
        fail_msg("config: %s", err);
    return cfg;
}

static kb_informer_t *informer(kb_config_t *cfg) {
    char err[512];
    kb_informer_t *inf = kb_informer_new(cfg, &cfg->informers[0], NULL, err, sizeof(err));
    if (!inf)
        fail_msg("informer: %s", err);
    return inf;
}

static void pod_json(kb_buf_t *b, const char *name, unsigned rv, const char *app) {
    kb_buf_appendf(b, "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"d\","
                      "\"uid\":\"u-%s\",\"resourceVersion\":\"%u\",\"labels\":{\"app\":\"%s\"}}}", name, name, rv, app);
}

/* The first list: a(web) b(web) c(db), at RV 10. */
static void first_list(kb_informer_t *inf) {
    kb_buf_t b = KB_BUF_INIT, cont = KB_BUF_INIT;
    kb_buf_append_str(&b, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"10\"},"
                          "\"items\":[");
    pod_json(&b, "a", 7, "web");
    kb_buf_append_char(&b, ',');
    pod_json(&b, "b", 8, "web");
    kb_buf_append_char(&b, ',');
    pod_json(&b, "c", 9, "db");
    kb_buf_append_str(&b, "]}");
    kb_ingest_list_begin(inf, 0);
    assert_int_equal(kb_ingest_list_page(inf, 0, b.data, b.len, &cont), KB_OK);
    assert_int_equal(kb_ingest_list_end(inf, 0), KB_OK);
    kb_buf_fini(&b);
    kb_buf_fini(&cont);
}

/* a moves to app=db (RV 11), b is deleted (RV 12). */
static void changes(kb_informer_t *inf) {
    kb_buf_t b = KB_BUF_INIT;
    char rv[KB_RV_MAX];
    kb_ingest_watch_begin(inf, 0, rv, sizeof(rv));
    kb_buf_append_str(&b, "{\"type\":\"MODIFIED\",\"object\":");
    pod_json(&b, "a", 11, "db");
    kb_buf_append_str(&b, "}\n{\"type\":\"DELETED\",\"object\":");
    pod_json(&b, "b", 12, "web");
    kb_buf_append_str(&b, "}\n");
    assert_int_equal(kb_ingest_watch_bytes(inf, 0, b.data, b.len), KB_OK);
    kb_buf_fini(&b);
}

/* The names a selector selects (materialized and checked as a caller does), sorted, comma-joined. */
static void selected(kb_informer_t *inf, const char *text, char *out, size_t out_size, bool *exact) {
    kb_selector_t *sel = kb_selector_parse(text, NULL, 0);
    kb_event_list_t l;
    kb_event_list_init(&l);
    char rv[KB_RV_MAX];
    kb_informer_select(inf, NULL, sel, &l, exact, rv, sizeof(rv), NULL);
    out[0] = '\0';
    for (char name = 'a'; name <= 'z'; name++)
        for (size_t i = 0; i < l.n; i++) {
            kb_event_t *full = kb_informer_full(inf, l.ev[i]);
            if (full->name[0] == name &&
                kb_selector_match_json(sel, full->obj + full->labels_off, full->labels_len))
                snprintf(out + strlen(out), out_size - strlen(out), "%s%s", out[0] ? "," : "", full->name);
            kb_event_unref(full);
        }
    kb_event_list_fini(&l);
    kb_selector_free(sel);
}

static void expect(kb_informer_t *inf, const char *text, const char *want, bool want_exact) {
    char got[64];
    bool exact = !want_exact;
    selected(inf, text, got, sizeof(got), &exact);
    assert_string_equal(got, want);
    assert_int_equal(exact, want_exact);
}

/* A cut taken before the changes, read after them: the versions at the cut. */
static void check_cut_reads_its_versions(kb_informer_t *inf, bool thin) {
    kb_selector_t *sel = kb_selector_parse("app=web", NULL, 0);
    kb_event_list_t l;
    kb_event_list_init(&l);
    bool exact = false;
    char rv[KB_RV_MAX];
    kb_informer_select(inf, NULL, sel, &l, &exact, rv, sizeof(rv), NULL);
    assert_true(exact);
    assert_int_equal(l.n, 2);
    assert_string_equal(rv, "10");
    for (size_t i = 0; i < l.n; i++)
        assert_int_equal(l.ev[i]->obj_len == 0, thin); /* state_dir: the cache keeps identities */
    changes(inf);
    for (size_t i = 0; i < l.n; i++) {
        kb_event_t *full = kb_informer_full(inf, l.ev[i]);
        assert_true(full->obj_len > 0);
        assert_int_equal(full->rv_num, l.ev[i]->rv_num); /* 7 or 8, not 11 or the delete */
        assert_true(kb_selector_match_json(sel, full->obj + full->labels_off, full->labels_len));
        assert_non_null(strstr(full->obj, "\"app\":\"web\""));
        kb_event_unref(full);
    }
    kb_event_list_fini(&l);
    kb_selector_free(sel);
}

static void test_select_without_state_dir(void **state) {
    (void)state;
    kb_config_t *cfg = load(NULL);
    kb_informer_t *inf = informer(cfg);
    first_list(inf);
    expect(inf, "app=web", "a,b", true);
    expect(inf, "app in (web,db)", "a,b,c", true);
    expect(inf, "app!=web", "c", false);
    check_cut_reads_its_versions(inf, false);
    expect(inf, "app=web", "", true);
    expect(inf, "app=db", "a,c", true);
    kb_informer_destroy(inf);
    kb_config_free(cfg);
}

static void test_select_with_state_dir_and_restart(void **state) {
    (void)state;
    char dir[] = "/tmp/kbtest-cut-XXXXXX";
    assert_non_null(mkdtemp(dir));
    kb_config_t *cfg = load(dir);
    kb_informer_t *inf = informer(cfg);
    first_list(inf);
    expect(inf, "app=web", "a,b", true);
    check_cut_reads_its_versions(inf, true);
    expect(inf, "app=web", "", true);
    expect(inf, "app=db", "a,c", true);
    /* kb_informer_cut still hands out readable objects. */
    kb_event_list_t l;
    kb_event_list_init(&l);
    char rv[KB_RV_MAX];
    kb_informer_cut(inf, "d", &l, rv, sizeof(rv), NULL);
    assert_int_equal(l.n, 2);
    for (size_t i = 0; i < l.n; i++)
        assert_true(l.ev[i]->obj_len > 0);
    kb_event_list_fini(&l);
    kb_informer_destroy(inf);

    /* A restart loads the cache from state_dir and files the labels again. */
    inf = informer(cfg);
    expect(inf, "app=db", "a,c", true);
    expect(inf, "app=web", "", true);
    kb_informer_destroy(inf);
    kb_config_free(cfg);
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select_without_state_dir),
        cmocka_unit_test(test_select_with_state_dir_and_restart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
