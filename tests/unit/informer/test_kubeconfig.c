/* tests/unit/informer/test_kubeconfig.c — kubeconfig resolution (contexts,
 * clusters, users, inline data, relative paths, $KUBECONFIG lists), the
 * errors a user sees, exec credential plugins, where kb_apiclient_new
 * takes the server from (in-cluster, kubeconfig, explicit), and what a 401
 * does (token file re-read, exec plugin re-run, one repeat) against a small
 * HTTP server on 127.0.0.1. */
#include "config/config.h"
#include "informer/apiclient.h"
#include "informer/kubeconfig.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/kbtest-kubeconfig-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

/* Write dir/name with text; returns the path (static buffer per call site is enough here). */
static const char *put(const char *name, const char *text, char *path, size_t size) {
    snprintf(path, size, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static const char *const KC = "apiVersion: v1\n"
                              "kind: Config\n"
                              "current-context: dev\n"
                              "clusters:\n"
                              "- name: c-dev\n"
                              "  cluster:\n"
                              "    server: https://127.0.0.1:6443/\n"
                              "    certificate-authority-data: aGVsbG8gY2E=\n" /* "hello ca" */
                              "- name: c-prod\n"
                              "  cluster:\n"
                              "    server: https://10.0.0.1:443\n"
                              "    certificate-authority: certs/ca.crt\n"
                              "    insecure-skip-tls-verify: true\n"
                              "contexts:\n"
                              "- name: dev\n"
                              "  context: {cluster: c-dev, user: u-token}\n"
                              "- name: prod\n"
                              "  context:\n"
                              "    cluster: c-prod\n"
                              "    user: u-cert\n"
                              "- name: broken\n"
                              "  context: {cluster: c-dev, user: nobody}\n"
                              "- name: plugin\n"
                              "  context: {cluster: c-dev, user: u-exec}\n"
                              "users:\n"
                              "- name: u-token\n"
                              "  user:\n"
                              "    token: s3cret\n"
                              "- name: u-cert\n"
                              "  user:\n"
                              "    client-certificate: certs/client.crt\n"
                              "    client-key: /abs/client.key\n"
                              "    username: alice\n"
                              "    password: pw\n"
                              "- name: u-exec\n"
                              "  user:\n"
                              "    exec:\n"
                              "      apiVersion: client.authentication.k8s.io/v1beta1\n"
                              "      command: ./plugin.sh\n"
                              "      args: [\"--cluster\", \"dev\"]\n"
                              "      env:\n"
                              "      - name: KB_PLUGIN_MODE\n"
                              "        value: token\n";

static void test_current_context_token_and_inline_ca(void **state) {
    (void)state;
    char p[512], err[512] = "";
    kb_kubeconfig_t *kc = kb_kubeconfig_load(put("config", KC, p, sizeof(p)), NULL, err, sizeof(err));
    assert_non_null(kc);
    assert_string_equal(kc->context, "dev");
    assert_string_equal(kc->server, "https://127.0.0.1:6443");
    assert_string_equal(kc->token, "s3cret");
    assert_int_equal(kc->ca_data.len, 8);
    assert_memory_equal(kc->ca_data.data, "hello ca", 8);
    assert_false(kc->insecure);
    assert_null(kc->exec.command);
    kb_kubeconfig_free(kc);
}

static void test_named_context_relative_paths_basic_auth(void **state) {
    (void)state;
    char p[512], err[512] = "", want[600];
    kb_kubeconfig_t *kc = kb_kubeconfig_load(put("config", KC, p, sizeof(p)), "prod", err, sizeof(err));
    assert_non_null(kc);
    assert_string_equal(kc->server, "https://10.0.0.1:443");
    snprintf(want, sizeof(want), "%s/certs/ca.crt", dir);
    assert_string_equal(kc->ca_file, want);
    snprintf(want, sizeof(want), "%s/certs/client.crt", dir);
    assert_string_equal(kc->client_cert_file, want);
    assert_string_equal(kc->client_key_file, "/abs/client.key");
    assert_true(kc->insecure);
    assert_string_equal(kc->username, "alice");
    assert_string_equal(kc->password, "pw");
    kb_kubeconfig_free(kc);
}

static void test_exec_entry(void **state) {
    (void)state;
    char p[512], err[512] = "", want[600];
    kb_kubeconfig_t *kc = kb_kubeconfig_load(put("config", KC, p, sizeof(p)), "plugin", err, sizeof(err));
    assert_non_null(kc);
    snprintf(want, sizeof(want), "%s/./plugin.sh", dir);
    assert_string_equal(kc->exec.command, want);
    assert_int_equal(kc->exec.n_args, 2);
    assert_string_equal(kc->exec.args[1], "dev");
    assert_int_equal(kc->exec.n_env, 1);
    assert_string_equal(kc->exec.env[0], "KB_PLUGIN_MODE=token");
    assert_string_equal(kc->exec.api_version, "client.authentication.k8s.io/v1beta1");
    kb_kubeconfig_free(kc);
}

static void test_errors_name_the_file(void **state) {
    (void)state;
    char p[512], err[512] = "";
    put("config", KC, p, sizeof(p));
    assert_null(kb_kubeconfig_load(p, "nope", err, sizeof(err)));
    assert_non_null(strstr(err, p));
    assert_non_null(strstr(err, "context \"nope\" not found"));

    assert_null(kb_kubeconfig_load(p, "broken", err, sizeof(err)));
    assert_non_null(strstr(err, "user \"nobody\""));

    put("bad.yaml", "clusters:\n- name: x\n  cluster: {server: [\n", p, sizeof(p));
    assert_null(kb_kubeconfig_load(p, NULL, err, sizeof(err)));
    char want[600];
    snprintf(want, sizeof(want), "%s:", p);
    assert_int_equal(strncmp(err, want, strlen(want)), 0);
    assert_non_null(strstr(err, "YAML does not parse"));

    snprintf(p, sizeof(p), "%s/missing", dir);
    assert_null(kb_kubeconfig_load(p, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "cannot read"));
    assert_non_null(strstr(err, p));

    put("nocur", "clusters: []\n", p, sizeof(p));
    assert_null(kb_kubeconfig_load(p, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "current-context"));

    put("b64", "current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n"
               "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: '!!'}}]\n",
        p, sizeof(p));
    assert_null(kb_kubeconfig_load(p, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "base64"));
}

static void test_list_first_definition_wins(void **state) {
    (void)state;
    char a[512], b[512], list[1400], err[512] = "";
    put("a", "current-context: over\ncontexts: [{name: over, context: {cluster: c-dev, user: u-token}}]\n"
             "users: [{name: u-token, user: {token: from-a}}]\n",
        a, sizeof(a));
    put("b", KC, b, sizeof(b));
    snprintf(list, sizeof(list), "%s/missing:%s:%s", dir, a, b);
    kb_kubeconfig_t *kc = kb_kubeconfig_load(list, NULL, err, sizeof(err));
    assert_non_null(kc);
    assert_string_equal(kc->context, "over");
    assert_string_equal(kc->token, "from-a");
    assert_string_equal(kc->server, "https://127.0.0.1:6443");
    kb_kubeconfig_free(kc);
}

static void test_parse_time(void **state) {
    (void)state;
    int64_t t = 0;
    assert_true(kb_kubeconfig_parse_time("1970-01-01T00:01:00Z", &t));
    assert_int_equal(t, 60);
    assert_true(kb_kubeconfig_parse_time("1970-01-01T01:00:00.123+01:00", &t));
    assert_int_equal(t, 0);
    assert_false(kb_kubeconfig_parse_time("1970-01-01 00:00:00Z", &t));
    assert_false(kb_kubeconfig_parse_time("1970-01-01T00:00:00", &t));
}

static kb_kubeconfig_exec_t plugin(const char *script, char *path, size_t size) {
    put("plugin.sh", script, path, size);
    assert_int_equal(chmod(path, 0700), 0);
    static char *env[] = {"KB_PLUGIN_MODE=token"};
    kb_kubeconfig_exec_t ex = {.command = path, .env = env, .n_env = 1,
                               .api_version = "client.authentication.k8s.io/v1"};
    return ex;
}

static void test_exec_plugin_runs(void **state) {
    (void)state;
    char p[512], err[512] = "";
    kb_kubeconfig_exec_t ex = plugin(
        "#!/bin/sh\n"
        "case \"$KUBERNETES_EXEC_INFO\" in *ExecCredential*) ;; *) exit 9;; esac\n"
        "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
        "\"status\":{\"token\":\"tok-'$KB_PLUGIN_MODE'\",\"expirationTimestamp\":\"2030-01-01T00:00:00Z\"}}'\n",
        p, sizeof(p));
    kb_exec_cred_t cred;
    assert_int_equal(kb_kubeconfig_exec_run(&ex, 30, NULL, &cred, err, sizeof(err)), KB_OK);
    assert_string_equal(cred.token, "tok-token");
    assert_int_equal(cred.expires_unix, 1893456000);
    kb_exec_cred_fini(&cred);

    ex = plugin("#!/bin/sh\necho '{\"kind\":\"ExecCredential\",\"status\":{\"clientCertificateData\":\"CERT\","
                "\"clientKeyData\":\"KEY\"}}'\n",
                p, sizeof(p));
    assert_int_equal(kb_kubeconfig_exec_run(&ex, 30, NULL, &cred, err, sizeof(err)), KB_OK);
    assert_string_equal(cred.token, "");
    assert_int_equal(cred.cert.len, 4);
    assert_int_equal(cred.expires_unix, 0);
    kb_exec_cred_fini(&cred);
}

/* pid no longer runs: gone, or a zombie waiting for init. */
static bool child_gone(int pid) {
    for (int i = 0; i < 100; i++) {
        char path[64], stat[256] = "";
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f)
            return true;
        size_t n = fread(stat, 1, sizeof(stat) - 1, f);
        fclose(f);
        stat[n] = '\0';
        const char *close_paren = strrchr(stat, ')');
        if (close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z')
            return true;
        usleep(50000);
    }
    return false;
}

static void test_exec_plugin_failures(void **state) {
    (void)state;
    char p[512], err[512] = "";
    kb_exec_cred_t cred;
    kb_kubeconfig_exec_t ex = plugin("#!/bin/sh\necho 'login required' >&2\nexit 3\n", p, sizeof(p));
    assert_int_not_equal(kb_kubeconfig_exec_run(&ex, 30, NULL, &cred, err, sizeof(err)), KB_OK);
    assert_non_null(strstr(err, "exit status 3"));

    ex = plugin("#!/bin/sh\necho not json\n", p, sizeof(p));
    assert_int_equal(kb_kubeconfig_exec_run(&ex, 30, NULL, &cred, err, sizeof(err)), KB_ERR_PARSE);
    assert_non_null(strstr(err, "not JSON"));

    ex = plugin("#!/bin/sh\nexec sleep 30\n", p, sizeof(p));
    assert_int_equal(kb_kubeconfig_exec_run(&ex, 1, NULL, &cred, err, sizeof(err)), KB_ERR_TIMEDOUT);
    assert_non_null(strstr(err, "killed"));

    /* Output is capped: 2 MiB is refused, the plugin killed. */
    ex = plugin("#!/bin/sh\nhead -c 2097152 /dev/zero\nsleep 30\n", p, sizeof(p));
    assert_int_equal(kb_kubeconfig_exec_run(&ex, 30, NULL, &cred, err, sizeof(err)), KB_ERR_TOOBIG);
    assert_non_null(strstr(err, "too large"));

    /* Closes its output and keeps running: killed by the same deadline. */
    ex = plugin("#!/bin/sh\nexec >&-\nexec sleep 30\n", p, sizeof(p));
    assert_int_equal(kb_kubeconfig_exec_run(&ex, 1, NULL, &cred, err, sizeof(err)), KB_ERR_TIMEDOUT);
    assert_non_null(strstr(err, "did not exit after closing its output"));

    /* What it started is killed with it (its process group). */
    char pidfile[600];
    snprintf(pidfile, sizeof(pidfile), "%s.child", p);
    char script[1400];
    snprintf(script, sizeof(script), "#!/bin/sh\nsleep 30 &\necho $! > %s\nexit 0\n", pidfile);
    ex = plugin(script, p, sizeof(p));
    assert_int_equal(kb_kubeconfig_exec_run(&ex, 1, NULL, &cred, err, sizeof(err)), KB_ERR_TIMEDOUT);
    FILE *f = fopen(pidfile, "r");
    assert_non_null(f);
    int child = 0;
    assert_int_equal(fscanf(f, "%d", &child), 1);
    fclose(f);
    assert_true(child_gone(child));

    /* A stop flag ends the wait at once. */
    ex = plugin("#!/bin/sh\nexec sleep 30\n", p, sizeof(p));
    _Atomic bool stop = true;
    assert_int_equal(kb_kubeconfig_exec_run(&ex, 30, &stop, &cred, err, sizeof(err)), KB_ERR_STOPPED);
    assert_non_null(strstr(err, "stopping"));

    ex.command = "/nonexistent/kb-plugin";
    assert_int_not_equal(kb_kubeconfig_exec_run(&ex, 1, NULL, &cred, err, sizeof(err)), KB_OK);
    assert_non_null(strstr(err, "cannot start"));
}

static kb_config_cluster_t cluster_conf(void) {
    kb_config_cluster_t c = {.name = "t", .server = "", .kubeconfig = "", .context = "", .token_file = "",
                             .ca_file = "", .client_cert = "", .client_key = "", .qps = 50, .burst = 100};
    return c;
}

static void test_apiclient_sources(void **state) {
    (void)state;
    char p[512], err[512] = "";
    kb_config_cluster_t c = cluster_conf();

    /* In-cluster: the mount directory from KB_SA_DIR, the server from the environment. */
    put("token", "sa-token\n", p, sizeof(p));
    put("ca.crt", "ca\n", p, sizeof(p));
    setenv("KB_SA_DIR", dir, 1);
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "16443", 1);
    kb_apiclient_t *api = kb_apiclient_new(&c, err, sizeof(err));
    assert_non_null(api);
    assert_string_equal(kb_apiclient_server(api), "https://127.0.0.1:16443");
    kb_apiclient_destroy(api);

    /* An explicit server wins over the environment. */
    c.server = "http://127.0.0.1:1/";
    api = kb_apiclient_new(&c, err, sizeof(err));
    assert_non_null(api);
    assert_string_equal(kb_apiclient_server(api), "http://127.0.0.1:1");
    kb_apiclient_destroy(api);

    /* in_cluster = true without the environment: a clear error. */
    c.server = "";
    c.in_cluster = true;
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_null(kb_apiclient_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST"));
    c.in_cluster = false;

    /* Otherwise $KUBECONFIG and its current context. */
    setenv("KUBECONFIG", put("config", KC, p, sizeof(p)), 1);
    api = kb_apiclient_new(&c, err, sizeof(err));
    assert_non_null(api);
    assert_string_equal(kb_apiclient_server(api), "https://127.0.0.1:6443");
    kb_apiclient_destroy(api);
    c.context = "prod";
    api = kb_apiclient_new(&c, err, sizeof(err));
    assert_non_null(api);
    assert_string_equal(kb_apiclient_server(api), "https://10.0.0.1:443");
    kb_apiclient_destroy(api);
    c.context = "missing";
    assert_null(kb_apiclient_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "context \"missing\" not found"));
    unsetenv("KUBECONFIG");
    unsetenv("KB_SA_DIR");
}

/* A one-thread HTTP/1.1 server on 127.0.0.1 that answers 200 to "Authorization: Bearer good"
 * and 401 to anything else, one request per connection, until stopped. */
typedef struct fake_server {
    int fd;
    int port;
    pthread_t thread;
    atomic_bool stop;
    atomic_int requests, refused;
} fake_server_t;

static void *fake_server_main(void *arg) {
    fake_server_t *srv = arg;
    while (!atomic_load(&srv->stop)) {
        struct pollfd pfd = {.fd = srv->fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        int c = accept(srv->fd, NULL, NULL);
        if (c < 0)
            continue;
        char req[8192];
        size_t n = 0;
        while (n < sizeof(req) - 1) {
            struct pollfd cp = {.fd = c, .events = POLLIN};
            if (poll(&cp, 1, 5000) <= 0)
                break;
            ssize_t r = read(c, req + n, sizeof(req) - 1 - n);
            if (r <= 0)
                break;
            n += (size_t)r;
            req[n] = '\0';
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        req[n] = '\0';
        atomic_fetch_add(&srv->requests, 1);
        bool ok = strstr(req, "Authorization: Bearer good\r\n") != NULL;
        if (!ok)
            atomic_fetch_add(&srv->refused, 1);
        const char *resp = ok ? "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                                "Connection: close\r\n\r\n{}"
                              : "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                                "Connection: close\r\n\r\n{}";
        ssize_t w = write(c, resp, strlen(resp));
        (void)w;
        close(c);
    }
    return NULL;
}

static void fake_server_start(fake_server_t *srv) {
    memset(srv, 0, sizeof(*srv));
    srv->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(srv->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(srv->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(srv->fd, 16), 0);
    socklen_t len = sizeof(a);
    assert_int_equal(getsockname(srv->fd, (struct sockaddr *)&a, &len), 0);
    srv->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&srv->thread, NULL, fake_server_main, srv), 0);
}

static void fake_server_stop(fake_server_t *srv) {
    atomic_store(&srv->stop, true);
    pthread_join(srv->thread, NULL);
    close(srv->fd);
}

/* Rewrite a file but keep its modification time, so only a forced re-read can see the change. */
static void rewrite_same_mtime(const char *path, const char *text) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    char p[512];
    put(strrchr(path, '/') + 1, text, p, sizeof(p));
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
}

static long get_status(kb_apiclient_t *api, const char *path) {
    kb_buf_t body = KB_BUF_INIT;
    kb_api_response_t resp;
    kb_apiclient_get(api, path, NULL, NULL, &body, 1 << 20, 30, NULL, &resp);
    kb_buf_fini(&body);
    assert_int_equal(resp.err, KB_OK);
    return resp.status;
}

/* A 401 re-reads the token file at once (no waiting for a changed mtime) and repeats the request. */
static void test_401_rereads_token_file_and_retries(void **state) {
    (void)state;
    fake_server_t srv;
    fake_server_start(&srv);
    char server[64], tok[512];
    snprintf(server, sizeof(server), "http://127.0.0.1:%d", srv.port);
    put("sa-token", "stale\n", tok, sizeof(tok));
    kb_config_cluster_t c = cluster_conf();
    c.server = server;
    c.token_file = tok;
    char err[512];
    kb_apiclient_t *api = kb_apiclient_new(&c, err, sizeof(err));
    assert_non_null(api);
    assert_int_equal(get_status(api, "/api/v1/pods?limit=1"), 401); /* unchanged file: no retry */
    assert_int_equal(atomic_load(&srv.requests), 1);
    rewrite_same_mtime(tok, "good\n");
    assert_int_equal(get_status(api, "/api/v1/pods?limit=1"), 200);
    assert_int_equal(atomic_load(&srv.requests), 3); /* the 401, then the repeat with the new token */
    assert_int_equal(get_status(api, "/api/v1/pods?watch=true"), 200);
    assert_int_equal(atomic_load(&srv.refused), 2);
    kb_apiclient_destroy(api);
    fake_server_stop(&srv);
}

/* An exec plugin's credential is cached; a 401 runs the plugin again once and repeats the request. */
static void test_401_reruns_exec_plugin(void **state) {
    (void)state;
    fake_server_t srv;
    fake_server_start(&srv);
    char p[512], tokfile[512], script[1400], runs[512];
    put("exec-token", "stale", tokfile, sizeof(tokfile));
    snprintf(runs, sizeof(runs), "%s/runs", dir);
    snprintf(script, sizeof(script),
             "#!/bin/sh\necho x >> '%s'\n"
             "echo '{\"kind\":\"ExecCredential\",\"status\":{\"token\":\"'$(cat '%s')'\"}}'\n",
             runs, tokfile);
    put("plugin.sh", script, p, sizeof(p));
    assert_int_equal(chmod(p, 0700), 0);
    char kc[2048];
    snprintf(kc, sizeof(kc),
             "current-context: x\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:%d'}}]\n"
             "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
             "users: [{name: u, user: {exec: {command: ./plugin.sh}}}]\n",
             srv.port);
    kb_config_cluster_t c = cluster_conf();
    c.kubeconfig = (char *)put("exec.kubeconfig", kc, p, sizeof(p));
    char err[512];
    kb_apiclient_t *api = kb_apiclient_new(&c, err, sizeof(err));
    assert_non_null(api);
    assert_int_equal(get_status(api, "/api/v1/pods"), 401); /* run 1, 401, run 2 (same token), 401 */
    put("exec-token", "good", tokfile, sizeof(tokfile));
    assert_int_equal(get_status(api, "/api/v1/pods"), 200); /* cached stale → 401 → run 3 → 200 */
    assert_int_equal(get_status(api, "/api/v1/pods"), 200); /* cached, no run */
    FILE *f = fopen(runs, "r");
    assert_non_null(f);
    int lines = 0;
    for (int ch; (ch = fgetc(f)) != EOF;)
        lines += ch == '\n';
    fclose(f);
    assert_int_equal(lines, 3);
    kb_apiclient_destroy(api);
    fake_server_stop(&srv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current_context_token_and_inline_ca),
        cmocka_unit_test(test_named_context_relative_paths_basic_auth),
        cmocka_unit_test(test_exec_entry),
        cmocka_unit_test(test_errors_name_the_file),
        cmocka_unit_test(test_list_first_definition_wins),
        cmocka_unit_test(test_parse_time),
        cmocka_unit_test(test_exec_plugin_runs),
        cmocka_unit_test(test_exec_plugin_failures),
        cmocka_unit_test(test_apiclient_sources),
        cmocka_unit_test(test_401_rereads_token_file_and_retries),
        cmocka_unit_test(test_401_reruns_exec_plugin),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
