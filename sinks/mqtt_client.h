/* sinks/mqtt_client.h — the thin layer between the MQTT sink and one client library.
 *
 * sinks/mqtt.c holds everything MQTT-specific that does not depend on the
 * library: topics, payloads and properties, the ordered bounded buffer, the
 * in-flight window, reconnect backoff, birth/last will, packet-size refusal,
 * acknowledgement. A client layer (sinks/mqtt_paho.c, sinks/mqtt_mosq.c)
 * only turns "connect", "publish this", "disconnect" into library calls and
 * reports back through the kb_mqtt_core_* functions below.
 *
 * Ownership: the sink creates one client per sink and destroys it; a
 * kb_mqtt_pub_t is borrowed for the publish() call only (the layer copies
 * what it keeps). Threads: connect/replace are called by the sink's worker,
 * publish by one thread at a time (the sink's pump: a producer, the worker,
 * or a library thread inside kb_mqtt_core_done), disconnect/destroy by the
 * bridge's main thread after the worker stopped; the kb_mqtt_core_*
 * callbacks run on library threads (or inside publish()) and never while the
 * layer holds a lock that publish() takes.
 */
#ifndef KB_SINKS_MQTT_CLIENT_H
#define KB_SINKS_MQTT_CLIENT_H

#include "common/err.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most MQTT 5 user properties one message carries (k8s-* + CloudEvents attributes). */
#define KB_MQTT_MAX_UPROPS 16

typedef struct kb_mqtt_uprop {
    const char *name;  /* NUL-terminated */
    const char *value; /* value_len bytes */
    size_t value_len;
} kb_mqtt_uprop_t;

/* One PUBLISH. v5 fields are ignored on MQTT 3.1.1. */
typedef struct kb_mqtt_pub {
    const char *topic; /* NUL-terminated */
    const void *payload;
    size_t payload_len; /* 0: zero-length (a retained delete) */
    int qos;
    bool retained;
    const char *content_type; /* NULL: none */
    const kb_mqtt_uprop_t *uprops;
    size_t n_uprops;
} kb_mqtt_pub_t;

/* What the layer needs to connect; strings borrowed for the client's lifetime. */
typedef struct kb_mqtt_settings {
    const char *name; /* the sink's name, for logs */
    const char *uri, *client_id, *username, *password;
    const char *ca_file, *cert_file, *key_file; /* TLS when tls */
    bool tls;
    int version; /* 3 or 5 */
    int keepalive, max_inflight;
    uint32_t session_expiry_s; /* MQTT 5: how long the broker keeps the session */
    const char *will_topic, *will_payload; /* retained last will */
    int will_qos;
} kb_mqtt_settings_t;

/* How a handed-over publish ended (kb_mqtt_core_done). */
typedef enum {
    KB_MQTT_DONE_OK = 0,     /* PUBACK (QoS 1), PUBCOMP (QoS 2), written (QoS 0) */
    KB_MQTT_DONE_RETRY,      /* the connection's fault: send again, in order */
    KB_MQTT_DONE_MIDWRITE,   /* RETRY, and the library's handle can no longer be trusted (paho) */
    KB_MQTT_DONE_REFUSED,    /* the broker's verdict on this message (reason code >= 0x80): final */
    KB_MQTT_DONE_STOPPED,    /* the client is being destroyed */
} kb_mqtt_done_t;

/* A synchronous publish() result other than KB_OK: KB_ERR_FULL = not taken (window or buffer of the library full, not connected),
 * offer it again shortly; anything else = the library refuses it for good. */

typedef struct kb_mqtt_client_ops {
    const char *name; /* "paho", "mosquitto" */
    /* The most messages in flight this library handles well (0: no limit of its own);
     * the sink's window is min(max_inflight, the broker's Receive Maximum, this). */
    unsigned max_window;
    /* The shortest keep-alive (seconds) this library takes besides 0 (off):
     * libmosquitto refuses 1..4 at every connect. validate() names the key. */
    int min_keepalive;
    /* Why this library cannot use uri (e.g. ws:// without websockets), or NULL. Static text. */
    const char *(*unsupported)(const char *uri);
    /* core is handed back in the connection callbacks. */
    kb_err_t (*create)(const kb_mqtt_settings_t *s, void *core, void **client, char *why, size_t why_size);
    /* Start a connection attempt (clean: a fresh session); the outcome comes
     * as kb_mqtt_core_connected / kb_mqtt_core_connect_failed. A layer whose
     * library reconnects by itself may treat later calls as a no-op. */
    kb_err_t (*connect)(void *client, bool clean);
    /* Hand one message over; KB_OK means exactly one kb_mqtt_core_done(tag)
     * follows (possibly before publish returns). */
    kb_err_t (*publish)(void *client, const kb_mqtt_pub_t *pub, void *tag);
    /* Optional (NULL: never needed). Replace a handle after DONE_MIDWRITE;
     * every publish handed to the old one is forgotten (no done() follows). */
    kb_err_t (*replace)(void *client);
    /* Clean DISCONNECT, waiting up to timeout_ms. */
    void (*disconnect)(void *client, int timeout_ms);
    /* Publishes still held end with done(STOPPED) or are simply dropped;
     * no callback runs after destroy returns. */
    void (*destroy)(void *client);
} kb_mqtt_client_ops_t;

extern const kb_mqtt_client_ops_t kb_mqtt_paho_ops;
extern const kb_mqtt_client_ops_t kb_mqtt_mosq_ops;

/* ---- implemented by sinks/mqtt.c; called by the layers ----------------- */

/* CONNACK accepted. max_packet 0 / receive_max 0: the broker announced none. */
void kb_mqtt_core_connected(void *core, bool session_present, uint32_t max_packet, unsigned receive_max);
/* A connect attempt failed; refused = the broker said no (credentials, id, ACL). why: static or copied. */
void kb_mqtt_core_connect_failed(void *core, bool refused, const char *why, const char *detail);
/* An established connection broke. */
void kb_mqtt_core_lost(void *core, const char *cause);
/* The end of one publish handed over with tag; why names the reason when not OK. */
void kb_mqtt_core_done(void *tag, kb_mqtt_done_t how, const char *why);
/* Wait (mtx held) until *flag or timeout_ms passed (cond on the monotonic clock). */
void kb_mqtt_wait_flag(pthread_mutex_t *mtx, pthread_cond_t *cond, const bool *flag, int timeout_ms);
/* MQTT 3.1.1 CONNACK return codes 1..5, for a human. */
const char *kb_mqtt_v3_connack_why(int code);

#endif
