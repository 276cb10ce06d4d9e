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

#endif
