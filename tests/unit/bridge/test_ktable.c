/* Unit tests for bridge/ktable: the API server's duration strings, Accept
 * negotiation, includeObject, and the shape of a Table. */
#include "bridge/ktable.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

static const char *dur(int64_t s) {
    static char out[32];
    kb_ktable_duration(s, out, sizeof(out));
    return out;
}

/* HumanDuration's steps: seconds to 2m, m+s to 10m, minutes to 3h, h+m to
 * 8h, hours to 2d, d+h to 8d, days to 2y, y+d to 8y, then years. */
static void test_duration(void **state) {
    (void)state;
    assert_string_equal(dur(-5), "<invalid>");
    assert_string_equal(dur(-1), "0s");
    assert_string_equal(dur(0), "0s");
    assert_string_equal(dur(119), "119s");
    assert_string_equal(dur(120), "2m");
    assert_string_equal(dur(310), "5m10s");
    assert_string_equal(dur(600), "10m");
    assert_string_equal(dur(3 * 3600 - 1), "179m");
    assert_string_equal(dur(3 * 3600), "3h");
    assert_string_equal(dur(3 * 3600 + 20 * 60 + 59), "3h20m");
    assert_string_equal(dur(8 * 3600), "8h");
    assert_string_equal(dur(47 * 3600 + 3599), "47h");
    assert_string_equal(dur(48 * 3600), "2d");
    assert_string_equal(dur(2 * 86400 + 4 * 3600), "2d4h");
    assert_string_equal(dur(8 * 86400), "8d");
    assert_string_equal(dur(10 * 86400 + 3600), "10d");
    assert_string_equal(dur(729 * 86400), "729d");
    assert_string_equal(dur(730 * 86400), "2y");
    assert_string_equal(dur((3 * 365 + 12) * 86400LL), "3y12d");
    assert_string_equal(dur((9 * 365 + 12) * 86400LL), "9y");
}

static bool wanted(const char *accept, const char *include, kb_ktable_t *t, bool *bad) {
    return kb_ktable_wanted(accept, include, "", "pods", t, bad);
}

static void test_negotiation(void **state) {
    (void)state;
    kb_ktable_t t;
    bool bad;
    const char *kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;"
                          "g=meta.k8s.io,application/json";
    assert_true(wanted(kubectl, NULL, &t, &bad));
    assert_false(bad);
    assert_string_equal(t.api_version, "meta.k8s.io/v1");
    assert_int_equal(t.include, KB_KTABLE_METADATA);
    assert_true(wanted("application/json; as=Table; g=meta.k8s.io; v=v1beta1", "None", &t, &bad));
    assert_string_equal(t.api_version, "meta.k8s.io/v1beta1");
    assert_int_equal(t.include, KB_KTABLE_NONE);
    assert_true(wanted(kubectl, "Object", &t, &bad) && t.include == KB_KTABLE_OBJECT && !bad);
    assert_true(wanted(kubectl, "Everything", &t, &bad) && bad);
    assert_false(wanted("application/json", NULL, &t, &bad));
    assert_false(wanted(NULL, NULL, &t, &bad));
    assert_false(wanted("application/json, application/json;as=Table;v=v1;g=meta.k8s.io", NULL, &t, &bad));
    assert_false(wanted("application/json;as=Table;v=v2;g=meta.k8s.io", NULL, &t, &bad));
    assert_false(wanted("application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io", NULL, &t, &bad));
}

static const char POD[] =
    "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\","
    "\"resourceVersion\":\"7\",\"creationTimestamp\":\"2026-01-01T00:00:00Z\"},"
    "\"spec\":{\"containers\":[{\"name\":\"c\"}]},\"status\":{\"phase\":\"Succeeded\"}}";

static void test_one(void **state) {
    (void)state;
    kb_ktable_t t;
    bool bad;
    assert_true(wanted("application/json;as=Table;v=v1;g=meta.k8s.io", NULL, &t, &bad));
    t.now_s = 1767225600 + 310; /* 2026-01-01T00:05:10Z */
    kb_buf_t o = KB_BUF_INIT;
    kb_ktable_one(&t, &o, POD, strlen(POD));
    assert_non_null(strstr(o.data, "\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":"
                                   "{\"resourceVersion\":\"7\"},\"columnDefinitions\":[{\"name\":\"Name\""));
    assert_non_null(strstr(o.data, "\"rows\":[{\"cells\":[\"p\",\"0/1\",\"Succeeded\",\"0\",\"5m10s\",\"<none>\","
                                   "\"<none>\",\"<none>\",\"<none>\"],\"conditions\":[{\"type\":\"Completed\""));
    assert_non_null(strstr(o.data, "\"object\":{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\","
                                   "\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\""));
    kb_buf_reset(&o);
    kb_ktable_one(&t, &o, POD, strlen(POD)); /* the next Table of the same request: no columns */
    assert_non_null(strstr(o.data, "\"columnDefinitions\":null,\"rows\":[{"));
    kb_buf_fini(&o);
}

/* A CRD's printer columns, learned: the JSONPath forms (fields, ['x'], [n],
 * [-1], [*], ..x, == and != filters), each column type's cell, Go's ways of
 * printing a number or a map in a string column, and a form not taken; a
 * column name with quotes is escaped (the fuzz target found it written raw). */
static void test_crd(void **state) {
    (void)state;
    json_t *cols = json_loads(
        "[{\"name\":\"A\",\"type\":\"string\",\"jsonPath\":\".spec['a']\"},"
        "{\"name\":\"Last\",\"type\":\"string\",\"jsonPath\":\".spec.l[-1].n\"},"
        "{\"name\":\"Any\",\"type\":\"string\",\"jsonPath\":\".spec.l[*].n\"},"
        "{\"name\":\"Deep\",\"type\":\"string\",\"jsonPath\":\"..deep\"},"
        "{\"name\":\"Not\",\"type\":\"string\",\"jsonPath\":\".spec.l[?(@.n != 'x')].n\"},"
        "{\"name\":\"Num\",\"type\":\"integer\",\"jsonPath\":\".spec.f\",\"format\":\"int32\",\"priority\":1},"
        "{\"name\":\"Big\",\"type\":\"string\",\"jsonPath\":\".spec.big\"},"
        "{\"name\":\"Small\",\"type\":\"number\",\"jsonPath\":\".spec.small\"},"
        "{\"name\":\"Map\",\"type\":\"string\",\"jsonPath\":\".spec.m\"},"
        "{\"name\":\"Null\",\"type\":\"string\",\"jsonPath\":\".spec.z\"},"
        "{\"name\":\"Wrong\",\"type\":\"boolean\",\"jsonPath\":\".spec.a\"},"
        "{\"name\":\"Slice \\\"q\\\"\",\"type\":\"string\",\"jsonPath\":\".spec.l[0:1]\"}]", 0, NULL);
    kb_ktable_learn_crd("example.com", "things", cols);
    json_decref(cols);
    kb_ktable_t t;
    bool bad;
    assert_true(kb_ktable_wanted("application/json;as=Table;v=v1;g=meta.k8s.io", "None", "example.com", "things", &t,
                                 &bad));
    const char *obj = "{\"metadata\":{\"name\":\"t1\"},\"spec\":{\"a\":\"x\",\"l\":[{\"n\":\"x\"},{\"n\":\"y\"},"
                      "{\"n\":\"z\"}],\"k\":{\"deep\":7},\"f\":2.9,\"big\":1e6,\"small\":1e-7,"
                      "\"m\":{\"b\":[1,0.5],\"a\":\"<&>\"},\"z\":null}}";
    kb_buf_t o = KB_BUF_INIT;
    kb_ktable_one(&t, &o, obj, strlen(obj));
    kb_buf_append_char(&o, '\0');
    assert_non_null(strstr(o.data, "{\"name\":\"Num\",\"type\":\"integer\",\"format\":\"int32\",\"description\":"
                                   "\"Custom resource definition column (in JSONPath format): .spec.f\",\"priority\":1}"));
    assert_non_null(strstr(o.data, "{\"name\":\"Slice \\\"q\\\"\",\"type\":\"string\",\"format\":\"\""));
    const char *cells = strstr(o.data, "\"cells\":");
    assert_non_null(cells);
    assert_string_equal(cells, "\"cells\":[\"t1\",\"x\",\"z\",\"x\",\"7\",\"y\",2,\"1e+06\",1e-7,"
                               "\"{\\\"a\\\":\\\"\\\\u003c\\\\u0026\\\\u003e\\\",\\\"b\\\":[1,0.5]}\",\"<no value>\",null,null],"
                               "\"object\":null}]}");
    kb_buf_fini(&o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration),
        cmocka_unit_test(test_negotiation),
        cmocka_unit_test(test_one),
        cmocka_unit_test(test_crd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
