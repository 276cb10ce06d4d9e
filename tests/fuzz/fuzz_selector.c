/* tests/fuzz/fuzz_selector.c — libFuzzer target for the label selector.
 *
 * Input: the selector text up to the first newline, then the labels object
 * the compiled selector is matched against (any bytes: the matcher must cope
 * with JSON that does not parse, which counts as "no labels"). Checks, beyond
 * "no crash, no leak, no sanitizer report":
 *  - a refused selector always says why, naming the selector;
 *  - matching is a pure function (same answer twice);
 *  - the empty selector and a selector of only blanks match everything;
 *  - with no labels at all, `k` and `k=v` never match and `!k`, `k!=v`,
 *    `k notin (…)` always do, so every requirement's "missing key" branch is
 *    checked against the Kubernetes rule.
 * Seeds: tests/fuzz/corpus/selector/.
 */
#include "common/selector.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool kb_fz_keych(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-' || c == '/';
}

/* The answer for an object without labels, derived from the (accepted) text
 * alone: true unless some requirement needs its key present (k, k=v, k in).
 * Each requirement is "[!]key [op …]"; only !key, != and notin hold without it. */
static bool kb_fz_expect_unlabelled(const char *p) {
    for (;;) {
        p += strspn(p, " \t");
        if (!*p)
            return true;
        bool neg = *p == '!';
        if (neg)
            p += 1 + strspn(p + 1, " \t");
        while (kb_fz_keych(*p))
            p++;
        p += strspn(p, " \t");
        bool holds = neg || (p[0] == '!' && p[1] == '=') || (!strncmp(p, "notin", 5) && !kb_fz_keych(p[5]));
        if (!holds)
            return false;
        /* skip to the comma ending this requirement (commas inside "( … )" do not) */
        bool in_set = false;
        for (; *p && (in_set || *p != ','); p++) {
            if (*p == '(' || *p == ')')
                in_set = *p == '(';
        }
        if (*p == ',')
            p++;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 14)
        return 0;
    const uint8_t *nl = memchr(data, '\n', size);
    size_t tlen = nl ? (size_t)(nl - data) : size;
    char *text = malloc(tlen + 1);
    if (!text)
        return 0;
    memcpy(text, data, tlen);
    text[tlen] = '\0';
    const char *labels = nl ? (const char *)nl + 1 : NULL;
    size_t llen = nl ? size - tlen - 1 : 0;

    char err[512] = "";
    kb_selector_t *sel = kb_selector_parse(text, err, sizeof(err));
    if (!sel) {
        if (strncmp(err, "label selector \"", 16) != 0)
            abort();
        free(text);
        return 0;
    }
    bool a = kb_selector_match_json(sel, labels, llen);
    bool b = kb_selector_match_json(sel, labels, llen);
    if (a != b)
        abort();
    if (strspn(text, " \t") == strlen(text) && !a)
        abort();
    if (kb_selector_match_json(sel, NULL, 0) != kb_fz_expect_unlabelled(text))
        abort();
    kb_selector_free(sel);
    free(text);
    return 0;
}
