/* tests/kubesim/http.c — the HTTP front: start/stop, routing, discovery,
 * LIST, GET and writes.
 *
 * Design: libmicrohttpd runs one thread per connection, so a watch may
 * block inside its content callback (watch.c) without stalling anyone.
 * Every request body is collected into a per-request buffer first and the
 * request is handled once, on the final access-handler call. Handlers take
 * sim->mtx only to read or change the store and build their response after
 * releasing it (objects are reference-counted and immutable), so a 500 MB
 * LIST does not block writers while it is copied.
 */
#include "tests/kubesim/kubesim_int.h"

#include "common/alloc.h"
#include "common/hash.h"
#include "common/time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BODY ((size_t)512 << 20)

typedef struct kb_sim_req {
    kb_buf_t body;
    bool started;
    bool too_big;
} kb_sim_req_t;

/* A parsed resource path: /api/v1/... or /apis/{g}/{v}/... */
typedef struct path {
    char group[128], version[64], ns[254], resource[128], name[254];
    bool has_ns, has_name;
} path_t;

/* ---- responses ------------------------------------------------------------- */

const char *kb_sim__reason_for(int code) {
    switch (code) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 405: return "MethodNotAllowed";
    case 409: return "Conflict";
    case 410: return "Expired";
    case 415: return "UnsupportedMediaType";
    case 422: return "Invalid";
    case 429: return "TooManyRequests";
    case 500: return "InternalError";
    case 503: return "ServiceUnavailable";
    case 504: return "Timeout";
    default: return "Unknown";
    }
}

char *kb_sim__status_json(int code, const char *reason, const char *message, const char *details_json,
                          const char *continue_token) {
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_append_str(&b, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{");
    if (continue_token)
        kb_buf_appendf(&b, "\"continue\":\"%s\"", continue_token);
    kb_buf_append_str(&b, "},\"status\":\"Failure\",\"message\":");
    kb_buf_append_json_str(&b, message, strlen(message));
    kb_buf_append_str(&b, ",\"reason\":");
    kb_buf_append_json_str(&b, reason, strlen(reason));
    if (details_json)
        kb_buf_appendf(&b, ",\"details\":%s", details_json);
    kb_buf_appendf(&b, ",\"code\":%d}", code);
    return kb_buf_steal(&b, NULL);
}

static enum MHD_Result query_to_json(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    kb_buf_t *b = cls;
    KB_UNUSED(kind);
    if (b->data[b->len - 1] != '{')
        kb_buf_append_char(b, ',');
    kb_buf_append_json_str(b, key, strlen(key));
    kb_buf_append_char(b, ':');
    kb_buf_append_json_str(b, value ? value : "", value ? strlen(value) : 0);
    return MHD_YES;
}

void kb_sim__reqlog(kb_sim_t *sim, struct MHD_Connection *conn, const char *method, const char *url,
                    int status) {
    if (strncmp(url, "/_sim/", 6) == 0)
        return; /* the log is for what clients under test sent */
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_append_str(&b, "{\"method\":");
    kb_buf_append_json_str(&b, method, strlen(method));
    kb_buf_append_str(&b, ",\"path\":");
    kb_buf_append_json_str(&b, url, strlen(url));
    kb_buf_append_str(&b, ",\"query\":{");
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, query_to_json, &b);
    kb_buf_appendf(&b, "},\"status\":%d,\"t\":%.6f}", status, (double)kb_now_mono_ns() / 1e9);
    char *line = kb_buf_steal(&b, NULL);
    pthread_mutex_lock(&sim->mtx);
    free(sim->reqlog[sim->reqlog_next]);
    sim->reqlog[sim->reqlog_next] = line;
    sim->reqlog_next = (sim->reqlog_next + 1) % KB_SIM_REQLOG;
    if (sim->reqlog_count < KB_SIM_REQLOG)
        sim->reqlog_count++;
    pthread_mutex_unlock(&sim->mtx);
}

enum MHD_Result kb_sim__respond(kb_sim_t *sim, struct MHD_Connection *conn, const char *method, const char *url,
                                int status, char *body, size_t len, int retry_after) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type",
                            (len && (body[0] == '{' || body[0] == '[')) ? "application/json" : "text/plain");
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", retry_after);
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    kb_sim__reqlog(sim, conn, method, url, status);
    enum MHD_Result r = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result respond_status_full(kb_sim_t *sim, struct MHD_Connection *conn, const char *method,
                                           const char *url, int code, const char *reason, const char *message,
                                           const char *details, const char *cont) {
    char *body = kb_sim__status_json(code, reason, message, details, cont);
    return kb_sim__respond(sim, conn, method, url, code, body, strlen(body), 0);
}

enum MHD_Result kb_sim__respond_status(kb_sim_t *sim, struct MHD_Connection *conn, const char *method,
                                       const char *url, int code, const char *reason, const char *message) {
    return respond_status_full(sim, conn, method, url, code, reason ? reason : kb_sim__reason_for(code), message,
                               NULL, NULL);
}

static enum MHD_Result respond_buf(kb_sim_t *sim, struct MHD_Connection *conn, const char *method,
                                   const char *url, int status, kb_buf_t *b) {
    size_t len;
    char *body = kb_buf_steal(b, &len);
    if (!body)
        body = kb_strdup("");
    return kb_sim__respond(sim, conn, method, url, status, body, len, 0);
}

static enum MHD_Result not_found(kb_sim_t *sim, struct MHD_Connection *conn, const char *method,
                                 const char *url, const char *resource, const char *name) {
    char msg[700];
    if (name)
        snprintf(msg, sizeof(msg), "%s \"%s\" not found", resource, name);
    else
        snprintf(msg, sizeof(msg), "the server could not find the requested resource");
    return kb_sim__respond_status(sim, conn, method, url, 404, "NotFound", msg);
}

/* ---- discovery ------------------------------------------------------------ */

static void append_resource_list(kb_sim_t *sim, const char *group, const char *version, kb_buf_t *b) {
    kb_buf_appendf(b, "{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":\"%s%s%s\",\"resources\":[",
                   group, group[0] ? "/" : "", version);
    bool first = true;
    for (size_t i = 0; i < sim->nres; i++) {
        kb_sim_res_t *res = sim->res[i];
        if (strcmp(res->group, group) || strcmp(res->version, version))
            continue;
        char singular[128];
        size_t k = 0;
        for (; res->kind[k] && k + 1 < sizeof(singular); k++)
            singular[k] = (char)((res->kind[k] >= 'A' && res->kind[k] <= 'Z') ? res->kind[k] + 32 : res->kind[k]);
        singular[k] = '\0';
        kb_buf_appendf(b,
                       "%s{\"name\":\"%s\",\"singularName\":\"%s\",\"namespaced\":%s,\"kind\":\"%s\","
                       "\"verbs\":[\"create\",\"delete\",\"get\",\"list\",\"patch\",\"update\",\"watch\"]}",
                       first ? "" : ",", res->resource, singular, res->namespaced ? "true" : "false", res->kind);
        first = false;
    }
    kb_buf_append_str(b, "]}");
}

static void append_group(kb_sim_t *sim, const char *group, kb_buf_t *b) {
    const char *ver = NULL;
    kb_buf_appendf(b, "{\"name\":\"%s\",\"versions\":[", group);
    for (size_t i = 0; i < sim->nres; i++) {
        if (strcmp(sim->res[i]->group, group))
            continue;
        bool seen = false;
        for (size_t j = 0; j < i; j++)
            seen |= !strcmp(sim->res[j]->group, group) && !strcmp(sim->res[j]->version, sim->res[i]->version);
        if (seen)
            continue;
        kb_buf_appendf(b, "%s{\"groupVersion\":\"%s/%s\",\"version\":\"%s\"}", ver ? "," : "", group,
                       sim->res[i]->version, sim->res[i]->version);
        if (!ver)
            ver = sim->res[i]->version;
    }
    kb_buf_appendf(b, "],\"preferredVersion\":{\"groupVersion\":\"%s/%s\",\"version\":\"%s\"}}", group, ver, ver);
}

/* Returns true and fills b if url is a discovery path. Locks: sim->mtx held. */
static bool discovery_locked(kb_sim_t *sim, const char *url, kb_buf_t *b) {
    if (!strcmp(url, "/version")) {
        kb_buf_append_str(b, "{\"major\":\"1\",\"minor\":\"32\",\"gitVersion\":\"v1.32.0-kubesim\","
                             "\"gitCommit\":\"0000000000000000000000000000000000000000\",\"gitTreeState\":\"clean\","
                             "\"buildDate\":\"2026-01-01T00:00:00Z\",\"goVersion\":\"go1.23.0\",\"compiler\":\"gc\","
                             "\"platform\":\"linux/amd64\"}");
    } else if (!strcmp(url, "/api")) {
        kb_buf_appendf(b, "{\"kind\":\"APIVersions\",\"versions\":[\"v1\"],\"serverAddressByClientCIDRs\":"
                          "[{\"clientCIDR\":\"0.0.0.0/0\",\"serverAddress\":\"%s:%d\"}]}", sim->opts.host, sim->port);
    } else if (!strcmp(url, "/api/v1")) {
        append_resource_list(sim, "", "v1", b);
    } else if (!strcmp(url, "/apis")) {
        kb_buf_append_str(b, "{\"kind\":\"APIGroupList\",\"apiVersion\":\"v1\",\"groups\":[");
        for (size_t i = 0; i < sim->nres; i++) {
            bool seen = !sim->res[i]->group[0];
            for (size_t j = 0; j < i && !seen; j++)
                seen = !strcmp(sim->res[j]->group, sim->res[i]->group);
            if (seen)
                continue;
            if (b->data[b->len - 1] != '[')
                kb_buf_append_char(b, ',');
            append_group(sim, sim->res[i]->group, b);
        }
        kb_buf_append_str(b, "]}");
    } else if (!strcmp(url, "/healthz") || !strcmp(url, "/readyz") || !strcmp(url, "/livez")) {
        kb_buf_append_str(b, "ok");
    } else if (!strncmp(url, "/apis/", 6)) {
        char g[128], v[64], extra[8];
        int n = sscanf(url + 6, "%127[^/]/%63[^/]/%7s", g, v, extra);
        if (n == 1) {
            bool any = false;
            for (size_t i = 0; i < sim->nres; i++)
                any |= !strcmp(sim->res[i]->group, g);
            if (!any)
                return false;
            kb_buf_append_str(b, "{\"kind\":\"APIGroup\",\"apiVersion\":\"v1\",");
            size_t at = b->len;
            append_group(sim, g, b);
            memmove(b->data + at, b->data + at + 1, b->len - at); /* drop the group's own '{' */
            b->len--;
        } else if (n == 2) {
            bool any = false;
            for (size_t i = 0; i < sim->nres; i++)
                any |= !strcmp(sim->res[i]->group, g) && !strcmp(sim->res[i]->version, v);
            if (!any)
                return false;
            append_resource_list(sim, g, v, b);
        } else {
            return false;
        }
    } else {
        return false;
    }
    return true;
}

/* ---- paths ------------------------------------------------------------------ */

static bool seg_copy(char *dst, size_t size, const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= size)
        return false;
    memcpy(dst, s, n + 1);
    return true;
}

static bool parse_path(const char *url, path_t *p) {
    memset(p, 0, sizeof(*p));
    char tmp[1024];
    if (strlen(url) >= sizeof(tmp))
        return false;
    strcpy(tmp, url);
    char *seg[8];
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(tmp, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (n == KB_ARRAY_LEN(seg))
            return false;
        seg[n++] = t;
    }
    size_t i;
    if (n >= 2 && !strcmp(seg[0], "api")) {
        if (!seg_copy(p->version, sizeof(p->version), seg[1]))
            return false;
        i = 2;
    } else if (n >= 3 && !strcmp(seg[0], "apis")) {
        if (!seg_copy(p->group, sizeof(p->group), seg[1]) || !seg_copy(p->version, sizeof(p->version), seg[2]))
            return false;
        i = 3;
    } else {
        return false;
    }
    size_t rest = n - i;
    char **s = seg + i;
    if (rest == 1)
        return seg_copy(p->resource, sizeof(p->resource), s[0]);
    if (rest == 2) /* a cluster-scoped object, e.g. the Namespace itself */
        return seg_copy(p->resource, sizeof(p->resource), s[0]) &&
               (p->has_name = seg_copy(p->name, sizeof(p->name), s[1]));
    if ((rest == 3 || rest == 4) && strcmp(s[0], "namespaces") == 0) {
        if (!(p->has_ns = seg_copy(p->ns, sizeof(p->ns), s[1])) || !seg_copy(p->resource, sizeof(p->resource), s[2]))
            return false;
        return rest == 3 || (p->has_name = seg_copy(p->name, sizeof(p->name), s[3]));
    }
    return false;
}

static const char *qarg(struct MHD_Connection *conn, const char *key) {
    return MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, key);
}

static bool is_true(const char *v) {
    return v && (!strcmp(v, "true") || !strcmp(v, "1"));
}

/* "": absent; returns -1 if not a plain decimal. */
static int parse_rv(const char *s, uint64_t *out) {
    *out = 0;
    if (!s || !*s)
        return 0;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9')
            return -1;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno)
        return -1;
    *out = v;
    return 0;
}

static void key_of(const kb_sim_res_t *res, const char *ns, const char *name, char *out, size_t size) {
    if (res->namespaced)
        snprintf(out, size, "%s/%s", ns, name);
    else
        snprintf(out, size, "%s", name);
}

static kb_sim_obj_t *lookup_locked(kb_sim_res_t *res, const char *key) {
    return kb_strmap_get(res->objs, key, strlen(key), kb_fnv1a64(key, strlen(key)));
}

/* ---- LIST --------------------------------------------------------------------- */

typedef struct list_q {
    const char *ns;
    kb_sel_t lsel, fsel;
    kb_shardsel_t ssel;
} list_q_t;

static bool obj_matches(const list_q_t *q, const kb_sim_obj_t *obj) {
    return (!q->ns || !strcmp(obj->ns, q->ns)) && kb_sim__labelsel_match(&q->lsel, obj->labels, obj->nlabels) &&
           kb_sim__fieldsel_match(&q->fsel, obj->ns, obj->name) && kb_sim__shardsel_match(&q->ssel, obj->ns, obj->uid);
}

/* shardSelector of the request into ssel: parsed where the gate is on, else
 * ignored as a server without it does. -1 with the reason in err; the caller
 * answers 500 as kube-apiserver 1.36.3 does (the parse error is not a Status). */
static int shardsel_arg(kb_sim_t *sim, struct MHD_Connection *conn, kb_shardsel_t *ssel, char *err, size_t n) {
    memset(ssel, 0, sizeof(*ssel));
    if (!sim->opts.sharded_list)
        return 0;
    if (kb_sim__shardsel_parse(qarg(conn, "shardSelector"), ssel, err, n) == 0)
        return 0;
    char why[256];
    snprintf(why, sizeof(why), "%s", err);
    snprintf(err, n, "invalid shard selector: %.200s", why);
    return -1;
}

static enum MHD_Result do_list(kb_sim_t *sim, struct MHD_Connection *conn, const char *method, const char *url,
                               kb_sim_res_t *res, const char *ns) {
    const char *limit_s = qarg(conn, "limit"), *cont = qarg(conn, "continue");
    const char *rvq = qarg(conn, "resourceVersion"), *rvm = qarg(conn, "resourceVersionMatch");
    char err[256];
    list_q_t q = {.ns = ns};
    kb_sim_obj_t **items = NULL;
    size_t nitems = 0;
    char *start = NULL;
    enum MHD_Result ret;
    long long limit = limit_s ? strtoll(limit_s, NULL, 10) : 0;
    uint64_t rv_req;
    if (cont && !*cont)
        cont = NULL;
    if (cont && rvq && *rvq && strcmp(rvq, "0"))
        return kb_sim__respond_status(sim, conn, method, url, 400, "BadRequest",
                                      "specifying resource version is not allowed when using continue");
    if (rvm && *rvm && (!rvq || !*rvq || cont))
        return kb_sim__respond_status(sim, conn, method, url, 422, "Invalid",
                                      "resourceVersionMatch is forbidden unless resourceVersion is provided "
                                      "and continue is not set");
    if (parse_rv(rvq, &rv_req) < 0) {
        snprintf(err, sizeof(err), "invalid resource version: %s", rvq);
        return kb_sim__respond_status(sim, conn, method, url, 400, "BadRequest", err);
    }
    if (kb_sim__labelsel_parse(qarg(conn, "labelSelector"), &q.lsel, err, sizeof(err)) < 0 ||
        kb_sim__fieldsel_parse(qarg(conn, "fieldSelector"), &q.fsel, err, sizeof(err)) < 0) {
        kb_sim__sel_fini(&q.lsel);
        return kb_sim__respond_status(sim, conn, method, url, 400, "BadRequest", err);
    }
    if (shardsel_arg(sim, conn, &q.ssel, err, sizeof(err)) < 0) {
        kb_sim__sel_fini(&q.lsel);
        kb_sim__sel_fini(&q.fsel);
        return kb_sim__respond_status(sim, conn, method, url, 500, "InternalError", err);
    }
    int64_t tok_rv = 0;
    if (cont && kb_sim__token_decode(cont, &tok_rv, &start) < 0) {
        ret = kb_sim__respond_status(sim, conn, method, url, 400, "BadRequest", "continue key is not valid");
        goto out;
    }
    bool all_at_once = (rvq && !strcmp(rvq, "0") && !cont) || limit <= 0; /* the watch cache ignores limit for RV=0 */
    pthread_mutex_lock(&sim->mtx);
    if (rv_req > sim->rv) {
        snprintf(err, sizeof(err), "Timeout: Too large resource version: %llu, current: %llu",
                 (unsigned long long)rv_req, (unsigned long long)sim->rv);
        pthread_mutex_unlock(&sim->mtx);
        char *body = kb_sim__status_json(504, "Timeout", err,
                                         "{\"causes\":[{\"reason\":\"ResourceVersionTooLarge\",\"message\":"
                                         "\"Too large resource version\"}],\"retryAfterSeconds\":1}", NULL);
        ret = kb_sim__respond(sim, conn, method, url, 504, body, strlen(body), 0);
        goto out;
    }
    if (cont && tok_rv >= 0 && ((uint64_t)tok_rv < sim->continue_min_rv || (uint64_t)tok_rv > sim->rv)) {
        pthread_mutex_unlock(&sim->mtx);
        kb_buf_t tok = KB_BUF_INIT;
        kb_sim__token_encode(-1, start, &tok);
        ret = respond_status_full(sim, conn, method, url, 410, "Expired",
                                  "The provided continue parameter is too old to display a consistent list "
                                  "result. You can start a new list without the continue parameter, or use the "
                                  "continue token in this response to retrieve the remainder of the results. "
                                  "Continuing with the provided token results in an inconsistent list - objects "
                                  "that were created, modified, or deleted between the time the first chunk was "
                                  "returned and now may show up in the list.",
                                  NULL, tok.data);
        kb_buf_fini(&tok);
        goto out;
    }
    uint64_t list_rv = (cont && tok_rv >= 0) ? (uint64_t)tok_rv : sim->rv;
    kb_sim__ensure_sorted_locked(res);
    char from[1024];
    size_t plen = 0, idx = 0;
    if (ns) {
        plen = (size_t)snprintf(from, sizeof(from), "%s/", ns);
        idx = kb_sim__sorted_lower_locked(res, from, false);
    }
    if (start) {
        snprintf(from + plen, sizeof(from) - plen, "%s", start);
        idx = kb_sim__sorted_lower_locked(res, from, true);
    }
    size_t remaining = 0;
    items = kb_malloc((res->nsorted + 1) * sizeof(*items));
    for (size_t i = idx; i < res->nsorted; i++) {
        kb_sim_obj_t *obj = res->sorted[i];
        if (ns && strncmp(obj->key, from, plen) != 0)
            break;
        if (!obj_matches(&q, obj))
            continue;
        if (all_at_once || nitems < (size_t)limit)
            items[nitems++] = kb_sim__obj_ref(obj);
        else
            remaining++;
    }
    pthread_mutex_unlock(&sim->mtx);

    kb_buf_t b = KB_BUF_INIT;
    size_t total = 256;
    for (size_t i = 0; i < nitems; i++)
        total += items[i]->json_len + 1;
    kb_buf_reserve(&b, total);
    kb_buf_appendf(&b, "{\"kind\":\"%sList\",\"apiVersion\":\"%s\",\"metadata\":{\"resourceVersion\":\"%llu\"",
                   res->kind, res->api_version, (unsigned long long)list_rv);
    if (remaining && nitems) {
        kb_buf_append_str(&b, ",\"continue\":\"");
        kb_sim__token_encode((int64_t)list_rv, items[nitems - 1]->key + plen, &b);
        kb_buf_append_char(&b, '"');
        if (!q.lsel.nreqs && !q.fsel.nreqs && !q.ssel.n)
            kb_buf_appendf(&b, ",\"remainingItemCount\":%zu", remaining);
    }
    if (q.ssel.n) { /* ListMeta.shardInfo: this list is one shard of the collection */
        kb_buf_append_str(&b, ",\"shardInfo\":{\"selector\":");
        kb_buf_append_json_str(&b, q.ssel.text, strlen(q.ssel.text));
        kb_buf_append_char(&b, '}');
    }
    kb_buf_append_str(&b, "},\"items\":[");
    for (size_t i = 0; i < nitems; i++) {
        kb_buf_append_str(&b, i ? ",{" : "{");
        kb_buf_append(&b, items[i]->json + items[i]->item_off, items[i]->json_len - items[i]->item_off);
    }
    kb_buf_append_str(&b, "]}");
    ret = respond_buf(sim, conn, method, url, 200, &b);
out:
    for (size_t i = 0; i < nitems; i++)
        kb_sim__obj_unref(items[i]);
    free(items);
    free(start);
    kb_sim__sel_fini(&q.lsel);
    kb_sim__sel_fini(&q.fsel);
    return ret;
}

/* ---- writes -------------------------------------------------------------------- */

/* RFC 7386 JSON merge patch applied to target in place. */
void kb_sim__merge_patch(void *target_v, void *patch_v) {
    json_t *target = target_v, *patch = patch_v;
    const char *k;
    json_t *v;
    json_object_foreach(patch, k, v) {
        json_t *cur = json_object_get(target, k);
        if (json_is_null(v))
            json_object_del(target, k);
        else if (json_is_object(v) && json_is_object(cur))
            kb_sim__merge_patch(cur, v);
        else
            json_object_set(target, k, v);
    }
}

static void obj_created(const kb_sim_obj_t *obj, char out[32]) {
    static const char pre[] = "\",\"creationTimestamp\":\"";
    const char *p = obj->json + obj->rv_off + obj->rv_len;
    out[0] = '\0';
    if (strncmp(p, pre, sizeof(pre) - 1) == 0) {
        p += sizeof(pre) - 1;
        size_t n = strcspn(p, "\"");
        if (n < 32) {
            memcpy(out, p, n);
            out[n] = '\0';
        }
    }
}

static enum MHD_Result respond_obj(kb_sim_t *sim, struct MHD_Connection *conn, const char *method,
                                   const char *url, int status, kb_sim_obj_t *obj) {
    char *body = kb_memdup(obj->json, obj->json_len + 1);
    size_t len = obj->json_len;
    kb_sim__obj_unref(obj);
    return kb_sim__respond(sim, conn, method, url, status, body, len, 0);
}

static enum MHD_Result do_write(kb_sim_t *sim, struct MHD_Connection *conn, const char *method, const char *url,
                                kb_sim_res_t *res, const path_t *p, const char *body, size_t body_len) {
    char err[512], key[520], uid[37], created[32];
    json_error_t jerr;
    bool create = !strcmp(method, "POST"), patch = !strcmp(method, "PATCH");
    if (patch) {
        const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
        if (!ct || (strncmp(ct, "application/merge-patch+json", 28) &&
                    strncmp(ct, "application/strategic-merge-patch+json", 38)))
            return kb_sim__respond_status(sim, conn, method, url, 415, "UnsupportedMediaType",
                                          "the body of the request was in an unknown format - accepted media types "
                                          "include: application/merge-patch+json, "
                                          "application/strategic-merge-patch+json");
    }
    json_t *root = json_loadb(body, body_len, 0, &jerr);
    if (!json_is_object(root)) {
        snprintf(err, sizeof(err), "the body is not a JSON object: %s", root ? "wrong type" : jerr.text);
        json_decref(root);
        return kb_sim__respond_status(sim, conn, method, url, 400, "BadRequest", err);
    }
    json_t *meta = json_object_get(root, "metadata");
    const char *bname = json_string_value(json_object_get(meta, "name"));
    const char *bns = json_string_value(json_object_get(meta, "namespace"));
    const char *gen = json_string_value(json_object_get(meta, "generateName"));
    const char *brv = json_string_value(json_object_get(meta, "resourceVersion"));
    char name[254];
    const char *ns = p->has_ns ? p->ns : (bns && *bns ? bns : "default");
    enum MHD_Result ret;
    if (p->has_ns && bns && *bns && strcmp(bns, p->ns)) {
        ret = kb_sim__respond_status(sim, conn, method, url, 400, "BadRequest",
                                     "the namespace of the provided object does not match the namespace sent on "
                                     "the request");
        goto out;
    }
    if (create) {
        if (bname && *bname)
            snprintf(name, sizeof(name), "%s", bname);
        else if (gen && *gen)
            snprintf(name, sizeof(name), "%s%05llx", gen, (unsigned long long)(kb_fnv1a64(&sim->rv, 8) & 0xfffff));
        else
            name[0] = '\0';
    } else {
        snprintf(name, sizeof(name), "%s", p->name);
    }
    if (!name[0] || strchr(name, '/')) {
        ret = kb_sim__respond_status(sim, conn, method, url, 422, "Invalid",
                                     "metadata.name: Required value: name or generateName is required");
        goto out;
    }
    key_of(res, ns, name, key, sizeof(key));
    pthread_mutex_lock(&sim->mtx);
    kb_sim_obj_t *cur = lookup_locked(res, key);
    if (create && cur) {
        pthread_mutex_unlock(&sim->mtx);
        snprintf(err, sizeof(err), "%s \"%s\" already exists", res->resource, name);
        ret = kb_sim__respond_status(sim, conn, method, url, 409, "AlreadyExists", err);
        goto out;
    }
    if (!create && !cur) {
        pthread_mutex_unlock(&sim->mtx);
        ret = not_found(sim, conn, method, url, res->resource, name);
        goto out;
    }
    if (!create && !patch && brv && *brv && strtoull(brv, NULL, 10) != cur->rv) {
        pthread_mutex_unlock(&sim->mtx);
        snprintf(err, sizeof(err), "Operation cannot be fulfilled on %s \"%s\": the object has been modified; "
                 "please apply your changes to the latest version and try again", res->resource, name);
        ret = kb_sim__respond_status(sim, conn, method, url, 409, "Conflict", err);
        goto out;
    }
    json_t *src = root;
    if (patch) {
        src = json_loadb(cur->json, cur->json_len, 0, NULL);
        kb_sim__merge_patch(src, root);
    }
    if (create) {
        kb_sim__new_uid_locked(sim, uid);
        kb_sim__now_rfc3339(created);
    } else {
        snprintf(uid, sizeof(uid), "%s", cur->uid);
        obj_created(cur, created);
    }
    kb_sim_obj_t *obj = kb_sim__obj_build(res, src, ns, name, uid, sim->rv + 1, created, err, sizeof(err));
    if (src != root)
        json_decref(src);
    if (!obj) {
        pthread_mutex_unlock(&sim->mtx);
        ret = kb_sim__respond_status(sim, conn, method, url, 400, "BadRequest", err);
        goto out;
    }
    sim->rv++;
    kb_sim__commit_locked(sim, res, create ? KB_SIM_ADDED : KB_SIM_MODIFIED, obj);
    pthread_mutex_unlock(&sim->mtx);
    ret = respond_obj(sim, conn, method, url, create ? 201 : 200, obj);
out:
    json_decref(root);
    return ret;
}

/* ---- dispatch ------------------------------------------------------------------- */

static enum MHD_Result do_resource(kb_sim_t *sim, struct MHD_Connection *conn, const char *method,
                                   const char *url, const char *body, size_t body_len) {
    path_t p;
    if (!parse_path(url, &p))
        return not_found(sim, conn, method, url, NULL, NULL);
    pthread_mutex_lock(&sim->mtx);
    kb_sim_res_t *res = kb_sim__res_find(sim, p.group, p.version, p.resource);
    pthread_mutex_unlock(&sim->mtx);
    if (!res || (p.has_ns && !res->namespaced))
        return not_found(sim, conn, method, url, NULL, NULL);
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool watch = get && !p.has_name && is_true(qarg(conn, "watch"));
    int verb = !get ? KB_SIM_VERB_WRITE : p.has_name ? KB_SIM_VERB_GET : watch ? KB_SIM_VERB_WATCH : KB_SIM_VERB_LIST;
    if (verb == KB_SIM_VERB_LIST && qarg(conn, "continue") && *qarg(conn, "continue"))
        verb = KB_SIM_VERB_CONTINUE;
    int code = 0, retry_after = 0;
    pthread_mutex_lock(&sim->mtx);
    char *fbody = kb_sim__fault_take_locked(sim, verb, res->resource, &code, &retry_after);
    pthread_mutex_unlock(&sim->mtx);
    if (fbody)
        return kb_sim__respond(sim, conn, method, url, code, fbody, strlen(fbody), retry_after);
    const char *ns = p.has_ns ? p.ns : NULL;
    if (get && p.has_name) {
        char key[520];
        key_of(res, ns ? ns : "", p.name, key, sizeof(key));
        pthread_mutex_lock(&sim->mtx);
        kb_sim_obj_t *obj = lookup_locked(res, key);
        if (obj)
            kb_sim__obj_ref(obj);
        pthread_mutex_unlock(&sim->mtx);
        return obj ? respond_obj(sim, conn, method, url, 200, obj) : not_found(sim, conn, method, url, res->resource, p.name);
    }
    if (watch) {
        char err[256];
        kb_sim_watch_params_t wp = {.res = res, .url = url, .ns = ns, .rv = qarg(conn, "resourceVersion")};
        const char *rvm = qarg(conn, "resourceVersionMatch");
        uint64_t rv_req;
        wp.bookmarks = is_true(qarg(conn, "allowWatchBookmarks"));
        wp.initial_events = is_true(qarg(conn, "sendInitialEvents"));
        const char *to = qarg(conn, "timeoutSeconds");
        wp.timeout_s = to ? strtoll(to, NULL, 10) : 0;
        if (parse_rv(wp.rv, &rv_req) < 0) {
            snprintf(err, sizeof(err), "invalid resource version: %s", wp.rv);
            return kb_sim__respond_status(sim, conn, method, url, 400, "BadRequest", err);
        }
        if (sim->opts.ignore_watch_list)
            wp.initial_events = false; /* a server that does not know the parameter */
        if (wp.initial_events && sim->opts.no_watch_list)
            return kb_sim__respond_status(sim, conn, method, url, 422, "Invalid",
                                          "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: "
                                          "sendInitialEvents is forbidden for watch unless the WatchList feature "
                                          "gate is enabled");
        if (qarg(conn, "sendInitialEvents") && (!rvm || strcmp(rvm, "NotOlderThan") || !wp.bookmarks))
            return kb_sim__respond_status(sim, conn, method, url, 422, "Invalid",
                                          "sendInitialEvents requires resourceVersionMatch=NotOlderThan and "
                                          "allowWatchBookmarks=true");
        if (kb_sim__labelsel_parse(qarg(conn, "labelSelector"), &wp.lsel, err, sizeof(err)) < 0 ||
            kb_sim__fieldsel_parse(qarg(conn, "fieldSelector"), &wp.fsel, err, sizeof(err)) < 0) {
            kb_sim__sel_fini(&wp.lsel);
            return kb_sim__respond_status(sim, conn, method, url, 400, "BadRequest", err);
        }
        if (shardsel_arg(sim, conn, &wp.ssel, err, sizeof(err)) < 0) {
            kb_sim__sel_fini(&wp.lsel);
            kb_sim__sel_fini(&wp.fsel);
            return kb_sim__respond_status(sim, conn, method, url, 500, "InternalError", err);
        }
        return kb_sim__watch_start(sim, conn, &wp);
    }
    if (get)
        return do_list(sim, conn, method, url, res, ns);
    if (!strcmp(method, "DELETE")) {
        if (!p.has_name)
            return kb_sim__respond_status(sim, conn, method, url, 405, "MethodNotAllowed",
                                          "collection delete is not supported by kubesim");
        char key[520];
        key_of(res, ns ? ns : "", p.name, key, sizeof(key));
        pthread_mutex_lock(&sim->mtx);
        kb_sim_obj_t *del = kb_sim__delete_locked(sim, res, key);
        pthread_mutex_unlock(&sim->mtx);
        return del ? respond_obj(sim, conn, method, url, 200, del) : not_found(sim, conn, method, url, res->resource, p.name);
    }
    bool create = !strcmp(method, "POST");
    if ((create && p.has_name) || (!create && !p.has_name) ||
        (!create && strcmp(method, "PUT") && strcmp(method, "PATCH")))
        return kb_sim__respond_status(sim, conn, method, url, 405, "MethodNotAllowed",
                                      "the server does not allow this method on the requested resource");
    return do_write(sim, conn, method, url, res, &p, body, body_len);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    kb_sim_t *sim = cls;
    kb_sim_req_t *req = *con_cls;
    KB_UNUSED(version);
    if (!req) {
        req = kb_calloc(1, sizeof(*req));
        *con_cls = req;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (req->body.len + *upload_data_size > MAX_BODY)
            req->too_big = true;
        else
            kb_buf_append(&req->body, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->started)
        return MHD_NO;
    req->started = true;
    if (req->too_big)
        return kb_sim__respond_status(sim, conn, method, url, 413, "RequestEntityTooLarge", "request body too large");
    const char *body = req->body.data ? req->body.data : "";
    if (!strncmp(url, "/_sim/", 6))
        return kb_sim__control(sim, conn, method, url, body, req->body.len);
    kb_buf_t b = KB_BUF_INIT;
    pthread_mutex_lock(&sim->mtx);
    bool disc = strcmp(method, "GET") == 0 && discovery_locked(sim, url, &b);
    pthread_mutex_unlock(&sim->mtx);
    if (disc)
        return respond_buf(sim, conn, method, url, 200, &b);
    kb_buf_fini(&b);
    return do_resource(sim, conn, method, url, body, req->body.len);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    kb_sim_req_t *req = *con_cls;
    KB_UNUSED(cls);
    KB_UNUSED(conn);
    KB_UNUSED(toe);
    if (req) {
        kb_buf_fini(&req->body);
        free(req);
        *con_cls = NULL;
    }
}

/* ---- lifecycle -------------------------------------------------------------------- */

static void add_builtin(kb_sim_t *sim) {
    kb_sim__res_add(sim, "", "v1", "pods", "Pod", true);
    kb_sim__res_add(sim, "", "v1", "configmaps", "ConfigMap", true);
    kb_sim__res_add(sim, "", "v1", "secrets", "Secret", true);
    kb_sim__res_add(sim, "", "v1", "services", "Service", true);
    kb_sim__res_add(sim, "", "v1", "events", "Event", true);
    kb_sim__res_add(sim, "", "v1", "namespaces", "Namespace", false);
    kb_sim__res_add(sim, "", "v1", "nodes", "Node", false);
    kb_sim__res_add(sim, "apps", "v1", "deployments", "Deployment", true);
}

kb_sim_t *kb_sim_start(const kb_sim_opts_t *opts, char *errstr, size_t errstr_size) {
    kb_sim_t *sim = kb_calloc(1, sizeof(*sim));
    if (opts)
        sim->opts = *opts;
    snprintf(sim->host_buf, sizeof(sim->host_buf), "%s",
             (sim->opts.host && *sim->opts.host) ? sim->opts.host : "127.0.0.1");
    sim->opts.host = sim->host_buf;
    if (sim->opts.history <= 0)
        sim->opts.history = 10000;
    if (sim->opts.bookmark_ms <= 0)
        sim->opts.bookmark_ms = 60000;
    pthread_mutex_init(&sim->mtx, NULL);
    kb_cond_init_mono(&sim->cond);
    atomic_init(&sim->stopping, false);
    atomic_init(&sim->churn_running, false);
    sim->rv = 1;
    add_builtin(sim);
    kb_sim__ensure_ns_locked(sim, "default");
    kb_sim__ensure_ns_locked(sim, "kube-system");

    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)sim->opts.port);
    if (inet_pton(AF_INET, sim->opts.host, &sa.sin_addr) != 1 || sim->opts.port < 0 || sim->opts.port > 65535) {
        snprintf(errstr, errstr_size, "kubesim: bad listen address %s:%d", sim->opts.host, sim->opts.port);
        goto fail;
    }
    sim->mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL,
                                0, NULL, NULL, on_request, sim, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                                MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(1u << 20),
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0, MHD_OPTION_NOTIFY_COMPLETED,
                                on_completed, sim, MHD_OPTION_END);
    if (!sim->mhd) {
        snprintf(errstr, errstr_size, "kubesim: cannot listen on %s:%d (address in use?)", sim->opts.host,
                 sim->opts.port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(sim->mhd, MHD_DAEMON_INFO_BIND_PORT);
    sim->port = di ? di->port : sim->opts.port;
    kb_sim__demo_start(sim);
    return sim;
fail:
    kb_sim_stop(sim);
    return NULL;
}

int kb_sim_port(const kb_sim_t *sim) {
    return sim->port;
}

void kb_sim_stop(kb_sim_t *sim) {
    if (!sim)
        return;
    pthread_mutex_lock(&sim->mtx);
    atomic_store(&sim->stopping, true);
    kb_sim__broadcast_locked(sim);
    pthread_mutex_unlock(&sim->mtx);
    kb_sim__control_stop(sim);
    if (sim->mhd)
        MHD_stop_daemon(sim->mhd);
    for (size_t i = 0; i < sim->nres; i++)
        kb_sim__res_free(sim->res[i]);
    free(sim->res);
    kb_sim__snap_free(sim->snap);
    kb_sim__faults_clear_locked(sim);
    free(sim->watch_err_line);
    for (size_t i = 0; i < KB_SIM_REQLOG; i++)
        free(sim->reqlog[i]);
    pthread_cond_destroy(&sim->cond);
    pthread_mutex_destroy(&sim->mtx);
    free(sim);
}
