/* tests/unit/informer/test_state.c — where a replay from a resourceVersion
 * starts in the journal (kb_state_journal_seek): after the last entry whose
 * resume point is at or below it; before the first resume point (a first
 * list's objects) or below what was trimmed the journal cannot say (GONE);
 * after a trim, and after a trim that cut a list in two, it vouches from the
 * resume point recorded. Resume points of any length ("namespace/rv"). */
#include "common/event.h"
#include "informer/state.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static kb_resource_t *res;
static char dir[64];

/* A state_dir under /tmp; journal_max_bytes 1: a checkpoint trims every
 * acknowledged entry. */
static kb_state_t *open_state(void) {
    snprintf(dir, sizeof(dir), "/tmp/kbtest-state-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char why[256];
    kb_state_opts_t so = {.dir = dir, .map_bytes = 64u << 20, .journal_max_bytes = 1, .journal_max_age_s = 3600};
    kb_state_t *st = kb_state_open(&so, why, sizeof(why));
    assert_non_null(st);
    return st;
}

static void close_state(kb_state_t *st) {
    kb_state_close(st);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Journal entry seq: the change of pod p<rv> at rv (point: the resume point it
 * completes, "" for a list's object), or with rv 0 a marker at point. */
static void put(kb_state_t *st, uint64_t seq, unsigned rv, const char *point) {
    assert_int_equal(kb_state_begin(st), KB_OK);
    if (!rv) {
        assert_int_equal(kb_state_put_mark(st, seq, point), KB_OK);
    } else {
        char name[16], rvs[16];
        snprintf(name, sizeof(name), "p%u", rv);
        snprintf(rvs, sizeof(rvs), "%u", rv);
        kb_event_init_t in = {.type = KB_EV_ADDED, .res = res, .ns = "ns1", .ns_len = 3, .name = name,
                              .name_len = strlen(name), .uid = "u", .uid_len = 1, .rv = rvs, .rv_len = strlen(rvs),
                              .obj = "{}", .obj_len = 2};
        kb_event_t *ev = kb_event_new(&in);
        ev->seq = seq;
        assert_int_equal(kb_state_put_event(st, ev, point), KB_OK);
        kb_event_unref(ev);
    }
    assert_int_equal(kb_state_commit(st), KB_OK);
}

/* Where a replay from rv starts (0: GONE). */
static uint64_t seek(kb_state_t *st, uint64_t rv) {
    uint64_t seq = 0;
    kb_err_t err = kb_state_journal_seek(st, rv, &seq);
    if (err == KB_ERR_GONE)
        return 0;
    assert_int_equal(err, KB_OK);
    return seq;
}

/* A first list (two objects, then its marker at 100), then two changes. */
static void first_list_then_changes(kb_state_t *st, const char *ns) {
    char p[400];
    put(st, 1, 5, "");
    put(st, 2, 6, "");
    snprintf(p, sizeof(p), "%s/100", ns);
    put(st, 3, 0, p);
    snprintf(p, sizeof(p), "%s/101", ns);
    put(st, 4, 101, p);
    snprintf(p, sizeof(p), "%s/105", ns);
    put(st, 5, 105, p);
}

static void test_seek_by_resume_points(void **state) {
    (void)state;
    kb_state_t *st = open_state();
    first_list_then_changes(st, "ns1");
    assert_int_equal(seek(st, 99), 0); /* inside the first list: nothing vouches */
    assert_int_equal(seek(st, 100), 4);
    assert_int_equal(seek(st, 104), 5);
    assert_int_equal(seek(st, 105), 6);
    assert_int_equal(seek(st, 1000), 6);
    close_state(st);
}

/* Trimmed up to the change at 101: the journal vouches from 101 on. A
 * namespace longer than an RV may be (KB_RV_MAX) is still a resume point. */
static void test_seek_after_trim(void **state) {
    (void)state;
    char ns[300];
    memset(ns, 'n', sizeof(ns) - 1);
    ns[sizeof(ns) - 1] = '\0';
    for (int i = 0; i < 2; i++) {
        kb_state_t *st = open_state();
        first_list_then_changes(st, i ? ns : "ns1");
        assert_int_equal(kb_state_set_checkpoint(st, 4, "ns1/101", NULL, 0), KB_OK);
        assert_int_equal(seek(st, 100), 0);
        assert_int_equal(seek(st, 101), 5);
        assert_int_equal(seek(st, 104), 5);
        assert_int_equal(seek(st, 105), 6);
        close_state(st);
    }
}

/* Trimmed inside the first list: the journal vouches again only from the
 * marker that ends it. */
static void test_seek_after_trim_inside_a_list(void **state) {
    (void)state;
    kb_state_t *st = open_state();
    first_list_then_changes(st, "ns1");
    assert_int_equal(kb_state_set_checkpoint(st, 1, "", NULL, 0), KB_OK);
    assert_int_equal(seek(st, 99), 0);
    assert_int_equal(seek(st, 100), 4);
    assert_int_equal(seek(st, 101), 5);
    close_state(st);
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
        cmocka_unit_test(test_seek_by_resume_points),
        cmocka_unit_test(test_seek_after_trim),
        cmocka_unit_test(test_seek_after_trim_inside_a_list),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
