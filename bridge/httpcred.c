/* bridge/httpcred.c — the HTTP API's token and TLS pair, rotated in place.
 *
 * DESIGN. Kubernetes delivers both as files of a Secret volume and replaces
 * them (cert-manager renewing a certificate, an operator changing a token)
 * by writing a new directory and swapping the ..data symlink, or a writer
 * renames a new file over the old. Either way the path then resolves to a
 * different inode, so one thread ("kb:http-cred") stat()s each path every
 * KB_HTTPCRED_POLL_MS (following the symlinks) and reads it again when
 * device, inode, size, mtime or ctime moved. Polling, not inotify: a watch
 * on a symlink's target is lost at the swap, and two seconds is short next
 * to the hours a renewal leaves before expiry.
 *
 * Two tokens can be set: http.token_file's reads everything,
 * http.metrics_token_file's only /metrics (the scraper's, so that a leaked
 * scrape credential reads no object). Each is a kb_tokenslot_t, polled and
 * swapped alike. A token is swapped under cred->mtx, so the old one is
 * refused from the next request on. A new file that cannot be read, or is empty or not one
 * line, keeps the last good token (the API must never open because a
 * rotation went wrong) and says so once per change of the file.
 *
 * The certificate is handed to GnuTLS per handshake through libmicrohttpd's
 * certificate callback: each handshake gets its own copy of the current
 * pair (parsed once per rotation; copying is cheap, parsing an RSA key is
 * not), which GnuTLS frees with the session, so a rotation
 * never frees what a handshake under way still uses, connections opened
 * before keep their session, and new ones get the new pair. A new pair is
 * taken only when the key belongs to the certificate (a writer that replaces
 * the two files one by one is seen half done at worst, warned about, and
 * taken at the next look). The callback carries no pointer of ours, hence
 * kb_httpcred_serving: the one TLS credential set of the process.
 */
#include "bridge/httpcred.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/secret.h"
#include "common/time.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define KB_HTTPCRED_POLL_MS 2000
#define KB_HTTPCRED_TOKEN_MAX 16384
#define KB_HTTPCRED_PEM_MAX ((size_t)1 << 20)
#define KB_HTTPCRED_CHAIN_MAX 16 /* certificates in a chain */

/* A certificate chain and its key: the PEM (to tell a change) and both
 * parsed once, so that a handshake only copies them. Immutable; replaced
 * whole under cred->mtx. */
typedef struct {
    char *cert_pem, *key_pem;
    gnutls_x509_crt_t crts[KB_HTTPCRED_CHAIN_MAX];
    unsigned n;
    gnutls_x509_privkey_t key;
} kb_tlspair_t;

/* What stat() says of a path, to notice a replaced file. */
typedef struct {
    bool ok;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
} kb_filesig_t;

/* One bearer token and the file it comes from. */
typedef struct {
    const char *key;       /* the config key, for messages: "http.token_file" */
    char *file;            /* copy; NULL when unset */
    kb_filesig_t sig;      /* as last read (poll thread only) */
    char *token;           /* under cred->mtx; NULL when unset */
    size_t len;
} kb_tokenslot_t;

struct kb_httpcred {
    kb_tokenslot_t tokens[2]; /* [KB_HTTP_ACCESS_ALL - 1]: everything; [KB_HTTP_ACCESS_METRICS - 1]: /metrics */
    char *cert_file, *key_file; /* copies; NULL when unset */
    kb_filesig_t cert_sig, key_sig; /* as last read (poll thread only) */
    pthread_mutex_t mtx;   /* guards tokens[].token and .len, pair (leaf) */
    kb_tlspair_t *pair;    /* NULL: plain HTTP */
    pthread_t thread;
    bool started;
    bool stopping;         /* under stop_mtx */
    pthread_mutex_t stop_mtx;
    pthread_cond_t stop_cond;
};

static _Atomic(kb_httpcred_t *) kb_httpcred_serving;

/* ---- files ------------------------------------------------------------- */

static kb_filesig_t kb_filesig(const char *path) {
    kb_filesig_t s = {0};
    struct stat st;
    if (stat(path, &st) != 0)
        return s;
    s = (kb_filesig_t){true, st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
    return s;
}

static bool kb_filesig_eq(const kb_filesig_t *a, const kb_filesig_t *b) {
    return a->ok == b->ok && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* The token of path: one non-empty line. NULL with the reason in why. */
static char *kb_httpcred_read_token(const char *path, size_t *len, char *why, size_t why_size) {
    char *tok = kb_secret_read(path, KB_HTTPCRED_TOKEN_MAX, len, why, why_size);
    if (tok && (*len == 0 || strpbrk(tok, "\r\n"))) {
        snprintf(why, why_size, "%s: %s", path, *len == 0 ? "empty" : "not one line");
        kb_secret_free(tok);
        return NULL;
    }
    return tok;
}

/* Both tokens of cfg (NULL when unset), or KB_ERR_CONFIG with "key: why" in
 * errstr: one non-empty line each, and not the same token twice (the
 * metrics-only one would then read everything). */
static kb_err_t kb_httpcred_read_tokens(const char *const files[2], char *toks[2], size_t lens[2], char *errstr,
                                        size_t errstr_size) {
    static const char *const keys[2] = {"http.token_file", "http.metrics_token_file"};
    char why[512];
    for (int i = 0; i < 2; i++) {
        toks[i] = NULL;
        lens[i] = 0;
        if (!files[i] || !*files[i])
            continue;
        toks[i] = kb_httpcred_read_token(files[i], &lens[i], why, sizeof(why));
        if (!toks[i]) {
            snprintf(errstr, errstr_size, "%s: %s (it must hold the bearer token, one line)", keys[i], why);
            return KB_ERR_CONFIG;
        }
    }
    if (toks[0] && toks[1] && kb_secret_equal(toks[0], lens[0], toks[1], lens[1])) {
        snprintf(errstr, errstr_size, "http.metrics_token_file: %s holds the same token as %s; make a token of "
                 "its own", files[1], files[0]);
        return KB_ERR_CONFIG;
    }
    return KB_OK;
}

/* The start-up and --check verdict on the token files, as FILE:LINE: the
 * same reader as a rotation, so what one refuses the other does. */
kb_err_t kb_httpcred_check_token(const kb_config_t *cfg, char *errstr, size_t errstr_size) {
    const char *files[2] = {cfg->http_token_file, cfg->http_metrics_token_file};
    char *toks[2];
    size_t lens[2];
    char why[768];
    kb_err_t err = kb_httpcred_read_tokens(files, toks, lens, why, sizeof(why));
    kb_secret_free(toks[0]);
    kb_secret_free(toks[1]);
    if (err != KB_OK)
        snprintf(errstr, errstr_size, "%s:%d: %s", cfg->path, cfg->http_line, why);
    return err;
}

/* A private key that other users may read is said, not refused: a
 * Kubernetes Secret volume is 0644 unless its defaultMode says otherwise,
 * and refusing would only move the key somewhere less watched. */
static void kb_httpcred_warn_key_mode(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !(st.st_mode & (S_IRWXG | S_IRWXO)))
        return;
    KB_WARN("http", "http.tls_key_file %s has mode %04o: users other than kbridge's can read the private key; "
            "make it 0600 or 0400 (a Secret volume: defaultMode 0400)", path, (unsigned)(st.st_mode & 07777));
}

static gnutls_datum_t kb_datum(const char *pem) {
    return (gnutls_datum_t){(unsigned char *)(uintptr_t)pem, (unsigned)strlen(pem)};
}

static void kb_tlspair_free(kb_tlspair_t *pair) {
    if (!pair)
        return;
    for (unsigned i = 0; i < pair->n; i++)
        gnutls_x509_crt_deinit(pair->crts[i]);
    if (pair->key)
        gnutls_x509_privkey_deinit(pair->key);
    kb_secret_free(pair->cert_pem);
    kb_secret_free(pair->key_pem);
    free(pair);
}

/* Whether the key belongs to the certificate (GnuTLS checks as it loads). */
static int kb_tlspair_check(const kb_tlspair_t *pair) {
    gnutls_certificate_credentials_t x = NULL;
    int rc = gnutls_certificate_allocate_credentials(&x);
    if (rc < 0)
        return rc;
    gnutls_datum_t c = kb_datum(pair->cert_pem), k = kb_datum(pair->key_pem);
    rc = gnutls_certificate_set_x509_key_mem2(x, &c, &k, GNUTLS_X509_FMT_PEM, NULL, 0);
    gnutls_certificate_free_credentials(x);
    return rc;
}

static int kb_tlspair_parse(kb_tlspair_t *pair) {
    int rc = kb_tlspair_check(pair);
    gnutls_datum_t c = kb_datum(pair->cert_pem), k = kb_datum(pair->key_pem);
    pair->n = KB_HTTPCRED_CHAIN_MAX;
    if (rc >= 0)
        rc = gnutls_x509_crt_list_import(pair->crts, &pair->n, &c, GNUTLS_X509_FMT_PEM, 0);
    if (rc < 0)
        pair->n = 0;
    if (rc >= 0)
        rc = gnutls_x509_privkey_init(&pair->key);
    if (rc >= 0)
        rc = gnutls_x509_privkey_import2(pair->key, &k, GNUTLS_X509_FMT_PEM, NULL, 0);
    return rc;
}

/* Both PEM files of the pair, parsed, the key checked against the
 * certificate. NULL with the reason in why. */
static kb_tlspair_t *kb_tlspair_load(const kb_httpcred_t *cred, char *why, size_t why_size) {
    kb_tlspair_t *pair = kb_calloc(1, sizeof(*pair));
    pair->cert_pem = kb_secret_read(cred->cert_file, KB_HTTPCRED_PEM_MAX, NULL, why, why_size);
    if (pair->cert_pem)
        pair->key_pem = kb_secret_read(cred->key_file, KB_HTTPCRED_PEM_MAX, NULL, why, why_size);
    if (!pair->key_pem) {
        kb_tlspair_free(pair);
        return NULL;
    }
    int rc = kb_tlspair_parse(pair);
    if (rc >= 0)
        return pair;
    snprintf(why, why_size, "%s and %s are not a PEM certificate and its unencrypted private key (%s)",
             cred->cert_file, cred->key_file, gnutls_strerror(rc));
    kb_tlspair_free(pair);
    return NULL;
}

/* ---- rotation (the poll thread) ------------------------------------------ */

static void kb_httpcred_reload_token(kb_httpcred_t *cred, kb_tokenslot_t *slot) {
    char why[512];
    size_t n = 0;
    char *tok = kb_httpcred_read_token(slot->file, &n, why, sizeof(why));
    if (!tok) {
        KB_WARN("http", "%s %s changed but cannot be used (%s): the previous token stays in force", slot->key,
                slot->file, why);
        return;
    }
    /* The two tokens never equal each other, as at start: a metrics token
     * rotated to the main one's value would read everything. */
    const kb_tokenslot_t *other = &cred->tokens[slot == &cred->tokens[0] ? 1 : 0];
    pthread_mutex_lock(&cred->mtx);
    bool clash = other->token && kb_secret_equal(tok, n, other->token, other->len);
    bool same = clash || kb_secret_equal(tok, n, slot->token, slot->len);
    char *old = same ? tok : slot->token;
    if (!same) {
        slot->token = tok;
        slot->len = n;
    }
    pthread_mutex_unlock(&cred->mtx);
    kb_secret_free(old);
    if (clash)
        KB_WARN("http", "%s %s changed to the same token as %s: refused, the previous token stays in force",
                slot->key, slot->file, other->key);
    else if (!same)
        KB_INFO("http", "%s %s changed: the new token is in force, the previous one is refused", slot->key,
                slot->file);
}

static void kb_httpcred_reload_pair(kb_httpcred_t *cred) {
    char why[512];
    kb_tlspair_t *pair = kb_tlspair_load(cred, why, sizeof(why));
    if (!pair) {
        KB_WARN("http", "http.tls_cert_file %s / http.tls_key_file %s changed but cannot be used (%s): new "
                "connections keep the previous certificate", cred->cert_file, cred->key_file, why);
        return;
    }
    pthread_mutex_lock(&cred->mtx);
    bool same = !strcmp(pair->cert_pem, cred->pair->cert_pem) && !strcmp(pair->key_pem, cred->pair->key_pem);
    kb_tlspair_t *old = same ? pair : cred->pair;
    if (!same)
        cred->pair = pair;
    pthread_mutex_unlock(&cred->mtx);
    kb_tlspair_free(old); /* a handshake copies under the lock: nothing refers to it now */
    if (same)
        return;
    KB_INFO("http", "http.tls_cert_file %s and http.tls_key_file %s changed: new connections get the new "
            "certificate", cred->cert_file, cred->key_file);
    kb_httpcred_warn_key_mode(cred->key_file);
}

/* One look at the files; a changed one is read again (both of the pair). */
static void kb_httpcred_poll(kb_httpcred_t *cred) {
    for (size_t i = 0; i < KB_ARRAY_LEN(cred->tokens); i++) {
        kb_tokenslot_t *slot = &cred->tokens[i];
        if (!slot->file)
            continue;
        kb_filesig_t s = kb_filesig(slot->file);
        if (!kb_filesig_eq(&s, &slot->sig)) {
            slot->sig = s;
            kb_httpcred_reload_token(cred, slot);
        }
    }
    if (cred->cert_file) {
        kb_filesig_t c = kb_filesig(cred->cert_file), k = kb_filesig(cred->key_file);
        if (!kb_filesig_eq(&c, &cred->cert_sig) || !kb_filesig_eq(&k, &cred->key_sig)) {
            cred->cert_sig = c;
            cred->key_sig = k;
            kb_httpcred_reload_pair(cred);
        }
    }
}

static void *kb_httpcred_main(void *arg) {
    kb_httpcred_t *cred = arg;
    kb_thread_set_name("kb:http-cred");
    pthread_mutex_lock(&cred->stop_mtx);
    while (!cred->stopping) {
        struct timespec dl = kb_deadline_mono(KB_HTTPCRED_POLL_MS);
        pthread_cond_timedwait(&cred->stop_cond, &cred->stop_mtx, &dl);
        if (cred->stopping)
            break;
        pthread_mutex_unlock(&cred->stop_mtx);
        kb_httpcred_poll(cred);
        pthread_mutex_lock(&cred->stop_mtx);
    }
    pthread_mutex_unlock(&cred->stop_mtx);
    return NULL;
}

void kb_httpcred_start(kb_httpcred_t *cred) {
    if (cred->tokens[0].file || cred->cert_file)
        cred->started = pthread_create(&cred->thread, NULL, kb_httpcred_main, cred) == 0;
}

void kb_httpcred_stop(kb_httpcred_t *cred) {
    if (!cred || !cred->started)
        return;
    pthread_mutex_lock(&cred->stop_mtx);
    cred->stopping = true;
    pthread_cond_signal(&cred->stop_cond);
    pthread_mutex_unlock(&cred->stop_mtx);
    pthread_join(cred->thread, NULL);
    cred->started = false;
}

/* ---- use ------------------------------------------------------------------ */

bool kb_httpcred_has_token(const kb_httpcred_t *cred) {
    return cred->tokens[0].file != NULL;
}

bool kb_httpcred_has_tls(const kb_httpcred_t *cred) {
    return cred->cert_file != NULL;
}

kb_http_access_t kb_httpcred_access(kb_httpcred_t *cred, const char *v, size_t n) {
    pthread_mutex_lock(&cred->mtx);
    const kb_tokenslot_t *all = &cred->tokens[KB_HTTP_ACCESS_ALL - 1];
    const kb_tokenslot_t *metrics = &cred->tokens[KB_HTTP_ACCESS_METRICS - 1];
    bool is_all = all->token && kb_secret_equal(v, n, all->token, all->len);
    bool is_metrics = metrics->token && kb_secret_equal(v, n, metrics->token, metrics->len);
    pthread_mutex_unlock(&cred->mtx);
    return is_all ? KB_HTTP_ACCESS_ALL : is_metrics ? KB_HTTP_ACCESS_METRICS : KB_HTTP_ACCESS_NONE;
}

/* Copy the current pair into a chain and key of this handshake's own. */
static int kb_httpcred_copy(const kb_tlspair_t *pair, gnutls_pcert_st *pc, unsigned *n, gnutls_privkey_t key) {
    *n = pair->n;
    int rc = gnutls_pcert_import_x509_list(pc, (gnutls_x509_crt_t *)(uintptr_t)pair->crts, n, 0);
    if (rc < 0)
        return rc;
    rc = gnutls_privkey_import_x509(key, pair->key, GNUTLS_PRIVKEY_IMPORT_COPY);
    if (rc < 0)
        for (unsigned i = 0; i < *n; i++)
            gnutls_pcert_deinit(&pc[i]);
    return rc;
}

int kb_httpcred_retrieve(gnutls_session_t session, const struct gnutls_cert_retr_st *info, gnutls_pcert_st **certs,
                         unsigned int *certs_length, gnutls_ocsp_data_st **ocsp, unsigned int *ocsp_length,
                         gnutls_privkey_t *privkey, unsigned int *flags) {
    KB_UNUSED(session);
    KB_UNUSED(info);
    kb_httpcred_t *cred = atomic_load(&kb_httpcred_serving);
    gnutls_pcert_st *pc = gnutls_calloc(KB_HTTPCRED_CHAIN_MAX, sizeof(*pc));
    gnutls_privkey_t key = NULL;
    if (!cred || !pc || gnutls_privkey_init(&key) < 0) {
        gnutls_free(pc);
        return -1;
    }
    unsigned n = KB_HTTPCRED_CHAIN_MAX;
    pthread_mutex_lock(&cred->mtx);
    int rc = kb_httpcred_copy(cred->pair, pc, &n, key);
    pthread_mutex_unlock(&cred->mtx);
    if (rc < 0) {
        gnutls_privkey_deinit(key);
        gnutls_free(pc);
        return -1;
    }
    *certs = pc;
    *certs_length = n;
    *ocsp = NULL;
    *ocsp_length = 0;
    *privkey = key;
    *flags = GNUTLS_CERT_RETR_DEINIT_ALL;
    return 0;
}

/* ---- lifetime ------------------------------------------------------------- */

static char *kb_httpcred_path(const char *v) {
    return v && *v ? kb_strdup(v) : NULL;
}

static kb_err_t kb_httpcred_load(kb_httpcred_t *cred, char *errstr, size_t errstr_size) {
    char why[512];
    const char *files[2];
    char *toks[2];
    size_t lens[2];
    for (int i = 0; i < 2; i++) {
        files[i] = cred->tokens[i].file;
        cred->tokens[i].sig = files[i] ? kb_filesig(files[i]) : (kb_filesig_t){0};
    }
    kb_err_t err = kb_httpcred_read_tokens(files, toks, lens, errstr, errstr_size);
    for (int i = 0; i < 2; i++) {
        cred->tokens[i].token = toks[i];
        cred->tokens[i].len = lens[i];
    }
    if (err != KB_OK)
        return err;
    if (!cred->cert_file)
        return KB_OK;
    kb_httpcred_t *none = NULL;
    if (!atomic_compare_exchange_strong(&kb_httpcred_serving, &none, cred)) {
        snprintf(errstr, errstr_size, "http.tls_cert_file: another HTTPS server runs in this process");
        return KB_ERR_EXISTS;
    }
    cred->cert_sig = kb_filesig(cred->cert_file);
    cred->key_sig = kb_filesig(cred->key_file);
    cred->pair = kb_tlspair_load(cred, why, sizeof(why));
    if (!cred->pair) {
        snprintf(errstr, errstr_size, "http.tls_cert_file/http.tls_key_file: %s", why);
        return KB_ERR_CONFIG;
    }
    kb_httpcred_warn_key_mode(cred->key_file);
    return KB_OK;
}

kb_err_t kb_httpcred_new(const kb_config_t *cfg, kb_httpcred_t **out, char *errstr, size_t errstr_size) {
    kb_httpcred_t *cred = kb_calloc(1, sizeof(*cred));
    pthread_mutex_init(&cred->mtx, NULL);
    pthread_mutex_init(&cred->stop_mtx, NULL);
    kb_cond_init_mono(&cred->stop_cond);
    cred->tokens[0] = (kb_tokenslot_t){.key = "http.token_file", .file = kb_httpcred_path(cfg->http_token_file)};
    cred->tokens[1] = (kb_tokenslot_t){.key = "http.metrics_token_file",
                                       .file = kb_httpcred_path(cfg->http_metrics_token_file)};
    cred->cert_file = kb_httpcred_path(cfg->http_tls_cert_file);
    cred->key_file = cred->cert_file ? kb_httpcred_path(cfg->http_tls_key_file) : NULL;
    kb_err_t err = kb_httpcred_load(cred, errstr, errstr_size);
    if (err != KB_OK) {
        kb_httpcred_destroy(cred);
        cred = NULL;
    }
    *out = cred;
    return err;
}

void kb_httpcred_destroy(kb_httpcred_t *cred) {
    if (!cred)
        return;
    kb_httpcred_stop(cred);
    kb_httpcred_t *self = cred;
    atomic_compare_exchange_strong(&kb_httpcred_serving, &self, NULL);
    for (size_t i = 0; i < KB_ARRAY_LEN(cred->tokens); i++) {
        kb_secret_free(cred->tokens[i].token);
        free(cred->tokens[i].file);
    }
    kb_tlspair_free(cred->pair);
    free(cred->cert_file);
    free(cred->key_file);
    pthread_cond_destroy(&cred->stop_cond);
    pthread_mutex_destroy(&cred->stop_mtx);
    pthread_mutex_destroy(&cred->mtx);
    free(cred);
}
