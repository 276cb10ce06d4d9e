/* informer/state.h — what an informer keeps on disk (LMDB): the persisted
 * index, the journal, and the checkpoint.
 *
 *   index      key → the last event accepted for it (uid, RV, object); deleted
 *              keys are removed. On restart it is the cache the relist is
 *              diffed against and the per-key RV gate.
 *   journal    seq → every event (and every resume-point marker) in the order
 *              the informer accepted it, written in the same transaction as
 *              the index change — before the event is handed to any sink. The
 *              tail past the checkpoint is delivered again after a crash.
 *   checkpoint the highest seq up to which everything was acknowledged by every
 *              sink, and the watch resume RV that goes with it.
 *   definition what the informer was when this state was written (its
 *              resource, selectors, namespaces, projection), so a restart
 *              with another one is noticed (informer/definition.h); and a
 *              pending one: a start under a changed definition records it
 *              before anything of it is delivered, until its lists converge.
 *
 * One LMDB environment per informer (and replica) directory. Writes are group
 * commits: kb_state_begin … put … kb_state_commit, one per watch chunk or
 * list page; a commit flushes data pages (MDB_NOMETASYNC), so neither SIGKILL
 * nor a power loss leaves torn state — at worst the last commit is undone,
 * and nothing of it was delivered.
 *
 * Threads: the write calls (begin/put/commit/abort) come from one thread at a
 * time (the informer serialises them under its ingest lock); set_checkpoint
 * from the checkpointer; reads from anyone. LMDB serialises write txns.
 */
#ifndef KB_INFORMER_STATE_H
#define KB_INFORMER_STATE_H

#include "common/err.h"
#include "common/event.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_state kb_state_t;

typedef struct kb_state_opts {
    const char *dir;            /* created if missing */
    uint64_t map_bytes;         /* LMDB map size (the most the files may grow to) */
    uint64_t journal_max_bytes; /* acknowledged journal entries beyond this are trimmed */
    int64_t journal_max_age_s;  /* … and so are acknowledged entries older than this */
    bool dictionaries;          /* objects compressed with a dictionary trained from them (zcache.h) */
} kb_state_opts_t;

kb_state_t *kb_state_open(const kb_state_opts_t *opts, char *errstr, size_t errstr_size);
void kb_state_close(kb_state_t *st); /* NULL is a no-op */
const char *kb_state_dir(const kb_state_t *st);

typedef struct kb_state_checkpoint {
    uint64_t seq;      /* everything up to and including seq is acknowledged (0: nothing yet) */
    char *rv;          /* resume the watches here ("rv" or "ns/rv,…"); "" = list first. Owned */
    uint64_t last_seq; /* the newest journal seq (0 when empty) */
} kb_state_checkpoint_t;

/* Fills *cp (release with kb_state_checkpoint_fini, also after an error). */
kb_err_t kb_state_read_checkpoint(kb_state_t *st, kb_state_checkpoint_t *cp);
void kb_state_checkpoint_fini(kb_state_checkpoint_t *cp);

/* Called for each stored event (ev: a new reference the callee owns; NULL for a
 * journal marker) with the resume RV recorded with it ("" if none). */
typedef void (*kb_state_fn)(void *opaque, uint64_t seq, kb_event_t *ev, const char *rv_after);

/* Every index entry, as ADDED events with seq 0; identity_only leaves the
 * objects out (except the first one's), which makes loading a large index fast. */
kb_err_t kb_state_load_index(kb_state_t *st, kb_resource_t *res, bool identity_only, kb_state_fn fn,
                             void *opaque);
/* The index entry of key as an event (ADDED, seq 0), or NULL if absent or
 * unreadable. Inside a group commit it sees the uncommitted changes (same
 * thread). */
kb_event_t *kb_state_get(kb_state_t *st, const char *key, size_t key_len, kb_resource_t *res);

/* Journal entries with seq > after_seq, oldest first; at most limit of them
 * (events and markers; 0 = all). */
kb_err_t kb_state_load_journal(kb_state_t *st, uint64_t after_seq, size_t limit, kb_resource_t *res, kb_state_fn fn,
                               void *opaque);
/* Where a replay from rv starts: the seq after the last journal entry whose
 * resume RV is <= rv (so a snapshot taken at rv plus this replay sees every
 * change once). KB_ERR_GONE if rv is older than what the journal still holds. */
kb_err_t kb_state_journal_seek(kb_state_t *st, uint64_t rv, uint64_t *seq);

/* Group commit. begin opens a write txn; put_event journals ev (ev->seq) and
 * updates the index (DELETED removes the key); put_mark journals a resume
 * point without an event. On any error the caller aborts. */
kb_err_t kb_state_begin(kb_state_t *st);
kb_err_t kb_state_put_event(kb_state_t *st, const kb_event_t *ev, const char *rv_after);
kb_err_t kb_state_put_mark(kb_state_t *st, uint64_t seq, const char *rv_after);
kb_err_t kb_state_commit(kb_state_t *st);
void kb_state_abort(kb_state_t *st);
/* Why the last call failed ("MDB_MAP_FULL: …", "No space left on device"). */
const char *kb_state_error(const kb_state_t *st);

/* One sink's acknowledgement watermark: every change up to seq reached it. */
typedef struct kb_state_sink_seq {
    const char *sink;  /* the sink's name */
    uint64_t seq;
} kb_state_sink_seq_t;

/* Record the checkpoint (seq: the lowest watermark of all sinks; rv: where
 * the watches resume with it) and each sink's own watermark, in one
 * transaction, and trim acknowledged journal entries over the bounds. */
kb_err_t kb_state_set_checkpoint(kb_state_t *st, uint64_t seq, const char *rv, const kb_state_sink_seq_t *sinks,
                                 size_t n_sinks);
/* The watermark last recorded for sink; KB_ERR_NOTFOUND if none was. */
kb_err_t kb_state_read_sink_seq(kb_state_t *st, const char *sink, uint64_t *seq);

/* The informer's definition stored with this state (informer/definition.h):
 * *def a new string (caller frees), or NULL when none is stored — a state_dir
 * written before kbridge kept definitions, or a new one; *pending (caller
 * frees) the definition a start began to converge to and did not finish, or
 * NULL. */
kb_err_t kb_state_read_definition(kb_state_t *st, char **def, char **pending);
/* Store def (NULL: keep the stored one) and pending (NULL: none any more):
 * inside the open group commit if there is one (it commits or aborts with
 * it), else in a transaction of its own, durable when this returns. */
kb_err_t kb_state_put_definition(kb_state_t *st, const char *def, const char *pending);

/* Forget everything (a server RV regression: the server's history went back). */
kb_err_t kb_state_reset(kb_state_t *st);

typedef struct kb_state_stats {
    uint64_t index_entries, journal_entries;
    uint64_t file_bytes;      /* size of data.mdb */
    uint64_t commits, commit_errors;
} kb_state_stats_t;
void kb_state_stats(kb_state_t *st, kb_state_stats_t *out);

#endif
