/* tests/unit/common/test_strmap.c — the string map: put/get/del, growth,
 * backward-shift deletion under collisions, iteration, memory accounting. */
#include "common/hash.h"
#include "common/strmap.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

static uint64_t h(const char *s) {
    return kb_fnv1a64(s, strlen(s));
}

static void *get(kb_strmap_t *m, const char *k) {
    return kb_strmap_get(m, k, strlen(k), h(k));
}

static void *put(kb_strmap_t *m, const char *k, void *v) {
    return kb_strmap_put(m, k, strlen(k), h(k), v);
}

static void *del(kb_strmap_t *m, const char *k) {
    return kb_strmap_del(m, k, strlen(k), h(k));
}

static int vals[4];

static void test_basic(void **state) {
    (void)state;
    kb_strmap_t *m = kb_strmap_new(0);
    assert_null(get(m, "a"));
    assert_null(put(m, "a", &vals[0]));
    assert_null(put(m, "ns/b", &vals[1]));
    assert_int_equal(kb_strmap_count(m), 2);
    assert_ptr_equal(get(m, "a"), &vals[0]);
    assert_ptr_equal(get(m, "ns/b"), &vals[1]);
    /* Replace returns the previous value and keeps the count. */
    assert_ptr_equal(put(m, "a", &vals[2]), &vals[0]);
    assert_int_equal(kb_strmap_count(m), 2);
    assert_ptr_equal(get(m, "a"), &vals[2]);
    assert_ptr_equal(del(m, "a"), &vals[2]);
    assert_null(del(m, "a"));
    assert_null(get(m, "a"));
    assert_int_equal(kb_strmap_count(m), 1);
    kb_strmap_destroy(m);
    kb_strmap_destroy(NULL);
}

/* Keys are byte strings: a prefix, or one with an embedded NUL, is another key. */
static void test_binary_keys(void **state) {
    (void)state;
    kb_strmap_t *m = kb_strmap_new(4);
    const char k[] = {'a', '\0', 'b'};
    kb_strmap_put(m, k, 3, kb_fnv1a64(k, 3), &vals[0]);
    kb_strmap_put(m, k, 1, kb_fnv1a64(k, 1), &vals[1]);
    assert_ptr_equal(kb_strmap_get(m, k, 3, kb_fnv1a64(k, 3)), &vals[0]);
    assert_ptr_equal(kb_strmap_get(m, k, 1, kb_fnv1a64(k, 1)), &vals[1]);
    assert_null(kb_strmap_get(m, k, 2, kb_fnv1a64(k, 2)));
    /* The map keeps its own copy of the key, NUL-terminated for iteration. */
    size_t pos = 0, len, seen = 0;
    const char *key;
    while (kb_strmap_next(m, &pos, &key, &len, NULL)) {
        assert_int_equal(key[len], '\0');
        seen++;
    }
    assert_int_equal(seen, 2);
    kb_strmap_destroy(m);
}

/* Every key hashes to the same slot: probing and backward-shift deletion
 * must keep every survivor reachable, whichever one is removed. */
static void test_collisions(void **state) {
    (void)state;
    enum { N = 40 };
    char keys[N][8];
    for (int round = 0; round < N; round++) {
        kb_strmap_t *m = kb_strmap_new(0);
        for (int i = 0; i < N; i++) {
            snprintf(keys[i], sizeof(keys[i]), "k%d", i);
            /* Two home slots only, so clusters wrap and interleave. */
            kb_strmap_put(m, keys[i], strlen(keys[i]), (uint64_t)(i % 2) * 7, &vals[i % 4]);
        }
        /* Delete every key from position round on, in a rotating order. */
        for (int d = 0; d < N; d++) {
            int victim = (round + d * 7) % N;
            assert_non_null(kb_strmap_del(m, keys[victim], strlen(keys[victim]), (uint64_t)(victim % 2) * 7));
            for (int e = d + 1; e < N; e++) {
                int alive = (round + e * 7) % N;
                assert_ptr_equal(kb_strmap_get(m, keys[alive], strlen(keys[alive]), (uint64_t)(alive % 2) * 7),
                                 &vals[alive % 4]);
            }
        }
        assert_int_equal(kb_strmap_count(m), 0);
        kb_strmap_destroy(m);
    }
}

static void test_grow_shrink_memory(void **state) {
    (void)state;
    enum { N = 20000 };
    kb_strmap_t *m = kb_strmap_new(16);
    size_t base = kb_strmap_memory(m);
    char k[32];
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "ns%d/pod-%d", i % 13, i);
        assert_null(put(m, k, &vals[i % 4]));
    }
    assert_int_equal(kb_strmap_count(m), N);
    assert_true(kb_strmap_memory(m) > base + N * 8);
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "ns%d/pod-%d", i % 13, i);
        assert_ptr_equal(get(m, k), &vals[i % 4]);
    }
    /* Iteration visits each key exactly once. */
    size_t pos = 0, n = 0;
    void *v;
    while (kb_strmap_next(m, &pos, NULL, NULL, &v)) {
        assert_non_null(v);
        n++;
    }
    assert_int_equal(n, N);
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "ns%d/pod-%d", i % 13, i);
        assert_ptr_equal(del(m, k), &vals[i % 4]);
    }
    assert_int_equal(kb_strmap_count(m), 0);
    /* Emptied, the table is back to its initial size. */
    assert_int_equal(kb_strmap_memory(m), base);
    kb_strmap_destroy(m);
}

/* High churn on a small live set must not degrade or grow (no tombstones). */
static void test_churn(void **state) {
    (void)state;
    kb_strmap_t *m = kb_strmap_new(64);
    size_t base = kb_strmap_memory(m);
    char k[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(k, sizeof(k), "key-%d", i);
        put(m, k, &vals[0]);
        if (i >= 32) {
            snprintf(k, sizeof(k), "key-%d", i - 32);
            assert_ptr_equal(del(m, k), &vals[0]);
        }
    }
    assert_int_equal(kb_strmap_count(m), 32);
    assert_true(kb_strmap_memory(m) <= base + 32 * 16);
    kb_strmap_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_binary_keys),
        cmocka_unit_test(test_collisions),
        cmocka_unit_test(test_grow_shrink_memory),
        cmocka_unit_test(test_churn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
