/* tests/unit/sinks/test_heartbeat.c — HEARTBEAT records as a consumer sees
 * them: the exact JSON, beats arriving with increasing seq and the informer's
 * last resourceVersion, nothing emitted after stop, and a clean stop before
 * the first beat. A fake emit callback stands in for the sink. */
#include "common/buf.h"
#include "common/time.h"
#include "config/config.h"
#include "sinks/heartbeat.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RECS 16

/* What the fake sink received. */
typedef struct fake_sink {
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    char *recs[MAX_RECS];
    size_t n;
    const char *rv; /* what the last_rv callback reports */
} fake_sink_t;

static void fake_emit(void *opaque, const char *json, size_t len) {
    fake_sink_t *fs = opaque;
    assert_int_equal(strlen(json), len);
    pthread_mutex_lock(&fs->mtx);
    if (fs->n < MAX_RECS)
        fs->recs[fs->n++] = strdup(json);
    pthread_cond_broadcast(&fs->cond);
    pthread_mutex_unlock(&fs->mtx);
}

static void fake_rv(void *opaque, char *buf, size_t size) {
    fake_sink_t *fs = opaque;
    snprintf(buf, size, "%s", fs->rv);
}

/* Wait (at most 20 s) until the sink holds n records. */
static bool wait_for(fake_sink_t *fs, size_t n) {
    int64_t deadline = kb_now_mono_ns() + 20 * KB_NS_PER_SEC;
    pthread_mutex_lock(&fs->mtx);
    while (fs->n < n && kb_now_mono_ns() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&fs->cond, &fs->mtx, &ts);
    }
    bool ok = fs->n >= n;
    pthread_mutex_unlock(&fs->mtx);
    return ok;
}

static void fake_init(fake_sink_t *fs, const char *rv) {
    memset(fs, 0, sizeof(*fs));
    pthread_mutex_init(&fs->mtx, NULL);
    pthread_cond_init(&fs->cond, NULL);
    fs->rv = rv;
}

static void fake_fini(fake_sink_t *fs) {
    for (size_t i = 0; i < fs->n; i++)
        free(fs->recs[i]);
    pthread_mutex_destroy(&fs->mtx);
    pthread_cond_destroy(&fs->cond);
}

static kb_config_route_t route = {.name = "audit", .informer = "pods", .heartbeat_seconds = 30};

/* Check one record's fields; returns its seq. */
static json_int_t check_record(const char *rec, const char *want_rv) {
    json_error_t je;
    json_t *o = json_loads(rec, 0, &je);
    if (!o)
        fail_msg("not JSON: %s (%s)", rec, je.text);
    assert_string_equal(json_string_value(json_object_get(o, "type")), "HEARTBEAT");
    assert_string_equal(json_string_value(json_object_get(o, "cluster")), "prod-eu");
    assert_string_equal(json_string_value(json_object_get(o, "informer")), "pods");
    assert_string_equal(json_string_value(json_object_get(o, "route")), "audit");
    assert_string_equal(json_string_value(json_object_get(o, "resourceVersion")), want_rv);
    const char *t = json_string_value(json_object_get(o, "time"));
    assert_non_null(t);
    assert_int_equal(strlen(t), 27); /* 2026-11-30T08:00:00.123456Z */
    assert_int_equal(t[26], 'Z');
    json_int_t seq = json_integer_value(json_object_get(o, "seq"));
    json_decref(o);
    return seq;
}

static void test_format_exact(void **state) {
    (void)state;
    kb_buf_t b = KB_BUF_INIT;
    kb_heartbeat_format(&b, "pr\"od", "pods", "r1", "", INT64_C(1764489600123456000), 7);
    assert_string_equal(b.data, "{\"type\":\"HEARTBEAT\",\"cluster\":\"pr\\\"od\",\"informer\":\"pods\","
                                "\"route\":\"r1\",\"resourceVersion\":\"\",\"time\":\"2025-11-30T08:00:00.123456Z\","
                                "\"seq\":7}");
    kb_buf_fini(&b);
}

static void test_beats_carry_last_rv(void **state) {
    (void)state;
    fake_sink_t fs;
    fake_init(&fs, "12345");
    kb_heartbeat_t *hb = kb_heartbeat_new(&route, "prod-eu", 20, fake_emit, fake_rv, &fs);
    assert_int_equal(kb_heartbeat_start(hb), KB_OK);
    assert_int_equal(kb_heartbeat_start(hb), KB_OK); /* already running: nothing more */
    assert_true(wait_for(&fs, 3));
    kb_heartbeat_stop(hb);
    pthread_mutex_lock(&fs.mtx);
    size_t n = fs.n;
    pthread_mutex_unlock(&fs.mtx);
    assert_int_equal(kb_heartbeat_count(hb), n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(check_record(fs.recs[i], "12345"), (json_int_t)i + 1);
    kb_heartbeat_stop(hb); /* idempotent */
    kb_heartbeat_destroy(hb);
    assert_int_equal(fs.n, n); /* nothing emitted after stop returned */
    fake_fini(&fs);
}

static void test_set_rv_without_callback(void **state) {
    (void)state;
    fake_sink_t fs;
    fake_init(&fs, NULL);
    kb_heartbeat_t *hb = kb_heartbeat_new(&route, "prod-eu", 20, fake_emit, NULL, &fs);
    kb_heartbeat_set_rv(hb, "777xyz", 3);
    assert_int_equal(kb_heartbeat_start(hb), KB_OK);
    assert_true(wait_for(&fs, 1));
    kb_heartbeat_destroy(hb); /* stops first */
    assert_int_equal(check_record(fs.recs[0], "777"), 1);
    fake_fini(&fs);
}

static void test_stop_before_first_beat(void **state) {
    (void)state;
    fake_sink_t fs;
    fake_init(&fs, "1");
    kb_heartbeat_t *hb = kb_heartbeat_new(&route, "prod-eu", 3600 * 1000, fake_emit, fake_rv, &fs);
    assert_int_equal(kb_heartbeat_start(hb), KB_OK);
    kb_heartbeat_stop(hb); /* wakes the thread out of its hour-long wait */
    assert_int_equal(kb_heartbeat_count(hb), 0);
    assert_int_equal(fs.n, 0);
    kb_heartbeat_destroy(hb);
    kb_heartbeat_destroy(NULL);
    /* never started */
    hb = kb_heartbeat_new(&route, "prod-eu", 1000, fake_emit, fake_rv, &fs);
    kb_heartbeat_destroy(hb);
    fake_fini(&fs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_exact),
        cmocka_unit_test(test_beats_carry_last_rv),
        cmocka_unit_test(test_set_rv_without_callback),
        cmocka_unit_test(test_stop_before_first_beat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
