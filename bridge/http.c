/* bridge/http.c — the HTTP API (docs/http.md) on libmicrohttpd.
 *
 * DESIGN. libmicrohttpd serves every connection from a few threads (4 to 32
 * by kube_api.max_watches: kb_http_threads), each with its own epoll set
 * (so descriptors above FD_SETSIZE work), idle connections closed after
 * 60 s; kbridge accepts them itself (kb_http_acceptor) to spread them evenly
 * over those threads. Why not a thread per connection (as before): the
 * Kubernetes API's largest clients are node agents, thousands of mostly
 * idle watches, and a thread each cost ~65 KB of memory apiece
 * (its stack with the static TLS of every library, a malloc arena's share)
 * — more than a third of what the API server itself needs for them. So
 * nothing waits on a thread: a stream with nothing to write, or a request
 * waiting for a resourceVersion, parks its connection (http_int.h;
 * libmicrohttpd suspends it) until whoever has something for it unparks it
 * — a live event, the history's notify — or its due time comes; the
 * watchdog thread keeps the due times in a heap and resumes what is due. A
 * content reader that finds nothing parks and returns 0; parking refuses
 * when an unpark came first or the server stops, so 0 is never returned
 * without a park behind it (libmicrohttpd would call again at once). Every
 * handler must not block its thread for long (a list reads its objects as
 * it writes them, a block at a time). Optionally HTTPS (libmicrohttpd's GnuTLS), the
 * certificate handed over per handshake by bridge/httpcred.c, which also
 * holds the token: both are read again when their files change.
 *
 * A few hostile clients must not starve the probes or the memory:
 *  - connections: KB_HTTP_MAX_CONNECTIONS, plus KB_HTTP_RESERVED slots only
 *    for an address with no connection open (a kubelet probe opens one at a
 *    time), and at most http.max_per_address from one address — decided in
 *    the accept callback from our own table of open connections;
 *  - request time: libmicrohttpd's idle timeout restarts with every byte, so
 *    a watchdog thread shuts down a connection that has not sent a whole
 *    request — line, headers and body — within http.header_timeout, looking
 *    only at the connections not being answered (a list of their own: 5,000
 *    open watches cost it nothing). It holds a dup of each socket, so a
 *    descriptor number reused after libmicrohttpd closed its own is never
 *    hit. The body counts: no endpoint reads one, and a body trickled a
 *    byte at a time would hold the slot for ever;
 *  - bodies: at most http.max_streams snapshots/replays at once (429 beyond),
 *    Kubernetes API lists and watch initial events included (bridge/slots.h),
 *    and a replay holds one page of KB_HTTP_PAGE journal entries decoded at a
 *    time, read again from the journal when the client has taken it.
 *
 * Requests are dispatched through one table (method, path, whether the path
 * ends in an informer name, whether a token is needed). Answers that are not
 * 2xx carry a Kubernetes Status object, so kubectl and client-go print them.
 *
 * Streams. GET /v1/snapshot takes a consistent cut (references only), sorts
 * it by key and writes one object at a time: no buffer the size of the List.
 * GET /v1/replay pages through the journal after the cut and writes it as
 * watch lines (a page trimmed away before it is read ends the stream with a
 * 410 ERROR event, as an API server's watch does); with watch=true it first
 * subscribes to the informer (the callback runs under the ingest lock: it only
 * takes a reference into this connection's bounded queue, and marks the queue
 * overflowed when full), then replays, then sends the queued live events whose
 * seq is above the last replayed one — no gap, no repeat. An overflowed queue
 * ends the stream after what was queued (the client resumes from its last
 * resourceVersion). An idle watch sends a BOOKMARK every 20 s (keeps the
 * connection alive and proves the client is still there); parked, it looks
 * again every half second, so it notices a client that hung up, or
 * kb_http_stop, within that.
 *
 * Locks: every handler runs under the bridge's read lock (kb_bridge_rdlock;
 * a reload takes the write lock), released before the body streams; a
 * handler never waits for anything unbounded while it holds it (a kube API
 * request waiting for a resourceVersion lets it go meanwhile). A
 * watch's mtx is a leaf (taken inside the informer's subscriber
 * lock by the callback); nothing calls into the informer while holding it.
 * conns_mtx (the connection table) is a leaf too. park_mtx (parks and the
 * timer heap) is taken last but for libmicrohttpd's own mutex (suspend and
 * resume take it inside), by the history's notify under its sig_mtx, and
 * never while taking another of ours. kb_http_stop first ends the acceptor
 * (a client that comes straight back is refused, as by a stopped server),
 * then sets stopping and resumes every parked connection under park_mtx, so
 * none is suspended when libmicrohttpd stops (which it requires).
 */
#include "bridge/http.h"

#include "bridge/http_int.h"
#include "bridge/httpcred.h"
#include "bridge/ha.h"
#include "bridge/kapi.h"
#include "bridge/slots.h"
#include "common/alloc.h"
#include "common/buf.h"
#include "common/event.h"
#include "common/log.h"
#include "common/selector.h"
#include "common/time.h"
#include "informer/audit.h"
#include "informer/indexer.h"
#include "informer/informer.h"
#include "informer/ledger.h"
#include "informer/zcache.h"
#include "sinks/sink.h"

#include <microhttpd.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define KB_HTTP_IDLE_TIMEOUT_S 60u /* KB_TEST_HTTP_IDLE_TIMEOUT_S shortens it, for tests only */
#define KB_HTTP_BOOKMARK_MS 20000
#define KB_HTTP_WAIT_MS 500
#define KB_HTTP_LIVE_MAX_EVENTS 16384
#define KB_HTTP_LIVE_MAX_BYTES ((size_t)64 << 20)
#define KB_HTTP_BLOCK 65536
#define KB_HTTP_PAGE 64 /* journal entries a replay holds decoded at a time */
#define KB_HTTP_RESERVED 8 /* slots beyond KB_HTTP_MAX_CONNECTIONS, for addresses with none open */
#define KB_HTTP_WATCHDOG_MS 250
#define KB_HTTP_HANDOVER_MS 200 /* longest wait for libmicrohttpd to register a connection handed over */
/* libmicrohttpd's threads, serving every connection: one per
 * KB_HTTP_CONNS_PER_THREAD connections allowed, at least 4, at most 32. Why
 * that many for mostly idle watches: resuming a parked connection walks
 * every connection its thread holds suspended (libmicrohttpd 0.9.75's
 * resume_suspended_connections: N / threads per resume), but each thread a
 * batch of changes wakes is a context switch. On kubesim, 5,000
 * spec.nodeName watches, kbridge's CPU over the churn (a thread per watch
 * before: 0.47 s / 0.99 s) — 40 single changes/s: 8 threads 0.45 s, 32 0.41,
 * 64 0.39; 500 changes/s in batches of 50: 4 threads 0.66 s, 32 0.83, 64
 * 1.00. */
#define KB_HTTP_THREADS_MIN 4
#define KB_HTTP_THREADS_MAX 32
#define KB_HTTP_CONNS_PER_THREAD 256
/* GnuTLS priorities of the HTTPS server: TLS 1.2 and 1.3 only (1.0 and 1.1
 * have no AEAD suite and are deprecated, RFC 8996), key exchange by ECDHE
 * only (a static-RSA suite such as AES128-SHA has no forward secrecy: the
 * key, once taken, decrypts every recorded session), AEAD ciphers only.
 * Explicit, so a library or system default that still allows more does not
 * decide what kbridge's token travels under. */
#define KB_HTTP_TLS_PRIORITIES                                                                                     \
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:-CIPHER-ALL:+AES-256-GCM:"         \
    "+AES-128-GCM:+CHACHA20-POLY1305:-MAC-ALL:+AEAD:%SERVER_PRECEDENCE"

/* One open connection (libmicrohttpd's socket context), on h->waiting
 * (no whole request read yet: the request deadline runs) or h->busy. */
typedef struct kb_http_conn {
    struct kb_http_conn *prev, *next;
    int fd;
    struct sockaddr_storage addr; /* the client's address (port ignored) */
    int64_t wait_since_ms;        /* waiting for a request's headers since then */
    bool answering;               /* whole request read (headers and body): the request deadline is off; on busy */
    bool served;                  /* answered a request already (kept alive) */
    bool cut;                     /* shut down by the watchdog */
} kb_http_conn_t;

struct kb_http {
    kb_bridge_t *b;
    struct MHD_Daemon *mhd;
    kb_httpcred_t *cred;  /* token and TLS pair, re-read when their files change (bridge/httpcred.h) */
    int port;
    int64_t start_real_ns;
    atomic_bool stopping; /* set by kb_http_stop (under park_mtx); open streams end */
    int max_per_address;
    kb_slots_t slots;     /* http.max_streams bodies, shared with the Kubernetes API */
    int64_t header_timeout_ms;
    atomic_ullong refused_connections, header_timeouts;
    pthread_mutex_t conns_mtx; /* guards waiting, busy, n_conns and started (leaf) */
    pthread_cond_t started_cond; /* a connection was registered (the acceptor waits for it) */
    uint64_t started;          /* connections registered so far */
    kb_http_conn_t *waiting;   /* connections the watchdog looks at */
    kb_http_conn_t *busy;      /* answering: it never looks (5,000 watches cost it nothing) */
    int n_conns;
    pthread_t watchdog;
    bool watchdog_started;
    pthread_mutex_t park_mtx;  /* parks' state and the timer heap; wakes the watchdog */
    pthread_cond_t park_cond;
    struct kb_http_due {       /* parked connections by due_ms (a binary min-heap; the time copied in) */
        int64_t due_ms;
        kb_http_park_t *p;
    } *heap;
    size_t n_heap, cap_heap;
    kb_kapi_t *kapi;      /* the Kubernetes API surface (bridge/kapi.h); NULL when off */
    int max_conns;        /* KB_HTTP_MAX_CONNECTIONS + kube_api.max_watches */
    int listen_fd;        /* ours, not libmicrohttpd's (kb_http_acceptor) */
    int wake_fd;          /* an eventfd: the acceptor ends */
    pthread_t acceptor;
    bool acceptor_started;
};

/* ---- answers ------------------------------------------------------------ */

static enum MHD_Result kb_http_send(struct MHD_Connection *c, unsigned code, const char *ctype, kb_buf_t *body) {
    size_t len = body->len;
    struct MHD_Response *r = len ? MHD_create_response_from_buffer(len, kb_buf_steal(body, NULL),
                                                                    MHD_RESPMEM_MUST_FREE)
                                 : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    kb_buf_fini(body);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (code == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"kbridge\"");
    if (code == MHD_HTTP_TOO_MANY_REQUESTS)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result kb_http_text(struct MHD_Connection *c, unsigned code, const char *text) {
    kb_buf_t body = KB_BUF_INIT;
    kb_buf_append_str(&body, text);
    return kb_http_send(c, code, "text/plain; charset=utf-8", &body);
}

/* A Kubernetes Status object (what the API server answers on errors). */
static enum MHD_Result kb_http_status(struct MHD_Connection *c, unsigned code, const char *reason, const char *fmt,
                                      ...) __attribute__((format(printf, 4, 5)));

static enum MHD_Result kb_http_status(struct MHD_Connection *c, unsigned code, const char *reason, const char *fmt,
                                      ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    kb_buf_t body = KB_BUF_INIT;
    kb_buf_append_str(&body, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
                             "\"message\":");
    /* a request's path or parameters echoed into the message may be anything */
    kb_buf_append_json_text(&body, msg, strlen(msg));
    kb_buf_append_str(&body, ",\"reason\":");
    kb_buf_append_json_str(&body, reason, strlen(reason));
    kb_buf_appendf(&body, ",\"code\":%u}\n", code);
    return kb_http_send(c, code, "application/json", &body);
}

/* 429 when every stream slot is taken. */
static enum MHD_Result kb_http_busy(kb_http_t *h, struct MHD_Connection *c) {
    return kb_http_status(c, MHD_HTTP_TOO_MANY_REQUESTS, "TooManyRequests",
                          KB_SLOTS_BUSY_FMT,
                          h->slots.max);
}

static const char *kb_http_arg(struct MHD_Connection *c, const char *name) {
    return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
}

/* ---- authentication ------------------------------------------------------ */

/* Whether the request's bearer token reads this endpoint: the main token
 * reads all, the metrics-only token what metrics_ok says. */
static bool kb_http_authorized(const kb_http_t *h, struct MHD_Connection *c, bool metrics_ok) {
    if (!kb_httpcred_has_token(h->cred))
        return true;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v || strncasecmp(v, "Bearer ", 7) != 0)
        return false;
    v += 7;
    while (*v == ' ')
        v++;
    kb_http_access_t a = kb_httpcred_access(h->cred, v, strlen(v));
    return a == KB_HTTP_ACCESS_ALL || (a == KB_HTTP_ACCESS_METRICS && metrics_ok);
}

kb_err_t kb_http_token_check(const kb_config_t *cfg, char *errstr, size_t errstr_size) {
    if (!*cfg->http_listen)
        return KB_OK;
    return kb_httpcred_check_token(cfg, errstr, errstr_size);
}

/* ---- connections --------------------------------------------------------- */

static int64_t kb_http_now_ms(void) {
    return kb_now_mono_ns() / KB_NS_PER_MS;
}

static bool kb_http_same_host(const struct sockaddr_storage *a, const struct sockaddr *b) {
    if (a->ss_family != b->sa_family)
        return false;
    if (b->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (b->sa_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                       sizeof(struct in6_addr));
    return false;
}

static int kb_http_same_in(const kb_http_conn_t *x, const struct sockaddr *addr) {
    int n = 0;
    for (; x; x = x->next)
        n += kb_http_same_host(&x->addr, addr);
    return n;
}

/* libmicrohttpd asks before it takes a connection: at most max_per_address
 * from one address, and the last KB_HTTP_RESERVED slots only for an address
 * with none open (a probe opens one connection at a time). */
static enum MHD_Result kb_http_accept(void *cls, const struct sockaddr *addr, socklen_t len) {
    kb_http_t *h = cls;
    KB_UNUSED(len);
    pthread_mutex_lock(&h->conns_mtx);
    int same = kb_http_same_in(h->waiting, addr) + kb_http_same_in(h->busy, addr);
    int total = h->n_conns;
    pthread_mutex_unlock(&h->conns_mtx);
    bool ok = same < h->max_per_address &&
              (total < h->max_conns || (same == 0 && total < h->max_conns + KB_HTTP_RESERVED));
    if (!ok)
        atomic_fetch_add(&h->refused_connections, 1);
    return ok ? MHD_YES : MHD_NO;
}

static void kb_http_link(kb_http_conn_t **head, kb_http_conn_t *x) {
    x->prev = NULL;
    x->next = *head;
    if (*head)
        (*head)->prev = x;
    *head = x;
}

static void kb_http_unlink(kb_http_conn_t **head, kb_http_conn_t *x) {
    if (x->prev)
        x->prev->next = x->next;
    else
        *head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->prev = x->next = NULL;
}

/* Track each connection from start to close. The descriptor kept is a dup:
 * the watchdog may shut the socket down after libmicrohttpd closed its own
 * descriptor, and never hits a reused number. */
static void kb_http_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                                enum MHD_ConnectionNotificationCode code) {
    kb_http_t *h = cls;
    kb_http_conn_t *x = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        x = kb_calloc(1, sizeof(*x));
        const union MHD_ConnectionInfo *fi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        x->fd = fi ? fcntl(fi->connect_fd, F_DUPFD_CLOEXEC, 0) : -1;
        /* GnuTLS writes the handshake's flight in pieces when the certificate
         * comes from the callback; with Nagle on, a piece waited for the
         * client's ACK (~10 ms per handshake on loopback). */
        if (x->fd >= 0 && kb_httpcred_has_tls(h->cred))
            setsockopt(x->fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
        if (ai && ai->client_addr)
            memcpy(&x->addr, ai->client_addr,
                   ai->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
        x->wait_since_ms = kb_http_now_ms();
        pthread_mutex_lock(&h->conns_mtx);
        kb_http_link(&h->waiting, x);
        h->n_conns++;
        h->started++;
        pthread_cond_signal(&h->started_cond);
        pthread_mutex_unlock(&h->conns_mtx);
        *socket_context = x;
        return;
    }
    if (!x)
        return;
    pthread_mutex_lock(&h->conns_mtx);
    kb_http_unlink(x->answering ? &h->busy : &h->waiting, x);
    h->n_conns--;
    pthread_mutex_unlock(&h->conns_mtx);
    if (x->fd >= 0)
        close(x->fd);
    free(x);
    *socket_context = NULL;
}

/* The whole request read, headers and body (answering: off the watchdog's
 * list), or the answer done (waiting for the next request, which gets
 * header_timeout again). */
static void kb_http_conn_mark(kb_http_t *h, struct MHD_Connection *c, bool answering) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    kb_http_conn_t *x = ci ? ci->socket_context : NULL;
    if (!x)
        return;
    pthread_mutex_lock(&h->conns_mtx);
    if (x->answering != answering) {
        kb_http_unlink(x->answering ? &h->busy : &h->waiting, x);
        kb_http_link(answering ? &h->busy : &h->waiting, x);
    }
    x->served |= x->answering && !answering;
    x->answering = answering;
    x->wait_since_ms = kb_http_now_ms();
    pthread_mutex_unlock(&h->conns_mtx);
}

static void kb_http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                              enum MHD_RequestTerminationCode toe) {
    KB_UNUSED(toe);
    kb_http_req_t *req = *con_cls;
    if (req) {
        kb_http_park_fini(&req->park);
        free(req);
        *con_cls = NULL;
    }
    kb_http_conn_mark(cls, c, false);
}

/* Shut down every connection that has not sent a whole request (line,
 * headers and body) within header_timeout: the idle timeout restarts with
 * each byte, this does not. Only the waiting list is walked: a connection
 * being answered (a watch) is on the busy one.
 * A kept-alive connection waiting for its next request is closed by the same
 * rule, but that is no refusal and is not counted. */
static void kb_http_cut_slow(kb_http_t *h) {
    int64_t now = kb_http_now_ms();
    pthread_mutex_lock(&h->conns_mtx);
    for (kb_http_conn_t *x = h->waiting; x; x = x->next) {
        if (x->cut || x->fd < 0 || now - x->wait_since_ms <= h->header_timeout_ms)
            continue;
        shutdown(x->fd, SHUT_RDWR);
        x->cut = true;
        if (!x->served)
            atomic_fetch_add(&h->header_timeouts, 1);
    }
    pthread_mutex_unlock(&h->conns_mtx);
}

/* ---- parking (http_int.h) ------------------------------------------------ */

static bool kb_http_heap_less(kb_http_t *h, size_t a, size_t b) {
    return h->heap[a].due_ms < h->heap[b].due_ms;
}

static void kb_http_heap_swap(kb_http_t *h, size_t a, size_t b) {
    struct kb_http_due t = h->heap[a];
    h->heap[a] = h->heap[b];
    h->heap[b] = t;
    h->heap[a].p->heap_i = a + 1;
    h->heap[b].p->heap_i = b + 1;
}

static void kb_http_heap_fix(kb_http_t *h, size_t i) {
    while (i > 0 && kb_http_heap_less(h, i, (i - 1) / 2)) {
        kb_http_heap_swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n_heap && kb_http_heap_less(h, l, m))
            m = l;
        if (r < h->n_heap && kb_http_heap_less(h, r, m))
            m = r;
        if (m == i)
            return;
        kb_http_heap_swap(h, i, m);
        i = m;
    }
}

/* Caller holds park_mtx. */
static void kb_http_heap_push(kb_http_t *h, kb_http_park_t *p) {
    if (h->n_heap == h->cap_heap) {
        h->cap_heap = h->cap_heap ? h->cap_heap * 2 : 64;
        h->heap = kb_realloc(h->heap, h->cap_heap * sizeof(*h->heap));
    }
    h->heap[h->n_heap++] = (struct kb_http_due){p->due_ms, p};
    p->heap_i = h->n_heap;
    kb_http_heap_fix(h, h->n_heap - 1);
}

/* Caller holds park_mtx. */
static void kb_http_heap_remove(kb_http_t *h, kb_http_park_t *p) {
    if (!p->heap_i)
        return;
    size_t i = p->heap_i - 1;
    p->heap_i = 0;
    if (i != --h->n_heap) {
        h->heap[i] = h->heap[h->n_heap];
        h->heap[i].p->heap_i = i + 1;
        kb_http_heap_fix(h, i);
    }
}

void kb_http_park_init(kb_http_park_t *p, kb_http_t *h, struct MHD_Connection *c) {
    memset(p, 0, sizeof(*p));
    p->h = h;
    p->c = c;
}

bool kb_http_park(kb_http_park_t *p, int64_t due_ms) {
    kb_http_t *h = p->h;
    pthread_mutex_lock(&h->park_mtx);
    bool park = !p->kicked && !atomic_load(&h->stopping);
    p->kicked = false;
    if (park) {
        p->suspended = true;
        p->due_ms = due_ms;
        kb_http_heap_push(h, p);
        if (h->heap[0].p == p)
            pthread_cond_signal(&h->park_cond); /* earlier than the watchdog's sleep */
        MHD_suspend_connection(p->c);
    }
    pthread_mutex_unlock(&h->park_mtx);
    return park;
}

/* Caller holds park_mtx. */
static void kb_http_unpark_locked(kb_http_t *h, kb_http_park_t *p) {
    if (!p->suspended) {
        p->kicked = true;
        return;
    }
    p->suspended = false;
    kb_http_heap_remove(h, p);
    MHD_resume_connection(p->c);
}

void kb_http_unpark(kb_http_park_t *p) {
    if (!p->h)
        return;
    pthread_mutex_lock(&p->h->park_mtx);
    kb_http_unpark_locked(p->h, p);
    pthread_mutex_unlock(&p->h->park_mtx);
}

void kb_http_park_fini(kb_http_park_t *p) {
    if (!p->h)
        return;
    pthread_mutex_lock(&p->h->park_mtx);
    KB_ASSERT(!p->suspended);
    kb_http_heap_remove(p->h, p);
    pthread_mutex_unlock(&p->h->park_mtx);
}

/* Resume every parked connection that is due (all of them once stopping),
 * and say how long the watchdog may sleep. Caller holds park_mtx. */
static int64_t kb_http_fire_due(kb_http_t *h, int64_t now) {
    bool all = atomic_load(&h->stopping);
    while (h->n_heap && (all || h->heap[0].due_ms <= now))
        kb_http_unpark_locked(h, h->heap[0].p);
    int64_t sleep = KB_HTTP_WATCHDOG_MS;
    if (h->n_heap && h->heap[0].due_ms - now < sleep)
        sleep = h->heap[0].due_ms - now;
    return sleep < 1 ? 1 : sleep;
}

/* The watchdog: parked connections' due times, and every KB_HTTP_WATCHDOG_MS
 * the request deadline of connections still waiting for a whole request. */
static void *kb_http_watchdog(void *arg) {
    kb_http_t *h = arg;
    kb_thread_set_name("kb:http-wd");
    int64_t next_cut = kb_http_now_ms() + KB_HTTP_WATCHDOG_MS;
    pthread_mutex_lock(&h->park_mtx);
    while (!atomic_load(&h->stopping)) {
        int64_t now = kb_http_now_ms();
        int64_t sleep = kb_http_fire_due(h, now);
        if (now >= next_cut) {
            pthread_mutex_unlock(&h->park_mtx);
            kb_http_cut_slow(h);
            pthread_mutex_lock(&h->park_mtx);
            next_cut = now + KB_HTTP_WATCHDOG_MS;
            continue;
        }
        if (next_cut - now < sleep)
            sleep = next_cut - now;
        struct timespec dl = kb_deadline_mono(sleep);
        pthread_cond_timedwait(&h->park_cond, &h->park_mtx, &dl);
    }
    pthread_mutex_unlock(&h->park_mtx);
    return NULL;
}

/* ---- streams ------------------------------------------------------------- */

typedef enum { KB_FILL_OK, KB_FILL_END, KB_FILL_ERR } kb_fill_t;

typedef struct kb_http_stream kb_http_stream_t;

struct kb_http_stream {
    kb_http_t *h;
    kb_fill_t (*fill)(kb_http_stream_t *s); /* append the next piece to out */
    kb_buf_t out;         /* bytes not yet handed to libmicrohttpd */
    size_t out_off;
    bool ended;
    bool head_done;       /* snapshot: the List's head is out */
    kb_event_list_t items; /* snapshot: the cut's candidates; replay: one page of the journal */
    size_t next;
    size_t written;       /* snapshot: items sent */
    kb_selector_t *sel;   /* snapshot: checked on each candidate as it is read (NULL: the index answered) */
    /* replay */
    uint64_t from_rv;     /* the cut asked for */
    uint64_t after;       /* journal position (kb_informer_replay) */
    bool replayed;        /* the journal is read to its end */
    const char *kind, *api_version; /* borrowed from the informer's resource */
    char rv[64];          /* snapshot: the cut; replay: the newest RV sent */
    kb_informer_t *inf;   /* snapshot; replay with watch=true */
    char inf_name[128];   /* a copy: a reload may free the config that named it (snapshot and watch) */
    /* watch=true only */
    bool subscribed;
    int fd;               /* the client's socket, to notice a hang-up */
    uint64_t last_seq;    /* live events up to here were replayed already */
    int64_t last_write_ms;
    kb_http_park_t park;  /* parked while nothing is queued; kb_http_live unparks it */
    bool parked;          /* the fill parked: the reader returns 0 */
    pthread_mutex_t mtx;  /* guards the live queue (leaf) */
    kb_event_t **q;       /* ring of KB_HTTP_LIVE_MAX_EVENTS references */
    size_t q_head, q_n, q_bytes;
    bool overflow;
};

static ssize_t kb_http_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    kb_http_stream_t *s = cls;
    KB_UNUSED(pos);
    while (s->out_off == s->out.len) {
        if (s->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        kb_buf_reset(&s->out);
        s->out_off = 0;
        kb_fill_t r = s->fill(s);
        if (r == KB_FILL_ERR)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (r == KB_FILL_END)
            s->ended = true;
        if (s->parked) { /* suspended until a live event or its next look (http_int.h) */
            s->parked = false;
            return 0;
        }
    }
    size_t n = s->out.len - s->out_off;
    if (n > max)
        n = max;
    memcpy(buf, s->out.data + s->out_off, n);
    s->out_off += n;
    return (ssize_t)n;
}

static void kb_http_live(void *opaque, kb_event_t *ev);

static void kb_http_stream_free(void *cls) {
    kb_http_stream_t *s = cls;
    if (s->subscribed)
        kb_informer_unsubscribe(s->inf, kb_http_live, s); /* waits out a running callback */
    kb_http_park_fini(&s->park);
    if (s->q) {
        for (size_t i = 0; i < s->q_n; i++)
            kb_event_unref(s->q[(s->q_head + i) % KB_HTTP_LIVE_MAX_EVENTS]);
        free(s->q);
        pthread_mutex_destroy(&s->mtx);
    }
    kb_event_list_fini(&s->items);
    kb_selector_free(s->sel);
    kb_buf_fini(&s->out);
    kb_slots_give(&s->h->slots);
    free(s);
}

/* NULL when http.max_streams bodies are being sent already (counted). */
static kb_http_stream_t *kb_http_stream_new(kb_http_t *h, kb_informer_t *inf,
                                            kb_fill_t (*fill)(kb_http_stream_t *s)) {
    if (!kb_slots_take(&h->slots))
        return NULL;
    kb_http_stream_t *s = kb_calloc(1, sizeof(*s));
    s->h = h;
    s->fill = fill;
    s->fd = -1;
    kb_event_list_init(&s->items);
    kb_resource_t *res = kb_informer_resource(inf);
    s->kind = kb_resource_kind(res);
    s->api_version = res->api_version;
    return s;
}

static enum MHD_Result kb_http_stream_send(struct MHD_Connection *c, kb_http_stream_t *s) {
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, KB_HTTP_BLOCK, kb_http_stream_read, s, kb_http_stream_free);
    if (!r) {
        kb_http_stream_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- GET /v1/snapshot/{informer} ------------------------------------------ */

/* A compressed cache entry (informer/zcache.h) is expanded straight into
 * the body, after its comma, and taken back out when the selector does not
 * match it: no 3-4 KB copy of the event per item on the way (a -l answer of
 * 10,000 Pods is 39 MB). False for any other entry, or a frame that does not
 * expand (kb_informer_full then says so and sends what it can). */
static bool kb_http_list_expand(kb_http_stream_t *s, const kb_event_t *cached) {
    if (!cached->zdict)
        return false;
    size_t at = s->out.len, comma = s->written ? 1 : 0;
    kb_buf_reserve(&s->out, comma + cached->zraw_len);
    char *obj = s->out.data + at + comma;
    if (!kb_zcache_expand(cached->zdict, kb_event_frame(cached), cached->zlen, obj, cached->zraw_len)) {
        s->out.data[at] = '\0';
        return false;
    }
    bool match = !s->sel || kb_selector_match_json(s->sel, cached->zlabels_len ? obj + cached->zlabels_off : NULL,
                                                   cached->zlabels_len);
    if (match) {
        if (comma)
            s->out.data[at] = ',';
        s->out.len = at + comma + cached->zraw_len;
        s->written++;
    }
    s->out.data[s->out.len] = '\0';
    return true;
}

static kb_fill_t kb_http_list_fill(kb_http_stream_t *s) {
    if (!s->head_done) {
        kb_buf_append_str(&s->out, "{\"kind\":");
        char kind[300];
        snprintf(kind, sizeof(kind), "%sList", s->kind);
        kb_buf_append_json_str(&s->out, kind, strlen(kind));
        kb_buf_append_str(&s->out, ",\"apiVersion\":");
        kb_buf_append_json_str(&s->out, s->api_version, strlen(s->api_version));
        kb_buf_append_str(&s->out, ",\"metadata\":{\"resourceVersion\":");
        kb_buf_append_json_str(&s->out, s->rv, strlen(s->rv));
        kb_buf_append_str(&s->out, "},\"items\":[");
        s->head_done = true;
    }
    /* Each candidate is read (state_dir, decompression) as it is written, a
     * block's worth at a time. */
    while (s->next < s->items.n) {
        kb_event_t *cached = s->items.ev[s->next];
        s->items.ev[s->next++] = NULL;
        bool done = kb_http_list_expand(s, cached);
        kb_event_t *ev = done ? NULL : kb_informer_full(s->inf, cached);
        kb_event_unref(cached);
        if (done)
            goto next;
        if (!ev->obj_len) { /* state_dir closed under us (a reload removed the informer): no object to send */
            KB_WARN("http", "snapshot of %s: the informer was closed while its snapshot was sent; ending the stream",
                    s->inf_name);
            kb_event_unref(ev);
            return KB_FILL_ERR;
        }
        bool match = !s->sel || kb_selector_match_json(s->sel, ev->labels_len ? ev->obj + ev->labels_off : NULL,
                                                       ev->labels_len);
        if (match) {
            if (s->written++)
                kb_buf_append_char(&s->out, ',');
            kb_buf_append(&s->out, ev->obj, ev->obj_len);
        }
        kb_event_unref(ev);
    next:
        if (s->out.len >= KB_HTTP_BLOCK)
            return KB_FILL_OK;
    }
    kb_buf_append_str(&s->out, "]}\n");
    return KB_FILL_END;
}

static int kb_http_by_key(const void *a, const void *b) {
    const kb_event_t *x = *(kb_event_t *const *)a, *y = *(kb_event_t *const *)b;
    return strcmp(x->key, y->key);
}

static bool kb_http_valid_namespace(const char *ns) {
    size_t n = strlen(ns);
    return n <= 253 && strspn(ns, "abcdefghijklmnopqrstuvwxyz0123456789-.") == n;
}

static enum MHD_Result kb_http_get_snapshot(kb_http_t *h, struct MHD_Connection *c, kb_informer_t *inf) {
    const char *ns = kb_http_arg(c, "namespace");
    const char *sel_text = kb_http_arg(c, "labelSelector");
    if (ns && !kb_http_valid_namespace(ns))
        return kb_http_status(c, MHD_HTTP_BAD_REQUEST, "BadRequest", "namespace \"%.300s\" is not a valid name", ns);
    kb_selector_t *sel = NULL;
    if (sel_text && *sel_text) {
        char err[256];
        sel = kb_selector_parse(sel_text, err, sizeof(err));
        if (!sel)
            return kb_http_status(c, MHD_HTTP_BAD_REQUEST, "BadRequest", "labelSelector: %s", err);
    }
    kb_http_stream_t *s = kb_http_stream_new(h, inf, kb_http_list_fill);
    if (!s) {
        kb_selector_free(sel);
        return kb_http_busy(h, c);
    }
    /* References to the candidates only (the indexes narrow them); their
     * objects are read as the body is written, outside the ingest lock. */
    bool exact = false;
    kb_informer_select(inf, ns && *ns ? ns : NULL, sel, &s->items, &exact, s->rv, sizeof(s->rv), NULL);
    s->inf = inf;
    snprintf(s->inf_name, sizeof(s->inf_name), "%s", kb_informer_conf(inf)->name);
    if (exact)
        kb_selector_free(sel);
    else
        s->sel = sel;
    if (s->items.n > 1)
        qsort(s->items.ev, s->items.n, sizeof(s->items.ev[0]), kb_http_by_key);
    return kb_http_stream_send(c, s);
}

/* ---- POST /v1/snapshot/{informer}?route= --------------------------------- */

static enum MHD_Result kb_http_post_snapshot(kb_http_t *h, struct MHD_Connection *c, kb_informer_t *inf) {
    const char *route = kb_http_arg(c, "route");
    if (!route || !*route)
        return kb_http_status(c, MHD_HTTP_BAD_REQUEST, "BadRequest", "route=NAME is required");
    char err[512];
    size_t count = 0;
    kb_err_t e = kb_bridge_publish_snapshot(h->b, kb_informer_conf(inf)->name, route, &count, err, sizeof(err));
    if (e == KB_ERR_NOTFOUND)
        return kb_http_status(c, MHD_HTTP_NOT_FOUND, "NotFound", "%s", err);
    if (e == KB_ERR_CONFIG)
        return kb_http_status(c, MHD_HTTP_BAD_REQUEST, "BadRequest", "%s", err);
    if (e != KB_OK)
        return kb_http_status(c, MHD_HTTP_SERVICE_UNAVAILABLE, "ServiceUnavailable", "%s (%zu published)", err,
                              count);
    kb_buf_t body = KB_BUF_INIT;
    kb_buf_appendf(&body, "{\"published\":%zu}\n", count);
    return kb_http_send(c, MHD_HTTP_OK, "application/json", &body);
}

/* ---- GET /v1/replay/{informer}?resourceVersion=RV[&watch=true] ----------- */

/* Append ev as a watch line; false for types the API server never sends. */
static bool kb_http_watch_line(kb_http_stream_t *s, const kb_event_t *ev) {
    if (ev->type != KB_EV_ADDED && ev->type != KB_EV_MODIFIED && ev->type != KB_EV_DELETED)
        return false;
    kb_buf_appendf(&s->out, "{\"type\":\"%s\",\"object\":", kb_event_type_name(ev->type));
    kb_buf_append(&s->out, ev->obj, ev->obj_len);
    kb_buf_append_str(&s->out, "}\n");
    snprintf(s->rv, sizeof(s->rv), "%s", ev->rv);
    s->last_write_ms = kb_now_mono_ns() / KB_NS_PER_MS;
    return true;
}

static void kb_http_bookmark(kb_http_stream_t *s) {
    kb_buf_append_str(&s->out, "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":");
    kb_buf_append_json_str(&s->out, s->kind, strlen(s->kind));
    kb_buf_append_str(&s->out, ",\"apiVersion\":");
    kb_buf_append_json_str(&s->out, s->api_version, strlen(s->api_version));
    kb_buf_append_str(&s->out, ",\"metadata\":{\"resourceVersion\":");
    kb_buf_append_json_str(&s->out, s->rv, strlen(s->rv));
    kb_buf_append_str(&s->out, "}}}\n");
    s->last_write_ms = kb_now_mono_ns() / KB_NS_PER_MS;
}

/* The informer's subscriber callback: under its ingest lock, so only queue
 * (and resume the connection, a leaf lock and an eventfd write). */
static void kb_http_live(void *opaque, kb_event_t *ev) {
    kb_http_stream_t *s = opaque;
    pthread_mutex_lock(&s->mtx);
    bool wake = !s->overflow;
    if (!s->overflow) {
        size_t sz = kb_event_size(ev);
        if (s->q_n == KB_HTTP_LIVE_MAX_EVENTS || s->q_bytes + sz > KB_HTTP_LIVE_MAX_BYTES) {
            s->overflow = true;
        } else {
            s->q[(s->q_head + s->q_n++) % KB_HTTP_LIVE_MAX_EVENTS] = kb_event_ref(ev);
            s->q_bytes += sz;
        }
    }
    pthread_mutex_unlock(&s->mtx);
    if (wake)
        kb_http_unpark(&s->park);
}

static bool kb_http_peer_gone(int fd) {
    if (fd < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void kb_http_collect(void *opaque, kb_event_t *ev);

/* A watch ERROR event carrying a 410 Status, as the API server sends when a
 * watch falls behind what it still holds. */
static void kb_http_expired_line(kb_http_stream_t *s) {
    kb_buf_append_str(&s->out, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
                               "\"metadata\":{},\"status\":\"Failure\",\"message\":");
    char msg[512];
    snprintf(msg, sizeof(msg), "the journal of informer \"%s\" was trimmed past this replay while it was being read; "
             "take a snapshot and replay from its resourceVersion", s->inf_name);
    kb_buf_append_json_str(&s->out, msg, strlen(msg));
    kb_buf_append_str(&s->out, ",\"reason\":\"Expired\",\"code\":410}}\n");
}

/* The next page of the journal into s->items (the previous one released):
 * a window of KB_HTTP_PAGE entries, never the whole tail. */
static kb_fill_t kb_http_next_page(kb_http_stream_t *s) {
    kb_event_list_fini(&s->items);
    kb_event_list_init(&s->items);
    s->next = 0;
    uint64_t before = s->after;
    kb_err_t e = kb_informer_replay(s->inf, s->from_rv, &s->after, KB_HTTP_PAGE, kb_http_collect, s);
    if (e == KB_ERR_GONE) {
        kb_http_expired_line(s);
        return KB_FILL_END;
    }
    if (e != KB_OK) {
        KB_WARN("http", "replay of %s: reading the journal: %s; ending the stream", s->inf_name, kb_err_str(e));
        return KB_FILL_ERR;
    }
    if (s->after == before)
        s->replayed = true;
    return KB_FILL_OK;
}

static kb_fill_t kb_http_replay_fill(kb_http_stream_t *s) {
    while (!s->replayed) {
        while (s->next < s->items.n)
            if (kb_http_watch_line(s, s->items.ev[s->next++]))
                return KB_FILL_OK;
        if (atomic_load(&s->h->stopping))
            return KB_FILL_END;
        kb_fill_t r = kb_http_next_page(s);
        if (r != KB_FILL_OK || s->out.len)
            return r;
    }
    if (!s->subscribed)
        return KB_FILL_END;
    for (;;) {
        if (atomic_load(&s->h->stopping))
            return KB_FILL_END;
        pthread_mutex_lock(&s->mtx);
        kb_event_t *ev = NULL;
        if (s->q_n) {
            ev = s->q[s->q_head];
            s->q_head = (s->q_head + 1) % KB_HTTP_LIVE_MAX_EVENTS;
            s->q_n--;
            s->q_bytes -= kb_event_size(ev);
        }
        bool overflow = s->overflow;
        pthread_mutex_unlock(&s->mtx);
        if (ev) {
            bool sent = ev->seq > s->last_seq && kb_http_watch_line(s, ev);
            kb_event_unref(ev);
            if (sent)
                return KB_FILL_OK;
            continue;
        }
        if (overflow) {
            KB_WARN("http", "replay watch of %s: the client reads slower than changes arrive (more than %d queued); "
                    "ending the stream", s->inf_name, KB_HTTP_LIVE_MAX_EVENTS);
            return KB_FILL_ERR;
        }
        if (kb_http_peer_gone(s->fd))
            return KB_FILL_ERR;
        int64_t now = kb_http_now_ms();
        if (now - s->last_write_ms >= KB_HTTP_BOOKMARK_MS) {
            kb_http_bookmark(s);
            return KB_FILL_OK;
        }
        /* Nothing queued: park until a live event, or look again in
         * KB_HTTP_WAIT_MS (a hang-up or a stop is noticed then). */
        if (kb_http_park(&s->park, now + KB_HTTP_WAIT_MS)) {
            s->parked = true;
            return KB_FILL_OK;
        }
    }
}

static void kb_http_collect(void *opaque, kb_event_t *ev) {
    kb_http_stream_t *s = opaque;
    if (ev->seq > s->last_seq)
        s->last_seq = ev->seq;
    kb_event_list_push(&s->items, ev);
}

static bool kb_http_bool_arg(const char *v, bool *out) {
    if (!v || !*v || !strcmp(v, "false") || !strcmp(v, "0")) {
        *out = false;
        return true;
    }
    *out = !strcmp(v, "true") || !strcmp(v, "1");
    return *out;
}

static enum MHD_Result kb_http_get_replay(kb_http_t *h, struct MHD_Connection *c, kb_informer_t *inf) {
    const char *rv_text = kb_http_arg(c, "resourceVersion");
    bool watch = false;
    uint64_t rv = 0;
    if (!rv_text || !kb_decimal_u64(rv_text, strlen(rv_text), &rv))
        return kb_http_status(c, MHD_HTTP_BAD_REQUEST, "BadRequest",
                              "resourceVersion must be a decimal resourceVersion below 2^64 (of a snapshot or an "
                              "event)");
    if (!kb_http_bool_arg(kb_http_arg(c, "watch"), &watch))
        return kb_http_status(c, MHD_HTTP_BAD_REQUEST, "BadRequest", "watch must be true or false");
    kb_http_stream_t *s = kb_http_stream_new(h, inf, kb_http_replay_fill);
    if (!s)
        return kb_http_busy(h, c);
    s->inf = inf;
    snprintf(s->inf_name, sizeof(s->inf_name), "%s", kb_informer_conf(inf)->name);
    snprintf(s->rv, sizeof(s->rv), "%s", rv_text);
    s->last_write_ms = kb_now_mono_ns() / KB_NS_PER_MS;
    if (watch) {
        s->q = kb_calloc(KB_HTTP_LIVE_MAX_EVENTS, sizeof(*s->q));
        pthread_mutex_init(&s->mtx, NULL);
        kb_http_park_init(&s->park, h, c);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        s->fd = ci ? ci->connect_fd : -1;
        /* Subscribe before reading the journal: nothing falls in between. */
        s->subscribed = kb_informer_subscribe(inf, kb_http_live, s);
        if (!s->subscribed) {
            kb_http_stream_free(s);
            return kb_http_status(c, MHD_HTTP_SERVICE_UNAVAILABLE, "ServiceUnavailable",
                                  "too many live replays of informer \"%s\"", kb_informer_conf(inf)->name);
        }
    }
    s->from_rv = rv;
    kb_err_t e = kb_informer_replay(inf, rv, &s->after, KB_HTTP_PAGE, kb_http_collect, s);
    if (e == KB_OK) {
        s->replayed = s->after == 0;
        return kb_http_stream_send(c, s);
    }
    kb_http_stream_free(s);
    const char *name = kb_informer_conf(inf)->name;
    if (e == KB_ERR_GONE)
        return kb_http_status(c, MHD_HTTP_GONE, "Expired",
                              "too old resource version: %s is older than the journal of informer \"%s\"; "
                              "take a snapshot and replay from its resourceVersion",
                              rv_text, name);
    if (e == KB_ERR_UNSUPPORTED)
        return kb_http_status(c, MHD_HTTP_NOT_IMPLEMENTED, "NotImplemented",
                              "replay needs state_dir (the journal lives there); this kbridge keeps no state");
    return kb_http_status(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "InternalError", "reading the journal of \"%s\": %s",
                          name, kb_err_str(e));
}

/* ---- status endpoints ---------------------------------------------------- */

/* Alive unless a sink can never deliver again in this process (sink.h,
 * broken): only a restart helps then, which is what a failed liveness probe
 * gets. Everything that may still recover by itself is /readyz's. */
static enum MHD_Result kb_http_healthz(kb_http_t *h, struct MHD_Connection *c, kb_informer_t *inf) {
    KB_UNUSED(inf);
    kb_buf_t body = KB_BUF_INIT;
    const kb_config_t *cfg = kb_bridge_config(h->b);
    for (size_t i = 0; i < cfg->n_sinks; i++) {
        kb_sink_t *sink = kb_bridge_sink(h->b, i);
        kb_sink_stats_t st = {0};
        if (!sink)
            continue;
        sink->ops->stats(sink->state, &st);
        if (st.broken)
            kb_buf_appendf(&body, "sink %s: its producer failed for good (fenced by a newer instance, or another "
                           "fatal error: see the log); a restart brings it back\n", cfg->sinks[i].name);
    }
    if (body.len)
        return kb_http_send(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", &body);
    kb_buf_fini(&body);
    return kb_http_text(c, MHD_HTTP_OK, "ok\n");
}

static enum MHD_Result kb_http_readyz(kb_http_t *h, struct MHD_Connection *c, kb_informer_t *inf) {
    KB_UNUSED(inf);
    kb_buf_t body = KB_BUF_INIT;
    for (size_t i = 0; i < kb_bridge_informer_count(h->b); i++) {
        kb_informer_t *x = kb_bridge_informer(h->b, i);
        kb_informer_stats_t st;
        kb_informer_stats(x, &st);
        if (st.paused)
            kb_buf_appendf(&body, "informer %s: reading paused: %llu change(s) not acknowledged by every sink "
                           "(the oldest at seq %llu; see the sinks below)\n", kb_informer_conf(x)->name,
                           (unsigned long long)st.window, (unsigned long long)st.ack_seq + 1);
        if (kb_informer_synced(x))
            continue;
        kb_buf_appendf(&body, "informer %s: not synced (first list not finished)%s%s\n", kb_informer_conf(x)->name,
                       st.last_error[0] ? "; last error: " : "", st.last_error);
    }
    const kb_config_t *cfg = kb_bridge_config(h->b);
    for (size_t i = 0; i < cfg->n_sinks; i++) {
        kb_sink_t *sink = kb_bridge_sink(h->b, i);
        kb_sink_stats_t st = {0};
        if (!sink)
            continue; /* not created: no route uses it */
        sink->ops->stats(sink->state, &st);
        if (!st.connected)
            kb_buf_appendf(&body, "sink %s: not connected to its destination%s%s\n", cfg->sinks[i].name,
                           st.why ? ": " : "", st.why ? st.why : "");
        kb_sink_refusals_t rf;
        if (kb_bridge_sink_refusals(h->b, i, &rf))
            kb_buf_appendf(&body, "sink %s: stopped: %s (on_refused = \"stop\"; fix the cause, then SIGHUP)\n",
                           cfg->sinks[i].name, rf.why);
    }
    if (body.len)
        return kb_http_send(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", &body);
    kb_buf_fini(&body);
    return kb_http_text(c, MHD_HTTP_OK, "ok\n");
}

/* What the HTTP server itself counts. */
static void kb_http_own_metrics(kb_http_t *h, kb_buf_t *o) {
    pthread_mutex_lock(&h->conns_mtx);
    int conns = h->n_conns;
    pthread_mutex_unlock(&h->conns_mtx);
    kb_buf_appendf(o,
                   "# HELP kbridge_http_connections Open connections to the HTTP API.\n"
                   "# TYPE kbridge_http_connections gauge\nkbridge_http_connections %d\n"
                   "# HELP kbridge_http_streams Snapshot, replay and Kubernetes API list bodies and watch initial "
                   "events being sent.\n"
                   "# TYPE kbridge_http_streams gauge\nkbridge_http_streams %d\n"
                   "# HELP kbridge_http_refused_total Requests and connections refused by a limit: streams "
                   "(http.max_streams, answered 429), connections (http.max_per_address or all slots taken, "
                   "closed unanswered), header_timeout (no whole request, headers and body, within http.header_timeout; closed).\n"
                   "# TYPE kbridge_http_refused_total counter\n"
                   "kbridge_http_refused_total{reason=\"streams\"} %llu\n"
                   "kbridge_http_refused_total{reason=\"connections\"} %llu\n"
                   "kbridge_http_refused_total{reason=\"header_timeout\"} %llu\n",
                   conns, atomic_load(&h->slots.in_use), (unsigned long long)atomic_load(&h->slots.refused),
                   (unsigned long long)atomic_load(&h->refused_connections),
                   (unsigned long long)atomic_load(&h->header_timeouts));
}

static enum MHD_Result kb_http_metrics(kb_http_t *h, struct MHD_Connection *c, kb_informer_t *inf) {
    KB_UNUSED(inf);
    kb_buf_t body = KB_BUF_INIT;
    kb_http__metrics(h->b, h->start_real_ns, &body);
    if (h->kapi)
        kb_kapi_metrics(h->kapi, &body);
    kb_http_own_metrics(h, &body);
    return kb_http_send(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", &body);
}

static void kb_http_json_field(kb_buf_t *o, const char *name, const char *v) {
    kb_buf_appendf(o, ",\"%s\":", name);
    kb_buf_append_json_str(o, v, strlen(v));
}

/* The last drift audit of an informer (informer/audit.h): ,"audit":{…}; nothing before the first. */
static void kb_http_audit_json(kb_buf_t *o, const kb_informer_stats_t *st) {
    if (!st->audit_runs)
        return;
    kb_buf_appendf(o, ",\"audit\":{\"runs\":%llu,\"lastTime\":%.3f,\"relisted\":%s,\"drift\":{",
                   (unsigned long long)st->audit_runs, (double)st->audit_last_ns / 1e9,
                   st->audit_last_relisted ? "true" : "false");
    for (int k = 0; k < KB_AUDIT_KINDS; k++)
        kb_buf_appendf(o, "%s\"%s\":%llu", k ? "," : "", kb_audit_kind_name((kb_audit_kind_t)k),
                       (unsigned long long)st->audit_last_drift[k]);
    kb_buf_append_str(o, "}}");
}

/* ,"index":{…}: the indexed label keys, and what queries read through the indexes. */
static void kb_http_index_json(kb_buf_t *o, kb_indexer_t *idx) {
    const char *const *keys;
    size_t n = kb_indexer_label_keys(idx, &keys);
    kb_indexer_stats_t st;
    kb_indexer_stats(idx, &st);
    kb_buf_append_str(o, ",\"index\":{\"labels\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            kb_buf_append_char(o, ',');
        kb_buf_append_json_str(o, keys[i], strlen(keys[i]));
    }
    kb_buf_appendf(o,
                   "],\"labelSets\":%zu,\"queries\":%llu,\"byLabel\":%llu,\"byNamespace\":%llu,"
                   "\"read\":%llu,\"lastRead\":%llu}",
                   st.label_sets, (unsigned long long)st.queries, (unsigned long long)st.by_label,
                   (unsigned long long)st.by_ns, (unsigned long long)st.candidates,
                   (unsigned long long)st.last_candidates);
}

/* ,"ha":{…}: who leads this shard (ha.enabled), from the Lease as last read or written. */
static void kb_http_ha_json(kb_bridge_t *b, kb_buf_t *o) {
    kb_ha_t *ha = kb_bridge_ha(b);
    if (!ha) {
        kb_buf_append_str(o, ",\"ha\":{\"enabled\":false}");
        return;
    }
    kb_ha_status_t st;
    kb_ha_status(ha, &st);
    kb_buf_appendf(o, ",\"ha\":{\"enabled\":true,\"shard\":%d,\"leader\":%s,\"transitions\":%llu,\"marks_refused\":%llu,"
                   "\"blind_takeovers\":%llu", kb_ha_shard(ha), st.leader ? "true" : "false",
                   (unsigned long long)st.transitions, (unsigned long long)st.marks_refused,
                   (unsigned long long)st.blind_takeovers);
    kb_http_json_field(o, "identity", st.identity);
    kb_http_json_field(o, "holder", st.holder);
    kb_http_json_field(o, "lease", st.lease);
    kb_buf_append_char(o, '}');
}

/* The cache's memory and compression (docs/informer.md, Compressed cache). */
static void kb_http_cache_json(kb_buf_t *o, const kb_informer_stats_t *st) {
    double ratio = st->cache_bytes ? (double)st->cache_raw_bytes / (double)st->cache_bytes : 1.0;
    kb_buf_appendf(o,
                   ",\"cache\":{\"compression\":%s,\"objects\":%zu,\"compressed\":%zu,\"bytes\":%zu,"
                   "\"rawBytes\":%zu,\"ratio\":%.2f,\"dictBytes\":%zu,\"dicts\":%zu,\"dictTrainings\":%llu}",
                   st->cache_compression ? "true" : "false", st->objects, st->cache_packed, st->cache_bytes,
                   st->cache_raw_bytes, ratio, st->cache_dict_bytes, st->cache_dicts,
                   (unsigned long long)st->cache_dict_trainings);
}

static enum MHD_Result kb_http_informers(kb_http_t *h, struct MHD_Connection *c, kb_informer_t *unused) {
    KB_UNUSED(unused);
    kb_buf_t o = KB_BUF_INIT;
    kb_buf_append_str(&o, "{\"informers\":[");
    for (size_t i = 0; i < kb_bridge_informer_count(h->b); i++) {
        kb_informer_t *inf = kb_bridge_informer(h->b, i);
        kb_resource_t *res = kb_informer_resource(inf);
        kb_informer_stats_t st;
        kb_pipeline_stats_t ps;
        kb_informer_stats(inf, &st);
        kb_bridge_pipeline_stats(h->b, i, &ps);
        kb_buf_append_str(&o, i ? ",{\"name\":" : "{\"name\":");
        kb_buf_append_json_str(&o, kb_informer_conf(inf)->name, strlen(kb_informer_conf(inf)->name));
        kb_http_json_field(&o, "group", res->group);
        kb_http_json_field(&o, "version", res->version);
        kb_http_json_field(&o, "resource", res->resource);
        kb_http_json_field(&o, "kind", kb_resource_kind(res));
        kb_buf_appendf(&o, ",\"synced\":%s,\"objects\":%zu,\"cacheBytes\":%zu", st.synced ? "true" : "false",
                       st.objects, st.cache_bytes);
        kb_http_json_field(&o, "resourceVersion", st.last_rv);
        kb_http_cache_json(&o, &st);
        kb_buf_appendf(&o,
                       ",\"pendingDeltas\":%zu,\"pendingBytes\":%zu,\"inflight\":%lld,\"lists\":%llu,"
                       "\"relists\":%llu,\"watchEvents\":%llu,\"seq\":%llu",
                       st.pending_deltas, st.pending_bytes, (long long)ps.inflight, (unsigned long long)st.lists,
                       (unsigned long long)st.relists, (unsigned long long)st.watch_events,
                       (unsigned long long)st.seq);
        kb_buf_appendf(&o, ",\"checkpoint\":{\"persistent\":%s,\"seq\":%llu", st.persistent ? "true" : "false",
                       (unsigned long long)st.ack_seq);
        kb_http_json_field(&o, "resourceVersion", st.checkpoint_rv);
        kb_buf_append_char(&o, '}');
        size_t n_sinks;
        kb_ledger_sink_t *sinks = kb_ledger_sinks(kb_informer_ledger(inf), &n_sinks);
        kb_buf_append_str(&o, ",\"sinks\":[");
        for (size_t k = 0; k < n_sinks; k++) {
            kb_buf_append_str(&o, k ? ",{\"name\":" : "{\"name\":");
            kb_buf_append_json_str(&o, sinks[k].name, strlen(sinks[k].name));
            kb_buf_appendf(&o, ",\"watermark\":%llu}", (unsigned long long)sinks[k].watermark);
        }
        free(sinks);
        kb_buf_append_char(&o, ']');
        kb_http_json_field(&o, "lastError", st.last_error);
        kb_http_json_field(&o, "sharding", st.sharding);
        kb_http_json_field(&o, "shardBy", st.shard_basis);
        kb_buf_appendf(&o, ",\"shardForeign\":%llu", (unsigned long long)st.shard_foreign);
        kb_http_audit_json(&o, &st);
        kb_http_index_json(&o, kb_informer_indexer(inf));
        kb_buf_append_char(&o, '}');
    }
    kb_buf_append_char(&o, ']');
    kb_http_ha_json(h->b, &o);
    kb_buf_append_str(&o, "}\n");
    return kb_http_send(c, MHD_HTTP_OK, "application/json", &o);
}

/* ---- dispatch ------------------------------------------------------------ */

typedef struct kb_http_endpoint {
    const char *method;
    const char *path;   /* exact, or the prefix before {informer} */
    bool named;         /* path + informer name */
    bool open;          /* no token needed: probes cannot send one */
    bool metrics;       /* http.metrics_token_file's token reads it too */
    enum MHD_Result (*fn)(kb_http_t *h, struct MHD_Connection *c, kb_informer_t *inf);
} kb_http_endpoint_t;

static const kb_http_endpoint_t kb_http_endpoints[] = {
    {"GET", "/healthz", false, true, true, kb_http_healthz},
    {"GET", "/readyz", false, true, true, kb_http_readyz},
    {"GET", "/metrics", false, false, true, kb_http_metrics},
    {"GET", "/v1/informers", false, false, false, kb_http_informers},
    {"GET", "/v1/snapshot/", true, false, false, kb_http_get_snapshot},
    {"POST", "/v1/snapshot/", true, false, false, kb_http_post_snapshot},
    {"GET", "/v1/replay/", true, false, false, kb_http_get_replay},
};

static bool kb_http_path_is(const kb_http_endpoint_t *ep, const char *url) {
    if (!ep->named)
        return !strcmp(url, ep->path);
    size_t n = strlen(ep->path);
    return !strncmp(url, ep->path, n);
}

static enum MHD_Result kb_http_dispatch(kb_http_t *h, struct MHD_Connection *c, kb_http_req_t *req, const char *url,
                                        const char *method) {
    if (h->kapi && kb_kapi_owns(url))
        return kb_http_authorized(h, c, false) ? kb_kapi_handle(h->kapi, c, req, url, method)
                                        : kb_http_status(c, MHD_HTTP_UNAUTHORIZED, "Unauthorized",
                                                         "a valid bearer token is required");
    const kb_http_endpoint_t *ep = NULL;
    bool path_known = false;
    for (size_t i = 0; i < KB_ARRAY_LEN(kb_http_endpoints) && !ep; i++) {
        if (!kb_http_path_is(&kb_http_endpoints[i], url))
            continue;
        path_known = true;
        if (!strcmp(method, kb_http_endpoints[i].method))
            ep = &kb_http_endpoints[i];
    }
    if (!ep && path_known)
        return kb_http_status(c, MHD_HTTP_METHOD_NOT_ALLOWED, "MethodNotAllowed", "%.16s is not allowed on %.300s",
                              method, url);
    if (!ep && !kb_http_authorized(h, c, false))
        return kb_http_status(c, MHD_HTTP_UNAUTHORIZED, "Unauthorized", "a valid bearer token is required");
    if (!ep)
        return kb_http_status(c, MHD_HTTP_NOT_FOUND, "NotFound", "no endpoint %.300s (see docs/http.md)", url);
    if (!ep->open && !kb_http_authorized(h, c, ep->metrics))
        return kb_http_status(c, MHD_HTTP_UNAUTHORIZED, "Unauthorized", "a valid bearer token is required");
    kb_informer_t *inf = NULL;
    if (ep->named) {
        const char *name = url + strlen(ep->path);
        if (!*name || strchr(name, '/'))
            return kb_http_status(c, MHD_HTTP_NOT_FOUND, "NotFound", "%.300s: expected %s{informer}", url, ep->path);
        inf = kb_bridge_find_informer(h->b, name);
        if (!inf)
            return kb_http_status(c, MHD_HTTP_NOT_FOUND, "NotFound", "informer \"%.200s\" not found", name);
    }
    return ep->fn(h, c, inf);
}

static enum MHD_Result kb_http_handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                      const char *version, const char *upload_data, size_t *upload_data_size,
                                      void **con_cls) {
    KB_UNUSED(version);
    KB_UNUSED(upload_data);
    kb_http_t *h = cls;
    if (!*con_cls) {
        /* First call: headers only. Answer once the body (ignored) is read;
         * until then the request deadline runs (a body trickled a byte at a
         * time holds a connection as long as trickled headers would). */
        kb_http_req_t *req = kb_calloc(1, sizeof(*req));
        kb_http_park_init(&req->park, h, c);
        *con_cls = req;
        kb_thread_set_name("kb:http");
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    kb_http_conn_mark(h, c, true);
    /* The bridge's read lock for the whole answer: a reload swaps informers
     * and sinks under its write lock. Streams keep only their informer, which
     * stays allocated until the bridge is destroyed, and never take it. A
     * request that waits (req->parked) lets it go meanwhile and is handled
     * again from the start when resumed. */
    kb_http_req_t *req = *con_cls;
    req->parked = false;
    kb_bridge_rdlock(h->b);
    enum MHD_Result ret = kb_http_dispatch(h, c, req, url, method);
    kb_bridge_unlock(h->b);
    return ret;
}

static void kb_http_log(void *cls, const char *fmt, va_list ap) {
    KB_UNUSED(cls);
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = '\0';
    KB_WARN("http", "libmicrohttpd: %s", line);
}

/* ---- start / stop -------------------------------------------------------- */

static kb_err_t kb_http_resolve(const char *listen, struct sockaddr_storage *ss, socklen_t *len, char *errstr,
                                size_t errstr_size) {
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || !colon[1]) {
        snprintf(errstr, errstr_size, "http.listen: \"%s\": expected host:port", listen);
        return KB_ERR_CONFIG;
    }
    char host[256];
    size_t hn = (size_t)(colon - listen);
    if (listen[0] == '[' && hn >= 2 && listen[hn - 1] == ']') {
        listen++;
        hn -= 2;
    }
    if (hn >= sizeof(host)) {
        snprintf(errstr, errstr_size, "http.listen: host too long");
        return KB_ERR_CONFIG;
    }
    memcpy(host, listen, hn);
    host[hn] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc != 0 || !ai) {
        snprintf(errstr, errstr_size, "http.listen: \"%s\": %s", listen, gai_strerror(rc));
        return KB_ERR_CONFIG;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return KB_OK;
}

/* Seconds after which libmicrohttpd closes an idle connection. A test of a
 * quiet watch outliving it sets KB_TEST_HTTP_IDLE_TIMEOUT_S rather than
 * wait out the minute. */
static unsigned kb_http_idle_timeout_s(void) {
    const char *env = getenv("KB_TEST_HTTP_IDLE_TIMEOUT_S");
    long v = env && *env ? strtol(env, NULL, 10) : 0;
    return v > 0 && v < 3600 ? (unsigned)v : KB_HTTP_IDLE_TIMEOUT_S;
}

static void kb_http_free(kb_http_t *h) {
    kb_httpcred_destroy(h->cred);
    for (int l = 0; l < 2; l++) { /* libmicrohttpd reports every close; this only guards against one it did not */
        kb_http_conn_t **head = l ? &h->busy : &h->waiting;
        while (*head) {
            kb_http_conn_t *x = *head;
            *head = x->next;
            if (x->fd >= 0)
                close(x->fd);
            free(x);
        }
    }
    free(h->heap);
    if (h->listen_fd >= 0)
        close(h->listen_fd);
    if (h->wake_fd >= 0)
        close(h->wake_fd);
    pthread_cond_destroy(&h->park_cond);
    pthread_cond_destroy(&h->started_cond);
    pthread_mutex_destroy(&h->park_mtx);
    pthread_mutex_destroy(&h->conns_mtx);
    free(h);
}

static kb_http_t *kb_http_new(kb_bridge_t *b, const kb_config_t *cfg) {
    kb_http_t *h = kb_calloc(1, sizeof(*h));
    h->b = b;
    h->start_real_ns = kb_now_real_ns();
    atomic_init(&h->stopping, false);
    atomic_init(&h->slots.in_use, 0);
    atomic_init(&h->slots.refused, 0);
    h->slots.max = cfg->http_max_streams;
    h->max_per_address = cfg->http_max_per_address;
    h->header_timeout_ms = (int64_t)cfg->http_header_timeout * 1000;
    pthread_mutex_init(&h->conns_mtx, NULL);
    pthread_mutex_init(&h->park_mtx, NULL);
    kb_cond_init_mono(&h->park_cond);
    kb_cond_init_mono(&h->started_cond);
    h->listen_fd = h->wake_fd = -1;
    return h;
}

/* Our own listening socket (non-blocking), or -1 with why in why (naming
 * the port asked for). */
static int kb_http_listen(const struct sockaddr_storage *ss, socklen_t len, char *why, size_t why_size) {
    unsigned port = ntohs(ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
                                                    : ((const struct sockaddr_in *)ss)->sin_port);
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int));
        if (ss->ss_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &(int){1}, sizeof(int));
        if (bind(fd, (const struct sockaddr *)ss, len) == 0 && listen(fd, SOMAXCONN) == 0)
            return fd;
    }
    snprintf(why, why_size, "Failed to bind to port %u: %s", port, strerror(errno));
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Give c to libmicrohttpd and wait (at most KB_HTTP_HANDOVER_MS) until its
 * thread has registered it: the accept policy runs here, in this thread,
 * and must count the connection before it judges the next one (a burst
 * would otherwise pass http.max_per_address and the connection limit), as
 * must libmicrohttpd's per-thread share of the limit. */
static void kb_http_hand_over(kb_http_t *h, int c, struct sockaddr_storage *addr, socklen_t alen) {
    pthread_mutex_lock(&h->conns_mtx);
    uint64_t before = h->started;
    pthread_mutex_unlock(&h->conns_mtx);
    if (MHD_add_connection(h->mhd, c, (struct sockaddr *)addr, alen) != MHD_YES)
        return; /* refused (by kb_http_accept, or at the limit): libmicrohttpd closed it */
    struct timespec dl = kb_deadline_mono(KB_HTTP_HANDOVER_MS);
    pthread_mutex_lock(&h->conns_mtx);
    while (h->started == before && pthread_cond_timedwait(&h->started_cond, &h->conns_mtx, &dl) == 0)
        ;
    pthread_mutex_unlock(&h->conns_mtx);
}

/* Accept every connection and hand it to libmicrohttpd, which puts it on
 * the thread its descriptor number picks (MHD_add_connection), the accept
 * policy (kb_http_accept) applied as for its own. Why not its own listening
 * socket: every one of its threads polls that socket and whichever wakes
 * first takes what is pending, so one thread ended up with most of 5,000
 * watches — and resuming a parked connection walks every suspended
 * connection of its thread. Out of descriptors, it waits 100 ms rather
 * than spin on a socket that stays readable. */
static void *kb_http_acceptor(void *arg) {
    kb_http_t *h = arg;
    kb_thread_set_name("kb:http-accept");
    struct pollfd p[2] = {{.fd = h->listen_fd, .events = POLLIN}, {.fd = h->wake_fd, .events = POLLIN}};
    for (;;) {
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        for (;;) {
            struct sockaddr_storage addr;
            socklen_t alen = sizeof(addr);
            int c = accept4(h->listen_fd, (struct sockaddr *)&addr, &alen, SOCK_CLOEXEC);
            if (c < 0) {
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
                break;
            }
            kb_http_hand_over(h, c, &addr, alen);
        }
    }
    return NULL;
}

static unsigned kb_http_threads(int max_conns) {
    int n = max_conns / KB_HTTP_CONNS_PER_THREAD;
    if (n < KB_HTTP_THREADS_MIN)
        n = KB_HTTP_THREADS_MIN;
    return (unsigned)(n > KB_HTTP_THREADS_MAX ? KB_HTTP_THREADS_MAX : n);
}

static struct MHD_Daemon *kb_http_daemon(kb_http_t *h, const struct sockaddr_storage *ss) {
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_NO_LISTEN_SOCKET |
                     MHD_USE_ERROR_LOG;
    if (ss->ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    bool tls_on = kb_httpcred_has_tls(h->cred);
    if (tls_on)
        flags |= MHD_USE_TLS;
    /* The certificate comes from a callback, per handshake, so a rotated one
     * reaches new connections without restarting the server. */
    struct MHD_OptionItem tls[] = {
        {MHD_OPTION_HTTPS_CERT_CALLBACK2, 0, (void *)(uintptr_t)kb_httpcred_retrieve},
        {MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)KB_HTTP_TLS_PRIORITIES},
        {MHD_OPTION_END, 0, NULL},
    };
    return MHD_start_daemon(flags, 0, kb_http_accept, h, kb_http_handle, h, MHD_OPTION_EXTERNAL_LOGGER,
                            kb_http_log, NULL, MHD_OPTION_THREAD_POOL_SIZE,
                            kb_http_threads(h->max_conns), MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(h->max_conns + KB_HTTP_RESERVED), MHD_OPTION_CONNECTION_TIMEOUT,
                            kb_http_idle_timeout_s(), MHD_OPTION_NOTIFY_CONNECTION, kb_http_conn_notify, h,
                            MHD_OPTION_NOTIFY_COMPLETED, kb_http_completed, h, MHD_OPTION_ARRAY,
                            tls_on ? tls : tls + 2, MHD_OPTION_END);
}

kb_err_t kb_http_start(kb_bridge_t *b, kb_http_t **out, char *errstr, size_t errstr_size) {
    const kb_config_t *cfg = kb_bridge_config(b);
    *out = NULL;
    if (!cfg->http_listen || !*cfg->http_listen)
        return KB_OK;
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    kb_err_t err = kb_http_resolve(cfg->http_listen, &ss, &sslen, errstr, errstr_size);
    if (err != KB_OK)
        return err;
    kb_http_t *h = kb_http_new(b, cfg);
    if (cfg->http_tls_cert_file && *cfg->http_tls_cert_file && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(errstr, errstr_size, "http.tls_cert_file: this libmicrohttpd was built without TLS");
        err = KB_ERR_CONFIG;
        goto fail;
    }
    err = kb_httpcred_new(cfg, &h->cred, errstr, errstr_size);
    if (err != KB_OK)
        goto fail;
    h->kapi = kb_kapi_new(b, h, &h->stopping, &h->slots);
    h->max_conns = KB_HTTP_MAX_CONNECTIONS + kb_kapi_max_watches(h->kapi);
    char why[256];
    h->listen_fd = kb_http_listen(&ss, sslen, why, sizeof(why));
    if (h->listen_fd < 0) {
        snprintf(errstr, errstr_size, "http.listen: cannot listen on %s (%s)", cfg->http_listen, why);
        err = KB_ERR_IO;
        goto fail;
    }
    h->mhd = kb_http_daemon(h, &ss);
    h->wake_fd = eventfd(0, EFD_CLOEXEC);
    if (!h->mhd || h->wake_fd < 0) {
        snprintf(errstr, errstr_size, "http.listen: cannot serve on %s (libmicrohttpd did not start%s)",
                 cfg->http_listen, kb_httpcred_has_tls(h->cred) ? "; it may have refused TLS" : "");
        err = KB_ERR_IO;
        goto fail;
    }
    h->watchdog_started = pthread_create(&h->watchdog, NULL, kb_http_watchdog, h) == 0;
    kb_httpcred_start(h->cred);
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    if (getsockname(h->listen_fd, (struct sockaddr *)&bound, &blen) == 0)
        h->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
    h->acceptor_started = pthread_create(&h->acceptor, NULL, kb_http_acceptor, h) == 0;
    if (!h->acceptor_started) {
        snprintf(errstr, errstr_size, "http.listen: cannot start the thread that accepts connections");
        kb_http_stop(h);
        return KB_ERR_IO;
    }
    KB_INFO("http", "listening on %.*s:%d (%s, %s)", (int)(strrchr(cfg->http_listen, ':') - cfg->http_listen),
            cfg->http_listen, h->port, kb_httpcred_has_tls(h->cred) ? "https" : "http",
            kb_httpcred_has_token(h->cred) ? "bearer token required" : "no token: every endpoint is open");
    *out = h;
    return KB_OK;
fail:
    if (h->mhd)
        MHD_stop_daemon(h->mhd);
    kb_kapi_destroy(h->kapi);
    kb_http_free(h);
    return err;
}

int kb_http_port(const kb_http_t *http) {
    return http ? http->port : 0;
}

void kb_http_stop(kb_http_t *http) {
    if (!http)
        return;
    /* No new connection first: a client whose stream ends now and comes
     * straight back is refused (and retries), as with a stopped server, not
     * given a watch that ends at once (client-go takes a watch that ends
     * within a second unanswered for a reason to list again). */
    if (http->acceptor_started) {
        eventfd_write(http->wake_fd, 1);
        pthread_join(http->acceptor, NULL);
    }
    close(http->listen_fd);
    http->listen_fd = -1;
    /* Under park_mtx: from here no connection parks, and every parked one
     * is resumed (to end); libmicrohttpd must stop with none suspended. */
    pthread_mutex_lock(&http->park_mtx);
    atomic_store(&http->stopping, true);
    kb_http_fire_due(http, kb_http_now_ms());
    pthread_cond_signal(&http->park_cond);
    pthread_mutex_unlock(&http->park_mtx);
    if (http->watchdog_started)
        pthread_join(http->watchdog, NULL);
    kb_httpcred_stop(http->cred);
    MHD_stop_daemon(http->mhd);
    kb_kapi_destroy(http->kapi);
    kb_http_free(http);
}
