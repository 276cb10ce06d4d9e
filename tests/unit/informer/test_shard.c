/* tests/unit/informer/test_shard.c — replica ownership (informer/shard.h):
 * the hash against vectors computed elsewhere, the range split, the
 * shardSelector text kube-apiserver 1.36 parses, and that the replicas of one
 * configuration own every object exactly once whichever function they use.
 *
 * The expected values were computed outside this code: FNV-1a 64 with
 * Python (h ^= byte; h *= 0x100000001b3 mod 2^64, from 0xcbf29ce484222325)
 * and with Go's hash/fnv New64a (what apimachinery's sharding.HashField
 * uses), which agree; the cuts are Python's (i << 64) // n. */
#include "common/hash.h"
#include "informer/shard.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

static void test_fnv1a_vectors(void **state) {
    (void)state;
    static const struct {
        const char *s;
        uint64_t h;
    } v[] = {
        {"", UINT64_C(0xcbf29ce484222325)},
        {"a", UINT64_C(0xaf63dc4c8601ec8c)},
        {"foobar", UINT64_C(0x85944171f73967e8)},
        {"0b9c2a7e-5d41-4f6e-9a53-2c8f1e7d4b60", UINT64_C(0x9a23d23ed58baf09)},
        {"kube-system", UINT64_C(0xdf65c7bc1d82b35e)},
        {"default/cm-1", UINT64_C(0xc739162eef9eaa6d)},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        assert_true(kb_fnv1a64(v[i].s, strlen(v[i].s)) == v[i].h);
}

static void test_range_cuts(void **state) {
    (void)state;
    uint64_t s, e;
    bool top;
    kb_shard_range(1, 0, &s, &e, &top);
    assert_true(s == 0 && top);
    kb_shard_range(2, 1, &s, &e, &top);
    assert_true(s == UINT64_C(0x8000000000000000) && top);
    kb_shard_range(3, 0, &s, &e, &top);
    assert_true(s == 0 && e == UINT64_C(0x5555555555555555) && !top);
    kb_shard_range(3, 1, &s, &e, &top);
    assert_true(s == UINT64_C(0x5555555555555555) && e == UINT64_C(0xaaaaaaaaaaaaaaaa) && !top);
    kb_shard_range(3, 2, &s, &e, &top);
    assert_true(s == UINT64_C(0xaaaaaaaaaaaaaaaa) && top);
    kb_shard_range(7, 1, &s, &e, &top);
    assert_true(s == UINT64_C(0x2492492492492492) && e == UINT64_C(0x4924924924924924));
    kb_shard_range(7, 6, &s, &e, &top);
    assert_true(s == UINT64_C(0xdb6db6db6db6db6d) && top);
    kb_shard_range(1024, 1023, &s, &e, &top);
    assert_true(s == UINT64_C(0xffc0000000000000) && top);
}

/* For every replica count: the ranges start at 0, each begins where the one
 * before ends, the last runs to 2^64, and widths differ by at most one. */
static void test_ranges_tile_the_space(void **state) {
    (void)state;
    for (int n = 1; n <= 1024; n++) {
        uint64_t prev_end = 0, min_w = UINT64_MAX, max_w = 0;
        for (int i = 0; i < n; i++) {
            uint64_t s, e;
            bool top;
            kb_shard_range(n, i, &s, &e, &top);
            assert_true(s == prev_end);
            assert_true(top == (i == n - 1));
            uint64_t w = top ? (UINT64_MAX - s) + 1 : e - s; /* the whole space (n = 1) wraps to 0 */
            if (n > 1) {
                min_w = w < min_w ? w : min_w;
                max_w = w > max_w ? w : max_w;
            }
            prev_end = e;
        }
        assert_true(n == 1 || max_w - min_w <= 1);
    }
}

static void test_selector_text(void **state) {
    (void)state;
    char out[160];
    kb_shard_t s;
    kb_shard_init(&s, 2, 0, true, KB_SHARD_FIELD_UID);
    kb_shard_selector(&s, out, sizeof(out));
    assert_string_equal(out, "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')");
    kb_shard_init(&s, 2, 1, true, KB_SHARD_FIELD_UID);
    kb_shard_selector(&s, out, sizeof(out));
    assert_string_equal(out, "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')");
    kb_shard_init(&s, 3, 1, true, KB_SHARD_FIELD_NAMESPACE);
    size_t n = kb_shard_selector(&s, out, sizeof(out));
    assert_string_equal(out, "shardRange(object.metadata.namespace, '0x5555555555555555', '0xaaaaaaaaaaaaaaaa')");
    assert_int_equal(n, strlen(out));
    kb_shard_init(&s, 3, 1, false, KB_SHARD_FIELD_UID); /* by name: nothing to ask */
    assert_int_equal(kb_shard_selector(&s, out, sizeof(out)), 0);
    assert_string_equal(out, "");
    kb_shard_init(&s, 1, 0, true, KB_SHARD_FIELD_UID); /* one replica owns all: no selector */
    assert_int_equal(kb_shard_selector(&s, out, sizeof(out)), 0);
}

static void test_owns_by_uid_hash(void **state) {
    (void)state;
    const char *uid = "0b9c2a7e-5d41-4f6e-9a53-2c8f1e7d4b60"; /* 0x9a23d23ed58baf09 */
    kb_shard_t s;
    bool want[3] = {false, true, false}; /* in [0x5555…, 0xaaaa…) of three */
    for (int i = 0; i < 3; i++) {
        kb_shard_init(&s, 3, i, true, KB_SHARD_FIELD_UID);
        assert_int_equal(kb_shard_owns(&s, 0, uid, strlen(uid), "x", 1), want[i]);
    }
    kb_shard_init(&s, 2, 1, true, KB_SHARD_FIELD_NAMESPACE); /* kube-system: 0xdf65… in the upper half */
    assert_true(kb_shard_owns(&s, 0, "u", 1, "kube-system", 11));
    kb_shard_init(&s, 2, 0, false, KB_SHARD_FIELD_UID); /* by name: 0xc739…6d is odd */
    assert_false(kb_shard_owns(&s, kb_fnv1a64("default/cm-1", 12), uid, strlen(uid), "default", 7));
    kb_shard_init(&s, 1, 0, true, KB_SHARD_FIELD_UID);
    assert_true(kb_shard_owns(&s, 0, uid, strlen(uid), "", 0));
}

/* Every object is owned by exactly one of the replicas, by each function. */
static void test_exactly_one_owner(void **state) {
    (void)state;
    for (int by = 0; by < 3; by++) {
        for (int n = 1; n <= 9; n++) {
            kb_shard_t s[9];
            for (int i = 0; i < n; i++)
                kb_shard_init(&s[i], n, i, by > 0, by == 2 ? KB_SHARD_FIELD_NAMESPACE : KB_SHARD_FIELD_UID);
            for (int k = 0; k < 2000; k++) {
                char uid[48], ns[16], key[48];
                int ul = snprintf(uid, sizeof(uid), "%08x-0000-4000-8000-%012d", (unsigned)k * 2654435761u, k);
                int nl = snprintf(ns, sizeof(ns), "ns-%d", k % 37);
                int kl = snprintf(key, sizeof(key), "%s/cm-%d", ns, k);
                uint64_t kh = kb_fnv1a64(key, (size_t)kl);
                int owners = 0;
                for (int i = 0; i < n; i++)
                    owners += kb_shard_owns(&s[i], kh, uid, (size_t)ul, ns, (size_t)nl);
                assert_int_equal(owners, 1);
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv1a_vectors),
        cmocka_unit_test(test_range_cuts),
        cmocka_unit_test(test_ranges_tile_the_space),
        cmocka_unit_test(test_selector_text),
        cmocka_unit_test(test_owns_by_uid_hash),
        cmocka_unit_test(test_exactly_one_owner),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
