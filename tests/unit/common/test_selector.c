/* Unit tests for common/selector: the Kubernetes label selector grammar. */
#include "common/selector.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

static bool match(const char *sel_text, const char *labels) {
    char err[256];
    kb_selector_t *sel = kb_selector_parse(sel_text, err, sizeof(err));
    assert_non_null(sel);
    bool ok = kb_selector_match_json(sel, labels, labels ? strlen(labels) : 0);
    kb_selector_free(sel);
    return ok;
}

static void test_equality(void **state) {
    (void)state;
    const char *l = "{\"app\":\"web\",\"tier\":\"frontend\"}";
    assert_true(match("app=web", l));
    assert_true(match("app==web", l));
    assert_true(match("app = web , tier=frontend", l));
    assert_false(match("app=db", l));
    assert_true(match("app!=db", l));
    assert_false(match("app!=web", l));
    assert_true(match("missing!=x", l)); /* != matches objects without the key */
}

static void test_sets_and_existence(void **state) {
    (void)state;
    const char *l = "{ \"app\" : \"web\", \"example.com/team\": \"a\" }";
    assert_true(match("app in (web, api)", l));
    assert_false(match("app in (db)", l));
    assert_true(match("app notin (db,cache)", l));
    assert_false(match("app notin (web)", l));
    assert_true(match("example.com/team", l));
    assert_true(match("!missing", l));
    assert_false(match("!app", l));
    assert_true(match("", l));
    assert_true(match("", NULL));
    assert_false(match("app", NULL));
    assert_true(match("x notin (a)", NULL));
}

static void test_empty_value(void **state) {
    (void)state;
    assert_true(match("app=", "{\"app\":\"\"}"));
    assert_false(match("app=", "{\"app\":\"x\"}"));
}

static void test_errors(void **state) {
    (void)state;
    const char *bad[] = {"=web", "app in web", "app in (a", "app ~ x", "app=web,", "app=web extra", "!"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[256] = "";
        kb_selector_t *sel = kb_selector_parse(bad[i], err, sizeof(err));
        assert_null(sel);
        assert_non_null(strstr(err, "label selector"));
    }
}

static void test_malformed_labels_count_as_none(void **state) {
    (void)state;
    assert_false(match("app=web", "{\"app\":"));
    assert_true(match("!app", "not json"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equality),
        cmocka_unit_test(test_sets_and_existence),
        cmocka_unit_test(test_empty_value),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_malformed_labels_count_as_none),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
