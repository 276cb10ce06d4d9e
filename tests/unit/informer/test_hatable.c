/* tests/unit/informer/test_hatable.c — a standby's decisions on their own:
 * a relist's DELETED needs the list's RV; a published mark is trusted only up
 * to what this replica saw, and refused at a takeover when above it; as the
 * leader only a committed checkpoint is skipped up to; the owed table keeps
 * a key's last skipped state (a DELETED by reference) and puts back unpaid
 * entries under newer ones. */
#include "informer/hatable.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static kb_resource_t *res;
static char big[4096]; /* an object that compresses */

static int setup(void **state) {
    (void)state;
    res = kb_resource_new("c1", "pods", "", "v1", "pods");
    size_t n = (size_t)snprintf(big, sizeof(big), "{\"metadata\":{\"name\":\"y\"},\"spec\":{\"containers\":[");
    while (n + 64 < sizeof(big))
        n += (size_t)snprintf(big + n, sizeof(big) - n, "{\"image\":\"registry.k8s.io/pause:3.10\"},");
    snprintf(big + n - 1, sizeof(big) - n + 1, "]}}");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kb_resource_unref(res);
    return 0;
}

static kb_event_t *mk(kb_event_type_t type, bool fsu, const char *name, unsigned rv) {
    char rvs[16];
    snprintf(rvs, sizeof(rvs), "%u", rv);
    kb_event_init_t in = {
        .type = type, .final_state_unknown = fsu, .res = res,
        .ns = "a", .ns_len = 1, .name = name, .name_len = strlen(name),
        .uid = "u1", .uid_len = 2, .rv = rvs, .rv_len = strlen(rvs), .obj = big, .obj_len = strlen(big),
    };
    return kb_event_new(&in);
}

static void test_a_relist_delete_needs_the_list(void **state) {
    (void)state;
    kb_event_t *mod = mk(KB_EV_MODIFIED, false, "n", 10), *gone = mk(KB_EV_DELETED, true, "n", 10);
    assert_int_equal(kb_hatable_need(mod, 50), 10);
    assert_int_equal(kb_hatable_need(gone, 50), 50); /* known only once the mark reaches the list */
    kb_hamark_t m = {.rv = 20};
    assert_true(kb_hamark_skips(&m, kb_hatable_need(mod, 50), 50, false));
    assert_false(kb_hamark_skips(&m, kb_hatable_need(gone, 50), 50, false));
    kb_event_unref(mod);
    kb_event_unref(gone);
}

static void test_a_mark_is_trusted_up_to_what_was_seen(void **state) {
    (void)state;
    kb_hamark_t m = {.rv = 100};
    assert_int_equal(kb_hamark_trust(&m, 40), 0); /* ahead of our watch (or forged) */
    assert_false(kb_hamark_skips(&m, 30, 40, false));
    assert_int_equal(kb_hamark_trust(&m, 100), 100); /* our watch got there */
    assert_true(kb_hamark_skips(&m, 100, 100, false));
    m.rv = 999;
    assert_true(kb_hamark_takeover(&m, 120)); /* refused at a takeover */
    assert_int_equal(m.rv, 100);
    assert_false(kb_hamark_takeover(&m, 120));
}

static void test_a_leader_skips_only_what_was_committed(void **state) {
    (void)state;
    kb_hamark_t m = {.rv = 100, .trusted = 100};
    assert_false(kb_hamark_skips(&m, 50, 200, true));
    kb_hamark_commit(&m, 60);
    assert_true(kb_hamark_skips(&m, 50, 200, true));
    assert_false(kb_hamark_skips(&m, 61, 200, true));
}

static void test_the_owed_table(void **state) {
    (void)state;
    kb_owed_t o = {NULL, 0};
    kb_event_t *live = mk(KB_EV_MODIFIED, false, "x", 5), *del = mk(KB_EV_DELETED, false, "y", 6);
    kb_owed_add(&o, live);
    kb_owed_add(&o, del);
    kb_event_unref(del); /* the table keeps its own reference */
    assert_int_equal(kb_owed_count(&o), 2);
    kb_owed_t paying = kb_owed_take(&o);
    assert_int_equal(kb_owed_count(&o), 0);
    kb_owed_add(&o, live); /* owed again meanwhile: a live key */
    size_t pos = 0, len, n = 0;
    const char *key;
    kb_event_t *d;
    while (kb_owed_next(&paying, &pos, &key, &len, &d)) {
        n++;
        if (!strcmp(key, "a/y")) {
            assert_int_equal(d->type, KB_EV_DELETED);
            assert_string_equal(d->rv, "6");
            assert_string_equal(d->obj, big); /* compressed in the table, whole again */
        } else {
            assert_null(d);
        }
        kb_owed_put(&o, key, len, d, false); /* not paid: back, under what is newer */
        kb_event_unref(d);
    }
    assert_int_equal(n, 2);
    kb_owed_fini(&paying);
    assert_int_equal(kb_owed_count(&o), 2);
    kb_owed_fini(&o);
    kb_event_unref(live);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_relist_delete_needs_the_list),
        cmocka_unit_test(test_a_mark_is_trusted_up_to_what_was_seen),
        cmocka_unit_test(test_a_leader_skips_only_what_was_committed),
        cmocka_unit_test(test_the_owed_table),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
