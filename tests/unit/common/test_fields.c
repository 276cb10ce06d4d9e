/* tests/unit/common/test_fields.c — members and field paths read from
 * object bytes (the JSON helpers templates and field records use). */
#include "common/buf.h"
#include "common/fields.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

static const char *POD =
    "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p1\",\"namespace\":\"ns1\",\"labels\":{\"a\":\"b\"}},"
    "\"spec\":{\"containers\":[{\"name\":\"c\",\"x\":{\"y\":[1,2,\"}\"]}}],\"nodeName\":\"n\\u00e9\",\"hostNetwork\":true},"
    "\"status\":{\"phase\":\"Running\",\"podIP\":null}}";

static void expect_field(const char *obj, const char *path, bool found, const char *want) {
    kb_buf_t out = KB_BUF_INIT;
    bool got = kb_fields_get(obj, strlen(obj), path, &out);
    if (got != found)
        fail_msg("%s: found %d, want %d", path, got, found);
    if (strlen(want) != out.len || memcmp(out.data ? out.data : "", want, out.len))
        fail_msg("%s: \"%.*s\", want \"%s\"", path, (int)out.len, out.data ? out.data : "", want);
    kb_buf_fini(&out);
}

static void test_get(void **state) {
    (void)state;
    expect_field(POD, "metadata.name", true, "p1");
    expect_field(POD, "status.phase", true, "Running");
    expect_field(POD, "spec.nodeName", true, "n\xc3\xa9"); /* \u escapes decoded to UTF-8 */
    expect_field(POD, "spec.hostNetwork", true, "true");
    expect_field(POD, "status.podIP", true, ""); /* null reads as "" */
    expect_field(POD, "status.hostIP", false, "");
    expect_field(POD, "metadata.name.x", false, "");
    expect_field(POD, "kind", true, "Pod");
    expect_field("not json", "kind", false, "");
    expect_field("{\"a\":", "a", false, "");
    expect_field("{ \"a\" : { \"b\" : \"c\\\"d\" } }", "a.b", true, "c\"d");
}

static void test_iter(void **state) {
    (void)state;
    const char *obj = " { \"a\" : 1 , \"b\":{\"c\":[\"]\"]},\"a\":\"x\" } ";
    kb_fields_iter_t it;
    const char *k, *v;
    size_t kl, vl;
    assert_true(kb_fields_iter_init(&it, obj, strlen(obj)));
    const char *want[][2] = {{"a", "1"}, {"b", "{\"c\":[\"]\"]}"}, {"a", "\"x\""}};
    for (size_t i = 0; i < 3; i++) {
        assert_true(kb_fields_iter_next(&it, &k, &kl, &v, &vl));
        assert_int_equal(kl, strlen(want[i][0]));
        assert_memory_equal(k, want[i][0], kl);
        assert_int_equal(vl, strlen(want[i][1]));
        assert_memory_equal(v, want[i][1], vl);
    }
    assert_false(kb_fields_iter_next(&it, &k, &kl, &v, &vl));
    assert_false(kb_fields_iter_next(&it, &k, &kl, &v, &vl));
    assert_true(kb_fields_iter_init(&it, "{}", 2));
    assert_false(kb_fields_iter_next(&it, &k, &kl, &v, &vl));
    assert_false(kb_fields_iter_init(&it, "[1]", 3));
    assert_false(kb_fields_iter_next(&it, &k, &kl, &v, &vl));
    assert_true(kb_fields_iter_init(&it, "{\"a\":1 \"b\":2}", 14));
    assert_true(kb_fields_iter_next(&it, &k, &kl, &v, &vl)); /* a, then bytes that do not parse: the end */
    assert_false(kb_fields_iter_next(&it, &k, &kl, &v, &vl));
    /* the first of duplicate members */
    assert_true(kb_fields_member(obj, strlen(obj), "a", 1, &v, &vl));
    assert_int_equal(vl, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get),
        cmocka_unit_test(test_iter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
