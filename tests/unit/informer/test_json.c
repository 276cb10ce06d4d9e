/* tests/unit/informer/test_json.c — the raw JSON scanner: which inputs are
 * OK, INCOMPLETE or INVALID; every prefix of a valid document is never
 * INVALID; depth limit; member lookup; string unescaping. */
#include "informer/json.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static kb_json_status_t scan(const char *s, size_t *start, size_t *end) {
    return kb_json_scan_value(s, strlen(s), start, end);
}

static kb_json_status_t scan_n(const char *s, size_t n) {
    size_t a, b;
    return kb_json_scan_value(s, n, &a, &b);
}

static void test_ok_values(void **state) {
    (void)state;
    static const char *const ok[] = {
        "{}", "[]", "0", "-0", "1", "-12", "3.25", "1e5", "1E+5", "-2.5e-3", "0.0", "true",
        "false", "null", "\"\"", "\"a\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\\uDE00\"",
        "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"", "\"\xff\xfe invalid utf-8 passes\"",
        "{\"a\":1}", "{\"a\":{\"b\":[1,2,{\"c\":null}]},\"d\":[]}", "[[[]],[{}],\"x\",-1.5e3]",
        " \t\r\n{ \"a\" : [ 1 , 2 ] , \"b\" : { } } ",
    };
    for (size_t k = 0; k < sizeof(ok) / sizeof(ok[0]); k++) {
        size_t s, e;
        kb_json_status_t st = scan(ok[k], &s, &e);
        if (st != KB_JSON_OK)
            fail_msg("expected OK for %s, got %d", ok[k], st);
    }
}

static void test_extent(void **state) {
    (void)state;
    size_t s, e;
    assert_int_equal(scan("  {\"a\":[1,2]}  {\"next\":1}", &s, &e), KB_JSON_OK);
    assert_int_equal(s, 2);
    assert_int_equal(e, 13);
    assert_int_equal(scan("\n[1]\n", &s, &e), KB_JSON_OK);
    assert_int_equal(s, 1);
    assert_int_equal(e, 4);
    /* A literal followed by anything: the value ends at the literal. */
    assert_int_equal(scan("true,", &s, &e), KB_JSON_OK);
    assert_int_equal(e, 4);
}

static void test_incomplete(void **state) {
    (void)state;
    static const char *const inc[] = {
        "", "   ", "{", "[", "{\"a\"", "{\"a\":", "{\"a\":1", "{\"a\":1,", "[1,", "\"abc",
        "\"a\\", "\"\\u12", "t", "fals", "nu", "-", "1.", "1e", "1e+", "{\"a\":{\"b\":[",
    };
    for (size_t k = 0; k < sizeof(inc) / sizeof(inc[0]); k++) {
        kb_json_status_t st = scan_n(inc[k], strlen(inc[k]));
        if (st != KB_JSON_INCOMPLETE)
            fail_msg("expected INCOMPLETE for '%s', got %d", inc[k], st);
    }
}

static void test_invalid(void **state) {
    (void)state;
    static const char *const bad[] = {
        "}", ",", ":", "x", "{,}", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]", "[1 2]",
        "{\"a\" 1}", "{1:2}", "{'a':1}", "01", "-a", "1.e3", "1.5e", "+1", ".5", "tru e",
        "nul!", "\"a\\x\"", "\"\\u12g4\"", "\"tab\there\"", "\"nl\nhere\"", "[1}", "{\"a\":1]",
        "NaN", "Infinity", "[--1]",
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        /* inside an array so that e.g. "1.5e" is cut short by ']', not by the end */
        char buf[64];
        snprintf(buf, sizeof(buf), "[%s]", bad[k]);
        kb_json_status_t st = scan_n(buf, strlen(buf));
        if (st != KB_JSON_INVALID)
            fail_msg("expected INVALID for '%s', got %d", buf, st);
    }
    assert_int_equal(scan_n("]", 1), KB_JSON_INVALID);
    assert_int_equal(scan_n("}", 1), KB_JSON_INVALID);
}

static void test_nul_is_invalid(void **state) {
    (void)state;
    static const char in_string[] = "{\"a\":\"x\0y\"}";
    static const char between[] = "{\"a\":1\0}";
    assert_int_equal(scan_n(in_string, sizeof(in_string) - 1), KB_JSON_INVALID);
    assert_int_equal(scan_n(between, sizeof(between) - 1), KB_JSON_INVALID);
}

static void test_invalid_position(void **state) {
    (void)state;
    size_t s, e;
    assert_int_equal(scan("{\"a\":1,\"b\":x}", &s, &e), KB_JSON_INVALID);
    assert_int_equal(e, 11);
}

/* Every prefix of a valid document is INCOMPLETE or OK, never INVALID. */
static void test_prefixes_never_invalid(void **state) {
    (void)state;
    static const char *const docs[] = {
        ("{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\","
         "\"labels\":{\"a\":\"b\"}},\"n\":[1,-2.5e+10,true,false,null,{}],\"s\":\"\\u00e9\\n\"}}"),
        " [ { \"a\" : [ ] } , 0 , -0.0e-0 , \"\\\\\" ] ",
        "{\"k\":\"caf\xc3\xa9\",\"deep\":[[[[{\"x\":[[]]}]]]]}",
    };
    for (size_t d = 0; d < sizeof(docs) / sizeof(docs[0]); d++) {
        size_t len = strlen(docs[d]);
        assert_int_equal(scan_n(docs[d], len), KB_JSON_OK);
        for (size_t n = 0; n < len; n++) {
            kb_json_status_t st = scan_n(docs[d], n);
            if (st == KB_JSON_INVALID)
                fail_msg("prefix of length %zu of doc %zu is INVALID", n, d);
        }
    }
}

static char *nested(size_t depth) {
    char *s = malloc(2 * depth + 1);
    for (size_t k = 0; k < depth; k++) {
        s[k] = '[';
        s[2 * depth - 1 - k] = ']';
    }
    s[2 * depth] = '\0';
    return s;
}

static void test_depth_limit(void **state) {
    (void)state;
    char *ok = nested(KB_JSON_MAX_DEPTH);
    char *deep = nested(KB_JSON_MAX_DEPTH + 1);
    assert_int_equal(scan_n(ok, strlen(ok)), KB_JSON_OK);
    assert_int_equal(scan_n(deep, strlen(deep)), KB_JSON_INVALID);
    free(ok);
    free(deep);
    /* A hostile stream of 1 MB of '[' does not recurse: it is just too deep. */
    size_t n = 1 << 20;
    char *flood = malloc(n);
    memset(flood, '[', n);
    assert_int_equal(scan_n(flood, n), KB_JSON_INVALID);
    free(flood);
}

static void test_object_get(void **state) {
    (void)state;
    const char *o = " { \"a\" : 1 , \"b\":{\"a\":2}, \"c\" :\"x\", \"a\":3, \"e\\\"k\":4 } ";
    size_t n = strlen(o);
    kb_span_t v;
    assert_true(kb_json_object_get(o, n, "a", &v));
    assert_int_equal(v.len, 1);
    assert_int_equal(o[v.off], '1'); /* the first of duplicate keys */
    assert_true(kb_json_object_get(o, n, "b", &v));
    assert_memory_equal(o + v.off, "{\"a\":2}", v.len);
    assert_true(kb_json_object_get(o, n, "c", &v));
    assert_memory_equal(o + v.off, "\"x\"", 3);
    assert_true(kb_json_object_get(o, n, "e\\\"k", &v)); /* raw key bytes */
    assert_false(kb_json_object_get(o, n, "e\"k", &v));
    assert_false(kb_json_object_get(o, n, "z", &v));
    assert_false(kb_json_object_get("[1]", 3, "a", &v));
    assert_false(kb_json_object_get("{}", 2, "a", &v));
    assert_false(kb_json_object_get("{\"a\"", 4, "a", &v));
}

static void test_string_inner(void **state) {
    (void)state;
    const char *b = "xx\"abc\"";
    kb_span_t in = kb_json_string_inner(b, (kb_span_t){2, 5});
    assert_int_equal(in.off, 3);
    assert_int_equal(in.len, 3);
    in = kb_json_string_inner(b, (kb_span_t){0, 2});
    assert_int_equal(in.len, 0);
}

static void test_string_decode(void **state) {
    (void)state;
    char out[64];
    const char *s = "\"a\\\"b\\\\c\\/d\\n\\t\\u00e9\\u20ac\\uD83D\\uDE00\\uD800x\"";
    long n = kb_json_string_decode(s, (kb_span_t){0, strlen(s)}, out, sizeof(out));
    const char *want = "a\"b\\c/d\n\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xef\xbf\xbdx";
    assert_int_equal(n, (long)strlen(want));
    assert_string_equal(out, want);
    /* does not fit: -1 */
    assert_int_equal(kb_json_string_decode(s, (kb_span_t){0, strlen(s)}, out, 4), -1);
    /* not a string */
    assert_int_equal(kb_json_string_decode("123", (kb_span_t){0, 3}, out, sizeof(out)), -1);
    assert_int_equal(kb_json_string_decode("\"ab", (kb_span_t){0, 3}, out, sizeof(out)), -1);
    /* exactly fits */
    assert_int_equal(kb_json_string_decode("\"abc\"", (kb_span_t){0, 5}, out, 4), 3);
    assert_string_equal(out, "abc");
}

/* Long strings exercise the 8-bytes-at-a-time path around every special byte. */
static void test_long_strings(void **state) {
    (void)state;
    char buf[128];
    for (size_t pos = 1; pos < 40; pos++) {
        memset(buf, 'a', sizeof(buf));
        buf[0] = '"';
        buf[pos] = '\\';
        buf[pos + 1] = 'n';
        buf[60] = '"';
        assert_int_equal(scan_n(buf, 61), KB_JSON_OK);
        buf[pos] = '\x1f';
        assert_int_equal(scan_n(buf, 61), KB_JSON_INVALID);
        buf[pos] = '"';
        size_t s, e;
        assert_int_equal(kb_json_scan_value(buf, 61, &s, &e), KB_JSON_OK);
        assert_int_equal(e, pos + 1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_values),
        cmocka_unit_test(test_extent),
        cmocka_unit_test(test_incomplete),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_nul_is_invalid),
        cmocka_unit_test(test_invalid_position),
        cmocka_unit_test(test_prefixes_never_invalid),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_object_get),
        cmocka_unit_test(test_string_inner),
        cmocka_unit_test(test_string_decode),
        cmocka_unit_test(test_long_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
