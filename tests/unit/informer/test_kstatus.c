/* tests/unit/informer/test_kstatus.c — the one classification table of API
 * answers: each row a user meets, the two disagreements it replaced (a 401 or
 * 403 in a watch ERROR event, ResourceVersionTooLarge under any code), the
 * API client's status mapping through it, and the Retry-After budget. */
#include "informer/apiclient.h"
#include "informer/kstatus.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

typedef struct {
    long code;
    const char *reason, *cause;
    kb_err_t err;
    kb_watch_err_t kind;
    kb_kaction_t action;
    bool retry_after;
} row_t;

static void test_rows(void **state) {
    (void)state;
    static const row_t rows[] = {
        {200, NULL, NULL, KB_OK, KB_WATCH_ERR_HTTP, KB_KACT_RETRY, false},
        {410, "Expired", NULL, KB_ERR_GONE, KB_WATCH_ERR_GONE, KB_KACT_RELIST, false},
        {410, "Gone", NULL, KB_ERR_GONE, KB_WATCH_ERR_GONE, KB_KACT_RELIST, false},
        {504, "Timeout", "ResourceVersionTooLarge", KB_ERR_TOO_LARGE_RV, KB_WATCH_ERR_SERVER, KB_KACT_RELIST, false},
        {504, "Timeout", NULL, KB_ERR_UNAVAILABLE, KB_WATCH_ERR_SERVER, KB_KACT_RETRY, true},
        {429, "TooManyRequests", NULL, KB_ERR_THROTTLED, KB_WATCH_ERR_THROTTLED, KB_KACT_RETRY, true},
        {401, "Unauthorized", NULL, KB_ERR_UNAUTHORIZED, KB_WATCH_ERR_HTTP, KB_KACT_RELIST, false},
        {403, "Forbidden", NULL, KB_ERR_FORBIDDEN, KB_WATCH_ERR_HTTP, KB_KACT_RELIST, false},
        {404, "NotFound", NULL, KB_ERR_NOTFOUND, KB_WATCH_ERR_HTTP, KB_KACT_RELIST, false},
        {500, "InternalError", NULL, KB_ERR_UNAVAILABLE, KB_WATCH_ERR_SERVER, KB_KACT_RETRY, true},
        {503, "ServiceUnavailable", NULL, KB_ERR_UNAVAILABLE, KB_WATCH_ERR_SERVER, KB_KACT_RETRY, true},
        {400, "BadRequest", NULL, KB_ERR_HTTP, KB_WATCH_ERR_HTTP, KB_KACT_RELIST, false},
        {0, "", "", KB_ERR_HTTP, KB_WATCH_ERR_HTTP, KB_KACT_RELIST, false},
        {302, NULL, NULL, KB_ERR_HTTP, KB_WATCH_ERR_HTTP, KB_KACT_RELIST, false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        kb_kclass_t c = kb_kstatus_classify(rows[i].code, rows[i].reason, rows[i].cause);
        if (c.err != rows[i].err || c.kind != rows[i].kind || c.action != rows[i].action ||
            c.retry_after != rows[i].retry_after)
            fail_msg("row %zu (%ld %s %s): got err=%s kind=%d action=%d retry_after=%d", i, rows[i].code,
                     rows[i].reason ? rows[i].reason : "-", rows[i].cause ? rows[i].cause : "-", kb_err_name(c.err),
                     c.kind, c.action, c.retry_after);
    }
}

/* The bug: ResourceVersionTooLarge was matched whatever the code; only the
 * API server's own 504 carries it. */
static void test_too_large_rv_only_for_its_code(void **state) {
    (void)state;
    assert_int_equal(kb_kstatus_classify(500, "InternalError", "ResourceVersionTooLarge").err, KB_ERR_UNAVAILABLE);
    assert_int_equal(kb_kstatus_classify(400, "BadRequest", "ResourceVersionTooLarge").err, KB_ERR_HTTP);
    assert_int_equal(kb_kstatus_classify(504, "Timeout", "ResourceVersionTooLarge").err, KB_ERR_TOO_LARGE_RV);
}

/* The API client's status mapping is the same table. */
static void test_apiclient_uses_the_table(void **state) {
    (void)state;
    static const long codes[] = {200, 204, 401, 403, 404, 410, 429, 500, 503, 504, 400, 418};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        assert_int_equal(kb_api_status_err(codes[i]), kb_kstatus_classify(codes[i], NULL, NULL).err);
}

static void test_retry_after_budget(void **state) {
    (void)state;
    kb_kclass_t throttled = kb_kstatus_classify(429, "TooManyRequests", NULL);
    kb_kclass_t gone = kb_kstatus_classify(410, "Expired", NULL);
    for (int n = 0; n < KB_KSTATUS_RETRY_AFTER_BUDGET; n++)
        assert_true(kb_kstatus_honour_retry_after(&throttled, 1, n));
    assert_false(kb_kstatus_honour_retry_after(&throttled, 1, KB_KSTATUS_RETRY_AFTER_BUDGET));
    assert_false(kb_kstatus_honour_retry_after(&throttled, 0, 0));  /* no header: backoff */
    assert_false(kb_kstatus_honour_retry_after(&throttled, -1, 0));
    assert_false(kb_kstatus_honour_retry_after(&gone, 5, 0));       /* a relist is not a retry */
}

static void test_body_excerpt(void **state) {
    (void)state;
    char out[64];
    kb_api_body_excerpt("<html>\n<b>\"hi\"</b>", 18, 100, out, sizeof(out));
    assert_string_equal(out, "<html> <b> hi </b>");
    kb_api_body_excerpt("abcdefgh", 8, 4, out, sizeof(out));
    assert_string_equal(out, "abcd\xe2\x80\xa6");
    kb_api_body_excerpt("", 0, 4, out, sizeof(out));
    assert_string_equal(out, "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_too_large_rv_only_for_its_code),
        cmocka_unit_test(test_apiclient_uses_the_table),
        cmocka_unit_test(test_retry_after_budget),
        cmocka_unit_test(test_body_excerpt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
