/* common/selector.h — Kubernetes label selectors: parse once, match often.
 *
 * Grammar (comma-separated requirements, all must hold):
 *   key | !key | key=value | key==value | key!=value
 *   key in (v1, v2) | key notin (v1, v2)
 * Keys are [prefix/]name of [A-Za-z0-9._-]; values the same without '/'
 * (and may be empty). key!=v and notin also match objects without the key,
 * as in Kubernetes. The empty selector matches everything.
 *
 * A compiled selector is immutable; any thread may match concurrently.
 */
#ifndef KB_COMMON_SELECTOR_H
#define KB_COMMON_SELECTOR_H

#include <stdbool.h>
#include <stddef.h>

typedef struct kb_selector kb_selector_t;

/* NULL on a syntax error, with the reason and the offending position in errstr. */
kb_selector_t *kb_selector_parse(const char *text, char *errstr, size_t errstr_size);
void kb_selector_free(kb_selector_t *sel);

/* Match against a JSON object of string labels ({"app":"web",...}); labels
 * may be NULL/len 0 for an object without labels. */
bool kb_selector_match_json(const kb_selector_t *sel, const char *labels, size_t len);

/* The number of requirements (0: the empty selector, which matches everything). */
size_t kb_selector_count(const kb_selector_t *sel);
/* Requirement i when it is an equality (key=v, key==v, key in (v1, …)): its
 * key and values (borrowed from sel); false for any other kind or i past the
 * end. An object matches it when its label key has one of the values — what a
 * label index answers without reading the object. */
bool kb_selector_equality(const kb_selector_t *sel, size_t i, const char **key, const char *const **values,
                          size_t *n_values);

/* The value of label key in a labels JSON object (as matched above): true and
 * its raw bytes [*val, *val + *vlen) when present. */
bool kb_selector_label(const char *labels, size_t len, const char *key, const char **val, size_t *vlen);

#endif
