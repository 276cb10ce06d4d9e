/* tests/kubesim/store.c — objects, resources and the watch history.
 *
 * Design: every object version is serialized exactly once, when it is
 * written, into compact JSON with a fixed layout:
 *   {"kind":K,"apiVersion":A,"metadata":{"name":..,"namespace":..,"uid":..,
 *    "resourceVersion":"N","creationTimestamp":..,<other metadata>},<other fields>}
 * The offsets of the RV digits (and of the optional kubesim.io/churn
 * counter) are kept, so a deletion or a churn update derives the next
 * version with two memcpy calls instead of a parse. Watches and lists copy
 * these bytes as they are; a LIST item is "{" + the bytes after apiVersion.
 *
 * History is a ring per resource. Evicting an event raises the resource's
 * expired_rv, the lowest RV a watch may still start from; compaction raises
 * it to the current RV. One global counter numbers every write (like one
 * etcd cluster), so RVs seen by one resource have gaps.
 *
 * Locks: every _locked function runs under sim->mtx.
 */
#include "tests/kubesim/kubesim_int.h"

#include "common/alloc.h"
#include "common/hash.h"
#include "common/time.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const kb_sim__type_names[3] = {"ADDED", "MODIFIED", "DELETED"};

#define CHURN_ANNOTATION "\"kubesim.io/churn\":\""

kb_sim_obj_t *kb_sim__obj_ref(kb_sim_obj_t *obj) {
    atomic_fetch_add_explicit(&obj->refcnt, 1, memory_order_relaxed);
    return obj;
}

static void obj_free(kb_sim_obj_t *obj) {
    for (size_t i = 0; i < obj->nlabels; i++) {
        free(obj->labels[i].key);
        free(obj->labels[i].val);
    }
    free(obj->labels);
    if (obj->ns[0])
        free(obj->ns);
    free(obj->key);
    free(obj->uid);
    free(obj->json);
    free(obj);
}

void kb_sim__obj_unref(kb_sim_obj_t *obj) {
    if (obj && atomic_fetch_sub_explicit(&obj->refcnt, 1, memory_order_acq_rel) == 1)
        obj_free(obj);
}

/* Identity fields shared by all constructors. */
static kb_sim_obj_t *obj_new(const char *ns, const char *name, const char *uid, uint64_t rv) {
    kb_sim_obj_t *obj = kb_calloc(1, sizeof(*obj));
    atomic_init(&obj->refcnt, 1);
    obj->rv = rv;
    size_t nl = strlen(ns), nn = strlen(name);
    obj->key = kb_malloc(nl + nn + 2);
    if (nl) {
        memcpy(obj->key, ns, nl);
        obj->key[nl] = '\0';
        memcpy(obj->key + nl + 1, name, nn + 1);
        obj->ns = obj->key;
        obj->name = obj->key + nl + 1;
    } else {
        memcpy(obj->key, name, nn + 1);
        obj->ns = (char *)"";
        obj->name = obj->key;
    }
    obj->uid = kb_strdup(uid);
    return obj;
}

/* obj->key holds "ns\0name" until this joins it into "ns/name". */
static void obj_join_key(kb_sim_obj_t *obj) {
    if (obj->ns[0]) {
        char *ns = kb_strdup(obj->ns);
        obj->key[strlen(ns)] = '/';
        obj->ns = ns;
    }
}

static void find_churn(kb_sim_obj_t *obj) {
    const char *p = strstr(obj->json, CHURN_ANNOTATION);
    if (!p)
        return;
    size_t off = (size_t)(p - obj->json) + strlen(CHURN_ANNOTATION);
    if (off + KB_SIM_CHURN_DIGITS < obj->json_len && obj->json[off + KB_SIM_CHURN_DIGITS] == '"')
        obj->churn_off = off;
}

kb_sim_obj_t *kb_sim__obj_restamp(const kb_sim_obj_t *src, uint64_t rv, const uint64_t *churn) {
    kb_sim_obj_t *obj = kb_calloc(1, sizeof(*obj));
    atomic_init(&obj->refcnt, 1);
    obj->rv = rv;
    obj->key = kb_strdup(src->key);
    obj->ns = src->ns[0] ? kb_strndup(src->key, strlen(src->ns)) : (char *)"";
    obj->name = obj->key + (src->name - src->key);
    obj->uid = kb_strdup(src->uid);
    char digits[24];
    int dn = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)rv);
    size_t tail = src->json_len - src->rv_off - src->rv_len;
    obj->json_len = src->rv_off + (size_t)dn + tail;
    obj->json = kb_malloc(obj->json_len + 1);
    memcpy(obj->json, src->json, src->rv_off);
    memcpy(obj->json + src->rv_off, digits, (size_t)dn);
    memcpy(obj->json + src->rv_off + (size_t)dn, src->json + src->rv_off + src->rv_len, tail + 1);
    obj->item_off = src->item_off;
    obj->rv_off = src->rv_off;
    obj->rv_len = (size_t)dn;
    if (src->churn_off) {
        obj->churn_off = src->churn_off + (size_t)dn - src->rv_len;
        if (churn) {
            char c[KB_SIM_CHURN_DIGITS + 1];
            snprintf(c, sizeof(c), "%020llu", (unsigned long long)*churn);
            memcpy(obj->json + obj->churn_off, c, KB_SIM_CHURN_DIGITS);
        }
    }
    obj->nlabels = src->nlabels;
    obj->labels = kb_calloc(src->nlabels ? src->nlabels : 1, sizeof(*obj->labels));
    for (size_t i = 0; i < src->nlabels; i++) {
        obj->labels[i].key = kb_strdup(src->labels[i].key);
        obj->labels[i].val = kb_strdup(src->labels[i].val);
    }
    return obj;
}

/* ---- resources ---------------------------------------------------------- */

kb_sim_res_t *kb_sim__res_add(kb_sim_t *sim, const char *group, const char *version,
                              const char *resource, const char *kind, bool namespaced) {
    kb_sim_res_t *res = kb_calloc(1, sizeof(*res));
    res->group = kb_strdup(group);
    res->version = kb_strdup(version);
    res->resource = kb_strdup(resource);
    res->kind = kb_strdup(kind);
    kb_buf_t av = KB_BUF_INIT;
    if (group[0])
        kb_buf_appendf(&av, "%s/%s", group, version);
    else
        kb_buf_append_str(&av, version);
    res->api_version = kb_buf_steal(&av, NULL);
    res->namespaced = namespaced;
    res->objs = kb_strmap_new(1024);
    res->ring_cap = (size_t)sim->opts.history;
    res->ring = kb_calloc(res->ring_cap, sizeof(*res->ring));
    sim->res = kb_realloc(sim->res, (sim->nres + 1) * sizeof(*sim->res));
    sim->res[sim->nres++] = res;
    return res;
}

static void event_fini(kb_sim_event_t *ev) {
    kb_sim__obj_unref(ev->obj);
    kb_sim__obj_unref(ev->prev);
    kb_sim__obj_unref(atomic_load(&ev->prev_at_rv));
    memset(ev, 0, sizeof(*ev));
}

void kb_sim__res_free(kb_sim_res_t *res) {
    if (!res)
        return;
    for (size_t i = 0; i < res->ring_count; i++)
        event_fini(&res->ring[(res->seq_next - res->ring_count + i) % res->ring_cap]);
    free(res->ring);
    size_t pos = 0;
    const char *key;
    size_t len;
    void *val;
    while (kb_strmap_next(res->objs, &pos, &key, &len, &val))
        kb_sim__obj_unref(val);
    kb_strmap_destroy(res->objs);
    free(res->sorted);
    free(res->group);
    free(res->version);
    free(res->resource);
    free(res->kind);
    free(res->api_version);
    free(res);
}

kb_sim_res_t *kb_sim__res_find(kb_sim_t *sim, const char *group, const char *version, const char *resource) {
    for (size_t i = 0; i < sim->nres; i++) {
        kb_sim_res_t *res = sim->res[i];
        if (strcmp(res->resource, resource) == 0 && (!group || strcmp(res->group, group) == 0) &&
            (!version || strcmp(res->version, version) == 0))
            return res;
    }
    return NULL;
}

/* ---- building objects from JSON (write path) ---------------------------- */

static void append_json_value(kb_buf_t *b, json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    kb_buf_append_str(b, s);
    free(s);
}

static void append_kv(kb_buf_t *b, const char *k, json_t *v) {
    kb_buf_append_char(b, ',');
    kb_buf_append_json_str(b, k, strlen(k));
    kb_buf_append_char(b, ':');
    append_json_value(b, v);
}

static bool is_server_meta(const char *k) {
    return !strcmp(k, "name") || !strcmp(k, "namespace") || !strcmp(k, "uid") ||
           !strcmp(k, "resourceVersion") || !strcmp(k, "creationTimestamp");
}

kb_sim_obj_t *kb_sim__obj_build(const kb_sim_res_t *res, const void *root_v, const char *ns,
                                const char *name, const char *uid, uint64_t rv, const char *created,
                                char *errstr, size_t errstr_size) {
    json_t *root = (json_t *)root_v;
    if (!json_is_object(root)) {
        snprintf(errstr, errstr_size, "the body is not a JSON object");
        return NULL;
    }
    json_t *meta = json_object_get(root, "metadata");
    if (meta && !json_is_object(meta)) {
        snprintf(errstr, errstr_size, "metadata is not an object");
        return NULL;
    }
    json_t *labels = json_object_get(meta, "labels");
    if (labels && !json_is_object(labels) && !json_is_null(labels)) {
        snprintf(errstr, errstr_size, "metadata.labels is not an object");
        return NULL;
    }
    kb_sim_obj_t *obj = obj_new(res->namespaced ? ns : "", name, uid, rv);
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_appendf(&b, "{\"kind\":\"%s\",\"apiVersion\":\"%s\",", res->kind, res->api_version);
    obj->item_off = b.len;
    kb_buf_append_str(&b, "\"metadata\":{\"name\":");
    kb_buf_append_json_str(&b, obj->name, strlen(obj->name));
    if (res->namespaced) {
        kb_buf_append_str(&b, ",\"namespace\":");
        kb_buf_append_json_str(&b, obj->ns, strlen(obj->ns));
    }
    kb_buf_appendf(&b, ",\"uid\":\"%s\",\"resourceVersion\":\"", uid);
    obj->rv_off = b.len;
    kb_buf_appendf(&b, "%llu", (unsigned long long)rv);
    obj->rv_len = b.len - obj->rv_off;
    kb_buf_appendf(&b, "\",\"creationTimestamp\":\"%s\"", created);
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!is_server_meta(k) && !json_is_null(v))
            append_kv(&b, k, v);
    }
    kb_buf_append_char(&b, '}');
    json_object_foreach(root, k, v) {
        if (strcmp(k, "kind") && strcmp(k, "apiVersion") && strcmp(k, "metadata"))
            append_kv(&b, k, v);
    }
    kb_buf_append_char(&b, '}');
    obj->json = kb_buf_steal(&b, &obj->json_len);
    if (json_is_object(labels)) {
        obj->labels = kb_calloc(json_object_size(labels) + 1, sizeof(*obj->labels));
        json_object_foreach(labels, k, v) {
            if (!json_is_string(v))
                continue;
            obj->labels[obj->nlabels].key = kb_strdup(k);
            obj->labels[obj->nlabels++].val = kb_strdup(json_string_value(v));
        }
    }
    find_churn(obj);
    obj_join_key(obj);
    return obj;
}

/* ---- history and the current state -------------------------------------- */

void kb_sim__broadcast_locked(kb_sim_t *sim) {
    pthread_cond_broadcast(&sim->cond);
}

/* The lose_events fault: the next sim->lose_left events are kept in the
 * history (their RVs count, lists show their result) but no watcher sees them
 * (or only the watchers of one bearer token, sim->lose_for). */
static void ring_push(kb_sim_t *sim, kb_sim_res_t *res, int type, kb_sim_obj_t *obj, kb_sim_obj_t *prev) {
    if (res->ring_count == res->ring_cap) {
        kb_sim_event_t *old = &res->ring[(res->seq_next - res->ring_count) % res->ring_cap];
        res->expired_rv = old->rv;
        event_fini(old);
        res->ring_count--;
    }
    kb_sim_event_t *ev = &res->ring[res->seq_next % res->ring_cap];
    ev->type = type;
    ev->rv = obj->rv;
    ev->obj = obj;
    ev->prev = prev;
    ev->lost = sim->lose_left > 0;
    ev->lost_for = ev->lost ? sim->lose_for : 0;
    if (ev->lost)
        sim->lose_left--;
    atomic_store(&ev->prev_at_rv, NULL);
    res->seq_next++;
    res->ring_count++;
}

static int key_cmp(const void *a, const void *b) {
    return strcmp((*(kb_sim_obj_t *const *)a)->key, (*(kb_sim_obj_t *const *)b)->key);
}

void kb_sim__ensure_sorted_locked(kb_sim_res_t *res) {
    if (res->sorted_valid)
        return;
    size_t n = kb_strmap_count(res->objs);
    if (n > res->sorted_cap) {
        res->sorted_cap = n + n / 4 + 16;
        res->sorted = kb_realloc(res->sorted, res->sorted_cap * sizeof(*res->sorted));
    }
    size_t pos = 0, i = 0, len;
    const char *key;
    void *val;
    while (kb_strmap_next(res->objs, &pos, &key, &len, &val))
        res->sorted[i++] = val;
    res->nsorted = i;
    if (i > 1)
        qsort(res->sorted, i, sizeof(*res->sorted), key_cmp);
    res->sorted_valid = true;
}

size_t kb_sim__sorted_lower_locked(const kb_sim_res_t *res, const char *from, bool strictly_after) {
    size_t lo = 0, hi = res->nsorted;
    if (!from)
        return 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(res->sorted[mid]->key, from);
        if (c < 0 || (strictly_after && c == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void kb_sim__commit_locked(kb_sim_t *sim, kb_sim_res_t *res, int type, kb_sim_obj_t *obj) {
    uint64_t h = kb_fnv1a64(obj->key, strlen(obj->key));
    kb_sim_obj_t *old = kb_strmap_put(res->objs, obj->key, strlen(obj->key), h, kb_sim__obj_ref(obj));
    if (old && res->sorted_valid) {
        size_t i = kb_sim__sorted_lower_locked(res, obj->key, false);
        if (i < res->nsorted && res->sorted[i] == old)
            res->sorted[i] = obj;
        else
            res->sorted_valid = false;
    } else {
        res->sorted_valid = false;
    }
    KB_UNUSED(type);
    ring_push(sim, res, old ? KB_SIM_MODIFIED : KB_SIM_ADDED, kb_sim__obj_ref(obj), old);
    kb_sim__broadcast_locked(sim);
}

kb_sim_obj_t *kb_sim__delete_locked(kb_sim_t *sim, kb_sim_res_t *res, const char *key) {
    uint64_t h = kb_fnv1a64(key, strlen(key));
    kb_sim_obj_t *old = kb_strmap_del(res->objs, key, strlen(key), h);
    if (!old)
        return NULL;
    res->sorted_valid = false;
    kb_sim_obj_t *del = kb_sim__obj_restamp(old, ++sim->rv, NULL);
    kb_sim__obj_unref(old);
    ring_push(sim, res, KB_SIM_DELETED, kb_sim__obj_ref(del), NULL);
    kb_sim__broadcast_locked(sim);
    return del;
}

void kb_sim__compact_locked(kb_sim_t *sim) {
    for (size_t r = 0; r < sim->nres; r++) {
        kb_sim_res_t *res = sim->res[r];
        for (size_t i = 0; i < res->ring_count; i++)
            event_fini(&res->ring[(res->seq_next - res->ring_count + i) % res->ring_cap]);
        res->ring_count = 0;
        res->expired_rv = sim->rv;
    }
    if (sim->continue_min_rv < sim->rv)
        sim->continue_min_rv = sim->rv;
    kb_sim__broadcast_locked(sim);
}

/* ---- snapshot and restore (an etcd backup) --------------------------------- */

static kb_strmap_t *objs_copy(kb_strmap_t *from) {
    kb_strmap_t *to = kb_strmap_new(kb_strmap_count(from) + 16);
    size_t pos = 0, len;
    const char *key;
    void *val;
    while (kb_strmap_next(from, &pos, &key, &len, &val))
        kb_strmap_put(to, key, len, kb_fnv1a64(key, len), kb_sim__obj_ref(val));
    return to;
}

static void objs_free(kb_strmap_t *objs) {
    size_t pos = 0;
    void *val;
    while (objs && kb_strmap_next(objs, &pos, NULL, NULL, &val))
        kb_sim__obj_unref(val);
    kb_strmap_destroy(objs);
}

void kb_sim__snap_free(kb_sim_snap_t *snap) {
    if (!snap)
        return;
    for (size_t i = 0; i < snap->n; i++)
        objs_free(snap->objs[i]);
    free(snap->objs);
    free(snap->res);
    free(snap);
}

void kb_sim__snapshot_locked(kb_sim_t *sim) {
    kb_sim__snap_free(sim->snap);
    kb_sim_snap_t *snap = kb_calloc(1, sizeof(*snap));
    snap->rv = sim->rv;
    snap->n = sim->nres;
    snap->res = kb_calloc(sim->nres + 1, sizeof(*snap->res));
    snap->objs = kb_calloc(sim->nres + 1, sizeof(*snap->objs));
    for (size_t i = 0; i < sim->nres; i++) {
        snap->res[i] = sim->res[i];
        snap->objs[i] = objs_copy(sim->res[i]->objs);
    }
    sim->snap = snap;
}

/* Objects and RV go back to the snapshot (kept: it can be restored again);
 * the history is gone (a watch from an RV above the restored one is too
 * large, one below it too old), and every open watch is dropped, as the API
 * servers restarted on the restored etcd would. uids keep counting: a name
 * created again gets a new one. */
bool kb_sim__restore_locked(kb_sim_t *sim) {
    if (!sim->snap)
        return false;
    if (sim->rv > sim->rv_high)
        sim->rv_high = sim->rv;
    sim->rv = sim->snap->rv;
    for (size_t r = 0; r < sim->nres; r++) {
        kb_sim_res_t *res = sim->res[r];
        kb_strmap_t *objs = NULL;
        for (size_t i = 0; i < sim->snap->n && !objs; i++)
            if (sim->snap->res[i] == res)
                objs = objs_copy(sim->snap->objs[i]);
        objs_free(res->objs);
        res->objs = objs ? objs : kb_strmap_new(1024);
        res->sorted_valid = false;
    }
    kb_sim__compact_locked(sim); /* also expires every continue token below the restored RV */
    sim->drop_gen++;
    kb_sim__broadcast_locked(sim);
    return true;
}

void kb_sim__new_uid_locked(kb_sim_t *sim, char out[37]) {
    uint64_t n = ++sim->uid_seq;
    uint64_t h = kb_fnv1a64(&n, sizeof(n));
    snprintf(out, 37, "%08x-%04x-4%03x-8%03x-%012llx", (unsigned)(h >> 32), (unsigned)(h >> 16) & 0xffff,
             (unsigned)h & 0xfff, (unsigned)(n >> 48) & 0xfff, (unsigned long long)(n & 0xffffffffffffULL));
}

void kb_sim__now_rfc3339(char out[32]) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The slow path of a churn step: parse, set the annotation, rebuild. */
static kb_sim_obj_t *touch_slow(kb_sim_t *sim, kb_sim_res_t *res, const kb_sim_obj_t *cur, uint64_t counter) {
    json_t *root = json_loadb(cur->json, cur->json_len, 0, NULL);
    if (!root)
        return NULL;
    json_t *meta = json_object_get(root, "metadata");
    json_t *ann = json_object_get(meta, "annotations");
    if (!json_is_object(ann)) {
        ann = json_object();
        json_object_set_new(meta, "annotations", ann);
    }
    char c[KB_SIM_CHURN_DIGITS + 1];
    snprintf(c, sizeof(c), "%020llu", (unsigned long long)counter);
    json_object_set_new(ann, "kubesim.io/churn", json_string(c));
    const char *created = json_string_value(json_object_get(meta, "creationTimestamp"));
    char err[128];
    kb_sim_obj_t *obj = kb_sim__obj_build(res, root, cur->ns, cur->name, cur->uid, ++sim->rv,
                                          created ? created : "", err, sizeof(err));
    json_decref(root);
    return obj;
}

bool kb_sim__touch_locked(kb_sim_t *sim, kb_sim_res_t *res, const kb_sim_obj_t *cur, uint64_t counter) {
    kb_sim_obj_t *obj = cur->churn_off ? kb_sim__obj_restamp(cur, ++sim->rv, &counter)
                                       : touch_slow(sim, res, cur, counter);
    if (!obj)
        return false;
    kb_sim__commit_locked(sim, res, KB_SIM_MODIFIED, obj);
    kb_sim__obj_unref(obj);
    return true;
}

/* ---- generated objects --------------------------------------------------- */

void kb_sim__ensure_ns_locked(kb_sim_t *sim, const char *ns) {
    kb_sim_res_t *res = kb_sim__res_find(sim, "", "v1", "namespaces");
    if (!res || kb_strmap_get(res->objs, ns, strlen(ns), kb_fnv1a64(ns, strlen(ns))))
        return;
    char uid[37], created[32];
    kb_sim__new_uid_locked(sim, uid);
    kb_sim__now_rfc3339(created);
    json_t *root = json_pack("{s:{s:{s:s}},s:{s:[s]},s:{s:s}}", "metadata", "labels",
                             "kubernetes.io/metadata.name", ns, "spec", "finalizers", "kubernetes",
                             "status", "phase", "Active");
    char err[64];
    kb_sim_obj_t *obj = kb_sim__obj_build(res, root, "", ns, uid, ++sim->rv, created, err, sizeof(err));
    json_decref(root);
    kb_sim__commit_locked(sim, res, KB_SIM_ADDED, obj);
    kb_sim__obj_unref(obj);
}

/* A realistic Pod, written with printf: a Deployment-owned web server with
 * two containers, probes, env, volumes, managedFields and a full status. */
void kb_sim__gen_pod_locked(kb_sim_t *sim, kb_sim_res_t *res, const char *ns, size_t size) {
    uint64_t n = ++sim->gen_seq, rv = ++sim->rv;
    char name[64], uid[37], created[32], owner[37];
    snprintf(name, sizeof(name), "web-%06llu", (unsigned long long)n);
    kb_sim__new_uid_locked(sim, uid);
    kb_sim__new_uid_locked(sim, owner);
    kb_sim__now_rfc3339(created);
    const char *app = (n % 3 == 0) ? "web" : (n % 3 == 1) ? "api" : "worker";
    char hash[16];
    snprintf(hash, sizeof(hash), "%08llx", (unsigned long long)(kb_fnv1a64(app, strlen(app)) & 0xffffffffu));
    kb_sim_obj_t *obj = obj_new(ns, name, uid, rv);
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_reserve(&b, size + 4096);
    kb_buf_append_str(&b, "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",");
    obj->item_off = b.len;
    kb_buf_appendf(&b, "\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\",\"uid\":\"%s\",\"resourceVersion\":\"",
                   name, ns, uid);
    obj->rv_off = b.len;
    kb_buf_appendf(&b, "%llu", (unsigned long long)rv);
    obj->rv_len = b.len - obj->rv_off;
    kb_buf_appendf(&b,
        "\",\"creationTimestamp\":\"%s\",\"generateName\":\"%s-%s-\","
        "\"labels\":{\"app\":\"%s\",\"pod-template-hash\":\"%s\",\"tier\":\"%s\",\"kubesim.io/shard\":\"%llu\"},"
        "\"annotations\":{\"kubectl.kubernetes.io/restartedAt\":\"%s\",\"prometheus.io/scrape\":\"true\","
        "\"prometheus.io/port\":\"9090\",\"kubesim.io/churn\":\"%020d\"",
        created, app, hash, app, hash, (n % 2) ? "frontend" : "backend", (unsigned long long)(n % 16), created, 0);
    obj->churn_off = b.len - 1 - KB_SIM_CHURN_DIGITS;
    size_t pad_at = b.len;
    kb_buf_appendf(&b,
        "},\"ownerReferences\":[{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"%s-%s\","
        "\"uid\":\"%s\",\"controller\":true,\"blockOwnerDeletion\":true}],"
        "\"managedFields\":[{\"manager\":\"kube-controller-manager\",\"operation\":\"Update\",\"apiVersion\":\"v1\","
        "\"time\":\"%s\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:metadata\":{\"f:generateName\":{},"
        "\"f:labels\":{\".\":{},\"f:app\":{},\"f:pod-template-hash\":{}},\"f:ownerReferences\":{\".\":{}}},"
        "\"f:spec\":{\"f:containers\":{\"k:{\\\"name\\\":\\\"app\\\"}\":{\".\":{},\"f:image\":{},\"f:name\":{}}}}}},"
        "{\"manager\":\"kubelet\",\"operation\":\"Update\",\"apiVersion\":\"v1\",\"time\":\"%s\","
        "\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:status\":{\"f:conditions\":{},\"f:podIP\":{}}},"
        "\"subresource\":\"status\"}]},",
        app, hash, owner, created, created);
    kb_buf_appendf(&b,
        "\"spec\":{\"volumes\":[{\"name\":\"config\",\"configMap\":{\"name\":\"%s-config\",\"defaultMode\":420}},"
        "{\"name\":\"kube-api-access\",\"projected\":{\"sources\":[{\"serviceAccountToken\":{\"expirationSeconds\":3607,"
        "\"path\":\"token\"}}],\"defaultMode\":420}}],"
        "\"containers\":[{\"name\":\"app\",\"image\":\"registry.example.com/%s:1.%llu.0\","
        "\"ports\":[{\"name\":\"http\",\"containerPort\":8080,\"protocol\":\"TCP\"}],"
        "\"env\":[{\"name\":\"APP_NAME\",\"value\":\"%s\"},{\"name\":\"POD_NAME\",\"valueFrom\":{\"fieldRef\":"
        "{\"apiVersion\":\"v1\",\"fieldPath\":\"metadata.name\"}}},{\"name\":\"LOG_LEVEL\",\"value\":\"info\"}],"
        "\"resources\":{\"limits\":{\"cpu\":\"500m\",\"memory\":\"256Mi\"},\"requests\":{\"cpu\":\"100m\",\"memory\":\"128Mi\"}},"
        "\"volumeMounts\":[{\"name\":\"config\",\"mountPath\":\"/etc/app\"}],"
        "\"livenessProbe\":{\"httpGet\":{\"path\":\"/healthz\",\"port\":8080,\"scheme\":\"HTTP\"},\"initialDelaySeconds\":10,"
        "\"timeoutSeconds\":1,\"periodSeconds\":10,\"successThreshold\":1,\"failureThreshold\":3},"
        "\"readinessProbe\":{\"httpGet\":{\"path\":\"/ready\",\"port\":8080,\"scheme\":\"HTTP\"},\"timeoutSeconds\":1,"
        "\"periodSeconds\":5,\"successThreshold\":1,\"failureThreshold\":3},"
        "\"terminationMessagePath\":\"/dev/termination-log\",\"imagePullPolicy\":\"IfNotPresent\"},"
        "{\"name\":\"sidecar\",\"image\":\"registry.example.com/proxy:2.4.1\",\"args\":[\"--port=9090\"],"
        "\"resources\":{\"requests\":{\"cpu\":\"10m\",\"memory\":\"32Mi\"}},\"imagePullPolicy\":\"IfNotPresent\"}],"
        "\"restartPolicy\":\"Always\",\"terminationGracePeriodSeconds\":30,\"dnsPolicy\":\"ClusterFirst\","
        "\"serviceAccountName\":\"default\",\"nodeName\":\"node-%llu\",\"schedulerName\":\"default-scheduler\","
        "\"tolerations\":[{\"key\":\"node.kubernetes.io/not-ready\",\"operator\":\"Exists\",\"effect\":\"NoExecute\","
        "\"tolerationSeconds\":300}],\"priority\":0,\"enableServiceLinks\":true},",
        app, app, (unsigned long long)(n % 7), app, (unsigned long long)(n % 5));
    kb_buf_appendf(&b,
        "\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Initialized\",\"status\":\"True\","
        "\"lastTransitionTime\":\"%s\"},{\"type\":\"Ready\",\"status\":\"True\",\"lastTransitionTime\":\"%s\"},"
        "{\"type\":\"ContainersReady\",\"status\":\"True\",\"lastTransitionTime\":\"%s\"},"
        "{\"type\":\"PodScheduled\",\"status\":\"True\",\"lastTransitionTime\":\"%s\"}],"
        "\"hostIP\":\"10.0.%llu.%llu\",\"podIP\":\"10.244.%llu.%llu\",\"startTime\":\"%s\","
        "\"containerStatuses\":[{\"name\":\"app\",\"state\":{\"running\":{\"startedAt\":\"%s\"}},\"ready\":true,"
        "\"restartCount\":0,\"image\":\"registry.example.com/%s:1.%llu.0\",\"imageID\":\"registry.example.com/%s@sha256:%s%s\","
        "\"containerID\":\"containerd://%s\",\"started\":true}],\"qosClass\":\"Burstable\"}}",
        created, created, created, created, (unsigned long long)(n % 5), (unsigned long long)(n % 250 + 1),
        (unsigned long long)(n / 250 % 250), (unsigned long long)(n % 250 + 1), created, created, app,
        (unsigned long long)(n % 7), app, hash, uid, owner);
    if (b.len + 40 < size) { /* pad with an annotation to reach about size bytes */
        size_t pad = size - b.len - 40;
        kb_buf_t tail = KB_BUF_INIT;
        kb_buf_append(&tail, b.data + pad_at, b.len - pad_at);
        b.len = pad_at;
        kb_buf_append_str(&b, ",\"kubesim.io/padding\":\"");
        kb_buf_reserve(&b, pad);
        memset(b.data + b.len, 'x', pad);
        b.len += pad;
        kb_buf_append_char(&b, '"');
        kb_buf_append(&b, tail.data, tail.len);
        kb_buf_fini(&tail);
    }
    obj->json = kb_buf_steal(&b, &obj->json_len);
    const char *lk[4] = {"app", "pod-template-hash", "tier", "kubesim.io/shard"};
    char shard[24];
    snprintf(shard, sizeof(shard), "%llu", (unsigned long long)(n % 16));
    const char *lv[4] = {app, hash, (n % 2) ? "frontend" : "backend", shard};
    obj->labels = kb_calloc(4, sizeof(*obj->labels));
    for (size_t i = 0; i < 4; i++) {
        obj->labels[i].key = kb_strdup(lk[i]);
        obj->labels[i].val = kb_strdup(lv[i]);
    }
    obj->nlabels = 4;
    obj_join_key(obj);
    kb_sim__commit_locked(sim, res, KB_SIM_ADDED, obj);
    kb_sim__obj_unref(obj);
}
