/* bridge/bridge.c — wiring: informer FIFOs → shard workers → router → sinks.
 *
 * Design note.
 *
 * One worker thread per informer shard pops all pending deltas of one key at
 * a time, routes each event and hands it to the sinks in order; a key lives
 * in exactly one shard, so per-key order is fixed here and kept by each sink
 * (one key → one partition / topic). Workers never wait for acks: the sinks
 * acknowledge asynchronously and the ack callback only counts. When a sink's
 * buffer is full, produce() blocks (with a timeout, retried), the worker
 * stops popping, the FIFO fills, and the reflector stops reading its socket:
 * backpressure all the way to the API server, no unbounded buffer anywhere.
 *
 * Shutdown: stop the informers (reflectors joined, FIFOs closed), let the
 * workers drain the FIFOs into the sinks until the deadline, flush the sinks
 * with what time remains. Anything still undelivered at the deadline was
 * never acknowledged, so it is not lost for a bridge with a checkpoint: it
 * is read again on the next start.
 */
#include "bridge/bridge.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/histogram.h"
#include "common/log.h"
#include "common/time.h"
#include "informer/apiclient.h"
#include "informer/informer.h"
#include "sinks/router.h"
#include "sinks/sink.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kb_pipeline kb_pipeline_t;

typedef struct kb_worker {
    kb_pipeline_t *p;
    size_t shard;
    pthread_t thread;
    bool started;
    _Atomic bool done;           /* the worker saw its FIFO closed and empty */
} kb_worker_t;

struct kb_pipeline {
    struct kb_bridge *bridge;
    kb_informer_t *inf;
    kb_router_t *router;
    kb_worker_t *workers;        /* one per shard */
    size_t n_workers;
    _Atomic uint64_t delivered;  /* acks with KB_OK */
    _Atomic uint64_t failed;     /* produce errors and failed acks */
    _Atomic uint64_t routed;     /* messages handed to sinks */
    _Atomic uint64_t unrouted;   /* events no route took */
    _Atomic int64_t inflight;    /* produced, not yet acked */
    kb_histogram_t handle[KB_EV_TYPE_COUNT]; /* worker time per event, by type */
};

struct kb_bridge {
    const kb_config_t *cfg;
    kb_apiclient_t *api;
    kb_sink_t **sinks;           /* parallel to cfg->sinks */
    kb_pipeline_t *pipes;        /* parallel to cfg->informers */
    size_t n_pipes;
    _Atomic bool hard_stop;      /* the drain deadline passed: stop delivering */
    kb_histogram_t *delivery;    /* per sink: watch read → sink acknowledgement */
    _Atomic uint64_t *sink_acked, *sink_failed; /* per sink, counted here for every sink type */
};

kb_err_t kb_bridge_validate(const kb_config_t *cfg, char *errstr, size_t errstr_size) {
    for (size_t i = 0; i < cfg->n_sinks; i++) {
        kb_err_t err = kb_sink_validate(&cfg->sinks[i], cfg, errstr, errstr_size);
        if (err != KB_OK)
            return err;
    }
    for (size_t i = 0; i < cfg->n_routes; i++) {
        const kb_config_route_t *rc = &cfg->routes[i];
        const kb_config_sink_t *sc = kb_config_find_sink(cfg, rc->sink);
        if (sc && sc->type == KB_SINK_FILE && rc->format == KB_FORMAT_CE_BINARY) {
            snprintf(errstr, errstr_size,
                     "%s:%d: routes.%s.format: cloudevents-binary needs message headers, which a file sink does not "
                     "have; use cloudevents-structured",
                     cfg->path, rc->line, rc->name);
            return KB_ERR_CONFIG;
        }
    }
    return KB_OK;
}

/* One event on its way to its routes' sinks: acknowledged to the informer
 * (and so to the checkpoint) when the last of them acknowledged it. */
typedef struct kb_delivery {
    kb_pipeline_t *p;
    uint64_t seq;
    int64_t read_mono_ns;  /* when the change came off the wire */
    _Atomic int pending;  /* messages not yet acknowledged, +1 while routing */
    _Atomic bool failed;  /* a sink gave up on one: the checkpoint must not pass it */
} kb_delivery_t;

static void kb_delivery_release(kb_delivery_t *d) {
    if (atomic_fetch_sub(&d->pending, 1) != 1)
        return;
    if (!atomic_load(&d->failed))
        kb_informer_done(d->p->inf, d->seq);
    free(d);
}

/* The per-message ack context: which sink, and the event's delivery. */
typedef struct kb_msg_ack {
    kb_delivery_t *d;
    size_t sink;           /* index into cfg->sinks */
} kb_msg_ack_t;

static void kb_bridge_ack(void *opaque, kb_err_t err) {
    kb_msg_ack_t *ma = opaque;
    kb_delivery_t *d = ma->d;
    kb_pipeline_t *p = d->p;
    kb_bridge_t *b = p->bridge;
    if (err == KB_OK) {
        atomic_fetch_add(&p->delivered, 1);
        atomic_fetch_add(&b->sink_acked[ma->sink], 1);
        kb_histogram_observe_ns(&b->delivery[ma->sink], kb_now_mono_ns() - d->read_mono_ns);
    } else {
        atomic_fetch_add(&b->sink_failed[ma->sink], 1);
        static kb_ratelimit_t rl;
        uint64_t sup = 0;
        atomic_fetch_add(&p->failed, 1);
        atomic_store(&d->failed, true);
        if (kb_ratelimit_allow(&rl, 10000, &sup))
            KB_ERROR("bridge", "informer=%s delivery failed: %s; the checkpoint stays before it, so it is "
                     "delivered again after a restart (suppressed=%llu)", kb_informer_conf(p->inf)->name,
                     kb_err_str(err), (unsigned long long)sup);
    }
    atomic_fetch_sub(&p->inflight, 1);
    free(ma);
    kb_delivery_release(d);
}

/* Hand one event to every route that takes it, in route order. */
static void kb_deliver(kb_pipeline_t *p, kb_event_t *ev, kb_buf_t *topic, kb_buf_t *key) {
    bool routed = false;
    kb_delivery_t *d = kb_malloc(sizeof(*d));
    d->p = p;
    d->seq = ev->seq;
    d->read_mono_ns = ev->read_mono_ns;
    int64_t t0 = kb_now_mono_ns();
    atomic_init(&d->pending, 1);
    atomic_init(&d->failed, false);
    for (size_t i = 0; i < p->router->n; i++) {
        const kb_route_t *route = &p->router->routes[i];
        if (!kb_route_match(route, ev))
            continue;
        routed = true;
        kb_buf_reset(topic);
        kb_buf_reset(key);
        kb_route_render(route, ev, topic, key);
        kb_msg_ack_t *ma = kb_malloc(sizeof(*ma));
        ma->d = d;
        ma->sink = route->sink_index;
        kb_msg_t msg = {
            .ev = ev,
            .topic = topic->data, .topic_len = topic->len,
            .key = key->data, .key_len = key->len,
            .format = route->conf->format,
            .mode = route->conf->mode,
            .route = route->conf->name,
            .ack = kb_bridge_ack,
            .ack_opaque = ma,
        };
        atomic_fetch_add(&p->inflight, 1);
        atomic_fetch_add(&d->pending, 1);
        for (;;) {
            kb_err_t err = kb_sink_produce(route->sink, &msg, 1000);
            if (err == KB_OK) {
                atomic_fetch_add(&p->routed, 1);
                break;
            }
            if (err == KB_ERR_FULL && !atomic_load(&p->bridge->hard_stop)) {
                static kb_ratelimit_t rl;
                if (kb_ratelimit_allow(&rl, 10000, NULL))
                    KB_WARN("bridge", "sink=%s is full; holding the informer's queue (backpressure)",
                            route->sink->name);
                continue;
            }
            atomic_fetch_sub(&p->inflight, 1);
            atomic_fetch_add(&p->failed, 1);
            atomic_store(&d->failed, true);
            atomic_fetch_sub(&d->pending, 1);
            atomic_fetch_add(&p->bridge->sink_failed[ma->sink], 1);
            free(ma);
            static kb_ratelimit_t rl2;
            if (kb_ratelimit_allow(&rl2, 10000, NULL))
                KB_ERROR("bridge", "sink=%s refused key=%s rv=%s: %s", route->sink->name, ev->key, ev->rv,
                         kb_err_str(err));
            break;
        }
    }
    if (!routed)
        atomic_fetch_add(&p->unrouted, 1);
    kb_histogram_observe_ns(&p->handle[ev->type], kb_now_mono_ns() - t0);
    kb_delivery_release(d);
}

static void *kb_worker_main(void *arg) {
    kb_worker_t *w = arg;
    kb_pipeline_t *p = w->p;
    char tname[32];
    snprintf(tname, sizeof(tname), "kb:work/%s/%zu", kb_informer_conf(p->inf)->name, w->shard);
    kb_thread_set_name(tname);
    kb_deltafifo_t *fifo = kb_informer_fifo(p->inf, w->shard);
    kb_buf_t topic = KB_BUF_INIT, key = KB_BUF_INIT;
    kb_deltas_t d;
    kb_deltas_init(&d);
    while (kb_deltafifo_pop(fifo, &d, -1) == KB_OK) {
        for (size_t i = 0; i < d.n && !atomic_load(&p->bridge->hard_stop); i++)
            kb_deliver(p, d.ev[i], &topic, &key);
        kb_deltas_fini(&d);
        kb_deltas_init(&d);
    }
    kb_deltas_fini(&d);
    kb_buf_fini(&topic);
    kb_buf_fini(&key);
    atomic_store(&w->done, true);
    return NULL;
}

kb_bridge_t *kb_bridge_new(const kb_config_t *cfg, char *errstr, size_t errstr_size) {
    if (kb_bridge_validate(cfg, errstr, errstr_size) != KB_OK)
        return NULL;
    kb_bridge_t *b = kb_calloc(1, sizeof(*b));
    b->cfg = cfg;
    char why[512];
    b->api = kb_apiclient_new(&cfg->cluster, why, sizeof(why));
    if (!b->api) {
        snprintf(errstr, errstr_size, "%s: %s", cfg->path, why);
        goto fail;
    }
    b->sinks = kb_calloc(cfg->n_sinks ? cfg->n_sinks : 1, sizeof(*b->sinks));
    b->delivery = kb_calloc(cfg->n_sinks ? cfg->n_sinks : 1, sizeof(*b->delivery));
    b->sink_acked = kb_calloc(cfg->n_sinks ? cfg->n_sinks : 1, sizeof(*b->sink_acked));
    b->sink_failed = kb_calloc(cfg->n_sinks ? cfg->n_sinks : 1, sizeof(*b->sink_failed));
    for (size_t i = 0; i < cfg->n_sinks; i++) {
        b->sinks[i] = kb_sink_create(&cfg->sinks[i], cfg, errstr, errstr_size);
        if (!b->sinks[i])
            goto fail;
    }
    b->pipes = kb_calloc(cfg->n_informers ? cfg->n_informers : 1, sizeof(*b->pipes));
    for (size_t i = 0; i < cfg->n_informers; i++) {
        kb_pipeline_t *p = &b->pipes[i];
        p->bridge = b;
        p->inf = kb_informer_new(cfg, &cfg->informers[i], b->api, errstr, errstr_size);
        if (!p->inf)
            goto fail;
        b->n_pipes++;
        p->router = kb_router_new(cfg, cfg->informers[i].name, b->sinks, errstr, errstr_size);
        if (!p->router)
            goto fail;
        if (p->router->n == 0)
            KB_WARN("bridge", "informer=%s has no route: its changes go nowhere", cfg->informers[i].name);
        p->n_workers = kb_informer_shards(p->inf);
        p->workers = kb_calloc(p->n_workers, sizeof(*p->workers));
        for (size_t s = 0; s < p->n_workers; s++) {
            p->workers[s].p = p;
            p->workers[s].shard = s;
        }
    }
    return b;
fail:
    kb_bridge_destroy(b);
    return NULL;
}

kb_err_t kb_bridge_start(kb_bridge_t *b) {
    for (size_t i = 0; i < b->n_pipes; i++) {
        kb_pipeline_t *p = &b->pipes[i];
        for (size_t s = 0; s < p->n_workers; s++) {
            if (pthread_create(&p->workers[s].thread, NULL, kb_worker_main, &p->workers[s]) != 0)
                KB_FATAL("cannot start a worker thread");
            p->workers[s].started = true;
        }
        kb_informer_start(p->inf);
    }
    return KB_OK;
}

static int64_t kb_bridge_inflight(kb_bridge_t *b) {
    int64_t n = 0;
    for (size_t i = 0; i < b->n_pipes; i++)
        n += atomic_load(&b->pipes[i].inflight);
    return n;
}

kb_err_t kb_bridge_stop(kb_bridge_t *b, int timeout_ms) {
    int64_t deadline = kb_now_mono_ns() + (int64_t)timeout_ms * KB_NS_PER_MS;
    for (size_t i = 0; i < b->n_pipes; i++)
        kb_informer_stop(b->pipes[i].inf);
    /* Workers drain the closed FIFOs; past the deadline they stop delivering
     * (a worker waiting on a full sink notices within a second). */
    for (;;) {
        bool all_done = true;
        for (size_t i = 0; i < b->n_pipes && all_done; i++)
            for (size_t s = 0; s < b->pipes[i].n_workers && all_done; s++)
                all_done = atomic_load(&b->pipes[i].workers[s].done);
        if (all_done)
            break;
        if (kb_now_mono_ns() >= deadline) {
            atomic_store(&b->hard_stop, true);
            break;
        }
        kb_sleep_ms_interruptible(10, NULL);
    }
    for (size_t i = 0; i < b->n_pipes; i++) {
        kb_pipeline_t *p = &b->pipes[i];
        for (size_t s = 0; s < p->n_workers; s++)
            if (p->workers[s].started) {
                pthread_join(p->workers[s].thread, NULL);
                p->workers[s].started = false;
            }
    }
    kb_err_t result = KB_OK;
    for (size_t i = 0; i < b->cfg->n_sinks; i++) {
        int64_t left_ms = (deadline - kb_now_mono_ns()) / KB_NS_PER_MS;
        if (kb_sink_stop(b->sinks[i], left_ms > 0 ? (int)left_ms : 0) != KB_OK)
            result = KB_ERR_TIMEDOUT;
    }
    for (size_t i = 0; i < b->n_pipes; i++)
        kb_informer_save_checkpoint(b->pipes[i].inf);
    int64_t left = kb_bridge_inflight(b);
    if (left > 0) {
        KB_WARN("bridge", "stopped with %lld message(s) not acknowledged after %d ms", (long long)left, timeout_ms);
        result = KB_ERR_TIMEDOUT;
    }
    return result;
}

void kb_bridge_log_stats(kb_bridge_t *b) {
    for (size_t i = 0; i < b->n_pipes; i++) {
        kb_pipeline_t *p = &b->pipes[i];
        kb_informer_stats_t st;
        kb_informer_stats(p->inf, &st);
        KB_INFO("bridge",
                "informer=%s objects=%zu added=%llu modified=%llu deleted=%llu sync=%llu delivered=%llu failed=%llu "
                "relists=%llu watches=%llu bookmarks=%llu gated=%llu malformed=%llu gone=%llu throttled=%llu "
                "server_errors=%llu connect_errors=%llu rv=%s",
                kb_informer_conf(p->inf)->name, st.objects, (unsigned long long)st.events[KB_EV_ADDED],
                (unsigned long long)st.events[KB_EV_MODIFIED], (unsigned long long)st.events[KB_EV_DELETED],
                (unsigned long long)st.events[KB_EV_SYNC], (unsigned long long)atomic_load(&p->delivered),
                (unsigned long long)atomic_load(&p->failed), (unsigned long long)st.relists,
                (unsigned long long)st.watches, (unsigned long long)st.bookmarks, (unsigned long long)st.gated,
                (unsigned long long)st.errors[KB_WATCH_ERR_MALFORMED], (unsigned long long)st.errors[KB_WATCH_ERR_GONE],
                (unsigned long long)st.errors[KB_WATCH_ERR_THROTTLED],
                (unsigned long long)st.errors[KB_WATCH_ERR_SERVER], (unsigned long long)st.errors[KB_WATCH_ERR_CONNECT],
                st.last_rv);
    }
}

void kb_bridge_destroy(kb_bridge_t *b) {
    if (!b)
        return;
    for (size_t i = 0; i < b->n_pipes; i++) {
        kb_pipeline_t *p = &b->pipes[i];
        if (p->inf)
            kb_informer_stop(p->inf);
        for (size_t s = 0; s < p->n_workers; s++)
            if (p->workers[s].started)
                pthread_join(p->workers[s].thread, NULL);
        free(p->workers);
        kb_router_destroy(p->router);
        kb_informer_destroy(p->inf);
    }
    free(b->pipes);
    for (size_t i = 0; b->sinks && i < b->cfg->n_sinks; i++)
        kb_sink_destroy(b->sinks[i]);
    free(b->sinks);
    free(b->delivery);
    free(b->sink_acked);
    free(b->sink_failed);
    kb_apiclient_destroy(b->api);
    free(b);
}

/* ---- introspection (HTTP API) ------------------------------------------ */

size_t kb_bridge_informer_count(const kb_bridge_t *b) {
    return b->n_pipes;
}

kb_informer_t *kb_bridge_informer(kb_bridge_t *b, size_t i) {
    return i < b->n_pipes ? b->pipes[i].inf : NULL;
}

kb_informer_t *kb_bridge_find_informer(kb_bridge_t *b, const char *name) {
    for (size_t i = 0; i < b->n_pipes; i++)
        if (!strcmp(kb_informer_conf(b->pipes[i].inf)->name, name))
            return b->pipes[i].inf;
    return NULL;
}

const kb_config_t *kb_bridge_config(const kb_bridge_t *b) {
    return b->cfg;
}

void kb_bridge_pipeline_stats(kb_bridge_t *b, size_t i, kb_pipeline_stats_t *st) {
    memset(st, 0, sizeof(*st));
    if (i >= b->n_pipes)
        return;
    kb_pipeline_t *p = &b->pipes[i];
    st->delivered = atomic_load(&p->delivered);
    st->failed = atomic_load(&p->failed);
    st->routed = atomic_load(&p->routed);
    st->unrouted = atomic_load(&p->unrouted);
    st->inflight = atomic_load(&p->inflight);
}

const kb_histogram_t *kb_bridge_handle_histogram(kb_bridge_t *b, size_t i, int type) {
    return i < b->n_pipes && type >= 0 && type < KB_EV_TYPE_COUNT ? &b->pipes[i].handle[type] : NULL;
}

kb_sink_t *kb_bridge_sink(kb_bridge_t *b, size_t i) {
    return i < b->cfg->n_sinks ? b->sinks[i] : NULL;
}

const kb_histogram_t *kb_bridge_delivery_histogram(kb_bridge_t *b, size_t i) {
    return i < b->cfg->n_sinks ? &b->delivery[i] : NULL;
}

void kb_bridge_sink_counts(kb_bridge_t *b, size_t i, uint64_t *acked, uint64_t *failed) {
    *acked = i < b->cfg->n_sinks ? atomic_load(&b->sink_acked[i]) : 0;
    *failed = i < b->cfg->n_sinks ? atomic_load(&b->sink_failed[i]) : 0;
}

typedef struct kb_snap_ack {
    _Atomic size_t pending;
} kb_snap_ack_t;

static void kb_snapshot_ack(void *opaque, kb_err_t err) {
    kb_snap_ack_t *sa = opaque;
    if (err != KB_OK)
        KB_WARN("bridge", "a SNAPSHOT message was not delivered: %s", kb_err_str(err));
    if (atomic_fetch_sub(&sa->pending, 1) == 1)
        free(sa);
}

kb_err_t kb_bridge_publish_snapshot(kb_bridge_t *b, const char *informer, const char *route, size_t *count,
                                    char *errstr, size_t errstr_size) {
    *count = 0;
    kb_pipeline_t *p = NULL;
    for (size_t i = 0; i < b->n_pipes && !p; i++)
        if (!strcmp(kb_informer_conf(b->pipes[i].inf)->name, informer))
            p = &b->pipes[i];
    if (!p) {
        snprintf(errstr, errstr_size, "no informer named \"%s\"", informer);
        return KB_ERR_NOTFOUND;
    }
    const kb_route_t *rt = NULL;
    for (size_t i = 0; i < p->router->n && !rt; i++)
        if (!strcmp(p->router->routes[i].conf->name, route))
            rt = &p->router->routes[i];
    if (!rt) {
        snprintf(errstr, errstr_size, "informer \"%s\" has no route named \"%s\"", informer, route);
        return KB_ERR_NOTFOUND;
    }
    kb_event_list_t all;
    kb_event_list_init(&all);
    char rv[64];
    kb_informer_snapshot(p->inf, NULL, &all, rv, sizeof(rv));
    kb_snap_ack_t *sa = kb_calloc(1, sizeof(*sa));
    atomic_init(&sa->pending, 1);
    kb_buf_t topic = KB_BUF_INIT, key = KB_BUF_INIT;
    kb_err_t err = KB_OK;
    for (size_t i = 0; i < all.n && err == KB_OK; i++) {
        kb_event_t *ev = kb_event_retype(all.ev[i], KB_EV_SNAPSHOT, false);
        kb_buf_reset(&topic);
        kb_buf_reset(&key);
        kb_route_render(rt, ev, &topic, &key);
        kb_msg_t msg = {.ev = ev, .topic = topic.data, .topic_len = topic.len, .key = key.data,
                        .key_len = key.len, .format = rt->conf->format, .mode = rt->conf->mode,
                        .route = rt->conf->name, .ack = kb_snapshot_ack, .ack_opaque = sa};
        atomic_fetch_add(&sa->pending, 1);
        for (int tries = 0;; tries++) {
            err = kb_sink_produce(rt->sink, &msg, 1000);
            if (err != KB_ERR_FULL || tries >= 30)
                break;
        }
        if (err == KB_OK)
            (*count)++;
        else
            atomic_fetch_sub(&sa->pending, 1);
        kb_event_unref(ev);
    }
    if (err != KB_OK)
        snprintf(errstr, errstr_size, "sink \"%s\" refused a SNAPSHOT message: %s", rt->sink->name, kb_err_str(err));
    kb_snapshot_ack(sa, KB_OK); /* drop the routing hold */
    kb_buf_fini(&topic);
    kb_buf_fini(&key);
    kb_event_list_fini(&all);
    KB_INFO("bridge", "informer=%s route=%s published %zu SNAPSHOT message(s) at rv=%s", informer, route, *count, rv);
    return err;
}

char *kb_demo_config_text(int port) {
    kb_buf_t t = KB_BUF_INIT;
    kb_buf_appendf(&t,
                   "# kbridge --demo: the bundled simulator in, JSON Lines on stdout out.\n"
                   "cluster = { name = \"demo\"; server = \"http://127.0.0.1:%d\"; };\n"
                   "http = { listen = \"\"; };\n"
                   "informers = ( { name = \"pods\"; version = \"v1\"; resource = \"pods\"; page_size = 50; } );\n"
                   "sinks = ( { name = \"stdout\"; type = \"file\"; path = \"-\"; } );\n"
                   "routes = ( { informer = \"pods\"; sink = \"stdout\"; } );\n",
                   port);
    return kb_buf_steal(&t, NULL);
}
