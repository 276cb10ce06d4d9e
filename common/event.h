/* common/event.h — one change of one Kubernetes object: the unit that flows
 * from the informer to the sinks.
 *
 * An event is immutable after kb_event_new() and reference-counted; it is
 * created by the informer's reflector thread and shared by the DeltaFIFO,
 * the indexer (the cached state of a key is the last event for it) and the
 * sinks. Any thread may ref/unref. All strings and the object bytes live in
 * the same allocation as the struct.
 *
 * The object bytes are compact JSON, already shaped for output: kind and
 * apiVersion filled in, drop_fields removed, redact_fields masked. Sinks
 * hand them on without parsing them again.
 *
 * A packed event (kb_event_pack) is a cache entry whose object is held as a
 * zstd frame made with a dictionary (informer/zcache.h): its identity fields
 * are readable as usual, but obj is "" with obj_len 0 and labels_len 0 until
 * it is expanded (kb_informer_full / kb_zcache_unpack). Only the informer's
 * cache holds packed events; the queues and the sinks never see one.
 *
 * kb_resource_t is the identity of what an informer watches (cluster, GVR,
 * kind); every event holds a reference to it, so a sink may outlive the
 * informer that produced its queued events (hot reload).
 */
#ifndef KB_COMMON_EVENT_H
#define KB_COMMON_EVENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest resourceVersion kbridge keeps, NUL included. Kubernetes RVs are
 * decimal etcd revisions (at most 20 digits); a server whose RVs are longer
 * than this has its objects refused with an error, never truncated. */
#define KB_RV_MAX 256

typedef enum {
    KB_EV_ADDED = 0,
    KB_EV_MODIFIED = 1,
    KB_EV_DELETED = 2,
    KB_EV_SYNC = 3,
    KB_EV_SNAPSHOT = 4,
} kb_event_type_t;

#define KB_EV_TYPE_COUNT 5
#define KB_EV_TYPE_MASK_ALL ((1u << KB_EV_TYPE_COUNT) - 1)

/* "ADDED", … "SNAPSHOT". */
const char *kb_event_type_name(kb_event_type_t type);
/* "added", … for CloudEvents types. */
const char *kb_event_type_lower(kb_event_type_t type);
/* Parse an upper-case type name; -1 if unknown. */
int kb_event_type_parse(const char *s, size_t n);

typedef struct kb_resource {
    _Atomic unsigned refcnt;
    char *cluster;     /* cluster.name */
    char *informer;    /* informer name from the config */
    char *group;       /* "" for the core group */
    char *version;     /* "v1" */
    char *resource;    /* plural, "pods" */
    char *api_version; /* "v1" or "apps/v1" */
    _Atomic(char *) kind; /* "Pod": learned from the server; NULL until the first list. Set once. */
} kb_resource_t;

kb_resource_t *kb_resource_new(const char *cluster, const char *informer, const char *group,
                               const char *version, const char *resource);
kb_resource_t *kb_resource_ref(kb_resource_t *res);
void kb_resource_unref(kb_resource_t *res);
/* Set the kind once (later calls with a different kind are ignored). Thread-safe. */
void kb_resource_set_kind(kb_resource_t *res, const char *kind, size_t len);
/* The kind, or "" while unknown. The pointer stays valid for the resource's life. */
const char *kb_resource_kind(const kb_resource_t *res);

/* The dictionary of packed events, as common/ sees it: informer/zcache.c
 * embeds this as the first member of its dictionary object. drop is called
 * once when a packed event that holds a reference to the dictionary is
 * freed: it frees the event's memory (kb_event_size(ev) bytes, which the
 * dictionary's owner allocated for kb_event_pack), gives the reference back
 * and keeps the accounting. */
typedef struct kb_event_zdict kb_event_zdict_t;
struct kb_event;
struct kb_event_zdict {
    void (*drop)(kb_event_zdict_t *zd, struct kb_event *ev);
};

typedef struct kb_event {
    _Atomic unsigned refcnt;
    kb_event_type_t type;
    bool final_state_unknown; /* DELETED synthesized by a relist/restart diff */
    /* Queued again from the journal's unacknowledged tail after a restart: a
     * sink may have delivered it before the crash, so compaction must never
     * make it vanish (an ADDED so marked that meets its DELETED leaves the
     * DELETED). Kept by retype and thin copies and by LATEST merges. Set
     * before the event is shared. */
    bool redelivery;
    kb_resource_t *res;       /* reference held */
    const char *key;          /* "namespace/name", or "name" when cluster-scoped */
    const char *ns;           /* "" when cluster-scoped */
    const char *name;
    const char *uid;
    const char *rv;           /* resourceVersion as the server sent it (opaque) */
    size_t key_len, ns_len, name_len, uid_len, rv_len;
    uint64_t rv_num;          /* rv as a number if it is decimal, else 0 (only to refuse going back) */
    uint64_t key_hash;        /* kb_fnv1a64 of key */
    int64_t observed_ns;      /* CLOCK_REALTIME when the change was read */
    int64_t read_mono_ns;     /* CLOCK_MONOTONIC when the bytes came off the wire (latency) */
    uint64_t seq;             /* per-informer sequence, set by the informer before enqueue */
    const char *obj;          /* compact JSON object; NUL-terminated */
    size_t obj_len;
    size_t labels_off, labels_len; /* span of metadata.labels' JSON object in obj; len 0 if none */
    /* Span of metadata.annotations in obj, found on first use by
     * kb_event_annotations and remembered: 0 = not looked up yet, else
     * KB_EV_ANN_DONE | off << 32 | len. A memo, not a change: every thread
     * that looks computes the same value. */
    _Atomic uint64_t ann_span;
    /* Packed events only (zdict != NULL): the frame of zlen bytes follows
     * obj's NUL (kb_event_frame); it expands to zraw_len object bytes whose
     * labels span is zlabels_off/zlabels_len. */
    kb_event_zdict_t *zdict;   /* reference held; NULL for every event that is not packed */
    uint32_t zlen, zraw_len;
    uint32_t zlabels_off, zlabels_len;
} kb_event_t;

typedef struct kb_event_init {
    kb_event_type_t type;
    bool final_state_unknown;
    kb_resource_t *res; /* borrowed; the event takes its own reference */
    const char *ns; size_t ns_len;
    const char *name; size_t name_len;
    const char *uid; size_t uid_len;
    const char *rv; size_t rv_len;
    const char *obj; size_t obj_len;
    size_t labels_off, labels_len;
    int64_t observed_ns, read_mono_ns;
} kb_event_init_t;

/* Copy everything into one allocation; refcount 1. */
kb_event_t *kb_event_new(const kb_event_init_t *init);
/* A copy of ev without its object (obj_len 0, labels dropped): the cache's
 * entry when the object lives in state_dir. Refcount 1. */
kb_event_t *kb_event_thin(const kb_event_t *ev);

/* The bytes a packed copy of ev with a frame of len bytes takes (its
 * kb_event_size, too). */
size_t kb_event_pack_bytes(const kb_event_t *ev, size_t len);
/* A packed copy of ev (see above), made in mem (kb_event_pack_bytes(ev, len)
 * bytes, aligned for the struct, allocated by zd's owner): identity, type,
 * flags and seq of ev, the object replaced by frame (len bytes) made with zd.
 * Takes over the caller's reference to zd and the memory (both given back
 * through zd->drop when the copy is freed). ev must have its object
 * (obj_len > 0) and not be packed. Refcount 1. */
kb_event_t *kb_event_pack(void *mem, const kb_event_t *ev, kb_event_zdict_t *zd, const void *frame, size_t len);
/* The frame of a packed event (zlen bytes). */
static inline const void *kb_event_frame(const kb_event_t *ev) { return ev->obj + 1; }
/* The expanded form of a packed event, object not yet written: identity,
 * type, flags and seq of packed, obj_len = zraw_len and the labels span set;
 * the caller writes zraw_len bytes to (char *)obj before sharing it
 * (obj[zraw_len] is already NUL). Refcount 1. */
kb_event_t *kb_event_unpack_shell(const kb_event_t *packed);

/* The metadata.annotations JSON object of ev's object ({"k":"v",…}): its
 * span in *s, *n (0 if none). Looked up in the object bytes the first time it
 * is asked for an event and remembered. Any thread. */
void kb_event_annotations(const kb_event_t *ev, const char **s, size_t *n);

/* A copy of ev with another type (and finalStateUnknown flag); refcount 1.
 * ev must not be packed (expand it first). */
kb_event_t *kb_event_retype(const kb_event_t *ev, kb_event_type_t type, bool final_state_unknown);
kb_event_t *kb_event_ref(kb_event_t *ev);
void kb_event_unref(kb_event_t *ev); /* NULL is a no-op */
/* Bytes this event occupies in memory (for queue and cache accounting); for
 * a packed event, with its frame instead of the object. */
size_t kb_event_size(const kb_event_t *ev);

/* "123" → 123; anything not a plain decimal fitting in 64 bits → 0. */
uint64_t kb_rv_parse(const char *rv, size_t len);
/* Whether s[0..len) is a plain decimal (digits only, at least one) that fits
 * in 64 bits; its value in *out. What a request's resourceVersion, limit or
 * timeoutSeconds must be: one that is not is refused, never read as 0. */
bool kb_decimal_u64(const char *s, size_t len, uint64_t *out);

#endif
