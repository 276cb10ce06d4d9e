/* informer/packer.h — cache entries compressed off the reflector thread.
 *
 * Without a packer the ingest step compresses each object it caches
 * (kb_zcache_pack) on the reflector thread, inside the ingest lock: about a
 * third of that thread's work per object during a large list. With one, the
 * ingest step caches the object as it came (a full event, the one it also
 * queues for delivery) and hands it here; the packer's thread compresses it
 * and replaces the entry with the packed one — only if the entry is still
 * that very event (kb_indexer_swap), so a newer change of the key is never
 * overwritten by an older one's frame, and what the cache says (identity,
 * RV, filing) is the same before and after the swap.
 *
 * The informer runs its packer during its first lists only: there the
 * objects of a list arrive back to back and the reflector thread is the
 * serial part of the sync. Once every reflector has listed, it stops the
 * packer (which packs what it holds first) and compresses inline again: for
 * the watch's changes, the hand-off cost more CPU per change than it saved.
 *
 * Ownership: the informer owns its packer; the zcache and the indexer are
 * borrowed and must outlive it. While the packer's thread runs it is the
 * only caller of kb_zcache_pack (the zcache's one-thread rule); before
 * kb_packer_start and after kb_packer_stop the ingest step packs inline.
 *
 * Memory: the queue holds at most max_bytes (kb_event_size) of full events
 * besides the first one; kb_packer_put blocks while it is over, so the cache
 * never holds more than that uncompressed beyond what delivery holds anyway.
 */
#ifndef KB_INFORMER_PACKER_H
#define KB_INFORMER_PACKER_H

#include "common/event.h"
#include "informer/indexer.h"
#include "informer/zcache.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct kb_packer kb_packer_t;

/* A packer of idx's entries with zc (both borrowed). name is for the thread. */
kb_packer_t *kb_packer_new(kb_zcache_t *zc, kb_indexer_t *idx, const char *name, size_t max_bytes);
/* Stops it first if running. NULL is a no-op. */
void kb_packer_destroy(kb_packer_t *pk);

/* Start the thread (kb:pack/<name>). */
void kb_packer_start(kb_packer_t *pk);
/* Pack what is queued, then join the thread. After it, kb_packer_running is false. */
void kb_packer_stop(kb_packer_t *pk);
/* True between start and stop: the ingest step hands entries here. */
bool kb_packer_running(const kb_packer_t *pk);

/* Queue ev, just put into the indexer as it came, to be packed (takes a new
 * reference). The thread is not woken: kb_packer_wake does that once per
 * batch. Blocks while the queue is over its bound (waking the thread first).
 * Thread: one producer at a time (the informer's ingest lock). */
void kb_packer_put(kb_packer_t *pk, kb_event_t *ev);
/* Wake the thread for what was queued since it last looked. A woken thread
 * waits a few milliseconds for more before it packs (packer.c). */
void kb_packer_wake(kb_packer_t *pk);

/* Events packed and swapped into the cache, and those whose entry had
 * changed before their turn (left alone). */
void kb_packer_counts(kb_packer_t *pk, uint64_t *packed, uint64_t *stale);

#endif
