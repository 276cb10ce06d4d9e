/* common/event.c — immutable, refcounted change events (see event.h).
 *
 * Layout: the struct, then key\0 ns\0 name\0 uid\0 rv\0 obj\0 in one block,
 * so an event is one malloc and one free, and its size is known exactly. A
 * packed event has an empty obj and its zstd frame after obj's NUL, in the
 * same block: a cache entry stays one allocation whether packed or not. Its
 * block comes from whoever packs it (informer/zcache.c: a slab of its own,
 * for a million of them) and goes back through the dictionary's drop hook.
 */
#include "common/event.h"

#include "common/alloc.h"
#include "common/fields.h"
#include "common/hash.h"

#include <stdlib.h>
#include <string.h>

static const char *const kb_ev_names[KB_EV_TYPE_COUNT] = {"ADDED", "MODIFIED", "DELETED", "SYNC",
                                                          "SNAPSHOT"};
static const char *const kb_ev_lower[KB_EV_TYPE_COUNT] = {"added", "modified", "deleted", "sync",
                                                          "snapshot"};

const char *kb_event_type_name(kb_event_type_t type) {
    return (unsigned)type < KB_EV_TYPE_COUNT ? kb_ev_names[type] : "UNKNOWN";
}

const char *kb_event_type_lower(kb_event_type_t type) {
    return (unsigned)type < KB_EV_TYPE_COUNT ? kb_ev_lower[type] : "unknown";
}

int kb_event_type_parse(const char *s, size_t n) {
    for (int i = 0; i < KB_EV_TYPE_COUNT; i++)
        if (strlen(kb_ev_names[i]) == n && !memcmp(kb_ev_names[i], s, n))
            return i;
    return -1;
}

kb_resource_t *kb_resource_new(const char *cluster, const char *informer, const char *group,
                               const char *version, const char *resource) {
    kb_resource_t *res = kb_calloc(1, sizeof(*res));
    atomic_init(&res->refcnt, 1);
    res->cluster = kb_strdup(cluster ? cluster : "");
    res->informer = kb_strdup(informer ? informer : "");
    res->group = kb_strdup(group ? group : "");
    res->version = kb_strdup(version ? version : "");
    res->resource = kb_strdup(resource ? resource : "");
    size_t glen = strlen(res->group);
    size_t vlen = strlen(res->version);
    res->api_version = kb_malloc(glen + vlen + 2);
    if (glen) {
        memcpy(res->api_version, res->group, glen);
        res->api_version[glen] = '/';
        memcpy(res->api_version + glen + 1, res->version, vlen + 1);
    } else {
        memcpy(res->api_version, res->version, vlen + 1);
    }
    atomic_init(&res->kind, NULL);
    return res;
}

kb_resource_t *kb_resource_ref(kb_resource_t *res) {
    atomic_fetch_add_explicit(&res->refcnt, 1, memory_order_relaxed);
    return res;
}

void kb_resource_unref(kb_resource_t *res) {
    if (!res || atomic_fetch_sub_explicit(&res->refcnt, 1, memory_order_acq_rel) != 1)
        return;
    free(res->cluster);
    free(res->informer);
    free(res->group);
    free(res->version);
    free(res->resource);
    free(res->api_version);
    free(atomic_load(&res->kind));
    free(res);
}

void kb_resource_set_kind(kb_resource_t *res, const char *kind, size_t len) {
    if (atomic_load(&res->kind))
        return;
    char *k = kb_strndup(kind, len);
    char *expected = NULL;
    if (!atomic_compare_exchange_strong(&res->kind, &expected, k))
        free(k);
}

const char *kb_resource_kind(const kb_resource_t *res) {
    const char *k = atomic_load(&((kb_resource_t *)res)->kind);
    return k ? k : "";
}

bool kb_decimal_u64(const char *s, size_t len, uint64_t *out) {
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false; /* does not fit in 64 bits */
        v = v * 10 + d;
    }
    *out = v;
    return len > 0;
}

uint64_t kb_rv_parse(const char *rv, size_t len) {
    uint64_t v = 0;
    return kb_decimal_u64(rv, len, &v) ? v : 0;
}

static char *kb_put(char *p, const char *s, size_t n) {
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    return p + n + 1;
}

/* The bytes of the event in made with extra bytes after obj's NUL. */
static size_t kb_event_bytes(const kb_event_init_t *in, size_t extra) {
    size_t key_len = in->ns_len ? in->ns_len + 1 + in->name_len : in->name_len;
    return sizeof(kb_event_t) + key_len + 1 + in->ns_len + 1 + in->name_len + 1 + in->uid_len + 1 + in->rv_len +
           1 + in->obj_len + 1 + extra;
}

/* kb_event_new with extra bytes after obj's NUL, in mem (kb_event_bytes of
 * them; NULL: kb_malloc'd); in->obj NULL leaves the object's room unwritten
 * (only its terminating NUL is set). */
static kb_event_t *kb_event_alloc(const kb_event_init_t *in, size_t extra, void *mem) {
    size_t key_len = in->ns_len ? in->ns_len + 1 + in->name_len : in->name_len;
    kb_event_t *ev = mem ? mem : kb_malloc(kb_event_bytes(in, extra));
    memset(ev, 0, sizeof(*ev));
    atomic_init(&ev->refcnt, 1);
    atomic_init(&ev->ann_span, 0);
    ev->type = in->type;
    ev->final_state_unknown = in->final_state_unknown;
    ev->res = kb_resource_ref(in->res);
    char *p = (char *)(ev + 1);

    ev->key = p;
    if (in->ns_len) {
        memcpy(p, in->ns, in->ns_len);
        p[in->ns_len] = '/';
        p = kb_put(p + in->ns_len + 1, in->name, in->name_len);
    } else {
        p = kb_put(p, in->name, in->name_len);
    }
    ev->key_len = key_len;
    ev->ns = p;
    p = kb_put(p, in->ns, in->ns_len);
    ev->ns_len = in->ns_len;
    ev->name = p;
    p = kb_put(p, in->name, in->name_len);
    ev->name_len = in->name_len;
    ev->uid = p;
    p = kb_put(p, in->uid, in->uid_len);
    ev->uid_len = in->uid_len;
    ev->rv = p;
    p = kb_put(p, in->rv, in->rv_len);
    ev->rv_len = in->rv_len;
    ev->obj = p;
    if (in->obj)
        kb_put(p, in->obj, in->obj_len);
    else
        p[in->obj_len] = '\0';
    ev->obj_len = in->obj_len;

    ev->labels_off = in->labels_off;
    ev->labels_len = in->labels_len;
    ev->rv_num = kb_rv_parse(in->rv, in->rv_len);
    ev->key_hash = kb_fnv1a64(ev->key, key_len);
    ev->observed_ns = in->observed_ns;
    ev->read_mono_ns = in->read_mono_ns;
    return ev;
}

kb_event_t *kb_event_new(const kb_event_init_t *in) {
    return kb_event_alloc(in, 0, NULL);
}

/* The init of a copy of ev with its identity, times and type; object none. */
static kb_event_init_t kb_event_identity(const kb_event_t *ev) {
    return (kb_event_init_t){
        .type = ev->type,
        .final_state_unknown = ev->final_state_unknown,
        .res = ev->res,
        .ns = ev->ns, .ns_len = ev->ns_len,
        .name = ev->name, .name_len = ev->name_len,
        .uid = ev->uid, .uid_len = ev->uid_len,
        .rv = ev->rv, .rv_len = ev->rv_len,
        .obj = "", .obj_len = 0,
        .observed_ns = ev->observed_ns,
        .read_mono_ns = ev->read_mono_ns,
    };
}

size_t kb_event_pack_bytes(const kb_event_t *ev, size_t len) {
    kb_event_init_t in = kb_event_identity(ev);
    return kb_event_bytes(&in, len);
}

kb_event_t *kb_event_pack(void *mem, const kb_event_t *ev, kb_event_zdict_t *zd, const void *frame, size_t len) {
    KB_ASSERT(mem && zd && !ev->zdict && ev->obj_len && len && len <= UINT32_MAX && ev->obj_len <= UINT32_MAX);
    kb_event_init_t in = kb_event_identity(ev);
    kb_event_t *p = kb_event_alloc(&in, len, mem);
    memcpy((char *)p->obj + 1, frame, len);
    p->seq = ev->seq;
    p->redelivery = ev->redelivery;
    p->zdict = zd;
    p->zlen = (uint32_t)len;
    p->zraw_len = (uint32_t)ev->obj_len;
    p->zlabels_off = (uint32_t)ev->labels_off;
    p->zlabels_len = (uint32_t)ev->labels_len;
    return p;
}

kb_event_t *kb_event_unpack_shell(const kb_event_t *packed) {
    KB_ASSERT(packed->zdict);
    kb_event_init_t in = kb_event_identity(packed);
    in.obj = NULL;
    in.obj_len = packed->zraw_len;
    in.labels_off = packed->zlabels_off;
    in.labels_len = packed->zlabels_len;
    kb_event_t *full = kb_event_alloc(&in, 0, NULL);
    full->seq = packed->seq;
    full->redelivery = packed->redelivery;
    return full;
}

kb_event_t *kb_event_retype(const kb_event_t *ev, kb_event_type_t type, bool final_state_unknown) {
    KB_ASSERT(!ev->zdict); /* a packed cache entry is expanded first (kb_informer_full) */
    kb_event_init_t in = {
        .type = type,
        .final_state_unknown = final_state_unknown,
        .res = ev->res,
        .ns = ev->ns, .ns_len = ev->ns_len,
        .name = ev->name, .name_len = ev->name_len,
        .uid = ev->uid, .uid_len = ev->uid_len,
        .rv = ev->rv, .rv_len = ev->rv_len,
        .obj = ev->obj, .obj_len = ev->obj_len,
        .labels_off = ev->labels_off, .labels_len = ev->labels_len,
        .observed_ns = ev->observed_ns,
        .read_mono_ns = ev->read_mono_ns,
    };
    kb_event_t *copy = kb_event_new(&in);
    copy->seq = ev->seq;
    copy->redelivery = ev->redelivery;
    return copy;
}

kb_event_t *kb_event_thin(const kb_event_t *ev) {
    kb_event_init_t in = kb_event_identity(ev);
    kb_event_t *copy = kb_event_new(&in);
    copy->seq = ev->seq;
    copy->redelivery = ev->redelivery;
    return copy;
}

kb_event_t *kb_event_ref(kb_event_t *ev) {
    atomic_fetch_add_explicit(&ev->refcnt, 1, memory_order_relaxed);
    return ev;
}

void kb_event_unref(kb_event_t *ev) {
    if (!ev || atomic_fetch_sub_explicit(&ev->refcnt, 1, memory_order_acq_rel) != 1)
        return;
    kb_resource_unref(ev->res);
    if (ev->zdict)
        ev->zdict->drop(ev->zdict, ev); /* frees ev's memory too: its maker allocated it */
    else
        free(ev);
}

size_t kb_event_size(const kb_event_t *ev) {
    return sizeof(*ev) + ev->key_len + ev->ns_len + ev->name_len + ev->uid_len + ev->rv_len + ev->obj_len + 6 +
           ev->zlen;
}

#define KB_EV_ANN_DONE (UINT64_C(1) << 63)

void kb_event_annotations(const kb_event_t *ev, const char **s, size_t *n) {
    kb_event_t *memo = (kb_event_t *)(uintptr_t)ev; /* ann_span only: see event.h */
    uint64_t span = atomic_load_explicit(&memo->ann_span, memory_order_relaxed);
    if (!(span & KB_EV_ANN_DONE)) {
        const char *meta, *ann;
        size_t mlen, alen;
        span = KB_EV_ANN_DONE;
        if (ev->obj_len < (UINT64_C(1) << 31) &&
            kb_fields_member(ev->obj, ev->obj_len, "metadata", 8, &meta, &mlen) &&
            kb_fields_member(meta, mlen, "annotations", 11, &ann, &alen) && *ann == '{')
            span |= (uint64_t)(ann - ev->obj) << 32 | alen;
        atomic_store_explicit(&memo->ann_span, span, memory_order_relaxed);
    }
    *n = (size_t)(span & UINT32_MAX);
    *s = ev->obj + (*n ? (size_t)((span & ~KB_EV_ANN_DONE) >> 32) : 0);
}
