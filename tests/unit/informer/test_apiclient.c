/* tests/unit/informer/test_apiclient.c — the (verb, resource) a request is
 * counted under in kbridge_apiserver_requests_total. */
#include "informer/apiclient.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

static void expect_class(const char *path, const char *verb, const char *resource) {
    const char *v = NULL;
    char r[96];
    kb_api_path_classify(path, &v, r, sizeof(r));
    assert_string_equal(v, verb);
    assert_string_equal(r, resource);
}

static void test_classify(void **state) {
    (void)state;
    expect_class("/api/v1/pods?limit=500&resourceVersion=0", "list", "pods");
    expect_class("/api/v1/pods?watch=true&resourceVersion=12", "watch", "pods");
    expect_class("/api/v1/namespaces/ns1/pods?allowWatchBookmarks=true&watch=1", "watch", "pods");
    expect_class("/api/v1/namespaces/ns1/pods/p0", "get", "pods");
    expect_class("/api/v1/namespaces/ns1/pods/p0/log", "get", "pods/log");
    expect_class("/api/v1/namespaces", "list", "namespaces");
    expect_class("/api/v1/namespaces/ns1", "get", "namespaces");
    expect_class("/apis/apps/v1/deployments?limit=10", "list", "deployments.apps");
    expect_class("/apis/apps/v1/namespaces/x/deployments?watch=true", "watch", "deployments.apps");
    expect_class("/apis/example.com/v1/widgets/w1", "get", "widgets.example.com");
    expect_class("/version", "get", "");
    expect_class("/apis", "get", "");
    expect_class("/apis/apps/v1", "get", "");
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_classify)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
