/* sinks/mqtt.c — the MQTT sink (paho.mqtt.c asynchronous API); docs/mqtt.md.
 *
 * DESIGN
 *
 * One paho client per configured sink, one worker thread ("kb:mqtt/<name>")
 * that owns the connection and is the only caller of MQTTAsync_sendMessage.
 *
 *   produce()  ── builds payload + MQTT 5 properties on the caller's thread,
 *                 appends a record to the ordered list (bounded in bytes;
 *                 blocks up to timeout_ms, then KB_ERR_FULL).
 *   worker     ── connects (backoff with jitter), publishes the birth
 *                 message after every connect, then hands records to paho
 *                 strictly in list order while fewer than max_inflight are
 *                 un-acknowledged.
 *   paho       ── calls kb_mqtt_on_sent / kb_mqtt_on_failed once per record
 *                 handed over: on PUBACK (QoS 1), PUBCOMP (QoS 2) or after
 *                 the write (QoS 0). Only then is the record acked upstream.
 *
 * The list is the sink's memory of everything not yet acknowledged, in
 * produce order; `cursor` points at the first record not handed to paho.
 * Records ahead of the cursor are in flight inside paho. Across a broker
 * restart the session is persistent (clean session/clean start = 0, a
 * session expiry on v5), so paho retransmits its in-flight records with the
 * same packet ids before anything new is sent, and QoS 2 stays exactly-once.
 * If the broker lost the session, paho fails those records with
 * "operation incomplete"; they go back to QUEUED at their place in the list
 * and the cursor moves back, so they are sent again in the original order
 * (duplicates are possible then, losses are not). A record that keeps
 * coming back (the broker drops the connection each time it is sent) is
 * given up after KB_MQTT_MAX_ATTEMPTS with an error ack: never a loop.
 *
 * A paho 1.3.12 defect shapes one path: when the socket breaks while a
 * QoS>0 PUBLISH is being written, paho fails the command (token 0) and frees
 * its topic and payload although the stored in-flight copy still points at
 * them; the next session resume (or MQTTAsync_destroy) would use that freed
 * memory. When we see that failure the handle is "poisoned": the worker
 * abandons it (never resumed, never destroyed — a small leak per event),
 * puts every in-flight record back in the queue, creates a fresh handle and
 * connects it once with a clean session (a fresh handle's packet ids could
 * collide with the old session's QoS 2 state), then persistent again. That
 * one reconnect is at-least-once; ordering still holds.
 *
 * Messages the broker could never take (topic over 65535 bytes, packet over
 * the broker's Maximum Packet Size, cloudevents-binary on MQTT 3.1.1) are
 * refused in produce() with an error ack, counted and logged (rate-limited);
 * they never reach the connection, so they cannot cause a disconnect loop.
 *
 * Invariants (under mq->mtx): a QUEUED record has no paho callback pending;
 * a SENT record has exactly one. n_inflight counts SENT records. A record is
 * unlinked under the lock before its ack runs, and acks run without the lock.
 *
 * Lock order: mq->mtx only; never held while calling paho or an ack.
 * paho's trace output is routed into common/log (process-wide, set once).
 */
#include "sinks/envelope.h"
#include "sinks/sink.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/secret.h"
#include "common/time.h"

#include <MQTTAsync.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define KB_MQTT_MOD "mqtt"
/* Bytes of un-acknowledged messages the sink may hold (no config key yet). */
#define KB_MQTT_BUFFER_BYTES (64u * 1024u * 1024u)
/* Maximum packet size assumed when the broker announces none (MQTT's own limit). */
#define KB_MQTT_DEFAULT_MAX_PACKET 268435455u
/* MQTT 5 session expiry: how long the broker keeps our session while we are away. */
#define KB_MQTT_SESSION_EXPIRY_S 86400
#define KB_MQTT_MAX_ATTEMPTS 8
#define KB_MQTT_BACKOFF_MIN_MS 250
#define KB_MQTT_BACKOFF_MAX_MS 30000
#define KB_MQTT_PASSWORD_MAX 4096

typedef enum { KB_MQTT_QUEUED = 0, KB_MQTT_SENT = 1 } kb_mqtt_state_t;

typedef struct kb_mqtt kb_mqtt_t;

typedef struct kb_mqtt_rec {
    struct kb_mqtt_rec *prev, *next; /* list links; mq->mtx */
    kb_mqtt_t *mq;                   /* back pointer for paho's callbacks */
    kb_mqtt_state_t state;           /* mq->mtx */
    int attempts;                    /* times handed to paho; mq->mtx */
    char *topic;                     /* owned, NUL-terminated */
    char *payload;                   /* owned; NULL for a zero-length message */
    size_t payload_len;
    MQTTProperties props;            /* MQTT 5 only; owned */
    int retained;
    size_t bytes;                    /* what this record counts in queue_bytes */
    kb_ack_fn ack;
    void *ack_opaque;
} kb_mqtt_rec_t;

struct kb_mqtt {
    /* settings, immutable after create */
    char *name, *uri, *client_id, *username, *password, *status_topic;
    char *ca_file, *cert_file, *key_file;
    int qos, version, keepalive, max_inflight;
    bool tls;
    MQTTAsync client;
    pthread_t thread;
    bool thread_started;
    atomic_bool stop;

    pthread_mutex_t mtx;
    pthread_cond_t work_cond;  /* worker waits: new record, ack, connection change */
    pthread_cond_t space_cond; /* producers and flush wait: a record left the list */
    /* everything below: mq->mtx */
    kb_mqtt_rec_t *head, *tail, *cursor;
    size_t queue_bytes, n_inflight;
    size_t n_acking;           /* unlinked records whose ack is running (flush waits for them) */
    bool connected, connecting, birth_pending, closing;
    bool poisoned;             /* paho's handle holds freed memory: replace it (see DESIGN) */
    bool clean_next;           /* the next connect starts a clean session */
    int64_t next_connect_ns;   /* monotonic; when the next connect may start */
    int64_t backoff_ms;
    int64_t send_pause_ns;     /* after a transient send error: not before this */
    uint64_t max_packet;       /* the broker's Maximum Packet Size */
    size_t window;             /* in-flight bound: min(max_inflight, the broker's Receive Maximum) */
    int offline_done;          /* destroy: 1 when the "offline" publish completed */
    kb_sink_stats_t st;
};

static kb_ratelimit_t kb_mqtt_refuse_rl;
static kb_ratelimit_t kb_mqtt_fail_rl;

/* ------------------------------------------------------------------ paho log */

static void kb_mqtt_trace(enum MQTTASYNC_TRACE_LEVELS level, char *message) {
    if (level >= MQTTASYNC_TRACE_SEVERE)
        KB_ERROR("paho", "%s", message);
    else if (level >= MQTTASYNC_TRACE_ERROR)
        KB_WARN("paho", "%s", message);
    else
        KB_DEBUG("paho", "%s", message);
}

static pthread_once_t kb_mqtt_trace_once = PTHREAD_ONCE_INIT;

static void kb_mqtt_trace_setup(void) {
    /* PROTOCOL level names packets, never the password. */
    int debug = atomic_load(&kb_log_min_level) <= KB_LOG_DEBUG;
    MQTTAsync_setTraceLevel(debug ? MQTTASYNC_TRACE_PROTOCOL : MQTTASYNC_TRACE_ERROR);
    MQTTAsync_setTraceCallback(kb_mqtt_trace);
}

/* ------------------------------------------------------------- validation */

static bool kb_mqtt_tls_uri(const char *uri) {
    return !strncmp(uri, "ssl://", 6) || !strncmp(uri, "mqtts://", 8) || !strncmp(uri, "wss://", 6);
}

static kb_err_t kb_mqtt_conf_err(char *errstr, size_t errstr_size, const kb_config_t *cfg, int line,
                                 const char *key, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static kb_err_t kb_mqtt_conf_err(char *errstr, size_t errstr_size, const kb_config_t *cfg, int line,
                                 const char *key, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    snprintf(errstr, errstr_size, "%s:%d: %s: %s", cfg && cfg->path ? cfg->path : "config", line, key, why);
    return KB_ERR_CONFIG;
}

static bool kb_mqtt_uri_ok(const char *uri) {
    static const char *const schemes[] = {"tcp://", "mqtt://", "ssl://", "mqtts://", "ws://", "wss://"};
    for (size_t i = 0; i < KB_ARRAY_LEN(schemes); i++) {
        size_t n = strlen(schemes[i]);
        if (!strncmp(uri, schemes[i], n))
            return uri[n] != '\0' && uri[n] != ':' && uri[n] != '/';
    }
    return false;
}

/* Read a secret file: first line, trailing CR/LF removed. NULL with errno-ish reason on error. */
static char *kb_mqtt_read_secret(const char *path, char *why, size_t why_size) {
    char *buf = kb_secret_read(path, KB_MQTT_PASSWORD_MAX, NULL, why, why_size);
    if (buf)
        buf[strcspn(buf, "\r\n")] = '\0'; /* the first line is the password */
    return buf;
}

static bool kb_mqtt_readable(const char *path, char *why, size_t why_size) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, why_size, "cannot read %s: %s", path, strerror(errno));
        return false;
    }
    fclose(f);
    return true;
}

static bool kb_mqtt_set(const char *s) {
    return s && *s;
}

static kb_err_t kb_mqtt_validate(const kb_config_sink_t *conf, const kb_config_t *cfg, char *errstr,
                                 size_t errstr_size) {
    char why[600];
    int line = conf->line;
    if (!kb_mqtt_set(conf->uri))
        return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "uri", "required for an mqtt sink");
    if (!kb_mqtt_uri_ok(conf->uri))
        return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "uri",
                                "\"%s\" is not tcp://, mqtt://, ssl://, mqtts://, ws:// or wss://HOST[:PORT]",
                                conf->uri);
    if (!kb_mqtt_set(conf->client_id))
        return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "client_id",
                                "required: the persistent session is keyed by it");
    if (strlen(conf->client_id) > 65535)
        return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "client_id", "longer than 65535 bytes");
    if (conf->qos < 0 || conf->qos > 2)
        return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "qos", "%d is not 0, 1 or 2", conf->qos);
    if (conf->version != 3 && conf->version != 5)
        return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "version",
                                "%d is not 3 (MQTT 3.1.1) or 5 (MQTT 5)", conf->version);
    if (conf->keepalive < 0 || conf->keepalive > 65535)
        return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "keepalive", "%d is outside 0..65535",
                                conf->keepalive);
    if (conf->max_inflight < 1 || conf->max_inflight > 65535)
        return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "max_inflight", "%d is outside 1..65535",
                                conf->max_inflight);
    if (kb_mqtt_set(conf->password_file)) {
        if (!kb_mqtt_set(conf->username))
            return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "password_file",
                                    "a password needs a username");
        char *pw = kb_mqtt_read_secret(conf->password_file, why, sizeof(why));
        if (!pw)
            return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "password_file", "%s", why);
        free(pw);
    }
    const struct {
        const char *key, *path;
    } files[] = {{"ca_file", conf->ca_file}, {"cert_file", conf->cert_file}, {"key_file", conf->key_file}};
    for (size_t i = 0; i < KB_ARRAY_LEN(files); i++) {
        if (!kb_mqtt_set(files[i].path))
            continue;
        if (!kb_mqtt_tls_uri(conf->uri))
            return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, files[i].key,
                                    "set, but uri \"%s\" is not ssl://, mqtts:// or wss://", conf->uri);
        if (!kb_mqtt_readable(files[i].path, why, sizeof(why)))
            return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, files[i].key, "%s", why);
    }
    if (kb_mqtt_set(conf->cert_file) != kb_mqtt_set(conf->key_file))
        return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, kb_mqtt_set(conf->cert_file) ? "key_file" : "cert_file",
                                "cert_file and key_file go together");
    /* Formats are per route: binary CloudEvents need MQTT 5 properties. */
    for (size_t i = 0; cfg && conf->version == 3 && i < cfg->n_routes; i++) {
        const kb_config_route_t *route = &cfg->routes[i];
        if (route->sink && !strcmp(route->sink, conf->name) && route->format == KB_FORMAT_CE_BINARY)
            return kb_mqtt_conf_err(errstr, errstr_size, cfg, route->line, "format",
                                    "cloudevents-binary needs MQTT 5, but sink \"%s\" has version = 3 "
                                    "(use cloudevents-structured or version = 5)",
                                    conf->name);
    }
    return KB_OK;
}

/* ---------------------------------------------------------------- records */

static void kb_mqtt_rec_free(kb_mqtt_rec_t *rec) {
    if (!rec)
        return;
    free(rec->topic);
    free(rec->payload);
    MQTTProperties_free(&rec->props);
    free(rec);
}

static void kb_mqtt_prop_str(MQTTProperties *props, enum MQTTPropertyCodes id, const char *value) {
    MQTTProperty p;
    memset(&p, 0, sizeof(p));
    p.identifier = id;
    p.value.data.data = (char *)value;
    p.value.data.len = (int)strlen(value);
    MQTTProperties_add(props, &p);
}

static void kb_mqtt_prop_user(MQTTProperties *props, const char *name, const char *value, size_t value_len) {
    MQTTProperty p;
    memset(&p, 0, sizeof(p));
    p.identifier = MQTTPROPERTY_CODE_USER_PROPERTY;
    p.value.data.data = (char *)name;
    p.value.data.len = (int)strlen(name);
    p.value.value.data = (char *)value;
    p.value.value.len = (int)value_len;
    MQTTProperties_add(props, &p);
}

/* Payload and properties for one message. Returns KB_ERR_UNSUPPORTED for a
 * format the protocol version cannot carry. Thread: the producer's. */
static kb_err_t kb_mqtt_rec_fill(const kb_mqtt_t *mq, const kb_msg_t *msg, kb_mqtt_rec_t *rec) {
    const kb_event_t *ev = msg->ev;
    bool v5 = mq->version == 5;
    kb_buf_t buf = KB_BUF_INIT;
    if (!ev) {
        /* A raw record (a heartbeat): the bytes as they are, never retained. */
        kb_buf_append(&buf, msg->raw, msg->raw_len);
        if (v5)
            kb_mqtt_prop_str(&rec->props, MQTTPROPERTY_CODE_CONTENT_TYPE, "application/json");
        rec->payload = kb_buf_steal(&buf, &rec->payload_len);
        rec->retained = false;
        return KB_OK;
    }
    bool tombstone = msg->mode == KB_MODE_STATE && ev->type == KB_EV_DELETED;
    if (msg->format == KB_FORMAT_CE_BINARY && !v5)
        return KB_ERR_UNSUPPORTED;
    if (v5) {
        kb_mqtt_prop_user(&rec->props, "k8s-type", kb_event_type_name(ev->type),
                          strlen(kb_event_type_name(ev->type)));
        kb_mqtt_prop_user(&rec->props, "k8s-resource-version", ev->rv, ev->rv_len);
        kb_mqtt_prop_user(&rec->props, "k8s-uid", ev->uid, ev->uid_len);
    }
    if (tombstone) {
        /* zero-length retained: the broker forgets the object */
    } else if (msg->format == KB_FORMAT_JSON) {
        kb_envelope_json(ev, &buf);
        if (v5)
            kb_mqtt_prop_str(&rec->props, MQTTPROPERTY_CODE_CONTENT_TYPE, "application/json");
    } else if (msg->format == KB_FORMAT_CE_STRUCTURED) {
        kb_envelope_ce_structured(ev, msg->key, msg->key_len, &buf);
        if (v5)
            kb_mqtt_prop_str(&rec->props, MQTTPROPERTY_CODE_CONTENT_TYPE,
                             "application/cloudevents+json; charset=UTF-8");
    } else {
        /* CloudEvents MQTT binding, binary mode: data is the object, attributes
         * are user properties, datacontenttype is the Content Type. */
        kb_ce_attr_t attrs[KB_CE_ATTR_COUNT];
        kb_buf_t storage = KB_BUF_INIT;
        kb_envelope_ce_attrs(ev, msg->key, msg->key_len, attrs, &storage);
        for (int i = 0; i < KB_CE_ATTR_COUNT; i++) {
            if (!strcmp(attrs[i].name, "datacontenttype"))
                kb_mqtt_prop_str(&rec->props, MQTTPROPERTY_CODE_CONTENT_TYPE, attrs[i].value);
            else
                kb_mqtt_prop_user(&rec->props, attrs[i].name, attrs[i].value, strlen(attrs[i].value));
        }
        kb_buf_fini(&storage);
        kb_buf_append(&buf, ev->obj, ev->obj_len);
    }
    rec->payload = kb_buf_steal(&buf, &rec->payload_len);
    rec->retained = msg->mode == KB_MODE_STATE;
    return KB_OK;
}

/* Bytes of the PUBLISH packet this record makes (fixed header at its largest). */
static uint64_t kb_mqtt_packet_size(const kb_mqtt_rec_t *rec, size_t topic_len) {
    uint64_t n = 1 + 4 + 2 + (uint64_t)topic_len + 2 + rec->payload_len;
    if (rec->props.count > 0)
        n += 4 + (uint64_t)rec->props.length;
    return n;
}

/* Unlink rec (mq->mtx held). */
static void kb_mqtt_unlink(kb_mqtt_t *mq, kb_mqtt_rec_t *rec) {
    if (rec->prev)
        rec->prev->next = rec->next;
    else
        mq->head = rec->next;
    if (rec->next)
        rec->next->prev = rec->prev;
    else
        mq->tail = rec->prev;
    if (mq->cursor == rec) {
        mq->cursor = rec->next;
        while (mq->cursor && mq->cursor->state != KB_MQTT_QUEUED)
            mq->cursor = mq->cursor->next;
    }
    if (rec->state == KB_MQTT_SENT)
        mq->n_inflight--;
    mq->queue_bytes -= rec->bytes;
    pthread_cond_broadcast(&mq->space_cond);
    pthread_cond_signal(&mq->work_cond);
}

/* Put a SENT record back in the queue at its place (mq->mtx held). */
static void kb_mqtt_requeue(kb_mqtt_t *mq, kb_mqtt_rec_t *rec) {
    rec->state = KB_MQTT_QUEUED;
    mq->n_inflight--;
    /* The cursor must be the first QUEUED record; rec may be before it. */
    kb_mqtt_rec_t *r = mq->head;
    while (r && r != rec && r != mq->cursor)
        r = r->next;
    if (r == rec || !mq->cursor)
        mq->cursor = rec;
    pthread_cond_signal(&mq->work_cond);
}

/* Unlink, count and ack one record with err; takes and drops mq->mtx. */
static void kb_mqtt_finish(kb_mqtt_t *mq, kb_mqtt_rec_t *rec, kb_err_t err) {
    pthread_mutex_lock(&mq->mtx);
    kb_mqtt_unlink(mq, rec);
    if (err == KB_OK)
        mq->st.acked++;
    else
        mq->st.failed++;
    mq->n_acking++;
    pthread_mutex_unlock(&mq->mtx);
    rec->ack(rec->ack_opaque, err);
    kb_mqtt_rec_free(rec);
    pthread_mutex_lock(&mq->mtx);
    if (--mq->n_acking == 0)
        pthread_cond_broadcast(&mq->space_cond);
    pthread_mutex_unlock(&mq->mtx);
}

/* ----------------------------------------------------- paho publish callbacks */

static void kb_mqtt_on_sent(void *context) {
    kb_mqtt_rec_t *rec = context;
    kb_mqtt_finish(rec->mq, rec, KB_OK);
}

/* A handed-over record failed. reason >= 0x80 is the broker's verdict on the
 * message (MQTT 5 PUBACK/PUBREC): final. Anything else is the connection's
 * fault: send again in order, unless we are closing or it keeps happening. */
static void kb_mqtt_on_failed(kb_mqtt_rec_t *rec, int token, int code, int reason) {
    kb_mqtt_t *mq = rec->mq;
    kb_err_t final = KB_OK;
    uint64_t suppressed = 0;
    pthread_mutex_lock(&mq->mtx);
    if (token == 0 && mq->qos > 0 && reason < 0x80 && !mq->poisoned) {
        mq->poisoned = true;
        KB_WARN(KB_MQTT_MOD, "sink=%s publish failed mid-write (%s); the client handle will be replaced",
                mq->name, MQTTAsync_strerror(code));
    }
    if (reason >= 0x80)
        final = KB_ERR_DELIVERY;
    else if (mq->closing)
        final = KB_ERR_STOPPED;
    else if (rec->attempts >= KB_MQTT_MAX_ATTEMPTS)
        final = KB_ERR_DELIVERY;
    else {
        kb_mqtt_requeue(mq, rec);
        mq->st.retries++;
    }
    pthread_mutex_unlock(&mq->mtx);
    if (final == KB_OK)
        return;
    if (final != KB_ERR_STOPPED && kb_ratelimit_allow(&kb_mqtt_fail_rl, 5000, &suppressed))
        KB_ERROR(KB_MQTT_MOD, "sink=%s topic=%s: publish failed for good: %s (code=%d attempts=%d suppressed=%llu)",
                 mq->name, rec->topic,
                 reason >= 0x80 ? MQTTReasonCode_toString((enum MQTTReasonCodes)reason) : MQTTAsync_strerror(code),
                 code, rec->attempts, (unsigned long long)suppressed);
    kb_mqtt_finish(mq, rec, final);
}

static void kb_mqtt_on_sent3(void *context, MQTTAsync_successData *resp) {
    KB_UNUSED(resp);
    kb_mqtt_on_sent(context);
}

static void kb_mqtt_on_sent5(void *context, MQTTAsync_successData5 *resp) {
    KB_UNUSED(resp);
    kb_mqtt_on_sent(context);
}

static void kb_mqtt_on_failed3(void *context, MQTTAsync_failureData *resp) {
    kb_mqtt_on_failed(context, resp ? resp->token : 0, resp ? resp->code : MQTTASYNC_FAILURE, 0);
}

static void kb_mqtt_on_failed5(void *context, MQTTAsync_failureData5 *resp) {
    kb_mqtt_on_failed(context, resp ? resp->token : 0, resp ? resp->code : MQTTASYNC_FAILURE,
                      resp ? (int)resp->reasonCode : 0);
}

/* ------------------------------------------------------- connection callbacks */

static void kb_mqtt_schedule_reconnect(kb_mqtt_t *mq) {
    /* mq->mtx held. Exponential backoff with ±25 % jitter. */
    double jitter = 0.75 + 0.5 * kb_random_unit();
    mq->next_connect_ns = kb_now_mono_ns() + (int64_t)((double)mq->backoff_ms * jitter) * KB_NS_PER_MS;
    mq->backoff_ms *= 2;
    if (mq->backoff_ms > KB_MQTT_BACKOFF_MAX_MS)
        mq->backoff_ms = KB_MQTT_BACKOFF_MAX_MS;
}

static void kb_mqtt_connected(kb_mqtt_t *mq, int session_present, const MQTTProperties *props) {
    uint64_t max_packet = KB_MQTT_DEFAULT_MAX_PACKET;
    if (props && MQTTProperties_hasProperty((MQTTProperties *)props, MQTTPROPERTY_CODE_MAXIMUM_PACKET_SIZE))
        max_packet = (uint64_t)(uint32_t)MQTTProperties_getNumericValue((MQTTProperties *)props,
                                                                        MQTTPROPERTY_CODE_MAXIMUM_PACKET_SIZE);
    size_t window = (size_t)mq->max_inflight;
    if (props && MQTTProperties_hasProperty((MQTTProperties *)props, MQTTPROPERTY_CODE_RECEIVE_MAXIMUM)) {
        /* exceeding the broker's Receive Maximum is a protocol error that costs the connection */
        int rm = MQTTProperties_getNumericValue((MQTTProperties *)props, MQTTPROPERTY_CODE_RECEIVE_MAXIMUM);
        if (rm > 0 && (size_t)rm < window)
            window = (size_t)rm;
    }
    pthread_mutex_lock(&mq->mtx);
    mq->window = window;
    mq->connected = true;
    mq->connecting = false;
    mq->birth_pending = true;
    mq->backoff_ms = KB_MQTT_BACKOFF_MIN_MS;
    mq->max_packet = max_packet;
    mq->send_pause_ns = 0;
    mq->clean_next = false;
    size_t inflight = mq->n_inflight, queued = 0;
    for (kb_mqtt_rec_t *r = mq->cursor; r; r = r->next)
        queued++;
    pthread_cond_signal(&mq->work_cond);
    pthread_mutex_unlock(&mq->mtx);
    KB_INFO(KB_MQTT_MOD, "sink=%s connected uri=%s session_present=%d max_packet=%llu window=%zu inflight=%zu queued=%zu",
            mq->name, mq->uri, session_present, (unsigned long long)max_packet, window, inflight, queued);
}

static void kb_mqtt_on_connect3(void *context, MQTTAsync_successData *resp) {
    kb_mqtt_connected(context, resp ? resp->alt.connect.sessionPresent : 0, NULL);
}

static void kb_mqtt_on_connect5(void *context, MQTTAsync_successData5 *resp) {
    kb_mqtt_connected(context, resp ? resp->alt.connect.sessionPresent : 0, resp ? &resp->properties : NULL);
}

/* Why a connect failed, for a human. paho reports a refusing CONNACK as a
 * positive code: the MQTT 5 reason code, or the MQTT 3.1.1 return code 1..5;
 * negative codes are its own (network, TLS, timeout). */
static const char *kb_mqtt_connect_why(int code, int reason, bool *refused) {
    static const char *const v3[] = {"accepted", "unacceptable protocol version", "identifier rejected",
                                     "server unavailable", "bad user name or password", "not authorized"};
    if (reason < 0x80 && code >= 0x80)
        reason = code;
    *refused = reason >= 0x80 || (code >= 1 && code <= 5);
    if (reason >= 0x80)
        return MQTTReasonCode_toString((enum MQTTReasonCodes)reason);
    if (code >= 1 && code <= 5)
        return v3[code];
    return MQTTAsync_strerror(code);
}

static void kb_mqtt_connect_failed(kb_mqtt_t *mq, int code, int reason, const char *message) {
    static kb_ratelimit_t rl;
    uint64_t suppressed = 0;
    bool refused = false;
    const char *why = kb_mqtt_connect_why(code, reason, &refused);
    pthread_mutex_lock(&mq->mtx);
    mq->connecting = false;
    mq->connected = false;
    kb_mqtt_schedule_reconnect(mq);
    int64_t retry_ms = (mq->next_connect_ns - kb_now_mono_ns()) / KB_NS_PER_MS;
    pthread_cond_signal(&mq->work_cond);
    pthread_mutex_unlock(&mq->mtx);
    if (!kb_ratelimit_allow(&rl, 10000, &suppressed))
        return;
    /* A broker that refuses us (credentials, client id, ACL) will not change its
     * mind by itself: that is an operator's error, not a network blip. */
    if (refused)
        KB_ERROR(KB_MQTT_MOD, "sink=%s connect to %s refused by the broker: %s (check username, password_file, "
                 "client_id; retrying in %lld ms, suppressed=%llu)", mq->name, mq->uri, why, (long long)retry_ms,
                 (unsigned long long)suppressed);
    else
        KB_WARN(KB_MQTT_MOD, "sink=%s connect to %s failed: %s%s%s (retrying in %lld ms, suppressed=%llu)", mq->name,
                mq->uri, why, message ? ": " : "", message ? message : "", (long long)retry_ms,
                (unsigned long long)suppressed);
}

static void kb_mqtt_on_connect_failed3(void *context, MQTTAsync_failureData *resp) {
    kb_mqtt_connect_failed(context, resp ? resp->code : MQTTASYNC_FAILURE, 0, resp ? resp->message : NULL);
}

static void kb_mqtt_on_connect_failed5(void *context, MQTTAsync_failureData5 *resp) {
    kb_mqtt_connect_failed(context, resp ? resp->code : MQTTASYNC_FAILURE, resp ? (int)resp->reasonCode : 0,
                           resp ? resp->message : NULL);
}

static void kb_mqtt_on_lost(void *context, char *cause) {
    kb_mqtt_t *mq = context;
    pthread_mutex_lock(&mq->mtx);
    bool was = mq->connected;
    mq->connected = false;
    if (was && !mq->connecting)
        kb_mqtt_schedule_reconnect(mq);
    size_t inflight = mq->n_inflight;
    pthread_cond_signal(&mq->work_cond);
    pthread_mutex_unlock(&mq->mtx);
    if (was && !atomic_load(&mq->stop))
        KB_WARN(KB_MQTT_MOD, "sink=%s connection lost: %s (inflight=%zu kept for resend)", mq->name,
                cause ? cause : "unknown cause", inflight);
}

static int kb_mqtt_on_message(void *context, char *topic, int topic_len, MQTTAsync_message *m) {
    KB_UNUSED(context);
    KB_UNUSED(topic_len);
    MQTTAsync_freeMessage(&m);
    MQTTAsync_free(topic);
    return 1;
}

/* ------------------------------------------------------------------ worker */

/* A paho handle for this sink. Thread: create or worker, without mq->mtx. */
static int kb_mqtt_new_client(kb_mqtt_t *mq, MQTTAsync *client) {
    MQTTAsync_createOptions co = MQTTAsync_createOptions_initializer;
    co.MQTTVersion = mq->version == 5 ? MQTTVERSION_5 : MQTTVERSION_3_1_1;
    co.sendWhileDisconnected = 0;              /* our own ordered buffer holds messages while offline */
    co.maxBufferedMessages = mq->max_inflight + 16; /* paho's command queue never exceeds max_inflight */
    int rc = MQTTAsync_createWithOptions(client, mq->uri, mq->client_id, MQTTCLIENT_PERSISTENCE_NONE, NULL, &co);
    if (rc != MQTTASYNC_SUCCESS)
        return rc;
    rc = MQTTAsync_setCallbacks(*client, mq, kb_mqtt_on_lost, kb_mqtt_on_message, NULL);
    if (rc != MQTTASYNC_SUCCESS)
        MQTTAsync_destroy(client);
    return rc;
}

/* Replace a poisoned handle (see DESIGN). Thread: worker, mq->mtx held, dropped inside. */
static void kb_mqtt_replace_client(kb_mqtt_t *mq) {
    size_t requeued = 0;
    for (kb_mqtt_rec_t *r = mq->head; r; r = r->next)
        if (r->state == KB_MQTT_SENT) {
            kb_mqtt_requeue(mq, r);
            requeued++;
        }
    mq->st.retries += requeued;
    mq->poisoned = false;
    mq->clean_next = true;
    pthread_mutex_unlock(&mq->mtx);
    MQTTAsync fresh = NULL;
    int rc = kb_mqtt_new_client(mq, &fresh);
    if (rc == MQTTASYNC_SUCCESS) {
        /* the old handle is left alone on purpose: destroying it would free memory twice */
        mq->client = fresh;
        KB_WARN(KB_MQTT_MOD, "sink=%s replaced the paho client handle; %zu in-flight messages will be sent again",
                mq->name, requeued);
    } else {
        KB_ERROR(KB_MQTT_MOD, "sink=%s cannot create a new paho client: %s", mq->name, MQTTAsync_strerror(rc));
    }
    pthread_mutex_lock(&mq->mtx);
}

/* Start a connect attempt. Thread: worker, without mq->mtx. */
static int kb_mqtt_connect(kb_mqtt_t *mq) {
    MQTTAsync_connectOptions co = MQTTAsync_connectOptions_initializer;
    MQTTAsync_connectOptions co5 = MQTTAsync_connectOptions_initializer5;
    MQTTAsync_willOptions will = MQTTAsync_willOptions_initializer;
    MQTTAsync_SSLOptions ssl = MQTTAsync_SSLOptions_initializer;
    MQTTProperties props = MQTTProperties_initializer;
    MQTTAsync_connectOptions *opts = mq->version == 5 ? &co5 : &co;
    if (mq->version == 5) {
        MQTTProperty p;
        memset(&p, 0, sizeof(p));
        p.identifier = MQTTPROPERTY_CODE_SESSION_EXPIRY_INTERVAL;
        p.value.integer4 = KB_MQTT_SESSION_EXPIRY_S;
        MQTTProperties_add(&props, &p);
        opts->cleanstart = mq->clean_next;
        opts->connectProperties = &props;
        opts->onSuccess5 = kb_mqtt_on_connect5;
        opts->onFailure5 = kb_mqtt_on_connect_failed5;
    } else {
        opts->cleansession = mq->clean_next;
        opts->MQTTVersion = MQTTVERSION_3_1_1;
        opts->onSuccess = kb_mqtt_on_connect3;
        opts->onFailure = kb_mqtt_on_connect_failed3;
    }
    opts->context = mq;
    opts->keepAliveInterval = mq->keepalive;
    opts->maxInflight = mq->max_inflight;
    opts->connectTimeout = 10;
    opts->automaticReconnect = 0;
    opts->username = mq->username;
    opts->password = mq->password;
    will.topicName = mq->status_topic;
    will.message = "offline";
    will.retained = 1;
    will.qos = mq->qos > 0 ? mq->qos : 1;
    opts->will = &will;
    if (mq->tls) {
        ssl.trustStore = mq->ca_file;
        ssl.keyStore = mq->cert_file;
        ssl.privateKey = mq->key_file;
        ssl.enableServerCertAuth = 1;
        ssl.verify = 1;
        opts->ssl = &ssl;
    }
    int rc = MQTTAsync_connect(mq->client, opts);
    MQTTProperties_free(&props);
    return rc;
}

/* The retained birth/death message on the status topic; no tracking. */
static int kb_mqtt_publish_status(kb_mqtt_t *mq, const char *text, MQTTAsync_responseOptions *ro) {
    MQTTAsync_message m = MQTTAsync_message_initializer;
    m.payload = (void *)text;
    m.payloadlen = (int)strlen(text);
    m.qos = mq->qos > 0 ? mq->qos : 1;
    m.retained = 1;
    return MQTTAsync_sendMessage(mq->client, mq->status_topic, &m, ro);
}

/* Hand one record to paho. Thread: worker, without mq->mtx; rec is SENT. */
static int kb_mqtt_send(kb_mqtt_t *mq, kb_mqtt_rec_t *rec) {
    static char empty[1];
    MQTTAsync_message m = MQTTAsync_message_initializer;
    MQTTAsync_responseOptions ro = MQTTAsync_responseOptions_initializer;
    m.payload = rec->payload ? rec->payload : empty;
    m.payloadlen = (int)rec->payload_len;
    m.qos = mq->qos;
    m.retained = rec->retained;
    ro.context = rec;
    if (mq->version == 5) {
        m.properties = rec->props;
        ro.onSuccess5 = kb_mqtt_on_sent5;
        ro.onFailure5 = kb_mqtt_on_failed5;
    } else {
        ro.onSuccess = kb_mqtt_on_sent3;
        ro.onFailure = kb_mqtt_on_failed3;
    }
    return MQTTAsync_sendMessage(mq->client, rec->topic, &m, &ro);
}

/* A synchronous refusal from sendMessage (mq->mtx held): retry later, or give up. */
static kb_err_t kb_mqtt_send_refused(kb_mqtt_t *mq, kb_mqtt_rec_t *rec, int rc) {
    if (rc == MQTTASYNC_DISCONNECTED || rc == MQTTASYNC_MAX_BUFFERED_MESSAGES || rc == MQTTASYNC_NO_MORE_MSGIDS ||
        rc == MQTTASYNC_OPERATION_INCOMPLETE) {
        rec->attempts--; /* it never left */
        kb_mqtt_requeue(mq, rec);
        mq->send_pause_ns = kb_now_mono_ns() + 50 * KB_NS_PER_MS;
        return KB_OK;
    }
    return KB_ERR_DELIVERY;
}

static void *kb_mqtt_worker(void *arg) {
    kb_mqtt_t *mq = arg;
    char tname[32];
    snprintf(tname, sizeof(tname), "kb:mqtt/%s", mq->name);
    kb_thread_set_name(tname);
    pthread_mutex_lock(&mq->mtx);
    while (!atomic_load(&mq->stop)) {
        int64_t now = kb_now_mono_ns();
        if (!mq->connected && !mq->connecting && mq->poisoned) {
            kb_mqtt_replace_client(mq);
            continue;
        }
        if (!mq->connected && !mq->connecting && now >= mq->next_connect_ns) {
            mq->connecting = true;
            pthread_mutex_unlock(&mq->mtx);
            int rc = kb_mqtt_connect(mq);
            pthread_mutex_lock(&mq->mtx);
            if (rc != MQTTASYNC_SUCCESS) {
                mq->connecting = false;
                kb_mqtt_schedule_reconnect(mq);
                KB_WARN(KB_MQTT_MOD, "sink=%s cannot start connect: %s", mq->name, MQTTAsync_strerror(rc));
            }
            continue;
        }
        if (mq->connected && mq->birth_pending) {
            mq->birth_pending = false;
            pthread_mutex_unlock(&mq->mtx);
            int rc = kb_mqtt_publish_status(mq, "online", NULL);
            if (rc != MQTTASYNC_SUCCESS)
                KB_WARN(KB_MQTT_MOD, "sink=%s birth message not sent: %s", mq->name, MQTTAsync_strerror(rc));
            pthread_mutex_lock(&mq->mtx);
            continue;
        }
        if (mq->connected && mq->cursor && mq->n_inflight < mq->window && now >= mq->send_pause_ns) {
            kb_mqtt_rec_t *rec = mq->cursor;
            rec->state = KB_MQTT_SENT;
            rec->attempts++;
            mq->n_inflight++;
            do
                mq->cursor = mq->cursor->next;
            while (mq->cursor && mq->cursor->state != KB_MQTT_QUEUED);
            pthread_mutex_unlock(&mq->mtx);
            /* From here paho may ack and free rec on its thread. */
            int rc = kb_mqtt_send(mq, rec);
            pthread_mutex_lock(&mq->mtx);
            if (rc != MQTTASYNC_SUCCESS && kb_mqtt_send_refused(mq, rec, rc) != KB_OK) {
                pthread_mutex_unlock(&mq->mtx);
                KB_ERROR(KB_MQTT_MOD, "sink=%s topic=%s: publish refused by the client: %s", mq->name, rec->topic,
                         MQTTAsync_strerror(rc));
                kb_mqtt_finish(mq, rec, KB_ERR_DELIVERY);
                pthread_mutex_lock(&mq->mtx);
            }
            continue;
        }
        int64_t wait_ms = 1000;
        if (!mq->connected && !mq->connecting)
            wait_ms = (mq->next_connect_ns - now) / KB_NS_PER_MS + 1;
        else if (mq->connected && mq->cursor && mq->send_pause_ns > now)
            wait_ms = (mq->send_pause_ns - now) / KB_NS_PER_MS + 1;
        if (wait_ms > 1000)
            wait_ms = 1000;
        struct timespec ts = kb_deadline_mono(wait_ms);
        pthread_cond_timedwait(&mq->work_cond, &mq->mtx, &ts);
    }
    pthread_mutex_unlock(&mq->mtx);
    return NULL;
}

/* -------------------------------------------------------------- lifecycle */

/* "+", "#", "/", "%" and NUL inside a topic level would change its meaning. */
static void kb_mqtt_append_level(kb_buf_t *out, const char *s) {
    for (; *s; s++) {
        if (*s == '+' || *s == '#' || *s == '/' || *s == '%')
            kb_buf_appendf(out, "%%%02X", (unsigned)(unsigned char)*s);
        else
            kb_buf_append_char(out, *s);
    }
}

static void kb_mqtt_free(kb_mqtt_t *mq) {
    if (!mq)
        return;
    if (mq->password) {
        explicit_bzero(mq->password, strlen(mq->password));
        free(mq->password);
    }
    free(mq->name);
    free(mq->uri);
    free(mq->client_id);
    free(mq->username);
    free(mq->status_topic);
    free(mq->ca_file);
    free(mq->cert_file);
    free(mq->key_file);
    pthread_cond_destroy(&mq->work_cond);
    pthread_cond_destroy(&mq->space_cond);
    pthread_mutex_destroy(&mq->mtx);
    free(mq);
}

static char *kb_mqtt_dup_opt(const char *s) {
    return kb_mqtt_set(s) ? kb_strdup(s) : NULL;
}

static kb_err_t kb_mqtt_create(const kb_config_sink_t *conf, const kb_config_t *cfg, void **state, char *errstr,
                               size_t errstr_size) {
    kb_err_t err = kb_mqtt_validate(conf, cfg, errstr, errstr_size);
    if (err != KB_OK)
        return err;
    pthread_once(&kb_mqtt_trace_once, kb_mqtt_trace_setup);
    kb_mqtt_t *mq = kb_calloc(1, sizeof(*mq));
    pthread_mutex_init(&mq->mtx, NULL);
    kb_cond_init_mono(&mq->work_cond);
    kb_cond_init_mono(&mq->space_cond);
    mq->name = kb_strdup(conf->name ? conf->name : "mqtt");
    mq->uri = kb_strdup(conf->uri);
    mq->client_id = kb_strdup(conf->client_id);
    mq->username = kb_mqtt_dup_opt(conf->username);
    mq->ca_file = kb_mqtt_dup_opt(conf->ca_file);
    mq->cert_file = kb_mqtt_dup_opt(conf->cert_file);
    mq->key_file = kb_mqtt_dup_opt(conf->key_file);
    mq->qos = conf->qos;
    mq->version = conf->version;
    mq->keepalive = conf->keepalive;
    mq->max_inflight = conf->max_inflight;
    mq->tls = kb_mqtt_tls_uri(conf->uri);
    mq->backoff_ms = KB_MQTT_BACKOFF_MIN_MS;
    mq->max_packet = KB_MQTT_DEFAULT_MAX_PACKET;
    kb_buf_t topic = KB_BUF_INIT;
    kb_buf_append_str(&topic, "k8s/");
    kb_mqtt_append_level(&topic, cfg && kb_mqtt_set(cfg->cluster.name) ? cfg->cluster.name : "default");
    kb_buf_append_str(&topic, "/_bridge/status");
    mq->status_topic = kb_buf_steal(&topic, NULL);
    if (kb_mqtt_set(conf->password_file)) {
        char why[600];
        mq->password = kb_mqtt_read_secret(conf->password_file, why, sizeof(why));
        if (!mq->password) {
            err = kb_mqtt_conf_err(errstr, errstr_size, cfg, conf->line, "password_file", "%s", why);
            goto fail;
        }
    }

    int rc = kb_mqtt_new_client(mq, &mq->client);
    if (rc != MQTTASYNC_SUCCESS) {
        err = kb_mqtt_conf_err(errstr, errstr_size, cfg, conf->line, "uri", "paho refused \"%s\": %s", conf->uri,
                               MQTTAsync_strerror(rc));
        goto fail;
    }
    if (pthread_create(&mq->thread, NULL, kb_mqtt_worker, mq) != 0) {
        snprintf(errstr, errstr_size, "sink %s: cannot start its thread", mq->name);
        err = KB_ERR_INTERNAL;
        goto fail_client;
    }
    mq->thread_started = true;
    KB_INFO(KB_MQTT_MOD, "sink=%s uri=%s client_id=%s version=%d qos=%d max_inflight=%d tls=%d auth=%d", mq->name,
            mq->uri, mq->client_id, mq->version, mq->qos, mq->max_inflight, mq->tls, mq->password != NULL);
    *state = mq;
    return KB_OK;

fail_client:
    MQTTAsync_destroy(&mq->client);
fail:
    kb_mqtt_free(mq);
    return err;
}

/* Refuse one message with an error ack (counted, logged). */
static kb_err_t kb_mqtt_refuse(kb_mqtt_t *mq, const kb_msg_t *msg, kb_err_t err, const char *why) {
    uint64_t suppressed = 0;
    pthread_mutex_lock(&mq->mtx);
    mq->st.produced++;
    mq->st.failed++;
    pthread_mutex_unlock(&mq->mtx);
    if (kb_ratelimit_allow(&kb_mqtt_refuse_rl, 5000, &suppressed))
        KB_ERROR(KB_MQTT_MOD, "sink=%s route=%s key=%.*s rv=%.*s: message refused: %s (suppressed=%llu)", mq->name,
                 msg->route ? msg->route : "-", msg->ev ? (int)msg->ev->key_len : (int)msg->key_len,
                 msg->ev ? msg->ev->key : msg->key, msg->ev ? (int)msg->ev->rv_len : 0, msg->ev ? msg->ev->rv : "",
                 why, (unsigned long long)suppressed);
    msg->ack(msg->ack_opaque, err);
    return KB_OK;
}

static kb_err_t kb_mqtt_produce(void *state, const kb_msg_t *msg, int timeout_ms) {
    kb_mqtt_t *mq = state;
    char why[160];
    if (atomic_load(&mq->stop))
        return KB_ERR_STOPPED;
    if (msg->topic_len == 0)
        return kb_mqtt_refuse(mq, msg, KB_ERR_INVAL, "empty topic");
    if (msg->topic_len > 65535) {
        snprintf(why, sizeof(why), "topic is %zu bytes; MQTT allows 65535", msg->topic_len);
        return kb_mqtt_refuse(mq, msg, KB_ERR_TOOBIG, why);
    }
    kb_mqtt_rec_t *rec = kb_calloc(1, sizeof(*rec));
    rec->mq = mq;
    if (kb_mqtt_rec_fill(mq, msg, rec) != KB_OK) {
        kb_mqtt_rec_free(rec);
        return kb_mqtt_refuse(mq, msg, KB_ERR_UNSUPPORTED, "cloudevents-binary needs MQTT 5 (sink has version = 3)");
    }
    pthread_mutex_lock(&mq->mtx);
    uint64_t max_packet = mq->max_packet;
    pthread_mutex_unlock(&mq->mtx);
    uint64_t packet = kb_mqtt_packet_size(rec, msg->topic_len);
    if (packet > max_packet) {
        kb_mqtt_rec_free(rec);
        snprintf(why, sizeof(why), "packet is %llu bytes; the broker's maximum is %llu", (unsigned long long)packet,
                 (unsigned long long)max_packet);
        return kb_mqtt_refuse(mq, msg, KB_ERR_TOOBIG, why);
    }
    rec->topic = kb_strndup(msg->topic, msg->topic_len);
    rec->bytes = sizeof(*rec) + msg->topic_len + rec->payload_len + (size_t)rec->props.length;
    rec->ack = msg->ack;
    rec->ack_opaque = msg->ack_opaque;

    struct timespec deadline = kb_deadline_mono(timeout_ms < 0 ? 0 : timeout_ms);
    pthread_mutex_lock(&mq->mtx);
    /* A record larger than the whole buffer still goes in alone. */
    while (mq->head && mq->queue_bytes + rec->bytes > KB_MQTT_BUFFER_BYTES && !atomic_load(&mq->stop)) {
        int rc = timeout_ms < 0 ? pthread_cond_wait(&mq->space_cond, &mq->mtx)
                                : pthread_cond_timedwait(&mq->space_cond, &mq->mtx, &deadline);
        if (rc == ETIMEDOUT && mq->head && mq->queue_bytes + rec->bytes > KB_MQTT_BUFFER_BYTES) {
            pthread_mutex_unlock(&mq->mtx);
            kb_mqtt_rec_free(rec);
            return KB_ERR_FULL;
        }
    }
    if (atomic_load(&mq->stop)) {
        pthread_mutex_unlock(&mq->mtx);
        kb_mqtt_rec_free(rec);
        return KB_ERR_STOPPED;
    }
    rec->prev = mq->tail;
    if (mq->tail)
        mq->tail->next = rec;
    else
        mq->head = rec;
    mq->tail = rec;
    if (!mq->cursor)
        mq->cursor = rec;
    mq->queue_bytes += rec->bytes;
    mq->st.produced++;
    pthread_cond_signal(&mq->work_cond);
    pthread_mutex_unlock(&mq->mtx);
    return KB_OK;
}

static kb_err_t kb_mqtt_flush(void *state, int timeout_ms) {
    kb_mqtt_t *mq = state;
    struct timespec deadline = kb_deadline_mono(timeout_ms < 0 ? 0 : timeout_ms);
    kb_err_t err = KB_OK;
    pthread_mutex_lock(&mq->mtx);
    while (mq->head || mq->n_acking) {
        int rc = timeout_ms < 0 ? pthread_cond_wait(&mq->space_cond, &mq->mtx)
                                : pthread_cond_timedwait(&mq->space_cond, &mq->mtx, &deadline);
        if (rc == ETIMEDOUT && (mq->head || mq->n_acking)) {
            err = KB_ERR_TIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&mq->mtx);
    return err;
}

static void kb_mqtt_stats(void *state, kb_sink_stats_t *st) {
    kb_mqtt_t *mq = state;
    pthread_mutex_lock(&mq->mtx);
    *st = mq->st;
    st->queue_bytes = mq->queue_bytes;
    st->connected = mq->connected;
    pthread_mutex_unlock(&mq->mtx);
}

static void kb_mqtt_on_offline_sent(void *context) {
    kb_mqtt_t *mq = context;
    pthread_mutex_lock(&mq->mtx);
    mq->offline_done = 1;
    pthread_cond_broadcast(&mq->space_cond);
    pthread_mutex_unlock(&mq->mtx);
}

static void kb_mqtt_on_offline3(void *context, MQTTAsync_successData *resp) {
    KB_UNUSED(resp);
    kb_mqtt_on_offline_sent(context);
}

static void kb_mqtt_on_offline5(void *context, MQTTAsync_successData5 *resp) {
    KB_UNUSED(resp);
    kb_mqtt_on_offline_sent(context);
}

/* Wait (mq->mtx held) until mq->offline_done or timeout. */
static void kb_mqtt_wait_done(kb_mqtt_t *mq, int timeout_ms) {
    struct timespec deadline = kb_deadline_mono(timeout_ms);
    while (!mq->offline_done)
        if (pthread_cond_timedwait(&mq->space_cond, &mq->mtx, &deadline) == ETIMEDOUT)
            break;
}

/* A clean disconnect suppresses the Last Will, so say "offline" ourselves
 * (retained, acknowledged) before leaving. Bounded to ~2 s in total. */
static void kb_mqtt_say_goodbye(kb_mqtt_t *mq) {
    MQTTAsync_responseOptions ro = MQTTAsync_responseOptions_initializer;
    ro.context = mq;
    if (mq->version == 5)
        ro.onSuccess5 = kb_mqtt_on_offline5;
    else
        ro.onSuccess = kb_mqtt_on_offline3;
    pthread_mutex_lock(&mq->mtx);
    bool connected = mq->connected;
    mq->offline_done = 0;
    pthread_mutex_unlock(&mq->mtx);
    if (!connected || kb_mqtt_publish_status(mq, "offline", &ro) != MQTTASYNC_SUCCESS)
        return;
    pthread_mutex_lock(&mq->mtx);
    kb_mqtt_wait_done(mq, 1000);
    pthread_mutex_unlock(&mq->mtx);

    MQTTAsync_disconnectOptions dopt = MQTTAsync_disconnectOptions_initializer;
    MQTTAsync_disconnectOptions dopt5 = MQTTAsync_disconnectOptions_initializer5;
    MQTTAsync_disconnectOptions *d = mq->version == 5 ? &dopt5 : &dopt;
    d->timeout = 0;
    d->context = mq;
    if (mq->version == 5)
        d->onSuccess5 = kb_mqtt_on_offline5;
    else
        d->onSuccess = kb_mqtt_on_offline3;
    pthread_mutex_lock(&mq->mtx);
    mq->offline_done = 0;
    pthread_mutex_unlock(&mq->mtx);
    if (MQTTAsync_disconnect(mq->client, d) != MQTTASYNC_SUCCESS)
        return;
    pthread_mutex_lock(&mq->mtx);
    kb_mqtt_wait_done(mq, 1000);
    pthread_mutex_unlock(&mq->mtx);
}

static void kb_mqtt_destroy(void *state) {
    kb_mqtt_t *mq = state;
    if (!mq)
        return;
    atomic_store(&mq->stop, true);
    pthread_mutex_lock(&mq->mtx);
    mq->closing = true;
    pthread_cond_broadcast(&mq->work_cond);
    pthread_cond_broadcast(&mq->space_cond);
    pthread_mutex_unlock(&mq->mtx);
    if (mq->thread_started)
        pthread_join(mq->thread, NULL);
    kb_mqtt_say_goodbye(mq);
    pthread_mutex_lock(&mq->mtx);
    bool poisoned = mq->poisoned;
    pthread_mutex_unlock(&mq->mtx);
    /* paho fails what it still holds (our callbacks ack those with STOPPED);
     * a poisoned handle is left alone (see DESIGN). */
    if (!poisoned)
        MQTTAsync_destroy(&mq->client);
    size_t left = 0;
    for (;;) {
        pthread_mutex_lock(&mq->mtx);
        kb_mqtt_rec_t *rec = mq->head;
        pthread_mutex_unlock(&mq->mtx);
        if (!rec)
            break;
        left++;
        kb_mqtt_finish(mq, rec, KB_ERR_STOPPED);
    }
    if (left)
        KB_WARN(KB_MQTT_MOD, "sink=%s closed with %zu messages not acknowledged", mq->name, left);
    kb_mqtt_free(mq);
}

const kb_sink_ops_t kb_sink_mqtt_ops = {
    .type = "mqtt",
    .validate = kb_mqtt_validate,
    .create = kb_mqtt_create,
    .produce = kb_mqtt_produce,
    .flush = kb_mqtt_flush,
    .stats = kb_mqtt_stats,
    .destroy = kb_mqtt_destroy,
};
