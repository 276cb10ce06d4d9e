/* informer/hatable.h — what a standby may skip, and what a new leader owes.
 *
 * Two replicas of a shard watch the same server; one leads (delivers), the
 * other stands by (bridge/ha.c has the Lease, the fencing and the threads).
 * The leader publishes, per informer, the RV every change it delivered and
 * its sinks acknowledged is known by (kb_hatable_published: the ledger's
 * kb_ledger_acked_rv). This module decides, with no threads, clocks or I/O,
 * so that the simulation (tests/sim) steps it as the bridge does:
 *
 *   - which RV a change must be covered by to count as known to the leader
 *     (kb_hatable_need: a DELETED inferred by a relist carries the list's RV,
 *     by a changed definition the object's last RV, not the deletion's —
 *     either is known once the mark reaches this replica's resume point when
 *     it was staged, at least the list's RV);
 *   - how far a published mark is trusted (kb_hamark_trust): only up to what
 *     this replica has seen itself — a leader cannot have acknowledged a
 *     change that was never made, so a higher mark is either a moment ahead
 *     of our watch or forged; at a takeover an untrusted mark is refused
 *     (kb_hamark_takeover) and never skipped up to;
 *   - whether a change is skipped (kb_hamark_skips): as a standby up to the
 *     trusted mark, as the leader only up to a sink's committed checkpoint;
 *   - what a new leader owes (kb_owed_t): every key whose change a standby
 *     skipped. A mark is an RV over what the old leader's *watch* saw; a
 *     change it missed and we saw is below it and was skipped, and what the
 *     old leader's sinks hold cannot be read back — so the new leader sends
 *     each such key's latest state again (a DELETED skipped is kept, the
 *     cache no longer has the object; a live key is only its name: its state
 *     is read from the cache when paid).
 *
 * Ownership: a kb_hamark_t and a kb_owed_t live in the caller's storage,
 * guarded by the caller's lock (bridge: ha->mtx). The owed table holds a
 * copy of each DELETED it keeps (its object zstd-compressed).
 */
#ifndef KB_INFORMER_HATABLE_H
#define KB_INFORMER_HATABLE_H

#include "common/event.h"
#include "common/strmap.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_ledger kb_ledger_t;

/* ---- the published mark ---------------------------------------------------- */

typedef struct kb_hamark {
    uint64_t rv;        /* as published in the Lease (or committed by a sink) */
    uint64_t trusted;   /* the highest rv this replica had seen itself when it read it: what it skips up to */
    uint64_t committed; /* a sink's committed checkpoint: skipped up to even as the leader */
} kb_hamark_t;

/* What a leader publishes for one informer: the RV its sinks' watermark is
 * known by — what every sink acknowledged, never what was only seen or sent. */
uint64_t kb_hatable_published(kb_ledger_t *ledger);
/* The RV the leader must have acknowledged for ev to be known (tracked_rv:
 * this replica's newest resume point, kb_ledger_tracked_rv). 0: never known. */
uint64_t kb_hatable_need(const kb_event_t *ev, uint64_t tracked_rv);
/* A published mark against what this replica has seen (seen): how far it is
 * trusted (raises m->trusted once seen reaches m->rv). */
uint64_t kb_hamark_trust(kb_hamark_t *m, uint64_t seen);
/* Whether m->rv is above what is trusted, given seen. */
bool kb_hamark_above(kb_hamark_t *m, uint64_t seen);
/* Taking over: a mark above what this replica has seen is refused (it is
 * set back to the trusted part and ignored). True when refused. */
bool kb_hamark_takeover(kb_hamark_t *m, uint64_t seen);
/* A sink's committed checkpoint (trusted: the sink's own record). */
void kb_hamark_commit(kb_hamark_t *m, uint64_t rv);
/* Is a change that needs `need` skipped? leads: this replica delivers. */
bool kb_hamark_skips(kb_hamark_t *m, uint64_t need, uint64_t seen, bool leads);

/* A window (lo, hi] a new leader listed without watching, against the mark it
 * trusted at the takeover and the takeover's RV (shared: every change the old
 * leader delivered is at or below it): true when an object the old leader
 * delivered (created at or below shared) can have been deleted in it above
 * trusted (not published as acknowledged) — no replica knows it, and its
 * DELETED is never sent. *from: the window's part above trusted. */
bool kb_hatable_blind(uint64_t lo, uint64_t hi, uint64_t trusted, uint64_t shared, uint64_t *from);

/* ---- what a new leader owes ------------------------------------------------- */

#define KB_OWED_MAX (1u << 21) /* keys owed per informer; past it a skip is not remembered (and counted) */

typedef struct kb_owed {
    kb_strmap_t *keys;  /* key → the DELETED skipped (compressed, hatable.c), or a marker: a live key (NULL: none) */
    uint64_t dropped;   /* skips not remembered: the table was full */
} kb_owed_t;

/* A standby skipped ev: its key is owed. */
void kb_owed_add(kb_owed_t *o, kb_event_t *ev);
/* Everything owed moves to the returned table; o is left empty. */
kb_owed_t kb_owed_take(kb_owed_t *o);
size_t kb_owed_count(const kb_owed_t *o);
/* Walk o: each key, and the DELETED to send (a new reference: unref it;
 * NULL: the key's state in the cache). *pos starts at 0. */
bool kb_owed_next(const kb_owed_t *o, size_t *pos, const char **key, size_t *len, kb_event_t **deleted);
/* Owe key (deleted: the DELETED to send, copied; NULL: the
 * key's state in the cache). replace false: a key already owed keeps its
 * entry (what a round could not pay goes back under what was owed since). */
void kb_owed_put(kb_owed_t *o, const char *key, size_t len, kb_event_t *deleted, bool replace);
void kb_owed_fini(kb_owed_t *o);

#endif
