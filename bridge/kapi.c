/* bridge/kapi.c — the Kubernetes API surface: discovery, get, list, watch
 * (read-only) from the informers' caches.
 *
 * DESIGN. Why here and in this shape: a hundred controllers, dashboards or
 * audit readers that list and watch the same resources cost the API server
 * one list and one watch per resource when they read kbridge instead, and
 * they need no new client — client-go and kubectl speak this contract. So the
 * answers follow the API server's (Status bodies, List kinds, continue
 * tokens, watch frames, 410 and bookmark rules), only the data is kbridge's:
 * objects shaped as the sinks see them (drop/redact/keep fields).
 *
 * Discovery comes from the API server once at start (kind, scope, short
 * names, categories of each served resource), so kubectl maps names as it
 * would against the server; if it cannot be read, the kind the informer
 * learned and a table of the cluster-scoped core resources stand in.
 *
 * Lists are a consistent cut of the cache (kb_informer_cut) sorted by key,
 * which is the API server's order. A paged list keeps its cut (references,
 * not copies) for five minutes under an id the continue token names, so
 * every page comes from the same cut, as etcd's revision reads do; an
 * expired token is 410, as after etcd's compaction. Of the 16 kept cuts, a
 * new one pushes out the oldest of the client address holding the most, so
 * one client's paged lists cannot push out another's. A cut never holds the
 * objects read to match a labelSelector, only the cache's entries: each
 * object is read again as it is written, so what a client that does not read
 * pins is references and at most two blocks (plus one object) of output.
 * Every list, and a watch while it sends initial events, takes one of the
 * server's http.max_streams slots (bridge/slots.h), 429 beyond.
 *
 * Watches read the informer's history (informer/history.h): one subscriber
 * per informer whatever the number of watchers, a shared ring of references,
 * and per watcher a queue the history fills by index (a spec.nodeName watch
 * is handed only its node's changes, before and after them, with the type
 * the enter/leave rule gives it) — so a change costs in proportion to the
 * watchers it reaches. The object bytes, serialized once by the informer, are
 * written from the shared event straight into libmicrohttpd's buffer with
 * only the frame around them (kb_kapi_pend_copy): no copy per watcher
 * besides the socket's. A watcher that lost changes (one it had not read was
 * evicted) is too slow: its stream ends (the API server does the same) and the
 * client resumes from its last resourceVersion, getting 410 if that is gone.
 * A watch from unset/"0" sends ADDED for a cut and continues after the cut's
 * position in the ring (no gap, no repeat).
 *
 * Why no thread per watch: a node agent's watch is idle nearly all the
 * time, and 5,000 of them each holding a thread cost ~65 KB apiece (the
 * stack with its static TLS — librdkafka alone has 15.5 KB of it — and a
 * per-thread malloc arena's share), a third of the API server's memory for
 * the same watches. So a watch with nothing to write parks its connection
 * (bridge/http_int.h: libmicrohttpd suspends it; no thread, no polling) and
 * the history's notify (kb_history_watch_notify) resumes it when a change is
 * queued for it; its next bookmark or deadline is the park's due time, and
 * the reaper resumes it on a hang-up (its socket in the reaper's epoll set)
 * or a stop. Resumed, the content reader takes everything queued at once,
 * then parks again. An idle watch costs no CPU and ~27 KB, most of it
 * libmicrohttpd's connection pool (its write buffer, which it zeroes); the
 * response's own buffer is KB_KAPI_WATCH_BLOCK small (a chunked body never
 * uses it). A request waiting for a resourceVersion (kb_kapi_wait_rv) is
 * parked the same way, looked at again every KB_KAPI_RV_POLL_MS.
 *
 * Threads: every handler runs on one of libmicrohttpd's few threads under
 * the bridge's read lock, which a parked request does not hold (no reload or
 * stop waits for it); streams run later without it (see kapi.h for locks).
 */
#include "bridge/kapi.h"
#include "bridge/kcrd.h"
#include "bridge/ktable.h"

#include "common/alloc.h"
#include "common/fieldsel.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/selector.h"
#include "common/time.h"
#include "informer/apiclient.h"
#include "informer/history.h"
#include "informer/informer.h"

#include <jansson.h>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define KB_KAPI_BLOCK 65536
#define KB_KAPI_WAIT_MS 500
#define KB_KAPI_IDLE_MS 300000 /* a quiet watch's longest park, a safety net only: a change, its bookmark, its
                                * deadline, a hang-up and a stop each resume it (every resume walks the
                                * suspended connections of its thread: 5,000 watches waking every 30 s
                                * were a large part of kbridge's CPU in bench/watch_fanout.py) */
#define KB_KAPI_PENDING 64     /* events a watch takes from its queue per write */
#define KB_KAPI_WATCH_BLOCK 1024 /* the response's own buffer (zeroed, so resident: per watch); only HTTP/1.0 writes
                                 * through it, a chunked body goes straight into the connection's */
#define KB_KAPI_RV_WAIT_MS 3000
#define KB_KAPI_RV_POLL_MS 50
#define KB_KAPI_CUTS 16
#define KB_KAPI_CUT_TTL_MS (300 * 1000)
#define KB_KAPI_COUNTERS 512
#define KB_KAPI_MAX_SERVED 256
#define KB_KAPI_DISCOVERY_TIMEOUT_S 10
#define KB_KAPI_JOURNAL_PAGE 64

/* What the API server says about one served resource (immutable once published). */
typedef struct kb_kapi_up {
    char *kind, *singular;
    char *short_names; /* a JSON array's text, or NULL */
    char *categories;  /* same */
    bool namespaced;
} kb_kapi_up_t;

typedef struct kb_kapi_disc {
    char *group, *version, *resource;
    bool guess_namespaced;     /* until the API server has answered */
    _Atomic(kb_kapi_up_t *) up; /* NULL until read from the API server */
} kb_kapi_disc_t;

typedef struct kb_kapi_hist {
    kb_informer_t *inf;
    kb_history_t *h;
    atomic_int watchers;
} kb_kapi_hist_t;

typedef struct kb_kapi_cut {
    uint64_t id;                /* 0: free */
    int64_t expires_ms;
    uint64_t owner;             /* hash of the client's address (kb_kapi_client): whose cut it is */
    kb_informer_t *inf;
    char ns[256];               /* "" = all namespaces */
    char rv[64];
    uint64_t sel_hash;          /* FNV-1a of the labelSelector the items were selected by ("" if none) */
    uint64_t fsel_hash;         /* and of the fieldSelector */
    kb_event_list_t items;      /* sorted by key; only what the labelSelector matches */
} kb_kapi_cut_t;

/* Why a watch ended (kbridge_api_watches_ended_total{reason}). */
typedef enum {
    KB_KAPI_END_STOP,     /* the server stops */
    KB_KAPI_END_HANGUP,   /* the client hung up */
    KB_KAPI_END_TIMEOUT,  /* timeoutSeconds, or the server's 30-60 min */
    KB_KAPI_END_SLOW,     /* lost changes: the client read slower than the window moved */
    KB_KAPI_END_EXPIRED,  /* a 410 ERROR event */
    KB_KAPI_END_JOURNAL,  /* state_dir's journal was trimmed under a replay */
    KB_KAPI_END_COUNT
} kb_kapi_end_t;
static const char *const kb_kapi_end_names[KB_KAPI_END_COUNT] = {"stop", "hangup", "timeout", "slow", "expired",
                                                                "journal"};

typedef struct kb_kapi_counter {
    char verb[16];
    char resource[160];
    unsigned code;
    uint64_t n;
} kb_kapi_counter_t;

struct kb_kapi {
    kb_bridge_t *b;
    kb_http_t *http;            /* the server: parks watches and waiting requests (http_int.h) */
    const atomic_bool *stopping;
    kb_slots_t *slots;          /* the server's http.max_streams (bridge/slots.h) */
    int history_cap, bookmark_ms, max_watches;
    pthread_mutex_t mtx;
    kb_kapi_disc_t *disc;       /* KB_KAPI_MAX_SERVED rows, appended only (under mtx) */
    atomic_size_t n_disc;       /* rows filled: readers take no lock */
    kb_kapi_hist_t **hist;
    size_t n_hist;
    kb_kapi_cut_t cuts[KB_KAPI_CUTS];
    uint64_t next_cut_id;
    kb_kapi_counter_t counters[KB_KAPI_COUNTERS];
    size_t n_counters;
    _Atomic(char *) version_json; /* the API server's /version, or NULL */
    kb_apiclient_t *api;        /* for discovery, owned by the discoverer thread */
    pthread_t discoverer;       /* reads discovery in the background (start is not delayed) */
    bool discoverer_started;
    bool disc_running;          /* the discoverer has rows to read; when it ends, a new row starts another (mtx) */
    atomic_int watches;
    atomic_ullong events_sent;
    atomic_ullong slow_closed;
    atomic_ullong expired;      /* watches answered 410 (older than the window) */
    atomic_ullong ended[KB_KAPI_END_COUNT]; /* watches ended, by why */
    pthread_mutex_t reg_mtx;    /* guards the watch list (leaf) */
    struct kb_kapi_stream *watch_list;
    int epfd;                   /* live watches' sockets, for hang-ups (under reg_mtx; -1: none) */
    pthread_t reaper;           /* closes watches whose reader fell out of the window */
    bool reaper_started;
    atomic_bool quit;
};


/* Core resources that are cluster-scoped (when discovery cannot be read). */
static const char *const kb_kapi_cluster_scoped[] = {
    "namespaces", "nodes", "persistentvolumes", "componentstatuses", "clusterroles", "clusterrolebindings",
    "customresourcedefinitions", "storageclasses", "priorityclasses", "ingressclasses", "runtimeclasses",
    "csidrivers", "csinodes", "volumeattachments", "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations", "apiservices", "certificatesigningrequests",
};

/* ---- answers ------------------------------------------------------------- */

static void kb_kapi_count(kb_kapi_t *k, const char *verb, const char *resource, unsigned code) {
    pthread_mutex_lock(&k->mtx);
    size_t i = 0;
    for (; i < k->n_counters; i++) {
        kb_kapi_counter_t *c = &k->counters[i];
        if (c->code == code && !strcmp(c->verb, verb) && !strcmp(c->resource, resource))
            break;
    }
    if (i == k->n_counters && k->n_counters < KB_KAPI_COUNTERS) {
        kb_kapi_counter_t *c = &k->counters[k->n_counters++];
        snprintf(c->verb, sizeof(c->verb), "%s", verb);
        snprintf(c->resource, sizeof(c->resource), "%s", resource);
        c->code = code;
    }
    if (i < k->n_counters)
        k->counters[i].n++;
    pthread_mutex_unlock(&k->mtx);
}

/* The status of the answer this thread queued last (for the request counter). */
static __thread unsigned kb_kapi_code;

static enum MHD_Result kb_kapi_send(struct MHD_Connection *c, unsigned code, kb_buf_t *body, int retry_after) {
    kb_kapi_code = code;
    size_t len = body->len;
    struct MHD_Response *r = MHD_create_response_from_buffer(len, kb_buf_steal(body, NULL), MHD_RESPMEM_MUST_FREE);
    kb_buf_fini(body);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (retry_after > 0) {
        char v[16];
        snprintf(v, sizeof(v), "%d", retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

/* Optional parts of a Status beyond code, reason and message. */
typedef struct kb_kapi_details {
    const char *name, *group, *kind; /* details.name/group/kind when set */
    const char *cause;               /* details.causes[0].reason */
    const char *cause_msg;           /* and its message (NULL: the Status's) */
    int retry_after;                 /* details.retryAfterSeconds and Retry-After (> 0) */
} kb_kapi_details_t;

static void kb_kapi_json_member(kb_buf_t *o, const char *name, const char *v, bool *first) {
    if (!v)
        return;
    kb_buf_appendf(o, "%s\"%s\":", *first ? "" : ",", name);
    kb_buf_append_json_text(o, v, strlen(v));
    *first = false;
}

/* The message and details may echo a request's bytes (a path, a selector):
 * written as valid UTF-8 whatever they hold, as the /v1 endpoints' are. */
static void kb_kapi_status_json(kb_buf_t *o, unsigned code, const char *reason, const char *msg,
                                const kb_kapi_details_t *d) {
    kb_buf_append_str(o, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
                         "\"message\":");
    kb_buf_append_json_text(o, msg, strlen(msg));
    kb_buf_append_str(o, ",\"reason\":");
    kb_buf_append_json_str(o, reason, strlen(reason));
    if (d && (d->name || d->group || d->kind || d->cause || d->retry_after > 0)) {
        bool first = true;
        kb_buf_append_str(o, ",\"details\":{");
        kb_kapi_json_member(o, "name", d->name, &first);
        kb_kapi_json_member(o, "group", d->group, &first);
        kb_kapi_json_member(o, "kind", d->kind, &first);
        if (d->cause) {
            kb_buf_appendf(o, "%s\"causes\":[{\"reason\":", first ? "" : ",");
            kb_buf_append_json_str(o, d->cause, strlen(d->cause));
            kb_buf_append_str(o, ",\"message\":");
            const char *cause_msg = d->cause_msg ? d->cause_msg : msg;
            kb_buf_append_json_text(o, cause_msg, strlen(cause_msg));
            kb_buf_append_str(o, "}]");
            first = false;
        }
        if (d->retry_after > 0)
            kb_buf_appendf(o, "%s\"retryAfterSeconds\":%d", first ? "" : ",", d->retry_after);
        kb_buf_append_char(o, '}');
    }
    kb_buf_appendf(o, ",\"code\":%u}", code);
}

static enum MHD_Result kb_kapi_status(struct MHD_Connection *c, unsigned code, const char *reason,
                                      const kb_kapi_details_t *d, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static enum MHD_Result kb_kapi_status(struct MHD_Connection *c, unsigned code, const char *reason,
                                      const kb_kapi_details_t *d, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    kb_buf_t body = KB_BUF_INIT;
    kb_kapi_status_json(&body, code, reason, msg, d);
    kb_buf_append_char(&body, '\n');
    return kb_kapi_send(c, code, &body, d ? d->retry_after : 0);
}

static const char *kb_kapi_arg(struct MHD_Connection *c, const char *name) {
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    return v && *v ? v : NULL;
}

/* ---- discovery ------------------------------------------------------------ */

static char *kb_kapi_json_text(json_t *v) {
    return json_is_array(v) && json_array_size(v) ? json_dumps(v, JSON_COMPACT) : NULL;
}

static kb_kapi_up_t *kb_kapi_up_from(json_t *r) {
    const char *kind = json_string_value(json_object_get(r, "kind"));
    const char *singular = json_string_value(json_object_get(r, "singularName"));
    if (!kind || !*kind)
        return NULL;
    kb_kapi_up_t *up = kb_calloc(1, sizeof(*up));
    up->kind = kb_strdup(kind);
    up->singular = singular && *singular ? kb_strdup(singular) : NULL;
    up->namespaced = json_is_true(json_object_get(r, "namespaced"));
    up->short_names = kb_kapi_json_text(json_object_get(r, "shortNames"));
    up->categories = kb_kapi_json_text(json_object_get(r, "categories"));
    return up;
}

static void kb_kapi_up_free(kb_kapi_up_t *up) {
    if (!up)
        return;
    free(up->kind);
    free(up->singular);
    free(up->short_names);
    free(up->categories);
    free(up);
}

/* Ask the API server about d's group/version (one bounded request); true
 * once d's row is published. */
static bool kb_kapi_disc_fetch(kb_apiclient_t *api, kb_kapi_disc_t *d, const atomic_bool *stop) {
    char path[600];
    if (*d->group)
        snprintf(path, sizeof(path), "/apis/%s/%s", d->group, d->version);
    else
        snprintf(path, sizeof(path), "/api/%s", d->version);
    kb_buf_t body = KB_BUF_INIT;
    kb_api_response_t resp;
    kb_apiclient_get(api, path, NULL, NULL, &body, 8u << 20, KB_KAPI_DISCOVERY_TIMEOUT_S, stop, &resp);
    json_t *root = resp.err == KB_OK && resp.status == 200 ? json_loadb(body.data, body.len, 0, NULL) : NULL;
    json_t *list = json_object_get(root, "resources");
    kb_kapi_up_t *up = NULL;
    for (size_t i = 0; i < json_array_size(list) && !up; i++) {
        json_t *r = json_array_get(list, i);
        const char *name = json_string_value(json_object_get(r, "name"));
        if (name && !strcmp(name, d->resource))
            up = kb_kapi_up_from(r);
    }
    if (!up && !atomic_load(stop))
        KB_WARN("kapi", "discovery of %s from the API server failed (HTTP %ld%s%s); serving %s with the kind the "
                "informer learns and a guessed scope meanwhile", path, resp.status, resp.errmsg[0] ? ": " : "",
                resp.errmsg, d->resource);
    if (up && !kb_ktable_group_is_builtin(d->group))
        kb_kcrd_learn(api, d->group, d->version, d->resource, stop); /* before the row is served */
    if (up)
        atomic_store(&d->up, up);
    json_decref(root);
    kb_buf_fini(&body);
    return up != NULL;
}

static bool kb_kapi_fetch_version(kb_kapi_t *k) {
    kb_buf_t body = KB_BUF_INIT;
    kb_api_response_t resp;
    kb_apiclient_get(k->api, "/version", NULL, NULL, &body, 65536, KB_KAPI_DISCOVERY_TIMEOUT_S, &k->quit, &resp);
    json_t *root = resp.err == KB_OK && resp.status == 200 ? json_loadb(body.data, body.len, 0, NULL) : NULL;
    if (json_is_object(root))
        atomic_store(&k->version_json, json_dumps(root, JSON_COMPACT));
    json_decref(root);
    kb_buf_fini(&body);
    return atomic_load(&k->version_json) != NULL;
}

/* Read /version and the discovery of every row, retrying every 10 s until
 * all are known (or kbridge stops). */
static void *kb_kapi_discover(void *arg) {
    kb_kapi_t *k = arg;
    kb_thread_set_name("kb:kapi-disc");
    while (!atomic_load(&k->quit)) {
        bool done = atomic_load(&k->version_json) || kb_kapi_fetch_version(k);
        for (size_t i = 0; i < atomic_load(&k->n_disc) && !atomic_load(&k->quit); i++)
            if (!atomic_load(&k->disc[i].up))
                done = kb_kapi_disc_fetch(k->api, &k->disc[i], &k->quit) && done;
        if (done) {
            pthread_mutex_lock(&k->mtx); /* a reload may have added a row meanwhile: read it too */
            for (size_t i = 0; i < atomic_load(&k->n_disc) && done; i++)
                done = atomic_load(&k->disc[i].up) != NULL;
            k->disc_running = !done;
            pthread_mutex_unlock(&k->mtx);
            if (done)
                break;
            continue;
        }
        struct timespec ts = {0, 250 * 1000 * 1000};
        for (int i = 0; i < 40 && !atomic_load(&k->quit); i++)
            nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Start the discoverer (again, once the last one ended: it only returns
 * with every row read and disc_running false). Caller holds k->mtx or is
 * the only thread. */
static void kb_kapi_discoverer_start(kb_kapi_t *k) {
    if (k->discoverer_started)
        pthread_join(k->discoverer, NULL); /* ended or ending: it let go of mtx for good */
    k->disc_running = k->discoverer_started = pthread_create(&k->discoverer, NULL, kb_kapi_discover, k) == 0;
}

static kb_kapi_disc_t *kb_kapi_find_disc(kb_kapi_t *k, const char *g, const char *v, const char *r) {
    for (size_t i = 0; i < atomic_load(&k->n_disc); i++) {
        kb_kapi_disc_t *d = &k->disc[i];
        if (!strcmp(d->group, g) && !strcmp(d->version, v) && !strcmp(d->resource, r))
            return d;
    }
    return NULL;
}

/* One discovery row per distinct group/version/resource of the informers
 * (at start; after a reload for the informers it added). The discoverer
 * thread fills in the API server's answers. Caller holds k->mtx or is the
 * only thread. */
static void kb_kapi_disc_all(kb_kapi_t *k, bool at_start) {
    size_t n = kb_bridge_informer_count(k->b);
    for (size_t i = 0; i < n; i++) {
        const kb_config_informer_t *ic = kb_informer_conf(kb_bridge_informer(k->b, i));
        kb_kapi_disc_t *dup = kb_kapi_find_disc(k, ic->group, ic->version, ic->resource);
        if (dup && at_start) {
            KB_WARN("kapi", "informer %s watches %s%s%s/%s like an earlier informer: the Kubernetes API serves "
                    "that resource from the first one only", ic->name, ic->group, *ic->group ? "/" : "",
                    ic->version, ic->resource);
        }
        if (dup || atomic_load(&k->n_disc) == KB_KAPI_MAX_SERVED)
            continue;
        kb_kapi_disc_t *d = &k->disc[atomic_load(&k->n_disc)];
        d->group = kb_strdup(ic->group);
        d->version = kb_strdup(ic->version);
        d->resource = kb_strdup(ic->resource);
        d->guess_namespaced = true;
        for (size_t j = 0; j < KB_ARRAY_LEN(kb_kapi_cluster_scoped); j++)
            if (!strcmp(ic->resource, kb_kapi_cluster_scoped[j]))
                d->guess_namespaced = false;
        atomic_init(&d->up, NULL);
        atomic_fetch_add(&k->n_disc, 1); /* the row is complete: publish it */
    }
}

/* A served resource, resolved for one request (valid under the read lock). */
typedef struct kb_kapi_res {
    kb_informer_t *inf;
    const kb_kapi_disc_t *disc;
    const char *kind;       /* "Pod" */
    bool namespaced;
    const char *api_version;
    char label[160];        /* "pods" or "widgets.example.com" (metrics, messages) */
} kb_kapi_res_t;

static bool kb_kapi_resolve(kb_kapi_t *k, const char *g, const char *v, const char *r, kb_kapi_res_t *out) {
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < kb_bridge_informer_count(k->b) && !out->inf; i++) {
        kb_informer_t *inf = kb_bridge_informer(k->b, i);
        const kb_config_informer_t *ic = kb_informer_conf(inf);
        if (!strcmp(ic->group, g) && !strcmp(ic->version, v) && !strcmp(ic->resource, r))
            out->inf = inf;
    }
    if (!out->inf)
        return false;
    out->disc = kb_kapi_find_disc(k, g, v, r);
    kb_resource_t *res = kb_informer_resource(out->inf);
    const kb_kapi_up_t *up = out->disc ? atomic_load(&out->disc->up) : NULL;
    out->kind = up ? up->kind : kb_resource_kind(res);
    out->namespaced = up ? up->namespaced : !out->disc || out->disc->guess_namespaced;
    out->api_version = res->api_version;
    snprintf(out->label, sizeof(out->label), "%s%s%s", r, *g ? "." : "", g);
    return true;
}

static void kb_kapi_resource_json(kb_buf_t *o, const kb_kapi_disc_t *d, kb_informer_t *inf) {
    const kb_kapi_up_t *up = atomic_load(&d->up);
    const char *kind = up ? up->kind : kb_resource_kind(kb_informer_resource(inf));
    bool namespaced = up ? up->namespaced : d->guess_namespaced;
    char singular[256];
    if (up && up->singular) {
        snprintf(singular, sizeof(singular), "%s", up->singular);
    } else {
        size_t i = 0;
        for (; kind[i] && i + 1 < sizeof(singular); i++)
            singular[i] = (char)(kind[i] >= 'A' && kind[i] <= 'Z' ? kind[i] + 32 : kind[i]);
        singular[i] = '\0';
    }
    kb_buf_append_str(o, "{\"name\":");
    kb_buf_append_json_str(o, d->resource, strlen(d->resource));
    kb_buf_append_str(o, ",\"singularName\":");
    kb_buf_append_json_str(o, singular, strlen(singular));
    kb_buf_appendf(o, ",\"namespaced\":%s,\"kind\":", namespaced ? "true" : "false");
    kb_buf_append_json_str(o, kind, strlen(kind));
    kb_buf_append_str(o, ",\"verbs\":[\"get\",\"list\",\"watch\"]");
    if (up && up->short_names)
        kb_buf_appendf(o, ",\"shortNames\":%s", up->short_names);
    if (up && up->categories)
        kb_buf_appendf(o, ",\"categories\":%s", up->categories);
    kb_buf_append_char(o, '}');
}

/* APIResourceList of one group/version (group "" = core). False if none served. */
static bool kb_kapi_resource_list(kb_kapi_t *k, const char *g, const char *v, kb_buf_t *o) {
    size_t n = 0;
    char gv[300];
    snprintf(gv, sizeof(gv), "%s%s%s", g, *g ? "/" : "", v);
    kb_buf_append_str(o, "{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":");
    kb_buf_append_json_str(o, gv, strlen(gv));
    kb_buf_append_str(o, ",\"resources\":[");
    for (size_t i = 0; i < atomic_load(&k->n_disc); i++) {
        kb_kapi_disc_t *d = &k->disc[i];
        kb_kapi_res_t r;
        if (strcmp(d->group, g) || strcmp(d->version, v) || !kb_kapi_resolve(k, g, v, d->resource, &r))
            continue;
        if (n++)
            kb_buf_append_char(o, ',');
        kb_kapi_resource_json(o, d, r.inf);
    }
    kb_buf_append_str(o, "]}\n");
    return n > 0;
}

/* The versions of group g that are served, in first-seen order. */
static size_t kb_kapi_versions(kb_kapi_t *k, const char *g, const char **out, size_t max) {
    size_t n = 0;
    for (size_t i = 0; i < atomic_load(&k->n_disc) && n < max; i++) {
        kb_kapi_res_t r;
        if (strcmp(k->disc[i].group, g) || !kb_kapi_resolve(k, g, k->disc[i].version, k->disc[i].resource, &r))
            continue;
        bool seen = false;
        for (size_t j = 0; j < n; j++)
            seen = seen || !strcmp(out[j], k->disc[i].version);
        if (!seen)
            out[n++] = k->disc[i].version;
    }
    return n;
}

static void kb_kapi_group_json(kb_kapi_t *k, const char *g, kb_buf_t *o) {
    const char *vs[16];
    size_t n = kb_kapi_versions(k, g, vs, KB_ARRAY_LEN(vs));
    kb_buf_append_str(o, "{\"name\":");
    kb_buf_append_json_str(o, g, strlen(g));
    kb_buf_append_str(o, ",\"versions\":[");
    for (size_t i = 0; i < n; i++)
        kb_buf_appendf(o, "%s{\"groupVersion\":\"%s/%s\",\"version\":\"%s\"}", i ? "," : "", g, vs[i], vs[i]);
    kb_buf_appendf(o, "],\"preferredVersion\":{\"groupVersion\":\"%s/%s\",\"version\":\"%s\"}}", g, vs[0], vs[0]);
}

static enum MHD_Result kb_kapi_discovery(kb_kapi_t *k, struct MHD_Connection *c, const char *url) {
    kb_buf_t o = KB_BUF_INIT;
    if (!strcmp(url, "/version")) {
        const char *v = atomic_load(&k->version_json);
        if (v)
            kb_buf_append_str(&o, v);
        else
            kb_buf_append_str(&o, "{\"major\":\"1\",\"minor\":\"36\",\"gitVersion\":\"v1.36.0-kbridge\","
                                  "\"platform\":\"linux/amd64\"}");
        kb_buf_append_char(&o, '\n');
    } else if (!strcmp(url, "/api")) {
        kb_buf_append_str(&o, "{\"kind\":\"APIVersions\",\"versions\":[\"v1\"],\"serverAddressByClientCIDRs\":"
                              "[{\"clientCIDR\":\"0.0.0.0/0\",\"serverAddress\":\"\"}]}\n");
    } else if (!strcmp(url, "/api/v1")) {
        kb_kapi_resource_list(k, "", "v1", &o);
    } else if (!strcmp(url, "/apis")) {
        kb_buf_append_str(&o, "{\"kind\":\"APIGroupList\",\"apiVersion\":\"v1\",\"groups\":[");
        size_t n = 0;
        for (size_t i = 0; i < atomic_load(&k->n_disc); i++) {
            const char *g = k->disc[i].group, *vs[1];
            bool first_of_group = *g && kb_kapi_versions(k, g, vs, 1) == 1;
            for (size_t j = 0; j < i && first_of_group; j++)
                first_of_group = strcmp(k->disc[j].group, g) != 0;
            if (!first_of_group)
                continue;
            if (n++)
                kb_buf_append_char(&o, ',');
            kb_kapi_group_json(k, g, &o);
        }
        kb_buf_append_str(&o, "]}\n");
    } else {
        char g[254], v[64];
        const char *rest = url + strlen("/apis/");
        const char *slash = strchr(rest, '/');
        size_t gl = slash ? (size_t)(slash - rest) : strlen(rest);
        const char *vs[1];
        if (gl == 0 || gl >= sizeof(g) || (slash && (strchr(slash + 1, '/') || strlen(slash + 1) >= sizeof(v))))
            goto notfound;
        memcpy(g, rest, gl);
        g[gl] = '\0';
        if (!slash) {
            if (kb_kapi_versions(k, g, vs, 1) == 0)
                goto notfound;
            kb_buf_append_str(&o, "{\"kind\":\"APIGroup\",\"apiVersion\":\"v1\",");
            kb_buf_t grp = KB_BUF_INIT;
            kb_kapi_group_json(k, g, &grp);
            kb_buf_append(&o, grp.data + 1, grp.len - 1); /* the group's members after the brace */
            kb_buf_fini(&grp);
            kb_buf_append_char(&o, '\n');
        } else {
            snprintf(v, sizeof(v), "%s", slash + 1);
            if (!kb_kapi_resource_list(k, g, v, &o))
                goto notfound;
        }
    }
    return kb_kapi_send(c, MHD_HTTP_OK, &o, 0);
notfound:
    kb_buf_fini(&o);
    return kb_kapi_status(c, MHD_HTTP_NOT_FOUND, "NotFound", NULL, "the server could not find the requested resource");
}

/* ---- requests --------------------------------------------------------------- */

/* A resource path, split. */
typedef struct kb_kapi_path {
    char group[254], version[64], ns[254], resource[254], name[254];
    bool has_ns, has_name, subresource;
} kb_kapi_path_t;

static bool kb_kapi_seg(const char **p, char *out, size_t size) {
    const char *s = *p;
    if (*s != '/')
        return false;
    s++;
    size_t n = strcspn(s, "/");
    if (n == 0 || n >= size)
        return false;
    memcpy(out, s, n);
    out[n] = '\0';
    *p = s + n;
    return true;
}

/* /api/v1/… or /apis/{g}/{v}/… → the parts. False when it is no resource path. */
static bool kb_kapi_parse(const char *url, kb_kapi_path_t *p) {
    memset(p, 0, sizeof(*p));
    const char *s;
    if (!strncmp(url, "/api/", 5)) {
        s = url + 4;
        if (!kb_kapi_seg(&s, p->version, sizeof(p->version)))
            return false;
    } else if (!strncmp(url, "/apis/", 6)) {
        s = url + 5;
        if (!kb_kapi_seg(&s, p->group, sizeof(p->group)) || !kb_kapi_seg(&s, p->version, sizeof(p->version)))
            return false;
    } else {
        return false;
    }
    char a[254], b[254], c[254], d[254];
    bool ha = kb_kapi_seg(&s, a, sizeof(a));
    bool hb = ha && kb_kapi_seg(&s, b, sizeof(b));
    bool hc = hb && kb_kapi_seg(&s, c, sizeof(c));
    bool hd = hc && kb_kapi_seg(&s, d, sizeof(d));
    if (!ha || (*s && *s != '/'))
        return false;
    p->subresource = *s != '\0';
    if (!strcmp(a, "namespaces") && hc) { /* /namespaces/{ns}/{resource}[/{name}] */
        p->has_ns = true;
        snprintf(p->ns, sizeof(p->ns), "%s", b);
        snprintf(p->resource, sizeof(p->resource), "%s", c);
        p->has_name = hd;
        if (hd)
            snprintf(p->name, sizeof(p->name), "%s", d);
        return true;
    }
    snprintf(p->resource, sizeof(p->resource), "%s", a);
    p->has_name = hb;
    if (hb)
        snprintf(p->name, sizeof(p->name), "%s", b);
    p->subresource = p->subresource || hc;
    return true;
}

/* What one list or watch request asks for. */
typedef struct kb_kapi_query {
    const char *rv, *rvm, *cont;
    const char *sel_text;   /* labelSelector as sent, NULL if none */
    const char *fsel_text;  /* fieldSelector as sent, NULL if none */
    long limit;
    bool watch, bookmarks, initial_set, initial;
    long timeout_s;
    kb_selector_t *sel;
    kb_fieldsel_t *fsel;    /* NULL: none (or an empty one) */
    bool as_table;          /* Accept asked for a meta.k8s.io Table (bridge/ktable.h) */
    kb_ktable_t table;
    kb_http_req_t *req;     /* the request being handled (its wait and park); only during the handler */
} kb_kapi_query_t;

static bool kb_kapi_bool(const char *v, bool *out) {
    *out = v && (!strcmp(v, "true") || !strcmp(v, "1"));
    return !v || *out || !strcmp(v, "false") || !strcmp(v, "0");
}

/* A number parameter: unset, or digits only up to max (a sign, spaces, an
 * exponent or a value past max is refused, never read as 0 or clamped). */
static bool kb_kapi_decimal(const char *name, const char *v, long max, long *out, char *err, size_t err_size) {
    uint64_t x = 0;
    if (!v)
        return true;
    if (kb_decimal_u64(v, strlen(v), &x) && x <= (uint64_t)max) {
        *out = (long)x;
        return true;
    }
    snprintf(err, err_size, "%s: Invalid value: \"%.64s\": must be a non-negative integer up to %ld", name, v, max);
    return false;
}

/* resourceVersion: unset, or a decimal that fits in 64 bits (kbridge's
 * resourceVersions are the API server's, all such numbers). */
static bool kb_kapi_rv_valid(const char *rv, char *err, size_t err_size) {
    uint64_t x = 0;
    if (!rv || kb_decimal_u64(rv, strlen(rv), &x))
        return true;
    snprintf(err, err_size, "resourceVersion: Invalid value: \"%.64s\": must be a decimal resourceVersion below "
                            "2^64", rv);
    return false;
}

/* Parse and check the query like the API server (400 / 422 on error); the
 * field selector as the server has it for kind. */
static unsigned kb_kapi_query_parse(struct MHD_Connection *c, const kb_fields_kind_t *kind, kb_kapi_query_t *q,
                                    char *err, size_t err_size) {
    memset(q, 0, sizeof(*q));
    q->rv = kb_kapi_arg(c, "resourceVersion");
    q->rvm = kb_kapi_arg(c, "resourceVersionMatch");
    q->cont = kb_kapi_arg(c, "continue");
    const char *si = kb_kapi_arg(c, "sendInitialEvents");
    q->initial_set = si != NULL;
    if (!kb_kapi_bool(kb_kapi_arg(c, "watch"), &q->watch) ||
        !kb_kapi_bool(kb_kapi_arg(c, "allowWatchBookmarks"), &q->bookmarks) || !kb_kapi_bool(si, &q->initial)) {
        snprintf(err, err_size, "watch, allowWatchBookmarks and sendInitialEvents take true or false");
        return MHD_HTTP_BAD_REQUEST;
    }
    q->timeout_s = -1;
    if (!kb_kapi_decimal("limit", kb_kapi_arg(c, "limit"), 1L << 30, &q->limit, err, err_size) ||
        !kb_kapi_decimal("timeoutSeconds", kb_kapi_arg(c, "timeoutSeconds"), 1L << 30, &q->timeout_s, err,
                         err_size) ||
        !kb_kapi_rv_valid(q->rv, err, err_size))
        return MHD_HTTP_BAD_REQUEST;
    if (q->rvm && strcmp(q->rvm, "NotOlderThan") && strcmp(q->rvm, "Exact")) {
        snprintf(err, err_size, "resourceVersionMatch: Unsupported value: \"%.64s\": supported values: "
                                "\"Exact\", \"NotOlderThan\"", q->rvm);
        return 422;
    }
    if (q->rvm && !q->rv && !q->initial) {
        snprintf(err, err_size, "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
                                "resourceVersion is provided");
        return 422;
    }
    if (q->rvm && !strcmp(q->rvm, "Exact") && q->rv && !strcmp(q->rv, "0")) {
        snprintf(err, err_size, "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden "
                                "for resourceVersion \"0\"");
        return 422;
    }
    if (q->rvm && q->cont) {
        snprintf(err, err_size, "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for continue");
        return 422;
    }
    if (q->cont && q->rv && strcmp(q->rv, "0")) {
        snprintf(err, err_size, "specifying resource version is not allowed when using continue");
        return MHD_HTTP_BAD_REQUEST;
    }
    if (q->watch && q->initial && (!q->rvm || strcmp(q->rvm, "NotOlderThan"))) {
        snprintf(err, err_size, "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
                                "resourceVersionMatch to NotOlderThan");
        return 422;
    }
    if (q->watch && q->initial && !q->bookmarks) {
        snprintf(err, err_size, "allowWatchBookmarks: Forbidden: sendInitialEvents requires allowWatchBookmarks");
        return 422;
    }
    if (q->watch && q->rvm && !q->initial_set) {
        snprintf(err, err_size, "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch "
                                "unless sendInitialEvents is provided");
        return 422;
    }
    const char *ls = kb_kapi_arg(c, "labelSelector");
    q->sel_text = ls;
    if (ls && !(q->sel = kb_selector_parse(ls, err, err_size)))
        return MHD_HTTP_BAD_REQUEST;
    q->fsel_text = kb_kapi_arg(c, "fieldSelector");
    if (!kb_fieldsel_parse(kind, q->fsel_text, &q->fsel, err, err_size))
        return MHD_HTTP_BAD_REQUEST;
    return 0;
}

/* Does ev (its object readable) match both of q's selectors? */
static bool kb_kapi_matches(const kb_kapi_query_t *q, const kb_fields_kind_t *kind, const kb_event_t *ev) {
    kb_history_filter_t f = {.sel = q->sel, .fsel = q->fsel};
    return kb_history_matches(kind, &f, ev, NULL, 0);
}

static const kb_fields_kind_t *kb_kapi_kind(kb_informer_t *inf) {
    return kb_fields_kind(kb_informer_conf(inf)->group, kb_informer_conf(inf)->resource);
}

/* The cut a list or a watch's initial events are served from: the candidates
 * the informer's indexes give for q's label selector (only the matching
 * objects when it has an equality term on an indexed label key). When the
 * index did not answer it, or the field selector reads the object's own
 * fields, each candidate is read after the ingest lock is released and those
 * q does not match are dropped (a field selector on metadata only is checked
 * on the entry). Either way the cut holds the cache's
 * entries (references: identities only with state_dir, packed with the
 * compressed cache), never the objects read to match them — a client that
 * does not read, or a kept cut, would otherwise pin a full copy of every
 * object — so each is read again as it is written (kb_kapi_item). */
static void kb_kapi_cut(kb_informer_t *inf, const char *ns, const kb_kapi_query_t *q, kb_event_list_t *all,
                        char *rv, size_t rv_size, uint64_t *seq) {
    bool exact = false;
    kb_informer_select(inf, ns, q->sel, all, &exact, rv, rv_size, seq);
    bool read = (q->sel && !exact) || kb_fieldsel_needs_record(q->fsel);
    if (!read && !q->fsel)
        return;
    const kb_fields_kind_t *kind = kb_kapi_kind(inf);
    size_t keep = 0;
    for (size_t i = 0; i < all->n; i++) {
        bool match;
        if (read) {
            kb_event_t *full = kb_informer_full(inf, all->ev[i]);
            match = kb_kapi_matches(q, kind, full);
            kb_event_unref(full);
        } else {
            kb_history_filter_t f = {.fsel = q->fsel};
            match = kb_history_matches(kind, &f, all->ev[i], NULL, 0);
        }
        if (match)
            all->ev[keep++] = all->ev[i];
        else
            kb_event_unref(all->ev[i]);
    }
    all->n = keep;
}

typedef enum {
    KB_KAPI_RV_REACHED, /* the cache is at rv or past it */
    KB_KAPI_RV_MISSED,  /* not within KB_KAPI_RV_WAIT_MS (or the server stops): 504 */
    KB_KAPI_RV_PARKED   /* not yet: the request is parked; the caller returns MHD_YES and answers nothing */
} kb_kapi_rv_t;

/* Whether the informer has reached rv, waiting up to KB_KAPI_RV_WAIT_MS
 * from the request's first call. cur gets the newest cut RV. Waiting does
 * not hold a thread or the bridge's read lock (a reload or a stop must never
 * wait for a waiting request: anyone with a token could send a dozen): the
 * request is parked and looked at again every KB_KAPI_RV_POLL_MS, handled
 * from the start each time — so an informer a reload retired meanwhile is
 * resolved afresh (404, or the new one). */
static kb_kapi_rv_t kb_kapi_wait_rv(kb_kapi_t *k, kb_http_req_t *req, kb_informer_t *inf, uint64_t rv, char *cur,
                                    size_t cur_size) {
    kb_informer_cut(inf, NULL, NULL, cur, cur_size, NULL);
    if (kb_rv_parse(cur, strlen(cur)) >= rv)
        return KB_KAPI_RV_REACHED;
    int64_t now = kb_now_mono_ns() / KB_NS_PER_MS;
    if (!req->wait_until_ms)
        req->wait_until_ms = now + KB_KAPI_RV_WAIT_MS;
    if (now >= req->wait_until_ms || atomic_load(k->stopping))
        return KB_KAPI_RV_MISSED;
    int64_t due = now + KB_KAPI_RV_POLL_MS < req->wait_until_ms ? now + KB_KAPI_RV_POLL_MS : req->wait_until_ms;
    if (!kb_http_park(&req->park, due))
        return KB_KAPI_RV_MISSED; /* the server stops */
    req->parked = true;
    return KB_KAPI_RV_PARKED;
}

static enum MHD_Result kb_kapi_too_large(struct MHD_Connection *c, const char *rv, const char *cur) {
    kb_kapi_details_t d = {.cause = "ResourceVersionTooLarge", .cause_msg = "Too large resource version",
                           .retry_after = 1};
    return kb_kapi_status(c, MHD_HTTP_GATEWAY_TIMEOUT, "Timeout", &d,
                          "Timeout: Too large resource version: %s, current: %s", rv, cur);
}

/* ---- streamed answers --------------------------------------------------- */

typedef struct kb_kapi_stream kb_kapi_stream_t;
struct kb_kapi_stream {
    kb_kapi_t *k;
    bool (*fill)(kb_kapi_stream_t *s); /* append more to out; false: the end (after out) */
    kb_buf_t out;
    size_t out_off;
    bool ended;
    char kind[256], api_version[300];
    /* list: the page; watch: the initial events — cache entries, each read
     * (kb_informer_full: state_dir, decompression) as it is written */
    kb_informer_t *inf;
    kb_event_list_t items;
    size_t next;
    char rv[64];
    char cont[600];
    long remaining;         /* remainingItemCount, -1: none */
    bool head_done;
    /* watch */
    kb_kapi_hist_t *hist;
    kb_kapi_query_t q;
    char ns[254];           /* a namespaced watch: only this namespace ("" = all) */
    uint64_t pos;
    uint64_t skip_le;       /* a watch from a future RV: nothing at or below it */
    uint64_t from_n;        /* a watch from RV N: a change at or below N (a relist's, or the
                             * journal's before its first list) is never sent: 410 instead */
    bool end_bookmark;      /* the initial-events-end bookmark is still due */
    bool gone;              /* one ERROR (410) then the end */
    char gone_msg[256];
    /* resuming from state_dir's journal before the window (no label selector) */
    bool journal;
    uint64_t j_rv, j_after, j_seq; /* the watch's RV, the replay cursor, the newest seq replayed */
    kb_event_list_t j_page;
    size_t j_next;
    int64_t deadline_ms, next_bookmark_ms;
    int fd;                 /* a dup of the client's socket (the reaper may shut it down) */
    kb_history_filter_t filter; /* ns and q's selectors, for the history */
    _Atomic(kb_history_watcher_t *) w; /* registered once live (the reaper reads it under reg_mtx) */
    struct kb_kapi_pend {   /* live events to write: the shared object bytes in a frame */
        kb_event_t *ev;
        kb_event_type_t type;
    } pend[KB_KAPI_PENDING];
    size_t n_pend, pend_i, pend_off; /* pend[pend_i] is written up to pend_off bytes of its line */
    atomic_bool slow;       /* counted as too slow once */
    struct kb_kapi_stream *reg_prev, *reg_next;
    bool registered;
    bool slot;              /* holds one of http.max_streams: a list, or a watch until its initial events are out */
    struct MHD_Connection *conn; /* a watch's connection (its idle timeout is lifted after the initial events) */
    kb_http_park_t park;    /* a watch parks its connection while it has nothing to write (http_int.h) */
    bool parked;            /* the fill parked: the reader returns 0 */
};

/* Copy up to max bytes of the pending events' lines ({"type":…,"object":<the
 * informer's bytes>}\n) into buf: the object is never copied anywhere else. */
static size_t kb_kapi_pend_copy(kb_kapi_stream_t *s, char *buf, size_t max) {
    size_t n = 0;
    while (n < max && s->pend_i < s->n_pend) {
        struct kb_kapi_pend *p = &s->pend[s->pend_i];
        char head[48];
        int hl = snprintf(head, sizeof(head), "{\"type\":\"%s\",\"object\":", kb_event_type_name(p->type));
        const char *part[3] = {head, p->ev->obj, "}\n"};
        size_t len[3] = {(size_t)hl, p->ev->obj_len, 2};
        size_t off = s->pend_off;
        for (int i = 0; i < 3 && n < max; i++) {
            if (off >= len[i]) {
                off -= len[i];
                continue;
            }
            size_t c = len[i] - off < max - n ? len[i] - off : max - n;
            memcpy(buf + n, part[i] + off, c);
            n += c;
            s->pend_off += c;
            off = 0;
        }
        if (s->pend_off < len[0] + len[1] + len[2])
            break;
        kb_event_unref(p->ev);
        p->ev = NULL;
        s->pend_i++;
        s->pend_off = 0;
    }
    if (s->pend_i == s->n_pend)
        s->n_pend = s->pend_i = 0;
    return n;
}

static ssize_t kb_kapi_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    kb_kapi_stream_t *s = cls;
    KB_UNUSED(pos);
    while (s->out_off == s->out.len && s->pend_i == s->n_pend) {
        if (s->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        kb_buf_reset(&s->out);
        s->out_off = 0;
        s->ended = !s->fill(s);
        if (s->parked) { /* suspended until a change, its due time, a hang-up or a stop */
            s->parked = false;
            return 0;
        }
    }
    size_t n = 0;
    if (s->out_off < s->out.len) {
        n = s->out.len - s->out_off < max ? s->out.len - s->out_off : max;
        memcpy(buf, s->out.data + s->out_off, n);
        s->out_off += n;
    }
    n += kb_kapi_pend_copy(s, buf + n, max - n);
    return (ssize_t)n;
}

static void kb_kapi_unregister(kb_kapi_stream_t *s) {
    kb_kapi_t *k = s->k;
    pthread_mutex_lock(&k->reg_mtx);
    if (atomic_load(&s->w) && k->epfd >= 0 && s->fd >= 0)
        epoll_ctl(k->epfd, EPOLL_CTL_DEL, s->fd, NULL); /* under reg_mtx: the reaper sees no event of s after */
    if (s->reg_prev)
        s->reg_prev->reg_next = s->reg_next;
    else
        k->watch_list = s->reg_next;
    if (s->reg_next)
        s->reg_next->reg_prev = s->reg_prev;
    s->registered = false;
    pthread_mutex_unlock(&k->reg_mtx);
}

/* Take one of http.max_streams for s; false when all are taken (the caller answers kb_kapi_busy). */
static bool kb_kapi_slot_take(kb_kapi_stream_t *s) {
    s->slot = kb_slots_take(s->k->slots);
    return s->slot;
}

static void kb_kapi_slot_give(kb_kapi_stream_t *s) {
    if (s->slot)
        kb_slots_give(s->k->slots);
    s->slot = false;
}

static enum MHD_Result kb_kapi_busy(kb_kapi_t *k, struct MHD_Connection *c) {
    kb_kapi_details_t d = {.retry_after = 1};
    return kb_kapi_status(c, MHD_HTTP_TOO_MANY_REQUESTS, "TooManyRequests", &d,
                          KB_SLOTS_BUSY_FMT,
                          k->slots->max);
}

static void kb_kapi_stream_free(void *cls) {
    kb_kapi_stream_t *s = cls;
    kb_kapi_slot_give(s);
    if (s->registered)
        kb_kapi_unregister(s);
    kb_history_unwatch(atomic_load(&s->w)); /* no notify runs after it */
    kb_http_park_fini(&s->park);
    for (size_t i = s->pend_i; i < s->n_pend; i++)
        kb_event_unref(s->pend[i].ev);
    if (s->fd >= 0)
        close(s->fd);
    if (s->hist) {
        atomic_fetch_sub(&s->hist->watchers, 1);
        atomic_fetch_sub(&s->k->watches, 1);
    }
    kb_selector_free(s->q.sel);
    kb_fieldsel_free(s->q.fsel);
    kb_event_list_fini(&s->j_page);
    kb_event_list_fini(&s->items);
    kb_buf_fini(&s->out);
    free(s);
}

static kb_kapi_stream_t *kb_kapi_stream_new(kb_kapi_t *k, const kb_kapi_res_t *r, bool (*fill)(kb_kapi_stream_t *)) {
    kb_kapi_stream_t *s = kb_calloc(1, sizeof(*s));
    s->k = k;
    s->fill = fill;
    s->fd = -1;
    s->remaining = -1;
    s->inf = r->inf;
    kb_event_list_init(&s->items);
    kb_event_list_init(&s->j_page);
    snprintf(s->kind, sizeof(s->kind), "%s", r->kind);
    snprintf(s->api_version, sizeof(s->api_version), "%s", r->api_version);
    return s;
}

static enum MHD_Result kb_kapi_stream_send(struct MHD_Connection *c, kb_kapi_stream_t *s) {
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, s->hist ? KB_KAPI_WATCH_BLOCK : KB_KAPI_BLOCK, kb_kapi_stream_read, s, kb_kapi_stream_free);
    if (!r) {
        kb_kapi_stream_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    kb_kapi_code = MHD_HTTP_OK;
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- get / list ------------------------------------------------------------- */

/* The next item with its object readable (a new reference), read now, after
 * the cut's lock; its reference in items is dropped. */
static kb_event_t *kb_kapi_item(kb_kapi_stream_t *s) {
    kb_event_t *entry = s->items.ev[s->next];
    s->items.ev[s->next++] = NULL;
    kb_event_t *ev = kb_informer_full(s->inf, entry);
    kb_event_unref(entry);
    return ev;
}

static bool kb_kapi_table_fill(kb_kapi_stream_t *s) {
    if (!s->head_done)
        kb_ktable_head(&s->q.table, &s->out, s->rv, s->cont, s->remaining);
    s->head_done = true;
    while (s->next < s->items.n && s->out.len < KB_KAPI_BLOCK) {
        kb_event_t *ev = kb_kapi_item(s);
        kb_ktable_row(&s->q.table, &s->out, ev->obj, ev->obj_len);
        kb_event_unref(ev);
    }
    if (s->next < s->items.n)
        return true;
    kb_ktable_tail(&s->out);
    kb_buf_append_char(&s->out, '\n');
    return false;
}

static bool kb_kapi_list_fill(kb_kapi_stream_t *s) {
    if (s->q.as_table)
        return kb_kapi_table_fill(s);
    if (!s->head_done) {
        kb_buf_appendf(&s->out, "{\"kind\":\"%sList\",\"apiVersion\":", s->kind);
        kb_buf_append_json_str(&s->out, s->api_version, strlen(s->api_version));
        kb_buf_append_str(&s->out, ",\"metadata\":{\"resourceVersion\":");
        kb_buf_append_json_str(&s->out, s->rv, strlen(s->rv));
        if (s->cont[0]) {
            kb_buf_append_str(&s->out, ",\"continue\":");
            kb_buf_append_json_str(&s->out, s->cont, strlen(s->cont));
        }
        if (s->remaining >= 0)
            kb_buf_appendf(&s->out, ",\"remainingItemCount\":%ld", s->remaining);
        kb_buf_append_str(&s->out, "},\"items\":[");
        s->head_done = true;
    }
    while (s->next < s->items.n && s->out.len < KB_KAPI_BLOCK) {
        kb_event_t *ev = kb_kapi_item(s);
        if (s->next > 1)
            kb_buf_append_char(&s->out, ',');
        kb_buf_append(&s->out, ev->obj, ev->obj_len);
        kb_event_unref(ev);
    }
    if (s->next < s->items.n)
        return true;
    kb_buf_append_str(&s->out, "]}\n");
    return false;
}

static int kb_kapi_by_key(const void *a, const void *b) {
    const kb_event_t *x = *(kb_event_t *const *)a, *y = *(kb_event_t *const *)b;
    return strcmp(x->key, y->key);
}

static void kb_kapi_hex(const char *s, char *out, size_t out_size) {
    size_t o = 0;
    for (; *s && o + 3 <= out_size; s++, o += 2)
        snprintf(out + o, 3, "%02x", (unsigned char)*s);
    out[o] = '\0';
}

static bool kb_kapi_unhex(const char *s, char *out, size_t out_size) {
    size_t n = strlen(s);
    if (n % 2 || n / 2 >= out_size)
        return false;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return false;
        out[i] = (char)v;
    }
    out[n / 2] = '\0';
    return strlen(out) == n / 2;
}

/* FNV-1a of a selector as sent ("" if none). */
static uint64_t kb_kapi_sel_hash(const char *text) {
    return text ? kb_fnv1a64(text, strlen(text)) : kb_fnv1a64("", 0);
}

/* Who asks: a hash of the client's address (its port left out), so a
 * client's cuts are told from another's. */
static uint64_t kb_kapi_client(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ai ? ai->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        return kb_fnv1a64(&((const struct sockaddr_in *)(const void *)sa)->sin_addr, sizeof(struct in_addr));
    if (sa && sa->sa_family == AF_INET6)
        return kb_fnv1a64(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, sizeof(struct in6_addr));
    return 0;
}

static size_t kb_kapi_cuts_of(const kb_kapi_t *k, uint64_t owner) {
    size_t n = 0;
    for (size_t i = 0; i < KB_KAPI_CUTS; i++)
        n += k->cuts[i].id && k->cuts[i].owner == owner;
    return n;
}

/* The slot a new cut of owner takes: a free or expired one, else the
 * oldest cut of the client that holds the most (owner's new one counted,
 * and owner's own on a tie), so no client is pushed out by one that holds
 * no more cuts than it does. Caller holds k->mtx. */
static kb_kapi_cut_t *kb_kapi_cut_slot(kb_kapi_t *k, uint64_t owner, int64_t now) {
    kb_kapi_cut_t *slot = NULL;
    size_t most = 0;
    for (size_t i = 0; i < KB_KAPI_CUTS; i++) {
        kb_kapi_cut_t *c = &k->cuts[i];
        if (c->id && c->expires_ms < now) {
            kb_event_list_fini(&c->items);
            c->id = 0;
        }
        if (!c->id)
            return c;
    }
    for (size_t i = 0; i < KB_KAPI_CUTS; i++) {
        kb_kapi_cut_t *c = &k->cuts[i];
        size_t n = kb_kapi_cuts_of(k, c->owner) + (c->owner == owner);
        bool mine = c->owner == owner, slot_mine = slot && slot->owner == owner;
        if (!slot || n > most || (n == most && mine && !slot_mine) ||
            (n == most && mine == slot_mine && c->expires_ms < slot->expires_ms)) {
            slot = c;
            most = n;
        }
    }
    kb_event_list_fini(&slot->items);
    slot->id = 0;
    return slot;
}

/* Keep a cut for its later pages (new references); returns its id. Caller holds k->mtx. */
static uint64_t kb_kapi_cut_keep(kb_kapi_t *k, uint64_t owner, kb_informer_t *inf, const char *ns, const char *rv,
                                 const kb_kapi_query_t *q, const kb_event_list_t *items) {
    int64_t now = kb_now_mono_ns() / KB_NS_PER_MS;
    kb_kapi_cut_t *slot = kb_kapi_cut_slot(k, owner, now);
    slot->owner = owner;
    slot->id = ++k->next_cut_id;
    slot->expires_ms = now + KB_KAPI_CUT_TTL_MS;
    slot->inf = inf;
    snprintf(slot->ns, sizeof(slot->ns), "%s", ns);
    snprintf(slot->rv, sizeof(slot->rv), "%s", rv);
    slot->sel_hash = kb_kapi_sel_hash(q->sel_text);
    slot->fsel_hash = kb_kapi_sel_hash(q->fsel_text);
    kb_event_list_init(&slot->items);
    for (size_t i = 0; i < items->n; i++)
        kb_event_list_push(&slot->items, kb_event_ref(items->ev[i]));
    return slot->id;
}

/* Select the page: items after key `after` ("" = from the start), at most
 * limit (0 = all); the items are what q's selectors matched already
 * (kb_kapi_cut), and may carry no readable object.
 * The selected references are added to out. Returns the index after the last
 * one taken. */
static size_t kb_kapi_page(const kb_event_list_t *all, const char *after, long limit, kb_event_list_t *out,
                           const char **last_key) {
    size_t lo = 0, hi = all->n;
    while (*after && lo < hi) { /* first key > after */
        size_t mid = (lo + hi) / 2;
        if (strcmp(all->ev[mid]->key, after) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t i = *after ? lo : 0;
    for (; i < all->n && (limit == 0 || (long)out->n < limit); i++) {
        kb_event_list_push(out, kb_event_ref(all->ev[i]));
        *last_key = all->ev[i]->key;
    }
    return i;
}

static enum MHD_Result kb_kapi_expired_continue(struct MHD_Connection *c) {
    return kb_kapi_status(c, MHD_HTTP_GONE, "Expired", NULL,
                          "The provided continue parameter is too old to display a consistent list result. You can "
                          "start a new list without the continue parameter.");
}

static void kb_kapi_page_to(kb_kapi_stream_t *s, const kb_event_list_t *all, const kb_kapi_query_t *q,
                            const char *after, uint64_t cut_id) {
    const char *last = NULL;
    size_t end = kb_kapi_page(all, after, q->limit, &s->items, &last);
    long rest = q->limit ? (long)(all->n - end) : 0;
    if (rest > 0 && last) {
        char token[600];
        int n = snprintf(token, sizeof(token), "%llu:", (unsigned long long)cut_id);
        kb_kapi_hex(last, token + n, sizeof(token) - (size_t)n);
        snprintf(s->cont, sizeof(s->cont), "%s", token);
        if (!q->sel && !q->fsel)
            s->remaining = rest;
    }
}

static enum MHD_Result kb_kapi_list_continue(kb_kapi_t *k, struct MHD_Connection *c, const kb_kapi_res_t *r,
                                             const kb_kapi_path_t *p, kb_kapi_query_t *q) {
    unsigned long long id = 0;
    char after[520];
    const char *colon = strchr(q->cont, ':');
    if (!colon || sscanf(q->cont, "%llu:", &id) != 1 || !kb_kapi_unhex(colon + 1, after, sizeof(after)))
        return kb_kapi_status(c, MHD_HTTP_BAD_REQUEST, "BadRequest", NULL, "continue key is not valid");
    kb_kapi_stream_t *s = kb_kapi_stream_new(k, r, kb_kapi_list_fill);
    s->q.as_table = q->as_table;
    s->q.table = q->table;
    if (!kb_kapi_slot_take(s)) {
        kb_kapi_stream_free(s);
        return kb_kapi_busy(k, c);
    }
    bool found = false;
    const char *differs = NULL;
    pthread_mutex_lock(&k->mtx);
    for (size_t i = 0; i < KB_KAPI_CUTS && !found; i++) {
        kb_kapi_cut_t *cut = &k->cuts[i];
        if (cut->id != id || cut->inf != r->inf || strcmp(cut->ns, p->has_ns ? p->ns : ""))
            continue;
        found = true;
        /* The cut keeps only what the first page's selector matched. */
        if (cut->sel_hash != kb_kapi_sel_hash(q->sel_text))
            differs = "labelSelector";
        else if (cut->fsel_hash != kb_kapi_sel_hash(q->fsel_text))
            differs = "fieldSelector";
        snprintf(s->rv, sizeof(s->rv), "%s", cut->rv);
        if (!differs)
            kb_kapi_page_to(s, &cut->items, q, after, cut->id);
    }
    pthread_mutex_unlock(&k->mtx);
    if (!found || differs) {
        kb_kapi_stream_free(s);
        if (differs)
            return kb_kapi_status(c, MHD_HTTP_BAD_REQUEST, "BadRequest", NULL,
                                  "continue: the %s differs from the one the list began with", differs);
        return kb_kapi_expired_continue(c);
    }
    return kb_kapi_stream_send(c, s);
}

/* RV and RVM of a list (the API server's table): 0 to serve the current cut,
 * else the answer was sent. */
static enum MHD_Result kb_kapi_list_rv(kb_kapi_t *k, struct MHD_Connection *c, const kb_kapi_res_t *r,
                                       const kb_kapi_query_t *q, bool *answered) {
    *answered = false;
    if (!q->rv || !strcmp(q->rv, "0"))
        return MHD_YES;
    uint64_t want = kb_rv_parse(q->rv, strlen(q->rv));
    bool exact = (q->rvm && !strcmp(q->rvm, "Exact")) || (!q->rvm && q->limit > 0);
    char cur[64];
    *answered = true;
    kb_kapi_rv_t w = kb_kapi_wait_rv(k, q->req, r->inf, want, cur, sizeof(cur));
    if (w == KB_KAPI_RV_PARKED)
        return MHD_YES;
    if (w == KB_KAPI_RV_MISSED)
        return kb_kapi_too_large(c, q->rv, cur);
    if (exact && kb_rv_parse(cur, strlen(cur)) != want)
        return kb_kapi_status(c, MHD_HTTP_GONE, "Expired", NULL,
                              "too old resource version: %s (%s); kbridge serves exactly its current cut", q->rv,
                              cur);
    *answered = false;
    return MHD_YES;
}

static enum MHD_Result kb_kapi_list(kb_kapi_t *k, struct MHD_Connection *c, const kb_kapi_res_t *r,
                                    const kb_kapi_path_t *p, kb_kapi_query_t *q) {
    if (q->cont)
        return kb_kapi_list_continue(k, c, r, p, q);
    bool answered = false;
    enum MHD_Result ret = kb_kapi_list_rv(k, c, r, q, &answered);
    if (answered)
        return ret;
    kb_kapi_stream_t *s = kb_kapi_stream_new(k, r, kb_kapi_list_fill);
    s->q.as_table = q->as_table;
    s->q.table = q->table;
    if (!kb_kapi_slot_take(s)) {
        kb_kapi_stream_free(s);
        return kb_kapi_busy(k, c);
    }
    kb_event_list_t all;
    kb_event_list_init(&all);
    kb_kapi_cut(r->inf, p->has_ns ? p->ns : NULL, q, &all, s->rv, sizeof(s->rv), NULL);
    if (all.n > 1)
        qsort(all.ev, all.n, sizeof(all.ev[0]), kb_kapi_by_key);
    if (q->rv && !strcmp(q->rv, "0"))
        q->limit = 0; /* "any version" is served whole, as from the API server's cache */
    uint64_t id = 0;
    if (q->limit > 0 && (size_t)q->limit < all.n) {
        pthread_mutex_lock(&k->mtx);
        id = kb_kapi_cut_keep(k, kb_kapi_client(c), r->inf, p->has_ns ? p->ns : "", s->rv, q, &all);
        kb_kapi_page_to(s, &all, q, "", id);
        pthread_mutex_unlock(&k->mtx);
    } else {
        kb_kapi_page_to(s, &all, q, "", 0);
    }
    kb_event_list_fini(&all);
    return kb_kapi_stream_send(c, s);
}

/* A get from resourceVersion N (other than "0"; resourceVersionMatch, which
 * a get does not take, changes nothing) is the object at N or newer, as a
 * NotOlderThan list: kbridge waits to reach N, else 504 as the server. */
static enum MHD_Result kb_kapi_get(kb_kapi_t *k, struct MHD_Connection *c, const kb_kapi_res_t *r,
                                   const kb_kapi_path_t *p, kb_kapi_query_t *q) {
    char cur[64];
    uint64_t want = q->rv && strcmp(q->rv, "0") ? kb_rv_parse(q->rv, strlen(q->rv)) : 0;
    kb_kapi_rv_t w = want ? kb_kapi_wait_rv(k, q->req, r->inf, want, cur, sizeof(cur)) : KB_KAPI_RV_REACHED;
    if (w == KB_KAPI_RV_PARKED)
        return MHD_YES;
    if (w == KB_KAPI_RV_MISSED)
        return kb_kapi_too_large(c, q->rv, cur);
    char key[520];
    snprintf(key, sizeof(key), "%s%s%s", p->has_ns ? p->ns : "", p->has_ns ? "/" : "", p->name);
    kb_event_t *ev = kb_informer_get(r->inf, key, strlen(key));
    if (!ev) {
        kb_kapi_details_t d = {.name = p->name, .group = *p->group ? p->group : NULL, .kind = p->resource};
        return kb_kapi_status(c, MHD_HTTP_NOT_FOUND, "NotFound", &d, "%s \"%s\" not found", r->label, p->name);
    }
    kb_buf_t o = KB_BUF_INIT;
    if (q->as_table)
        kb_ktable_one(&q->table, &o, ev->obj, ev->obj_len);
    else
        kb_buf_append(&o, ev->obj, ev->obj_len);
    kb_buf_append_char(&o, '\n');
    kb_event_unref(ev);
    return kb_kapi_send(c, MHD_HTTP_OK, &o, 0);
}

/* ---- watch ------------------------------------------------------------------- */

static kb_kapi_hist_t *kb_kapi_history(kb_kapi_t *k, kb_informer_t *inf) {
    kb_kapi_hist_t *found = NULL;
    pthread_mutex_lock(&k->mtx);
    for (size_t i = 0; i < k->n_hist && !found; i++)
        if (k->hist[i]->inf == inf)
            found = k->hist[i];
    if (!found) {
        kb_history_t *h = kb_history_new(inf, (size_t)k->history_cap);
        if (h) {
            found = kb_calloc(1, sizeof(*found));
            found->inf = inf;
            found->h = h;
            atomic_init(&found->watchers, 0);
            k->hist = kb_realloc(k->hist, (k->n_hist + 1) * sizeof(*k->hist));
            k->hist[k->n_hist++] = found;
        }
    }
    pthread_mutex_unlock(&k->mtx);
    return found;
}

/* End the watch with one ERROR event, a 410 Expired Status (as the API
 * server does for a version it can no longer serve): the client lists again. */
static void kb_kapi_expire(kb_kapi_stream_t *s, uint64_t oldest) {
    s->gone = true;
    atomic_fetch_add(&s->k->expired, 1);
    snprintf(s->gone_msg, sizeof(s->gone_msg), "too old resource version: %llu (%llu)",
             (unsigned long long)s->from_n, (unsigned long long)oldest);
}

static void kb_kapi_frame(kb_kapi_stream_t *s, kb_event_type_t type, const kb_event_t *ev) {
    kb_buf_appendf(&s->out, "{\"type\":\"%s\",\"object\":", kb_event_type_name(type));
    if (s->q.as_table) {
        /* A watch lasts long: each event's AGE counts to its own moment, or an
         * object created after the watch began would print "<invalid>". */
        s->q.table.now_s = kb_now_real_ns() / 1000000000;
        kb_ktable_one(&s->q.table, &s->out, ev->obj, ev->obj_len);
    } else {
        kb_buf_append(&s->out, ev->obj, ev->obj_len);
    }
    kb_buf_append_str(&s->out, "}\n");
    atomic_fetch_add(&s->k->events_sent, 1);
}

static void kb_kapi_bookmark(kb_kapi_stream_t *s, const char *rv, bool initial_end) {
    kb_buf_t obj = KB_BUF_INIT;
    kb_buf_appendf(&obj, "{\"kind\":\"%s\",\"apiVersion\":", s->kind);
    kb_buf_append_json_str(&obj, s->api_version, strlen(s->api_version));
    kb_buf_append_str(&obj, ",\"metadata\":{\"resourceVersion\":");
    kb_buf_append_json_str(&obj, rv, strlen(rv));
    if (initial_end)
        kb_buf_append_str(&obj, ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}");
    kb_buf_append_str(&obj, "}}");
    kb_buf_append_str(&s->out, "{\"type\":\"BOOKMARK\",\"object\":");
    if (s->q.as_table)
        kb_ktable_one(&s->q.table, &s->out, obj.data, obj.len);
    else
        kb_buf_append(&s->out, obj.data, obj.len);
    kb_buf_append_str(&s->out, "}\n");
    kb_buf_fini(&obj);
    s->next_bookmark_ms = kb_now_mono_ns() / KB_NS_PER_MS + s->k->bookmark_ms;
}

static bool kb_kapi_peer_gone(int fd) {
    if (fd < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Whether the watch may send ev; false when it must end with 410 instead
 * (s->gone set): a change at or below the version it started from has no
 * place after it — the client has it, or it is out of order. */
static bool kb_kapi_after_from(kb_kapi_stream_t *s, const kb_event_t *ev) {
    uint64_t rv = kb_history_order_rv(ev);
    if (rv > s->from_n || rv <= s->skip_le)
        return true;
    kb_kapi_expire(s, rv);
    return false;
}

/* Queue ev for writing as a change of this type: a reference in pend (the
 * object's bytes go out as they are), or, for a Table, its row in out. */
static void kb_kapi_queue(kb_kapi_stream_t *s, kb_event_type_t type, kb_event_t *ev) {
    if (s->q.as_table) {
        kb_kapi_frame(s, type, ev);
        return;
    }
    s->pend[s->n_pend].ev = kb_event_ref(ev);
    s->pend[s->n_pend++].type = type;
    atomic_fetch_add(&s->k->events_sent, 1);
}

/* How long an idle watch may sleep: until its deadline or its next bookmark,
 * at most KB_KAPI_IDLE_MS (the reaper wakes it on a hang-up or a stop). */
static int kb_kapi_idle_ms(const kb_kapi_stream_t *s, int64_t now) {
    int64_t wait = KB_KAPI_IDLE_MS;
    if (s->deadline_ms - now < wait)
        wait = s->deadline_ms - now;
    if (s->q.bookmarks) {
        int64_t due = s->next_bookmark_ms - now;
        if (due <= 0)
            due = KB_KAPI_WAIT_MS; /* due but the progress is not known yet: look again soon */
        if (due < wait)
            wait = due;
    }
    return wait < 1 ? 1 : (int)wait;
}

/* Count why the watch ends; false (the stream's end). */
static bool kb_kapi_end(kb_kapi_stream_t *s, kb_kapi_end_t why) {
    atomic_fetch_add(&s->k->ended[why], 1);
    return false;
}

/* The history's notify (under its sig_mtx): a change is queued for the
 * watch, it lost changes, or the reaper woke it. */
static void kb_kapi_notify(void *arg) {
    kb_kapi_stream_t *s = arg;
    kb_http_unpark(&s->park);
}

/* Live changes: batch what is queued, park the connection when nothing is
 * (until the history's notify, the next bookmark or the deadline, at most
 * KB_KAPI_IDLE_MS; the reaper unparks it on a hang-up or a stop). The watcher
 * is registered with the history at the first call (after the initial
 * events), from the position they end at. */
static bool kb_kapi_watch_live(kb_kapi_stream_t *s) {
    kb_history_watcher_t *w = atomic_load(&s->w);
    if (!w) {
        kb_buf_fini(&s->out); /* the initial events' block: from here on, bookmarks only */
        kb_buf_init(&s->out);
        w = kb_history_watch_notify(s->hist->h, s->pos, &s->filter, kb_kapi_notify, s);
        pthread_mutex_lock(&s->k->reg_mtx);
        atomic_store(&s->w, w);
        struct epoll_event ee = {.events = EPOLLRDHUP, .data.ptr = s};
        if (s->k->epfd >= 0 && s->fd >= 0)
            epoll_ctl(s->k->epfd, EPOLL_CTL_ADD, s->fd, &ee);
        pthread_mutex_unlock(&s->k->reg_mtx);
    }
    for (;;) {
        int64_t now = kb_now_mono_ns() / KB_NS_PER_MS;
        if (atomic_load(s->k->stopping))
            return kb_kapi_end(s, KB_KAPI_END_STOP);
        if (kb_kapi_peer_gone(s->fd))
            return kb_kapi_end(s, KB_KAPI_END_HANGUP);
        char rv[64];
        bool buffered = s->n_pend || s->out.len;
        if (now >= s->deadline_ms) { /* the API server ends a timed-out watch quietly, after a last bookmark */
            if (buffered)
                return true;
            if (s->q.bookmarks && kb_history_watcher_rv(w, rv, sizeof(rv)))
                kb_kapi_bookmark(s, rv, false);
            return kb_kapi_end(s, KB_KAPI_END_TIMEOUT);
        }
        if (s->n_pend == KB_KAPI_PENDING || s->out.len >= KB_KAPI_BLOCK)
            return true;
        kb_history_entry_t e = {0};
        kb_event_type_t type = KB_EV_MODIFIED;
        int got = kb_history_watcher_next(w, 0, &e, &type);
        if (got < 0) {
            if (!atomic_exchange(&s->slow, true))
                atomic_fetch_add(&s->k->slow_closed, 1);
            return kb_kapi_end(s, KB_KAPI_END_SLOW); /* the client resumes from its last resourceVersion */
        }
        if (got > 0) {
            bool send = kb_history_order_rv(e.ev) > s->skip_le;
            if (send && !kb_kapi_after_from(s, e.ev)) {
                kb_history_entry_fini(&e);
                return true; /* what is buffered, then the ERROR */
            }
            if (send)
                kb_kapi_queue(s, type, e.ev);
            kb_history_entry_fini(&e);
            continue;
        }
        if (buffered)
            return true;
        if (s->q.bookmarks && now >= s->next_bookmark_ms && kb_history_watcher_rv(w, rv, sizeof(rv))) {
            kb_kapi_bookmark(s, rv, false);
            return true;
        }
        if (kb_http_park(&s->park, now + kb_kapi_idle_ms(s, now))) {
            s->parked = true;
            return true;
        }
        /* unparked meanwhile (a change, a hang-up) or stopping: look again */
    }
}

static void kb_kapi_journal_collect(void *opaque, kb_event_t *ev) {
    kb_kapi_stream_t *s = opaque;
    if (ev->seq > s->j_seq)
        s->j_seq = ev->seq;
    kb_event_list_push(&s->j_page, ev);
}

/* The journal phase: a page at a time, then on to the window after the
 * newest seq replayed (it was subscribed all along, so nothing falls in
 * between; if it moved past that seq already, the stream ends and the client
 * resumes from what it got). False: the stream ends. */
static bool kb_kapi_watch_journal(kb_kapi_stream_t *s) {
    for (;;) {
        while (s->j_next < s->j_page.n && s->out.len < KB_KAPI_BLOCK) {
            kb_event_t *ev = s->j_page.ev[s->j_next++];
            bool change = ev->type == KB_EV_ADDED || ev->type == KB_EV_MODIFIED || ev->type == KB_EV_DELETED;
            kb_history_entry_t e = {.ev = ev};
            int type = change ? kb_history_entry_type(kb_kapi_kind(s->inf), &s->filter, &e) : -1;
            if (type >= 0 && !kb_kapi_after_from(s, ev))
                return true; /* what is buffered, then the ERROR */
            if (type >= 0)
                kb_kapi_frame(s, (kb_event_type_t)type, ev);
        }
        if (s->out.len)
            return true;
        kb_event_list_fini(&s->j_page);
        kb_event_list_init(&s->j_page);
        s->j_next = 0;
        uint64_t before = s->j_after;
        kb_err_t e = kb_informer_replay(s->hist->inf, s->j_rv, &s->j_after, KB_KAPI_JOURNAL_PAGE,
                                        kb_kapi_journal_collect, s);
        if (e != KB_OK)
            return kb_kapi_end(s, KB_KAPI_END_JOURNAL); /* the client resumes and gets 410 */
        if (s->j_after == before && s->j_page.n == 0) {
            s->journal = false;
            kb_kapi_slot_give(s);
            MHD_set_connection_option(s->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
            s->pos = kb_history_after_seq(s->hist->h, s->j_seq);
            return true;
        }
    }
}

static bool kb_kapi_watch_fill(kb_kapi_stream_t *s) {
    if (s->journal && !s->gone)
        return kb_kapi_watch_journal(s);
    if (s->gone) {
        kb_buf_append_str(&s->out, "{\"type\":\"ERROR\",\"object\":");
        kb_kapi_status_json(&s->out, MHD_HTTP_GONE, "Expired", s->gone_msg, NULL);
        kb_buf_append_str(&s->out, "}\n");
        return kb_kapi_end(s, KB_KAPI_END_EXPIRED);
    }
    while (s->next < s->items.n && s->out.len < KB_KAPI_BLOCK) {
        kb_event_t *ev = kb_kapi_item(s);
        kb_kapi_frame(s, KB_EV_ADDED, ev);
        kb_event_unref(ev);
    }
    if (s->next < s->items.n)
        return true;
    if (s->slot) { /* the initial events are written: from here on the watch holds a position only */
        kb_event_list_fini(&s->items);
        kb_event_list_init(&s->items);
        s->next = 0;
        kb_kapi_slot_give(s);
        MHD_set_connection_option(s->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u); /* (this connection's thread) */
    }
    if (s->end_bookmark) {
        s->end_bookmark = false;
        kb_kapi_bookmark(s, s->rv, true);
        return true;
    }
    if (s->out.len)
        return true;
    return kb_kapi_watch_live(s);
}

/* Where the watch starts: the initial events and the position after them, or
 * the position after q->rv. False when an error was answered instead (*ret). */
static bool kb_kapi_watch_start(kb_kapi_t *k, struct MHD_Connection *c, const kb_kapi_res_t *r,
                                const kb_kapi_path_t *p, kb_kapi_stream_t *s, enum MHD_Result *ret) {
    kb_kapi_query_t *q = &s->q;
    bool from_cut = q->initial || !q->rv || !strcmp(q->rv, "0");
    if (q->initial_set && !q->initial && (!q->rv || !strcmp(q->rv, "0")))
        from_cut = false; /* sendInitialEvents=false from "now" */
    if (from_cut) {
        uint64_t want = q->rv ? kb_rv_parse(q->rv, strlen(q->rv)) : 0;
        char cur[64];
        kb_kapi_rv_t w = want ? kb_kapi_wait_rv(k, q->req, r->inf, want, cur, sizeof(cur)) : KB_KAPI_RV_REACHED;
        if (w != KB_KAPI_RV_REACHED) { /* parked: the watch is set up afresh when the request is resumed */
            *ret = w == KB_KAPI_RV_PARKED ? MHD_YES : kb_kapi_too_large(c, q->rv, cur);
            return false;
        }
        if (!kb_kapi_slot_take(s)) {
            *ret = kb_kapi_busy(k, c);
            return false;
        }
        kb_event_list_t all;
        kb_event_list_init(&all);
        uint64_t seq = 0;
        kb_kapi_cut(r->inf, p->has_ns ? p->ns : NULL, q, &all, s->rv, sizeof(s->rv), &seq);
        if (all.n > 1)
            qsort(all.ev, all.n, sizeof(all.ev[0]), kb_kapi_by_key);
        const char *last = NULL;
        kb_kapi_page(&all, "", 0, &s->items, &last);
        kb_event_list_fini(&all);
        s->pos = kb_history_after_seq(s->hist->h, seq);
        s->end_bookmark = q->initial;
        return true;
    }
    char now_rv[64];
    uint64_t want = q->rv ? kb_rv_parse(q->rv, strlen(q->rv)) : 0;
    if (!q->rv) {
        kb_informer_cut(r->inf, NULL, NULL, now_rv, sizeof(now_rv), NULL);
        want = kb_rv_parse(now_rv, strlen(now_rv));
    }
    s->from_n = want;
    if (kb_history_after_rv(s->hist->h, want, &s->pos) == KB_HISTORY_GONE && !q->sel &&
        !kb_fieldsel_needs_record(q->fsel)) {
        /* Before the window: state_dir's journal may still have it. */
        if (!kb_kapi_slot_take(s)) {
            *ret = kb_kapi_busy(k, c);
            return false;
        }
        uint64_t after = 0;
        kb_err_t e = kb_informer_replay(r->inf, want, &after, KB_KAPI_JOURNAL_PAGE, kb_kapi_journal_collect, s);
        if (e == KB_OK) {
            s->journal = true;
            s->j_rv = want;
            s->j_after = after;
            return true;
        }
        kb_kapi_slot_give(s);
        kb_event_list_fini(&s->j_page);
        kb_event_list_init(&s->j_page);
    }
    if (kb_history_after_rv(s->hist->h, want, &s->pos) == KB_HISTORY_GONE) {
        uint64_t floor_rv = 0;
        size_t entries = 0;
        kb_history_stats(s->hist->h, &floor_rv, &entries);
        kb_kapi_expire(s, floor_rv);
        return true;
    }
    kb_informer_cut(r->inf, NULL, NULL, now_rv, sizeof(now_rv), NULL);
    if (want > kb_rv_parse(now_rv, strlen(now_rv)))
        s->skip_le = want; /* a future RV: only what comes after it */
    return true;
}

long kb_kapi_default_timeout_s(const char *resource, int64_t now_ms) {
    /* Reduced while unsigned: a hash cast to long first is negative half the time. */
    return 1800 + (long)((kb_fnv1a64(resource, strlen(resource)) ^ (uint64_t)now_ms) % 1800);
}

static enum MHD_Result kb_kapi_watch(kb_kapi_t *k, struct MHD_Connection *c, const kb_kapi_res_t *r,
                                     const kb_kapi_path_t *p, kb_kapi_query_t *q) {
    if (atomic_fetch_add(&k->watches, 1) >= k->max_watches) {
        atomic_fetch_sub(&k->watches, 1);
        kb_kapi_details_t d = {.retry_after = 1};
        return kb_kapi_status(c, MHD_HTTP_TOO_MANY_REQUESTS, "TooManyRequests", &d,
                              "kbridge serves at most %d watches (kube_api.max_watches)", k->max_watches);
    }
    kb_kapi_hist_t *hist = kb_kapi_history(k, r->inf);
    if (!hist) {
        atomic_fetch_sub(&k->watches, 1);
        kb_kapi_details_t d = {.retry_after = 1};
        return kb_kapi_status(c, MHD_HTTP_SERVICE_UNAVAILABLE, "ServiceUnavailable", &d,
                              "informer %s has no free subscriber slot for watches", kb_informer_conf(r->inf)->name);
    }
    atomic_fetch_add(&hist->watchers, 1);
    kb_kapi_stream_t *s = kb_kapi_stream_new(k, r, kb_kapi_watch_fill);
    s->hist = hist;
    snprintf(s->ns, sizeof(s->ns), "%s", p->has_ns ? p->ns : "");
    s->q = *q;
    q->sel = NULL; /* the stream owns them now */
    q->fsel = NULL;
    s->filter = (kb_history_filter_t){.ns = s->ns, .sel = s->q.sel, .fsel = s->q.fsel};
    int64_t now = kb_now_mono_ns() / KB_NS_PER_MS;
    long timeout_s = s->q.timeout_s > 0 ? s->q.timeout_s : kb_kapi_default_timeout_s(p->resource, now);
    s->deadline_ms = now + timeout_s * 1000;
    s->next_bookmark_ms = now + k->bookmark_ms;
    if (s->deadline_ms - 2000 < s->next_bookmark_ms && timeout_s > 2)
        s->next_bookmark_ms = s->deadline_ms - 2000;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    s->fd = ci ? fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0) : -1;
    enum MHD_Result ret = MHD_YES;
    if (!kb_kapi_watch_start(k, c, r, p, s, &ret)) {
        kb_kapi_stream_free(s);
        return ret;
    }
    /* A quiet watch without bookmarks writes nothing for minutes: not the
     * idle connection libmicrohttpd would close (hang-ups and the deadline
     * are noticed by the stream itself). While it sends initial events it
     * holds a stream slot, and a client that stops reading is cut at the
     * idle timeout like a list's (the API server, too, ends a watch whose
     * client does not keep up). */
    s->conn = c;
    kb_http_park_init(&s->park, k->http, c);
    s->q.req = NULL; /* the request's, not the stream's */
    if (!s->slot)
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    pthread_mutex_lock(&k->reg_mtx);
    s->reg_next = k->watch_list;
    if (k->watch_list)
        k->watch_list->reg_prev = s;
    k->watch_list = s;
    s->registered = true;
    pthread_mutex_unlock(&k->reg_mtx);
    return kb_kapi_stream_send(c, s);
}

/* Wake the live watches whose client hung up (an idle watch sleeps until it
 * has something): the epoll set holds their sockets, so this costs what
 * hung up, not every watch. With stopping, wake every live watch. With
 * lost_too, also shut down the socket of every watch that lost changes (a
 * watcher blocked because its client does not read never comes back to
 * notice; its stream then ends). Holds reg_mtx, under which a stream leaves
 * the list and the epoll set, so no watch is freed meanwhile. */
static void kb_kapi_reap(kb_kapi_t *k, bool stopping, bool lost_too) {
    pthread_mutex_lock(&k->reg_mtx);
    struct epoll_event ev[256];
    int n = k->epfd >= 0 ? epoll_wait(k->epfd, ev, 256, 0) : 0;
    for (int i = 0; i < n; i++) {
        kb_kapi_stream_t *s = ev[i].data.ptr;
        epoll_ctl(k->epfd, EPOLL_CTL_DEL, s->fd, NULL); /* once: it ends now */
        kb_history_watcher_wake(atomic_load(&s->w));
    }
    for (kb_kapi_stream_t *s = k->watch_list; (stopping || lost_too) && s; s = s->reg_next) {
        kb_history_watcher_t *w = atomic_load(&s->w);
        if (!w)
            continue; /* not live yet: writing its initial events or the journal */
        if (stopping) {
            kb_history_watcher_wake(w);
        } else if (kb_history_watcher_lost(w) && !atomic_exchange(&s->slow, true)) {
            atomic_fetch_add(&k->slow_closed, 1);
            if (s->fd >= 0)
                shutdown(s->fd, SHUT_RDWR);
        }
    }
    pthread_mutex_unlock(&k->reg_mtx);
}

/* Every 250 ms: hang-ups (and, while the server stops, everything); every
 * 2 s: watches that lost changes. */
static void *kb_kapi_reaper(void *arg) {
    kb_kapi_t *k = arg;
    kb_thread_set_name("kb:kapi-reaper");
    for (unsigned tick = 1; !atomic_load(&k->quit); tick++) {
        struct timespec ts = {0, 250 * 1000 * 1000};
        nanosleep(&ts, NULL);
        kb_kapi_reap(k, atomic_load(k->stopping), tick % 8 == 0);
    }
    return NULL;
}

/* ---- dispatch --------------------------------------------------------------- */

bool kb_kapi_owns(const char *url) {
    return !strcmp(url, "/version") || !strcmp(url, "/api") || !strncmp(url, "/api/", 5) || !strcmp(url, "/apis") ||
           !strncmp(url, "/apis/", 6);
}

static const char *kb_kapi_write_verb(const char *method) {
    if (!strcmp(method, "POST"))
        return "create";
    if (!strcmp(method, "PUT"))
        return "update";
    if (!strcmp(method, "PATCH"))
        return "patch";
    if (!strcmp(method, "DELETE"))
        return "delete";
    return NULL;
}

static bool kb_kapi_is_discovery(const char *url) {
    if (!strcmp(url, "/version") || !strcmp(url, "/api") || !strcmp(url, "/api/v1") || !strcmp(url, "/apis"))
        return true;
    if (strncmp(url, "/apis/", 6))
        return false;
    const char *s = strchr(url + 6, '/');
    return !s || !strchr(s + 1, '/');
}

static enum MHD_Result kb_kapi_resource(kb_kapi_t *k, struct MHD_Connection *c, kb_http_req_t *req, const char *url,
                                        const char *method, const char **verb, char *label, size_t label_size) {
    kb_kapi_path_t p;
    kb_kapi_res_t r;
    bool parsed = kb_kapi_parse(url, &p);
    if (parsed && !*p.group && !strcmp(p.resource, "namespaces") && !kb_kapi_resolve(k, "", p.version, p.resource, &r)) {
        /* kubectl asks for the namespace after a NotFound to tell "no such
         * namespace" apart; not knowing namespaces must not read as that. */
        return kb_kapi_status(c, MHD_HTTP_FORBIDDEN, "Forbidden", NULL,
                              "kbridge replicates no namespaces (no informer watches them)");
    }
    if (!parsed || p.subresource || !kb_kapi_resolve(k, p.group, p.version, p.resource, &r) ||
        (p.has_ns && !r.namespaced) || (p.has_name && !p.has_ns && r.namespaced))
        return kb_kapi_status(c, MHD_HTTP_NOT_FOUND, "NotFound", NULL,
                              "the server could not find the requested resource");
    snprintf(label, label_size, "%s", r.label);
    const char *wv = kb_kapi_write_verb(method);
    if (wv || strcmp(method, "GET")) {
        *verb = wv ? wv : "other";
        return kb_kapi_status(c, MHD_HTTP_METHOD_NOT_ALLOWED, "MethodNotAllowed", NULL,
                              "kbridge is a read-only replica: %s is not allowed on %s (send writes to the API server)",
                              method, r.label);
    }
    kb_kapi_query_t q;
    char err[512];
    unsigned bad = kb_kapi_query_parse(c, kb_kapi_kind(r.inf), &q, err, sizeof(err));
    q.req = req;
    bool bad_include = false;
    q.as_table = kb_ktable_wanted(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT),
                                  kb_kapi_arg(c, "includeObject"), p.group, p.resource, &q.table, &bad_include);
    if (!bad && bad_include) {
        bad = MHD_HTTP_BAD_REQUEST;
        snprintf(err, sizeof(err), "includeObject: must be None, Metadata or Object");
    }
    *verb = p.has_name ? "get" : q.watch ? "watch" : "list";
    enum MHD_Result ret;
    if (bad) {
        ret = kb_kapi_status(c, bad, bad == 422 ? "Invalid" : "BadRequest", NULL, "%s", err);
    } else if (!kb_informer_synced(r.inf)) {
        kb_kapi_details_t d = {.retry_after = 1};
        ret = kb_kapi_status(c, MHD_HTTP_TOO_MANY_REQUESTS, "TooManyRequests", &d,
                             "the replica of %s is not ready yet (its first list has not finished)", r.label);
    } else {
        /* The window starts with the first list or watch after the informer's
         * first list, so a client's list is inside it. */
        if (!p.has_name)
            kb_kapi_history(k, r.inf);
        ret = p.has_name ? kb_kapi_get(k, c, &r, &p, &q) : q.watch ? kb_kapi_watch(k, c, &r, &p, &q)
                                                              : kb_kapi_list(k, c, &r, &p, &q);
    }
    kb_selector_free(q.sel);
    kb_fieldsel_free(q.fsel);
    return ret;
}

enum MHD_Result kb_kapi_handle(kb_kapi_t *k, struct MHD_Connection *c, kb_http_req_t *req, const char *url,
                               const char *method) {
    pthread_mutex_lock(&k->mtx);
    size_t rows = atomic_load(&k->n_disc);
    kb_kapi_disc_all(k, false); /* a reload may have added informers */
    if (atomic_load(&k->n_disc) > rows && k->api && !k->disc_running)
        kb_kapi_discoverer_start(k);
    pthread_mutex_unlock(&k->mtx);
    if (kb_kapi_is_discovery(url)) {
        if (strcmp(method, "GET")) {
            enum MHD_Result ret = kb_kapi_status(c, MHD_HTTP_METHOD_NOT_ALLOWED, "MethodNotAllowed", NULL,
                                                 "kbridge is a read-only replica: %s is not allowed on %s", method,
                                                 url);
            kb_kapi_count(k, "other", "", kb_kapi_code);
            return ret;
        }
        enum MHD_Result ret = kb_kapi_discovery(k, c, url);
        kb_kapi_count(k, "discovery", "", kb_kapi_code);
        return ret;
    }
    const char *verb = "other";
    char label[160] = "";
    kb_kapi_code = 0;
    enum MHD_Result ret = kb_kapi_resource(k, c, req, url, method, &verb, label, sizeof(label));
    if (!req->parked) /* a parked request is counted once, when it is answered */
        kb_kapi_count(k, verb, label, kb_kapi_code);
    return ret;
}

/* ---- metrics ---------------------------------------------------------------- */

void kb_kapi_metrics(kb_kapi_t *k, kb_buf_t *o) {
    kb_buf_append_str(o, "# HELP kbridge_api_requests_total Kubernetes API requests served, by verb, resource and "
                         "HTTP code.\n# TYPE kbridge_api_requests_total counter\n");
    pthread_mutex_lock(&k->mtx);
    for (size_t i = 0; i < k->n_counters; i++) {
        kb_kapi_counter_t *c = &k->counters[i];
        kb_buf_appendf(o, "kbridge_api_requests_total{verb=\"%s\",resource=\"%s\",code=\"%u\"} %llu\n", c->verb,
                       c->resource, c->code, (unsigned long long)c->n);
    }
    kb_buf_append_str(o, "# HELP kbridge_api_watchers Open Kubernetes API watches, by resource.\n"
                         "# TYPE kbridge_api_watchers gauge\n");
    for (size_t i = 0; i < k->n_hist; i++) {
        const kb_config_informer_t *ic = kb_informer_conf(k->hist[i]->inf);
        kb_buf_appendf(o, "kbridge_api_watchers{resource=\"%s%s%s\"} %d\n", ic->resource, *ic->group ? "." : "",
                       ic->group, atomic_load(&k->hist[i]->watchers));
    }
    unsigned long long wakeups = 0;
    for (size_t i = 0; i < k->n_hist; i++)
        wakeups += kb_history_wakeups(k->hist[i]->h);
    pthread_mutex_unlock(&k->mtx);
    kb_buf_appendf(o, "# HELP kbridge_api_watch_wakeups_total Times a sleeping watch was woken because a change "
                      "was queued for it (or to notice a hang-up or a stop).\n"
                      "# TYPE kbridge_api_watch_wakeups_total counter\nkbridge_api_watch_wakeups_total %llu\n",
                   wakeups);
    kb_buf_appendf(o, "# HELP kbridge_api_watch_events_sent_total Watch events written to Kubernetes API watches.\n"
                      "# TYPE kbridge_api_watch_events_sent_total counter\nkbridge_api_watch_events_sent_total %llu\n"
                      "# HELP kbridge_api_watches_closed_slow_total Watches ended because the client read slower "
                      "than the history window moved.\n# TYPE kbridge_api_watches_closed_slow_total counter\n"
                      "kbridge_api_watches_closed_slow_total %llu\n"
                      "# HELP kbridge_api_watches_expired_total Watches from a resourceVersion older than "
                      "kube_api.watch_history, answered 410 Expired.\n# TYPE kbridge_api_watches_expired_total "
                      "counter\nkbridge_api_watches_expired_total %llu\n",
                   (unsigned long long)atomic_load(&k->events_sent), (unsigned long long)atomic_load(&k->slow_closed),
                   (unsigned long long)atomic_load(&k->expired));
    kb_buf_append_str(o, "# HELP kbridge_api_watches_ended_total Kubernetes API watches ended, by why.\n"
                         "# TYPE kbridge_api_watches_ended_total counter\n");
    for (int i = 0; i < KB_KAPI_END_COUNT; i++)
        kb_buf_appendf(o, "kbridge_api_watches_ended_total{reason=\"%s\"} %llu\n", kb_kapi_end_names[i],
                       (unsigned long long)atomic_load(&k->ended[i]));
}

/* ---- life ------------------------------------------------------------------- */

kb_kapi_t *kb_kapi_new(kb_bridge_t *b, kb_http_t *http, const atomic_bool *stopping, kb_slots_t *slots) {
    const kb_config_t *cfg = kb_bridge_config(b);
    if (!cfg->kapi_enabled)
        return NULL;
    kb_kapi_t *k = kb_calloc(1, sizeof(*k));
    k->b = b;
    k->http = http;
    k->stopping = stopping;
    k->slots = slots;
    k->history_cap = cfg->kapi_history;
    k->bookmark_ms = cfg->kapi_bookmark_seconds * 1000;
    k->max_watches = cfg->kapi_max_watches;
    atomic_init(&k->watches, 0);
    atomic_init(&k->events_sent, 0);
    atomic_init(&k->slow_closed, 0);
    atomic_init(&k->expired, 0);
    pthread_mutex_init(&k->mtx, NULL);
    pthread_mutex_init(&k->reg_mtx, NULL);
    k->disc = kb_calloc(KB_KAPI_MAX_SERVED, sizeof(*k->disc));
    atomic_init(&k->n_disc, 0);
    atomic_init(&k->quit, false);
    char why[512];
    k->api = kb_apiclient_new(&cfg->cluster, why, sizeof(why));
    if (!k->api)
        KB_WARN("kapi", "no API server client for discovery (%s): kinds and scopes are guessed", why);
    atomic_init(&k->version_json, NULL);
    kb_bridge_rdlock(b);
    kb_kapi_disc_all(k, true);
    for (size_t i = 0; i < atomic_load(&k->n_disc); i++) { /* (after a reload: informers that are synced already) */
        kb_kapi_res_t r;
        if (kb_kapi_resolve(k, k->disc[i].group, k->disc[i].version, k->disc[i].resource, &r) &&
            kb_informer_synced(r.inf))
            kb_kapi_history(k, r.inf);
    }
    kb_bridge_unlock(b);
    if (k->api)
        kb_kapi_discoverer_start(k);
    k->epfd = epoll_create1(EPOLL_CLOEXEC); /* -1: hang-ups are noticed at a watch's next wake-up */
    k->reaper_started = pthread_create(&k->reaper, NULL, kb_kapi_reaper, k) == 0;
    return k;
}

int kb_kapi_max_watches(const kb_kapi_t *k) {
    return k ? k->max_watches : 0;
}

void kb_kapi_destroy(kb_kapi_t *k) {
    if (!k)
        return;
    atomic_store(&k->quit, true);
    if (k->reaper_started)
        pthread_join(k->reaper, NULL);
    if (k->epfd >= 0)
        close(k->epfd);
    if (k->discoverer_started)
        pthread_join(k->discoverer, NULL);
    kb_apiclient_destroy(k->api);
    KB_ASSERT(!k->watch_list);
    for (size_t i = 0; i < k->n_hist; i++) {
        kb_history_destroy(k->hist[i]->h);
        free(k->hist[i]);
    }
    free(k->hist);
    for (size_t i = 0; i < KB_KAPI_CUTS; i++)
        if (k->cuts[i].id)
            kb_event_list_fini(&k->cuts[i].items);
    for (size_t i = 0; i < atomic_load(&k->n_disc); i++) {
        kb_kapi_disc_t *d = &k->disc[i];
        free(d->group);
        free(d->version);
        free(d->resource);
        kb_kapi_up_free(atomic_load(&d->up));
    }
    free(k->disc);
    free(atomic_load(&k->version_json));
    pthread_mutex_destroy(&k->reg_mtx);
    pthread_mutex_destroy(&k->mtx);
    free(k);
}
