/* tests/fuzz/fuzz_watch_frame.c — libFuzzer target for watch frames.
 *
 * Arbitrary bytes as one frame, handled the way the reflector does:
 * kb_decode_watch_frame(), then the object through kb_decode_object() (with
 * the oracles of decode_oracle.h) and, for ERROR frames, kb_decode_status().
 * The object span must be exactly one scanned object inside the frame.
 * Seeds: tests/fuzz/corpus/watch/.
 */
#include "decode_oracle.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 20)
        return 0;
    const char *frame = (const char *)data;
    kb_watch_frame_t wf;
    char err[256] = "";
    if (kb_decode_watch_frame(frame, size, &wf, err, sizeof(err)) != KB_OK) {
        KB_FUZZ_CHECK(err[0]);
        return 0;
    }
    KB_FUZZ_CHECK(wf.type >= KB_WATCH_ADDED && wf.type <= KB_WATCH_ERROR);
    KB_FUZZ_CHECK(wf.object.len >= 2 && wf.object.off + wf.object.len <= size);
    size_t s, e;
    KB_FUZZ_CHECK(kb_json_scan_value(frame + wf.object.off, wf.object.len, &s, &e) == KB_JSON_OK);
    KB_FUZZ_CHECK(s == 0 && e == wf.object.len && frame[wf.object.off] == '{');
    kb_fuzz_check_object(frame + wf.object.off, wf.object.len);
    if (wf.type == KB_WATCH_ERROR) {
        kb_status_t st;
        KB_FUZZ_CHECK(kb_decode_status(frame + wf.object.off, wf.object.len, &st) == KB_OK);
        KB_FUZZ_CHECK(memchr(st.reason, '\0', sizeof(st.reason)) &&
                      memchr(st.message, '\0', sizeof(st.message)));
    }
    return 0;
}
