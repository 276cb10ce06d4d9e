/* common/hash.h — 64-bit FNV-1a, the one hash that picks shards.
 *
 * The same function decides the in-process shard (hash % shards) and the
 * replica (hash % sharding.replicas) of an object, over its key: the string
 * "namespace/name", or "name" for a cluster-scoped object (client-go's
 * MetaNamespaceKeyFunc). It is also what the API server's shardSelector uses.
 */
#ifndef KB_COMMON_HASH_H
#define KB_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

#define KB_FNV1A64_INIT UINT64_C(0xcbf29ce484222325)
#define KB_FNV1A64_PRIME UINT64_C(0x100000001b3)

static inline uint64_t kb_fnv1a64_update(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= KB_FNV1A64_PRIME;
    }
    return h;
}

static inline uint64_t kb_fnv1a64(const void *p, size_t n) {
    return kb_fnv1a64_update(KB_FNV1A64_INIT, p, n);
}

#endif
