/* tests/unit/config/test_reload.c — what a reload needs, derived from the key
 * table's rows: every informer and sink key (keep_fields included, which the
 * hand-written equality missed) rebuilds its object, shutdown_timeout and log
 * apply in place, cluster/state_dir/http/sharding/journal need a restart. */
#include "config/config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *const base =
    "cluster = { name = \"c\"; server = \"http://127.0.0.1:1\"; qps = 50.0; };\n"
    "shutdown_timeout = 10;\nlog = { level = \"info\"; };\nhttp = { listen = \"\"; };\n"
    "informers = ( { name = \"pods\"; resource = \"pods\"; keep_fields = []; } );\n"
    "sinks = ( { name = \"out\"; type = \"file\"; path = \"/tmp/x.jsonl\"; file_mode = \"0600\"; } );\n"
    "routes = ( { informer = \"pods\"; sink = \"out\"; } );\n";

/* base with one substring replaced, loaded */
static kb_config_t *load_with(const char *from, const char *to) {
    char text[4096], errstr[512];
    const char *at = strstr(base, from);
    assert_non_null(at);
    snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
    kb_config_t *cfg = kb_config_load_string(text, "<test>", errstr, sizeof(errstr));
    if (!cfg)
        fail_msg("does not load: %s\n%s", errstr, text);
    return cfg;
}

static void expect(const char *from, const char *to, kb_reload_t global, kb_reload_t informer, kb_reload_t sink,
                   const char *what) {
    kb_config_t *a = load_with(from, from), *b = load_with(from, to);
    char gw[128], iw[128], sw[128];
    kb_reload_t g = kb_config_diff_global(a, b, gw, sizeof(gw));
    kb_reload_t i = kb_config_diff_informer(&a->informers[0], &b->informers[0], iw, sizeof(iw));
    kb_reload_t s = kb_config_diff_sink(&a->sinks[0], &b->sinks[0], sw, sizeof(sw));
    if (g != global || i != informer || s != sink)
        fail_msg("%s -> %s: global %s (%s), informer %s (%s), sink %s (%s)", from, to, kb_reload_name(g), gw,
                 kb_reload_name(i), iw, kb_reload_name(s), sw);
    const char *named = g != KB_RELOAD_SAME ? gw : i != KB_RELOAD_SAME ? iw : sw;
    if (what)
        assert_string_equal(named, what);
    kb_config_free(a);
    kb_config_free(b);
}

static void test_unchanged(void **state) {
    (void)state;
    expect("pods", "pods", KB_RELOAD_SAME, KB_RELOAD_SAME, KB_RELOAD_SAME, NULL);
    /* where a group starts is not a key */
    expect("shutdown_timeout = 10;\n", "\n\nshutdown_timeout = 10;\n", KB_RELOAD_SAME, KB_RELOAD_SAME, KB_RELOAD_SAME,
           NULL);
    /* a list written as its default is the default: nothing to rebuild */
    expect("keep_fields = [];", "keep_fields = []; redact_fields = [];", KB_RELOAD_SAME, KB_RELOAD_SAME,
           KB_RELOAD_SAME, NULL);
}

static void test_informer_and_sink_keys_rebuild(void **state) {
    (void)state;
    expect("keep_fields = []", "keep_fields = [ \"spec.x\" ]", KB_RELOAD_SAME, KB_RELOAD_REBUILD, KB_RELOAD_SAME,
           "keep_fields");
    expect("resource = \"pods\";", "resource = \"pods\"; page_size = 7;", KB_RELOAD_SAME, KB_RELOAD_REBUILD,
           KB_RELOAD_SAME, "page_size");
    /* The label indexes are built as the informer fills its cache: a new set lists again. */
    expect("resource = \"pods\";", "resource = \"pods\"; index_labels = [ \"app\" ];", KB_RELOAD_SAME,
           KB_RELOAD_REBUILD, KB_RELOAD_SAME, "index_labels");
    expect("file_mode = \"0600\"", "file_mode = \"0640\"", KB_RELOAD_SAME, KB_RELOAD_SAME, KB_RELOAD_REBUILD,
           "file_mode");
    expect("path = \"/tmp/x.jsonl\";", "path = \"/tmp/x.jsonl\"; follow_symlinks = true;", KB_RELOAD_SAME,
           KB_RELOAD_SAME, KB_RELOAD_REBUILD, "follow_symlinks");
}

static void test_live_keys_apply_in_place(void **state) {
    (void)state;
    expect("shutdown_timeout = 10;", "shutdown_timeout = 1;", KB_RELOAD_IN_PLACE, KB_RELOAD_SAME, KB_RELOAD_SAME,
           "shutdown_timeout");
    expect("level = \"info\"", "level = \"debug\"", KB_RELOAD_IN_PLACE, KB_RELOAD_SAME, KB_RELOAD_SAME, "log.level");
}

static void test_restart_keys(void **state) {
    (void)state;
    expect("qps = 50.0;", "qps = 5.0;", KB_RELOAD_RESTART, KB_RELOAD_SAME, KB_RELOAD_SAME, "cluster.qps");
    expect("http = { listen = \"\"; };", "http = { listen = \"127.0.0.1:1\"; };", KB_RELOAD_RESTART, KB_RELOAD_SAME,
           KB_RELOAD_SAME, "http.listen");
    expect("shutdown_timeout = 10;", "shutdown_timeout = 10; state_dir = \"/tmp/s\";", KB_RELOAD_RESTART,
           KB_RELOAD_SAME, KB_RELOAD_SAME, "state_dir");
    /* a restart outweighs an in-place change; the restart key is the one named */
    expect("shutdown_timeout = 10;", "shutdown_timeout = 1; journal = { max_age = 5; };", KB_RELOAD_RESTART,
           KB_RELOAD_SAME, KB_RELOAD_SAME, "journal.max_age");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unchanged),
        cmocka_unit_test(test_informer_and_sink_keys_rebuild),
        cmocka_unit_test(test_live_keys_apply_in_place),
        cmocka_unit_test(test_restart_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
