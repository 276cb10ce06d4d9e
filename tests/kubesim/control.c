/* tests/kubesim/control.c — the /_sim/ control API and the workload threads.
 *
 * Design: control bodies are small JSON documents parsed with jansson; bad
 * ones get 400 with a message naming the field. Faults are plain counters
 * and generation numbers in kb_sim_t that request handlers and watchers
 * read under sim->mtx: a status fault is consumed by the next matching
 * request; drop/end/error faults bump a generation that every open watcher
 * compares with the one it started with; cut_watches does the same for the
 * watches of chosen namespaces (a per-namespace record of the generation of
 * its last cut, and a one-shot 410 for its next resuming watch). Workloads (generate, bulk) run on
 * the requesting connection's thread; churn and the demo run on their own
 * thread, taking sim->mtx per small batch so watchers interleave.
 * docs/kubesim.md is the reference for every endpoint.
 */
#include "tests/kubesim/kubesim_int.h"

#include "common/alloc.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/time.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- faults -------------------------------------------------------------- */

static void fault_free(kb_sim_fault_t *f) {
    free(f->resource);
    free(f->body);
    memset(f, 0, sizeof(*f));
}

void kb_sim__faults_clear_locked(kb_sim_t *sim) {
    for (size_t i = 0; i < sim->nfaults; i++)
        fault_free(&sim->faults[i]);
    sim->nfaults = 0;
}

kb_sim_cut_t *kb_sim__cut_find_locked(kb_sim_t *sim, const char *ns) {
    for (size_t i = 0; i < sim->ncuts; i++)
        if (!strcmp(sim->cuts[i].ns, ns))
            return &sim->cuts[i];
    return NULL;
}

/* Cut the watches of every namespace in the array nss; with expire, each one's
 * next resuming watch is answered 410. Returns NULL or an error message. */
static const char *cut_watches_locked(kb_sim_t *sim, json_t *nss, bool expire) {
    if (!json_is_array(nss) || json_array_size(nss) == 0)
        return "fault cut_watches: \"namespaces\" must be a non-empty array of strings";
    size_t i;
    json_t *v;
    json_array_foreach(nss, i, v) {
        const char *ns = json_string_value(v);
        if (!ns || !*ns || strlen(ns) >= sizeof(sim->cuts[0].ns))
            return "fault cut_watches: each namespace must be a string of 1-63 bytes";
    }
    sim->cut_gen++;
    json_array_foreach(nss, i, v) {
        const char *ns = json_string_value(v);
        kb_sim_cut_t *c = kb_sim__cut_find_locked(sim, ns);
        if (!c) {
            if (sim->ncuts == KB_SIM_MAX_CUTS)
                return "fault cut_watches: too many namespaces cut";
            c = &sim->cuts[sim->ncuts++];
            snprintf(c->ns, sizeof(c->ns), "%s", ns);
        }
        c->gen = sim->cut_gen;
        c->expire_next = c->expire_next || expire;
    }
    return NULL;
}

char *kb_sim__fault_take_locked(kb_sim_t *sim, int verb, const char *resource, int *code, int *retry_after) {
    for (size_t i = 0; i < sim->nfaults; i++) {
        kb_sim_fault_t *f = &sim->faults[i];
        if (!(f->verb & verb) || (f->resource && strcmp(f->resource, resource)))
            continue;
        *code = f->code;
        *retry_after = f->retry_after;
        char *body = kb_strdup(f->body);
        if (--f->count <= 0) {
            fault_free(f);
            memmove(f, f + 1, (sim->nfaults - i - 1) * sizeof(*f));
            sim->nfaults--;
        }
        return body;
    }
    return NULL;
}

static const char *default_message(int code) {
    switch (code) {
    case 410: return "The resourceVersion for the provided list is too old.";
    case 429: return "Too many requests, please try again later.";
    case 403: return "forbidden: kubesim injected fault";
    default: return "kubesim injected fault";
    }
}

static char *fault_status_body(int code, const char *reason, const char *message, int retry_after) {
    char details[64];
    if (retry_after > 0)
        snprintf(details, sizeof(details), "{\"retryAfterSeconds\":%d}", retry_after);
    return kb_sim__status_json(code, reason ? reason : kb_sim__reason_for(code),
                               message ? message : default_message(code), retry_after > 0 ? details : NULL, NULL);
}

static int verb_mask(const char *v) {
    if (!v || !strcmp(v, "any"))
        return KB_SIM_VERB_LIST | KB_SIM_VERB_WATCH | KB_SIM_VERB_GET | KB_SIM_VERB_WRITE | KB_SIM_VERB_CONTINUE;
    if (!strcmp(v, "list"))
        return KB_SIM_VERB_LIST | KB_SIM_VERB_CONTINUE;
    if (!strcmp(v, "continue"))
        return KB_SIM_VERB_CONTINUE;
    if (!strcmp(v, "watch"))
        return KB_SIM_VERB_WATCH;
    if (!strcmp(v, "get"))
        return KB_SIM_VERB_GET;
    if (!strcmp(v, "write"))
        return KB_SIM_VERB_WRITE;
    return 0;
}

static int jint(json_t *o, const char *k, int dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : json_is_real(v) ? (int)json_real_value(v) : dflt;
}

static const char *jstr(json_t *o, const char *k) {
    return json_string_value(json_object_get(o, k));
}

/* Returns NULL on success or a static error message. */
static const char *post_fault(kb_sim_t *sim, json_t *root) {
    const char *kind = jstr(root, "kind");
    if (!kind)
        return "fault: \"kind\" (string) is required";
    pthread_mutex_lock(&sim->mtx);
    const char *err = NULL;
    if (!strcmp(kind, "status")) {
        int code = jint(root, "code", 0), verb = verb_mask(jstr(root, "verb"));
        int count = jint(root, "count", 1);
        if (code < 100 || code > 599)
            err = "fault status: \"code\" must be an HTTP status (100-599)";
        else if (!verb)
            err = "fault status: \"verb\" must be list, continue, watch, get, write or any";
        else if (sim->nfaults == KB_SIM_MAX_FAULTS)
            err = "fault status: too many pending faults";
        else if (count > 0) {
            kb_sim_fault_t *f = &sim->faults[sim->nfaults++];
            f->verb = verb;
            f->code = code;
            f->count = count;
            f->retry_after = jint(root, "retry_after", 0);
            f->resource = kb_strdup(jstr(root, "resource"));
            const char *body = jstr(root, "body");
            f->body = body ? kb_strdup(body)
                           : fault_status_body(code, jstr(root, "reason"), jstr(root, "message"), f->retry_after);
        }
    } else if (!strcmp(kind, "watch_error")) {
        int code = jint(root, "code", 410);
        const char *reason = jstr(root, "reason");
        if (!reason)
            reason = code == 410 ? "Expired" : kb_sim__reason_for(code);
        const char *msg = jstr(root, "message");
        char *st = kb_sim__status_json(code, reason, msg ? msg : code == 410 ? "too old resource version" : "kubesim injected watch error", NULL, NULL);
        kb_buf_t b = KB_BUF_INIT;
        kb_buf_appendf(&b, "{\"type\":\"ERROR\",\"object\":%s}\n", st);
        free(st);
        free(sim->watch_err_line);
        sim->watch_err_line = kb_buf_steal(&b, NULL);
        if (sim->open_watches > 0)
            sim->watch_err_gen++;
        else
            sim->watch_err_next = true;
    } else if (!strcmp(kind, "drop_watches")) {
        sim->drop_gen++;
    } else if (!strcmp(kind, "cut_watches")) {
        err = cut_watches_locked(sim, json_object_get(root, "namespaces"), json_is_true(json_object_get(root, "expire")));
    } else if (!strcmp(kind, "end_watches")) {
        sim->end_gen++;
    } else if (!strcmp(kind, "malformed")) {
        sim->malformed_left += jint(root, "count", 1);
    } else if (!strcmp(kind, "lose_events")) {
        const char *token = jstr(root, "token");
        sim->lose_left += jint(root, "count", 1);
        sim->lose_for = 0;
        if (token) {
            kb_buf_t auth = KB_BUF_INIT;
            kb_buf_appendf(&auth, "Bearer %s", token);
            sim->lose_for = kb_fnv1a64(auth.data, auth.len);
            kb_buf_fini(&auth);
        }
    } else if (!strcmp(kind, "expire_continue")) {
        sim->continue_min_rv = ++sim->rv; /* a new revision: lists from now on get fresh tokens */
    } else if (!strcmp(kind, "clear")) {
        kb_sim__faults_clear_locked(sim);
        sim->malformed_left = 0;
        sim->lose_left = 0;
        sim->watch_err_next = false;
        for (size_t i = 0; i < sim->ncuts; i++)
            sim->cuts[i].expire_next = false;
    } else {
        err = "fault: unknown \"kind\" (status, watch_error, drop_watches, cut_watches, end_watches, malformed, "
              "lose_events, expire_continue, clear)";
    }
    kb_sim__broadcast_locked(sim);
    pthread_mutex_unlock(&sim->mtx);
    return err;
}

/* ---- bulk ------------------------------------------------------------------ */

/* One bulk line. Returns 0 or an HTTP status with errstr. Locks: sim->mtx held. */
static int bulk_one_locked(kb_sim_t *sim, json_t *line, char *errstr, size_t errstr_size) {
    const char *op = jstr(line, "op"), *resource = jstr(line, "resource"), *name = jstr(line, "name");
    const char *ns = jstr(line, "namespace");
    json_t *labels = json_object_get(line, "labels"), *data = json_object_get(line, "data");
    if (!op || !resource || !name || !*name) {
        snprintf(errstr, errstr_size, "\"op\", \"resource\" and \"name\" are required");
        return 400;
    }
    if ((labels && !json_is_object(labels)) || (data && !json_is_object(data))) {
        snprintf(errstr, errstr_size, "\"labels\" and \"data\" must be objects");
        return 400;
    }
    kb_sim_res_t *res = kb_sim__res_find(sim, jstr(line, "group"), jstr(line, "version"), resource);
    if (!res) {
        snprintf(errstr, errstr_size, "unknown resource %s", resource);
        return 404;
    }
    char key[520];
    if (!ns || !*ns)
        ns = "default";
    if (res->namespaced)
        snprintf(key, sizeof(key), "%s/%s", ns, name);
    else
        snprintf(key, sizeof(key), "%s", name);
    kb_sim_obj_t *cur = kb_strmap_get(res->objs, key, strlen(key), kb_fnv1a64(key, strlen(key)));
    if (!strcmp(op, "delete")) {
        kb_sim_obj_t *del = cur ? kb_sim__delete_locked(sim, res, key) : NULL;
        if (!del) {
            snprintf(errstr, errstr_size, "delete %s %s: not found", resource, key);
            return 404;
        }
        kb_sim__obj_unref(del);
        return 0;
    }
    bool create = !strcmp(op, "create");
    if (!create && strcmp(op, "update")) {
        snprintf(errstr, errstr_size, "unknown op %s (create, update, delete)", op);
        return 400;
    }
    if (create == (cur != NULL)) {
        snprintf(errstr, errstr_size, "%s %s %s: %s", op, resource, key, cur ? "already exists" : "not found");
        return create ? 409 : 404;
    }
    char uid[37], created[32];
    json_t *root;
    if (create) {
        root = json_object();
        json_object_set_new(root, "metadata", json_object());
        kb_sim__new_uid_locked(sim, uid);
        kb_sim__now_rfc3339(created);
    } else {
        root = json_loadb(cur->json, cur->json_len, 0, NULL);
        snprintf(uid, sizeof(uid), "%s", cur->uid);
        const char *c = jstr(json_object_get(root, "metadata"), "creationTimestamp");
        snprintf(created, sizeof(created), "%s", c ? c : "");
    }
    if (labels)
        json_object_set(json_object_get(root, "metadata"), "labels", labels);
    if (data)
        kb_sim__merge_patch(root, data);
    kb_sim_obj_t *obj = kb_sim__obj_build(res, root, ns, name, uid, sim->rv + 1, created, errstr, errstr_size);
    json_decref(root);
    if (!obj)
        return 400;
    sim->rv++;
    kb_sim__commit_locked(sim, res, create ? KB_SIM_ADDED : KB_SIM_MODIFIED, obj);
    kb_sim__obj_unref(obj);
    return 0;
}

static enum MHD_Result post_bulk(kb_sim_t *sim, struct MHD_Connection *conn, const char *url, const char *body,
                                 size_t len) {
    char err[600], msg[700];
    size_t applied = 0, lineno = 0;
    int code = 0;
    const char *p = body, *end = body + len;
    while (p < end && !code) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        lineno++;
        size_t n = (size_t)(le - p);
        bool blank = true;
        for (size_t i = 0; i < n && blank; i++)
            blank = p[i] == ' ' || p[i] == '\t' || p[i] == '\r';
        if (!blank) {
            json_error_t jerr;
            json_t *line = json_loadb(p, n, 0, &jerr);
            if (!json_is_object(line)) {
                snprintf(err, sizeof(err), "not a JSON object: %s", line ? "wrong type" : jerr.text);
                code = 400;
            } else {
                pthread_mutex_lock(&sim->mtx);
                code = bulk_one_locked(sim, line, err, sizeof(err));
                pthread_mutex_unlock(&sim->mtx);
                applied += code == 0;
            }
            json_decref(line);
        }
        p = le + 1;
    }
    if (code) {
        snprintf(msg, sizeof(msg), "bulk line %zu: %s (%zu lines applied before it)", lineno, err, applied);
        return kb_sim__respond_status(sim, conn, "POST", url, code, NULL, msg);
    }
    kb_buf_t b = KB_BUF_INIT;
    pthread_mutex_lock(&sim->mtx);
    kb_buf_appendf(&b, "{\"resourceVersion\":\"%llu\",\"applied\":%zu}", (unsigned long long)sim->rv, applied);
    pthread_mutex_unlock(&sim->mtx);
    return kb_sim__respond(sim, conn, "POST", url, 200, kb_buf_steal(&b, NULL), b.len, 0);
}

/* ---- generate, churn, demo ------------------------------------------------ */

static void generate(kb_sim_t *sim, kb_sim_res_t *res, int namespaces, long count, size_t size) {
    char ns[32];
    pthread_mutex_lock(&sim->mtx);
    for (int i = 0; i < namespaces; i++) {
        snprintf(ns, sizeof(ns), "ns-%d", i);
        kb_sim__ensure_ns_locked(sim, ns);
    }
    pthread_mutex_unlock(&sim->mtx);
    for (long i = 0; i < count; i += 64) {
        pthread_mutex_lock(&sim->mtx);
        for (long j = i; j < count && j < i + 64; j++) {
            snprintf(ns, sizeof(ns), "ns-%ld", j % namespaces);
            kb_sim__gen_pod_locked(sim, res, ns, size);
        }
        pthread_mutex_unlock(&sim->mtx);
    }
}

/* How many more ops (at most max) are due after done ops at rate ops/s since t0
 * (rate <= 0: max at once). Sleeps up to 1 ms when none is due yet; 0 once stopping. */
static uint64_t due_ops(kb_sim_t *sim, int64_t t0, uint64_t done, double rate, uint64_t max) {
    while (!atomic_load(&sim->stopping)) {
        if (rate <= 0)
            return max;
        uint64_t due = (uint64_t)((double)(kb_now_mono_ns() - t0) / 1e9 * rate) + 1;
        if (due > done)
            return due - done < max ? due - done : max;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* A random current object of res, or NULL. Locks: sim->mtx held. */
static kb_sim_obj_t *pick_locked(kb_sim_res_t *res, uint64_t n) {
    kb_sim__ensure_sorted_locked(res);
    return res->nsorted ? res->sorted[n % res->nsorted] : NULL;
}

static void *churn_main(void *arg) {
    kb_sim_t *sim = arg;
    kb_thread_set_name("kubesim:churn");
    int64_t t0 = kb_now_mono_ns();
    uint64_t i = 0, n;
    while (i < sim->churn_count && (n = due_ops(sim, t0, i, sim->churn_rate, 64)) > 0) {
        pthread_mutex_lock(&sim->mtx);
        uint64_t batch_end = i + n;
        for (; i < batch_end && i < sim->churn_count; i++) {
            kb_sim_obj_t *obj = pick_locked(sim->churn_res, i);
            if (!obj || !kb_sim__touch_locked(sim, sim->churn_res, obj, sim->rv + 1)) {
                i = sim->churn_count;
                break;
            }
            sim->churn_done_n++;
        }
        pthread_mutex_unlock(&sim->mtx);
    }
    atomic_store(&sim->churn_running, false);
    return NULL;
}

static void *demo_main(void *arg) {
    kb_sim_t *sim = arg;
    kb_thread_set_name("kubesim:demo");
    int64_t t0 = kb_now_mono_ns();
    uint64_t target = sim->opts.demo_objects > 0 ? (uint64_t)sim->opts.demo_objects : 30;
    for (uint64_t i = 0; due_ops(sim, t0, i, sim->opts.demo_rate, 1) > 0; i++) {
        uint64_t r = kb_fnv1a64(&i, sizeof(i));
        pthread_mutex_lock(&sim->mtx);
        kb_sim_res_t *res = kb_sim__res_find(sim, "", "v1", "pods");
        size_t n = kb_strmap_count(res->objs);
        unsigned dice = (unsigned)(r % 100);
        kb_sim_obj_t *obj = pick_locked(res, r >> 8);
        if (obj && (dice < 80 || (dice < 90 && n <= target / 2) || (dice >= 90 && n >= target * 2))) {
            kb_sim__touch_locked(sim, res, obj, i);
        } else if (obj && dice < 90) {
            kb_sim__obj_unref(kb_sim__delete_locked(sim, res, obj->key));
        } else {
            char ns[32];
            snprintf(ns, sizeof(ns), "ns-%llu", (unsigned long long)(r % 3));
            kb_sim__ensure_ns_locked(sim, ns);
            kb_sim__gen_pod_locked(sim, res, ns, 0);
        }
        pthread_mutex_unlock(&sim->mtx);
    }
    return NULL;
}

void kb_sim__demo_start(kb_sim_t *sim) {
    if (sim->opts.demo_objects > 0) {
        pthread_mutex_lock(&sim->mtx);
        kb_sim_res_t *res = kb_sim__res_find(sim, "", "v1", "pods");
        pthread_mutex_unlock(&sim->mtx);
        generate(sim, res, 3, sim->opts.demo_objects, 0);
    }
    if (sim->opts.demo_rate > 0 && pthread_create(&sim->demo_thr, NULL, demo_main, sim) == 0)
        sim->demo_started = true;
}

void kb_sim__control_stop(kb_sim_t *sim) {
    if (sim->demo_started)
        pthread_join(sim->demo_thr, NULL);
    if (sim->churn_started)
        pthread_join(sim->churn_thr, NULL);
    sim->demo_started = sim->churn_started = false;
}

/* ---- endpoints ------------------------------------------------------------ */

static kb_sim_res_t *res_from(kb_sim_t *sim, json_t *root, const char *resource) {
    pthread_mutex_lock(&sim->mtx);
    kb_sim_res_t *res = kb_sim__res_find(sim, jstr(root, "group"), jstr(root, "version"), resource);
    pthread_mutex_unlock(&sim->mtx);
    return res;
}

static enum MHD_Result ok_json(kb_sim_t *sim, struct MHD_Connection *conn, const char *method, const char *url,
                               int status, const char *fmt, unsigned long long v) {
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_appendf(&b, fmt, v);
    size_t len = b.len;
    return kb_sim__respond(sim, conn, method, url, status, kb_buf_steal(&b, NULL), len, 0);
}

static enum MHD_Result get_state(kb_sim_t *sim, struct MHD_Connection *conn, const char *url) {
    const char *resource = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "resource");
    const char *group = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "group");
    pthread_mutex_lock(&sim->mtx);
    kb_sim_res_t *res = kb_sim__res_find(sim, group, NULL, resource ? resource : "pods");
    if (!res) {
        pthread_mutex_unlock(&sim->mtx);
        return kb_sim__respond_status(sim, conn, "GET", url, 404, "NotFound", "state: unknown resource");
    }
    kb_sim__ensure_sorted_locked(res);
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_reserve(&b, res->nsorted * 96 + 64);
    kb_buf_appendf(&b, "{\"resourceVersion\":\"%llu\",\"items\":[", (unsigned long long)sim->rv);
    for (size_t i = 0; i < res->nsorted; i++) {
        kb_sim_obj_t *o = res->sorted[i];
        kb_buf_append_str(&b, i ? ",{\"key\":" : "{\"key\":");
        kb_buf_append_json_str(&b, o->key, strlen(o->key));
        kb_buf_appendf(&b, ",\"uid\":\"%s\",\"resourceVersion\":\"%llu\"}", o->uid, (unsigned long long)o->rv);
    }
    kb_buf_append_str(&b, "]}");
    pthread_mutex_unlock(&sim->mtx);
    size_t len = b.len;
    return kb_sim__respond(sim, conn, "GET", url, 200, kb_buf_steal(&b, NULL), len, 0);
}

static enum MHD_Result requests(kb_sim_t *sim, struct MHD_Connection *conn, const char *method, const char *url) {
    kb_buf_t b = KB_BUF_INIT;
    pthread_mutex_lock(&sim->mtx);
    for (size_t i = 0; i < sim->reqlog_count; i++) {
        size_t at = (sim->reqlog_next + KB_SIM_REQLOG - sim->reqlog_count + i) % KB_SIM_REQLOG;
        if (!strcmp(method, "GET")) {
            kb_buf_append_str(&b, sim->reqlog[at]);
            kb_buf_append_char(&b, '\n');
        } else {
            free(sim->reqlog[at]);
            sim->reqlog[at] = NULL;
        }
    }
    if (strcmp(method, "GET"))
        sim->reqlog_count = 0;
    pthread_mutex_unlock(&sim->mtx);
    size_t len = b.len;
    char *body = kb_buf_steal(&b, NULL);
    return kb_sim__respond(sim, conn, method, url, 200, body ? body : kb_strdup(""), len, 0);
}

static enum MHD_Result post_resource(kb_sim_t *sim, struct MHD_Connection *conn, const char *url, json_t *root) {
    const char *g = jstr(root, "group"), *v = jstr(root, "version"), *r = jstr(root, "resource");
    const char *k = jstr(root, "kind");
    json_t *nsd = json_object_get(root, "namespaced");
    if (!g || !v || !*v || !r || !*r || !k || !*k || (nsd && !json_is_boolean(nsd)) || strchr(r, '/') ||
        strchr(g, '/') || strchr(v, '/'))
        return kb_sim__respond_status(sim, conn, "POST", url, 400, "BadRequest",
                                      "resources: \"group\", \"version\", \"resource\", \"kind\" (strings) and "
                                      "\"namespaced\" (bool) are required");
    pthread_mutex_lock(&sim->mtx);
    bool exists = kb_sim__res_find(sim, g, v, r) != NULL;
    if (!exists)
        kb_sim__res_add(sim, g, v, r, k, nsd ? json_is_true(nsd) : true);
    pthread_mutex_unlock(&sim->mtx);
    if (exists)
        return kb_sim__respond_status(sim, conn, "POST", url, 409, "AlreadyExists", "resource already registered");
    return ok_json(sim, conn, "POST", url, 201, "{\"ok\":true%.0llu}", 0);
}

static enum MHD_Result post_churn(kb_sim_t *sim, struct MHD_Connection *conn, const char *url, json_t *root) {
    const char *resource = jstr(root, "resource");
    kb_sim_res_t *res = res_from(sim, root, resource ? resource : "pods");
    json_t *cnt = json_object_get(root, "count"), *rate = json_object_get(root, "rate");
    if (!res || !json_is_integer(cnt) || json_integer_value(cnt) < 0 || (rate && !json_is_number(rate)))
        return kb_sim__respond_status(sim, conn, "POST", url, 400, "BadRequest",
                                      "churn: known \"resource\", \"count\" (integer >= 0) and \"rate\" (number) "
                                      "expected");
    if (atomic_load(&sim->churn_running))
        return kb_sim__respond_status(sim, conn, "POST", url, 409, "Conflict", "churn: already running");
    if (sim->churn_started)
        pthread_join(sim->churn_thr, NULL);
    sim->churn_started = false;
    pthread_mutex_lock(&sim->mtx);
    sim->churn_res = res;
    sim->churn_count = (uint64_t)json_integer_value(cnt);
    sim->churn_done_n = 0;
    sim->churn_rate = rate ? json_number_value(rate) : 0;
    pthread_mutex_unlock(&sim->mtx);
    atomic_store(&sim->churn_running, true);
    if (pthread_create(&sim->churn_thr, NULL, churn_main, sim) != 0) {
        atomic_store(&sim->churn_running, false);
        return kb_sim__respond_status(sim, conn, "POST", url, 500, "InternalError", "churn: cannot start thread");
    }
    sim->churn_started = true;
    return ok_json(sim, conn, "POST", url, 202, "{\"started\":true,\"count\":%llu}", sim->churn_count);
}

static enum MHD_Result post_generate(kb_sim_t *sim, struct MHD_Connection *conn, const char *url, json_t *root) {
    const char *resource = jstr(root, "resource");
    int namespaces = jint(root, "namespaces", 3), size = jint(root, "size", 0);
    json_t *cnt = json_object_get(root, "count");
    if ((resource && strcmp(resource, "pods")) || !json_is_integer(cnt) || json_integer_value(cnt) < 0 ||
        namespaces < 1 || size < 0 || size > (64 << 20))
        return kb_sim__respond_status(sim, conn, "POST", url, 400, "BadRequest",
                                      "generate: \"resource\" must be pods, \"count\" an integer >= 0, "
                                      "\"namespaces\" >= 1, \"size\" 0..64Mi");
    generate(sim, res_from(sim, root, "pods"), namespaces, (long)json_integer_value(cnt), (size_t)size);
    pthread_mutex_lock(&sim->mtx);
    uint64_t rv = sim->rv;
    pthread_mutex_unlock(&sim->mtx);
    return ok_json(sim, conn, "POST", url, 200, "{\"resourceVersion\":\"%llu\"}", rv);
}

enum MHD_Result kb_sim__control(kb_sim_t *sim, struct MHD_Connection *conn, const char *method, const char *url,
                                const char *body, size_t body_len) {
    const char *ep = url + 6;
    bool post = !strcmp(method, "POST"), get = !strcmp(method, "GET");
    if (get && !strcmp(ep, "state"))
        return get_state(sim, conn, url);
    if ((get || !strcmp(method, "DELETE")) && !strcmp(ep, "requests"))
        return requests(sim, conn, method, url);
    if (get && !strcmp(ep, "churn")) {
        pthread_mutex_lock(&sim->mtx);
        unsigned long long done = sim->churn_done_n;
        pthread_mutex_unlock(&sim->mtx);
        bool running = atomic_load(&sim->churn_running);
        return ok_json(sim, conn, method, url, 200, running ? "{\"running\":true,\"done\":%llu}"
                                                            : "{\"running\":false,\"done\":%llu}", done);
    }
    if (post && (!strcmp(ep, "compact") || !strcmp(ep, "bookmark"))) {
        pthread_mutex_lock(&sim->mtx);
        if (ep[0] == 'c')
            kb_sim__compact_locked(sim);
        else
            sim->bookmark_gen++;
        kb_sim__broadcast_locked(sim);
        unsigned long long rv = sim->rv;
        pthread_mutex_unlock(&sim->mtx);
        return ok_json(sim, conn, method, url, 200, "{\"resourceVersion\":\"%llu\"}", rv);
    }
    if (post && (!strcmp(ep, "snapshot") || !strcmp(ep, "restore"))) {
        pthread_mutex_lock(&sim->mtx);
        bool ok = true;
        if (ep[0] == 's')
            kb_sim__snapshot_locked(sim);
        else
            ok = kb_sim__restore_locked(sim);
        unsigned long long rv = sim->rv;
        pthread_mutex_unlock(&sim->mtx);
        if (!ok)
            return kb_sim__respond_status(sim, conn, method, url, 409, "Conflict", "restore: no snapshot taken");
        return ok_json(sim, conn, method, url, 200, "{\"resourceVersion\":\"%llu\"}", rv);
    }
    if (post && !strcmp(ep, "bulk"))
        return post_bulk(sim, conn, url, body, body_len);
    static const char *const json_eps[] = {"fault", "resources", "churn", "generate"};
    for (size_t i = 0; post && i < KB_ARRAY_LEN(json_eps); i++) {
        if (strcmp(ep, json_eps[i]))
            continue;
        json_error_t jerr;
        json_t *root = json_loadb(body, body_len, 0, &jerr);
        enum MHD_Result r;
        char msg[300];
        if (!json_is_object(root)) {
            snprintf(msg, sizeof(msg), "%s: body is not a JSON object: %s", ep, root ? "wrong type" : jerr.text);
            r = kb_sim__respond_status(sim, conn, method, url, 400, "BadRequest", msg);
        } else if (i == 0) {
            const char *err = post_fault(sim, root);
            r = err ? kb_sim__respond_status(sim, conn, method, url, 400, "BadRequest", err)
                    : ok_json(sim, conn, method, url, 200, "{\"ok\":true%.0llu}", 0);
        } else if (i == 1) {
            r = post_resource(sim, conn, url, root);
        } else if (i == 2) {
            r = post_churn(sim, conn, url, root);
        } else {
            r = post_generate(sim, conn, url, root);
        }
        json_decref(root);
        return r;
    }
    return kb_sim__respond_status(sim, conn, method, url, 404, "NotFound", "unknown control endpoint (see docs/kubesim.md)");
}
