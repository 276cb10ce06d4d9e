/* tests/unit/sinks/test_kafka_mock.c — the Kafka sink against librdkafka's
 * mock cluster (rdkafka_mock.h): configuration checks, then faults injected
 * deterministically — produce errors, a leader change, request timeouts, all
 * brokers down — while checking what a user relies on: every produce() gets
 * exactly one ack, nothing is lost, and a consumer reading the topic back
 * sees each key's changes in one partition in resourceVersion order.
 * State-mode tombstones, CloudEvents headers and transactions are read back
 * the same way. No sleeps: every wait polls a condition with a deadline. */
#include "common/event.h"
#include "common/time.h"
#include "sinks/sink.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define KT_PARTITIONS 4
#define KT_KEYS 8
#define KT_DEADLINE_MS 60000

/* ---- fixtures ---------------------------------------------------------- */

typedef struct kt_ack {
    _Atomic int calls;
    _Atomic int err;
} kt_ack_t;

static void kt_ack_fn(void *opaque, kb_err_t err) {
    kt_ack_t *a = opaque;
    atomic_store(&a->err, (int)err);
    atomic_fetch_add(&a->calls, 1);
}

typedef struct kt_env {
    rd_kafka_t *owner; /* hosts the mock cluster */
    rd_kafka_mock_cluster_t *mc;
    char brokers[256];
    kb_resource_t *res;
    kb_config_t cfg;
} kt_env_t;

static int kt_setup(void **state) {
    kt_env_t *env = calloc(1, sizeof(*env));
    char err[256];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_conf_set(c, "log_level", "3", err, sizeof(err));
    env->owner = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof(err));
    assert_non_null(env->owner);
    env->mc = rd_kafka_mock_cluster_new(env->owner, 3);
    assert_non_null(env->mc);
    snprintf(env->brokers, sizeof(env->brokers), "%s", rd_kafka_mock_cluster_bootstraps(env->mc));
    env->res = kb_resource_new("c1", "pods", "", "v1", "pods");
    kb_resource_set_kind(env->res, "Pod", 3);
    env->cfg.path = "test.conf";
    env->cfg.cluster.name = "c1";
    env->cfg.sharding_replicas = 1;
    *state = env;
    return 0;
}

static int kt_teardown(void **state) {
    kt_env_t *env = *state;
    kb_resource_unref(env->res);
    rd_kafka_mock_cluster_destroy(env->mc);
    rd_kafka_destroy(env->owner);
    free(env);
    return 0;
}

/* A sink config; props is NULL-terminated key, value pairs. */
static kb_config_sink_t kt_sink_conf(const char *brokers, kb_kv_t *kv, const char *const *props) {
    kb_config_sink_t sc = {.name = "k", .type = KB_SINK_KAFKA, .line = 3, .brokers = (char *)brokers};
    size_t n = 0;
    for (; props && props[2 * n]; n++)
        kv[n] = (kb_kv_t){.key = (char *)props[2 * n], .value = (char *)props[2 * n + 1], .line = 10 + (int)n};
    sc.properties = kv;
    sc.n_properties = n;
    return sc;
}

static void *kt_sink_new(kt_env_t *env, kb_config_sink_t *sc) {
    char err[512] = "";
    void *st = NULL;
    kb_err_t e = kb_sink_kafka_ops.create(sc, &env->cfg, &st, err, sizeof(err));
    if (e != KB_OK)
        fail_msg("create: %s", err);
    return st;
}

static kb_event_t *kt_event(kt_env_t *env, kb_event_type_t type, int key, uint64_t rv) {
    char name[32], rvs[32], uid[32], obj[256];
    snprintf(name, sizeof(name), "pod-%d", key);
    snprintf(rvs, sizeof(rvs), "%llu", (unsigned long long)rv);
    snprintf(uid, sizeof(uid), "uid-%d", key);
    snprintf(obj, sizeof(obj), "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\","
             "\"namespace\":\"ns\",\"resourceVersion\":\"%s\"}}", name, rvs);
    kb_event_init_t in = {
        .type = type, .res = env->res,
        .ns = "ns", .ns_len = 2, .name = name, .name_len = strlen(name),
        .uid = uid, .uid_len = strlen(uid), .rv = rvs, .rv_len = strlen(rvs),
        .obj = obj, .obj_len = strlen(obj),
        .observed_ns = kb_now_real_ns(), .read_mono_ns = kb_now_mono_ns(),
    };
    return kb_event_new(&in);
}

/* produce(); KB_ERR_FULL is retried until the deadline (what the bridge
 * does under backpressure). */
static kb_err_t kt_send(void *st, const kb_msg_t *m) {
    kb_err_t err;
    int64_t deadline = kb_now_mono_ns() + KT_DEADLINE_MS * KB_NS_PER_MS;
    do
        err = kb_sink_kafka_ops.produce(st, m, 200);
    while (err == KB_ERR_FULL && kb_now_mono_ns() < deadline);
    return err;
}

/* Produce one change with ack/enqueued callbacks on opaque. */
static kb_err_t kt_produce_cb(kt_env_t *env, void *st, const char *topic, kb_event_type_t type, int key,
                              uint64_t rv, kb_mode_t mode, kb_ack_fn ack, void (*enqueued)(void *), void *opaque) {
    kb_event_t *ev = kt_event(env, type, key, rv);
    kb_msg_t m = {.ev = ev, .topic = topic, .topic_len = strlen(topic), .key = ev->key, .key_len = ev->key_len,
                  .format = KB_FORMAT_JSON, .mode = mode, .route = "r", .ack = ack, .ack_opaque = opaque,
                  .enqueued = enqueued};
    kb_err_t err = kt_send(st, &m);
    kb_event_unref(ev);
    return err;
}

/* Produce one change. */
static kb_err_t kt_produce(kt_env_t *env, void *st, const char *topic, kb_event_type_t type, int key, uint64_t rv,
                           kb_format_t format, kb_mode_t mode, kt_ack_t *ack) {
    kb_event_t *ev = kt_event(env, type, key, rv);
    kb_msg_t m = {.ev = ev, .topic = topic, .topic_len = strlen(topic), .key = ev->key, .key_len = ev->key_len,
                  .format = format, .mode = mode, .route = "r", .ack = kt_ack_fn, .ack_opaque = ack};
    kb_err_t err = kt_send(st, &m);
    kb_event_unref(ev);
    return err;
}

static void kt_expect_acked_once(kt_ack_t *acks, size_t n) {
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(atomic_load(&acks[i].calls), 1);
        assert_int_equal(atomic_load(&acks[i].err), KB_OK);
    }
}

/* Create topic on the mock cluster and a sink on it with props (NULL-terminated pairs). */
static void *kt_open(kt_env_t *env, const char *topic, const char *const *props, bool transactional) {
    rd_kafka_mock_topic_create(env->mc, topic, KT_PARTITIONS, 3);
    if (transactional) /* the mock has no CreateTopics */
        rd_kafka_mock_topic_create(env->mc, "__kbridge_checkpoints", 1, 3);
    kb_kv_t kv[8];
    kb_config_sink_t sc = kt_sink_conf(env->brokers, kv, props);
    sc.transactional = transactional;
    return kt_sink_new(env, &sc);
}

/* Flush, check every change was acked once with KB_OK, destroy. */
static void kt_close(void *st, kt_ack_t *acks, size_t n) {
    assert_int_equal(kb_sink_kafka_ops.flush(st, KT_DEADLINE_MS), KB_OK);
    kt_expect_acked_once(acks, n);
    kb_sink_kafka_ops.destroy(st);
    kt_expect_acked_once(acks, n); /* destroy acks nothing twice */
}

/* ---- reading back ------------------------------------------------------ */

typedef struct kt_rec {
    int32_t partition;
    char key[64];
    uint64_t rv;     /* from the k8s-resource-version header */
    char type[16];   /* k8s-type */
    bool null_value; /* a tombstone */
    char ctype[64];  /* content-type header, "" if none */
    char ce_type[64];/* ce_type header, "" if none */
    char value0;     /* first byte of the value */
} kt_rec_t;

static void kt_hdr(rd_kafka_headers_t *h, const char *name, char *out, size_t size) {
    const void *v;
    size_t n;
    out[0] = '\0';
    if (h && rd_kafka_header_get_last(h, name, &v, &n) == RD_KAFKA_RESP_ERR_NO_ERROR)
        snprintf(out, size, "%.*s", (int)n, (const char *)v);
}

/* Read topic from the beginning of every partition until each is at its end
 * (or max records). */
static size_t kt_consume(const char *brokers, const char *topic, bool read_committed, kt_rec_t *out, size_t max) {
    char err[256];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_conf_set(c, "bootstrap.servers", brokers, err, sizeof(err));
    rd_kafka_conf_set(c, "group.id", "kt-reader", err, sizeof(err));
    rd_kafka_conf_set(c, "enable.auto.commit", "false", err, sizeof(err));
    rd_kafka_conf_set(c, "isolation.level", read_committed ? "read_committed" : "read_uncommitted", err,
                      sizeof(err));
    rd_kafka_conf_set(c, "enable.partition.eof", "true", err, sizeof(err));
    rd_kafka_conf_set(c, "log_level", "3", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err));
    assert_non_null(rk);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(KT_PARTITIONS);
    for (int p = 0; p < KT_PARTITIONS; p++)
        rd_kafka_topic_partition_list_add(parts, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    assert_int_equal(rd_kafka_assign(rk, parts), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(parts);
    size_t n = 0;
    bool eof[KT_PARTITIONS] = {false};
    int n_eof = 0;
    int64_t deadline = kb_now_mono_ns() + 30 * KB_NS_PER_SEC;
    while (n < max && n_eof < KT_PARTITIONS && kb_now_mono_ns() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF && !eof[m->partition]) {
            eof[m->partition] = true;
            n_eof++;
        }
        if (!m->err) {
            kt_rec_t *r = &out[n++];
            memset(r, 0, sizeof(*r));
            r->partition = m->partition;
            snprintf(r->key, sizeof(r->key), "%.*s", (int)m->key_len, (const char *)m->key);
            rd_kafka_headers_t *h = NULL;
            rd_kafka_message_headers(m, &h);
            char rv[32];
            kt_hdr(h, "k8s-resource-version", rv, sizeof(rv));
            r->rv = strtoull(rv, NULL, 10);
            kt_hdr(h, "k8s-type", r->type, sizeof(r->type));
            kt_hdr(h, "content-type", r->ctype, sizeof(r->ctype));
            kt_hdr(h, "ce_type", r->ce_type, sizeof(r->ce_type));
            r->null_value = m->payload == NULL;
            r->value0 = m->payload && m->len ? ((const char *)m->payload)[0] : 0;
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return n;
}

/* Every key in one partition, its RVs strictly increasing, and every rv
 * 1..per_key of every key present. */
static void kt_check_order(const kt_rec_t *recs, size_t n, int keys, uint64_t per_key) {
    int32_t part[KT_KEYS];
    uint64_t last[KT_KEYS];
    for (int k = 0; k < keys; k++) {
        part[k] = -1;
        last[k] = 0;
    }
    for (size_t i = 0; i < n; i++) {
        int k = atoi(recs[i].key + strlen("ns/pod-"));
        assert_true(k >= 0 && k < keys);
        if (part[k] < 0)
            part[k] = recs[i].partition;
        assert_int_equal(recs[i].partition, part[k]);
        if (recs[i].rv <= last[k])
            fail_msg("key %s went from rv %llu to %llu", recs[i].key, (unsigned long long)last[k],
                     (unsigned long long)recs[i].rv);
        assert_int_equal(recs[i].rv, last[k] + 1); /* nothing lost, nothing repeated */
        last[k] = recs[i].rv;
    }
    for (int k = 0; k < keys; k++)
        assert_int_equal(last[k], per_key);
}

/* ---- configuration ----------------------------------------------------- */

static void kt_expect_invalid(kt_env_t *env, const char *const *props, const char *needle) {
    kb_kv_t kv[8];
    kb_config_sink_t sc = kt_sink_conf("127.0.0.1:1", kv, props);
    char err[512] = "";
    assert_int_equal(kb_sink_kafka_ops.validate(&sc, &env->cfg, err, sizeof(err)), KB_ERR_CONFIG);
    if (!strstr(err, needle))
        fail_msg("error \"%s\" does not contain \"%s\"", err, needle);
}

static void test_validate(void **state) {
    kt_env_t *env = *state;
    kb_kv_t kv[8];
    char err[512] = "";
    const char *good[] = {"compression.type", "lz4", "linger.ms", "10", NULL};
    kb_config_sink_t sc = kt_sink_conf("127.0.0.1:1", kv, good);
    assert_int_equal(kb_sink_kafka_ops.validate(&sc, &env->cfg, err, sizeof(err)), KB_OK);

    const char *bad_value[] = {"compression.type", "lz5", NULL};
    kt_expect_invalid(env, bad_value, "test.conf:10: sinks.k.properties.compression.type: Invalid value \"lz5\"");
    const char *unknown[] = {"linger.ms", "5", "no.such.thing", "1", NULL};
    kt_expect_invalid(env, unknown, "test.conf:11: sinks.k.properties.no.such.thing: No such configuration property");
    const char *acks1[] = {"acks", "1", NULL};
    kt_expect_invalid(env, acks1, "test.conf:10: sinks.k.properties.acks: kbridge needs acks=all");
    const char *noidem[] = {"enable.idempotence", "false", NULL};
    kt_expect_invalid(env, noidem, "sinks.k.properties.enable.idempotence: enable.idempotence=false with max.in.flight");
    const char *dronly[] = {"delivery.report.only.error", "true", NULL};
    kt_expect_invalid(env, dronly, "properties.delivery.report.only.error");
    const char *both[] = {"bootstrap.servers", "127.0.0.1:2", NULL};
    kt_expect_invalid(env, both, "set brokers or this property, not both");

    /* Ordering is safe without idempotence when only one request is in flight. */
    const char *one_inflight[] = {"enable.idempotence", "false", "max.in.flight", "1", NULL};
    sc = kt_sink_conf("127.0.0.1:1", kv, one_inflight);
    assert_int_equal(kb_sink_kafka_ops.validate(&sc, &env->cfg, err, sizeof(err)), KB_OK);

    sc = kt_sink_conf("", kv, NULL);
    assert_int_equal(kb_sink_kafka_ops.validate(&sc, &env->cfg, err, sizeof(err)), KB_ERR_CONFIG);
    assert_non_null(strstr(err, "test.conf:3: sinks.k.brokers: required"));
}

static void test_secret_from_file(void **state) {
    kt_env_t *env = *state;
    char path[] = "/tmp/kt-secret-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "s3cret-value\n", 13), 13);
    close(fd);
    kb_kv_t kv[8];
    char err[512] = "";
    const char *props[] = {"sasl.password_file", path, "sasl.username", "u", NULL};
    kb_config_sink_t sc = kt_sink_conf("127.0.0.1:1", kv, props);
    assert_int_equal(kb_sink_kafka_ops.validate(&sc, &env->cfg, err, sizeof(err)), KB_OK);
    /* A value librdkafka refuses is reported without the secret itself. */
    const char *refused[] = {"compression.type_file", path, NULL};
    sc = kt_sink_conf("127.0.0.1:1", kv, refused);
    assert_int_equal(kb_sink_kafka_ops.validate(&sc, &env->cfg, err, sizeof(err)), KB_ERR_CONFIG);
    assert_non_null(strstr(err, "sinks.k.properties.compression.type_file:"));
    assert_null(strstr(err, "s3cret"));
    unlink(path);
    const char *missing[] = {"sasl.password_file", path, NULL};
    sc = kt_sink_conf("127.0.0.1:1", kv, missing);
    assert_int_equal(kb_sink_kafka_ops.validate(&sc, &env->cfg, err, sizeof(err)), KB_ERR_CONFIG);
    assert_non_null(strstr(err, "test.conf:10: sinks.k.properties.sasl.password_file: cannot read"));
}

/* ---- delivery under faults --------------------------------------------- */

#define KT_PER_KEY 60

/* Produce KT_KEYS keys × per_key changes, interleaved; run fault(i) before change i. */
static void kt_stream(kt_env_t *env, void *st, const char *topic, kt_ack_t *acks, uint64_t per_key,
                      void (*fault)(kt_env_t *, const char *, size_t)) {
    size_t i = 0;
    for (uint64_t rv = 1; rv <= per_key; rv++) {
        for (int k = 0; k < KT_KEYS; k++, i++) {
            if (fault)
                fault(env, topic, i);
            assert_int_equal(kt_produce(env, st, topic, rv == 1 ? KB_EV_ADDED : KB_EV_MODIFIED, k, rv,
                                        KB_FORMAT_JSON, KB_MODE_EVENTS, &acks[i]),
                             KB_OK);
        }
    }
}

static void kt_faults(kt_env_t *env, const char *topic, size_t i) {
    if (i == 40) /* produce errors the idempotent producer must retry in order */
        rd_kafka_mock_push_request_errors(env->mc, 0 /* Produce */, 6, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                                          RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                                          RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                          RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT);
    if (i == 160) /* leader change of every partition */
        for (int p = 0; p < KT_PARTITIONS; p++)
            rd_kafka_mock_partition_set_leader(env->mc, topic, p, 1 + (p + 1) % 3);
    if (i == 240) /* broker 2 answers after the request timeout */
        rd_kafka_mock_broker_set_rtt(env->mc, 2, 3000);
    if (i == 320)
        rd_kafka_mock_broker_set_rtt(env->mc, 2, 0);
    if (i == 360) /* and one more leader change under load */
        for (int p = 0; p < KT_PARTITIONS; p++)
            rd_kafka_mock_partition_set_leader(env->mc, topic, p, 1 + (p + 2) % 3);
}

static void test_order_under_faults(void **state) {
    kt_env_t *env = *state;
    const char *topic = "faults";
    const char *props[] = {"request.timeout.ms", "1000", "retry.backoff.ms", "50", NULL};
    void *st = kt_open(env, topic, props, false);
    size_t n = KT_KEYS * KT_PER_KEY;
    kt_ack_t *acks = calloc(n, sizeof(*acks));
    kt_stream(env, st, topic, acks, KT_PER_KEY, kt_faults);
    assert_int_equal(kb_sink_kafka_ops.flush(st, KT_DEADLINE_MS), KB_OK);
    kb_sink_stats_t stats;
    kb_sink_kafka_ops.stats(st, &stats);
    assert_int_equal(stats.produced, n);
    assert_int_equal(stats.acked, n);
    assert_int_equal(stats.failed, 0);
    kt_close(st, acks, n);

    kt_rec_t *recs = calloc(n + 8, sizeof(*recs));
    assert_int_equal(kt_consume(env->brokers, topic, false, recs, n + 8), n);
    kt_check_order(recs, n, KT_KEYS, KT_PER_KEY);
    assert_string_equal(recs[0].ctype, "application/json");
    assert_int_equal(recs[0].value0, '{');
    free(recs);
    free(acks);
}

/* All brokers down: produce() backs off with KB_ERR_FULL once librdkafka's
 * bounded queue is full; nothing fails; when the brokers return, everything
 * is delivered in order. */
static void test_backpressure_broker_outage(void **state) {
    kt_env_t *env = *state;
    const char *topic = "outage";
    const char *props[] = {"queue.buffering.max.messages", "20", NULL};
    void *st = kt_open(env, topic, props, false);
    enum { N = KT_KEYS * 10 };
    kt_ack_t acks[N];
    memset(acks, 0, sizeof(acks));
    size_t i = 0;
    for (; i < KT_KEYS; i++) /* warm up: metadata and producer id known */
        assert_int_equal(kt_produce(env, st, topic, KB_EV_ADDED, (int)i, 1, KB_FORMAT_JSON, KB_MODE_EVENTS,
                                    &acks[i]), KB_OK);
    assert_int_equal(kb_sink_kafka_ops.flush(st, KT_DEADLINE_MS), KB_OK);
    for (int b = 1; b <= 3; b++)
        rd_kafka_mock_broker_set_down(env->mc, b);
    kb_err_t err = KB_OK;
    for (uint64_t rv = 2; err == KB_OK && i < N; rv++) {
        for (int k = 0; k < KT_KEYS && i < N; k++) {
            kb_event_t *ev = kt_event(env, KB_EV_MODIFIED, k, rv);
            kb_msg_t m = {.ev = ev, .topic = topic, .topic_len = strlen(topic), .key = ev->key,
                          .key_len = ev->key_len, .format = KB_FORMAT_JSON, .mode = KB_MODE_EVENTS,
                          .ack = kt_ack_fn, .ack_opaque = &acks[i]};
            err = kb_sink_kafka_ops.produce(st, &m, 50);
            kb_event_unref(ev);
            if (err != KB_OK)
                break;
            i++;
        }
    }
    assert_int_equal(err, KB_ERR_FULL);
    assert_int_equal(i, KT_KEYS + 20); /* exactly the queue's bound was taken */
    assert_int_equal(kb_sink_kafka_ops.flush(st, 100), KB_ERR_TIMEDOUT);
    for (size_t j = KT_KEYS; j < i; j++)
        assert_int_equal(atomic_load(&acks[j].calls), 0); /* nothing acked while down */
    for (int b = 1; b <= 3; b++)
        rd_kafka_mock_broker_set_up(env->mc, b);
    /* The change refused with KB_ERR_FULL is produced again, then the rest. */
    size_t taken = i;
    for (uint64_t rv = 2 + (taken - KT_KEYS) / KT_KEYS; i < N; rv++)
        for (int k = (int)((i - KT_KEYS) % KT_KEYS); k < KT_KEYS && i < N; k++, i++)
            assert_int_equal(kt_produce(env, st, topic, KB_EV_MODIFIED, k, rv, KB_FORMAT_JSON, KB_MODE_EVENTS,
                                        &acks[i]), KB_OK);
    kt_close(st, acks, N);
    kt_rec_t recs[N + 4];
    assert_int_equal(kt_consume(env->brokers, topic, false, recs, N + 4), N);
    kt_check_order(recs, N, KT_KEYS, N / KT_KEYS);
}

/* A delivery that librdkafka gives up on (user-set message.timeout.ms, all
 * brokers down) acks once with KB_ERR_TIMEDOUT — no broker gave a verdict,
 * so it is not a refusal (sinks/sink.h) — and is counted. */
static void test_delivery_failure_acked_with_error(void **state) {
    kt_env_t *env = *state;
    const char *topic = "fails";
    const char *props[] = {"message.timeout.ms", "300", NULL};
    void *st = kt_open(env, topic, props, false);
    for (int b = 1; b <= 3; b++)
        rd_kafka_mock_broker_set_down(env->mc, b);
    kt_ack_t acks[5];
    memset(acks, 0, sizeof(acks));
    for (int i = 0; i < 5; i++)
        assert_int_equal(kt_produce(env, st, topic, KB_EV_ADDED, i, 1, KB_FORMAT_JSON, KB_MODE_EVENTS, &acks[i]),
                         KB_OK);
    assert_int_equal(kb_sink_kafka_ops.flush(st, KT_DEADLINE_MS), KB_OK);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(atomic_load(&acks[i].calls), 1);
        assert_int_equal(atomic_load(&acks[i].err), KB_ERR_TIMEDOUT);
        assert_false(kb_sink_refused(KB_ERR_TIMEDOUT));
    }
    kb_sink_stats_t stats;
    kb_sink_kafka_ops.stats(st, &stats);
    assert_int_equal(stats.failed, 5);
    assert_int_equal(stats.acked, 0);
    kb_sink_kafka_ops.destroy(st);
    for (int b = 1; b <= 3; b++)
        rd_kafka_mock_broker_set_up(env->mc, b);
}

/* ---- what a consumer sees ---------------------------------------------- */

static void test_state_mode_tombstone(void **state) {
    kt_env_t *env = *state;
    const char *topic = "state";
    void *st = kt_open(env, topic, NULL, false);
    kt_ack_t acks[3];
    memset(acks, 0, sizeof(acks));
    assert_int_equal(kt_produce(env, st, topic, KB_EV_ADDED, 1, 1, KB_FORMAT_JSON, KB_MODE_STATE, &acks[0]), KB_OK);
    assert_int_equal(kt_produce(env, st, topic, KB_EV_MODIFIED, 1, 2, KB_FORMAT_JSON, KB_MODE_STATE, &acks[1]),
                     KB_OK);
    assert_int_equal(kt_produce(env, st, topic, KB_EV_DELETED, 1, 3, KB_FORMAT_JSON, KB_MODE_STATE, &acks[2]), KB_OK);
    kt_close(st, acks, 3); /* the DELETED change: one ack for its two records */
    kt_rec_t recs[8];
    assert_int_equal(kt_consume(env->brokers, topic, false, recs, 4), 4);
    const char *types[] = {"ADDED", "MODIFIED", "DELETED", "DELETED"};
    for (int i = 0; i < 4; i++) {
        assert_string_equal(recs[i].key, "ns/pod-1");
        assert_string_equal(recs[i].type, types[i]);
        assert_int_equal(recs[i].partition, recs[0].partition);
    }
    /* The value is the object itself, not the envelope. */
    assert_false(recs[2].null_value);
    assert_int_equal(recs[2].value0, '{');
    assert_int_equal(recs[2].rv, 3);
    assert_true(recs[3].null_value); /* the tombstone */
    assert_int_equal(recs[3].rv, 3);
    assert_string_equal(recs[3].ctype, "");
}

static void test_cloudevents_headers(void **state) {
    kt_env_t *env = *state;
    const char *topic = "ce";
    void *st = kt_open(env, topic, NULL, false);
    kt_ack_t acks[2];
    memset(acks, 0, sizeof(acks));
    assert_int_equal(kt_produce(env, st, topic, KB_EV_ADDED, 2, 7, KB_FORMAT_CE_BINARY, KB_MODE_EVENTS, &acks[0]),
                     KB_OK);
    assert_int_equal(kt_produce(env, st, topic, KB_EV_MODIFIED, 2, 8, KB_FORMAT_CE_STRUCTURED, KB_MODE_EVENTS,
                                &acks[1]), KB_OK);
    kt_close(st, acks, 2);
    kt_rec_t recs[4];
    assert_int_equal(kt_consume(env->brokers, topic, false, recs, 2), 2);
    assert_string_equal(recs[0].ce_type, "io.k8s.pods.added");
    assert_string_equal(recs[0].ctype, "application/json");
    assert_string_equal(recs[1].ce_type, "");
    assert_string_equal(recs[1].ctype, "application/cloudevents+json");
}

static void test_transactional(void **state) {
    kt_env_t *env = *state;
    const char *topic = "txn";
    void *st = kt_open(env, topic, NULL, true);
    enum { PER_KEY = 20, N = KT_KEYS * PER_KEY };
    kt_ack_t acks[N];
    memset(acks, 0, sizeof(acks));
    kt_stream(env, st, topic, acks, PER_KEY, NULL);
    kt_close(st, acks, N);
    kt_rec_t recs[N + 4];
    assert_int_equal(kt_consume(env->brokers, topic, true, recs, N + 4), N);
    kt_check_order(recs, N, KT_KEYS, PER_KEY);
}

/* ---- exactly-once: checkpoints in the transaction ------------------------ */

/* The bridge's side, reduced: counts what is inside the open transaction and
 * hands that count over as the checkpoint at every commit. */
typedef struct kt_ckpt {
    _Atomic int enqueued; /* changes the sink reported enqueued */
    _Atomic int calls;    /* provider calls (one per commit) */
} kt_ckpt_t;

typedef struct kt_eo {
    kt_ack_t ack;          /* first: kt_ack_fn takes a kt_eo_t * as a kt_ack_t * */
    _Atomic int enq;       /* enqueued() calls for this change */
    _Atomic int enq_at_ack;/* enq when the ack came */
    kt_ckpt_t *ck;
} kt_eo_t;

static void kt_eo_enqueued(void *opaque) {
    kt_eo_t *eo = opaque;
    atomic_fetch_add(&eo->enq, 1);
    atomic_fetch_add(&eo->ck->enqueued, 1);
}

static void kt_eo_ack(void *opaque, kb_err_t err) {
    kt_eo_t *eo = opaque;
    atomic_store(&eo->enq_at_ack, atomic_load(&eo->enq));
    kt_ack_fn(opaque, err);
}

static void kt_provider(void *opaque, kb_ckpt_rec_t **recs, size_t *n) {
    kt_ckpt_t *ck = opaque;
    atomic_fetch_add(&ck->calls, 1);
    char v[64];
    snprintf(v, sizeof(v), "{\"seq\":%d}", atomic_load(&ck->enqueued));
    *recs = calloc(1, sizeof(**recs));
    (*recs)[0].key = strdup("c1/pods");
    (*recs)[0].value = strdup(v);
    *n = 1;
}

/* Changes and the provider's checkpoint commit together: every change is
 * reported enqueued exactly once (a DELETED with its tombstone too) before
 * its ack; the checkpoint a read_committed reader gets back counts every
 * change; a read_committed consumer sees every record. */
static void test_transactional_checkpoint(void **state) {
    kt_env_t *env = *state;
    const char *topic = "eos", *ckpt_topic = "eos-ckpt";
    rd_kafka_mock_topic_create(env->mc, topic, KT_PARTITIONS, 3);
    rd_kafka_mock_topic_create(env->mc, ckpt_topic, KT_PARTITIONS, 3); /* several: all are read */
    kb_kv_t kv[1];
    kb_config_sink_t sc = kt_sink_conf(env->brokers, kv, NULL);
    sc.transactional = true;
    sc.checkpoint_topic = (char *)ckpt_topic;
    void *st = kt_sink_new(env, &sc);
    assert_true(kb_sink_kafka_ops.is_transactional(st));
    char value[64];
    assert_int_equal(kb_sink_kafka_ops.read_checkpoint(st, "c1/pods", value, sizeof(value), KT_DEADLINE_MS),
                     KB_ERR_NOTFOUND);
    kt_ckpt_t ck = {0};
    kb_sink_kafka_ops.set_checkpoint_provider(st, kt_provider, &ck);

    enum { PER_KEY = 10, N = KT_KEYS * (PER_KEY + 1) };
    kt_eo_t eo[N];
    memset(eo, 0, sizeof(eo));
    size_t i = 0;
    for (uint64_t rv = 1; rv <= PER_KEY + 1; rv++)
        for (int k = 0; k < KT_KEYS; k++, i++) {
            kb_event_type_t type = rv == 1 ? KB_EV_ADDED : rv <= PER_KEY ? KB_EV_MODIFIED : KB_EV_DELETED;
            eo[i].ck = &ck;
            assert_int_equal(kt_produce_cb(env, st, topic, type, k, rv, KB_MODE_STATE, kt_eo_ack, kt_eo_enqueued,
                                           &eo[i]), KB_OK);
        }
    assert_int_equal(kb_sink_kafka_ops.flush(st, KT_DEADLINE_MS), KB_OK);
    for (i = 0; i < N; i++) {
        assert_int_equal(atomic_load(&eo[i].ack.calls), 1);
        assert_int_equal(atomic_load(&eo[i].ack.err), KB_OK);
        assert_int_equal(atomic_load(&eo[i].enq), 1);
        assert_int_equal(atomic_load(&eo[i].enq_at_ack), 1);
    }
    assert_true(atomic_load(&ck.calls) >= 1);

    /* The last commit came after every change was enqueued. */
    char want[64];
    snprintf(want, sizeof(want), "{\"seq\":%d}", N);
    assert_int_equal(kb_sink_kafka_ops.read_checkpoint(st, "c1/pods", value, sizeof(value), KT_DEADLINE_MS), KB_OK);
    assert_string_equal(value, want);
    assert_int_equal(kb_sink_kafka_ops.read_checkpoint(st, "c1/other", value, sizeof(value), KT_DEADLINE_MS),
                     KB_ERR_NOTFOUND);
    assert_int_equal(kb_sink_kafka_ops.read_checkpoint(st, "c1/pods", value, 4, KT_DEADLINE_MS), KB_ERR_TOOBIG);
    kb_sink_kafka_ops.destroy(st);

    kt_rec_t recs[N + KT_KEYS + 4];
    assert_int_equal(kt_consume(env->brokers, topic, true, recs, N + KT_KEYS + 4), N + KT_KEYS);
}

/* A sink that is not transactional says so and has no checkpoints. */
static void test_not_transactional_no_checkpoint(void **state) {
    kt_env_t *env = *state;
    void *st = kt_open(env, "plain", NULL, false);
    assert_false(kb_sink_kafka_ops.is_transactional(st));
    char value[16];
    assert_int_equal(kb_sink_kafka_ops.read_checkpoint(st, "c1/pods", value, sizeof(value), 1000),
                     KB_ERR_UNSUPPORTED);
    kb_sink_kafka_ops.destroy(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_secret_from_file),
        cmocka_unit_test(test_order_under_faults),
        cmocka_unit_test(test_backpressure_broker_outage),
        cmocka_unit_test(test_delivery_failure_acked_with_error),
        cmocka_unit_test(test_state_mode_tombstone),
        cmocka_unit_test(test_cloudevents_headers),
        cmocka_unit_test(test_transactional),
        cmocka_unit_test(test_transactional_checkpoint),
        cmocka_unit_test(test_not_transactional_no_checkpoint),
    };
    return cmocka_run_group_tests(tests, kt_setup, kt_teardown);
}
