/* common/selector.c — label selector parser and matcher (see selector.h).
 *
 * A selector compiles to an array of requirements. Matching walks the
 * labels JSON object once per requirement; label sets are small (a handful
 * of entries), so this beats building a map per event. Label keys and values
 * never need JSON escapes (their character set excludes them), so raw bytes
 * are compared; an object that does not parse counts as having no labels.
 */
#include "common/selector.h"

#include "common/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { KB_SEL_EXISTS, KB_SEL_NOT_EXISTS, KB_SEL_EQ, KB_SEL_NE, KB_SEL_IN, KB_SEL_NOTIN } kb_sel_op_t;

typedef struct kb_sel_req {
    kb_sel_op_t op;
    char *key;
    char **values; /* EQ/NE: one; IN/NOTIN: n */
    size_t n_values;
} kb_sel_req_t;

struct kb_selector {
    kb_sel_req_t *reqs;
    size_t n;
};

static bool kb_sel_keych(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-' || c == '/';
}

static const char *kb_sel_ws(const char *p) {
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* Read a token of key characters (values: no '/'). */
static const char *kb_sel_token(const char *p, bool is_key, char **out) {
    const char *s = p;
    while (*p && kb_sel_keych(*p) && (is_key || *p != '/'))
        p++;
    *out = kb_strndup(s, (size_t)(p - s));
    return p;
}

static void kb_sel_add_value(kb_sel_req_t *r, char *v) {
    r->values = kb_realloc(r->values, (r->n_values + 1) * sizeof(char *));
    r->values[r->n_values++] = v;
}

static bool kb_sel_word(const char *p, const char *w, const char **end) {
    size_t n = strlen(w);
    if (strncmp(p, w, n) != 0 || kb_sel_keych(p[n]))
        return false;
    *end = p + n;
    return true;
}

kb_selector_t *kb_selector_parse(const char *text, char *errstr, size_t errstr_size) {
    kb_selector_t *sel = kb_calloc(1, sizeof(*sel));
    const char *p = kb_sel_ws(text ? text : "");
    if (!*p)
        return sel;
    for (;;) {
        sel->reqs = kb_realloc(sel->reqs, (sel->n + 1) * sizeof(*sel->reqs));
        kb_sel_req_t *r = &sel->reqs[sel->n++];
        memset(r, 0, sizeof(*r));
        p = kb_sel_ws(p);
        bool neg = false;
        if (*p == '!') {
            neg = true;
            p = kb_sel_ws(p + 1);
        }
        p = kb_sel_token(p, true, &r->key);
        if (!r->key[0]) {
            snprintf(errstr, errstr_size, "label selector \"%s\": expected a key at offset %zu", text,
                     (size_t)(p - text));
            goto fail;
        }
        p = kb_sel_ws(p);
        const char *after;
        if (neg) {
            r->op = KB_SEL_NOT_EXISTS;
        } else if (*p == ',' || !*p) {
            r->op = KB_SEL_EXISTS;
        } else if (p[0] == '!' && p[1] == '=') {
            r->op = KB_SEL_NE;
            p += 2;
        } else if (p[0] == '=' && p[1] == '=') {
            r->op = KB_SEL_EQ;
            p += 2;
        } else if (p[0] == '=') {
            r->op = KB_SEL_EQ;
            p += 1;
        } else if (kb_sel_word(p, "in", &after) || kb_sel_word(p, "notin", &after)) {
            r->op = p[0] == 'i' ? KB_SEL_IN : KB_SEL_NOTIN;
            p = kb_sel_ws(after);
            if (*p != '(') {
                snprintf(errstr, errstr_size, "label selector \"%s\": expected '(' at offset %zu", text,
                         (size_t)(p - text));
                goto fail;
            }
            p++;
            for (;;) {
                char *v;
                p = kb_sel_token(kb_sel_ws(p), false, &v);
                kb_sel_add_value(r, v);
                p = kb_sel_ws(p);
                if (*p == ',') {
                    p++;
                    continue;
                }
                if (*p == ')') {
                    p++;
                    break;
                }
                snprintf(errstr, errstr_size, "label selector \"%s\": expected ',' or ')' at offset %zu", text,
                         (size_t)(p - text));
                goto fail;
            }
        } else {
            snprintf(errstr, errstr_size, "label selector \"%s\": unexpected '%c' at offset %zu", text, *p,
                     (size_t)(p - text));
            goto fail;
        }
        if (r->op == KB_SEL_EQ || r->op == KB_SEL_NE) {
            char *v;
            p = kb_sel_token(kb_sel_ws(p), false, &v);
            kb_sel_add_value(r, v);
        }
        p = kb_sel_ws(p);
        if (!*p)
            return sel;
        if (*p != ',') {
            snprintf(errstr, errstr_size, "label selector \"%s\": unexpected '%c' at offset %zu", text, *p,
                     (size_t)(p - text));
            goto fail;
        }
        p++;
    }
fail:
    kb_selector_free(sel);
    return NULL;
}

void kb_selector_free(kb_selector_t *sel) {
    if (!sel)
        return;
    for (size_t i = 0; i < sel->n; i++) {
        free(sel->reqs[i].key);
        for (size_t j = 0; j < sel->reqs[i].n_values; j++)
            free(sel->reqs[i].values[j]);
        free(sel->reqs[i].values);
    }
    free(sel->reqs);
    free(sel);
}

/* Scan a JSON string starting at p (at '"'); returns the end (after the
 * closing quote) or NULL. The content is [*s, *s + *n). */
static const char *kb_sel_jstr(const char *p, const char *end, const char **s, size_t *n) {
    if (p >= end || *p != '"')
        return NULL;
    const char *q = ++p;
    while (q < end && *q != '"') {
        if (*q == '\\')
            q++;
        q++;
    }
    if (q >= end)
        return NULL;
    *s = p;
    *n = (size_t)(q - p);
    return q + 1;
}

static const char *kb_sel_jws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Find key in the labels object; *found and its value. */
bool kb_selector_label(const char *labels, size_t len, const char *key, const char **val, size_t *vlen) {
    if (!labels || !len)
        return false;
    const char *p = kb_sel_jws(labels, labels + len), *end = labels + len;
    if (p >= end || *p != '{')
        return false;
    p++;
    size_t klen = strlen(key);
    for (;;) {
        p = kb_sel_jws(p, end);
        if (p < end && *p == '}')
            return false;
        const char *k, *v;
        size_t kn, vn;
        p = kb_sel_jstr(p, end, &k, &kn);
        if (!p)
            return false;
        p = kb_sel_jws(p, end);
        if (p >= end || *p != ':')
            return false;
        p = kb_sel_jstr(kb_sel_jws(p + 1, end), end, &v, &vn);
        if (!p)
            return false;
        if (kn == klen && !memcmp(k, key, kn)) {
            *val = v;
            *vlen = vn;
            return true;
        }
        p = kb_sel_jws(p, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        return false;
    }
}

bool kb_selector_match_json(const kb_selector_t *sel, const char *labels, size_t len) {
    for (size_t i = 0; i < sel->n; i++) {
        const kb_sel_req_t *r = &sel->reqs[i];
        const char *v = NULL;
        size_t vn = 0;
        bool has = kb_selector_label(labels, len, r->key, &v, &vn);
        bool in = false;
        for (size_t j = 0; has && j < r->n_values; j++)
            if (strlen(r->values[j]) == vn && !memcmp(r->values[j], v, vn))
                in = true;
        bool ok;
        switch (r->op) {
        case KB_SEL_EXISTS: ok = has; break;
        case KB_SEL_NOT_EXISTS: ok = !has; break;
        case KB_SEL_EQ:
        case KB_SEL_IN: ok = in; break;
        case KB_SEL_NE:
        case KB_SEL_NOTIN: ok = !in; break;
        default: ok = false;
        }
        if (!ok)
            return false;
    }
    return true;
}

size_t kb_selector_count(const kb_selector_t *sel) {
    return sel ? sel->n : 0;
}

bool kb_selector_equality(const kb_selector_t *sel, size_t i, const char **key, const char *const **values,
                          size_t *n_values) {
    if (!sel || i >= sel->n || (sel->reqs[i].op != KB_SEL_EQ && sel->reqs[i].op != KB_SEL_IN))
        return false;
    *key = sel->reqs[i].key;
    *values = (const char *const *)sel->reqs[i].values;
    *n_values = sel->reqs[i].n_values;
    return true;
}
