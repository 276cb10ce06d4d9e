/* informer/shard.h — which replica owns an object, and the shardSelector
 * that asks the API server for exactly those objects.
 *
 * One function decides ownership (kb_shard_owns), for the ingest, the drift
 * audit and the simulation alike, so the set of keys a replica handles is
 * the same whoever filtered them (the server or this process):
 *   - by name (sharding.server_side = "off"): FNV-1a 64 of the key
 *     "namespace/name" (or "name"), mod replicas, equals index;
 *   - by range (server_side "auto" or "on"): FNV-1a 64 of the object's
 *     metadata.uid (or metadata.namespace, sharding.server_field) lies in
 *     range `index` of [0, 2^64) cut into `replicas` equal ranges — what
 *     kube-apiserver's shardSelector=shardRange(object.metadata.uid, …) keeps.
 *
 * Pure functions over a value type: no threads, no locks, no allocation.
 */
#ifndef KB_INFORMER_SHARD_H
#define KB_INFORMER_SHARD_H

#include "config/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_shard {
    int replicas;           /* >= 1 */
    int index;              /* 0 .. replicas-1 */
    bool by_range;          /* ownership by hash range of `field` (else by name, mod replicas) */
    kb_shard_field_t field; /* by_range: uid or namespace */
    uint64_t start;         /* by_range: first hash owned */
    uint64_t end;           /* by_range: first hash not owned, unless to_top */
    bool to_top;            /* by_range: the range runs to 2^64 (the last replica) */
} kb_shard_t;

/* The ownership of replica index of replicas; by_range as said above. */
void kb_shard_init(kb_shard_t *s, int replicas, int index, bool by_range, kb_shard_field_t field);
/* From sharding.*: by_range unless server_side is "off". */
void kb_shard_from_config(kb_shard_t *s, const kb_config_t *cfg);

/* Range index of [0, 2^64) cut into replicas equal parts: [*start, *end),
 * or [*start, 2^64) with *to_top for the last one. Range i starts at
 * floor(i * 2^64 / replicas). */
void kb_shard_range(int replicas, int index, uint64_t *start, uint64_t *end, bool *to_top);

/* The shardSelector text for s, e.g.
 *   shardRange(object.metadata.uid, '0x5555555555555555', '0xaaaaaaaaaaaaaaaa')
 * (16 lowercase hex digits; the top bound 2^64 is '0x10000000000000000', the
 * only forms the server parses). "" when s is not by_range or has one
 * replica. Returns the length; out is always NUL-terminated. */
size_t kb_shard_selector(const kb_shard_t *s, char *out, size_t size);

/* Whether s owns the object: key_hash is FNV-1a 64 of its key (by name);
 * uid and ns its metadata.uid and metadata.namespace (by range; "" hashes too,
 * as on the server). Always true with one replica. */
bool kb_shard_owns(const kb_shard_t *s, uint64_t key_hash, const char *uid, size_t uid_len, const char *ns,
                   size_t ns_len);

/* "name", "uid" or "namespace": what s hashes. */
const char *kb_shard_basis(const kb_shard_t *s);

#endif
