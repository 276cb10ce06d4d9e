/* bridge/kapi.h — the Kubernetes API surface of the HTTP server: kubectl and
 * client-go list and watch the informers' caches from kbridge (a read
 * replica). docs/replica.md is the user reference.
 *
 * Served on http.listen next to the bridge's own endpoints: /version, /api,
 * /api/v1, /apis, /apis/{group}[/{version}] (discovery of exactly the
 * resources some informer watches; verbs get, list, watch), and get, list and
 * watch under /api/v1/… and /apis/{group}/{version}/…. Writes are answered
 * 405 with a Status saying the server is a read-only replica.
 *
 * When two informers watch the same group/version/resource (other namespaces
 * or selectors), the first in the configuration serves it and the others are
 * not visible through this API (a warning says so at start).
 *
 * Ownership: bridge/http.c creates one kb_kapi_t per server (kb_kapi_new,
 * after the bridge started) and destroys it after the last connection ended.
 * Threads: kb_kapi_handle runs on libmicrohttpd's threads under the bridge's
 * read lock (like every handler); a request waiting for a resourceVersion the
 * cache has not reached is parked meanwhile (http_int.h), holding neither a
 * thread nor the lock; the streams it returns run later without that lock and
 * keep only the informer they read, which outlives the server. Locks: the
 * kapi mutex (discovery, histories, cuts, counters) is a leaf except that
 * creating a history takes the informer's ingest lock inside it; a history's
 * own mutex is never held while taking the kapi mutex.
 */
#ifndef KB_BRIDGE_KAPI_H
#define KB_BRIDGE_KAPI_H

#include "bridge/bridge.h"
#include "bridge/http_int.h"
#include "bridge/slots.h"
#include "common/buf.h"

#include <microhttpd.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct kb_kapi kb_kapi_t;

/* NULL when kube_api.enabled is false. stopping becomes true when the server
 * stops (open watches end); it and slots (the server's http.max_streams,
 * taken by every list body and by a watch while it sends initial events)
 * must outlive the kapi. Reads upstream discovery once (bounded), so kinds
 * and scopes are the API server's. */
kb_kapi_t *kb_kapi_new(kb_bridge_t *b, kb_http_t *http, const atomic_bool *stopping, kb_slots_t *slots);
void kb_kapi_destroy(kb_kapi_t *k); /* after every stream ended; NULL is a no-op */

/* Watches at most (the server sizes its connection limit with it). */
int kb_kapi_max_watches(const kb_kapi_t *k);

/* The path belongs to the Kubernetes API (/version, /api…, /apis…). */
bool kb_kapi_owns(const char *url);
/* Answer one request (authentication is the caller's), or park it
 * (req->parked: a read waiting for a resourceVersion; it is handled again
 * from the start when resumed, req keeping its deadline). */
enum MHD_Result kb_kapi_handle(kb_kapi_t *k, struct MHD_Connection *c, kb_http_req_t *req, const char *url,
                               const char *method);

/* The timeout of a watch that asked for none (or 0), in seconds: 30 to 60
 * minutes as the API server picks, spread by resource and start time (now_ms,
 * monotonic) so that watches opened together do not all end together. */
long kb_kapi_default_timeout_s(const char *resource, int64_t now_ms);

/* Append the kbridge_api_* metrics (Prometheus text). Thread: any. */
void kb_kapi_metrics(kb_kapi_t *k, kb_buf_t *out);

#endif
