/* tests/unit/informer/test_ledger.c — the ledger on its own: the per-key gate
 * across uids (a re-created name), graves and their undo, the watermark and
 * the resume points that go with it, the exactly-once cut made and read back,
 * and the journal tail after a restart (marked as redeliveries). */
#include "common/event.h"
#include "common/hash.h"
#include "informer/ledger.h"
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

static kb_event_t *mk(kb_event_type_t type, const char *name, const char *uid, unsigned rv) {
    char rvs[16];
    snprintf(rvs, sizeof(rvs), "%u", rv);
    kb_event_init_t in = {.type = type, .res = res, .ns = "ns", .ns_len = 2, .name = name, .name_len = strlen(name),
                          .uid = uid, .uid_len = strlen(uid), .rv = rvs, .rv_len = strlen(rvs), .obj = "{}",
                          .obj_len = 2};
    return kb_event_new(&in);
}

static bool stale(kb_ledger_t *l, const kb_event_t *cached, const char *key, const char *rv) {
    return kb_ledger_stale(l, cached, key, strlen(key), kb_fnv1a64(key, strlen(key)), rv, strlen(rv));
}

/* Issue: pod x (uid A) updated, deleted and created again (uid B); a resumed
 * watch replays A's changes. None of them may pass once B@107 is cached. */
static void test_gate_is_by_rv_across_uids(void **state) {
    (void)state;
    kb_ledger_t *l = kb_ledger_new(NULL, 1, NULL);
    kb_event_t *b = mk(KB_EV_ADDED, "x", "B", 107);
    assert_true(stale(l, b, "ns/x", "103"));  /* MODIFIED x@103 uid A */
    assert_true(stale(l, b, "ns/x", "105"));  /* DELETED x@105 uid A */
    assert_true(stale(l, b, "ns/x", "107"));  /* ADDED x@107 uid B, again */
    assert_false(stale(l, b, "ns/x", "108"));
    assert_false(stale(l, NULL, "ns/x", "1")); /* nothing known about the key */
    /* Opaque RVs: only an exact repeat of the cached one is known. */
    kb_event_t *o = mk(KB_EV_ADDED, "y", "C", 0);
    assert_false(stale(l, NULL, "ns/y", "abc"));
    kb_event_unref(b);
    kb_event_unref(o);
    kb_ledger_destroy(l);
}

static void test_graves_gate_and_undo(void **state) {
    (void)state;
    kb_ledger_t *l = kb_ledger_new(NULL, 1, NULL);
    kb_event_t *d = mk(KB_EV_DELETED, "x", "A", 105);
    uint64_t before = kb_ledger_accept(l, d, 0);
    assert_int_equal(before, 0);
    assert_true(stale(l, NULL, "ns/x", "104"));
    assert_true(stale(l, NULL, "ns/x", "105"));
    assert_false(stale(l, NULL, "ns/x", "106"));
    /* A batch that could not commit takes its grave back with it. */
    kb_ledger_unaccept(l, d->key, d->key_len, d->key_hash, before);
    assert_false(stale(l, NULL, "ns/x", "105"));
    kb_ledger_accept(l, d, 0);
    kb_event_t *a = mk(KB_EV_ADDED, "x", "B", 107);
    kb_ledger_accept(l, a, 0); /* re-created: the cache holds 107 from now on */
    assert_int_equal(kb_ledger_graves(l), 0);
    kb_ledger_accept(l, d, 0);
    kb_ledger_forget_graves(l); /* RV regression */
    assert_false(stale(l, NULL, "ns/x", "1"));
    kb_event_unref(d);
    kb_event_unref(a);
    kb_ledger_destroy(l);
}

/* A restore: the relist at rv 50 (below the old history's 105) infers the
 * delete of x, whose last RV 105 is the old history's. Its grave stands at
 * the list's RV, so x created again at 51 in the new history is not refused. */
static void test_inferred_grave_at_most_the_list_rv(void **state) {
    (void)state;
    kb_ledger_t *l = kb_ledger_new(NULL, 1, NULL);
    kb_event_t *d = mk(KB_EV_DELETED, "x", "A", 105);
    kb_ledger_forget_graves(l);
    kb_ledger_accept(l, d, 50);
    assert_int_equal(kb_ledger_grave(l, d->key, d->key_len, d->key_hash), 50);
    assert_true(stale(l, NULL, "ns/x", "50"));
    assert_false(stale(l, NULL, "ns/x", "51"));
    /* A ceiling above the RV changes nothing. */
    kb_ledger_accept(l, d, 200);
    assert_int_equal(kb_ledger_grave(l, d->key, d->key_len, d->key_hash), 105);
    /* The audit drops a grave only if it is still the one it judged. */
    kb_ledger_drop_grave(l, d->key, d->key_len, d->key_hash, 104);
    assert_int_equal(kb_ledger_graves(l), 1);
    kb_ledger_drop_grave(l, d->key, d->key_len, d->key_hash, 105);
    assert_int_equal(kb_ledger_graves(l), 0);
    kb_event_unref(d);
    kb_ledger_destroy(l);
}

static void test_watermark_and_resume_points(void **state) {
    (void)state;
    const char *ns[] = {"a", "b"};
    kb_ledger_t *l = kb_ledger_new(ns, 2, NULL);
    for (int i = 1; i <= 4; i++)
        assert_int_equal(kb_ledger_next_seq(l), (uint64_t)i);
    kb_ledger_track(l, 1, 0, "10", false);
    kb_ledger_track(l, 2, 1, "11", false);
    kb_ledger_track(l, 3, 0, "12", true); /* a marker: nothing acknowledges it */
    kb_ledger_track(l, 4, 1, "13", false);
    kb_ledger_stats_t st;
    kb_ledger_done(l, 2);
    kb_ledger_done(l, 4);
    kb_ledger_stats(l, &st);
    assert_int_equal(st.acked, 0); /* seq 1 holds the watermark */
    kb_buf_t cut = KB_BUF_INIT;
    kb_ledger_txn_cut(l, &cut);
    assert_string_equal(cut.data, "{\"seq\":0,\"rv\":\"\",\"also\":\"2-4\"}");
    kb_ledger_done(l, 1);
    kb_ledger_stats(l, &st);
    assert_int_equal(st.acked, 4);
    assert_string_equal(st.resume_rv, "12");
    kb_buf_reset(&cut);
    kb_ledger_txn_cut(l, &cut);
    assert_string_equal(cut.data, "{\"seq\":4,\"rv\":\"a/12,b/13\",\"also\":\"\"}");
    /* Acks for seqs already past the watermark or never tracked change nothing. */
    kb_ledger_done(l, 2);
    kb_ledger_done(l, 99);
    kb_ledger_stats(l, &st);
    assert_int_equal(st.acked, 4);
    kb_buf_fini(&cut);
    kb_ledger_destroy(l);
}

static void test_produced_counts_for_the_cut(void **state) {
    (void)state;
    kb_ledger_t *l = kb_ledger_new(NULL, 1, NULL);
    for (uint64_t s = 1; s <= 3; s++) {
        kb_ledger_next_seq(l);
        char rv[8];
        snprintf(rv, sizeof(rv), "%llu", (unsigned long long)(100 + s));
        kb_ledger_track(l, s, 0, rv, false);
    }
    kb_ledger_produced(l, 1);
    kb_ledger_produced(l, 3);
    kb_buf_t cut = KB_BUF_INIT;
    kb_ledger_txn_cut(l, &cut);
    assert_string_equal(cut.data, "{\"seq\":1,\"rv\":\"101\",\"also\":\"3-3\"}");
    kb_buf_fini(&cut);
    kb_ledger_destroy(l);
}

/* A state_dir in a new directory under /tmp (dir: a mkdtemp template). */
static kb_state_t *tmp_state(char *dir) {
    assert_non_null(mkdtemp(dir));
    char why[256];
    kb_state_opts_t so = {.dir = dir, .map_bytes = 64u << 20, .journal_max_bytes = 1u << 20,
                          .journal_max_age_s = 3600};
    kb_state_t *st = kb_state_open(&so, why, sizeof(why));
    assert_non_null(st);
    return st;
}

static void rm_dir(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A restart: the tail after the checkpoint comes back marked, its deletes gate
 * replays, and a cut read back from a transactional sink drops what it covers. */
static int n_queued;
static kb_event_t *queued[8];
static void queue(void *opaque, kb_event_t *ev) {
    (void)opaque;
    queued[n_queued++] = ev;
}

static void test_restart_tail_and_cut(void **state) {
    (void)state;
    char dir[] = "/tmp/kbtest-ledger-XXXXXX", why[256];
    kb_state_t *st = tmp_state(dir);
    kb_event_t *evs[] = {mk(KB_EV_ADDED, "x", "A", 101), mk(KB_EV_MODIFIED, "x", "A", 102),
                         mk(KB_EV_DELETED, "x", "A", 103), mk(KB_EV_ADDED, "y", "B", 104)};
    assert_int_equal(kb_state_begin(st), KB_OK);
    for (size_t i = 0; i < 4; i++) {
        evs[i]->seq = i + 1;
        char rv[8];
        snprintf(rv, sizeof(rv), "%u", 101 + (unsigned)i);
        assert_int_equal(kb_state_put_event(st, evs[i], rv), KB_OK);
    }
    assert_int_equal(kb_state_commit(st), KB_OK);
    assert_int_equal(kb_state_set_checkpoint(st, 1, "101", NULL, 0), KB_OK);

    kb_ledger_t *l = kb_ledger_new(NULL, 1, st);
    assert_int_equal(kb_ledger_load(l, res, why, sizeof(why)), KB_OK);
    assert_string_equal(kb_ledger_resume_rv(l, 0), "104"); /* where the journal ends, not the checkpoint */
    assert_int_equal(kb_ledger_tail_len(l), 3);
    assert_int_equal(kb_ledger_seq(l), 4);
    assert_true(stale(l, NULL, "ns/x", "103")); /* the tail's delete gates the watch's replay */
    /* A cut that committed seq 2 and seq 4 elsewhere: only seq 3 is left. */
    const char *cut = "{\"seq\":2,\"rv\":\"102\",\"also\":\"4-4\"}";
    assert_int_equal(kb_ledger_apply_cut(l, cut, strlen(cut), why, sizeof(why)), KB_OK);
    assert_string_equal(kb_ledger_resume_rv(l, 0), "104");
    assert_int_equal(kb_ledger_tail_len(l), 1);
    assert_int_not_equal(kb_ledger_apply_cut(l, "{\"seq\":\"x\"}", 11, why, sizeof(why)), KB_OK);
    assert_int_not_equal(kb_ledger_apply_cut(l, "{\"seq\":9,\"rv\":\"\"}", 17, why, sizeof(why)), KB_OK);
    assert_non_null(strstr(why, "ahead"));
    n_queued = 0;
    kb_ledger_requeue_tail(l, queue, NULL);
    assert_int_equal(n_queued, 1);
    assert_int_equal(queued[0]->type, KB_EV_DELETED);
    assert_true(queued[0]->redelivery);
    kb_ledger_done(l, 3);
    kb_ledger_checkpoint(l);
    kb_ledger_stats_t ls;
    kb_ledger_stats(l, &ls);
    assert_int_equal(ls.acked, 3);
    assert_int_equal(ls.saved, 3);
    kb_event_unref(queued[0]);
    kb_ledger_destroy(l);
    kb_state_checkpoint_t cp;
    assert_int_equal(kb_state_read_checkpoint(st, &cp), KB_OK);
    assert_int_equal(cp.seq, 3);
    assert_string_equal(cp.rv, "103");
    kb_state_checkpoint_fini(&cp);
    kb_state_close(st);
    for (size_t i = 0; i < 4; i++)
        kb_event_unref(evs[i]);
    rm_dir(dir);
}

/* Per-sink progress: each sink's own watermark is kept in state_dir, and a
 * restart delivers the tail again only to the sinks that had not acknowledged
 * it (issue: a clean restart re-sent 1,001 changes to a file sink that had
 * acknowledged all of them, because another sink held the checkpoint). */
static void test_per_sink_watermarks_across_restart(void **state) {
    (void)state;
    char dir[] = "/tmp/kbtest-ledger-XXXXXX", why[256];
    kb_state_t *st = tmp_state(dir);
    assert_int_equal(kb_state_begin(st), KB_OK);
    kb_event_t *evs[3];
    for (int i = 0; i < 3; i++) {
        evs[i] = mk(KB_EV_ADDED, i == 0 ? "a" : i == 1 ? "b" : "c", "U", 11 + (unsigned)i);
        evs[i]->seq = (uint64_t)i + 1;
        char rv[8];
        snprintf(rv, sizeof(rv), "%d", 11 + i);
        assert_int_equal(kb_state_put_event(st, evs[i], rv), KB_OK);
    }
    assert_int_equal(kb_state_commit(st), KB_OK);

    kb_ledger_t *l = kb_ledger_new(NULL, 1, st);
    assert_int_equal(kb_ledger_load(l, res, why, sizeof(why)), KB_OK);
    int file = kb_ledger_add_sink(l, "file"), mqtt = kb_ledger_add_sink(l, "mqtt");
    assert_int_equal(kb_ledger_add_sink(l, "file"), file);
    n_queued = 0;
    kb_ledger_requeue_tail(l, queue, NULL);
    assert_int_equal(n_queued, 3);
    for (uint64_t s = 1; s <= 3; s++) {
        kb_ledger_routed(l, s, (int[]){file, mqtt}, 2);
        kb_ledger_sink_done(l, s, file);
    }
    kb_ledger_sink_done(l, 1, mqtt); /* mqtt refused seq 2 and stopped */
    size_t n_sk;
    kb_ledger_sink_t *sk = kb_ledger_sinks(l, &n_sk);
    assert_int_equal(n_sk, 2);
    assert_string_equal(sk[0].name, "file");
    assert_int_equal(sk[0].watermark, 3);
    assert_int_equal(sk[1].watermark, 1);
    free(sk);
    kb_ledger_stats_t ls;
    kb_ledger_stats(l, &ls);
    assert_int_equal(ls.acked, 1); /* the checkpoint: the lowest */
    kb_ledger_checkpoint(l);
    kb_ledger_destroy(l);
    for (int i = 0; i < 3; i++)
        kb_event_unref(queued[i]);

    l = kb_ledger_new(NULL, 1, st);
    assert_int_equal(kb_ledger_load(l, res, why, sizeof(why)), KB_OK);
    assert_int_equal(kb_ledger_tail_len(l), 2);
    file = kb_ledger_add_sink(l, "file");
    mqtt = kb_ledger_add_sink(l, "mqtt");
    int fresh = kb_ledger_add_sink(l, "new");
    assert_false(kb_ledger_wants(l, 2, file));
    assert_false(kb_ledger_wants(l, 3, file));
    assert_true(kb_ledger_wants(l, 2, mqtt));
    assert_true(kb_ledger_wants(l, 2, fresh)); /* no watermark of its own: from the checkpoint */
    assert_true(kb_ledger_wants(l, 4, file));
    /* A removed sink holds nothing back. */
    n_queued = 0;
    kb_ledger_requeue_tail(l, queue, NULL);
    kb_ledger_routed(l, 2, &mqtt, 1);
    kb_ledger_routed(l, 3, &mqtt, 1);
    kb_ledger_remove_sink(l, mqtt);
    kb_ledger_stats(l, &ls);
    assert_int_equal(ls.acked, 3);
    for (int i = 0; i < n_queued; i++)
        kb_event_unref(queued[i]);
    kb_ledger_destroy(l);
    kb_state_close(st);
    for (int i = 0; i < 3; i++)
        kb_event_unref(evs[i]);
    rm_dir(dir);
}

/* The window is bounded: a sink that stopped holds the watermark, and reading
 * must wait rather than the window (and the journal) grow without end. */
/* Issue: the sink table held 64 sinks; a 65th got no watermark, and the
 * checkpoint passed changes it had not acknowledged. Any number of sinks, the
 * table growing while changes are in flight. */
static void test_more_than_64_sinks(void **state) {
    (void)state;
    enum { N = 150 };
    kb_ledger_t *l = kb_ledger_new(NULL, 1, NULL);
    int idx[N];
    for (uint64_t s = 1; s <= 3; s++)
        kb_ledger_track(l, s, 0, s == 1 ? "11" : s == 2 ? "12" : "13", false);
    for (int i = 0; i < 70; i++) {
        char name[16];
        snprintf(name, sizeof(name), "s%d", i);
        idx[i] = kb_ledger_add_sink(l, name);
        assert_int_equal(idx[i], i);
    }
    kb_ledger_routed(l, 1, idx, 70);
    for (int i = 70; i < N; i++) { /* wider than the bits seq 1 was routed with */
        char name[16];
        snprintf(name, sizeof(name), "s%d", i);
        idx[i] = kb_ledger_add_sink(l, name);
        assert_int_equal(idx[i], i);
    }
    kb_ledger_routed(l, 2, idx, N);
    kb_ledger_routed(l, 3, &idx[N - 1], 1);
    kb_ledger_stats_t ls;
    for (int i = 0; i < 69; i++)
        kb_ledger_sink_done(l, 1, idx[i]);
    kb_ledger_stats(l, &ls);
    assert_int_equal(ls.acked, 0); /* sink 69 still owes seq 1 */
    kb_ledger_sink_done(l, 1, idx[69]);
    for (int i = 0; i < N - 1; i++)
        kb_ledger_sink_done(l, 2, idx[i]);
    kb_ledger_stats(l, &ls);
    assert_int_equal(ls.acked, 1); /* the last sink owes seq 2 */
    size_t n;
    kb_ledger_sink_t *sk = kb_ledger_sinks(l, &n);
    assert_int_equal(n, N);
    assert_int_equal(sk[0].watermark, 3);      /* owes nothing: seq 3 was not its */
    assert_int_equal(sk[N - 1].watermark, 1);
    assert_string_equal(sk[N - 1].name, "s149");
    free(sk);
    kb_ledger_sink_done(l, 2, idx[N - 1]);
    kb_ledger_sink_done(l, 3, idx[N - 1]);
    kb_ledger_stats(l, &ls);
    assert_int_equal(ls.acked, 3);
    kb_ledger_destroy(l);
}

static void test_window_bound(void **state) {
    (void)state;
    kb_ledger_t *l = kb_ledger_new(NULL, 1, NULL);
    kb_ledger_set_bounds(l, 2, 100);
    kb_ledger_window_t w;
    kb_ledger_track_sized(l, kb_ledger_next_seq(l), 0, "1", false, 10);
    assert_true(kb_ledger_wait_room(l, 0, &w));
    kb_ledger_track_sized(l, kb_ledger_next_seq(l), 0, "2", false, 10);
    assert_false(kb_ledger_wait_room(l, 10, &w)); /* two slots: full */
    assert_int_equal(w.slots, 2);
    assert_int_equal(w.bytes, 20);
    assert_int_equal(w.oldest, 1);
    kb_ledger_done(l, 1);
    assert_true(kb_ledger_wait_room(l, 0, &w));
    kb_ledger_track_sized(l, kb_ledger_next_seq(l), 0, "3", false, 95); /* bytes: 10 + 95 */
    assert_false(kb_ledger_wait_room(l, 0, &w));
    kb_ledger_done(l, 2);
    kb_ledger_done(l, 3);
    assert_true(kb_ledger_wait_room(l, 0, &w));
    assert_int_equal(w.bytes, 0);
    kb_ledger_destroy(l);
}

static int setup(void **state) {
    (void)state;
    res = kb_resource_new("c", "pods", "", "v1", "pods");
    return 0;
}

/* ha: what a leader publishes is the lowest scope's resume point at the
 * watermark; what a standby compares a relist's DELETED with is the newest tracked. */
static void test_acked_and_tracked_rv(void **state) {
    (void)state;
    const char *ns[] = {"a", "b"};
    kb_ledger_t *l = kb_ledger_new(ns, 2, NULL);
    for (int i = 1; i <= 3; i++)
        kb_ledger_next_seq(l);
    assert_int_equal(kb_ledger_acked_rv(l), 0);
    kb_ledger_track(l, 1, 0, "20", false);
    kb_ledger_track(l, 2, 1, "15", false);
    kb_ledger_track(l, 3, -1, NULL, false); /* a list item: no resume point */
    assert_int_equal(kb_ledger_tracked_rv(l), 20);
    kb_ledger_done(l, 1);
    assert_int_equal(kb_ledger_acked_rv(l), 0); /* scope b has none at the watermark yet */
    kb_ledger_done(l, 2);
    assert_int_equal(kb_ledger_acked_rv(l), 15);
    kb_ledger_done(l, 3);
    assert_int_equal(kb_ledger_acked_rv(l), 15);
    kb_ledger_destroy(l);
}

static int teardown(void **state) {
    (void)state;
    kb_resource_unref(res);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gate_is_by_rv_across_uids),
        cmocka_unit_test(test_graves_gate_and_undo),
        cmocka_unit_test(test_inferred_grave_at_most_the_list_rv),
        cmocka_unit_test(test_watermark_and_resume_points),
        cmocka_unit_test(test_produced_counts_for_the_cut),
        cmocka_unit_test(test_restart_tail_and_cut),
        cmocka_unit_test(test_per_sink_watermarks_across_restart),
        cmocka_unit_test(test_more_than_64_sinks),
        cmocka_unit_test(test_window_bound),
        cmocka_unit_test(test_acked_and_tracked_rv),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
