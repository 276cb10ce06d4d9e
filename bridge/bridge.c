/* bridge/bridge.c — wiring: informer FIFOs → shard workers → router → sinks.
 *
 * Design note.
 *
 * One worker thread per informer shard pops all pending deltas of one key at
 * a time, routes each event and hands it to the sinks in order; a key lives
 * in exactly one shard, so per-key order is fixed here and kept by each sink
 * (one key → one partition / topic). Workers never wait for acks: the sinks
 * acknowledge asynchronously; when every message of an event is acknowledged
 * the informer is told (kb_informer_done), which moves the checkpoint. When a
 * sink's buffer is full, produce() blocks (with a timeout, retried), the
 * worker stops popping, the FIFO fills, and the reflector stops reading its
 * socket: backpressure all the way to the API server.
 *
 * Hot reload (SIGHUP) runs on its own thread (bridge/main.c), never the one
 * that takes signals, as the steps of bridge.h's table: the new config is
 * validated and every new sink and informer is built before anything changes
 * (BUILD); an informer or sink whose definition did not change keeps running
 * (no relist). LOCK then takes the route lock of every informer of the new
 * config, all at once or none: a worker holds its informer's lock while it
 * hands one popped batch to the sinks, which lasts as long as a full sink
 * takes nothing, so each attempt waits a bounded slice per lock and gives
 * back what it took, and between attempts the reload gives up if asked (a
 * stop, a newer SIGHUP) — the only point where it may, since nothing has
 * changed yet. SWAP puts the new routes in; PUBLISH swaps the sets under
 * b->lock; removed informers are drained (bounded by shutdown_timeout) and
 * stopped, new ones started, removed sinks flushed and closed. Objects that
 * were replaced stay allocated until the bridge is destroyed ("retired"), so
 * a pointer an HTTP request holds under kb_bridge_rdlock never dangles.
 *
 * Both rwlocks prefer a waiting writer to new readers, so overlapping readers
 * cannot keep a reload out, and no reader waits for anything unbounded while
 * it holds one (kube API requests waiting for a resourceVersion let b->lock
 * go, bridge/kapi.c): PUBLISH waits only for short critical sections.
 *
 * A rebuilt sink's new instance is created held: its old instance flushes,
 * what it still holds is given back (KB_ERR_STOPPED), parked, and re-sent to
 * the new instance in seq order before the workers may hand it anything newer
 * — they share one ledger slot, which therefore keeps moving (CLOSE).
 *
 * What a sink's answer means — acknowledged, refused (dead letter or stop),
 * parked for a successor, held, or left below the watermark — and the
 * hand-over's order and held gate are decided by informer/sinkslot.h, which
 * has no threads or clocks, so that tests/sim steps the same decisions; this
 * file carries them out (locks, condition variables, sends, log lines).
 *
 * Shutdown: stop the informers (reflectors joined, FIFOs closed), let the
 * workers drain the FIFOs into the sinks until the deadline, flush the sinks
 * with what time remains, write the checkpoints. Anything undelivered at the
 * deadline was never acknowledged: with state_dir it is delivered next time.
 * A deadline is scoped: kb_pipeline_drain sets the abandon flag of the one
 * pipeline it drains, never one of the bridge, so removing or retrying one
 * informer never makes another skip work. Which step leaves which change
 * where: the table in bridge/bridge.h.
 *
 * Lock order: b->lock → p->route_lock → (informer and sink locks). LOCK takes
 * route locks with no b->lock held, PUBLISH b->lock with no route lock held.
 */
#include "bridge/bridge.h"
#include "bridge/ha.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/histogram.h"
#include "common/log.h"
#include "common/time.h"
#include "informer/apiclient.h"
#include "informer/definition.h"
#include "informer/informer.h"
#include "informer/ledger.h"
#include "informer/sinkslot.h"
#include "sinks/envelope.h"
#include "sinks/heartbeat.h"
#include "sinks/noop.h"
#include "sinks/router.h"
#include "sinks/sink.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct kb_pipeline kb_pipeline_t;
typedef struct kb_eos_provider kb_eos_provider_t;

#define KB_REFUSAL_REASONS 8
#define KB_RELOAD_SLICE_MS 200        /* LOCK: the longest wait for one route lock per attempt */
#define KB_RELOAD_PAUSE_MIN_MS 50     /* LOCK: the pause after a failed attempt, doubling ... */
#define KB_RELOAD_PAUSE_MAX_MS 1000   /* ... up to this */
#define KB_RELOAD_WARN_MS 30000       /* LOCK: one "reload waits" line per this */

/* A running sink and what the bridge counts for it. */
typedef struct kb_bsink {
    kb_sink_t *sink;               /* NULL once retired and closed */
    const kb_config_sink_t *conf;  /* from the config that created it */
    kb_histogram_t delivery;       /* watch read → acknowledgement */
    _Atomic uint64_t acked, failed;
    /* on_refused = "stop": set by the first message the sink refused for good.
     * From then on it is handed nothing (what it misses stays unacknowledged
     * in the ledger, so its watermark holds) until a reload or restart. */
    _Atomic bool stopped;
    pthread_mutex_t why_mtx;       /* guards why */
    char why[512];                 /* what stopped it: the object and the reason */
    _Atomic(struct kb_bsink *) dl; /* on_refused = "dead_letter": where refused messages go */
    _Atomic uint64_t dead_letters; /* refused messages this sink handed to its dead-letter sink */
    /* Hand-over of a rebuilt sink (kb_reload_retire_sinks; informer/sinkslot.h).
     * On the retired instance, collecting: a message it gives back without a
     * verdict is parked for the successor instead of left. On the successor,
     * held: it takes nothing from the workers until its predecessor's
     * messages are in. */
    kb_handover_t ho;              /* parked messages: back_mtx; a retired instance's successor */
    pthread_mutex_t back_mtx;      /* guards ho's parked set; with back_cv, the held gate */
    pthread_cond_t back_cv;        /* ho.held went false */
    struct {                       /* refusals by reason (kb_err_name), first come, first slot */
        _Atomic(const char *) reason;
        _Atomic uint64_t n;
    } refused[KB_REFUSAL_REASONS];
} kb_bsink_t;

/* The checkpoint provider registered with one transactional sink. */
struct kb_eos_provider {
    struct kb_bridge *b;
    kb_bsink_t *bs;
};

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
    pthread_rwlock_t route_lock; /* workers: read, per popped batch; reload: write */
    kb_router_t *router;         /* route_lock */
    kb_bsink_t **bsinks;         /* route_lock; parallel to the sinks of the router's config */
    int *lidx;                   /* route_lock; parallel to bsinks: the sink's index in the informer's
                                    ledger (per-sink watermarks), -1 for sinks no route uses */
    kb_noop_t **noops;           /* route_lock; parallel to router->routes; NULL = no suppression */
    struct kb_hbs *hbs;          /* heartbeats of the routes that ask for them (main thread) */
    /* The transactional sink every route of this informer goes to (exactly-once), or NULL.
     * Written under route_lock; read by that sink's commit thread without it. */
    _Atomic(struct kb_bsink *) eos;
    kb_worker_t *workers;        /* one per shard */
    size_t n_workers;
    bool started;
    _Atomic uint64_t delivered;  /* acks with KB_OK */
    _Atomic uint64_t failed;     /* produce errors and failed acks */
    _Atomic uint64_t routed;     /* messages handed to sinks */
    _Atomic uint64_t unrouted;   /* events no route took */
    _Atomic int64_t inflight;    /* produced, not yet acked */
    /* This pipeline's drain ran past its deadline: its workers hand nothing
     * more to sinks (what they hold stays unacknowledged, below the
     * watermark). Set only by kb_pipeline_drain of this pipeline — never a
     * flag of the bridge: no pipeline's stop may make another skip work. */
    kb_drain_t drain;
    _Atomic int64_t last_change_real_ns; /* newest ADDED/MODIFIED/DELETED seen by kb_deliver (metrics) */
    kb_histogram_t handle[KB_EV_TYPE_COUNT]; /* worker time per event, by type */
};

struct kb_bridge {
    pthread_rwlock_t lock;       /* cfg, sinks, pipes: readers (HTTP), writer (reload) */
    const kb_config_t *cfg;      /* the running config */
    kb_apiclient_t *api;
    kb_bsink_t **sinks;          /* parallel to cfg->sinks */
    kb_pipeline_t **pipes;       /* parallel to cfg->informers */
    size_t n_pipes;
    kb_pipeline_t **retired_pipes;
    size_t n_retired_pipes;
    kb_bsink_t **retired_sinks;
    size_t n_retired_sinks;
    kb_eos_provider_t **providers; /* one per transactional sink ever created */
    size_t n_providers;
    kb_config_t **owned_cfgs;    /* configs taken over by reloads */
    size_t n_owned_cfgs;
    bool started;
    kb_ha_t *ha;                 /* ha.enabled: the Lease and the delivery gate (bridge/ha.h), else NULL */
    bool journal;                /* state_dir is set (restart-only): what a sink misses waits there; any thread */
};

#define KB_PUSH(arr, n, item)                                        \
    do {                                                             \
        (arr) = kb_realloc((arr), ((n) + 1) * sizeof(*(arr)));       \
        (arr)[(n)++] = (item);                                       \
    } while (0)

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

/* state_dir need not exist (it is created), but the first part of it that
 * does must be a directory. */
static kb_err_t kb_check_state_dir(const kb_config_t *cfg, char *errstr, size_t errstr_size) {
    if (!cfg->state_dir || !cfg->state_dir[0])
        return KB_OK;
    char path[4096];
    snprintf(path, sizeof(path), "%s", cfg->state_dir);
    for (;;) {
        struct stat st;
        if (stat(path, &st) == 0) {
            if (S_ISDIR(st.st_mode))
                return KB_OK;
            snprintf(errstr, errstr_size, "%s: state_dir: \"%s\" is not a directory (it names a file)", cfg->path,
                     path);
            return KB_ERR_CONFIG;
        }
        char *slash = strrchr(path, '/');
        if (!slash || slash == path)
            return KB_OK;
        *slash = '\0';
    }
}

kb_err_t kb_bridge_check(const kb_config_t *cfg, char *errstr, size_t errstr_size) {
    kb_err_t err = kb_bridge_validate(cfg, errstr, errstr_size);
    if (err != KB_OK)
        return err;
    if ((err = kb_check_state_dir(cfg, errstr, errstr_size)) != KB_OK)
        return err;
    /* A config for a pod, checked outside one (CI, a laptop): the mount is not here to check. */
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    if (cfg->cluster.in_cluster && (!host || !host[0])) {
        KB_INFO("bridge", "cluster.in_cluster: not inside a pod here, so the service account is checked at start");
        return KB_OK;
    }
    char why[512];
    kb_apiclient_t *api = kb_apiclient_new(&cfg->cluster, why, sizeof(why));
    if (!api) {
        snprintf(errstr, errstr_size, "%s: %s", cfg->path, why);
        return KB_ERR_CONFIG;
    }
    kb_apiclient_destroy(api);
    return KB_OK;
}

/* One event on its way to its routes' sinks. Each sink it goes to has a
 * slot: when all of that sink's messages of the event are acknowledged, the
 * sink's bit is cleared in the informer's ledger (kb_ledger_sink_done), which
 * moves that sink's watermark and, over all sinks, the checkpoint. A message
 * a sink refuses for good follows the sink's on_refused: its slot is never
 * done ("stop"), or done once the dead-letter sink acknowledged it. */
typedef struct kb_dslot {
    kb_bsink_t *bs;
    int lidx;              /* the sink's index in the ledger */
    _Atomic int pending;   /* its messages of the event not yet acknowledged */
} kb_dslot_t;

typedef struct kb_delivery {
    kb_pipeline_t *p;
    kb_ledger_t *ledger;
    kb_event_t *ev;        /* reference: named in refusals, sent to dead-letter sinks */
    uint64_t seq;
    int64_t read_mono_ns;  /* when the change came off the wire */
    _Atomic int pending;   /* messages not yet answered, +1 while routing */
    int expected;          /* messages routing will produce (exactly-once bookkeeping) */
    _Atomic int enqueued;  /* of those, inside an open transaction */
    size_t n;              /* slots */
    kb_dslot_t s[];
} kb_delivery_t;

static void kb_delivery_release(kb_delivery_t *d) {
    if (atomic_fetch_sub(&d->pending, 1) != 1)
        return;
    kb_event_unref(d->ev);
    free(d);
}

/* The per-message ack context: the event's delivery and the sink's slot. */
typedef struct kb_msg_ack {
    kb_delivery_t *d;
    size_t slot;
    bool dead_letter;      /* the message is a refused one, sent to the slot's dead-letter sink */
} kb_msg_ack_t;

static void kb_slot_acked(kb_delivery_t *d, size_t slot) {
    if (atomic_fetch_sub(&d->s[slot].pending, 1) == 1)
        kb_ledger_sink_done(d->ledger, d->seq, d->s[slot].lidx);
}

static void kb_bsink_count_refusal(kb_bsink_t *bs, kb_err_t err) {
    const char *reason = kb_err_name(err);
    for (size_t i = 0; i < KB_REFUSAL_REASONS; i++) {
        const char *have = atomic_load(&bs->refused[i].reason);
        if (!have && atomic_compare_exchange_strong(&bs->refused[i].reason, &have, reason))
            have = reason;
        if (have == reason || (have && !strcmp(have, reason))) {
            atomic_fetch_add(&bs->refused[i].n, 1);
            return;
        }
    }
    atomic_fetch_add(&bs->refused[KB_REFUSAL_REASONS - 1].n, 1); /* more reasons than slots: the last */
}

/* on_refused = "stop" (or a dead letter that could not be sent), or a sink
 * that gave a message up without a verdict while running (refused false): the
 * sink takes nothing more; the first time says so, loudly, and says only what
 * is true: the changes it missed wait in the journal only with state_dir. */
static void kb_bsink_stop(kb_bsink_t *bs, const kb_event_t *ev, uint64_t seq, const char *reason, bool refused,
                          bool journal) {
    const char *what = refused ? "refused" : "could not deliver";
    pthread_mutex_lock(&bs->why_mtx);
    bool first = !atomic_exchange(&bs->stopped, true);
    if (first)
        snprintf(bs->why, sizeof(bs->why), "%s %s rv=%s: %s", refused ? "refused" : "gave up on", ev->key, ev->rv,
                 reason);
    pthread_mutex_unlock(&bs->why_mtx);
    if (!first)
        return;
    const char *name = bs->sink ? bs->sink->name : bs->conf->name;
    const char *type = kb_event_type_name(ev->type);
    const char *verdict = refused ? " for good" : " (not a refusal: nothing is dead-lettered)";
    const kb_log_field_t *fields =
        KB_FIELDS(KB_F("sink", name), KB_F("key", ev->key), KB_F("rv", ev->rv), KB_FU("seq", seq));
    if (journal)
        KB_ERRORF("bridge", fields, "sink=%s stopped: it %s %s %s rv=%s%s (%s); the other sinks go on, and nothing is "
                 "dropped: its changes from seq %llu on wait in the journal — %s, then send SIGHUP or restart to try "
                 "again", name, what, type, ev->key, ev->rv, verdict, reason, (unsigned long long)seq,
                 refused ? "fix the cause" : "when the destination is back");
    else
        KB_ERRORF("bridge", fields, "sink=%s stopped: it %s %s %s rv=%s%s (%s); the other sinks go on. Without state_dir "
                 "its changes from seq %llu on are not kept: once the cause is gone, SIGHUP relists and sends it the "
                 "current state of every object (the changes in between are lost to it)", name, what, type, ev->key,
                 ev->rv, verdict, reason, (unsigned long long)seq);
}

static void kb_bridge_ack(void *opaque, kb_err_t err);

/* Hand a refused message to the slot's dead-letter sink: the normal envelope
 * plus "deadLetter": {sink, reason, at}, as a raw record with the refused
 * message's topic and key. False if it could not be taken. */
static bool kb_dead_letter(kb_delivery_t *d, size_t slot, kb_err_t why, const char *topic, const char *key) {
    kb_bsink_t *bs = d->s[slot].bs, *dl = atomic_load(&bs->dl);
    if (!dl || !dl->sink || atomic_load(&dl->stopped))
        return false;
    kb_buf_t env = KB_BUF_INIT;
    kb_envelope_json(d->ev, &env);
    KB_ASSERT(env.len > 1 && env.data[env.len - 1] == '}');
    env.len--; /* reopen the object */
    char at[40];
    kb_format_rfc3339_us(kb_now_real_ns(), at, sizeof(at));
    kb_buf_append_str(&env, ",\"deadLetter\":{\"sink\":");
    kb_buf_append_json_str(&env, bs->conf->name, strlen(bs->conf->name));
    kb_buf_append_str(&env, ",\"reason\":");
    kb_buf_append_json_str(&env, kb_err_str(why), strlen(kb_err_str(why)));
    kb_buf_appendf(&env, ",\"at\":\"%s\"}}", at);
    kb_msg_ack_t *ma = kb_malloc(sizeof(*ma));
    *ma = (kb_msg_ack_t){d, slot, true};
    kb_msg_t msg = {.raw = env.data, .raw_len = env.len, .topic = topic ? topic : "",
                    .topic_len = topic ? strlen(topic) : 0, .key = key ? key : "", .key_len = key ? strlen(key) : 0,
                    .format = KB_FORMAT_JSON, .mode = KB_MODE_EVENTS, .route = "dead-letter",
                    .ack = kb_bridge_ack, .ack_opaque = ma};
    atomic_fetch_add(&d->pending, 1);
    kb_err_t err = KB_ERR_FULL;
    for (int tries = 0; tries < 5 && err == KB_ERR_FULL; tries++) /* bounded: acks may run on a sink's thread */
        err = kb_sink_produce(dl->sink, &msg, 1000);
    kb_buf_fini(&env);
    if (err != KB_OK) {
        free(ma);
        atomic_fetch_sub(&d->pending, 1);
        return false;
    }
    atomic_fetch_add(&bs->dead_letters, 1);
    return true;
}

/* What err means for a message of bs (informer/sinkslot.h decides).
 * collecting: bs may park it (the message is one it took). */
static kb_fate_t kb_fate_of(const kb_pipeline_t *p, kb_bsink_t *bs, kb_err_t err, bool dead_letter,
                            bool collecting) {
    kb_verdict_t v = {.err = err, .refusal = kb_sink_refused(err), .dead_letter = dead_letter,
                      .to_dead_letter = bs->conf->on_refused == KB_REFUSED_DEAD_LETTER,
                      .collecting = collecting && kb_handover_collecting(&bs->ho),
                      .sender_retired = kb_drain_retired(&p->drain)};
    return kb_sinkslot_fate(&v);
}

/* A message of slot was refused for good (a failed ack, or produce() said no):
 * fate is KB_FATE_DEAD_LETTER or KB_FATE_REFUSED. A retired instance's refusal
 * stops the instance that replaced it: that is the sink SIGHUP tries again,
 * and the slot's bit stays until it does. */
static void kb_refused(kb_delivery_t *d, size_t slot, kb_err_t err, kb_fate_t fate, bool dead_letter,
                       const char *topic, const char *key) {
    kb_bsink_t *bs = d->s[slot].bs;
    atomic_fetch_add(&bs->failed, 1);
    atomic_fetch_add(&d->p->failed, 1);
    kb_bsink_t *dl = atomic_load(&bs->dl);
    kb_bsink_count_refusal(dead_letter && dl ? dl : bs, err);
    if (fate == KB_FATE_DEAD_LETTER && kb_dead_letter(d, slot, err, topic, key))
        return; /* the slot is done when the dead-letter sink acknowledges it */
    kb_bsink_stop(kb_handover_stops(&bs->ho, bs), d->ev, d->seq,
                  dead_letter ? "its dead-letter sink refused it too" : kb_err_str(err), true, d->p->bridge->journal);
}

/* A message of slot given up without a verdict (sinks/sink.h: KB_ERR_STOPPED
 * when the sink or this pipeline is being stopped, KB_ERR_TIMEDOUT or
 * KB_ERR_FULL when the sink gave up trying). Never a
 * refusal, never dead-lettered: the slot keeps the sink's bit in the ledger, so
 * its watermark — and the checkpoint — stay below it, and state_dir delivers it
 * again. A sink that gave up while it runs (anything but a stop: a retry
 * limit, a message timeout) is held like a stopped one, so that nothing after
 * it passes it for good; SIGHUP tries it again. */
static void kb_not_delivered(kb_delivery_t *d, size_t slot, kb_err_t err, kb_fate_t fate) {
    kb_bsink_t *bs = d->s[slot].bs;
    atomic_fetch_add(&bs->failed, 1);
    atomic_fetch_add(&d->p->failed, 1);
    if (fate == KB_FATE_HOLD)
        kb_bsink_stop(kb_handover_stops(&bs->ho, bs), d->ev, d->seq, kb_err_str(err), false, d->p->bridge->journal);
}

/* A retiring instance gave ma's message up without a verdict (stopped, or
 * timed out while it flushed; the caller has settled acks and refusals)
 * while a successor waits for it: park it (still in flight) for
 * kb_hand_over, which gives it to the successor. */
static bool kb_park(kb_msg_ack_t *ma) {
    kb_bsink_t *bs = ma->d->s[ma->slot].bs;
    pthread_mutex_lock(&bs->back_mtx);
    bool parked = kb_handover_park(&bs->ho, ma, (uintptr_t)ma->d->p, ma->d->seq);
    pthread_mutex_unlock(&bs->back_mtx);
    return parked;
}

static void kb_bridge_ack(void *opaque, kb_err_t err) {
    kb_msg_ack_t *ma = opaque;
    kb_delivery_t *d = ma->d;
    kb_pipeline_t *p = d->p;
    kb_bsink_t *bs = d->s[ma->slot].bs;
    kb_fate_t fate = kb_fate_of(p, bs, err, ma->dead_letter, true);
    if (fate == KB_FATE_PARK && kb_park(ma))
        return;
    if (fate == KB_FATE_PARK) /* the hand-over was taken meanwhile: too late to park */
        fate = kb_fate_of(p, bs, err, ma->dead_letter, false);
    if (fate == KB_FATE_ACKED) {
        atomic_fetch_add(&p->delivered, 1);
        kb_bsink_t *dl = atomic_load(&bs->dl);
        atomic_fetch_add(ma->dead_letter && dl ? &dl->acked : &bs->acked, 1);
        if (!ma->dead_letter)
            kb_histogram_observe_ns(&bs->delivery, kb_now_mono_ns() - d->read_mono_ns);
        kb_slot_acked(d, ma->slot);
    } else if (fate == KB_FATE_DEAD_LETTER || fate == KB_FATE_REFUSED) {
        /* The topic and key are not known here any more: a dead letter after a
         * failed delivery report goes with the object's key and no topic. */
        kb_refused(d, ma->slot, err, fate, ma->dead_letter, NULL, d->ev->key);
    } else {
        kb_not_delivered(d, ma->slot, err, fate);
    }
    atomic_fetch_sub(&p->inflight, 1);
    free(ma);
    kb_delivery_release(d);
}

/* A transactional sink took one message of the event into its open
 * transaction; when all of them are in, the commit delivers the event. */
static void kb_bridge_enqueued(void *opaque) {
    kb_msg_ack_t *ma = opaque;
    kb_delivery_t *d = ma->d;
    if (atomic_fetch_add(&d->enqueued, 1) + 1 == d->expected)
        kb_ledger_produced(d->ledger, d->seq);
}

/* The slot of bs in d, added if new. */
static size_t kb_delivery_slot(kb_delivery_t *d, kb_bsink_t *bs, int lidx) {
    for (size_t i = 0; i < d->n; i++)
        if (d->s[i].bs == bs)
            return i;
    d->s[d->n].bs = bs;
    d->s[d->n].lidx = lidx;
    atomic_init(&d->s[d->n].pending, 0);
    return d->n++;
}

/* A rebuilt sink's successor takes nothing until its predecessor's messages
 * were handed to it (kb_hand_over, on main, bounded by shutdown_timeout). */
static void kb_bsink_wait_handover(kb_bsink_t *bs) {
    if (!kb_handover_held(&bs->ho))
        return;
    pthread_mutex_lock(&bs->back_mtx);
    while (kb_handover_held(&bs->ho))
        pthread_cond_wait(&bs->back_cv, &bs->back_mtx);
    pthread_mutex_unlock(&bs->back_mtx);
}

/* Render route's message of d's event and hand it to the route's sink for
 * slot. A full sink is waited for until it takes the message, this pipeline
 * abandons, or deadline (monotonic ns; 0: none) passes. A refusal follows
 * on_refused; anything else not taken stays unacknowledged. The slot's count
 * for the message is the caller's. Caller holds p->route_lock for reading. */
static void kb_send(kb_delivery_t *d, size_t slot, const kb_route_t *route, kb_buf_t *topic, kb_buf_t *key,
                    bool eos, int64_t deadline) {
    kb_pipeline_t *p = d->p;
    kb_buf_reset(topic);
    kb_buf_reset(key);
    kb_route_render(route, d->ev, topic, key);
    kb_msg_ack_t *ma = kb_malloc(sizeof(*ma));
    *ma = (kb_msg_ack_t){d, slot, false};
    kb_msg_t msg = {
        .ev = d->ev,
        .topic = topic->data, .topic_len = topic->len,
        .key = key->data, .key_len = key->len,
        .format = route->conf->format,
        .mode = route->conf->mode,
        .route = route->conf->name,
        .ack = kb_bridge_ack,
        .ack_opaque = ma,
        .enqueued = eos ? kb_bridge_enqueued : NULL,
    };
    atomic_fetch_add(&p->inflight, 1);
    atomic_fetch_add(&d->pending, 1);
    for (;;) {
        kb_err_t err = kb_sink_produce(route->sink, &msg, 1000);
        if (err == KB_OK) {
            atomic_fetch_add(&p->routed, 1);
            return;
        }
        if (err == KB_ERR_FULL && !kb_drain_abandoned(&p->drain) && (!deadline || kb_now_mono_ns() < deadline)) {
            static kb_ratelimit_t rl;
            if (kb_ratelimit_allow(&rl, 10000, NULL))
                KB_WARN("bridge", "sink=%s is full; holding the informer's queue (backpressure)", route->sink->name);
            continue;
        }
        atomic_fetch_sub(&p->inflight, 1);
        atomic_fetch_sub(&d->pending, 1);
        free(ma);
        if (err == KB_ERR_FULL) /* this pipeline abandons (a stop), or a hand-over's deadline passed */
            err = kb_drain_abandoned(&p->drain) ? KB_ERR_STOPPED : KB_ERR_TIMEDOUT;
        kb_fate_t fate = kb_fate_of(p, d->s[slot].bs, err, false, false); /* not taken: nothing to park */
        if (fate == KB_FATE_DEAD_LETTER || fate == KB_FATE_REFUSED)
            kb_refused(d, slot, err, fate, false, topic->data, key->data);
        else
            kb_not_delivered(d, slot, err, fate);
        return;
    }
}

/* Hand one event to every route that takes it, in route order: only to the
 * sinks that do not have it yet (a change of the journal's tail goes again only
 * to sinks whose watermark is below it), and to no stopped sink (it waits).
 * Caller holds p->route_lock for reading. */
static void kb_deliver(kb_pipeline_t *p, kb_event_t *ev, kb_buf_t *topic, kb_buf_t *key) {
    bool routed = false;
    int64_t t0 = kb_now_mono_ns();
    if (ev->type <= KB_EV_DELETED)
        atomic_store_explicit(&p->last_change_real_ns, kb_now_real_ns(), memory_order_relaxed);
    kb_ledger_t *ledger = kb_informer_ledger(p->inf);
    /* Decide the routes first, so the sinks that owe an acknowledgement are
     * known to the ledger before any of them can acknowledge, and the count of
     * messages before any transactional sink reports one enqueued. Every route
     * may take the event: the usual few fit on the stack, more go on the heap. */
    size_t take_few[16], *take = take_few, n_take = 0;
    int owe_few[16], *owe = owe_few;
    size_t n_owe = 0;
    if (p->router->n > KB_ARRAY_LEN(take_few)) {
        take = kb_malloc(p->router->n * sizeof(*take));
        owe = kb_malloc(p->router->n * sizeof(*owe));
    }
    kb_route_rec_t rec = KB_ROUTE_REC_INIT; /* the field record, read once for all the routes */
    for (size_t i = 0; i < p->router->n; i++) {
        const kb_route_t *route = &p->router->routes[i];
        if (!kb_route_match_rec(route, ev, &rec))
            continue;
        routed = true;
        int lidx = p->lidx[route->sink_index];
        if (ev->redelivery && lidx >= 0 && !kb_ledger_wants(ledger, ev->seq, lidx))
            continue; /* acknowledged by this sink before the restart */
        /* Byte-identical to what this route last delivered for the key: nothing to say. */
        if (p->noops[i] && !kb_noop_check_and_record(p->noops[i], ev))
            continue;
        take[n_take++] = i;
        if (lidx >= 0)
            owe[n_owe++] = lidx;
    }
    kb_route_rec_fini(&rec);
    kb_delivery_t *d = kb_malloc(sizeof(*d) + n_take * sizeof(d->s[0]));
    d->p = p;
    d->ledger = ledger;
    d->ev = kb_event_ref(ev);
    d->seq = ev->seq;
    d->read_mono_ns = ev->read_mono_ns;
    d->n = 0;
    atomic_init(&d->pending, 1);
    atomic_init(&d->enqueued, 0);
    int expected = 0;
    for (size_t t = 0; t < n_take; t++) {
        const kb_route_t *route = &p->router->routes[take[t]];
        kb_bsink_t *bs = p->bsinks[route->sink_index];
        size_t slot = kb_delivery_slot(d, bs, p->lidx[route->sink_index]);
        if (!atomic_load(&bs->stopped)) {
            atomic_fetch_add(&d->s[slot].pending, 1);
            expected++;
        }
    }
    d->expected = expected;
    kb_ledger_routed(ledger, ev->seq, owe, n_owe);
    bool eos = atomic_load(&p->eos) != NULL;
    for (size_t t = 0; t < n_take; t++) {
        const kb_route_t *route = &p->router->routes[take[t]];
        kb_bsink_t *bs = p->bsinks[route->sink_index];
        kb_bsink_wait_handover(bs);
        if (atomic_load(&bs->stopped))
            continue; /* its bit stays: the watermark waits here */
        kb_send(d, kb_delivery_slot(d, bs, p->lidx[route->sink_index]), route, topic, key, eos, 0);
    }
    if (take != take_few) {
        free(take);
        free(owe);
    }
    if (!routed)
        atomic_fetch_add(&p->unrouted, 1);
    kb_histogram_observe_ns(&p->handle[ev->type], kb_now_mono_ns() - t0);
    kb_delivery_release(d);
}

/* ha.enabled: a change the leader acknowledged is acknowledged to nothing here. */
static void kb_deliver_none(kb_pipeline_t *p, kb_event_t *ev) {
    kb_ledger_routed(kb_informer_ledger(p->inf), ev->seq, NULL, 0);
}

/* A batch when ha.enabled: the gate before every event, outside route_lock
 * (a standby may wait there). False when shutting down as a standby. */
static bool kb_deliver_gated(kb_pipeline_t *p, kb_deltas_t *d, kb_buf_t *topic, kb_buf_t *key) {
    kb_ha_t *ha = p->bridge->ha;
    const char *name = kb_informer_conf(p->inf)->name;
    for (size_t i = 0; i < d->n && !kb_drain_abandoned(&p->drain); i++) {
        uint64_t tracked = kb_ledger_tracked_rv(kb_informer_ledger(p->inf));
        kb_ha_admit_t a = kb_ha_admit(ha, name, d->ev[i], tracked, &p->drain.abandon);
        if (a == KB_HA_DROP)
            return false; /* unacknowledged: it stays in the journal */
        pthread_rwlock_rdlock(&p->route_lock);
        if (a == KB_HA_DELIVER)
            kb_deliver(p, d->ev[i], topic, key);
        else
            kb_deliver_none(p, d->ev[i]);
        pthread_rwlock_unlock(&p->route_lock);
    }
    return true;
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
        if (p->bridge->ha) {
            kb_deliver_gated(p, &d, &topic, &key);
            kb_deltas_fini(&d);
            kb_deltas_init(&d);
            continue;
        }
        pthread_rwlock_rdlock(&p->route_lock);
        for (size_t i = 0; i < d.n && !kb_drain_abandoned(&p->drain); i++)
            kb_deliver(p, d.ev[i], &topic, &key);
        pthread_rwlock_unlock(&p->route_lock);
        kb_deltas_fini(&d);
        kb_deltas_init(&d);
    }
    kb_deltas_fini(&d);
    kb_buf_fini(&topic);
    kb_buf_fini(&key);
    atomic_store(&w->done, true);
    return NULL;
}

/* ---- building blocks -------------------------------------------------- */

/* A rwlock that a waiting writer gets before new readers, so a stream of
 * overlapping readers (HTTP requests, workers' batches) never keeps a reload
 * out. The price: a thread must never take one of these for reading twice
 * (behind a waiting writer the second would wait for ever); none does. */
static void kb_rwlock_init_writer_first(pthread_rwlock_t *lock) {
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(lock, &ra);
    pthread_rwlockattr_destroy(&ra);
}

static void kb_eos_records(void *opaque, kb_ckpt_rec_t **recs, size_t *n);

static kb_bsink_t *kb_bsink_new(kb_bridge_t *b, const kb_config_sink_t *conf, const kb_config_t *cfg, char *errstr,
                                size_t errstr_size) {
    kb_sink_t *sink = kb_sink_create(conf, cfg, errstr, errstr_size);
    if (!sink)
        return NULL;
    kb_bsink_t *bs = kb_calloc(1, sizeof(*bs));
    bs->sink = sink;
    bs->conf = conf;
    pthread_mutex_init(&bs->why_mtx, NULL);
    kb_handover_init(&bs->ho);
    pthread_mutex_init(&bs->back_mtx, NULL);
    pthread_cond_init(&bs->back_cv, NULL);
    if (sink->ops->is_transactional && sink->ops->is_transactional(sink->state) &&
        sink->ops->set_checkpoint_provider) {
        kb_eos_provider_t *pv = kb_calloc(1, sizeof(*pv));
        pv->b = b;
        pv->bs = bs;
        b->providers = kb_realloc(b->providers, (b->n_providers + 1) * sizeof(*b->providers));
        b->providers[b->n_providers++] = pv;
        sink->ops->set_checkpoint_provider(sink->state, kb_eos_records, pv);
    }
    if (b->ha && kb_ha_leads(b->ha) && sink->ops->activate)
        sink->ops->activate(sink->state); /* a reload on the leader: no takeover will */
    return bs;
}

/* Flush (up to timeout_ms) and close the sink; the counters stay. */
static kb_err_t kb_bsink_close(kb_bsink_t *bs, int timeout_ms) {
    if (!bs->sink)
        return KB_OK;
    kb_err_t err = kb_sink_stop(bs->sink, timeout_ms);
    kb_sink_destroy(bs->sink);
    bs->sink = NULL;
    return err;
}

/* A pipeline for informer conf, not started. */
static kb_pipeline_t *kb_pipeline_new(kb_bridge_t *b, const kb_config_t *cfg, const kb_config_informer_t *conf,
                                      char *errstr, size_t errstr_size) {
    kb_informer_t *inf = kb_informer_new(cfg, conf, b->api, errstr, errstr_size);
    if (!inf)
        return NULL;
    if (b->ha) /* a standby's changes may be at a sink already (the leader's): informer.h */
        kb_informer_ha_shared(inf, kb_ha_shared_rv(b->ha));
    kb_pipeline_t *p = kb_calloc(1, sizeof(*p));
    p->bridge = b;
    p->inf = inf;
    kb_rwlock_init_writer_first(&p->route_lock);
    kb_drain_init(&p->drain);
    p->n_workers = kb_informer_shards(inf);
    p->workers = kb_calloc(p->n_workers, sizeof(*p->workers));
    for (size_t s = 0; s < p->n_workers; s++) {
        p->workers[s].p = p;
        p->workers[s].shard = s;
    }
    return p;
}

/* Each sink's index in the informer's ledger, parallel to cfg->sinks (-1 for
 * sinks no route of r uses); sinks the old table had and this one has not are
 * removed from the ledger (nothing waits for them any more). */
static int *kb_pipeline_lidx(kb_pipeline_t *p, const kb_router_t *r, const kb_config_t *cfg, const int *old,
                             const kb_config_t *old_cfg) {
    kb_ledger_t *l = kb_informer_ledger(p->inf);
    int *lidx = kb_malloc((cfg->n_sinks ? cfg->n_sinks : 1) * sizeof(*lidx));
    for (size_t i = 0; i < cfg->n_sinks; i++)
        lidx[i] = -1;
    for (size_t i = 0; i < r->n; i++) {
        size_t si = r->routes[i].sink_index;
        if (lidx[si] < 0)
            lidx[si] = kb_ledger_add_sink(l, cfg->sinks[si].name);
    }
    for (size_t i = 0; old && old_cfg && i < old_cfg->n_sinks; i++) {
        bool kept = false;
        for (size_t j = 0; j < cfg->n_sinks && !kept; j++)
            kept = lidx[j] == old[i];
        if (old[i] >= 0 && !kept)
            kb_ledger_remove_sink(l, old[i]);
    }
    return lidx;
}

/* Point every dead-letter sink of bsinks (parallel to cfg->sinks) at its target. */
static void kb_bsinks_link_dead_letters(kb_bsink_t **bsinks, const kb_config_t *cfg) {
    for (size_t i = 0; i < cfg->n_sinks; i++) {
        kb_bsink_t *dl = NULL;
        for (size_t j = 0; j < cfg->n_sinks && cfg->sinks[i].on_refused == KB_REFUSED_DEAD_LETTER; j++)
            if (!strcmp(cfg->sinks[j].name, cfg->sinks[i].dead_letter))
                dl = bsinks[j];
        atomic_store(&bsinks[i]->dl, dl);
    }
}

/* Routes of p's informer in cfg, over the sinks bsinks (parallel to cfg->sinks). */
static kb_router_t *kb_pipeline_router(kb_pipeline_t *p, const kb_config_t *cfg, kb_bsink_t **bsinks,
                                       char *errstr, size_t errstr_size) {
    kb_sink_t **raw = kb_calloc(cfg->n_sinks ? cfg->n_sinks : 1, sizeof(*raw));
    for (size_t i = 0; i < cfg->n_sinks; i++)
        raw[i] = bsinks[i]->sink;
    kb_router_t *r = kb_router_new(cfg, kb_informer_conf(p->inf)->name, raw, errstr, errstr_size);
    free(raw);
    if (r && r->n == 0 && kb_config_kapi_served(cfg))
        KB_INFO("bridge", "informer=%s has no route: served by the kube API only", kb_informer_conf(p->inf)->name);
    else if (r && r->n == 0)
        KB_WARN("bridge", "informer=%s has no route: its changes go nowhere", kb_informer_conf(p->inf)->name);
    return r;
}

/* One no-op table per route that suppresses anything (sinks/noop.h). */
static kb_noop_t **kb_noops_new(const kb_router_t *r) {
    kb_noop_t **noops = kb_calloc(r->n ? r->n : 1, sizeof(*noops));
    for (size_t i = 0; i < r->n; i++) {
        uint32_t mask = kb_noop_suppress_mask(r->routes[i].conf);
        noops[i] = mask ? kb_noop_new(mask) : NULL;
    }
    return noops;
}

static void kb_noops_destroy(kb_noop_t **noops, size_t n) {
    for (size_t i = 0; noops && i < n; i++)
        kb_noop_destroy(noops[i]);
    free(noops);
}

/* ---- exactly-once with a transactional sink ------------------------------ */

static bool kb_bsink_transactional(const kb_bsink_t *bs) {
    return bs->sink && bs->sink->ops->is_transactional && bs->sink->ops->is_transactional(bs->sink->state);
}

/* The one transactional sink all of the router's routes go to, or NULL. */
static kb_bsink_t *kb_router_eos(const kb_router_t *r, kb_bsink_t **bsinks) {
    kb_bsink_t *one = NULL;
    for (size_t i = 0; i < r->n; i++) {
        kb_bsink_t *bs = bsinks[r->routes[i].sink_index];
        if (!kb_bsink_transactional(bs) || (one && one != bs))
            return NULL;
        one = bs;
    }
    return one;
}

static void kb_eos_key(const kb_bridge_t *b, const kb_informer_t *inf, char *out, size_t size) {
    const kb_config_t *cfg = b->cfg;
    if (cfg->sharding_replicas > 1)
        snprintf(out, size, "%s/%s/%d-of-%d", cfg->cluster.name, kb_informer_conf(inf)->name, cfg->sharding_index,
                 cfg->sharding_replicas);
    else
        snprintf(out, size, "%s/%s", cfg->cluster.name, kb_informer_conf(inf)->name);
}


/* Right before the sink commits (its gate held: nothing is being produced):
 * the checkpoint of every informer whose routes all go to it. */
static void kb_eos_records(void *opaque, kb_ckpt_rec_t **recs, size_t *n) {
    kb_eos_provider_t *pv = opaque;
    kb_bridge_t *b = pv->b;
    *recs = NULL;
    *n = 0;
    pthread_rwlock_rdlock(&b->lock);
    for (size_t i = 0; i < b->n_pipes; i++) {
        kb_pipeline_t *p = b->pipes[i];
        if (atomic_load(&p->eos) != pv->bs)
            continue;
        char key[512];
        kb_buf_t v = KB_BUF_INIT;
        kb_informer_txn_cut(p->inf, &v);
        kb_eos_key(b, p->inf, key, sizeof(key));
        *recs = kb_realloc(*recs, (*n + 1) * sizeof(**recs));
        (*recs)[*n].key = kb_strdup(key);
        (*recs)[*n].value = kb_buf_steal(&v, NULL);
        (*n)++;
    }
    pthread_rwlock_unlock(&b->lock);
}

/* What p's transactional sink committed last, into value: KB_OK, KB_ERR_NOTFOUND
 * (nothing yet, or no such sink), or an error (logged). */
static kb_err_t kb_eos_read_cut(kb_bridge_t *b, kb_pipeline_t *p, char *value, size_t size) {
    kb_bsink_t *bs = atomic_load(&p->eos);
    if (!bs || !bs->sink->ops->read_checkpoint)
        return KB_ERR_NOTFOUND;
    char key[512];
    kb_eos_key(b, p->inf, key, sizeof(key));
    kb_err_t err = KB_ERR_TIMEDOUT;
    for (int attempt = 0; attempt < 3 && err != KB_OK && err != KB_ERR_NOTFOUND; attempt++)
        err = bs->sink->ops->read_checkpoint(bs->sink->state, key, value, size, 10000);
    if (err != KB_OK && err != KB_ERR_NOTFOUND)
        KB_ERROR("bridge", "informer=%s cannot read its checkpoint back from sink=%s (%s): %s; "
                 "changes committed after that checkpoint may be repeated", kb_informer_conf(p->inf)->name,
                 bs->sink->name, kb_err_str(err), b->ha ? "resuming from the leader's published watermark"
                                                        : "resuming from state_dir");
    return err;
}

/* Before an exactly-once informer starts: what its sink committed last. Not
 * with ha.enabled: the cut counts the seqs of whichever replica wrote it, and
 * a standby must not touch the sink (kb_bridge_ha_prepare reads it by RV). */
static void kb_eos_read_back(kb_bridge_t *b, kb_pipeline_t *p) {
    char value[65536];
    if (b->cfg->ha_enabled || kb_eos_read_cut(b, p, value, sizeof(value)) != KB_OK)
        return;
    char why[512];
    if (kb_informer_apply_cut(p->inf, value, strlen(value), why, sizeof(why)) != KB_OK)
        KB_ERROR("bridge", "informer=%s checkpoint in sink=%s not used: %s; resuming from state_dir",
                 kb_informer_conf(p->inf)->name, atomic_load(&p->eos)->sink->name, why);
}

/* The resourceVersion every resume point of a cut ({"rv":"ns/RV,…"}) reaches:
 * the lowest; 0 unless each of the informer's n_scopes has a numeric one. */
static uint64_t kb_eos_cut_rv(const char *cut, size_t n_scopes) {
    json_t *j = json_loads(cut, 0, NULL);
    const char *list = json_string_value(json_object_get(j, "rv"));
    uint64_t low = UINT64_MAX;
    size_t n = 0;
    for (const char *p = list; p && *p; n++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *rv = memchr(p, '/', len) ? (const char *)memchr(p, '/', len) + 1 : p;
        uint64_t v = kb_rv_parse(rv, len - (size_t)(rv - p));
        low = v < low ? v : low;
        p = comma ? comma + 1 : NULL;
    }
    json_decref(j);
    return n == n_scopes && low != UINT64_MAX ? low : 0;
}

/* ha: this replica is about to lead. Its sinks get ready (a transactional one
 * fences the previous leader's producer now), then each exactly-once
 * informer's committed cut is read back by RV: what the old leader committed
 * after its last publication is not delivered again. Thread: ha. */
static size_t kb_bridge_ha_prepare(void *opaque, kb_ha_mark_t *out, size_t max) {
    kb_bridge_t *b = opaque;
    size_t n = 0;
    pthread_rwlock_rdlock(&b->lock);
    for (size_t i = 0; i < b->cfg->n_sinks; i++)
        if (b->sinks[i]->sink && b->sinks[i]->sink->ops->activate)
            b->sinks[i]->sink->ops->activate(b->sinks[i]->sink->state);
    for (size_t i = 0; i < b->n_pipes && n < max; i++) {
        kb_pipeline_t *p = b->pipes[i];
        const kb_config_informer_t *conf = kb_informer_conf(p->inf);
        char value[65536];
        if (kb_eos_read_cut(b, p, value, sizeof(value)) != KB_OK)
            continue;
        uint64_t rv = kb_eos_cut_rv(value, conf->namespaces.n ? conf->namespaces.n : 1);
        if (!rv)
            continue;
        snprintf(out[n].informer, sizeof(out[n].informer), "%s", conf->name);
        out[n++].rv = rv;
        KB_INFO("bridge", "informer=%s takes over from sink=%s's committed checkpoint: changes up to "
                "resourceVersion %llu are there already and are not delivered again", conf->name,
                atomic_load(&p->eos)->sink->name, (unsigned long long)rv);
    }
    pthread_rwlock_unlock(&b->lock);
    return n;
}

/* ---- ha: what a new leader owes ------------------------------------------- */

static void kb_redeliver_ack(void *opaque, kb_err_t err) {
    KB_UNUSED(opaque);
    static kb_ratelimit_t rl;
    if (err != KB_OK && kb_ratelimit_allow(&rl, 10000, NULL))
        KB_WARN("bridge", "a change delivered again at a takeover was not delivered: %s", kb_err_str(err));
}

/* Hand ev to every route that takes it, outside the ledger (it was
 * acknowledged here as the old leader's; an exact repeat to a consumer).
 * True if a sink took it. Locks: p->route_lock (read). */
static bool kb_pipeline_redeliver(kb_pipeline_t *p, kb_event_t *ev) {
    bool sent = false;
    kb_buf_t topic = KB_BUF_INIT, key = KB_BUF_INIT;
    pthread_rwlock_rdlock(&p->route_lock);
    for (size_t i = 0; i < p->router->n; i++) {
        const kb_route_t *route = &p->router->routes[i];
        if (!kb_route_match(route, ev) || atomic_load(&p->bsinks[route->sink_index]->stopped))
            continue;
        kb_buf_reset(&topic);
        kb_buf_reset(&key);
        kb_route_render(route, ev, &topic, &key);
        kb_msg_t msg = {.ev = ev, .topic = topic.data, .topic_len = topic.len, .key = key.data, .key_len = key.len,
                        .format = route->conf->format, .mode = route->conf->mode, .route = route->conf->name,
                        .ack = kb_redeliver_ack, .ack_opaque = NULL};
        sent |= kb_sink_produce(route->sink, &msg, 1000) == KB_OK;
    }
    pthread_rwlock_unlock(&p->route_lock);
    kb_buf_fini(&topic);
    kb_buf_fini(&key);
    return sent;
}

/* ha took the lead: key's state held here, once more (bridge/ha.h). An
 * exactly-once informer is left out: its sink's committed checkpoint is what
 * it resumes from, and a repeat there would be a duplicate. Thread: ha. */
static bool kb_bridge_ha_redeliver(void *opaque, const char *informer, const char *key, size_t key_len,
                                   kb_event_t *deleted) {
    kb_bridge_t *b = opaque;
    bool sent = false;
    pthread_rwlock_rdlock(&b->lock);
    for (size_t i = 0; i < b->n_pipes; i++) {
        kb_pipeline_t *p = b->pipes[i];
        if (strcmp(kb_informer_conf(p->inf)->name, informer) != 0 || atomic_load(&p->eos))
            continue;
        kb_event_t *ev = deleted ? kb_event_ref(deleted) : kb_informer_get(p->inf, key, key_len);
        if (ev)
            sent = kb_pipeline_redeliver(p, ev);
        kb_event_unref(ev);
    }
    pthread_rwlock_unlock(&b->lock);
    return sent;
}

/* ---- heartbeats --------------------------------------------------------- */

typedef struct kb_hb_ctx {
    kb_pipeline_t *p;
    const kb_route_t *route;   /* lives as long as the router that made it */
    kb_event_t *ident;         /* an empty object of the informer: renders the route's topic */
    kb_heartbeat_t *hb;
} kb_hb_ctx_t;

typedef struct kb_hbs {
    kb_hb_ctx_t *v;
    size_t n;
} kb_hbs_t;

static void kb_hb_ack(void *opaque, kb_err_t err) {
    KB_UNUSED(opaque);
    if (err != KB_OK)
        KB_DEBUG("bridge", "a heartbeat was not delivered: %s", kb_err_str(err));
}

static void kb_hb_emit(void *opaque, const char *json, size_t len) {
    kb_hb_ctx_t *c = opaque;
    if (c->p->bridge->ha && !kb_ha_leads(c->p->bridge->ha))
        return; /* a standby says nothing, heartbeats included */
    kb_buf_t topic = KB_BUF_INIT, key = KB_BUF_INIT;
    kb_template_render(c->route->topic, c->ident, c->route->render_flags, &topic);
    kb_buf_appendf(&key, "_heartbeat/%s", c->route->conf->name);
    kb_buf_reserve(&topic, 0);
    topic.data[topic.len] = '\0';
    kb_msg_t msg = {.ev = NULL, .raw = json, .raw_len = len, .topic = topic.data, .topic_len = topic.len,
                    .key = key.data, .key_len = key.len, .format = KB_FORMAT_JSON, .mode = KB_MODE_EVENTS,
                    .route = c->route->conf->name, .ack = kb_hb_ack, .ack_opaque = NULL};
    kb_err_t err = kb_sink_produce(c->route->sink, &msg, 1000);
    if (err != KB_OK) {
        static kb_ratelimit_t rl;
        if (kb_ratelimit_allow(&rl, 60000, NULL))
            KB_WARN("bridge", "route=%s heartbeat not sent: %s", c->route->conf->name, kb_err_str(err));
    }
    kb_buf_fini(&topic);
    kb_buf_fini(&key);
}

static void kb_hb_rv(void *opaque, char *buf, size_t size) {
    kb_hb_ctx_t *c = opaque;
    kb_informer_stats_t st;
    kb_informer_stats(c->p->inf, &st);
    snprintf(buf, size, "%s", st.last_rv);
}

static kb_hbs_t *kb_hbs_new(kb_pipeline_t *p, const kb_router_t *r, const kb_config_t *cfg) {
    kb_hbs_t *h = kb_calloc(1, sizeof(*h));
    for (size_t i = 0; i < r->n; i++) {
        const kb_route_t *route = &r->routes[i];
        if (route->conf->heartbeat_seconds <= 0)
            continue;
        h->v = kb_realloc(h->v, (h->n + 1) * sizeof(*h->v));
        kb_hb_ctx_t *c = &h->v[h->n++];
        c->p = p;
        c->route = route;
        kb_event_init_t in = {.type = KB_EV_SYNC, .res = kb_informer_resource(p->inf), .ns = "", .name = "",
                              .uid = "", .rv = "", .obj = "{}", .obj_len = 2};
        c->ident = kb_event_new(&in);
        c->hb = kb_heartbeat_new(route->conf, cfg->cluster.name, (int64_t)route->conf->heartbeat_seconds * 1000,
                                 kb_hb_emit, kb_hb_rv, c);
    }
    return h;
}

static void kb_hbs_start(kb_hbs_t *h) {
    for (size_t i = 0; h && i < h->n; i++)
        if (h->v[i].hb && kb_heartbeat_start(h->v[i].hb) != KB_OK)
            KB_ERROR("bridge", "route=%s: cannot start its heartbeat", h->v[i].route->conf->name);
}

static void kb_hbs_destroy(kb_hbs_t *h) {
    if (!h)
        return;
    for (size_t i = 0; i < h->n; i++) {
        kb_heartbeat_stop(h->v[i].hb);
        kb_heartbeat_destroy(h->v[i].hb);
        kb_event_unref(h->v[i].ident);
    }
    free(h->v);
    free(h);
}

static void kb_pipeline_start(kb_pipeline_t *p) {
    for (size_t s = 0; s < p->n_workers; s++) {
        /* Before the informer pushes anything: every key gets its window. */
        kb_deltafifo_set_coalesce(kb_informer_fifo(p->inf, s),
                                  (int64_t)kb_informer_conf(p->inf)->coalesce_ms * 1000000, NULL, NULL);
        if (pthread_create(&p->workers[s].thread, NULL, kb_worker_main, &p->workers[s]) != 0)
            KB_FATAL("cannot start a worker thread");
        p->workers[s].started = true;
    }
    kb_informer_start(p->inf);
    kb_hbs_start(p->hbs);
    p->started = true;
}

/* Stop reading, let the workers drain until the deadline, join them. Past the
 * deadline this pipeline's workers are told to abandon (p->drain); no other
 * pipeline is touched. */
static void kb_pipeline_drain(kb_pipeline_t *p, int64_t deadline, const _Atomic bool *cut) {
    kb_hbs_destroy(p->hbs);
    p->hbs = NULL;
    kb_informer_stop(p->inf);
    for (;;) {
        bool all_done = true;
        for (size_t s = 0; s < p->n_workers && all_done; s++)
            all_done = !p->workers[s].started || atomic_load(&p->workers[s].done);
        int64_t now = cut && atomic_load(cut) ? deadline : kb_now_mono_ns(); /* asked to give up: the deadline is now */
        if (kb_drain_look(&p->drain, all_done, now, deadline) != KB_DRAIN_WAIT)
            break;
        kb_sleep_ms_interruptible(10, NULL);
    }
    for (size_t s = 0; s < p->n_workers; s++)
        if (p->workers[s].started) {
            pthread_join(p->workers[s].thread, NULL);
            p->workers[s].started = false;
        }
}

static void kb_pipeline_destroy(kb_pipeline_t *p) {
    if (!p)
        return;
    if (p->inf)
        kb_informer_stop(p->inf);
    for (size_t s = 0; s < p->n_workers; s++)
        if (p->workers[s].started)
            pthread_join(p->workers[s].thread, NULL);
    free(p->workers);
    kb_hbs_destroy(p->hbs);
    kb_noops_destroy(p->noops, p->router ? p->router->n : 0);
    kb_router_destroy(p->router);
    free(p->bsinks);
    free(p->lidx);
    kb_informer_destroy(p->inf);
    pthread_rwlock_destroy(&p->route_lock);
    free(p);
}

static kb_bsink_t **kb_bsinks_copy(kb_bsink_t **bsinks, size_t n) {
    return kb_memdup(bsinks, (n ? n : 1) * sizeof(*bsinks));
}

/* ---- lifecycle ---------------------------------------------------------- */

/* Per informer, rv_of its ledger. Thread: ha. */
static size_t kb_bridge_ha_rvs(kb_bridge_t *b, uint64_t (*rv_of)(kb_ledger_t *), kb_ha_mark_t *out, size_t max) {
    size_t n = 0;
    pthread_rwlock_rdlock(&b->lock);
    for (size_t i = 0; i < b->n_pipes && n < max; i++) {
        kb_pipeline_t *p = b->pipes[i];
        snprintf(out[n].informer, sizeof(out[n].informer), "%s", kb_informer_conf(p->inf)->name);
        out[n++].rv = rv_of(kb_informer_ledger(p->inf));
    }
    pthread_rwlock_unlock(&b->lock);
    return n;
}

/* What the leader publishes: per informer, the RV its watermark is known by. Thread: ha. */
static size_t kb_bridge_ha_marks(void *opaque, kb_ha_mark_t *out, size_t max) {
    return kb_bridge_ha_rvs(opaque, kb_ledger_acked_rv, out, max);
}

/* What a published mark is checked against: per informer, the newest RV seen here. Thread: ha. */
static size_t kb_bridge_ha_seen(void *opaque, kb_ha_mark_t *out, size_t max) {
    return kb_bridge_ha_rvs(opaque, kb_ledger_tracked_rv, out, max);
}

/* Just took over: each informer weighs what it lists unwatched from now on
 * against the mark it trusts (kb_informer_ha_took; 0 where none was published). Thread: ha. */
static void kb_bridge_ha_took(void *opaque, const kb_ha_mark_t *trusted, size_t n, uint64_t took_rv, bool now) {
    kb_bridge_t *b = opaque;
    pthread_rwlock_rdlock(&b->lock);
    for (size_t i = 0; i < b->n_pipes; i++) {
        const char *name = kb_informer_conf(b->pipes[i]->inf)->name;
        uint64_t rv = 0;
        for (size_t j = 0; j < n; j++)
            if (!strcmp(trusted[j].informer, name))
                rv = trusted[j].rv;
        kb_informer_ha_took(b->pipes[i]->inf, rv, took_rv, now);
    }
    pthread_rwlock_unlock(&b->lock);
}

/* Per informer, its blind windows since the takeover (kb_informer_blind). Thread: ha. */
static size_t kb_bridge_ha_blind(void *opaque, kb_ha_window_t *out, size_t max) {
    kb_bridge_t *b = opaque;
    size_t n = 0;
    pthread_rwlock_rdlock(&b->lock);
    for (size_t i = 0; i < b->n_pipes && n < max; i++) {
        kb_pipeline_t *p = b->pipes[i];
        out[n].n = kb_informer_blind(p->inf, &out[n].lo, &out[n].hi);
        if (!out[n].n)
            continue;
        snprintf(out[n].informer, sizeof(out[n].informer), "%s", kb_informer_conf(p->inf)->name);
        n++;
    }
    pthread_rwlock_unlock(&b->lock);
    return n;
}

kb_bridge_t *kb_bridge_new(const kb_config_t *cfg, char *errstr, size_t errstr_size) {
    if (kb_bridge_validate(cfg, errstr, errstr_size) != KB_OK)
        return NULL;
    kb_bridge_t *b = kb_calloc(1, sizeof(*b));
    kb_rwlock_init_writer_first(&b->lock);
    b->cfg = cfg;
    b->journal = cfg->state_dir[0] != '\0';
    char why[512];
    b->api = kb_apiclient_new(&cfg->cluster, why, sizeof(why));
    if (!b->api) {
        snprintf(errstr, errstr_size, "%s: %s", cfg->path, why);
        goto fail;
    }
    b->sinks = kb_calloc(cfg->n_sinks ? cfg->n_sinks : 1, sizeof(*b->sinks));
    for (size_t i = 0; i < cfg->n_sinks; i++) {
        b->sinks[i] = kb_bsink_new(b, &cfg->sinks[i], cfg, errstr, errstr_size);
        if (!b->sinks[i])
            goto fail;
    }
    kb_bsinks_link_dead_letters(b->sinks, cfg);
    if (cfg->ha_enabled) /* before the pipelines: their informers read its role (kb_ha_shared_rv) */
        b->ha = kb_ha_new(cfg, b->api, &(kb_ha_hooks_t){.marks = kb_bridge_ha_marks, .prepare = kb_bridge_ha_prepare,
                                                        .seen = kb_bridge_ha_seen, .took = kb_bridge_ha_took,
                                                        .blind = kb_bridge_ha_blind,
                                                        .redeliver = kb_bridge_ha_redeliver, .opaque = b});
    b->pipes = kb_calloc(cfg->n_informers ? cfg->n_informers : 1, sizeof(*b->pipes));
    for (size_t i = 0; i < cfg->n_informers; i++) {
        kb_pipeline_t *p = kb_pipeline_new(b, cfg, &cfg->informers[i], errstr, errstr_size);
        if (!p)
            goto fail;
        b->pipes[b->n_pipes++] = p;
        p->bsinks = kb_bsinks_copy(b->sinks, cfg->n_sinks);
        p->router = kb_pipeline_router(p, cfg, b->sinks, errstr, errstr_size);
        if (!p->router)
            goto fail;
        p->lidx = kb_pipeline_lidx(p, p->router, cfg, NULL, NULL);
        p->noops = kb_noops_new(p->router);
        p->hbs = kb_hbs_new(p, p->router, cfg);
        atomic_store(&p->eos, kb_router_eos(p->router, b->sinks));
        kb_eos_read_back(b, p);
    }
    return b;
fail:
    kb_bridge_destroy(b);
    return NULL;
}

kb_err_t kb_bridge_start(kb_bridge_t *b) {
    for (size_t i = 0; i < b->n_pipes; i++)
        kb_pipeline_start(b->pipes[i]);
    if (b->ha)
        kb_ha_start(b->ha);
    b->started = true;
    return KB_OK;
}

static int64_t kb_bridge_inflight(kb_bridge_t *b) {
    int64_t n = 0;
    for (size_t i = 0; i < b->n_pipes; i++)
        n += atomic_load(&b->pipes[i]->inflight);
    return n;
}

kb_err_t kb_bridge_stop(kb_bridge_t *b, int timeout_ms) {
    int64_t deadline = kb_now_mono_ns() + (int64_t)timeout_ms * KB_NS_PER_MS;
    if (b->ha)
        kb_ha_begin_stop(b->ha); /* a standby's workers stop waiting; a leader drains */
    for (size_t i = 0; i < b->n_pipes; i++) {
        kb_hbs_destroy(b->pipes[i]->hbs);
        b->pipes[i]->hbs = NULL;
    }
    for (size_t i = 0; i < b->n_pipes; i++)
        kb_informer_stop(b->pipes[i]->inf);
    for (size_t i = 0; i < b->n_pipes; i++)
        kb_pipeline_drain(b->pipes[i], deadline, NULL);
    kb_err_t result = KB_OK;
    for (size_t i = 0; i < b->cfg->n_sinks; i++) {
        int64_t left_ms = (deadline - kb_now_mono_ns()) / KB_NS_PER_MS;
        if (b->sinks[i]->sink && kb_sink_stop(b->sinks[i]->sink, left_ms > 0 ? (int)left_ms : 0) != KB_OK)
            result = KB_ERR_TIMEDOUT;
    }
    for (size_t i = 0; i < b->n_pipes; i++)
        kb_informer_save_checkpoint(b->pipes[i]->inf);
    if (b->ha)
        kb_ha_stop(b->ha); /* a leader releases the Lease with its last watermarks */
    int64_t left = kb_bridge_inflight(b);
    if (left > 0) {
        KB_WARN("bridge", "stopped with %lld message(s) not acknowledged after %d ms", (long long)left, timeout_ms);
        result = KB_ERR_TIMEDOUT;
    }
    return result;
}

uint64_t kb_bridge_unacknowledged(kb_bridge_t *b) {
    /* The shutdown watchdog asks while a reload may be publishing new pipes;
     * b->lock's holders never wait long, but the watchdog must not wait for ever. */
    struct timespec until = kb_deadline_mono(1000);
    if (pthread_rwlock_clockrdlock(&b->lock, CLOCK_MONOTONIC, &until) != 0)
        return UINT64_MAX;
    uint64_t n = 0;
    for (size_t i = 0; i < b->n_pipes; i++) {
        int64_t inflight = atomic_load(&b->pipes[i]->inflight);
        n += (inflight > 0 ? (uint64_t)inflight : 0) + atomic_load(&b->pipes[i]->failed);
    }
    pthread_rwlock_unlock(&b->lock);
    return n;
}

void kb_bridge_reopen_sinks(kb_bridge_t *b) {
    for (size_t i = 0; i < b->cfg->n_sinks; i++) {
        kb_sink_t *sink = b->sinks[i]->sink;
        if (sink && sink->ops->reopen)
            sink->ops->reopen(sink->state);
    }
}

void kb_bridge_log_stats(kb_bridge_t *b) {
    for (size_t i = 0; i < b->n_pipes; i++) {
        kb_pipeline_t *p = b->pipes[i];
        kb_informer_stats_t st;
        kb_informer_stats(p->inf, &st);
        KB_INFOF("bridge",
                 KB_FIELDS(KB_F("informer", kb_informer_conf(p->inf)->name), KB_FU("objects", st.objects),
                           KB_FU("delivered", atomic_load(&p->delivered)), KB_FU("failed", atomic_load(&p->failed)),
                           KB_FU("relists", st.relists), KB_FU("watches", st.watches), KB_F("rv", st.last_rv)),
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

/* Stop a pipeline's threads without freeing it (its acks may still come). */
static void kb_pipeline_halt(kb_pipeline_t *p) {
    kb_hbs_destroy(p->hbs);
    p->hbs = NULL;
    if (p->inf)
        kb_informer_stop(p->inf);
    for (size_t s = 0; s < p->n_workers; s++)
        if (p->workers[s].started) {
            pthread_join(p->workers[s].thread, NULL);
            p->workers[s].started = false;
        }
}

void kb_bridge_destroy(kb_bridge_t *b) {
    if (!b)
        return;
    /* Threads first; then the sinks, whose last acks (failures of what they
     * still held) reach pipelines that still exist; then the pipelines. */
    if (b->ha) {
        kb_ha_begin_stop(b->ha);
        kb_ha_stop(b->ha);
    }
    for (size_t i = 0; i < b->n_pipes; i++)
        kb_pipeline_halt(b->pipes[i]);
    for (size_t i = 0; i < b->n_retired_pipes; i++)
        kb_pipeline_halt(b->retired_pipes[i]);
    for (size_t i = 0; b->sinks && i < b->cfg->n_sinks; i++)
        if (b->sinks[i])
            kb_bsink_close(b->sinks[i], 0);
    for (size_t i = 0; i < b->n_retired_sinks; i++)
        kb_bsink_close(b->retired_sinks[i], 0);
    for (size_t i = 0; i < b->n_pipes; i++)
        kb_pipeline_destroy(b->pipes[i]);
    for (size_t i = 0; i < b->n_retired_pipes; i++)
        kb_pipeline_destroy(b->retired_pipes[i]);
    free(b->pipes);
    free(b->retired_pipes);
    for (size_t i = 0; b->sinks && i < b->cfg->n_sinks; i++)
        free(b->sinks[i]);
    for (size_t i = 0; i < b->n_retired_sinks; i++)
        free(b->retired_sinks[i]);
    free(b->sinks);
    free(b->retired_sinks);
    kb_ha_destroy(b->ha);
    kb_apiclient_destroy(b->api);
    for (size_t i = 0; i < b->n_providers; i++)
        free(b->providers[i]);
    free(b->providers);
    for (size_t i = 0; i < b->n_owned_cfgs; i++)
        kb_config_free(b->owned_cfgs[i]);
    free(b->owned_cfgs);
    pthread_rwlock_destroy(&b->lock);
    free(b);
}

/* ---- hot reload --------------------------------------------------------- */

/* What one reload builds before it changes anything, parallel to the new
 * config's sinks and informers. */
typedef struct kb_reload_plan {
    kb_config_t *ncfg;
    size_t nn, ni;               /* new sinks, new informers */
    kb_bsink_t **nsinks;         /* kept or new */
    bool *sink_new;
    kb_bsink_t **pred;           /* a rebuilt sink's running instance, which hands over to nsinks[i] */
    kb_pipeline_t **npipes;      /* kept or new */
    bool *pipe_new;
    kb_router_t **routers;       /* one per new informer */
    kb_pipeline_t **gone;        /* running informers the new config drops (PUBLISH retires them) */
    size_t n_gone;
    size_t removed, added, new_sinks;
} kb_reload_plan_t;

static void kb_reload_plan_init(kb_reload_plan_t *pl, kb_config_t *ncfg) {
    memset(pl, 0, sizeof(*pl));
    pl->ncfg = ncfg;
    pl->nn = ncfg->n_sinks;
    pl->ni = ncfg->n_informers;
    pl->nsinks = kb_calloc(pl->nn ? pl->nn : 1, sizeof(*pl->nsinks));
    pl->sink_new = kb_calloc(pl->nn ? pl->nn : 1, sizeof(bool));
    pl->pred = kb_calloc(pl->nn ? pl->nn : 1, sizeof(*pl->pred));
    pl->npipes = kb_calloc(pl->ni ? pl->ni : 1, sizeof(*pl->npipes));
    pl->pipe_new = kb_calloc(pl->ni ? pl->ni : 1, sizeof(bool));
    pl->routers = kb_calloc(pl->ni ? pl->ni : 1, sizeof(*pl->routers));
}

static void kb_reload_plan_fini(kb_reload_plan_t *pl) {
    free(pl->nsinks);
    free(pl->npipes);
    free(pl->sink_new);
    free(pl->pred);
    free(pl->pipe_new);
    free(pl->routers);
    free(pl->gone);
}

/* A failed plan: destroy what it built; the running objects stay. */
static void kb_reload_plan_abort(kb_reload_plan_t *pl) {
    for (size_t i = 0; i < pl->ni; i++) {
        kb_router_destroy(pl->routers[i]);
        if (pl->pipe_new[i])
            kb_pipeline_destroy(pl->npipes[i]);
    }
    for (size_t i = 0; i < pl->nn; i++)
        if (pl->sink_new[i] && pl->nsinks[i]) {
            kb_bsink_close(pl->nsinks[i], 0);
            free(pl->nsinks[i]);
        }
}

/* Keep every running sink whose keys did not change (kb_config_diff_sink);
 * build the others. */
static kb_err_t kb_reload_sinks(kb_bridge_t *b, kb_reload_plan_t *pl, char *errstr, size_t errstr_size) {
    const kb_config_t *ocfg = b->cfg;
    for (size_t i = 0; i < pl->nn; i++) {
        const kb_config_sink_t *nc = &pl->ncfg->sinks[i];
        kb_bsink_t *pred = NULL;
        for (size_t j = 0; j < ocfg->n_sinks && !pl->nsinks[i]; j++) {
            char what[128];
            kb_reload_t r = b->sinks[j]->sink ? kb_config_diff_sink(b->sinks[j]->conf, nc, what, sizeof(what))
                                              : KB_RELOAD_REBUILD;
            if (r <= KB_RELOAD_IN_PLACE) {
                pl->nsinks[i] = b->sinks[j];
            } else if (!strcmp(b->sinks[j]->conf->name, nc->name)) {
                KB_INFO("bridge", "reload: sink=%s is rebuilt (%s changed)", nc->name, what);
                pred = b->sinks[j];
            }
        }
        if (pl->nsinks[i])
            continue;
        pl->nsinks[i] = kb_bsink_new(b, nc, pl->ncfg, errstr, errstr_size);
        pl->sink_new[i] = true;
        pl->new_sinks++;
        if (!pl->nsinks[i])
            return KB_ERR_CONFIG;
        if (pred) { /* held until what pred still holds is handed over (kb_reload_retire_sinks) */
            pl->pred[i] = pred;
            kb_handover_hold(&pl->nsinks[i]->ho);
        }
    }
    return KB_OK;
}

/* Each informer of the new config: kept, added, rebuilt, or the reload is
 * refused — kb_definition_reload decides, this carries it out. */
static kb_err_t kb_reload_pipes(kb_bridge_t *b, kb_reload_plan_t *pl, char *errstr, size_t errstr_size) {
    const kb_config_t *ncfg = pl->ncfg;
    const kb_config_informer_t **running = kb_calloc(b->n_pipes ? b->n_pipes : 1, sizeof(*running));
    for (size_t j = 0; j < b->n_pipes; j++)
        running[j] = kb_informer_conf(b->pipes[j]->inf);
    kb_err_t err = KB_OK;
    for (size_t i = 0; i < pl->ni && err == KB_OK; i++) {
        const kb_config_informer_t *nc = &ncfg->informers[i];
        size_t keep = 0;
        char what[128] = "";
        switch (kb_definition_reload(running, b->n_pipes, nc, ncfg->state_dir[0] != '\0', &keep, what,
                                     sizeof(what))) {
        case KB_DEF_RELOAD_KEEP:
            pl->npipes[i] = b->pipes[keep];
            continue;
        case KB_DEF_RELOAD_REFUSE:
            snprintf(errstr, errstr_size,
                     "%s:%d: informers.%s: its definition changed (%s); with state_dir set this applies on restart "
                     "only (the restart lists again and converges the sinks to the new definition)",
                     ncfg->path, nc->line, nc->name, what);
            err = KB_ERR_CONFIG;
            continue;
        case KB_DEF_RELOAD_REBUILD:
            KB_INFO("bridge", "reload: informer=%s is rebuilt (%s changed; it lists again)", nc->name, what);
            break;
        case KB_DEF_RELOAD_ADD:
            break;
        }
        pl->npipes[i] = kb_pipeline_new(b, ncfg, nc, errstr, errstr_size);
        pl->pipe_new[i] = true;
        if (!pl->npipes[i])
            err = KB_ERR_CONFIG;
    }
    free(running);
    for (size_t i = 0; i < pl->ni && err == KB_OK; i++) {
        pl->routers[i] = kb_pipeline_router(pl->npipes[i], ncfg, pl->nsinks, errstr, errstr_size);
        if (!pl->routers[i])
            err = KB_ERR_CONFIG;
    }
    return err;
}

static bool kb_reload_keeps_pipe(const kb_reload_plan_t *pl, const kb_pipeline_t *p) {
    for (size_t i = 0; i < pl->ni; i++)
        if (pl->npipes[i] == p)
            return true;
    return false;
}

static bool kb_reload_keeps_sink(const kb_reload_plan_t *pl, const kb_bsink_t *bs) {
    for (size_t i = 0; i < pl->nn; i++)
        if (pl->nsinks[i] == bs)
            return true;
    return false;
}

/* Stop and drain the informers that go away (into their old routes), until
 * shutdown_timeout or until the reload is asked to give up (a stop, a newer
 * SIGHUP): what they still hold is left in their own state_dir. */
static void kb_reload_drain_removed(kb_reload_plan_t *pl, const _Atomic bool *abandon) {
    int64_t deadline = kb_now_mono_ns() + (int64_t)pl->ncfg->shutdown_timeout * KB_NS_PER_SEC;
    for (size_t j = 0; j < pl->n_gone; j++) {
        kb_pipeline_drain(pl->gone[j], deadline, abandon);
        kb_informer_close_state(pl->gone[j]->inf);
        pl->removed++;
    }
}

/* Take lock for writing, waiting at most ms. */
static bool kb_wrlock_within(pthread_rwlock_t *lock, int ms) {
    struct timespec until = kb_deadline_mono(ms);
    return pthread_rwlock_clockwrlock(lock, CLOCK_MONOTONIC, &until) == 0;
}

/* Step LOCK: the route locks of every informer of the new config, held all at
 * once or none. A worker holds its informer's route lock while it hands one
 * batch to the sinks, as long as a full sink takes nothing; so an attempt
 * waits at most one slice per lock and gives back what it took when one is
 * not free, and between attempts a reload asked to give up (*abandon) does.
 * KB_OK with every lock held, KB_ERR_STOPPED (none held) when abandoned. */
static kb_err_t kb_reload_lock_routes(kb_reload_plan_t *pl, const _Atomic bool *abandon) {
    int64_t pause_ms = KB_RELOAD_PAUSE_MIN_MS;
    kb_ratelimit_t rl = {0};
    while (!atomic_load(abandon)) {
        size_t held = 0;
        while (held < pl->ni && kb_wrlock_within(&pl->npipes[held]->route_lock, KB_RELOAD_SLICE_MS))
            held++;
        if (held == pl->ni)
            return KB_OK;
        const char *busy = kb_informer_conf(pl->npipes[held]->inf)->name;
        while (held > 0)
            pthread_rwlock_unlock(&pl->npipes[--held]->route_lock);
        if (kb_ratelimit_allow(&rl, KB_RELOAD_WARN_MS, NULL))
            KB_WARN("bridge", "reload of %s waits: informer=%s is handing a batch to a sink that does not take it "
                    "(full?); its routes change once it has; SIGTERM still stops, and a new SIGHUP replaces this "
                    "reload", pl->ncfg->path, busy);
        kb_sleep_ms_interruptible(pause_ms, abandon);
        pause_ms = pause_ms * 2 < KB_RELOAD_PAUSE_MAX_MS ? pause_ms * 2 : KB_RELOAD_PAUSE_MAX_MS;
    }
    return KB_ERR_STOPPED;
}

/* The routes a pipeline had before SWAP, freed once its heartbeats are gone. */
typedef struct kb_old_routes {
    kb_router_t *router;
    kb_bsink_t **bsinks;
    kb_noop_t **noops;
    int *lidx;
} kb_old_routes_t;

/* Step SWAP, every route lock held (LOCK): each informer of the new config
 * gets its routes and its lock back at once; then heartbeats are replaced
 * (they point into the old routes) and the old routes freed. */
static void kb_reload_swap_routes(kb_bridge_t *b, kb_reload_plan_t *pl) {
    kb_bsinks_link_dead_letters(pl->nsinks, pl->ncfg);
    kb_old_routes_t *old = kb_calloc(pl->ni ? pl->ni : 1, sizeof(*old));
    for (size_t i = 0; i < pl->ni; i++) {
        kb_pipeline_t *p = pl->npipes[i];
        old[i] = (kb_old_routes_t){p->router, p->bsinks, p->noops, p->lidx};
        p->lidx = kb_pipeline_lidx(p, pl->routers[i], pl->ncfg, p->lidx, b->cfg);
        p->noops = kb_noops_new(pl->routers[i]);
        p->router = pl->routers[i];
        p->bsinks = kb_bsinks_copy(pl->nsinks, pl->nn);
        atomic_store(&p->eos, kb_router_eos(pl->routers[i], pl->nsinks));
        pthread_rwlock_unlock(&p->route_lock);
        pl->routers[i] = NULL; /* the pipeline owns it now */
    }
    for (size_t i = 0; i < pl->ni; i++) {
        kb_pipeline_t *p = pl->npipes[i];
        if (pl->pipe_new[i])
            kb_eos_read_back(b, p);
        kb_hbs_destroy(p->hbs);
        p->hbs = kb_hbs_new(p, p->router, pl->ncfg);
        if (p->started)
            kb_hbs_start(p->hbs);
        kb_noops_destroy(old[i].noops, old[i].router ? old[i].router->n : 0);
        kb_router_destroy(old[i].router);
        free(old[i].bsinks);
        free(old[i].lidx);
    }
    free(old);
}

/* Publish the new set under b->lock and retire what went away (HTTP
 * requests may still hold pointers to it). Returns the sinks nothing routes
 * to any more (the caller closes them; free the array). */
static kb_bsink_t **kb_reload_publish(kb_bridge_t *b, kb_reload_plan_t *pl, size_t *n_dropped) {
    const kb_config_t *ocfg = b->cfg;
    kb_bsink_t **dropped = NULL;
    *n_dropped = 0;
    pthread_rwlock_wrlock(&b->lock);
    for (size_t j = 0; j < b->n_pipes; j++)
        if (!kb_reload_keeps_pipe(pl, b->pipes[j])) {
            KB_PUSH(b->retired_pipes, b->n_retired_pipes, b->pipes[j]);
            KB_PUSH(pl->gone, pl->n_gone, b->pipes[j]);
        }
    for (size_t j = 0; j < ocfg->n_sinks; j++)
        if (!kb_reload_keeps_sink(pl, b->sinks[j]))
            KB_PUSH(dropped, *n_dropped, b->sinks[j]);
    free(b->pipes);
    free(b->sinks);
    b->pipes = pl->npipes;
    b->n_pipes = pl->ni;
    b->sinks = pl->nsinks;
    b->cfg = pl->ncfg;
    KB_PUSH(b->owned_cfgs, b->n_owned_cfgs, pl->ncfg);
    for (size_t i = 0; i < *n_dropped; i++)
        KB_PUSH(b->retired_sinks, b->n_retired_sinks, dropped[i]);
    pthread_rwlock_unlock(&b->lock);
    pl->npipes = NULL;
    pl->nsinks = NULL;
    return dropped;
}

static bool kb_bridge_has_pipe(const kb_bridge_t *b, const kb_pipeline_t *p) {
    for (size_t i = 0; i < b->n_pipes; i++)
        if (b->pipes[i] == p)
            return true;
    return false;
}

/* The n messages of one slot of d that succ's predecessor gave back: the
 * successor gets the event from every route of d's pipeline that goes to it
 * (the routes as reloaded), then the parked messages are released. An
 * informer the reload removed hands nothing over: its slot stays below the
 * watermark of its state_dir. The reload thread. */
static void kb_hand_over_slot(kb_bridge_t *b, kb_parked_t *v, size_t n, kb_bsink_t *succ, int64_t deadline,
                              kb_buf_t *topic, kb_buf_t *key) {
    kb_msg_ack_t *first = v[0].msg;
    kb_delivery_t *d = first->d;
    size_t slot = first->slot;
    kb_pipeline_t *p = d->p;
    bool live = kb_bridge_has_pipe(b, p);
    if (live) {
        pthread_rwlock_rdlock(&p->route_lock);
        d->s[slot].bs = succ; /* every ack of the old instance came: no one else reads it now */
        for (size_t r = 0; r < p->router->n; r++) {
            const kb_route_t *route = &p->router->routes[r];
            if (p->bsinks[route->sink_index] != succ || !kb_route_match(route, d->ev))
                continue;
            atomic_fetch_add(&d->s[slot].pending, 1);
            kb_send(d, slot, route, topic, key, false, deadline);
        }
        pthread_rwlock_unlock(&p->route_lock);
    }
    for (size_t i = 0; i < n; i++) {
        if (live)
            kb_slot_acked(d, slot); /* replaced by what the successor was given */
        else
            atomic_fetch_add(&p->failed, 1);
        atomic_fetch_sub(&p->inflight, 1);
        free(v[i].msg);
        kb_delivery_release(d);
    }
}

/* What pred gave back when it was closed goes to succ, in order, before succ
 * takes anything from the workers (it is held until then). The reload thread. */
static void kb_hand_over(kb_bridge_t *b, kb_bsink_t *pred, kb_bsink_t *succ, int64_t deadline) {
    size_t n;
    pthread_mutex_lock(&pred->back_mtx);
    kb_parked_t *v = kb_handover_take(&pred->ho, &n); /* in hand-over order */
    pthread_mutex_unlock(&pred->back_mtx);
    kb_buf_t topic = KB_BUF_INIT, key = KB_BUF_INIT;
    for (size_t i = 0, j; i < n; i = j) {
        const kb_msg_ack_t *mi = v[i].msg;
        for (j = i + 1; j < n && ((kb_msg_ack_t *)v[j].msg)->d == mi->d && ((kb_msg_ack_t *)v[j].msg)->slot == mi->slot;
             j++)
            ;
        kb_hand_over_slot(b, v + i, j - i, succ, deadline, &topic, &key);
    }
    if (n)
        KB_INFO("bridge", "sink=%s: %zu message(s) its old instance still held were handed to the new one, in order",
                succ->conf->name, n);
    kb_buf_fini(&topic);
    kb_buf_fini(&key);
    free(v);
}

/* A successor has its predecessor's messages: the workers may hand it more. */
static void kb_bsink_release(kb_bsink_t *bs) {
    pthread_mutex_lock(&bs->back_mtx);
    kb_handover_release(&bs->ho);
    pthread_cond_broadcast(&bs->back_cv);
    pthread_mutex_unlock(&bs->back_mtx);
}

/* The new instance dropped[i] hands over to, or NULL (removed for good). */
static kb_bsink_t *kb_reload_successor(const kb_bridge_t *b, const kb_reload_plan_t *pl, const kb_bsink_t *old) {
    for (size_t j = 0; j < pl->nn; j++) /* published: b->sinks is the plan's nsinks */
        if (pl->pred[j] == old)
            return b->sinks[j];
    return NULL;
}

/* Step 5 of a reload: close the sink instances nothing routes to any more,
 * all within one shutdown_timeout, cut short when the reload is asked to give
 * up (a stop, a newer SIGHUP). Rebuilt sinks first: an old instance flushes;
 * what it still holds then is given back (KB_ERR_STOPPED) and handed to its
 * successor, which is let go at once — it waits for its own predecessor
 * only, never for another sink's close. Then the sinks removed for good,
 * which leave what they held: the ledger waits for them no more. */
static void kb_reload_retire_sinks(kb_bridge_t *b, const kb_reload_plan_t *pl, kb_bsink_t **dropped, size_t n,
                                   const _Atomic bool *abandon) {
    int64_t span = (int64_t)pl->ncfg->shutdown_timeout * KB_NS_PER_SEC;
    int64_t deadline = kb_now_mono_ns() + span;
    for (int rebuilt = 1; rebuilt >= 0; rebuilt--)
        for (size_t i = 0; i < n; i++) {
            kb_bsink_t *succ = kb_reload_successor(b, pl, dropped[i]);
            if ((succ != NULL) != rebuilt)
                continue;
            kb_handover_retire(&dropped[i]->ho, succ);
            int64_t left_ms = atomic_load(abandon) ? 0 : (deadline - kb_now_mono_ns()) / KB_NS_PER_MS;
            kb_bsink_close(dropped[i], left_ms > 0 ? (int)left_ms : 0);
            if (!succ)
                continue;
            kb_hand_over(b, dropped[i], succ, kb_now_mono_ns() + span);
            kb_bsink_release(succ);
        }
    for (size_t j = 0; j < pl->nn; j++) /* a successor whose predecessor was not dropped (none expected) */
        if (kb_handover_held(&b->sinks[j]->ho))
            kb_bsink_release(b->sinks[j]);
}

kb_err_t kb_bridge_reload(kb_bridge_t *b, kb_config_t *ncfg, const _Atomic bool *abandon, char *errstr,
                          size_t errstr_size) {
    const kb_config_t *ocfg = b->cfg;
    if (kb_bridge_validate(ncfg, errstr, errstr_size) != KB_OK)
        return KB_ERR_CONFIG;
    char what[128];
    kb_reload_t global = kb_config_diff_global(ocfg, ncfg, what, sizeof(what));
    if (global == KB_RELOAD_RESTART) {
        snprintf(errstr, errstr_size, "%s: %s changed; it applies only on restart", ncfg->path, what);
        return KB_ERR_CONFIG;
    }
    /* BUILD everything new, then LOCK: nothing running has changed yet. */
    kb_reload_plan_t pl;
    kb_reload_plan_init(&pl, ncfg);
    kb_err_t err = kb_reload_sinks(b, &pl, errstr, errstr_size);
    if (err == KB_OK)
        err = kb_reload_pipes(b, &pl, errstr, errstr_size);
    if (err == KB_OK && (err = kb_reload_lock_routes(&pl, abandon)) != KB_OK)
        snprintf(errstr, errstr_size, "%s: given up before it changed anything (a stop, or a newer SIGHUP)",
                 ncfg->path);
    if (err != KB_OK) {
        kb_reload_plan_abort(&pl);
        kb_reload_plan_fini(&pl);
        return err;
    }
    /* SWAP, PUBLISH, DRAIN what went away, START what is new, CLOSE unused sinks. */
    kb_reload_swap_routes(b, &pl);
    size_t n_dropped;
    kb_bsink_t **dropped = kb_reload_publish(b, &pl, &n_dropped);
    kb_reload_drain_removed(&pl, abandon);
    for (size_t i = 0; i < pl.ni; i++)
        if (pl.pipe_new[i]) {
            if (b->started)
                kb_pipeline_start(b->pipes[i]);
            pl.added++;
        }
    /* 5. Sinks nothing routes to any more: flush and close; a rebuilt one hands over. */
    kb_reload_retire_sinks(b, &pl, dropped, n_dropped, abandon);
    free(dropped);
    KB_INFOF("bridge",
             KB_FIELDS(KB_F("config", ncfg->path), KB_FU("informers_kept", pl.ni - pl.added),
                       KB_FU("informers_added", pl.added), KB_FU("informers_removed", pl.removed),
                       KB_FU("sinks_kept", pl.nn - pl.new_sinks), KB_FU("sinks_added", pl.new_sinks),
                       KB_FU("sinks_removed", n_dropped), KB_FU("routes", ncfg->n_routes)),
             "reloaded %s: informers kept=%zu added=%zu removed=%zu; sinks kept=%zu added=%zu removed=%zu; "
            "routes=%zu; other settings %s", ncfg->path, pl.ni - pl.added, pl.added, pl.removed, pl.nn - pl.new_sinks,
            pl.new_sinks, n_dropped, ncfg->n_routes, kb_reload_name(global));
    kb_reload_plan_fini(&pl);
    return KB_OK;
}

/* ---- introspection (HTTP API) ------------------------------------------ */

/* ---- a stopped sink, tried again -------------------------------------------- */

size_t kb_bridge_stopped_sinks(kb_bridge_t *b, char ***names) {
    pthread_rwlock_rdlock(&b->lock);
    size_t n = 0;
    *names = NULL;
    for (size_t i = 0; i < b->cfg->n_sinks; i++)
        if (atomic_load(&b->sinks[i]->stopped))
            KB_PUSH(*names, n, kb_strdup(b->cfg->sinks[i].name));
    pthread_rwlock_unlock(&b->lock);
    return n;
}

/* Does p route to a sink named in names? The reload thread (the only one that changes routes). */
static bool kb_pipeline_routes_to(const kb_pipeline_t *p, char *const *names, size_t n) {
    for (size_t r = 0; r < p->router->n; r++)
        for (size_t i = 0; i < n; i++)
            if (!strcmp(p->router->routes[r].conf->sink, names[i]))
                return true;
    return false;
}

/* p's informer opened again on its state_dir, with routes, ready to start.
 * Caller holds b->lock for writing; p's state is closed. */
static kb_pipeline_t *kb_pipeline_reopen(kb_bridge_t *b, const kb_pipeline_t *p, char *errstr, size_t errstr_size) {
    const kb_config_t *cfg = b->cfg;
    kb_pipeline_t *np = kb_pipeline_new(b, cfg, kb_informer_conf(p->inf), errstr, errstr_size);
    if (!np)
        return NULL;
    np->bsinks = kb_bsinks_copy(b->sinks, cfg->n_sinks);
    np->router = kb_pipeline_router(np, cfg, b->sinks, errstr, errstr_size);
    if (!np->router) {
        kb_pipeline_destroy(np);
        return NULL;
    }
    np->lidx = kb_pipeline_lidx(np, np->router, cfg, NULL, NULL);
    np->noops = kb_noops_new(np->router);
    np->hbs = kb_hbs_new(np, np->router, cfg);
    atomic_store(&np->eos, kb_router_eos(np->router, b->sinks));
    kb_eos_read_back(b, np);
    return np;
}

size_t kb_bridge_retry_sinks(kb_bridge_t *b, char *const *names, size_t n) {
    if (!n)
        return 0;
    /* Drain first (the stopped sinks are still skipped, so nothing reaches them
     * out of order), then let them take messages again, then reopen. The
     * drain, up to shutdown_timeout, runs without b->lock: only this thread
     * changes b's sets, and HTTP readers (and the shutdown watchdog) must not
     * wait for it; closing the state and swapping take the write lock. */
    const kb_config_t *cfg = b->cfg;
    int64_t deadline = kb_now_mono_ns() + (int64_t)cfg->shutdown_timeout * KB_NS_PER_MS * 1000;
    kb_pipeline_t **reopened = kb_calloc(b->n_pipes ? b->n_pipes : 1, sizeof(*reopened));
    for (size_t k = 0; k < b->n_pipes; k++) {
        kb_pipeline_t *p = b->pipes[k];
        if (!p->started || !kb_pipeline_routes_to(p, names, n))
            continue;
        kb_pipeline_drain(p, deadline, NULL);
        kb_drain_retire(&p->drain); /* its late give-ups are sent again by its successor */
        reopened[k] = p;
    }
    pthread_rwlock_wrlock(&b->lock);
    for (size_t k = 0; k < b->n_pipes; k++)
        if (reopened[k])
            kb_informer_close_state(reopened[k]->inf);
    for (size_t i = 0; i < cfg->n_sinks; i++)
        for (size_t j = 0; j < n; j++)
            if (!strcmp(cfg->sinks[i].name, names[j]) && atomic_exchange(&b->sinks[i]->stopped, false))
                KB_INFOF("bridge", KB_FIELDS(KB_F("sink", names[j])), "sink=%s: trying it again (it stopped after it %s)",
                         names[j], b->sinks[i]->why);
    size_t count = 0;
    for (size_t k = 0; k < b->n_pipes; k++) {
        if (!reopened[k])
            continue;
        char errstr[1024];
        kb_pipeline_t *np = kb_pipeline_reopen(b, reopened[k], errstr, sizeof(errstr));
        if (!np) {
            KB_ERROR("bridge", "informer=%s cannot be opened again after a stopped sink: %s; restart kbridge",
                     kb_informer_conf(reopened[k]->inf)->name, errstr);
            continue;
        }
        KB_PUSH(b->retired_pipes, b->n_retired_pipes, reopened[k]);
        b->pipes[k] = np;
        kb_pipeline_start(np);
        count++;
    }
    free(reopened);
    pthread_rwlock_unlock(&b->lock);
    return count;
}

void kb_bridge_rdlock(kb_bridge_t *b) {
    pthread_rwlock_rdlock(&b->lock);
}

void kb_bridge_unlock(kb_bridge_t *b) {
    pthread_rwlock_unlock(&b->lock);
}

size_t kb_bridge_informer_count(const kb_bridge_t *b) {
    return b->n_pipes;
}

kb_ha_t *kb_bridge_ha(kb_bridge_t *b) {
    return b->ha;
}

kb_informer_t *kb_bridge_informer(kb_bridge_t *b, size_t i) {
    return i < b->n_pipes ? b->pipes[i]->inf : NULL;
}

kb_informer_t *kb_bridge_find_informer(kb_bridge_t *b, const char *name) {
    for (size_t i = 0; i < b->n_pipes; i++)
        if (!strcmp(kb_informer_conf(b->pipes[i]->inf)->name, name))
            return b->pipes[i]->inf;
    return NULL;
}

const kb_config_t *kb_bridge_config(const kb_bridge_t *b) {
    return b->cfg;
}

void kb_bridge_pipeline_stats(kb_bridge_t *b, size_t i, kb_pipeline_stats_t *st) {
    memset(st, 0, sizeof(*st));
    if (i >= b->n_pipes)
        return;
    kb_pipeline_t *p = b->pipes[i];
    st->delivered = atomic_load(&p->delivered);
    st->failed = atomic_load(&p->failed);
    st->routed = atomic_load(&p->routed);
    st->unrouted = atomic_load(&p->unrouted);
    st->inflight = atomic_load(&p->inflight);
    st->last_change_real_ns = atomic_load(&p->last_change_real_ns);
}

const kb_histogram_t *kb_bridge_handle_histogram(kb_bridge_t *b, size_t i, int type) {
    return i < b->n_pipes && type >= 0 && type < KB_EV_TYPE_COUNT ? &b->pipes[i]->handle[type] : NULL;
}

size_t kb_bridge_noop_counts(kb_bridge_t *b, size_t i, const char **routes, uint64_t *suppressed, size_t max) {
    if (i >= b->n_pipes)
        return 0;
    kb_pipeline_t *p = b->pipes[i];
    size_t n = 0;
    pthread_rwlock_rdlock(&p->route_lock);
    for (size_t r = 0; r < p->router->n && n < max; r++) {
        if (!p->noops[r])
            continue;
        kb_noop_stats_t st;
        kb_noop_stats(p->noops[r], &st);
        routes[n] = p->router->routes[r].conf->name;
        suppressed[n] = st.suppressed;
        n++;
    }
    pthread_rwlock_unlock(&p->route_lock);
    return n;
}

kb_sink_t *kb_bridge_sink(kb_bridge_t *b, size_t i) {
    return i < b->cfg->n_sinks ? b->sinks[i]->sink : NULL;
}

const kb_histogram_t *kb_bridge_delivery_histogram(kb_bridge_t *b, size_t i) {
    return i < b->cfg->n_sinks ? &b->sinks[i]->delivery : NULL;
}

bool kb_bridge_sink_refusals(kb_bridge_t *b, size_t i, kb_sink_refusals_t *out) {
    memset(out, 0, sizeof(*out));
    if (i >= b->cfg->n_sinks)
        return false;
    kb_bsink_t *bs = b->sinks[i];
    out->dead_letters = atomic_load(&bs->dead_letters);
    for (size_t r = 0; r < KB_REFUSAL_REASONS; r++) {
        const char *reason = atomic_load(&bs->refused[r].reason);
        if (reason && out->n < KB_ARRAY_LEN(out->reason)) {
            out->reason[out->n] = reason;
            out->count[out->n++] = atomic_load(&bs->refused[r].n);
        }
    }
    pthread_mutex_lock(&bs->why_mtx);
    out->stopped = atomic_load(&bs->stopped);
    if (out->stopped)
        snprintf(out->why, sizeof(out->why), "%s", bs->why);
    pthread_mutex_unlock(&bs->why_mtx);
    return out->stopped;
}

void kb_bridge_sink_counts(kb_bridge_t *b, size_t i, uint64_t *acked, uint64_t *failed) {
    *acked = i < b->cfg->n_sinks ? atomic_load(&b->sinks[i]->acked) : 0;
    *failed = i < b->cfg->n_sinks ? atomic_load(&b->sinks[i]->failed) : 0;
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
        if (!strcmp(kb_informer_conf(b->pipes[i]->inf)->name, informer))
            p = b->pipes[i];
    if (!p) {
        snprintf(errstr, errstr_size, "no informer named \"%s\"", informer);
        return KB_ERR_NOTFOUND;
    }
    pthread_rwlock_rdlock(&p->route_lock);
    const kb_route_t *rt = NULL;
    for (size_t i = 0; i < p->router->n && !rt; i++)
        if (!strcmp(p->router->routes[i].conf->name, route))
            rt = &p->router->routes[i];
    if (!rt) {
        pthread_rwlock_unlock(&p->route_lock);
        snprintf(errstr, errstr_size, "informer \"%s\" has no route named \"%s\"", informer, route);
        return KB_ERR_NOTFOUND;
    }
    if (!(rt->conf->types & (1u << KB_EV_SNAPSHOT))) {
        pthread_rwlock_unlock(&p->route_lock);
        snprintf(errstr, errstr_size, "route \"%s\" does not send SNAPSHOT (its types leave it out)", route);
        return KB_ERR_CONFIG;
    }
    kb_event_list_t all;
    kb_event_list_init(&all);
    char rv[KB_RV_MAX];
    kb_informer_snapshot(p->inf, NULL, &all, rv, sizeof(rv));
    kb_snap_ack_t *sa = kb_calloc(1, sizeof(*sa));
    atomic_init(&sa->pending, 1);
    kb_buf_t topic = KB_BUF_INIT, key = KB_BUF_INIT;
    kb_err_t err = KB_OK;
    for (size_t i = 0; i < all.n && err == KB_OK; i++) {
        kb_event_t *ev = kb_event_retype(all.ev[i], KB_EV_SNAPSHOT, false);
        if (!kb_route_match(rt, ev)) { /* what the route would send live, no more */
            kb_event_unref(ev);
            continue;
        }
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
    pthread_rwlock_unlock(&p->route_lock);
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
