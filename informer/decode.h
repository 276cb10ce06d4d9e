/* informer/decode.h — from API-server bytes to what an event needs.
 *
 * Three shapes arrive from the API server: a watch frame
 * {"type":"MODIFIED","object":{…}}, a list page
 * {"kind":"PodList","metadata":{"resourceVersion":…,"continue":…},"items":[…]},
 * and a Status (errors). The first two are on the hot path and are decoded
 * with the raw scanner of json.h; so is Status, so that a body jansson would
 * refuse (invalid UTF-8 is passed through, see below) still yields its code.
 *
 * kb_decode_object() reads one object's identity (namespace, name, uid,
 * resourceVersion, kind, apiVersion, labels) and writes its output form into
 * a buffer in the same pass: compact (insignificant whitespace removed),
 * kind and apiVersion inserted first when missing (list items lack them),
 * drop paths removed, redact paths' values replaced by "<redacted>" (or,
 * in a base64 field, by "PHJlZGFjdGVkPg==", the base64 of "<redacted>"), and,
 * when keep paths are given, members off them removed.
 *
 * Paths: dot-separated member names; a segment in brackets is taken whole,
 * so a key with dots can be named:
 *   metadata.managedFields
 *   metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]
 *   data                        (every member of a Secret's data)
 * When a path reaches an array, the rest of the path applies to each element
 * (spec.containers.env drops env from every container).
 *
 * Path rules in detail:
 *  - Keys are compared by their raw bytes as they appear in the JSON, escapes
 *    not decoded (a key written "a\/b" is not matched by the path a/b).
 *  - Drop removes the member (key and value). Redact keeps the key: a scalar
 *    value becomes the string "<redacted>"; an object value keeps its keys
 *    and each of its member values becomes "<redacted>" (so users still see
 *    which keys a Secret's data has); an array value has each element treated
 *    as standing at the path (objects: keys kept, scalars: replaced).
 *  - A redacted value stays a valid value of its field: at or below a base64
 *    path (a []byte field: a Secret's data, a ConfigMap's binaryData, see
 *    kb_transform_base64_fields) the replacement is "PHJlZGFjdGVkPg==",
 *    which decodes to the bytes "<redacted>"; elsewhere "<redacted>". A
 *    redact path above a base64 path (redacting its parent object) writes
 *    "<redacted>": no core field of Secret or ConfigMap is nested like that.
 *  - Drop wins over redact for the same path; a path below a dropped or
 *    redacted one has no effect.
 *  - kind, apiVersion, metadata and metadata.name/namespace/uid/
 *    resourceVersion cannot be dropped or redacted (kb_transform_new and
 *    kb_transform_path_valid refuse them): they are the event's identity.
 *
 * Keep paths (keep_fields, an allow-list; none = keep everything): when any
 * is given, an object member survives only if it lies on a keep path or is
 * identity — kind, apiVersion, metadata.name/namespace/uid/resourceVersion/
 * labels — which always survives. A member where a keep path ends is kept
 * whole; a member on the way to one is kept and, when it is an object, its
 * own members are filtered by the rest of the path (for an array, each object
 * element is; scalar elements and a scalar standing where an object was
 * expected are kept as they are). Objects left empty stay as {}. Drop and
 * redact still apply inside what is kept, and drop wins over keep. Keep paths
 * may name anything, identity included ("metadata" keeps all metadata).
 *
 * Input rules of kb_decode_object: strict JSON (RFC 8259) with nesting up to
 * KB_JSON_MAX_DEPTH; a NUL byte or other control byte in a string is invalid;
 * invalid UTF-8 inside strings is passed through unchanged (not checked);
 * string escapes are kept as they are; numbers are copied verbatim; duplicate
 * keys are all kept in the output, and the first one counts for kb_objmeta_t.
 *
 * Thread-safety: a kb_transform_t is immutable after kb_transform_new() and
 * may be shared by threads. Everything else works on caller memory.
 */
#ifndef KB_INFORMER_DECODE_H
#define KB_INFORMER_DECODE_H

#include "common/buf.h"
#include "common/err.h"
#include "informer/json.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_transform kb_transform_t;

/* Compile drop and redact paths. NULL on a bad path, with the reason in errstr. */
kb_transform_t *kb_transform_new(const char *const *drop, size_t n_drop, const char *const *redact,
                                 size_t n_redact, char *errstr, size_t errstr_size);
/* Same, plus keep paths (n_keep 0: no allow-list, exactly kb_transform_new). */
kb_transform_t *kb_transform_new_keep(const char *const *drop, size_t n_drop, const char *const *redact,
                                      size_t n_redact, const char *const *keep, size_t n_keep, char *errstr,
                                      size_t errstr_size);
/* All the paths of one transform; base64 paths name []byte fields (values
 * base64 strings) so that redacting them writes valid base64. */
typedef struct kb_transform_paths {
    const char *const *drop;
    size_t n_drop;
    const char *const *redact;
    size_t n_redact;
    const char *const *keep;
    size_t n_keep;
    const char *const *base64;
    size_t n_base64;
} kb_transform_paths_t;
kb_transform_t *kb_transform_new_paths(const kb_transform_paths_t *paths, char *errstr, size_t errstr_size);
/* The base64 ([]byte) fields of a resource's objects, as paths (static
 * storage; *n 0 and NULL for a resource without any): core secrets' data,
 * core configmaps' binaryData. */
const char *const *kb_transform_base64_fields(const char *group, const char *resource, size_t *n);
void kb_transform_free(kb_transform_t *tf);
/* Check one drop or redact path (used by the config loader): syntax, and not identity. */
bool kb_transform_path_valid(const char *path, char *errstr, size_t errstr_size);
/* Check one keep path: syntax only. */
bool kb_transform_keep_path_valid(const char *path, char *errstr, size_t errstr_size);

/* Identity of one object; spans are offsets into the OUTPUT buffer of
 * kb_decode_object() (so they stay valid when it is reallocated). */
typedef struct kb_objmeta {
    kb_span_t ns, name, uid, rv;  /* string contents, quotes excluded; escapes
                                     never occur in these fields in practice and
                                     are refused (KB_ERR_PARSE), as is a value
                                     that is not a string */
    kb_span_t kind, api_version;  /* string contents in the output (same rules) */
    kb_span_t labels;             /* the metadata.labels object, braces included; len 0 if none */
    bool had_kind;                /* kind and apiVersion were present in the input */
} kb_objmeta_t;

/* Decode obj[0..len) (one JSON object) and append its output form to out.
 * kind/api_version are inserted when the input lacks them (pass NULL to
 * insert nothing). Spans in *meta are offsets from the start of out.
 * KB_ERR_PARSE with a reason in errstr if it is not a valid object or its
 * metadata.name is missing. */
kb_err_t kb_decode_object(const kb_transform_t *tf, const char *obj, size_t len, const char *kind,
                          const char *api_version, kb_buf_t *out, kb_objmeta_t *meta, char *errstr,
                          size_t errstr_size);

typedef enum {
    KB_WATCH_ADDED,
    KB_WATCH_MODIFIED,
    KB_WATCH_DELETED,
    KB_WATCH_BOOKMARK,
    KB_WATCH_ERROR,
} kb_watch_type_t;

typedef struct kb_watch_frame {
    kb_watch_type_t type;
    kb_span_t object; /* the "object" value, braces included, offsets into the frame */
} kb_watch_frame_t;

/* Split one watch frame (a JSON object). KB_ERR_PARSE for invalid JSON, a
 * missing/unknown type or a missing object. */
kb_err_t kb_decode_watch_frame(const char *frame, size_t len, kb_watch_frame_t *out, char *errstr,
                               size_t errstr_size);

/* The resourceVersion of a bookmark object (or any object): its
 * metadata.resourceVersion contents. False if absent. */
bool kb_decode_object_rv(const char *obj, size_t len, kb_span_t *rv);

typedef struct kb_list_page {
    kb_span_t kind;      /* "PodList" (contents) */
    kb_span_t rv;        /* metadata.resourceVersion (contents) */
    kb_span_t cont;      /* metadata.continue (contents); len 0 if none/empty */
    kb_span_t *items;    /* each item object, braces included; malloc'd, free with kb_list_page_fini */
    size_t n_items;
    size_t cap_items;
} kb_list_page_t;

/* Decode a list response body. Offsets refer to body. *page is overwritten
 * (kb_list_page_fini a previous result first); on error it is left empty.
 * A body without "items" is KB_ERR_PARSE (a Status is not an empty list);
 * "items":null is an empty page. */
kb_err_t kb_decode_list(const char *body, size_t len, kb_list_page_t *page, char *errstr, size_t errstr_size);
void kb_list_page_fini(kb_list_page_t *page);

/* A Kubernetes Status (error body or ERROR event object). */
typedef struct kb_status {
    int code;             /* "code", 0 if absent */
    char reason[64];      /* "Expired", "Gone", "Timeout", … ("" if absent) */
    char message[512];
    char cause_reason[64];/* details.causes[0].reason ("ResourceVersionTooLarge") */
    int retry_after;      /* details.retryAfterSeconds, 0 if absent */
} kb_status_t;

/* Parse a Status; fields absent are left empty. KB_ERR_PARSE if not JSON. */
kb_err_t kb_decode_status(const char *buf, size_t len, kb_status_t *st);

#endif
