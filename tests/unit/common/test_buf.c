/* tests/unit/common/test_buf.c — filling text into lines (kb_buf_append_filled):
 * words fill up to the width, newlines start lines, an over-long word is cut
 * after a '/' or '.', and UTF-8 characters count as one column. */
#include "common/buf.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static void filled(const char *indent, const char *text, size_t width, const char *want) {
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_append_filled(&b, indent, text, width);
    assert_string_equal(b.data ? b.data : "", want);
    kb_buf_fini(&b);
}

static void test_words_fill_lines(void **state) {
    (void)state;
    filled("  ", "one two three four five", 12, "  one two\n  three four\n  five\n");
    filled("", "a\nb c", 10, "a\nb c\n");
    filled("", "", 10, "");
}

static void test_long_word_is_cut_after_a_slash_or_dot(void **state) {
    (void)state;
    filled("  ", "x kubectl.kubernetes.io/last-applied y", 16,
           "  x\n  kubectl.\n  kubernetes.io/\n  last-applied y\n");
    filled("", "abcdefghijklmnopqrstu", 10, "abcdefghij\nklmnopqrst\nu\n");
}

static void test_utf8_counts_characters(void **state) {
    (void)state;
    filled("", "ab — cd", 7, "ab — cd\n"); /* 7 characters, 9 bytes */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_words_fill_lines),
        cmocka_unit_test(test_long_word_is_cut_after_a_slash_or_dot),
        cmocka_unit_test(test_utf8_counts_characters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
