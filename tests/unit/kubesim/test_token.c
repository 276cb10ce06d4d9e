/* tests/unit/kubesim/test_token.c — LIST continue tokens: the real server's shape, round trips, rejects. */
#include "tests/kubesim/kubesim_int.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static void test_matches_apiserver_bytes(void **state) {
    (void)state;
    /* The example token from clientgo-semantics.md §1.10. */
    kb_buf_t b = KB_BUF_INIT;
    kb_sim__token_encode(10245, "ns1/cm-500", &b);
    assert_string_equal(b.data, "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAyNDUsInN0YXJ0IjoibnMxL2NtLTUwMFx1MDAwMCJ9");
    kb_buf_fini(&b);
}

static void test_round_trip(void **state) {
    (void)state;
    const char *keys[] = {"a", "ns/name-1", "weird\"key\\", "x/y/z"};
    int64_t rvs[] = {1, 123456789012LL, -1, 0};
    for (size_t i = 0; i < 4; i++) {
        kb_buf_t b = KB_BUF_INIT;
        kb_sim__token_encode(rvs[i], keys[i], &b);
        assert_null(strchr(b.data, '=')); /* no padding */
        int64_t rv;
        char *start;
        assert_int_equal(kb_sim__token_decode(b.data, &rv, &start), 0);
        assert_true(rv == rvs[i]);
        assert_string_equal(start, keys[i]);
        free(start);
        kb_buf_fini(&b);
    }
}

static void test_rejects(void **state) {
    (void)state;
    const char *bad[] = {"", "!!!", "e30", /* {} */ "eyJ2IjoieCIsInJ2IjoxLCJzdGFydCI6ImEifQ" /* v:x */};
    for (size_t i = 0; i < 4; i++) {
        int64_t rv;
        char *start = (char *)"untouched";
        assert_int_equal(kb_sim__token_decode(bad[i], &rv, &start), -1);
        assert_null(start);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_apiserver_bytes),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
