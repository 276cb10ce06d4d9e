/* config/table.c — every configuration key, once, and the reference printer.
 *
 * Design: each key is one row (config_int.h) holding where the value lives,
 * its type, default, range or allowed values, checks and doc. The loader
 * (load.c) walks these rows to fill kb_config_t; kb_config_print_reference()
 * walks the same rows for `kbridge --help-config` and for
 * docs/configuration.md, which a unit test compares against this output, so
 * the docs cannot drift from what the loader does. Adding a key means adding
 * a row here and a field in config.h; nothing else unless it needs a check
 * across keys.
 */
#include "config/config_int.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/fieldsel.h"
#include "common/selector.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_OFF(type, field) offsetof(type, field)
#define KB_NKEYS(a) KB_ARRAY_LEN(a)

static const char *const kb_v_log_level[] = {"debug", "info", "warn", "error", NULL};
static const char *const kb_v_log_format[] = {"text", "json", NULL};
static const char *const kb_v_compaction[] = {"none", "latest", NULL};
static const char *const kb_v_list_mode[] = {"auto", "stream", "paged", NULL};
static const char *const kb_v_cache_compression[] = {"auto", "off", NULL};
static const char *const kb_v_sink_type[] = {"file", "kafka", "mqtt", NULL};
static const char *const kb_v_format[] = {"json", "cloudevents-structured", "cloudevents-binary", NULL};
static const char *const kb_v_mode[] = {"events", "state", NULL};
static const char *const kb_v_mqtt_version[] = {"3", "5", NULL};
static const char *const kb_v_refused[] = {"stop", "dead_letter", NULL};
static const char *const kb_v_server_side[] = {"off", "auto", "on", NULL};
static const char *const kb_v_server_field[] = {"uid", "namespace", NULL};
static const char *const kb_v_mqtt_client[] = {"paho", "mosquitto", NULL};

#define FILE_ONLY (1u << KB_SINK_FILE)
#define KAFKA_ONLY (1u << KB_SINK_KAFKA)
#define MQTT_ONLY (1u << KB_SINK_MQTT)

/* ---- cluster ---------------------------------------------------------- */

#define CL(field) KB_OFF(kb_config_cluster_t, field)
static const kb_ckey_t kb_keys_cluster[] = {
    {.name = "name", .type = KB_CT_STRING, .off = CL(name), .def = "default",
     .flags = KB_CF_NONEMPTY | KB_CF_NAME,
     .doc = "Name of the cluster; appears in envelopes, topics ({cluster}) and the MQTT client id."},
    {.name = "server", .type = KB_CT_STRING, .off = CL(server), .def = "",
     .doc = "API server URL (https://host:port). Empty: take it from kubeconfig or in_cluster. A URL with "
            "user:password@ is refused (credentials go in token_file, client_cert/client_key or a kubeconfig "
            "user); plain http:// beyond loopback needs allow_insecure_http."},
    {.name = "kubeconfig", .type = KB_CT_STRING, .off = CL(kubeconfig), .flags = KB_CF_FILE, .def = "",
     .doc = "Path of a kubeconfig file; its current-context is used unless context is set."},
    {.name = "context", .type = KB_CT_STRING, .off = CL(context), .def = "",
     .doc = "kubeconfig context to use; empty = current-context."},
    {.name = "in_cluster", .type = KB_CT_BOOL, .off = CL(in_cluster), .def = "false",
     .doc = "Use the pod's service account token and CA (running inside the cluster)."},
    {.name = "token_file", .type = KB_CT_STRING, .off = CL(token_file), .flags = KB_CF_FILE, .def = "",
     .doc = "Bearer token file; re-read when it changes (bound tokens rotate)."},
    {.name = "ca_file", .type = KB_CT_STRING, .off = CL(ca_file), .flags = KB_CF_FILE, .def = "",
     .doc = "CA bundle (PEM) that signed the API server's certificate."},
    {.name = "client_cert", .type = KB_CT_STRING, .off = CL(client_cert), .flags = KB_CF_FILE, .def = "",
     .doc = "Client certificate (PEM) for mutual TLS."},
    {.name = "client_key", .type = KB_CT_STRING, .off = CL(client_key), .flags = KB_CF_FILE, .def = "",
     .doc = "Private key (PEM) of client_cert."},
    {.name = "insecure_skip_tls_verify", .type = KB_CT_BOOL, .off = CL(insecure_skip_tls_verify),
     .def = "false", .doc = "Do not verify the API server's certificate (testing only)."},
    {.name = "allow_insecure_http", .type = KB_CT_BOOL, .off = CL(allow_insecure_http), .def = "false",
     .doc = "Talk to an http:// API server beyond loopback: what kbridge reads, and any credential it sends "
            "(token, password, exec plugin token), cross the network in clear text and unauthenticated. Without "
            "it such a server is refused (at load for cluster.server, at start for a kubeconfig's); on loopback "
            "http:// is allowed, with a warning when a credential goes along."},
    {.name = "exec_timeout", .type = KB_CT_INT, .off = CL(exec_timeout), .def = "60", .min = 1, .max = 3600,
     .doc = "Seconds a kubeconfig exec credential plugin may take to print its credential and exit; then it "
            "is killed with its process group and the request fails (retried with backoff)."},
    {.name = "qps", .type = KB_CT_FLOAT, .off = CL(qps), .def = "50.0", .min = 0.01, .max = 1e6,
     .doc = "Client-side rate limit: sustained requests per second to the API server."},
    {.name = "burst", .type = KB_CT_INT, .off = CL(burst), .def = "100", .min = 1, .max = 1000000,
     .doc = "Client-side rate limit: requests allowed in a burst above qps."},
};
#undef CL

static const kb_csection_t kb_sec_cluster = {
    .title = "cluster",
    .doc = "Which Kubernetes API server to talk to, and how to authenticate.",
    .line_off = SIZE_MAX, .keys = kb_keys_cluster, .n_keys = KB_NKEYS(kb_keys_cluster), .disc = -1,
};

/* ---- log, http, sharding (flat fields of kb_config_t) ------------------ */

#define TOP(field) KB_OFF(kb_config_t, field)
static const kb_ckey_t kb_keys_log[] = {
    {.name = "level", .type = KB_CT_CHOICE, .off = TOP(log_level), .def = "info", .values = kb_v_log_level,
     .flags = KB_CF_LIVE, .doc = "Lowest level written to stderr."},
    {.name = "format", .type = KB_CT_CHOICE, .off = TOP(log_format), .def = "text", .values = kb_v_log_format,
     .flags = KB_CF_LIVE,
     .doc = "One line per event: plain text with key=value fields, or one JSON object per line whose msg is the "
             "same message and whose main fields (informer, sink, seq, rv, server, …) are also string members of their "
             "own."},
};
static const kb_csection_t kb_sec_log = {
    .title = "log", .doc = "Logging to stderr.", .line_off = SIZE_MAX,
    .keys = kb_keys_log, .n_keys = KB_NKEYS(kb_keys_log), .disc = -1,
};

static const kb_ckey_t kb_keys_journal[] = {
    {.name = "max_bytes", .type = KB_CT_INT64, .off = TOP(journal_max_bytes), .def = "268435456", .min = 1048576,
     .max = 1e15, .doc = "Acknowledged changes kept per informer for replay, in bytes of state_dir."},
    {.name = "max_age", .type = KB_CT_INT, .off = TOP(journal_max_age), .def = "86400", .min = 0, .max = 31536000,
     .doc = "Seconds an acknowledged change is kept for replay (also bounded by max_bytes)."},
};
static const kb_csection_t kb_sec_journal = {
    .title = "journal",
    .doc = "The per-informer journal of recent changes in state_dir (replay; the unacknowledged tail is "
           "always kept).",
    .line_off = SIZE_MAX, .keys = kb_keys_journal, .n_keys = KB_NKEYS(kb_keys_journal), .disc = -1,
};

static const kb_ckey_t kb_keys_http[] = {
    {.name = "listen", .type = KB_CT_STRING, .off = TOP(http_listen), .def = "127.0.0.1:9464",
     .flags = KB_CF_LISTEN,
     .doc = "host:port of the HTTP API (health, metrics, snapshot, replay); \"\" disables it."},
    {.name = "token_file", .type = KB_CT_STRING, .off = TOP(http_token_file), .flags = KB_CF_FILE, .def = "",
     .doc = "When set, requests must carry `Authorization: Bearer <the file's content>` (all but /healthz "
            "and /readyz). Read again when the file changes. The file must hold one non-empty line: an empty "
            "one (a placeholder Secret) is refused at start and by --check, exit 2."},
    {.name = "metrics_token_file", .type = KB_CT_STRING, .off = TOP(http_metrics_token_file), .flags = KB_CF_FILE,
     .def = "",
     .doc = "A second bearer token that reads only /metrics (and the open /healthz and /readyz): give it to "
            "the Prometheus scraper, so that its credential cannot read snapshots, replays or the Kubernetes "
            "API (401 there). token_file's token still reads everything. Needs token_file; one non-empty "
            "line, different from token_file's; read again when the file changes."},
    {.name = "allow_unauthenticated", .type = KB_CT_BOOL, .off = TOP(http_allow_unauthenticated),
     .def = "false",
     .doc = "Serve the API without a token on an address beyond loopback. Without it (and without "
            "token_file), such a listen address is refused."},
    {.name = "tls_cert_file", .type = KB_CT_STRING, .off = TOP(http_tls_cert_file), .flags = KB_CF_FILE,
     .def = "", .doc = "Certificate chain (PEM) to serve HTTPS with; needs tls_key_file. Read again with the key "
                       "when either file changes: new connections get the new pair."},
    {.name = "tls_key_file", .type = KB_CT_STRING, .off = TOP(http_tls_key_file), .flags = KB_CF_FILE,
     .def = "", .doc = "Private key (PEM, unencrypted) of tls_cert_file."},
    {.name = "max_streams", .type = KB_CT_INT, .off = TOP(http_max_streams), .def = "16", .min = 1, .max = 1000,
     .doc = "Bodies sent at once: snapshots, replays, Kubernetes API lists, and watches while they send "
            "initial events; more are answered 429 (counted in kbridge_http_refused_total)."},
    {.name = "max_per_address", .type = KB_CT_INT, .off = TOP(http_max_per_address), .def = "16", .min = 1,
     .max = 100000, .doc = "Open connections from one client address; more are closed at once."},
    {.name = "header_timeout", .type = KB_CT_INT, .off = TOP(http_header_timeout), .def = "10", .min = 1,
     .max = 3600, .doc = "Seconds a client has to send its whole request (line, headers and body) before it "
                         "is closed, however steadily it trickles; the probes keep answering meanwhile."},
};
static const kb_csection_t kb_sec_http = {
    .title = "http", .doc = "The HTTP API.", .line_off = offsetof(kb_config_t, http_line),
    .keys = kb_keys_http, .n_keys = KB_NKEYS(kb_keys_http), .disc = -1,
};

static const kb_ckey_t kb_keys_kapi[] = {
    {.name = "enabled", .type = KB_CT_BOOL, .off = TOP(kapi_enabled), .def = "true",
     .doc = "Serve the Kubernetes API (discovery, get, list, watch; read-only) for every informer's resource on "
            "http.listen, so kubectl and client-go can use kbridge as a read replica (docs/replica.md)."},
    {.name = "watch_history", .type = KB_CT_INT, .off = TOP(kapi_history), .def = "10000", .min = 1,
     .max = 10000000,
     .doc = "Changes kept in memory per informer for watches that resume from a resourceVersion; an older "
            "resourceVersion is answered 410 Expired (the client lists again)."},
    {.name = "bookmark_seconds", .type = KB_CT_INT, .off = TOP(kapi_bookmark_seconds), .def = "60", .min = 1,
     .max = 3600, .doc = "A watch with allowWatchBookmarks=true gets a BOOKMARK at least this often."},
    {.name = "max_watches", .type = KB_CT_INT, .off = TOP(kapi_max_watches), .def = "1000", .min = 1,
     .max = 100000,
     .doc = "Open watches at most (each holds a connection and a thread); more are answered 429."},
};
static const kb_csection_t kb_sec_kapi = {
    .title = "kube_api", .doc = "The Kubernetes API surface (a read replica of the informers' caches).",
    .line_off = SIZE_MAX, .keys = kb_keys_kapi, .n_keys = KB_NKEYS(kb_keys_kapi), .disc = -1,
};

static const kb_ckey_t kb_keys_sharding[] = {
    {.name = "replicas", .type = KB_CT_INT, .off = TOP(sharding_replicas), .def = "1", .min = 1, .max = 1024,
     .doc = "Number of bridge replicas sharing the work; each handles the keys whose FNV-1a hash mod "
            "replicas equals its index (with server_side \"off\"; else see server_side)."},
    {.name = "index", .type = KB_CT_INT, .off = TOP(sharding_index), .def = "0", .min = -1, .max = 1023,
     .doc = "This replica's index, below replicas. -1: the ordinal N of a StatefulSet pod name "
            "`<name>-<N>` in `$HOSTNAME`."},
    {.name = "server_side", .type = KB_CT_ENUM, .off = TOP(sharding_server_side), .def = "off",
     .values = kb_v_server_side,
     .doc = "With replicas > 1, whether each replica asks the API server for its share only (kube-apiserver "
            "1.36+, feature gate ShardedListAndWatch): \"off\" reads everything and keeps the keys of its "
            "index by FNV-1a(namespace/name) mod replicas; \"auto\" and \"on\" own the objects whose "
            "FNV-1a(server_field) lies in range index of [0, 2^64) cut into replicas equal ranges, send that "
            "range as shardSelector on every list and watch, and drop what a server ignoring it sends anyway "
            "(\"auto\" then stops asking, \"on\" reports an error). A re-created name may change replica "
            "(docs/cluster.md, Server-side sharding). A change moves keys like a change of replicas."},
    {.name = "server_field", .type = KB_CT_ENUM, .off = TOP(sharding_server_field), .def = "uid",
     .values = kb_v_server_field,
     .doc = "What server_side sharding hashes: \"uid\" (even spread; a re-created name may move to another "
            "replica) or \"namespace\" (a namespace stays on one replica, so does every name in it; the "
            "spread is uneven: few namespaces, and FNV-1a's top bits mix names that differ only at the end "
            "poorly — docs/cluster.md)."},
};
static const kb_csection_t kb_sec_sharding = {
    .title = "sharding", .doc = "Splitting the objects across several bridge processes.", .line_off = SIZE_MAX,
    .keys = kb_keys_sharding, .n_keys = KB_NKEYS(kb_keys_sharding), .disc = -1,
};

static const kb_ckey_t kb_keys_ha[] = {
    {.name = "enabled", .type = KB_CT_BOOL, .off = TOP(ha_enabled), .def = "false",
     .doc = "Leader election on a coordination.k8s.io/v1 Lease, one per shard index: the leader delivers, a "
            "warm standby (same config and shard) runs its informers and journal and delivers nothing until "
            "it takes over (docs/cluster.md, High availability)."},
    {.name = "lease_name", .type = KB_CT_STRING, .off = TOP(ha_lease_name), .def = "kbridge-{cluster}-{shard}",
     .doc = "The Lease's name; {cluster} is cluster.name, {shard} is sharding.index."},
    {.name = "lease_namespace", .type = KB_CT_STRING, .off = TOP(ha_lease_namespace), .def = "",
     .doc = "The Lease's namespace; \"\" = the pod's namespace (its service account's), else \"default\"."},
    {.name = "lease_seconds", .type = KB_CT_INT, .off = TOP(ha_lease_seconds), .def = "15", .min = 3,
     .max = 3600,
     .doc = "leaseDurationSeconds: a standby takes over after seeing the Lease unchanged this long; a leader "
            "that has not renewed within it minus 1 s stops handing messages to sinks."},
    {.name = "renew_seconds", .type = KB_CT_INT, .off = TOP(ha_renew_seconds), .def = "5", .min = 1,
     .max = 1200,
     .doc = "How often the leader renews the Lease and publishes its watermarks there, and the standby reads "
            "it; below lease_seconds - 1."},
    {.name = "identity", .type = KB_CT_STRING, .off = TOP(ha_identity), .def = "$HOSTNAME",
     .doc = "holderIdentity written to the Lease; \"$HOSTNAME\" is replaced by the host name. Must differ "
            "between the replicas of a shard."},
};
static const kb_csection_t kb_sec_ha = {
    .title = "ha", .doc = "High availability: a leader and a warm standby per shard.", .line_off = SIZE_MAX,
    .keys = kb_keys_ha, .n_keys = KB_NKEYS(kb_keys_ha), .disc = -1,
};

/* ---- informers ---------------------------------------------------------- */

#define INF(field) KB_OFF(kb_config_informer_t, field)
static const kb_ckey_t kb_keys_informer[] = {
    {.name = "name", .type = KB_CT_STRING, .off = INF(name),
     .flags = KB_CF_REQUIRED | KB_CF_NONEMPTY | KB_CF_NAME | KB_CF_UNIQUE,
     .doc = "Unique name; routes, metrics and the HTTP API refer to it."},
    {.name = "group", .type = KB_CT_STRING, .off = INF(group), .def = "",
     .doc = "API group; \"\" for the core group."},
    {.name = "version", .type = KB_CT_STRING, .off = INF(version), .def = "v1", .flags = KB_CF_NONEMPTY,
     .doc = "API version."},
    {.name = "resource", .type = KB_CT_STRING, .off = INF(resource), .flags = KB_CF_REQUIRED | KB_CF_NONEMPTY,
     .doc = "Resource (plural, lower case), e.g. \"pods\", \"deployments\"."},
    {.name = "namespaces", .type = KB_CT_STRLIST, .off = INF(namespaces), .def = "",
     .doc = "Namespaces to watch, one watch each; empty = all (one cluster-wide watch)."},
    {.name = "label_selector", .type = KB_CT_STRING, .off = INF(label_selector), .def = "",
     .doc = "Server-side label selector for list and watch."},
    {.name = "field_selector", .type = KB_CT_STRING, .off = INF(field_selector), .def = "",
     .doc = "Server-side field selector for list and watch."},
    {.name = "page_size", .type = KB_CT_INT, .off = INF(page_size), .def = "500", .min = 1, .max = 100000,
     .doc = "Objects per list page (limit=)."},
    {.name = "list_mode", .type = KB_CT_ENUM, .off = INF(list_mode), .def = "auto", .values = kb_v_list_mode,
     .doc = "How the initial sync and every relist read the collection. auto: a streamed list (a watch with "
            "sendInitialEvents=true, the server sends every object as ADDED, then a bookmark, then stays on the "
            "same stream), which spares the API server the memory of a paged list; if the server refuses it "
            "(the WatchList feature off, an older server), the informer uses paged lists from then on and says so "
            "once in the log. stream: always streamed; a refusal is an error, retried with backoff. paged: always "
            "paged lists (limit=page_size, continue)."},
    {.name = "cache_compression", .type = KB_CT_ENUM, .off = INF(cache_compression), .def = "auto",
     .values = kb_v_cache_compression,
     .doc = "How the informer's cache holds objects when there is no state_dir. auto: zstd-compressed with a "
            "dictionary trained from the informer's first objects (about 1,000), retrained when the ratio "
            "falls by a quarter; a 3.5 KB Pod then takes a few hundred bytes of memory instead of its size. "
            "off: the objects as they are (more memory, no compression work). With state_dir the cache keeps "
            "identity only and the objects live in state_dir: auto compresses them there with the same kind of "
            "dictionary (stored in state_dir), off with zstd alone."},
    {.name = "min_watch_timeout", .type = KB_CT_INT, .off = INF(min_watch_timeout), .def = "300", .min = 5,
     .max = 3600,
     .doc = "t, in seconds: each watch asks the API server to end it after a time drawn from [t, 2t) "
            "(timeoutSeconds, as client-go's reflector does), and the informer resumes it from the last "
            "resourceVersion without a relist. The spread keeps many watches from reconnecting at once; a "
            "smaller t only makes the ends (and the reconnections) more frequent."},
    {.name = "resync_seconds", .type = KB_CT_INT, .off = INF(resync_seconds), .def = "0", .min = 0,
     .max = 31536000, .doc = "Every so many seconds queue a SYNC for each cached object with nothing pending; 0 = never."},
    {.name = "audit_seconds", .type = KB_CT_INT, .off = INF(audit_seconds), .def = "0", .min = 0, .max = 31536000,
     .doc = "Every so many seconds compare a metadata-only list with the cache and repair what the watch missed "
            "(600 is a good value); 0 = never."},
    {.name = "audit_relist_ratio", .type = KB_CT_FLOAT, .off = INF(audit_relist_ratio), .def = "0.05", .min = 0,
     .max = 1, .doc = "When an audit finds more than this fraction of the objects drifted, relist in full instead of "
                      "repairing one by one."},
    {.name = "shards", .type = KB_CT_INT, .off = INF(shards), .def = "4", .min = 1, .max = 256,
     .doc = "Worker queues in this process; one object always goes to the same shard."},
    {.name = "compaction", .type = KB_CT_ENUM, .off = INF(compaction), .def = "none", .values = kb_v_compaction,
     .doc = "none: deliver every change; latest: merge the queued changes of one object."},
    {.name = "coalesce_ms", .type = KB_CT_INT, .off = INF(coalesce_ms), .def = "0", .min = 0, .max = 3600000,
     .doc = "With compaction = \"latest\": an object's queued changes wait up to this long from the first one "
            "so a burst merges into one message (each change waits at most this long; a delete goes at once). "
            "0 = off. Only with compaction = \"latest\"."},
    {.name = "drop_fields", .type = KB_CT_STRLIST, .off = INF(drop_fields),
     .def = "metadata.managedFields," KB_CONFIG_LAST_APPLIED_PATH,
     .flags = KB_CF_PATH,
     .doc = "Field paths removed from every object: dot-separated names, a [bracketed] segment taken whole "
            "(metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]); when a path reaches "
            "an array it applies to each element. On core secrets the last-applied-configuration annotation "
            "(it holds the whole Secret as applied, values in clear) is removed in addition to these, "
            "unless emit_secret_values = true."},
    {.name = "redact_fields", .type = KB_CT_STRLIST, .off = INF(redact_fields),
     .def = "", .defdoc = "[] (core secrets: data and stringData added)",
     .flags = KB_CF_PATH,
     .doc = "Field paths whose values are replaced by a fixed value that stays valid for the field (an object "
            "keeps its keys): `\"<redacted>\"` in a string field, `\"PHJlZGFjdGVkPg==\"` (the base64 of "
            "`<redacted>`) in a base64 field — a Secret's data, a ConfigMap's binaryData — so kubectl and "
            "typed clients still decode the object. On core secrets data and stringData are redacted in "
            "addition to these, unless emit_secret_values = true."},
    {.name = "emit_secret_values", .type = KB_CT_BOOL, .off = INF(emit_secret_values), .def = "false",
     .doc = "Core secrets only: true sends Secret values in clear — data, stringData and the "
            "last-applied-configuration annotation are then shaped by drop_fields and redact_fields alone — "
            "and the bridge warns at start and in --check. false (the default): whatever drop_fields and "
            "redact_fields say, data and stringData are redacted and the annotation removed."},
    {.name = "keep_fields", .type = KB_CT_STRLIST, .off = INF(keep_fields), .def = "", .flags = KB_CF_PATH,
     .doc = "Allow-list of field paths: when set, only these survive, plus kind, apiVersion and "
            "metadata.name/namespace/uid/resourceVersion/labels. drop_fields and redact_fields still apply "
            "inside what is kept; [] keeps everything."},
    {.name = "index_labels", .type = KB_CT_STRLIST, .off = INF(index_labels), .def = "",
     .doc = "Label keys indexed for snapshot / list queries: a label selector with an equality term on one of "
            "them (app=web, app in (web,db)) reads only the matching objects instead of the whole cache. Each "
            "costs a few tens of bytes per object that has the label. At most 16 keys."},
    {.name = "queue_bytes", .type = KB_CT_INT64, .off = INF(queue_bytes), .def = "67108864",
     .defdoc = "67108864 (64 MiB)", .min = 65536, .max = 1099511627776.0,
     .doc = "Bound on the bytes queued over all shards; when full the bridge stops reading the watch."},
};
#undef INF

/* grp's label_selector parses (common/selector.h), or a config error naming it. */
static bool kb_selector_valid(kb_loader_t *ld, const config_setting_t *grp, const char *prefix, const char *text) {
    char err[256];
    kb_selector_t *sel = kb_selector_parse(text, err, sizeof(err));
    if (!sel)
        return kb_config__fail(ld, config_setting_get_member(grp, "label_selector"), "%s.label_selector: %s",
                               prefix, err);
    kb_selector_free(sel);
    return true;
}

/* index_labels are label keys (what a selector may name), at most KB_CONFIG_INDEX_LABELS_MAX. */
static bool kb_index_labels_valid(kb_loader_t *ld, const config_setting_t *grp, const char *prefix,
                                  const kb_strlist_t *keys) {
    const config_setting_t *at = config_setting_get_member(grp, "index_labels");
    static const char key_chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/";
    if (keys->n > KB_CONFIG_INDEX_LABELS_MAX)
        return kb_config__fail(ld, at, "%s.index_labels: at most %d keys", prefix, KB_CONFIG_INDEX_LABELS_MAX);
    for (size_t i = 0; i < keys->n; i++) {
        const char *k = keys->v[i];
        size_t n = strlen(k);
        bool ok = n > 0 && n <= 316 && strspn(k, key_chars) == n;
        if (!ok)
            return kb_config__fail(ld, at, "%s.index_labels: \"%.80s\" is not a label key", prefix, k);
    }
    return true;
}

/* Append path to list unless it is there already. */
static void kb_strlist_add_once(kb_strlist_t *list, const char *path) {
    for (size_t i = 0; i < list->n; i++)
        if (strcmp(list->v[i], path) == 0)
            return;
    list->v = kb_realloc(list->v, (list->n + 1) * sizeof(char *));
    list->v[list->n++] = kb_strdup(path);
}

/* A Secret's values leave only when the file says emit_secret_values = true:
 * the user's own drop_fields and redact_fields add to the protection, never
 * replace it. Only the core group's "secrets" is a Secret. */
static bool kb_secret_protect(kb_loader_t *ld, kb_config_informer_t *inf, const config_setting_t *grp,
                              const char *prefix) {
    static const char *const redact[] = {"data", "stringData"};
    if (!kb_config_informer_is_secrets(inf)) {
        if (inf->emit_secret_values)
            return kb_config__fail(ld, config_setting_get_member(grp, "emit_secret_values"),
                                   "%s.emit_secret_values: only for resource = \"secrets\" of the core group",
                                   prefix);
        return true;
    }
    if (inf->emit_secret_values)
        return true;
    for (size_t i = 0; i < KB_ARRAY_LEN(redact); i++)
        kb_strlist_add_once(&inf->redact_fields, redact[i]);
    kb_strlist_add_once(&inf->drop_fields, KB_CONFIG_LAST_APPLIED_PATH);
    return true;
}

static bool kb_finish_informer(kb_loader_t *ld, void *base, size_t index, const config_setting_t *grp,
                               const char *prefix) {
    KB_UNUSED(index);
    kb_config_informer_t *inf = base;
    /* The server would refuse a bad selector with a 400 on every list, for ever: say it at load. */
    if (!kb_selector_valid(ld, grp, prefix, inf->label_selector))
        return false;
    if (!kb_index_labels_valid(ld, grp, prefix, &inf->index_labels))
        return false;
    /* Without merging, holding changes back only adds latency. */
    if (inf->coalesce_ms > 0 && inf->compaction != KB_COMPACTION_LATEST)
        return kb_config__fail(ld, config_setting_get_member(grp, "coalesce_ms"),
                               "%s.coalesce_ms: needs compaction = \"latest\"", prefix);
    return kb_secret_protect(ld, inf, grp, prefix);
}

bool kb_config_informer_is_secrets(const kb_config_informer_t *inf) {
    return strcmp(inf->group, "") == 0 && strcmp(inf->resource, "secrets") == 0;
}

const kb_csection_t kb_config__sec_informer = {
    .title = "informers",
    .doc = "A list of groups, one per watched resource: `informers = ( { name = \"pods\"; resource = \"pods\"; } );`. "
           "With state_dir set, SIGHUP refuses to rebuild an informer whose keys changed (a restart applies it, "
           "see state_dir).",
    .size = sizeof(kb_config_informer_t), .line_off = offsetof(kb_config_informer_t, line),
    .keys = kb_keys_informer, .n_keys = KB_NKEYS(kb_keys_informer), .disc = -1, .finish = kb_finish_informer,
};

/* ---- sinks -------------------------------------------------------------- */

#define SNK(field) KB_OFF(kb_config_sink_t, field)
static const kb_ckey_t kb_keys_sink[] = {
    {.name = "name", .type = KB_CT_STRING, .off = SNK(name),
     .flags = KB_CF_REQUIRED | KB_CF_NONEMPTY | KB_CF_NAME | KB_CF_UNIQUE,
     .doc = "Unique name; routes refer to it."},
    {.name = "type", .type = KB_CT_ENUM, .off = SNK(type), .values = kb_v_sink_type, .flags = KB_CF_REQUIRED,
     .doc = "Kind of sink; the keys below marked with a type are valid only for it."},
    {.name = "on_refused", .type = KB_CT_ENUM, .off = SNK(on_refused), .def = "stop", .values = kb_v_refused,
     .doc = "A message the sink can never deliver (too large, invalid topic, not authorized, rejected for good): "
            "\"stop\" stops this sink loudly (ERROR log naming the object, /readyz 503, "
            "kbridge_sink_refused_total) while the other sinks go on, and holds its watermark there so nothing is "
            "dropped — SIGHUP or a restart tries it again; \"dead_letter\" sends it to the sink named by "
            "dead_letter, with the reason, and goes on."},
    {.name = "dead_letter", .type = KB_CT_STRING, .off = SNK(dead_letter), .def = "",
     .doc = "With on_refused = \"dead_letter\": the sink (any type) that receives refused messages, as the "
            "normal envelope plus \"deadLetter\": {sink, reason, at}. If it refuses one too, this sink stops."},
    {.name = "path", .type = KB_CT_STRING, .off = SNK(path), .def = "-", .only = FILE_ONLY,
     .flags = KB_CF_NONEMPTY | KB_CF_FILE,
     .doc = "File to append JSON Lines to; \"-\" = stdout. Reopened on SIGHUP and when the path no longer "
            "names the open file (after logrotate's rename + create, or rm). Whole lines only: a torn last line "
            "left by a crash is cut at the next start (logged with the bytes cut). A FIFO is opened for writing "
            "only: while no reader has it open nothing is written or acknowledged and /readyz says so; see "
            "guarantees.md for what a pipe can lose."},
    {.name = "follow_symlinks", .type = KB_CT_BOOL, .off = SNK(follow_symlinks), .def = "false", .only = FILE_ONLY,
     .doc = "false: a symbolic link at path is refused (the sink would otherwise write to, and cut the torn "
            "tail of, whatever file the link points at); true: follow it."},
    {.name = "file_mode", .type = KB_CT_STRING, .off = SNK(file_mode), .def = "0600", .only = FILE_ONLY,
     .flags = KB_CF_NONEMPTY,
     .doc = "Permission bits (octal) of an output file the sink creates, whatever the umask; an existing "
            "file keeps its mode."},
    {.name = "brokers", .type = KB_CT_STRING, .off = SNK(brokers), .def = "", .only = KAFKA_ONLY,
     .flags = KB_CF_REQUIRED | KB_CF_NONEMPTY, .doc = "Bootstrap brokers, \"host:port,host:port\"."},
    {.name = "properties", .type = KB_CT_PROPS, .off = SNK(properties), .off2 = SNK(n_properties),
     .def = "", .only = KAFKA_ONLY,
     .doc = "librdkafka properties passed as-is: a group of name = value; quote names with dots: "
            "{ \"compression.type\" = \"lz4\"; }."},
    {.name = "transactional", .type = KB_CT_BOOL, .off = SNK(transactional), .def = "false", .only = KAFKA_ONLY,
     .doc = "Exactly-once: each batch and its checkpoint are committed in one Kafka transaction."},
    {.name = "checkpoint_topic", .type = KB_CT_STRING, .off = SNK(checkpoint_topic),
     .def = "__kbridge_checkpoints", .only = KAFKA_ONLY, .flags = KB_CF_NONEMPTY,
     .doc = "Topic that holds checkpoints in transactional mode."},
    {.name = "uri", .type = KB_CT_STRING, .off = SNK(uri), .def = "", .only = MQTT_ONLY,
     .flags = KB_CF_REQUIRED | KB_CF_NONEMPTY,
     .doc = "Broker URI, e.g. \"tcp://127.0.0.1:1883\" or \"ssl://host:8883\". A URI with user:password@ is "
            "refused: set username and password_file."},
    {.name = "client_id", .type = KB_CT_STRING, .off = SNK(client_id), .defdoc = "\"kbridge-<cluster.name>\"",
     .only = MQTT_ONLY, .flags = KB_CF_NONEMPTY,
     .doc = "MQTT client identifier. With ha.enabled the default gets \"-<ha.identity>\" appended: two "
            "replicas with one id would take each other's session over, back and forth."},
    {.name = "qos", .type = KB_CT_INT, .off = SNK(qos), .def = "1", .min = 0, .max = 2, .only = MQTT_ONLY,
     .doc = "Quality of service of published messages."},
    {.name = "version", .type = KB_CT_INT, .off = SNK(version), .def = "5", .min = 3, .max = 5,
     .values = kb_v_mqtt_version, .only = MQTT_ONLY, .doc = "MQTT protocol: 5, or 3 for MQTT 3.1.1."},
    {.name = "username", .type = KB_CT_STRING, .off = SNK(username), .def = "", .only = MQTT_ONLY,
     .doc = "User name for the broker. Without password_file the login sends no password (MQTT's "
            "username-only login; --check prints \"(no password)\")."},
    {.name = "password_file", .type = KB_CT_STRING, .off = SNK(password_file), .def = "", .only = MQTT_ONLY,
     .flags = KB_CF_FILE, .doc = "File holding the password (kept out of the config): its first line. An "
                                 "empty first line (an unfilled Secret) is refused at --check and start; it "
                                 "needs username."},
    {.name = "ca_file", .type = KB_CT_STRING, .off = SNK(ca_file), .def = "", .only = MQTT_ONLY,
     .flags = KB_CF_FILE, .doc = "CA bundle (PEM) for ssl:// brokers."},
    {.name = "cert_file", .type = KB_CT_STRING, .off = SNK(cert_file), .def = "", .only = MQTT_ONLY,
     .flags = KB_CF_FILE, .doc = "Client certificate (PEM)."},
    {.name = "key_file", .type = KB_CT_STRING, .off = SNK(key_file), .def = "", .only = MQTT_ONLY,
     .flags = KB_CF_FILE, .doc = "Private key (PEM) of cert_file."},
    {.name = "keepalive", .type = KB_CT_INT, .off = SNK(keepalive), .def = "30", .min = 0, .max = 65535,
     .only = MQTT_ONLY, .doc = "Keep-alive interval in seconds (0: off). The mosquitto client needs 0 or at "
                               "least 5 (libmosquitto refuses 1 to 4); --check says so."},
    {.name = "max_inflight", .type = KB_CT_INT, .off = SNK(max_inflight), .def = "256", .min = 1, .max = 65535,
     .only = MQTT_ONLY, .doc = "Messages published but not yet acknowledged, at most (the broker's Receive "
                               "Maximum lowers it)."},
    {.name = "client", .type = KB_CT_ENUM, .off = SNK(mqtt_client), .def = "mosquitto",
     .values = kb_v_mqtt_client, .only = MQTT_ONLY,
     .doc = "MQTT client library: \"mosquitto\" (libmosquitto, the faster) or \"paho\" (Eclipse Paho C)."},
    {.name = "allow_plaintext_password", .type = KB_CT_BOOL, .off = SNK(allow_plaintext_password),
     .def = "false", .only = MQTT_ONLY,
     .doc = "Allow password_file over tcp:// (no TLS) to a broker that is not on this machine."},
};
#undef SNK

const kb_csection_t kb_config__sec_sink = {
    .title = "sinks",
    .doc = "A list of groups, one per destination: `sinks = ( { name = \"out\"; type = \"file\"; } );`",
    .size = sizeof(kb_config_sink_t), .line_off = offsetof(kb_config_sink_t, line),
    .keys = kb_keys_sink, .n_keys = KB_NKEYS(kb_keys_sink), .disc = 1, .finish = kb_config__finish_sink,
};

/* ---- routes ------------------------------------------------------------- */

#define RT(field) KB_OFF(kb_config_route_t, field)
static const kb_ckey_t kb_keys_route[] = {
    {.name = "name", .type = KB_CT_STRING, .off = RT(name), .defdoc = "\"<informer>-<sink>-<index>\"",
     .flags = KB_CF_NONEMPTY | KB_CF_NAME | KB_CF_UNIQUE,
     .doc = "Unique name (POST /v1/snapshot/{informer}?route=NAME)."},
    {.name = "informer", .type = KB_CT_STRING, .off = RT(informer), .flags = KB_CF_REQUIRED,
     .doc = "Name of the informer whose changes this route carries."},
    {.name = "sink", .type = KB_CT_STRING, .off = RT(sink), .flags = KB_CF_REQUIRED,
     .doc = "Name of the sink they go to."},
    {.name = "topic", .type = KB_CT_STRING, .off = RT(topic), .def = "", .flags = KB_CF_TEMPLATE,
     .doc = "Topic template; \"\" = the sink's default (Kafka \"k8s.{cluster}.{resource}\", MQTT "
            "\"k8s/{cluster}/{resource}/{namespace}/{name}\"). Variables: {cluster} {group} {version} "
            "{resource} {kind} {namespace} {name} {uid} {type} {labels.KEY} {annotations.KEY}; any may take a "
            "default for an empty value: {labels.app|unknown}."},
    {.name = "key", .type = KB_CT_STRING, .off = RT(key), .def = "{namespace}/{name}", .flags = KB_CF_TEMPLATE,
     .doc = "Message key template (Kafka key, CloudEvents partitionkey)."},
    {.name = "types", .type = KB_CT_TYPES, .off = RT(types), .off2 = RT(types_set), .flags = KB_CF_SEEN,
     .defdoc = "[ \"ADDED\", \"MODIFIED\", \"DELETED\", \"SYNC\", \"SNAPSHOT\" ]",
     .doc = "Change types delivered: ADDED, MODIFIED, DELETED, SYNC, SNAPSHOT."},
    {.name = "namespaces", .type = KB_CT_STRLIST, .off = RT(namespaces), .def = "",
     .doc = "Client-side filter: only objects in these namespaces; empty = all."},
    {.name = "label_selector", .type = KB_CT_STRING, .off = RT(label_selector), .def = "",
     .doc = "Client-side filter: only objects whose labels match."},
    {.name = "field_selector", .type = KB_CT_STRING, .off = RT(field_selector), .def = "",
     .doc = "Client-side filter: only objects whose fields match, in the kube API's field selector syntax and "
            "names for the informer's resource (\"status.phase=Running,spec.nodeName!=n1\" for Pods, "
            "\"reason=BackOff,type=Warning\" for Events; metadata.name and metadata.namespace for all). "
            "An unknown field is a load error. Read from the object as projected: keep_fields must keep it."},
    {.name = "format", .type = KB_CT_ENUM, .off = RT(format), .def = "json", .values = kb_v_format,
     .doc = "Envelope: kbridge JSON, or CloudEvents 1.0 structured or binary mode."},
    {.name = "mode", .type = KB_CT_ENUM, .off = RT(mode), .def = "events", .values = kb_v_mode,
     .doc = "events: every change; state: latest object per key (Kafka tombstones, MQTT retained)."},
    {.name = "suppress_noop", .type = KB_CT_BOOL, .off = RT(suppress_noop), .def = "false",
     .doc = "Opt-in: skip a MODIFIED whose object (as projected, apart from metadata.resourceVersion) is byte-identical "
            "to what this route last delivered for the key; also a SYNC unless `types` lists SYNC explicitly. "
            "ADDED, DELETED and SNAPSHOT always go. See docs/routing.md."},
    {.name = "heartbeat_seconds", .type = KB_CT_INT, .off = RT(heartbeat_seconds), .def = "0", .min = 0,
     .max = 86400,
     .doc = "Every so many seconds send a small HEARTBEAT record (cluster, informer, route, last "
            "resourceVersion, time) so consumers can tell quiet from dead; 0 = never."},
};
#undef RT

/* grp's field_selector parses as the kube API would parse it for the
 * informer's resource (common/fieldsel.h: same labels, same errors). */
static bool kb_field_selector_valid(kb_loader_t *ld, const config_setting_t *grp, const char *prefix,
                                    const kb_config_route_t *route) {
    const kb_config_informer_t *inf = kb_config_find_informer(ld->cfg, route->informer);
    char err[1024];
    kb_fieldsel_t *sel = NULL;
    if (!kb_fieldsel_parse(kb_fields_kind(inf->group, inf->resource), route->field_selector, &sel, err, sizeof(err)))
        return kb_config__fail(ld, config_setting_get_member(grp, "field_selector"), "%s.field_selector: %s",
                               prefix, err);
    kb_fieldsel_free(sel);
    return true;
}

/* A route's label_selector and field_selector are evaluated by the bridge
 * (client-side), so they are checked at load like a template, not first at
 * start. */
static bool kb_finish_route(kb_loader_t *ld, void *base, size_t index, const config_setting_t *grp,
                            const char *prefix) {
    if (!kb_config__finish_route(ld, base, index, grp, prefix))
        return false;
    const kb_config_route_t *route = base;
    return kb_selector_valid(ld, grp, prefix, route->label_selector) &&
           kb_field_selector_valid(ld, grp, prefix, route);
}

static const kb_csection_t kb_sec_route = {
    .title = "routes",
    .doc = "A list of groups, each sending one informer's changes to one sink (at least one route, "
           "unless the informers are served by the kube API only: docs/replica.md): `routes = ( { informer = \"pods\"; sink = \"out\"; } );`",
    .size = sizeof(kb_config_route_t), .line_off = offsetof(kb_config_route_t, line),
    .keys = kb_keys_route, .n_keys = KB_NKEYS(kb_keys_route), .disc = -1, .finish = kb_finish_route,
};

/* ---- top level ---------------------------------------------------------- */

static const kb_ckey_t kb_keys_root[] = {
    {.name = "cluster", .type = KB_CT_GROUP, .off = TOP(cluster), .sub = &kb_sec_cluster},
    {.name = "state_dir", .type = KB_CT_STRING, .off = TOP(state_dir), .flags = KB_CF_FILE, .def = "",
     .doc = "Directory for checkpoints and the persisted index; \"\" = memory only. Each informer's state "
            "records its definition (resource, namespaces, selectors, drop/redact/keep fields, compaction): a "
            "start with another definition logs what changed and lists again instead of resuming, so the sinks "
            "converge to the new definition (objects that no longer match leave as DELETED finalStateUnknown). "
            "SIGHUP refuses such a change; it applies on restart."},
    {.name = "shutdown_timeout", .type = KB_CT_INT, .off = TOP(shutdown_timeout), .def = "10", .min = 0,
     .max = 3600, .flags = KB_CF_LIVE, .doc = "Seconds to deliver what is queued on SIGTERM/SIGINT before exiting."},
    {.name = "journal", .type = KB_CT_GROUP, .off = 0, .sub = &kb_sec_journal},
    {.name = "log", .type = KB_CT_GROUP, .off = 0, .sub = &kb_sec_log},
    {.name = "http", .type = KB_CT_GROUP, .off = 0, .sub = &kb_sec_http},
    {.name = "kube_api", .type = KB_CT_GROUP, .off = 0, .sub = &kb_sec_kapi},
    {.name = "sharding", .type = KB_CT_GROUP, .off = 0, .sub = &kb_sec_sharding},
    {.name = "ha", .type = KB_CT_GROUP, .off = 0, .sub = &kb_sec_ha},
    {.name = "informers", .type = KB_CT_LIST, .off = TOP(informers), .off2 = TOP(n_informers),
     .sub = &kb_config__sec_informer},
    {.name = "sinks", .type = KB_CT_LIST, .off = TOP(sinks), .off2 = TOP(n_sinks), .sub = &kb_config__sec_sink},
    {.name = "routes", .type = KB_CT_LIST, .off = TOP(routes), .off2 = TOP(n_routes), .sub = &kb_sec_route},
};
#undef TOP

const kb_csection_t kb_config__root = {
    .title = "top level", .doc = "Keys outside any group.", .line_off = SIZE_MAX,
    .keys = kb_keys_root, .n_keys = KB_NKEYS(kb_keys_root), .disc = -1, .finish = kb_config__finish_root,
};

/* ---- reference ------------------------------------------------------------ */

static const char *const kb_type_names[] = {
    [KB_CT_STRING] = "string", [KB_CT_INT] = "integer", [KB_CT_INT64] = "integer",
    [KB_CT_FLOAT] = "float", [KB_CT_BOOL] = "boolean", [KB_CT_ENUM] = "enum", [KB_CT_CHOICE] = "enum",
    [KB_CT_STRLIST] = "list of strings", [KB_CT_TYPES] = "list of strings",
    [KB_CT_PROPS] = "group of name = value", [KB_CT_GROUP] = "group", [KB_CT_LIST] = "list of groups",
};

/* The default in libconfig syntax: strings quoted, lists bracketed. */
static void kb_print_default(FILE *out, const kb_ckey_t *k) {
    if (k->defdoc) {
        fputs(k->defdoc, out);
        return;
    }
    if (!k->def) {
        fputs("(required)", out);
        return;
    }
    switch (k->type) {
    case KB_CT_STRING:
    case KB_CT_CHOICE:
    case KB_CT_ENUM:
        fprintf(out, "\"%s\"", k->def);
        break;
    case KB_CT_STRLIST:
        if (!*k->def) {
            fputs("[]", out);
            break;
        }
        fputs("[ ", out);
        for (const char *p = k->def; *p;) {
            size_t n = strcspn(p, ",");
            fprintf(out, "%s\"%.*s\"", p == k->def ? "" : ", ", (int)n, p);
            p += n + (p[n] == ',');
        }
        fputs(" ]", out);
        break;
    case KB_CT_PROPS:
        fputs("{}", out);
        break;
    default:
        fputs(k->def, out);
    }
}

static void kb_print_constraints(FILE *out, const kb_ckey_t *k) {
    if (k->values) {
        fputs("; one of ", out);
        for (size_t i = 0; k->values[i]; i++)
            fprintf(out, k->type == KB_CT_INT ? "%s%s" : "%s\"%s\"", i ? ", " : "", k->values[i]);
    } else if (k->min < k->max) {
        fprintf(out, "; %.15g to %.15g", k->min, k->max);
    }
    if ((k->flags & KB_CF_REQUIRED) && !k->only)
        fputs("; required", out);
    else if (k->flags & KB_CF_REQUIRED)
        fputs("; required for this type", out);
    if (k->flags & KB_CF_NAME)
        fputs("; letters, digits, '.', '_', '-'", out);
    if (k->flags & KB_CF_UNIQUE)
        fputs("; unique", out);
    if (k->flags & KB_CF_FILE)
        fputs("; a leading ~/ is $HOME/", out);
}

/* What SIGHUP does when the key changed (config/reload.c's rule). */
static void kb_print_reload(FILE *out, const kb_csection_t *sec, const kb_ckey_t *k) {
    if (k->flags & KB_CF_LIVE)
        fputs("; SIGHUP applies a change in place", out);
    else if (k->flags & KB_CF_RESTART || sec->size == 0) /* the top level and its groups */
        fputs("; a change needs a restart", out);
    else if (sec == &kb_config__sec_informer || sec == &kb_config__sec_sink)
        fprintf(out, "; SIGHUP rebuilds the %s when it changes", sec == &kb_config__sec_sink ? "sink" : "informer");
    else /* routes: every reload swaps them in */
        fputs("; SIGHUP applies a change in place", out);
}

static void kb_print_only(FILE *out, const kb_csection_t *sec, const kb_ckey_t *k) {
    if (!k->only || sec->disc < 0)
        return;
    const kb_ckey_t *d = &sec->keys[sec->disc];
    for (unsigned v = 0; d->values[v]; v++)
        if (k->only & (1u << v))
            fprintf(out, " [%s = \"%s\"]", d->name, d->values[v]);
}

/* The text reference (--help-config, the man page's CONFIGURATION, which
 * man indents by 7 more) is filled to this width: 80 columns on a terminal. */
#define KB_REF_WIDTH 72

static void kb_print_filled(FILE *out, const char *indent, const char *text) {
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_append_filled(&b, indent, text, KB_REF_WIDTH);
    if (b.len)
        fwrite(b.data, 1, b.len, out);
    kb_buf_fini(&b);
}

/* One key of the text reference: its name, then its type, default, range and
 * reload rule, then its doc, filled. */
static void kb_print_key_text(FILE *out, const kb_csection_t *sec, const kb_ckey_t *k, const char *prefix) {
    fprintf(out, "  %s%s", prefix, k->name);
    kb_print_only(out, sec, k);
    fputc('\n', out);
    char *line = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&line, &len);
    KB_ASSERT(mem);
    fprintf(mem, "%s, default ", kb_type_names[k->type]);
    kb_print_default(mem, k);
    kb_print_constraints(mem, k);
    kb_print_reload(mem, sec, k);
    fputc('.', mem);
    fclose(mem);
    kb_print_filled(out, "      ", line);
    free(line);
    kb_print_filled(out, "      ", k->doc);
}

static void kb_print_section(FILE *out, bool md, const kb_csection_t *sec, const char *prefix) {
    if (md) {
        fprintf(out, "## %s\n\n%s\n\n", sec->title, sec->doc);
    } else {
        char head[1024];
        snprintf(head, sizeof(head), "%s — %s", sec->title, sec->doc);
        kb_print_filled(out, "", head);
        fputc('\n', out);
    }
    for (size_t i = 0; i < sec->n_keys; i++) {
        const kb_ckey_t *k = &sec->keys[i];
        if (k->type == KB_CT_GROUP || k->type == KB_CT_LIST)
            continue;
        if (!md) {
            kb_print_key_text(out, sec, k, prefix);
            continue;
        }
        fprintf(out, "### `%s%s`", prefix, k->name);
        kb_print_only(out, sec, k);
        fputs("\n\n", out);
        fprintf(out, "%s, default `", kb_type_names[k->type]);
        kb_print_default(out, k);
        fputc('`', out);
        kb_print_constraints(out, k);
        kb_print_reload(out, sec, k);
        fprintf(out, ".\n\n%s\n\n", k->doc);
    }
    if (!md)
        fputc('\n', out);
    for (size_t i = 0; i < sec->n_keys; i++) {
        const kb_ckey_t *k = &sec->keys[i];
        if (k->type != KB_CT_GROUP && k->type != KB_CT_LIST)
            continue;
        char sub[64];
        snprintf(sub, sizeof(sub), "%s%s.", k->name, k->type == KB_CT_LIST ? "[]" : "");
        kb_print_section(out, md, k->sub, sub);
    }
}

void kb_config_print_reference(FILE *out, bool md) {
    if (md)
        fputs("# Configuration reference\n\n"
              "<!-- Generated from config/table.c by kb_config_print_reference(); do not edit.\n"
              "     Regenerate: KB_UPDATE_DOCS=1 KB_SOURCE_DIR=. build/tests/test_config -->\n\n"
              "kbridge reads one libconfig file (`kbridge --config FILE`; `--check` validates it and\n"
              "prints a summary). `--check` refuses what start-up would refuse without contacting\n"
              "anyone: also a kubeconfig, token or CA file that cannot be read, an `http.token_file`\n"
              "that cannot be read or is empty or not one line (both exit 2), a file sink whose\n"
              "directory does not exist and a `state_dir` that names a file; its summary has a line\n"
              "for the cluster, http, ha, kube_api, each informer, sink and route. Comments start with `#` or `//`. Unknown keys, wrong types, values\n"
              "out of range, duplicate names, routes to unknown informers or sinks and bad templates\n"
              "are errors reported as `FILE:LINE: what is wrong`, and nothing starts.\n"
              "`kbridge --help-config` prints this reference as text.\n\n"
              "A setting name may be quoted, which librdkafka properties need:\n"
              "`properties = { \"compression.type\" = \"lz4\"; };`. Integers wider than 32 bits\n"
              "need no `L` suffix. A UTF-8 byte order mark at the start of the file is ignored.\n\n"
              "Environment variables: in every string value (lists and `properties` included),\n"
              "`${NAME}` is replaced by the variable's value and `${NAME:-default}` by the value, or by\n"
              "`default` when the variable is unset or empty; `$$` is a literal `$` (so `$${X}` is the\n"
              "text `${X}`), and a `$` before anything else stays as it is. An unset variable without a\n"
              "default is an error, `FILE:LINE: key: environment variable NAME is not set`. Values are\n"
              "expanded at every load (start and SIGHUP reload) and then checked like literal ones:\n\n"
              "    cluster = { name = \"${CLUSTER_NAME:-prod}\"; };\n"
              "    sinks = ( { name = \"k\"; type = \"kafka\"; brokers = \"${KAFKA_BROKERS}\";\n"
              "                properties = { \"sasl.username\" = \"${KAFKA_USER}\"; }; } );\n\n"
              "A minimal configuration:\n\n"
              "    cluster = { name = \"prod\"; kubeconfig = \"/etc/kbridge/kubeconfig\"; };\n"
              "    informers = ( { name = \"pods\"; resource = \"pods\"; } );\n"
              "    sinks = ( { name = \"out\"; type = \"file\"; path = \"-\"; } );\n"
              "    routes = ( { informer = \"pods\"; sink = \"out\"; } );\n\n",
              out);
    else
        fputs("kbridge configuration keys (libconfig syntax; see docs/configuration.md)\n\n", out);
    kb_print_section(out, md, &kb_config__root, "");
}

void kb_config_print_restart_only(FILE *out) {
    const char *names[32];
    size_t n = 0;
    for (size_t i = 0; i < kb_config__root.n_keys; i++) {
        const kb_ckey_t *k = &kb_config__root.keys[i];
        if (k->type == KB_CT_LIST)
            continue; /* informers, sinks, routes: SIGHUP rebuilds or swaps them */
        size_t live = 0, rows = k->type == KB_CT_GROUP ? k->sub->n_keys : 1;
        for (size_t j = 0; j < rows; j++)
            live += ((k->type == KB_CT_GROUP ? &k->sub->keys[j] : k)->flags & KB_CF_LIVE) != 0;
        /* A group mixing live and restart-only keys would need its keys named one by one. */
        KB_ASSERT(live == 0 || live == rows);
        if (live == 0) {
            KB_ASSERT(n < KB_ARRAY_LEN(names));
            names[n++] = k->name;
        }
    }
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s%s", i == 0 ? "" : i + 1 == n ? " and " : ", ", names[i]);
}

/* ---- enum names (the same arrays the loader accepts) ------------------------ */

static const char *kb_value_name(const char *const *values, size_t n, int v) {
    return v >= 0 && (size_t)v < n - 1 ? values[v] : "?";
}

const char *kb_sink_type_name(kb_sink_type_t t) {
    return kb_value_name(kb_v_sink_type, KB_ARRAY_LEN(kb_v_sink_type), (int)t);
}

const char *kb_format_name(kb_format_t f) {
    return kb_value_name(kb_v_format, KB_ARRAY_LEN(kb_v_format), (int)f);
}

const char *kb_mode_name(kb_mode_t m) {
    return kb_value_name(kb_v_mode, KB_ARRAY_LEN(kb_v_mode), (int)m);
}

const char *kb_config__compaction_name(kb_compaction_t c) {
    return kb_value_name(kb_v_compaction, KB_ARRAY_LEN(kb_v_compaction), (int)c);
}
