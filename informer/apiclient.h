/* informer/apiclient.h — HTTP requests to the Kubernetes API server (libcurl).
 *
 * One kb_apiclient_t per cluster holds what every request shares: the server
 * URL, TLS material, credentials, the client-side rate limiter and the
 * User-Agent. Each request runs on the caller's thread with its own curl easy
 * handle, so reflectors never share a connection.
 *
 * Where the server and credentials come from (kb_apiclient_new):
 *   cluster.in_cluster, or KUBERNETES_SERVICE_HOST set with neither server nor
 *   kubeconfig given → the pod's service account ($KB_SA_DIR, default
 *   /var/run/secrets/kubernetes.io/serviceaccount: token + ca.crt);
 *   cluster.server without kubeconfig → the explicit keys;
 *   otherwise a kubeconfig (cluster.kubeconfig, $KUBECONFIG, ~/.kube/config)
 *   and its context (informer/kubeconfig.h). Explicit keys (server, token_file,
 *   ca_file, client_cert, client_key, insecure_skip_tls_verify) override what
 *   the kubeconfig or the mount says.
 *
 * Credentials: a bearer token (static, or a token file re-read when it changes
 * and at once after a 401), basic auth, a client certificate (file or
 * in-memory blob), or an exec plugin whose credential is cached until shortly
 * before it expires and re-fetched after a 401. A request that gets 401 is
 * retried once when fresh credentials differ from those it used. Secrets are
 * never logged and never written to disk.
 *
 * Rate limit: requests other than watches take a token from one bucket per
 * client (cluster.qps, cluster.burst), as client-go does; watches are long
 * and not limited.
 *
 * Thread-safety: requests may run concurrently on any threads. Locks:
 * exec_mtx (single flight of the exec plugin; held while it runs) before
 * cred_mtx (cached credentials) and rate_mtx (bucket); none is held during a
 * transfer.
 */
#ifndef KB_INFORMER_APICLIENT_H
#define KB_INFORMER_APICLIENT_H

#include "common/buf.h"
#include "common/err.h"
#include "config/config.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct kb_apiclient kb_apiclient_t;

kb_apiclient_t *kb_apiclient_new(const kb_config_cluster_t *cluster, char *errstr, size_t errstr_size);
void kb_apiclient_destroy(kb_apiclient_t *api);
const char *kb_apiclient_server(const kb_apiclient_t *api);

/* Streamed body: called with each chunk as it arrives (status already known).
 * Return false to abort the transfer. */
typedef bool (*kb_api_body_fn)(void *opaque, const char *data, size_t len);

typedef struct kb_api_response {
    long status;          /* HTTP status, 0 if no response */
    int retry_after;      /* Retry-After seconds, -1 if absent */
    kb_err_t err;         /* transport result: KB_OK, KB_ERR_CONNECT, KB_ERR_TIMEDOUT, KB_ERR_STOPPED, KB_ERR_IO */
    char errmsg[256];     /* curl's words for a transport error */
    bool aborted;         /* the body callback returned false */
    char content_type[64];/* the response's Content-Type, "" if none (for error texts) */
} kb_api_response_t;

/* GET path_and_query. When body_fn is NULL the body is appended to *body (up
 * to max_body bytes; more → err KB_ERR_TOOBIG). When body_fn is set, bodies of
 * 2xx responses go to it and error bodies still go to *body (for the Status).
 * The transfer is aborted promptly once *stop becomes true (err KB_ERR_STOPPED).
 * timeout_s bounds the whole request (0 = none; watches end by timeoutSeconds). */
void kb_apiclient_get(kb_apiclient_t *api, const char *path_and_query, kb_api_body_fn body_fn, void *opaque,
                      kb_buf_t *body, size_t max_body, long timeout_s, const _Atomic bool *stop,
                      kb_api_response_t *resp);
/* The same with another Accept header (the audit's metadata-only lists); the
 * answer may still be plain JSON: the server decides. */
void kb_apiclient_get_as(kb_apiclient_t *api, const char *accept, const char *path_and_query, kb_api_body_fn body_fn,
                         void *opaque, kb_buf_t *body, size_t max_body, long timeout_s, const _Atomic bool *stop,
                         kb_api_response_t *resp);

/* A request with a JSON body (method "POST", "PUT"; the Lease of bridge/ha.h):
 * the answer's body is appended to *body as kb_apiclient_get does. A 401 is
 * retried once with fresh credentials like a GET (the server did nothing).
 * Thread: any. */
void kb_apiclient_send(kb_apiclient_t *api, const char *method, const char *path, const char *json, size_t len,
                       kb_buf_t *body, size_t max_body, long timeout_s, const _Atomic bool *stop,
                       kb_api_response_t *resp);

/* Request metrics, process-wide (a process talks to one cluster): one row
 * per (verb, resource), verb "list", "get", "watch", "create" or "update" and resource the
 * path's plural ("pods", "deployments.apps" outside the core group, "" for a
 * path that names none). Each row counts attempts by response code (0: no
 * response, a transport error) and, except for watches (their length is the
 * server's timeout), a duration histogram of every attempt.
 * Rows are never removed: the strings and the histogram stay valid for the
 * process lifetime. Counters are relaxed atomics; a new row takes a mutex once.
 * Thread: any. */
#define KB_API_STAT_CODES 12
typedef struct kb_api_request_stats {
    const char *verb, *resource;
    size_t n_codes;
    int code[KB_API_STAT_CODES + 1];           /* last slot: -1, every code past the first 12 */
    uint64_t count[KB_API_STAT_CODES + 1];
    const struct kb_histogram *duration;       /* NULL for watches */
} kb_api_request_stats_t;
/* Copy up to max rows into out; returns how many rows exist (may exceed max). */
size_t kb_apiclient_request_stats(kb_api_request_stats_t *out, size_t max);
/* The verb and resource a request path is counted under (exposed for tests). */
void kb_api_path_classify(const char *path_and_query, const char **verb, char *resource, size_t resource_size);

/* Map an HTTP status to an error class (410 → GONE, 429 → THROTTLED, 5xx → UNAVAILABLE, …), by the one
 * table of informer/kstatus.h. */
kb_err_t kb_api_status_err(long status);

/* "first bytes" of an answer for an error text: up to max bytes of body, control
 * characters and quotes replaced, "…" when cut. Into out (NUL-terminated). */
void kb_api_body_excerpt(const char *body, size_t len, size_t max, char *out, size_t out_size);

/* Append "&name=<url-encoded value>" to q. */
void kb_api_query_add(kb_buf_t *q, const char *name, const char *value);

#endif
