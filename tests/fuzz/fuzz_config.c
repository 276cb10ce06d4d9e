/* tests/fuzz/fuzz_config.c — libFuzzer target for the configuration loader.
 *
 * Feeds arbitrary bytes (as text) through kb_config_load_string(): the
 * libconfig 1.5 fix-up scanner, libconfig itself and the table-driven
 * loader. On success the summary is rendered too, so every loaded field is
 * read. Must never crash, leak or trip a sanitizer; errors are expected.
 * Seeds: tests/fuzz/corpus/config/.
 */
#include "config/config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__lsan_default_suppressions(void);

/* libconfig 1.5 leaks the string it is accumulating when a syntax error
 * follows a string literal (its parser context never frees it). Not ours
 * and bounded (one buffer per failed load), so it is suppressed here, and
 * only those frames (the lexer's). */
const char *__lsan_default_suppressions(void) {
    return "leak:strbuf_append\nleak:libconfig_yylex\n";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[512];
    kb_config_t *cfg = kb_config_load_string(text, "fuzz.cfg", err, sizeof(err));
    if (cfg) {
        FILE *null = fopen("/dev/null", "w");
        if (null) {
            kb_config_summary(cfg, null);
            fclose(null);
        }
        kb_config_free(cfg);
    } else if (strncmp(err, "fuzz.cfg", 8) != 0) {
        abort(); /* every error names the file */
    }
    free(text);
    return 0;
}
