/* tests/unit/informer/test_projection.c — keep_fields, the allow-list, in the
 * one-pass decoder, and how it composes with drop_fields and redact_fields:
 * what a user who sets keep_fields = [ "spec.nodeName" ] sees in `object`.
 * Covers identity always surviving, arrays, paths kept whole and filtered,
 * escaped and non-ASCII keys and values, deep nesting, and Secrets (default
 * redaction of data and stringData inside a kept object). */
#include "informer/decode.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A path list and its length, as two arguments. */
#define PATHS(...)                                                                                                \
    ((const char *const[]){__VA_ARGS__}), (sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))
#define NONE NULL, 0

static kb_buf_t out;
static kb_objmeta_t meta;

/* The output form of `in` under the given paths (owned by `out`). */
static const char *project(const char *in, const char *const *keep, size_t nk, const char *const *drop,
                           size_t nd, const char *const *redact, size_t nr) {
    char err[256];
    kb_transform_t *tf = kb_transform_new_keep(drop, nd, redact, nr, keep, nk, err, sizeof(err));
    if (!tf)
        fail_msg("transform: %s", err);
    kb_buf_reset(&out);
    kb_err_t e = kb_decode_object(tf, in, strlen(in), "Pod", "v1", &out, &meta, err, sizeof(err));
    kb_transform_free(tf);
    if (e != KB_OK)
        fail_msg("decode: %s", err);
    return out.data;
}

static const char *keep_only(const char *in, const char *const *keep, size_t nk) {
    return project(in, keep, nk, NONE, NONE);
}

static void assert_span(kb_span_t sp, const char *want) {
    if (sp.len != strlen(want) || memcmp(out.data + sp.off, want, sp.len) != 0)
        fail_msg("span {%zu,%zu} is '%.*s', want '%s'", sp.off, sp.len, (int)sp.len, out.data + sp.off, want);
}

static const char pod[] =
    "{\"kind\":\"Pod\",\"apiVersion\":\"v1\","
    "\"metadata\":{\"name\":\"web-1\",\"generateName\":\"web-\",\"namespace\":\"default\",\"uid\":\"u-1\","
    "\"resourceVersion\":\"42\",\"labels\":{\"app\":\"web\"},\"annotations\":{\"a\":\"1\"},"
    "\"managedFields\":[{\"manager\":\"kubectl\"}]},"
    "\"spec\":{\"nodeName\":\"node-1\",\"containers\":[{\"name\":\"c\",\"image\":\"nginx\",\"env\":[]},"
    "{\"name\":\"d\",\"image\":\"busybox\"}],\"restartPolicy\":\"Always\"},"
    "\"status\":{\"phase\":\"Running\",\"podIP\":\"10.0.0.1\"}}";

#define POD_IDENTITY                                                                                              \
    "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"web-1\",\"namespace\":\"default\","           \
    "\"uid\":\"u-1\",\"resourceVersion\":\"42\",\"labels\":{\"app\":\"web\"}}"

/* ---- the allow-list ------------------------------------------------------ */

static void test_keep_leaves_and_identity(void **state) {
    (void)state;
    assert_string_equal(keep_only(pod, PATHS("spec.nodeName", "status.phase")),
                        POD_IDENTITY ",\"spec\":{\"nodeName\":\"node-1\"},\"status\":{\"phase\":\"Running\"}}");
    /* identity spans point into the filtered output */
    assert_span(meta.name, "web-1");
    assert_span(meta.ns, "default");
    assert_span(meta.uid, "u-1");
    assert_span(meta.rv, "42");
    assert_span(meta.kind, "Pod");
    assert_span(meta.labels, "{\"app\":\"web\"}");
    /* a path naming nothing that exists still leaves identity only */
    assert_string_equal(keep_only(pod, PATHS("nosuch.field")), POD_IDENTITY "}");
}

static void test_keep_whole_subtree(void **state) {
    (void)state;
    assert_string_equal(keep_only(pod, PATHS("status")),
                        POD_IDENTITY ",\"status\":{\"phase\":\"Running\",\"podIP\":\"10.0.0.1\"}}");
    /* "metadata" keeps all of it (still minus drop_fields) */
    const char *got = project(pod, PATHS("metadata"), PATHS("metadata.managedFields"), NONE);
    assert_string_equal(got, "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"web-1\","
                             "\"generateName\":\"web-\",\"namespace\":\"default\",\"uid\":\"u-1\","
                             "\"resourceVersion\":\"42\",\"labels\":{\"app\":\"web\"},\"annotations\":{\"a\":\"1\"}}}");
    /* a whole subtree wins over a narrower path below it, in either order */
    const char *spec = ",\"spec\":{\"nodeName\":\"node-1\",\"containers\":[{\"name\":\"c\",\"image\":\"nginx\","
                       "\"env\":[]},{\"name\":\"d\",\"image\":\"busybox\"}],\"restartPolicy\":\"Always\"}}";
    char want[1024];
    snprintf(want, sizeof(want), "%s%s", POD_IDENTITY, spec);
    assert_string_equal(keep_only(pod, PATHS("spec.containers.image", "spec")), want);
    assert_string_equal(keep_only(pod, PATHS("spec", "spec.containers.image")), want);
}

static void test_keep_through_arrays(void **state) {
    (void)state;
    assert_string_equal(keep_only(pod, PATHS("spec.containers.image")),
                        POD_IDENTITY ",\"spec\":{\"containers\":[{\"image\":\"nginx\"},{\"image\":\"busybox\"}]}}");
    /* scalars and nested arrays inside a filtered array are kept as they are */
    const char *in = "{\"metadata\":{\"name\":\"x\"},\"a\":[1,\"s\",null,{\"b\":1,\"c\":2},[{\"b\":3,\"d\":4}]],"
                     "\"z\":0}";
    assert_string_equal(keep_only(in, PATHS("a.b")), "{\"kind\":\"Pod\",\"apiVersion\":\"v1\","
                                                      "\"metadata\":{\"name\":\"x\"},"
                                                      "\"a\":[1,\"s\",null,{\"b\":1},[{\"b\":3}]]}");
    /* an empty array and an array of empty objects */
    in = "{\"metadata\":{\"name\":\"x\"},\"a\":[],\"b\":[{},{\"q\":1}]}";
    assert_string_equal(keep_only(in, PATHS("a", "b.p")),
                        "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"x\"},\"a\":[],\"b\":[{},{}]}");
}

static void test_keep_commas_when_members_go(void **state) {
    (void)state;
    /* first, middle, last and all members dropped: the output stays valid JSON */
    const char *in = "{ \"x\" : 1 , \"metadata\" : { \"q\":1, \"name\" : \"n\", \"r\":{\"s\":[1,2]} } ,"
                     " \"y\":{\"k\":1,\"m\":2,\"l\":3}, \"w\" : [ ] }";
    assert_string_equal(keep_only(in, PATHS("y.m")),
                        "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n\"},\"y\":{\"m\":2}}");
    assert_string_equal(keep_only(in, PATHS("y.zz")),
                        "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n\"},\"y\":{}}");
    /* a scalar where the path expects an object is kept as it is */
    assert_string_equal(keep_only(in, PATHS("x.deeper")),
                        "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"x\":1,\"metadata\":{\"name\":\"n\"}}");
}

static void test_no_keep_is_unchanged(void **state) {
    (void)state;
    char err[256];
    kb_transform_t *a = kb_transform_new(PATHS("metadata.managedFields"), NONE, err, sizeof(err));
    kb_transform_t *b = kb_transform_new_keep(PATHS("metadata.managedFields"), NONE, NONE, err, sizeof(err));
    assert_non_null(a);
    assert_non_null(b);
    kb_buf_t x = KB_BUF_INIT, y = KB_BUF_INIT;
    kb_objmeta_t m;
    assert_int_equal(kb_decode_object(a, pod, strlen(pod), NULL, NULL, &x, &m, err, sizeof(err)), KB_OK);
    assert_int_equal(kb_decode_object(b, pod, strlen(pod), NULL, NULL, &y, &m, err, sizeof(err)), KB_OK);
    assert_string_equal(x.data, y.data);
    assert_null(strstr(x.data, "managedFields"));
    assert_non_null(strstr(x.data, "restartPolicy"));
    kb_buf_fini(&x);
    kb_buf_fini(&y);
    kb_transform_free(a);
    kb_transform_free(b);
}

/* ---- composition with drop and redact ------------------------------------- */

static void test_keep_with_drop_and_redact(void **state) {
    (void)state;
    /* drop wins over keep; the annotation is named with a bracket segment */
    const char *in = "{\"metadata\":{\"name\":\"n\",\"annotations\":{\"kubectl.kubernetes.io/"
                     "last-applied-configuration\":\"{\\\"big\\\":1}\",\"team\":\"a\"},\"managedFields\":[]}}";
    const char *got = project(in, PATHS("metadata.annotations", "metadata.managedFields"),
                              PATHS("metadata.managedFields",
                                    "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]"),
                              NONE);
    assert_string_equal(got, "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n\","
                             "\"annotations\":{\"team\":\"a\"}}}");
    /* redact inside what is kept */
    got = project(pod, PATHS("status"), NONE, PATHS("status.podIP"));
    assert_string_equal(got, POD_IDENTITY ",\"status\":{\"phase\":\"Running\",\"podIP\":\"<redacted>\"}}");
    /* a redacted object that is also filtered: filtered first, then masked */
    in = "{\"metadata\":{\"name\":\"n\"},\"data\":{\"a\":\"c2VjcmV0\",\"b\":\"eA==\"}}";
    got = project(in, PATHS("data.a"), NONE, PATHS("data"));
    assert_string_equal(got, "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n\"},"
                             "\"data\":{\"a\":\"<redacted>\"}}");
}

static void test_secret_redaction_default(void **state) {
    (void)state;
    /* what a secrets informer gets by default: data and stringData masked,
     * keys still visible, type and metadata untouched */
    const char *in = "{\"kind\":\"Secret\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"db\",\"namespace\":\"p\"},"
                     "\"type\":\"Opaque\",\"data\":{\"password\":\"aHVudGVyMg==\",\"user\":\"YWRtaW4=\"},"
                     "\"stringData\":{\"token\":\"t0ps3cret\"}}";
    const char *got = project(in, NONE, PATHS("metadata.managedFields"), PATHS("data", "stringData"));
    assert_string_equal(got, "{\"kind\":\"Secret\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"db\","
                             "\"namespace\":\"p\"},\"type\":\"Opaque\",\"data\":{\"password\":\"<redacted>\","
                             "\"user\":\"<redacted>\"},\"stringData\":{\"token\":\"<redacted>\"}}");
    assert_null(strstr(got, "aHVudGVyMg"));
    assert_null(strstr(got, "t0ps3cret"));
    /* keep_fields = [ "data" ] still masks it */
    got = project(in, PATHS("data"), NONE, PATHS("data", "stringData"));
    assert_string_equal(got, "{\"kind\":\"Secret\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"db\","
                             "\"namespace\":\"p\"},\"data\":{\"password\":\"<redacted>\",\"user\":\"<redacted>\"}}");
}

/* ---- strings: escapes and non-ASCII ------------------------------------------- */

static void test_escaped_strings(void **state) {
    (void)state;
    /* escaped values are copied verbatim; a key containing an escaped quote or
     * brace does not confuse member boundaries */
    const char *in = "{\"metadata\":{\"name\":\"n\"},\"spec\":{\"cmd\":\"echo \\\"}{,\\\\\\\" \\u00e9\\n\","
                     "\"we\\\"ird}\":{\"x\":1},\"drop\":\"\\\"\"}}";
    assert_string_equal(keep_only(in, PATHS("spec.cmd")),
                        "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n\"},"
                        "\"spec\":{\"cmd\":\"echo \\\"}{,\\\\\\\" \\u00e9\\n\"}}");
    /* keys compare by their raw bytes: the escaped form names the escaped key */
    assert_string_equal(keep_only(in, PATHS("spec[we\\\"ird}]")),
                        "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n\"},"
                        "\"spec\":{\"we\\\"ird}\":{\"x\":1}}}");
    /* "a\/b" is not the key a/b */
    in = "{\"metadata\":{\"name\":\"n\"},\"m\":{\"a\\/b\":1,\"a/b\":2}}";
    assert_string_equal(keep_only(in, PATHS("m[a/b]")),
                        "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n\"},\"m\":{\"a/b\":2}}");
}

static void test_unicode(void **state) {
    (void)state;
    /* UTF-8 keys are matched byte for byte; values pass through unchanged */
    const char *in = "{\"metadata\":{\"name\":\"n\",\"labels\":{\"app\":\"caf\xc3\xa9\"}},"
                     "\"data\":{\"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87\":\"\xe2\x9c\x93\",\"\xf0\x9f\x94\x91\":\"k\","
                     "\"other\":\"\\ud83d\\udd11\"}}";
    assert_string_equal(keep_only(in, PATHS("data.\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", "data.\xf0\x9f\x94\x91")),
                        "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n\",\"labels\":{\"app\":"
                        "\"caf\xc3\xa9\"}},\"data\":{\"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87\":\"\xe2\x9c\x93\","
                        "\"\xf0\x9f\x94\x91\":\"k\"}}");
    assert_string_equal(keep_only(in, PATHS("data.other")),
                        "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n\",\"labels\":{\"app\":"
                        "\"caf\xc3\xa9\"}},\"data\":{\"other\":\"\\ud83d\\udd11\"}}");
}

/* ---- depth and bad paths ----------------------------------------------------------- */

static void test_deep_paths(void **state) {
    (void)state;
    /* a 60-level object with a sibling at every level; keep the innermost leaf */
    enum { DEPTH = 60 };
    kb_buf_t in = KB_BUF_INIT, path = KB_BUF_INIT, want = KB_BUF_INIT;
    kb_buf_append_str(&in, "{\"metadata\":{\"name\":\"deep\"},");
    kb_buf_append_str(&want, "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"deep\"},");
    for (int d = 0; d < DEPTH; d++) {
        kb_buf_appendf(&in, "\"s%d\":[%d],\"l%d\":{", d, d, d);
        kb_buf_appendf(&want, "\"l%d\":{", d);
        kb_buf_appendf(&path, "%sl%d", d ? "." : "", d);
    }
    kb_buf_append_str(&in, "\"leaf\":\"x\",\"other\":\"y\"");
    kb_buf_append_str(&want, "\"leaf\":\"x\"");
    kb_buf_append_str(&path, ".leaf");
    for (int d = 0; d < DEPTH; d++) {
        kb_buf_append_char(&in, '}');
        kb_buf_append_char(&want, '}');
    }
    kb_buf_append_char(&in, '}');
    kb_buf_append_char(&want, '}');
    const char *p = path.data;
    assert_string_equal(keep_only(in.data, &p, 1), want.data);
    kb_buf_fini(&in);
    kb_buf_fini(&path);
    kb_buf_fini(&want);
}

static void test_bad_keep_paths(void **state) {
    (void)state;
    const char *bad[] = {"", "a..b", "a[", "a[]", ".a", "a.", "a]b"};
    char err[256];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_false(kb_transform_keep_path_valid(bad[i], err, sizeof(err)));
        assert_true(err[0] != '\0');
        assert_null(kb_transform_new_keep(NONE, NONE, &bad[i], 1, err, sizeof(err)));
    }
    /* 65 segments: more than a path may have */
    kb_buf_t p = KB_BUF_INIT;
    for (int k = 0; k < 65; k++)
        kb_buf_appendf(&p, "%sa", k ? "." : "");
    assert_false(kb_transform_keep_path_valid(p.data, err, sizeof(err)));
    kb_buf_fini(&p);
    /* identity may be kept (it always is), but not dropped */
    assert_true(kb_transform_keep_path_valid("metadata.name", err, sizeof(err)));
    assert_true(kb_transform_keep_path_valid("metadata.annotations[a.b/c]", err, sizeof(err)));
    assert_false(kb_transform_path_valid("metadata.name", err, sizeof(err)));
}

static int teardown(void **state) {
    (void)state;
    kb_buf_fini(&out);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_leaves_and_identity),
        cmocka_unit_test(test_keep_whole_subtree),
        cmocka_unit_test(test_keep_through_arrays),
        cmocka_unit_test(test_keep_commas_when_members_go),
        cmocka_unit_test(test_no_keep_is_unchanged),
        cmocka_unit_test(test_keep_with_drop_and_redact),
        cmocka_unit_test(test_secret_redaction_default),
        cmocka_unit_test(test_escaped_strings),
        cmocka_unit_test(test_unicode),
        cmocka_unit_test(test_deep_paths),
        cmocka_unit_test(test_bad_keep_paths),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
