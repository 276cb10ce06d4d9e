/* tests/kubesim/select.c — label and field selectors.
 *
 * Design: a selector is parsed once per request into a list of requirements
 * (all must hold) and matched against an object's pre-parsed labels, so a
 * watch pays one small loop per event, never a JSON parse. The grammar is
 * the subset of apimachinery's labels.Parse that clients send:
 *   key, !key, key=v, key==v, key!=v, key in (a,b), key notin (a,b)
 * Like the real server, `!=` and `notin` also match objects without the key.
 * Field selectors accept metadata.name and metadata.namespace with =, ==, !=.
 *
 * Shard selectors (feature gate ShardedListAndWatch, kube-apiserver 1.36) are
 * written here from the API's documentation, not from kbridge's code, so a
 * test compares two implementations: shardRange(field, 'start', 'end') joined
 * by ||, bounds of exactly 16 hex digits or 2^64, matched on FNV-1a 64 of
 * metadata.uid or metadata.namespace.
 */
#include "tests/kubesim/kubesim_int.h"

#include "common/alloc.h"
#include "common/hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kb_sim__sel_fini(kb_sel_t *sel) {
    for (size_t i = 0; i < sel->nreqs; i++) {
        free(sel->reqs[i].key);
        for (size_t j = 0; j < sel->reqs[i].nvals; j++)
            free(sel->reqs[i].vals[j]);
        free(sel->reqs[i].vals);
    }
    free(sel->reqs);
    sel->reqs = NULL;
    sel->nreqs = 0;
}

static void skip_ws(const char **p) {
    while (**p == ' ' || **p == '\t')
        (*p)++;
}

/* A key or value token: anything up to a delimiter. */
static char *take_token(const char **p) {
    const char *s = *p;
    while (**p && !strchr(" \t,=!()<>", **p))
        (*p)++;
    return (*p > s) ? kb_strndup(s, (size_t)(*p - s)) : NULL;
}

static kb_sel_req_t *add_req(kb_sel_t *sel, kb_sel_op_t op, char *key) {
    sel->reqs = kb_realloc(sel->reqs, (sel->nreqs + 1) * sizeof(*sel->reqs));
    kb_sel_req_t *r = &sel->reqs[sel->nreqs++];
    memset(r, 0, sizeof(*r));
    r->op = op;
    r->key = key;
    return r;
}

static void add_val(kb_sel_req_t *r, char *val) {
    r->vals = kb_realloc(r->vals, (r->nvals + 1) * sizeof(*r->vals));
    r->vals[r->nvals++] = val;
}

/* "in (a, b)" after the key; *p at the '('. */
static int parse_set(const char **p, kb_sel_req_t *r, char *errstr, size_t errstr_size) {
    if (**p != '(') {
        snprintf(errstr, errstr_size, "expected '(' after %s", r->op == KB_SEL_IN ? "in" : "notin");
        return -1;
    }
    (*p)++;
    for (;;) {
        skip_ws(p);
        char *v = take_token(p);
        add_val(r, v ? v : kb_strdup(""));
        skip_ws(p);
        if (**p == ',') {
            (*p)++;
            continue;
        }
        if (**p == ')') {
            (*p)++;
            return 0;
        }
        snprintf(errstr, errstr_size, "unterminated value set for key %s", r->key);
        return -1;
    }
}

static bool word_at(const char *p, const char *w) {
    size_t n = strlen(w);
    return strncmp(p, w, n) == 0 && (p[n] == ' ' || p[n] == '\t' || p[n] == '(');
}

/* One requirement; *p on its first byte. */
static int parse_req(const char **p, kb_sel_t *sel, char *errstr, size_t errstr_size) {
    skip_ws(p);
    if (**p == '!') {
        (*p)++;
        skip_ws(p);
        char *key = take_token(p);
        if (!key) {
            snprintf(errstr, errstr_size, "missing key after '!'");
            return -1;
        }
        add_req(sel, KB_SEL_NOTEXISTS, key);
        return 0;
    }
    char *key = take_token(p);
    if (!key) {
        snprintf(errstr, errstr_size, "expected a key at '%s'", *p);
        return -1;
    }
    skip_ws(p);
    kb_sel_op_t op;
    if (**p == '\0' || **p == ',') {
        add_req(sel, KB_SEL_EXISTS, key);
        return 0;
    } else if ((*p)[0] == '=' && (*p)[1] == '=') {
        op = KB_SEL_EQ, *p += 2;
    } else if ((*p)[0] == '=') {
        op = KB_SEL_EQ, *p += 1;
    } else if ((*p)[0] == '!' && (*p)[1] == '=') {
        op = KB_SEL_NE, *p += 2;
    } else if (word_at(*p, "in")) {
        op = KB_SEL_IN, *p += 2;
    } else if (word_at(*p, "notin")) {
        op = KB_SEL_NOTIN, *p += 5;
    } else {
        snprintf(errstr, errstr_size, "unknown operator after key %s at '%s'", key, *p);
        free(key);
        return -1;
    }
    kb_sel_req_t *r = add_req(sel, op, key);
    skip_ws(p);
    if (op == KB_SEL_IN || op == KB_SEL_NOTIN)
        return parse_set(p, r, errstr, errstr_size);
    char *v = take_token(p);
    add_val(r, v ? v : kb_strdup(""));
    return 0;
}

int kb_sim__labelsel_parse(const char *text, kb_sel_t *sel, char *errstr, size_t errstr_size) {
    memset(sel, 0, sizeof(*sel));
    if (!text)
        return 0;
    const char *p = text;
    skip_ws(&p);
    if (!*p)
        return 0;
    for (;;) {
        if (parse_req(&p, sel, errstr, errstr_size) < 0)
            goto fail;
        skip_ws(&p);
        if (*p == '\0')
            return 0;
        if (*p != ',') {
            snprintf(errstr, errstr_size, "unexpected '%c' in selector", *p);
            goto fail;
        }
        p++;
    }
fail:
    kb_sim__sel_fini(sel);
    return -1;
}

int kb_sim__fieldsel_parse(const char *text, kb_sel_t *sel, char *errstr, size_t errstr_size) {
    if (kb_sim__labelsel_parse(text, sel, errstr, errstr_size) < 0)
        return -1;
    for (size_t i = 0; i < sel->nreqs; i++) {
        kb_sel_req_t *r = &sel->reqs[i];
        if (r->op != KB_SEL_EQ && r->op != KB_SEL_NE) {
            snprintf(errstr, errstr_size, "invalid field selector requirement on %s", r->key);
            goto fail;
        }
        if (strcmp(r->key, "metadata.name") != 0 && strcmp(r->key, "metadata.namespace") != 0) {
            snprintf(errstr, errstr_size, "field label not supported: %s", r->key);
            goto fail;
        }
    }
    return 0;
fail:
    kb_sim__sel_fini(sel);
    return -1;
}

static const char *label_get(const kb_sim_label_t *labels, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(labels[i].key, key) == 0)
            return labels[i].val;
    return NULL;
}

static bool in_set(const kb_sel_req_t *r, const char *v) {
    for (size_t i = 0; i < r->nvals; i++)
        if (strcmp(r->vals[i], v) == 0)
            return true;
    return false;
}

static bool req_match(const kb_sel_req_t *r, const char *v) {
    switch (r->op) {
    case KB_SEL_EXISTS: return v != NULL;
    case KB_SEL_NOTEXISTS: return v == NULL;
    case KB_SEL_EQ:
    case KB_SEL_IN: return v != NULL && in_set(r, v);
    case KB_SEL_NE:
    case KB_SEL_NOTIN: return v == NULL || !in_set(r, v);
    }
    return false;
}

bool kb_sim__labelsel_match(const kb_sel_t *sel, const kb_sim_label_t *labels, size_t nlabels) {
    for (size_t i = 0; i < sel->nreqs; i++)
        if (!req_match(&sel->reqs[i], label_get(labels, nlabels, sel->reqs[i].key)))
            return false;
    return true;
}

bool kb_sim__fieldsel_match(const kb_sel_t *sel, const char *ns, const char *name) {
    for (size_t i = 0; i < sel->nreqs; i++) {
        const kb_sel_req_t *r = &sel->reqs[i];
        const char *v = strcmp(r->key, "metadata.name") == 0 ? name : ns;
        if (!req_match(r, v))
            return false;
    }
    return true;
}

/* ---- shard selectors (ShardedListAndWatch) ------------------------------ */

/* A quoted hex bound: '0x' and 16 lowercase hex digits, or 2^64 as
 * '0x10000000000000000' (*top) — the only forms kube-apiserver accepts. */
static int shard_bound(const char **p, uint64_t *v, bool *top, char *text, size_t text_size, char *errstr,
                       size_t errstr_size) {
    char q = **p;
    if (q != '\'' && q != '"') {
        snprintf(errstr, errstr_size, "shardRange() bounds must be string literals (e.g. '0xff')");
        return -1;
    }
    const char *s = ++*p, *e = strchr(s, q);
    if (!e) {
        snprintf(errstr, errstr_size, "unterminated string literal in shardRange()");
        return -1;
    }
    size_t n = (size_t)(e - s);
    *p = e + 1;
    snprintf(text, text_size, "%.*s", (int)n, s);
    *top = n == 19 && !strncmp(s, "0x10000000000000000", 19);
    *v = 0;
    if (*top)
        return 0;
    if (n != 18 || strncmp(s, "0x", 2) != 0) {
        snprintf(errstr, errstr_size, "shard range bound must be a 0x-prefixed 16-digit hex value, got \"%s\"", text);
        return -1;
    }
    for (size_t i = 2; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            snprintf(errstr, errstr_size, "invalid hex character '%c' in \"%s\"", c, text);
            return -1;
        }
        *v = (*v << 4) | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    return 0;
}

static bool shard_expect(const char **p, char c) {
    skip_ws(p);
    if (**p != c)
        return false;
    (*p)++;
    skip_ws(p);
    return true;
}

/* One shardRange(field, 'start', 'end') at *p into s->r[s->n]. */
static int shard_range(const char **p, kb_shardsel_t *s, char *errstr, size_t errstr_size) {
    static const char fn[] = "shardRange";
    if (strncmp(*p, fn, sizeof(fn) - 1) != 0) {
        snprintf(errstr, errstr_size, "only shardRange() and || are allowed, at \"%.40s\"", *p);
        return -1;
    }
    *p += sizeof(fn) - 1;
    if (!shard_expect(p, '(')) {
        snprintf(errstr, errstr_size, "expected ( after shardRange");
        return -1;
    }
    const char *f = *p;
    while (**p && (strchr("abcdefghijklmnopqrstuvwxyz.", **p) != NULL))
        (*p)++;
    size_t flen = (size_t)(*p - f);
    bool by_ns = flen == 25 && !strncmp(f, "object.metadata.namespace", 25);
    if (!by_ns && !(flen == 19 && !strncmp(f, "object.metadata.uid", 19))) {
        snprintf(errstr, errstr_size, "unsupported field path \"%.*s\"; supported: object.metadata.uid, "
                 "object.metadata.namespace", (int)flen, f);
        return -1;
    }
    if (s->n && s->by_ns != by_ns) {
        snprintf(errstr, errstr_size, "all shard ranges must use the same field");
        return -1;
    }
    if (s->n == KB_SIM_SHARD_RANGES) {
        snprintf(errstr, errstr_size, "kubesim takes at most %d shard ranges", KB_SIM_SHARD_RANGES);
        return -1;
    }
    s->by_ns = by_ns;
    char a[24], b[24];
    bool a_top;
    if (!shard_expect(p, ',') || shard_bound(p, &s->r[s->n].start, &a_top, a, sizeof(a), errstr, errstr_size) < 0)
        return -1;
    if (!shard_expect(p, ',') || shard_bound(p, &s->r[s->n].end, &s->r[s->n].end_top, b, sizeof(b), errstr,
                                             errstr_size) < 0)
        return -1;
    if (!shard_expect(p, ')')) {
        snprintf(errstr, errstr_size, "shardRange() requires exactly 3 arguments");
        return -1;
    }
    if (a_top || (!s->r[s->n].end_top && s->r[s->n].start >= s->r[s->n].end)) {
        snprintf(errstr, errstr_size, "shard range start %s must be less than end %s", a, b);
        return -1;
    }
    size_t used = strlen(s->text);
    snprintf(s->text + used, sizeof(s->text) - used, "%sshardRange(%.*s, '%s', '%s')", s->n ? " || " : "",
             (int)flen, f, a, b);
    s->n++;
    return 0;
}

int kb_sim__shardsel_parse(const char *text, kb_shardsel_t *s, char *errstr, size_t errstr_size) {
    memset(s, 0, sizeof(*s));
    if (!text)
        return 0;
    const char *p = text;
    skip_ws(&p);
    if (!*p) {
        snprintf(errstr, errstr_size, "empty shard selector is not allowed; omit the parameter for unfiltered lists");
        return -1;
    }
    for (;;) {
        if (shard_range(&p, s, errstr, errstr_size) < 0)
            goto fail;
        skip_ws(&p);
        if (!*p)
            return 0;
        if (strncmp(p, "||", 2) != 0) {
            snprintf(errstr, errstr_size, "unexpected \"%.20s\" in shard selector", p);
            goto fail;
        }
        p += 2;
        skip_ws(&p);
    }
fail:
    memset(s, 0, sizeof(*s));
    return -1;
}

bool kb_sim__shardsel_match(const kb_shardsel_t *s, const char *ns, const char *uid) {
    if (!s->n)
        return true;
    const char *v = s->by_ns ? ns : uid;
    uint64_t h = kb_fnv1a64(v, strlen(v));
    for (size_t i = 0; i < s->n; i++)
        if (h >= s->r[i].start && (s->r[i].end_top || h < s->r[i].end))
            return true;
    return false;
}
