/* tests/unit/informer/test_decode.c — what the informer gets from API-server
 * bytes: the compact output form of an object (kind inserted, drop and
 * redact paths applied), its identity spans, watch frames in any member
 * order, list pages, Status bodies, and clean errors on malformed input. */
#include "informer/decode.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- helpers ------------------------------------------------------------ */

typedef struct {
    kb_buf_t out;
    kb_objmeta_t meta;
    char err[256];
} dec_t;

static kb_err_t decode(dec_t *d, const kb_transform_t *tf, const char *in, const char *kind,
                       const char *apiv) {
    kb_buf_reset(&d->out);
    d->err[0] = '\0';
    return kb_decode_object(tf, in, strlen(in), kind, apiv, &d->out, &d->meta, d->err,
                            sizeof(d->err));
}

/* Output of decoding `in` with the given paths, as a NUL-terminated copy
 * owned by a static buffer (the test asserts right after). */
static const char *transformed_paths(const char *in, const kb_transform_paths_t *paths) {
    static dec_t d;
    char err[256];
    kb_transform_t *tf = kb_transform_new_paths(paths, err, sizeof(err));
    if (!tf)
        fail_msg("transform: %s", err);
    kb_err_t e = decode(&d, tf, in, NULL, NULL);
    kb_transform_free(tf);
    if (e != KB_OK)
        fail_msg("decode: %s", d.err);
    return d.out.data;
}

static const char *transformed(const char *in, const char *const *drop, size_t nd,
                               const char *const *redact, size_t nr) {
    kb_transform_paths_t p = {.drop = drop, .n_drop = nd, .redact = redact, .n_redact = nr};
    return transformed_paths(in, &p);
}

static void assert_span(const kb_buf_t *b, kb_span_t sp, const char *want) {
    if (sp.len != strlen(want) || memcmp(b->data + sp.off, want, sp.len) != 0)
        fail_msg("span {%zu,%zu} is '%.*s', want '%s'", sp.off, sp.len, (int)sp.len,
                 b->data + sp.off, want);
}

/* Remove insignificant whitespace (outside strings). */
static char *strip_ws(const char *s) {
    char *o = malloc(strlen(s) + 1), *w = o;
    bool in_str = false;
    for (; *s; s++) {
        if (in_str) {
            *w++ = *s;
            if (*s == '\\')
                *w++ = *++s;
            else if (*s == '"')
                in_str = false;
        } else if (*s == '"') {
            in_str = true;
            *w++ = *s;
        } else if (*s != ' ' && *s != '\n' && *s != '\t' && *s != '\r') {
            *w++ = *s;
        }
    }
    *w = '\0';
    return o;
}

static void dec_init(dec_t *d) {
    memset(d, 0, sizeof(*d));
    kb_buf_init(&d->out);
}

static void dec_fini(dec_t *d) {
    kb_buf_fini(&d->out);
}

/* ---- kb_decode_object ---------------------------------------------------- */

static const char *pod =
    "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"web-1\",\"namespace\":\"shop\","
    "\"uid\":\"u-1\",\"resourceVersion\":\"42\",\"labels\":{\"app\":\"web\"},"
    "\"annotations\":{\"kubectl.kubernetes.io/last-applied-configuration\":\"{\\\"a\\\":1}\","
    "\"keep\":\"me\"},\"managedFields\":[{\"manager\":\"kubectl\",\"fieldsV1\":{\"f:spec\":{}}}]},"
    "\"spec\":{\"containers\":[{\"name\":\"a\",\"env\":[{\"name\":\"X\",\"value\":\"1\"}]},"
    "{\"name\":\"b\"},{\"env\":[],\"name\":\"c\"}]}}";

static void test_identity(void **state) {
    (void)state;
    dec_t d;
    dec_init(&d);
    assert_int_equal(decode(&d, NULL, pod, "Other", "v9"), KB_OK);
    assert_string_equal(d.out.data, pod); /* compact input, no paths: unchanged */
    assert_span(&d.out, d.meta.name, "web-1");
    assert_span(&d.out, d.meta.ns, "shop");
    assert_span(&d.out, d.meta.uid, "u-1");
    assert_span(&d.out, d.meta.rv, "42");
    assert_span(&d.out, d.meta.kind, "Pod");
    assert_span(&d.out, d.meta.api_version, "v1");
    assert_span(&d.out, d.meta.labels, "{\"app\":\"web\"}");
    assert_true(d.meta.had_kind);
    dec_fini(&d);
}

static void test_list_item_gets_kind(void **state) {
    (void)state;
    dec_t d;
    dec_init(&d);
    const char *item = "{\"metadata\":{\"name\":\"cm-1\",\"namespace\":\"ns1\","
                       "\"resourceVersion\":\"10001\",\"labels\":{\"a\":\"b\"}},\"data\":{}}";
    assert_int_equal(decode(&d, NULL, item, "ConfigMap", "v1"), KB_OK);
    assert_string_equal(d.out.data,
                        "{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":"
                        "\"cm-1\",\"namespace\":\"ns1\",\"resourceVersion\":\"10001\","
                        "\"labels\":{\"a\":\"b\"}},\"data\":{}}");
    assert_false(d.meta.had_kind);
    assert_span(&d.out, d.meta.kind, "ConfigMap");
    assert_span(&d.out, d.meta.api_version, "v1");
    assert_span(&d.out, d.meta.name, "cm-1"); /* shifted by the insertion */
    assert_span(&d.out, d.meta.rv, "10001");
    assert_span(&d.out, d.meta.labels, "{\"a\":\"b\"}");
    assert_int_equal(d.meta.uid.len, 0);

    /* Only apiVersion missing: only apiVersion is inserted, first. */
    assert_int_equal(decode(&d, NULL, "{\"metadata\":{\"name\":\"x\"},\"kind\":\"K\"}", "Z", "v1"),
                     KB_OK);
    assert_string_equal(d.out.data, "{\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"x\"},\"kind\":\"K\"}");
    assert_span(&d.out, d.meta.kind, "K");
    assert_false(d.meta.had_kind);

    /* NULL kind: nothing inserted. */
    assert_int_equal(decode(&d, NULL, "{\"metadata\":{\"name\":\"x\"}}", NULL, NULL), KB_OK);
    assert_string_equal(d.out.data, "{\"metadata\":{\"name\":\"x\"}}");
    assert_int_equal(d.meta.kind.len, 0);
    dec_fini(&d);
}

static void test_drop_managed_fields_and_annotation(void **state) {
    (void)state;
    const char *drop[] = {"metadata.managedFields",
                          "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]"};
    assert_string_equal(
        transformed(pod, drop, 2, NULL, 0),
        "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"web-1\",\"namespace\":"
        "\"shop\",\"uid\":\"u-1\",\"resourceVersion\":\"42\",\"labels\":{\"app\":\"web\"},"
        "\"annotations\":{\"keep\":\"me\"}},\"spec\":{\"containers\":[{\"name\":\"a\",\"env\":[{"
        "\"name\":\"X\",\"value\":\"1\"}]},{\"name\":\"b\"},{\"env\":[],\"name\":\"c\"}]}}");
}

static void test_drop_first_last_only(void **state) {
    (void)state;
    const char *drop[] = {"x"};
    const char *meta = "\"metadata\":{\"name\":\"n\"}";
    char in[256], want[256];
    /* first */
    snprintf(in, sizeof(in), "{\"x\":[1,{\"a\":2}],%s,\"y\":1}", meta);
    snprintf(want, sizeof(want), "{%s,\"y\":1}", meta);
    assert_string_equal(transformed(in, drop, 1, NULL, 0), want);
    /* last */
    snprintf(in, sizeof(in), "{%s,\"y\":1,\"x\":{}}", meta);
    assert_string_equal(transformed(in, drop, 1, NULL, 0), want);
    /* middle, and repeated (every duplicate is dropped) */
    snprintf(in, sizeof(in), "{%s,\"x\":null,\"x\":true,\"y\":1}", meta);
    assert_string_equal(transformed(in, drop, 1, NULL, 0), want);
    /* only member of a nested object */
    const char *drop2[] = {"metadata.annotations.x"};
    snprintf(in, sizeof(in), "{\"metadata\":{\"name\":\"n\",\"annotations\":{\"x\":\"1\"}}}");
    assert_string_equal(transformed(in, drop2, 1, NULL, 0),
                        "{\"metadata\":{\"name\":\"n\",\"annotations\":{}}}");
    /* all members of the root but metadata, with whitespace around them */
    const char *drop3[] = {"a", "b"};
    assert_string_equal(
        transformed(" { \"a\" : 1 , \"metadata\" : {\"name\":\"n\"} , \"b\" : [ ] } ", drop3, 2,
                    NULL, 0),
        "{\"metadata\":{\"name\":\"n\"}}");
}

static void test_array_paths(void **state) {
    (void)state;
    const char *drop[] = {"spec.containers.env"};
    const char *out = transformed(pod, drop, 1, NULL, 0);
    assert_non_null(strstr(out, "\"containers\":[{\"name\":\"a\"},{\"name\":\"b\"},{\"name\":\"c\"}]"));
    assert_null(strstr(out, "env"));
    /* Arrays inside arrays: the path still applies to each element. */
    const char *drop2[] = {"m.x"};
    assert_string_equal(
        transformed("{\"metadata\":{\"name\":\"n\"},\"m\":[[{\"x\":1,\"y\":2}],{\"x\":3},5]}", drop2,
                    1, NULL, 0),
        "{\"metadata\":{\"name\":\"n\"},\"m\":[[{\"y\":2}],{},5]}");
}

static void test_redact(void **state) {
    (void)state;
    const char *secret =
        "{\"kind\":\"Secret\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"s\"},"
        "\"data\":{\"password\":\"aHVudGVyMg==\",\"nested\":{\"a\":[1]},\"n\":5},"
        "\"stringData\":\"plain\",\"list\":[\"a\",{\"k\":\"v\"},[1]],\"type\":\"Opaque\"}";
    const char *redact[] = {"data", "stringData", "list"};
    assert_string_equal(
        transformed(secret, NULL, 0, redact, 3),
        "{\"kind\":\"Secret\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"s\"},"
        "\"data\":{\"password\":\"<redacted>\",\"nested\":\"<redacted>\",\"n\":\"<redacted>\"},"
        "\"stringData\":\"<redacted>\",\"list\":[\"<redacted>\",{\"k\":\"<redacted>\"},"
        "[\"<redacted>\"]],\"type\":\"Opaque\"}");
    /* Empty data stays empty; a nested path; drop wins over redact. */
    const char *redact2[] = {"data", "spec.containers.name"};
    const char *drop2[] = {"data"};
    assert_string_equal(transformed("{\"metadata\":{\"name\":\"s\"},\"data\":{}}", NULL, 0, redact2, 1),
                        "{\"metadata\":{\"name\":\"s\"},\"data\":{}}");
    const char *out = transformed(pod, NULL, 0, redact2 + 1, 1);
    assert_non_null(strstr(out, "{\"name\":\"<redacted>\",\"env\""));
    assert_non_null(strstr(out, "{\"env\":[],\"name\":\"<redacted>\"}"));
    assert_string_equal(
        transformed("{\"metadata\":{\"name\":\"s\"},\"data\":{\"a\":\"b\"}}", drop2, 1, redact2, 1),
        "{\"metadata\":{\"name\":\"s\"}}");
}

/* Output of decoding `in` with redact paths, base64 fields those of the
 * core resource (kb_transform_base64_fields); static storage as transformed(). */
static const char *redacted_typed(const char *in, const char *resource, const char *const *redact, size_t nr) {
    kb_transform_paths_t p = {.redact = redact, .n_redact = nr};
    p.base64 = kb_transform_base64_fields("", resource, &p.n_base64);
    return transformed_paths(in, &p);
}

/* A redacted []byte value is valid base64 (of "<redacted>"); strings stay "<redacted>". */
static void test_redact_keeps_base64(void **state) {
    (void)state;
    const char *secret = "{\"metadata\":{\"name\":\"s\"},\"data\":{\"p\":\"aHVudGVyMg==\",\"q\":\"eA==\"},"
                         "\"stringData\":{\"t\":\"x\"}}";
    const char *redact[] = {"data", "stringData"};
    assert_string_equal(redacted_typed(secret, "secrets", redact, 2),
                        "{\"metadata\":{\"name\":\"s\"},\"data\":{\"p\":\"PHJlZGFjdGVkPg==\","
                        "\"q\":\"PHJlZGFjdGVkPg==\"},\"stringData\":{\"t\":\"<redacted>\"}}");
    const char *one[] = {"data.q"};
    assert_string_equal(redacted_typed(secret, "secrets", one, 1),
                        "{\"metadata\":{\"name\":\"s\"},\"data\":{\"p\":\"aHVudGVyMg==\","
                        "\"q\":\"PHJlZGFjdGVkPg==\"},\"stringData\":{\"t\":\"x\"}}");
    const char *cm = "{\"metadata\":{\"name\":\"c\"},\"data\":{\"k\":\"v\"},\"binaryData\":{\"b\":\"AAE=\"}}";
    const char *both[] = {"data", "binaryData"};
    assert_string_equal(redacted_typed(cm, "configmaps", both, 2),
                        "{\"metadata\":{\"name\":\"c\"},\"data\":{\"k\":\"<redacted>\"},"
                        "\"binaryData\":{\"b\":\"PHJlZGFjdGVkPg==\"}}");
    size_t n = 1;
    assert_null(kb_transform_base64_fields("", "pods", &n));
    assert_int_equal(n, 0);
    assert_null(kb_transform_base64_fields("example.com", "secrets", &n));
}

/* Many short values redacted: the output outgrows the input. */
static void test_redact_grows_output(void **state) {
    (void)state;
    kb_buf_t in = KB_BUF_INIT;
    kb_buf_append_str(&in, "{\"metadata\":{\"name\":\"s\",\"labels\":{\"l\":\"v\"}},\"data\":{");
    for (int k = 0; k < 2000; k++)
        kb_buf_appendf(&in, "%s\"k%d\":%d", k ? "," : "", k, k % 10);
    kb_buf_append_str(&in, "}}");
    const char *redact[] = {"data"};
    char err[128];
    kb_transform_t *tf = kb_transform_new(NULL, 0, redact, 1, err, sizeof(err));
    dec_t d;
    dec_init(&d);
    assert_int_equal(decode(&d, tf, in.data, "Secret", "v1"), KB_OK);
    assert_true(d.out.len > in.len);
    assert_non_null(strstr(d.out.data, "\"k1999\":\"<redacted>\"}}"));
    assert_span(&d.out, d.meta.name, "s");
    assert_span(&d.out, d.meta.labels, "{\"l\":\"v\"}");
    size_t s, e;
    assert_int_equal(kb_json_scan_value(d.out.data, d.out.len, &s, &e), KB_JSON_OK);
    assert_int_equal(e, d.out.len);
    kb_transform_free(tf);
    kb_buf_fini(&in);
    dec_fini(&d);
}

static void test_pretty_equals_compact(void **state) {
    (void)state;
    const char *pretty =
        "{\n  \"kind\": \"Pod\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {\n"
        "    \"name\": \"web 1\",\n    \"namespace\": \"shop\",\n    \"labels\": {\n"
        "      \"app\": \"web\"\n    },\n    \"annotations\": {\n"
        "      \"note\": \"keeps  \\\"inner\\\"  spaces\\n\",\n      \"e\": \"caf\xc3\xa9\"\n    }\n"
        "  },\n  \"spec\": {\n    \"a\": [\n      1,\n      -2.5e+3,\n      true,\n      null,\n"
        "      {},\n      []\n    ],\n    \"b\": {\r\n\t}\n  }\n}\n";
    char *compact = strip_ws(pretty);
    dec_t d;
    dec_init(&d);
    assert_int_equal(decode(&d, NULL, pretty, NULL, NULL), KB_OK);
    assert_string_equal(d.out.data, compact);
    assert_span(&d.out, d.meta.name, "web 1");
    assert_span(&d.out, d.meta.labels, "{\"app\":\"web\"}");
    free(compact);
    dec_fini(&d);
}

/* Spans are offsets: they stay right when out already holds data and is
 * reallocated while decoding. */
static void test_spans_after_realloc(void **state) {
    (void)state;
    kb_buf_t big = KB_BUF_INIT;
    kb_buf_append_str(&big, "{\"metadata\":{\"labels\":{\"x\":\"y\"},\"annotations\":{\"a\":\"");
    for (int k = 0; k < 10000; k++)
        kb_buf_append_str(&big, "0123456789");
    kb_buf_append_str(&big, "\"},\"name\":\"late\",\"namespace\":\"n\"}}");
    dec_t d;
    dec_init(&d);
    kb_buf_append_str(&d.out, "prefix already in the buffer;");
    size_t pre = d.out.len;
    assert_int_equal(kb_decode_object(NULL, big.data, big.len, "ConfigMap", "v1", &d.out, &d.meta,
                                      d.err, sizeof(d.err)),
                     KB_OK);
    assert_true(d.out.cap > 64);
    assert_memory_equal(d.out.data, "prefix already in the buffer;{\"kind\":\"ConfigMap\"", pre + 19);
    assert_span(&d.out, d.meta.name, "late");
    assert_span(&d.out, d.meta.ns, "n");
    assert_span(&d.out, d.meta.kind, "ConfigMap");
    assert_span(&d.out, d.meta.labels, "{\"x\":\"y\"}");
    kb_buf_fini(&big);
    dec_fini(&d);
}

static void test_duplicates_first_wins(void **state) {
    (void)state;
    dec_t d;
    dec_init(&d);
    assert_int_equal(decode(&d, NULL,
                            "{\"kind\":\"A\",\"kind\":\"B\",\"metadata\":{\"name\":\"one\","
                            "\"name\":\"two\"},\"metadata\":{\"name\":\"three\"}}",
                            NULL, NULL),
                     KB_OK);
    assert_span(&d.out, d.meta.kind, "A");
    assert_span(&d.out, d.meta.name, "one");
    dec_fini(&d);
}

static void test_deep_nesting(void **state) {
    (void)state;
    dec_t d;
    dec_init(&d);
    kb_buf_t in = KB_BUF_INIT;
    /* the root object + (MAX-1) arrays = MAX levels: fine */
    kb_buf_append_str(&in, "{\"metadata\":{\"name\":\"n\"},\"x\":");
    for (int k = 0; k < KB_JSON_MAX_DEPTH - 1; k++)
        kb_buf_append_char(&in, '[');
    for (int k = 0; k < KB_JSON_MAX_DEPTH - 1; k++)
        kb_buf_append_char(&in, ']');
    kb_buf_append_char(&in, '}');
    assert_int_equal(decode(&d, NULL, in.data, NULL, NULL), KB_OK);
    kb_buf_reset(&in);
    kb_buf_append_str(&in, "{\"metadata\":{\"name\":\"n\"},\"x\":");
    for (int k = 0; k < 100000; k++)
        kb_buf_append_char(&in, '[');
    assert_int_equal(decode(&d, NULL, in.data, NULL, NULL), KB_ERR_PARSE);
    assert_non_null(strstr(d.err, "deep"));
    kb_buf_fini(&in);
    dec_fini(&d);
}

static void test_malformed(void **state) {
    (void)state;
    static const char *const bad[] = {
        "",
        "   ",
        "[]",
        "\"str\"",
        "{",
        "{\"metadata\":{\"name\":\"n\"}",
        "{\"metadata\":{\"name\":\"n\"}}garbage",
        "{\"metadata\":{\"name\":\"n\"}} {}",
        "{\"metadata\":{\"name\":\"n\"},}",
        "{\"metadata\":{\"name\":\"n\"},\"a\":[1,]}",
        "{\"metadata\":{\"name\":\"n\"},\"a\":01}",
        "{\"metadata\":{\"name\":\"n\"},\"a\":\"\\q\"}",
        "{\"metadata\":{\"name\":\"n\"},\"a\" 1}",
        "{\"metadata\":{\"name\":\"n\"},\"a\":tru}",
        "{\"metadata\":{}}",                     /* no name */
        "{\"metadata\":{\"name\":5}}",           /* not a string */
        "{\"metadata\":{\"name\":\"a\\u0041\"}}", /* escaped name refused */
        "{\"metadata\":\"x\"}",
        "{\"kind\":7,\"metadata\":{\"name\":\"n\"}}",
    };
    dec_t d;
    dec_init(&d);
    kb_buf_append_str(&d.out, "keep");
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        d.err[0] = '\0';
        kb_err_t e = kb_decode_object(NULL, bad[k], strlen(bad[k]), "K", "v1", &d.out, &d.meta,
                                      d.err, sizeof(d.err));
        if (e != KB_ERR_PARSE || !d.err[0])
            fail_msg("input %zu (%s): err %d msg '%s'", k, bad[k], e, d.err);
        assert_string_equal(d.out.data, "keep"); /* nothing appended on error */
        assert_int_equal(d.meta.name.len, 0);
    }
    /* NUL inside the input */
    static const char nul[] = "{\"metadata\":{\"name\":\"a\0b\"}}";
    assert_int_equal(kb_decode_object(NULL, nul, sizeof(nul) - 1, NULL, NULL, &d.out, &d.meta,
                                      d.err, sizeof(d.err)),
                     KB_ERR_PARSE);
    dec_fini(&d);
}

static void test_transform_paths(void **state) {
    (void)state;
    char err[256];
    static const char *const good[] = {
        "metadata.managedFields", "a", "a.b.c", "a[b.c]", "a[b.c].d", "[x.y]", "a[b][c]",
        "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]",
        "metadata.labels",
    };
    static const char *const bad[] = {
        "", ".a", "a.", "a..b", "a[", "a[]", "a]", "a[b]c", "a.[b]", "kind", "apiVersion",
        "metadata", "metadata.name", "[metadata].namespace", "metadata.uid",
        "metadata.resourceVersion",
    };
    for (size_t k = 0; k < sizeof(good) / sizeof(good[0]); k++)
        if (!kb_transform_path_valid(good[k], err, sizeof(err)))
            fail_msg("%s: %s", good[k], err);
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        err[0] = '\0';
        if (kb_transform_path_valid(bad[k], err, sizeof(err)) || !err[0])
            fail_msg("'%s' accepted", bad[k]);
    }
    const char *drop[] = {"ok", "metadata.name"};
    assert_null(kb_transform_new(drop, 2, NULL, 0, err, sizeof(err)));
    assert_non_null(strstr(err, "metadata.name"));
    kb_transform_free(NULL);
}

/* Keys are compared raw: an escaped key is named by its escaped bytes. */
static void test_raw_key_compare(void **state) {
    (void)state;
    const char *in = "{\"metadata\":{\"name\":\"n\"},\"a\\/b\":1,\"a/b\":2}";
    const char *drop[] = {"[a\\/b]"};
    assert_string_equal(transformed(in, drop, 1, NULL, 0), "{\"metadata\":{\"name\":\"n\"},\"a/b\":2}");
}

/* ---- watch frames, lists, Status ---------------------------------------- */

typedef kb_err_t (*parse_fn)(const char *in, char *err, size_t err_size);

static kb_err_t parse_frame(const char *in, char *err, size_t err_size) {
    kb_watch_frame_t wf;
    return kb_decode_watch_frame(in, strlen(in), &wf, err, err_size);
}

static kb_err_t parse_list(const char *in, char *err, size_t err_size) {
    kb_list_page_t page;
    kb_err_t e = kb_decode_list(in, strlen(in), &page, err, err_size);
    if (e != KB_OK) {
        assert_null(page.items); /* left empty on error */
        assert_int_equal(page.n_items, 0);
    }
    kb_list_page_fini(&page);
    return e;
}

/* Each input is refused with KB_ERR_PARSE and a message. */
static void assert_all_parse_errors(parse_fn fn, const char *const *bad, size_t n) {
    char err[128];
    for (size_t k = 0; k < n; k++) {
        err[0] = '\0';
        if (fn(bad[k], err, sizeof(err)) != KB_ERR_PARSE || !err[0])
            fail_msg("input %zu (%s) accepted or no message", k, bad[k]);
    }
}

static void test_watch_frame_orders(void **state) {
    (void)state;
    const char *obj = "{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cm-1\"}}";
    char f1[256], f2[256];
    snprintf(f1, sizeof(f1), "{\"type\":\"MODIFIED\",\"object\":%s}\n", obj);
    snprintf(f2, sizeof(f2), " { \"object\" : %s , \"type\" : \"DELETED\" } ", obj);
    kb_watch_frame_t wf;
    char err[128];
    assert_int_equal(kb_decode_watch_frame(f1, strlen(f1), &wf, err, sizeof(err)), KB_OK);
    assert_int_equal(wf.type, KB_WATCH_MODIFIED);
    assert_memory_equal(f1 + wf.object.off, obj, strlen(obj));
    assert_int_equal(wf.object.len, strlen(obj));
    assert_int_equal(kb_decode_watch_frame(f2, strlen(f2), &wf, err, sizeof(err)), KB_OK);
    assert_int_equal(wf.type, KB_WATCH_DELETED);
    assert_memory_equal(f2 + wf.object.off, obj, strlen(obj));

    static const struct {
        const char *type;
        kb_watch_type_t want;
    } types[] = {{"ADDED", KB_WATCH_ADDED},
                 {"BOOKMARK", KB_WATCH_BOOKMARK},
                 {"ERROR", KB_WATCH_ERROR}};
    for (size_t k = 0; k < 3; k++) {
        snprintf(f1, sizeof(f1), "{\"type\":\"%s\",\"object\":{}}", types[k].type);
        assert_int_equal(kb_decode_watch_frame(f1, strlen(f1), &wf, err, sizeof(err)), KB_OK);
        assert_int_equal(wf.type, types[k].want);
    }
}

static void test_watch_frame_bad(void **state) {
    (void)state;
    static const char *const bad[] = {
        "{\"type\":\"MODIFIED\"}",
        "{\"object\":{}}",
        "{\"type\":\"UPDATED\",\"object\":{}}",
        "{\"type\":5,\"object\":{}}",
        "{\"type\":\"ADDED\",\"object\":[]}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":}}",
        "{\"type\":\"ADDED\",\"object\":{}",
        "{\"type\":\"ADDED\",\"object\":{}} x",
        "[]",
        "",
    };
    assert_all_parse_errors(parse_frame, bad, sizeof(bad) / sizeof(bad[0]));
}

static void test_bookmark_rv(void **state) {
    (void)state;
    const char *f = "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\","
                    "\"metadata\":{\"resourceVersion\":\"12746\",\"annotations\":"
                    "{\"k8s.io/initial-events-end\":\"true\"}}}}";
    kb_watch_frame_t wf;
    char err[128];
    assert_int_equal(kb_decode_watch_frame(f, strlen(f), &wf, err, sizeof(err)), KB_OK);
    assert_int_equal(wf.type, KB_WATCH_BOOKMARK);
    kb_span_t rv;
    assert_true(kb_decode_object_rv(f + wf.object.off, wf.object.len, &rv));
    assert_memory_equal(f + wf.object.off + rv.off, "12746", 5);
    assert_int_equal(rv.len, 5);
    assert_false(kb_decode_object_rv("{\"metadata\":{}}", 15, &rv));
    assert_false(kb_decode_object_rv("{\"metadata\":{\"resourceVersion\":1}}", 34, &rv));
    assert_false(kb_decode_object_rv("{}", 2, &rv));
}

static void test_error_frame_status(void **state) {
    (void)state;
    const char *f = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
                    "\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource "
                    "version: 9000 (10244)\",\"reason\":\"Expired\",\"code\":410}}";
    kb_watch_frame_t wf;
    char err[128];
    assert_int_equal(kb_decode_watch_frame(f, strlen(f), &wf, err, sizeof(err)), KB_OK);
    assert_int_equal(wf.type, KB_WATCH_ERROR);
    kb_status_t st;
    assert_int_equal(kb_decode_status(f + wf.object.off, wf.object.len, &st), KB_OK);
    assert_int_equal(st.code, 410);
    assert_string_equal(st.reason, "Expired");
    assert_string_equal(st.message, "too old resource version: 9000 (10244)");
    assert_string_equal(st.cause_reason, "");
    assert_int_equal(st.retry_after, 0);

    const char *tl = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"
                     "\"Failure\",\n \"message\":\"Timeout: Too large resource version: 20000, "
                     "current: 10245\",\"reason\":\"Timeout\",\n \"details\":{\"causes\":[{"
                     "\"reason\":\"ResourceVersionTooLarge\",\"message\":\"Too large resource "
                     "version\"}],\"retryAfterSeconds\":1},\n \"code\":504}";
    assert_int_equal(kb_decode_status(tl, strlen(tl), &st), KB_OK);
    assert_int_equal(st.code, 504);
    assert_string_equal(st.reason, "Timeout");
    assert_string_equal(st.cause_reason, "ResourceVersionTooLarge");
    assert_int_equal(st.retry_after, 1);

    /* Escapes are decoded; invalid UTF-8 does not lose the code; long
     * messages are cut at a character boundary. */
    const char *odd = "{\"code\":410,\"reason\":\"Exp\\u0069red\",\"message\":\"\xff\xfe\"}";
    assert_int_equal(kb_decode_status(odd, strlen(odd), &st), KB_OK);
    assert_int_equal(st.code, 410);
    assert_string_equal(st.reason, "Expired");
    assert_string_equal(st.message, "\xff\xfe");
    kb_buf_t lng = KB_BUF_INIT;
    kb_buf_append_str(&lng, "{\"message\":\"xy");
    for (int k = 0; k < 600; k++)
        kb_buf_append_str(&lng, "\xc3\xa9"); /* é */
    kb_buf_append_str(&lng, "\",\"code\":-3}");
    assert_int_equal(kb_decode_status(lng.data, lng.len, &st), KB_OK);
    assert_int_equal(strlen(st.message), 510); /* "xy" + 254 × 2 bytes: 511 would split one */
    assert_int_equal(st.code, 0);
    kb_buf_fini(&lng);

    assert_int_equal(kb_decode_status("Too many requests", 17, &st), KB_ERR_PARSE);
    assert_int_equal(kb_decode_status("{} x", 4, &st), KB_ERR_PARSE);
    assert_int_equal(kb_decode_status("[1]", 3, &st), KB_ERR_PARSE);
    assert_int_equal(kb_decode_status("{}", 2, &st), KB_OK);
    assert_int_equal(st.code, 0);
    assert_string_equal(st.reason, "");
}

static void test_list_pages(void **state) {
    (void)state;
    const char *p1 =
        "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\n \"metadata\":{\"resourceVersion\":"
        "\"10245\",\n \"continue\":\"eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAyNDV9\",\n"
        " \"remainingItemCount\":753},\n \"items\":[{\"metadata\":{\"name\":\"cm-1\"}} , "
        "{\"metadata\":{\"name\":\"cm-2\"},\"data\":{\"k\":\"]\"}}]}";
    kb_list_page_t page;
    char err[128];
    assert_int_equal(kb_decode_list(p1, strlen(p1), &page, err, sizeof(err)), KB_OK);
    assert_memory_equal(p1 + page.kind.off, "ConfigMapList", page.kind.len);
    assert_memory_equal(p1 + page.rv.off, "10245", page.rv.len);
    assert_int_equal(page.cont.len, 44);
    assert_memory_equal(p1 + page.cont.off, "eyJ2", 4);
    assert_int_equal(page.n_items, 2);
    assert_memory_equal(p1 + page.items[0].off, "{\"metadata\":{\"name\":\"cm-1\"}}",
                        page.items[0].len);
    assert_memory_equal(p1 + page.items[1].off,
                        "{\"metadata\":{\"name\":\"cm-2\"},\"data\":{\"k\":\"]\"}}",
                        page.items[1].len);
    kb_list_page_fini(&page);

    /* Last page: empty continue; items before metadata; many items (growth). */
    kb_buf_t p2 = KB_BUF_INIT;
    kb_buf_append_str(&p2, "{\"items\":[");
    for (int k = 0; k < 1000; k++)
        kb_buf_appendf(&p2, "%s{\"metadata\":{\"name\":\"cm-%d\"}}", k ? "," : "", k);
    kb_buf_append_str(&p2, "],\"metadata\":{\"resourceVersion\":\"7\",\"continue\":\"\"},"
                           "\"kind\":\"ConfigMapList\"}");
    assert_int_equal(kb_decode_list(p2.data, p2.len, &page, err, sizeof(err)), KB_OK);
    assert_int_equal(page.n_items, 1000);
    assert_int_equal(page.cont.len, 0);
    assert_int_equal(page.rv.len, 1);
    assert_memory_equal(p2.data + page.items[999].off, "{\"metadata\":{\"name\":\"cm-999\"}}",
                        page.items[999].len);
    kb_list_page_fini(&page);
    kb_buf_fini(&p2);

    /* No continue at all; empty items; null items. */
    const char *p3 = "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"9\"},\"items\":[]}";
    assert_int_equal(kb_decode_list(p3, strlen(p3), &page, err, sizeof(err)), KB_OK);
    assert_int_equal(page.n_items, 0);
    assert_int_equal(page.cont.len, 0);
    kb_list_page_fini(&page);
    /* The first items counts (a later one is only validated); whitespace around items. */
    const char *p5 = "{\"items\":[ {\"a\":1} ,\n{\"b\":[1,{}]} ],\"items\":[{},{},{}]}";
    assert_int_equal(kb_decode_list(p5, strlen(p5), &page, err, sizeof(err)), KB_OK);
    assert_int_equal(page.n_items, 2);
    assert_memory_equal(p5 + page.items[0].off, "{\"a\":1}", page.items[0].len);
    assert_memory_equal(p5 + page.items[1].off, "{\"b\":[1,{}]}", page.items[1].len);
    kb_list_page_fini(&page);
    const char *p6 = "{\"items\":null,\"items\":[{}]}";
    assert_int_equal(kb_decode_list(p6, strlen(p6), &page, err, sizeof(err)), KB_OK);
    assert_int_equal(page.n_items, 0);
    kb_list_page_fini(&page);
    const char *p4 = "{\"kind\":\"PodList\",\"metadata\":{},\"items\":null}";
    assert_int_equal(kb_decode_list(p4, strlen(p4), &page, err, sizeof(err)), KB_OK);
    assert_int_equal(page.n_items, 0);
    assert_int_equal(page.rv.len, 0);
    kb_list_page_fini(&page);
}

static void test_list_bad(void **state) {
    (void)state;
    static const char *const bad[] = {
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"code\":410}",
        "{\"items\":[1,2]}",
        "{\"items\":{}}",
        "{\"items\":[{}],}",
        "{\"items\":[{}]",
        "{\"items\":[{}]}{",
        "x",
        "{\"items\":[{},]}",
        "{\"items\":[{} {}]}",
        "{\"items\":[{\"a\":}]}",
        "{\"items\":[{}",
        "{\"items\":[",
        "{\"items\":[{},\"x\"]}",
    };
    assert_all_parse_errors(parse_list, bad, sizeof(bad) / sizeof(bad[0]));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_list_item_gets_kind),
        cmocka_unit_test(test_drop_managed_fields_and_annotation),
        cmocka_unit_test(test_drop_first_last_only),
        cmocka_unit_test(test_array_paths),
        cmocka_unit_test(test_redact),
        cmocka_unit_test(test_redact_keeps_base64),
        cmocka_unit_test(test_redact_grows_output),
        cmocka_unit_test(test_pretty_equals_compact),
        cmocka_unit_test(test_spans_after_realloc),
        cmocka_unit_test(test_duplicates_first_wins),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_transform_paths),
        cmocka_unit_test(test_raw_key_compare),
        cmocka_unit_test(test_watch_frame_orders),
        cmocka_unit_test(test_watch_frame_bad),
        cmocka_unit_test(test_bookmark_rv),
        cmocka_unit_test(test_error_frame_status),
        cmocka_unit_test(test_list_pages),
        cmocka_unit_test(test_list_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
