/* Unit tests for sinks/router, sinks/envelope and the file sink: what a route
 * takes, what it renders, the exact bytes of an envelope, and that the file
 * sink writes whole lines and acknowledges each message once. */
#include "common/event.h"
#include "config/config.h"
#include "sinks/envelope.h"
#include "sinks/router.h"
#include "sinks/sink.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static kb_event_t *mkev(kb_resource_t *res, kb_event_type_t type, const char *ns, const char *name,
                        const char *obj, const char *labels) {
    const char *l = labels ? strstr(obj, labels) : NULL;
    kb_event_init_t in = {
        .type = type, .res = res,
        .ns = ns, .ns_len = strlen(ns), .name = name, .name_len = strlen(name),
        .uid = "u-1", .uid_len = 3, .rv = "42", .rv_len = 2,
        .obj = obj, .obj_len = strlen(obj),
        .labels_off = l ? (size_t)(l - obj) : 0, .labels_len = l ? strlen(labels) : 0,
        .observed_ns = INT64_C(1764489600123456000),
    };
    return kb_event_new(&in);
}

static const char *CFG =
    "cluster = { name = \"prod\"; server = \"http://127.0.0.1:1\"; };\n"
    "informers = ( { name = \"pods\"; version = \"v1\"; resource = \"pods\"; },\n"
    "              { name = \"nodes\"; version = \"v1\"; resource = \"nodes\"; } );\n"
    "sinks = ( { name = \"f\"; type = \"file\"; path = \"-\"; },\n"
    "          { name = \"m\"; type = \"mqtt\"; uri = \"tcp://127.0.0.1:1\"; } );\n"
    "routes = ( { informer = \"pods\"; sink = \"f\"; types = [ \"DELETED\" ]; },\n"
    "           { informer = \"pods\"; sink = \"f\"; namespaces = [ \"team-*\", \"default\" ]; label_selector = \"app=web\"; },\n"
    "           { informer = \"pods\"; sink = \"m\"; },\n"
    "           { informer = \"nodes\"; sink = \"m\"; key = \"{kind}:{name}\"; } );\n";

static void test_route_filters(void **state) {
    (void)state;
    char err[512];
    kb_config_t *cfg = kb_config_load_string(CFG, "t.cfg", err, sizeof(err));
    assert_non_null(cfg);
    kb_sink_t *sinks[2] = {NULL, NULL};
    kb_router_t *r = kb_router_new(cfg, "pods", sinks, err, sizeof(err));
    assert_non_null(r);
    assert_int_equal(r->n, 3);
    kb_resource_t *res = kb_resource_new("prod", "pods", "", "v1", "pods");
    const char *obj = "{\"metadata\":{\"labels\":{\"app\":\"web\"}}}";
    kb_event_t *add_team = mkev(res, KB_EV_ADDED, "team-a", "p", obj, "{\"app\":\"web\"}");
    kb_event_t *add_other = mkev(res, KB_EV_ADDED, "kube-system", "p", obj, "{\"app\":\"web\"}");
    kb_event_t *add_nolabel = mkev(res, KB_EV_ADDED, "default", "p", "{}", NULL);
    kb_event_t *del = mkev(res, KB_EV_DELETED, "kube-system", "p", obj, NULL);
    assert_false(kb_route_match(&r->routes[0], add_team)); /* types = DELETED */
    assert_true(kb_route_match(&r->routes[0], del));
    assert_true(kb_route_match(&r->routes[1], add_team)); /* glob + selector */
    assert_false(kb_route_match(&r->routes[1], add_other));
    assert_false(kb_route_match(&r->routes[1], add_nolabel));
    assert_true(kb_route_match(&r->routes[2], add_other));
    kb_event_unref(add_team);
    kb_event_unref(add_other);
    kb_event_unref(add_nolabel);
    kb_event_unref(del);
    kb_resource_unref(res);
    kb_router_destroy(r);
    kb_config_free(cfg);
}

/* Field selectors: the routes of one event share its field record (read at
 * the first route that needs one), and the next event gets its own. */
static void test_route_field_record_once_per_event(void **state) {
    (void)state;
    static const char *cfg_text =
        "cluster = { name = \"prod\"; server = \"http://127.0.0.1:1\"; };\n"
        "informers = ( { name = \"pods\"; version = \"v1\"; resource = \"pods\"; } );\n"
        "sinks = ( { name = \"f\"; type = \"file\"; path = \"-\"; } );\n"
        "routes = ( { informer = \"pods\"; sink = \"f\"; field_selector = \"metadata.name=p\"; },\n"
        "           { informer = \"pods\"; sink = \"f\"; field_selector = \"spec.nodeName=n1\"; },\n"
        "           { informer = \"pods\"; sink = \"f\"; field_selector = \"spec.nodeName!=n1\"; } );\n";
    char err[512];
    kb_config_t *cfg = kb_config_load_string(cfg_text, "t.cfg", err, sizeof(err));
    assert_non_null(cfg);
    kb_sink_t *sinks[1] = {NULL};
    kb_router_t *r = kb_router_new(cfg, "pods", sinks, err, sizeof(err));
    assert_non_null(r);
    kb_resource_t *res = kb_resource_new("prod", "pods", "", "v1", "pods");
    kb_event_t *on1 = mkev(res, KB_EV_ADDED, "d", "p", "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"nodeName\":\"n1\"}}", NULL);
    kb_event_t *on2 = mkev(res, KB_EV_ADDED, "d", "p", "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"nodeName\":\"n2\"}}", NULL);
    kb_route_rec_t rec = KB_ROUTE_REC_INIT;
    assert_true(kb_route_match_rec(&r->routes[0], on1, &rec));
    assert_null(rec.ev); /* metadata.name needs no record */
    assert_true(kb_route_match_rec(&r->routes[1], on1, &rec));
    assert_ptr_equal(rec.ev, on1);
    /* Put on2's record in its place: a route that read on1's again would not see it. */
    kb_buf_reset(&rec.buf);
    kb_fields_extract(r->routes[2].kind, on2->obj, on2->obj_len, &rec.buf);
    assert_true(kb_route_match_rec(&r->routes[2], on1, &rec)); /* nodeName n2 != n1: the shared record */
    assert_ptr_equal(rec.ev, on1);
    assert_false(kb_route_match_rec(&r->routes[1], on2, &rec)); /* another event: its own record */
    assert_ptr_equal(rec.ev, on2);
    assert_true(kb_route_match_rec(&r->routes[2], on2, &rec));
    kb_route_rec_fini(&rec);
    assert_true(kb_route_match(&r->routes[1], on1));
    assert_false(kb_route_match(&r->routes[1], on2));
    kb_event_unref(on1);
    kb_event_unref(on2);
    kb_resource_unref(res);
    kb_router_destroy(r);
    kb_config_free(cfg);
}

static void test_route_render(void **state) {
    (void)state;
    char err[512];
    kb_config_t *cfg = kb_config_load_string(CFG, "t.cfg", err, sizeof(err));
    assert_non_null(cfg);
    kb_sink_t *sinks[2] = {NULL, NULL};
    kb_router_t *pods = kb_router_new(cfg, "pods", sinks, err, sizeof(err));
    kb_router_t *nodes = kb_router_new(cfg, "nodes", sinks, err, sizeof(err));
    kb_resource_t *pres = kb_resource_new("prod", "pods", "", "v1", "pods");
    kb_resource_t *nres = kb_resource_new("prod", "nodes", "", "v1", "nodes");
    kb_resource_set_kind(nres, "Node", 4);
    kb_event_t *pod = mkev(pres, KB_EV_MODIFIED, "default", "a+b#c/d", "{}", NULL);
    kb_event_t *node = mkev(nres, KB_EV_MODIFIED, "", "node-1", "{}", NULL);
    kb_buf_t topic = KB_BUF_INIT, key = KB_BUF_INIT;
    kb_route_render(&pods->routes[2], pod, &topic, &key); /* MQTT default topic, escaped */
    assert_string_equal(topic.data, "k8s/prod/pods/default/a%2Bb%23c%2Fd");
    assert_string_equal(key.data, "default/a+b#c/d");
    kb_buf_reset(&topic);
    kb_buf_reset(&key);
    kb_route_render(&nodes->routes[0], node, &topic, &key); /* cluster-scoped: namespace collapses */
    assert_string_equal(topic.data, "k8s/prod/nodes/node-1");
    assert_string_equal(key.data, "Node:node-1");
    assert_string_equal(kb_router_default_topic(KB_SINK_KAFKA), "k8s.{cluster}.{resource}");
    kb_buf_fini(&topic);
    kb_buf_fini(&key);
    kb_event_unref(pod);
    kb_event_unref(node);
    kb_resource_unref(pres);
    kb_resource_unref(nres);
    kb_router_destroy(pods);
    kb_router_destroy(nodes);
    kb_config_free(cfg);
}

static void test_envelope_json(void **state) {
    (void)state;
    kb_resource_t *res = kb_resource_new("prod", "deploys", "apps", "v1", "deployments");
    kb_resource_set_kind(res, "Deployment", 10);
    const char *obj = "{\"kind\":\"Deployment\",\"apiVersion\":\"apps/v1\",\"metadata\":{\"name\":\"we\\\"b\"}}";
    kb_event_t *ev = mkev(res, KB_EV_DELETED, "default", "we\"b", obj, NULL);
    kb_event_t *fsu = kb_event_retype(ev, KB_EV_DELETED, true);
    kb_buf_t out = KB_BUF_INIT;
    kb_envelope_json(fsu, &out);
    json_error_t jerr;
    json_t *j = json_loadb(out.data, out.len, 0, &jerr);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "DELETED");
    assert_string_equal(json_string_value(json_object_get(j, "cluster")), "prod");
    assert_string_equal(json_string_value(json_object_get(j, "group")), "apps");
    assert_string_equal(json_string_value(json_object_get(j, "kind")), "Deployment");
    assert_string_equal(json_string_value(json_object_get(j, "name")), "we\"b");
    assert_string_equal(json_string_value(json_object_get(j, "resourceVersion")), "42");
    assert_string_equal(json_string_value(json_object_get(j, "observedAt")), "2025-11-30T08:00:00.123456Z");
    assert_true(json_is_true(json_object_get(j, "finalStateUnknown")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "object"), "apiVersion")), "apps/v1");
    json_decref(j);

    /* Without finalStateUnknown the key is absent, not false. */
    kb_buf_reset(&out);
    kb_envelope_json(ev, &out);
    assert_null(strstr(out.data, "finalStateUnknown"));

    /* CloudEvents structured and binary attributes. */
    kb_buf_reset(&out);
    kb_envelope_ce_structured(ev, "default/we\"b", 12, &out);
    j = json_loadb(out.data, out.len, 0, &jerr);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "specversion")), "1.0");
    assert_string_equal(json_string_value(json_object_get(j, "type")), "io.k8s.deployments.deleted");
    assert_string_equal(json_string_value(json_object_get(j, "source")), "/clusters/prod/apps/v1/deployments");
    /* A DELETED never shares its id with the ADDED/MODIFIED at the same RV (a relist's
     * finalStateUnknown delete carries the last known object and its RV). */
    assert_string_equal(json_string_value(json_object_get(j, "id")), "u-1/42/deleted");
    assert_string_equal(json_string_value(json_object_get(j, "subject")), "default/we\"b");
    assert_string_equal(json_string_value(json_object_get(j, "partitionkey")), "default/we\"b");
    assert_non_null(json_object_get(j, "data"));
    json_decref(j);
    kb_ce_attr_t attrs[KB_CE_ATTR_COUNT];
    kb_buf_t storage = KB_BUF_INIT;
    kb_envelope_ce_attrs(ev, "k", 1, attrs, &storage);
    assert_string_equal(attrs[0].name, "specversion");
    assert_string_equal(attrs[0].value, "1.0");
    assert_string_equal(attrs[1].value, "u-1/42/deleted");
    assert_string_equal(attrs[3].value, "io.k8s.deployments.deleted");
    assert_string_equal(attrs[8].value, "k");
    kb_event_t *mod = kb_event_retype(ev, KB_EV_MODIFIED, false);
    kb_envelope_ce_attrs(mod, "k", 1, attrs, &storage);
    assert_string_equal(attrs[1].value, "u-1/42");
    kb_buf_reset(&out);
    kb_envelope_ce_structured(fsu, "k", 1, &out);
    assert_non_null(strstr(out.data, "\"id\":\"u-1/42/deleted\""));
    kb_event_unref(mod);
    kb_buf_fini(&storage);
    kb_buf_fini(&out);
    kb_event_unref(ev);
    kb_event_unref(fsu);
    kb_resource_unref(res);
}

static int acks_ok;
static void count_ack(void *opaque, kb_err_t err) {
    (void)opaque;
    if (err == KB_OK)
        acks_ok++;
}

static void test_file_sink_whole_lines(void **state) {
    (void)state;
    char path[] = "/tmp/kbtest-file-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "{\"old\":1}\n{\"torn", 16), 16); /* an earlier crash left half a line */
    close(fd);
    char text[1024], err[512];
    snprintf(text, sizeof(text),
             "cluster = { name = \"c\"; server = \"http://127.0.0.1:1\"; };\n"
             "informers = ( { name = \"pods\"; resource = \"pods\"; } );\n"
             "sinks = ( { name = \"f\"; type = \"file\"; path = \"%s\"; } );\n"
             "routes = ( { informer = \"pods\"; sink = \"f\"; } );\n", path);
    kb_config_t *cfg = kb_config_load_string(text, "t.cfg", err, sizeof(err));
    assert_non_null(cfg);
    kb_sink_t *sink = kb_sink_create(&cfg->sinks[0], cfg, err, sizeof(err));
    assert_non_null(sink);
    kb_resource_t *res = kb_resource_new("c", "pods", "", "v1", "pods");
    acks_ok = 0;
    for (int i = 0; i < 1000; i++) {
        char name[16];
        snprintf(name, sizeof(name), "p%d", i);
        kb_event_t *ev = mkev(res, KB_EV_ADDED, "ns", name, "{\"x\":1}", NULL);
        kb_msg_t msg = {.ev = ev, .topic = "", .key = "", .format = KB_FORMAT_JSON, .ack = count_ack};
        assert_int_equal(kb_sink_produce(sink, &msg, 1000), KB_OK);
        kb_event_unref(ev);
    }
    assert_int_equal(kb_sink_stop(sink, 10000), KB_OK);
    kb_sink_destroy(sink);
    assert_int_equal(acks_ok, 1000);
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        size_t len = strlen(line);
        assert_true(len > 0 && line[len - 1] == '\n');
        json_error_t jerr;
        json_t *j = json_loads(line, 0, &jerr);
        assert_non_null(j); /* every line parses: the torn tail was cut */
        json_decref(j);
        n++;
    }
    fclose(f);
    assert_int_equal(n, 1001); /* the old whole line is kept */
    unlink(path);
    kb_resource_unref(res);
    kb_config_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_filters),
        cmocka_unit_test(test_route_field_record_once_per_event),
        cmocka_unit_test(test_route_render),
        cmocka_unit_test(test_envelope_json),
        cmocka_unit_test(test_file_sink_whole_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
