/* bench/bench_mqtt.c — the MQTT sink's throughput and publish→ack latency.
 *
 *   bench_mqtt URI COUNT PAYLOAD_BYTES QOS [MAX_INFLIGHT] [LINES_FILE] [CLIENT_ID]
 *
 * Produces COUNT events whose envelope is ~PAYLOAD_BYTES, spread over 100
 * topics, through kb_sink_mqtt_ops (MQTT 5; KB_BENCH_CLIENT=paho|mosquitto picks the
 * client library, default mosquitto), and prints messages/s and the
 * p50/p99 of produce()→ack. With LINES_FILE it also writes the same payloads,
 * one per line, so `mosquitto_pub -l` can publish identical bytes (see
 * bench/mqtt.sh). Not a test: numbers depend on the machine.
 */
#include "sinks/envelope.h"
#include "sinks/sink.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/time.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench {
    int64_t *sent_ns;  /* per message: when produce() was called */
    int64_t *lat_ns;   /* per message: ack - produce */
    atomic_size_t acked;
} bench_t;

typedef struct slot {
    bench_t *b;
    size_t i;
} slot_t;

static void on_ack(void *opaque, kb_err_t err) {
    slot_t *s = opaque;
    if (err != KB_OK)
        fprintf(stderr, "ack error: %s\n", kb_err_str(err));
    s->b->lat_ns[s->i] = kb_now_mono_ns() - s->b->sent_ns[s->i];
    atomic_fetch_add(&s->b->acked, 1);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s URI COUNT PAYLOAD_BYTES QOS [MAX_INFLIGHT] [LINES_FILE]\n", argv[0]);
        return 2;
    }
    size_t count = strtoul(argv[2], NULL, 10);
    size_t size = strtoul(argv[3], NULL, 10);
    int qos = atoi(argv[4]);
    int inflight = argc > 5 ? atoi(argv[5]) : 1000;
    const char *lines = argc > 6 && argv[6][0] ? argv[6] : NULL;

    kb_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.path = "bench";
    cfg.cluster.name = "bench";
    kb_config_sink_t conf;
    memset(&conf, 0, sizeof(conf));
    conf.name = "mqtt";
    conf.type = KB_SINK_MQTT;
    conf.uri = argv[1];
    conf.client_id = argc > 7 ? argv[7] : "kb-bench";
    conf.qos = qos;
    conf.version = 5;
    conf.keepalive = 30;
    conf.max_inflight = inflight;
    const char *client = getenv("KB_BENCH_CLIENT") ? getenv("KB_BENCH_CLIENT") : "mosquitto";
    conf.mqtt_client = strcmp(client, "paho") ? KB_MQTT_CLIENT_MOSQUITTO : KB_MQTT_CLIENT_PAHO;
    /* KB_BENCH_SINKS=N: N sinks (N paho clients in this process), topics sharded by index. */
    int n_sinks = getenv("KB_BENCH_SINKS") ? atoi(getenv("KB_BENCH_SINKS")) : 1;
    if (n_sinks < 1 || n_sinks > 16)
        n_sinks = 1;
    char errstr[512];
    void *sts[16] = {0};
    for (int k = 0; k < n_sinks; k++) {
        char id[128];
        snprintf(id, sizeof(id), "%s-%d", conf.client_id, k);
        kb_config_sink_t c = conf;
        c.client_id = n_sinks > 1 ? id : conf.client_id;
        if (kb_sink_mqtt_ops.create(&c, &cfg, &sts[k], errstr, sizeof(errstr)) != KB_OK) {
            fprintf(stderr, "%s\n", errstr);
            return 1;
        }
        kb_sink_stats_t stats;
        for (int i = 0; i < 1000; i++) { /* wait for the connection (bounded) */
            kb_sink_mqtt_ops.stats(sts[k], &stats);
            if (stats.connected)
                break;
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }

    kb_resource_t *res = kb_resource_new("bench", "pods", "", "v1", "pods");
    kb_resource_set_kind(res, "Pod", 3);
    /* One object of the wanted envelope size, shared by all messages. */
    kb_buf_t obj = KB_BUF_INIT;
    kb_buf_append_str(&obj, "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"p\"},\"pad\":\"");
    size_t pad = size > 330 ? size - 330 : 0; /* the envelope adds ~330 bytes */
    for (size_t i = 0; i < pad; i++)
        kb_buf_append_char(&obj, 'x');
    kb_buf_append_str(&obj, "\"}");

    bench_t b = {kb_calloc(count, sizeof(int64_t)), kb_calloc(count, sizeof(int64_t)), 0};
    slot_t *slots = kb_calloc(count, sizeof(*slots));
    kb_event_t **evs = kb_calloc(100, sizeof(*evs));
    char (*topics)[64] = kb_calloc(100, 64);
    FILE *lf = lines ? fopen(lines, "w") : NULL;
    for (int t = 0; t < 100; t++) {
        char name[16], rv[16];
        snprintf(name, sizeof(name), "pod-%d", t);
        snprintf(rv, sizeof(rv), "%d", 1000 + t);
        kb_event_init_t in = {.type = KB_EV_MODIFIED, .res = res, .ns = "default", .ns_len = 7,
                              .name = name, .name_len = strlen(name), .uid = "uid", .uid_len = 3,
                              .rv = rv, .rv_len = strlen(rv), .obj = obj.data, .obj_len = obj.len,
                              .observed_ns = kb_now_real_ns()};
        evs[t] = kb_event_new(&in);
        snprintf(topics[t], 64, "k8s/bench/pods/default/%s", name);
    }
    kb_buf_t env = KB_BUF_INIT;
    kb_envelope_json(evs[0], &env);
    size_t env_len = env.len;
    if (lf) {
        for (size_t i = 0; i < count; i++)
            fprintf(lf, "%s\n", env.data);
        fclose(lf);
    }
    kb_buf_fini(&env);

    int64_t t0 = kb_now_mono_ns();
    for (size_t i = 0; i < count; i++) {
        kb_event_t *ev = evs[i % 100];
        slots[i].b = &b;
        slots[i].i = i;
        kb_msg_t msg = {.ev = ev, .topic = topics[i % 100], .topic_len = strlen(topics[i % 100]), .key = ev->key,
                        .key_len = ev->key_len, .format = KB_FORMAT_JSON, .mode = KB_MODE_EVENTS,
                        .route = "bench", .ack = on_ack, .ack_opaque = &slots[i]};
        b.sent_ns[i] = kb_now_mono_ns();
        kb_err_t err;
        while ((err = kb_sink_mqtt_ops.produce(sts[(i % 100) % (size_t)n_sinks], &msg, 1000)) == KB_ERR_FULL)
            ;
        if (err != KB_OK) {
            fprintf(stderr, "produce: %s\n", kb_err_str(err));
            return 1;
        }
    }
    for (int k = 0; k < n_sinks; k++)
        if (kb_sink_mqtt_ops.flush(sts[k], 600000) != KB_OK)
            fprintf(stderr, "flush timed out\n");
    int64_t t1 = kb_now_mono_ns();
    qsort(b.lat_ns, count, sizeof(int64_t), cmp_i64);
    double secs = (double)(t1 - t0) / 1e9;
    printf("kbridge-sink/%s clients=%d qos=%d size=%zu count=%zu inflight=%d: %.0f msg/s, %.1f MB/s, p50=%.2f ms "
           "p99=%.2f ms\n",
           conf.mqtt_client == KB_MQTT_CLIENT_PAHO ? "paho" : "mosquitto", n_sinks, qos, env_len, count, inflight, (double)count / secs, (double)count * (double)env_len / secs / 1e6,
           (double)b.lat_ns[count / 2] / 1e6, (double)b.lat_ns[count * 99 / 100] / 1e6);
    for (int k = 0; k < n_sinks; k++)
        kb_sink_mqtt_ops.destroy(sts[k]);
    for (int t = 0; t < 100; t++)
        kb_event_unref(evs[t]);
    kb_resource_unref(res);
    kb_buf_fini(&obj);
    free(evs);
    free(topics);
    free(slots);
    free(b.sent_ns);
    free(b.lat_ns);
    return 0;
}
