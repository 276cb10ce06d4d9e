/* common/alloc.c — aborting allocators (see alloc.h for why). */
#include "common/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Noreturn void kb_oom(size_t size) {
    fprintf(stderr, "kbridge: out of memory allocating %zu bytes\n", size);
    abort();
}

void *kb_malloc(size_t size) {
    void *p = malloc(size ? size : 1);
    if (!p)
        kb_oom(size);
    return p;
}

void *kb_calloc(size_t nmemb, size_t size) {
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
    if (!p)
        kb_oom(nmemb * size);
    return p;
}

void *kb_realloc(void *ptr, size_t size) {
    void *p = realloc(ptr, size ? size : 1);
    if (!p)
        kb_oom(size);
    return p;
}

char *kb_strdup(const char *s) {
    return s ? kb_memdup(s, strlen(s) + 1) : NULL;
}

char *kb_strndup(const char *s, size_t n) {
    char *p = kb_malloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void *kb_memdup(const void *src, size_t n) {
    void *p = kb_malloc(n);
    if (n)
        memcpy(p, src, n);
    return p;
}

void kb_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "kbridge: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}
