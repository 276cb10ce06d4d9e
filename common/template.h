/* common/template.h — topic and key templates: "k8s.{cluster}.{resource}".
 *
 * Compiled once at config load (an unknown variable or an unbalanced brace is
 * a load error naming it), rendered per message without allocation beyond the
 * output buffer — except labels.KEY and annotations.KEY, whose decoded value
 * takes one small scratch buffer per render. Variables: cluster group version resource kind namespace
 * name uid type, labels.KEY and annotations.KEY (the object's label or
 * annotation KEY, "" when it has none). Any variable may carry a default,
 * "{labels.app|unknown}", rendered instead of an empty value (a default is
 * text up to the '}', escaped like a value). "{{" and "}}" are literal braces.
 *
 * Empty parts collapse cleanly: when a variable renders empty, one separator
 * ('.', '/', '-', '_', ':') next to it goes too, so "k8s/{namespace}/{name}"
 * gives "k8s/node1" for a cluster-scoped object and "{namespace}/{name}"
 * gives "node1". With KB_TEMPLATE_ESCAPE_MQTT, '/', '+', '#', '%' and NUL
 * inside a value become %2F %2B %23 %25 %00 so a value can never add a topic
 * level or a wildcard.
 *
 * A compiled template is immutable: any thread may render it concurrently.
 */
#ifndef KB_COMMON_TEMPLATE_H
#define KB_COMMON_TEMPLATE_H

#include "common/buf.h"
#include "common/event.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct kb_template kb_template_t;

#define KB_TEMPLATE_ESCAPE_MQTT 0x1u

/* NULL on error with the reason in errstr ("unknown variable {foo}"). */
kb_template_t *kb_template_compile(const char *text, char *errstr, size_t errstr_size);
void kb_template_free(kb_template_t *t);
const char *kb_template_text(const kb_template_t *t);
/* True if the template uses a per-object variable (namespace, name, uid, type, labels, annotations). */
bool kb_template_is_per_object(const kb_template_t *t);
/* Append the rendering for ev to out. */
void kb_template_render(const kb_template_t *t, const kb_event_t *ev, unsigned flags, kb_buf_t *out);

#endif
