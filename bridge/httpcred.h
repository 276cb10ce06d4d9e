/* bridge/httpcred.h — the HTTP API's credentials: the bearer token of
 * http.token_file, the metrics-only one of http.metrics_token_file, and the certificate and key of http.tls_cert_file /
 * http.tls_key_file, read at start and read again whenever their files
 * change (docs/http.md, "Rotation"). Private to bridge/http.c.
 *
 * Threads: new/start/stop/destroy from the thread that starts and stops the
 * HTTP server; kb_httpcred_access and kb_httpcred_retrieve from any
 * connection thread. Locks: cred->mtx only, a leaf.
 */
#ifndef KB_BRIDGE_HTTPCRED_H
#define KB_BRIDGE_HTTPCRED_H

#include "common/err.h"
#include "config/config.h"

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>

#include <stdbool.h>
#include <stddef.h>

typedef struct kb_httpcred kb_httpcred_t;

/* What a bearer token may read. The values index nothing outside httpcred.c. */
typedef enum {
    KB_HTTP_ACCESS_NONE = 0,    /* no token, or neither of ours */
    KB_HTTP_ACCESS_ALL = 1,     /* http.token_file's: every endpoint */
    KB_HTTP_ACCESS_METRICS = 2, /* http.metrics_token_file's: /metrics only */
} kb_http_access_t;

/* Read the token and the TLS pair that cfg names (each optional) and check
 * that the key belongs to the certificate. KB_ERR_IO / KB_ERR_CONFIG with
 * "http.token_file: …" or "http.tls_cert_file/http.tls_key_file: …" in
 * errstr. With TLS, this is the process's one HTTPS server: GnuTLS's
 * certificate callback carries no pointer of ours (KB_ERR_EXISTS for a
 * second). */
kb_err_t kb_httpcred_new(const kb_config_t *cfg, kb_httpcred_t **out, char *errstr, size_t errstr_size);
/* Whether http.token_file and http.metrics_token_file (each if set) hold one
 * non-empty line, and not the same; KB_ERR_CONFIG with "FILE:LINE:
 * http.token_file: why" (or metrics_token_file) in errstr if not. Any thread. */
kb_err_t kb_httpcred_check_token(const kb_config_t *cfg, char *errstr, size_t errstr_size);
/* Fixed for the server's life: whether a token is required / TLS served. */
bool kb_httpcred_has_token(const kb_httpcred_t *cred);
bool kb_httpcred_has_tls(const kb_httpcred_t *cred);
/* Which current token v[0..n) is, compared with both in a time that does not
 * tell how much of either matched. NONE when no token is set (ask has_token
 * first). */
kb_http_access_t kb_httpcred_access(kb_httpcred_t *cred, const char *v, size_t n);
/* Start / stop the thread that watches the files (none is started when no
 * file is set). Stop before destroy. */
void kb_httpcred_start(kb_httpcred_t *cred);
void kb_httpcred_stop(kb_httpcred_t *cred);
/* Wipe and free. NULL is a no-op. Only once no handshake can be under way
 * (after MHD_stop_daemon). */
void kb_httpcred_destroy(kb_httpcred_t *cred);
/* libmicrohttpd's MHD_OPTION_HTTPS_CERT_CALLBACK2: a copy of the current
 * certificate chain and key for one handshake, which GnuTLS frees with the
 * session (GNUTLS_CERT_RETR_DEINIT_ALL). */
int kb_httpcred_retrieve(gnutls_session_t session, const struct gnutls_cert_retr_st *info, gnutls_pcert_st **certs,
                         unsigned int *certs_length, gnutls_ocsp_data_st **ocsp, unsigned int *ocsp_length,
                         gnutls_privkey_t *privkey, unsigned int *flags);

#endif
