/* tests/fuzz/decode_oracle.h — the checks the decoder fuzz targets share.
 *
 * Header-only (static functions) so each fuzz_*.c stays one translation
 * unit. A failed check aborts, which libFuzzer reports as a crash.
 *
 * The oracle for kb_decode_object():
 *  - with no paths and no kind to insert, the output is exactly the input
 *    minus insignificant whitespace;
 *  - with paths and kind insertion, the output (appended after existing
 *    bytes) is one valid JSON object per kb_json_scan_value, and every
 *    identity span lies inside it and names a string's contents;
 *  - on failure nothing is appended and a reason is given.
 */
#ifndef KB_FUZZ_DECODE_ORACLE_H
#define KB_FUZZ_DECODE_ORACLE_H

#include "common/buf.h"
#include "informer/decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_FUZZ_CHECK(e)                                                          \
    do {                                                                          \
        if (!(e)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #e); \
            abort();                                                              \
        }                                                                         \
    } while (0)

/* in minus whitespace outside strings, appended to out. */
static void kb_fuzz_strip_ws(const char *in, size_t len, kb_buf_t *out) {
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        if (in_str) {
            kb_buf_append_char(out, c);
            if (c == '\\' && i + 1 < len)
                kb_buf_append_char(out, in[++i]);
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
            kb_buf_append_char(out, c);
        } else if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
            kb_buf_append_char(out, c);
        }
    }
}

static void kb_fuzz_check_string_span(const kb_buf_t *out, kb_span_t sp, size_t from) {
    if (!sp.len)
        return;
    KB_FUZZ_CHECK(sp.off > from && sp.off + sp.len < out->len);
    KB_FUZZ_CHECK(out->data[sp.off - 1] == '"' && out->data[sp.off + sp.len] == '"');
    KB_FUZZ_CHECK(!memchr(out->data + sp.off, '\\', sp.len));
}

static void kb_fuzz_check_output(const kb_buf_t *out, size_t from, const kb_objmeta_t *m) {
    size_t s, e;
    KB_FUZZ_CHECK(kb_json_scan_value(out->data + from, out->len - from, &s, &e) == KB_JSON_OK);
    KB_FUZZ_CHECK(s == 0 && e == out->len - from && out->data[from] == '{');
    KB_FUZZ_CHECK(out->data[out->len] == '\0');
    KB_FUZZ_CHECK(m->name.len > 0);
    const kb_span_t spans[] = {m->ns, m->name, m->uid, m->rv, m->kind, m->api_version};
    for (size_t k = 0; k < sizeof(spans) / sizeof(spans[0]); k++)
        kb_fuzz_check_string_span(out, spans[k], from);
    if (m->labels.len) {
        KB_FUZZ_CHECK(m->labels.off > from && m->labels.off + m->labels.len <= out->len);
        KB_FUZZ_CHECK(kb_json_scan_value(out->data + m->labels.off, m->labels.len, &s, &e) ==
                      KB_JSON_OK);
        KB_FUZZ_CHECK(out->data[m->labels.off] == '{' && e == m->labels.len);
    }
}

/* Run every oracle on one candidate object. */
static void kb_fuzz_check_object(const char *obj, size_t len) {
    static const char *const drop[] = {"metadata.managedFields", "spec.containers.env",
                                       "metadata.annotations[a.b/c]", "x"};
    static const char *const redact[] = {"data", "metadata.labels", "spec.containers.image"};
    char err[256], err2[256];
    kb_transform_t *tf = kb_transform_new(drop, 4, redact, 3, err, sizeof(err));
    KB_FUZZ_CHECK(tf != NULL);
    kb_buf_t out = KB_BUF_INIT, want = KB_BUF_INIT;
    kb_objmeta_t m;

    err[0] = '\0';
    kb_err_t e1 = kb_decode_object(NULL, obj, len, NULL, NULL, &out, &m, err, sizeof(err));
    if (e1 == KB_OK) {
        kb_fuzz_strip_ws(obj, len, &want);
        KB_FUZZ_CHECK(out.len == want.len && memcmp(out.data, want.data, out.len) == 0);
        kb_fuzz_check_output(&out, 0, &m);
        size_t s, e;
        KB_FUZZ_CHECK(kb_json_scan_value(obj, len, &s, &e) == KB_JSON_OK);
    } else {
        KB_FUZZ_CHECK(e1 == KB_ERR_PARSE && err[0] && out.len == 0);
    }

    kb_buf_reset(&out);
    kb_buf_append_str(&out, "prefix");
    err2[0] = '\0';
    kb_err_t e2 = kb_decode_object(tf, obj, len, "Kind", "v1", &out, &m, err2, sizeof(err2));
    KB_FUZZ_CHECK(e2 == e1); /* paths and kind never change validity */
    if (e2 == KB_OK)
        kb_fuzz_check_output(&out, 6, &m);
    else
        KB_FUZZ_CHECK(err2[0] && out.len == 6);

    kb_span_t rv;
    if (kb_decode_object_rv(obj, len, &rv))
        KB_FUZZ_CHECK(rv.off > 0 && rv.off + rv.len < len && obj[rv.off - 1] == '"');
    kb_buf_fini(&out);
    kb_buf_fini(&want);
    kb_transform_free(tf);
}

#endif
