/* sinks/heartbeat.c — periodic HEARTBEAT records (see heartbeat.h).
 *
 * Design: one thread per heartbeat, sleeping on a CLOCK_MONOTONIC condition
 * variable until the next slot of a fixed schedule (start + k·interval) or
 * until _stop signals it. The lock guards only the stop flag and the stored
 * RV; the record is built and emitted with no lock held, so a slow sink can
 * delay heartbeats but never the threads that update the RV. A beat that an
 * emit overran is skipped (the schedule jumps to the next slot in the
 * future), so a stalled sink does not release a burst of stale beats.
 */
#include "sinks/heartbeat.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/time.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_HB_RV_MAX 64 /* resourceVersions are short decimal strings in practice */

struct kb_heartbeat {
    char *cluster, *informer, *route; /* owned copies */
    int64_t interval_ms;
    kb_heartbeat_emit_fn *emit;
    kb_heartbeat_rv_fn *last_rv; /* NULL: use rv[] */
    void *opaque;

    pthread_mutex_t mtx;
    pthread_cond_t cond;         /* CLOCK_MONOTONIC; signalled by _stop */
    bool stop;                   /* under mtx */
    char rv[KB_HB_RV_MAX];       /* under mtx; set by kb_heartbeat_set_rv */
    bool running;                /* the thread exists; owner thread only */
    pthread_t thread;
    _Atomic uint64_t count;      /* beats emitted */
};

kb_heartbeat_t *kb_heartbeat_new(const kb_config_route_t *route, const char *cluster, int64_t interval_ms,
                                 kb_heartbeat_emit_fn *emit, kb_heartbeat_rv_fn *last_rv, void *opaque) {
    KB_ASSERT(interval_ms > 0 && emit);
    kb_heartbeat_t *hb = kb_calloc(1, sizeof(*hb));
    hb->cluster = kb_strdup(cluster);
    hb->informer = kb_strdup(route->informer);
    hb->route = kb_strdup(route->name);
    hb->interval_ms = interval_ms;
    hb->emit = emit;
    hb->last_rv = last_rv;
    hb->opaque = opaque;
    pthread_mutex_init(&hb->mtx, NULL);
    kb_cond_init_mono(&hb->cond);
    return hb;
}

void kb_heartbeat_format(kb_buf_t *out, const char *cluster, const char *informer, const char *route,
                         const char *rv, int64_t real_ns, uint64_t seq) {
    char when[40];
    kb_format_rfc3339_us(real_ns, when, sizeof(when));
    kb_buf_append_str(out, "{\"type\":\"HEARTBEAT\",\"cluster\":");
    kb_buf_append_json_str(out, cluster, strlen(cluster));
    kb_buf_append_str(out, ",\"informer\":");
    kb_buf_append_json_str(out, informer, strlen(informer));
    kb_buf_append_str(out, ",\"route\":");
    kb_buf_append_json_str(out, route, strlen(route));
    kb_buf_append_str(out, ",\"resourceVersion\":");
    kb_buf_append_json_str(out, rv, strlen(rv));
    kb_buf_appendf(out, ",\"time\":\"%s\",\"seq\":%llu}", when, (unsigned long long)seq);
}

static void kb_heartbeat_beat(kb_heartbeat_t *hb, kb_buf_t *rec, uint64_t seq) {
    char rv[KB_HB_RV_MAX] = "";
    if (hb->last_rv) {
        hb->last_rv(hb->opaque, rv, sizeof(rv));
        rv[sizeof(rv) - 1] = '\0';
    } else {
        pthread_mutex_lock(&hb->mtx);
        memcpy(rv, hb->rv, sizeof(rv));
        pthread_mutex_unlock(&hb->mtx);
    }
    kb_buf_reset(rec);
    kb_heartbeat_format(rec, hb->cluster, hb->informer, hb->route, rv, kb_now_real_ns(), seq);
    hb->emit(hb->opaque, rec->data, rec->len);
    atomic_fetch_add(&hb->count, 1);
}

static void *kb_heartbeat_main(void *arg) {
    kb_heartbeat_t *hb = arg;
    char tname[16];
    snprintf(tname, sizeof(tname), "kb:hb/%s", hb->route);
    kb_thread_set_name(tname);
    kb_buf_t rec = KB_BUF_INIT;
    const int64_t step = hb->interval_ms * KB_NS_PER_MS;
    int64_t next = kb_now_mono_ns() + step;
    uint64_t seq = 0;
    pthread_mutex_lock(&hb->mtx);
    while (!hb->stop) {
        int64_t now = kb_now_mono_ns();
        if (now < next) {
            struct timespec ts = {.tv_sec = (time_t)(next / KB_NS_PER_SEC), .tv_nsec = (long)(next % KB_NS_PER_SEC)};
            pthread_cond_timedwait(&hb->cond, &hb->mtx, &ts);
            continue; /* re-check stop and the clock */
        }
        pthread_mutex_unlock(&hb->mtx);
        kb_heartbeat_beat(hb, &rec, ++seq);
        next += step;
        now = kb_now_mono_ns();
        if (next <= now) /* the emit overran whole slots: skip them */
            next += ((now - next) / step + 1) * step;
        pthread_mutex_lock(&hb->mtx);
    }
    pthread_mutex_unlock(&hb->mtx);
    kb_buf_fini(&rec);
    return NULL;
}

kb_err_t kb_heartbeat_start(kb_heartbeat_t *hb) {
    if (hb->running)
        return KB_OK;
    hb->stop = false;
    if (pthread_create(&hb->thread, NULL, kb_heartbeat_main, hb) != 0) {
        KB_ERROR("heartbeat", "route=%s: cannot start the heartbeat thread", hb->route);
        return KB_ERR_INTERNAL;
    }
    hb->running = true;
    return KB_OK;
}

void kb_heartbeat_stop(kb_heartbeat_t *hb) {
    if (!hb->running)
        return;
    pthread_mutex_lock(&hb->mtx);
    hb->stop = true;
    pthread_cond_signal(&hb->cond);
    pthread_mutex_unlock(&hb->mtx);
    pthread_join(hb->thread, NULL);
    hb->running = false;
}

void kb_heartbeat_destroy(kb_heartbeat_t *hb) {
    if (!hb)
        return;
    kb_heartbeat_stop(hb);
    pthread_cond_destroy(&hb->cond);
    pthread_mutex_destroy(&hb->mtx);
    free(hb->cluster);
    free(hb->informer);
    free(hb->route);
    free(hb);
}

void kb_heartbeat_set_rv(kb_heartbeat_t *hb, const char *rv, size_t len) {
    if (len >= KB_HB_RV_MAX)
        len = KB_HB_RV_MAX - 1;
    pthread_mutex_lock(&hb->mtx);
    memcpy(hb->rv, rv, len);
    hb->rv[len] = '\0';
    pthread_mutex_unlock(&hb->mtx);
}

uint64_t kb_heartbeat_count(const kb_heartbeat_t *hb) {
    return atomic_load(&((kb_heartbeat_t *)hb)->count);
}
