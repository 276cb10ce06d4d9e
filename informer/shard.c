/* informer/shard.c — replica ownership and the server's shard selector.
 *
 * Design note. With sharding.replicas > 1 every replica used to read every
 * change and keep the keys whose FNV-1a(namespace/name) % replicas is its
 * index. kube-apiserver 1.36 (feature gate ShardedListAndWatch, alpha) can do
 * the filtering itself: list and watch take
 *     shardSelector=shardRange(object.metadata.uid, '0x<start>', '0x<end>')
 * and keep the objects whose FNV-1a 64 of the uid's bytes, as 16 hex digits,
 * lies in [start, end). A server without the gate ignores the parameter and
 * sends everything.
 *
 * The server cannot hash "namespace/name", so asking it to shard changes the
 * shard function. To keep what a replica owns independent of who filtered,
 * the range function is used here too whenever server-side sharding is
 * configured: the client-side fallback (a server that ignored the parameter)
 * drops exactly what a honouring server would not have sent. Only the
 * configuration (sharding.server_side) moves keys between replicas, never the
 * server's answer. The range split is floor(i * 2^64 / replicas), computed
 * without 128-bit arithmetic: 2^64 = q * n + rem with rem < n <= 1024, so
 * i * rem fits easily.
 */
#include "informer/shard.h"

#include "common/hash.h"
#include "common/alloc.h"

#include <inttypes.h>
#include <stdio.h>

/* floor(i * 2^64 / n) for 0 <= i < n, n >= 2. */
static uint64_t kb_shard_cut(uint64_t i, uint64_t n) {
    uint64_t q = UINT64_MAX / n, rem = UINT64_MAX % n + 1; /* 2^64 = q * n + rem */
    if (rem == n) {
        q++;
        rem = 0;
    }
    return i * q + (i * rem) / n;
}

void kb_shard_range(int replicas, int index, uint64_t *start, uint64_t *end, bool *to_top) {
    KB_ASSERT(replicas >= 1 && index >= 0 && index < replicas);
    *start = replicas > 1 ? kb_shard_cut((uint64_t)index, (uint64_t)replicas) : 0;
    *to_top = index == replicas - 1;
    *end = *to_top ? 0 : kb_shard_cut((uint64_t)index + 1, (uint64_t)replicas);
}

void kb_shard_init(kb_shard_t *s, int replicas, int index, bool by_range, kb_shard_field_t field) {
    KB_ASSERT(replicas >= 1 && index >= 0 && index < replicas);
    s->replicas = replicas;
    s->index = index;
    s->by_range = by_range;
    s->field = field;
    kb_shard_range(replicas, index, &s->start, &s->end, &s->to_top);
}

void kb_shard_from_config(kb_shard_t *s, const kb_config_t *cfg) {
    kb_shard_init(s, cfg->sharding_replicas, cfg->sharding_index, cfg->sharding_server_side != KB_SHARD_SERVER_OFF,
                  cfg->sharding_server_field);
}

size_t kb_shard_selector(const kb_shard_t *s, char *out, size_t size) {
    KB_ASSERT(size > 0);
    out[0] = '\0';
    if (!s->by_range || s->replicas <= 1)
        return 0;
    const char *field = s->field == KB_SHARD_FIELD_NAMESPACE ? "object.metadata.namespace" : "object.metadata.uid";
    char end[24];
    if (s->to_top)
        snprintf(end, sizeof(end), "0x10000000000000000");
    else
        snprintf(end, sizeof(end), "0x%016" PRIx64, s->end);
    int n = snprintf(out, size, "shardRange(%s, '0x%016" PRIx64 "', '%s')", field, s->start, end);
    KB_ASSERT(n > 0 && (size_t)n < size);
    return (size_t)n;
}

bool kb_shard_owns(const kb_shard_t *s, uint64_t key_hash, const char *uid, size_t uid_len, const char *ns,
                   size_t ns_len) {
    if (s->replicas <= 1)
        return true;
    if (!s->by_range)
        return key_hash % (uint64_t)s->replicas == (uint64_t)s->index;
    uint64_t h = s->field == KB_SHARD_FIELD_NAMESPACE ? kb_fnv1a64(ns, ns_len) : kb_fnv1a64(uid, uid_len);
    return h >= s->start && (s->to_top || h < s->end);
}

const char *kb_shard_basis(const kb_shard_t *s) {
    if (!s->by_range)
        return "name";
    return s->field == KB_SHARD_FIELD_NAMESPACE ? "namespace" : "uid";
}
