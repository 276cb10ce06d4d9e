/* informer/kubeconfig.h — where the API server is and who we are to it.
 *
 * kb_kubeconfig_load() reads a kubeconfig file (libyaml) and resolves one
 * context into a kb_kubeconfig_t: the server, TLS material and one way to
 * authenticate (static token, token file, client certificate, basic auth or
 * an exec credential plugin). `path` may be a colon-separated list like
 * $KUBECONFIG: the first file that defines a context, cluster or user wins,
 * and current-context comes from the first file that sets one. Relative file
 * names inside a file are relative to that file's directory.
 *
 * Inline data (certificate-authority-data, client-certificate-data,
 * client-key-data) is base64-decoded into memory and handed to libcurl as
 * blobs; nothing secret is written to disk.
 *
 * kb_kubeconfig_exec_run() runs an exec plugin and parses its ExecCredential.
 *
 * Ownership: the caller owns the returned struct (kb_kubeconfig_free).
 * Thread: any; no shared state.
 */
#ifndef KB_INFORMER_KUBECONFIG_H
#define KB_INFORMER_KUBECONFIG_H

#include "common/err.h"
#include "common/secret.h" /* kb_secret_free */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_blob {
    unsigned char *data; /* owned; NULL when absent */
    size_t len;
} kb_blob_t;

/* Zero, then free (secrets do not linger in freed memory). NULL/empty is a no-op. */
void kb_blob_free(kb_blob_t *b);

typedef struct kb_kubeconfig_exec {
    char *command;       /* NULL = no exec plugin; resolved against the file's directory if relative with '/' */
    char **args; size_t n_args;
    char **env; size_t n_env;   /* "NAME=value" added to our environment */
    char *api_version;   /* client.authentication.k8s.io/v1 or v1beta1 */
} kb_kubeconfig_exec_t;

typedef struct kb_kubeconfig {
    char *path;            /* the file the context came from (for messages) */
    char *context;         /* the context used */
    char *server;          /* https://host:port, no trailing '/' */
    char *tls_server_name; /* "" = host of server */
    bool insecure;         /* insecure-skip-tls-verify */
    char *ca_file;         /* "" or an absolute path */
    kb_blob_t ca_data;
    char *token;           /* "" or a static bearer token */
    char *token_file;      /* "" or an absolute path, re-read when it changes */
    char *client_cert_file, *client_key_file; /* "" or absolute paths */
    kb_blob_t client_cert_data, client_key_data;
    char *username, *password; /* basic auth; "" = none */
    kb_kubeconfig_exec_t exec;
} kb_kubeconfig_t;

/* Load path (a file, or a colon-separated list) and resolve context ("" or
 * NULL = current-context). NULL on error with "FILE[:LINE]: what is wrong" in
 * errstr (a YAML syntax error, a missing context/cluster/user, an unreadable
 * file, bad base64). */
kb_kubeconfig_t *kb_kubeconfig_load(const char *path, const char *context, char *errstr, size_t errstr_size);
void kb_kubeconfig_free(kb_kubeconfig_t *kc); /* NULL is a no-op */

/* What an exec plugin returned. */
typedef struct kb_exec_cred {
    char *token;             /* "" if the plugin gave a client certificate */
    kb_blob_t cert, key;     /* PEM; empty when absent */
    int64_t expires_unix;    /* expirationTimestamp in seconds since the epoch; 0 = never */
} kb_exec_cred_t;

/* Run the plugin and parse its ExecCredential. timeout_s bounds the whole
 * run, output and exit (a plugin that closes stdout and keeps running is
 * killed too); stdout is bounded to 1 MiB, stderr passed through. The plugin
 * runs in its own process group, killed as a whole on the deadline or when
 * *stop turns true (checked every 100 ms; NULL: no stop). Returns KB_OK,
 * KB_ERR_TIMEDOUT, KB_ERR_STOPPED or another error, with the reason in
 * errstr. Thread: any; blocks. */
kb_err_t kb_kubeconfig_exec_run(const kb_kubeconfig_exec_t *exec, int timeout_s, const _Atomic bool *stop,
                                kb_exec_cred_t *cred, char *errstr, size_t errstr_size);
void kb_exec_cred_fini(kb_exec_cred_t *cred);

/* Parse an RFC 3339 timestamp ("2026-11-30T08:00:00Z", offsets and fractions
 * allowed) into seconds since the epoch. False if it does not parse. */
bool kb_kubeconfig_parse_time(const char *s, int64_t *out);

#endif
