/* informer/indexer.h — the informer's cache: the latest known state per key.
 *
 * An entry is the last event the informer accepted for a key (a reference to
 * it: the event already carries uid, RV and the object bytes, so the cache
 * costs no second copy; the entry may also be a thin or compressed event
 * whose object is not readable as it is). Deleted keys are removed. A
 * namespace index answers per-namespace listing without a full scan, and
 * label indexes — one per configured label key (informers[].index_labels) —
 * answer equality selectors (app=x, app in (x,y)) from the set of entries
 * filed under key=value. Labels are handed in with each put (the entry itself
 * may not carry readable ones); only the configured keys are kept.
 *
 * The indexer is written by the informer's reflector thread when it accepts
 * an event (so a relist diffs against everything the informer has seen, also
 * what is still queued), and read by any thread (resync, HTTP snapshots).
 *
 * Locks: the key space is split into stripes by key hash, each with its own
 * rwlock; the namespace and label indexes share one mutex taken after a
 * stripe lock (order: stripe → index). No lock is held while calling out;
 * listing returns references, not borrowed pointers.
 */
#ifndef KB_INFORMER_INDEXER_H
#define KB_INFORMER_INDEXER_H

#include "common/event.h"
#include "common/selector.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_indexer kb_indexer_t;

/* The most label keys one indexer files entries under. */
#define KB_INDEXER_MAX_LABELS 16

/* label_keys: the label keys to index (copied; duplicates count once; at most
 * KB_INDEXER_MAX_LABELS); none = no label index and no per-entry cost for it. */
kb_indexer_t *kb_indexer_new(unsigned stripes, const char *const *label_keys, size_t n_label_keys);
void kb_indexer_destroy(kb_indexer_t *idx); /* unrefs every entry; NULL is a no-op */

/* What a put or delete replaced: the previous entry and what it was filed
 * under, so kb_indexer_restore can put it back exactly. */
typedef struct kb_indexer_old {
    kb_event_t *ev;    /* the previous entry (a reference), NULL if the key was absent */
    void *filed;       /* private: its label filing (NULL without label indexes) */
    kb_indexer_t *idx; /* private: the indexer whose slab filed came from */
} kb_indexer_old_t;

/* Store ev as the state of ev->key (takes a new reference; the caller keeps
 * its own), filed under the configured keys found in labels (a labels JSON
 * object, {"app":"web",…}; NULL/0: none). The previous entry goes to *old
 * (release or restore it) or is released when old is NULL. */
void kb_indexer_put(kb_indexer_t *idx, kb_event_t *ev, const char *labels, size_t labels_len,
                    kb_indexer_old_t *old);
/* Remove key. Returns true if it was there; its entry goes to *old (release or restore it) or is released. */
bool kb_indexer_delete(kb_indexer_t *idx, const char *key, size_t len, uint64_t hash, kb_indexer_old_t *old);
/* Put old back as the state of its key, filed exactly as it was (consumes
 * old; the current entry of the key, if any, is released). old->ev must not
 * be NULL: to undo the put of a key that was absent, delete it. */
void kb_indexer_restore(kb_indexer_t *idx, kb_indexer_old_t *old);
/* Drop what old holds (before its indexer is destroyed); a zeroed old is a no-op. */
void kb_indexer_old_release(kb_indexer_old_t *old);
/* If the entry of cur's key is still cur, make repl (another form of the
 * same version: packed, thin) the entry, filed exactly as cur was (no labels
 * needed), and return true; else change nothing and return false. Takes a
 * new reference to repl; cur's is released. */
bool kb_indexer_swap(kb_indexer_t *idx, kb_event_t *cur, kb_event_t *repl);
/* A new reference to the entry, or NULL. */
kb_event_t *kb_indexer_get(kb_indexer_t *idx, const char *key, size_t len, uint64_t hash);

size_t kb_indexer_count(kb_indexer_t *idx);
/* Sum of kb_event_size of the entries plus the table memory (label filings and sets included). */
size_t kb_indexer_bytes(kb_indexer_t *idx);
/* The configured label keys (borrowed, valid for the indexer's life). */
size_t kb_indexer_label_keys(const kb_indexer_t *idx, const char *const **keys);

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

/* How kb_indexer_select found its candidates. */
typedef enum {
    KB_INDEXER_SCAN = 0,  /* every entry */
    KB_INDEXER_BY_NS = 1, /* the namespace's set */
    KB_INDEXER_BY_LABEL = 2, /* the sets of an equality term on an indexed label key */
} kb_indexer_via_t;

/* The candidates of a query: references to the entries that may match sel
 * (NULL or empty: all) in ns (NULL: every namespace; "" = cluster-scoped),
 * appended to *out, in no particular order, from the smallest index that
 * covers the query: the sets of the equality term on an indexed key with the
 * fewest entries, the namespace's set, or everything. *exact is true when
 * every candidate matches (the index alone answered the whole selector);
 * otherwise the caller checks sel on each materialized object. One consistent
 * look at the indexes (a full scan reads one stripe at a time). Returns how. */
kb_indexer_via_t kb_indexer_select(kb_indexer_t *idx, const char *ns, const kb_selector_t *sel, kb_event_list_t *out,
                                   bool *exact);

/* Counters since the indexer was made (any thread). */
typedef struct kb_indexer_stats {
    uint64_t queries;       /* kb_indexer_select calls */
    uint64_t by_label;      /* … answered from a label index */
    uint64_t by_ns;         /* … answered from the namespace index */
    uint64_t candidates;    /* entries those calls returned (what the callers read) */
    uint64_t last_candidates; /* of the latest call */
    size_t label_sets;      /* key=value sets held now */
} kb_indexer_stats_t;
void kb_indexer_stats(kb_indexer_t *idx, kb_indexer_stats_t *st);

#endif
