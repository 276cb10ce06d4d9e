/* informer/history.h — an in-memory window of an informer's recent changes,
 * for watches that resume from a resourceVersion (the Kubernetes API
 * surface, bridge/kapi.c), and the dispatch of each change to the watchers
 * it concerns.
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
 * Watchers (kb_history_watch): a reader registered with its filter is filed
 * under one index term its filter implies — a field equality (a pod's
 * spec.nodeName), an equality on one of the informer's index_labels, its
 * namespace — or in the list of watchers that take everything. Each append
 * looks up the buckets of the change's values before and after it, decides
 * for those watchers alone what they see (the enter/leave rule), queues the
 * position and wakes only the watchers that got something.
 *
 * Threads: the informer's subscriber callback appends and dispatches (under
 * the informer's ingest lock: it takes references, copies labels and queues
 * positions); readers on any thread. Locks: one mutex per history, a leaf
 * inside the informer's subscriber lock; each watcher waits on its own
 * condition variable under that mutex, and is signalled after the mutex is
 * let go, under a second one (sig_mtx) that keeps it alive meanwhile — or,
 * registered with kb_history_watch_notify, is told through its callback under
 * sig_mtx (sig_mtx is then taken before whatever lock that callback takes).
 */
#ifndef KB_INFORMER_HISTORY_H
#define KB_INFORMER_HISTORY_H

#include "common/event.h"
#include "common/fieldsel.h"
#include "common/selector.h"
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

/* The resourceVersion a watch of the Kubernetes API orders ev by: ev->rv_num,
 * but for a DELETED a relist or audit inferred (finalStateUnknown) the RV in
 * its object. Why: that DELETED's envelope may carry the list's RV, above the
 * object's (informer.c, kb_inf_gone_event), but a client-go watcher follows
 * metadata.resourceVersion of what it is sent: ordered by the envelope's RV,
 * its resourceVersion would go back. Thread: any. */
uint64_t kb_history_order_rv(const kb_event_t *ev);

/* Where a reader starts. KB_HISTORY_GONE: rv is older than the window. */
typedef enum { KB_HISTORY_OK, KB_HISTORY_GONE } kb_history_pos_t;
/* The position of the first change after rv (a change with rv_num <= rv is
 * not sent again). */
kb_history_pos_t kb_history_after_rv(kb_history_t *h, uint64_t rv, uint64_t *pos);
/* The position of the first change with seq > seq (after a kb_informer_cut). */
uint64_t kb_history_after_seq(kb_history_t *h, uint64_t seq);

/* Oldest resourceVersion a watch may resume from, and entries held. */
void kb_history_stats(kb_history_t *h, uint64_t *floor_rv, size_t *entries);

/* ---- watchers ------------------------------------------------------------- */

/* What a watcher wants; borrowed by the history for the watcher's life. */
typedef struct kb_history_filter {
    const char *ns;               /* only this namespace; NULL or "" = all */
    const kb_selector_t *sel;     /* labelSelector, NULL: none */
    const kb_fieldsel_t *fsel;    /* fieldSelector for the informer's kind, NULL: none */
} kb_history_filter_t;

/* Does ev (its object readable) match f's selectors (not its namespace)?
 * rec is ev's field record when known (a ring entry's), else NULL: read
 * from the object when f->fsel needs it. */
bool kb_history_matches(const kb_fields_kind_t *kind, const kb_history_filter_t *f, const kb_event_t *ev,
                        const char *rec, size_t rec_len);
/* The type a watcher with filter f sees for change e, or -1 when it sees
 * nothing: an update that makes the object match is an ADDED, one that makes
 * it stop matching a DELETED (judged on the labels and field record from
 * before the change). An entry not from the ring (e->fields NULL, no prev)
 * is judged on its object alone. kind: the informer's (kb_fields_kind). */
int kb_history_entry_type(const kb_fields_kind_t *kind, const kb_history_filter_t *f, const kb_history_entry_t *e);

typedef struct kb_history_watcher kb_history_watcher_t;

/* Register a reader of every change from position pos on (kb_history_after_rv
 * or _after_seq) that f lets through; the changes already in the ring from
 * pos are queued now. A pos already evicted makes a lost watcher. Thread: any. */
kb_history_watcher_t *kb_history_watch(kb_history_t *h, uint64_t pos, const kb_history_filter_t *f);
/* The same, for a reader that does not block in kb_history_watcher_next
 * (wait_ms 0) but is told: once a call of it found nothing queued, the next
 * change queued for w (or kb_history_watcher_wake, or w losing changes) calls
 * notify(arg) once, after the history's mutex is let go, under sig_mtx (so
 * notify must take no lock of the history; kb_history_unwatch waits for a
 * running notify). A non-blocking server parks the connection meanwhile. */
kb_history_watcher_t *kb_history_watch_notify(kb_history_t *h, uint64_t pos, const kb_history_filter_t *f,
                                              void (*notify)(void *arg), void *arg);
/* Unregister and free. NULL is a no-op. No other call on w may run. */
void kb_history_unwatch(kb_history_watcher_t *w);

/* The next change queued for w, waiting up to wait_ms for one (or for
 * kb_history_watcher_wake). 1: *out filled (release with
 * kb_history_entry_fini) and *type the type this watcher sees; 0: nothing;
 * -1: w lost changes (a queued position was evicted, or more were queued than
 * the ring holds) and must end. Thread: w's reader. */
int kb_history_watcher_next(kb_history_watcher_t *w, int wait_ms, kb_history_entry_t *out, kb_event_type_t *type);
/* End a wait of w's reader now (a hang-up, a stop). Thread: any. */
void kb_history_watcher_wake(kb_history_watcher_t *w);
/* Whether w lost changes (its reader will end when it reads next). Thread: any. */
bool kb_history_watcher_lost(kb_history_watcher_t *w);
/* The resourceVersion w's reader may announce in a bookmark (the informer's
 * progress, also without changes). False, and nothing written, while w has
 * changes queued or the progress is unknown. Takes the informer's ingest
 * lock briefly. */
bool kb_history_watcher_rv(kb_history_watcher_t *w, char *rv, size_t rv_size);
/* Changes queued for w and not read yet. */
size_t kb_history_watcher_queued(kb_history_watcher_t *w);
/* What w is filed under, for logs and tests: "*" (everything), "ns=VALUE",
 * "field#I=VALUE" (index I in the kind's record) or "label:KEY=VALUE". */
void kb_history_watcher_index(kb_history_watcher_t *w, char *out, size_t out_size);
/* Wake-ups so far (a reader's wait that ended because something was queued
 * or it was woken), over all watchers of h: for tests and metrics. */
uint64_t kb_history_wakeups(kb_history_t *h);

#endif
