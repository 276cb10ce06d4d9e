/* tests/unit/informer/test_sinkslot.c — the fate of a sink's messages on its
 * own: only a destination's verdict is a refusal; a retiring instance parks
 * what it gives back and hands it over by owner, then seq, then the order it
 * came back; a drain abandons only past its deadline. */
#include "informer/sinkslot.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

static kb_fate_t fate(kb_err_t err, bool refusal, bool dead_letter, bool to_dl, bool collecting) {
    kb_verdict_t v = {err, refusal, dead_letter, to_dl, collecting, false};
    return kb_sinkslot_fate(&v);
}

/* Issue 24 finding 1: a stop at the deadline of a dead-letter sink was dead-lettered. */
static void test_a_stop_is_never_a_refusal(void **state) {
    (void)state;
    assert_int_equal(fate(KB_OK, false, false, true, false), KB_FATE_ACKED);
    assert_int_equal(fate(KB_ERR_STOPPED, false, false, true, false), KB_FATE_LEAVE);
    assert_int_equal(fate(KB_ERR_TIMEDOUT, false, false, true, false), KB_FATE_HOLD);
    assert_int_equal(fate(KB_ERR_INVAL, true, false, true, false), KB_FATE_DEAD_LETTER);
    assert_int_equal(fate(KB_ERR_INVAL, true, true, true, false), KB_FATE_REFUSED);
    assert_int_equal(fate(KB_ERR_INVAL, true, false, false, true), KB_FATE_REFUSED);
}

/* Issue 24 finding 2: a retired instance's unacknowledged messages go to its successor. */
static void test_a_retiring_instance_parks(void **state) {
    (void)state;
    assert_int_equal(fate(KB_ERR_STOPPED, false, false, false, true), KB_FATE_PARK);
    assert_int_equal(fate(KB_ERR_TIMEDOUT, false, false, false, true), KB_FATE_PARK);
    assert_int_equal(fate(KB_ERR_STOPPED, false, true, false, true), KB_FATE_LEAVE); /* a dead letter */
}

/* 0327: a Kafka message timeout reported after SIGHUP retried the sink, from
 * the pipeline that retry replaced, stopped the sink again. */
static void test_a_retired_sender_stops_nothing(void **state) {
    (void)state;
    kb_verdict_t v = {.err = KB_ERR_TIMEDOUT, .sender_retired = true};
    assert_int_equal(kb_sinkslot_fate(&v), KB_FATE_LEAVE);
    v.refusal = true; /* a destination's verdict stays one: the journal's copy would be refused too */
    assert_int_equal(kb_sinkslot_fate(&v), KB_FATE_REFUSED);
    kb_drain_t dr;
    kb_drain_init(&dr);
    assert_false(kb_drain_retired(&dr));
    kb_drain_retire(&dr);
    assert_true(kb_drain_retired(&dr));
    assert_false(kb_drain_abandoned(&dr));
}

static void test_hand_over_order(void **state) {
    (void)state;
    kb_handover_t h;
    kb_handover_init(&h);
    int m[5];
    int self, succ;
    assert_false(kb_handover_park(&h, &m[0], 1, 9)); /* not retiring: nothing parks */
    assert_ptr_equal(kb_handover_stops(&h, &self), &self);
    kb_handover_retire(&h, &succ);
    assert_ptr_equal(kb_handover_stops(&h, &self), &succ); /* a refusal during the hand-over stops the successor */
    assert_true(kb_handover_park(&h, &m[0], 2, 5));
    assert_true(kb_handover_park(&h, &m[1], 1, 9));
    assert_true(kb_handover_park(&h, &m[2], 1, 3));
    assert_true(kb_handover_park(&h, &m[3], 1, 9));
    size_t n;
    kb_parked_t *v = kb_handover_take(&h, &n);
    assert_int_equal(n, 4);
    assert_ptr_equal(v[0].msg, &m[2]);
    assert_ptr_equal(v[1].msg, &m[1]);
    assert_ptr_equal(v[2].msg, &m[3]);
    assert_ptr_equal(v[3].msg, &m[0]);
    free(v);
    assert_false(kb_handover_collecting(&h));
    assert_false(kb_handover_park(&h, &m[4], 1, 10)); /* too late: the caller settles it itself */
    kb_handover_fini(&h);
}

static void test_held_until_released(void **state) {
    (void)state;
    kb_handover_t h;
    kb_handover_init(&h);
    assert_false(kb_handover_held(&h));
    kb_handover_hold(&h);
    assert_true(kb_handover_held(&h));
    kb_handover_release(&h);
    assert_false(kb_handover_held(&h));
    kb_handover_fini(&h);
}

static void test_drain_abandons_only_past_its_deadline(void **state) {
    (void)state;
    kb_drain_t a, b;
    kb_drain_init(&a);
    kb_drain_init(&b);
    assert_int_equal(kb_drain_look(&a, true, 100, 50), KB_DRAIN_DONE);
    assert_int_equal(kb_drain_look(&a, false, 49, 50), KB_DRAIN_WAIT);
    assert_false(kb_drain_abandoned(&a));
    assert_int_equal(kb_drain_look(&a, false, 50, 50), KB_DRAIN_ABANDON);
    assert_true(kb_drain_abandoned(&a));
    assert_false(kb_drain_abandoned(&b)); /* issue 24 finding 4: one pipeline's deadline is not another's */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_stop_is_never_a_refusal),
        cmocka_unit_test(test_a_retiring_instance_parks),
        cmocka_unit_test(test_a_retired_sender_stops_nothing),
        cmocka_unit_test(test_hand_over_order),
        cmocka_unit_test(test_held_until_released),
        cmocka_unit_test(test_drain_abandons_only_past_its_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
