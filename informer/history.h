/* informer/history.h — an in-memory window of an informer's recent changes,
 * for watches that resume from a resourceVersion (the Kubernetes API
 * surface, bridge/kapi.c).
 *
 * A history subscribes to one informer and keeps the last `capacity` events
 * it accepted (references: the object bytes are the informer's, shaped once
 * and shared) in a ring addressed by an ever-growing position. Every entry
 * also remembers the labels its key had before the change, so a watcher with
 * a label selector can tell an object that enters the selector (ADDED) from
 * one that leaves it (DELETED) without a cache of its own.
 *
 * Resuming: every change with a resourceVersion above floor_rv is in the
 * ring (floor_rv starts at the cut the history was built from, so build it
 * after the informer's first list, and rises as old entries are evicted and
 * past a relist of the informer, whose changes have no place in
 * resourceVersion order). A reader whose position falls below the oldest
 * entry lost events and must stop (the API server closes a watcher that
 * cannot keep up; the client resumes and may get 410).
 *
 * Threads: the informer's subscriber callback appends (under the informer's
 * ingest lock: it only takes references and copies labels); readers on any
 * thread. Locks: one mutex per history, a leaf inside the informer's
 * subscriber lock; the condition variable is broadcast on every append.
 */
#ifndef KB_INFORMER_HISTORY_H
#define KB_INFORMER_HISTORY_H

#include "common/event.h"
#include "informer/informer.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_history kb_history_t;

/* Subscribe to inf and take the first cut (lists the cache once). NULL when
 * the informer has no free subscriber slot. capacity >= 1. */
kb_history_t *kb_history_new(kb_informer_t *inf, size_t capacity);
/* Unsubscribe and free. NULL is a no-op. */
void kb_history_destroy(kb_history_t *h);

kb_informer_t *kb_history_informer(const kb_history_t *h);

/* One change as a reader sees it: references it must release with
 * kb_history_entry_fini. prev_labels is the key's labels object before the
 * change (len 0: no labels); prev_exists false when the key was absent.
 * fields is ev's field record (common/fieldsel.h, for the informer's kind;
 * empty when the kind has no fields of its own), prev_fields the key's
 * before the change. */
typedef struct kb_history_labels kb_history_labels_t; /* refcounted, immutable */
typedef struct kb_history_entry {
    kb_event_t *ev;
    const char *prev_labels;   /* inside prev_ref */
    size_t prev_labels_len;
    bool prev_exists;
    const char *fields;        /* inside now_ref; NULL for an entry not from the ring */
    size_t fields_len;
    const char *prev_fields;   /* inside prev_ref */
    size_t prev_fields_len;
    kb_history_labels_t *prev_ref;
    kb_history_labels_t *now_ref;
} kb_history_entry_t;
void kb_history_entry_fini(kb_history_entry_t *e);

/* Where a reader starts. KB_HISTORY_GONE: rv is older than the window. */
typedef enum { KB_HISTORY_OK, KB_HISTORY_GONE } kb_history_pos_t;
/* The position of the first change after rv (a change with rv_num <= rv is
 * not sent again). */
kb_history_pos_t kb_history_after_rv(kb_history_t *h, uint64_t rv, uint64_t *pos);
/* The position of the first change with seq > seq (after a kb_informer_cut). */
uint64_t kb_history_after_seq(kb_history_t *h, uint64_t seq);

/* Read the change at *pos, waiting up to wait_ms for one. Returns 1 with
 * *out filled and *pos advanced, 0 when nothing came, -1 when *pos was
 * evicted (the reader is too slow). */
int kb_history_next(kb_history_t *h, uint64_t *pos, int wait_ms, kb_history_entry_t *out);

/* The resourceVersion a reader at pos may announce in a bookmark (the
 * informer's progress, also without changes). False, and nothing written,
 * while the reader has not read everything up to the newest position or the
 * progress is unknown. Takes the informer's ingest lock briefly. */
bool kb_history_rv(kb_history_t *h, uint64_t pos, char *rv, size_t rv_size);

/* The oldest position still held (a reader below it is too slow). */
uint64_t kb_history_oldest(kb_history_t *h);

/* Oldest resourceVersion a watch may resume from, and entries held. */
void kb_history_stats(kb_history_t *h, uint64_t *floor_rv, size_t *entries);

#endif
