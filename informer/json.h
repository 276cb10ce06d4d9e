/* informer/json.h — a validating JSON scanner that works on raw bytes.
 *
 * The watch path never builds a tree (docs/performance.md, "Decoding"): it
 * finds the extent of one JSON value, and the byte spans of the few members
 * it needs, in one pass. Strings are validated (escapes, control bytes) but
 * not decoded. Depth is limited to KB_JSON_MAX_DEPTH.
 *
 * Pure functions over caller memory; thread-safe.
 */
#ifndef KB_INFORMER_JSON_H
#define KB_INFORMER_JSON_H

#include <stdbool.h>
#include <stddef.h>

#define KB_JSON_MAX_DEPTH 512

typedef enum {
    KB_JSON_OK = 0,         /* a whole value was found */
    KB_JSON_INCOMPLETE = 1, /* the input ends inside a value: feed more bytes */
    KB_JSON_INVALID = 2,    /* not JSON */
} kb_json_status_t;

typedef struct kb_span {
    size_t off; /* offset into the scanned buffer */
    size_t len; /* 0 and off 0 when absent */
} kb_span_t;

/* Skip leading whitespace, then scan one value. On KB_JSON_OK *start and *end
 * are the value's offsets ([start, end)). On KB_JSON_INVALID *end is where
 * the error was found. A top-level number that reaches the end of the input
 * is OK (objects and arrays, which end with a bracket, are what callers
 * scan); a NUL byte anywhere is INVALID; bytes >= 0x80 are not checked. */
kb_json_status_t kb_json_scan_value(const char *buf, size_t len, size_t *start, size_t *end);

/* In the object at buf[0..len) (which must be one valid object), find the
 * value of member `name` (raw key bytes compared, no unescaping). Returns
 * true and the value's span, or false. */
bool kb_json_object_get(const char *buf, size_t len, const char *name, kb_span_t *value);

/* For a JSON string value span (quotes included): the span of its content
 * without the quotes. Escapes are left as they are. */
kb_span_t kb_json_string_inner(const char *buf, kb_span_t str);

/* Unescape a JSON string value (with quotes) into out (NUL-terminated, at most
 * out_size-1 bytes). Returns the length, or -1 if it is not a string or does
 * not fit. */
long kb_json_string_decode(const char *buf, kb_span_t str, char *out, size_t out_size);

#endif
