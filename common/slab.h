/* common/slab.h — a size-class allocator for many long-lived blocks.
 *
 * For a cache of a million entries of a few hundred bytes each that are
 * replaced one at a time (informer/zcache.c's packed events): blocks come
 * from runs that hold blocks of one size class only, and a freed block goes
 * on its class's free list, to be the next block of that class. Sizes are
 * rounded up to 16 bytes; a block carries no header. Blocks larger than the
 * slab's max_size are plain kb_malloc/free.
 *
 * Memory: runs are never given back before kb_slab_destroy (a freed block
 * waits for the next one of its class), so a slab's footprint is the most
 * blocks of each class it ever held at once.
 *
 * Threads: any thread may allocate or free; one leaf mutex per slab, held
 * only to take or give a block (no call out under it).
 */
#ifndef KB_COMMON_SLAB_H
#define KB_COMMON_SLAB_H

#include <stddef.h>

typedef struct kb_slab kb_slab_t;

/* A slab for blocks of up to max_size bytes (at most 4096; larger ones are
 * passed to kb_malloc). */
kb_slab_t *kb_slab_new(size_t max_size);
/* Frees every run. Every block taken must have been given back (asserted).
 * NULL is a no-op. */
void kb_slab_destroy(kb_slab_t *slab);

/* A block of size bytes (16-byte aligned; never NULL: out of memory aborts). */
void *kb_slab_alloc(kb_slab_t *slab, size_t size);
/* Give back a block from kb_slab_alloc; size as it was asked for. NULL is a no-op. */
void kb_slab_free(kb_slab_t *slab, void *p, size_t size);

typedef struct kb_slab_stats {
    size_t in_use;   /* blocks taken and not given back (slab blocks only) */
    size_t used;     /* their bytes, rounded to the class */
    size_t reserved; /* bytes of the runs (used, free and never cut yet) */
} kb_slab_stats_t;
void kb_slab_stats(kb_slab_t *slab, kb_slab_stats_t *st);

#endif
