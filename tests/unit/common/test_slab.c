/* tests/unit/common/test_slab.c — the size-class allocator: blocks of one
 * class are reused last-freed-first, blocks never overlap, sizes over the
 * maximum go to malloc, accounting, and a free block is poisoned under ASan. */
#include "common/slab.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

static void test_reuse_same_class(void **state) {
    (void)state;
    kb_slab_t *slab = kb_slab_new(1024);
    void *a = kb_slab_alloc(slab, 300);
    void *b = kb_slab_alloc(slab, 300);
    assert_true(((uintptr_t)a & 15) == 0 && ((uintptr_t)b & 15) == 0);
    assert_ptr_not_equal(a, b);
    kb_slab_free(slab, a, 300);
    /* 289..304 bytes are one class: the block just freed is the next one. */
    void *c = kb_slab_alloc(slab, 290);
    assert_ptr_equal(c, a);
    /* Another class does not take it. */
    kb_slab_free(slab, c, 290);
    void *d = kb_slab_alloc(slab, 320);
    assert_ptr_not_equal(d, a);
    kb_slab_free(slab, b, 300);
    kb_slab_free(slab, d, 320);
    kb_slab_free(slab, NULL, 10);
    kb_slab_destroy(slab);
    kb_slab_destroy(NULL);
}

/* Many blocks of many sizes, written whole and checked: none overlaps another. */
static void test_no_overlap(void **state) {
    (void)state;
    enum { N = 5000 };
    static unsigned char *p[N];
    static size_t len[N];
    kb_slab_t *slab = kb_slab_new(2048);
    for (size_t i = 0; i < N; i++) {
        len[i] = 1 + (i * 7919) % 2100; /* some over the maximum */
        p[i] = kb_slab_alloc(slab, len[i]);
        memset(p[i], (int)(i & 0xff), len[i]);
    }
    /* Free every other one and allocate them again: churn within classes. */
    for (size_t i = 0; i < N; i += 2)
        kb_slab_free(slab, p[i], len[i]);
    for (size_t i = 0; i < N; i += 2) {
        p[i] = kb_slab_alloc(slab, len[i]);
        memset(p[i], (int)(i & 0xff), len[i]);
    }
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < len[i]; j++)
            assert_int_equal(p[i][j], i & 0xff);
    for (size_t i = 0; i < N; i++)
        kb_slab_free(slab, p[i], len[i]);
    kb_slab_destroy(slab);
}

static void test_stats(void **state) {
    (void)state;
    kb_slab_t *slab = kb_slab_new(512);
    kb_slab_stats_t st;
    kb_slab_stats(slab, &st);
    assert_int_equal(st.in_use, 0);
    assert_int_equal(st.reserved, 0);
    void *a = kb_slab_alloc(slab, 100); /* 112 bytes */
    void *big = kb_slab_alloc(slab, 600); /* malloc'd: not counted */
    kb_slab_stats(slab, &st);
    assert_int_equal(st.in_use, 1);
    assert_int_equal(st.used, 112);
    /* A class's first run is small (a few blocks), so a small user pays little. */
    assert_true(st.reserved >= 112 && st.reserved <= 16 * 112);
    kb_slab_free(slab, a, 100);
    kb_slab_free(slab, big, 600);
    kb_slab_stats(slab, &st);
    assert_int_equal(st.in_use, 0);
    assert_int_equal(st.used, 0);
    kb_slab_destroy(slab);
}

/* Churn on a steady set of blocks reserves no more than the set needed. */
static void test_churn_bounded(void **state) {
    (void)state;
    enum { LIVE = 1000 };
    static void *p[LIVE];
    static size_t len[LIVE];
    kb_slab_t *slab = kb_slab_new(1024);
    for (size_t i = 0; i < LIVE; i++) {
        len[i] = 400 + i % 64;
        p[i] = kb_slab_alloc(slab, len[i]);
    }
    kb_slab_stats_t before;
    kb_slab_stats(slab, &before);
    /* Replace a block by one of the same size a million times over. */
    for (size_t k = 0; k < 200000; k++) {
        size_t i = (k * 2654435761u) % LIVE;
        kb_slab_free(slab, p[i], len[i]);
        p[i] = kb_slab_alloc(slab, len[i]);
    }
    kb_slab_stats_t after;
    kb_slab_stats(slab, &after);
    assert_int_equal(after.reserved, before.reserved);
    assert_int_equal(after.used, before.used);
    for (size_t i = 0; i < LIVE; i++)
        kb_slab_free(slab, p[i], len[i]);
    kb_slab_destroy(slab);
}

/* Under ASan a freed block (and a run's uncut rest) is poisoned: a use after
 * kb_slab_free is reported as it would be after free. */
static void test_poisoned(void **state) {
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    kb_slab_t *slab = kb_slab_new(256);
    char *a = kb_slab_alloc(slab, 64);
    assert_false(__asan_address_is_poisoned(a));
    assert_false(__asan_address_is_poisoned(a + 63));
    assert_true(__asan_address_is_poisoned(a + 64)); /* the next block, not cut yet */
    kb_slab_free(slab, a, 64);
    assert_true(__asan_address_is_poisoned(a));
    assert_true(__asan_address_is_poisoned(a + 32));
    char *b = kb_slab_alloc(slab, 64);
    assert_ptr_equal(b, a);
    assert_false(__asan_address_is_poisoned(b + 32));
    kb_slab_free(slab, b, 64);
    kb_slab_destroy(slab);
#else
    skip();
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_same_class),
        cmocka_unit_test(test_no_overlap),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_churn_bounded),
        cmocka_unit_test(test_poisoned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
