/* config/config.h — the loaded configuration: immutable once returned.
 *
 * kb_config_load() reads a libconfig file, applies defaults, and validates
 * everything that can be validated without touching the network: unknown
 * keys, types, ranges, enum values, duplicate names, routes that name an
 * unknown informer or sink, bad templates. On error it returns NULL and
 * writes "FILE:LINE: what is wrong" (naming the key or value) to errstr.
 *
 * One table (config/table.c) lists every key with its type, default, range
 * and doc string; it drives loading, validation, `kbridge --help-config` and
 * docs/configuration.md. The result is passed down explicitly, never global.
 * Thread: any; the struct is read-only after load, so readers need no lock.
 */
#ifndef KB_CONFIG_CONFIG_H
#define KB_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { KB_COMPACTION_NONE = 0, KB_COMPACTION_LATEST = 1 } kb_compaction_t;
/* How an informer lists: a streamed watch (sendInitialEvents) where the server
 * offers it, else pages (auto); always streamed; always paged. */
typedef enum { KB_LIST_AUTO = 0, KB_LIST_STREAM = 1, KB_LIST_PAGED = 2 } kb_list_mode_t;
typedef enum { KB_CACHE_COMPRESSION_AUTO = 0, KB_CACHE_COMPRESSION_OFF = 1 } kb_cache_compression_t;
typedef enum { KB_SINK_FILE = 0, KB_SINK_KAFKA = 1, KB_SINK_MQTT = 2 } kb_sink_type_t;
typedef enum { KB_FORMAT_JSON = 0, KB_FORMAT_CE_STRUCTURED = 1, KB_FORMAT_CE_BINARY = 2 } kb_format_t;
typedef enum { KB_MODE_EVENTS = 0, KB_MODE_STATE = 1 } kb_mode_t;
typedef enum { KB_REFUSED_STOP = 0, KB_REFUSED_DEAD_LETTER = 1 } kb_refused_t;
typedef enum { KB_MQTT_CLIENT_PAHO = 0, KB_MQTT_CLIENT_MOSQUITTO = 1 } kb_mqtt_client_t;
/* sharding.server_side: never ask the server to shard (replicas split by
 * name); ask, and filter here too where it did not (auto); always ask. */
typedef enum { KB_SHARD_SERVER_OFF = 0, KB_SHARD_SERVER_AUTO = 1, KB_SHARD_SERVER_ON = 2 } kb_shard_server_t;
/* sharding.server_field: what the server (and the fallback) hashes. */
typedef enum { KB_SHARD_FIELD_UID = 0, KB_SHARD_FIELD_NAMESPACE = 1 } kb_shard_field_t;

typedef struct kb_strlist {
    char **v;   /* n strings, owned */
    size_t n;
} kb_strlist_t;

typedef struct kb_kv {
    char *key;
    char *value; /* numbers and booleans are kept in their text form ("5", "true") */
    int line;
} kb_kv_t;

typedef struct kb_config_cluster {
    char *name;          /* "default" */
    char *server;        /* "" = use kubeconfig / in-cluster */
    char *kubeconfig;    /* "" */
    char *context;       /* "" = current-context */
    bool in_cluster;
    char *token_file;
    char *ca_file, *client_cert, *client_key;
    bool insecure_skip_tls_verify;
    bool allow_insecure_http;      /* credentials over http:// beyond loopback */
    int exec_timeout;              /* seconds an exec credential plugin may run, 60 */
    double qps;          /* 50.0 */
    int burst;           /* 100 */
} kb_config_cluster_t;

/* The most informers[].index_labels keys (the indexer's KB_INDEXER_MAX_LABELS). */
#define KB_CONFIG_INDEX_LABELS_MAX 16

/* The annotation kubectl apply leaves: the whole object as applied (a
 * Secret's values in clear), dropped by default. */
#define KB_CONFIG_LAST_APPLIED_PATH "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]"

typedef struct kb_config_informer {
    char *name;
    char *group;         /* "" = core */
    char *version;       /* "v1" */
    char *resource;      /* required */
    kb_strlist_t namespaces;      /* empty = all */
    char *label_selector, *field_selector;
    int page_size;       /* 500, 1..100000 */
    kb_list_mode_t list_mode; /* auto */
    kb_cache_compression_t cache_compression; /* auto */
    int min_watch_timeout; /* 300 s, 5..3600: each watch's timeoutSeconds is drawn from [t, 2t) */
    int resync_seconds;  /* 0 = off */
    int audit_seconds;   /* 0 = off */
    double audit_relist_ratio; /* 0.05, 0..1 */
    int shards;          /* 4, 1..256 */
    kb_compaction_t compaction;
    int coalesce_ms;     /* 0 = off; > 0 only with compaction = latest (checked at load) */
    kb_strlist_t drop_fields;     /* default [ "metadata.managedFields",
                                     "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]" ] */
    kb_strlist_t redact_fields;   /* default []; core secrets: "data", "stringData" added */
    kb_strlist_t keep_fields;     /* allow-list (informer/decode.h); default [] = keep everything */
    kb_strlist_t index_labels;    /* label keys indexed for snapshot / list queries; default [] */
    bool emit_secret_values;      /* core secrets only; false: data/stringData redacted and the
                                     last-applied annotation dropped whatever the lists say (added
                                     to them at load); true: values in clear, the bridge warns */
    int64_t queue_bytes;          /* 64 MiB: the bound over all shards' queues */
    int line;                     /* where the informer's group starts */
} kb_config_informer_t;

typedef struct kb_config_sink {
    char *name;
    kb_sink_type_t type;
    int line;
    kb_refused_t on_refused; /* what a message the sink can never deliver does */
    char *dead_letter;   /* on_refused = dead_letter: the sink that gets it ("" otherwise) */
    /* file */
    char *path;          /* "-" = stdout */
    bool follow_symlinks; /* false: a symlink at path is refused (O_NOFOLLOW) */
    char *file_mode;     /* "0600": octal permission bits of a file the sink creates */
    unsigned file_mode_bits; /* file_mode parsed (finish_sink) */
    /* kafka */
    char *brokers;
    kb_kv_t *properties; size_t n_properties; /* passed to librdkafka as-is */
    bool transactional;
    char *checkpoint_topic; /* "__kbridge_checkpoints" */
    /* mqtt */
    char *uri;
    char *client_id;
    int qos;             /* 1 */
    int version;         /* 5, or 3 for MQTT 3.1.1 */
    char *username, *password_file;
    char *ca_file, *cert_file, *key_file;
    int keepalive;       /* seconds, 30 */
    int max_inflight;    /* 256 */
    kb_mqtt_client_t mqtt_client; /* "client": the library behind the sink */
    bool allow_plaintext_password; /* a password over tcp:// to a non-loopback broker */
} kb_config_sink_t;

#define KB_ROUTE_TYPES_ALL 0x1fu /* bit (1 << kb_event_type_t) */

typedef struct kb_config_route {
    char *name;          /* default "<informer>-<sink>-<index>" */
    char *informer, *sink;
    char *topic;         /* "" = the sink type's default */
    char *key;           /* "{namespace}/{name}" */
    uint32_t types;      /* bit mask over kb_event_type_t; default ADDED|MODIFIED|DELETED|SYNC|SNAPSHOT */
    bool types_set;      /* types was written in the file (SYNC listed explicitly is never suppressed) */
    kb_strlist_t namespaces;
    char *label_selector;
    char *field_selector; /* checked at load against the informer's resource (common/fieldsel.h) */
    kb_format_t format;
    kb_mode_t mode;
    bool suppress_noop;  /* true: skip MODIFIED (and implicit SYNC) identical to the last delivery (sinks/noop.h) */
    int heartbeat_seconds; /* 0 = off; else a HEARTBEAT record this often (sinks/heartbeat.h) */
    int line;
} kb_config_route_t;

typedef struct kb_config {
    char *path;                    /* the file it came from */
    kb_config_cluster_t cluster;
    char *state_dir;               /* "" = memory only */
    int64_t journal_max_bytes;     /* acknowledged journal kept per informer, 256 MiB */
    int journal_max_age;           /* seconds, 86400 */
    int shutdown_timeout;          /* seconds, 10 */
    char *log_level;               /* "info" */
    char *log_format;              /* "text" | "json" */
    char *http_listen;             /* "127.0.0.1:9464"; "" = off */
    char *http_token_file;
    char *http_metrics_token_file; /* "" = none; else a token that reads /metrics only */
    int http_line;                 /* where the http group starts (0: not in the file) */
    bool http_allow_unauthenticated; /* false: listening beyond loopback needs http_token_file */
    char *http_tls_cert_file;      /* "" = plain HTTP; with http_tls_key_file: HTTPS */
    char *http_tls_key_file;
    int http_max_streams;          /* concurrent snapshot/replay bodies, 16 */
    int http_max_per_address;      /* connections from one client address, 16 */
    int http_header_timeout;       /* seconds to send a whole request, 10 */
    bool kapi_enabled;             /* kube_api.enabled: true */
    int kapi_history;              /* kube_api.watch_history: changes kept per informer, 10000 */
    int kapi_bookmark_seconds;     /* kube_api.bookmark_seconds: 60 */
    int kapi_max_watches;          /* kube_api.max_watches: 1000 */
    int sharding_replicas;         /* 1 */
    int sharding_index;            /* 0; -1 = from $HOSTNAME's StatefulSet ordinal (resolved at load) */
    kb_shard_server_t sharding_server_side; /* off (informer/shard.h) */
    kb_shard_field_t sharding_server_field; /* uid */
    bool ha_enabled;               /* ha.enabled: false (bridge/ha.h) */
    char *ha_lease_name;           /* "kbridge-{cluster}-{shard}" */
    char *ha_lease_namespace;      /* "" = the pod's namespace (service account), else "default" */
    int ha_lease_seconds;          /* 15 */
    int ha_renew_seconds;          /* 5 */
    char *ha_identity;             /* "$HOSTNAME" */
    kb_config_informer_t *informers; size_t n_informers;
    kb_config_sink_t *sinks; size_t n_sinks;
    kb_config_route_t *routes; size_t n_routes;
} kb_config_t;

/* Load and validate. NULL on error with "FILE:LINE: message" in errstr. */
kb_config_t *kb_config_load(const char *path, char *errstr, size_t errstr_size);
/* Same, from text in memory (path is only used in messages). */
kb_config_t *kb_config_load_string(const char *text, const char *path, char *errstr, size_t errstr_size);
void kb_config_free(kb_config_t *cfg); /* NULL is a no-op */

/* Human summary for --check: cluster, informers, sinks, routes. */
void kb_config_summary(const kb_config_t *cfg, FILE *out);
/* Every key with type, default and doc (for --help-config); markdown when md. */
void kb_config_print_reference(FILE *out, bool md);
/* The top-level settings and groups a SIGHUP cannot change (the reload is
 * refused: they need a restart), as "a, b and c"; from the key table. */
void kb_config_print_restart_only(FILE *out);

/* What a reload from a to b needs, from the reload flags of the key table:
 * nothing, a change applied in place, rebuilding the object, or a restart. */
typedef enum {
    KB_RELOAD_SAME = 0,
    KB_RELOAD_IN_PLACE = 1,
    KB_RELOAD_REBUILD = 2,
    KB_RELOAD_RESTART = 3,
} kb_reload_t;

/* The keys outside informers[], sinks[] and routes[]: SAME, IN_PLACE or
 * RESTART; *what (may be NULL) gets the first key needing a restart, e.g.
 * "cluster.server" (static storage). */
kb_reload_t kb_config_diff_global(const kb_config_t *a, const kb_config_t *b, char *what, size_t what_size);
/* One informer or sink against another: SAME, IN_PLACE or REBUILD (the
 * first key that differs in *what, may be NULL). */
kb_reload_t kb_config_diff_informer(const kb_config_informer_t *a, const kb_config_informer_t *b, char *what,
                                    size_t what_size);
kb_reload_t kb_config_diff_sink(const kb_config_sink_t *a, const kb_config_sink_t *b, char *what, size_t what_size);
/* The reload action's name: "unchanged", "changed in place", "rebuilt", "needs a restart". */
const char *kb_reload_name(kb_reload_t r);

const kb_config_informer_t *kb_config_find_informer(const kb_config_t *cfg, const char *name);
/* Whether the informer watches core Secrets (group "", resource "secrets"):
 * the one place that decides which informers get the Secret protections. */
bool kb_config_informer_is_secrets(const kb_config_informer_t *inf);
/* Whether cfg serves the Kubernetes API (kube_api.enabled on a listening
 * http): then an informer without routes is kept for it, not useless. */
bool kb_config_kapi_served(const kb_config_t *cfg);
/* How many routes take informer's changes. */
size_t kb_config_routes_of(const kb_config_t *cfg, const char *informer);
const kb_config_sink_t *kb_config_find_sink(const kb_config_t *cfg, const char *name);

const char *kb_sink_type_name(kb_sink_type_t t);
const char *kb_format_name(kb_format_t f);
const char *kb_mode_name(kb_mode_t m);

#endif
