/* bridge/http.h — the HTTP API (docs/http.md): health, readiness, Prometheus
 * metrics, informer status, snapshot (a Kubernetes List from the cache) and
 * replay (the journal as watch events, then live). docs/http.md is the user
 * reference.
 *
 * kb_http_start() binds http.listen exactly ("host:port"; port 0 picks a free
 * port, logged as "http: listening on HOST:PORT") and serves from
 * a few libmicrohttpd threads shared by every connection (a connection that
 * waits holds none), at most KB_HTTP_MAX_CONNECTIONS (plus
 * kube_api.max_watches) at a time (a few more for addresses with none open: probes), over HTTPS
 * when http.tls_cert_file is set. With http.token_file set, every endpoint
 * except /healthz and /readyz needs "Authorization: Bearer <token>"; the
 * token of http.metrics_token_file (if set) reads /metrics only.
 *
 * Threads: start and stop from the main thread, start after kb_bridge_start
 * and stop before kb_bridge_stop (the introspection calls need a running
 * bridge). The bridge must outlive the server.
 */
#ifndef KB_BRIDGE_HTTP_H
#define KB_BRIDGE_HTTP_H

#include "bridge/bridge.h"
#include "common/err.h"

#include <stddef.h>

#define KB_HTTP_MAX_CONNECTIONS 64

typedef struct kb_http kb_http_t;

/* Start serving. *out is NULL (and KB_OK returned) when http.listen is "".
 * KB_ERR_CONFIG / KB_ERR_IO with "http.listen: …" or "http.token_file: …"
 * in errstr when the address cannot be bound or the token cannot be read. */
kb_err_t kb_http_start(kb_bridge_t *b, kb_http_t **out, char *errstr, size_t errstr_size);
/* http.token_file as kb_http_start() and its rotations read it (when
 * http.listen and the key are set): one non-empty line. Checked by --check and
 * by start-up before anything starts. KB_ERR_CONFIG with
 * "FILE:LINE: http.token_file: …" in errstr otherwise. Any thread. */
kb_err_t kb_http_token_check(const kb_config_t *cfg, char *errstr, size_t errstr_size);

/* The port bound (useful with port 0). */
int kb_http_port(const kb_http_t *http);

/* Stop accepting, end open streams (every parked one is resumed to end),
 * join the server's threads and free. NULL is a no-op. */
void kb_http_stop(kb_http_t *http);

#endif
