/* common/fields.h — read a field of a Kubernetes object from its JSON bytes,
 * and field selectors ("status.phase=Running,spec.nodeName!=n1") on them.
 *
 * No tree is built: a lookup walks the bytes once, skipping members it does
 * not need, so it suits the per-event path (route filters, templates) and
 * any reader of cached objects (the kube API's field selectors).
 *
 * The field names a selector may use are the kube API's for that resource:
 * metadata.name and metadata.namespace for all, plus per resource (Pods:
 * spec.nodeName, status.phase, …; Events: reason, type, involvedObject.*,
 * source, reportingComponent, …). A missing field, or a null, reads as ""
 * (as the API server does: "spec.nodeName=" selects unscheduled Pods).
 *
 * A parsed selector is immutable; any thread may match concurrently.
 */
#ifndef KB_COMMON_FIELDS_H
#define KB_COMMON_FIELDS_H

#include "common/buf.h"

#include <stdbool.h>
#include <stddef.h>

/* The value of member name[0..name_len) of the JSON object obj[0..len): its
 * bytes [*val, *val + *vlen) as written (a string with its quotes). False if
 * obj is not an object holding it, or does not parse up to it. */
bool kb_fields_member(const char *obj, size_t len, const char *name, size_t name_len, const char **val,
                      size_t *vlen);
/* Append the text of the JSON scalar val[0..vlen) to out: a string's content
 * with its escapes decoded, a number or true/false as written, nothing for
 * null, an object or an array. */
void kb_fields_text(const char *val, size_t vlen, kb_buf_t *out);
/* The value at path ("status.phase": member names joined by '.') as text
 * appended to out (kb_fields_text); false, appending nothing, if absent. */
bool kb_fields_get(const char *obj, size_t len, const char *path, kb_buf_t *out);

/* The object path a field selector name stands for in resource (group ""
 * for the core API): "source" of an Event is "source.component"; NULL if
 * the API server knows no such field selector for it. */
const char *kb_fields_path(const char *group, const char *resource, const char *field);

typedef struct kb_fieldsel kb_fieldsel_t;

/* Parse "f=v,f==v,f!=v" (the kube API's field selector syntax; '\' escapes
 * ',', '=', '!' and '\' in a value) for resource. NULL with the reason in
 * errstr on a syntax error or a field the resource does not know (the error
 * names it and lists the known ones). "" is the selector that matches all. */
kb_fieldsel_t *kb_fieldsel_parse(const char *text, const char *group, const char *resource, char *errstr,
                                 size_t errstr_size);
void kb_fieldsel_free(kb_fieldsel_t *sel);
/* Does the object obj[0..len) hold every requirement? */
bool kb_fieldsel_match(const kb_fieldsel_t *sel, const char *obj, size_t len);

#endif
