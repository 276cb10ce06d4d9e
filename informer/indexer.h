/* informer/indexer.h — the informer's cache: the latest known state per key.
 *
 * An entry is the last event the informer accepted for a key (a reference to
 * it: the event already carries uid, RV and the compact object bytes, so the
 * cache costs no second copy). Deleted keys are removed. A namespace index
 * answers per-namespace listing (per-namespace relists, snapshots by
 * namespace) without a full scan.
 *
 * The indexer is written by the informer's reflector thread when it accepts
 * an event (so a relist diffs against everything the informer has seen, also
 * what is still queued), and read by any thread (resync, HTTP snapshots).
 *
 * Locks: the key space is split into stripes by key hash, each with its own
 * rwlock; the namespace index has one mutex taken after a stripe lock (order:
 * stripe → ns). No lock is held while calling out; listing returns
 * references, not borrowed pointers.
 */
#ifndef KB_INFORMER_INDEXER_H
#define KB_INFORMER_INDEXER_H

#include "common/event.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_indexer kb_indexer_t;

kb_indexer_t *kb_indexer_new(unsigned stripes);
void kb_indexer_destroy(kb_indexer_t *idx); /* unrefs every entry; NULL is a no-op */

/* Store ev as the state of ev->key (takes a new reference; the caller keeps
 * its own). The previous entry, if any, is returned in *old (a reference the
 * caller must unref) or unref'd when old is NULL. */
void kb_indexer_put(kb_indexer_t *idx, kb_event_t *ev, kb_event_t **old);
/* Remove key. Returns true if it was there; its entry goes to *old (unref it) or is unref'd. */
bool kb_indexer_delete(kb_indexer_t *idx, const char *key, size_t len, uint64_t hash, kb_event_t **old);
/* A new reference to the entry, or NULL. */
kb_event_t *kb_indexer_get(kb_indexer_t *idx, const char *key, size_t len, uint64_t hash);

size_t kb_indexer_count(kb_indexer_t *idx);
/* Sum of kb_event_size of the entries plus the table memory. */
size_t kb_indexer_bytes(kb_indexer_t *idx);

typedef struct kb_event_list {
    kb_event_t **ev; /* references owned by the list */
    size_t n;
    size_t cap;
} kb_event_list_t;

void kb_event_list_init(kb_event_list_t *l);
void kb_event_list_push(kb_event_list_t *l, kb_event_t *ev); /* takes the reference */
void kb_event_list_fini(kb_event_list_t *l);                   /* unrefs all */

/* Append references to every entry (ns == NULL) or to the entries of one
 * namespace (ns "" = cluster-scoped) to *out, in no particular order. */
void kb_indexer_list(kb_indexer_t *idx, const char *ns, kb_event_list_t *out);

#endif
