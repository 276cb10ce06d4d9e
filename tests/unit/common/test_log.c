/* tests/unit/common/test_log.c — the log line formats: text unchanged, JSON
 * with msg as written and fields only from the call site. */
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

static void expect_line(bool json, const kb_log_field_t *fields, const char *msg, const char *want) {
    kb_buf_t b = KB_BUF_INIT;
    kb_log_format(&b, json, TS, KB_LOG_INFO, "kb:refl/pods", "reflector", fields, msg);
    assert_string_equal(b.data, want);
    kb_buf_fini(&b);
}

static void test_text_is_unchanged(void **state) {
    (void)state;
    expect_line(false, KB_FIELDS(KB_F("informer", "pods")), "informer=pods watch opened rv=123",
                TS " INFO  kb:refl/pods reflector: informer=pods watch opened rv=123\n");
}

static void test_json_msg_is_the_message_as_written(void **state) {
    (void)state;
    /* Nothing is lifted out of the prose, punctuation and all. */
    const char *msg = "informer=pods state_dir=/s/pods: 0 cached object(s), checkpoint seq=0 rv=(none), 2 change(s)";
    expect_line(true, NULL, msg, HEAD ",\"msg\":\"" "informer=pods state_dir=/s/pods: 0 cached object(s), "
                                  "checkpoint seq=0 rv=(none), 2 change(s)\"}\n");
    expect_line(true, NULL, "", HEAD ",\"msg\":\"\"}\n");
}

static void test_json_fields_come_from_the_call_site(void **state) {
    (void)state;
    expect_line(true, KB_FIELDS(KB_F("informer", "pods"), KB_FU("seq", 18446744073709551615ULL), KB_F("rv", "12")),
                "informer=pods listed seq=18446744073709551615 rv=12",
                HEAD ",\"informer\":\"pods\",\"seq\":\"18446744073709551615\",\"rv\":\"12\","
                     "\"msg\":\"informer=pods listed seq=18446744073709551615 rv=12\"}\n");
    /* NULL values, repeats and reserved keys are left out; values are escaped. */
    expect_line(true,
                KB_FIELDS(KB_F("a", NULL), KB_F("msg", "x"), KB_F("level", "9"), KB_F("path", "/a \"b\""),
                          KB_F("path", "again")),
                "m", HEAD ",\"path\":\"/a \\\"b\\\"\",\"msg\":\"m\"}\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_is_unchanged),
        cmocka_unit_test(test_json_msg_is_the_message_as_written),
        cmocka_unit_test(test_json_fields_come_from_the_call_site),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
