/* tests/fuzz/fuzz_list.c — libFuzzer target for list pages.
 *
 * Arbitrary bytes as a list response: kb_decode_list() must refuse or
 * return spans that lie inside the body, each item exactly one scanned
 * object, and each item goes through kb_decode_object() with the oracles of
 * decode_oracle.h, as the reflector does. Status bodies are tried too.
 * Seeds: tests/fuzz/corpus/list/.
 */
#include "decode_oracle.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void kb_fuzz_check_contents(const char *body, size_t size, kb_span_t sp) {
    if (sp.len)
        KB_FUZZ_CHECK(sp.off > 0 && sp.off + sp.len < size && body[sp.off - 1] == '"' &&
                      body[sp.off + sp.len] == '"');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 20)
        return 0;
    const char *body = (const char *)data;
    kb_status_t st;
    (void)kb_decode_status(body, size, &st);
    kb_list_page_t page;
    char err[256] = "";
    if (kb_decode_list(body, size, &page, err, sizeof(err)) != KB_OK) {
        KB_FUZZ_CHECK(err[0] && page.items == NULL && page.n_items == 0);
        return 0;
    }
    kb_fuzz_check_contents(body, size, page.kind);
    kb_fuzz_check_contents(body, size, page.rv);
    kb_fuzz_check_contents(body, size, page.cont);
    KB_FUZZ_CHECK(page.n_items <= page.cap_items);
    for (size_t k = 0; k < page.n_items; k++) {
        kb_span_t it = page.items[k];
        KB_FUZZ_CHECK(it.off + it.len <= size && body[it.off] == '{');
        size_t s, e;
        KB_FUZZ_CHECK(kb_json_scan_value(body + it.off, it.len, &s, &e) == KB_JSON_OK);
        KB_FUZZ_CHECK(s == 0 && e == it.len);
        if (k > 0)
            KB_FUZZ_CHECK(it.off >= page.items[k - 1].off + page.items[k - 1].len);
        kb_fuzz_check_object(body + it.off, it.len);
    }
    kb_list_page_fini(&page);
    return 0;
}
