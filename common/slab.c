/* common/slab.c — size classes of 16 bytes, runs per class, a LIFO free
 * list per class (see slab.h).
 *
 * Why not glibc's malloc: a cache of a million compressed entries is a
 * heap of ~700 MB of blocks of a few hundred bytes, each freed when its key
 * changes and replaced by one of a slightly different size, in the same
 * arena as the short-lived blocks of every change (the decoded event, which
 * other threads free). glibc's malloc then sorts and merges freed chunks
 * whose headers lie anywhere in that heap, a cache miss each at a million
 * entries. Here a freed block is pushed on its class's list and is the next
 * block of that class: one touch of memory that was just in use, no
 * neighbour, no sorting, and glibc's heap keeps the short-lived blocks only.
 * Measured in kbridge at 1M Pods (docs/performance.md, "A slab for the
 * cache's entries"): `_int_malloc` 1.4 → 0.3 µs per change, 769 → 700 B
 * of RSS per cached Pod.
 *
 * Why LIFO and no header: the block given back last is the warmest; the
 * size comes back with the free (the caller knows it: an event's size is
 * exact), which saves glibc's 8 bytes a block.
 *
 * Runs grow from KB_SLAB_RUN_FIRST blocks, doubling up to KB_SLAB_RUN_MAX
 * bytes, so a class a small informer touches once costs a few blocks, not
 * a full run. With AddressSanitizer a free block is poisoned, so a use
 * after kb_slab_free is still reported.
 */
#include "common/slab.h"

#include "common/alloc.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define KB_SLAB_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define KB_SLAB_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define KB_SLAB_POISON(p, n) ((void)(p), (void)(n))
#define KB_SLAB_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define KB_SLAB_GRAIN 16u
#define KB_SLAB_MAX_SIZE 4096u
#define KB_SLAB_RUN_FIRST 8u          /* blocks in a class's first run */
#define KB_SLAB_RUN_MAX (64u << 10)   /* bytes of a run at most (one block at least) */

/* The head of a run; the run's blocks follow it (KB_SLAB_HDR bytes in). */
typedef struct kb_slab_run {
    struct kb_slab_run *next;
} kb_slab_run_t;
#define KB_SLAB_HDR ((sizeof(kb_slab_run_t) + KB_SLAB_GRAIN - 1) / KB_SLAB_GRAIN * KB_SLAB_GRAIN)

typedef struct kb_slab_class {
    void *free;          /* freed blocks, linked through their first pointer */
    char *cut, *end;     /* what is left of the newest run, not cut yet */
    size_t next_blocks;  /* blocks of the next run */
} kb_slab_class_t;

struct kb_slab {
    pthread_mutex_t mtx;   /* guards everything below */
    size_t max_size;       /* a multiple of KB_SLAB_GRAIN */
    kb_slab_class_t *cls;  /* max_size / KB_SLAB_GRAIN of them; cls[i] holds blocks of (i + 1) grains */
    kb_slab_run_t *runs;   /* every run, newest first */
    size_t in_use, used, reserved;
};

kb_slab_t *kb_slab_new(size_t max_size) {
    KB_ASSERT(max_size <= KB_SLAB_MAX_SIZE);
    kb_slab_t *slab = kb_calloc(1, sizeof(*slab));
    pthread_mutex_init(&slab->mtx, NULL);
    slab->max_size = (max_size + KB_SLAB_GRAIN - 1) / KB_SLAB_GRAIN * KB_SLAB_GRAIN;
    slab->cls = kb_calloc(slab->max_size / KB_SLAB_GRAIN + 1, sizeof(*slab->cls));
    return slab;
}

void kb_slab_destroy(kb_slab_t *slab) {
    if (!slab)
        return;
    KB_ASSERT(slab->in_use == 0);
    for (kb_slab_run_t *r = slab->runs, *next; r; r = next) {
        next = r->next;
        free(r);
    }
    pthread_mutex_destroy(&slab->mtx);
    free(slab->cls);
    free(slab);
}

/* A new run for class c of blocks of bsize bytes (mtx held). */
static void kb_slab_grow(kb_slab_t *slab, kb_slab_class_t *c, size_t bsize) {
    size_t blocks = c->next_blocks ? c->next_blocks : KB_SLAB_RUN_FIRST;
    if (blocks * bsize > KB_SLAB_RUN_MAX)
        blocks = KB_SLAB_RUN_MAX / bsize ? KB_SLAB_RUN_MAX / bsize : 1;
    c->next_blocks = blocks * 2;
    size_t bytes = KB_SLAB_HDR + blocks * bsize;
    kb_slab_run_t *r = kb_malloc(bytes);
    r->next = slab->runs;
    slab->runs = r;
    slab->reserved += bytes;
    c->cut = (char *)r + KB_SLAB_HDR;
    c->end = c->cut + blocks * bsize;
    KB_SLAB_POISON(c->cut, blocks * bsize);
}

void *kb_slab_alloc(kb_slab_t *slab, size_t size) {
    if (size > slab->max_size)
        return kb_malloc(size);
    size_t grains = size ? (size + KB_SLAB_GRAIN - 1) / KB_SLAB_GRAIN : 1;
    size_t bsize = grains * KB_SLAB_GRAIN;
    kb_slab_class_t *c = &slab->cls[grains - 1];
    pthread_mutex_lock(&slab->mtx);
    void *p = c->free;
    if (p) {
        KB_SLAB_UNPOISON(p, bsize);
        c->free = *(void **)p;
    } else {
        if (c->cut == c->end)
            kb_slab_grow(slab, c, bsize);
        p = c->cut;
        c->cut += bsize;
        KB_SLAB_UNPOISON(p, bsize);
    }
    slab->in_use++;
    slab->used += bsize;
    pthread_mutex_unlock(&slab->mtx);
    return p;
}

void kb_slab_free(kb_slab_t *slab, void *p, size_t size) {
    if (!p)
        return;
    if (size > slab->max_size) {
        free(p);
        return;
    }
    size_t grains = size ? (size + KB_SLAB_GRAIN - 1) / KB_SLAB_GRAIN : 1;
    size_t bsize = grains * KB_SLAB_GRAIN;
    kb_slab_class_t *c = &slab->cls[grains - 1];
    pthread_mutex_lock(&slab->mtx);
    *(void **)p = c->free;
    c->free = p;
    KB_SLAB_POISON(p, bsize);
    KB_ASSERT(slab->in_use > 0);
    slab->in_use--;
    slab->used -= bsize;
    pthread_mutex_unlock(&slab->mtx);
}

void kb_slab_stats(kb_slab_t *slab, kb_slab_stats_t *st) {
    pthread_mutex_lock(&slab->mtx);
    st->in_use = slab->in_use;
    st->used = slab->used;
    st->reserved = slab->reserved;
    pthread_mutex_unlock(&slab->mtx);
}
