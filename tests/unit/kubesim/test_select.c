/* tests/unit/kubesim/test_select.c — the simulator's label and field selectors. */
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equality),
        cmocka_unit_test(test_sets_and_existence),
        cmocka_unit_test(test_label_errors),
        cmocka_unit_test(test_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
