/* tests/fuzz/fuzz_fieldsel.c — libFuzzer target for field selectors.
 *
 * Input: one byte naming the kind (p pods, e events, s secrets, n nodes,
 * N namespaces, j jobs, r replicasets, v events.k8s.io events, c a custom
 * resource whose CRD's selectableFields were learned, anything else
 * configmaps), the
 * selector text up to the first newline, then the object (any bytes: a
 * record is read only from what scans as one JSON object, as the informer
 * guarantees). Checks, beyond "no crash, no leak, no sanitizer report":
 *  - a refused selector always says why, in one of the server's wordings;
 *  - matching is a pure function (same answer twice);
 *  - a record cut short (another kind's, or none) is read as missing
 *    fields, never past its end.
 * Seeds: tests/fuzz/corpus/fieldsel/.
 */
#include "common/fieldsel.h"
#include "informer/json.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const kb_fields_kind_t *kb_fz_kind(char c) {
    switch (c) {
    case 'p': return kb_fields_kind("", "pods");
    case 'e': return kb_fields_kind("", "events");
    case 's': return kb_fields_kind("", "secrets");
    case 'n': return kb_fields_kind("", "nodes");
    case 'N': return kb_fields_kind("", "namespaces");
    case 'j': return kb_fields_kind("batch", "jobs");
    case 'r': return kb_fields_kind("apps", "replicasets");
    case 'v': return kb_fields_kind("events.k8s.io", "events");
    case 'c': {
        static const kb_fields_kind_t *learned;
        static const char *const paths[] = {".spec.color", ".spec.size", ".spec.on", ".status.a.b"};
        if (!learned)
            learned = kb_fields_kind_learn("example.com", "gadgets", true, paths, 4);
        return learned;
    }
    default: return kb_fields_kind("", "configmaps");
    }
}

static bool kb_fz_says_why(const char *err) {
    static const char *const starts[] = {"field label not supported: ", "\"", "invalid selector: '",
                                         "invalid field selector: ", "fieldSelector: more than"};
    for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++)
        if (!strncmp(err, starts[i], strlen(starts[i])))
            return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 1 << 14)
        return 0;
    const kb_fields_kind_t *kind = kb_fz_kind((char)data[0]);
    data++;
    size--;
    const uint8_t *nl = memchr(data, '\n', size);
    size_t tlen = nl ? (size_t)(nl - data) : size;
    char *text = malloc(tlen + 1);
    if (!text)
        return 0;
    memcpy(text, data, tlen);
    text[tlen] = '\0';
    const char *obj = nl ? (const char *)nl + 1 : "";
    size_t olen = nl ? size - tlen - 1 : 0;

    char err[512] = "";
    kb_fieldsel_t *fs = NULL;
    if (!kb_fieldsel_parse(kind, text, &fs, err, sizeof(err))) {
        if (!kb_fz_says_why(err))
            abort();
        free(text);
        return 0;
    }
    kb_buf_t rec;
    kb_buf_init(&rec);
    size_t s = 0, e = 0;
    if (kb_json_scan_value(obj, olen, &s, &e) == KB_JSON_OK && obj[s] == '{')
        kb_fields_extract(kind, obj + s, e - s, &rec);
    bool a = kb_fieldsel_match(fs, "ns", 2, "name", 4, rec.data, rec.len);
    bool b = kb_fieldsel_match(fs, "ns", 2, "name", 4, rec.data, rec.len);
    if (a != b)
        abort();
    for (size_t cut = 0; cut < rec.len; cut += 1 + rec.len / 4) {
        char *copy = malloc(cut ? cut : 1);
        if (!copy)
            break;
        memcpy(copy, rec.data, cut);
        (void)kb_fieldsel_match(fs, "ns", 2, "name", 4, copy, cut);
        free(copy);
    }
    kb_buf_fini(&rec);
    kb_fieldsel_free(fs);
    free(text);
    return 0;
}
