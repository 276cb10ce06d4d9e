/* tests/unit/kubesim/test_select.c — the simulator's label, field and shard selectors. */
#include "tests/kubesim/kubesim_int.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

static kb_sim_label_t web[] = {{"app", "web"}, {"tier", "frontend"}};

/* Parse sel, match it against web's labels. */
static bool lmatch(const char *sel_text) {
    kb_sel_t sel;
    char err[128];
    assert_int_equal(kb_sim__labelsel_parse(sel_text, &sel, err, sizeof(err)), 0);
    bool m = kb_sim__labelsel_match(&sel, web, 2);
    kb_sim__sel_fini(&sel);
    return m;
}

static void test_equality(void **state) {
    (void)state;
    assert_true(lmatch(""));
    assert_true(lmatch(NULL));
    assert_true(lmatch("app=web"));
    assert_true(lmatch("app==web"));
    assert_true(lmatch(" app = web , tier=frontend "));
    assert_false(lmatch("app=api"));
    assert_false(lmatch("app=web,tier=backend"));
    assert_true(lmatch("app!=api"));
    assert_false(lmatch("app!=web"));
    assert_true(lmatch("missing!=x")); /* != also matches objects without the key */
}

static void test_sets_and_existence(void **state) {
    (void)state;
    assert_true(lmatch("app in (api, web)"));
    assert_false(lmatch("app in (api,worker)"));
    assert_true(lmatch("app notin (api,worker)"));
    assert_false(lmatch("app notin (web)"));
    assert_true(lmatch("missing notin (web)"));
    assert_false(lmatch("missing in (web)"));
    assert_true(lmatch("app"));
    assert_false(lmatch("missing"));
    assert_true(lmatch("!missing"));
    assert_false(lmatch("!app"));
    assert_true(lmatch("app in (web),!missing,tier"));
}

static void test_label_errors(void **state) {
    (void)state;
    const char *bad[] = {"app in web", "app in (web", "=web", "app=web,", "app>3", "!"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        kb_sel_t sel;
        char err[128] = "";
        assert_int_equal(kb_sim__labelsel_parse(bad[i], &sel, err, sizeof(err)), -1);
        assert_true(err[0] != '\0');
        assert_int_equal(sel.nreqs, 0);
    }
}

static void test_fields(void **state) {
    (void)state;
    kb_sel_t sel;
    char err[128];
    assert_int_equal(kb_sim__fieldsel_parse("metadata.name=a,metadata.namespace!=kube-system", &sel, err,
                                            sizeof(err)), 0);
    assert_true(kb_sim__fieldsel_match(&sel, "default", "a"));
    assert_false(kb_sim__fieldsel_match(&sel, "kube-system", "a"));
    assert_false(kb_sim__fieldsel_match(&sel, "default", "b"));
    kb_sim__sel_fini(&sel);
    assert_int_equal(kb_sim__fieldsel_parse("metadata.namespace==ns1", &sel, err, sizeof(err)), 0);
    assert_true(kb_sim__fieldsel_match(&sel, "ns1", "x"));
    kb_sim__sel_fini(&sel);
    assert_int_equal(kb_sim__fieldsel_parse("spec.nodeName=n1", &sel, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "spec.nodeName"));
    assert_int_equal(kb_sim__fieldsel_parse("metadata.name in (a)", &sel, err, sizeof(err)), -1);
}

/* Shard selectors as kube-apiserver 1.36 parses them; the uid's FNV-1a 64 is
 * 0x9a23d23ed58baf09 (Python and Go's hash/fnv). */
static void test_shard(void **state) {
    (void)state;
    const char *uid = "0b9c2a7e-5d41-4f6e-9a53-2c8f1e7d4b60";
    kb_shardsel_t s;
    char err[200];
    assert_int_equal(kb_sim__shardsel_parse(NULL, &s, err, sizeof(err)), 0);
    assert_true(kb_sim__shardsel_match(&s, "x", uid));
    assert_int_equal(kb_sim__shardsel_parse("shardRange(object.metadata.uid, '0x8000000000000000', "
                                            "'0x10000000000000000')", &s, err, sizeof(err)), 0);
    assert_true(kb_sim__shardsel_match(&s, "x", uid));
    assert_string_equal(s.text, "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')");
    assert_int_equal(kb_sim__shardsel_parse("shardRange(object.metadata.uid,'0x0000000000000000','0x9a23d23ed58baf09')"
                                            " || shardRange(object.metadata.uid, \"0x9a23d23ed58baf0a\", "
                                            "'0xffffffffffffffff')", &s, err, sizeof(err)), 0);
    assert_int_equal(s.n, 2);
    assert_false(kb_sim__shardsel_match(&s, "x", uid)); /* the end bound is exclusive, the gap is its hash */
    assert_int_equal(kb_sim__shardsel_parse("shardRange(object.metadata.namespace, '0x0000000000000000', "
                                            "'0x8000000000000000')", &s, err, sizeof(err)), 0);
    assert_false(kb_sim__shardsel_match(&s, "kube-system", uid)); /* 0xdf65c7bc1d82b35e */
    static const char *const bad[] = {
        "", "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
        "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
        "shardRange(object.metadata.uid, '0x8000000000000000', '0x0000000000000000')",
        "shardRange(object.metadata.uid, '0x00000000000000AA', '0x8000000000000000')",
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && true",
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || "
        "shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(kb_sim__shardsel_parse(bad[i], &s, err, sizeof(err)), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equality),
        cmocka_unit_test(test_sets_and_existence),
        cmocka_unit_test(test_label_errors),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_shard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
