/* informer/apiclient.c — libcurl under the reflector (see apiclient.h).
 *
 * Design: a fresh easy handle per request keeps the code obviously
 * thread-safe; reflectors issue a handful of requests per watch period, so
 * connection reuse buys nothing measurable. Watches stream through the write
 * callback, which may block (DeltaFIFO backpressure): curl then stops
 * reading the socket and TCP pushes back on the API server.
 * The progress callback checks the stop flag so shutdown does not wait for a
 * quiet watch to time out.
 *
 * Credentials are resolved once at creation into plain fields; only what
 * changes at run time (the token read from a file, the exec plugin's
 * credential) sits behind cred_mtx, with a generation number bumped on every
 * change. A request remembers the generation it used; after a 401 it asks
 * for a refresh "newer than generation g", so N reflectors failing on the
 * same expired token cause one re-read or one plugin run, not N.
 *
 * Request metrics: every attempt is counted in a static table of rows keyed
 * by (verb, resource), each with a fixed array of (code, count) slots. The
 * hot path takes no lock: rows published so far are scanned under an acquire
 * load of their count, a code slot is claimed with one compare-and-swap, and
 * counters are relaxed atomics. Only the first request of a new (verb,
 * resource) takes kb_api_rows_mtx to append a row. The keys are bounded by
 * the configured informers, so the table never fills in practice; if it
 * does, the last row collects the rest under verb and resource "other".
 */
#include "informer/apiclient.h"
#include "informer/kstatus.h"

#include "common/alloc.h"
#include "common/histogram.h"
#include "common/log.h"
#include "common/secret.h"
#include "common/time.h"
#include "informer/kubeconfig.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KB_SA_DIR_DEFAULT "/var/run/secrets/kubernetes.io/serviceaccount"
#define KB_EXEC_EARLY_S 30 /* refresh an exec credential this long before it expires */

struct kb_apiclient {
    char *server;          /* without a trailing '/' */
    char *source;          /* where server and credentials came from, for logs */
    char *ca_file;         /* "" = system trust store (or ca_data) */
    kb_blob_t ca_data;
    char *client_cert, *client_key;   /* files; "" = none */
    kb_blob_t cert_data, key_data;    /* in-memory PEM from kubeconfig */
    char *userpwd;         /* "user:password" for basic auth; "" = none */
    bool insecure;
    char *static_token;    /* "" = none */
    char *token_file;      /* "" = no token file */
    kb_kubeconfig_exec_t *exec; /* borrowed from kc; NULL = no plugin */
    int exec_timeout_s;         /* cluster.exec_timeout */
    kb_kubeconfig_t *kc;   /* owned; NULL when not from a kubeconfig */

    pthread_mutex_t exec_mtx;    /* single flight of the exec plugin */
    pthread_mutex_t cred_mtx;
    char *token;                 /* from token_file or the plugin; cred_mtx */
    struct timespec token_mtime; /* of token_file when read; cred_mtx */
    kb_exec_cred_t cred;         /* the plugin's last credential; cred_mtx */
    int64_t cred_refresh_ns;     /* CLOCK_MONOTONIC time to run the plugin again; 0 = now; cred_mtx */
    uint64_t cred_gen;           /* bumped when token or cred changes; cred_mtx */

    pthread_mutex_t rate_mtx;
    double qps, burst;           /* <= 0 qps: unlimited */
    double tokens;               /* rate_mtx */
    int64_t tokens_ns;           /* when tokens was computed; rate_mtx */
};

#define KB_API_ROWS 128
typedef struct kb_api_row {
    char verb[8];
    char resource[96];
    _Atomic int code_plus1[KB_API_STAT_CODES]; /* 0: free slot; else HTTP status + 1 (1: transport error) */
    _Atomic uint64_t count[KB_API_STAT_CODES + 1]; /* last: codes past the slots */
    kb_histogram_t duration;                   /* unused for watches */
} kb_api_row_t;

static kb_api_row_t kb_api_rows[KB_API_ROWS];   /* [0, kb_api_n_rows) are published */
static _Atomic size_t kb_api_n_rows;
static pthread_mutex_t kb_api_rows_mtx = PTHREAD_MUTEX_INITIALIZER; /* appends only; leaf */

static pthread_once_t kb_curl_once = PTHREAD_ONCE_INIT;
static void kb_curl_init(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool kb_is_set(const char *s) {
    return s && s[0];
}

static void kb_replace(char **dst, const char *src) {
    free(*dst);
    *dst = kb_strdup(src ? src : "");
}

static void kb_blob_move(kb_blob_t *dst, kb_blob_t *src) {
    *dst = *src;
    src->data = NULL;
    src->len = 0;
}

/* The service-account mount: server from the environment, token and CA from files. */
static bool kb_api_from_in_cluster(kb_apiclient_t *api, char *errstr, size_t errstr_size) {
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    const char *dir = kb_is_set(getenv("KB_SA_DIR")) ? getenv("KB_SA_DIR") : KB_SA_DIR_DEFAULT;
    if (!kb_is_set(host)) {
        snprintf(errstr, errstr_size,
                 "cluster.in_cluster: KUBERNETES_SERVICE_HOST is not set (not running in a pod?)");
        return false;
    }
    kb_buf_t b = KB_BUF_INIT;
    bool v6 = strchr(host, ':') != NULL;
    kb_buf_appendf(&b, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", kb_is_set(port) ? port : "443");
    api->server = kb_buf_steal(&b, NULL);
    kb_buf_appendf(&b, "%s/token", dir);
    api->token_file = kb_buf_steal(&b, NULL);
    kb_buf_appendf(&b, "%s/ca.crt", dir);
    api->ca_file = kb_buf_steal(&b, NULL);
    if (access(api->token_file, R_OK) != 0) {
        snprintf(errstr, errstr_size, "%s: cannot read the service-account token: %s", api->token_file,
                 strerror(errno));
        return false;
    }
    if (access(api->ca_file, R_OK) != 0) {
        snprintf(errstr, errstr_size, "%s: cannot read the service-account CA: %s", api->ca_file, strerror(errno));
        return false;
    }
    kb_buf_appendf(&b, "in-cluster (%s)", dir);
    api->source = kb_buf_steal(&b, NULL);
    return true;
}

static bool kb_api_from_kubeconfig(kb_apiclient_t *api, const kb_config_cluster_t *cluster, char *errstr,
                                   size_t errstr_size) {
    kb_buf_t path = KB_BUF_INIT;
    if (kb_is_set(cluster->kubeconfig))
        kb_buf_append_str(&path, cluster->kubeconfig);
    else if (kb_is_set(getenv("KUBECONFIG")))
        kb_buf_append_str(&path, getenv("KUBECONFIG"));
    else if (kb_is_set(getenv("HOME")))
        kb_buf_appendf(&path, "%s/.kube/config", getenv("HOME"));
    if (!path.len) {
        snprintf(errstr, errstr_size, "cluster: no server, no kubeconfig and no in-cluster service account "
                                      "(set cluster.server or cluster.kubeconfig)");
        return false;
    }
    kb_kubeconfig_t *kc = kb_kubeconfig_load(path.data, cluster->context, errstr, errstr_size);
    kb_buf_fini(&path);
    if (!kc)
        return false;
    api->kc = kc;
    api->server = kb_strdup(kc->server);
    api->ca_file = kb_strdup(kc->ca_file);
    kb_blob_move(&api->ca_data, &kc->ca_data);
    api->insecure = kc->insecure;
    api->static_token = kb_strdup(kc->token);
    api->token_file = kb_strdup(kc->token_file);
    api->client_cert = kb_strdup(kc->client_cert_file);
    api->client_key = kb_strdup(kc->client_key_file);
    kb_blob_move(&api->cert_data, &kc->client_cert_data);
    kb_blob_move(&api->key_data, &kc->client_key_data);
    if (kc->username[0] || kc->password[0]) {
        kb_buf_t up = KB_BUF_INIT;
        kb_buf_appendf(&up, "%s:%s", kc->username, kc->password);
        api->userpwd = kb_buf_steal(&up, NULL);
    }
    api->exec = kc->exec.command ? &kc->exec : NULL;
    if (kc->tls_server_name[0])
        KB_WARN("apiclient", "kubeconfig=%s cluster tls-server-name=%s is not supported and is ignored", kc->path,
                kc->tls_server_name);
    kb_buf_t src = KB_BUF_INIT;
    kb_buf_appendf(&src, "kubeconfig %s context %s", kc->path, kc->context);
    api->source = kb_buf_steal(&src, NULL);
    return true;
}

/* Which credential a request will carry, for the start-up log line. */
static const char *kb_api_auth_kind(const kb_apiclient_t *api) {
    if (api->exec)
        return "exec plugin";
    if (api->token_file[0])
        return "token file";
    if (api->static_token[0])
        return "token";
    if (api->client_cert[0] || api->cert_data.data)
        return "client certificate";
    if (api->userpwd[0])
        return "basic";
    return "none";
}

/* A plain http:// server: what kbridge reads, and any credential it sends,
 * travel in clear text and unauthenticated. Allowed to loopback (with a
 * warning when a credential goes along); beyond it only with
 * cluster.allow_insecure_http, whatever the credential. */
static bool kb_api_check_plain_http(const kb_apiclient_t *api, const kb_config_cluster_t *cluster, char *errstr,
                                    size_t errstr_size) {
    const char *auth = kb_api_auth_kind(api);
    bool sends_secret = strcmp(auth, "none") != 0 && strcmp(auth, "client certificate") != 0;
    if (strncmp(api->server, "http://", 7) != 0)
        return true;
    if (!kb_url_plain_beyond_loopback(api->server)) {
        if (sends_secret)
            KB_WARN("apiclient", "server %s is plain http://: the %s credential travels unencrypted (loopback only)",
                    api->server, auth);
        return true;
    }
    if (cluster->allow_insecure_http) {
        KB_WARN("apiclient", "server %s is plain http:// beyond loopback: what kbridge reads%s%s%s travels "
                "unencrypted and unauthenticated (cluster.allow_insecure_http = true)", api->server,
                sends_secret ? " and the " : "", sends_secret ? auth : "", sends_secret ? " credential" : "");
        return true;
    }
    snprintf(errstr, errstr_size, "server \"%s\" (from %s) is plain http:// beyond loopback: what kbridge reads%s%s%s "
             "would cross the network unencrypted and unauthenticated: use https://, or set "
             "cluster.allow_insecure_http = true", api->server, api->source, sends_secret ? " and the " : "",
             sends_secret ? auth : "", sends_secret ? " credential it sends" : "");
    return false;
}

kb_apiclient_t *kb_apiclient_new(const kb_config_cluster_t *cluster, char *errstr, size_t errstr_size) {
    pthread_once(&kb_curl_once, kb_curl_init);
    kb_apiclient_t *api = kb_calloc(1, sizeof(*api));
    pthread_mutex_init(&api->exec_mtx, NULL);
    pthread_mutex_init(&api->cred_mtx, NULL);
    pthread_mutex_init(&api->rate_mtx, NULL);
    bool has_server = kb_is_set(cluster->server), has_kc = kb_is_set(cluster->kubeconfig);
    bool ok = true;
    if (cluster->in_cluster || (!has_server && !has_kc && kb_is_set(getenv("KUBERNETES_SERVICE_HOST"))))
        ok = kb_api_from_in_cluster(api, errstr, errstr_size);
    else if (has_server && !has_kc)
        api->source = kb_strdup("cluster.server");
    else
        ok = kb_api_from_kubeconfig(api, cluster, errstr, errstr_size);
    if (!ok)
        goto fail;
    /* Explicit keys win over what a kubeconfig or the mount said. */
    if (has_server)
        kb_replace(&api->server, cluster->server);
    if (kb_is_set(cluster->token_file))
        kb_replace(&api->token_file, cluster->token_file);
    if (kb_is_set(cluster->ca_file))
        kb_replace(&api->ca_file, cluster->ca_file);
    if (kb_is_set(cluster->client_cert))
        kb_replace(&api->client_cert, cluster->client_cert);
    if (kb_is_set(cluster->client_key))
        kb_replace(&api->client_key, cluster->client_key);
    if (cluster->insecure_skip_tls_verify)
        api->insecure = true;
    char **unset[] = {&api->ca_file, &api->client_cert, &api->client_key, &api->token_file, &api->static_token,
                      &api->userpwd};
    for (size_t i = 0; i < KB_ARRAY_LEN(unset); i++)
        if (!*unset[i])
            *unset[i] = kb_strdup("");
    /* A token file that cannot be read would mean running unauthenticated: refuse to start. */
    if (api->token_file[0] && access(api->token_file, R_OK) != 0) {
        snprintf(errstr, errstr_size, "token_file \"%s\" (from %s): cannot read it: %s", api->token_file,
                 kb_is_set(cluster->token_file) ? "cluster.token_file" : api->source, strerror(errno));
        goto fail;
    }
    /* Before any message prints the server: a password in it must not show. */
    if (kb_url_has_userinfo(api->server)) {
        snprintf(errstr, errstr_size, "server (from %s) is a URL with user:password@, which is refused (the "
                 "password would be sent as Basic auth and printed wherever the URL is): write it as "
                 "scheme://host:port and put the credential in the kubeconfig's user (token, tokenFile, client "
                 "certificate) or cluster.token_file", api->source);
        goto fail;
    }
    if (strncmp(api->server, "http://", 7) != 0 && strncmp(api->server, "https://", 8) != 0) {
        snprintf(errstr, errstr_size, "server \"%s\" (from %s): must start with http:// or https://", api->server,
                 api->source);
        goto fail;
    }
    size_t n = strlen(api->server);
    while (n > 0 && api->server[n - 1] == '/')
        api->server[--n] = '\0';
    api->exec_timeout_s = cluster->exec_timeout > 0 ? cluster->exec_timeout : 60;
    api->qps = cluster->qps;
    api->burst = cluster->burst > 0 ? cluster->burst : 1;
    api->tokens = api->burst;
    api->tokens_ns = kb_now_mono_ns();
    if (!kb_api_check_plain_http(api, cluster, errstr, errstr_size))
        goto fail;
    bool tls = !strncmp(api->server, "https://", 8);
    KB_INFOF("apiclient", KB_FIELDS(KB_F("server", api->server), KB_F("from", api->source)),
             "server=%s from=%s auth=%s tls_verify=%s qps=%g burst=%g", api->server, api->source,
            kb_api_auth_kind(api), !tls ? "n/a (plain http)" : api->insecure ? "off" : "on", api->qps, api->burst);
    if (api->insecure && !strncmp(api->server, "https://", 8))
        KB_WARN("apiclient", "TLS verification of %s is off (insecure_skip_tls_verify)", api->server);
    return api;
fail:
    kb_apiclient_destroy(api);
    return NULL;
}

void kb_apiclient_destroy(kb_apiclient_t *api) {
    if (!api)
        return;
    free(api->server);
    free(api->source);
    free(api->ca_file);
    kb_blob_free(&api->ca_data);
    free(api->client_cert);
    free(api->client_key);
    kb_blob_free(&api->cert_data);
    kb_blob_free(&api->key_data);
    kb_secret_free(api->userpwd);
    kb_secret_free(api->static_token);
    free(api->token_file);
    kb_secret_free(api->token);
    kb_exec_cred_fini(&api->cred);
    kb_kubeconfig_free(api->kc);
    pthread_mutex_destroy(&api->exec_mtx);
    pthread_mutex_destroy(&api->cred_mtx);
    pthread_mutex_destroy(&api->rate_mtx);
    free(api);
}

const char *kb_apiclient_server(const kb_apiclient_t *api) {
    return api->server;
}

/* Re-read token_file if it changed (or always when force). Caller holds cred_mtx. */
static void kb_api_read_token_file(kb_apiclient_t *api, bool force) {
    struct stat st;
    if (stat(api->token_file, &st) != 0) {
        KB_WARN("apiclient", "cannot stat token_file=%s: %s", api->token_file, strerror(errno));
        return;
    }
    if (!force && api->token && st.st_mtim.tv_sec == api->token_mtime.tv_sec &&
        st.st_mtim.tv_nsec == api->token_mtime.tv_nsec)
        return;
    FILE *f = fopen(api->token_file, "r");
    if (!f) {
        KB_WARN("apiclient", "cannot read token_file=%s: %s", api->token_file, strerror(errno));
        return;
    }
    char buf[16384];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    if (!api->token || strlen(api->token) != n || memcmp(api->token, buf, n) != 0) {
        kb_secret_free(api->token);
        api->token = kb_strndup(buf, n);
        api->cred_gen++;
        if (force)
            KB_INFO("apiclient", "token_file=%s re-read after 401: the token changed", api->token_file);
    }
    memset(buf, 0, sizeof(buf));
    api->token_mtime = st.st_mtim;
}

/* Whether the cached plugin credential is usable: newer than generation
 * used_gen after a 401, or (used_gen 0) not yet near its expiry. Locks: cred_mtx. */
static bool kb_api_exec_fresh(kb_apiclient_t *api, uint64_t used_gen) {
    pthread_mutex_lock(&api->cred_mtx);
    bool have = api->cred.token || api->cred.cert.data;
    bool fresh = have && (used_gen ? api->cred_gen != used_gen
                                   : api->cred_refresh_ns == 0 || kb_now_mono_ns() < api->cred_refresh_ns);
    pthread_mutex_unlock(&api->cred_mtx);
    return fresh;
}

/* Run the exec plugin unless the cached credential is fresh (see above).
 * Single flight: exec_mtx is held while the plugin runs, so concurrent
 * callers wait for its result instead of running it again; cred_mtx is taken
 * only to look and to swap. */
static kb_err_t kb_api_exec_refresh(kb_apiclient_t *api, uint64_t used_gen, const _Atomic bool *stop, char *errmsg,
                                    size_t errmsg_size) {
    if (kb_api_exec_fresh(api, used_gen))
        return KB_OK;
    kb_err_t err = KB_OK;
    pthread_mutex_lock(&api->exec_mtx);
    bool fresh = kb_api_exec_fresh(api, used_gen);
    if (!fresh) {
        kb_exec_cred_t cred;
        err = kb_kubeconfig_exec_run(api->exec, api->exec_timeout_s, stop, &cred, errmsg, errmsg_size);
        if (err == KB_OK) {
            int64_t refresh = 0;
            if (cred.expires_unix) {
                int64_t left = cred.expires_unix - kb_now_real_ns() / 1000000000 - KB_EXEC_EARLY_S;
                refresh = kb_now_mono_ns() + (left > 1 ? left : 1) * 1000000000;
            }
            pthread_mutex_lock(&api->cred_mtx);
            kb_exec_cred_fini(&api->cred);
            api->cred = cred;
            api->cred_refresh_ns = refresh;
            api->cred_gen++;
            pthread_mutex_unlock(&api->cred_mtx);
            KB_INFO("apiclient", "exec plugin %s gave a %s%s", api->exec->command,
                    cred.token && cred.token[0] ? "token" : "client certificate",
                    cred.expires_unix ? " with an expiry" : "");
        } else {
            KB_WARN("apiclient", "%s", errmsg);
        }
    }
    pthread_mutex_unlock(&api->exec_mtx);
    return err;
}

/* After a 401 with credentials of generation used_gen: true if newer ones are
 * now cached (the request is worth repeating once). */
static bool kb_api_refresh_after_401(kb_apiclient_t *api, uint64_t used_gen, const _Atomic bool *stop) {
    if (api->exec) {
        char why[256];
        if (kb_api_exec_refresh(api, used_gen, stop, why, sizeof(why)) != KB_OK)
            return false;
    } else if (api->token_file[0]) {
        pthread_mutex_lock(&api->cred_mtx);
        if (api->cred_gen == used_gen)
            kb_api_read_token_file(api, true);
        pthread_mutex_unlock(&api->cred_mtx);
    }
    pthread_mutex_lock(&api->cred_mtx);
    bool changed = api->cred_gen != used_gen;
    pthread_mutex_unlock(&api->cred_mtx);
    return changed;
}

/* Set the credentials on curl: Authorization header into hdr, client
 * certificate blobs, basic auth. Returns the generation used. */
static kb_err_t kb_api_set_auth(kb_apiclient_t *api, CURL *curl, kb_buf_t *hdr, uint64_t *gen,
                                const _Atomic bool *stop, char *errmsg, size_t errmsg_size) {
    if (api->exec) {
        kb_err_t err = kb_api_exec_refresh(api, 0, stop, errmsg, errmsg_size);
        if (err != KB_OK)
            return err;
    }
    pthread_mutex_lock(&api->cred_mtx);
    if (api->token_file[0] && !api->exec)
        kb_api_read_token_file(api, false);
    const char *token = api->exec ? api->cred.token : api->token_file[0] ? api->token : api->static_token;
    if (token && token[0]) {
        kb_buf_append_str(hdr, "Authorization: Bearer ");
        kb_buf_append_str(hdr, token);
    }
    if (api->exec && api->cred.cert.data) {
        /* CURL_BLOB_COPY: curl keeps its own copy, so the lock can go. */
        struct curl_blob cert = {api->cred.cert.data, api->cred.cert.len, CURL_BLOB_COPY};
        struct curl_blob key = {api->cred.key.data, api->cred.key.len, CURL_BLOB_COPY};
        curl_easy_setopt(curl, CURLOPT_SSLCERT_BLOB, &cert);
        curl_easy_setopt(curl, CURLOPT_SSLKEY_BLOB, &key);
    }
    *gen = api->cred_gen;
    pthread_mutex_unlock(&api->cred_mtx);
    if (api->userpwd[0] && !hdr->len) {
        curl_easy_setopt(curl, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(curl, CURLOPT_USERPWD, api->userpwd);
    }
    return KB_OK;
}

/* Client-side rate limit: take one token, waiting for it (in short steps that
 * watch *stop). A reservation model: the bucket may go negative, and the
 * caller sleeps off its debt outside the lock. */
static void kb_api_throttle(kb_apiclient_t *api, const _Atomic bool *stop) {
    if (api->qps <= 0)
        return;
    pthread_mutex_lock(&api->rate_mtx);
    int64_t now = kb_now_mono_ns();
    api->tokens += (double)(now - api->tokens_ns) / 1e9 * api->qps;
    if (api->tokens > api->burst)
        api->tokens = api->burst;
    api->tokens_ns = now;
    api->tokens -= 1.0;
    int64_t until = api->tokens < 0 ? now + (int64_t)(-api->tokens / api->qps * 1e9) : now;
    pthread_mutex_unlock(&api->rate_mtx);
    while (!(stop && atomic_load(stop))) {
        int64_t left = until - kb_now_mono_ns();
        if (left <= 0)
            break;
        if (left > 100000000)
            left = 100000000;
        struct timespec ts = {0, (long)left};
        nanosleep(&ts, NULL);
    }
}

static bool kb_api_is_watch(const char *path_and_query) {
    return strstr(path_and_query, "?watch=true") || strstr(path_and_query, "&watch=true") ||
           strstr(path_and_query, "?watch=1") || strstr(path_and_query, "&watch=1");
}

/* Path segment i (0-based) of path_and_query, without the query: *len bytes at the result; NULL past the end. */
static const char *kb_api_segment(const char *path, int i, size_t *len) {
    const char *p = path;
    for (int k = 0;; k++) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/?#");
        if (!n)
            return NULL;
        if (k == i) {
            *len = n;
            return p;
        }
        p += n;
        if (*p != '/')
            return NULL;
    }
}

void kb_api_path_classify(const char *path_and_query, const char **verb, char *resource, size_t resource_size) {
    size_t n0 = 0, n1 = 0;
    const char *s0 = kb_api_segment(path_and_query, 0, &n0);
    int first = -1; /* index of the segment after the group/version */
    const char *group = NULL;
    if (s0 && n0 == 3 && !strncmp(s0, "api", 3))
        first = 2;
    else if (s0 && n0 == 4 && !strncmp(s0, "apis", 4) && (group = kb_api_segment(path_and_query, 1, &n1)))
        first = 3;
    size_t nr = 0, nn = 0, nsub = 0;
    const char *res = first < 0 ? NULL : kb_api_segment(path_and_query, first, &nr);
    const char *name = res ? kb_api_segment(path_and_query, first + 1, &nn) : NULL;
    if (res && nr == 10 && !strncmp(res, "namespaces", 10) && name &&
        kb_api_segment(path_and_query, first + 2, &nsub)) {
        first += 2; /* namespaces/<ns>/<resource>… */
        res = kb_api_segment(path_and_query, first, &nr);
        name = kb_api_segment(path_and_query, first + 1, &nn);
    }
    const char *sub = name ? kb_api_segment(path_and_query, first + 2, &nsub) : NULL;
    *verb = kb_api_is_watch(path_and_query) ? "watch" : name ? "get" : "list";
    if (!res) {
        *verb = kb_api_is_watch(path_and_query) ? "watch" : "get";
        snprintf(resource, resource_size, "%s", "");
        return;
    }
    snprintf(resource, resource_size, "%.*s%s%.*s%s%.*s", (int)nr, res, sub ? "/" : "", sub ? (int)nsub : 0,
             sub ? sub : "", group ? "." : "", group ? (int)n1 : 0, group ? group : "");
}

/* The row of (verb, resource), appended if new. Locks: kb_api_rows_mtx, only to append. */
static kb_api_row_t *kb_api_row(const char *verb, const char *resource) {
    size_t n = atomic_load_explicit(&kb_api_n_rows, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(kb_api_rows[i].verb, verb) && !strcmp(kb_api_rows[i].resource, resource))
            return &kb_api_rows[i];
    pthread_mutex_lock(&kb_api_rows_mtx);
    size_t m = atomic_load_explicit(&kb_api_n_rows, memory_order_relaxed);
    kb_api_row_t *row = NULL;
    for (size_t i = n; i < m && !row; i++)
        if (!strcmp(kb_api_rows[i].verb, verb) && !strcmp(kb_api_rows[i].resource, resource))
            row = &kb_api_rows[i];
    if (!row && m < KB_API_ROWS) {
        row = &kb_api_rows[m];
        bool full = m == KB_API_ROWS - 1;
        snprintf(row->verb, sizeof(row->verb), "%s", full ? "other" : verb);
        snprintf(row->resource, sizeof(row->resource), "%s", full ? "other" : resource);
        atomic_store_explicit(&kb_api_n_rows, m + 1, memory_order_release);
    }
    if (!row)
        row = &kb_api_rows[KB_API_ROWS - 1];
    pthread_mutex_unlock(&kb_api_rows_mtx);
    return row;
}

/* Count one response by its status (0: none, a transport error). */
static void kb_api_count_code(kb_api_row_t *row, long status) {
    int want = (int)(status > 0 && status < 1000 ? status : 0) + 1;
    size_t slot = KB_API_STAT_CODES;
    for (size_t i = 0; i < KB_API_STAT_CODES; i++) {
        int have = atomic_load_explicit(&row->code_plus1[i], memory_order_acquire);
        if (!have && atomic_compare_exchange_strong(&row->code_plus1[i], &have, want))
            have = want;
        if (have == want) {
            slot = i;
            break;
        }
    }
    atomic_fetch_add_explicit(&row->count[slot], 1, memory_order_relaxed);
}

/* method: NULL for a GET; "POST" is counted as "create", "PUT" as "update". */
static kb_api_row_t *kb_api_row_of(const char *path_and_query, const char *method) {
    const char *verb;
    char resource[96];
    kb_api_path_classify(path_and_query, &verb, resource, sizeof(resource));
    if (method)
        verb = !strcmp(method, "POST") ? "create" : !strcmp(method, "PUT") ? "update" : "other";
    return kb_api_row(verb, resource);
}

size_t kb_apiclient_request_stats(kb_api_request_stats_t *out, size_t max) {
    size_t n = atomic_load_explicit(&kb_api_n_rows, memory_order_acquire);
    for (size_t i = 0; i < n && i < max; i++) {
        kb_api_row_t *row = &kb_api_rows[i];
        kb_api_request_stats_t *o = &out[i];
        o->verb = row->verb;
        o->resource = row->resource;
        o->n_codes = 0;
        for (size_t c = 0; c <= KB_API_STAT_CODES; c++) {
            int code = c < KB_API_STAT_CODES ? atomic_load_explicit(&row->code_plus1[c], memory_order_acquire) - 1
                                             : -1;
            uint64_t v = atomic_load_explicit(&row->count[c], memory_order_relaxed);
            if ((c < KB_API_STAT_CODES && code < 0) || (c == KB_API_STAT_CODES && !v))
                continue;
            o->code[o->n_codes] = code;
            o->count[o->n_codes++] = v;
        }
        o->duration = strcmp(row->verb, "watch") != 0 ? &row->duration : NULL;
    }
    return n;
}

typedef struct kb_api_xfer {
    CURL *curl;
    kb_api_body_fn body_fn;
    void *opaque;
    kb_buf_t *body;
    size_t max_body;
    const _Atomic bool *stop;
    kb_api_response_t *resp;
    bool status_known;
    bool too_big;
    kb_api_row_t *row;  /* request metrics */
    bool counted;       /* the response's status is counted (at the end of its headers) */
} kb_api_xfer_t;

static bool kb_api_is_2xx(kb_api_xfer_t *x) {
    if (!x->status_known) {
        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &x->resp->status);
        x->status_known = true;
    }
    return x->resp->status >= 200 && x->resp->status < 300;
}

static size_t kb_api_write_cb(char *data, size_t size, size_t nmemb, void *userdata) {
    kb_api_xfer_t *x = userdata;
    size_t n = size * nmemb;
    if (x->stop && atomic_load(x->stop))
        return 0;
    if (x->body_fn && kb_api_is_2xx(x)) {
        if (!x->body_fn(x->opaque, data, n)) {
            x->resp->aborted = true;
            return 0;
        }
        return n;
    }
    if (x->body) {
        if (x->body->len + n > x->max_body) {
            x->too_big = true;
            return 0;
        }
        kb_buf_append(x->body, data, n);
    }
    return n;
}

static size_t kb_api_header_cb(char *data, size_t size, size_t nmemb, void *userdata) {
    kb_api_xfer_t *x = userdata;
    size_t n = size * nmemb;
    static const char name[] = "retry-after:";
    if (n > sizeof(name) - 1 && !strncasecmp(data, name, sizeof(name) - 1)) {
        long v = strtol(data + sizeof(name) - 1, NULL, 10);
        x->resp->retry_after = v > 0 ? (int)(v > 3600 ? 3600 : v) : 0;
    }
    /* A new status line (redirect, 100-continue) resets what we learned. */
    if (n >= 5 && !strncmp(data, "HTTP/", 5))
        x->status_known = false;
    /* The end of a final response's headers: count it now, so an open watch
     * is counted while it streams, not only when it ends. */
    if (!x->counted && (n == 2 || n == 1) && (data[0] == '\r' || data[0] == '\n')) {
        long status = 0;
        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &status);
        if (status >= 200) {
            kb_api_count_code(x->row, status);
            x->counted = true;
        }
    }
    return n;
}

static int kb_api_progress_cb(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                              curl_off_t ulnow) {
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    kb_api_xfer_t *x = userdata;
    return x->stop && atomic_load(x->stop) ? 1 : 0;
}

/* One attempt. Returns the credential generation used (for the 401 retry). */
typedef struct kb_api_send {
    const char *accept;  /* NULL: application/json */
    const char *method;  /* NULL: GET */
    const char *data;    /* the request's JSON body (method set) */
    size_t len;
} kb_api_send_t;

static uint64_t kb_api_get_once(kb_apiclient_t *api, const char *path_and_query, const kb_api_send_t *send,
                                kb_api_body_fn body_fn, void *opaque, kb_buf_t *body, size_t max_body,
                                long timeout_s, const _Atomic bool *stop, kb_api_response_t *resp) {
    memset(resp, 0, sizeof(*resp));
    resp->retry_after = -1;
    CURL *curl = curl_easy_init();
    KB_ASSERT(curl);
    kb_buf_t url = KB_BUF_INIT, auth = KB_BUF_INIT;
    kb_buf_append_str(&url, api->server);
    kb_buf_append_str(&url, path_and_query);
    uint64_t gen = 0;
    struct curl_slist *headers = NULL;
    if (kb_api_set_auth(api, curl, &auth, &gen, stop, resp->errmsg, sizeof(resp->errmsg)) != KB_OK) {
        resp->err = KB_ERR_CONNECT; /* the reflector logs errmsg and retries with backoff */
        goto out;
    }
    char accept_h[256];
    snprintf(accept_h, sizeof(accept_h), "Accept: %s", send && send->accept ? send->accept : "application/json");
    headers = curl_slist_append(NULL, accept_h);
    if (send && send->method) {
        headers = curl_slist_append(headers, "Content-Type: application/json");
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, send->method);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, send->data);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)send->len);
    }
    if (auth.len)
        headers = curl_slist_append(headers, auth.data);
    kb_api_xfer_t x = {.curl = curl, .body_fn = body_fn, .opaque = opaque, .body = body, .max_body = max_body,
                       .stop = stop, .resp = resp, .row = kb_api_row_of(path_and_query, send ? send->method : NULL)};
    curl_easy_setopt(curl, CURLOPT_URL, url.data);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "kbridge/" KB_VERSION);
    curl_easy_setopt(curl, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "gzip");
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, kb_api_write_cb);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, kb_api_header_cb);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, kb_api_progress_cb);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &x);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
    /* Large reads: a backlog arrives in few callbacks, so the informer commits
     * (state_dir) and wakes workers once per many events, not per event. */
    curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 256L * 1024L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    if (timeout_s > 0)
        curl_easy_setopt(curl, CURLOPT_TIMEOUT, timeout_s);
    if (api->ca_file[0])
        curl_easy_setopt(curl, CURLOPT_CAINFO, api->ca_file);
    if (api->ca_data.data) {
        struct curl_blob ca = {api->ca_data.data, api->ca_data.len, CURL_BLOB_NOCOPY};
        curl_easy_setopt(curl, CURLOPT_CAINFO_BLOB, &ca);
    }
    if (api->client_cert[0])
        curl_easy_setopt(curl, CURLOPT_SSLCERT, api->client_cert);
    if (api->client_key[0])
        curl_easy_setopt(curl, CURLOPT_SSLKEY, api->client_key);
    if (api->cert_data.data) {
        /* NOCOPY: the blobs live as long as api, which outlives every request. */
        struct curl_blob cert = {api->cert_data.data, api->cert_data.len, CURL_BLOB_NOCOPY};
        struct curl_blob key = {api->key_data.data, api->key_data.len, CURL_BLOB_NOCOPY};
        curl_easy_setopt(curl, CURLOPT_SSLCERT_BLOB, &cert);
        curl_easy_setopt(curl, CURLOPT_SSLKEY_BLOB, &key);
    }
    if (api->insecure) {
        curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_err);

    int64_t t0 = kb_now_mono_ns();
    CURLcode rc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp->status);
    if (!x.counted)
        kb_api_count_code(x.row, resp->status);
    if (strcmp(x.row->verb, "watch") != 0)
        kb_histogram_observe_ns(&x.row->duration, kb_now_mono_ns() - t0);
    const char *ctype = NULL;
    if (curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &ctype) == CURLE_OK && ctype)
        snprintf(resp->content_type, sizeof(resp->content_type), "%s", ctype);
    switch (rc) {
    case CURLE_OK: resp->err = KB_OK; break;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SSL_CONNECT_ERROR: resp->err = KB_ERR_CONNECT; break;
    case CURLE_OPERATION_TIMEDOUT: resp->err = KB_ERR_TIMEDOUT; break;
    case CURLE_ABORTED_BY_CALLBACK: resp->err = KB_ERR_STOPPED; break;
    case CURLE_WRITE_ERROR:
        resp->err = x.too_big ? KB_ERR_TOOBIG : (stop && atomic_load(stop)) ? KB_ERR_STOPPED : KB_OK;
        break;
    default: resp->err = KB_ERR_IO; break;
    }
    if (rc != CURLE_OK)
        snprintf(resp->errmsg, sizeof(resp->errmsg), "%s", curl_err[0] ? curl_err : curl_easy_strerror(rc));
out:
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    kb_buf_fini(&url);
    /* The token never stays in freed memory longer than needed. */
    if (auth.data)
        memset(auth.data, 0, auth.len);
    kb_buf_fini(&auth);
    return gen;
}

static void kb_api_request(kb_apiclient_t *api, const char *path_and_query, const kb_api_send_t *send,
                           kb_api_body_fn body_fn, void *opaque, kb_buf_t *body, size_t max_body, long timeout_s,
                           const _Atomic bool *stop, kb_api_response_t *resp) {
    if (!kb_api_is_watch(path_and_query))
        kb_api_throttle(api, stop);
    size_t body_len0 = body ? body->len : 0;
    uint64_t gen = kb_api_get_once(api, path_and_query, send, body_fn, opaque, body, max_body, timeout_s, stop,
                                   resp);
    /* A 401 comes before any streamed byte, so repeating the request is safe. */
    if (resp->err == KB_OK && resp->status == 401 && !(stop && atomic_load(stop)) &&
        kb_api_refresh_after_401(api, gen, stop)) {
        if (body && body->data) {
            body->len = body_len0;
            body->data[body_len0] = '\0';
        }
        kb_api_get_once(api, path_and_query, send, body_fn, opaque, body, max_body, timeout_s, stop, resp);
    }
}

void kb_apiclient_get(kb_apiclient_t *api, const char *path_and_query, kb_api_body_fn body_fn, void *opaque,
                      kb_buf_t *body, size_t max_body, long timeout_s, const _Atomic bool *stop,
                      kb_api_response_t *resp) {
    kb_api_request(api, path_and_query, NULL, body_fn, opaque, body, max_body, timeout_s, stop, resp);
}

void kb_apiclient_get_as(kb_apiclient_t *api, const char *accept, const char *path_and_query, kb_api_body_fn body_fn,
                         void *opaque, kb_buf_t *body, size_t max_body, long timeout_s, const _Atomic bool *stop,
                         kb_api_response_t *resp) {
    kb_api_send_t send = {.accept = accept};
    kb_api_request(api, path_and_query, &send, body_fn, opaque, body, max_body, timeout_s, stop, resp);
}

void kb_apiclient_send(kb_apiclient_t *api, const char *method, const char *path, const char *json, size_t len,
                       kb_buf_t *body, size_t max_body, long timeout_s, const _Atomic bool *stop,
                       kb_api_response_t *resp) {
    KB_ASSERT(method && json);
    kb_api_send_t send = {.method = method, .data = json, .len = len};
    kb_api_request(api, path, &send, NULL, NULL, body, max_body, timeout_s, stop, resp);
}

kb_err_t kb_api_status_err(long status) {
    return kb_kstatus_classify(status, NULL, NULL).err;
}

void kb_api_body_excerpt(const char *body, size_t len, size_t max, char *out, size_t out_size) {
    size_t n = 0, i = 0;
    for (; i < len && i < max && n + 4 < out_size; i++) {
        unsigned char c = (unsigned char)body[i];
        out[n++] = c < 0x20 || c == 0x7f || c == '"' || c == '\\' ? ' ' : (char)c;
    }
    if (i < len && n + 4 < out_size) {
        memcpy(out + n, "\xe2\x80\xa6", 3); /* … */
        n += 3;
    }
    out[n < out_size ? n : out_size - 1] = '\0';
}

void kb_api_query_add(kb_buf_t *q, const char *name, const char *value) {
    static const char hex[] = "0123456789ABCDEF";
    kb_buf_append_char(q, q->len ? '&' : '?');
    kb_buf_append_str(q, name);
    kb_buf_append_char(q, '=');
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
            *p == '_' || *p == '.' || *p == '~') {
            kb_buf_append_char(q, (char)*p);
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            kb_buf_append(q, e, 3);
        }
    }
}
