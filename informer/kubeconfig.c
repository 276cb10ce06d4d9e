/* informer/kubeconfig.c — kubeconfig files and exec credential plugins (see kubeconfig.h).
 *
 * Design: libyaml's document loader builds a small node tree per file; the
 * few lookups a kubeconfig needs (current-context → context → cluster + user)
 * walk it directly, so there is no intermediate model to keep in sync with
 * the format. Several files (a $KUBECONFIG list) are searched in order and
 * the first definition of a name wins, as kubectl merges them. Each value
 * remembers the file it came from, so relative paths resolve against that
 * file's directory.
 *
 * Exec plugins run with posix_spawn: the child gets an empty signal mask and
 * default dispositions (kbridge blocks signals for sigwaitinfo, and a child
 * would inherit that), stdin from /dev/null, stdout into a pipe read with a
 * deadline, stderr passed through. A plugin that outlives its deadline is
 * killed.
 */
#include "informer/kubeconfig.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/time.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>

extern char **environ;

#define KB_KC_MAX_FILES 16
#define KB_EXEC_MAX_OUT (1u << 20)

typedef struct kb_kc_file {
    char *path;
    char *dir;              /* directory of path, for relative names */
    yaml_document_t doc;
    bool have_doc;          /* doc was loaded and has a root */
} kb_kc_file_t;

typedef struct kb_kc_files {
    kb_kc_file_t f[KB_KC_MAX_FILES];
    size_t n;
} kb_kc_files_t;

/* ---- YAML node helpers ---- */

static const char *kb_yaml_scalar(yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static yaml_node_t *kb_yaml_get(yaml_document_t *doc, yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const char *k = kb_yaml_scalar(yaml_document_get_node(doc, p->key));
        if (k && !strcmp(k, key))
            return yaml_document_get_node(doc, p->value);
    }
    return NULL;
}

static const char *kb_yaml_get_str(yaml_document_t *doc, yaml_node_t *map, const char *key) {
    return kb_yaml_scalar(kb_yaml_get(doc, map, key));
}

/* In section ("contexts", "clusters", "users"), the entry named name: its
 * inner mapping (under field) and the file it was found in. */
static yaml_node_t *kb_kc_find(kb_kc_files_t *fs, const char *section, const char *field, const char *name,
                               kb_kc_file_t **from) {
    for (size_t i = 0; i < fs->n; i++) {
        kb_kc_file_t *f = &fs->f[i];
        if (!f->have_doc)
            continue;
        yaml_node_t *seq = kb_yaml_get(&f->doc, yaml_document_get_root_node(&f->doc), section);
        if (!seq || seq->type != YAML_SEQUENCE_NODE)
            continue;
        for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++) {
            yaml_node_t *entry = yaml_document_get_node(&f->doc, *it);
            const char *n = kb_yaml_get_str(&f->doc, entry, "name");
            if (n && !strcmp(n, name)) {
                *from = f;
                return kb_yaml_get(&f->doc, entry, field);
            }
        }
    }
    return NULL;
}

/* ---- small helpers ---- */

static char *kb_kc_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        return kb_strdup(".");
    if (slash == path)
        return kb_strdup("/");
    return kb_strndup(path, (size_t)(slash - path));
}

/* A file name from the kubeconfig: absolute as is, relative to dir otherwise. */
static char *kb_kc_abspath(const kb_kc_file_t *f, const char *name) {
    if (!name || !name[0])
        return kb_strdup("");
    if (name[0] == '/')
        return kb_strdup(name);
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_appendf(&b, "%s/%s", f->dir, name);
    return kb_buf_steal(&b, NULL);
}

static int kb_b64_val(int c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* Standard or URL-safe base64, whitespace ignored, padding optional. */
static bool kb_b64_decode(const char *s, kb_blob_t *out) {
    size_t n = strlen(s);
    unsigned char *d = kb_malloc(n / 4 * 3 + 3);
    size_t len = 0;
    uint32_t acc = 0;
    int bits = 0;
    bool pad = false;
    for (const char *p = s; *p; p++) {
        if (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
            continue;
        if (*p == '=') {
            pad = true;
            continue;
        }
        int v = kb_b64_val((unsigned char)*p);
        if (v < 0 || pad) {
            free(d);
            return false;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            d[len++] = (unsigned char)(acc >> bits);
        }
    }
    out->data = d;
    out->len = len;
    return true;
}

void kb_blob_free(kb_blob_t *b) {
    if (b->data) {
        memset(b->data, 0, b->len); /* key material does not linger in freed memory */
        free(b->data);
    }
    b->data = NULL;
    b->len = 0;
}

/* ---- loading ---- */

static void kb_kc_files_free(kb_kc_files_t *fs) {
    for (size_t i = 0; i < fs->n; i++) {
        free(fs->f[i].path);
        free(fs->f[i].dir);
        yaml_document_delete(&fs->f[i].doc);
    }
    fs->n = 0;
}

/* Parse one file. Returns 1 loaded, 0 missing (ENOENT), -1 error in errstr. */
static int kb_kc_file_load(kb_kc_file_t *f, const char *path, char *errstr, size_t errstr_size) {
    memset(f, 0, sizeof(*f));
    FILE *in = fopen(path, "rb");
    if (!in) {
        if (errno == ENOENT)
            return 0;
        snprintf(errstr, errstr_size, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    yaml_parser_t parser;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, in);
    int ok = yaml_parser_load(&parser, &f->doc);
    if (!ok) {
        if (parser.context)
            snprintf(errstr, errstr_size, "%s:%zu: YAML does not parse: %s %s that starts on line %zu", path,
                     parser.problem_mark.line + 1, parser.problem ? parser.problem : "error", parser.context,
                     parser.context_mark.line + 1);
        else
            snprintf(errstr, errstr_size, "%s:%zu: YAML does not parse: %s", path, parser.problem_mark.line + 1,
                     parser.problem ? parser.problem : "error");
    }
    bool read_err = ferror(in);
    yaml_parser_delete(&parser);
    fclose(in);
    if (!ok)
        return -1;
    if (read_err) {
        yaml_document_delete(&f->doc);
        snprintf(errstr, errstr_size, "%s: read error", path);
        return -1;
    }
    yaml_node_t *root = yaml_document_get_root_node(&f->doc);
    if (root && root->type != YAML_MAPPING_NODE) {
        snprintf(errstr, errstr_size, "%s:%zu: not a kubeconfig: the top level is not a mapping", path,
                 root->start_mark.line + 1);
        yaml_document_delete(&f->doc);
        return -1;
    }
    f->have_doc = root != NULL;
    f->path = kb_strdup(path);
    f->dir = kb_kc_dirname(path);
    return 1;
}

/* One string field, into *out (absolute path when is_path). */
static void kb_kc_take_str(kb_kc_file_t *f, yaml_node_t *map, const char *key, bool is_path, char **out) {
    const char *v = kb_yaml_get_str(&f->doc, map, key);
    free(*out);
    *out = is_path ? kb_kc_abspath(f, v) : kb_strdup(v ? v : "");
}

static bool kb_kc_take_blob(kb_kc_file_t *f, yaml_node_t *map, const char *key, kb_blob_t *out, char *errstr,
                            size_t errstr_size) {
    yaml_node_t *n = kb_yaml_get(&f->doc, map, key);
    const char *v = kb_yaml_scalar(n);
    if (!v || !v[0])
        return true;
    if (!kb_b64_decode(v, out)) {
        snprintf(errstr, errstr_size, "%s:%zu: %s is not valid base64", f->path, n->start_mark.line + 1, key);
        return false;
    }
    return true;
}

static bool kb_kc_take_exec(kb_kc_file_t *f, yaml_node_t *ex, kb_kubeconfig_exec_t *out, char *errstr,
                            size_t errstr_size) {
    yaml_document_t *doc = &f->doc;
    const char *cmd = kb_yaml_get_str(doc, ex, "command");
    if (!cmd || !cmd[0]) {
        snprintf(errstr, errstr_size, "%s:%zu: user exec: command is missing", f->path, ex->start_mark.line + 1);
        return false;
    }
    /* client-go: a relative command with a '/' is relative to the kubeconfig; a bare name is looked up in PATH. */
    out->command = strchr(cmd, '/') ? kb_kc_abspath(f, cmd) : kb_strdup(cmd);
    const char *av = kb_yaml_get_str(doc, ex, "apiVersion");
    out->api_version = kb_strdup(av ? av : "client.authentication.k8s.io/v1");
    yaml_node_t *args = kb_yaml_get(doc, ex, "args");
    if (args && args->type == YAML_SEQUENCE_NODE) {
        size_t n = (size_t)(args->data.sequence.items.top - args->data.sequence.items.start);
        out->args = kb_calloc(n + 1, sizeof(char *));
        for (yaml_node_item_t *it = args->data.sequence.items.start; it < args->data.sequence.items.top; it++) {
            const char *a = kb_yaml_scalar(yaml_document_get_node(doc, *it));
            out->args[out->n_args++] = kb_strdup(a ? a : "");
        }
    }
    yaml_node_t *env = kb_yaml_get(doc, ex, "env");
    if (env && env->type == YAML_SEQUENCE_NODE) {
        size_t n = (size_t)(env->data.sequence.items.top - env->data.sequence.items.start);
        out->env = kb_calloc(n + 1, sizeof(char *));
        for (yaml_node_item_t *it = env->data.sequence.items.start; it < env->data.sequence.items.top; it++) {
            yaml_node_t *e = yaml_document_get_node(doc, *it);
            const char *name = kb_yaml_get_str(doc, e, "name");
            const char *value = kb_yaml_get_str(doc, e, "value");
            if (!name || !name[0] || strchr(name, '=')) {
                snprintf(errstr, errstr_size, "%s:%zu: user exec env: an entry needs a name", f->path,
                         e->start_mark.line + 1);
                return false;
            }
            kb_buf_t b = KB_BUF_INIT;
            kb_buf_appendf(&b, "%s=%s", name, value ? value : "");
            out->env[out->n_env++] = kb_buf_steal(&b, NULL);
        }
    }
    return true;
}

static bool kb_kc_resolve(kb_kc_files_t *fs, const char *context, kb_kubeconfig_t *kc, char *errstr,
                          size_t errstr_size) {
    const char *first = fs->f[0].path;
    const char *ctx = context && context[0] ? context : NULL;
    for (size_t i = 0; !ctx && i < fs->n; i++) {
        if (!fs->f[i].have_doc)
            continue;
        const char *cur = kb_yaml_get_str(&fs->f[i].doc, yaml_document_get_root_node(&fs->f[i].doc),
                                          "current-context");
        if (cur && cur[0])
            ctx = cur;
    }
    if (!ctx) {
        snprintf(errstr, errstr_size, "%s: no current-context is set and cluster.context is empty", first);
        return false;
    }
    kc->context = kb_strdup(ctx);
    kb_kc_file_t *cf = NULL, *clf = NULL, *uf = NULL;
    yaml_node_t *c = kb_kc_find(fs, "contexts", "context", ctx, &cf);
    if (!c) {
        snprintf(errstr, errstr_size, "%s: context \"%s\" not found", first, ctx);
        return false;
    }
    kc->path = kb_strdup(cf->path);
    const char *cluster = kb_yaml_get_str(&cf->doc, c, "cluster");
    const char *user = kb_yaml_get_str(&cf->doc, c, "user");
    if (!cluster || !cluster[0]) {
        snprintf(errstr, errstr_size, "%s:%zu: context \"%s\" names no cluster", cf->path, c->start_mark.line + 1,
                 ctx);
        return false;
    }
    yaml_node_t *cl = kb_kc_find(fs, "clusters", "cluster", cluster, &clf);
    if (!cl) {
        snprintf(errstr, errstr_size, "%s: cluster \"%s\" (of context \"%s\") not found", cf->path, cluster, ctx);
        return false;
    }
    kb_kc_take_str(clf, cl, "server", false, &kc->server);
    if (!kc->server[0]) {
        snprintf(errstr, errstr_size, "%s:%zu: cluster \"%s\" has no server", clf->path, cl->start_mark.line + 1,
                 cluster);
        return false;
    }
    kb_kc_take_str(clf, cl, "tls-server-name", false, &kc->tls_server_name);
    kb_kc_take_str(clf, cl, "certificate-authority", true, &kc->ca_file);
    const char *insecure = kb_yaml_get_str(&clf->doc, cl, "insecure-skip-tls-verify");
    kc->insecure = insecure && !strcmp(insecure, "true");
    if (!kb_kc_take_blob(clf, cl, "certificate-authority-data", &kc->ca_data, errstr, errstr_size))
        return false;

    if (!user || !user[0])
        return true; /* anonymous */
    yaml_node_t *u = kb_kc_find(fs, "users", "user", user, &uf);
    if (!u) {
        snprintf(errstr, errstr_size, "%s: user \"%s\" (of context \"%s\") not found", cf->path, user, ctx);
        return false;
    }
    kb_kc_take_str(uf, u, "token", false, &kc->token);
    kb_kc_take_str(uf, u, "tokenFile", true, &kc->token_file);
    kb_kc_take_str(uf, u, "client-certificate", true, &kc->client_cert_file);
    kb_kc_take_str(uf, u, "client-key", true, &kc->client_key_file);
    kb_kc_take_str(uf, u, "username", false, &kc->username);
    kb_kc_take_str(uf, u, "password", false, &kc->password);
    if (!kb_kc_take_blob(uf, u, "client-certificate-data", &kc->client_cert_data, errstr, errstr_size) ||
        !kb_kc_take_blob(uf, u, "client-key-data", &kc->client_key_data, errstr, errstr_size))
        return false;
    bool have_cert = kc->client_cert_file[0] || kc->client_cert_data.data;
    bool have_key = kc->client_key_file[0] || kc->client_key_data.data;
    if (have_cert != have_key) {
        snprintf(errstr, errstr_size, "%s:%zu: user \"%s\": a client certificate needs a client key and vice versa",
                 uf->path, u->start_mark.line + 1, user);
        return false;
    }
    yaml_node_t *ex = kb_yaml_get(&uf->doc, u, "exec");
    if (ex && ex->type == YAML_MAPPING_NODE && !kb_kc_take_exec(uf, ex, &kc->exec, errstr, errstr_size))
        return false;
    if (kb_yaml_get(&uf->doc, u, "auth-provider")) {
        snprintf(errstr, errstr_size, "%s:%zu: user \"%s\": auth-provider plugins are not supported; use exec",
                 uf->path, u->start_mark.line + 1, user);
        return false;
    }
    return true;
}

static void kb_kc_init_strings(kb_kubeconfig_t *kc) {
    char **s[] = {&kc->server, &kc->tls_server_name, &kc->ca_file, &kc->token, &kc->token_file,
                  &kc->client_cert_file, &kc->client_key_file, &kc->username, &kc->password};
    for (size_t i = 0; i < KB_ARRAY_LEN(s); i++)
        *s[i] = kb_strdup("");
}

kb_kubeconfig_t *kb_kubeconfig_load(const char *path, const char *context, char *errstr, size_t errstr_size) {
    kb_kc_files_t fs = {.n = 0};
    kb_kubeconfig_t *kc = NULL;
    char *list = kb_strdup(path ? path : "");
    bool any_missing = false;
    char *save = NULL;
    for (char *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
        if (!p[0])
            continue;
        if (fs.n == KB_KC_MAX_FILES) {
            snprintf(errstr, errstr_size, "%s: more than %d kubeconfig files in one list", p, KB_KC_MAX_FILES);
            goto fail;
        }
        int r = kb_kc_file_load(&fs.f[fs.n], p, errstr, errstr_size);
        if (r < 0)
            goto fail;
        if (r == 0) {
            /* Like kubectl: a missing file in a list is skipped, a single missing file is an error. */
            if (!any_missing)
                snprintf(errstr, errstr_size, "%s: cannot read: %s", p, strerror(ENOENT));
            any_missing = true;
            continue;
        }
        fs.n++;
    }
    if (fs.n == 0) {
        if (!any_missing)
            snprintf(errstr, errstr_size, "kubeconfig: no file given");
        goto fail;
    }
    kc = kb_calloc(1, sizeof(*kc));
    kb_kc_init_strings(kc);
    if (!kb_kc_resolve(&fs, context, kc, errstr, errstr_size))
        goto fail;
    size_t n = strlen(kc->server);
    while (n > 0 && kc->server[n - 1] == '/')
        kc->server[--n] = '\0';
    kb_kc_files_free(&fs);
    free(list);
    return kc;
fail:
    kb_kubeconfig_free(kc);
    kb_kc_files_free(&fs);
    free(list);
    return NULL;
}

static void kb_strv_free(char **v, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void kb_kubeconfig_free(kb_kubeconfig_t *kc) {
    if (!kc)
        return;
    free(kc->path);
    free(kc->context);
    free(kc->server);
    free(kc->tls_server_name);
    free(kc->ca_file);
    kb_blob_free(&kc->ca_data);
    kb_secret_free(kc->token);
    free(kc->token_file);
    free(kc->client_cert_file);
    free(kc->client_key_file);
    kb_blob_free(&kc->client_cert_data);
    kb_blob_free(&kc->client_key_data);
    free(kc->username);
    kb_secret_free(kc->password);
    free(kc->exec.command);
    kb_strv_free(kc->exec.args, kc->exec.n_args);
    kb_strv_free(kc->exec.env, kc->exec.n_env);
    free(kc->exec.api_version);
    free(kc);
}

/* ---- exec credential plugins ---- */

bool kb_kubeconfig_parse_time(const char *s, int64_t *out) {
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    int consumed = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
               &tm.tm_sec, &consumed) != 6 ||
        consumed != 19)
        return false;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    const char *p = s + consumed;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            ;
    int64_t offset = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int hh, mm, k = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &hh, &mm, &k) != 2 || k != 5)
            return false;
        offset = (int64_t)(hh * 3600 + mm * 60) * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return false;
    }
    if (*p)
        return false;
    *out = (int64_t)timegm(&tm) - offset;
    return true;
}

void kb_exec_cred_fini(kb_exec_cred_t *cred) {
    kb_secret_free(cred->token);
    kb_blob_free(&cred->cert);
    kb_blob_free(&cred->key);
    memset(cred, 0, sizeof(*cred));
}

static kb_err_t kb_exec_parse(const char *out, size_t len, kb_exec_cred_t *cred, char *errstr, size_t errstr_size) {
    json_error_t jerr;
    json_t *root = json_loadb(out, len, 0, &jerr);
    if (!root) {
        snprintf(errstr, errstr_size, "the ExecCredential on stdout is not JSON: %s (line %d)", jerr.text, jerr.line);
        return KB_ERR_PARSE;
    }
    kb_err_t err = KB_ERR_PARSE;
    const char *kind = json_string_value(json_object_get(root, "kind"));
    json_t *status = json_object_get(root, "status");
    if (!kind || strcmp(kind, "ExecCredential") != 0 || !json_is_object(status)) {
        snprintf(errstr, errstr_size, "stdout is not an ExecCredential with a status");
        goto out;
    }
    const char *token = json_string_value(json_object_get(status, "token"));
    const char *cert = json_string_value(json_object_get(status, "clientCertificateData"));
    const char *key = json_string_value(json_object_get(status, "clientKeyData"));
    const char *exp = json_string_value(json_object_get(status, "expirationTimestamp"));
    if ((!token || !token[0]) && (!cert || !cert[0] || !key || !key[0])) {
        snprintf(errstr, errstr_size, "the ExecCredential has neither status.token nor "
                                      "status.clientCertificateData + clientKeyData");
        goto out;
    }
    if (exp && exp[0] && !kb_kubeconfig_parse_time(exp, &cred->expires_unix)) {
        snprintf(errstr, errstr_size, "status.expirationTimestamp \"%s\" is not an RFC 3339 time", exp);
        goto out;
    }
    cred->token = kb_strdup(token ? token : "");
    if (cert && cert[0] && key && key[0]) {
        cred->cert.len = strlen(cert);
        cred->cert.data = kb_memdup(cert, cred->cert.len);
        cred->key.len = strlen(key);
        cred->key.data = kb_memdup(key, cred->key.len);
    }
    err = KB_OK;
out:
    json_decref(root);
    return err;
}

/* environ + exec env + KUBERNETES_EXEC_INFO; the strings are borrowed except the last. */
static char **kb_exec_envp(const kb_kubeconfig_exec_t *exec, char **info) {
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = kb_calloc(n + exec->n_env + 2, sizeof(char *));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool overridden = !strncmp(environ[i], "KUBERNETES_EXEC_INFO=", 21);
        for (size_t j = 0; j < exec->n_env && !overridden; j++) {
            size_t nl = (size_t)(strchr(exec->env[j], '=') - exec->env[j]);
            overridden = !strncmp(environ[i], exec->env[j], nl + 1);
        }
        if (!overridden)
            envp[k++] = environ[i];
    }
    for (size_t j = 0; j < exec->n_env; j++)
        envp[k++] = exec->env[j];
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_appendf(&b, "KUBERNETES_EXEC_INFO={\"apiVersion\":\"%s\",\"kind\":\"ExecCredential\","
                       "\"spec\":{\"interactive\":false}}",
                   exec->api_version);
    *info = kb_buf_steal(&b, NULL);
    envp[k] = *info;
    return envp;
}

#define KB_EXEC_POLL_MS 100

static bool kb_exec_stopped(const _Atomic bool *stop) {
    return stop && atomic_load(stop);
}

/* Read fd until EOF, the deadline, stop or max bytes. KB_OK at EOF. */
static kb_err_t kb_exec_read(int fd, kb_buf_t *out, int64_t deadline_ns, const _Atomic bool *stop) {
    for (;;) {
        int64_t left_ms = (deadline_ns - kb_now_mono_ns()) / 1000000;
        if (left_ms <= 0)
            return KB_ERR_TIMEDOUT;
        if (kb_exec_stopped(stop))
            return KB_ERR_STOPPED;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)(left_ms > KB_EXEC_POLL_MS ? KB_EXEC_POLL_MS : left_ms));
        if (r < 0 && errno != EINTR)
            return KB_ERR_IO;
        if (r <= 0)
            continue;
        char chunk[4096];
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return KB_ERR_IO;
        if (n == 0)
            return KB_OK;
        if (out->len + (size_t)n > KB_EXEC_MAX_OUT)
            return KB_ERR_TOOBIG;
        kb_buf_append(out, chunk, (size_t)n);
    }
}

/* Reap pid by the same deadline: a plugin may close its output and keep
 * running. On the deadline or stop, kill its whole process group (what it
 * started too) and reap. KB_OK when it exited by itself. */
static kb_err_t kb_exec_wait(pid_t pid, int *status, int64_t deadline_ns, const _Atomic bool *stop) {
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            return KB_OK;
        kb_err_t err = KB_OK;
        if (kb_now_mono_ns() >= deadline_ns)
            err = KB_ERR_TIMEDOUT;
        else if (kb_exec_stopped(stop))
            err = KB_ERR_STOPPED;
        if (err != KB_OK) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            while (waitpid(pid, status, 0) < 0 && errno == EINTR)
                ;
            return err;
        }
        struct timespec ts = {0, KB_EXEC_POLL_MS / 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

kb_err_t kb_kubeconfig_exec_run(const kb_kubeconfig_exec_t *exec, int timeout_s, const _Atomic bool *stop,
                                kb_exec_cred_t *cred, char *errstr, size_t errstr_size) {
    memset(cred, 0, sizeof(*cred));
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        snprintf(errstr, errstr_size, "pipe: %s", strerror(errno));
        return KB_ERR_IO;
    }
    char **argv = kb_calloc(exec->n_args + 2, sizeof(char *));
    argv[0] = exec->command;
    for (size_t i = 0; i < exec->n_args; i++)
        argv[i + 1] = exec->args[i];
    char *info = NULL;
    char **envp = kb_exec_envp(exec, &info);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0); /* its own group: a timeout kills what it started too */
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    pid_t pid;
    int rc = posix_spawnp(&pid, exec->command, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(pfd[1]);
    free(argv);
    free(envp);
    free(info);
    if (rc != 0) {
        close(pfd[0]);
        snprintf(errstr, errstr_size, "exec plugin \"%s\" cannot start: %s", exec->command, strerror(rc));
        return KB_ERR_IO;
    }
    kb_buf_t out = KB_BUF_INIT;
    int64_t deadline = kb_now_mono_ns() + (int64_t)timeout_s * 1000000000;
    kb_err_t err = kb_exec_read(pfd[0], &out, deadline, stop);
    close(pfd[0]);
    bool output_done = err == KB_OK;
    if (err != KB_OK) { /* kill now: the group too, even when its leader has exited already */
        kill(-pid, SIGKILL);
        deadline = 0;
    }
    int status = 0;
    kb_err_t werr = kb_exec_wait(pid, &status, deadline, stop);
    if (err == KB_OK)
        err = werr;
    if (err == KB_ERR_TIMEDOUT)
        snprintf(errstr, errstr_size, "exec plugin \"%s\" did not %s within %d s (killed with its process group)",
                 exec->command, output_done ? "exit after closing its output" : "finish", timeout_s);
    else if (err == KB_ERR_STOPPED)
        snprintf(errstr, errstr_size, "exec plugin \"%s\" killed: kbridge is stopping", exec->command);
    else if (err != KB_OK)
        snprintf(errstr, errstr_size, "exec plugin \"%s\": %s reading its output", exec->command, kb_err_str(err));
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(errstr, errstr_size, "exec plugin \"%s\" failed (%s %d)", exec->command,
                 WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status)
                                                                                 : WTERMSIG(status));
        err = KB_ERR_IO;
    } else {
        err = kb_exec_parse(out.data ? out.data : "", out.len, cred, errstr, errstr_size);
        if (err == KB_OK)
            goto done;
        char why[256];
        snprintf(why, sizeof(why), "%s", errstr);
        snprintf(errstr, errstr_size, "exec plugin \"%s\": %s", exec->command, why);
    }
done:
    if (out.data)
        memset(out.data, 0, out.len);
    kb_buf_fini(&out);
    return err;
}
