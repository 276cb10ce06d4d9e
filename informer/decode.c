/* informer/decode.c — watch frames, list pages, objects and Status (see decode.h).
 *
 * Design: kb_decode_object() is the hot path (every event and every list
 * item goes through it). It is one loop over the input with an explicit
 * stack of open containers (no recursion, depth <= KB_JSON_MAX_DEPTH) that
 * validates and copies at once: every token is written to the output as it
 * is read, whitespace is simply not copied, and a member on a drop path is
 * copied like any other and then cut off again by moving the write cursor
 * back. That keeps a single code path for validation, so a dropped or
 * redacted subtree is checked exactly like a kept one, and costs one memcpy
 * of bytes that are in cache anyway.
 *
 * Invariant of the output cursor: the output never grows faster than the
 * input is consumed, except by a redaction (handled by kb_dec_room()) and
 * by the kind/apiVersion prefix, which is inserted with one memmove after
 * the object is complete — list items are the only objects lacking kind.
 *
 * Identity spans are recorded as output offsets while writing; the prefix
 * insertion shifts them. Paths are compiled into a small trie of member
 * names; a container's frame points at the trie node its members are
 * matched against (NULL below any path: no lookups there).
 *
 * The container stack lives on the C stack: KB_JSON_MAX_DEPTH frames of 24
 * bytes, 12 KB per call, which any thread stack holds. Thread-safe: all
 * state is per call; the transform is only read.
 */
#include "informer/decode.h"

#include "common/alloc.h"
#include "informer/json_int.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- transform: compiled drop/redact paths ---------------------------- */

typedef enum { KB_TACT_NONE, KB_TACT_DROP, KB_TACT_REDACT } kb_tact_t;

/* keep_fields marks, after kb_tkeep_normalize(): KB_KEEP_SOME on every node
 * strictly above the end of a keep path (its object's members are filtered),
 * KB_KEEP_ALL where a keep path ends (kept whole), KB_KEEP_NO elsewhere,
 * including everything below a KB_KEEP_ALL node. */
typedef enum { KB_KEEP_NO, KB_KEEP_SOME, KB_KEEP_ALL } kb_tkeep_t;

typedef struct kb_tnode {
    char *name;                /* member name (raw bytes); NULL for the root */
    size_t name_len;
    kb_tact_t act;             /* what happens to a member reaching this node */
    kb_tkeep_t keep;           /* allow-list mark (keep_fields) */
    bool base64;               /* the value here is base64 ([]byte): a redaction writes
                                  kb_redacted_b64 (set at and below a base64 path) */
    struct kb_tnode **kids;    /* owned */
    size_t n_kids;
} kb_tnode_t;

struct kb_transform {
    kb_tnode_t root;
};

#define KB_PATH_MAX_SEGS 64

typedef struct kb_path_seg {
    const char *p;
    size_t len;
} kb_path_seg_t;

static void kb_errf(char *errstr, size_t errstr_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void kb_errf(char *errstr, size_t errstr_size, const char *fmt, ...) {
    if (!errstr || errstr_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errstr, errstr_size, fmt, ap);
    va_end(ap);
}

/* Split a path into segments; false (with the reason) on a syntax error. */
static bool kb_path_split(const char *path, kb_path_seg_t *segs, size_t *n_segs, char *errstr,
                          size_t errstr_size) {
    size_t n = 0;
    const char *p = path;
    if (!path || !*path) {
        kb_errf(errstr, errstr_size, "empty path");
        return false;
    }
    while (*p) {
        if (n == KB_PATH_MAX_SEGS) {
            kb_errf(errstr, errstr_size, "%s: more than %d segments", path, KB_PATH_MAX_SEGS);
            return false;
        }
        if (*p == '[') {
            const char *close = strchr(p + 1, ']');
            if (!close || close == p + 1) {
                kb_errf(errstr, errstr_size, "%s: %s", path,
                        close ? "empty [] segment" : "'[' without ']'");
                return false;
            }
            segs[n].p = p + 1;
            segs[n].len = (size_t)(close - p - 1);
            p = close + 1;
        } else {
            size_t len = strcspn(p, ".[]");
            if (len == 0) {
                kb_errf(errstr, errstr_size, "%s: empty segment at offset %zu", path,
                        (size_t)(p - path));
                return false;
            }
            segs[n].p = p;
            segs[n].len = len;
            p += len;
        }
        n++;
        if (*p == '.') {
            p++;
            if (!*p || *p == '.' || *p == '[') {
                kb_errf(errstr, errstr_size, "%s: empty segment at offset %zu", path,
                        (size_t)(p - path));
                return false;
            }
        } else if (*p && *p != '[') {
            kb_errf(errstr, errstr_size, "%s: unexpected '%c' at offset %zu", path, *p,
                    (size_t)(p - path));
            return false;
        }
    }
    *n_segs = n;
    return true;
}

static bool kb_seg_is(const kb_path_seg_t *s, const char *name) {
    return s->len == strlen(name) && memcmp(s->p, name, s->len) == 0;
}

/* The fields kb_objmeta_t reports cannot be dropped or redacted. */
static bool kb_path_is_identity(const kb_path_seg_t *segs, size_t n) {
    static const char *const meta[] = {"name", "namespace", "uid", "resourceVersion"};
    if (n == 1)
        return kb_seg_is(&segs[0], "kind") || kb_seg_is(&segs[0], "apiVersion") ||
               kb_seg_is(&segs[0], "metadata");
    if (n == 2 && kb_seg_is(&segs[0], "metadata"))
        for (size_t k = 0; k < KB_ARRAY_LEN(meta); k++)
            if (kb_seg_is(&segs[1], meta[k]))
                return true;
    return false;
}

static bool kb_path_parse(const char *path, kb_path_seg_t *segs, size_t *n, char *errstr,
                          size_t errstr_size) {
    if (!kb_path_split(path, segs, n, errstr, errstr_size))
        return false;
    if (kb_path_is_identity(segs, *n)) {
        kb_errf(errstr, errstr_size,
                "%s: kind, apiVersion and metadata name/namespace/uid/resourceVersion cannot "
                "be dropped or redacted",
                path);
        return false;
    }
    return true;
}

bool kb_transform_path_valid(const char *path, char *errstr, size_t errstr_size) {
    kb_path_seg_t segs[KB_PATH_MAX_SEGS];
    size_t n;
    return kb_path_parse(path, segs, &n, errstr, errstr_size);
}

static const kb_tnode_t *kb_tnode_find(const kb_tnode_t *node, const char *name, size_t len) {
    for (size_t k = 0; k < node->n_kids; k++) {
        const kb_tnode_t *kid = node->kids[k];
        if (kid->name_len == len && memcmp(kid->name, name, len) == 0)
            return kid;
    }
    return NULL;
}

static void kb_tnode_add(kb_tnode_t *node, const kb_path_seg_t *segs, size_t n, kb_tact_t act) {
    for (size_t s = 0; s < n; s++) {
        kb_tnode_t *kid = (kb_tnode_t *)kb_tnode_find(node, segs[s].p, segs[s].len);
        if (!kid) {
            kid = kb_calloc(1, sizeof(*kid));
            kid->name = kb_strndup(segs[s].p, segs[s].len);
            kid->name_len = segs[s].len;
            node->kids = kb_realloc(node->kids, (node->n_kids + 1) * sizeof(*node->kids));
            node->kids[node->n_kids++] = kid;
        }
        node = kid;
    }
    /* Drop beats redact when both name the same member. */
    if (act > node->act && node->act != KB_TACT_DROP)
        node->act = act;
    else if (act == KB_TACT_DROP)
        node->act = KB_TACT_DROP;
}

static void kb_tnode_free_kids(kb_tnode_t *node) {
    for (size_t k = 0; k < node->n_kids; k++) {
        kb_tnode_free_kids(node->kids[k]);
        free(node->kids[k]->name);
        free(node->kids[k]);
    }
    free(node->kids);
}

/* Mark one keep path: every node on the way KB_KEEP_SOME, its end KB_KEEP_ALL. */
static void kb_tkeep_add(kb_tnode_t *root, const kb_path_seg_t *segs, size_t n) {
    kb_tnode_add(root, segs, n, KB_TACT_NONE); /* make sure every node exists */
    kb_tnode_t *node = root;
    for (size_t s = 0; s < n; s++) {
        if (node->keep == KB_KEEP_NO)
            node->keep = KB_KEEP_SOME;
        node = (kb_tnode_t *)kb_tnode_find(node, segs[s].p, segs[s].len);
    }
    node->keep = KB_KEEP_ALL;
}

/* Below a node kept whole nothing is filtered: clear the marks there, so a
 * container's frame can decide from its own node alone. */
static void kb_tkeep_normalize(kb_tnode_t *node, bool under_all) {
    if (under_all)
        node->keep = KB_KEEP_NO;
    bool all = under_all || node->keep == KB_KEEP_ALL;
    for (size_t k = 0; k < node->n_kids; k++)
        kb_tkeep_normalize(node->kids[k], all);
}

/* What survives keep_fields besides the listed paths: the event's identity. */
static const char *const kb_keep_identity[] = {
    "kind", "apiVersion", "metadata.name", "metadata.namespace", "metadata.uid", "metadata.resourceVersion",
    "metadata.labels",
};

/* Mark node and everything below it as base64. */
static void kb_tbase64_mark(kb_tnode_t *node) {
    node->base64 = true;
    for (size_t k = 0; k < node->n_kids; k++)
        kb_tbase64_mark(node->kids[k]);
}

/* A base64 path only matters where a redaction can reach it, so no node is
 * created for it: the node at its end, if some drop/redact/keep path made
 * one, is marked with its subtree. */
static bool kb_tbase64_add(kb_tnode_t *root, const char *path, char *errstr, size_t errstr_size) {
    kb_path_seg_t segs[KB_PATH_MAX_SEGS];
    size_t n;
    if (!kb_path_split(path, segs, &n, errstr, errstr_size))
        return false;
    kb_tnode_t *node = root;
    for (size_t s = 0; s < n && node; s++)
        node = (kb_tnode_t *)kb_tnode_find(node, segs[s].p, segs[s].len);
    if (node)
        kb_tbase64_mark(node);
    return true;
}

kb_transform_t *kb_transform_new_paths(const kb_transform_paths_t *p, char *errstr, size_t errstr_size) {
    kb_transform_t *tf = kb_calloc(1, sizeof(*tf));
    kb_path_seg_t segs[KB_PATH_MAX_SEGS];
    size_t n;
    for (size_t k = 0; k < p->n_drop + p->n_redact; k++) {
        const char *path = k < p->n_drop ? p->drop[k] : p->redact[k - p->n_drop];
        if (!kb_path_parse(path, segs, &n, errstr, errstr_size))
            goto fail;
        kb_tnode_add(&tf->root, segs, n, k < p->n_drop ? KB_TACT_DROP : KB_TACT_REDACT);
    }
    for (size_t k = 0; k < p->n_keep; k++) {
        if (!kb_path_split(p->keep[k], segs, &n, errstr, errstr_size))
            goto fail;
        kb_tkeep_add(&tf->root, segs, n);
    }
    for (size_t k = 0; p->n_keep && k < KB_ARRAY_LEN(kb_keep_identity); k++) {
        kb_path_split(kb_keep_identity[k], segs, &n, NULL, 0);
        kb_tkeep_add(&tf->root, segs, n);
    }
    kb_tkeep_normalize(&tf->root, false);
    for (size_t k = 0; k < p->n_base64; k++)
        if (!kb_tbase64_add(&tf->root, p->base64[k], errstr, errstr_size))
            goto fail;
    return tf;
fail:
    kb_transform_free(tf);
    return NULL;
}

kb_transform_t *kb_transform_new_keep(const char *const *drop, size_t n_drop, const char *const *redact,
                                      size_t n_redact, const char *const *keep, size_t n_keep, char *errstr,
                                      size_t errstr_size) {
    kb_transform_paths_t p = {drop, n_drop, redact, n_redact, keep, n_keep, NULL, 0};
    return kb_transform_new_paths(&p, errstr, errstr_size);
}

const char *const *kb_transform_base64_fields(const char *group, const char *resource, size_t *n) {
    static const char *const secret[] = {"data"};
    static const char *const configmap[] = {"binaryData"};
    *n = 0;
    if (strcmp(group, "") != 0)
        return NULL;
    if (strcmp(resource, "secrets") == 0) {
        *n = KB_ARRAY_LEN(secret);
        return secret;
    }
    if (strcmp(resource, "configmaps") == 0) {
        *n = KB_ARRAY_LEN(configmap);
        return configmap;
    }
    return NULL;
}

kb_transform_t *kb_transform_new(const char *const *drop, size_t n_drop, const char *const *redact,
                                 size_t n_redact, char *errstr, size_t errstr_size) {
    return kb_transform_new_keep(drop, n_drop, redact, n_redact, NULL, 0, errstr, errstr_size);
}

bool kb_transform_keep_path_valid(const char *path, char *errstr, size_t errstr_size) {
    kb_path_seg_t segs[KB_PATH_MAX_SEGS];
    size_t n;
    return kb_path_split(path, segs, &n, errstr, errstr_size);
}

void kb_transform_free(kb_transform_t *tf) {
    if (!tf)
        return;
    kb_tnode_free_kids(&tf->root);
    free(tf);
}

/* ---- kb_decode_object --------------------------------------------------- */

/* What to do with the current member's value once it is complete. */
enum {
    KB_PEND_NONE,
    KB_PEND_DROP,   /* cut the output back to value_mark (the key was never written) */
    KB_PEND_REDACT, /* replace the value by kb_redacted */
    KB_PEND_REDACT_B64, /* replace the value by kb_redacted_b64 */
    KB_PEND_KIND,   /* record a span in kb_objmeta_t */
    KB_PEND_APIV,
    KB_PEND_META,   /* the root's metadata object: nothing to record */
    KB_PEND_NS,
    KB_PEND_NAME,
    KB_PEND_UID,
    KB_PEND_RV,
    KB_PEND_LABELS,
};

enum { KB_ROLE_OTHER, KB_ROLE_ROOT, KB_ROLE_META };

typedef struct kb_dec_frame {
    const kb_tnode_t *node; /* object: its members are matched against node's kids;
                               array: the node every element stands at; NULL: no paths */
    size_t value_mark;      /* output offset where the current value starts */
    uint8_t is_array;
    uint8_t nonempty;       /* something was written into this container */
    uint8_t redact_members; /* object at a redact path: each member value is redacted;
                               KB_PEND_REDACT or KB_PEND_REDACT_B64, 0 when not */
    uint8_t filter;         /* object at a KB_KEEP_SOME node: members off every keep path
                               are dropped (node is then never NULL) */
    uint8_t role;           /* KB_ROLE_* (root object, root metadata object, other) */
    uint8_t pending;        /* KB_PEND_* for the current value */
} kb_dec_frame_t;

/* A redacted value stays a valid value of its field: a string field gets
 * "<redacted>", a base64 ([]byte) field the base64 of those same bytes, so
 * typed clients (client-go, kubectl describe) still decode the object. */
static const char kb_redacted[] = "\"<redacted>\"";
static const char kb_redacted_b64[] = "\"PHJlZGFjdGVkPg==\"";
_Static_assert(sizeof(kb_redacted_b64) >= sizeof(kb_redacted), "kb_dec_room reserves the longer one");

typedef struct kb_dec {
    const char *in;
    size_t n;
    kb_buf_t *out;
    kb_objmeta_t *meta;
    uint32_t seen; /* bit per KB_PEND_* recorded (first occurrence wins) */
} kb_dec_t;

/* Make sure the rest of the input (plus one redaction and the string
 * copier's slack) fits after output offset w. */
static void kb_dec_room(kb_dec_t *d, size_t w, size_t i) {
    size_t need = w + (d->n - i) + sizeof(kb_redacted_b64) + 16;
    if (need > d->out->cap) {
        size_t len = d->out->len;
        d->out->len = w;
        kb_buf_reserve(d->out, need - w);
        d->out->len = len;
    }
}

/* Apply a frame's pending action to the value at [f->value_mark, w). Returns
 * the new write offset, or (size_t)-1 with errstr set. */
static size_t kb_dec_finish_value(kb_dec_t *d, kb_dec_frame_t *f, size_t w, size_t i, char *errstr,
                                  size_t errstr_size) {
    unsigned pend = f->pending;
    f->pending = KB_PEND_NONE;
    if (pend == KB_PEND_NONE)
        return w;
    if (pend == KB_PEND_DROP)
        return f->value_mark;
    if (pend == KB_PEND_REDACT || pend == KB_PEND_REDACT_B64) {
        const char *r = pend == KB_PEND_REDACT ? kb_redacted : kb_redacted_b64;
        size_t rlen = pend == KB_PEND_REDACT ? sizeof(kb_redacted) - 1 : sizeof(kb_redacted_b64) - 1;
        kb_dec_room(d, f->value_mark, i);
        memcpy(d->out->data + f->value_mark, r, rlen);
        return f->value_mark + rlen;
    }
    if (d->seen & (1u << pend))
        return w; /* a duplicate key: the first one counts */
    d->seen |= 1u << pend;
    kb_span_t sp = {f->value_mark, w - f->value_mark};
    const char *v = d->out->data + sp.off;
    if (pend == KB_PEND_META)
        return w;
    if (pend == KB_PEND_LABELS) {
        if (v[0] == '{')
            d->meta->labels = sp;
        return w;
    }
    static const char *const names[] = {
        [KB_PEND_KIND] = "kind",      [KB_PEND_APIV] = "apiVersion",
        [KB_PEND_NS] = "namespace",   [KB_PEND_NAME] = "name",
        [KB_PEND_UID] = "uid",        [KB_PEND_RV] = "resourceVersion",
    };
    if (v[0] != '"' || memchr(v, '\\', sp.len)) {
        kb_errf(errstr, errstr_size, "offset %zu: %s must be a string without escapes", i,
                names[pend]);
        return (size_t)-1;
    }
    sp.off++;
    sp.len -= 2;
    switch (pend) {
    case KB_PEND_KIND: d->meta->kind = sp; break;
    case KB_PEND_APIV: d->meta->api_version = sp; break;
    case KB_PEND_NS: d->meta->ns = sp; break;
    case KB_PEND_NAME: d->meta->name = sp; break;
    case KB_PEND_UID: d->meta->uid = sp; break;
    default: d->meta->rv = sp; break;
    }
    return w;
}

/* How a value at redact node is replaced. */
static unsigned kb_redact_pend(const kb_tnode_t *node) {
    return node->base64 ? KB_PEND_REDACT_B64 : KB_PEND_REDACT;
}

/* The pending action for member key k[0..klen) of frame f (key not yet written). */
static unsigned kb_dec_member_action(kb_dec_t *d, const kb_dec_frame_t *f, const char *k,
                                     size_t klen, const kb_tnode_t **kid) {
    *kid = f->node ? kb_tnode_find(f->node, k, klen) : NULL;
    if (f->filter && (!*kid || (*kid)->keep == KB_KEEP_NO))
        return KB_PEND_DROP;
    if (f->redact_members) {
        *kid = NULL; /* the whole value is replaced: no paths below */
        return f->redact_members;
    }
    if (*kid && (*kid)->act == KB_TACT_DROP)
        return KB_PEND_DROP;
#define KB_KEY_IS(lit) (klen == sizeof(lit) - 1 && memcmp(k, lit, sizeof(lit) - 1) == 0)
    if (f->role == KB_ROLE_ROOT) {
        if (KB_KEY_IS("kind"))
            return KB_PEND_KIND;
        if (KB_KEY_IS("apiVersion"))
            return KB_PEND_APIV;
        if (KB_KEY_IS("metadata") && !(d->seen & (1u << KB_PEND_META)))
            return KB_PEND_META;
    } else if (f->role == KB_ROLE_META) {
        if (KB_KEY_IS("namespace"))
            return KB_PEND_NS;
        if (KB_KEY_IS("name"))
            return KB_PEND_NAME;
        if (KB_KEY_IS("uid"))
            return KB_PEND_UID;
        if (KB_KEY_IS("resourceVersion"))
            return KB_PEND_RV;
        if (KB_KEY_IS("labels"))
            return KB_PEND_LABELS;
    }
#undef KB_KEY_IS
    return KB_PEND_NONE;
}

static void kb_meta_shift(kb_span_t *sp, size_t from, size_t by) {
    if (sp->len && sp->off >= from)
        sp->off += by;
}

/* Insert "kind":…,"apiVersion":…, after the '{' at output offset at. */
static void kb_dec_insert_kind(kb_dec_t *d, size_t at, const char *kind, const char *api_version) {
    bool need_kind = kind && !(d->seen & (1u << KB_PEND_KIND));
    bool need_apiv = api_version && !(d->seen & (1u << KB_PEND_APIV));
    if (!need_kind && !need_apiv)
        return;
    kb_buf_t pre = KB_BUF_INIT;
    kb_span_t kind_sp = {0, 0}, apiv_sp = {0, 0};
    if (need_kind) {
        kb_buf_append_str(&pre, "\"kind\":");
        kind_sp.off = pre.len + 1;
        kb_buf_append_json_str(&pre, kind, strlen(kind));
        kind_sp.len = pre.len - 1 - kind_sp.off;
    }
    if (need_apiv) {
        kb_buf_append_str(&pre, need_kind ? ",\"apiVersion\":" : "\"apiVersion\":");
        apiv_sp.off = pre.len + 1;
        kb_buf_append_json_str(&pre, api_version, strlen(api_version));
        apiv_sp.len = pre.len - 1 - apiv_sp.off;
    }
    if (d->out->data[at + 1] != '}')
        kb_buf_append_char(&pre, ',');
    kb_objmeta_t *m = d->meta;
    kb_span_t *spans[] = {&m->ns, &m->name, &m->uid, &m->rv, &m->kind, &m->api_version, &m->labels};
    for (size_t k = 0; k < KB_ARRAY_LEN(spans); k++)
        kb_meta_shift(spans[k], at + 1, pre.len);
    kb_buf_reserve(d->out, pre.len);
    memmove(d->out->data + at + 1 + pre.len, d->out->data + at + 1, d->out->len - at - 1);
    memcpy(d->out->data + at + 1, pre.data, pre.len);
    d->out->len += pre.len;
    d->out->data[d->out->len] = '\0';
    if (need_kind)
        m->kind = (kb_span_t){at + 1 + kind_sp.off, kind_sp.len};
    if (need_apiv)
        m->api_version = (kb_span_t){at + 1 + apiv_sp.off, apiv_sp.len};
    kb_buf_fini(&pre);
}

kb_err_t kb_decode_object(const kb_transform_t *tf, const char *obj, size_t len, const char *kind,
                          const char *api_version, kb_buf_t *out, kb_objmeta_t *meta, char *errstr,
                          size_t errstr_size) {
    kb_objmeta_t scratch;
    if (!meta)
        meta = &scratch;
    memset(meta, 0, sizeof(*meta));
    kb_dec_t d = {obj, len, out, meta, 0};
    kb_dec_frame_t stack[KB_JSON_MAX_DEPTH];
    size_t depth = 0;
    const size_t start = out->len;
    const char *why = NULL;
    kb_json_status_t s;
    bool esc = false;

    kb_dec_room(&d, start, 0);
    char *base = out->data;
    char *w = base + start;
    size_t i = kb_json__skip_ws(obj, len, 0);
    if (i >= len || obj[i] != '{') {
        why = "not a JSON object";
        goto bad;
    }
    const kb_tnode_t *node = tf ? &tf->root : NULL;
    unsigned pend = KB_PEND_NONE;
    uint8_t role = KB_ROLE_ROOT;

value:
    /* A value starts at obj[i] (whitespace skipped); node, pend and role
     * describe where it stands. A scalar at a redact path is replaced; an
     * object there keeps its keys (see the frame set-up below). */
    if (i >= len)
        goto incomplete;
    if (node && node->act == KB_TACT_REDACT && obj[i] != '{' && obj[i] != '[')
        pend = kb_redact_pend(node);
    if (depth) {
        stack[depth - 1].value_mark = (size_t)(w - base);
        stack[depth - 1].pending = (uint8_t)pend;
    }
    switch (obj[i]) {
    case '{':
    case '[':
        if (depth == KB_JSON_MAX_DEPTH) {
            why = "nesting too deep";
            goto bad;
        }
        {
            kb_dec_frame_t *f = &stack[depth++];
            f->is_array = obj[i] == '[';
            f->nonempty = 0;
            f->role = role;
            f->pending = KB_PEND_NONE;
            f->node = node && node->act != KB_TACT_DROP ? node : NULL;
            f->redact_members = 0;
            f->filter = f->node && !f->is_array && f->node->keep == KB_KEEP_SOME;
            if (f->node && f->node->act == KB_TACT_REDACT) {
                if (!f->is_array) {
                    f->redact_members = (uint8_t)kb_redact_pend(f->node);
                    if (!f->filter)
                        f->node = NULL;
                }
            } else if (f->node && !f->node->n_kids) {
                f->node = NULL;
            }
        }
        *w++ = obj[i];
        i = kb_json__skip_ws(obj, len, i + 1);
        if (i >= len)
            goto incomplete;
        if (obj[i] == (stack[depth - 1].is_array ? ']' : '}')) {
            *w++ = obj[i++];
            depth--;
            goto after_value;
        }
        if (stack[depth - 1].is_array) {
            /* elements stand at the array's own node */
            node = stack[depth - 1].node;
            pend = KB_PEND_NONE;
            role = KB_ROLE_OTHER;
            goto value;
        }
        goto member;
    case '"':
        s = kb_json__string(obj, len, &i, &w, &esc);
        break;
    case 't':
    case 'f':
    case 'n':
        s = kb_json__literal(obj, len, &i, &w);
        break;
    default:
        if (obj[i] == '-' || (obj[i] >= '0' && obj[i] <= '9'))
            s = kb_json__number(obj, len, &i, &w);
        else
            s = KB_JSON_INVALID;
        break;
    }
    if (s != KB_JSON_OK)
        goto token_fail;

after_value:
    if (depth == 0)
        goto done;
    {
        kb_dec_frame_t *f = &stack[depth - 1];
        if (f->pending) {
            size_t wo = kb_dec_finish_value(&d, f, (size_t)(w - base), i, errstr, errstr_size);
            if (wo == (size_t)-1)
                goto fail;
            base = out->data;
            w = base + wo;
        }
        i = kb_json__skip_ws(obj, len, i);
        if (i >= len)
            goto incomplete;
        char c = obj[i];
        if (c == (f->is_array ? ']' : '}')) {
            *w++ = c;
            i++;
            depth--;
            goto after_value;
        }
        if (c != ',') {
            why = f->is_array ? "expected ',' or ']'" : "expected ',' or '}'";
            goto bad;
        }
        i = kb_json__skip_ws(obj, len, i + 1);
        if (f->is_array) {
            *w++ = ',';
            node = f->node;
            pend = KB_PEND_NONE;
            role = KB_ROLE_OTHER;
            goto value;
        }
    }

member:
    {
        kb_dec_frame_t *f = &stack[depth - 1];
        if (i >= len)
            goto incomplete;
        if (obj[i] != '"') {
            why = "expected a member name";
            goto bad;
        }
        size_t ks = i;
        char *kw = w + (f->nonempty ? 1 : 0);
        s = kb_json__string(obj, len, &i, &kw, &esc);
        if (s != KB_JSON_OK)
            goto token_fail;
        const kb_tnode_t *kid;
        pend = kb_dec_member_action(&d, f, obj + ks + 1, i - ks - 2, &kid);
        i = kb_json__skip_ws(obj, len, i);
        if (i >= len)
            goto incomplete;
        if (obj[i] != ':') {
            why = "expected ':'";
            goto bad;
        }
        i = kb_json__skip_ws(obj, len, i + 1);
        if (pend != KB_PEND_DROP) {
            /* keep the key: the comma goes in front of it */
            if (f->nonempty)
                *w = ',';
            w = kw;
            *w++ = ':';
            f->nonempty = 1;
        }
        node = kid;
        role = pend == KB_PEND_META ? KB_ROLE_META : KB_ROLE_OTHER;
        goto value;
    }

done:
    i = kb_json__skip_ws(obj, len, i);
    if (i != len) {
        why = "data after the object";
        goto bad;
    }
    out->len = (size_t)(w - base);
    out->data[out->len] = '\0';
    if (!meta->name.len) {
        why = "metadata.name is missing";
        goto bad;
    }
    meta->had_kind = (d.seen & (1u << KB_PEND_KIND)) && (d.seen & (1u << KB_PEND_APIV));
    kb_dec_insert_kind(&d, start, kind, api_version);
    return KB_OK;

token_fail:
    if (s == KB_JSON_INCOMPLETE)
        goto incomplete;
    why = "invalid token";
    goto bad;
incomplete:
    why = "unexpected end of input";
bad:
    kb_errf(errstr, errstr_size, "offset %zu: %s", i, why);
fail:
    out->len = start;
    if (out->data)
        out->data[start] = '\0';
    memset(meta, 0, sizeof(*meta));
    return KB_ERR_PARSE;
}

/* ---- envelopes: watch frames, list pages ------------------------------ */

/* Called for each member of an envelope object with the raw key contents and
 * the value's span; returns false (with errstr set) to stop. */
typedef bool (*kb_member_fn)(void *ctx, const char *b, const char *key, size_t klen, kb_span_t val,
                             char *errstr, size_t errstr_size);
/* Finds the end of a member's value in b[i..n), as kb_json_scan_value does
 * (*vs, *ve relative to b + i), for a caller that wants to look inside the
 * value while it is scanned instead of scanning it a second time. */
typedef kb_json_status_t (*kb_value_scan_fn)(void *ctx, const char *b, size_t n, size_t i, const char *key,
                                             size_t klen, size_t *vs, size_t *ve);

/* Walk the members of the object at b[0..n) in one validating pass (each
 * value is scanned once, by scan when given). False with errstr if b is not
 * exactly one object. */
static bool kb_for_each_member(const char *b, size_t n, kb_member_fn fn, kb_value_scan_fn scan, void *ctx,
                               char *errstr, size_t errstr_size) {
    const char *why = "expected a member name";
    bool esc = false;
    size_t i = kb_json__skip_ws(b, n, 0);
    if (i >= n || b[i] != '{') {
        why = "not a JSON object";
        goto bad;
    }
    i = kb_json__skip_ws(b, n, i + 1);
    if (i < n && b[i] == '}') {
        i++;
        goto end;
    }
    for (;;) {
        if (i >= n || b[i] != '"')
            goto bad;
        size_t ks = i;
        if (kb_json__string(b, n, &i, NULL, &esc) != KB_JSON_OK) {
            why = "invalid member name";
            goto bad;
        }
        size_t klen = i - ks - 2;
        i = kb_json__skip_ws(b, n, i);
        if (i >= n || b[i] != ':') {
            why = "expected ':'";
            goto bad;
        }
        i++;
        size_t vs, ve;
        kb_json_status_t s = scan ? scan(ctx, b, n, i, b + ks + 1, klen, &vs, &ve)
                                  : kb_json_scan_value(b + i, n - i, &vs, &ve);
        if (s != KB_JSON_OK) {
            why = s == KB_JSON_INVALID ? "invalid JSON value" : "unexpected end of input";
            i = s == KB_JSON_INVALID ? i + ve : n;
            goto bad;
        }
        kb_span_t val = {i + vs, ve - vs};
        if (!fn(ctx, b, b + ks + 1, klen, val, errstr, errstr_size))
            return false;
        i = kb_json__skip_ws(b, n, i + ve);
        if (i < n && b[i] == ',') {
            i = kb_json__skip_ws(b, n, i + 1);
            continue;
        }
        if (i < n && b[i] == '}') {
            i++;
            break;
        }
        why = "expected ',' or '}'";
        goto bad;
    }
end:
    if (kb_json__skip_ws(b, n, i) != n) {
        why = "data after the object";
        goto bad;
    }
    return true;
bad:
    kb_errf(errstr, errstr_size, "offset %zu: %s", i, why);
    return false;
}

static bool kb_key_is(const char *key, size_t klen, const char *name) {
    return klen == strlen(name) && memcmp(key, name, klen) == 0;
}

typedef struct kb_frame_ctx {
    kb_watch_frame_t *out;
    bool have_type, have_object;
} kb_frame_ctx_t;

static bool kb_frame_member(void *ctx, const char *b, const char *key, size_t klen, kb_span_t val,
                            char *errstr, size_t errstr_size) {
    static const struct {
        const char *name;
        kb_watch_type_t type;
    } types[] = {
        {"ADDED", KB_WATCH_ADDED},       {"MODIFIED", KB_WATCH_MODIFIED},
        {"DELETED", KB_WATCH_DELETED},   {"BOOKMARK", KB_WATCH_BOOKMARK},
        {"ERROR", KB_WATCH_ERROR},
    };
    kb_frame_ctx_t *fc = ctx;
    if (kb_key_is(key, klen, "type") && !fc->have_type) {
        kb_span_t in = kb_json_string_inner(b, val);
        for (size_t k = 0; k < KB_ARRAY_LEN(types); k++) {
            if (in.len && kb_key_is(b + in.off, in.len, types[k].name)) {
                fc->out->type = types[k].type;
                fc->have_type = true;
                return true;
            }
        }
        kb_errf(errstr, errstr_size, "offset %zu: unknown watch event type %.*s", val.off,
                (int)(val.len > 40 ? 40 : val.len), b + val.off);
        return false;
    }
    if (kb_key_is(key, klen, "object") && !fc->have_object) {
        if (b[val.off] != '{') {
            kb_errf(errstr, errstr_size, "offset %zu: watch event object is not an object",
                    val.off);
            return false;
        }
        fc->out->object = val;
        fc->have_object = true;
    }
    return true;
}

kb_err_t kb_decode_watch_frame(const char *frame, size_t len, kb_watch_frame_t *out, char *errstr,
                               size_t errstr_size) {
    kb_frame_ctx_t fc = {out, false, false};
    memset(out, 0, sizeof(*out));
    if (!kb_for_each_member(frame, len, kb_frame_member, NULL, &fc, errstr, errstr_size))
        return KB_ERR_PARSE;
    if (!fc.have_type || !fc.have_object) {
        kb_errf(errstr, errstr_size, "watch event without %s", fc.have_type ? "object" : "type");
        return KB_ERR_PARSE;
    }
    return KB_OK;
}

/* The value of member name of the object at b+obj, as a span of b. */
static bool kb_member(const char *b, kb_span_t obj, const char *name, kb_span_t *v) {
    if (!obj.len || b[obj.off] != '{' || !kb_json_object_get(b + obj.off, obj.len, name, v))
        return false;
    v->off += obj.off;
    return true;
}

/* The contents of string member `name` of the object at b+obj. */
static bool kb_get_string(const char *b, kb_span_t obj, const char *name, kb_span_t *out) {
    kb_span_t v;
    if (!kb_member(b, obj, name, &v) || b[v.off] != '"')
        return false;
    *out = kb_json_string_inner(b, v);
    return true;
}

bool kb_decode_object_rv(const char *obj, size_t len, kb_span_t *rv) {
    kb_span_t md;
    if (!kb_json_object_get(obj, len, "metadata", &md) || obj[md.off] != '{')
        return false;
    return kb_get_string(obj, md, "resourceVersion", rv);
}

typedef struct kb_list_ctx {
    kb_list_page_t *page;
    bool have_items, have_kind, have_meta;
    const char *why; /* set by kb_list_scan when items is not an array of objects */
} kb_list_ctx_t;

static void kb_list_add_item(kb_list_page_t *page, kb_span_t item) {
    if (page->n_items == page->cap_items) {
        page->cap_items = page->cap_items ? page->cap_items * 2 : 64;
        page->items = kb_realloc(page->items, page->cap_items * sizeof(*page->items));
    }
    page->items[page->n_items++] = item;
}

/* The array at b[i..n), element by element: each element is scanned once,
 * validated, and recorded as an item (a page's items are nearly all of its
 * bytes; scanning the array whole first and then each element again cost a
 * fifth of a paged list's ingest). *vs, *ve as kb_json_scan_value's. */
static kb_json_status_t kb_list_scan_items(kb_list_ctx_t *lc, const char *b, size_t n, size_t i, size_t *vs,
                                           size_t *ve) {
    size_t at = kb_json__skip_ws(b, n, i + 1); /* past the '[' at b[i] */
    *vs = 0;
    if (at < n && b[at] == ']') {
        *ve = at + 1 - i;
        return KB_JSON_OK;
    }
    for (;;) {
        size_t es = 0, ee = 0;
        kb_json_status_t s = kb_json_scan_value(b + at, n - at, &es, &ee);
        if (s != KB_JSON_OK) {
            *ve = at + ee - i;
            return s;
        }
        if (b[at + es] != '{') {
            lc->why = "list item is not an object";
            *ve = at + es - i;
            return KB_JSON_INVALID;
        }
        kb_list_add_item(lc->page, (kb_span_t){at + es, ee - es});
        at = kb_json__skip_ws(b, n, at + ee);
        if (at >= n)
            return KB_JSON_INCOMPLETE;
        if (b[at] == ']') {
            *ve = at + 1 - i;
            return KB_JSON_OK;
        }
        if (b[at] != ',') {
            *ve = at - i;
            return KB_JSON_INVALID;
        }
        at = kb_json__skip_ws(b, n, at + 1);
    }
}

/* The first "items" that is an array is split into items while it is
 * scanned; every other value is only scanned. */
static kb_json_status_t kb_list_scan(void *ctx, const char *b, size_t n, size_t i, const char *key, size_t klen,
                                     size_t *vs, size_t *ve) {
    kb_list_ctx_t *lc = ctx;
    size_t at = kb_json__skip_ws(b, n, i);
    if (lc->have_items || !kb_key_is(key, klen, "items") || at >= n || b[at] != '[')
        return kb_json_scan_value(b + i, n - i, vs, ve);
    kb_json_status_t s = kb_list_scan_items(lc, b, n, at, vs, ve);
    *vs += at - i;
    *ve += at - i;
    return s;
}

static bool kb_list_member(void *ctx, const char *b, const char *key, size_t klen, kb_span_t val,
                           char *errstr, size_t errstr_size) {
    kb_list_ctx_t *lc = ctx;
    if (kb_key_is(key, klen, "kind") && !lc->have_kind) {
        lc->have_kind = true;
        if (b[val.off] == '"')
            lc->page->kind = kb_json_string_inner(b, val);
    } else if (kb_key_is(key, klen, "metadata") && !lc->have_meta) {
        lc->have_meta = true;
        if (b[val.off] == '{') {
            kb_get_string(b, val, "resourceVersion", &lc->page->rv);
            kb_get_string(b, val, "continue", &lc->page->cont);
        }
    } else if (kb_key_is(key, klen, "items") && !lc->have_items) {
        lc->have_items = true; /* an array was split into items by kb_list_scan; "items":null is an empty list */
        if (b[val.off] != '[' && b[val.off] != 'n') {
            kb_errf(errstr, errstr_size, "offset %zu: items is not an array", val.off);
            return false;
        }
    }
    return true;
}

kb_err_t kb_decode_list(const char *body, size_t len, kb_list_page_t *page, char *errstr,
                        size_t errstr_size) {
    kb_list_ctx_t lc = {page, false, false, false, NULL};
    memset(page, 0, sizeof(*page));
    if (!kb_for_each_member(body, len, kb_list_member, kb_list_scan, &lc, errstr, errstr_size)) {
        if (lc.why)
            kb_errf(errstr, errstr_size, "%s", lc.why);
        goto fail;
    }
    if (!lc.have_items) {
        kb_errf(errstr, errstr_size, "list response without items");
        goto fail;
    }
    if (!page->cont.len)
        page->cont.off = 0;
    return KB_OK;
fail:
    kb_list_page_fini(page);
    return KB_ERR_PARSE;
}

void kb_list_page_fini(kb_list_page_t *page) {
    if (!page)
        return;
    free(page->items);
    memset(page, 0, sizeof(*page));
}

/* ---- Status ---------------------------------------------------------------- */

/* A small non-negative integer member (0 when absent, negative or not an integer). */
static int kb_status_int(const char *b, kb_span_t obj, const char *name) {
    kb_span_t v;
    long n = 0;
    if (!kb_member(b, obj, name, &v))
        return 0;
    for (size_t k = 0; k < v.len; k++) {
        char c = b[v.off + k];
        if (c < '0' || c > '9')
            return 0; /* negative, fraction or not a number */
        if (n < 1000000000L)
            n = n * 10 + (c - '0');
    }
    return (int)(n > 1000000000L ? 1000000000L : n);
}

/* A string member, unescaped, cut to fit dst at a UTF-8 character boundary. */
static void kb_status_str(const char *b, kb_span_t obj, const char *name, char *dst, size_t size) {
    kb_span_t v;
    if (!kb_member(b, obj, name, &v) || b[v.off] != '"')
        return;
    char *tmp = kb_malloc(v.len + 1); /* unescaping never makes a string longer */
    long n = kb_json_string_decode(b, v, tmp, v.len + 1);
    if (n >= 0) {
        size_t len = (size_t)n < size - 1 ? (size_t)n : size - 1;
        while (len < (size_t)n && len > 0 && ((unsigned char)tmp[len] & 0xC0) == 0x80)
            len--;
        memcpy(dst, tmp, len);
        dst[len] = '\0';
    }
    free(tmp);
}

kb_err_t kb_decode_status(const char *buf, size_t len, kb_status_t *st) {
    memset(st, 0, sizeof(*st));
    size_t s, e;
    if (kb_json_scan_value(buf, len, &s, &e) != KB_JSON_OK || buf[s] != '{' ||
        kb_json__skip_ws(buf, len, e) != len)
        return KB_ERR_PARSE;
    kb_span_t root = {s, e - s}, details, causes;
    st->code = kb_status_int(buf, root, "code");
    kb_status_str(buf, root, "reason", st->reason, sizeof(st->reason));
    kb_status_str(buf, root, "message", st->message, sizeof(st->message));
    if (!kb_member(buf, root, "details", &details))
        return KB_OK;
    st->retry_after = kb_status_int(buf, details, "retryAfterSeconds");
    if (kb_member(buf, details, "causes", &causes) && buf[causes.off] == '[') {
        /* causes[0]: the first value after '[' */
        size_t i = causes.off + 1;
        if (kb_json_scan_value(buf + i, causes.len - 1, &s, &e) == KB_JSON_OK) {
            kb_span_t first = {i + s, e - s};
            kb_status_str(buf, first, "reason", st->cause_reason, sizeof(st->cause_reason));
        }
    }
    return KB_OK;
}
