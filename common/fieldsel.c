/* common/fieldsel.c — field selectors per kind (fieldsel.h).
 *
 * DESIGN. Why a table and a record: a drop-in replica must accept exactly
 * the labels the API server accepts for a kind (its field label conversion:
 * the others are a 400, with the server's own wording, which differs between
 * a kind that has a conversion and one that takes only metadata.*) and read
 * each value the way the server's field set does (a pod's status.podIP is
 * its first podIPs entry; an event's source is source.component, else its
 * reportingComponent; spec.hostNetwork and spec.unschedulable are "true" or
 * "false", counts are decimals, a missing field is ""). One row per kind
 * holds both facts, so the accepted labels and the values can never drift
 * apart. status.podIPs is accepted for pods but the server puts no value
 * in the field set for it, so it always reads "" — kept as the server has it.
 *
 * Values are read from the object's bytes with the member walker of
 * common/fields.h, no tree: one pass over each object level that holds a
 * field (kb_fields_find), so a pod's record costs about two reads of the pod.
 *
 * A custom resource's row is learned at run time from its CRD's
 * selectableFields (kb_fields_kind_learn, called by bridge/kcrd.c when the
 * CRD is read): the label is the jsonPath without its leading dot, the value
 * the one the server's field set holds (a string as is, an integer or a
 * bool as written, missing or null ""). Learned rows are few (one per CRD
 * informer and read) and live until exit, so a row handed out stays valid
 * without a reference count; lookups read them without a lock (an
 * append-only array published by its count).
 */
#include "common/fieldsel.h"

#include "common/alloc.h"
#include "common/fields.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How a field's value is read. */
typedef enum {
    KB_FV_STR,    /* a string; anything else is "" */
    KB_FV_BOOL,   /* true/false; missing is "false" */
    KB_FV_COUNT,  /* an integer as written; missing is "0" */
    KB_FV_POD_IP, /* status.podIPs[0].ip, else status.podIP */
    KB_FV_SOURCE, /* source.component, else reportingComponent */
    KB_FV_UNSET,  /* accepted, never set: always "" */
    KB_FV_SCALAR, /* a custom resource's field: a string, else the token of a number or bool; null is "" */
} kb_fv_t;

typedef struct kb_field {
    const char *label; /* as a selector names it */
    const char *path;  /* dotted JSON path in the v1 object ("" = none) */
    kb_fv_t how;
    const char *alt;   /* the path read when path gives nothing (KB_FV_POD_IP, KB_FV_SOURCE) */
} kb_field_t;

struct kb_fields_kind {
    const char *group, *resource;
    bool conversion; /* the server registers a field label conversion (its wording on an unknown label) */
    bool ns_label;   /* metadata.namespace is accepted */
    const kb_field_t *own;
    size_t n_own;
};

static const kb_field_t kb_pod_fields[] = {
    {"spec.nodeName", "spec.nodeName", KB_FV_STR, NULL},
    {"spec.restartPolicy", "spec.restartPolicy", KB_FV_STR, NULL},
    {"spec.schedulerName", "spec.schedulerName", KB_FV_STR, NULL},
    {"spec.serviceAccountName", "spec.serviceAccountName", KB_FV_STR, NULL},
    {"spec.hostNetwork", "spec.hostNetwork", KB_FV_BOOL, NULL},
    {"status.phase", "status.phase", KB_FV_STR, NULL},
    {"status.podIP", "status.podIPs", KB_FV_POD_IP, "status.podIP"},
    {"status.podIPs", "", KB_FV_UNSET, NULL},
    {"status.nominatedNodeName", "status.nominatedNodeName", KB_FV_STR, NULL},
};

static const kb_field_t kb_event_fields[] = {
    {"involvedObject.kind", "involvedObject.kind", KB_FV_STR, NULL},
    {"involvedObject.namespace", "involvedObject.namespace", KB_FV_STR, NULL},
    {"involvedObject.name", "involvedObject.name", KB_FV_STR, NULL},
    {"involvedObject.uid", "involvedObject.uid", KB_FV_STR, NULL},
    {"involvedObject.apiVersion", "involvedObject.apiVersion", KB_FV_STR, NULL},
    {"involvedObject.resourceVersion", "involvedObject.resourceVersion", KB_FV_STR, NULL},
    {"involvedObject.fieldPath", "involvedObject.fieldPath", KB_FV_STR, NULL},
    {"reason", "reason", KB_FV_STR, NULL},
    {"reportingComponent", "reportingComponent", KB_FV_STR, NULL},
    {"source", "source.component", KB_FV_SOURCE, "reportingComponent"},
    {"type", "type", KB_FV_STR, NULL},
};

/* events.k8s.io names the core Event's fields its own way (regarding is the
 * involvedObject, reportingController the reportingComponent); the server
 * converts these labels and refuses the core ones there. */
static const kb_field_t kb_events_v1_fields[] = {
    {"regarding.kind", "regarding.kind", KB_FV_STR, NULL},
    {"regarding.namespace", "regarding.namespace", KB_FV_STR, NULL},
    {"regarding.name", "regarding.name", KB_FV_STR, NULL},
    {"regarding.uid", "regarding.uid", KB_FV_STR, NULL},
    {"regarding.apiVersion", "regarding.apiVersion", KB_FV_STR, NULL},
    {"regarding.resourceVersion", "regarding.resourceVersion", KB_FV_STR, NULL},
    {"regarding.fieldPath", "regarding.fieldPath", KB_FV_STR, NULL},
    {"reason", "reason", KB_FV_STR, NULL},
    {"reportingController", "reportingController", KB_FV_STR, NULL},
    {"type", "type", KB_FV_STR, NULL},
};

static const kb_field_t kb_secret_fields[] = {{"type", "type", KB_FV_STR, NULL}};
static const kb_field_t kb_namespace_fields[] = {{"status.phase", "status.phase", KB_FV_STR, NULL}};
static const kb_field_t kb_node_fields[] = {{"spec.unschedulable", "spec.unschedulable", KB_FV_BOOL, NULL}};
static const kb_field_t kb_replicas_fields[] = {{"status.replicas", "status.replicas", KB_FV_COUNT, NULL}};
static const kb_field_t kb_job_fields[] = {{"status.successful", "status.succeeded", KB_FV_COUNT, NULL}};
static const kb_field_t kb_service_fields[] = {
    {"spec.clusterIP", "spec.clusterIP", KB_FV_STR, NULL},
    {"spec.type", "spec.type", KB_FV_STR, NULL},
};

#define KB_OWN(a) a, KB_ARRAY_LEN(a)
static const kb_fields_kind_t kb_kinds[] = {
    {"", "pods", true, true, KB_OWN(kb_pod_fields)},
    {"", "events", true, true, KB_OWN(kb_event_fields)},
    {"events.k8s.io", "events", true, true, KB_OWN(kb_events_v1_fields)},
    {"", "secrets", true, true, KB_OWN(kb_secret_fields)},
    {"", "namespaces", true, false, KB_OWN(kb_namespace_fields)},
    {"", "nodes", true, false, KB_OWN(kb_node_fields)},
    {"", "replicationcontrollers", true, true, KB_OWN(kb_replicas_fields)},
    {"", "services", true, true, KB_OWN(kb_service_fields)},
    {"apps", "replicasets", true, true, KB_OWN(kb_replicas_fields)},
    {"batch", "jobs", true, true, KB_OWN(kb_job_fields)},
};
static const kb_fields_kind_t kb_kind_default = {"", "", false, true, NULL, 0};

#define KB_FIELDS_LEARNED_MAX 256 /* learned rows kept (CRD informers × reads) */
static kb_fields_kind_t *kb_learned[KB_FIELDS_LEARNED_MAX];
static atomic_size_t kb_n_learned;  /* rows published: readers take no lock */
static pthread_mutex_t kb_learn_mtx = PTHREAD_MUTEX_INITIALIZER; /* serializes appends (leaf) */

#define KB_FIELDSEL_MAX 32  /* requirements in one selector */
#define KB_FIELD_NAME (-1)  /* kb_fieldsel_req.field: metadata.name */
#define KB_FIELD_NS (-2)    /* metadata.namespace */

typedef struct kb_fieldsel_req {
    int field;    /* KB_FIELD_NAME, KB_FIELD_NS, or an index into kind->own */
    bool neg;     /* != */
    char *value;  /* unescaped, owned */
    size_t len;
} kb_fieldsel_req_t;

struct kb_fieldsel {
    const kb_fields_kind_t *kind;
    bool own; /* a requirement reads the record */
    size_t n;
    kb_fieldsel_req_t req[KB_FIELDSEL_MAX];
};

const kb_fields_kind_t *kb_fields_kind(const char *group, const char *resource) {
    for (size_t i = atomic_load(&kb_n_learned); i-- > 0;) /* the latest read wins */
        if (!strcmp(kb_learned[i]->group, group ? group : "") && !strcmp(kb_learned[i]->resource, resource))
            return kb_learned[i];
    for (size_t i = 0; i < KB_ARRAY_LEN(kb_kinds); i++)
        if (!strcmp(kb_kinds[i].group, group ? group : "") && !strcmp(kb_kinds[i].resource, resource))
            return &kb_kinds[i];
    return &kb_kind_default;
}

const kb_fields_kind_t *kb_fields_kind_learn(const char *group, const char *resource, bool namespaced,
                                             const char *const *paths, size_t n) {
    if (n > KB_FIELDS_LEARN_MAX_PATHS)
        n = KB_FIELDS_LEARN_MAX_PATHS;
    kb_fields_kind_t *kind = kb_calloc(1, sizeof(*kind));
    kb_field_t *own = kb_calloc(n ? n : 1, sizeof(*own));
    for (size_t i = 0; i < n; i++) {
        const char *p = paths[i] + (paths[i][0] == '.');
        own[i] = (kb_field_t){kb_strdup(p), kb_strdup(p), KB_FV_SCALAR, NULL};
    }
    *kind = (kb_fields_kind_t){kb_strdup(group), kb_strdup(resource), true, namespaced, own, n};
    pthread_mutex_lock(&kb_learn_mtx);
    size_t at = atomic_load(&kb_n_learned);
    if (at < KB_FIELDS_LEARNED_MAX) {
        kb_learned[at] = kind;
        atomic_store(&kb_n_learned, at + 1);
    }
    pthread_mutex_unlock(&kb_learn_mtx);
    if (at < KB_FIELDS_LEARNED_MAX)
        return kind;
    for (size_t i = 0; i < n; i++) {
        free((char *)own[i].label);
        free((char *)own[i].path);
    }
    free(own);
    free((char *)kind->group);
    free((char *)kind->resource);
    free(kind);
    return kb_fields_kind(group, resource);
}

bool kb_fields_kind_has_own(const kb_fields_kind_t *kind) {
    return kind->n_own > 0;
}

/* ---- reading values --------------------------------------------------------- */

#define KB_FIELDS_MAX_PATHS 24 /* two per field of the longest row */

/* A value's bytes as written in the object; {NULL, 0} when absent. */
typedef struct kb_fv_span {
    const char *p;
    size_t len;
} kb_fv_span_t;

/* The values of several dotted paths in the object obj[0..len), in one pass
 * per object level (a pod's nine fields cost about two reads of the pod, not
 * nine): path idx[p] has its first at[p] bytes matched by the levels above;
 * out[idx[p]] gets its value (left as is when absent). Duplicate members:
 * the last wins, as when Go decodes the object. */
static void kb_fields_find(const char *obj, size_t len, const char *const *paths, const size_t *at,
                           const size_t *idx, size_t n, kb_fv_span_t *out) {
    kb_fields_iter_t it;
    const char *k, *v;
    size_t klen, vlen;
    kb_fields_iter_init(&it, obj, len);
    while (kb_fields_iter_next(&it, &k, &klen, &v, &vlen)) {
        size_t sub_at[KB_FIELDS_MAX_PATHS], sub_idx[KB_FIELDS_MAX_PATHS], m = 0;
        for (size_t p = 0; p < n; p++) {
            const char *seg = paths[idx[p]] + at[p];
            size_t sl = strcspn(seg, ".");
            if (sl != klen || memcmp(seg, k, klen))
                continue;
            if (!seg[sl]) {
                out[idx[p]] = (kb_fv_span_t){v, vlen};
            } else {
                sub_at[m] = at[p] + sl + 1;
                sub_idx[m++] = idx[p];
            }
        }
        if (m)
            kb_fields_find(v, vlen, paths, sub_at, sub_idx, m, out);
    }
}

/* Append the string v (decoded); false, nothing appended, when it is not a non-empty string. */
static bool kb_fields_str(kb_fv_span_t v, kb_buf_t *out) {
    size_t before = out->len;
    if (v.len <= 2 || v.p[0] != '"')
        return false;
    kb_fields_text(v.p, v.len, out);
    return out->len > before;
}

/* Append the raw token v when it starts with one of `first`, else dflt. */
static void kb_fields_token(kb_fv_span_t v, const char *first, const char *dflt, kb_buf_t *out) {
    if (v.len && v.p[0] && strchr(first, v.p[0]))
        kb_buf_append(out, v.p, v.len);
    else
        kb_buf_append_str(out, dflt);
}

/* The first podIPs entry's ip (ips: the array), else the podIP string. */
static void kb_fields_pod_ip(kb_fv_span_t ips, kb_fv_span_t ip, kb_buf_t *out) {
    size_t i = 1;
    while (i < ips.len && ips.p[i] && strchr(" \t\r\n", ips.p[i]))
        i++;
    if (ips.len > 2 && ips.p[0] == '[' && i < ips.len && ips.p[i] == '{') {
        kb_fv_span_t first;
        if (kb_fields_member(ips.p + i, ips.len - i, "ip", 2, &first.p, &first.len))
            kb_fields_str(first, out);
        return;
    }
    kb_fields_str(ip, out);
}

/* Append field f's value; v and alt are the values of its path and alt path. */
static void kb_fields_value(const kb_field_t *f, kb_fv_span_t v, kb_fv_span_t alt, kb_buf_t *out) {
    switch (f->how) {
    case KB_FV_STR:
        kb_fields_str(v, out);
        break;
    case KB_FV_BOOL:
        kb_fields_token(v, "tf", "false", out);
        break;
    case KB_FV_COUNT:
        kb_fields_token(v, "-0123456789", "0", out);
        break;
    case KB_FV_POD_IP:
        kb_fields_pod_ip(v, alt, out);
        break;
    case KB_FV_SOURCE:
        if (!kb_fields_str(v, out))
            kb_fields_str(alt, out);
        break;
    case KB_FV_UNSET:
        break;
    case KB_FV_SCALAR:
        if (v.len && v.p[0] != 'n' && !kb_fields_str(v, out))
            kb_fields_token(v, "-0123456789tf", "", out);
        break;
    }
}

void kb_fields_extract(const kb_fields_kind_t *kind, const char *obj, size_t len, kb_buf_t *out) {
    const char *paths[KB_FIELDS_MAX_PATHS];
    size_t at[KB_FIELDS_MAX_PATHS] = {0}, idx[KB_FIELDS_MAX_PATHS], n = 0;
    kb_fv_span_t spans[KB_FIELDS_MAX_PATHS];
    KB_ASSERT(2 * kind->n_own <= KB_FIELDS_MAX_PATHS);
    for (size_t i = 0; i < kind->n_own; i++) {
        paths[2 * i] = kind->own[i].path;
        paths[2 * i + 1] = kind->own[i].alt ? kind->own[i].alt : "";
    }
    memset(spans, 0, sizeof(spans));
    for (size_t p = 0; p < 2 * kind->n_own; p++)
        if (*paths[p])
            idx[n++] = p;
    if (n)
        kb_fields_find(obj, len, paths, at, idx, n, spans);
    for (size_t i = 0; i < kind->n_own; i++) {
        kb_fields_value(&kind->own[i], spans[2 * i], spans[2 * i + 1], out);
        kb_buf_append_char(out, '\0');
    }
}

/* ---- selectors ---------------------------------------------------------------- */

/* Length of the next requirement at s: up to an unescaped ',' or the end. */
static size_t kb_fieldsel_term_len(const char *s) {
    size_t i = 0;
    while (s[i] && s[i] != ',')
        i += (s[i] == '\\' && s[i + 1]) ? 2 : 1;
    return i;
}

/* The label's field in kind, or false with the server's message. */
static bool kb_fieldsel_label(const kb_fields_kind_t *kind, const char *label, int *field, char *err,
                              size_t err_size) {
    if (!strcmp(label, "spec.host") && kind->n_own && kind->own == kb_pod_fields)
        label = "spec.nodeName"; /* what old v1 clients send */
    for (size_t i = 0; i < kind->n_own; i++)
        if (!strcmp(label, kind->own[i].label)) {
            *field = (int)i;
            return true;
        }
    if (!strcmp(label, "metadata.name") || (kind->ns_label && !strcmp(label, "metadata.namespace"))) {
        *field = !strcmp(label, "metadata.name") ? KB_FIELD_NAME : KB_FIELD_NS;
        return true;
    }
    if (kind->conversion)
        snprintf(err, err_size, "field label not supported: %.200s", label);
    else
        snprintf(err, err_size, "\"%.200s\" is not a known field selector: only \"metadata.name\", "
                                "\"metadata.namespace\"", label);
    return false;
}

/* Unescape value[0..n) into a new string (\\, \, and \= only; '=' must be
 * escaped); false with the server's message otherwise. */
static bool kb_fieldsel_unescape(const char *v, size_t n, kb_fieldsel_req_t *r, char *err, size_t err_size) {
    r->value = kb_malloc(n + 1);
    r->len = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] == '=') {
            snprintf(err, err_size, "invalid field selector: unescaped character in value: %d", '=');
            return false;
        }
        if (v[i] == '\\') {
            if (i + 1 == n || !strchr("\\,=", v[i + 1])) {
                snprintf(err, err_size, "invalid field selector: invalid escape sequence: \\%.*s",
                         i + 1 == n ? 0 : 1, v + i + 1);
                return false;
            }
            i++;
        }
        r->value[r->len++] = v[i];
    }
    r->value[r->len] = '\0';
    return true;
}

/* One requirement term[0..n) into r. */
static bool kb_fieldsel_term(const kb_fields_kind_t *kind, const char *term, size_t n, kb_fieldsel_req_t *r,
                             char *err, size_t err_size) {
    size_t i = 0, op = 0;
    while (i < n && !op) {
        if (term[i] == '\\') {
            i += 2;
            continue;
        }
        if (term[i] == '!' && i + 1 < n && term[i + 1] == '=')
            op = 2;
        else if (term[i] == '=')
            op = (i + 1 < n && term[i + 1] == '=') ? 2 : 1;
        if (!op)
            i++;
    }
    if (!op) {
        snprintf(err, err_size, "invalid selector: '%.*s'; can't understand '%.*s'", (int)(n > 200 ? 200 : n), term,
                 (int)(n > 200 ? 200 : n), term);
        return false;
    }
    char label[256];
    snprintf(label, sizeof(label), "%.*s", (int)(i < 255 ? i : 255), term);
    r->neg = term[i] == '!';
    if (!kb_fieldsel_label(kind, label, &r->field, err, err_size))
        return false;
    return kb_fieldsel_unescape(term + i + op, n - i - op, r, err, err_size);
}

bool kb_fieldsel_parse(const kb_fields_kind_t *kind, const char *text, kb_fieldsel_t **out, char *err,
                       size_t err_size) {
    *out = NULL;
    if (!text || !*text)
        return true;
    kb_fieldsel_t *fs = kb_calloc(1, sizeof(*fs));
    fs->kind = kind;
    while (*text) {
        size_t n = kb_fieldsel_term_len(text);
        if (n && fs->n == KB_FIELDSEL_MAX) {
            snprintf(err, err_size, "fieldSelector: more than %d requirements", KB_FIELDSEL_MAX);
            goto bad;
        }
        if (n && !kb_fieldsel_term(kind, text, n, &fs->req[fs->n++], err, err_size))
            goto bad;
        if (n)
            fs->own = fs->own || fs->req[fs->n - 1].field >= 0;
        text += n + (text[n] == ',');
    }
    if (fs->n) {
        *out = fs;
        return true;
    }
    kb_fieldsel_free(fs);
    return true;
bad:
    kb_fieldsel_free(fs);
    return false;
}

void kb_fieldsel_free(kb_fieldsel_t *fs) {
    if (!fs)
        return;
    for (size_t i = 0; i < fs->n; i++)
        free(fs->req[i].value);
    free(fs);
}

bool kb_fieldsel_needs_record(const kb_fieldsel_t *fs) {
    return fs && fs->own;
}

/* Field i of a record ("" when the record is short: a record of another kind). */
const char *kb_fields_rec_value(const char *rec, size_t rec_len, int i, size_t *len) {
    size_t off = 0;
    for (int k = 0; k < i && off < rec_len; k++)
        off += strnlen(rec + off, rec_len - off) + 1;
    if (!rec || off >= rec_len) {
        *len = 0;
        return "";
    }
    *len = strnlen(rec + off, rec_len - off);
    return rec + off;
}

bool kb_fieldsel_match(const kb_fieldsel_t *fs, const char *ns, size_t ns_len, const char *name, size_t name_len,
                       const char *rec, size_t rec_len) {
    for (size_t i = 0; fs && i < fs->n; i++) {
        const kb_fieldsel_req_t *r = &fs->req[i];
        const char *have = r->field == KB_FIELD_NAME ? name : ns;
        size_t hl = r->field == KB_FIELD_NAME ? name_len : ns_len;
        if (r->field >= 0)
            have = kb_fields_rec_value(rec, rec_len, r->field, &hl);
        bool eq = hl == r->len && (!hl || !memcmp(have, r->value, hl));
        if (eq == r->neg)
            return false;
    }
    return true;
}

bool kb_fieldsel_own_equality(const kb_fieldsel_t *fs, int *field, const char **value, size_t *len) {
    const kb_fieldsel_req_t *best = NULL;
    for (size_t i = 0; fs && i < fs->n; i++)
        if (fs->req[i].field >= 0 && !fs->req[i].neg && (!best || fs->req[i].field < best->field))
            best = &fs->req[i];
    if (!best)
        return false;
    *field = best->field;
    *value = best->value;
    *len = best->len;
    return true;
}
