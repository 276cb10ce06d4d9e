/* tests/unit/common/test_fieldsel.c — field selectors per kind: which labels
 * each kind accepts (and the server's wording when not), how values are
 * read (missing "", bools, counts, the first pod IP, an event's source),
 * escapes, and matching on identity and record; and the cases routes'
 * field_selector relied on before it became this module (unicode escapes,
 * null, nested values that hold brackets). */
#include "common/fieldsel.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Does sel (for group/resource) select the object obj named ns/name? */
static bool sel_matches(const char *group, const char *resource, const char *sel, const char *ns, const char *name,
                        const char *obj) {
    const kb_fields_kind_t *kind = kb_fields_kind(group, resource);
    kb_fieldsel_t *fs = NULL;
    char err[256] = "";
    if (!kb_fieldsel_parse(kind, sel, &fs, err, sizeof(err)))
        fail_msg("%s: %s", sel, err);
    kb_buf_t rec;
    kb_buf_init(&rec);
    kb_fields_extract(kind, obj, strlen(obj), &rec);
    bool ok = kb_fieldsel_match(fs, ns, strlen(ns), name, strlen(name), rec.data, rec.len);
    kb_buf_fini(&rec);
    kb_fieldsel_free(fs);
    return ok;
}

/* The parse error for sel, "" when it parses. */
static const char *sel_error(const char *group, const char *resource, const char *sel) {
    static char err[256];
    kb_fieldsel_t *fs = NULL;
    err[0] = '\0';
    if (kb_fieldsel_parse(kb_fields_kind(group, resource), sel, &fs, err, sizeof(err)))
        kb_fieldsel_free(fs);
    return err;
}

static const char *const POD = "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"nodeName\":\"node-1\",\"containers\":"
                               "[{\"name\":\"c\",\"env\":[{\"name\":\"x\",\"value\":\"a,b\"}]}]},\"status\":{"
                               "\"phase\":\"Running\",\"podIP\":\"10.0.0.9\",\"podIPs\":[{\"ip\":\"10.0.0.5\"},"
                               "{\"ip\":\"fd00::5\"}]}}";

static void test_pod_fields(void **state) {
    (void)state;
    assert_true(sel_matches("", "pods", "spec.nodeName=node-1", "ns", "p", POD));
    assert_true(sel_matches("", "pods", "spec.nodeName==node-1,status.phase=Running", "ns", "p", POD));
    assert_false(sel_matches("", "pods", "spec.nodeName!=node-1", "ns", "p", POD));
    assert_true(sel_matches("", "pods", "spec.host=node-1", "ns", "p", POD));
    assert_true(sel_matches("", "pods", "spec.hostNetwork=false", "ns", "p", POD));
    assert_true(sel_matches("", "pods", "spec.restartPolicy=", "ns", "p", POD));
    assert_true(sel_matches("", "pods", "status.podIP=10.0.0.5", "ns", "p", POD));   /* podIPs[0] wins */
    assert_false(sel_matches("", "pods", "status.podIPs=10.0.0.5", "ns", "p", POD)); /* never set */
    assert_true(sel_matches("", "pods", "status.podIPs=", "ns", "p", POD));
    assert_true(sel_matches("", "pods", "metadata.namespace=ns,metadata.name=p", "ns", "p", POD));
    assert_true(sel_matches("", "pods", "status.podIP=10.0.0.6", "ns", "p",
                            "{\"status\":{\"podIP\":\"10.0.0.6\"},\"spec\":{\"hostNetwork\":true}}"));
    assert_true(sel_matches("", "pods", "spec.hostNetwork=true,spec.nodeName=", "ns", "p",
                            "{\"spec\":{\"hostNetwork\":true}}"));
    assert_true(sel_matches("", "pods", "", "ns", "p", POD));
}

static void test_event_fields(void **state) {
    (void)state;
    const char *ev = "{\"involvedObject\":{\"kind\":\"Pod\",\"name\":\"p\",\"uid\":\"u\"},\"reason\":\"BackOff\","
                     "\"type\":\"Warning\",\"source\":{},\"reportingComponent\":\"kubelet\"}";
    assert_true(sel_matches("", "events", "involvedObject.name=p,involvedObject.uid=u,involvedObject.kind=Pod", "ns",
                            "e", ev));
    assert_true(sel_matches("", "events", "involvedObject.namespace=,involvedObject.fieldPath=", "ns", "e", ev));
    assert_true(sel_matches("", "events", "source=kubelet,type=Warning,reason=BackOff", "ns", "e", ev));
    assert_true(sel_matches("", "events", "source=sched", "ns", "e",
                            "{\"source\":{\"component\":\"sched\"},\"reportingComponent\":\"kubelet\"}"));
}

static void test_other_kinds(void **state) {
    (void)state;
    assert_true(sel_matches("", "secrets", "type=kubernetes.io/tls", "ns", "s", "{\"type\":\"kubernetes.io/tls\"}"));
    assert_true(sel_matches("", "nodes", "spec.unschedulable=false", "", "n", "{\"spec\":{}}"));
    assert_true(sel_matches("", "nodes", "spec.unschedulable=true", "", "n", "{\"spec\":{\"unschedulable\":true}}"));
    assert_true(sel_matches("", "namespaces", "status.phase=Active", "", "n", "{\"status\":{\"phase\":\"Active\"}}"));
    assert_true(sel_matches("apps", "replicasets", "status.replicas=0", "ns", "r", "{\"status\":{}}"));
    assert_true(sel_matches("", "replicationcontrollers", "status.replicas=3", "ns", "r",
                            "{\"status\":{\"replicas\":3}}"));
    assert_true(sel_matches("batch", "jobs", "status.successful=2", "ns", "j", "{\"status\":{\"succeeded\":2}}"));
    assert_true(sel_matches("", "services", "spec.type=ClusterIP", "ns", "s", "{\"spec\":{\"type\":\"ClusterIP\"}}"));
    assert_true(sel_matches("", "configmaps", "metadata.name=c,metadata.namespace!=x", "ns", "c", "{}"));
}

static void test_refused(void **state) {
    (void)state;
    assert_string_equal(sel_error("", "pods", "status.hostIP=1"), "field label not supported: status.hostIP");
    assert_string_equal(sel_error("", "nodes", "metadata.namespace=x"), "field label not supported: metadata.namespace");
    assert_string_equal(sel_error("", "namespaces", "metadata.namespace=x"),
                        "field label not supported: metadata.namespace");
    assert_string_equal(sel_error("", "secrets", "spec.nodeName=x"), "field label not supported: spec.nodeName");
    assert_string_equal(sel_error("", "configmaps", "data.x=y"),
                        "\"data.x\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"");
    assert_string_equal(sel_error("example.com", "widgets", "status.phase=x"),
                        "\"status.phase\" is not a known field selector: only \"metadata.name\", "
                        "\"metadata.namespace\"");
    assert_string_equal(sel_error("", "pods", "spec.nodeName"),
                        "invalid selector: 'spec.nodeName'; can't understand 'spec.nodeName'");
    assert_string_equal(sel_error("", "pods", "spec.nodeName=a\\qb"),
                        "invalid field selector: invalid escape sequence: \\q");
    assert_string_equal(sel_error("", "pods", "spec.nodeName=a\\"), "invalid field selector: invalid escape sequence: \\");
    assert_string_equal(sel_error("", "pods", "spec.nodeName=a=b"),
                        "invalid field selector: unescaped character in value: 61");
    assert_string_equal(sel_error("", "pods", "spec.nodeName!=a!b"), "");
    assert_string_equal(sel_error("", "pods", "spec.nodeName=a,,status.phase=b,"), "");
}

static void test_escapes(void **state) {
    (void)state;
    const char *ev = "{\"reason\":\"a,b=c\\\\d\"}";
    assert_true(sel_matches("", "events", "reason=a\\,b\\=c\\\\d", "ns", "e", ev));
    assert_false(sel_matches("", "events", "reason=a\\,b\\=c\\\\d,type=x", "ns", "e", ev));
    assert_true(sel_matches("", "events", "reason!=a\\,b,type=", "ns", "e", ev));
}

/* Routes filter on the objects as the sinks see them; these came from the
 * route filter's own tests and hold for the kube API's selectors too. */
static const char *const RPOD =
    "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p1\",\"namespace\":\"ns1\",\"labels\":{\"a\":\"b\"}},"
    "\"spec\":{\"containers\":[{\"name\":\"c\",\"x\":{\"y\":[1,2,\"}\"]}}],\"nodeName\":\"n\\u00e9\","
    "\"hostNetwork\":true},\"status\":{\"phase\":\"Running\",\"podIP\":null}}";

static void test_route_cases(void **state) {
    (void)state;
    assert_true(sel_matches("", "pods", "status.phase==Running", "ns1", "p1", RPOD));
    assert_false(sel_matches("", "pods", "status.phase=Pending", "ns1", "p1", RPOD));
    assert_true(sel_matches("", "pods", "status.phase=Running,metadata.namespace=ns1", "ns1", "p1", RPOD));
    assert_false(sel_matches("", "pods", "status.phase=Running,spec.nodeName=other", "ns1", "p1", RPOD));
    assert_true(sel_matches("", "pods", "spec.nodeName=n\xc3\xa9", "ns1", "p1", RPOD)); /* \u escapes decoded */
    assert_true(sel_matches("", "pods", "spec.hostNetwork=true", "ns1", "p1", RPOD));
    assert_true(sel_matches("", "pods", "status.podIP=", "ns1", "p1", RPOD)); /* null reads as "" */
    assert_true(sel_matches("apps", "deployments", "metadata.name=p1", "ns1", "p1", RPOD));
    const char *ev = "{\"kind\":\"Event\",\"reason\":\"BackOff\",\"type\":\"Warning\","
                     "\"involvedObject\":{\"kind\":\"Pod\",\"name\":\"p1\"},\"source\":{\"component\":\"kubelet\"}}";
    assert_true(sel_matches("", "events", "involvedObject.kind=Pod,source=kubelet", "ns1", "e", ev));
    assert_false(sel_matches("", "events", "type!=Warning", "ns1", "e", ev));
    assert_true(sel_matches("", "events", "reason=a\\,b", "ns1", "e", "{\"reason\":\"a,b\"}"));
    /* bytes that do not parse read as missing fields, never past their end */
    assert_true(sel_matches("", "pods", "status.phase=", "ns1", "p1", "{\"status\":{\"phase\":\"Run"));
    assert_true(sel_matches("", "pods", "spec.nodeName=", "ns1", "p1", "not json"));
    assert_string_equal(sel_error("", "pods", "reason in (a)"),
                        "invalid selector: 'reason in (a)'; can't understand 'reason in (a)'");
    assert_string_equal(sel_error("apps", "deployments", "status.phase=Running"),
                        "\"status.phase\" is not a known field selector: only \"metadata.name\", "
                        "\"metadata.namespace\"");
}

/* A CRD's selectableFields, learned: strings, integers and bools as the
 * server's field set holds them, missing or null ""; the CR wording for an
 * unknown label; metadata.namespace only when namespaced; the events.k8s.io
 * Event's own labels. */
static void test_learned_and_events_v1(void **state) {
    (void)state;
    const char *paths[] = {".spec.color", ".spec.size", ".spec.on", ".spec.gone"};
    assert_string_equal(sel_error("example.com", "gadgets", "spec.color=red"),
                        "\"spec.color\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"");
    kb_fields_kind_learn("example.com", "gadgets", true, paths, 4);
    kb_fields_kind_learn("example.com", "racks", false, paths, 1);
    const char *g = "{\"spec\":{\"color\":\"red\",\"size\":3,\"on\":true,\"gone\":null}}";
    assert_true(sel_matches("example.com", "gadgets", "spec.color=red,spec.size=3,spec.on=true", "ns", "g", g));
    assert_true(sel_matches("example.com", "gadgets", "spec.gone=,metadata.namespace=ns", "ns", "g", g));
    assert_false(sel_matches("example.com", "gadgets", "spec.on=false", "ns", "g", g));
    assert_true(sel_matches("example.com", "gadgets", "spec.color=,spec.size=,spec.on=", "ns", "g", "{}"));
    assert_string_equal(sel_error("example.com", "gadgets", "spec.zone=a"), "field label not supported: spec.zone");
    assert_string_equal(sel_error("example.com", "racks", "metadata.namespace=a"),
                        "field label not supported: metadata.namespace");
    const char *ev = "{\"regarding\":{\"kind\":\"Pod\",\"name\":\"p\"},\"reportingController\":\"kubelet\","
                     "\"reason\":\"BackOff\",\"type\":\"Warning\"}";
    assert_true(sel_matches("events.k8s.io", "events", "regarding.kind=Pod,regarding.name=p,regarding.uid=", "ns",
                            "e", ev));
    assert_true(sel_matches("events.k8s.io", "events", "reportingController=kubelet,reason=BackOff,type=Warning",
                            "ns", "e", ev));
    assert_string_equal(sel_error("events.k8s.io", "events", "involvedObject.name=p"),
                        "field label not supported: involvedObject.name");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pod_fields),
        cmocka_unit_test(test_event_fields),
        cmocka_unit_test(test_other_kinds),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_route_cases),
        cmocka_unit_test(test_learned_and_events_v1),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
