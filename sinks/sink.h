/* sinks/sink.h — the one interface every sink implements (file, Kafka, MQTT).
 *
 * A sink is an ops table plus opaque state. The bridge creates each
 * configured sink once, hands it messages from the shard workers, and
 * destroys it at shutdown (after kb_sink_stop has flushed it).
 *
 * Delivery contract (the checkpoint rests on it):
 *   - produce() returns KB_OK once the sink has taken responsibility for the
 *     message; its ack callback is then called EXACTLY once, with KB_OK when
 *     the destination acknowledged it (fsync'd write / Kafka delivery report
 *     / PUBACK or PUBCOMP), or with an error when the sink gave up for good.
 *     The ack may run before produce() returns, on any thread.
 *   - produce() returning an error means the ack will never be called.
 *   - An error is a refusal (the bridge applies on_refused: stop or dead
 *     letter) only when it is the destination's own verdict on that message:
 *     too large, not authorised, an invalid topic, rejected for good. A sink
 *     that gives a message up WITHOUT a verdict says so with KB_ERR_STOPPED
 *     (it is being stopped: the shutdown deadline, a reload retiring this
 *     instance) or KB_ERR_TIMEDOUT (it stopped trying: a retry limit, a
 *     message timeout). Neither is a refusal: the message stays
 *     unacknowledged, below the watermark (kb_sink_refused says which).
 *   - Messages of one topic+key are acknowledged in the order produced.
 *   - produce() may block up to timeout_ms when the sink's own bounded
 *     buffer is full (backpressure); then it returns KB_ERR_FULL.
 *
 * Threads: produce() is called concurrently by the shard workers; sinks lock
 * internally. stop/destroy are called by the bridge's main thread only.
 */
#ifndef KB_SINKS_SINK_H
#define KB_SINKS_SINK_H

#include "common/err.h"
#include "common/event.h"
#include "config/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*kb_ack_fn)(void *opaque, kb_err_t err);

typedef struct kb_msg {
    kb_event_t *ev;         /* borrowed for the call; a sink that keeps it takes kb_event_ref;
                               NULL for a raw message */
    const char *raw;        /* when ev is NULL: bytes to send as they are (a heartbeat record),
                               never retained, no k8s-* headers or properties */
    size_t raw_len;
    const char *topic;      /* rendered topic (NUL-terminated; "" for the file sink) */
    size_t topic_len;
    const char *key;        /* rendered key (NUL-terminated) */
    size_t key_len;
    kb_format_t format;
    kb_mode_t mode;
    const char *route;      /* route name, for logs and metrics */
    kb_ack_fn ack;
    void *ack_opaque;
    /* Transactional sinks only: called with ack_opaque once the message is
     * inside the open transaction, while the sink's commit cannot run (under
     * its gate). NULL = not wanted. */
    void (*enqueued)(void *opaque);
} kb_msg_t;

/* Checkpoint records a transactional sink commits together with each
 * transaction (exactly-once across restarts). */
typedef struct kb_ckpt_rec {
    char *key;    /* "<cluster>/<informer>" (+ "/<replica>-of-<n>" when sharded); malloc'd */
    char *value;  /* JSON {"seq":N,"rv":"…"}; malloc'd */
} kb_ckpt_rec_t;

/* Fill *recs (malloc'd array of *n records, each field malloc'd; the sink
 * frees all of it). Called by the sink right before each commit, with no
 * produce() able to run (the sink holds its gate exclusively), on the sink's
 * own thread. Must not call back into the sink. */
typedef void (*kb_ckpt_provider_fn)(void *opaque, kb_ckpt_rec_t **recs, size_t *n);

typedef struct kb_sink_stats {
    uint64_t produced;   /* messages accepted by produce() */
    uint64_t acked;      /* acks with KB_OK */
    uint64_t failed;     /* acks with an error */
    uint64_t retries;    /* re-sends after a transient failure */
    uint64_t queue_bytes;/* bytes waiting inside the sink */
    bool connected;
    const char *why;     /* when not connected, why in a few words (a static string; NULL: not said);
                            /readyz shows it */
    /* It can never deliver again in this process (a Kafka producer the broker
     * fenced, or another fatal producer error): /healthz fails, so that the
     * liveness probe's restart brings it back. */
    bool broken;
} kb_sink_stats_t;

typedef struct kb_sink_ops {
    const char *type; /* "file", "kafka", "mqtt" */
    /* Check a sink's settings without connecting anywhere (used by --check
     * and before start). Errors as "FILE:LINE: key: reason". */
    kb_err_t (*validate)(const kb_config_sink_t *conf, const kb_config_t *cfg, char *errstr,
                         size_t errstr_size);
    kb_err_t (*create)(const kb_config_sink_t *conf, const kb_config_t *cfg, void **state, char *errstr,
                       size_t errstr_size);
    kb_err_t (*produce)(void *state, const kb_msg_t *msg, int timeout_ms);
    /* Wait until everything produced is acked or timeout; KB_ERR_TIMEDOUT if not. */
    kb_err_t (*flush)(void *state, int timeout_ms);
    void (*stats)(void *state, kb_sink_stats_t *st);
    void (*destroy)(void *state); /* after flush; must not block long */
    /* Optional (transactional sinks). NULL for sinks that are not. */
    bool (*is_transactional)(void *state);
    /* Register the provider of checkpoint records (before the first produce). */
    void (*set_checkpoint_provider)(void *state, kb_ckpt_provider_fn fn, void *opaque);
    /* The last committed checkpoint value of key (read_committed), into value.
     * KB_ERR_NOTFOUND if there is none yet; blocks up to timeout_ms. */
    kb_err_t (*read_checkpoint)(void *state, const char *key, char *value, size_t value_size, int timeout_ms);
    /* Optional (ha.enabled): this replica is about to lead. A transactional
     * sink created with ha.enabled initialises its transactions only now —
     * a standby that did so would fence the leader's producer, which has the
     * same transactional.id. Must not block. Thread: ha. */
    void (*activate)(void *state);
    /* Optional: SIGHUP reached a sink the reload kept (the file sink reopens
     * its path). Must not block. Thread: main. NULL = nothing to do. */
    void (*reopen)(void *state);
} kb_sink_ops_t;

typedef struct kb_sink {
    const kb_sink_ops_t *ops;
    void *state;
    char *name;
    const kb_config_sink_t *conf; /* borrowed from the config that created it */
} kb_sink_t;

/* Is err, as given to an ack or returned by produce(), the destination's
 * verdict on the message (a refusal)? False for KB_OK, for a stop
 * (KB_ERR_STOPPED), for giving up without an answer (KB_ERR_TIMEDOUT) and for
 * a full buffer (KB_ERR_FULL): those leave the message unacknowledged. */
static inline bool kb_sink_refused(kb_err_t err) {
    return err != KB_OK && err != KB_ERR_STOPPED && err != KB_ERR_TIMEDOUT && err != KB_ERR_FULL;
}

/* The ops table for a type, or NULL. */
const kb_sink_ops_t *kb_sink_ops_for(kb_sink_type_t type);

kb_err_t kb_sink_validate(const kb_config_sink_t *conf, const kb_config_t *cfg, char *errstr, size_t errstr_size);
kb_sink_t *kb_sink_create(const kb_config_sink_t *conf, const kb_config_t *cfg, char *errstr, size_t errstr_size);
static inline kb_err_t kb_sink_produce(kb_sink_t *sink, const kb_msg_t *msg, int timeout_ms) {
    return sink->ops->produce(sink->state, msg, timeout_ms);
}
/* Flush up to timeout_ms, then destroy. NULL is a no-op. */
kb_err_t kb_sink_stop(kb_sink_t *sink, int timeout_ms);
void kb_sink_destroy(kb_sink_t *sink);

extern const kb_sink_ops_t kb_sink_file_ops;
extern const kb_sink_ops_t kb_sink_kafka_ops;
extern const kb_sink_ops_t kb_sink_mqtt_ops;

#endif
