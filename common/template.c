/* common/template.c — compile and render topic/key templates (see template.h).
 *
 * A template compiles to a list of parts: a literal, or a variable. Rendering
 * appends parts in order; the collapse rule for empty variables is applied at
 * the joints, which keeps it linear and allocation-free.
 *
 * {labels.KEY} reads the labels span the decoder already found in the event;
 * {annotations.KEY} reads the annotations span, which the event finds in its
 * object bytes the first time any template asks and then remembers
 * (kb_event_annotations): a route that never names an annotation never pays
 * for the lookup, and several that do pay once per event.
 */
#include "common/template.h"

#include "common/alloc.h"
#include "common/fields.h"
#include "common/selector.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    KB_TV_LITERAL = -1,
    KB_TV_CLUSTER,
    KB_TV_GROUP,
    KB_TV_VERSION,
    KB_TV_RESOURCE,
    KB_TV_KIND,
    KB_TV_NAMESPACE,
    KB_TV_NAME,
    KB_TV_UID,
    KB_TV_TYPE,
    KB_TV_LABEL,      /* {labels.KEY} */
    KB_TV_ANNOTATION, /* {annotations.KEY} */
} kb_tvar_t;

static const char *const kb_tvar_names[] = {"cluster", "group", "version", "resource", "kind",
                                            "namespace", "name", "uid", "type"};

struct kb_tpart {
    kb_tvar_t var;
    char *lit; /* literal text when var == KB_TV_LITERAL; the KEY of a label or annotation */
    size_t lit_len;
    char *def; /* "|default": rendered when the variable is empty; NULL = none */
    size_t def_len;
};

struct kb_template {
    char *text;
    struct kb_tpart *parts;
    size_t n;
    bool per_object;
};

static struct kb_tpart *kb_tpl_add(kb_template_t *t, kb_tvar_t var, const char *lit, size_t len) {
    t->parts = kb_realloc(t->parts, (t->n + 1) * sizeof(*t->parts));
    struct kb_tpart *part = &t->parts[t->n++];
    memset(part, 0, sizeof(*part));
    part->var = var;
    part->lit = lit ? kb_strndup(lit, len) : NULL;
    part->lit_len = len;
    return part;
}

static bool kb_tpl_keych(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-' || c == '/';
}

/* A label or annotation key: [prefix/]name of letters, digits, '.', '_', '-'. */
static bool kb_tpl_key_valid(const char *k, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!kb_tpl_keych(k[i]))
            return false;
    return n > 0;
}

/* The variable named s[0..len) ("name", "labels.app"): its kind, and for a
 * label or annotation its key in [*key, *key + *key_len). -1 if unknown. */
static int kb_tpl_var(const char *s, size_t len, const char **key, size_t *key_len) {
    static const struct {
        const char *prefix;
        kb_tvar_t var;
    } maps[] = {{"labels.", KB_TV_LABEL}, {"annotations.", KB_TV_ANNOTATION}};
    for (size_t i = 0; i < KB_ARRAY_LEN(maps); i++) {
        size_t pl = strlen(maps[i].prefix);
        if (len >= pl && !memcmp(s, maps[i].prefix, pl)) {
            *key = s + pl;
            *key_len = len - pl;
            return (int)maps[i].var;
        }
    }
    for (size_t i = 0; i < KB_ARRAY_LEN(kb_tvar_names); i++)
        if (strlen(kb_tvar_names[i]) == len && !memcmp(kb_tvar_names[i], s, len))
            return (int)i;
    return -1;
}

/* Compile the variable between '{' at p and '}' at end into t. */
static bool kb_tpl_compile_var(kb_template_t *t, const char *text, const char *p, const char *end, char *errstr,
                               size_t errstr_size) {
    size_t len = (size_t)(end - p - 1);
    const char *bar = memchr(p + 1, '|', len);
    const char *open = memchr(p + 1, '{', len);
    if (open) {
        snprintf(errstr, errstr_size, "template \"%s\": '{' inside {%.*s}", text, (int)len, p + 1);
        return false;
    }
    size_t nlen = bar ? (size_t)(bar - p - 1) : len;
    const char *key = NULL;
    size_t key_len = 0;
    int var = kb_tpl_var(p + 1, nlen, &key, &key_len);
    if (var < 0) {
        snprintf(errstr, errstr_size,
                 "template \"%s\": unknown variable {%.*s} (known: cluster group version resource kind namespace "
                 "name uid type labels.KEY annotations.KEY, each with an optional |default)",
                 text, (int)nlen, p + 1);
        return false;
    }
    if (key && !kb_tpl_key_valid(key, key_len)) {
        snprintf(errstr, errstr_size,
                 "template \"%s\": {%.*s}: %s is [prefix/]name of letters, digits, '.', '_', '-' and '/'", text,
                 (int)nlen, p + 1, var == KB_TV_LABEL ? "a label key" : "an annotation key");
        return false;
    }
    struct kb_tpart *part = kb_tpl_add(t, (kb_tvar_t)var, key, key_len);
    if (bar) {
        part->def_len = (size_t)(end - bar - 1);
        part->def = kb_strndup(bar + 1, part->def_len);
    }
    if (var >= KB_TV_NAMESPACE)
        t->per_object = true;
    return true;
}

kb_template_t *kb_template_compile(const char *text, char *errstr, size_t errstr_size) {
    kb_template_t *t = kb_calloc(1, sizeof(*t));
    t->text = kb_strdup(text);
    kb_buf_t lit = KB_BUF_INIT;
    for (const char *p = text; *p;) {
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            kb_buf_append_char(&lit, p[0]);
            p += 2;
            continue;
        }
        if (*p == '}') {
            snprintf(errstr, errstr_size, "template \"%s\": unbalanced '}' (write \"}}\" for a literal brace)", text);
            goto fail;
        }
        if (*p != '{') {
            kb_buf_append_char(&lit, *p++);
            continue;
        }
        const char *end = strchr(p, '}');
        if (!end) {
            snprintf(errstr, errstr_size, "template \"%s\": '{' without a closing '}'", text);
            goto fail;
        }
        if (lit.len) {
            kb_tpl_add(t, KB_TV_LITERAL, lit.data, lit.len);
            kb_buf_reset(&lit);
        }
        if (!kb_tpl_compile_var(t, text, p, end, errstr, errstr_size))
            goto fail;
        p = end + 1;
    }
    if (lit.len)
        kb_tpl_add(t, KB_TV_LITERAL, lit.data, lit.len);
    kb_buf_fini(&lit);
    return t;
fail:
    kb_buf_fini(&lit);
    kb_template_free(t);
    return NULL;
}

void kb_template_free(kb_template_t *t) {
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++) {
        free(t->parts[i].lit);
        free(t->parts[i].def);
    }
    free(t->parts);
    free(t->text);
    free(t);
}

const char *kb_template_text(const kb_template_t *t) {
    return t->text;
}

bool kb_template_is_per_object(const kb_template_t *t) {
    return t->per_object;
}

static bool kb_is_sep(char c) {
    return c == '.' || c == '/' || c == '-' || c == '_' || c == ':';
}

/* The value of label or annotation key in the JSON object span [obj, obj + len), decoded into tmp. */
static void kb_tpl_member(const char *obj, size_t len, const struct kb_tpart *part, kb_buf_t *tmp, const char **s,
                          size_t *n) {
    const char *v;
    size_t vlen;
    kb_buf_reset(tmp);
    if (len && kb_fields_member(obj, len, part->lit, part->lit_len, &v, &vlen))
        kb_fields_text(v, vlen, tmp);
    *s = tmp->data ? tmp->data : "";
    *n = tmp->len;
}

static void kb_tpl_value(const kb_event_t *ev, const struct kb_tpart *part, kb_buf_t *tmp, const char **s,
                         size_t *n) {
    const kb_resource_t *res = ev->res;
    const char *span;
    size_t span_len;
    switch (part->var) {
    case KB_TV_CLUSTER: *s = res->cluster; *n = strlen(*s); break;
    case KB_TV_GROUP: *s = res->group; *n = strlen(*s); break;
    case KB_TV_VERSION: *s = res->version; *n = strlen(*s); break;
    case KB_TV_RESOURCE: *s = res->resource; *n = strlen(*s); break;
    case KB_TV_KIND: *s = kb_resource_kind(res); *n = strlen(*s); break;
    case KB_TV_NAMESPACE: *s = ev->ns; *n = ev->ns_len; break;
    case KB_TV_NAME: *s = ev->name; *n = ev->name_len; break;
    case KB_TV_UID: *s = ev->uid; *n = ev->uid_len; break;
    case KB_TV_TYPE: *s = kb_event_type_name(ev->type); *n = strlen(*s); break;
    case KB_TV_LABEL: kb_tpl_member(ev->obj + ev->labels_off, ev->labels_len, part, tmp, s, n); break;
    case KB_TV_ANNOTATION:
        kb_event_annotations(ev, &span, &span_len);
        kb_tpl_member(span, span_len, part, tmp, s, n);
        break;
    default: *s = ""; *n = 0; break;
    }
}

static void kb_tpl_append_escaped(kb_buf_t *out, const char *s, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const char *esc = NULL;
        switch (s[i]) {
        case '/': esc = "%2F"; break;
        case '+': esc = "%2B"; break;
        case '#': esc = "%23"; break;
        case '%': esc = "%25"; break;
        case '\0': esc = "%00"; break;
        default: continue;
        }
        kb_buf_append(out, s + run, i - run);
        kb_buf_append(out, esc, 3);
        run = i + 1;
    }
    kb_buf_append(out, s + run, n - run);
}

void kb_template_render(const kb_template_t *t, const kb_event_t *ev, unsigned flags, kb_buf_t *out) {
    size_t start = out->len;
    kb_buf_t tmp = KB_BUF_INIT; /* a decoded label or annotation value */
    bool prev_empty = false; /* the previous part was a variable that rendered empty */
    for (size_t i = 0; i < t->n; i++) {
        const struct kb_tpart *part = &t->parts[i];
        if (part->var == KB_TV_LITERAL) {
            const char *s = part->lit;
            size_t n = part->lit_len;
            /* Drop one separator next to an empty variable: the one already
             * written before it, or, at the very start, the one after it. */
            if (prev_empty && n && kb_is_sep(s[0])) {
                if (out->len > start && kb_is_sep(out->data[out->len - 1]))
                    out->len--;
                else if (out->len == start) {
                    s++;
                    n--;
                }
            }
            kb_buf_append(out, s, n);
            prev_empty = false;
            continue;
        }
        const char *s;
        size_t n;
        kb_tpl_value(ev, part, &tmp, &s, &n);
        if (!n && part->def) {
            s = part->def;
            n = part->def_len;
        }
        if (flags & KB_TEMPLATE_ESCAPE_MQTT)
            kb_tpl_append_escaped(out, s, n);
        else
            kb_buf_append(out, s, n);
        prev_empty = n == 0;
    }
    /* A trailing empty variable leaves no dangling separator. */
    if (prev_empty && out->len > start && kb_is_sep(out->data[out->len - 1]))
        out->len--;
    if (out->data)
        out->data[out->len] = '\0';
    kb_buf_fini(&tmp);
}
