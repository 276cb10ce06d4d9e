/* common/fieldsel.h — field selectors, per kind, as the API server has them.
 *
 * Every resource can be selected by metadata.name and metadata.namespace;
 * a few core kinds also by fields of their own (a pod's spec.nodeName, an
 * event's involvedObject.name, …), each with a fixed way to read it from
 * the object. A kind's table (kb_fields_kind) says which labels it accepts;
 * an object's own fields are read once into a record (kb_fields_extract) —
 * the values, NUL-separated, in the table's order — and a selector is
 * matched against the identity and that record, so the history can keep the
 * record from before a change (the enter/leave rule of a watch) without
 * keeping the object. The kube API (bridge/kapi.c), the watch history
 * (informer/history.c) and routes' field_selector (sinks/router.c, checked
 * at load by config/table.c) all use this one module, so a selector means
 * the same, and is refused with the same words, everywhere.
 *
 * Grammar (k8s.io/apimachinery fields): requirements joined by ',', each
 * label=value, label==value or label!=value; '\' escapes ',', '=' and '\'
 * in a value (an unescaped '=' there, or another escape, is refused). A
 * field the object lacks reads as "" (a bool as "false", a count as "0"),
 * as in the server's field sets.
 *
 * Everything here is immutable once made; any thread may match concurrently.
 */
#ifndef KB_COMMON_FIELDSEL_H
#define KB_COMMON_FIELDSEL_H

#include "common/buf.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct kb_fields_kind kb_fields_kind_t; /* a static table row */
typedef struct kb_fieldsel kb_fieldsel_t;

/* The row of group/resource ("" = core); never NULL (a resource without a
 * row of its own takes metadata.name and metadata.namespace only). */
const kb_fields_kind_t *kb_fields_kind(const char *group, const char *resource);
/* Learn a custom resource's row from its CRD (the served version's
 * selectableFields: paths[i] is a jsonPath such as ".spec.color", at most
 * KB_FIELDS_LEARN_MAX_PATHS kept); namespaced: metadata.namespace is
 * accepted. From now on kb_fields_kind(group, resource) returns it; the row
 * stays valid until exit (a later learn of the same resource replaces it
 * for new lookups only). Thread: any. Locks: a leaf mutex for the append. */
#define KB_FIELDS_LEARN_MAX_PATHS 8 /* the API server's own limit on selectableFields */
const kb_fields_kind_t *kb_fields_kind_learn(const char *group, const char *resource, bool namespaced,
                                             const char *const *paths, size_t n);

/* Whether the kind has fields of its own (a record to extract). */
bool kb_fields_kind_has_own(const kb_fields_kind_t *kind);

/* Append obj's record for kind to out (nothing when the kind has no fields
 * of its own). obj is one JSON object (the informer's bytes; bytes that do
 * not parse read as missing fields). */
void kb_fields_extract(const kb_fields_kind_t *kind, const char *obj, size_t len, kb_buf_t *out);

/* Parse text (NULL or "" = no selector: *out NULL) for kind. false with the
 * API server's message in err on a syntax error or a label the kind does
 * not support. */
bool kb_fieldsel_parse(const kb_fields_kind_t *kind, const char *text, kb_fieldsel_t **out, char *err,
                       size_t err_size);
void kb_fieldsel_free(kb_fieldsel_t *fs);

/* Whether fs reads a field of the object's own (needs its record); false for NULL. */
bool kb_fieldsel_needs_record(const kb_fieldsel_t *fs);

/* Does the object with this identity and record (from kb_fields_extract of
 * fs's kind; may be NULL/0 when !kb_fieldsel_needs_record) match? NULL fs
 * matches everything. */
bool kb_fieldsel_match(const kb_fieldsel_t *fs, const char *ns, size_t ns_len, const char *name, size_t name_len,
                       const char *rec, size_t rec_len);

/* The equality requirement (label=value, not !=) of fs on the kind's own
 * field that comes first in the kind's table (a pod's spec.nodeName before
 * its status.phase): true with the field's index in the record and the value
 * (borrowed from fs). An object fs matches has that value there — what the
 * watch history files a watcher under. False for NULL or when there is none. */
bool kb_fieldsel_own_equality(const kb_fieldsel_t *fs, int *field, const char **value, size_t *len);
/* Field i (an index as above) of a record: [ret, ret + *len); "" when the
 * record has none. */
const char *kb_fields_rec_value(const char *rec, size_t rec_len, int i, size_t *len);

#endif
