/* sinks/mqtt_mosq.c — the MQTT sink's client layer over libmosquitto.
 *
 * DESIGN
 *
 * A thin adapter (sinks/mqtt_client.h); the protocol logic is in
 * sinks/mqtt.c. libmosquitto is the library behind mosquitto_pub: no
 * per-call tracing or heap tracking, so it runs at wire speed.
 *
 * - Threads. One network thread per client ("kb:mosq/<name>") runs
 *   mosquitto_loop: reads, writes, keep-alive. It also makes each connect
 *   attempt (a blocking TCP/TLS connect, kept off the sink's worker) when the
 *   sink asks for one: the sink owns the backoff and the reconnect policy
 *   for both libraries, and libmosquitto's own reconnect loop gives up for
 *   good on refused credentials or a TLS error, which must be retried. The
 *   session is kept (clean session off, an MQTT 5 session expiry), and
 *   libmosquitto retransmits its QoS 1/2 messages in flight, in order, after
 *   each reconnect. The sink's worker calls publish(); threaded mode makes
 *   libmosquitto hand the write to the network thread.
 * - Acknowledgements. on_publish gives only the packet id (mid), and it can
 *   run on the network thread before mosquitto_publish_v5 has returned that
 *   mid to us. So a table indexed by mid (65536 slots) pairs them: whichever
 *   of "publish returned" and "on_publish" comes second delivers the done().
 *   Our lock is never held while calling into libmosquitto.
 * - QoS 0. libmosquitto drops a QoS 0 packet that was queued but not written
 *   when the connection breaks, without a callback. On disconnect every
 *   QoS 0 message still in the table is given back (DONE_RETRY): at least
 *   once, never lost.
 * - Logs: no log callback is set. With one, libmosquitto formats a line for
 *   every packet (it has no level filter on the client side), which cost
 *   more than the publish itself; what goes wrong reaches the sink as a
 *   return code or a callback and is logged there, never with payloads.
 */
#include "sinks/mqtt_client.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/time.h"

#include <mosquitto.h>
#include <mqtt_protocol.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_MOSQ_MOD "mqtt"
#define KB_MOSQ_MIDS 65536

typedef struct kb_mosq_slot {
    void *tag;       /* the publish waiting for its on_publish, or NULL */
    bool early;      /* on_publish came before the publish call returned */
    bool qos0;
    int reason;      /* early: the reason code that came */
} kb_mosq_slot_t;

typedef struct kb_mosq {
    kb_mqtt_settings_t s; /* borrowed strings (the sink outlives us) */
    void *core;
    struct mosquitto *mosq;
    char host[256];
    int port;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mtx;  /* slots, gen, disconnected, want_connect, sock_up, stop */
    pthread_cond_t cond;
    bool want_connect;    /* the sink asked for a connect attempt */
    bool sock_up;         /* a connection (or its attempt) is being looped */
    bool stop;
    /* Held by the network thread while libmosquitto may run our callbacks (inside
     * mosquitto_loop) and while it reports a failed connect; destroy takes it to
     * set abandoned when the thread cannot be joined, so no callback reaches the
     * sink after destroy returned. */
    pthread_mutex_t cb_mtx;
    bool abandoned;      /* cb_mtx */
    kb_mosq_slot_t *slots;
    uint64_t gen;         /* disconnects seen: a QoS 0 publish that straddles one is given back */
    bool disconnected;
} kb_mosq_t;

static pthread_once_t kb_mosq_init_once = PTHREAD_ONCE_INIT;

static void kb_mosq_lib_init(void) {
    mosquitto_lib_init();
}

/* ------------------------------------------------------------ callbacks */

static void kb_mosq_deliver(void *tag, int reason) {
    if (reason >= 0x80)
        kb_mqtt_core_done(tag, KB_MQTT_DONE_REFUSED, mosquitto_reason_string(reason));
    else
        kb_mqtt_core_done(tag, KB_MQTT_DONE_OK, NULL);
}

static void kb_mosq_on_publish(struct mosquitto *m, void *obj, int mid, int reason, const mosquitto_property *p) {
    KB_UNUSED(m);
    KB_UNUSED(p);
    kb_mosq_t *c = obj;
    kb_mosq_slot_t *slot = &c->slots[(unsigned)mid % KB_MOSQ_MIDS];
    pthread_mutex_lock(&c->mtx);
    void *tag = slot->tag;
    if (tag) {
        slot->tag = NULL;
    } else {
        slot->early = true;
        slot->reason = reason;
    }
    pthread_mutex_unlock(&c->mtx);
    if (tag)
        kb_mosq_deliver(tag, reason);
}

static void kb_mosq_on_connect(struct mosquitto *m, void *obj, int rc, int flags, const mosquitto_property *props) {
    KB_UNUSED(m);
    kb_mosq_t *c = obj;
    if (rc != 0) {
        const char *why = c->s.version == 5 || rc >= 0x80 ? mosquitto_reason_string(rc) : kb_mqtt_v3_connack_why(rc);
        kb_mqtt_core_connect_failed(c->core, true, why, NULL);
        return;
    }
    uint32_t max_packet = 0;
    uint16_t receive_max = 0;
    mosquitto_property_read_int32(props, MQTT_PROP_MAXIMUM_PACKET_SIZE, &max_packet, false);
    mosquitto_property_read_int16(props, MQTT_PROP_RECEIVE_MAXIMUM, &receive_max, false);
    kb_mqtt_core_connected(c->core, flags & 1, max_packet, receive_max);
}

/* Give back every QoS 0 message not yet written (see DESIGN). */
static void kb_mosq_give_back_qos0(kb_mosq_t *c) {
    size_t n = 0, cap = 0;
    void **tags = NULL;
    pthread_mutex_lock(&c->mtx);
    c->gen++;
    for (size_t i = 0; i < KB_MOSQ_MIDS; i++) {
        kb_mosq_slot_t *slot = &c->slots[i];
        if (!slot->tag || !slot->qos0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            tags = kb_realloc(tags, cap * sizeof(*tags));
        }
        tags[n++] = slot->tag;
        slot->tag = NULL;
    }
    pthread_mutex_unlock(&c->mtx);
    for (size_t i = 0; i < n; i++)
        kb_mqtt_core_done(tags[i], KB_MQTT_DONE_RETRY, "connection lost before the write");
    free(tags);
}

static void kb_mosq_on_disconnect(struct mosquitto *m, void *obj, int rc, const mosquitto_property *props) {
    KB_UNUSED(m);
    KB_UNUSED(props);
    kb_mosq_t *c = obj;
    kb_mosq_give_back_qos0(c);
    pthread_mutex_lock(&c->mtx);
    c->disconnected = true;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mtx);
    if (rc != 0)
        kb_mqtt_core_lost(c->core, c->s.version == 5 && rc >= 0x80 ? mosquitto_reason_string(rc)
                                                                   : mosquitto_strerror(rc));
}

/* ------------------------------------------------------------- the layer */

static const char *kb_mosq_unsupported(const char *uri) {
    if (!strncmp(uri, "ws://", 5) || !strncmp(uri, "wss://", 6))
        return "does not speak MQTT over websockets (use client = \"paho\")";
    return NULL;
}

/* scheme://host[:port] → host, port. */
static bool kb_mosq_parse_uri(kb_mosq_t *c, char *why, size_t why_size) {
    const char *h = strstr(c->s.uri, "://");
    h = h ? h + 3 : c->s.uri;
    const char *end;
    size_t n;
    if (*h == '[') { /* [v6]:port */
        end = strchr(h, ']');
        if (!end) {
            snprintf(why, why_size, "unterminated [ in the host");
            return false;
        }
        n = (size_t)(end - h - 1);
        h++;
        end++;
    } else {
        n = strcspn(h, ":/");
        end = h + n;
    }
    if (n == 0 || n >= sizeof(c->host)) {
        snprintf(why, why_size, "no host, or a host over %zu bytes", sizeof(c->host) - 1);
        return false;
    }
    memcpy(c->host, h, n);
    c->host[n] = '\0';
    c->port = c->s.tls ? 8883 : 1883;
    if (*end == ':') {
        char *stop;
        long port = strtol(end + 1, &stop, 10);
        if (port < 1 || port > 65535 || (*stop && *stop != '/')) {
            snprintf(why, why_size, "port is not 1..65535");
            return false;
        }
        c->port = (int)port;
    }
    return true;
}

static int kb_mosq_setup(kb_mosq_t *c) {
    struct mosquitto *m = c->mosq;
    int v5 = c->s.version == 5;
    int rc = mosquitto_int_option(m, MOSQ_OPT_PROTOCOL_VERSION, v5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311);
    if (rc == MOSQ_ERR_SUCCESS)
        rc = mosquitto_int_option(m, MOSQ_OPT_SEND_MAXIMUM, c->s.max_inflight);
    if (rc == MOSQ_ERR_SUCCESS && c->s.username)
        rc = mosquitto_username_pw_set(m, c->s.username, c->s.password);
    if (rc == MOSQ_ERR_SUCCESS)
        rc = mosquitto_will_set_v5(m, c->s.will_topic, (int)strlen(c->s.will_payload), c->s.will_payload,
                                   c->s.will_qos, true, NULL);
    if (rc == MOSQ_ERR_SUCCESS && c->s.tls)
        rc = mosquitto_tls_set(m, c->s.ca_file, c->s.ca_file ? NULL : "/etc/ssl/certs", c->s.cert_file,
                               c->s.key_file, NULL);
    if (rc == MOSQ_ERR_SUCCESS && c->s.tls)
        rc = mosquitto_tls_opts_set(m, 1 /* SSL_VERIFY_PEER */, NULL, NULL);
    if (rc == MOSQ_ERR_SUCCESS)
        rc = mosquitto_reconnect_delay_set(m, 1, 30, true);
    mosquitto_connect_v5_callback_set(m, kb_mosq_on_connect);
    mosquitto_disconnect_v5_callback_set(m, kb_mosq_on_disconnect);
    mosquitto_publish_v5_callback_set(m, kb_mosq_on_publish);
    return rc;
}

/* One connect attempt. Thread: the network thread, without c->mtx. */
static bool kb_mosq_try_connect(kb_mosq_t *c) {
    mosquitto_property *props = NULL;
    if (c->s.version == 5)
        mosquitto_property_add_int32(&props, MQTT_PROP_SESSION_EXPIRY_INTERVAL, c->s.session_expiry_s);
    errno = 0;
    int rc = mosquitto_connect_bind_v5(c->mosq, c->host, c->port, c->s.keepalive, NULL, props);
    int err = errno;
    mosquitto_property_free_all(&props);
    if (rc == MOSQ_ERR_SUCCESS)
        return true;
    pthread_mutex_lock(&c->cb_mtx);
    if (!c->abandoned)
        kb_mqtt_core_connect_failed(c->core, false, mosquitto_strerror(rc),
                                    rc == MOSQ_ERR_ERRNO && err ? strerror(err) : NULL);
    pthread_mutex_unlock(&c->cb_mtx);
    return false;
}

static void *kb_mosq_loop(void *arg) {
    kb_mosq_t *c = arg;
    char tname[32];
    snprintf(tname, sizeof(tname), "kb:mosq/%s", c->s.name);
    kb_thread_set_name(tname);
    pthread_mutex_lock(&c->mtx);
    while (!c->stop) {
        if (!c->sock_up && c->want_connect) {
            c->want_connect = false;
            pthread_mutex_unlock(&c->mtx);
            bool up = kb_mosq_try_connect(c);
            pthread_mutex_lock(&c->mtx);
            c->sock_up = up;
            continue;
        }
        if (!c->sock_up) {
            pthread_cond_wait(&c->cond, &c->mtx);
            continue;
        }
        pthread_mutex_unlock(&c->mtx);
        /* returns on traffic, on a publish (threaded mode wakes it), or after 500 ms */
        pthread_mutex_lock(&c->cb_mtx);
        int rc = mosquitto_loop(c->mosq, 500, 1);
        pthread_mutex_unlock(&c->cb_mtx);
        pthread_mutex_lock(&c->mtx);
        if (rc != MOSQ_ERR_SUCCESS)
            c->sock_up = false; /* libmosquitto called on_disconnect; the sink decides when to retry */
    }
    pthread_mutex_unlock(&c->mtx);
    return NULL;
}

static void kb_mosq_free(kb_mosq_t *c) {
    if (c->mosq)
        mosquitto_destroy(c->mosq);
    free(c->slots);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->mtx);
    pthread_mutex_destroy(&c->cb_mtx);
    free(c);
}

static kb_err_t kb_mosq_create(const kb_mqtt_settings_t *s, void *core, void **client, char *why, size_t why_size) {
    pthread_once(&kb_mosq_init_once, kb_mosq_lib_init);
    kb_mosq_t *c = kb_calloc(1, sizeof(*c));
    c->s = *s;
    c->core = core;
    pthread_mutex_init(&c->mtx, NULL);
    pthread_mutex_init(&c->cb_mtx, NULL);
    kb_cond_init_mono(&c->cond);
    c->slots = kb_calloc(KB_MOSQ_MIDS, sizeof(*c->slots));
    if (!kb_mosq_parse_uri(c, why, why_size))
        goto fail;
    /* clean_session false: the broker keeps our session across reconnects */
    c->mosq = mosquitto_new(s->client_id, false, c);
    if (!c->mosq) {
        snprintf(why, why_size, "mosquitto_new: %s", strerror(errno));
        goto fail;
    }
    int rc = kb_mosq_setup(c);
    if (rc != MOSQ_ERR_SUCCESS) {
        snprintf(why, why_size, "%s", mosquitto_strerror(rc));
        goto fail;
    }
    mosquitto_threaded_set(c->mosq, true); /* publish() from the worker, I/O on our thread */
    if (pthread_create(&c->thread, NULL, kb_mosq_loop, c) != 0) {
        snprintf(why, why_size, "cannot start the network thread");
        goto fail;
    }
    c->thread_started = true;
    *client = c;
    return KB_OK;

fail:
    kb_mosq_free(c);
    return KB_ERR_CONFIG;
}

static kb_err_t kb_mosq_connect(void *client, bool clean) {
    kb_mosq_t *c = client;
    KB_UNUSED(clean); /* libmosquitto never needs a clean restart (no replace()) */
    pthread_mutex_lock(&c->mtx);
    c->want_connect = true;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mtx);
    return KB_OK;
}

static mosquitto_property *kb_mosq_props(const kb_mqtt_pub_t *pub) {
    mosquitto_property *props = NULL;
    if (pub->content_type)
        mosquitto_property_add_string(&props, MQTT_PROP_CONTENT_TYPE, pub->content_type);
    /* values are NUL-terminated by the sink (sinks/mqtt.c keeps name\0value\0) */
    for (size_t i = 0; i < pub->n_uprops; i++)
        mosquitto_property_add_string_pair(&props, MQTT_PROP_USER_PROPERTY, pub->uprops[i].name, pub->uprops[i].value);
    return props;
}

static kb_err_t kb_mosq_publish(void *client, const kb_mqtt_pub_t *pub, void *tag) {
    kb_mosq_t *c = client;
    mosquitto_property *props = c->s.version == 5 ? kb_mosq_props(pub) : NULL;
    int mid = 0;
    pthread_mutex_lock(&c->mtx);
    uint64_t gen = c->gen;
    pthread_mutex_unlock(&c->mtx);
    int rc = mosquitto_publish_v5(c->mosq, &mid, pub->topic, (int)pub->payload_len,
                                  pub->payload_len ? pub->payload : NULL, pub->qos, pub->retained, props);
    mosquitto_property_free_all(&props);
    if (rc == MOSQ_ERR_NO_CONN || rc == MOSQ_ERR_NOMEM || rc == MOSQ_ERR_CONN_LOST || rc == MOSQ_ERR_OVERSIZE_PACKET)
        return rc == MOSQ_ERR_OVERSIZE_PACKET ? KB_ERR_TOOBIG : KB_ERR_FULL;
    if (rc != MOSQ_ERR_SUCCESS) {
        KB_WARN(KB_MOSQ_MOD, "sink=%s libmosquitto refused a publish: %s", c->s.name, mosquitto_strerror(rc));
        return KB_ERR_DELIVERY;
    }
    kb_mosq_slot_t *slot = &c->slots[(unsigned)mid % KB_MOSQ_MIDS];
    pthread_mutex_lock(&c->mtx);
    bool early = slot->early;
    int reason = slot->reason;
    bool straddled = pub->qos == 0 && c->gen != gen;
    if (early) {
        slot->early = false;
    } else if (!straddled) {
        slot->tag = tag;
        slot->qos0 = pub->qos == 0;
    }
    pthread_mutex_unlock(&c->mtx);
    if (early)
        kb_mosq_deliver(tag, reason);
    else if (straddled)
        kb_mqtt_core_done(tag, KB_MQTT_DONE_RETRY, "connection lost during the publish");
    return KB_OK;
}

static void kb_mosq_disconnect(void *client, int timeout_ms) {
    kb_mosq_t *c = client;
    pthread_mutex_lock(&c->mtx);
    bool up = c->sock_up;
    c->disconnected = false;
    pthread_mutex_unlock(&c->mtx);
    if (!up || mosquitto_disconnect_v5(c->mosq, 0, NULL) != MOSQ_ERR_SUCCESS)
        return;
    pthread_mutex_lock(&c->mtx);
    kb_mqtt_wait_flag(&c->mtx, &c->cond, &c->disconnected, timeout_ms);
    pthread_mutex_unlock(&c->mtx);
}

static void kb_mosq_destroy(void *client) {
    kb_mosq_t *c = client;
    if (!c)
        return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->mtx);
        c->stop = true;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->mtx);
        /* the loop returns within its 500 ms timeout; a TCP connect in progress
         * may take longer (the kernel's connect timeout) */
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 5;
        if (pthread_timedjoin_np(c->thread, NULL, &deadline) != 0) {
            KB_WARN(KB_MOSQ_MOD, "sink=%s libmosquitto's connect did not return; its client is left behind",
                    c->s.name);
            pthread_mutex_lock(&c->cb_mtx);
            c->abandoned = true; /* the sink is going away: nothing may call back into it */
            pthread_mutex_unlock(&c->cb_mtx);
            pthread_detach(c->thread);
            return; /* the thread still uses c (a small leak, at shutdown only) */
        }
    }
    kb_mosq_free(c); /* messages still held are dropped: the sink acks them STOPPED */
}

const kb_mqtt_client_ops_t kb_mqtt_mosq_ops = {
    .name = "mosquitto",
    .max_window = 0, /* no cost that grows with the window */
    .min_keepalive = 5,
    .unsupported = kb_mosq_unsupported,
    .create = kb_mosq_create,
    .connect = kb_mosq_connect,
    .publish = kb_mosq_publish,
    .replace = NULL,
    .disconnect = kb_mosq_disconnect,
    .destroy = kb_mosq_destroy,
};
