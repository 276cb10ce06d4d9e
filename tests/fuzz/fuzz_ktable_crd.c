/* tests/fuzz/fuzz_ktable_crd.c — libFuzzer target for a CRD's printer
 * columns (bridge/ktable_crd.c): the JSONPath parser and the cells.
 *
 * Input: a column's type up to the first newline ("string", "integer",
 * "number", "boolean", "date" or anything), its jsonPath up to the second,
 * then the object (any bytes; what does not parse as JSON prints as a
 * missing object). Checks, beyond "no crash, no leak, no sanitizer report":
 * the Table written is one valid JSON document whose row has exactly two
 * cells (Name and the column), as kubectl needs.
 * Seeds: tests/fuzz/corpus/ktable_crd/.
 */
#include "bridge/ktable_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The next line of in[*at..size) as a new string. */
static char *kb_fz_line(const uint8_t *in, size_t size, size_t *at) {
    const uint8_t *nl = memchr(in + *at, '\n', size - *at);
    size_t len = nl ? (size_t)(nl - (in + *at)) : size - *at;
    char *s = malloc(len + 1);
    if (!s)
        abort();
    memcpy(s, in + *at, len);
    s[len] = '\0';
    *at += len + (nl != NULL);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 14)
        return 0;
    size_t at = 0;
    char *type = kb_fz_line(data, size, &at);
    char *path = kb_fz_line(data, size, &at);
    json_t *cols = json_pack("[{s:s,s:s,s:s}]", "name", "C", "type", type, "jsonPath", path);
    if (!cols) { /* not UTF-8: the API server never sends such a CRD */
        free(type);
        free(path);
        return 0;
    }
    kb_ktable_kind_t *kind = kb_ktable__crd_kind_new("example.com", "things", cols);
    kb_ktable_t t = {.kind = kind, .include = KB_KTABLE_NONE, .api_version = "meta.k8s.io/v1", .now_s = 1767225600};
    kb_buf_t o = KB_BUF_INIT;
    kb_ktable_one(&t, &o, (const char *)data + at, size - at);
    json_t *table = json_loadb(o.data, o.len, 0, NULL);
    json_t *cells = json_object_get(json_array_get(json_object_get(table, "rows"), 0), "cells");
    if (!table || json_array_size(cells) != 2)
        abort();
    json_decref(table);
    kb_buf_fini(&o);
    kb_ktable__crd_kind_free(kind);
    json_decref(cols);
    free(type);
    free(path);
    return 0;
}
