/* informer/apiclient.c — libcurl under the reflector (see apiclient.h).
 *
 * Design: a fresh easy handle per request keeps the code obviously
 * thread-safe; reflectors issue a handful of requests per watch period, so
 * connection reuse buys nothing measurable. Watches stream through the write
 * callback, which may block (DeltaFIFO backpressure): curl then stops
 * reading the socket and TCP pushes back on the API server.
 * The progress callback checks the stop flag so shutdown does not wait for a
 * quiet watch to time out.
 */
#include "informer/apiclient.h"

#include "common/alloc.h"
#include "common/log.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

struct kb_apiclient {
    char *server;          /* without a trailing '/' */
    char *ca_file, *client_cert, *client_key;
    bool insecure;
    char *token_file;      /* "" = no token */
    pthread_mutex_t token_mtx;
    char *token;           /* cached bearer token; token_mtx */
    struct timespec token_mtime; /* of token_file when read; token_mtx */
};

static pthread_once_t kb_curl_once = PTHREAD_ONCE_INIT;
static void kb_curl_init(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

kb_apiclient_t *kb_apiclient_new(const kb_config_cluster_t *cluster, char *errstr, size_t errstr_size) {
    pthread_once(&kb_curl_once, kb_curl_init);
    if (!cluster->server || !cluster->server[0]) {
        snprintf(errstr, errstr_size,
                 "cluster.server is empty (kubeconfig and in-cluster auth are not supported by this build yet)");
        return NULL;
    }
    if (strncmp(cluster->server, "http://", 7) != 0 && strncmp(cluster->server, "https://", 8) != 0) {
        snprintf(errstr, errstr_size, "cluster.server \"%s\": must start with http:// or https://", cluster->server);
        return NULL;
    }
    kb_apiclient_t *api = kb_calloc(1, sizeof(*api));
    api->server = kb_strdup(cluster->server);
    size_t n = strlen(api->server);
    while (n > 0 && api->server[n - 1] == '/')
        api->server[--n] = '\0';
    api->ca_file = kb_strdup(cluster->ca_file ? cluster->ca_file : "");
    api->client_cert = kb_strdup(cluster->client_cert ? cluster->client_cert : "");
    api->client_key = kb_strdup(cluster->client_key ? cluster->client_key : "");
    api->token_file = kb_strdup(cluster->token_file ? cluster->token_file : "");
    api->insecure = cluster->insecure_skip_tls_verify;
    pthread_mutex_init(&api->token_mtx, NULL);
    return api;
}

void kb_apiclient_destroy(kb_apiclient_t *api) {
    if (!api)
        return;
    free(api->server);
    free(api->ca_file);
    free(api->client_cert);
    free(api->client_key);
    free(api->token_file);
    free(api->token);
    pthread_mutex_destroy(&api->token_mtx);
    free(api);
}

const char *kb_apiclient_server(const kb_apiclient_t *api) {
    return api->server;
}

/* "Authorization: Bearer …" into hdr, re-reading the token file if it changed. */
static bool kb_api_auth_header(kb_apiclient_t *api, kb_buf_t *hdr) {
    if (!api->token_file[0])
        return false;
    pthread_mutex_lock(&api->token_mtx);
    struct stat st;
    if (stat(api->token_file, &st) == 0 &&
        (!api->token || st.st_mtim.tv_sec != api->token_mtime.tv_sec ||
         st.st_mtim.tv_nsec != api->token_mtime.tv_nsec)) {
        FILE *f = fopen(api->token_file, "r");
        if (f) {
            char buf[8192];
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            fclose(f);
            while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
                n--;
            free(api->token);
            api->token = kb_strndup(buf, n);
            api->token_mtime = st.st_mtim;
        } else {
            KB_WARN("apiclient", "cannot read token_file=%s", api->token_file);
        }
    }
    bool have = api->token && api->token[0];
    if (have) {
        kb_buf_append_str(hdr, "Authorization: Bearer ");
        kb_buf_append_str(hdr, api->token);
    }
    pthread_mutex_unlock(&api->token_mtx);
    return have;
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
    return n;
}

static int kb_api_progress_cb(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                              curl_off_t ulnow) {
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    kb_api_xfer_t *x = userdata;
    return x->stop && atomic_load(x->stop) ? 1 : 0;
}

void kb_apiclient_get(kb_apiclient_t *api, const char *path_and_query, kb_api_body_fn body_fn, void *opaque,
                      kb_buf_t *body, size_t max_body, long timeout_s, const _Atomic bool *stop,
                      kb_api_response_t *resp) {
    memset(resp, 0, sizeof(*resp));
    resp->retry_after = -1;
    CURL *curl = curl_easy_init();
    KB_ASSERT(curl);
    kb_buf_t url = KB_BUF_INIT, auth = KB_BUF_INIT;
    kb_buf_append_str(&url, api->server);
    kb_buf_append_str(&url, path_and_query);

    struct curl_slist *headers = curl_slist_append(NULL, "Accept: application/json");
    if (kb_api_auth_header(api, &auth))
        headers = curl_slist_append(headers, auth.data);
    kb_api_xfer_t x = {.curl = curl, .body_fn = body_fn, .opaque = opaque, .body = body, .max_body = max_body,
                       .stop = stop, .resp = resp};
    curl_easy_setopt(curl, CURLOPT_URL, url.data);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "kbridge/" KB_VERSION);
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
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    if (timeout_s > 0)
        curl_easy_setopt(curl, CURLOPT_TIMEOUT, timeout_s);
    if (api->ca_file[0])
        curl_easy_setopt(curl, CURLOPT_CAINFO, api->ca_file);
    if (api->client_cert[0])
        curl_easy_setopt(curl, CURLOPT_SSLCERT, api->client_cert);
    if (api->client_key[0])
        curl_easy_setopt(curl, CURLOPT_SSLKEY, api->client_key);
    if (api->insecure) {
        curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_err);

    CURLcode rc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp->status);
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
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    kb_buf_fini(&url);
    /* The token never stays in freed memory longer than needed. */
    if (auth.data)
        memset(auth.data, 0, auth.len);
    kb_buf_fini(&auth);
}

kb_err_t kb_api_status_err(long status) {
    if (status >= 200 && status < 300)
        return KB_OK;
    switch (status) {
    case 401: return KB_ERR_UNAUTHORIZED;
    case 403: return KB_ERR_FORBIDDEN;
    case 404: return KB_ERR_NOTFOUND;
    case 410: return KB_ERR_GONE;
    case 429: return KB_ERR_THROTTLED;
    default: return status >= 500 ? KB_ERR_UNAVAILABLE : KB_ERR_HTTP;
    }
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
