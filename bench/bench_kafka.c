/* bench/bench_kafka.c — the Kafka sink against a real broker, and the same
 * bytes for `kcat -P` (bench/kafka.sh runs both and prints the comparison).
 *
 *   bench_kafka BROKERS TOPIC COUNT            produce COUNT changes through the sink
 *   bench_kafka --dump COUNT FILE              write the same records as "key<TAB>value" lines
 *
 * Each change is a ~5 KB Pod (1000 keys, resourceVersion rising) in the JSON
 * envelope (format "json", mode "events"); the sink builds the envelope
 * itself inside produce(), kcat gets it ready-made. Events are created before
 * the clock starts. Measured from the first produce() to the last ack:
 * events/s, MB/s of values, CPU µs per event (getrusage of the whole
 * process: producing threads, librdkafka's threads, the poller) and the
 * p50/p99 latency from produce() to the delivery report's ack. The producer
 * settings are the sink's defaults (bench/kafka.sh hands kcat the same ones).
 */
#include "common/alloc.h"
#include "common/buf.h"
#include "common/event.h"
#include "common/time.h"
#include "sinks/envelope.h"
#include "sinks/sink.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define KB_BENCH_KEYS 1000

typedef struct kb_bench_slot {
    int64_t t0_ns;
    int64_t lat_ns;
    _Atomic int err;
} kb_bench_slot_t;

static _Atomic uint64_t kb_bench_acks;

static void kb_bench_ack(void *opaque, kb_err_t err) {
    kb_bench_slot_t *s = opaque;
    s->lat_ns = kb_now_mono_ns() - s->t0_ns;
    atomic_store(&s->err, (int)err);
    atomic_fetch_add(&kb_bench_acks, 1);
}

/* A Pod of about 5 KB: the shape matters less than the size here. */
static kb_event_t *kb_bench_event(kb_resource_t *res, unsigned i) {
    char ns[32], name[32], rv[32], uid[48];
    snprintf(ns, sizeof(ns), "team-%u", i % 10);
    snprintf(name, sizeof(name), "web-%u", (i / 10) % (KB_BENCH_KEYS / 10));
    snprintf(rv, sizeof(rv), "%u", 1000 + i);
    snprintf(uid, sizeof(uid), "6f1c2a9e-0000-4000-8000-%012u", i % KB_BENCH_KEYS);
    kb_buf_t obj = KB_BUF_INIT;
    kb_buf_appendf(&obj, "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\","
                   "\"uid\":\"%s\",\"resourceVersion\":\"%s\",\"labels\":{\"app\":\"web\",\"tier\":\"frontend\"}},"
                   "\"spec\":{\"containers\":[", name, ns, uid, rv);
    for (int c = 0; obj.len < 4900; c++)
        kb_buf_appendf(&obj, "%s{\"name\":\"c%d\",\"image\":\"registry.example/web:1.%d\",\"env\":[{\"name\":"
                       "\"LOG_LEVEL\",\"value\":\"info\"},{\"name\":\"PORT\",\"value\":\"80%02d\"}],\"resources\":"
                       "{\"limits\":{\"cpu\":\"500m\",\"memory\":\"256Mi\"}}}", c ? "," : "", c, c, c);
    kb_buf_append_str(&obj, "]},\"status\":{\"phase\":\"Running\"}}");
    kb_event_init_t in = {
        .type = KB_EV_MODIFIED, .res = res,
        .ns = ns, .ns_len = strlen(ns), .name = name, .name_len = strlen(name),
        .uid = uid, .uid_len = strlen(uid), .rv = rv, .rv_len = strlen(rv),
        .obj = obj.data, .obj_len = obj.len,
        .observed_ns = kb_now_real_ns(), .read_mono_ns = kb_now_mono_ns(),
    };
    kb_event_t *ev = kb_event_new(&in);
    kb_buf_fini(&obj);
    return ev;
}

static int kb_bench_cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double kb_bench_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static int kb_bench_dump(kb_event_t **evs, unsigned n, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    kb_buf_t b = KB_BUF_INIT;
    for (unsigned i = 0; i < n; i++) {
        kb_buf_reset(&b);
        kb_buf_append(&b, evs[i]->key, evs[i]->key_len);
        kb_buf_append_char(&b, '\t');
        kb_envelope_json(evs[i], &b);
        kb_buf_append_char(&b, '\n');
        fwrite(b.data, 1, b.len, f);
    }
    kb_buf_fini(&b);
    return fclose(f) == 0 ? 0 : 1;
}

static int kb_bench_run(kb_event_t **evs, unsigned n, const char *brokers, const char *topic) {
    kb_config_t cfg = {.path = "bench", .cluster = {.name = "bench"}, .sharding_replicas = 1};
    kb_config_sink_t sc = {.name = "bench", .type = KB_SINK_KAFKA, .brokers = (char *)brokers};
    char err[512];
    void *st = NULL;
    if (kb_sink_kafka_ops.create(&sc, &cfg, &st, err, sizeof(err)) != KB_OK) {
        fprintf(stderr, "bench_kafka: %s\n", err);
        return 1;
    }
    kb_bench_slot_t *slots = kb_calloc(n, sizeof(*slots));
    /* Warm up: metadata, producer id, the topic's creation. */
    kb_bench_slot_t warm = {0};
    kb_msg_t m = {.ev = evs[0], .topic = topic, .topic_len = strlen(topic), .key = evs[0]->key,
                  .key_len = evs[0]->key_len, .route = "bench", .ack = kb_bench_ack, .ack_opaque = &warm};
    kb_sink_kafka_ops.produce(st, &m, -1);
    kb_sink_kafka_ops.flush(st, 60000);
    atomic_store(&kb_bench_acks, 0);

    uint64_t bytes = 0;
    double cpu0 = kb_bench_cpu_s();
    int64_t t0 = kb_now_mono_ns();
    for (unsigned i = 0; i < n; i++) {
        m.ev = evs[i];
        m.key = evs[i]->key;
        m.key_len = evs[i]->key_len;
        m.ack_opaque = &slots[i];
        slots[i].t0_ns = kb_now_mono_ns();
        kb_err_t e;
        while ((e = kb_sink_kafka_ops.produce(st, &m, 1000)) == KB_ERR_FULL)
            ;
        if (e != KB_OK) {
            fprintf(stderr, "bench_kafka: produce: %s\n", kb_err_str(e));
            return 1;
        }
        bytes += evs[i]->obj_len;
    }
    if (kb_sink_kafka_ops.flush(st, 120000) != KB_OK) {
        fprintf(stderr, "bench_kafka: flush timed out\n");
        return 1;
    }
    double wall = (double)(kb_now_mono_ns() - t0) / 1e9, cpu = kb_bench_cpu_s() - cpu0;
    int64_t *lat = kb_malloc(n * sizeof(*lat));
    unsigned failed = 0;
    for (unsigned i = 0; i < n; i++) {
        lat[i] = slots[i].lat_ns;
        failed += atomic_load(&slots[i].err) != KB_OK;
    }
    qsort(lat, n, sizeof(*lat), kb_bench_cmp);
    printf("sink  events=%u failed=%u wall_s=%.3f events_per_s=%.0f value_MB_per_s=%.1f cpu_us_per_event=%.2f "
           "p50_ms=%.2f p99_ms=%.2f\n", n, failed, wall, n / wall, (double)bytes / wall / 1e6, cpu * 1e6 / n,
           (double)lat[n / 2] / 1e6, (double)lat[(size_t)n * 99 / 100] / 1e6);
    kb_sink_kafka_ops.destroy(st);
    free(lat);
    free(slots);
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    bool dump = argc == 4 && !strcmp(argv[1], "--dump");
    if (argc != 4) {
        fprintf(stderr, "usage: bench_kafka BROKERS TOPIC COUNT | bench_kafka --dump COUNT FILE\n");
        return 2;
    }
    unsigned n = (unsigned)strtoul(dump ? argv[2] : argv[3], NULL, 10);
    if (n == 0)
        return 2;
    kb_resource_t *res = kb_resource_new("bench", "pods", "", "v1", "pods");
    kb_resource_set_kind(res, "Pod", 3);
    kb_event_t **evs = kb_malloc(n * sizeof(*evs));
    for (unsigned i = 0; i < n; i++)
        evs[i] = kb_bench_event(res, i);
    int rc = dump ? kb_bench_dump(evs, n, argv[3]) : kb_bench_run(evs, n, argv[1], argv[2]);
    for (unsigned i = 0; i < n; i++)
        kb_event_unref(evs[i]);
    free(evs);
    kb_resource_unref(res);
    return rc;
}
