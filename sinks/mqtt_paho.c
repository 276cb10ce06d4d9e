/* sinks/mqtt_paho.c — the MQTT sink's client layer over Eclipse Paho C (MQTTAsync).
 *
 * DESIGN
 *
 * A thin adapter (sinks/mqtt_client.h): connect, publish, disconnect; the
 * protocol logic is in sinks/mqtt.c. What is paho-specific lives here:
 *
 * - Cost. Debian's libpaho-mqtt1.3 is built without PAHO_HIGH_PERFORMANCE:
 *   every paho call takes a global trace mutex and writes a trace record,
 *   and every allocation goes through a global heap-tracking tree. The
 *   trace level is set to ERROR once, before any client exists (it cannot
 *   be changed cheaply later, and heap tracking cannot be switched off at
 *   all). paho walks its command and in-flight lists linearly and tracks
 *   every block in a tree, so the sink keeps at most KB_PAHO_MAX_WINDOW in
 *   flight and sets
 *   maxBufferedMessages just above it; persistence is off (file persistence
 *   writes a file per message; kbridge's journal already gives
 *   at-least-once).
 * - Logs. paho's trace goes to common/log at error level only. paho's heap
 *   scan (printed at ERROR when the library terminates with blocks still
 *   allocated, as after an abandoned handle below) dumps the contents of
 *   those blocks — message topics and payloads, i.e. object data: those
 *   lines are counted and dropped, never logged.
 * - A defect of 1.3.12: when the socket breaks while a QoS>0 PUBLISH is being
 *   written, paho fails the command with token 0 and frees its topic and
 *   payload although its stored in-flight copy still points at them; the
 *   next session resume (or MQTTAsync_destroy) would use that freed memory.
 *   That failure is reported as DONE_MIDWRITE; the sink then calls replace(),
 *   which abandons the handle (never resumed, never destroyed — a small
 *   leak per event) for a fresh one.
 *
 * Threads: paho's own send/receive threads run the callbacks; this file
 * keeps no lock of its own (the handle is swapped by replace() only while
 * the sink is disconnected and its worker is the only caller).
 */
#include "sinks/mqtt_client.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/time.h"

#include <MQTTAsync.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_PAHO_MOD "mqtt"
/* paho's CPU per message grows with what it holds in flight (linear lists,
 * and a heap-tracking tree over every block): measured at QoS 1 / 456 B,
 * 30 µs at 24–48 in flight, 33 at 64, 45 at 128, ~55 at 256 (bench/mqtt.sh). */
#define KB_PAHO_MAX_WINDOW 64

typedef struct kb_paho {
    kb_mqtt_settings_t s; /* borrowed strings (the sink outlives us) */
    void *core;
    MQTTAsync client;
    pthread_mutex_t mtx;  /* disconnect's wait only */
    pthread_cond_t cond;
    bool disconnected;
} kb_paho_t;

/* ------------------------------------------------------------------ trace */

static atomic_ulong kb_paho_heap_lines;

static bool kb_paho_heap_line(const char *m) {
    /* HeapScan's lines ("Heap scan start…", "Heap element size…", "  Content …",
     * "Heap scan end"), after paho's own timestamp prefix */
    return strstr(m, "Heap ") || strstr(m, "Content ") || strstr(m, "heap use");
}

static void kb_paho_trace(enum MQTTASYNC_TRACE_LEVELS level, char *message) {
    if (level < MQTTASYNC_TRACE_ERROR || !message)
        return;
    if (kb_paho_heap_line(message)) {
        if (atomic_fetch_add(&kb_paho_heap_lines, 1) == 0)
            KB_WARN("paho", "paho reports memory still allocated at exit (its heap scan is not logged: it "
                    "holds message contents)");
        return;
    }
    KB_ERROR("paho", "%.200s", message);
}

static pthread_once_t kb_paho_trace_once = PTHREAD_ONCE_INIT;

static void kb_paho_trace_setup(void) {
    /* Before the first client: each level above ERROR costs a trace record per call. */
    MQTTAsync_setTraceLevel(MQTTASYNC_TRACE_ERROR);
    MQTTAsync_setTraceCallback(kb_paho_trace);
}

/* ------------------------------------------------------------ callbacks */

static void kb_paho_on_sent3(void *context, MQTTAsync_successData *resp) {
    KB_UNUSED(resp);
    kb_mqtt_core_done(context, KB_MQTT_DONE_OK, NULL);
}

static void kb_paho_on_sent5(void *context, MQTTAsync_successData5 *resp) {
    KB_UNUSED(resp);
    kb_mqtt_core_done(context, KB_MQTT_DONE_OK, NULL);
}

/* reason >= 0x80: the broker's verdict on the message (MQTT 5 PUBACK/PUBREC).
 * token 0: the write itself broke (see DESIGN). Else the connection's fault. */
static void kb_paho_failed(void *tag, int token, int code, int reason) {
    if (reason >= 0x80)
        kb_mqtt_core_done(tag, KB_MQTT_DONE_REFUSED, MQTTReasonCode_toString((enum MQTTReasonCodes)reason));
    else if (token == 0)
        kb_mqtt_core_done(tag, KB_MQTT_DONE_MIDWRITE, MQTTAsync_strerror(code));
    else
        kb_mqtt_core_done(tag, KB_MQTT_DONE_RETRY, MQTTAsync_strerror(code));
}

static void kb_paho_on_failed3(void *context, MQTTAsync_failureData *resp) {
    kb_paho_failed(context, resp ? resp->token : 0, resp ? resp->code : MQTTASYNC_FAILURE, 0);
}

static void kb_paho_on_failed5(void *context, MQTTAsync_failureData5 *resp) {
    kb_paho_failed(context, resp ? resp->token : 0, resp ? resp->code : MQTTASYNC_FAILURE,
                   resp ? (int)resp->reasonCode : 0);
}

static void kb_paho_on_connect3(void *context, MQTTAsync_successData *resp) {
    kb_paho_t *p = context;
    kb_mqtt_core_connected(p->core, resp && resp->alt.connect.sessionPresent, 0, 0);
}

static void kb_paho_on_connect5(void *context, MQTTAsync_successData5 *resp) {
    kb_paho_t *p = context;
    MQTTProperties *props = resp ? &resp->properties : NULL;
    uint32_t max_packet = 0;
    unsigned receive_max = 0;
    if (props && MQTTProperties_hasProperty(props, MQTTPROPERTY_CODE_MAXIMUM_PACKET_SIZE))
        max_packet = (uint32_t)MQTTProperties_getNumericValue(props, MQTTPROPERTY_CODE_MAXIMUM_PACKET_SIZE);
    if (props && MQTTProperties_hasProperty(props, MQTTPROPERTY_CODE_RECEIVE_MAXIMUM)) {
        int rm = MQTTProperties_getNumericValue(props, MQTTPROPERTY_CODE_RECEIVE_MAXIMUM);
        receive_max = rm > 0 ? (unsigned)rm : 0;
    }
    kb_mqtt_core_connected(p->core, resp && resp->alt.connect.sessionPresent, max_packet, receive_max);
}

/* paho reports a refusing CONNACK as a positive code: the MQTT 5 reason code,
 * or the MQTT 3.1.1 return code 1..5; negative codes are its own. */
static void kb_paho_connect_failed(kb_paho_t *p, int code, int reason, const char *message) {
    if (reason < 0x80 && code >= 0x80)
        reason = code;
    if (reason >= 0x80)
        kb_mqtt_core_connect_failed(p->core, true, MQTTReasonCode_toString((enum MQTTReasonCodes)reason), NULL);
    else if (code >= 1 && code <= 5)
        kb_mqtt_core_connect_failed(p->core, true, kb_mqtt_v3_connack_why(code), NULL);
    else
        kb_mqtt_core_connect_failed(p->core, false, MQTTAsync_strerror(code), message);
}

static void kb_paho_on_connect_failed3(void *context, MQTTAsync_failureData *resp) {
    kb_paho_connect_failed(context, resp ? resp->code : MQTTASYNC_FAILURE, 0, resp ? resp->message : NULL);
}

static void kb_paho_on_connect_failed5(void *context, MQTTAsync_failureData5 *resp) {
    kb_paho_connect_failed(context, resp ? resp->code : MQTTASYNC_FAILURE, resp ? (int)resp->reasonCode : 0,
                           resp ? resp->message : NULL);
}

static void kb_paho_on_lost(void *context, char *cause) {
    kb_paho_t *p = context;
    kb_mqtt_core_lost(p->core, cause);
}

static int kb_paho_on_message(void *context, char *topic, int topic_len, MQTTAsync_message *m) {
    KB_UNUSED(context);
    KB_UNUSED(topic_len);
    MQTTAsync_freeMessage(&m);
    MQTTAsync_free(topic);
    return 1;
}

/* ------------------------------------------------------------- the layer */

static const char *kb_paho_unsupported(const char *uri) {
    KB_UNUSED(uri);
    return NULL;
}

static int kb_paho_new_handle(kb_paho_t *p, MQTTAsync *client) {
    MQTTAsync_createOptions co = MQTTAsync_createOptions_initializer;
    co.MQTTVersion = p->s.version == 5 ? MQTTVERSION_5 : MQTTVERSION_3_1_1;
    co.sendWhileDisconnected = 0; /* the sink's own ordered buffer holds messages while offline */
    co.maxBufferedMessages = p->s.max_inflight + 16; /* the sink never hands over more than its window */
    int rc = MQTTAsync_createWithOptions(client, p->s.uri, p->s.client_id, MQTTCLIENT_PERSISTENCE_NONE, NULL, &co);
    if (rc != MQTTASYNC_SUCCESS)
        return rc;
    rc = MQTTAsync_setCallbacks(*client, p, kb_paho_on_lost, kb_paho_on_message, NULL);
    if (rc != MQTTASYNC_SUCCESS)
        MQTTAsync_destroy(client);
    return rc;
}

static kb_err_t kb_paho_create(const kb_mqtt_settings_t *s, void *core, void **client, char *why, size_t why_size) {
    pthread_once(&kb_paho_trace_once, kb_paho_trace_setup);
    kb_paho_t *p = kb_calloc(1, sizeof(*p));
    p->s = *s;
    p->core = core;
    pthread_mutex_init(&p->mtx, NULL);
    kb_cond_init_mono(&p->cond);
    int rc = kb_paho_new_handle(p, &p->client);
    if (rc != MQTTASYNC_SUCCESS) {
        snprintf(why, why_size, "%s", MQTTAsync_strerror(rc));
        pthread_cond_destroy(&p->cond);
        pthread_mutex_destroy(&p->mtx);
        free(p);
        return KB_ERR_CONFIG;
    }
    *client = p;
    return KB_OK;
}

static kb_err_t kb_paho_connect(void *client, bool clean) {
    kb_paho_t *p = client;
    MQTTAsync_connectOptions co = MQTTAsync_connectOptions_initializer;
    MQTTAsync_connectOptions co5 = MQTTAsync_connectOptions_initializer5;
    MQTTAsync_willOptions will = MQTTAsync_willOptions_initializer;
    MQTTAsync_SSLOptions ssl = MQTTAsync_SSLOptions_initializer;
    MQTTProperties props = MQTTProperties_initializer;
    MQTTAsync_connectOptions *opts = p->s.version == 5 ? &co5 : &co;
    if (p->s.version == 5) {
        MQTTProperty prop;
        memset(&prop, 0, sizeof(prop));
        prop.identifier = MQTTPROPERTY_CODE_SESSION_EXPIRY_INTERVAL;
        prop.value.integer4 = p->s.session_expiry_s;
        MQTTProperties_add(&props, &prop);
        opts->cleanstart = clean;
        opts->connectProperties = &props;
        opts->onSuccess5 = kb_paho_on_connect5;
        opts->onFailure5 = kb_paho_on_connect_failed5;
    } else {
        opts->cleansession = clean;
        opts->MQTTVersion = MQTTVERSION_3_1_1;
        opts->onSuccess = kb_paho_on_connect3;
        opts->onFailure = kb_paho_on_connect_failed3;
    }
    opts->context = p;
    opts->keepAliveInterval = p->s.keepalive;
    opts->maxInflight = p->s.max_inflight;
    opts->connectTimeout = 10;
    opts->automaticReconnect = 0;
    opts->username = p->s.username;
    opts->password = p->s.password;
    will.topicName = p->s.will_topic;
    will.message = p->s.will_payload;
    will.retained = 1;
    will.qos = p->s.will_qos;
    opts->will = &will;
    if (p->s.tls) {
        ssl.trustStore = p->s.ca_file;
        ssl.keyStore = p->s.cert_file;
        ssl.privateKey = p->s.key_file;
        ssl.enableServerCertAuth = 1;
        ssl.verify = 1;
        opts->ssl = &ssl;
    }
    int rc = MQTTAsync_connect(p->client, opts);
    MQTTProperties_free(&props);
    if (rc != MQTTASYNC_SUCCESS)
        KB_WARN(KB_PAHO_MOD, "sink=%s paho connect: %s", p->s.name, MQTTAsync_strerror(rc));
    return rc == MQTTASYNC_SUCCESS ? KB_OK : KB_ERR_CONNECT;
}

/* The message's properties as paho's struct over our own array: no paho call
 * (each would take paho's trace mutex and copy into tracked heap blocks);
 * MQTTAsync_sendMessage makes the one copy it keeps. */
static void kb_paho_props(const kb_mqtt_pub_t *pub, MQTTProperty *array, MQTTProperties *props) {
    int n = 0, length = 0;
    if (pub->content_type) {
        memset(&array[n], 0, sizeof(array[n]));
        array[n].identifier = MQTTPROPERTY_CODE_CONTENT_TYPE;
        array[n].value.data.data = (char *)pub->content_type;
        array[n].value.data.len = (int)strlen(pub->content_type);
        length += 1 + 2 + array[n].value.data.len;
        n++;
    }
    for (size_t i = 0; i < pub->n_uprops; i++, n++) {
        memset(&array[n], 0, sizeof(array[n]));
        array[n].identifier = MQTTPROPERTY_CODE_USER_PROPERTY;
        array[n].value.data.data = (char *)pub->uprops[i].name;
        array[n].value.data.len = (int)strlen(pub->uprops[i].name);
        array[n].value.value.data = (char *)pub->uprops[i].value;
        array[n].value.value.len = (int)pub->uprops[i].value_len;
        length += 1 + 2 + array[n].value.data.len + 2 + array[n].value.value.len;
    }
    props->count = props->max_count = n;
    props->length = length;
    props->array = n ? array : NULL;
}

static kb_err_t kb_paho_publish(void *client, const kb_mqtt_pub_t *pub, void *tag) {
    kb_paho_t *p = client;
    static char empty[1];
    MQTTAsync_message m = MQTTAsync_message_initializer;
    MQTTAsync_responseOptions ro = MQTTAsync_responseOptions_initializer;
    MQTTProperties props = MQTTProperties_initializer;
    MQTTProperty array[KB_MQTT_MAX_UPROPS + 1];
    m.payload = pub->payload_len ? (void *)pub->payload : empty;
    m.payloadlen = (int)pub->payload_len;
    m.qos = pub->qos;
    m.retained = pub->retained;
    ro.context = tag;
    if (p->s.version == 5) {
        kb_paho_props(pub, array, &props);
        m.properties = props;
        ro.onSuccess5 = kb_paho_on_sent5;
        ro.onFailure5 = kb_paho_on_failed5;
    } else {
        ro.onSuccess = kb_paho_on_sent3;
        ro.onFailure = kb_paho_on_failed3;
    }
    int rc = MQTTAsync_sendMessage(p->client, pub->topic, &m, &ro); /* copies topic, payload, properties */
    if (rc == MQTTASYNC_SUCCESS)
        return KB_OK;
    if (rc == MQTTASYNC_DISCONNECTED || rc == MQTTASYNC_MAX_BUFFERED_MESSAGES || rc == MQTTASYNC_NO_MORE_MSGIDS ||
        rc == MQTTASYNC_OPERATION_INCOMPLETE)
        return KB_ERR_FULL;
    KB_WARN(KB_PAHO_MOD, "sink=%s paho refused a publish: %s", p->s.name, MQTTAsync_strerror(rc));
    return KB_ERR_DELIVERY;
}

static kb_err_t kb_paho_replace(void *client) {
    kb_paho_t *p = client;
    MQTTAsync fresh = NULL;
    int rc = kb_paho_new_handle(p, &fresh);
    if (rc != MQTTASYNC_SUCCESS)
        return KB_ERR_INTERNAL;
    /* the old handle is left alone on purpose: destroying it would free memory twice */
    p->client = fresh;
    return KB_OK;
}

static void kb_paho_on_disconnected(kb_paho_t *p) {
    pthread_mutex_lock(&p->mtx);
    p->disconnected = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mtx);
}

static void kb_paho_on_disc3(void *context, MQTTAsync_successData *resp) {
    KB_UNUSED(resp);
    kb_paho_on_disconnected(context);
}

static void kb_paho_on_disc5(void *context, MQTTAsync_successData5 *resp) {
    KB_UNUSED(resp);
    kb_paho_on_disconnected(context);
}

static void kb_paho_disconnect(void *client, int timeout_ms) {
    kb_paho_t *p = client;
    MQTTAsync_disconnectOptions dopt = MQTTAsync_disconnectOptions_initializer;
    MQTTAsync_disconnectOptions dopt5 = MQTTAsync_disconnectOptions_initializer5;
    MQTTAsync_disconnectOptions *d = p->s.version == 5 ? &dopt5 : &dopt;
    d->timeout = 0;
    d->context = p;
    if (p->s.version == 5)
        d->onSuccess5 = kb_paho_on_disc5;
    else
        d->onSuccess = kb_paho_on_disc3;
    p->disconnected = false;
    if (MQTTAsync_disconnect(p->client, d) != MQTTASYNC_SUCCESS)
        return;
    pthread_mutex_lock(&p->mtx);
    kb_mqtt_wait_flag(&p->mtx, &p->cond, &p->disconnected, timeout_ms);
    pthread_mutex_unlock(&p->mtx);
}

static void kb_paho_destroy(void *client) {
    kb_paho_t *p = client;
    if (!p)
        return;
    MQTTAsync_destroy(&p->client); /* fails what it still holds: done(RETRY) → acked STOPPED while closing */
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mtx);
    free(p);
}

const kb_mqtt_client_ops_t kb_mqtt_paho_ops = {
    .name = "paho",
    .max_window = KB_PAHO_MAX_WINDOW,
    .min_keepalive = 1,
    .unsupported = kb_paho_unsupported,
    .create = kb_paho_create,
    .connect = kb_paho_connect,
    .publish = kb_paho_publish,
    .replace = kb_paho_replace,
    .disconnect = kb_paho_disconnect,
    .destroy = kb_paho_destroy,
};
