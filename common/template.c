/* common/template.c — compile and render topic/key templates (see template.h).
 *
 * A template compiles to a list of parts: a literal, or a variable. Rendering
 * appends parts in order; the collapse rule for empty variables is applied at
 * the joints, which keeps it linear and allocation-free.
 */
#include "common/template.h"

#include "common/alloc.h"

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
} kb_tvar_t;

static const char *const kb_tvar_names[] = {"cluster", "group", "version", "resource", "kind",
                                            "namespace", "name", "uid", "type"};

struct kb_tpart {
    kb_tvar_t var;
    char *lit; /* literal text when var == KB_TV_LITERAL */
    size_t lit_len;
};

struct kb_template {
    char *text;
    struct kb_tpart *parts;
    size_t n;
    bool per_object;
};

static void kb_tpl_add(kb_template_t *t, kb_tvar_t var, const char *lit, size_t len) {
    t->parts = kb_realloc(t->parts, (t->n + 1) * sizeof(*t->parts));
    t->parts[t->n].var = var;
    t->parts[t->n].lit = var == KB_TV_LITERAL ? kb_strndup(lit, len) : NULL;
    t->parts[t->n].lit_len = len;
    t->n++;
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
        size_t len = (size_t)(end - p - 1);
        int var = -1;
        for (size_t i = 0; i < KB_ARRAY_LEN(kb_tvar_names); i++)
            if (strlen(kb_tvar_names[i]) == len && !memcmp(kb_tvar_names[i], p + 1, len))
                var = (int)i;
        if (var < 0) {
            snprintf(errstr, errstr_size,
                     "template \"%s\": unknown variable {%.*s} (known: cluster group version resource kind namespace name uid type)",
                     text, (int)len, p + 1);
            goto fail;
        }
        if (lit.len) {
            kb_tpl_add(t, KB_TV_LITERAL, lit.data, lit.len);
            kb_buf_reset(&lit);
        }
        kb_tpl_add(t, (kb_tvar_t)var, NULL, 0);
        if (var >= KB_TV_NAMESPACE)
            t->per_object = true;
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
    for (size_t i = 0; i < t->n; i++)
        free(t->parts[i].lit);
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

static void kb_tpl_value(const kb_event_t *ev, kb_tvar_t var, const char **s, size_t *n) {
    const kb_resource_t *res = ev->res;
    switch (var) {
    case KB_TV_CLUSTER: *s = res->cluster; *n = strlen(*s); break;
    case KB_TV_GROUP: *s = res->group; *n = strlen(*s); break;
    case KB_TV_VERSION: *s = res->version; *n = strlen(*s); break;
    case KB_TV_RESOURCE: *s = res->resource; *n = strlen(*s); break;
    case KB_TV_KIND: *s = kb_resource_kind(res); *n = strlen(*s); break;
    case KB_TV_NAMESPACE: *s = ev->ns; *n = ev->ns_len; break;
    case KB_TV_NAME: *s = ev->name; *n = ev->name_len; break;
    case KB_TV_UID: *s = ev->uid; *n = ev->uid_len; break;
    case KB_TV_TYPE: *s = kb_event_type_name(ev->type); *n = strlen(*s); break;
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
        kb_tpl_value(ev, part->var, &s, &n);
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
}
