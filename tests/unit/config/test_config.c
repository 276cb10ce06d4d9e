/* tests/unit/config/test_config.c — the configuration loader: defaults, the
 * reference example, every class of config error with its exact FILE:LINE
 * message, the $HOSTNAME ordinal, the --check summary, and that
 * docs/configuration.md is exactly what the key table generates.
 *
 * KB_UPDATE_DOCS=1 KB_SOURCE_DIR=<repo> test_config rewrites the doc. */
#include "config/config.h"
#include "common/event.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define MINIMAL                                                                                             \
    "informers = ( { name = \"pods\"; resource = \"pods\"; } );\n"                                          \
    "sinks = ( { name = \"out\"; type = \"file\"; } );\n"                                                   \
    "routes = ( { informer = \"pods\"; sink = \"out\"; } );\n"

/* The documented example configuration, verbatim. */
static const char spec_example[] =
    "cluster = {\n"
    "  name = \"prod-eu\";                 # appears in envelopes and topics\n"
    "  server = \"https://10.0.0.1:6443\"; # or:\n"
    "  kubeconfig = \"~/.kube/config\";    #   current-context unless context=\n"
    "  context = \"\";\n"
    "  in_cluster = false;               #   service account token + CA\n"
    "  token_file = \"\";                  # re-read when it changes (bound tokens rotate)\n"
    "  ca_file = \"\"; client_cert = \"\"; client_key = \"\";\n"
    "  insecure_skip_tls_verify = false;\n"
    "  qps = 50.0; burst = 100;          # client-side rate limit\n"
    "};\n"
    "state_dir = \"/var/lib/kbridge\";     # checkpoints + persisted index; unset = memory only\n"
    "shutdown_timeout = 10;              # seconds\n"
    "log = { level = \"info\"; format = \"text\"; };   # or \"json\"\n"
    "http = { listen = \"127.0.0.1:9464\"; token_file = \"\"; };\n"
    "sharding = { replicas = 1; index = 0; };      # see §8\n"
    "\n"
    "informers = (\n"
    "  { name = \"pods\";                  # unique; routes refer to it\n"
    "    group = \"\"; version = \"v1\"; resource = \"pods\";\n"
    "    namespaces = [];                # empty = all (one cluster-wide watch)\n"
    "    label_selector = \"\"; field_selector = \"\";\n"
    "    page_size = 500;                # list pagination (limit=)\n"
    "    resync_seconds = 0;             # 0 = no periodic SYNC\n"
    "    shards = 4;                     # worker queues in this process\n"
    "    compaction = \"none\";            # or \"latest\" (§6)\n"
    "    drop_fields = [ \"metadata.managedFields\" ];   # default shown\n"
    "    redact_fields = [];             # e.g. [ \"data\" ] for secrets: values replaced by \"<redacted>\"\n"
    "  }\n"
    ");\n"
    "\n"
    "sinks = (\n"
    "  { name = \"out\";   type = \"file\";  path = \"-\"; },          # JSON Lines; \"-\" = stdout\n"
    "  { name = \"kafka\"; type = \"kafka\"; brokers = \"127.0.0.1:9092\";\n"
    "    properties = { \"compression.type\" = \"lz4\"; };          # passed to librdkafka\n"
    "    transactional = false; },                               # exactly-once mode (§5)\n"
    "  { name = \"mqtt\";  type = \"mqtt\";  uri = \"tcp://127.0.0.1:1883\";\n"
    "    client_id = \"kbridge-prod-eu\"; qos = 1; username = \"\"; password_file = \"\";\n"
    "    version = 5; }                                          # 3 = MQTT 3.1.1\n"
    ");\n"
    "\n"
    "routes = (\n"
    "  { informer = \"pods\"; sink = \"kafka\";\n"
    "    topic = \"k8s.{cluster}.{resource}\";      # template, §4\n"
    "    key = \"{namespace}/{name}\";              # Kafka key / MQTT topic part\n"
    "    types = [ \"ADDED\", \"MODIFIED\", \"DELETED\" ];   # default: all\n"
    "    namespaces = []; label_selector = \"\";    # extra client-side filter\n"
    "    format = \"json\";                         # or \"cloudevents-structured\", \"cloudevents-binary\"\n"
    "    mode = \"events\";                         # or \"state\" (§4, §5)\n"
    "  }\n"
    ");\n";

static kb_config_t *load_ok(const char *text) {
    char err[512] = "";
    kb_config_t *cfg = kb_config_load_string(text, "t.cfg", err, sizeof(err));
    if (!cfg)
        fail_msg("unexpected error: %s", err);
    return cfg;
}

static void expect_error(const char *text, const char *expected) {
    char err[512] = "";
    kb_config_t *cfg = kb_config_load_string(text, "t.cfg", err, sizeof(err));
    if (cfg) {
        kb_config_free(cfg);
        fail_msg("loaded, expected: %s\n%s", expected, text);
    }
    assert_string_equal(err, expected);
}

static void test_defaults(void **state) {
    (void)state;
    unsetenv("HOSTNAME");
    kb_config_t *cfg = load_ok(MINIMAL);
    assert_string_equal(cfg->path, "t.cfg");
    assert_string_equal(cfg->cluster.name, "default");
    assert_string_equal(cfg->cluster.server, "");
    assert_string_equal(cfg->cluster.kubeconfig, "");
    assert_string_equal(cfg->cluster.client_key, "");
    assert_false(cfg->cluster.in_cluster);
    assert_false(cfg->cluster.insecure_skip_tls_verify);
    assert_true(cfg->cluster.qps == 50.0);
    assert_int_equal(cfg->cluster.burst, 100);
    assert_string_equal(cfg->state_dir, "");
    assert_int_equal(cfg->shutdown_timeout, 10);
    assert_string_equal(cfg->log_level, "info");
    assert_string_equal(cfg->log_format, "text");
    assert_string_equal(cfg->http_listen, "127.0.0.1:9464");
    assert_string_equal(cfg->http_token_file, "");
    assert_int_equal(cfg->sharding_replicas, 1);
    assert_int_equal(cfg->sharding_index, 0);

    assert_int_equal(cfg->n_informers, 1);
    const kb_config_informer_t *inf = &cfg->informers[0];
    assert_string_equal(inf->name, "pods");
    assert_string_equal(inf->group, "");
    assert_string_equal(inf->version, "v1");
    assert_string_equal(inf->resource, "pods");
    assert_int_equal(inf->namespaces.n, 0);
    assert_string_equal(inf->label_selector, "");
    assert_string_equal(inf->field_selector, "");
    assert_int_equal(inf->page_size, 500);
    assert_int_equal(inf->min_watch_timeout, 300);
    assert_int_equal(inf->resync_seconds, 0);
    assert_int_equal(inf->shards, 4);
    assert_int_equal(inf->compaction, KB_COMPACTION_NONE);
    assert_int_equal(inf->drop_fields.n, 2);
    assert_string_equal(inf->drop_fields.v[0], "metadata.managedFields");
    assert_string_equal(inf->drop_fields.v[1], "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]");
    assert_int_equal(inf->redact_fields.n, 0);
    assert_int_equal(inf->queue_bytes, 64 << 20);
    assert_int_equal(inf->line, 1);

    assert_int_equal(cfg->n_sinks, 1);
    const kb_config_sink_t *sink = &cfg->sinks[0];
    assert_int_equal(sink->type, KB_SINK_FILE);
    assert_string_equal(sink->path, "-");
    assert_int_equal(sink->line, 2);
    assert_int_equal(sink->n_properties, 0);
    assert_string_equal(sink->checkpoint_topic, "__kbridge_checkpoints");
    assert_string_equal(sink->client_id, "kbridge-default");
    assert_int_equal(sink->qos, 1);
    assert_int_equal(sink->version, 5);
    assert_int_equal(sink->keepalive, 30);
    assert_int_equal(sink->max_inflight, 256);
    assert_int_equal(sink->mqtt_client, KB_MQTT_CLIENT_MOSQUITTO);
    assert_false(sink->allow_plaintext_password);

    assert_int_equal(cfg->n_routes, 1);
    const kb_config_route_t *r = &cfg->routes[0];
    assert_string_equal(r->name, "pods-out-0");
    assert_string_equal(r->topic, "");
    assert_string_equal(r->key, "{namespace}/{name}");
    assert_int_equal(r->types, KB_ROUTE_TYPES_ALL);
    assert_int_equal(r->types, KB_EV_TYPE_MASK_ALL);
    assert_int_equal(r->namespaces.n, 0);
    assert_string_equal(r->label_selector, "");
    assert_int_equal(r->format, KB_FORMAT_JSON);
    assert_int_equal(r->mode, KB_MODE_EVENTS);
    assert_int_equal(r->line, 3);

    assert_ptr_equal(kb_config_find_informer(cfg, "pods"), inf);
    assert_ptr_equal(kb_config_find_sink(cfg, "out"), sink);
    assert_null(kb_config_find_sink(cfg, "nope"));
    kb_config_free(cfg);
    kb_config_free(NULL);
}

static void test_spec_example(void **state) {
    (void)state;
    setenv("HOME", "/home/op", 1);
    kb_config_t *cfg = load_ok(spec_example);
    assert_string_equal(cfg->cluster.name, "prod-eu");
    assert_string_equal(cfg->cluster.server, "https://10.0.0.1:6443");
    assert_string_equal(cfg->cluster.kubeconfig, "/home/op/.kube/config"); /* "~/" expanded */
    assert_string_equal(cfg->state_dir, "/var/lib/kbridge");
    assert_int_equal(cfg->n_informers, 1);
    assert_int_equal(cfg->informers[0].line, 19);
    assert_int_equal(cfg->n_sinks, 3);
    const kb_config_sink_t *kafka = kb_config_find_sink(cfg, "kafka");
    assert_non_null(kafka);
    assert_int_equal(kafka->type, KB_SINK_KAFKA);
    assert_string_equal(kafka->brokers, "127.0.0.1:9092");
    assert_int_equal(kafka->n_properties, 1);
    assert_string_equal(kafka->properties[0].key, "compression.type");
    assert_string_equal(kafka->properties[0].value, "lz4");
    assert_int_equal(kafka->properties[0].line, 35);
    assert_false(kafka->transactional);
    const kb_config_sink_t *mqtt = kb_config_find_sink(cfg, "mqtt");
    assert_int_equal(mqtt->type, KB_SINK_MQTT);
    assert_string_equal(mqtt->uri, "tcp://127.0.0.1:1883");
    assert_string_equal(mqtt->client_id, "kbridge-prod-eu");
    assert_int_equal(mqtt->version, 5);
    assert_int_equal(cfg->n_routes, 1);
    const kb_config_route_t *r = &cfg->routes[0];
    assert_string_equal(r->name, "pods-kafka-0");
    assert_string_equal(r->topic, "k8s.{cluster}.{resource}");
    assert_int_equal(r->types, (1u << KB_EV_ADDED) | (1u << KB_EV_MODIFIED) | (1u << KB_EV_DELETED));
    kb_config_free(cfg);
}

static void test_values(void **state) {
    (void)state;
    kb_config_t *cfg = load_ok(
        "cluster = { name = \"c1\"; qps = 5; };\n"
        "informers = ( { name = \"sec\"; resource = \"secrets\"; namespaces = [\"a\", \"b\"];\n"
        "  compaction = \"latest\"; coalesce_ms = 1000; queue_bytes = 4294967296; drop_fields = [];\n"
        "  redact_fields = [ \"data\", \"metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]\" ]; } );\n"
        "sinks = ( { name = \"k\"; type = \"kafka\"; brokers = \"b:9092\";\n"
        "  properties = { \"linger.ms\" = 5; \"enable.idempotence\" = true; acks = \"all\"; \"x.y\" = 0.5;\n"
        "                 \"big\" = 3000000000; }; },\n"
        "  { name = \"m\"; type = \"mqtt\"; uri = \"tcp://h:1\"; version = 3; qos = 0; } );\n"
        "routes = ( { name = \"r\"; informer = \"sec\"; sink = \"k\"; types = [ \"DELETED\" ];\n"
        "  format = \"cloudevents-binary\"; mode = \"state\"; },\n"
        "  { informer = \"sec\"; sink = \"m\"; format = \"cloudevents-structured\"; } );\n");
    assert_true(cfg->cluster.qps == 5.0);
    const kb_config_informer_t *inf = &cfg->informers[0];
    assert_int_equal(inf->namespaces.n, 2);
    assert_string_equal(inf->namespaces.v[1], "b");
    assert_int_equal(inf->compaction, KB_COMPACTION_LATEST);
    assert_int_equal(inf->coalesce_ms, 1000);
    assert_true(inf->queue_bytes == 4294967296LL);
    /* Own lists on secrets add to the protection: the annotation dropped, stringData redacted. */
    assert_int_equal(inf->drop_fields.n, 1);
    assert_string_equal(inf->drop_fields.v[0], KB_CONFIG_LAST_APPLIED_PATH);
    assert_int_equal(inf->redact_fields.n, 3);
    assert_string_equal(inf->redact_fields.v[0], "data");
    assert_string_equal(inf->redact_fields.v[2], "stringData");
    assert_false(inf->emit_secret_values);
    const kb_config_sink_t *k = &cfg->sinks[0];
    assert_int_equal(k->n_properties, 5);
    const char *want[][2] = {{"linger.ms", "5"}, {"enable.idempotence", "true"}, {"acks", "all"},
                             {"x.y", "0.5"}, {"big", "3000000000"}};
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(k->properties[i].key, want[i][0]);
        assert_string_equal(k->properties[i].value, want[i][1]);
    }
    assert_string_equal(cfg->sinks[1].client_id, "kbridge-c1");
    assert_int_equal(cfg->sinks[1].version, 3);
    assert_int_equal(cfg->sinks[1].qos, 0);
    assert_string_equal(cfg->routes[0].name, "r");
    assert_int_equal(cfg->routes[0].types, 1u << KB_EV_DELETED);
    assert_int_equal(cfg->routes[0].format, KB_FORMAT_CE_BINARY);
    assert_int_equal(cfg->routes[0].mode, KB_MODE_STATE);
    assert_string_equal(cfg->routes[1].name, "sec-m-1");
    assert_int_equal(cfg->routes[1].format, KB_FORMAT_CE_STRUCTURED);
    assert_string_equal(kb_format_name(KB_FORMAT_CE_STRUCTURED), "cloudevents-structured");
    assert_string_equal(kb_sink_type_name(KB_SINK_MQTT), "mqtt");
    assert_string_equal(kb_mode_name(KB_MODE_STATE), "state");
    kb_config_free(cfg);
}

#define INF1 "informers = ( { name = \"pods\"; resource = \"pods\"; } );\n"
#define SINK1 "sinks = ( { name = \"out\"; type = \"file\"; } );\n"
#define ROUTE1 "routes = ( { informer = \"pods\"; sink = \"out\"; } );\n"

static void test_error_syntax(void **state) {
    (void)state;
    expect_error(INF1 "cluster = { name = ; };\n", "t.cfg:2: syntax error");
    expect_error(INF1 "a = 1;\na = 2;\n", "t.cfg:3: duplicate setting name");
    expect_error(INF1 SINK1 ROUTE1 "shutdown_timeout = 99999999999999999999;\n",
                 "t.cfg:4: integer 99999999999999999999 does not fit in 64 bits");
    expect_error(INF1 "\n@include \"other.cfg\"\n", "t.cfg:3: @include is not allowed in a config given as text");
}

static void test_error_unknown_key(void **state) {
    (void)state;
    expect_error(INF1 SINK1 ROUTE1 "cluster = {\n  nmae = \"x\";\n};\n",
                 "t.cfg:5: unknown key cluster.nmae (did you mean cluster.name?)");
    expect_error("statedir = \"/x\";\n" INF1, "t.cfg:1: unknown key statedir (did you mean state_dir?)");
    expect_error("informers = ( { name = \"p\"; resource = \"pods\";\n  frobnicate = 1; } );\n",
                 "t.cfg:2: unknown key informers[0].frobnicate");
    expect_error(INF1 "sinks = ( { name = \"o\"; type = \"file\"; \"compression.type\" = \"x\"; } );\n",
                 "t.cfg:2: unknown key sinks[0].compression.type");
}

static void test_error_types(void **state) {
    (void)state;
    expect_error("informers = ( { name = \"p\"; resource = \"pods\";\n  page_size = \"x\"; } );\n",
                 "t.cfg:2: informers[0].page_size: expected an integer");
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; shards = 1.5; } );\n",
                 "t.cfg:1: informers[0].shards: expected an integer");
    expect_error("cluster = { in_cluster = \"yes\"; };\n", "t.cfg:1: cluster.in_cluster: expected true or false");
    expect_error("cluster = { qps = \"fast\"; };\n", "t.cfg:1: cluster.qps: expected a number");
    expect_error("cluster = { name = 5; };\n", "t.cfg:1: cluster.name: expected a string");
    expect_error("cluster = 5;\n", "t.cfg:1: cluster: expected a group { … }");
    expect_error("informers = { name = \"p\"; };\n", "t.cfg:1: informers: expected a list of groups ( { … }, … )");
    expect_error("informers = ( 5 );\n", "t.cfg:1: informers[0]: expected a group { … }");
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; namespaces = [ \"a\", \"b\" ];\n"
                 "  drop_fields = ( \"a\", 5 ); } );\n",
                 "t.cfg:2: informers[0].drop_fields[1]: expected a string");
    expect_error(INF1 "sinks = ( { name = \"k\"; type = \"kafka\"; brokers = \"b\"; properties = { a = [1]; }; } );\n",
                 "t.cfg:2: sinks[0].properties.a: expected a string, number or boolean");
}

static void test_error_range(void **state) {
    (void)state;
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; shards = 0; } );\n",
                 "t.cfg:1: informers[0].shards: 0 is out of range (1 to 256)");
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; page_size = -1; } );\n",
                 "t.cfg:1: informers[0].page_size: -1 is out of range (1 to 100000)");
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; page_size = 4294967296; } );\n",
                 "t.cfg:1: informers[0].page_size: 4294967296 is out of range (1 to 100000)");
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; min_watch_timeout = 4; } );\n",
                 "t.cfg:1: informers[0].min_watch_timeout: 4 is out of range (5 to 3600)");
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; queue_bytes = 1024; } );\n",
                 "t.cfg:1: informers[0].queue_bytes: 1024 is out of range (65536 to 1099511627776)");
    expect_error("cluster = { qps = 0.0; };\n", "t.cfg:1: cluster.qps: 0 is out of range (0.01 to 1000000)");
    expect_error("cluster = { qps = 1e400; };\n", "t.cfg:1: cluster.qps: inf is out of range (0.01 to 1000000)");
    expect_error("shutdown_timeout = -5;\n", "t.cfg:1: shutdown_timeout: -5 is out of range (0 to 3600)");
    expect_error(INF1 "sinks = ( { name = \"m\"; type = \"mqtt\"; uri = \"tcp://h:1\";\n  version = 4; } );\n",
                 "t.cfg:3: sinks[0].version: unknown value \"4\" (expected one of: 3, 5)");
    expect_error(INF1 "sinks = ( { name = \"m\"; type = \"mqtt\"; uri = \"u\"; qos = 3; } );\n",
                 "t.cfg:2: sinks[0].qos: 3 is out of range (0 to 2)");
    expect_error("http = { listen = \"localhost\"; };\n",
                 "t.cfg:1: http.listen: \"localhost\" is not host:port (or \"\" to disable)");
    expect_error("sharding = { replicas = 2;\n index = 2; };\n",
                 "t.cfg:2: sharding.index: 2 is not below sharding.replicas = 2");
    expect_error("ha = { lease_seconds = 5;\n renew_seconds = 4; };\n",
                 "t.cfg:2: ha.renew_seconds: 4 is not below ha.lease_seconds - 1 = 4");
    expect_error("\nha = { enabled = true; };\n", "t.cfg:2: ha.identity: empty (and $HOSTNAME is not set)");
    expect_error("informers = ( { name = \"p\"; resource = \"pods\";\n index_labels = [ \"app\", \"a b\" ]; } );\n",
                 "t.cfg:2: informers[0].index_labels: \"a b\" is not a label key");
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; index_labels = [ \"\" ]; } );\n",
                 "t.cfg:1: informers[0].index_labels: \"\" is not a label key");
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; index_labels = [ \"a\", \"b\", \"c\", \"d\", "
                 "\"e\", \"f\", \"g\", \"h\", \"i\", \"j\", \"k\", \"l\", \"m\", \"n\", \"o\", \"p\", \"q\" ]; } );\n",
                 "t.cfg:1: informers[0].index_labels: at most 16 keys");
}

static void test_error_enum(void **state) {
    (void)state;
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; compaction = \"lastest\"; } );\n",
                 "t.cfg:1: informers[0].compaction: unknown value \"lastest\" (expected one of: none, latest)");
    /* A window without merging only adds latency: refused, naming the key. */
    expect_error("informers = ( { name = \"p\"; resource = \"pods\";\n coalesce_ms = 500; } );\n",
                 "t.cfg:2: informers[0].coalesce_ms: needs compaction = \"latest\"");
    expect_error("log = { level = \"verbose\"; };\n",
                 "t.cfg:1: log.level: unknown value \"verbose\" (expected one of: debug, info, warn, error)");
    expect_error(INF1 "sinks = ( { name = \"s\"; type = \"redis\"; } );\n",
                 "t.cfg:2: sinks[0].type: unknown value \"redis\" (expected one of: file, kafka, mqtt)");
    expect_error(INF1 SINK1 "routes = ( { informer = \"pods\"; sink = \"out\";\n  types = [ \"ADDED\", \"ADDD\" ]; } );\n",
                 "t.cfg:4: routes[0].types[1]: unknown value \"ADDD\" (expected one of: ADDED, MODIFIED, DELETED, "
                 "SYNC, SNAPSHOT)");
    expect_error(INF1 SINK1 "routes = ( { informer = \"pods\"; sink = \"out\"; types = []; } );\n",
                 "t.cfg:3: routes[0].types: must name at least one type");
    expect_error(INF1 SINK1 "routes = ( { informer = \"pods\"; sink = \"out\"; format = \"xml\"; } );\n",
                 "t.cfg:3: routes[0].format: unknown value \"xml\" (expected one of: json, cloudevents-structured, "
                 "cloudevents-binary)");
}

static void test_error_names(void **state) {
    (void)state;
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; },\n"
                 "  { name = \"p\"; resource = \"nodes\"; } );\n",
                 "t.cfg:2: informers[1].name: duplicate name \"p\" (first at line 1)");
    expect_error(INF1 "sinks = ( { name = \"o\"; type = \"file\"; },\n { name = \"o\"; type = \"file\"; } );\n",
                 "t.cfg:3: sinks[1].name: duplicate name \"o\" (first at line 2)");
    expect_error(INF1 SINK1 "routes = ( { informer = \"pods\"; sink = \"out\"; },\n"
                 "  { name = \"pods-out-0\"; informer = \"pods\"; sink = \"out\"; } );\n",
                 "t.cfg:4: routes[1].name: duplicate name \"pods-out-0\" (first at line 3)");
    expect_error("informers = ( { name = \"a/b\"; resource = \"pods\"; } );\n",
                 "t.cfg:1: informers[0].name: \"a/b\" may contain only letters, digits, '.', '_' and '-'");
    expect_error("informers = ( { name = \"\"; resource = \"pods\"; } );\n",
                 "t.cfg:1: informers[0].name: must not be empty");
}

static void test_error_references(void **state) {
    (void)state;
    expect_error(INF1 SINK1 "routes = ( { sink = \"out\";\n  informer = \"podz\"; } );\n",
                 "t.cfg:4: routes[0].informer: no informer named \"podz\"");
    expect_error(INF1 SINK1 "routes = ( { informer = \"pods\"; sink = \"kafka\"; } );\n",
                 "t.cfg:3: routes[0].sink: no sink named \"kafka\"");
    expect_error(INF1 SINK1, "t.cfg: routes: at least one route is required (informer → sink)");
    expect_error(INF1 SINK1 "routes = ();\n", "t.cfg:3: routes: at least one route is required (informer → sink)");
    expect_error(INF1 "kube_api = { enabled = false; };\n",
                 "t.cfg: routes: at least one route is required (informer → sink), unless the informers are served "
                 "by the kube API (http.listen, kube_api.enabled)");
    expect_error(INF1 "http = { listen = \"\"; };\n",
                 "t.cfg: routes: at least one route is required (informer → sink), unless the informers are served "
                 "by the kube API (http.listen, kube_api.enabled)");
}

static void test_error_templates_paths(void **state) {
    (void)state;
    expect_error(INF1 SINK1 "routes = ( { informer = \"pods\"; sink = \"out\"; topic = \"k8s.{foo}\"; } );\n",
                 "t.cfg:3: routes[0].topic: template \"k8s.{foo}\": unknown variable {foo} (known: cluster group "
                 "version resource kind namespace name uid type labels.KEY annotations.KEY, each with an optional "
                 "|default)");
    expect_error(INF1 SINK1 "routes = ( { informer = \"pods\"; sink = \"out\";\n  field_selector = \"spec.node=a\"; } );\n",
                 "t.cfg:4: routes[0].field_selector: field label not supported: spec.node"); /* the API server's words */
    expect_error(INF1 SINK1 "routes = ( { informer = \"pods\"; sink = \"out\";\n  field_selector = \"spec.nodeName=a=b\"; } );\n",
                 "t.cfg:4: routes[0].field_selector: invalid field selector: unescaped character in value: 61");
    char err[512];
    kb_config_t *cfg = kb_config_load_string(INF1 SINK1 "routes = ( { informer = \"pods\"; sink = \"out\"; key = \"{name\"; } );\n",
                                             "t.cfg", err, sizeof(err));
    assert_null(cfg);
    assert_memory_equal(err, "t.cfg:3: routes[0].key: template \"{name\"", 38);
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; drop_fields = [ \"metadata..x\" ]; } );\n",
                 "t.cfg:1: informers[0].drop_fields[0]: bad field path \"metadata..x\": empty segment at offset 9");
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; redact_fields = [ \"a[b\" ]; } );\n",
                 "t.cfg:1: informers[0].redact_fields[0]: bad field path \"a[b\": unclosed [ at offset 1");
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; redact_fields = [ \"data.\" ]; } );\n",
                 "t.cfg:1: informers[0].redact_fields[0]: bad field path \"data.\": trailing '.'");
}

static void test_error_required_and_variants(void **state) {
    (void)state;
    expect_error("informers = ( { name = \"p\"; } );\n", "t.cfg:1: informers[0].resource is required");
    expect_error("informers = ( { resource = \"pods\"; } );\n", "t.cfg:1: informers[0].name is required");
    expect_error(INF1 "sinks = ( { name = \"s\"; } );\n", "t.cfg:2: sinks[0].type is required");
    expect_error(INF1 "sinks = ( { name = \"k\"; type = \"kafka\"; } );\n",
                 "t.cfg:2: sinks[0].brokers is required for type = \"kafka\"");
    expect_error(INF1 "sinks = ( { name = \"m\"; type = \"mqtt\"; } );\n",
                 "t.cfg:2: sinks[0].uri is required for type = \"mqtt\"");
    expect_error(INF1 SINK1 "routes = ( { informer = \"pods\"; } );\n", "t.cfg:3: routes[0].sink is required");
    expect_error(INF1 "sinks = ( { name = \"o\"; type = \"file\";\n  brokers = \"b:9092\"; } );\n",
                 "t.cfg:3: sinks[0].brokers: not valid for type = \"file\"");
    expect_error(INF1 "sinks = ( { name = \"k\"; type = \"kafka\"; brokers = \"b\"; qos = 1; } );\n",
                 "t.cfg:2: sinks[0].qos: not valid for type = \"kafka\"");
    expect_error(INF1 "sinks = ( { name = \"k\"; type = \"kafka\"; brokers = \"\"; } );\n",
                 "t.cfg:2: sinks[0].brokers: must not be empty");
}

static void test_hostname_ordinal(void **state) {
    (void)state;
    const char *text = "sharding = { replicas = 3;\n  index = -1; };\n" MINIMAL;
    setenv("HOSTNAME", "kbridge-2", 1);
    kb_config_t *cfg = load_ok(text);
    assert_int_equal(cfg->sharding_index, 2);
    assert_int_equal(cfg->sharding_replicas, 3);
    kb_config_free(cfg);
    setenv("HOSTNAME", "kbridge-3", 1);
    expect_error(text, "t.cfg:2: sharding.index = -1: ordinal 3 of $HOSTNAME \"kbridge-3\" is not below "
                       "sharding.replicas = 3");
    setenv("HOSTNAME", "kbridge", 1);
    expect_error(text, "t.cfg:2: sharding.index = -1: $HOSTNAME \"kbridge\" has no StatefulSet ordinal "
                       "(\"<name>-<N>\")");
    setenv("HOSTNAME", "web-x1", 1);
    expect_error(text, "t.cfg:2: sharding.index = -1: $HOSTNAME \"web-x1\" has no StatefulSet ordinal "
                       "(\"<name>-<N>\")");
    unsetenv("HOSTNAME");
    expect_error(text, "t.cfg:2: sharding.index = -1: $HOSTNAME \"\" has no StatefulSet ordinal (\"<name>-<N>\")");
}

/* sharding.server_side and server_field; uid sharding refuses a state-mode route. */
static void test_server_side_sharding(void **state) {
    (void)state;
    kb_config_t *cfg = load_ok(MINIMAL);
    assert_int_equal(cfg->sharding_server_side, KB_SHARD_SERVER_OFF);
    assert_int_equal(cfg->sharding_server_field, KB_SHARD_FIELD_UID);
    kb_config_free(cfg);
    cfg = load_ok("sharding = { replicas = 2; index = 1; server_side = \"auto\"; server_field = \"namespace\"; };\n"
                  MINIMAL);
    assert_int_equal(cfg->sharding_server_side, KB_SHARD_SERVER_AUTO);
    assert_int_equal(cfg->sharding_server_field, KB_SHARD_FIELD_NAMESPACE);
    char *summary = NULL;
    size_t summary_len = 0;
    FILE *f = open_memstream(&summary, &summary_len);
    kb_config_summary(cfg, f);
    fclose(f);
    assert_non_null(strstr(summary, "sharding: replica 1 of 2, server-side auto by namespace\n"));
    free(summary);
    kb_config_free(cfg);
    const char *routes = "informers = ( { name = \"pods\"; resource = \"pods\"; } );\n"
                         "sinks = ( { name = \"out\"; type = \"file\"; } );\n"
                         "routes = ( { informer = \"pods\"; sink = \"out\";\n  mode = \"state\"; } );\n";
    char text[1024];
    snprintf(text, sizeof(text), "sharding = { replicas = 2; server_side = \"on\"; };\n%s", routes);
    expect_error(text, "t.cfg:4: route pods-out-0: mode = \"state\" with sharding.server_side sharding by uid: a "
                       "re-created name may move to another replica, whose state could be erased by the old one's "
                       "delete; set sharding.server_field = \"namespace\" (or server_side = \"off\")");
    snprintf(text, sizeof(text), "sharding = { replicas = 2; server_side = \"on\"; server_field = \"namespace\"; };\n%s",
             routes);
    kb_config_free(load_ok(text));
    expect_error("sharding = { server_side = \"yes\"; };\n" MINIMAL,
                 "t.cfg:1: sharding.server_side: unknown value \"yes\" (expected one of: off, auto, on)");
}

/* ${NAME}, ${NAME:-default} and $$ in string values, lists and properties. */
static void test_env_expansion(void **state) {
    (void)state;
    setenv("KB_T_CLUSTER", "prod-eu", 1);
    setenv("KB_T_NS", "team-a", 1);
    setenv("KB_T_EMPTY", "", 1);
    unsetenv("KB_T_UNSET");
    const char *text = "cluster = { name = \"${KB_T_CLUSTER}\"; server = \"https://${KB_T_UNSET:-10.0.0.1}:6443\"; };\n"
                       "informers = ( { name = \"pods\"; resource = \"pods\";\n"
                       "  namespaces = [ \"${KB_T_NS}\", \"x-${KB_T_EMPTY:-dflt}\", \"y${KB_T_EMPTY}\" ]; } );\n"
                       "sinks = ( { name = \"k\"; type = \"kafka\"; brokers = \"b:9092\";\n"
                       "  properties = { \"sasl.password\" = \"$${KB_T_NS}$$x$y\"; \"client.id\" = \"${KB_T_NS}\"; }; } );\n"
                       "routes = ( { informer = \"pods\"; sink = \"k\"; topic = \"t\"; } );\n";
    kb_config_t *cfg = load_ok(text);
    assert_string_equal(cfg->cluster.name, "prod-eu");
    assert_string_equal(cfg->cluster.server, "https://10.0.0.1:6443");
    assert_int_equal(cfg->informers[0].namespaces.n, 3);
    assert_string_equal(cfg->informers[0].namespaces.v[0], "team-a");
    assert_string_equal(cfg->informers[0].namespaces.v[1], "x-dflt");
    assert_string_equal(cfg->informers[0].namespaces.v[2], "y");
    assert_string_equal(cfg->sinks[0].properties[0].value, "${KB_T_NS}$x$y");
    assert_string_equal(cfg->sinks[0].properties[1].value, "team-a");
    kb_config_free(cfg);

    expect_error("cluster = {\n  name = \"${KB_T_UNSET}\"; };\n" MINIMAL,
                 "t.cfg:2: cluster.name: environment variable KB_T_UNSET is not set "
                 "(write ${KB_T_UNSET:-default} for a default)");
    expect_error(MINIMAL "log = { level = \"${KB_T_UNSET}\"; };\n",
                 "t.cfg:4: log.level: environment variable KB_T_UNSET is not set "
                 "(write ${KB_T_UNSET:-default} for a default)");
    expect_error("cluster = { name = \"${KB_T_NS\"; };\n" MINIMAL,
                 "t.cfg:1: cluster.name: bad ${…} in \"${KB_T_NS\" (write ${NAME} or ${NAME:-default}; $$ is a $)");
    expect_error("cluster = { name = \"${}\"; };\n" MINIMAL,
                 "t.cfg:1: cluster.name: bad ${…} in \"${}\" (write ${NAME} or ${NAME:-default}; $$ is a $)");
    /* Expanded values are checked like literal ones. */
    setenv("KB_T_BAD", "no spaces allowed", 1);
    expect_error("cluster = { name = \"${KB_T_BAD}\"; };\n" MINIMAL,
                 "t.cfg:1: cluster.name: \"no spaces allowed\" may contain only letters, digits, '.', '_' and '-'");
    unsetenv("KB_T_CLUSTER");
    unsetenv("KB_T_NS");
    unsetenv("KB_T_EMPTY");
    unsetenv("KB_T_BAD");
}

/* A UTF-8 byte order mark before the first line is accepted (lines still count from 1). */
static void test_bom(void **state) {
    (void)state;
    kb_config_t *cfg = load_ok("\xEF\xBB\xBF" MINIMAL);
    assert_string_equal(cfg->informers[0].name, "pods");
    kb_config_free(cfg);
    expect_error("\xEF\xBB\xBF" MINIMAL "cluster = { burst = 0; };\n",
                 "t.cfg:4: cluster.burst: 0 is out of range (1 to 1000000)");
}

/* Secret values leave only with emit_secret_values = true, and only secrets take it. */
static void test_secret_protection(void **state) {
    (void)state;
    kb_config_t *cfg = load_ok("informers = ( { name = \"s\"; resource = \"secrets\"; redact_fields = [];\n"
                               "  drop_fields = [ \"metadata.managedFields\" ]; },\n"
                               "  { name = \"e\"; resource = \"secrets\"; emit_secret_values = true; drop_fields = []; },\n"
                               "  { name = \"w\"; group = \"example.com\"; resource = \"secrets\"; drop_fields = []; } );\n"
                               "sinks = ( { name = \"o\"; type = \"file\"; path = \"-\"; } );\n"
                               "routes = ( { informer = \"s\"; sink = \"o\"; } );\n");
    const kb_config_informer_t *s = &cfg->informers[0], *e = &cfg->informers[1], *w = &cfg->informers[2];
    assert_int_equal(s->redact_fields.n, 2);
    assert_int_equal(s->drop_fields.n, 2);
    assert_string_equal(s->drop_fields.v[1], KB_CONFIG_LAST_APPLIED_PATH);
    assert_true(e->emit_secret_values);
    assert_int_equal(e->redact_fields.n, 0);
    assert_int_equal(e->drop_fields.n, 0);
    assert_int_equal(w->redact_fields.n, 0); /* not core: not a Secret */
    assert_int_equal(w->drop_fields.n, 0);
    assert_true(kb_config_informer_is_secrets(s));
    assert_false(kb_config_informer_is_secrets(w));
    kb_config_free(cfg);
    expect_error("informers = ( { name = \"p\"; resource = \"pods\"; emit_secret_values = true; } );\n",
                 "t.cfg:1: informers[0].emit_secret_values: only for resource = \"secrets\" of the core group");
}

static void test_load_file(void **state) {
    (void)state;
    char path[] = "/tmp/kb_test_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(MINIMAL "cluster = { burst = 0; };\n", f);
    fclose(f);
    char err[512], want[600];
    assert_null(kb_config_load(path, err, sizeof(err)));
    snprintf(want, sizeof(want), "%s:4: cluster.burst: 0 is out of range (1 to 1000000)", path);
    assert_string_equal(err, want);
    f = fopen(path, "w");
    fputs(MINIMAL, f);
    fclose(f);
    kb_config_t *cfg = kb_config_load(path, err, sizeof(err));
    assert_non_null(cfg);
    assert_string_equal(cfg->path, path);
    kb_config_free(cfg);

    /* @include is relative to the including file's directory, and errors
     * inside the included file name that file. */
    char inc[sizeof(path) + 8];
    snprintf(inc, sizeof(inc), "%s.inc", path);
    f = fopen(inc, "w");
    fputs("cluster = { name = \"from-include\";\n  burst = -1; };\n", f);
    fclose(f);
    f = fopen(path, "w");
    fprintf(f, MINIMAL "@include \"%s\"\n", strrchr(inc, '/') + 1);
    fclose(f);
    assert_null(kb_config_load(path, err, sizeof(err)));
    snprintf(want, sizeof(want), "/tmp/%s:2: cluster.burst: -1 is out of range (1 to 1000000)", strrchr(inc, '/') + 1);
    assert_string_equal(err, want);
    f = fopen(inc, "w");
    fputs("cluster = {\n  name = ; };\n", f);
    fclose(f);
    assert_null(kb_config_load(path, err, sizeof(err)));
    snprintf(want, sizeof(want), "/tmp/%s:2: syntax error", strrchr(inc, '/') + 1);
    assert_string_equal(err, want);
    unlink(inc);
    unlink(path);
    assert_null(kb_config_load(path, err, sizeof(err)));
    snprintf(want, sizeof(want), "%s: cannot open: No such file or directory", path);
    assert_string_equal(err, want);
}

static char *capture(void (*fn)(FILE *, const void *), const void *arg) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fn(f, arg);
    fclose(f);
    return text;
}

static void summary_fn(FILE *f, const void *cfg) {
    kb_config_summary(cfg, f);
}

/* A read replica: informers, the kube API, no sinks and no routes. */
static void test_replica_needs_no_route(void **state) {
    (void)state;
    kb_config_t *cfg = load_ok(INF1 "http = { listen = \"127.0.0.1:0\"; };\n");
    assert_int_equal(cfg->n_routes, 0);
    assert_int_equal(cfg->n_sinks, 0);
    char *text = capture(summary_fn, cfg);
    assert_non_null(strstr(text, "informers.pods: served by the kube API only\n"));
    free(text);
    kb_config_free(cfg);
}

static void test_summary(void **state) {
    (void)state;
    kb_config_t *cfg = load_ok(spec_example);
    char *text = capture(summary_fn, cfg);
    assert_non_null(strstr(text, "cluster prod-eu: server https://10.0.0.1:6443"));
    assert_non_null(strstr(text, "  pods: core/v1/pods namespaces=(all) shards=4 compaction=none"));
    assert_non_null(strstr(text, "  kafka: kafka brokers=127.0.0.1:9092 compression.type=lz4\n"));
    assert_non_null(strstr(text, "  mqtt: mqtt tcp://127.0.0.1:1883 client_id=kbridge-prod-eu qos=1 v5\n"));
    assert_non_null(strstr(text, "  pods-kafka-0: pods -> kafka topic=k8s.{cluster}.{resource} key={namespace}/{name} "
                                 "types=ADDED,MODIFIED,DELETED format=json mode=events\n"));
    free(text);
    kb_config_free(cfg);
}

static void reference_fn(FILE *f, const void *md) {
    kb_config_print_reference(f, *(const bool *)md);
}

static void test_reference_text(void **state) {
    (void)state;
    bool md = false;
    char *text = capture(reference_fn, &md);
    const char *keys[] = {"cluster.qps", "state_dir", "log.level", "http.listen", "sharding.index",
                          "informers[].queue_bytes", "sinks[].brokers [type = \"kafka\"]",
                          "sinks[].client_id [type = \"mqtt\"]", "routes[].mode"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (!strstr(text, keys[i]))
            fail_msg("reference lacks %s", keys[i]);
    free(text);
}

/* docs/configuration.md must be exactly what the table generates. */
static void test_doc_in_sync(void **state) {
    (void)state;
    const char *src = getenv("KB_SOURCE_DIR");
    if (!src)
        skip();
    bool md = true;
    char *want = capture(reference_fn, &md);
    char path[4096];
    snprintf(path, sizeof(path), "%s/docs/configuration.md", src);
    if (getenv("KB_UPDATE_DOCS")) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(want, f);
        fclose(f);
    }
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    char *have = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&have, &cap, '\0', f);
    fclose(f);
    if (n < 0 || strcmp(have, want) != 0)
        fail_msg("%s is out of date: regenerate with KB_UPDATE_DOCS=1 KB_SOURCE_DIR=%s test_config", path, src);
    free(have);
    free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_spec_example),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_secret_protection),
        cmocka_unit_test(test_error_syntax),
        cmocka_unit_test(test_error_unknown_key),
        cmocka_unit_test(test_error_types),
        cmocka_unit_test(test_error_range),
        cmocka_unit_test(test_error_enum),
        cmocka_unit_test(test_error_names),
        cmocka_unit_test(test_error_references),
        cmocka_unit_test(test_replica_needs_no_route),
        cmocka_unit_test(test_error_templates_paths),
        cmocka_unit_test(test_error_required_and_variants),
        cmocka_unit_test(test_hostname_ordinal),
        cmocka_unit_test(test_server_side_sharding),
        cmocka_unit_test(test_env_expansion),
        cmocka_unit_test(test_bom),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_reference_text),
        cmocka_unit_test(test_doc_in_sync),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
