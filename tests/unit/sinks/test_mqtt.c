/* tests/unit/sinks/test_mqtt.c — the MQTT sink against a real Mosquitto.
 *
 * Brokers are started with tests/infra/mosquitto.sh (private 127.0.0.1 port,
 * own data dir) and stopped by pid. Without the script or the mosquitto
 * binary, the broker tests are skipped with a message; config validation
 * always runs. A paho subscriber inside the test checks what a consumer
 * sees: retained state, tombstones, order, MQTT 5 properties.
 */
#include "sinks/sink.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/time.h"

#include <MQTTAsync.h>

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* ------------------------------------------------------------ the broker */

typedef struct broker {
    char dir[256];
    char uri[128];
    char ca[300], cert[300], key[300], password_file[300];
    bool up;
} broker_t;

static const char *script_path(void) {
    static char path[512];
    const char *src = getenv("KB_SOURCE_DIR");
    snprintf(path, sizeof(path), "%s/tests/infra/mosquitto.sh", src ? src : ".");
    return path;
}

static void env_value(const char *line, const char *key, char *out, size_t size) {
    size_t n = strlen(key);
    if (!strncmp(line, key, n) && line[n] == '=')
        snprintf(out, size, "%.*s", (int)strcspn(line + n + 1, "\n"), line + n + 1);
}

/* The directories of brokers started and not yet stopped. A failed assertion
 * leaves its test early (and its broker_t with it), so the group teardown
 * stops what is left, by pid, through the script. */
static char started[8][256];

static void broker_forget(const char *dir) {
    for (size_t i = 0; i < sizeof(started) / sizeof(started[0]); i++)
        if (!strcmp(started[i], dir))
            started[i][0] = '\0';
}

static void broker_remember(const char *dir) {
    for (size_t i = 0; i < sizeof(started) / sizeof(started[0]); i++)
        if (!started[i][0]) {
            snprintf(started[i], sizeof(started[i]), "%s", dir);
            return;
        }
}

/* Start a broker (variant plain/tls/auth); max_packet 0 = broker default. */
static bool broker_start(broker_t *b, const char *variant, int max_packet) {
    memset(b, 0, sizeof(*b));
    if (access(script_path(), X_OK) != 0) {
        fprintf(stderr, "SKIP: %s not found (set KB_SOURCE_DIR)\n", script_path());
        return false;
    }
    snprintf(b->dir, sizeof(b->dir), "%s/kb-test-mqtt.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(b->dir))
        return false;
    char cmd[1024];
    if (max_packet)
        snprintf(cmd, sizeof(cmd), "KB_MQTT_DIR=%s KB_MQTT_MAX_PACKET=%d %s start %s", b->dir, max_packet,
                 script_path(), variant);
    else
        snprintf(cmd, sizeof(cmd), "KB_MQTT_DIR=%s %s start %s", b->dir, script_path(), variant);
    FILE *p = popen(cmd, "r");
    if (!p)
        return false;
    char line[1024];
    while (fgets(line, sizeof(line), p)) {
        env_value(line, "KB_MQTT_URI", b->uri, sizeof(b->uri));
        env_value(line, "KB_MQTT_CA", b->ca, sizeof(b->ca));
        env_value(line, "KB_MQTT_CERT", b->cert, sizeof(b->cert));
        env_value(line, "KB_MQTT_KEY", b->key, sizeof(b->key));
        env_value(line, "KB_MQTT_PASSWORD_FILE", b->password_file, sizeof(b->password_file));
    }
    b->up = pclose(p) == 0 && b->uri[0];
    if (b->up)
        broker_remember(b->dir);
    if (!b->up)
        fprintf(stderr, "SKIP: could not start mosquitto with %s\n", script_path());
    return b->up;
}

static void broker_cmd(broker_t *b, const char *what) {
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "KB_MQTT_DIR=%s %s %s >/dev/null", b->dir, script_path(), what);
    assert_int_equal(system(cmd), 0);
}

static void broker_stop(broker_t *b) {
    if (!b->up)
        return;
    broker_cmd(b, "stop");
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", b->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", b->dir);
    b->up = false;
    broker_forget(b->dir);
}

static int teardown_brokers(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(started) / sizeof(started[0]); i++) {
        if (!started[i][0])
            continue;
        char cmd[1200];
        snprintf(cmd, sizeof(cmd), "KB_MQTT_DIR=%.255s %s stop >/dev/null; rm -rf %.255s", started[i], script_path(),
                 started[i]);
        if (system(cmd) != 0)
            fprintf(stderr, "could not stop the broker in %s\n", started[i]);
        started[i][0] = '\0';
    }
    return 0;
}

/* ------------------------------------------------------------ a subscriber */

typedef struct got {
    char *topic;
    char *payload;
    int len;
    int retained;
    char type[16], rv[24], uid[40], content_type[64], ce_id[64];
} got_t;

typedef struct sub {
    MQTTAsync client;
    pthread_mutex_t mtx;
    got_t *msgs;
    size_t n, cap;
    int connected; /* 1 ok, -1 failed */
    int subscribed;
} sub_t;

static void prop_copy(MQTTProperties *props, const char *name, char *out, size_t size) {
    for (int i = 0; i < props->count; i++) {
        MQTTProperty *p = &props->array[i];
        if (p->identifier == MQTTPROPERTY_CODE_USER_PROPERTY && (size_t)p->value.data.len == strlen(name) &&
            !memcmp(p->value.data.data, name, strlen(name)))
            snprintf(out, size, "%.*s", p->value.value.len, p->value.value.data);
        if (p->identifier == MQTTPROPERTY_CODE_CONTENT_TYPE && !strcmp(name, "content-type"))
            snprintf(out, size, "%.*s", p->value.data.len, p->value.data.data);
    }
}

static int sub_arrived(void *ctx, char *topic, int topic_len, MQTTAsync_message *m) {
    sub_t *s = ctx;
    got_t g;
    memset(&g, 0, sizeof(g));
    g.topic = topic_len ? kb_strndup(topic, (size_t)topic_len) : kb_strdup(topic);
    g.payload = kb_strndup(m->payload ? m->payload : "", (size_t)m->payloadlen);
    g.len = m->payloadlen;
    g.retained = m->retained;
    prop_copy(&m->properties, "k8s-type", g.type, sizeof(g.type));
    prop_copy(&m->properties, "k8s-resource-version", g.rv, sizeof(g.rv));
    prop_copy(&m->properties, "k8s-uid", g.uid, sizeof(g.uid));
    prop_copy(&m->properties, "content-type", g.content_type, sizeof(g.content_type));
    prop_copy(&m->properties, "id", g.ce_id, sizeof(g.ce_id));
    pthread_mutex_lock(&s->mtx);
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->msgs = kb_realloc(s->msgs, s->cap * sizeof(*s->msgs));
    }
    s->msgs[s->n++] = g;
    pthread_mutex_unlock(&s->mtx);
    MQTTAsync_freeMessage(&m);
    MQTTAsync_free(topic);
    return 1;
}

static void sub_on_connect(void *ctx, MQTTAsync_successData5 *r) {
    (void)r;
    ((sub_t *)ctx)->connected = 1;
}
static void sub_on_connect_fail(void *ctx, MQTTAsync_failureData5 *r) {
    (void)r;
    ((sub_t *)ctx)->connected = -1;
}
static void sub_on_sub(void *ctx, MQTTAsync_successData5 *r) {
    (void)r;
    ((sub_t *)ctx)->subscribed = 1;
}

static bool wait_flag(volatile int *flag, int timeout_ms) {
    int64_t end = kb_now_mono_ns() + timeout_ms * KB_NS_PER_MS;
    while (*flag == 0 && kb_now_mono_ns() < end)
        usleep(10000);
    return *flag > 0;
}

/* A v5 subscriber on `filter` (QoS 2). persistent: clean start off, reconnects by itself. */
static void sub_open(sub_t *s, const broker_t *b, const char *id, const char *filter, bool persistent) {
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mtx, NULL);
    MQTTAsync_createOptions co = MQTTAsync_createOptions_initializer5;
    assert_int_equal(MQTTAsync_createWithOptions(&s->client, b->uri, id, MQTTCLIENT_PERSISTENCE_NONE, NULL, &co),
                     MQTTASYNC_SUCCESS);
    MQTTAsync_setCallbacks(s->client, s, NULL, sub_arrived, NULL);
    MQTTAsync_connectOptions opts = MQTTAsync_connectOptions_initializer5;
    MQTTProperties props = MQTTProperties_initializer;
    MQTTProperty p = {.identifier = MQTTPROPERTY_CODE_SESSION_EXPIRY_INTERVAL, .value.integer4 = 600};
    MQTTProperties_add(&props, &p);
    opts.cleanstart = persistent ? 0 : 1;
    opts.connectProperties = &props;
    opts.automaticReconnect = persistent;
    opts.minRetryInterval = 1;
    opts.maxRetryInterval = 1;
    opts.onSuccess5 = sub_on_connect;
    opts.onFailure5 = sub_on_connect_fail;
    opts.context = s;
    MQTTAsync_SSLOptions ssl = MQTTAsync_SSLOptions_initializer;
    if (b->ca[0]) {
        ssl.trustStore = b->ca;
        ssl.keyStore = b->cert;
        ssl.privateKey = b->key;
        opts.ssl = &ssl;
    }
    char pw[128] = "";
    if (b->password_file[0]) {
        FILE *f = fopen(b->password_file, "r");
        assert_non_null(f);
        assert_non_null(fgets(pw, sizeof(pw), f));
        fclose(f);
        pw[strcspn(pw, "\n")] = '\0';
        opts.username = "kbridge";
        opts.password = pw;
    }
    assert_int_equal(MQTTAsync_connect(s->client, &opts), MQTTASYNC_SUCCESS);
    MQTTProperties_free(&props);
    assert_true(wait_flag(&s->connected, 10000));
    MQTTAsync_responseOptions ro = MQTTAsync_responseOptions_initializer;
    ro.onSuccess5 = sub_on_sub;
    ro.context = s;
    assert_int_equal(MQTTAsync_subscribe(s->client, filter, 2, &ro), MQTTASYNC_SUCCESS);
    assert_true(wait_flag(&s->subscribed, 10000));
}

static size_t sub_count(sub_t *s) {
    pthread_mutex_lock(&s->mtx);
    size_t n = s->n;
    pthread_mutex_unlock(&s->mtx);
    return n;
}

/* Wait until the subscriber holds at least n messages (bounded). */
static bool sub_wait(sub_t *s, size_t n, int timeout_ms) {
    int64_t end = kb_now_mono_ns() + timeout_ms * KB_NS_PER_MS;
    while (sub_count(s) < n && kb_now_mono_ns() < end)
        usleep(10000);
    return sub_count(s) >= n;
}

/* Everything the broker holds for s has arrived (retained messages of its
 * subscription included): s publishes a marker on topic (under its own
 * filter) and waits until it comes back, as the broker sends one client's
 * messages in the order it took them. Returns how many came before it. */
static size_t sub_sync(sub_t *s, const char *topic) {
    size_t before = sub_count(s);
    MQTTAsync_message m = MQTTAsync_message_initializer;
    m.payload = "marker";
    m.payloadlen = 6;
    m.qos = 1;
    assert_int_equal(MQTTAsync_sendMessage(s->client, topic, &m, NULL), MQTTASYNC_SUCCESS);
    for (int64_t end = kb_now_mono_ns() + 10000 * KB_NS_PER_MS; kb_now_mono_ns() < end; usleep(10000)) {
        pthread_mutex_lock(&s->mtx);
        for (size_t i = before; i < s->n; i++)
            if (!strcmp(s->msgs[i].topic, topic)) {
                pthread_mutex_unlock(&s->mtx);
                return i;
            }
        pthread_mutex_unlock(&s->mtx);
    }
    fail_msg("the marker on %s did not come back", topic);
    return 0;
}

static const got_t *sub_find(sub_t *s, const char *topic) {
    const got_t *last = NULL;
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->msgs[i].topic, topic))
            last = &s->msgs[i];
    return last;
}

static void sub_close(sub_t *s) {
    MQTTAsync_disconnectOptions d = MQTTAsync_disconnectOptions_initializer5;
    MQTTAsync_disconnect(s->client, &d);
    MQTTAsync_destroy(&s->client);
    for (size_t i = 0; i < s->n; i++) {
        free(s->msgs[i].topic);
        free(s->msgs[i].payload);
    }
    free(s->msgs);
    pthread_mutex_destroy(&s->mtx);
}

/* ------------------------------------------------------- events and acks */

typedef struct acks {
    pthread_mutex_t mtx;
    size_t ok, err, total;
    kb_err_t last_err;
    uint64_t last_rv[16]; /* per topic index: the last acked rv (order check) */
    bool out_of_order;
} acks_t;

typedef struct ack_ctx {
    acks_t *acks;
    int topic;
    uint64_t rv;
} ack_ctx_t;

static void on_ack(void *opaque, kb_err_t err) {
    ack_ctx_t *c = opaque;
    acks_t *a = c->acks;
    pthread_mutex_lock(&a->mtx);
    a->total++;
    if (err == KB_OK) {
        a->ok++;
        if (c->rv <= a->last_rv[c->topic]) {
            if (!a->out_of_order)
                fprintf(stderr, "ack out of order: topic %d rv %llu after %llu\n", c->topic,
                        (unsigned long long)c->rv, (unsigned long long)a->last_rv[c->topic]);
            a->out_of_order = true;
        }
        a->last_rv[c->topic] = c->rv;
    } else {
        a->err++;
        a->last_err = err;
    }
    pthread_mutex_unlock(&a->mtx);
    free(c);
}

static kb_resource_t *test_res(void) {
    kb_resource_t *res = kb_resource_new("test", "pods", "", "v1", "pods");
    kb_resource_set_kind(res, "Pod", 3);
    return res;
}

static kb_event_t *mk_event(kb_resource_t *res, kb_event_type_t type, const char *name, uint64_t rv,
                            size_t pad) {
    char rvs[24], uid[40];
    snprintf(rvs, sizeof(rvs), "%llu", (unsigned long long)rv);
    snprintf(uid, sizeof(uid), "uid-%s", name);
    kb_buf_t obj = KB_BUF_INIT;
    kb_buf_appendf(&obj, "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\","
                         "\"uid\":\"%s\",\"resourceVersion\":\"%s\"},\"pad\":\"",
                   name, uid, rvs);
    for (size_t i = 0; i < pad; i++)
        kb_buf_append_char(&obj, 'x');
    kb_buf_append_str(&obj, "\"}");
    kb_event_init_t in = {
        .type = type, .res = res,
        .ns = "default", .ns_len = 7,
        .name = name, .name_len = strlen(name),
        .uid = uid, .uid_len = strlen(uid),
        .rv = rvs, .rv_len = strlen(rvs),
        .obj = obj.data, .obj_len = obj.len,
        .observed_ns = kb_now_real_ns(), .read_mono_ns = kb_now_mono_ns(),
    };
    kb_event_t *ev = kb_event_new(&in);
    kb_buf_fini(&obj);
    return ev;
}

/* Produce one change of default/<name> to k8s/test/pods/default/<name>. */
static kb_err_t send_one(void *st, acks_t *a, int topic_idx, kb_event_type_t type, const char *name, uint64_t rv,
                         kb_format_t format, kb_mode_t mode, size_t pad) {
    kb_resource_t *res = test_res();
    kb_event_t *ev = mk_event(res, type, name, rv, pad);
    char topic[128];
    snprintf(topic, sizeof(topic), "k8s/test/pods/default/%s", name);
    ack_ctx_t *c = kb_calloc(1, sizeof(*c));
    c->acks = a;
    c->topic = topic_idx;
    c->rv = rv;
    kb_msg_t msg = {
        .ev = ev, .topic = topic, .topic_len = strlen(topic), .key = ev->key, .key_len = ev->key_len,
        .format = format, .mode = mode, .route = "test", .ack = on_ack, .ack_opaque = c,
    };
    kb_err_t err = kb_sink_mqtt_ops.produce(st, &msg, 5000);
    if (err != KB_OK)
        free(c);
    kb_event_unref(ev);
    kb_resource_unref(res);
    return err;
}

/* The client library under test (main runs every test once per client). */
static kb_mqtt_client_t client_kind;

static void conf_init(kb_config_sink_t *conf, kb_config_t *cfg, const broker_t *b, const char *id, int qos,
                      int version) {
    memset(conf, 0, sizeof(*conf));
    memset(cfg, 0, sizeof(*cfg));
    cfg->path = "test.cfg";
    cfg->cluster.name = "test";
    conf->name = "mqtt";
    conf->type = KB_SINK_MQTT;
    conf->line = 7;
    conf->uri = (char *)(b ? b->uri : "tcp://127.0.0.1:1");
    conf->client_id = (char *)id;
    conf->qos = qos;
    conf->version = version;
    conf->keepalive = 30;
    conf->max_inflight = 100;
    conf->mqtt_client = client_kind;
}

static void *create_sink(const kb_config_sink_t *conf, const kb_config_t *cfg) {
    char errstr[512] = "";
    void *st = NULL;
    kb_err_t err = kb_sink_mqtt_ops.create(conf, cfg, &st, errstr, sizeof(errstr));
    if (err != KB_OK)
        fail_msg("create: %s", errstr);
    return st;
}

static void acks_init(acks_t *a) {
    memset(a, 0, sizeof(*a));
    pthread_mutex_init(&a->mtx, NULL);
}

/* --------------------------------------------------------------- tests */

static void expect_invalid(kb_config_sink_t *conf, kb_config_t *cfg, const char *want) {
    char errstr[512] = "";
    assert_int_equal(kb_sink_mqtt_ops.validate(conf, cfg, errstr, sizeof(errstr)), KB_ERR_CONFIG);
    if (!strstr(errstr, want))
        fail_msg("error \"%s\" does not contain \"%s\"", errstr, want);
}

static void test_validate(void **state) {
    (void)state;
    kb_config_sink_t conf;
    kb_config_t cfg;
    char errstr[512];
    conf_init(&conf, &cfg, NULL, "kb-test", 1, 5);
    assert_int_equal(kb_sink_mqtt_ops.validate(&conf, &cfg, errstr, sizeof(errstr)), KB_OK);

    conf.uri = "http://127.0.0.1:1883";
    expect_invalid(&conf, &cfg, "test.cfg:7: uri: ");
    conf.uri = "";
    expect_invalid(&conf, &cfg, "test.cfg:7: uri: required");
    conf_init(&conf, &cfg, NULL, "kb-test", 3, 5);
    expect_invalid(&conf, &cfg, "test.cfg:7: qos: 3 is not 0, 1 or 2");
    conf_init(&conf, &cfg, NULL, "kb-test", 1, 4);
    expect_invalid(&conf, &cfg, "test.cfg:7: version: ");
    conf_init(&conf, &cfg, NULL, "", 1, 5);
    expect_invalid(&conf, &cfg, "client_id: required");
    conf_init(&conf, &cfg, NULL, "kb-test", 1, 5);
    conf.max_inflight = 0;
    expect_invalid(&conf, &cfg, "max_inflight: ");
    conf_init(&conf, &cfg, NULL, "kb-test", 1, 5);
    conf.password_file = "/nonexistent/secret";
    expect_invalid(&conf, &cfg, "password_file: a password needs a username");
    conf.username = "u";
    expect_invalid(&conf, &cfg, "password_file: cannot read /nonexistent/secret");
    conf_init(&conf, &cfg, NULL, "kb-test", 1, 5);
    conf.ca_file = "/etc/hostname";
    expect_invalid(&conf, &cfg, "ca_file: set, but uri");
    conf.uri = "ssl://127.0.0.1:8883";
    assert_int_equal(kb_sink_mqtt_ops.validate(&conf, &cfg, errstr, sizeof(errstr)), KB_OK);
    conf.cert_file = "/etc/hostname";
    expect_invalid(&conf, &cfg, "key_file: cert_file and key_file go together");

    /* a password in clear text: fine on loopback, refused elsewhere unless allowed */
    char pw[] = "/tmp/kb-test-mqtt-pw.XXXXXX";
    int fd = mkstemp(pw);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "secret\n", 7), 7);
    close(fd);
    conf_init(&conf, &cfg, NULL, "kb-test", 1, 5);
    conf.username = "u";
    conf.password_file = pw;
    assert_int_equal(kb_sink_mqtt_ops.validate(&conf, &cfg, errstr, sizeof(errstr)), KB_OK);
    conf.uri = "tcp://localhost:1883";
    assert_int_equal(kb_sink_mqtt_ops.validate(&conf, &cfg, errstr, sizeof(errstr)), KB_OK);
    conf.uri = "tcp://broker.example:1883";
    expect_invalid(&conf, &cfg, "password_file: the password would cross the network in clear text");
    conf.uri = "mqtt://10.0.0.1";
    expect_invalid(&conf, &cfg, "allow_plaintext_password = true");
    conf.allow_plaintext_password = true;
    assert_int_equal(kb_sink_mqtt_ops.validate(&conf, &cfg, errstr, sizeof(errstr)), KB_OK);
    conf.allow_plaintext_password = false;
    conf.uri = "ssl://broker.example:8883";
    assert_int_equal(kb_sink_mqtt_ops.validate(&conf, &cfg, errstr, sizeof(errstr)), KB_OK);
    unlink(pw);

    /* websockets: paho only */
    conf_init(&conf, &cfg, NULL, "kb-test", 1, 5);
    conf.uri = "ws://127.0.0.1:9001";
    if (client_kind == KB_MQTT_CLIENT_MOSQUITTO)
        expect_invalid(&conf, &cfg, "client: \"mosquitto\" does not speak MQTT over websockets");
    else
        assert_int_equal(kb_sink_mqtt_ops.validate(&conf, &cfg, errstr, sizeof(errstr)), KB_OK);

    /* binary CloudEvents on a 3.1.1 sink: the route's line is named */
    conf_init(&conf, &cfg, NULL, "kb-test", 1, 3);
    kb_config_route_t route;
    memset(&route, 0, sizeof(route));
    route.sink = "mqtt";
    route.informer = "pods";
    route.format = KB_FORMAT_CE_BINARY;
    route.line = 21;
    cfg.routes = &route;
    cfg.n_routes = 1;
    expect_invalid(&conf, &cfg, "test.cfg:21: format: cloudevents-binary needs MQTT 5");
    conf.version = 5;
    assert_int_equal(kb_sink_mqtt_ops.validate(&conf, &cfg, errstr, sizeof(errstr)), KB_OK);
}

/* mode=state: a new subscriber sees the latest state of every object; a
 * delete clears it; MQTT 5 properties; the retained "online" birth. */
static void test_state_retained(void **state) {
    (void)state;
    broker_t b;
    if (!broker_start(&b, "plain", 0))
        skip();
    kb_config_sink_t conf;
    kb_config_t cfg;
    conf_init(&conf, &cfg, &b, "kb-test-state", 1, 5);
    void *st = create_sink(&conf, &cfg);
    acks_t a;
    acks_init(&a);
    assert_int_equal(send_one(st, &a, 0, KB_EV_ADDED, "p0", 10, KB_FORMAT_JSON, KB_MODE_STATE, 0), KB_OK);
    assert_int_equal(send_one(st, &a, 1, KB_EV_ADDED, "p1", 11, KB_FORMAT_JSON, KB_MODE_STATE, 0), KB_OK);
    assert_int_equal(send_one(st, &a, 2, KB_EV_ADDED, "p2", 12, KB_FORMAT_JSON, KB_MODE_STATE, 0), KB_OK);
    assert_int_equal(send_one(st, &a, 0, KB_EV_MODIFIED, "p0", 13, KB_FORMAT_JSON, KB_MODE_STATE, 0), KB_OK);
    assert_int_equal(send_one(st, &a, 1, KB_EV_DELETED, "p1", 14, KB_FORMAT_JSON, KB_MODE_STATE, 0), KB_OK);
    assert_int_equal(kb_sink_mqtt_ops.flush(st, 20000), KB_OK);
    assert_int_equal(a.ok, 5);
    assert_int_equal(a.err, 0);
    kb_sink_stats_t stats;
    kb_sink_mqtt_ops.stats(st, &stats);
    assert_int_equal(stats.produced, 5);
    assert_int_equal(stats.acked, 5);
    assert_int_equal(stats.queue_bytes, 0);
    assert_true(stats.connected);

    sub_t s;
    sub_open(&s, &b, "kb-test-sub", "k8s/test/#", false);
    assert_int_equal(sub_sync(&s, "k8s/test/zz-marker"), 3); /* p0, p2, status; p1 was cleared */
    pthread_mutex_lock(&s.mtx);
    const got_t *g0 = sub_find(&s, "k8s/test/pods/default/p0");
    assert_non_null(g0);
    assert_true(g0->retained);
    assert_non_null(strstr(g0->payload, "\"resourceVersion\":\"13\""));
    assert_string_equal(g0->type, "MODIFIED");
    assert_string_equal(g0->rv, "13");
    assert_string_equal(g0->uid, "uid-p0");
    assert_string_equal(g0->content_type, "application/json");
    assert_null(sub_find(&s, "k8s/test/pods/default/p1"));
    const got_t *status = sub_find(&s, "k8s/test/_bridge/status");
    assert_non_null(status);
    assert_string_equal(status->payload, "online");
    pthread_mutex_unlock(&s.mtx);

    /* a clean shutdown says offline (retained) */
    kb_sink_mqtt_ops.destroy(st);
    sub_t s2;
    sub_open(&s2, &b, "kb-test-sub2", "k8s/test/_bridge/status", false);
    assert_true(sub_wait(&s2, 1, 10000));
    assert_string_equal(s2.msgs[0].payload, "offline");
    sub_close(&s2);
    sub_close(&s);
    broker_stop(&b);
}

/* Many changes on a few topics at QoS 2: every one arrives, in order per
 * topic, and acks come in order per topic. */
static void test_order_qos2(void **state) {
    (void)state;
    broker_t b;
    if (!broker_start(&b, "plain", 0))
        skip();
    sub_t s;
    sub_open(&s, &b, "kb-test-order-sub", "k8s/test/pods/#", false);
    kb_config_sink_t conf;
    kb_config_t cfg;
    conf_init(&conf, &cfg, &b, "kb-test-order", 2, 5);
    void *st = create_sink(&conf, &cfg);
    acks_t a;
    acks_init(&a);
    const int n = 2000, topics = 5;
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "o%d", i % topics);
        assert_int_equal(send_one(st, &a, i % topics, KB_EV_MODIFIED, name, (uint64_t)(100 + i), KB_FORMAT_JSON,
                                  KB_MODE_EVENTS, 100),
                         KB_OK);
    }
    assert_int_equal(kb_sink_mqtt_ops.flush(st, 60000), KB_OK);
    assert_int_equal(a.ok, (size_t)n);
    assert_false(a.out_of_order);
    assert_true(sub_wait(&s, (size_t)n, 30000));
    uint64_t last[5] = {0};
    pthread_mutex_lock(&s.mtx);
    assert_int_equal(s.n, (size_t)n);
    for (size_t i = 0; i < s.n; i++) {
        int t = s.msgs[i].topic[strlen(s.msgs[i].topic) - 1] - '0';
        uint64_t rv = strtoull(s.msgs[i].rv, NULL, 10);
        assert_true(rv > last[t]);
        assert_false(s.msgs[i].retained);
        last[t] = rv;
    }
    pthread_mutex_unlock(&s.mtx);
    kb_sink_mqtt_ops.destroy(st);
    sub_close(&s);
    broker_stop(&b);
}

/* Messages the broker cannot take are refused one by one with an error ack;
 * the connection survives and later messages are delivered. */
static void test_refused_per_message(void **state) {
    (void)state;
    broker_t b;
    if (!broker_start(&b, "plain", 20000))
        skip();
    kb_config_sink_t conf;
    kb_config_t cfg;
    conf_init(&conf, &cfg, &b, "kb-test-refuse", 1, 5);
    void *st = create_sink(&conf, &cfg);
    acks_t a;
    acks_init(&a);
    /* wait for the connection, so the broker's maximum packet size is known */
    kb_sink_stats_t stats;
    for (int i = 0; i < 1000; i++) {
        kb_sink_mqtt_ops.stats(st, &stats);
        if (stats.connected)
            break;
        usleep(10000);
    }
    assert_true(stats.connected);
    assert_int_equal(send_one(st, &a, 0, KB_EV_ADDED, "big", 1, KB_FORMAT_JSON, KB_MODE_EVENTS, 50000), KB_OK);
    assert_int_equal(a.err, 1);
    assert_int_equal(a.last_err, KB_ERR_TOOBIG);
    /* topic longer than 65535 bytes */
    kb_resource_t *res = test_res();
    kb_event_t *ev = mk_event(res, KB_EV_ADDED, "x", 2, 0);
    char *topic = kb_malloc(70000);
    memset(topic, 'a', 69999);
    topic[69999] = '\0';
    ack_ctx_t *c = kb_calloc(1, sizeof(*c));
    c->acks = &a;
    kb_msg_t msg = {.ev = ev, .topic = topic, .topic_len = 69999, .key = ev->key, .key_len = ev->key_len,
                    .ack = on_ack, .ack_opaque = c};
    assert_int_equal(kb_sink_mqtt_ops.produce(st, &msg, 1000), KB_OK);
    assert_int_equal(a.err, 2);
    free(topic);
    kb_event_unref(ev);
    kb_resource_unref(res);
    assert_int_equal(send_one(st, &a, 1, KB_EV_ADDED, "small", 3, KB_FORMAT_JSON, KB_MODE_EVENTS, 100), KB_OK);
    assert_int_equal(kb_sink_mqtt_ops.flush(st, 20000), KB_OK);
    assert_int_equal(a.ok, 1);
    kb_sink_mqtt_ops.stats(st, &stats);
    assert_int_equal(stats.failed, 2);
    assert_int_equal(stats.acked, 1);
    assert_true(stats.connected);
    kb_sink_mqtt_ops.destroy(st);
    broker_stop(&b);
}

/* MQTT 3.1.1: structured CloudEvents work; binary is refused per message. */
static void test_v3_cloudevents(void **state) {
    (void)state;
    broker_t b;
    if (!broker_start(&b, "plain", 0))
        skip();
    sub_t s;
    sub_open(&s, &b, "kb-test-v3-sub", "k8s/test/pods/#", false);
    kb_config_sink_t conf;
    kb_config_t cfg;
    conf_init(&conf, &cfg, &b, "kb-test-v3", 1, 3);
    void *st = create_sink(&conf, &cfg);
    acks_t a;
    acks_init(&a);
    assert_int_equal(send_one(st, &a, 0, KB_EV_ADDED, "c0", 5, KB_FORMAT_CE_BINARY, KB_MODE_EVENTS, 0), KB_OK);
    assert_int_equal(a.err, 1);
    assert_int_equal(a.last_err, KB_ERR_UNSUPPORTED);
    assert_int_equal(send_one(st, &a, 0, KB_EV_ADDED, "c0", 6, KB_FORMAT_CE_STRUCTURED, KB_MODE_EVENTS, 0), KB_OK);
    assert_int_equal(kb_sink_mqtt_ops.flush(st, 20000), KB_OK);
    assert_int_equal(a.ok, 1);
    assert_true(sub_wait(&s, 1, 10000));
    pthread_mutex_lock(&s.mtx);
    assert_non_null(strstr(s.msgs[0].payload, "\"specversion\":\"1.0\""));
    assert_string_equal(s.msgs[0].type, ""); /* no properties in 3.1.1 */
    pthread_mutex_unlock(&s.mtx);
    kb_sink_mqtt_ops.destroy(st);
    sub_close(&s);
    broker_stop(&b);
}

/* MQTT 5 binary CloudEvents: data is the object, attributes are properties. */
static void test_v5_ce_binary(void **state) {
    (void)state;
    broker_t b;
    if (!broker_start(&b, "plain", 0))
        skip();
    sub_t s;
    sub_open(&s, &b, "kb-test-ceb-sub", "k8s/test/pods/#", false);
    kb_config_sink_t conf;
    kb_config_t cfg;
    conf_init(&conf, &cfg, &b, "kb-test-ceb", 1, 5);
    void *st = create_sink(&conf, &cfg);
    acks_t a;
    acks_init(&a);
    assert_int_equal(send_one(st, &a, 0, KB_EV_ADDED, "b0", 7, KB_FORMAT_CE_BINARY, KB_MODE_EVENTS, 0), KB_OK);
    assert_int_equal(kb_sink_mqtt_ops.flush(st, 20000), KB_OK);
    assert_true(sub_wait(&s, 1, 10000));
    pthread_mutex_lock(&s.mtx);
    assert_true(!strncmp(s.msgs[0].payload, "{\"kind\":\"Pod\"", 13));
    assert_string_equal(s.msgs[0].ce_id, "uid-b0/7");
    assert_string_equal(s.msgs[0].content_type, "application/json");
    pthread_mutex_unlock(&s.mtx);
    kb_sink_mqtt_ops.destroy(st);
    sub_close(&s);
    broker_stop(&b);
}

typedef struct producer_arg {
    void *st;
    acks_t *acks;
    int n;
} producer_arg_t;

static void *producer(void *p) {
    producer_arg_t *pa = p;
    for (int i = 0; i < pa->n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "r%d", i % 4);
        kb_err_t err;
        do
            err = send_one(pa->st, pa->acks, i % 4, KB_EV_MODIFIED, name, (uint64_t)(1000 + i), KB_FORMAT_JSON,
                           KB_MODE_EVENTS, 1000);
        while (err == KB_ERR_FULL);
        if (err != KB_OK)
            return (void *)1;
    }
    return NULL;
}

/* The broker restarts mid-stream: nothing acked is lost, everything is
 * acked in the end, per-topic order holds for the subscriber. */
static void restart_case(int qos) {
    broker_t b;
    if (!broker_start(&b, "plain", 0))
        skip();
    sub_t s;
    char id[64];
    snprintf(id, sizeof(id), "kb-test-restart-sub-%d", qos);
    sub_open(&s, &b, id, "k8s/test/pods/#", true);
    kb_config_sink_t conf;
    kb_config_t cfg;
    snprintf(id, sizeof(id), "kb-test-restart-%d", qos);
    conf_init(&conf, &cfg, &b, id, qos, 5);
    void *st = create_sink(&conf, &cfg);
    acks_t a;
    acks_init(&a);
    const int n = 3000;
    producer_arg_t pa = {st, &a, n};
    pthread_t th;
    pthread_create(&th, NULL, producer, &pa);
    /* restart once a part has been acknowledged */
    int64_t end = kb_now_mono_ns() + 30 * KB_NS_PER_SEC;
    for (;;) {
        pthread_mutex_lock(&a.mtx);
        size_t ok = a.ok;
        pthread_mutex_unlock(&a.mtx);
        if (ok >= (size_t)n / 4 || kb_now_mono_ns() > end)
            break;
        usleep(1000);
    }
    broker_cmd(&b, "restart");
    void *ret;
    pthread_join(th, &ret);
    assert_null(ret);
    assert_int_equal(kb_sink_mqtt_ops.flush(st, 120000), KB_OK);
    assert_int_equal(a.ok, (size_t)n);
    assert_int_equal(a.err, 0);
    assert_false(a.out_of_order);
    kb_sink_stats_t stats;
    kb_sink_mqtt_ops.stats(st, &stats);
    /* every change reached the (persistent-session) subscriber */
    end = kb_now_mono_ns() + 60 * KB_NS_PER_SEC;
    char *seen = kb_calloc((size_t)n, 1);
    size_t distinct = 0;
    while (distinct < (size_t)n && kb_now_mono_ns() < end) {
        pthread_mutex_lock(&s.mtx);
        for (size_t i = 0; i < s.n; i++) {
            long rv = strtol(s.msgs[i].rv, NULL, 10) - 1000;
            if (rv >= 0 && rv < n && !seen[rv]) {
                seen[rv] = 1;
                distinct++;
            }
        }
        pthread_mutex_unlock(&s.mtx);
        if (distinct < (size_t)n)
            usleep(50000);
    }
    free(seen);
    fprintf(stderr, "qos=%d: %zu distinct of %d received, %zu messages, retries=%llu\n", qos, distinct, n,
            sub_count(&s), (unsigned long long)stats.retries);
    assert_int_equal(distinct, (size_t)n);
    kb_sink_mqtt_ops.destroy(st);
    sub_close(&s);
    broker_stop(&b);
}

static void test_broker_restart_qos1(void **state) {
    (void)state;
    restart_case(1);
}

static void test_broker_restart_qos2(void **state) {
    (void)state;
    restart_case(2);
}

/* No broker: produce blocks, then says FULL; destroy acks everything held
 * with an error, exactly once. */
static void test_backpressure_offline(void **state) {
    (void)state;
    kb_config_sink_t conf;
    kb_config_t cfg;
    conf_init(&conf, &cfg, NULL, "kb-test-offline", 1, 5);
    void *st = create_sink(&conf, &cfg);
    acks_t a;
    acks_init(&a);
    size_t accepted = 0;
    kb_err_t err = KB_OK;
    for (int i = 0; i < 200 && err == KB_OK; i++) {
        kb_resource_t *res = test_res();
        kb_event_t *ev = mk_event(res, KB_EV_ADDED, "big", (uint64_t)(i + 1), 1 << 20);
        ack_ctx_t *c = kb_calloc(1, sizeof(*c));
        c->acks = &a;
        c->rv = (uint64_t)(i + 1);
        kb_msg_t msg = {.ev = ev, .topic = "k8s/test/big", .topic_len = 12, .key = ev->key, .key_len = ev->key_len,
                        .ack = on_ack, .ack_opaque = c};
        err = kb_sink_mqtt_ops.produce(st, &msg, 20);
        if (err == KB_OK)
            accepted++;
        else
            free(c);
        kb_event_unref(ev);
        kb_resource_unref(res);
    }
    assert_int_equal(err, KB_ERR_FULL);
    assert_true(accepted > 10 && accepted < 200);
    kb_sink_stats_t stats;
    kb_sink_mqtt_ops.stats(st, &stats);
    assert_false(stats.connected);
    assert_true(stats.queue_bytes > 0);
    assert_int_equal(kb_sink_mqtt_ops.flush(st, 10), KB_ERR_TIMEDOUT);
    kb_sink_mqtt_ops.destroy(st);
    assert_int_equal(a.total, accepted);
    assert_int_equal(a.err, accepted);
}

/* TLS with a client certificate, and a password from a file. */
static void variant_case(const char *variant) {
    broker_t b;
    if (!broker_start(&b, variant, 0))
        skip();
    kb_config_sink_t conf;
    kb_config_t cfg;
    char id[64];
    snprintf(id, sizeof(id), "kb-test-%s", variant);
    conf_init(&conf, &cfg, &b, id, 1, 5);
    if (b.ca[0]) {
        conf.ca_file = b.ca;
        conf.cert_file = b.cert;
        conf.key_file = b.key;
    }
    if (b.password_file[0]) {
        conf.username = "kbridge";
        conf.password_file = b.password_file;
    }
    sub_t s;
    sub_open(&s, &b, "kb-test-variant-sub", "k8s/test/pods/#", false);
    void *st = create_sink(&conf, &cfg);
    acks_t a;
    acks_init(&a);
    assert_int_equal(send_one(st, &a, 0, KB_EV_ADDED, "v0", 1, KB_FORMAT_JSON, KB_MODE_STATE, 0), KB_OK);
    assert_int_equal(kb_sink_mqtt_ops.flush(st, 20000), KB_OK);
    assert_int_equal(a.ok, 1);
    assert_true(sub_wait(&s, 1, 10000));
    kb_sink_mqtt_ops.destroy(st);
    sub_close(&s);
    broker_stop(&b);
}

static void test_tls(void **state) {
    (void)state;
    variant_case("tls");
}

static void test_password(void **state) {
    (void)state;
    variant_case("auth");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_state_retained),
        cmocka_unit_test(test_order_qos2),
        cmocka_unit_test(test_refused_per_message),
        cmocka_unit_test(test_v3_cloudevents),
        cmocka_unit_test(test_v5_ce_binary),
        cmocka_unit_test(test_broker_restart_qos1),
        cmocka_unit_test(test_broker_restart_qos2),
        cmocka_unit_test(test_backpressure_offline),
        cmocka_unit_test(test_tls),
        cmocka_unit_test(test_password),
    };
    if (getenv("KB_TEST_FILTER")) /* e.g. KB_TEST_FILTER='test_broker_restart*' */
        cmocka_set_test_filter(getenv("KB_TEST_FILTER"));
    /* KB_MQTT_CLIENT=paho|mosquitto: one client only; default both */
    const char *only = getenv("KB_MQTT_CLIENT");
    int failed = 0;
    if (!only || !strcmp(only, "paho")) {
        client_kind = KB_MQTT_CLIENT_PAHO;
        failed += cmocka_run_group_tests_name("mqtt sink over paho", tests, NULL, teardown_brokers);
    }
    if (!only || !strcmp(only, "mosquitto")) {
        client_kind = KB_MQTT_CLIENT_MOSQUITTO;
        failed += cmocka_run_group_tests_name("mqtt sink over libmosquitto", tests, NULL, teardown_brokers);
    }
    return failed;
}
