/* informer/zcache.h — the informer cache's compressed entries.
 *
 * Without state_dir the cache holds every object in memory. A zcache turns
 * each cache entry into a packed event (common/event.h): identity readable,
 * the object a zstd frame made with a dictionary trained from the first
 * objects this informer saw, so the many bytes Kubernetes objects of one kind
 * share (keys, defaults, images, probes) are stored once per informer.
 *
 * Ownership: the informer owns its zcache. Each dictionary is refcounted:
 * the zcache holds the current one, every packed entry holds the one it was
 * made with, so a retrain never makes an older entry unreadable and a
 * dictionary is freed with its last entry (it may outlive the zcache).
 *
 * Threads and locks: kb_zcache_pack is called by one thread at a time (the
 * informer's ingest lock serializes it; the zcache has no lock of its own
 * on that path). kb_zcache_unpack is for any thread, takes no informer lock
 * (only a leaf mutex around a pool of decompression contexts). Stats are
 * atomics, readable from any thread.
 */
#ifndef KB_INFORMER_ZCACHE_H
#define KB_INFORMER_ZCACHE_H

#include "common/event.h"
#include "informer/indexer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_zcache kb_zcache_t;

typedef struct kb_zcache_opts {
    int level;             /* zstd level for the frames, 1..19 */
    size_t sample_objects; /* train once this many objects (and 64 KiB) were sampled ... */
    size_t sample_bytes;   /* ... or this many bytes, whichever comes first */
    size_t dict_bytes;     /* the dictionary's size at most */
    size_t window;         /* objects per ratio window */
    double retrain_drop;   /* retrain when a window's ratio falls below (1 - drop) × the first window's
                              (and the dictionary served 4 windows, twice that after each retrain) */
} kb_zcache_opts_t;

typedef struct kb_zcache_stats {
    size_t packed;         /* packed events alive (the cache's, and any still referenced elsewhere) */
    size_t packed_bytes;   /* their frames' bytes */
    size_t packed_raw;     /* the object bytes those frames expand to */
    size_t dicts;          /* dictionaries alive */
    size_t dict_bytes;     /* their memory (compression and decompression forms) */
    uint64_t trainings;    /* dictionaries trained so far */
    uint64_t kept_plain;   /* objects stored as they were (no gain, or no dictionary could be made) */
} kb_zcache_stats_t;

/* The defaults: level 1, 1024 objects or 4 MiB, 32 KiB, window 1024, drop 0.25. */
void kb_zcache_opts_default(kb_zcache_opts_t *o);

/* A zcache for the entries of idx (the informer's indexer, borrowed; it must
 * outlive the zcache). name is for the log. opts NULL: the defaults. */
kb_zcache_t *kb_zcache_new(const kb_zcache_opts_t *opts, const char *name, kb_indexer_t *idx);
/* Drops the current dictionary; packed entries keep theirs. NULL is a no-op. */
void kb_zcache_destroy(kb_zcache_t *zc);

/* The entry to cache for ev (a new reference): a packed copy once a
 * dictionary exists, else ev itself (kept plain: no dictionary yet, no gain,
 * or ev is packed already / has no object). ev is sampled while the zcache
 * collects samples; when the first dictionary gets trained, the entries the
 * indexer holds plain are packed in place (under the caller's lock).
 * Thread: one at a time (the caller serializes, see above). */
kb_event_t *kb_zcache_pack(kb_zcache_t *zc, kb_event_t *ev);

/* The expanded form of a packed event (a new event, refcount 1, with its
 * object and labels span), or NULL when the frame does not expand to what
 * the entry says (corrupt). Not packed: a new reference to packed.
 * Thread: any. */
kb_event_t *kb_zcache_unpack(const kb_event_t *packed);

void kb_zcache_stats(const kb_zcache_t *zc, kb_zcache_stats_t *st);

/* ---- for informer/state.c: state_dir records made with the same kind of
 * dictionary (persisted there by their zstd dictionary id). ---- */

/* kb_zcache_pack for bytes: compress obj with the current dictionary
 * (sampling and training as kb_zcache_pack). Returns the frame's length, 0
 * when obj should be kept as it is (no dictionary yet, or no gain); *frame
 * is valid until the next call, *zd is the current dictionary (borrowed: take
 * a reference to keep it). Thread: as kb_zcache_pack. */
size_t kb_zcache_compress(kb_zcache_t *zc, const char *obj, size_t len, const void **frame,
                          kb_event_zdict_t **zd);
/* zstd's id of a dictionary (from its content: the same after a restart) and its content. */
uint32_t kb_zcache_dict_id(const kb_event_zdict_t *zd);
const void *kb_zcache_dict_content(const kb_event_zdict_t *zd, size_t *len);
/* A dictionary read back from its content (decompression only), refcount 1;
 * NULL when content is not a zstd dictionary. */
kb_event_zdict_t *kb_zcache_dict_open(const void *content, size_t len);
kb_event_zdict_t *kb_zcache_dict_ref(kb_event_zdict_t *zd);
void kb_zcache_dict_unref(kb_event_zdict_t *zd); /* NULL is a no-op */
/* Make content the current dictionary (a reopened state_dir's newest): no
 * sampling until the ratio degrades. false when content is not a dictionary. */
bool kb_zcache_adopt(kb_zcache_t *zc, const void *content, size_t len);
/* Expand frame (zlen bytes, made with zd) into out: true when it gives
 * exactly raw_len bytes. Thread: any. */
bool kb_zcache_expand(const kb_event_zdict_t *zd, const void *frame, size_t zlen, void *out, size_t raw_len);

#endif
