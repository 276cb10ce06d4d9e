/* tests/unit/common/test_log.c — the log line formats: text unchanged, JSON
 * with key=value fields lifted into members and out of msg. */
#include "common/buf.h"
#include "common/log.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#define TS "2026-12-01T14:00:00.000000Z"
#define HEAD "{\"ts\":\"" TS "\",\"level\":\"info\",\"thread\":\"kb:refl/pods\",\"module\":\"reflector\""

static void expect_line(bool json, const char *msg, const char *want) {
    kb_buf_t b = KB_BUF_INIT;
    kb_log_format(&b, json, TS, KB_LOG_INFO, "kb:refl/pods", "reflector", msg);
    assert_string_equal(b.data, want);
    kb_buf_fini(&b);
}

static void test_text_is_unchanged(void **state) {
    (void)state;
    expect_line(false, "informer=pods watch opened rv=123",
                TS " INFO  kb:refl/pods reflector: informer=pods watch opened rv=123\n");
}

static void test_json_lifts_fields(void **state) {
    (void)state;
    expect_line(true, "informer=pods watch opened rv=123",
                HEAD ",\"informer\":\"pods\",\"rv\":\"123\",\"msg\":\"watch opened\"}\n");
    expect_line(true, "sink=out topic=t1 partition=3 key=ns1/p0 delivery failed: Local: timed out; retrying",
                HEAD ",\"sink\":\"out\",\"topic\":\"t1\",\"partition\":\"3\",\"key\":\"ns1/p0\","
                     "\"msg\":\"delivery failed: Local: timed out; retrying\"}\n");
    /* Trailing punctuation stays in the prose; a parenthesised list of fields vanishes whole. */
    expect_line(true, "connect to tcp://h:1 failed: refused (retrying in 500 ms, suppressed=2)",
                HEAD ",\"suppressed\":\"2\",\"msg\":\"connect to tcp://h:1 failed: refused (retrying in 500 ms,)\"}\n");
    expect_line(true, "publish failed for good: gone (code=5 attempts=3)",
                HEAD ",\"code\":\"5\",\"attempts\":\"3\",\"msg\":\"publish failed for good: gone\"}\n");
    /* Quoted values, escapes, and keys that must not move. */
    expect_line(true, "path=\"/a b\" msg=x level=9 x=1 x=2 a\"b=c",
                HEAD ",\"path\":\"/a b\",\"x\":\"1\",\"msg\":\"msg=x level=9 x=2 a\\\"b=c\"}\n");
    /* Not fields: no key, empty value, upper-case key, inside a word. */
    expect_line(true, "=1 a= Key=v 1x=2 foo==bar", HEAD ",\"foo\":\"=bar\",\"msg\":\"=1 a= Key=v 1x=2\"}\n");
    expect_line(true, "", HEAD ",\"msg\":\"\"}\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_is_unchanged),
        cmocka_unit_test(test_json_lifts_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
