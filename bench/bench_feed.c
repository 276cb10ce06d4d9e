/* bench/bench_feed.c — a pre-serialized Pod feed for bench/million.py.
 *
 * Why a dedicated server, not the simulator: the million-object benchmark
 * compares clients (kbridge, client-go) and must measure them, not the
 * server. The simulator keeps objects in a tree and builds every list page
 * and event on request; this program generates N Pods and M watch events
 * once, as the exact bytes the API server would send, and then only copies
 * them to sockets with writev(). Every client of a run gets the same bytes.
 *
 * What it serves (HTTP/1.1 on 127.0.0.1, one thread per connection):
 *   GET /version, /api, /api/v1      discovery (what kbridge asks first)
 *   GET /api/v1/pods[?limit=L&continue=C]
 *       a PodList at resourceVersion N (the Pods have RVs 1..N); paged when
 *       limit is given, the continue token is the next item's index
 *   GET /api/v1/pods?watch=true&sendInitialEvents=true…
 *       a streamed list: every Pod as ADDED, the initial-events-end BOOKMARK
 *       (RV N), then the watch events
 *   GET /api/v1/pods?watch=true&resourceVersion=R
 *       the watch events after R (R ≥ N; older is 410 Gone)
 *   POST /_feed/release, POST /_feed/hold
 *       watch events are sent only while released, so a benchmark can
 *       measure the synced state before the events start; released, they
 *       are written as fast as the client reads
 *   GET  /_feed/stats  {"pods":N,"events":M,"final":K,…}
 * A watch ends after timeoutSeconds (at most 3600) or when the client goes;
 * with the extra parameter _end=1 it ends after the last event without
 * waiting for release (to measure the server alone with curl).
 *
 * The events (resourceVersions N+1..N+M): every 20th is a DELETED of one of
 * the last Pods, every 20th (offset 10) an ADDED of a new Pod, the rest
 * MODIFIED (restart count, condition times) of Pods never deleted.
 *
 * Usage: bench_feed --pods N --events M [--port P] [--dump]
 * Prints "listening 127.0.0.1:PORT" once the feed is built. Stop: SIGTERM.
 */
#include "common/buf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define KB_FEED_APPS 100
#define KB_FEED_NS 20
#define KB_FEED_BATCH 256           /* objects per writev (3 iovecs each + chunk framing) */
#define KB_FEED_MAX_TIMEOUT_S 3600
#define KB_FEED_ARENA_CHUNK (64u << 20)

/* One serialized object or event. Owner: the feed; immutable once built. */
typedef struct kb_feed_item {
    const char *p;
    size_t len;
} kb_feed_item_t;

/* The whole feed. Built by main before the listener starts; read-only after,
 * except released (any thread). */
typedef struct kb_feed {
    size_t n_pods, n_events, final_objects;
    kb_feed_item_t *pods;   /* object JSON */
    kb_feed_item_t *events; /* full watch frames, newline-terminated */
    size_t pod_bytes, event_bytes;
    atomic_bool released;
    atomic_uint_fast64_t bytes_sent;
    atomic_uint connections;
} kb_feed_t;

static kb_feed_t kb_feed;

/* ---- arena: objects live in a few large blocks, never freed ---- */

static char *kb_arena_cur;
static size_t kb_arena_left;

static const char *kb_arena_put(const char *p, size_t n) {
    if (n > kb_arena_left) {
        size_t sz = n > KB_FEED_ARENA_CHUNK ? n : KB_FEED_ARENA_CHUNK;
        kb_arena_cur = malloc(sz);
        if (!kb_arena_cur) {
            fprintf(stderr, "bench_feed: out of memory\n");
            exit(1);
        }
        kb_arena_left = sz;
    }
    char *out = kb_arena_cur;
    memcpy(out, p, n);
    kb_arena_cur += n;
    kb_arena_left -= n;
    return out;
}

/* ---- deterministic pseudo-random fields ---- */

static uint64_t kb_mix(uint64_t x) { /* splitmix64 finalizer */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t kb_rnd(size_t idx, unsigned salt) { return kb_mix(((uint64_t)idx << 8) ^ salt); }

/* n hex digits (n ≤ 64) from a stream seeded by (idx, salt). */
static void kb_hex(char *out, size_t n, size_t idx, unsigned salt) {
    static const char d[] = "0123456789abcdef";
    uint64_t r = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 16 == 0)
            r = kb_rnd(idx, salt + (unsigned)i);
        out[i] = d[r & 15];
        r >>= 4;
    }
    out[n] = '\0';
}

static void kb_uuid(char out[37], size_t idx, unsigned salt) {
    char h[33];
    kb_hex(h, 32, idx, salt);
    snprintf(out, 37, "%.8s-%.4s-4%.3s-a%.3s-%.12s", h, h + 8, h + 12, h + 15, h + 18);
}

/* A unique name suffix: a bijection of idx (odd multiplier mod 2^32) in base 36. */
static void kb_suffix(char out[8], size_t idx) {
    static const char d[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    uint32_t v = (uint32_t)idx * 2654435761u;
    for (int i = 6; i >= 0; i--) {
        out[i] = d[v % 36];
        v /= 36;
    }
    out[7] = '\0';
}

static const char *const kb_words[10] = {"cart",   "checkout", "search",  "catalog", "payments",
                                         "ledger", "gateway",  "profile", "notify",  "ingest"};
static const char *const kb_tiers[3] = {"frontend", "backend", "cache"};

/* ---- one Pod, about 3.5 KB compact, ~1 KB of it managedFields ---- */

typedef struct kb_pod_ids {
    char app[24], hash[11], name[64], uid[37], rs_uid[37], token[6], cid1[65], cid2[65], img_sha[65], cfg_sum[65];
    unsigned ns, app_i, node, v1, v2, v3, ip3, ip4, host3, host4, day, hh, mm, ss;
} kb_pod_ids_t;

static void kb_pod_ids(kb_pod_ids_t *id, size_t idx) {
    uint64_t r = kb_rnd(idx, 1);
    id->app_i = (unsigned)(r % KB_FEED_APPS);
    snprintf(id->app, sizeof(id->app), "%s-%u", kb_words[id->app_i % 10], id->app_i / 10);
    kb_hex(id->hash, 10, id->app_i, 2); /* one ReplicaSet per app */
    char suf[8];
    kb_suffix(suf, idx);
    snprintf(id->name, sizeof(id->name), "%s-%s-%s", id->app, id->hash, suf);
    kb_uuid(id->uid, idx, 3);
    kb_uuid(id->rs_uid, id->app_i, 4);
    kb_hex(id->token, 5, idx, 5);
    kb_hex(id->cid1, 64, idx, 6);
    kb_hex(id->cid2, 64, idx, 7);
    kb_hex(id->img_sha, 64, id->app_i, 8);
    kb_hex(id->cfg_sum, 64, id->app_i, 9);
    id->ns = (unsigned)((r >> 8) % KB_FEED_NS);
    id->node = (unsigned)((r >> 16) % 500);
    id->v1 = 1 + id->app_i % 3, id->v2 = id->app_i % 17, id->v3 = id->app_i % 5;
    id->ip3 = (unsigned)((r >> 24) & 255), id->ip4 = (unsigned)((r >> 32) & 255);
    id->host3 = id->node / 250, id->host4 = id->node % 250;
    id->day = 1 + (unsigned)((r >> 40) % 28), id->hh = (unsigned)((r >> 45) % 24);
    id->mm = (unsigned)((r >> 50) % 60), id->ss = (unsigned)((r >> 56) % 60);
}

static void kb_pod_metadata(kb_buf_t *b, const kb_pod_ids_t *id, uint64_t rv) {
    kb_buf_appendf(b,
                   "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\",\"generateName\":\"%s-%s-\","
                   "\"namespace\":\"team-%02u\",\"uid\":\"%s\",\"resourceVersion\":\"%" PRIu64 "\","
                   "\"creationTimestamp\":\"2026-11-%02uT%02u:%02u:%02uZ\",\"labels\":{\"app\":\"%s\","
                   "\"pod-template-hash\":\"%s\",\"tier\":\"%s\",\"version\":\"v%u.%u.%u\"},"
                   "\"annotations\":{\"checksum/config\":\"%s\",\"prometheus.io/scrape\":\"true\"},"
                   "\"ownerReferences\":[{\"apiVersion\":\"apps/v1\","
                   "\"kind\":\"ReplicaSet\",\"name\":\"%s-%s\",\"uid\":\"%s\",\"controller\":true,"
                   "\"blockOwnerDeletion\":true}],",
                   id->name, id->app, id->hash, id->ns, id->uid, rv, id->day, id->hh, id->mm, id->ss, id->app,
                   id->hash, kb_tiers[id->app_i % 3], id->v1, id->v2, id->v3, id->cfg_sum, id->app, id->hash,
                   id->rs_uid);
}

static void kb_pod_managed_fields(kb_buf_t *b, const kb_pod_ids_t *id) {
    kb_buf_appendf(
        b,
        "\"managedFields\":[{\"manager\":\"kube-controller-manager\",\"operation\":\"Update\",\"apiVersion\":\"v1\","
        "\"time\":\"2026-11-%02uT%02u:%02u:%02uZ\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:metadata\":{"
        "\"f:annotations\":{\".\":{},\"f:checksum/config\":{},"
        "\"f:prometheus.io/scrape\":{}},\"f:generateName\":{},\"f:labels\":{\".\":{},\"f:app\":{},"
        "\"f:pod-template-hash\":{},\"f:tier\":{},\"f:version\":{}},\"f:ownerReferences\":{\".\":{},"
        "\"k:{\\\"uid\\\":\\\"%s\\\"}\":{}}},\"f:spec\":{\"f:containers\":{\"k:{\\\"name\\\":\\\"main\\\"}\":{"
        "\".\":{},\"f:env\":{\".\":{},\"k:{\\\"name\\\":\\\"LOG_LEVEL\\\"}\":{\".\":{},\"f:name\":{},"
        "\"f:value\":{}}},\"f:image\":{},\"f:name\":{},\"f:resources\":{"
        "\".\":{},\"f:limits\":{\".\":{},\"f:memory\":{}},\"f:requests\":{\".\":{},\"f:cpu\":{},"
        "\"f:memory\":{}}}}},\"f:dnsPolicy\":{},\"f:restartPolicy\":{},\"f:schedulerName\":{}}}},"
        "{\"manager\":\"kubelet\",\"operation\":\"Update\",\"apiVersion\":\"v1\","
        "\"time\":\"2026-11-%02uT%02u:%02u:%02uZ\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:status\":{"
        "\"f:conditions\":{\"k:{\\\"type\\\":\\\"Ready\\\"}\":{\".\":{},\"f:lastProbeTime\":{},"
        "\"f:lastTransitionTime\":{},\"f:status\":{},\"f:type\":{}}},\"f:containerStatuses\":{},\"f:hostIP\":{},"
        "\"f:phase\":{},\"f:podIP\":{},\"f:podIPs\":{\".\":{},\"k:{\\\"ip\\\":\\\"10.244.%u.%u\\\"}\":{\".\":{},"
        "\"f:ip\":{}}},\"f:startTime\":{}}},\"subresource\":\"status\"}]},",
        id->day, id->hh, id->mm, id->ss, id->rs_uid, id->day, id->hh, id->mm, (id->ss + 9) % 60, id->ip3, id->ip4);
}

static void kb_pod_spec(kb_buf_t *b, const kb_pod_ids_t *id) {
    kb_buf_appendf(
        b,
        "\"spec\":{\"volumes\":[{\"name\":\"config\",\"configMap\":{\"name\":\"%s-config\",\"defaultMode\":420}},"
        "{\"name\":\"kube-api-access-%s\",\"projected\":{\"sources\":[{\"serviceAccountToken\":{"
        "\"expirationSeconds\":3607,\"path\":\"token\"}},{\"configMap\":{\"name\":\"kube-root-ca.crt\","
        "\"items\":[{\"key\":\"ca.crt\",\"path\":\"ca.crt\"}]}}],\"defaultMode\":420}}],\"containers\":[{"
        "\"name\":\"main\",\"image\":\"registry.example.com/team-%02u/%s:%u.%u.%u\",\"ports\":[{"
        "\"containerPort\":8080,\"protocol\":\"TCP\"}],\"env\":[{\"name\":\"LOG_LEVEL\",\"value\":\"info\"},"
        "{\"name\":\"POD_NAME\",\"value\":\"%s\"}],"
        "\"resources\":{\"limits\":{\"memory\":\"512Mi\"},\"requests\":{\"cpu\":\"250m\",\"memory\":\"256Mi\"}},"
        "\"volumeMounts\":[{\"name\":\"config\",\"readOnly\":true,\"mountPath\":\"/etc/%s\"},"
        "{\"name\":\"kube-api-access-%s\",\"readOnly\":true,\"mountPath\":"
        "\"/var/run/secrets/kubernetes.io/serviceaccount\"}],\"terminationMessagePath\":\"/dev/termination-log\","
        "\"terminationMessagePolicy\":\"File\",\"imagePullPolicy\":\"IfNotPresent\"}],"
        "\"restartPolicy\":\"Always\",\"terminationGracePeriodSeconds\":30,"
        "\"dnsPolicy\":\"ClusterFirst\",\"serviceAccountName\":\"%s\","
        "\"nodeName\":\"node-%03u\",\"securityContext\":{},\"schedulerName\":\"default-scheduler\","
        "\"tolerations\":[{\"key\":\"node.kubernetes.io/not-ready\",\"operator\":\"Exists\","
        "\"effect\":\"NoExecute\",\"tolerationSeconds\":300}],\"priority\":0},",
        id->app, id->token, id->ns, id->app, id->v1, id->v2, id->v3, id->name, id->app, id->token, id->app,
        id->node);
}

static void kb_pod_status(kb_buf_t *b, const kb_pod_ids_t *id, unsigned restarts) {
    unsigned mm = (id->mm + restarts) % 60;
    kb_buf_appendf(
        b,
        "\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\","
        "\"status\":\"True\",\"lastProbeTime\":null,\"lastTransitionTime\":\"2026-11-%02uT%02u:%02u:%02uZ\"},"
        "{\"type\":\"ContainersReady\",\"status\":\"True\",\"lastProbeTime\":null,"
        "\"lastTransitionTime\":\"2026-11-%02uT%02u:%02u:%02uZ\"}],"
        "\"hostIP\":\"10.0.%u.%u\",\"podIP\":\"10.244.%u.%u\","
        "\"podIPs\":[{\"ip\":\"10.244.%u.%u\"}],\"startTime\":\"2026-11-%02uT%02u:%02u:%02uZ\","
        "\"containerStatuses\":[{\"name\":\"main\",\"state\":{\"running\":{\"startedAt\":"
        "\"2026-11-%02uT%02u:%02u:%02uZ\"}},\"lastState\":{},\"ready\":true,\"restartCount\":%u,"
        "\"image\":\"registry.example.com/team-%02u/%s:%u.%u.%u\",\"imageID\":"
        "\"registry.example.com/team-%02u/%s@sha256:%s\",\"containerID\":\"containerd://%s\",\"started\":true}],"
        "\"qosClass\":\"Burstable\"}}",
        id->day, id->hh, mm, (id->ss + 7) % 60, id->day, id->hh, mm, (id->ss + 7) % 60, id->host3, id->host4,
        id->ip3, id->ip4, id->ip3, id->ip4, id->day, id->hh, id->mm, id->ss, id->day, id->hh, mm,
        (id->ss + 5) % 60, restarts, id->ns, id->app, id->v1, id->v2, id->v3, id->ns, id->app, id->img_sha,
        id->cid1);
}

/* Pod idx at resourceVersion rv, restarted `restarts` times, appended to b. */
static void kb_feed_pod(kb_buf_t *b, size_t idx, uint64_t rv, unsigned restarts) {
    kb_pod_ids_t id;
    kb_pod_ids(&id, idx);
    kb_pod_metadata(b, &id, rv);
    kb_pod_managed_fields(b, &id);
    kb_pod_spec(b, &id);
    kb_pod_status(b, &id, restarts);
}

static void kb_feed_build(kb_feed_t *f) {
    kb_buf_t b = KB_BUF_INIT;
    f->pods = calloc(f->n_pods, sizeof(*f->pods));
    f->events = calloc(f->n_events ? f->n_events : 1, sizeof(*f->events));
    if (!f->pods || !f->events) {
        fprintf(stderr, "bench_feed: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < f->n_pods; i++) {
        kb_buf_reset(&b);
        kb_feed_pod(&b, i, i + 1, 0);
        f->pods[i] = (kb_feed_item_t){kb_arena_put(b.data, b.len), b.len};
        f->pod_bytes += b.len;
    }
    size_t deletes = 0, adds = 0, keep = f->n_pods - (f->n_events + 19) / 20;
    for (size_t e = 0; e < f->n_events; e++) {
        uint64_t rv = f->n_pods + 1 + e;
        kb_buf_reset(&b);
        if (e % 20 == 19) {
            kb_buf_append_str(&b, "{\"type\":\"DELETED\",\"object\":");
            kb_feed_pod(&b, f->n_pods - 1 - deletes++, rv, 0);
        } else if (e % 20 == 9) {
            kb_buf_append_str(&b, "{\"type\":\"ADDED\",\"object\":");
            kb_feed_pod(&b, f->n_pods + adds++, rv, 0);
        } else {
            kb_buf_append_str(&b, "{\"type\":\"MODIFIED\",\"object\":");
            kb_feed_pod(&b, (e * 7919u) % keep, rv, 1 + (unsigned)(e % 7));
        }
        kb_buf_append_str(&b, "}\n");
        f->events[e] = (kb_feed_item_t){kb_arena_put(b.data, b.len), b.len};
        f->event_bytes += b.len;
    }
    f->final_objects = f->n_pods - deletes + adds;
    kb_buf_fini(&b);
}

/* ---- HTTP ---- */

/* Write every byte of iov[0..n) (modified as it goes). False when the peer is gone. */
static bool kb_writev_all(int fd, struct iovec *iov, int n) {
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        atomic_fetch_add(&kb_feed.bytes_sent, (uint64_t)w);
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++, n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return true;
}

static bool kb_write_str(int fd, const char *s, size_t n) {
    struct iovec v = {(void *)s, n};
    return kb_writev_all(fd, &v, 1);
}

static bool kb_respond(int fd, int code, const char *reason, const char *body) {
    char h[256];
    int n = snprintf(h, sizeof(h), "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     code, reason, strlen(body));
    struct iovec v[2] = {{h, (size_t)n}, {(void *)body, strlen(body)}};
    return kb_writev_all(fd, v, 2);
}

/* The value of query parameter key in url, copied to out (empty if absent). */
static bool kb_query(const char *url, const char *key, char *out, size_t cap) {
    const char *q = strchr(url, '?');
    size_t kl = strlen(key);
    out[0] = '\0';
    for (const char *p = q; p && *p; p = strchr(p + 1, '&')) {
        if (!strncmp(p + 1, key, kl) && p[1 + kl] == '=') {
            const char *v = p + 2 + kl;
            size_t n = strcspn(v, "&");
            n = n < cap - 1 ? n : cap - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return true;
        }
    }
    return false;
}

static size_t kb_query_num(const char *url, const char *key, size_t dflt) {
    char v[32];
    return kb_query(url, key, v, sizeof(v)) && v[0] ? (size_t)strtoull(v, NULL, 10) : dflt;
}

/* Items [from, to) of the list as JSON array members. */
static bool kb_send_items(int fd, size_t from, size_t to) {
    struct iovec iov[2 * KB_FEED_BATCH];
    size_t first = from;
    while (from < to) {
        int n = 0;
        for (; from < to && n + 2 <= 2 * KB_FEED_BATCH; from++) { /* a comma and an item per turn */
            if (from > first)
                iov[n++] = (struct iovec){(void *)",", 1};
            iov[n++] = (struct iovec){(void *)kb_feed.pods[from].p, kb_feed.pods[from].len};
        }
        if (!kb_writev_all(fd, iov, n))
            return false;
    }
    return true;
}

static bool kb_serve_list(int fd, const char *url) {
    size_t n = kb_feed.n_pods, from = kb_query_num(url, "continue", 0);
    size_t limit = kb_query_num(url, "limit", 0);
    size_t to = limit && from + limit < n ? from + limit : n;
    if (from > n)
        return kb_respond(fd, 410, "Gone", "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                                           "\"reason\":\"Expired\",\"code\":410}");
    char head[512], meta[256];
    if (to < n)
        snprintf(meta, sizeof(meta), "\"resourceVersion\":\"%zu\",\"continue\":\"%zu\",\"remainingItemCount\":%zu", n,
                 to, n - to);
    else
        snprintf(meta, sizeof(meta), "\"resourceVersion\":\"%zu\"", n);
    char pre[400];
    int pl = snprintf(pre, sizeof(pre), "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{%s},\"items\":[", meta);
    size_t body = (size_t)pl + 2 + (to > from ? to - from - 1 : 0);
    for (size_t i = from; i < to; i++)
        body += kb_feed.pods[i].len;
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", body, pre);
    return kb_write_str(fd, head, (size_t)hl) && kb_send_items(fd, from, to) && kb_write_str(fd, "]}", 2);
}

/* One HTTP chunk of iov[1..n-1) framed by iov[0] (size line) and iov[n-1] (CRLF). */
static bool kb_send_chunk(int fd, struct iovec *iov, int n, size_t payload) {
    char size[24];
    iov[0] = (struct iovec){size, (size_t)snprintf(size, sizeof(size), "%zx\r\n", payload)};
    iov[n - 1] = (struct iovec){(void *)"\r\n", 2};
    return kb_writev_all(fd, iov, n);
}

static bool kb_send_initial(int fd) {
    static const char pre[] = "{\"type\":\"ADDED\",\"object\":", post[] = "}\n";
    struct iovec iov[3 * KB_FEED_BATCH + 2];
    for (size_t i = 0; i < kb_feed.n_pods;) {
        int n = 1;
        size_t payload = 0;
        for (; i < kb_feed.n_pods && n < 3 * KB_FEED_BATCH; i++) {
            iov[n++] = (struct iovec){(void *)pre, sizeof(pre) - 1};
            iov[n++] = (struct iovec){(void *)kb_feed.pods[i].p, kb_feed.pods[i].len};
            iov[n++] = (struct iovec){(void *)post, sizeof(post) - 1};
            payload += sizeof(pre) - 1 + kb_feed.pods[i].len + sizeof(post) - 1;
        }
        if (!kb_send_chunk(fd, iov, n + 1, payload))
            return false;
    }
    char bm[300];
    int n = snprintf(bm, sizeof(bm),
                     "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{"
                     "\"resourceVersion\":\"%zu\",\"creationTimestamp\":null,\"annotations\":{"
                     "\"k8s.io/initial-events-end\":\"true\"}},\"spec\":{\"containers\":null},\"status\":{}}}\n",
                     kb_feed.n_pods);
    struct iovec v[3] = {{0}, {bm, (size_t)n}, {0}};
    return kb_send_chunk(fd, v, 3, (size_t)n);
}

/* Events [*pos, …) up to one batch. */
static bool kb_send_events(int fd, size_t *pos) {
    struct iovec iov[KB_FEED_BATCH + 2];
    int n = 1;
    size_t payload = 0;
    for (; *pos < kb_feed.n_events && n <= KB_FEED_BATCH; (*pos)++, n++) {
        iov[n] = (struct iovec){(void *)kb_feed.events[*pos].p, kb_feed.events[*pos].len};
        payload += kb_feed.events[*pos].len;
    }
    return kb_send_chunk(fd, iov, n + 1, payload);
}

/* True while the client is connected (no EOF, no error), waiting up to ms. */
static bool kb_peer_alive(int fd, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0)
        return true;
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

static bool kb_serve_watch(int fd, const char *url) {
    char v[32];
    bool streamed = kb_query(url, "sendInitialEvents", v, sizeof(v)) && !strcmp(v, "true");
    bool end = kb_query_num(url, "_end", 0) == 1;
    size_t rv = kb_query_num(url, "resourceVersion", 0), pos = 0;
    size_t timeout = kb_query_num(url, "timeoutSeconds", 1800);
    timeout = timeout && timeout < KB_FEED_MAX_TIMEOUT_S ? timeout : KB_FEED_MAX_TIMEOUT_S;
    if (!streamed) {
        if (rv < kb_feed.n_pods)
            return kb_respond(fd, 410, "Gone", "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                                               "\"message\":\"too old resource version\",\"reason\":\"Expired\","
                                               "\"code\":410}");
        pos = rv - kb_feed.n_pods;
        pos = pos < kb_feed.n_events ? pos : kb_feed.n_events;
    }
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n";
    if (!kb_write_str(fd, head, sizeof(head) - 1) || (streamed && !kb_send_initial(fd)))
        return false;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((size_t)(now.tv_sec - t0.tv_sec) >= timeout)
            break;
        if ((end || atomic_load(&kb_feed.released)) && pos < kb_feed.n_events) {
            if (!kb_send_events(fd, &pos))
                return false;
            continue;
        }
        if (end)
            break;
        if (!kb_peer_alive(fd, 100))
            return false;
    }
    return kb_write_str(fd, "0\r\n\r\n", 5);
}

static bool kb_serve_control(int fd, const char *method, const char *url) {
    char body[256];
    if (!strcmp(method, "POST") && !strcmp(url, "/_feed/release"))
        atomic_store(&kb_feed.released, true);
    else if (!strcmp(method, "POST") && !strcmp(url, "/_feed/hold"))
        atomic_store(&kb_feed.released, false);
    else if (strcmp(url, "/_feed/stats"))
        return kb_respond(fd, 404, "Not Found", "{}");
    snprintf(body, sizeof(body),
             "{\"pods\":%zu,\"events\":%zu,\"final\":%zu,\"podBytes\":%zu,\"eventBytes\":%zu,\"released\":%s,"
             "\"bytesSent\":%" PRIuFAST64 ",\"connections\":%u}",
             kb_feed.n_pods, kb_feed.n_events, kb_feed.final_objects, kb_feed.pod_bytes, kb_feed.event_bytes,
             atomic_load(&kb_feed.released) ? "true" : "false", (uint_fast64_t)atomic_load(&kb_feed.bytes_sent),
             atomic_load(&kb_feed.connections));
    return kb_respond(fd, 200, "OK", body);
}

static bool kb_serve(int fd, const char *method, const char *url) {
    if (!strncmp(url, "/_feed/", 7))
        return kb_serve_control(fd, method, url);
    if (!strcmp(url, "/version"))
        return kb_respond(fd, 200, "OK", "{\"major\":\"1\",\"minor\":\"36\",\"gitVersion\":\"v1.36.0-bench-feed\"}");
    if (!strcmp(url, "/api"))
        return kb_respond(fd, 200, "OK", "{\"kind\":\"APIVersions\",\"versions\":[\"v1\"]}");
    if (!strcmp(url, "/api/v1"))
        return kb_respond(fd, 200, "OK",
                          "{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":\"v1\",\"resources\":[{"
                          "\"name\":\"pods\",\"singularName\":\"pod\",\"namespaced\":true,\"kind\":\"Pod\","
                          "\"verbs\":[\"get\",\"list\",\"watch\"],\"shortNames\":[\"po\"]}]}");
    size_t plen = strcspn(url, "?");
    if (strcmp(method, "GET") || plen != strlen("/api/v1/pods") || strncmp(url, "/api/v1/pods", plen))
        return kb_respond(fd, 404, "Not Found", "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"code\":404}");
    char w[16];
    if (kb_query(url, "watch", w, sizeof(w)) && (!strcmp(w, "true") || !strcmp(w, "1")))
        return kb_serve_watch(fd, url);
    return kb_serve_list(fd, url);
}

/* Read one request from the connection's buffer (refilled from fd as
 * needed): its method and target are copied out, its head and body (control
 * bodies are ignored) removed from buf. False at EOF or when malformed. */
static bool kb_read_request(int fd, char *buf, size_t cap, size_t *have, char method[8], char *url, size_t ucap) {
    char *end;
    while (!(end = memmem(buf, *have, "\r\n\r\n", 4))) {
        if (*have >= cap)
            return false;
        ssize_t r = recv(fd, buf + *have, cap - *have, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        *have += (size_t)r;
    }
    size_t head = (size_t)(end + 4 - buf), body = 0;
    *end = '\0';
    char *sp1 = strchr(buf, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp2 || (size_t)(sp1 - buf) >= 8 || (size_t)(sp2 - sp1 - 1) >= ucap)
        return false;
    memcpy(method, buf, (size_t)(sp1 - buf));
    method[sp1 - buf] = '\0';
    memcpy(url, sp1 + 1, (size_t)(sp2 - sp1 - 1));
    url[sp2 - sp1 - 1] = '\0';
    const char *cl = strcasestr(sp2 + 1, "\r\ncontent-length:");
    if (cl)
        body = (size_t)strtoull(cl + 17, NULL, 10);
    if (head + body > *have)
        return false; /* control requests have tiny bodies, sent with the head */
    memmove(buf, buf + head + body, *have - head - body);
    *have -= head + body;
    return true;
}

static void *kb_conn(void *arg) {
    int fd = (int)(intptr_t)arg;
    char buf[16384], url[8192], method[8];
    size_t have = 0;
    atomic_fetch_add(&kb_feed.connections, 1);
    while (kb_read_request(fd, buf, sizeof(buf), &have, method, url, sizeof(url)) && kb_serve(fd, method, url))
        ;
    close(fd);
    return NULL;
}

static int kb_listen(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 64) || getsockname(fd, (struct sockaddr *)&a, &al)) {
        perror("bench_feed: listen");
        exit(1);
    }
    printf("listening 127.0.0.1:%u\n", ntohs(a.sin_port));
    fflush(stdout);
    return fd;
}

int main(int argc, char **argv) {
    size_t pods = 1000, events = 100;
    int port = 0;
    bool dump = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--pods") && i + 1 < argc)
            pods = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--events") && i + 1 < argc)
            events = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dump"))
            dump = true;
        else {
            fprintf(stderr, "usage: bench_feed --pods N --events M [--port P] [--dump]\n");
            return 2;
        }
    }
    if (pods <= (events + 19) / 20 + 1) {
        fprintf(stderr, "bench_feed: --pods must exceed --events/20 + 1 (the events delete that many)\n");
        return 2;
    }
    kb_feed.n_pods = pods, kb_feed.n_events = events;
    signal(SIGPIPE, SIG_IGN);
    kb_feed_build(&kb_feed);
    if (dump) {
        fwrite(kb_feed.pods[0].p, 1, kb_feed.pods[0].len, stdout);
        printf("\n");
        return 0;
    }
    fprintf(stderr, "bench_feed: %zu pods (%zu bytes, %.0f B each), %zu events (%zu bytes), %zu objects after\n",
            pods, kb_feed.pod_bytes, (double)kb_feed.pod_bytes / (double)pods, events, kb_feed.event_bytes,
            kb_feed.final_objects);
    int lfd = kb_listen(port);
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            perror("bench_feed: accept");
            return 1;
        }
        int one = 1, sz = 4 << 20;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, kb_conn, (void *)(intptr_t)fd))
            close(fd);
        pthread_attr_destroy(&at);
    }
}
