/* tests/unit/common/test_fields.c — field paths read from object bytes, and
 * field selectors: the names each kind knows, parsing, matching. */
#include "common/buf.h"
#include "common/fields.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

static const char *POD =
    "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p1\",\"namespace\":\"ns1\",\"labels\":{\"a\":\"b\"}},"
    "\"spec\":{\"containers\":[{\"name\":\"c\",\"x\":{\"y\":[1,2,\"}\"]}}],\"nodeName\":\"n\\u00e9\",\"hostNetwork\":true},"
    "\"status\":{\"phase\":\"Running\",\"podIP\":null}}";

static void expect_field(const char *obj, const char *path, bool found, const char *want) {
    kb_buf_t out = KB_BUF_INIT;
    bool got = kb_fields_get(obj, strlen(obj), path, &out);
    if (got != found)
        fail_msg("%s: found %d, want %d", path, got, found);
    if (strlen(want) != out.len || memcmp(out.data ? out.data : "", want, out.len))
        fail_msg("%s: \"%.*s\", want \"%s\"", path, (int)out.len, out.data ? out.data : "", want);
    kb_buf_fini(&out);
}

static void test_get(void **state) {
    (void)state;
    expect_field(POD, "metadata.name", true, "p1");
    expect_field(POD, "status.phase", true, "Running");
    expect_field(POD, "spec.nodeName", true, "n\xc3\xa9"); /* \u escapes decoded to UTF-8 */
    expect_field(POD, "spec.hostNetwork", true, "true");
    expect_field(POD, "status.podIP", true, ""); /* null reads as "" */
    expect_field(POD, "status.hostIP", false, "");
    expect_field(POD, "metadata.name.x", false, "");
    expect_field(POD, "kind", true, "Pod");
    expect_field("not json", "kind", false, "");
    expect_field("{\"a\":", "a", false, "");
    expect_field("{ \"a\" : { \"b\" : \"c\\\"d\" } }", "a.b", true, "c\"d");
}

static void expect_match(const char *sel_text, const char *group, const char *resource, const char *obj, bool want) {
    char err[256] = "";
    kb_fieldsel_t *sel = kb_fieldsel_parse(sel_text, group, resource, err, sizeof(err));
    if (!sel)
        fail_msg("\"%s\": %s", sel_text, err);
    if (kb_fieldsel_match(sel, obj, strlen(obj)) != want)
        fail_msg("\"%s\" on %s: want %d", sel_text, obj, want);
    kb_fieldsel_free(sel);
}

static void test_match(void **state) {
    (void)state;
    expect_match("", "", "pods", POD, true);
    expect_match("status.phase=Running", "", "pods", POD, true);
    expect_match("status.phase==Running", "", "pods", POD, true);
    expect_match("status.phase!=Running", "", "pods", POD, false);
    expect_match("status.phase=Pending", "", "pods", POD, false);
    expect_match("status.phase=Running, metadata.namespace=ns1", "", "pods", POD, true);
    expect_match("status.phase=Running,spec.nodeName=other", "", "pods", POD, false);
    expect_match("spec.hostNetwork=true", "", "pods", POD, true);
    expect_match("status.podIP=", "", "pods", POD, true); /* missing or null equals "" */
    expect_match("metadata.name=p1", "apps", "deployments", POD, true);
    const char *ev = "{\"kind\":\"Event\",\"reason\":\"BackOff\",\"type\":\"Warning\","
                     "\"involvedObject\":{\"kind\":\"Pod\",\"name\":\"p1\"},\"source\":{\"component\":\"kubelet\"}}";
    expect_match("reason=BackOff,type=Warning", "", "events", ev, true);
    expect_match("involvedObject.kind=Pod,source=kubelet", "", "events", ev, true);
    expect_match("type!=Warning", "", "events", ev, false);
    expect_match("reason=a\\,b", "", "events", "{\"reason\":\"a,b\"}", true);
}

static void expect_parse_error(const char *text, const char *group, const char *resource, const char *reason) {
    char err[512] = "";
    kb_fieldsel_t *sel = kb_fieldsel_parse(text, group, resource, err, sizeof(err));
    assert_null(sel);
    if (!strstr(err, reason))
        fail_msg("\"%s\": error \"%s\" does not say \"%s\"", text, err, reason);
}

static void test_parse_errors(void **state) {
    (void)state;
    expect_parse_error("status.phase=Running", "apps", "deployments",
                       "unknown field \"status.phase\" for deployments.apps");
    expect_parse_error("spec.nodename=a", "", "pods", "unknown field \"spec.nodename\" for pods (known: metadata.name");
    expect_parse_error("reason", "", "events", "expected '=', '==' or '!='");
    expect_parse_error("=x", "", "events", "a field name");
    expect_parse_error("reason=a,", "", "events", "a field name");
    expect_parse_error("reason in (a)", "", "events", "expected '=', '==' or '!='");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get),
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_parse_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
