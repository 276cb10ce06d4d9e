/* informer/sinkslot.h — what becomes of a message a sink was handed, through
 * the sink's lifecycle: its verdict, a rebuild's hand-over, a stop.
 *
 * A message is one change (a ledger seq) on its way to one sink instance.
 * The ledger (informer/ledger.h) holds the sink's bit for the seq until the
 * sink acknowledges it; this module decides, for every answer a sink can
 * give and every lifecycle step the sink can be in, which of the ledger's
 * transitions follows — so that the decision lives in one place with no
 * threads, clocks, signals or I/O, and the simulation (tests/sim) steps it as
 * the bridge does:
 *
 *     handed ──ack OK──────────────────────────────→ acked (the slot's bit clears)
 *       │──the destination's verdict (a refusal)──→ dead letter → acked once the dead-letter sink acks
 *       │                                         └→ refused: the sink stops; the bit stays
 *       │──no verdict, instance retiring with a successor──→ parked → handed over, in seq order
 *       │──no verdict while running (retry limit, timeout)─→ held: the sink stops; the bit stays
 *       └──no verdict at a stop (shutdown, abandon, removal, a sender retired)→ left: the bit stays, below the watermark
 *
 * Only a destination's verdict (kb_verdict_t.refusal) is a refusal: a stop, a
 * deadline or a retired instance (KB_ERR_STOPPED, KB_ERR_TIMEDOUT,
 * KB_ERR_FULL) never is, so nothing of it is dead-lettered and the watermark
 * never passes it (docs/guarantees.md, "What an operator action does").
 *
 * The hand-over of a rebuilt sink. Two instances of one sink share its ledger
 * slot. The successor is created held (kb_handover_hold): the workers hand it
 * nothing until its predecessor's messages are in. The predecessor retires
 * (kb_handover_retire with a successor): what it gives back without a verdict
 * is parked; kb_handover_take returns it ordered by owner (a pipeline), then
 * seq, then the order it came back, which the caller re-sends to the
 * successor before kb_handover_release lets the workers go on.
 *
 * Ownership and locks. A kb_handover_t lives in the caller's storage (one per
 * sink instance). held and collect are atomic: read without a lock on the hot
 * path (kb_handover_held, kb_handover_collecting). park, take and release are
 * called with the caller's lock of the instance held (bridge: bs->back_mtx),
 * which also guards the parked array. Parked messages are opaque: the caller
 * owns them before and after.
 *
 * Invariants: a successor is released once, and only a held one (asserted);
 * take empties the parked set and ends collecting, so nothing is parked after it.
 */
#ifndef KB_INFORMER_SINKSLOT_H
#define KB_INFORMER_SINKSLOT_H

#include "common/err.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- a verdict ------------------------------------------------------------ */

typedef enum kb_fate {
    KB_FATE_ACKED,       /* acknowledged: the slot's count goes down (the ledger's bit clears at 0) */
    KB_FATE_DEAD_LETTER, /* refused; on_refused = "dead_letter": hand it there, the slot waits for that ack */
    KB_FATE_REFUSED,     /* refused for good (on_refused = "stop", or the dead letter was refused): the sink stops */
    KB_FATE_PARK,        /* no verdict from a retiring instance with a successor: park it for the hand-over */
    KB_FATE_HOLD,        /* no verdict while the sink runs (it gave up trying): the sink stops, never a refusal */
    KB_FATE_LEAVE,       /* no verdict at a stop: unacknowledged, below the watermark for the next start */
} kb_fate_t;

typedef struct kb_verdict {
    kb_err_t err;        /* the sink's answer */
    bool refusal;        /* err is the destination's verdict on the message (sinks/sink.h: kb_sink_refused) */
    bool dead_letter;    /* the message was itself a dead letter */
    bool to_dead_letter; /* the sink's on_refused is "dead_letter" */
    bool collecting;     /* the instance is retiring and a successor waits for what it gives back */
    bool sender_retired; /* the pipeline that handed it over was replaced (kb_drain_retire): its
                          * successor sends it again from state_dir's journal */
} kb_verdict_t;

kb_fate_t kb_sinkslot_fate(const kb_verdict_t *v);
const char *kb_fate_name(kb_fate_t f);

/* ---- a rebuilt sink's hand-over --------------------------------------------- */

typedef struct kb_parked {
    void *msg;          /* the caller's message (opaque) */
    uintptr_t owner;    /* orders hand-overs of different owners (pipelines) apart */
    uint64_t seq;       /* the change's seq in the owner's ledger */
    size_t order;       /* the order it was given back */
} kb_parked_t;

typedef struct kb_handover {
    _Atomic bool collect;  /* retiring, a successor waits: give-backs are parked */
    _Atomic(void *) successor; /* retired: the instance that replaced it (NULL: removed for good) */
    _Atomic bool held;     /* a successor: takes nothing from the workers until released */
    kb_parked_t *v;        /* parked (caller's lock) */
    size_t n, cap;
} kb_handover_t;

void kb_handover_init(kb_handover_t *h);
void kb_handover_fini(kb_handover_t *h); /* frees the array, not the messages */

/* A successor, before anything can reach it: held. */
void kb_handover_hold(kb_handover_t *h);
bool kb_handover_held(const kb_handover_t *h); /* any thread, no lock */
/* The instance retires; with a successor (the caller's instance, opaque),
 * what it gives back is parked. */
void kb_handover_retire(kb_handover_t *h, void *successor);
/* Which instance a refusal or a give-up of self's stops: self, or — once self
 * retired with a successor — the successor, which is the sink a SIGHUP tries
 * again (a retired instance is tried by no one, and the slot it shares with
 * its successor would hold the watermark for good). Any thread, no lock. */
void *kb_handover_stops(const kb_handover_t *h, void *self);
bool kb_handover_collecting(const kb_handover_t *h); /* any thread, no lock */
/* Park msg (caller's lock). False (nothing parked) unless collecting. */
bool kb_handover_park(kb_handover_t *h, void *msg, uintptr_t owner, uint64_t seq);
/* Everything parked, in hand-over order (free the array); collecting ends.
 * *n may be 0 (a NULL-free, empty array). Caller's lock. */
kb_parked_t *kb_handover_take(kb_handover_t *h, size_t *n);
/* The successor got its predecessor's messages: the workers may go on (the
 * caller wakes them). Caller's lock. */
void kb_handover_release(kb_handover_t *h);

/* ---- a drain with a deadline -------------------------------------------- */

/* One per pipeline (an informer's workers), never one per process: a drain
 * that passes its deadline abandons its own pipeline only — what that one
 * still holds stays below its own watermark, and no other pipeline skips
 * anything (issue 24: a bridge-wide flag made every pipeline skip work). */
typedef struct kb_drain {
    _Atomic bool abandon;  /* set once, by kb_drain_look past the deadline */
    _Atomic bool retired;  /* set once, by kb_drain_retire: drained and replaced */
} kb_drain_t;

typedef enum kb_drain_step { KB_DRAIN_DONE, KB_DRAIN_WAIT, KB_DRAIN_ABANDON } kb_drain_step_t;
void kb_drain_init(kb_drain_t *dr);
/* One look at dr's drain: done when its workers are; past the deadline (the
 * clock of now) it abandons (dr only). Thread: the one draining. */
kb_drain_step_t kb_drain_look(kb_drain_t *dr, bool workers_done, int64_t now, int64_t deadline);
/* Should dr's workers hand nothing more to the sinks? Any thread, no lock. */
bool kb_drain_abandoned(const kb_drain_t *dr);
/* dr's pipeline is drained and replaced by one that reads state_dir's journal
 * again (a stopped sink retried by SIGHUP): what its sinks give up on from now
 * on without a verdict — a Kafka message timeout reported late — is left, and
 * stops nothing (it stopped the sink the operator had just retried). Thread:
 * the one that drained it; any thread reads it. */
void kb_drain_retire(kb_drain_t *dr);
bool kb_drain_retired(const kb_drain_t *dr);

#endif
