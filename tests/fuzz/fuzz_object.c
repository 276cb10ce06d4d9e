/* tests/fuzz/fuzz_object.c — libFuzzer target for kb_decode_object().
 *
 * Arbitrary bytes as one object: the decoder must never crash, read out of
 * bounds or disagree with the scanner. The oracles are in decode_oracle.h
 * (output = input minus whitespace; output always valid JSON; spans inside
 * the output). Seeds: tests/fuzz/corpus/object/.
 */
#include "decode_oracle.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 20)
        return 0;
    kb_fuzz_check_object((const char *)data, size);
    return 0;
}
