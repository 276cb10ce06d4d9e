/* sinks/mqtt.c — the MQTT sink: everything MQTT, written once, over a thin client layer.
 *
 * DESIGN
 *
 * The protocol logic lives here and the client library behind it is chosen
 * per sink (sinks[].client): sinks/mqtt_paho.c or sinks/mqtt_mosq.c, both
 * behind sinks/mqtt_client.h. Why: Debian's paho is built with its function
 * trace and heap tracking compiled in (global mutexes on every call and
 * allocation), which caps it far below the wire; libmosquitto has no such
 * cost. Keeping the logic in one place means both clients give the same
 * topics, payloads, properties, ordering and acknowledgements, and the same
 * tests prove both.
 *
 * One client per configured sink, one worker thread ("kb:mqtt/<name>")
 * that drives the connection:
 *
 *   produce()  ── builds payload + MQTT 5 properties on the caller's thread,
 *                 appends a record to the ordered list (bounded in bytes;
 *                 blocks up to timeout_ms, then KB_ERR_FULL).
 *   worker     ── connects (backoff with jitter) and publishes the birth
 *                 message after every connect; retries after a pause.
 *   pump       ── hands records to the client strictly in list order while
 *                 fewer than the window (max_inflight, at most the broker's
 *                 Receive Maximum at QoS 1/2, at most what the library
 *                 handles well) are un-acknowledged. Run by whichever thread
 *                 adds a record or frees a window slot (the producer, the
 *                 thread of an ack, the worker), one at a time: no thread
 *                 hand-off per message, which was the cost that mattered.
 *   client     ── calls kb_mqtt_core_done once per record handed over: on
 *                 PUBACK (QoS 1), PUBCOMP (QoS 2) or after the write (QoS 0).
 *                 Only then is the record acked upstream.
 *
 * The list is the sink's memory of everything not yet acknowledged, in
 * produce order; `cursor` points at the first record not handed over.
 * Across a broker restart the session is persistent (clean session/clean
 * start = 0, a session expiry on v5), so the library retransmits its
 * in-flight records, and QoS 2 stays exactly-once. Nothing new is handed
 * over until those are done (the resend fence, kb_mqtt_fenced): libmosquitto
 * resends from its network thread after the CONNACK, so a record handed over
 * right after the connect could overtake the resent one before it on the
 * same topic, and a retained state topic would keep the older object. If a client gives a record back (DONE_RETRY: the broker lost
 * the session, the write failed), it goes back to QUEUED at its place and
 * the cursor moves back, so it is sent again in the original order
 * (duplicates are possible then, losses are not). A record that keeps
 * coming back is given up after KB_MQTT_MAX_ATTEMPTS with KB_ERR_TIMEDOUT:
 * never a loop, and never a refusal (the broker gave no verdict on it): the
 * bridge holds the sink with the record unacknowledged (sinks/sink.h).
 *
 * DONE_MIDWRITE (paho 1.3.12 frees a QoS>0 message it still references when
 * the socket breaks mid-write, see sinks/mqtt_paho.c) "poisons" the handle:
 * before the next connect the worker asks the layer to replace it, puts
 * every in-flight record back in the queue and connects once with a clean
 * session. That one reconnect is at-least-once; ordering still holds.
 *
 * Messages the broker could never take (topic over 65535 bytes, packet over
 * the broker's Maximum Packet Size, cloudevents-binary on MQTT 3.1.1) are
 * refused in produce() with an error ack, counted and logged (rate-limited,
 * naming the object, never its content); they never reach the connection.
 *
 * Invariants (under mq->mtx): a QUEUED record has no done() pending; a SENT
 * record has exactly one. n_inflight counts SENT records. A record is
 * unlinked under the lock before its ack runs, and acks run without the lock.
 *
 * Lock order: mq->mtx only; never held while calling the client or an ack.
 */
#include "sinks/envelope.h"
#include "sinks/mqtt_client.h"
#include "sinks/sink.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/secret.h"
#include "common/time.h"

#include <assert.h>
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
#define KB_MQTT_RESEND_FENCE_MS 10000 /* the longest the resend fence holds new records back */
#define KB_MQTT_BACKOFF_MAX_MS 30000
#define KB_MQTT_PASSWORD_MAX 4096

typedef enum { KB_MQTT_QUEUED = 0, KB_MQTT_SENT = 1 } kb_mqtt_state_t;

typedef struct kb_mqtt kb_mqtt_t;

typedef struct kb_mqtt_rec {
    struct kb_mqtt_rec *prev, *next; /* list links; mq->mtx */
    kb_mqtt_t *mq;                   /* back pointer for the client's done() */
    kb_mqtt_state_t state;           /* mq->mtx */
    int attempts;                    /* times handed over; mq->mtx */
    bool status;                     /* the birth/offline message (mq->status_rec), not in the list */
    char *topic;                     /* owned, NUL-terminated */
    char *payload;                   /* owned; NULL for a zero-length message */
    size_t payload_len;
    kb_mqtt_uprop_t uprops[KB_MQTT_MAX_UPROPS]; /* MQTT 5 only; point into propmem */
    size_t n_uprops;
    const char *content_type;        /* MQTT 5 only; static text or into propmem */
    char *propmem;                   /* owned: the user properties' bytes */
    size_t prop_bytes;               /* their encoded length in the PUBLISH */
    bool retained;
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
    const kb_mqtt_client_ops_t *ops;
    void *client;
    kb_mqtt_rec_t status_rec;  /* tag of the birth/offline publishes */
    pthread_t thread;
    bool thread_started;
    atomic_bool stop;

    pthread_mutex_t mtx;
    pthread_cond_t work_cond;  /* worker waits: connection change, requeue, timers */
    pthread_cond_t space_cond; /* producers (room) and flush (empty list) wait */
    /* everything below: mq->mtx */
    kb_mqtt_rec_t *head, *tail, *cursor;
    size_t queue_bytes, n_inflight;
    size_t n_acking;           /* unlinked records whose ack is running (flush waits for them) */
    size_t room_waiters;       /* producers waiting in kb_mqtt_wait_room */
    size_t empty_waiters;      /* flush calls waiting for the list to drain */
    bool pumping;              /* a thread is inside kb_mqtt_pump (the only one handing records over) */
    bool connected, connecting, birth_pending, closing;
    bool poisoned;             /* the client's handle must be replaced (see DESIGN) */
    bool clean_next;           /* the next connect starts a clean session */
    int64_t next_connect_ns;   /* monotonic; when the next connect may start */
    int64_t backoff_ms;
    int64_t send_pause_ns;     /* after a transient send error: not before this */
    int64_t resend_until_ns;   /* resend fence: 0, or nothing new is sent until the records in flight
                                  at the connect are done or this passes (kb_mqtt_fenced) */
    uint64_t max_packet;       /* the broker's Maximum Packet Size */
    size_t window;             /* in-flight bound: min(max_inflight, the broker's Receive Maximum) */
    bool offline_done;         /* destroy: the "offline" publish completed */
    kb_sink_stats_t st;
};

static kb_ratelimit_t kb_mqtt_refuse_rl;
static kb_ratelimit_t kb_mqtt_fail_rl;

static const kb_mqtt_client_ops_t *kb_mqtt_client_for(int client) {
    return client == KB_MQTT_CLIENT_MOSQUITTO ? &kb_mqtt_mosq_ops : &kb_mqtt_paho_ops;
}

/* ------------------------------------------------------------- validation */

static bool kb_mqtt_tls_uri(const char *uri) {
    return !strncmp(uri, "ssl://", 6) || !strncmp(uri, "mqtts://", 8) || !strncmp(uri, "wss://", 6);
}

/* The host part of a URI names this machine (127.0.0.0/8, ::1, localhost). */
static bool kb_mqtt_loopback_uri(const char *uri) {
    const char *h = strstr(uri, "://");
    if (!h)
        return false;
    h += 3;
    if (!strncmp(h, "[::1]", 5))
        return true;
    size_t n = strcspn(h, ":/");
    if (n == 9 && !strncasecmp(h, "localhost", 9))
        return true;
    return !strncmp(h, "127.", 4);
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
    if (buf && !*buf) { /* a placeholder Secret nobody filled: say so, never connect with "" */
        snprintf(why, why_size, "%s is empty (fill the Secret it comes from)", path);
        kb_secret_free(buf);
        return NULL;
    }
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
    const kb_mqtt_client_ops_t *client = kb_mqtt_client_for(conf->mqtt_client);
    if (conf->keepalive > 0 && conf->keepalive < client->min_keepalive)
        return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "keepalive",
                                "%d: the %s client needs 0 (off) or at least %d seconds", conf->keepalive,
                                client->name, client->min_keepalive);
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
    const char *no = client->unsupported(conf->uri);
    if (no)
        return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "client", "\"%s\" %s (uri \"%s\")",
                                client->name, no, conf->uri);
    if (kb_mqtt_set(conf->password_file) && !kb_mqtt_tls_uri(conf->uri) && !kb_mqtt_loopback_uri(conf->uri) &&
        !conf->allow_plaintext_password)
        return kb_mqtt_conf_err(errstr, errstr_size, cfg, line, "password_file",
                                "the password would cross the network in clear text (uri \"%s\" is not ssl://, "
                                "mqtts:// or wss://); use TLS, or set allow_plaintext_password = true",
                                conf->uri);
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
    free(rec->propmem);
    free(rec);
}

/* The user properties of one message, collected before their bytes settle. */
typedef struct kb_mqtt_props {
    kb_buf_t mem;                      /* name\0value\0 pairs */
    size_t name_off[KB_MQTT_MAX_UPROPS], value_off[KB_MQTT_MAX_UPROPS], value_len[KB_MQTT_MAX_UPROPS];
    size_t n, ct_off;                  /* ct_off: SIZE_MAX = no content type kept in mem */
} kb_mqtt_props_t;

static void kb_mqtt_prop_user(kb_mqtt_props_t *p, const char *name, const char *value, size_t value_len) {
    assert(p->n < KB_MQTT_MAX_UPROPS);
    p->name_off[p->n] = p->mem.len;
    kb_buf_append(&p->mem, name, strlen(name) + 1);
    p->value_off[p->n] = p->mem.len;
    p->value_len[p->n] = value_len;
    kb_buf_append(&p->mem, value, value_len);
    kb_buf_append_char(&p->mem, '\0');
    p->n++;
}

/* Move the collected properties into rec and count their encoded bytes. */
static void kb_mqtt_props_settle(kb_mqtt_props_t *p, kb_mqtt_rec_t *rec) {
    rec->propmem = kb_buf_steal(&p->mem, NULL);
    rec->n_uprops = p->n;
    for (size_t i = 0; i < p->n; i++) {
        rec->uprops[i].name = rec->propmem + p->name_off[i];
        rec->uprops[i].value = rec->propmem + p->value_off[i];
        rec->uprops[i].value_len = p->value_len[i];
        rec->prop_bytes += 1 + 2 + strlen(rec->uprops[i].name) + 2 + p->value_len[i];
    }
    if (p->ct_off != SIZE_MAX)
        rec->content_type = rec->propmem + p->ct_off;
    if (rec->content_type)
        rec->prop_bytes += 1 + 2 + strlen(rec->content_type);
}

/* Payload and properties for one message. Returns KB_ERR_UNSUPPORTED for a
 * format the protocol version cannot carry. Thread: the producer's. */
static kb_err_t kb_mqtt_rec_fill(const kb_mqtt_t *mq, const kb_msg_t *msg, kb_mqtt_rec_t *rec) {
    const kb_event_t *ev = msg->ev;
    bool v5 = mq->version == 5;
    kb_buf_t buf = KB_BUF_INIT;
    kb_mqtt_props_t props = {.mem = KB_BUF_INIT, .ct_off = SIZE_MAX};
    if (!ev) {
        /* A raw record (a heartbeat): the bytes as they are, never retained. */
        kb_buf_append(&buf, msg->raw, msg->raw_len);
        rec->content_type = v5 ? "application/json" : NULL;
        rec->payload = kb_buf_steal(&buf, &rec->payload_len);
        rec->retained = false;
        kb_mqtt_props_settle(&props, rec);
        return KB_OK;
    }
    bool tombstone = msg->mode == KB_MODE_STATE && ev->type == KB_EV_DELETED;
    if (msg->format == KB_FORMAT_CE_BINARY && !v5)
        return KB_ERR_UNSUPPORTED;
    if (v5) {
        const char *type = kb_event_type_name(ev->type);
        kb_mqtt_prop_user(&props, "k8s-type", type, strlen(type));
        kb_mqtt_prop_user(&props, "k8s-resource-version", ev->rv, ev->rv_len);
        kb_mqtt_prop_user(&props, "k8s-uid", ev->uid, ev->uid_len);
    }
    if (tombstone) {
        /* zero-length retained: the broker forgets the object */
    } else if (msg->format == KB_FORMAT_JSON) {
        kb_envelope_json(ev, &buf);
        rec->content_type = v5 ? "application/json" : NULL;
    } else if (msg->format == KB_FORMAT_CE_STRUCTURED) {
        kb_envelope_ce_structured(ev, msg->key, msg->key_len, &buf);
        rec->content_type = v5 ? "application/cloudevents+json; charset=UTF-8" : NULL;
    } else {
        /* CloudEvents MQTT binding, binary mode: data is the object, attributes
         * are user properties, datacontenttype is the Content Type. */
        kb_ce_attr_t attrs[KB_CE_ATTR_COUNT];
        kb_buf_t storage = KB_BUF_INIT;
        kb_envelope_ce_attrs(ev, msg->key, msg->key_len, attrs, &storage);
        for (int i = 0; i < KB_CE_ATTR_COUNT; i++) {
            if (!strcmp(attrs[i].name, "datacontenttype")) {
                props.ct_off = props.mem.len;
                kb_buf_append(&props.mem, attrs[i].value, strlen(attrs[i].value) + 1);
            } else {
                kb_mqtt_prop_user(&props, attrs[i].name, attrs[i].value, strlen(attrs[i].value));
            }
        }
        kb_buf_fini(&storage);
        kb_buf_append(&buf, ev->obj, ev->obj_len);
    }
    rec->payload = kb_buf_steal(&buf, &rec->payload_len);
    rec->retained = msg->mode == KB_MODE_STATE;
    kb_mqtt_props_settle(&props, rec);
    return KB_OK;
}

/* Bytes of the PUBLISH packet this record makes (fixed header at its largest). */
static uint64_t kb_mqtt_packet_size(const kb_mqtt_rec_t *rec, size_t topic_len) {
    uint64_t n = 1 + 4 + 2 + (uint64_t)topic_len + 2 + rec->payload_len;
    if (rec->mq->version == 5)
        n += 4 + (uint64_t)rec->prop_bytes;
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
    if (mq->room_waiters)
        pthread_cond_broadcast(&mq->space_cond);
}

/* Put a SENT record back in the queue at its place (mq->mtx held). */
static void kb_mqtt_requeue(kb_mqtt_t *mq, kb_mqtt_rec_t *rec) {
    assert(rec->state == KB_MQTT_SENT);
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

static void kb_mqtt_pump(kb_mqtt_t *mq);

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
    if (--mq->n_acking == 0 && !mq->head && mq->empty_waiters)
        pthread_cond_broadcast(&mq->space_cond);
    kb_mqtt_pump(mq); /* the window has room again */
    pthread_mutex_unlock(&mq->mtx);
}

/* ------------------------------------------------- callbacks from the client */

static void kb_mqtt_status_done(kb_mqtt_t *mq) {
    pthread_mutex_lock(&mq->mtx);
    mq->offline_done = true;
    pthread_cond_broadcast(&mq->space_cond);
    pthread_mutex_unlock(&mq->mtx);
}

void kb_mqtt_core_done(void *tag, kb_mqtt_done_t how, const char *why) {
    kb_mqtt_rec_t *rec = tag;
    kb_mqtt_t *mq = rec->mq;
    if (rec->status) {
        kb_mqtt_status_done(mq);
        return;
    }
    if (how == KB_MQTT_DONE_OK) {
        kb_mqtt_finish(mq, rec, KB_OK);
        return;
    }
    kb_err_t final = KB_OK;
    uint64_t suppressed = 0;
    pthread_mutex_lock(&mq->mtx);
    if (how == KB_MQTT_DONE_MIDWRITE && mq->qos > 0 && !mq->poisoned && mq->ops->replace) {
        mq->poisoned = true;
        KB_WARN(KB_MQTT_MOD, "sink=%s publish failed mid-write (%s); the client handle will be replaced", mq->name,
                why ? why : "-");
    }
    if (how == KB_MQTT_DONE_REFUSED)
        final = KB_ERR_DELIVERY;
    else if (mq->closing || how == KB_MQTT_DONE_STOPPED)
        final = KB_ERR_STOPPED;
    else if (rec->attempts >= KB_MQTT_MAX_ATTEMPTS)
        final = KB_ERR_TIMEDOUT; /* our retry limit, not the broker's verdict: not a refusal */
    else {
        kb_mqtt_requeue(mq, rec);
        mq->st.retries++;
    }
    pthread_mutex_unlock(&mq->mtx);
    if (final == KB_OK)
        return;
    if (final != KB_ERR_STOPPED && kb_ratelimit_allow(&kb_mqtt_fail_rl, 5000, &suppressed))
        KB_ERROR(KB_MQTT_MOD, "sink=%s topic=%s: publish %s: %s (attempts=%d suppressed=%llu)", mq->name, rec->topic,
                 final == KB_ERR_TIMEDOUT ? "given up, unacknowledged (not a refusal)" : "refused for good",
                 why ? why : "-", rec->attempts, (unsigned long long)suppressed);
    kb_mqtt_finish(mq, rec, final);
}

static void kb_mqtt_schedule_reconnect(kb_mqtt_t *mq) {
    /* mq->mtx held. Exponential backoff with ±25 % jitter. */
    double jitter = 0.75 + 0.5 * kb_random_unit();
    mq->next_connect_ns = kb_now_mono_ns() + (int64_t)((double)mq->backoff_ms * jitter) * KB_NS_PER_MS;
    mq->backoff_ms *= 2;
    if (mq->backoff_ms > KB_MQTT_BACKOFF_MAX_MS)
        mq->backoff_ms = KB_MQTT_BACKOFF_MAX_MS;
}

void kb_mqtt_core_connected(void *core, bool session_present, uint32_t max_packet, unsigned receive_max) {
    kb_mqtt_t *mq = core;
    size_t window = (size_t)mq->max_inflight;
    /* exceeding the broker's Receive Maximum is a protocol error that costs the connection;
     * it counts QoS 1 and 2 only (a QoS 0 record is in flight until written) */
    if (mq->qos > 0 && receive_max > 0 && receive_max < window)
        window = receive_max;
    if (mq->ops->max_window && mq->ops->max_window < window)
        window = mq->ops->max_window;
    pthread_mutex_lock(&mq->mtx);
    mq->window = window;
    mq->connected = true;
    mq->connecting = false;
    mq->birth_pending = true;
    mq->backoff_ms = KB_MQTT_BACKOFF_MIN_MS;
    mq->max_packet = max_packet ? max_packet : KB_MQTT_DEFAULT_MAX_PACKET;
    mq->send_pause_ns = 0;
    mq->clean_next = false;
    mq->resend_until_ns = mq->n_inflight ? kb_now_mono_ns() + KB_MQTT_RESEND_FENCE_MS * KB_NS_PER_MS : 0;
    size_t inflight = mq->n_inflight, queued = 0;
    for (kb_mqtt_rec_t *r = mq->cursor; r; r = r->next)
        queued++;
    uint64_t mp = mq->max_packet;
    pthread_cond_signal(&mq->work_cond);
    pthread_mutex_unlock(&mq->mtx);
    KB_INFO(KB_MQTT_MOD, "sink=%s connected uri=%s client=%s session_present=%d max_packet=%llu window=%zu "
            "inflight=%zu queued=%zu", mq->name, mq->uri, mq->ops->name, session_present, (unsigned long long)mp,
            window, inflight, queued);
}

void kb_mqtt_wait_flag(pthread_mutex_t *mtx, pthread_cond_t *cond, const bool *flag, int timeout_ms) {
    struct timespec deadline = kb_deadline_mono(timeout_ms);
    while (!*flag)
        if (pthread_cond_timedwait(cond, mtx, &deadline) == ETIMEDOUT)
            break;
}

const char *kb_mqtt_v3_connack_why(int code) {
    static const char *const v3[] = {"accepted", "unacceptable protocol version", "identifier rejected",
                                     "server unavailable", "bad user name or password", "not authorized"};
    return code >= 0 && code <= 5 ? v3[code] : "refused";
}

void kb_mqtt_core_connect_failed(void *core, bool refused, const char *why, const char *detail) {
    static kb_ratelimit_t rl;
    kb_mqtt_t *mq = core;
    uint64_t suppressed = 0;
    pthread_mutex_lock(&mq->mtx);
    mq->connecting = false;
    mq->connected = false;
    kb_mqtt_schedule_reconnect(mq);
    int64_t retry_ms = (mq->next_connect_ns - kb_now_mono_ns()) / KB_NS_PER_MS;
    pthread_cond_signal(&mq->work_cond);
    pthread_mutex_unlock(&mq->mtx);
    if (atomic_load(&mq->stop) || !kb_ratelimit_allow(&rl, 10000, &suppressed))
        return;
    /* A broker that refuses us (credentials, client id, ACL) will not change its
     * mind by itself: that is an operator's error, not a network blip. */
    if (refused)
        KB_ERRORF(KB_MQTT_MOD, KB_FIELDS(KB_F("sink", mq->name)), "sink=%s connect to %s refused by the broker: %s (check username, password_file, "
                 "client_id; retrying in %lld ms, suppressed=%llu)", mq->name, mq->uri, why, (long long)retry_ms,
                 (unsigned long long)suppressed);
    else
        KB_WARN(KB_MQTT_MOD, "sink=%s connect to %s failed: %s%s%s (retrying in %lld ms, suppressed=%llu)", mq->name,
                mq->uri, why, detail ? ": " : "", detail ? detail : "", (long long)retry_ms,
                (unsigned long long)suppressed);
}

void kb_mqtt_core_lost(void *core, const char *cause) {
    kb_mqtt_t *mq = core;
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

/* ------------------------------------------------------------------ worker */

/* The resend fence (see DESIGN): true while records in flight at the
 * connect are not all done. Lifted when they are, or after
 * KB_MQTT_RESEND_FENCE_MS (a library that never resends must not stall the
 * sink: order is then at risk, and said so). mq->mtx held. */
static bool kb_mqtt_fenced(kb_mqtt_t *mq, int64_t now) {
    if (!mq->resend_until_ns)
        return false;
    if (mq->n_inflight && now < mq->resend_until_ns)
        return true;
    if (mq->n_inflight)
        KB_WARN(KB_MQTT_MOD, "sink=%s %zu record(s) resent after the reconnect are still not acknowledged after "
                "%d ms; sending newer ones (a newer record of the same topic may arrive first)", mq->name,
                mq->n_inflight, KB_MQTT_RESEND_FENCE_MS);
    mq->resend_until_ns = 0;
    return false;
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
    if (mq->ops->replace(mq->client) == KB_OK)
        KB_WARN(KB_MQTT_MOD, "sink=%s replaced the %s client handle; %zu in-flight messages will be sent again",
                mq->name, mq->ops->name, requeued);
    else
        KB_ERROR(KB_MQTT_MOD, "sink=%s cannot create a new %s client handle", mq->name, mq->ops->name);
    pthread_mutex_lock(&mq->mtx);
}

/* The retained birth/death message on the status topic, tagged with status_rec. */
static kb_err_t kb_mqtt_publish_status(kb_mqtt_t *mq, const char *text) {
    kb_mqtt_pub_t pub = {.topic = mq->status_topic, .payload = text, .payload_len = strlen(text),
                         .qos = mq->qos > 0 ? mq->qos : 1, .retained = true};
    return mq->ops->publish(mq->client, &pub, &mq->status_rec);
}

/* Hand one record over. Thread: worker, without mq->mtx; rec is SENT. */
static kb_err_t kb_mqtt_send(kb_mqtt_t *mq, kb_mqtt_rec_t *rec) {
    kb_mqtt_pub_t pub = {.topic = rec->topic, .payload = rec->payload, .payload_len = rec->payload_len,
                         .qos = mq->qos, .retained = rec->retained, .content_type = rec->content_type,
                         .uprops = rec->uprops, .n_uprops = rec->n_uprops};
    return mq->ops->publish(mq->client, &pub, rec);
}

/* Start a connect attempt. Thread: worker, mq->mtx held, dropped inside. */
static void kb_mqtt_start_connect(kb_mqtt_t *mq) {
    mq->connecting = true;
    bool clean = mq->clean_next;
    pthread_mutex_unlock(&mq->mtx);
    kb_err_t err = mq->ops->connect(mq->client, clean);
    pthread_mutex_lock(&mq->mtx);
    if (err != KB_OK) {
        mq->connecting = false;
        kb_mqtt_schedule_reconnect(mq);
        KB_WARN(KB_MQTT_MOD, "sink=%s cannot start connect: %s", mq->name, kb_err_str(err));
    }
}

/* Hand the cursor's record over. Thread: the pumping one, mq->mtx held, dropped inside. */
static void kb_mqtt_send_next(kb_mqtt_t *mq) {
    kb_mqtt_rec_t *rec = mq->cursor;
    /* A record queued before the broker said its Maximum Packet Size (at start,
     * across a reconnect) was not checked against it: sent, it would cost the
     * connection again and again. Refused here, as produce() refuses. */
    uint64_t packet = kb_mqtt_packet_size(rec, strlen(rec->topic)), max_packet = mq->max_packet;
    if (packet > max_packet) {
        pthread_mutex_unlock(&mq->mtx);
        KB_ERRORF(KB_MQTT_MOD, KB_FIELDS(KB_F("sink", mq->name), KB_F("topic", rec->topic)),
                  "sink=%s topic=%s: message refused: packet is %llu bytes; the broker's maximum is %llu",
                 mq->name, rec->topic, (unsigned long long)packet, (unsigned long long)max_packet);
        kb_mqtt_finish(mq, rec, KB_ERR_TOOBIG);
        pthread_mutex_lock(&mq->mtx);
        return;
    }
    rec->state = KB_MQTT_SENT;
    rec->attempts++;
    mq->n_inflight++;
    do
        mq->cursor = mq->cursor->next;
    while (mq->cursor && mq->cursor->state != KB_MQTT_QUEUED);
    pthread_mutex_unlock(&mq->mtx);
    /* From here the client may ack and free rec on its thread. */
    kb_err_t err = kb_mqtt_send(mq, rec);
    pthread_mutex_lock(&mq->mtx);
    if (err == KB_OK)
        return;
    if (err == KB_ERR_FULL) {
        rec->attempts--; /* it never left */
        kb_mqtt_requeue(mq, rec);
        mq->send_pause_ns = kb_now_mono_ns() + 50 * KB_NS_PER_MS;
        return;
    }
    pthread_mutex_unlock(&mq->mtx);
    KB_ERRORF(KB_MQTT_MOD, KB_FIELDS(KB_F("sink", mq->name), KB_F("topic", rec->topic)),
              "sink=%s topic=%s: publish refused by the %s client: %s", mq->name, rec->topic,
             mq->ops->name, kb_err_str(err));
    kb_mqtt_finish(mq, rec, KB_ERR_DELIVERY);
    pthread_mutex_lock(&mq->mtx);
}

/* Hand records over, in list order, while the window has room. Whoever adds
 * a record or frees a slot of the window calls this (mq->mtx held; it may be
 * dropped and retaken inside): the producer, the thread that ran an ack, or
 * the worker. One thread pumps at a time (mq->pumping), so records leave in
 * order and without a hand-off to another thread per message; a call while
 * another thread pumps returns at once, and that thread sees the change
 * when it next checks the window (under the same lock). */
static void kb_mqtt_pump(kb_mqtt_t *mq) {
    if (mq->pumping)
        return;
    mq->pumping = true;
    while (mq->connected && !mq->birth_pending && mq->cursor && mq->n_inflight < mq->window &&
           !atomic_load(&mq->stop) && (!mq->send_pause_ns || kb_now_mono_ns() >= mq->send_pause_ns) &&
           !kb_mqtt_fenced(mq, kb_now_mono_ns()))
        kb_mqtt_send_next(mq);
    mq->pumping = false;
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
            kb_mqtt_start_connect(mq);
            continue;
        }
        if (mq->connected && mq->birth_pending) {
            mq->birth_pending = false;
            pthread_mutex_unlock(&mq->mtx);
            kb_err_t err = kb_mqtt_publish_status(mq, "online");
            if (err != KB_OK)
                KB_WARN(KB_MQTT_MOD, "sink=%s birth message not sent: %s", mq->name, kb_err_str(err));
            pthread_mutex_lock(&mq->mtx);
            continue;
        }
        if (mq->connected && !mq->pumping && mq->cursor && mq->n_inflight < mq->window &&
            now >= mq->send_pause_ns && !kb_mqtt_fenced(mq, now)) {
            kb_mqtt_pump(mq);
            if (mq->connected && mq->cursor && mq->n_inflight < mq->window && mq->send_pause_ns <= now)
                continue; /* stopped by something else than the window: look again */
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

static void kb_mqtt_settings(const kb_mqtt_t *mq, kb_mqtt_settings_t *s) {
    memset(s, 0, sizeof(*s));
    s->name = mq->name;
    s->uri = mq->uri;
    s->client_id = mq->client_id;
    s->username = mq->username;
    s->password = mq->password;
    s->ca_file = mq->ca_file;
    s->cert_file = mq->cert_file;
    s->key_file = mq->key_file;
    s->tls = mq->tls;
    s->version = mq->version;
    s->keepalive = mq->keepalive;
    s->max_inflight = mq->max_inflight;
    s->session_expiry_s = KB_MQTT_SESSION_EXPIRY_S;
    s->will_topic = mq->status_topic;
    s->will_payload = "offline";
    s->will_qos = mq->qos > 0 ? mq->qos : 1;
}

/* ha.enabled: both replicas run the same config, and two clients with one
 * client_id take each other's session over, back and forth. The default id
 * gets this replica's ha.identity appended; an id set otherwise is kept. */
static char *kb_mqtt_client_id(const kb_config_sink_t *conf, const kb_config_t *cfg) {
    kb_buf_t def = KB_BUF_INIT;
    kb_buf_appendf(&def, "kbridge-%s", cfg->cluster.name);
    bool is_default = !strcmp(conf->client_id, def.data);
    if (cfg->ha_enabled && is_default)
        kb_buf_appendf(&def, "-%s", cfg->ha_identity);
    char *id = kb_strdup(cfg->ha_enabled && is_default ? def.data : conf->client_id);
    kb_buf_fini(&def);
    return id;
}

static kb_mqtt_t *kb_mqtt_new(const kb_config_sink_t *conf, const kb_config_t *cfg) {
    kb_mqtt_t *mq = kb_calloc(1, sizeof(*mq));
    pthread_mutex_init(&mq->mtx, NULL);
    kb_cond_init_mono(&mq->work_cond);
    kb_cond_init_mono(&mq->space_cond);
    mq->name = kb_strdup(conf->name ? conf->name : "mqtt");
    mq->uri = kb_strdup(conf->uri);
    mq->client_id = kb_mqtt_client_id(conf, cfg);
    mq->username = kb_mqtt_dup_opt(conf->username);
    mq->ca_file = kb_mqtt_dup_opt(conf->ca_file);
    mq->cert_file = kb_mqtt_dup_opt(conf->cert_file);
    mq->key_file = kb_mqtt_dup_opt(conf->key_file);
    mq->qos = conf->qos;
    mq->version = conf->version;
    mq->keepalive = conf->keepalive;
    mq->max_inflight = conf->max_inflight;
    mq->tls = kb_mqtt_tls_uri(conf->uri);
    mq->ops = kb_mqtt_client_for(conf->mqtt_client);
    mq->status_rec.mq = mq;
    mq->status_rec.status = true;
    mq->backoff_ms = KB_MQTT_BACKOFF_MIN_MS;
    mq->max_packet = KB_MQTT_DEFAULT_MAX_PACKET;
    kb_buf_t topic = KB_BUF_INIT;
    kb_buf_append_str(&topic, "k8s/");
    kb_mqtt_append_level(&topic, cfg && kb_mqtt_set(cfg->cluster.name) ? cfg->cluster.name : "default");
    kb_buf_append_str(&topic, "/_bridge/status");
    mq->status_topic = kb_buf_steal(&topic, NULL);
    return mq;
}

static kb_err_t kb_mqtt_create(const kb_config_sink_t *conf, const kb_config_t *cfg, void **state, char *errstr,
                               size_t errstr_size) {
    kb_err_t err = kb_mqtt_validate(conf, cfg, errstr, errstr_size);
    if (err != KB_OK)
        return err;
    kb_mqtt_t *mq = kb_mqtt_new(conf, cfg);
    if (kb_mqtt_set(conf->password_file)) {
        char why[600];
        mq->password = kb_mqtt_read_secret(conf->password_file, why, sizeof(why));
        if (!mq->password) {
            err = kb_mqtt_conf_err(errstr, errstr_size, cfg, conf->line, "password_file", "%s", why);
            goto fail;
        }
        if (!mq->tls)
            KB_WARN(KB_MQTT_MOD, "sink=%s sends its password in clear text: uri %s is not ssl://, mqtts:// or wss://%s",
                    mq->name, mq->uri, kb_mqtt_loopback_uri(mq->uri) ? " (loopback)" : " (allow_plaintext_password)");
    }
    kb_mqtt_settings_t s;
    kb_mqtt_settings(mq, &s);
    char why[300] = "";
    if (mq->ops->create(&s, mq, &mq->client, why, sizeof(why)) != KB_OK) {
        err = kb_mqtt_conf_err(errstr, errstr_size, cfg, conf->line, "uri", "%s refused \"%s\": %s", mq->ops->name,
                               conf->uri, why);
        goto fail;
    }
    if (pthread_create(&mq->thread, NULL, kb_mqtt_worker, mq) != 0) {
        snprintf(errstr, errstr_size, "sink %s: cannot start its thread", mq->name);
        err = KB_ERR_INTERNAL;
        goto fail_client;
    }
    mq->thread_started = true;
    KB_INFO(KB_MQTT_MOD, "sink=%s uri=%s client=%s client_id=%s version=%d qos=%d max_inflight=%d tls=%d auth=%d",
            mq->name, mq->uri, mq->ops->name, mq->client_id, mq->version, mq->qos, mq->max_inflight, mq->tls,
            mq->password != NULL);
    *state = mq;
    return KB_OK;

fail_client:
    mq->ops->destroy(mq->client);
fail:
    kb_mqtt_free(mq);
    return err;
}

/* Refuse one message with an error ack (counted, logged without its content). */
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

/* Wait (mq->mtx held) for room for rec in the buffer; KB_OK, KB_ERR_FULL or KB_ERR_STOPPED. */
static kb_err_t kb_mqtt_wait_room(kb_mqtt_t *mq, const kb_mqtt_rec_t *rec, int timeout_ms) {
    struct timespec deadline = kb_deadline_mono(timeout_ms < 0 ? 0 : timeout_ms);
    /* A record larger than the whole buffer still goes in alone. */
    while (mq->head && mq->queue_bytes + rec->bytes > KB_MQTT_BUFFER_BYTES && !atomic_load(&mq->stop)) {
        mq->room_waiters++;
        int rc = timeout_ms < 0 ? pthread_cond_wait(&mq->space_cond, &mq->mtx)
                                : pthread_cond_timedwait(&mq->space_cond, &mq->mtx, &deadline);
        mq->room_waiters--;
        if (rc == ETIMEDOUT && mq->head && mq->queue_bytes + rec->bytes > KB_MQTT_BUFFER_BYTES)
            return KB_ERR_FULL;
    }
    return atomic_load(&mq->stop) ? KB_ERR_STOPPED : KB_OK;
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
    rec->bytes = sizeof(*rec) + msg->topic_len + rec->payload_len + rec->prop_bytes;
    rec->ack = msg->ack;
    rec->ack_opaque = msg->ack_opaque;

    pthread_mutex_lock(&mq->mtx);
    kb_err_t err = kb_mqtt_wait_room(mq, rec, timeout_ms);
    if (err != KB_OK) {
        pthread_mutex_unlock(&mq->mtx);
        kb_mqtt_rec_free(rec);
        return err;
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
    kb_mqtt_pump(mq);
    pthread_mutex_unlock(&mq->mtx);
    return KB_OK;
}

static kb_err_t kb_mqtt_flush(void *state, int timeout_ms) {
    kb_mqtt_t *mq = state;
    struct timespec deadline = kb_deadline_mono(timeout_ms < 0 ? 0 : timeout_ms);
    kb_err_t err = KB_OK;
    pthread_mutex_lock(&mq->mtx);
    while (mq->head || mq->n_acking) {
        mq->empty_waiters++;
        int rc = timeout_ms < 0 ? pthread_cond_wait(&mq->space_cond, &mq->mtx)
                                : pthread_cond_timedwait(&mq->space_cond, &mq->mtx, &deadline);
        mq->empty_waiters--;
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

/* A clean disconnect suppresses the Last Will, so say "offline" ourselves
 * (retained, acknowledged) before leaving. Bounded to ~2 s in total. */
static void kb_mqtt_say_goodbye(kb_mqtt_t *mq) {
    pthread_mutex_lock(&mq->mtx);
    bool connected = mq->connected;
    mq->offline_done = false;
    pthread_mutex_unlock(&mq->mtx);
    if (!connected || kb_mqtt_publish_status(mq, "offline") != KB_OK)
        return;
    pthread_mutex_lock(&mq->mtx);
    kb_mqtt_wait_flag(&mq->mtx, &mq->space_cond, &mq->offline_done, 1000);
    pthread_mutex_unlock(&mq->mtx);
    mq->ops->disconnect(mq->client, 1000);
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
    /* a poisoned handle must not be destroyed (see DESIGN): swap it out first */
    if (poisoned && mq->ops->replace(mq->client) != KB_OK)
        KB_WARN(KB_MQTT_MOD, "sink=%s cannot replace the %s handle before closing", mq->name, mq->ops->name);
    /* the client ends what it still holds (acked STOPPED by kb_mqtt_core_done) */
    mq->ops->destroy(mq->client);
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
