/* tests/unit/common/test_template.c — topic and key templates: variables,
 * collapse of empty parts, MQTT escaping, literal braces, compile errors. */
#include "common/buf.h"
#include "common/event.h"
#include "common/template.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

static kb_resource_t *pods, *nodes, *deploys;

static int setup(void **state) {
    (void)state;
    pods = kb_resource_new("c", "pods", "", "v1", "pods");
    kb_resource_set_kind(pods, "Pod", 3);
    nodes = kb_resource_new("c", "nodes", "", "v1", "nodes");
    kb_resource_set_kind(nodes, "Node", 4);
    deploys = kb_resource_new("prod", "deploys", "apps", "v1", "deployments");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kb_resource_unref(pods);
    kb_resource_unref(nodes);
    kb_resource_unref(deploys);
    return 0;
}

static kb_event_t *mk(kb_resource_t *res, kb_event_type_t type, const char *ns, const char *name, size_t name_len) {
    kb_event_init_t in = {
        .type = type,
        .res = res,
        .ns = ns, .ns_len = strlen(ns),
        .name = name, .name_len = name_len,
        .uid = "uid-1", .uid_len = 5,
        .rv = "7", .rv_len = 1,
        .obj = "{}", .obj_len = 2,
    };
    return kb_event_new(&in);
}

/* Compile text, render it for ev with flags, compare with want. */
static void expect_render(const char *text, const kb_event_t *ev, unsigned flags, const char *want) {
    char err[256] = "";
    kb_template_t *t = kb_template_compile(text, err, sizeof(err));
    if (!t)
        fail_msg("compile \"%s\": %s", text, err);
    assert_string_equal(kb_template_text(t), text);
    kb_buf_t out = KB_BUF_INIT;
    kb_template_render(t, ev, flags, &out);
    if (strlen(want) != out.len || memcmp(out.data ? out.data : "", want, out.len))
        fail_msg("\"%s\" rendered \"%.*s\", want \"%s\"", text, (int)out.len, out.data ? out.data : "", want);
    kb_buf_fini(&out);
    kb_template_free(t);
}

static void test_variables(void **state) {
    (void)state;
    kb_event_t *ev = mk(pods, KB_EV_MODIFIED, "ns1", "p1", 2);
    expect_render("k8s.{cluster}.{resource}", ev, 0, "k8s.c.pods");
    expect_render("{cluster}|{group}|{version}|{resource}|{kind}|{namespace}|{name}|{uid}|{type}", ev, 0,
                  "c||v1|pods|Pod|ns1|p1|uid-1|MODIFIED");
    expect_render("no variables", ev, 0, "no variables");
    expect_render("", ev, 0, "");
    kb_event_unref(ev);

    ev = mk(deploys, KB_EV_ADDED, "team-a", "web", 3);
    expect_render("{cluster}.{group}.{version}.{resource}.{kind}", ev, 0, "prod.apps.v1.deployments");
    expect_render("{cluster}/{group}/{resource}", ev, 0, "prod/apps/deployments");
    kb_event_unref(ev);
}

/* Cluster-scoped objects have no namespace: one separator goes with it. */
static void test_collapse_empty(void **state) {
    (void)state;
    kb_event_t *node = mk(nodes, KB_EV_ADDED, "", "n1", 2);
    expect_render("k8s/{cluster}/{resource}/{namespace}/{name}", node, 0, "k8s/c/nodes/n1");
    expect_render("{namespace}/{name}", node, 0, "n1");
    expect_render("k8s/{namespace}/{name}", node, 0, "k8s/n1");
    expect_render("k8s.{resource}.{namespace}", node, 0, "k8s.nodes");
    expect_render("{namespace}", node, 0, "");
    /* Two empty variables in a row (no group in the core API). */
    expect_render("k8s/{group}/{namespace}/{name}", node, 0, "k8s/n1");
    expect_render("{group}-{namespace}-{name}", node, 0, "n1");
    expect_render("{name}:{namespace}", node, 0, "n1");
    expect_render("{name}_{namespace}_x", node, 0, "n1_x");
    expect_render("{resource}.{group}", node, 0, "nodes");
    expect_render("{group}.{version}.{kind}", node, 0, "v1.Node");
    /* Appending to a buffer never eats what was there before. */
    kb_template_t *t = kb_template_compile("{namespace}/{name}", NULL, 0);
    assert_non_null(t);
    kb_buf_t out = KB_BUF_INIT;
    kb_buf_append_str(&out, "prefix/");
    kb_template_render(t, node, 0, &out);
    assert_string_equal(out.data, "prefix/n1");
    kb_buf_fini(&out);
    kb_template_free(t);
    kb_event_unref(node);

    /* Namespaced objects keep every part. */
    kb_event_t *pod = mk(pods, KB_EV_ADDED, "ns1", "p1", 2);
    expect_render("k8s/{cluster}/{resource}/{namespace}/{name}", pod, 0, "k8s/c/pods/ns1/p1");
    expect_render("{namespace}/{name}", pod, 0, "ns1/p1");
    kb_event_unref(pod);
}

/* With MQTT escaping a value can never add a topic level or a wildcard;
 * literal parts of the template are left alone. */
static void test_mqtt_escape(void **state) {
    (void)state;
    const char name[] = "a/b+c#d%e\0f";
    kb_event_t *ev = mk(pods, KB_EV_ADDED, "ns1", name, sizeof(name) - 1);
    expect_render("k8s/{namespace}/{name}", ev, KB_TEMPLATE_ESCAPE_MQTT, "k8s/ns1/a%2Fb%2Bc%23d%25e%00f");
    expect_render("+/#/{namespace}", ev, KB_TEMPLATE_ESCAPE_MQTT, "+/#/ns1");
    kb_event_unref(ev);

    /* Without the flag the value is copied as is. */
    ev = mk(pods, KB_EV_ADDED, "ns1", "a/b+c", 5);
    expect_render("{name}", ev, 0, "a/b+c");
    expect_render("{name}", ev, KB_TEMPLATE_ESCAPE_MQTT, "a%2Fb%2Bc");
    kb_event_unref(ev);

    /* A value that is nothing but escapes, and an empty one next to it. */
    kb_event_t *node = mk(nodes, KB_EV_ADDED, "", "%%", 2);
    expect_render("t/{namespace}/{name}", node, KB_TEMPLATE_ESCAPE_MQTT, "t/%25%25");
    kb_event_unref(node);
}

static void test_literal_braces(void **state) {
    (void)state;
    kb_event_t *ev = mk(pods, KB_EV_ADDED, "ns1", "p1", 2);
    expect_render("{{name}}", ev, 0, "{name}");
    expect_render("{{{name}}}", ev, 0, "{p1}");
    expect_render("a{{b}}c.{name}", ev, 0, "a{b}c.p1");
    kb_event_unref(ev);
}

static void expect_compile_error(const char *text, const char *reason) {
    char err[256] = "";
    kb_template_t *t = kb_template_compile(text, err, sizeof(err));
    assert_null(t);
    if (!strstr(err, reason))
        fail_msg("compile \"%s\": error \"%s\" does not say \"%s\"", text, err, reason);
}

static void test_compile_errors(void **state) {
    (void)state;
    expect_compile_error("k8s.{foo}", "unknown variable {foo}");
    expect_compile_error("{}", "unknown variable {}");
    expect_compile_error("{Name}", "unknown variable {Name}");
    expect_compile_error("k8s.{name", "'{' without a closing '}'");
    expect_compile_error("k8s.name}", "unbalanced '}'");
    expect_compile_error("{name}}", "unbalanced '}'");
    /* The error names the template it is about. */
    expect_compile_error("topic.{oops}", "topic.{oops}");
}

static void test_per_object(void **state) {
    (void)state;
    static const struct {
        const char *text;
        bool per_object;
    } cases[] = {
        {"k8s.{cluster}.{group}.{version}.{resource}.{kind}", false},
        {"k8s.{namespace}", true},
        {"k8s.{name}", true},
        {"k8s.{uid}", true},
        {"k8s.{type}", true},
        {"{{name}}", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kb_template_t *t = kb_template_compile(cases[i].text, NULL, 0);
        assert_non_null(t);
        assert_int_equal(kb_template_is_per_object(t), cases[i].per_object);
        kb_template_free(t);
    }
    kb_template_free(NULL);
}

/* An event whose object is obj, with its metadata.labels span found in it. */
static kb_event_t *mk_obj(kb_resource_t *res, const char *ns, const char *name, const char *obj) {
    const char *l = strstr(obj, "\"labels\":{");
    size_t off = 0, len = 0;
    if (l) {
        off = (size_t)(l - obj) + 9;
        len = (size_t)(strchr(obj + off, '}') - (obj + off)) + 1;
    }
    kb_event_init_t in = {.type = KB_EV_ADDED, .res = res, .ns = ns, .ns_len = strlen(ns), .name = name,
                          .name_len = strlen(name), .uid = "uid-1", .uid_len = 5, .rv = "7", .rv_len = 1,
                          .obj = obj, .obj_len = strlen(obj), .labels_off = off, .labels_len = len};
    return kb_event_new(&in);
}

/* {labels.KEY} and {annotations.KEY} read the object; "|default" stands in
 * for a missing (or empty) value, and any variable may have one. */
static void test_labels_annotations(void **state) {
    (void)state;
    kb_event_t *ev = mk_obj(pods, "ns1", "p1",
                            "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p1\",\"labels\":{\"app\":\"web\","
                            "\"app.kubernetes.io/part-of\":\"shop\"},\"annotations\":{\"team\":\"a/b\","
                            "\"example.com/owner\":\"ops\",\"q\":\"x\\\"y\"}},\"spec\":{}}");
    expect_render("k8s.{labels.app}.{name}", ev, 0, "k8s.web.p1");
    expect_render("{labels.app.kubernetes.io/part-of}", ev, 0, "shop");
    expect_render("{labels.tier|none}/{name}", ev, 0, "none/p1");
    expect_render("{labels.tier}/{name}", ev, 0, "p1"); /* empty collapses as ever */
    expect_render("{labels.app|none}", ev, 0, "web");
    expect_render("{annotations.example.com/owner|nobody}", ev, 0, "ops");
    expect_render("{annotations.missing|nobody}", ev, 0, "nobody");
    expect_render("t/{annotations.team}", ev, KB_TEMPLATE_ESCAPE_MQTT, "t/a%2Fb");
    expect_render("t/{labels.none|x/y}", ev, KB_TEMPLATE_ESCAPE_MQTT, "t/x%2Fy"); /* a default is a value */
    expect_render("{annotations.q}", ev, 0, "x\"y"); /* JSON escapes decoded */
    expect_render("{labels.app|}", ev, 0, "web");
    kb_event_unref(ev);

    kb_event_t *node = mk(nodes, KB_EV_ADDED, "", "n1", 2); /* object "{}" */
    expect_render("{namespace|_cluster}/{name}", node, 0, "_cluster/n1");
    expect_render("{labels.app|none}.{annotations.a|-}", node, 0, "none.-");
    kb_event_unref(node);
}

static void test_labels_compile(void **state) {
    (void)state;
    expect_compile_error("{labels.}", "{labels.}: a label key");
    expect_compile_error("{labels.a b}", "{labels.a b}: a label key");
    expect_compile_error("{annotations.}", "{annotations.}: an annotation key");
    expect_compile_error("{label.app}", "unknown variable {label.app}");
    expect_compile_error("{labels.app|a{b}", "'{'");
    kb_template_t *t = kb_template_compile("k8s.{labels.app|none}", NULL, 0);
    assert_non_null(t);
    assert_true(kb_template_is_per_object(t));
    kb_template_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_variables),
        cmocka_unit_test(test_collapse_empty),
        cmocka_unit_test(test_mqtt_escape),
        cmocka_unit_test(test_literal_braces),
        cmocka_unit_test(test_compile_errors),
        cmocka_unit_test(test_per_object),
        cmocka_unit_test(test_labels_annotations),
        cmocka_unit_test(test_labels_compile),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
