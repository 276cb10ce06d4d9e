/* common/fields.c — fields of an object read from its JSON bytes, and field
 * selectors (see fields.h).
 *
 * Design: a lookup skips whole values by bracket depth (strings honoured)
 * instead of validating them, so reading "status.phase" of a 5 KB Pod costs
 * one pass over at most the bytes before it and no allocation; bytes that do
 * not parse read as "absent", never as a crash. Member names are compared as
 * written (Kubernetes field names need no escapes); values are decoded, so a
 * selector or template sees the same text the API server would.
 *
 * The per-resource field names are one table (kb_fields_kinds); the config
 * loader checks a selector against it, so a typo is a load error rather than
 * a route that silently takes nothing.
 */
#include "common/fields.h"

#include "common/alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading JSON bytes -------------------------------------------------- */

static const char *kb_fj_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Past the closing quote of the string that opens at p; NULL if unterminated. */
static const char *kb_fj_str_end(const char *p, const char *e) {
    for (p++; p < e; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

static bool kb_fj_scalar_ch(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '+' ||
           c == '.';
}

/* Past the value that starts at p; NULL if it does not end before e. */
static const char *kb_fj_skip(const char *p, const char *e) {
    if (p >= e)
        return NULL;
    if (*p == '"')
        return kb_fj_str_end(p, e);
    if (*p == '{' || *p == '[') {
        size_t depth = 0;
        while (p < e) {
            if (*p == '"') {
                p = kb_fj_str_end(p, e);
                if (!p)
                    return NULL;
                continue;
            }
            if (*p == '{' || *p == '[')
                depth++;
            else if ((*p == '}' || *p == ']') && --depth == 0)
                return p + 1;
            p++;
        }
        return NULL;
    }
    const char *s = p;
    while (p < e && kb_fj_scalar_ch(*p))
        p++;
    return p > s ? p : NULL;
}

bool kb_fields_member(const char *obj, size_t len, const char *name, size_t name_len, const char **val,
                      size_t *vlen) {
    const char *e = obj + len, *p = kb_fj_ws(obj, e);
    if (p >= e || *p != '{')
        return false;
    p = kb_fj_ws(p + 1, e);
    if (p < e && *p == '}')
        return false;
    for (;;) {
        if (p >= e || *p != '"')
            return false;
        const char *ks = p + 1, *ke = kb_fj_str_end(p, e);
        if (!ke)
            return false;
        p = kb_fj_ws(ke, e);
        if (p >= e || *p != ':')
            return false;
        const char *v = kb_fj_ws(p + 1, e), *ve = kb_fj_skip(v, e);
        if (!ve)
            return false;
        if ((size_t)(ke - 1 - ks) == name_len && !memcmp(ks, name, name_len)) {
            *val = v;
            *vlen = (size_t)(ve - v);
            return true;
        }
        p = kb_fj_ws(ve, e);
        if (p >= e || *p != ',')
            return false;
        p = kb_fj_ws(p + 1, e);
    }
}

static int kb_fj_hex4(const char *p, const char *e) {
    if (e - p < 4)
        return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static void kb_fj_utf8(kb_buf_t *out, uint32_t cp) {
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xc0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xe0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (char)(0xf0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    kb_buf_append(out, b, n);
}

/* Decode the \u escape at p ("\uXXXX", maybe a surrogate pair); past it. */
static const char *kb_fj_unicode(const char *p, const char *e, kb_buf_t *out) {
    int hi = kb_fj_hex4(p + 2, e);
    if (hi < 0)
        return p + 2; /* not an escape after all: keep the bytes that follow */
    p += 6;
    uint32_t cp = (uint32_t)hi;
    if (hi >= 0xd800 && hi < 0xdc00 && e - p >= 6 && p[0] == '\\' && p[1] == 'u') {
        int lo = kb_fj_hex4(p + 2, e);
        if (lo >= 0xdc00 && lo < 0xe000) {
            cp = 0x10000 + (((uint32_t)hi - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
            p += 6;
        }
    }
    kb_fj_utf8(out, cp);
    return p;
}

void kb_fields_text(const char *val, size_t vlen, kb_buf_t *out) {
    if (!vlen || *val == '{' || *val == '[' || (vlen == 4 && !memcmp(val, "null", 4)))
        return;
    if (*val != '"') {
        kb_buf_append(out, val, vlen);
        return;
    }
    const char *p = val + 1, *e = val + vlen - 1; /* inside the quotes */
    while (p < e) {
        const char *bs = memchr(p, '\\', (size_t)(e - p));
        if (!bs) {
            kb_buf_append(out, p, (size_t)(e - p));
            return;
        }
        kb_buf_append(out, p, (size_t)(bs - p));
        if (bs + 1 >= e)
            return;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *m = bs[1] ? strchr(from, bs[1]) : NULL;
        if (bs[1] == 'u') {
            p = kb_fj_unicode(bs, e, out);
            continue;
        }
        if (m)
            kb_buf_append_char(out, to[m - from]);
        p = bs + 2;
    }
}

bool kb_fields_get(const char *obj, size_t len, const char *path, kb_buf_t *out) {
    const char *v = obj;
    size_t vlen = len;
    for (const char *seg = path;;) {
        const char *dot = strchr(seg, '.');
        size_t n = dot ? (size_t)(dot - seg) : strlen(seg);
        if (!kb_fields_member(v, vlen, seg, n, &v, &vlen))
            return false;
        if (!dot)
            break;
        seg = dot + 1;
    }
    kb_fields_text(v, vlen, out);
    return true;
}

/* ---- field selector names per resource ----------------------------------- */

typedef struct kb_field_name {
    const char *name; /* as a field selector writes it */
    const char *path; /* where it is in the object */
} kb_field_name_t;

typedef struct kb_kind_fields {
    const char *group, *resource;
    const kb_field_name_t *fields;
    size_t n;
} kb_kind_fields_t;

#define KB_FN(n) {n, n}
static const kb_field_name_t kb_f_pods[] = {
    KB_FN("spec.nodeName"),       KB_FN("spec.restartPolicy"), KB_FN("spec.schedulerName"),
    KB_FN("spec.serviceAccountName"), KB_FN("spec.hostNetwork"), KB_FN("status.phase"),
    KB_FN("status.podIP"),        KB_FN("status.nominatedNodeName"),
};
static const kb_field_name_t kb_f_events[] = {
    KB_FN("involvedObject.kind"),       KB_FN("involvedObject.namespace"), KB_FN("involvedObject.name"),
    KB_FN("involvedObject.uid"),        KB_FN("involvedObject.apiVersion"),
    KB_FN("involvedObject.resourceVersion"), KB_FN("involvedObject.fieldPath"), KB_FN("reason"),
    KB_FN("reportingComponent"),        {"source", "source.component"}, KB_FN("type"),
};
static const kb_field_name_t kb_f_nodes[] = {KB_FN("spec.unschedulable")};
static const kb_field_name_t kb_f_namespaces[] = {KB_FN("status.phase")};
static const kb_field_name_t kb_f_secrets[] = {KB_FN("type")};
static const kb_field_name_t kb_f_replicas[] = {KB_FN("status.replicas")};
static const kb_field_name_t kb_f_jobs[] = {KB_FN("status.successful")};
static const kb_field_name_t kb_f_csrs[] = {KB_FN("spec.signerName")};
#undef KB_FN

#define KB_KIND(g, r, f) {g, r, f, KB_ARRAY_LEN(f)}
static const kb_kind_fields_t kb_fields_kinds[] = {
    KB_KIND("", "pods", kb_f_pods),
    KB_KIND("", "events", kb_f_events),
    KB_KIND("", "nodes", kb_f_nodes),
    KB_KIND("", "namespaces", kb_f_namespaces),
    KB_KIND("", "secrets", kb_f_secrets),
    KB_KIND("", "replicationcontrollers", kb_f_replicas),
    KB_KIND("apps", "replicasets", kb_f_replicas),
    KB_KIND("batch", "jobs", kb_f_jobs),
    KB_KIND("certificates.k8s.io", "certificatesigningrequests", kb_f_csrs),
};
#undef KB_KIND

static const kb_kind_fields_t *kb_fields_kind(const char *group, const char *resource) {
    for (size_t i = 0; i < KB_ARRAY_LEN(kb_fields_kinds); i++)
        if (!strcmp(kb_fields_kinds[i].group, group) && !strcmp(kb_fields_kinds[i].resource, resource))
            return &kb_fields_kinds[i];
    return NULL;
}

const char *kb_fields_path(const char *group, const char *resource, const char *field) {
    static const char *const all[] = {"metadata.name", "metadata.namespace"};
    for (size_t i = 0; i < KB_ARRAY_LEN(all); i++)
        if (!strcmp(field, all[i]))
            return all[i];
    const kb_kind_fields_t *k = kb_fields_kind(group, resource);
    for (size_t i = 0; k && i < k->n; i++)
        if (!strcmp(k->fields[i].name, field))
            return k->fields[i].path;
    return NULL;
}

/* "metadata.name, metadata.namespace, …" of resource, into errstr's tail. */
static void kb_fields_known(const char *group, const char *resource, kb_buf_t *out) {
    kb_buf_append_str(out, "metadata.name, metadata.namespace");
    const kb_kind_fields_t *k = kb_fields_kind(group, resource);
    for (size_t i = 0; k && i < k->n; i++)
        kb_buf_appendf(out, ", %s", k->fields[i].name);
}

/* ---- field selectors ------------------------------------------------------ */

typedef struct kb_fieldreq {
    const char *path; /* static: from the table */
    char *value;      /* unescaped */
    bool negate;      /* != */
} kb_fieldreq_t;

struct kb_fieldsel {
    kb_fieldreq_t *reqs;
    size_t n;
};

static bool kb_fs_namech(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
}

/* Read one value up to an unescaped ',' (or the end), trailing blanks cut. */
static const char *kb_fs_value(const char *p, kb_buf_t *v) {
    size_t keep = 0;
    for (; *p && *p != ','; p++) {
        if (*p == '\\' && p[1])
            p++;
        kb_buf_append_char(v, *p);
        if (*p != ' ' && *p != '\t')
            keep = v->len;
    }
    v->len = keep;
    return p;
}

/* Parse one requirement at *pp into r; false with the reason in errstr. */
static bool kb_fs_req(const char **pp, const char *text, const char *group, const char *resource,
                      kb_fieldreq_t *r, char *errstr, size_t errstr_size) {
    const char *p = *pp;
    while (*p == ' ' || *p == '\t')
        p++;
    const char *ns = p;
    while (kb_fs_namech(*p))
        p++;
    int nlen = (int)(p - ns);
    if (!nlen) {
        snprintf(errstr, errstr_size, "field selector \"%s\": expected a field name at offset %zu", text,
                 (size_t)(ns - text));
        return false;
    }
    while (*p == ' ' || *p == '\t')
        p++;
    size_t oplen = p[0] == '=' && p[1] == '=' ? 2 : p[0] == '!' && p[1] == '=' ? 2 : p[0] == '=' ? 1 : 0;
    if (!oplen) {
        snprintf(errstr, errstr_size, "field selector \"%s\": expected '=', '==' or '!=' after \"%.*s\"", text, nlen,
                 ns);
        return false;
    }
    r->negate = p[0] == '!';
    char *name = kb_strndup(ns, (size_t)nlen);
    r->path = kb_fields_path(group, resource, name);
    if (!r->path) {
        kb_buf_t known = KB_BUF_INIT;
        kb_fields_known(group, resource, &known);
        snprintf(errstr, errstr_size, "field selector \"%s\": unknown field \"%s\" for %s%s%s (known: %s)", text, name,
                 resource, *group ? "." : "", group, known.data);
        kb_buf_fini(&known);
        free(name);
        return false;
    }
    free(name);
    p += oplen;
    while (*p == ' ' || *p == '\t')
        p++;
    kb_buf_t v = KB_BUF_INIT;
    p = kb_fs_value(p, &v);
    r->value = kb_strndup(v.data ? v.data : "", v.len);
    kb_buf_fini(&v);
    *pp = p;
    return true;
}

kb_fieldsel_t *kb_fieldsel_parse(const char *text, const char *group, const char *resource, char *errstr,
                                 size_t errstr_size) {
    kb_fieldsel_t *sel = kb_calloc(1, sizeof(*sel));
    const char *p = text ? text : "";
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p)
        return sel;
    for (;;) {
        sel->reqs = kb_realloc(sel->reqs, (sel->n + 1) * sizeof(*sel->reqs));
        kb_fieldreq_t *r = &sel->reqs[sel->n];
        memset(r, 0, sizeof(*r));
        if (!kb_fs_req(&p, text, group, resource, r, errstr, errstr_size)) {
            kb_fieldsel_free(sel);
            return NULL;
        }
        sel->n++;
        if (!*p)
            return sel;
        p++; /* ',' */
    }
}

void kb_fieldsel_free(kb_fieldsel_t *sel) {
    if (!sel)
        return;
    for (size_t i = 0; i < sel->n; i++)
        free(sel->reqs[i].value);
    free(sel->reqs);
    free(sel);
}

bool kb_fieldsel_match(const kb_fieldsel_t *sel, const char *obj, size_t len) {
    bool ok = true;
    kb_buf_t v = KB_BUF_INIT;
    for (size_t i = 0; i < sel->n && ok; i++) {
        const kb_fieldreq_t *r = &sel->reqs[i];
        kb_buf_reset(&v);
        kb_fields_get(obj, len, r->path, &v); /* absent: "" */
        bool eq = strlen(r->value) == v.len && !memcmp(r->value, v.data ? v.data : "", v.len);
        ok = eq != r->negate;
    }
    kb_buf_fini(&v);
    return ok;
}
