/* common/strmap.h — a string-keyed hash map (open addressing, linear probing).
 *
 * Keys are byte strings (not necessarily NUL-terminated); the map copies
 * them. Values are void pointers owned by the caller. The caller passes the
 * key's hash (kb_fnv1a64) so a hash computed once per event is reused by the
 * FIFO, the indexer and the sharding decision. Not thread-safe: the owner
 * locks.
 */
#ifndef KB_COMMON_STRMAP_H
#define KB_COMMON_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_strmap kb_strmap_t;

kb_strmap_t *kb_strmap_new(size_t initial_capacity);
void kb_strmap_destroy(kb_strmap_t *m); /* frees keys, not values; NULL is a no-op */
size_t kb_strmap_count(const kb_strmap_t *m);
/* The value, or NULL. */
void *kb_strmap_get(const kb_strmap_t *m, const char *key, size_t len, uint64_t hash);
/* Insert or replace; returns the previous value (or NULL). */
void *kb_strmap_put(kb_strmap_t *m, const char *key, size_t len, uint64_t hash, void *value);
/* Remove; returns the value removed (or NULL). */
void *kb_strmap_del(kb_strmap_t *m, const char *key, size_t len, uint64_t hash);

/* Iteration: pos starts at 0; returns false at the end. Do not modify the map
 * while iterating. *key is NUL-terminated. */
bool kb_strmap_next(const kb_strmap_t *m, size_t *pos, const char **key, size_t *len, void **value);
/* Bytes of memory the table itself uses (for accounting). */
size_t kb_strmap_memory(const kb_strmap_t *m);

#endif
