/* common/fields.h — read members of a Kubernetes object from its JSON bytes.
 *
 * No tree is built: a lookup walks the bytes once, skipping members it does
 * not need, so it suits the per-event path (templates' {labels.KEY}, the
 * field records of common/fieldsel.h). Field selectors themselves, with the
 * kube API's names per kind, are common/fieldsel.h.
 *
 * Pure functions over caller memory; thread-safe.
 */
#ifndef KB_COMMON_FIELDS_H
#define KB_COMMON_FIELDS_H

#include "common/buf.h"

#include <stdbool.h>
#include <stddef.h>

/* Walks the members of one JSON object in order (kb_fields_iter_init, then
 * kb_fields_iter_next until false). Caller storage; borrows the bytes. */
typedef struct kb_fields_iter {
    const char *p; /* the next member's opening quote; NULL when done */
    const char *e; /* end of the bytes */
} kb_fields_iter_t;

/* Start at the object obj[0..len); false (and an empty walk) if it does not open with '{'. */
bool kb_fields_iter_init(kb_fields_iter_t *it, const char *obj, size_t len);
/* The next member: its name as written, without quotes or unescaping, and
 * its value's bytes as written. False at the end, or at bytes that do not
 * parse (the walk then stays ended). */
bool kb_fields_iter_next(kb_fields_iter_t *it, const char **key, size_t *klen, const char **val, size_t *vlen);

/* The value of member name[0..name_len) of the JSON object obj[0..len): its
 * bytes [*val, *val + *vlen) as written (a string with its quotes); the
 * first such member. False if obj is not an object holding it, or does not
 * parse up to it. */
bool kb_fields_member(const char *obj, size_t len, const char *name, size_t name_len, const char **val,
                      size_t *vlen);
/* Append the text of the JSON scalar val[0..vlen) to out: a string's content
 * with its escapes decoded, a number or true/false as written, nothing for
 * null, an object or an array. */
void kb_fields_text(const char *val, size_t vlen, kb_buf_t *out);
/* The value at path ("status.phase": member names joined by '.') as text
 * appended to out (kb_fields_text); false, appending nothing, if absent. */
bool kb_fields_get(const char *obj, size_t len, const char *path, kb_buf_t *out);

#endif
