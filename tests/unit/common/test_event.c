/* tests/unit/common/test_event.c — change events and resources: layout,
 * keys, retype, reference counts, resourceVersion parsing, size accounting. */
#include "common/event.h"
#include "common/hash.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static kb_event_t *mk(kb_resource_t *res, const char *ns, const char *name, const char *rv, const char *obj) {
    kb_event_init_t in = {
        .type = KB_EV_ADDED,
        .res = res,
        .ns = ns, .ns_len = strlen(ns),
        .name = name, .name_len = strlen(name),
        .uid = "0b3c-uid", .uid_len = 8,
        .rv = rv, .rv_len = strlen(rv),
        .obj = obj, .obj_len = strlen(obj),
        .labels_off = 2, .labels_len = 5,
        .observed_ns = 1111,
        .read_mono_ns = 2222,
    };
    return kb_event_new(&in);
}

static void test_new_namespaced(void **state) {
    (void)state;
    kb_resource_t *res = kb_resource_new("c1", "pods", "", "v1", "pods");
    kb_event_t *ev = mk(res, "ns1", "p1", "42", "{\"a\":1}");
    assert_int_equal(atomic_load(&ev->refcnt), 1);
    assert_int_equal(atomic_load(&res->refcnt), 2); /* the event holds the resource */
    assert_ptr_equal(ev->res, res);
    assert_int_equal(ev->type, KB_EV_ADDED);
    assert_false(ev->final_state_unknown);
    assert_string_equal(ev->key, "ns1/p1");
    assert_int_equal(ev->key_len, 6);
    assert_string_equal(ev->ns, "ns1");
    assert_int_equal(ev->ns_len, 3);
    assert_string_equal(ev->name, "p1");
    assert_string_equal(ev->uid, "0b3c-uid");
    assert_string_equal(ev->rv, "42");
    assert_int_equal(ev->rv_num, 42);
    assert_string_equal(ev->obj, "{\"a\":1}");
    assert_int_equal(ev->obj_len, 7);
    assert_int_equal(ev->labels_off, 2);
    assert_int_equal(ev->labels_len, 5);
    assert_int_equal(ev->observed_ns, 1111);
    assert_int_equal(ev->read_mono_ns, 2222);
    assert_int_equal(ev->seq, 0);
    assert_true(ev->key_hash == kb_fnv1a64("ns1/p1", 6));
    kb_event_unref(ev);
    assert_int_equal(atomic_load(&res->refcnt), 1);
    kb_resource_unref(res);
}

/* Cluster-scoped: the key is the bare name (client-go MetaNamespaceKeyFunc). */
static void test_new_cluster_scoped(void **state) {
    (void)state;
    kb_resource_t *res = kb_resource_new("c1", "nodes", "", "v1", "nodes");
    kb_event_t *ev = mk(res, "", "node1", "abc", "");
    assert_string_equal(ev->key, "node1");
    assert_int_equal(ev->key_len, 5);
    assert_string_equal(ev->ns, "");
    assert_int_equal(ev->ns_len, 0);
    assert_true(ev->key_hash == kb_fnv1a64("node1", 5));
    assert_int_equal(ev->rv_num, 0); /* opaque rv: kept as text, no number */
    assert_string_equal(ev->rv, "abc");
    assert_string_equal(ev->obj, "");
    kb_event_unref(ev);
    kb_resource_unref(res);
}

static void test_retype_and_refs(void **state) {
    (void)state;
    kb_resource_t *res = kb_resource_new("c1", "pods", "", "v1", "pods");
    kb_event_t *ev = mk(res, "ns1", "p1", "42", "{\"a\":1}");
    ev->seq = 99;
    kb_event_t *del = kb_event_retype(ev, KB_EV_DELETED, true);
    assert_ptr_not_equal(del, ev);
    assert_int_equal(atomic_load(&del->refcnt), 1);
    assert_int_equal(atomic_load(&res->refcnt), 3);
    /* The copy has the new type and flag and everything else of the original. */
    assert_int_equal(del->type, KB_EV_DELETED);
    assert_true(del->final_state_unknown);
    assert_int_equal(del->seq, 99);
    assert_string_equal(del->key, "ns1/p1");
    assert_string_equal(del->uid, ev->uid);
    assert_string_equal(del->rv, "42");
    assert_int_equal(del->rv_num, 42);
    assert_string_equal(del->obj, ev->obj);
    assert_int_equal(del->labels_off, ev->labels_off);
    assert_int_equal(del->labels_len, ev->labels_len);
    assert_int_equal(del->observed_ns, ev->observed_ns);
    assert_true(del->key_hash == ev->key_hash);
    assert_int_equal(kb_event_size(del), kb_event_size(ev));
    /* The original is untouched. */
    assert_int_equal(ev->type, KB_EV_ADDED);
    assert_false(ev->final_state_unknown);

    assert_ptr_equal(kb_event_ref(ev), ev);
    assert_int_equal(atomic_load(&ev->refcnt), 2);
    kb_event_unref(ev);
    assert_int_equal(atomic_load(&ev->refcnt), 1);
    kb_event_unref(ev);
    kb_event_unref(del);
    kb_event_unref(NULL);
    assert_int_equal(atomic_load(&res->refcnt), 1);
    kb_resource_unref(res);
    kb_resource_unref(NULL);
}

static void test_rv_parse(void **state) {
    (void)state;
    assert_true(kb_rv_parse("0", 1) == 0);
    assert_true(kb_rv_parse("123", 3) == 123);
    assert_true(kb_rv_parse("1234", 2) == 12); /* only len bytes are read */
    assert_true(kb_rv_parse("007", 3) == 7);
    assert_true(kb_rv_parse("", 0) == 0);
    assert_true(kb_rv_parse("12a", 3) == 0);
    assert_true(kb_rv_parse("-1", 2) == 0);
    assert_true(kb_rv_parse("+1", 2) == 0);
    assert_true(kb_rv_parse(" 1", 2) == 0);
    assert_true(kb_rv_parse("1.5", 3) == 0);
    assert_true(kb_rv_parse("9999999999999999999", 19) == UINT64_C(9999999999999999999));
    /* The largest 64-bit value still fits; one more does not. */
    assert_true(kb_rv_parse("18446744073709551615", 20) == UINT64_MAX);
    assert_true(kb_rv_parse("18446744073709551616", 20) == 0);
    assert_true(kb_rv_parse("99999999999999999999", 20) == 0);
    assert_true(kb_rv_parse("123456789012345678901", 21) == 0);
    /* The checked form tells "0" apart from a number it refused. */
    uint64_t v = 7;
    assert_true(kb_decimal_u64("0", 1, &v) && v == 0);
    assert_true(kb_decimal_u64("18446744073709551615", 20, &v) && v == UINT64_MAX);
    assert_false(kb_decimal_u64("18446744073709551616", 20, &v));
    assert_false(kb_decimal_u64("", 0, &v));
    assert_false(kb_decimal_u64("+5", 2, &v));
    assert_false(kb_decimal_u64("5 ", 2, &v));
}

static void test_size(void **state) {
    (void)state;
    kb_resource_t *res = kb_resource_new("c1", "pods", "", "v1", "pods");
    kb_event_t *small = mk(res, "ns1", "p1", "42", "{}");
    kb_event_t *big = mk(res, "ns1", "p1", "42", "{\"spec\":{\"containers\":[]}}");
    /* The struct and every string with its terminator, in one block. */
    size_t strings = small->key_len + 1 + small->ns_len + 1 + small->name_len + 1 + small->uid_len + 1 +
                     small->rv_len + 1 + small->obj_len + 1;
    assert_int_equal(kb_event_size(small), sizeof(kb_event_t) + strings);
    assert_int_equal(kb_event_size(big) - kb_event_size(small), big->obj_len - small->obj_len);
    kb_event_unref(small);
    kb_event_unref(big);
    kb_resource_unref(res);
}

/* A dictionary stand-in that owns its packed events' memory: drop is told
 * the size the maker allocated (kb_event_size == kb_event_pack_bytes) and
 * frees the block. */
typedef struct test_zdict {
    kb_event_zdict_t base;
    size_t allocated, dropped, drops;
} test_zdict_t;

static void test_zdict_drop(kb_event_zdict_t *zd, kb_event_t *ev) {
    test_zdict_t *d = (test_zdict_t *)zd;
    d->dropped += kb_event_size(ev);
    d->drops++;
    free(ev);
}

static void test_pack_memory(void **state) {
    (void)state;
    kb_resource_t *res = kb_resource_new("c1", "pods", "", "v1", "pods");
    kb_event_t *ev = mk(res, "ns1", "p1", "42", "{\"spec\":{\"containers\":[]}}");
    test_zdict_t d = {.base.drop = test_zdict_drop};
    const char frame[] = "\x28\xb5\x2f\xfd-frame";
    d.allocated = kb_event_pack_bytes(ev, sizeof(frame));
    kb_event_t *p = kb_event_pack(malloc(d.allocated), ev, &d.base, frame, sizeof(frame));
    assert_int_equal(kb_event_size(p), d.allocated);
    assert_string_equal(p->key, "ns1/p1");
    assert_int_equal(p->obj_len, 0);
    assert_memory_equal(kb_event_frame(p), frame, sizeof(frame));
    assert_int_equal(atomic_load(&res->refcnt), 3); /* the resource, ev, p */
    kb_event_unref(p);
    assert_int_equal(d.drops, 1);
    assert_int_equal(d.dropped, d.allocated);
    assert_int_equal(atomic_load(&res->refcnt), 2); /* released before the block went */
    kb_event_unref(ev);
    assert_int_equal(d.drops, 1); /* not packed: freed by the event itself */
    kb_resource_unref(res);
}

static void test_types(void **state) {
    (void)state;
    static const char *const names[] = {"ADDED", "MODIFIED", "DELETED", "SYNC", "SNAPSHOT"};
    static const char *const lower[] = {"added", "modified", "deleted", "sync", "snapshot"};
    for (int i = 0; i < KB_EV_TYPE_COUNT; i++) {
        assert_string_equal(kb_event_type_name((kb_event_type_t)i), names[i]);
        assert_string_equal(kb_event_type_lower((kb_event_type_t)i), lower[i]);
        assert_int_equal(kb_event_type_parse(names[i], strlen(names[i])), i);
    }
    assert_int_equal(kb_event_type_parse("added", 5), -1);
    assert_int_equal(kb_event_type_parse("ADDEDX", 6), -1);
    assert_int_equal(kb_event_type_parse("ADDED", 4), -1);
    assert_int_equal(kb_event_type_parse("BOOKMARK", 8), -1);
    assert_string_equal(kb_event_type_name((kb_event_type_t)7), "UNKNOWN");
}

static void test_resource(void **state) {
    (void)state;
    kb_resource_t *core = kb_resource_new("c1", "pods", "", "v1", "pods");
    assert_string_equal(core->api_version, "v1");
    assert_string_equal(core->group, "");
    assert_string_equal(kb_resource_kind(core), ""); /* unknown until the first list */
    kb_resource_set_kind(core, "PodXYZ", 3);
    assert_string_equal(kb_resource_kind(core), "Pod");
    kb_resource_set_kind(core, "Other", 5); /* set once */
    assert_string_equal(kb_resource_kind(core), "Pod");
    kb_resource_unref(core);

    kb_resource_t *apps = kb_resource_new("c1", "deploys", "apps", "v1", "deployments");
    assert_string_equal(apps->api_version, "apps/v1");
    assert_string_equal(apps->informer, "deploys");
    assert_ptr_equal(kb_resource_ref(apps), apps);
    kb_resource_unref(apps);
    kb_resource_unref(apps);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_namespaced),
        cmocka_unit_test(test_new_cluster_scoped),
        cmocka_unit_test(test_retype_and_refs),
        cmocka_unit_test(test_rv_parse),
        cmocka_unit_test(test_size),
        cmocka_unit_test(test_pack_memory),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_resource),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
