/* tests/unit/sinks/test_noop.c — no-op suppression: which changes a route
 * skips because the consumer already has exactly that object, how SYNC is
 * treated depending on the route's `types`, that DELETED frees the key, the
 * route keys as loaded from a config, and that concurrent shard workers get
 * consistent answers and counters. */
#include "common/event.h"
#include "common/hash.h"
#include "config/config.h"
#include "sinks/noop.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kb_resource_t *res;

/* An event for default/<name> at resourceVersion rv whose object has the
 * given status phase. */
static kb_event_t *ev_at(kb_event_type_t type, const char *name, const char *rv, const char *phase) {
    char obj[512];
    snprintf(obj, sizeof(obj),
             "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\","
             "\"uid\":\"u-%s\",\"resourceVersion\":\"%s\"},\"status\":{\"phase\":\"%s\"}}",
             name, name, rv, phase);
    kb_event_init_t in = {.type = type, .res = res, .ns = "default", .ns_len = 7, .name = name,
                          .name_len = strlen(name), .uid = "u", .uid_len = 1, .rv = rv, .rv_len = strlen(rv),
                          .obj = obj, .obj_len = strlen(obj)};
    return kb_event_new(&in);
}

/* Check one event against the table and drop it. */
static bool sends(kb_noop_t *noop, kb_event_type_t type, const char *name, const char *rv, const char *phase) {
    kb_event_t *ev = ev_at(type, name, rv, phase);
    bool send = kb_noop_check_and_record(noop, ev);
    kb_event_unref(ev);
    return send;
}

static kb_config_t *load(const char *route_extra) {
    char text[1024], err[512];
    snprintf(text, sizeof(text),
             "cluster = { name = \"c\"; server = \"http://127.0.0.1:1\"; };\n"
             "informers = ( { name = \"pods\"; resource = \"pods\"; resync_seconds = 60; } );\n"
             "sinks = ( { name = \"f\"; type = \"file\"; path = \"-\"; } );\n"
             "routes = ( { informer = \"pods\"; sink = \"f\"; %s } );\n",
             route_extra);
    kb_config_t *cfg = kb_config_load_string(text, "t.cfg", err, sizeof(err));
    if (!cfg)
        fail_msg("config: %s", err);
    return cfg;
}

static uint32_t mask_of(const char *route_extra) {
    kb_config_t *cfg = load(route_extra);
    uint32_t mask = kb_noop_suppress_mask(&cfg->routes[0]);
    kb_config_free(cfg);
    return mask;
}

#define BIT(t) (1u << (t))

/* ---- the rule ------------------------------------------------------------- */

static void test_modified_identical_is_skipped(void **state) {
    (void)state;
    kb_noop_t *noop = kb_noop_new(mask_of("suppress_noop = true;"));
    assert_true(sends(noop, KB_EV_ADDED, "a", "10", "Pending"));
    /* status churn projected away: only the RV differs */
    assert_false(sends(noop, KB_EV_MODIFIED, "a", "11", "Pending"));
    assert_false(sends(noop, KB_EV_MODIFIED, "a", "12345", "Pending"));
    /* a real change goes, and becomes the new reference */
    assert_true(sends(noop, KB_EV_MODIFIED, "a", "12346", "Running"));
    assert_false(sends(noop, KB_EV_MODIFIED, "a", "12347", "Running"));
    assert_true(sends(noop, KB_EV_MODIFIED, "a", "12348", "Pending"));
    /* keys are independent */
    assert_true(sends(noop, KB_EV_MODIFIED, "b", "20", "Pending"));
    /* ADDED is never skipped, even when identical */
    assert_true(sends(noop, KB_EV_ADDED, "b", "21", "Pending"));
    kb_noop_stats_t st;
    kb_noop_stats(noop, &st);
    assert_int_equal(st.sent, 5);
    assert_int_equal(st.suppressed, 3);
    assert_int_equal(st.keys, 2);
    assert_true(st.bytes > 0);
    kb_noop_destroy(noop);
}

static void test_deleted_always_goes_and_forgets(void **state) {
    (void)state;
    kb_noop_t *noop = kb_noop_new(mask_of("suppress_noop = true;"));
    assert_true(sends(noop, KB_EV_ADDED, "a", "1", "Pending"));
    assert_true(sends(noop, KB_EV_DELETED, "a", "2", "Pending"));
    assert_true(sends(noop, KB_EV_DELETED, "a", "2", "Pending")); /* a repeat too */
    kb_noop_stats_t st;
    kb_noop_stats(noop, &st);
    assert_int_equal(st.keys, 0);
    /* recreated with the same content: the first MODIFIED after it is compared
     * with the new ADDED, not with the object before the delete */
    assert_true(sends(noop, KB_EV_MODIFIED, "a", "3", "Pending"));
    assert_false(sends(noop, KB_EV_MODIFIED, "a", "4", "Pending"));
    kb_noop_forget(noop, "default/a", 9, kb_fnv1a64("default/a", 9));
    assert_true(sends(noop, KB_EV_MODIFIED, "a", "5", "Pending"));
    kb_noop_clear(noop);
    kb_noop_stats(noop, &st);
    assert_int_equal(st.keys, 0);
    assert_true(sends(noop, KB_EV_MODIFIED, "a", "6", "Pending"));
    kb_noop_destroy(noop);
}

static void test_sync_depends_on_types(void **state) {
    (void)state;
    /* types not written (all by default): an unchanged SYNC is skipped */
    uint32_t implicit = mask_of("suppress_noop = true;");
    assert_int_equal(implicit, BIT(KB_EV_MODIFIED) | BIT(KB_EV_SYNC));
    kb_noop_t *noop = kb_noop_new(implicit);
    assert_true(sends(noop, KB_EV_ADDED, "a", "1", "Pending"));
    assert_false(sends(noop, KB_EV_SYNC, "a", "1", "Pending"));
    assert_true(sends(noop, KB_EV_SYNC, "a", "1", "Running")); /* differs from what was delivered */
    assert_true(sends(noop, KB_EV_SNAPSHOT, "a", "1", "Running")); /* explicit request: always */
    kb_noop_destroy(noop);

    /* a route that lists SYNC asked for the periodic re-assertion: every SYNC goes */
    uint32_t explicit_sync = mask_of("suppress_noop = true; types = [ \"ADDED\", \"MODIFIED\", \"DELETED\", \"SYNC\" ];");
    assert_int_equal(explicit_sync, BIT(KB_EV_MODIFIED));
    noop = kb_noop_new(explicit_sync);
    assert_true(sends(noop, KB_EV_ADDED, "a", "1", "Pending"));
    assert_true(sends(noop, KB_EV_SYNC, "a", "1", "Pending"));
    assert_true(sends(noop, KB_EV_SYNC, "a", "1", "Pending"));
    assert_false(sends(noop, KB_EV_MODIFIED, "a", "2", "Pending")); /* MODIFIED still compared */
    kb_noop_destroy(noop);

    /* types written without SYNC: SYNC never reaches the route; masks as implicit */
    assert_int_equal(mask_of("suppress_noop = true; types = [ \"MODIFIED\" ];"), implicit);
}

static void test_suppress_noop_false(void **state) {
    (void)state;
    assert_int_equal(mask_of("suppress_noop = false;"), 0);
    kb_noop_t *noop = kb_noop_new(0);
    assert_true(sends(noop, KB_EV_ADDED, "a", "1", "Pending"));
    assert_true(sends(noop, KB_EV_MODIFIED, "a", "2", "Pending"));
    assert_true(sends(noop, KB_EV_SYNC, "a", "2", "Pending"));
    kb_noop_destroy(noop);
}

static void test_route_keys_load(void **state) {
    (void)state;
    kb_config_t *cfg = load("");
    assert_false(cfg->routes[0].suppress_noop); /* opt-in: every change is sent unless asked */
    assert_false(cfg->routes[0].types_set);
    assert_int_equal(cfg->routes[0].heartbeat_seconds, 0);
    kb_config_free(cfg);
    cfg = load("types = [ \"SYNC\" ]; heartbeat_seconds = 30; suppress_noop = false;");
    assert_true(cfg->routes[0].types_set);
    assert_false(cfg->routes[0].suppress_noop);
    assert_int_equal(cfg->routes[0].heartbeat_seconds, 30);
    kb_config_free(cfg);
    char err[512];
    assert_null(kb_config_load_string("sinks = ( { name = \"f\"; type = \"file\"; } );\n"
                                      "informers = ( { name = \"p\"; resource = \"pods\"; } );\n"
                                      "routes = ( { informer = \"p\"; sink = \"f\"; heartbeat_seconds = -1; } );\n",
                                      "t.cfg", err, sizeof(err)));
    assert_string_equal(err, "t.cfg:3: routes[0].heartbeat_seconds: -1 is out of range (0 to 86400)");
}

/* ---- the hash ----------------------------------------------------------------- */

static void test_hash_skips_only_the_rv(void **state) {
    (void)state;
    const char *a = "{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"99\"},\"spec\":{\"n\":1}}";
    const char *b = "{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"100\"},\"spec\":{\"n\":1}}";
    const char *c = "{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"100\"},\"spec\":{\"n\":2}}";
    assert_true(kb_noop_hash(a, strlen(a), "99", 2) == kb_noop_hash(b, strlen(b), "100", 3));
    assert_true(kb_noop_hash(b, strlen(b), "100", 3) != kb_noop_hash(c, strlen(c), "100", 3));
    /* the value skipped must be the RV itself: a field holding other text is compared */
    const char *d = "{\"status\":{\"resourceVersion\":\"1\"},\"metadata\":{\"resourceVersion\":\"7\"}}";
    const char *e = "{\"status\":{\"resourceVersion\":\"2\"},\"metadata\":{\"resourceVersion\":\"8\"}}";
    assert_true(kb_noop_hash(d, strlen(d), "7", 1) != kb_noop_hash(e, strlen(e), "8", 1));
    /* no RV in the object: every byte counts; tails of every length differ */
    char buf[40];
    uint64_t seen[32];
    for (size_t n = 0; n < 32; n++) {
        memset(buf, 'q', sizeof(buf));
        seen[n] = kb_noop_hash(buf, n, "", 0);
        for (size_t m = 0; m < n; m++)
            assert_true(seen[m] != seen[n]);
    }
}

/* ---- threads ---------------------------------------------------------------------- */

#define WORKERS 4
#define KEYS 200
#define ROUNDS 20

static kb_noop_t *shared;

/* Each worker owns the keys w, w+WORKERS, …: per round it sends every key
 * twice with the same content (one skip) and then a change. */
static void *worker(void *arg) {
    size_t w = (size_t)(uintptr_t)arg;
    char name[32], rv[32], phase[32];
    for (int r = 0; r < ROUNDS; r++) {
        for (size_t k = w; k < KEYS; k += WORKERS) {
            snprintf(name, sizeof(name), "k%zu", k);
            snprintf(phase, sizeof(phase), "p%d", r);
            snprintf(rv, sizeof(rv), "%d", 3 * r + 1);
            if (!sends(shared, KB_EV_MODIFIED, name, rv, phase))
                return (void *)1;
            snprintf(rv, sizeof(rv), "%d", 3 * r + 2);
            if (sends(shared, KB_EV_MODIFIED, name, rv, phase))
                return (void *)1;
        }
    }
    return NULL;
}

static void test_concurrent_workers(void **state) {
    (void)state;
    shared = kb_noop_new(BIT(KB_EV_MODIFIED));
    pthread_t t[WORKERS];
    for (size_t w = 0; w < WORKERS; w++)
        assert_int_equal(pthread_create(&t[w], NULL, worker, (void *)(uintptr_t)w), 0);
    for (size_t w = 0; w < WORKERS; w++) {
        void *ret;
        pthread_join(t[w], &ret);
        assert_null(ret);
    }
    kb_noop_stats_t st;
    kb_noop_stats(shared, &st);
    assert_int_equal(st.sent, KEYS * ROUNDS);
    assert_int_equal(st.suppressed, KEYS * ROUNDS);
    assert_int_equal(st.keys, KEYS);
    kb_noop_destroy(shared);
}

static int setup(void **state) {
    (void)state;
    res = kb_resource_new("c", "pods", "", "v1", "pods");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kb_resource_unref(res);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modified_identical_is_skipped),
        cmocka_unit_test(test_deleted_always_goes_and_forgets),
        cmocka_unit_test(test_sync_depends_on_types),
        cmocka_unit_test(test_suppress_noop_false),
        cmocka_unit_test(test_route_keys_load),
        cmocka_unit_test(test_hash_skips_only_the_rv),
        cmocka_unit_test(test_concurrent_workers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
