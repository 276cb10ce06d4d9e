/* tests/sim/sim.c — a deterministic simulation of kbridge's core.
 *
 * Design note. The FoundationDB / TigerBeetle way: the real core — the
 * informer's ingest and per-key gate, the journal and persisted index in
 * LMDB, the DeltaFIFO in both compaction modes (and with a coalescing window
 * on the sim's own clock), the ledger, restart from
 * state_dir, and (one history in five) the cache alone without state_dir,
 * which has no restarts — is driven on one thread by a seeded scheduler against a model
 * API server, model sinks and a model consumer. Nothing here reads a clock
 * or the network, so a seed is a history: the same seed runs the same steps,
 * and a failure prints the seed that replays it (`kb_sim --seed N -v`).
 *
 * A history mixes, at random: creates, updates, deletes and re-creates of a
 * few names (so names come back with new uids), unrelated RV bumps, history
 * compaction (a watch or a continue token from before it gets 410), paged
 * lists with changes between pages, streamed lists (sendInitialEvents: the
 * initial events, then the initial-events-end BOOKMARK, then changes on the
 * same stream) dropped or answered with 410 before that BOOKMARK and then
 * paged, as the reflector does; watch streams cut at any byte, 410 ERROR
 * events mid-stream, bookmarks, sinks that acknowledge late and out of order
 * across keys or refuse a message, checkpoints, clean restarts and crashes
 * (SIGKILL: memory lost, state_dir as the last commit left it) at any step —
 * between a journal commit and its delivery, between delivery and
 * acknowledgement, between acknowledgement and checkpoint. Then the server
 * goes quiet, kbridge catches up, and the checks run on what each sink's
 * consumer saw, following the rule docs/guarantees.md gives consumers:
 *
 *   per key, apply a message only if (resourceVersion, DELETED ? 1 : 0) is
 *   at least as great as that of the last message applied for the key (equal:
 *   a repeat, or the object again in a changed definition's shape).
 *
 * Some histories (compaction "none" only) also back the server up and
 * restore it (etcd restored: RVs go back, names come again at RVs below their
 * old incarnation's); their consumer takes each key's last message instead of
 * the rule, which cannot order two histories.
 *
 * Some histories (state_dir ones, restores or not) also let an operator
 * restart — clean or after a crash — with another definition on the same
 * state_dir: another set of namespaces (of three: "a", "b", "c"), or
 * cluster-wide, in any config order (the same set in another order is the
 * same definition and resumes), and with or without drop_fields = spec.gen (a
 * reshape: every object is sent again in the new shape). The model server has
 * no labels, so selectors are not changed. The consumer's expected view is then the server's objects
 * under the *final* definition, and the consumer follows the rule's one
 * exception (docs/guarantees.md): an ADDED at the RV of the DELETED
 * finalStateUnknown it last applied is an object taken in again unchanged,
 * and is applied. (--redefine is accepted and does nothing: this is the
 * default.) The soak found LATEST merging such an ADDED with the object's
 * re-send in a new shape (MODIFIED at the same RV) and letting the checkpoint
 * pass the ADDED, so a crash replayed only the MODIFIED, which the rule skips
 * (seeds 10290, 15905, past the CI seeds: a live object gone for the
 * consumer); informer/deltafifo.c keeps the two apart.
 *
 * Checks: (1) the consumer's view equals the server's state (uid and RV of
 * every live object in the final definition's namespaces, in its shape); (2)
 * every message the rule skips is an exact repeat of one delivered before,
 * and only of a change past the checkpoint the restart began from — nothing
 * else goes back (an equal one that is not a repeat is a reshape); (3) every
 * object (uid) the consumer saw that the server no longer has, or that is
 * outside the final definition, got a DELETED.
 *
 * One state_dir history in three also has an operator (ops_*, below): at any
 * step a SIGHUP that rebuilds a sink while it holds unacknowledged messages
 * (the hand-over; its destination may refuse one while it flushes), a
 * SIGHUP that removes a sink (or its route) and one that puts it back, a
 * SIGHUP that removes another informer whose drain passes its deadline, a
 * SIGTERM whose deadline passes with the sinks stalled, and refusals of a
 * sink with on_refused = "dead_letter" — the decisions taken by
 * informer/sinkslot.h, the module bridge/bridge.c calls. Two more checks then
 * (on every history): (4) a dead letter carries the destination's verdict,
 * never a stop; (5) once caught up, every sink's watermark and the
 * checkpoint reached the last change. Each lifecycle fix of issue 24,
 * reverted once in that module, is found within the CI seeds (first failing
 * seed, and what it says): a stop taken for a refusal (4: dead-lettered for
 * "stopped"), a retired instance's messages left instead of handed over (4:
 * a change goes back), a successor not held during its hand-over (22: goes
 * back), a hand-over out of seq order (4: goes back), one abandon flag for
 * the process (4: a watermark frozen), a refusal during a hand-over stopping
 * the retired instance instead of its successor (1427: a watermark frozen);
 * and, in the ledger, a removed sink still waited for (29: the checkpoint
 * frozen). The operator's SIGHUP also edits the informer itself (ops_hup_*):
 * its definition changed (refused with state_dir — nothing changes, the
 * history goes on, and the next start applies the file's definition and
 * converges), the informer removed (drained in time or past the deadline,
 * while the server goes on) and added back on its existing directory, with
 * the file's definition or another (it resumes, or lists and converges) — the
 * decision of kb_definition_reload (informer/definition.h), which
 * kb_bridge_reload calls. A changed definition accepted in place instead of
 * refused is found at seed 20 (an object outside the new definition stays
 * live for the consumer).
 *
 * Some other state_dir histories run a second replica (sb_*, below): a
 * standby with its own state_dir and watch that skips per the mark the
 * leader publishes at its checkpoints and owes each key it skipped, then
 * takes over when the leader crashes — the decisions of informer/hatable.h,
 * the module bridge/ha.c calls. Each HA fix of issue 24, reverted once there,
 * is found (first failing seed, and what it says): the leader publishing what
 * it saw instead of what its sinks acknowledged (195: a key's change never
 * arrives), an inferred DELETED at an object's last RV (a name re-created
 * unwatched) counted known by that RV (2307, past the CI seeds now that a
 * relist's own DELETEDs carry the list's RV: a deleted object stays live),
 * owed keys not delivered again (469: a change the leader's watch lost never
 * arrives), a mark trusted above what the standby saw (164: a stale state
 * stays), a relist's DELETED at the object's last RV instead of the list's
 * (899: the rule skips it below what the old leader delivered), a standby's
 * queued ADDED not marked as possibly delivered (129: with "latest" it merges
 * away with the relist's DELETED, the object stays live), marked only while
 * standing by and not up to the takeover's RV (637: the same, through a
 * standby's lagging watch). One gap is let through, counted, exactly inside a
 * window the new leader reported as blind (sb_never_known; docs/cluster.md
 * section 9): reporting none is found at 1981 (a deleted object stays live);
 * a restarted new leader not re-armed from the Lease at 10290 (past the CI
 * seeds; soaks found it at 108164 and 201125).
 *
 * Usage: kb_sim [--seeds N] [--first S] [--seed S] [--seconds T] [-v]
 * Exit 0 when every history passed; 1 with the failing seed printed.
 */
#include "common/buf.h"
#include "common/event.h"
#include "common/log.h"
#include "config/config.h"
#include "informer/definition.h"
#include "informer/deltafifo.h"
#include "informer/informer.h"
#include "informer/ingest.h"
#include "informer/ledger.h"
#include "informer/hatable.h"
#include "informer/sinkslot.h"
#include "sinks/sink.h" /* kb_sink_refused: what the bridge counts as a destination's verdict */

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NAMES 5
#define MAX_NS 3
#define MAX_SINKS 2

static bool verbose;

/* ---- randomness: the seed is the history ------------------------------------ */

typedef struct { uint64_t s; } rng_t;

static uint64_t rnd64(rng_t *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}
static unsigned rnd(rng_t *r, unsigned n) { return (unsigned)(rnd64(r) % n); }
static bool chance(rng_t *r, unsigned pct) { return rnd(r, 100) < pct; }

static char failure[1024];
static bool failed;
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    if (failed)
        return;
    failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(failure, sizeof(failure), fmt, ap);
    va_end(ap);
}
#define TRACE(...) do { if (verbose) printf(__VA_ARGS__); } while (0)

/* ---- the model API server ------------------------------------------------ */

typedef struct { bool alive; unsigned uid; uint64_t rv; unsigned gen; } mobj_t;
typedef struct { int type; int ns, name; unsigned uid; uint64_t rv; unsigned gen; } mev_t; /* KB_EV_* */

typedef struct {
    int n_ns;                    /* namespaces in use: 2 or 3 ("a", "b", "c") */
    mobj_t obj[MAX_NS][NAMES];
    mev_t *hist;
    size_t n_hist, cap_hist;
    uint64_t rv;                 /* the newest RV (etcd's revision) */
    uint64_t compacted;          /* history at or below this is gone */
    unsigned uids;
    mobj_t snap_obj[MAX_NS][NAMES]; /* an etcd backup (has_snap), at snap_rv */
    uint64_t snap_rv;
    bool has_snap;
} server_t;

static const char *const ns_names[MAX_NS] = {"a", "b", "c"};

static void srv_event(server_t *s, int type, int ns, int name) {
    mobj_t *o = &s->obj[ns][name];
    if (s->n_hist == s->cap_hist) {
        s->cap_hist = s->cap_hist ? s->cap_hist * 2 : 256;
        s->hist = realloc(s->hist, s->cap_hist * sizeof(*s->hist));
    }
    s->hist[s->n_hist++] = (mev_t){type, ns, name, o->uid, o->rv, o->gen};
}

static void srv_op(server_t *s, rng_t *r) {
    int ns = (int)rnd(r, (unsigned)s->n_ns), name = (int)rnd(r, NAMES);
    mobj_t *o = &s->obj[ns][name];
    if (chance(r, 10))
        s->rv += 1 + rnd(r, 3); /* another resource moved etcd's revision */
    if (!o->alive) {
        *o = (mobj_t){true, ++s->uids, ++s->rv, 0};
        srv_event(s, KB_EV_ADDED, ns, name);
    } else if (chance(r, 65)) {
        o->rv = ++s->rv;
        o->gen++;
        srv_event(s, KB_EV_MODIFIED, ns, name);
    } else {
        o->rv = ++s->rv; /* the object of a DELETED carries the deletion's RV */
        o->alive = false;
        srv_event(s, KB_EV_DELETED, ns, name);
        TRACE("  server: delete %s/n%d uid %u @%llu\n", ns_names[ns], name, o->uid, (unsigned long long)o->rv);
    }
}

static void obj_json(kb_buf_t *b, int ns, int name, unsigned uid, uint64_t rv, unsigned gen) {
    kb_buf_appendf(b, "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n%d\",\"namespace\":\"%s\","
                      "\"uid\":\"u%u\",\"resourceVersion\":\"%llu\"},\"spec\":{\"gen\":%u}}",
                   name, ns_names[ns], uid, (unsigned long long)rv, gen);
}

/* ---- what a consumer received ------------------------------------------------ */

typedef struct {
    int type;
    bool fsu;
    int ns, name;
    unsigned uid;
    uint64_t rv;
    uint64_t seq;
    unsigned gen;   /* spec.gen as delivered (NO_GEN: the definition drops it) */
    int life;       /* which process lifetime delivered it */
    int dl_err;     /* dead-lettered (the consumer reads it from the dead-letter sink, here): the reason; 0: not */
} cmsg_t;

typedef struct { cmsg_t *v; size_t n, cap; } clog_t;

/* ---- kbridge as the simulation runs it ----------------------------------- */

typedef enum { R_NEED_LIST, R_LISTING, R_STREAMING, R_WATCH_OPEN, R_WATCHING } rstate_t;

typedef struct {
    rstate_t st;
    int ns;                 /* -1: cluster-wide */
    /* listing: a consistent snapshot */
    mev_t *snap;
    size_t n_snap, at_snap;
    uint64_t list_rv;
    bool live_pages;        /* fault: continue pages read the live state, not the snapshot */
    bool end_sent;          /* streamed: the initial-events-end BOOKMARK is in pending or handed over */
    bool page_next;         /* a streamed list got 410: the next list is paged (as the reflector does) */
    /* watching */
    size_t cursor;          /* next history index to consider */
    uint64_t from;          /* RV the watch began at */
    kb_buf_t pending;       /* bytes not yet handed over (a stream cut mid-frame) */
    bool old_epoch;         /* the server was restored since this scope last completed a list: a watch
                             * from its resume point is refused (ResourceVersionTooLarge), whatever
                             * RV the new history has reached (see srv_restore) */
} refl_t;

/* A sink as the bridge drives it (bridge/bridge.c): messages it took are
 * acknowledged into the informer's ledger per sink (kb_ledger_sink_done);
 * on_refused = "stop": after a refusal it takes nothing more until the next
 * start, and what it misses stays unacknowledged (its watermark holds). */
typedef struct { uint64_t seq; char key[16]; } inflight_t;
typedef struct {
    inflight_t *v;          /* taken, not yet acknowledged */
    size_t n, cap;
    unsigned ack_pct, refuse_pct;
    bool stopped;
    bool missed;            /* it was stopped with something routed to it */
    int lidx;               /* its index in the ledger */
    uint64_t persisted_wm;  /* its watermark in state_dir, as last written */
    uint64_t wm_at_start[64]; /* per lifetime */
    clog_t log;
} msink_t;

/* An informer's definition as the sim varies it: its namespaces in config
 * order (none: cluster-wide) and its projection. */
typedef struct { int ns[MAX_NS]; int n; bool drop_gen; } def_t;

typedef struct {
    rng_t r;
    server_t srv;
    char dir[256];
    char cfgtext[2048];
    kb_config_t *cfg;
    kb_informer_t *inf;
    refl_t refl[MAX_NS];
    int n_refl;
    msink_t sinks[MAX_SINKS];
    int n_sinks;
    bool latest;
    bool restores;          /* this history may restore the server from a backup (compaction none only) */
    unsigned restored;      /* how many times it did */
    bool memory;            /* no state_dir: the cache alone (no restarts then: they would start from nothing) */
    bool redefines;         /* a restart may come with another definition (namespaces) on the same state_dir */
    int def_ns[MAX_NS];     /* the definition: its namespaces in config order (reflector i lists def_ns[i]) */
    int n_def_ns;           /* 0: cluster-wide (one reflector) */
    bool drop_gen;          /* the definition's projection: drop_fields = ["spec.gen"] (a reshape when it flips) */
    unsigned shards;
    int stream_pct;         /* chance a list is streamed (sendInitialEvents) rather than paged */
    int64_t window;         /* coalescing window in clock ticks (0 = off; only with latest) */
    int64_t clock;          /* the fifo's clock: one tick per step, and per quiesce round */
    int life;
    uint64_t acked_at_start[64]; /* per lifetime: the checkpoint it began from */
    uint64_t tail_end[64];       /* per lifetime: the last seq of the journal tail it re-queued */
    unsigned crashes, restarts, redefined, lists, gones, steps, msgs;
    struct sim_ops *ops;    /* the operator's hands (SIGHUP rebuilds, SIGTERM at a deadline, dead letters), or NULL */
    struct sim_standby *sb; /* a second replica standing by, then leading, or NULL */
} sim_t;

static bool ops_held(const sim_t *s);
static bool ops_removed(const sim_t *s, int i);
static bool ops_abandoned(const sim_t *s);
static void sb_publish(sim_t *s);
static void sb_blind_poll(sim_t *s);
static bool sb_loses(sim_t *s, const mev_t *e);
static void sb_attach(sim_t *s, kb_informer_t *inf);

static void refl_reset(refl_t *f) {
    free(f->snap);
    f->snap = NULL;
    f->n_snap = f->at_snap = 0;
    f->end_sent = false;
    kb_buf_reset(&f->pending);
}

static bool in_scope(const refl_t *f, int ns) { return f->ns < 0 || f->ns == ns; }

/* Does the definition list namespace ns? */
static bool def_covers(const sim_t *s, int ns) {
    for (int i = 0; i < s->n_def_ns; i++)
        if (s->def_ns[i] == ns)
            return true;
    return !s->n_def_ns;
}

static int64_t sim_clock(void *opaque) {
    return ((sim_t *)opaque)->clock;
}

/* A replica's informer of cfg, or NULL (failed). */
static kb_informer_t *sim_informer_new(sim_t *s, kb_config_t *cfg) {
    char err[512];
    kb_informer_t *inf = kb_informer_new(cfg, &cfg->informers[0], NULL, err, sizeof(err));
    if (!inf) {
        fail("informer_new: %s", err);
        return NULL;
    }
    /* As the bridge does before the informer pushes anything, with the sim's clock. */
    for (size_t sh = 0; sh < kb_informer_shards(inf); sh++)
        kb_deltafifo_set_coalesce(kb_informer_fifo(inf, sh), s->window, sim_clock, s);
    sb_attach(s, inf);
    return inf;
}

static void kb_open(sim_t *s) {
    s->inf = sim_informer_new(s, s->cfg);
    if (!s->inf)
        return;
    kb_informer_stats_t st;
    kb_informer_stats(s->inf, &st);
    if (s->life < 64)
        s->acked_at_start[s->life] = st.ack_seq;
    TRACE("life %d: checkpoint seq %llu rv %s\n", s->life, (unsigned long long)st.ack_seq, st.checkpoint_rv);
    static const char *const names[MAX_SINKS] = {"s0", "s1"};
    for (int i = 0; i < s->n_sinks; i++) {
        if (ops_removed(s, i))
            continue; /* a reload removed it: the config has it no more */
        s->sinks[i].lidx = kb_ledger_add_sink(kb_informer_ledger(s->inf), names[i]);
        if (s->life < 64)
            s->sinks[i].wm_at_start[s->life] = s->sinks[i].persisted_wm;
    }
    kb_informer_requeue_tail(s->inf);
    kb_informer_stats(s->inf, &st);
    if (s->life < 64)
        s->tail_end[s->life] = st.seq;
    for (int i = 0; i < s->n_refl; i++) {
        refl_reset(&s->refl[i]);
        s->refl[i].st = R_WATCH_OPEN; /* the reflector's rv says whether it lists first */
    }
}

/* The object's spec.gen as delivered, or NO_GEN when the definition drops it. */
#define NO_GEN 0xffffffffu
static unsigned msg_gen(const kb_event_t *ev) {
    const char *g = strstr(ev->obj, "\"gen\":");
    return g ? (unsigned)strtoul(g + 6, NULL, 10) : NO_GEN;
}

/* The bridge's delivery of one event: only to sinks that do not have it yet
 * (ledger wants), the ledger told who owes an acknowledgement before anyone
 * can give one, a refusal stops the sink. A sink that takes the message hands
 * it to its consumer at once; the acknowledgement comes later, or never. */
static void deliver(sim_t *s, kb_event_t *ev) {
    kb_ledger_t *l = kb_informer_ledger(s->inf);
    int owe[MAX_SINKS];
    size_t n_owe = 0;
    bool take[MAX_SINKS];
    for (int i = 0; i < s->n_sinks; i++) {
        take[i] = !ops_removed(s, i) && (!ev->redelivery || kb_ledger_wants(l, ev->seq, s->sinks[i].lidx));
        if (take[i])
            owe[n_owe++] = s->sinks[i].lidx;
    }
    kb_ledger_routed(l, ev->seq, owe, n_owe);
    int ns = ev->ns[0] - 'a', name = atoi(ev->name + 1);
    for (int i = 0; i < s->n_sinks; i++) {
        msink_t *k = &s->sinks[i];
        if (!take[i])
            continue;
        if (!k->stopped && chance(&s->r, k->refuse_pct)) {
            TRACE("  sink %d refuses seq %llu and stops\n", i, (unsigned long long)ev->seq);
            k->stopped = true;
        }
        if (k->stopped) {
            k->missed = true;
            continue;
        }
        if (k->log.n == k->log.cap) {
            k->log.cap = k->log.cap ? k->log.cap * 2 : 256;
            k->log.v = realloc(k->log.v, k->log.cap * sizeof(*k->log.v));
        }
        k->log.v[k->log.n++] = (cmsg_t){ev->type, ev->final_state_unknown, ns, name, (unsigned)atoi(ev->uid + 1),
                                        ev->rv_num, ev->seq, msg_gen(ev), s->life, 0};
        s->msgs++;
        if (k->n == k->cap) {
            k->cap = k->cap ? k->cap * 2 : 64;
            k->v = realloc(k->v, k->cap * sizeof(*k->v));
        }
        k->v[k->n].seq = ev->seq;
        snprintf(k->v[k->n].key, sizeof(k->v[k->n].key), "%s", ev->key);
        k->n++;
    }
    TRACE("  deliver seq %llu %s %s uid %s @%s%s%s\n", (unsigned long long)ev->seq, kb_event_type_name(ev->type),
          ev->key, ev->uid, ev->rv, ev->final_state_unknown ? " fsu" : "", ev->redelivery ? " (redelivery)" : "");
}

/* In order per key: a message may be answered only when no earlier one of
 * its key was passed over (blocked). */
typedef struct { char key[NAMES * MAX_NS][16]; int n; } blocked_t;
static bool key_blocked(const blocked_t *bl, const char *key) {
    for (int b = 0; b < bl->n; b++)
        if (!strcmp(bl->key[b], key))
            return true;
    return false;
}
static void key_block(blocked_t *bl, const char *key) {
    if (!key_blocked(bl, key) && bl->n < NAMES * MAX_NS)
        snprintf(bl->key[bl->n++], 16, "%s", key);
}

/* Acknowledge some of a sink's messages: any order across keys, in order per key. */
static void sink_acks(sim_t *s, msink_t *k, bool all) {
    blocked_t bl = {.n = 0};
    size_t keep = 0;
    for (size_t i = 0; i < k->n; i++) {
        if (!key_blocked(&bl, k->v[i].key) && (all || chance(&s->r, k->ack_pct))) {
            kb_ledger_sink_done(kb_informer_ledger(s->inf), k->v[i].seq, k->lidx);
            continue;
        }
        key_block(&bl, k->v[i].key);
        k->v[keep++] = k->v[i];
    }
    k->n = keep;
}

/* The checkpointer: what it writes is what a restart starts from. */
static void checkpoint(sim_t *s) {
    kb_informer_save_checkpoint(s->inf);
    size_t n;
    kb_ledger_sink_t *sk = kb_ledger_sinks(kb_informer_ledger(s->inf), &n);
    for (size_t j = 0; j < n; j++)
        for (int i = 0; i < s->n_sinks; i++)
            if (sk[j].index == s->sinks[i].lidx)
                s->sinks[i].persisted_wm = sk[j].watermark;
    free(sk);
    sb_publish(s); /* a leader with a standby publishes what its sinks acknowledged */
}

static void pop_shard(sim_t *s, size_t shard) {
    if (ops_held(s))
        return; /* a rebuilt sink waits for its hand-over: the worker waits with it (kb_bsink_wait_handover) */
    kb_deltas_t d;
    kb_deltas_init(&d);
    if (kb_deltafifo_pop(kb_informer_fifo(s->inf, shard), &d, 0) == KB_OK)
        for (size_t i = 0; i < d.n && !ops_abandoned(s); i++) /* as kb_worker_main */
            deliver(s, d.ev[i]);
    kb_deltas_fini(&d);
}

/* The end of a process: acks that never came are lost with it. */
static void kb_gone(sim_t *s, bool crash) {
    for (int i = 0; i < s->n_sinks; i++) {
        msink_t *k = &s->sinks[i];
        k->n = 0;
        k->stopped = false; /* a new start tries the sink again */
    }
    if (crash)
        kb_ingest_crash(s->inf);
    else
        kb_informer_destroy(s->inf);
    s->inf = NULL;
    s->life++;
}

/* SIGTERM: drain what is queued (closing the queues ends every coalescing
 * window, as kb_informer_stop does), wait for the acks, checkpoint, stop. */
static void clean_stop(sim_t *s) {
    for (size_t sh = 0; sh < kb_informer_shards(s->inf); sh++)
        kb_deltafifo_close(kb_informer_fifo(s->inf, sh));
    for (int round = 0; round < 2; round++) {
        for (size_t sh = 0; sh < kb_informer_shards(s->inf); sh++)
            for (int n = 0; n < 10000; n++) {
                kb_deltafifo_stats_t fs;
                kb_deltafifo_stats(kb_informer_fifo(s->inf, sh), &fs);
                if (!fs.keys)
                    break;
                pop_shard(s, sh);
            }
        for (int i = 0; i < s->n_sinks; i++)
            sink_acks(s, &s->sinks[i], true);
    }
    checkpoint(s); /* the last one, as kb_informer_destroy writes it */
    kb_gone(s, false);
}

/* ---- the operator's hands (issue 24) ---------------------------------------
 *
 * Some histories (state_dir, one in three) also let an operator act at any
 * step, and run what bridge/bridge.c decides through the same module it
 * calls (informer/sinkslot.h): what a sink's answer means and a rebuilt
 * sink's hand-over.
 *   - SIGHUP changing a sink's path while it holds unacknowledged messages:
 *     the old instance flushes (acknowledges some, later steps), the new one
 *     is held (the workers wait); at the close deadline what the old one
 *     still holds is given back (KB_ERR_STOPPED), parked, and re-sent to the
 *     new one in hand-over order, then the workers go on.
 *   - SIGTERM at the deadline with a stalled sink: what the sinks hold is
 *     given back unwritten (KB_ERR_STOPPED); the next start delivers it.
 *   - a sink with on_refused = "dead_letter" whose destination refuses a
 *     message: it goes to the dead-letter sink (which takes everything), and
 *     its consumer reads it there, in the refused message's place.
 * A message given back was not written: it leaves the consumer's log (the
 * model sink logs at take). Checks, literal to docs/guarantees.md: a dead
 * letter carries a destination's verdict, never a stop; and once kbridge
 * caught up, every sink's watermark and the checkpoint reached the last
 * change (a stop or a rebuild never freezes them). */

typedef struct {
    bool dl;                 /* on_refused = "dead_letter" */
    bool rebuilding;         /* a SIGHUP rebuilt it: the old instance flushes, the new one is held */
    inflight_t *old;         /* the old instance's unacknowledged messages ... */
    cmsg_t *old_msg;         /* ... and what they say (not written yet: out of the consumer's log) */
    size_t n_old;
    kb_handover_t ho;        /* the old instance's give-backs */
    kb_handover_t gate;      /* the new instance: held until they are in */
    bool removed;            /* a SIGHUP removed it (its route, or the sink) */
    bool retired_stopped;    /* an old instance was stopped (the address kb_handover_stops gives for it) */
    bool partial;            /* removed once: its consumer missed what happened meanwhile (not checked) */
} sinkops_t;

struct sim_ops {
    rng_t r;                 /* its own stream: the histories without an operator stay as they were */
    sinkops_t k[MAX_SINKS];
    kb_drain_t drain;        /* this informer's pipeline (bridge.c: p->drain) */
    unsigned rebuilds, handed, terms, left, dead_letters, removals, informers_removed;
    /* The informer itself (ops_hup_*, just before run_history): */
    bool gone;               /* a SIGHUP removed it; a later one adds it back */
    bool file_edited;        /* the config file holds file_def, which no start has applied yet */
    def_t file_def;
    unsigned hup_refused, hup_kept, hup_removed, hup_added, added_redefined;
};

static bool ops_abandoned(const sim_t *s) {
    return s->ops && kb_drain_abandoned(&s->ops->drain);
}

static void ops_hup_informer(sim_t *s);
static void ops_file_applies(sim_t *s);
static void ops_file_settled(sim_t *s);

static bool ops_removed(const sim_t *s, int i) {
    return s->ops && s->ops->k[i].removed;
}

static bool ops_partial(const sim_t *s, int i) {
    return s->ops && s->ops->k[i].partial;
}

static bool ops_held(const sim_t *s) {
    for (int i = 0; s->ops && i < s->n_sinks; i++)
        if (kb_handover_held(&s->ops->k[i].gate))
            return true;
    return false;
}

static bool ops_pending(const sim_t *s) {
    for (int i = 0; s->ops && i < s->n_sinks; i++)
        if (s->ops->k[i].rebuilding)
            return true;
    return false;
}

static void clog_push(clog_t *log, cmsg_t m) {
    if (log->n == log->cap) {
        log->cap = log->cap ? log->cap * 2 : 256;
        log->v = realloc(log->v, log->cap * sizeof(*log->v));
    }
    log->v[log->n++] = m;
}

/* The consumer's entry of seq (key) delivered in this lifetime, or -1. */
static long clog_find(const sim_t *s, const msink_t *k, uint64_t seq, const char *key) {
    for (size_t j = k->log.n; j-- > 0;) {
        const cmsg_t *m = &k->log.v[j];
        char mk[16];
        snprintf(mk, sizeof(mk), "%s/n%d", ns_names[m->ns], m->name);
        if (m->seq == seq && m->life == s->life && !strcmp(mk, key))
            return (long)j;
    }
    return -1;
}

/* seq was not written after all: out of the consumer's log. */
static void clog_unwrite(sim_t *s, msink_t *k, uint64_t seq, const char *key) {
    long j = clog_find(s, k, seq, key);
    if (j >= 0) {
        memmove(&k->log.v[j], &k->log.v[j + 1], (k->log.n - (size_t)j - 1) * sizeof(*k->log.v));
        k->log.n--;
    }
}

/* Sink i's answer err to one message m; the module decides, the sim carries
 * it out as bridge.c does (kb_bridge_ack). collecting: the old instance of a
 * rebuild. True when it was parked for the successor. */
static bool ops_answer(sim_t *s, int i, inflight_t *m, kb_err_t err, bool collecting) {
    msink_t *k = &s->sinks[i];
    sinkops_t *o = &s->ops->k[i];
    kb_ledger_t *l = kb_informer_ledger(s->inf);
    kb_verdict_t v = {.err = err, .refusal = kb_sink_refused(err), .dead_letter = false, .to_dead_letter = o->dl,
                      .collecting = collecting && kb_handover_collecting(&o->ho)};
    kb_fate_t f = kb_sinkslot_fate(&v);
    TRACE("  sink %d: seq %llu %s answered %s: %s\n", i, (unsigned long long)m->seq, m->key, kb_err_name(err),
          kb_fate_name(f));
    long j;
    switch (f) {
    case KB_FATE_ACKED:
        kb_ledger_sink_done(l, m->seq, k->lidx);
        return false;
    case KB_FATE_DEAD_LETTER: /* the dead-letter sink takes it at once, in the message's place */
        if (collecting) {
            cmsg_t c = o->old_msg[m - o->old];
            c.dl_err = err;
            clog_push(&k->log, c);
        } else if ((j = clog_find(s, k, m->seq, m->key)) >= 0) {
            k->log.v[j].dl_err = err;
        }
        s->ops->dead_letters++;
        kb_ledger_sink_done(l, m->seq, k->lidx);
        return false;
    case KB_FATE_PARK:
        return kb_handover_park(&o->ho, m, 0, m->seq);
    case KB_FATE_REFUSED:
    case KB_FATE_HOLD: /* the sink stops (a retired instance's: the one that replaced it); SIGHUP or a start retries */
        if (kb_handover_stops(&o->ho, &o->retired_stopped) == k) {
            k->stopped = true;
            k->missed = true;
        } else if (collecting) {
            o->retired_stopped = true; /* no one tries a retired instance again: its slot holds the watermark */
        } else {
            k->stopped = true;
            k->missed = true;
        }
        break;
    case KB_FATE_LEAVE:
        s->ops->left++;
        break;
    }
    if (!collecting) /* an old instance's messages are out of the log already */
        clog_unwrite(s, k, m->seq, m->key);
    return false;
}

/* SIGHUP changes sink i's path: its running instance retires with what it
 * holds; the new one is held (kb_reload_sinks, kb_reload_retire_sinks). */
static void ops_rebuild_begin(sim_t *s, int i) {
    msink_t *k = &s->sinks[i];
    sinkops_t *o = &s->ops->k[i];
    if (o->rebuilding || k->stopped)
        return;
    TRACE("SIGHUP: sink %d path changed, %zu unacknowledged\n", i, k->n);
    o->old = k->v;
    o->n_old = k->n;
    o->old_msg = calloc(k->n ? k->n : 1, sizeof(*o->old_msg));
    for (size_t m = 0; m < k->n; m++) { /* the old instance has not written them yet */
        long j = clog_find(s, k, k->v[m].seq, k->v[m].key);
        if (j >= 0)
            o->old_msg[m] = k->log.v[j];
        clog_unwrite(s, k, k->v[m].seq, k->v[m].key);
    }
    k->v = NULL;
    k->n = k->cap = 0;
    kb_handover_hold(&o->gate);
    kb_handover_retire(&o->ho, k);
    o->rebuilding = true;
    s->ops->rebuilds++;
}

/* The old instance flushes: some of its messages are written and acknowledged
 * (in order per key). */
static void ops_rebuild_flush(sim_t *s, int i) {
    msink_t *k = &s->sinks[i];
    sinkops_t *o = &s->ops->k[i];
    blocked_t bl = {.n = 0};
    size_t keep = 0;
    for (size_t m = 0; m < o->n_old; m++) {
        if (!key_blocked(&bl, o->old[m].key) && chance(&s->ops->r, 4)) {
            /* Its destination refuses it while it flushes. Without a dead-letter sink it writes nothing more of
             * the key (as a refusal at take stops the sink before its next message): those are left below the
             * watermark. */
            ops_answer(s, i, &o->old[m], KB_ERR_TOOBIG, true);
            for (size_t later = m + 1; later < o->n_old && !o->dl; later++)
                if (!strcmp(o->old[later].key, o->old[m].key)) {
                    ops_answer(s, i, &o->old[later], KB_ERR_STOPPED, false);
                    o->old[later].key[0] = '\0'; /* gone from the old instance (dropped below) */
                }
            continue;
        }
        if (!o->old[m].key[0])
            continue;
        if (!key_blocked(&bl, o->old[m].key) && chance(&s->ops->r, 50)) {
            clog_push(&k->log, o->old_msg[m]);
            kb_ledger_sink_done(kb_informer_ledger(s->inf), o->old[m].seq, k->lidx);
            continue;
        }
        key_block(&bl, o->old[m].key);
        o->old_msg[keep] = o->old_msg[m];
        o->old[keep++] = o->old[m];
    }
    o->n_old = keep;
}

/* The close deadline: the old instance gives back what it holds; it goes to
 * the new one in hand-over order; then the workers may go on (kb_hand_over). */
static void ops_rebuild_end(sim_t *s, int i) {
    msink_t *k = &s->sinks[i];
    sinkops_t *o = &s->ops->k[i];
    for (size_t m = 0; m < o->n_old; m++)
        ops_answer(s, i, &o->old[m], KB_ERR_STOPPED, true);
    size_t n;
    kb_parked_t *v = kb_handover_take(&o->ho, &n);
    for (size_t p = 0; p < n; p++) {
        inflight_t *m = v[p].msg;
        clog_push(&k->log, o->old_msg[m - o->old]);
        if (k->n == k->cap) {
            k->cap = k->cap ? k->cap * 2 : 64;
            k->v = realloc(k->v, k->cap * sizeof(*k->v));
        }
        k->v[k->n++] = *m;
        s->ops->handed++;
    }
    TRACE("  sink %d: %zu message(s) handed over to the new instance\n", i, n);
    free(v);
    free(o->old);
    free(o->old_msg);
    o->old = NULL;
    o->old_msg = NULL;
    o->n_old = 0;
    o->rebuilding = false;
    kb_handover_release(&o->gate);
}

/* Every reload in progress ends (before a stop, a crash or the end). */
static void ops_settle(sim_t *s) {
    for (int i = 0; s->ops && i < s->n_sinks; i++)
        if (s->ops->k[i].rebuilding)
            ops_rebuild_end(s, i);
}

/* A sink with on_refused = "dead_letter" gets its destination's verdict on
 * one message it holds — the oldest of its key: verdicts, like
 * acknowledgements, come in order per key. */
static void ops_refusal(sim_t *s, int i) {
    msink_t *k = &s->sinks[i];
    if (!s->ops->k[i].dl || !k->n)
        return;
    size_t m = rnd(&s->ops->r, (unsigned)k->n);
    for (size_t j = 0; j < m; j++)
        if (!strcmp(k->v[j].key, k->v[m].key)) {
            m = j;
            break;
        }
    inflight_t it = k->v[m];
    memmove(&k->v[m], &k->v[m + 1], (k->n - m - 1) * sizeof(*k->v));
    k->n--;
    ops_answer(s, i, &it, KB_ERR_TOOBIG, false);
}

/* The deadline passes with the sinks stalled: the workers drain some of what
 * is queued, the sinks acknowledge some, then give the rest back unwritten;
 * the last checkpoint; the process (or the pipeline) ends. */
static void ops_drain_past_deadline(sim_t *s) {
    for (size_t sh = 0; sh < kb_informer_shards(s->inf); sh++)
        kb_deltafifo_close(kb_informer_fifo(s->inf, sh));
    for (unsigned n = rnd(&s->ops->r, 6); n > 0; n--)
        pop_shard(s, rnd(&s->ops->r, (unsigned)kb_informer_shards(s->inf)));
    kb_drain_look(&s->ops->drain, false, s->clock, s->clock); /* the deadline: what a worker pops now is skipped */
    for (unsigned n = rnd(&s->ops->r, 3); n > 0; n--)
        pop_shard(s, rnd(&s->ops->r, (unsigned)kb_informer_shards(s->inf)));
    for (int i = 0; i < s->n_sinks; i++) {
        msink_t *k = &s->sinks[i];
        sink_acks(s, k, false);
        for (size_t m = 0; m < k->n; m++)
            ops_answer(s, i, &k->v[m], KB_ERR_STOPPED, false);
        k->n = 0;
    }
    checkpoint(s);
    kb_gone(s, false);
    kb_drain_init(&s->ops->drain); /* the next pipeline's */
}

/* SIGTERM, and the deadline passes with the sinks stalled; the next start
 * (with the file's definition, if the operator changed it). */
static void ops_term_at_deadline(sim_t *s) {
    ops_settle(s);
    TRACE("SIGTERM: the deadline passes with the sinks stalled\n");
    s->ops->terms++;
    ops_drain_past_deadline(s);
    ops_file_applies(s);
    kb_open(s);
}

/* SIGHUP removes sink i (or the one route to it): what it holds is left —
 * nothing waits for it any more (kb_pipeline_lidx → kb_ledger_remove_sink);
 * or puts a removed one back, which gets what changes from then on. */
static void ops_remove_or_add(sim_t *s, int i) {
    msink_t *k = &s->sinks[i];
    sinkops_t *o = &s->ops->k[i];
    kb_ledger_t *l = kb_informer_ledger(s->inf);
    if (o->removed) {
        TRACE("SIGHUP: sink %d added again\n", i);
        k->lidx = kb_ledger_add_sink(l, i ? "s1" : "s0");
        o->removed = false;
        return;
    }
    TRACE("SIGHUP: sink %d removed, %zu unacknowledged\n", i, k->n);
    for (size_t m = 0; m < k->n; m++)
        ops_answer(s, i, &k->v[m], KB_ERR_STOPPED, false);
    k->n = 0;
    k->stopped = false;
    kb_ledger_remove_sink(l, k->lidx);
    o->removed = o->partial = true;
    s->ops->removals++;
}

/* SIGHUP removes another informer, and its drain runs past the deadline:
 * that pipeline abandons — and this one goes on (kb_reload_drain_removed). */
static void ops_remove_other_informer(sim_t *s) {
    kb_drain_t other;
    kb_drain_init(&other);
    TRACE("SIGHUP: another informer removed; its drain passes the deadline\n");
    kb_drain_look(&other, false, s->clock, s->clock);
    s->ops->informers_removed++;
}

/* One step of the operator. */
static void ops_step(sim_t *s) {
    if (s->ops->gone || chance(&s->ops->r, 10)) {
        ops_hup_informer(s);
        return;
    }
    int i = (int)rnd(&s->ops->r, (unsigned)s->n_sinks);
    unsigned w = rnd(&s->ops->r, 100);
    if (s->ops->k[i].rebuilding)
        w < 60 ? ops_rebuild_flush(s, i) : ops_rebuild_end(s, i);
    else if (w < 8)
        ops_remove_or_add(s, i);
    else if (w < 12)
        ops_remove_other_informer(s);
    else if (s->ops->k[i].removed)
        return;
    else if (w < 45)
        ops_rebuild_begin(s, i);
    else if (w < 85)
        ops_refusal(s, i);
    else
        ops_term_at_deadline(s);
}

/* Whether this history has an operator, and which sinks dead-letter. */
static void ops_configure(sim_t *s, uint64_t seed) {
    rng_t r = {seed * 0xD1B54A32D192ED03ull + 7};
    if (s->memory || rnd(&r, 3) != 0)
        return;
    s->ops = calloc(1, sizeof(*s->ops));
    s->ops->r = r;
    kb_drain_init(&s->ops->drain);
    ops_file_settled(s);
    for (int i = 0; i < s->n_sinks; i++) {
        kb_handover_init(&s->ops->k[i].ho);
        kb_handover_init(&s->ops->k[i].gate);
        s->ops->k[i].dl = chance(&s->ops->r, 50);
        if (s->ops->k[i].dl)
            s->sinks[i].refuse_pct = 0; /* its refusals come as verdicts (ops_refusal) */
    }
}

static void ops_free(sim_t *s) {
    for (int i = 0; s->ops && i < MAX_SINKS; i++) {
        free(s->ops->k[i].old);
        free(s->ops->k[i].old_msg);
        kb_handover_fini(&s->ops->k[i].ho);
        kb_handover_fini(&s->ops->k[i].gate);
    }
    free(s->ops);
    s->ops = NULL;
}

/* Checks of the operator's histories and of every history's end. */
static void check_dead_letters(sim_t *s, int si) {
    const msink_t *k = &s->sinks[si];
    for (size_t i = 0; i < k->log.n && !failed; i++)
        if (k->log.v[i].dl_err && !kb_sink_refused((kb_err_t)k->log.v[i].dl_err))
            fail("sink %d message %zu: seq %llu was dead-lettered for \"%s\", which is not the destination's verdict "
                 "(a stop, a deadline or a retired instance leaves a message below the watermark)", si, i,
                 (unsigned long long)k->log.v[i].seq, kb_err_str((kb_err_t)k->log.v[i].dl_err));
}

/* Caught up, nothing stopped: every sink acknowledged every change, so its
 * watermark and the checkpoint reached the last one. */
static void check_progress(sim_t *s) {
    kb_ledger_stats_t st;
    kb_ledger_stats(kb_informer_ledger(s->inf), &st);
    size_t n;
    kb_ledger_sink_t *sk = kb_ledger_sinks(kb_informer_ledger(s->inf), &n);
    for (size_t j = 0; j < n && !failed; j++)
        if (sk[j].watermark < st.seq)
            fail("sink %s's watermark is frozen at seq %llu (the last change is %llu) although it runs and nothing is "
                 "in flight", sk[j].name, (unsigned long long)sk[j].watermark, (unsigned long long)st.seq);
    free(sk);
    if (!failed && st.acked < st.seq)
        fail("the checkpoint is frozen at seq %llu (the last change is %llu) although nothing is in flight",
             (unsigned long long)st.acked, (unsigned long long)st.seq);
}

static void refl_step(sim_t *s, int idx, bool quiet);
static void load_config(sim_t *s);

/* ---- a second replica: a standby, and its takeover (issue 24) --------------
 *
 * Some state_dir histories (no restores, no redefinitions, no operator) also
 * run a standby: a second kbridge with its own state_dir, fed by the same
 * model server through its own reflectors, delivering nothing. The leader
 * publishes at each checkpoint what its sinks acknowledged
 * (kb_hatable_published); the standby's workers skip what that mark covers
 * and remember each skipped key, and wait at the first change it does not
 * cover — the decisions of informer/hatable.h, the module bridge/ha.c calls.
 * At a random step (or before the end) the leader crashes and the standby
 * takes over: a mark above anything it saw is refused, every owed key goes out
 * again in its latest state (outside the ledger, as kb_bridge_ha_redeliver),
 * what waited is delivered, and it goes on as the leader to the same sinks.
 *
 * Faults, one kind per history: either the leader's watch loses events now
 * and then (what the owed table is for: the leader acknowledged past a change
 * it never saw), or the standby restarts (crash or clean) before the takeover
 * (the table is memory and is lost: only what the leader's sinks really
 * acknowledged may have been skipped). A Lease written by someone else (a mark
 * far above the server) is published now and then.
 *
 * After a takeover the two replicas' journals number the same change with
 * different seqs: a message of the new leader the rule skips is not checked
 * for being an exact repeat (check 2); checks 1 and 3 hold as everywhere.
 */

typedef struct { bool seen; uint64_t rv; int rank; bool alive; bool fsu; unsigned uid; unsigned gen; } cview_t;

#define SB_SHARDS 4

typedef struct sim_standby {
    rng_t r;                    /* its own: other histories keep their seeds */
    kb_informer_t *inf;
    kb_config_t *cfg;
    refl_t refl[MAX_NS];
    kb_hamark_t mark;           /* the leader's published mark as the standby holds it */
    kb_owed_t owed;             /* keys whose change it skipped */
    kb_deltas_t wait[SB_SHARDS]; /* per shard: a batch waiting at the gate … */
    size_t wait_at[SB_SHARDS];  /* … from this event on */
    bool lossy;                 /* the leader's watch loses events (else the standby restarts) */
    bool took;                  /* the takeover happened: s->inf is the former standby */
    bool swapped;               /* the standby is in s's place for one of its steps */
    int took_life;              /* the lifetime the new leader began */
    unsigned skipped, restarts, forged, refused, owed_paid, lost;
    unsigned ghosts;            /* the known gap: see sb_ghost */
    _Atomic uint64_t shared_rv; /* kb_informer_ha_shared: UINT64_MAX as a standby, the server's RV at the takeover */
    bool blind;                 /* the takeover was blind: kb_informer_blind reported a window … */
    uint64_t blind_lo, blind_hi; /* … their hull (lo, hi], from above the trusted mark */
    unsigned blind_takeovers;
    bool lost_delete[4096];     /* uids whose DELETED the leader's watch lost */
    unsigned lost_unknown;      /* … of which the new leader never knew the object: the audit's job (sb_never_known) */
    uint64_t took_rv;           /* the server's RV at the takeover (the Lease write's) */
    int armed_life;             /* the new leader's lifetime whose informer knows of the takeover */
    bool skipped_uid[4096];     /* uids whose DELETED the standby skipped */
} sim_standby_t;

/* The standby's informer, reflectors and config trade places with the leader's. */
static void sb_swap(sim_t *s) {
    sim_standby_t *sb = s->sb;
    kb_informer_t *inf = s->inf;
    kb_config_t *cfg = s->cfg;
    refl_t refl[MAX_NS];
    memcpy(refl, s->refl, sizeof(refl));
    memcpy(s->refl, sb->refl, sizeof(refl));
    memcpy(sb->refl, refl, sizeof(refl));
    s->inf = sb->inf;
    s->cfg = sb->cfg;
    sb->inf = inf;
    sb->cfg = cfg;
    sb->swapped = !sb->swapped;
}

static void sb_open(sim_t *s) {
    sim_standby_t *sb = s->sb;
    sb->inf = sim_informer_new(s, sb->cfg);
    if (!sb->inf)
        return;
    kb_informer_ha_shared(sb->inf, &sb->shared_rv);
    static const char *const names[MAX_SINKS] = {"s0", "s1"};
    for (int i = 0; i < s->n_sinks; i++)
        if (kb_ledger_add_sink(kb_informer_ledger(sb->inf), names[i]) != s->sinks[i].lidx)
            fail("the standby's ledger numbers sink %s apart from the leader's", names[i]);
    kb_informer_requeue_tail(sb->inf);
    for (int i = 0; i < s->n_refl; i++) {
        refl_reset(&sb->refl[i]);
        sb->refl[i].st = R_WATCH_OPEN;
    }
}

static void sb_configure(sim_t *s, uint64_t seed) {
    if (s->memory || s->restores || s->redefines || s->ops || s->shards > SB_SHARDS)
        return;
    rng_t r = {seed * 0x2545F4914F6CDD1Dull + 7};
    if (!chance(&r, 60))
        return;
    sim_standby_t *sb = s->sb = calloc(1, sizeof(*sb));
    sb->r = r;
    sb->lossy = chance(&sb->r, 50);
    atomic_store(&sb->shared_rv, UINT64_MAX);
    for (int i = 0; i < SB_SHARDS; i++)
        kb_deltas_init(&sb->wait[i]);
    char dir[sizeof(s->dir)], text[sizeof(s->cfgtext)];
    memcpy(dir, s->dir, sizeof(dir));
    memcpy(text, s->cfgtext, sizeof(text));
    kb_config_t *cfg = s->cfg;
    s->cfg = NULL;
    snprintf(s->dir + strlen(s->dir), sizeof(s->dir) - strlen(s->dir), "/standby");
    if (mkdir(s->dir, 0700) != 0)
        fail("cannot make %s", s->dir);
    load_config(s);
    sb->cfg = s->cfg;
    s->cfg = cfg;
    memcpy(s->dir, dir, sizeof(dir));
    memcpy(s->cfgtext, text, sizeof(text));
    for (int i = 0; i < MAX_NS; i++)
        sb->refl[i].ns = s->refl[i].ns;
}

/* The new leader's blind windows (kb_informer_blind), as bridge/ha.c reads
 * them at each renew: each reaches into what the old leader may have
 * delivered unpublished (logged and counted there); their hull is what
 * sb_never_known lets through. Only the informer that took over knows it: a
 * restart forgets it, as the bridge's process does. */
static void sb_blind_poll(sim_t *s) {
    sim_standby_t *sb = s->sb;
    uint64_t lo, hi;
    if (!sb || !sb->took || !s->inf)
        return;
    if (sb->armed_life != s->life) { /* restarted: the Lease re-arms it (bridge/ha.c, kb_ha_rearm) */
        sb->armed_life = s->life;
        kb_informer_ha_shared(s->inf, &sb->shared_rv);
        kb_informer_ha_took(s->inf, sb->mark.trusted, sb->took_rv, false);
    }
    if (!kb_informer_blind(s->inf, &lo, &hi))
        return;
    if (!sb->blind || lo < sb->blind_lo)
        sb->blind_lo = lo;
    if (!sb->blind || hi > sb->blind_hi)
        sb->blind_hi = hi;
    if (!sb->blind) {
        sb->blind_takeovers++;
        TRACE("  blind takeover: (%llu, %llu] listed, not watched, above the mark\n", (unsigned long long)lo,
              (unsigned long long)hi);
    }
    sb->blind = true;
}

/* A new leader's informer, started again after the takeover: like the
 * bridge's pipelines (kb_pipeline_new), it reads the role's RV from its start. */
static void sb_attach(sim_t *s, kb_informer_t *inf) {
    if (s->sb && s->sb->took)
        kb_informer_ha_shared(inf, &s->sb->shared_rv);
}

/* The leader's watch loses the change at hand (a lossy leader, before the takeover)? */
static bool sb_loses(sim_t *s, const mev_t *e) {
    sb_blind_poll(s); /* also after the takeover: the new leader's ha thread renews meanwhile */
    if (!s->sb || !s->sb->lossy || s->sb->took || s->sb->swapped || !chance(&s->sb->r, 4))
        return false;
    s->sb->lost++;
    if (e->type == KB_EV_DELETED)
        s->sb->lost_delete[e->uid % 4096] = true;
    return true;
}

/* The leader's checkpoint: it publishes what its sinks acknowledged (now and
 * then someone else writes the Lease: a mark no change has reached). */
static void sb_publish(sim_t *s) {
    sim_standby_t *sb = s->sb;
    sb_blind_poll(s); /* a new leader's checkpoint: its last renew before a stop reads it too */
    if (!sb || sb->took)
        return;
    if (chance(&sb->r, 10)) {
        sb->mark.rv = s->srv.rv + 100000;
        sb->forged++;
        TRACE("  lease: a forged mark %llu\n", (unsigned long long)sb->mark.rv);
        return;
    }
    sb->mark.rv = kb_hatable_published(kb_informer_ledger(s->inf));
    TRACE("  lease: the leader publishes %llu\n", (unsigned long long)sb->mark.rv);
}

/* The consumer of every running sink gets ev, outside the ledger (a key owed
 * by a new leader: the ledger counts its change as done). */
static void sb_redeliver(sim_t *s, kb_event_t *ev) {
    int ns = ev->ns[0] - 'a', name = atoi(ev->name + 1);
    for (int i = 0; i < s->n_sinks; i++)
        clog_push(&s->sinks[i].log, (cmsg_t){ev->type, ev->final_state_unknown, ns, name,
                                             (unsigned)atoi(ev->uid + 1), ev->rv_num, ev->seq, msg_gen(ev), s->life,
                                             0});
    s->sb->owed_paid++;
    TRACE("  owed: %s %s uid %s @%s\n", kb_event_type_name(ev->type), ev->key, ev->uid, ev->rv);
}

/* One standby worker's turn on shard sh: skip what the mark covers (owing
 * the key), wait at the first change it does not. */
static void sb_pop(sim_t *s, size_t sh) {
    sim_standby_t *sb = s->sb;
    kb_deltas_t *d = &sb->wait[sh];
    if (sb->wait_at[sh] >= d->n) {
        kb_deltas_fini(d);
        kb_deltas_init(d);
        sb->wait_at[sh] = 0;
        if (kb_deltafifo_pop(kb_informer_fifo(sb->inf, sh), d, 0) != KB_OK)
            return;
    }
    kb_ledger_t *l = kb_informer_ledger(sb->inf);
    for (; sb->wait_at[sh] < d->n; sb->wait_at[sh]++) {
        kb_event_t *ev = d->ev[sb->wait_at[sh]];
        uint64_t tracked = kb_ledger_tracked_rv(l);
        if (!kb_hamark_skips(&sb->mark, kb_hatable_need(ev, tracked), tracked, false))
            return; /* waits: for a newer mark, or for leadership */
        TRACE("  standby skips seq %llu %s %s uid %s @%s%s (mark %llu)\n", (unsigned long long)ev->seq,
              kb_event_type_name(ev->type), ev->key, ev->uid, ev->rv, ev->final_state_unknown ? " fsu" : "",
              (unsigned long long)sb->mark.trusted);
        kb_owed_add(&sb->owed, ev);
        kb_ledger_routed(l, ev->seq, NULL, 0);
        if (ev->type == KB_EV_DELETED)
            sb->skipped_uid[(unsigned)atoi(ev->uid + 1) % 4096] = true;
        sb->skipped++;
    }
}

/* The standby's process ends (crash or clean): what it owed is forgotten with it. */
static void sb_restart(sim_t *s) {
    sim_standby_t *sb = s->sb;
    bool crash = chance(&sb->r, 30);
    TRACE("STANDBY %s\n", crash ? "CRASH" : "RESTART");
    for (int i = 0; i < SB_SHARDS; i++) {
        kb_deltas_fini(&sb->wait[i]);
        kb_deltas_init(&sb->wait[i]);
        sb->wait_at[i] = 0;
    }
    if (crash)
        kb_ingest_crash(sb->inf);
    else
        kb_informer_destroy(sb->inf);
    kb_owed_fini(&sb->owed);
    sb->mark.trusted = 0; /* memory */
    sb->restarts++;
    sb_open(s);
}

/* The leader crashes; the standby takes the Lease and leads. */
static void sb_takeover(sim_t *s) {
    sim_standby_t *sb = s->sb;
    if (!sb->lossy && chance(&sb->r, 50)) {
        /* The leader's last renew, the standby's workers catch up with it, and
         * a rolling update restarts the standby: what it owed is gone. */
        checkpoint(s);
        for (size_t sh = 0; sh < kb_informer_shards(sb->inf); sh++)
            for (int n = 0; n < 8; n++)
                sb_pop(s, sh);
        sb_restart(s);
    }
    TRACE("TAKEOVER (the leader crashes)\n");
    kb_gone(s, true);
    for (int i = 0; i < MAX_NS; i++)
        refl_reset(&s->refl[i]);
    kb_config_free(s->cfg);
    s->cfg = NULL;
    sb_swap(s); /* s->inf: the new leader */
    atomic_store(&sb->shared_rv, s->srv.rv); /* bridge/ha.c: the Lease's RV once it is ours */
    sb->took = true;
    sb->took_life = s->life;
    kb_ledger_t *l = kb_informer_ledger(s->inf);
    if (kb_hamark_takeover(&sb->mark, kb_ledger_tracked_rv(l)))
        sb->refused++;
    sb->took_rv = s->srv.rv;
    sb->armed_life = s->life;
    kb_informer_ha_took(s->inf, sb->mark.trusted, sb->took_rv, true); /* bridge/ha.c: kb_ha_took */
    sb_blind_poll(s);
    size_t n;
    kb_ledger_sink_t *sk = kb_ledger_sinks(l, &n);
    for (size_t j = 0; j < n; j++)
        for (int i = 0; i < s->n_sinks; i++)
            if (sk[j].index == s->sinks[i].lidx && s->life < 64)
                s->sinks[i].persisted_wm = s->sinks[i].wm_at_start[s->life] = sk[j].watermark;
    free(sk);
    kb_informer_stats_t st;
    kb_informer_stats(s->inf, &st);
    if (s->life < 64) {
        s->acked_at_start[s->life] = st.ack_seq;
        s->tail_end[s->life] = st.seq;
    }
    /* What is owed goes out again (the workers go on meanwhile in the bridge:
     * under the rule the order does not matter) … */
    size_t pos = 0, len;
    const char *key;
    kb_event_t *deleted;
    while (kb_owed_next(&sb->owed, &pos, &key, &len, &deleted)) {
        kb_event_t *ev = deleted ? deleted : kb_informer_get(s->inf, key, len);
        if (ev)
            sb_redeliver(s, ev);
        kb_event_unref(ev);
    }
    kb_owed_fini(&sb->owed);
    /* … and what waited at the gate is delivered: the mark no longer holds it. */
    for (size_t sh = 0; sh < SB_SHARDS; sh++) {
        for (; sb->wait_at[sh] < sb->wait[sh].n; sb->wait_at[sh]++)
            deliver(s, sb->wait[sh].ev[sb->wait_at[sh]]);
        kb_deltas_fini(&sb->wait[sh]);
        kb_deltas_init(&sb->wait[sh]);
    }
}

/* One step of the standby: its watch, its workers, a restart, or the takeover. */
static void sb_step(sim_t *s) {
    sim_standby_t *sb = s->sb;
    unsigned w = rnd(&sb->r, 1000);
    if (w < 5) {
        sb_takeover(s);
        return;
    }
    if (w < 45 && !sb->lossy) {
        sb_restart(s);
        return;
    }
    sb_swap(s);
    if (w < 550)
        refl_step(s, (int)rnd(&sb->r, (unsigned)s->n_refl), false);
    sb_swap(s);
    if (w >= 550)
        sb_pop(s, rnd(&sb->r, (unsigned)kb_informer_shards(sb->inf)));
}

/* Is this the new leader's message, and the rule skipped it? (not checked for an exact repeat) */
static bool sb_after_takeover(const sim_t *s, const cmsg_t *m) {
    return s->sb && s->sb->took && m->life >= s->sb->took_life;
}

/* An object the old leader delivered that a newer one of its key replaced,
 * sent by the new leader, which never saw it (created and deleted before the
 * standby listed): a consumer by key is right; one by uid keeps it
 * (docs/cluster.md, section 9). Check 3 passes over it. */
static bool sb_superseded(const sim_t *s, const msink_t *k, size_t i) {
    const cmsg_t *m = &k->log.v[i];
    if (!s->sb || !s->sb->took || m->life >= s->sb->took_life)
        return false;
    for (size_t j = i + 1; j < k->log.n; j++)
        if (k->log.v[j].life >= s->sb->took_life && k->log.v[j].ns == m->ns && k->log.v[j].name == m->name &&
            k->log.v[j].uid != m->uid && k->log.v[j].rv > m->rv)
            return true;
    return false;
}

/* The known gap (issue 24; docs/cluster.md section 9): an object the old
 * leader delivered, created and deleted while the standby only listed (its
 * relist's blind window, kb_informer_blind), deleted above the mark the new
 * leader trusted: no replica knows it, the new leader sends no DELETED and the
 * consumer keeps it. Let through only for a takeover that was blind (logged
 * and counted there), a uid deleted inside that window, whose DELETED the
 * standby did not skip (that one is owed) and the new leader did not send;
 * counted. Also let through: a DELETED the old leader's *watch* lost (its
 * drift audit repairs that, if it runs before the leader dies) of an object
 * the new leader never knew either — two faults, no replica has it; counted
 * apart (lost_unknown). */
static bool sb_never_known(sim_t *s, const msink_t *k, unsigned uid) {
    sb_blind_poll(s);
    const sim_standby_t *sb = s->sb;
    if (!sb || !sb->took || sb->skipped_uid[uid % 4096])
        return false;
    uint64_t gone = 0;
    for (size_t j = 0; j < s->srv.n_hist; j++)
        if (s->srv.hist[j].uid == uid && s->srv.hist[j].type == KB_EV_DELETED)
            gone = s->srv.hist[j].rv;
    bool lost = sb->lost_delete[uid % 4096]; /* and the old leader's audit did not run before it died */
    if (!lost && (!sb->blind || gone <= sb->blind_lo || gone > sb->blind_hi))
        return false;
    for (size_t j = 0; j < k->log.n; j++)
        if (k->log.v[j].life >= sb->took_life && k->log.v[j].uid == uid && k->log.v[j].type == KB_EV_DELETED)
            return false;
    return true;
}

static bool sb_ghost(sim_t *s, const msink_t *k, const cview_t *v, bool stale_live) {
    if (!stale_live || !sb_never_known(s, k, v->uid))
        return false;
    if (s->sb->lost_delete[v->uid % 4096])
        s->sb->lost_unknown++;
    s->sb->ghosts++;
    return true;
}

static void sb_free(sim_t *s) {
    sim_standby_t *sb = s->sb;
    if (!sb)
        return;
    for (int i = 0; i < SB_SHARDS; i++)
        kb_deltas_fini(&sb->wait[i]);
    kb_owed_fini(&sb->owed);
    if (sb->inf)
        kb_informer_destroy(sb->inf);
    kb_config_free(sb->cfg);
    for (int i = 0; i < MAX_NS; i++) {
        refl_reset(&sb->refl[i]);
        kb_buf_fini(&sb->refl[i].pending);
    }
    free(sb);
    s->sb = NULL;
}

/* ---- the reflector, as the real one behaves, over the model server ---------- */

static void start_list(sim_t *s, refl_t *f, int idx) {
    refl_reset(f);
    f->snap = calloc(MAX_NS * NAMES + 1, sizeof(*f->snap));
    for (int ns = 0; ns < s->srv.n_ns; ns++)
        for (int n = 0; n < NAMES; n++) {
            mobj_t *o = &s->srv.obj[ns][n];
            if (o->alive && in_scope(f, ns))
                f->snap[f->n_snap++] = (mev_t){KB_EV_ADDED, ns, n, o->uid, o->rv, o->gen};
        }
    f->list_rv = s->srv.rv;
    s->lists++;
    if (!f->page_next && chance(&s->r, (unsigned)s->stream_pct)) {
        f->live_pages = false; /* the watch cache sends one consistent state */
        f->st = R_STREAMING;
        kb_ingest_stream_begin(s->inf, (size_t)idx);
        TRACE("  refl %d: streamed list at rv %llu (%zu items)\n", idx, (unsigned long long)f->list_rv, f->n_snap);
        return;
    }
    f->page_next = false;
    f->live_pages = chance(&s->r, 25);
    f->st = R_LISTING;
    kb_ingest_list_begin(s->inf, (size_t)idx);
    TRACE("  refl %d: list at rv %llu (%zu items)\n", idx, (unsigned long long)f->list_rv, f->n_snap);
}

static void list_page(sim_t *s, refl_t *f, int idx) {
    if (f->at_snap > 0 && s->srv.compacted > f->list_rv) { /* the continue token expired: start again */
        s->gones++;
        start_list(s, f, idx);
        return;
    }
    size_t n = 1 + rnd(&s->r, 3);
    if (f->at_snap + n > f->n_snap)
        n = f->n_snap - f->at_snap;
    bool last = f->at_snap + n == f->n_snap;
    kb_buf_t b = KB_BUF_INIT, cont = KB_BUF_INIT;
    kb_buf_appendf(&b, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"%llu\"",
                   (unsigned long long)f->list_rv);
    if (!last)
        kb_buf_appendf(&b, ",\"continue\":\"c%zu\"", f->at_snap + n);
    kb_buf_append_str(&b, "},\"items\":[");
    for (size_t i = 0; i < n; i++) {
        mev_t *e = &f->snap[f->at_snap + i];
        if (f->live_pages && f->at_snap > 0) { /* a page of today's state under the first page's RV */
            mobj_t *o = &s->srv.obj[e->ns][e->name];
            if (o->alive)
                *e = (mev_t){KB_EV_ADDED, e->ns, e->name, o->uid, o->rv, o->gen};
        }
        if (i)
            kb_buf_append_char(&b, ',');
        obj_json(&b, e->ns, e->name, e->uid, e->rv, e->gen);
    }
    kb_buf_append_str(&b, "]}");
    f->at_snap += n;
    kb_err_t err = kb_ingest_list_page(s->inf, (size_t)idx, b.data, b.len, &cont);
    if (err != KB_OK)
        fail("list page: %s", kb_err_str(err));
    if (last && err == KB_OK) {
        err = kb_ingest_list_end(s->inf, (size_t)idx);
        if (err != KB_OK)
            fail("list end: %s", kb_err_str(err));
        f->st = R_WATCH_OPEN;
        f->old_epoch = false;
    }
    kb_buf_fini(&b);
    kb_buf_fini(&cont);
}

/* Watch from the first change after rv on: the cursor skips what is older. */
static void watch_from(sim_t *s, refl_t *f, uint64_t from) {
    f->from = from;
    f->cursor = 0;
    while (f->cursor < s->srv.n_hist && s->srv.hist[f->cursor].rv <= from)
        f->cursor++;
    f->st = R_WATCHING;
}

static void watch_open(sim_t *s, refl_t *f, int idx) {
    char rv[KB_RV_MAX];
    kb_ingest_watch_begin(s->inf, (size_t)idx, rv, sizeof(rv));
    kb_buf_reset(&f->pending);
    if (!rv[0]) {
        start_list(s, f, idx);
        return;
    }
    uint64_t from = strtoull(rv, NULL, 10);
    if (f->old_epoch) { /* a resume point of the history the server went back from */
        TRACE("  refl %d: watch from %s: too large (restored)\n", idx, rv);
        start_list(s, f, idx);
        return;
    }
    if (from < s->srv.compacted) { /* 410 Gone when the watch opens: relist */
        s->gones++;
        TRACE("  refl %d: watch from %s: 410\n", idx, rv);
        start_list(s, f, idx);
        return;
    }
    watch_from(s, f, from);
    TRACE("  refl %d: watch from %s\n", idx, rv);
}

/* Hand bytes to the informer, cut at random places (a chunk ends anywhere). */
static kb_err_t feed(sim_t *s, refl_t *f, int idx, bool all) {
    kb_err_t err = KB_OK;
    while (f->pending.len && err == KB_OK) {
        size_t n = all ? f->pending.len : 1 + rnd(&s->r, (unsigned)f->pending.len);
        err = kb_ingest_watch_bytes(s->inf, (size_t)idx, f->pending.data, n);
        kb_buf_consume(&f->pending, n);
        if (!all)
            break;
    }
    return err;
}

/* A streamed list ended before it was complete: list again, streamed or paged. */
static void stream_lost(sim_t *s, refl_t *f, int idx, bool gone) {
    kb_buf_reset(&f->pending);
    if (kb_ingest_stream_end(s->inf, (size_t)idx)) {
        f->st = R_WATCH_OPEN; /* it was complete after all: resume from its RV */
        f->old_epoch = false;
        return;
    }
    f->page_next = gone;
    start_list(s, f, idx);
}

/* One step of a streamed list: a few initial ADDED events of the snapshot,
 * after the last of them the initial-events-end BOOKMARK at the list's RV,
 * and the same stream goes on as a watch. The stream may drop anywhere, or
 * send a 410 ERROR before the list is complete. */
static void stream_step(sim_t *s, refl_t *f, int idx, bool quiet) {
    if (!quiet && chance(&s->r, 4)) {
        TRACE("  refl %d: streamed list dropped at item %zu\n", idx, f->at_snap);
        stream_lost(s, f, idx, false);
        return;
    }
    if (!quiet && chance(&s->r, 2)) {
        kb_buf_append_str(&f->pending, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
                                       "\"status\":\"Failure\",\"reason\":\"Expired\",\"code\":410}}\n");
    } else {
        for (size_t n = 1 + rnd(&s->r, 3); n && f->at_snap < f->n_snap; n--, f->at_snap++) {
            mev_t *e = &f->snap[f->at_snap];
            kb_buf_append_str(&f->pending, "{\"type\":\"ADDED\",\"object\":");
            obj_json(&f->pending, e->ns, e->name, e->uid, e->rv, e->gen);
            kb_buf_append_str(&f->pending, "}\n");
        }
        if (f->at_snap == f->n_snap && !f->end_sent) {
            f->end_sent = true;
            kb_buf_appendf(&f->pending, "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\","
                                        "\"metadata\":{\"resourceVersion\":\"%llu\",\"annotations\":"
                                        "{\"k8s.io/initial-events-end\":\"true\"}}}}\n",
                           (unsigned long long)f->list_rv);
        }
    }
    kb_err_t err = feed(s, f, idx, quiet);
    if (err != KB_OK) {
        if (err == KB_ERR_GONE)
            s->gones++;
        stream_lost(s, f, idx, err == KB_ERR_GONE);
    } else if (kb_ingest_stream_listed(s->inf, (size_t)idx)) {
        TRACE("  refl %d: streamed list complete at rv %llu\n", idx, (unsigned long long)f->list_rv);
        f->old_epoch = false;
        watch_from(s, f, f->list_rv); /* the rest of the bytes, if any, are changes */
    }
}

static void watch_step(sim_t *s, refl_t *f, int idx, bool quiet) {
    if (!quiet && chance(&s->r, 4)) { /* the connection drops: whatever was not read is lost */
        kb_buf_reset(&f->pending);
        f->st = R_WATCH_OPEN;
        return;
    }
    if (!quiet && f->cursor < s->srv.n_hist && s->srv.hist[f->cursor].rv <= s->srv.compacted && chance(&s->r, 50)) {
        kb_buf_append_str(&f->pending, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
                                       "\"status\":\"Failure\",\"reason\":\"Expired\",\"code\":410}}\n");
    } else {
        unsigned n = 1 + rnd(&s->r, 4);
        for (; n && f->cursor < s->srv.n_hist; f->cursor++) {
            mev_t *e = &s->srv.hist[f->cursor];
            if (!in_scope(f, e->ns) || sb_loses(s, e))
                continue;
            static const char *const tn[] = {"ADDED", "MODIFIED", "DELETED"};
            kb_buf_appendf(&f->pending, "{\"type\":\"%s\",\"object\":", tn[e->type]);
            obj_json(&f->pending, e->ns, e->name, e->uid, e->rv, e->gen);
            kb_buf_append_str(&f->pending, "}\n");
            n--;
        }
        /* A bookmark: where the stream is; now and then an older one (a lagging
         * server behind a load balancer), which must not move anything back. */
        uint64_t at = f->cursor == s->srv.n_hist ? s->srv.rv : 0;
        if (!quiet && !at && f->cursor > 0 && chance(&s->r, 5))
            at = f->from > 3 ? f->from - rnd(&s->r, 3) : 0;
        if (at && (f->cursor < s->srv.n_hist || chance(&s->r, quiet ? 100 : 30)))
            kb_buf_appendf(&f->pending, "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\","
                                        "\"metadata\":{\"resourceVersion\":\"%llu\"}}}\n",
                           (unsigned long long)at);
    }
    kb_err_t err = feed(s, f, idx, quiet);
    if (err == KB_ERR_GONE) {
        s->gones++;
        start_list(s, f, idx);
    } else if (err != KB_OK) {
        f->st = R_WATCH_OPEN; /* re-watch from the last good RV */
    }
}

/* An etcd backup, or its restore: the objects and the RV go back to the
 * backup's, the history after it is gone, and every stream ends (the API
 * servers restart). uids keep counting, so a name created again gets a new
 * one — at an RV below the one its old incarnation had. A scope's watch from
 * a resume point of the old history is refused until it lists again (the
 * server answers ResourceVersionTooLarge while its RV is below; once the new
 * history passes it nothing could tell, which is why etcd offers
 * --bump-revision: see docs/guarantees.md). */
static void srv_backup_or_restore(sim_t *s) {
    server_t *v = &s->srv;
    if (!v->has_snap || chance(&s->r, 40)) {
        memcpy(v->snap_obj, v->obj, sizeof(v->obj));
        v->snap_rv = v->rv;
        v->has_snap = true;
        TRACE("  server: backup at %llu\n", (unsigned long long)v->rv);
        return;
    }
    if (v->rv == v->snap_rv)
        return;
    TRACE("  server: restored from %llu to the backup at %llu\n", (unsigned long long)v->rv,
          (unsigned long long)v->snap_rv);
    memcpy(v->obj, v->snap_obj, sizeof(v->obj));
    v->rv = v->compacted = v->snap_rv;
    while (v->n_hist && v->hist[v->n_hist - 1].rv > v->rv)
        v->n_hist--;
    s->restored++;
    for (int i = 0; i < s->n_refl; i++) {
        refl_t *f = &s->refl[i];
        if (f->st == R_STREAMING)
            stream_lost(s, f, i, false);
        else if (f->st == R_LISTING)
            start_list(s, f, i);
        else if (f->st == R_WATCHING)
            f->st = R_WATCH_OPEN;
        kb_buf_reset(&f->pending);
        f->old_epoch = true;
    }
}

static void refl_step(sim_t *s, int idx, bool quiet) {
    refl_t *f = &s->refl[idx];
    switch (f->st) {
    case R_NEED_LIST: start_list(s, f, idx); break;
    case R_LISTING: list_page(s, f, idx); break;
    case R_STREAMING: stream_step(s, f, idx, quiet); break;
    case R_WATCH_OPEN: watch_open(s, f, idx); break;
    case R_WATCHING: watch_step(s, f, idx, quiet); break;
    }
}

/* ---- the checks ------------------------------------------------------------- */


static void check_sink(sim_t *s, int si) {
    msink_t *k = &s->sinks[si];
    if (verbose)
        for (size_t i = 0; i < k->log.n; i++)
            printf("  sink %d log %zu: life %d seq %llu %s %s/n%d uid %u @%llu%s\n", si, i, k->log.v[i].life,
                   (unsigned long long)k->log.v[i].seq, kb_event_type_name(k->log.v[i].type),
                   ns_names[k->log.v[i].ns], k->log.v[i].name, k->log.v[i].uid, (unsigned long long)k->log.v[i].rv,
                   k->log.v[i].fsu ? " fsu" : "");
    /* A history the server never went back in is never taken for a restore
     * (the last lifetime's count: a list of a scope with no resume point of
     * its own compares with state_dir's newest). */
    kb_informer_stats_t ist;
    kb_informer_stats(s->inf, &ist);
    if (si == 0 && !s->restored && ist.rv_regressions)
        fail("kbridge saw %llu restore(s) of a server that was never restored",
             (unsigned long long)ist.rv_regressions);
    cview_t view[MAX_NS][NAMES];
    memset(view, 0, sizeof(view));
    for (size_t i = 0; i < k->log.n && !failed; i++) {
        cmsg_t *m = &k->log.v[i];
        cview_t *v = &view[m->ns][m->name];
        int rank = m->type == KB_EV_DELETED ? 1 : 0;
        /* After a restore RVs go back, so the rule cannot order the two
         * histories: such histories (compaction none only, where a repeat
         * is exact and in order) take each key's last message. */
        /* The rule's one exception: an ADDED at the RV of the DELETED
         * finalStateUnknown last applied (an object the definition let go,
         * taken in again unchanged). */
        bool reenters = v->seen && m->rv == v->rv && v->fsu && m->type == KB_EV_ADDED;
        if (!v->seen || m->rv > v->rv || (m->rv == v->rv && rank > v->rank) || reenters || s->restored) {
            *v = (cview_t){true, m->rv, rank, m->type != KB_EV_DELETED, m->fsu, m->uid, m->gen};
            continue;
        }
        /* Skipped by the rule (or, below, the same state again): it must
         * repeat a message delivered in an earlier lifetime — same key, uid, RV, DELETED-ness and seq (with "latest" a
         * key's redeliveries merge, so an ADDED may repeat a MODIFIED) — of a
         * change past the checkpoint its lifetime started from. */
        bool repeat = false;
        for (size_t j = 0; j < i && !repeat; j++) {
            cmsg_t *o = &k->log.v[j];
            bool same_type = s->latest ? (o->type == KB_EV_DELETED) == (m->type == KB_EV_DELETED)
                                       : o->type == m->type && o->fsu == m->fsu;
            repeat = o->seq == m->seq && same_type && o->uid == m->uid && o->rv == m->rv && o->ns == m->ns &&
                     o->name == m->name && o->life < m->life;
        }
        /* With "latest", a change of the re-queued tail may have been merged
         * away before the crash (never sent): it comes behind newer changes of
         * its key, whose state already covers it, and the rule skips it. */
        bool stale_redelivery = s->latest && m->life < 64 && m->seq > k->wm_at_start[m->life] &&
                                m->seq <= s->tail_end[m->life];
        /* A DELETED with the identity of the one applied (same uid and RV:
         * the same CloudEvents id): with "latest", an object taken in again
         * whose ADDED merged into its next DELETED before it was sent. */
        bool same_delete = m->type == KB_EV_DELETED && v->rank && v->uid == m->uid;
        /* The same object at the RV applied (not a DELETED over a DELETED):
         * the rule applies it — a repeat changes nothing, and a new seq is the
         * object sent again in a changed definition's shape (a reshape). */
        bool same_state = m->rv == v->rv && !rank && !v->rank && v->uid == m->uid;
        if (same_state)
            *v = (cview_t){true, m->rv, rank, true, m->fsu, m->uid, m->gen};
        if (!same_state && !repeat && !stale_redelivery && !same_delete && !sb_after_takeover(s, m))
            fail("sink %d message %zu: %s %s/n%d uid %u @%llu (seq %llu) goes back: the key had @%llu%s", si, i,
                 kb_event_type_name(m->type), ns_names[m->ns], m->name, m->uid, (unsigned long long)m->rv,
                 (unsigned long long)m->seq, (unsigned long long)v->rv, v->rank ? " DELETED" : "");
        else if (repeat && m->life < 64 && m->seq <= k->wm_at_start[m->life] && !sb_after_takeover(s, m))
            fail("sink %d message %zu: seq %llu repeated although this sink's watermark (seq %llu) had passed it",
                 si, i, (unsigned long long)m->seq, (unsigned long long)k->wm_at_start[m->life]);
    }
    /* The view converges to the server's state under the final definition. */
    for (int ns = 0; ns < s->srv.n_ns && !failed; ns++)
        for (int n = 0; n < NAMES && !failed; n++) {
            mobj_t *o = &s->srv.obj[ns][n];
            cview_t *v = &view[ns][n];
            bool live = v->seen && v->alive, want = o->alive && def_covers(s, ns);
            if ((want != live || (want && (v->uid != o->uid || v->rv != o->rv))) &&
                !sb_ghost(s, k, v, live && !want))
                fail("sink %d: %s/n%d is %s uid %u @%llu on the server%s but %s uid %u @%llu for the consumer", si,
                     ns_names[ns], n, o->alive ? "live" : "gone", o->uid, (unsigned long long)o->rv,
                     o->alive && !want ? " (outside the definition)" : "", live ? "live" : "gone", v->uid,
                     (unsigned long long)v->rv);
            /* ... in the final definition's shape (a reshape reached it). */
            else if (want && v->gen != (s->drop_gen ? NO_GEN : o->gen))
                fail("sink %d: %s/n%d @%llu is in its old shape for the consumer (spec.gen %s; the definition %s "
                     "it)", si, ns_names[ns], n, (unsigned long long)o->rv, v->gen == NO_GEN ? "dropped" : "kept",
                     s->drop_gen ? "drops" : "keeps");
        }
    /* Every object the consumer saw that is gone, or outside the final
     * definition, got its DELETED. */
    for (size_t i = 0; i < k->log.n && !failed; i++) {
        cmsg_t *m = &k->log.v[i];
        if (m->type == KB_EV_DELETED)
            continue;
        mobj_t *o = &s->srv.obj[m->ns][m->name];
        if (o->alive && o->uid == m->uid && def_covers(s, m->ns))
            continue;
        bool deleted = false;
        for (size_t j = i + 1; j < k->log.n && !deleted; j++)
            deleted = k->log.v[j].type == KB_EV_DELETED && k->log.v[j].uid == m->uid &&
                      k->log.v[j].ns == m->ns && k->log.v[j].name == m->name;
        if (!deleted && !sb_superseded(s, k, i) && !sb_never_known(s, k, m->uid))
            fail("sink %d: %s/n%d uid %u was delivered (%s @%llu) but its delete never was", si, ns_names[m->ns],
                 m->name, m->uid, kb_event_type_name(m->type), (unsigned long long)m->rv);
    }
}

/* ---- one history ---------------------------------------------------------- */

static bool caught_up(sim_t *s) {
    for (int i = 0; i < s->n_refl; i++) {
        refl_t *f = &s->refl[i];
        if (f->st != R_WATCHING || f->cursor < s->srv.n_hist || f->pending.len)
            return false;
    }
    for (size_t sh = 0; sh < kb_informer_shards(s->inf); sh++) {
        kb_deltafifo_stats_t fs;
        kb_deltafifo_stats(kb_informer_fifo(s->inf, sh), &fs);
        if (fs.keys)
            return false;
    }
    for (int i = 0; i < s->n_sinks; i++)
        if (s->sinks[i].n || s->sinks[i].stopped)
            return false;
    return true;
}

static void quiesce(sim_t *s) {
    for (int i = 0; i < s->n_sinks; i++)
        s->sinks[i].refuse_pct = 0;
    for (int round = 0; round < 2000 && !failed && !caught_up(s); round++) {
        s->clock++;
        for (int i = 0; i < s->n_refl; i++)
            refl_step(s, i, true);
        for (size_t sh = 0; sh < kb_informer_shards(s->inf); sh++)
            pop_shard(s, sh);
        for (int i = 0; i < s->n_sinks; i++)
            sink_acks(s, &s->sinks[i], true);
    }
    bool held = false;
    for (int i = 0; i < s->n_sinks; i++) {
        held |= s->sinks[i].stopped || s->sinks[i].missed;
        s->sinks[i].missed = false;
    }
    if (!failed && held) { /* a stopped sink's changes wait in the journal until it is tried again */
        clean_stop(s);
        kb_open(s);
        quiesce(s);
        return;
    }
    if (!failed && !caught_up(s))
        fail("kbridge never caught up with the server");
}

static def_t def_get(const sim_t *s) {
    def_t d = {.n = s->n_def_ns, .drop_gen = s->drop_gen};
    memcpy(d.ns, s->def_ns, sizeof(d.ns));
    return d;
}

static void def_set(sim_t *s, const def_t *d) {
    memcpy(s->def_ns, d->ns, sizeof(s->def_ns));
    s->n_def_ns = d->n;
    s->drop_gen = d->drop_gen;
}

/* The informer's definition: cluster-wide, or some namespaces in some order
 * (another order of the same set is the same definition: it resumes). */
static def_t pick_definition(const sim_t *s, rng_t *r) {
    def_t d = {.n = 0, .drop_gen = chance(r, 30)};
    if (chance(r, 25))
        return d;
    for (int ns = 0; ns < s->srv.n_ns; ns++)
        if (chance(r, 60))
            d.ns[d.n++] = ns;
    if (!d.n)
        d.ns[d.n++] = (int)rnd(r, (unsigned)s->srv.n_ns);
    for (int i = d.n - 1; i > 0; i--) {
        int j = (int)rnd(r, (unsigned)i + 1), t = d.ns[i];
        d.ns[i] = d.ns[j];
        d.ns[j] = t;
    }
    return d;
}

/* The config text of the current definition, loaded (exits on an error: the sim wrote it). */
static kb_config_t *config_of(sim_t *s) {
    char nsl[64] = "";
    for (int i = 0; i < s->n_def_ns; i++)
        snprintf(nsl + strlen(nsl), sizeof(nsl) - strlen(nsl), "%s\"%s\"", i ? ", " : "", ns_names[s->def_ns[i]]);
    snprintf(s->cfgtext, sizeof(s->cfgtext),
             "cluster = { name = \"sim\"; server = \"http://127.0.0.1:9\"; };\n"
             "%s%s%s"
             "informers = ( { name = \"pods\"; version = \"v1\"; resource = \"pods\"; shards = %u; "
             "compaction = \"%s\"; queue_bytes = 1073741824; %s%s%s%s } );\n"
             "sinks = ( { name = \"out\"; type = \"file\"; path = \"/dev/null\"; } );\n"
             "routes = ( { informer = \"pods\"; sink = \"out\"; } );\n",
             s->memory ? "" : "state_dir = \"", s->memory ? "" : s->dir, s->memory ? "" : "\";\n", s->shards,
             s->latest ? "latest" : "none", s->n_def_ns ? "namespaces = [" : "", nsl, s->n_def_ns ? "];" : "",
             s->drop_gen ? " drop_fields = [ \"spec.gen\" ];" : "");
    char err[512];
    kb_config_t *cfg = kb_config_load_string(s->cfgtext, "sim.cfg", err, sizeof(err));
    if (!cfg) {
        fprintf(stderr, "kb_sim: config: %s\n", err);
        exit(2);
    }
    return cfg;
}

/* The config of the current definition (one reflector per namespace, in
 * config order, or one cluster-wide), loaded; the reflectors follow it. */
static void load_config(sim_t *s) {
    kb_config_free(s->cfg);
    s->cfg = config_of(s);
    s->n_refl = s->n_def_ns ? s->n_def_ns : 1;
    for (int i = 0; i < s->n_refl; i++)
        s->refl[i].ns = s->n_def_ns ? s->def_ns[i] : -1;
}

/* The operator restarts kbridge with another definition on the same
 * state_dir (after kb_gone: no informer is open). A reflector's scope may now
 * be another's: each new one counts as restored-since-listed if any old one
 * was (the server refuses a resume point of the old history to any scope). */
static void redefine_to(sim_t *s, const def_t *d) {
    bool old_epoch = false;
    for (int i = 0; i < s->n_refl; i++)
        old_epoch |= s->refl[i].old_epoch;
    def_set(s, d);
    load_config(s);
    for (int i = 0; i < MAX_NS; i++)
        s->refl[i].old_epoch = old_epoch;
    if (verbose) {
        printf("REDEFINE: namespaces");
        for (int i = 0; i < s->n_def_ns; i++)
            printf(" %s", ns_names[s->def_ns[i]]);
        printf("%s%s\n", s->n_def_ns ? "" : " (all)", s->drop_gen ? ", drop_fields spec.gen" : "");
    }
}

static void redefine(sim_t *s) {
    def_t d = pick_definition(s, &s->r);
    redefine_to(s, &d);
    s->redefined++;
    ops_file_settled(s); /* the operator's file says so now */
}

static void configure(sim_t *s) {
    s->latest = chance(&s->r, 50);
    s->window = s->latest && chance(&s->r, 50) ? 1 + (int64_t)rnd(&s->r, 20) : 0;
    static const int stream_pcts[] = {0, 50, 100}; /* list_mode paged, a mix (auto falling back), stream */
    s->stream_pct = stream_pcts[rnd(&s->r, 3)];
    bool two = chance(&s->r, 30);
    s->srv.n_ns = 2;
    s->srv.rv = 1; /* etcd's first revision: no list is ever at "0" */
    s->n_sinks = 1 + (int)rnd(&s->r, MAX_SINKS);
    for (int i = 0; i < s->n_sinks; i++) {
        s->sinks[i].ack_pct = 10 + rnd(&s->r, 90);
        s->sinks[i].refuse_pct = chance(&s->r, 20) ? 2 : 0;
    }
    s->memory = chance(&s->r, 20);
    s->restores = !s->latest && chance(&s->r, 40);
    for (int i = 0; i < s->n_sinks && s->memory; i++)
        s->sinks[i].refuse_pct = 0; /* a stopped sink is tried again by a restart */
    s->shards = 1 + rnd(&s->r, 3);
    /* Also beside restores: a restart with another definition lists every
     * scope with no resume point to compare with, and a crash's tail holds the
     * old history's deletes (seed 1082 lost a re-created name to such a grave). */
    s->redefines = !s->memory && chance(&s->r, 40);
    if (s->redefines) {
        s->srv.n_ns = MAX_NS; /* room for sets to change, and for one no set lists */
        def_t d = pick_definition(s, &s->r);
        def_set(s, &d);
    } else {
        s->n_def_ns = two ? 2 : 0;
        s->def_ns[0] = 0;
        s->def_ns[1] = 1;
    }
    load_config(s);
}

/* ---- the operator and the informer itself (issue 24) ------------------------
 *
 * In the operator's histories a SIGHUP may also follow an edit of the
 * informer in the config file. What the reload does with it is decided by
 * kb_definition_reload (informer/definition.h), the function
 * kb_bridge_reload calls per informer; the sim carries out whatever it says:
 *   - a changed definition (another namespace set or order, drop_fields
 *     flipped): with state_dir the reload is refused — the running informer,
 *     its sinks and routes go on unchanged and the history goes on; the
 *     file's definition waits for the next start (crash, restart, SIGTERM),
 *     which lists and converges (a restart with a changed definition);
 *   - the informer removed: its pipeline drains, within the deadline or past
 *     it (what is not acknowledged stays below the watermark in its
 *     state_dir), and no informer runs while the server goes on (changes,
 *     compaction, restores);
 *   - added back by a later SIGHUP, with the file's definition or another: a
 *     new pipeline on its existing directory, which resumes at its checkpoint
 *     (its unacknowledged tail first) or, under another definition, lists and
 *     converges — kb_informer_new decides that, as in the bridge.
 * The consumer is checked, as everywhere, against the definition that runs at
 * the end. */

static bool def_same(const def_t *a, const def_t *b) {
    return a->n == b->n && a->drop_gen == b->drop_gen && !memcmp(a->ns, b->ns, (size_t)a->n * sizeof(a->ns[0]));
}

/* The file holds what runs (a start applied it). */
static void ops_file_settled(sim_t *s) {
    if (!s->ops)
        return;
    s->ops->file_def = def_get(s);
    s->ops->file_edited = false;
}

/* A start applies the config file as the operator left it. */
static void ops_file_applies(sim_t *s) {
    if (!s->ops || !s->ops->file_edited)
        return;
    def_t run = def_get(s);
    TRACE("the start applies the file's definition\n");
    redefine_to(s, &s->ops->file_def); /* loads the file's config, also when it is unchanged */
    s->redefined += !def_same(&run, &s->ops->file_def);
    s->ops->file_edited = false;
}

/* kb_bridge_reload's decision for the informer of a config whose definition
 * is d, beside the running informer (none while a reload removed it). */
static kb_def_reload_t ops_reload_decision(sim_t *s, const def_t *d) {
    def_t run = def_get(s);
    char text[sizeof(s->cfgtext)];
    memcpy(text, s->cfgtext, sizeof(text));
    def_set(s, d);
    kb_config_t *ncfg = config_of(s);
    def_set(s, &run);
    memcpy(s->cfgtext, text, sizeof(text));
    const kb_config_informer_t *running[1] = {s->inf ? kb_informer_conf(s->inf) : NULL};
    size_t keep = 0;
    char what[128] = "";
    kb_def_reload_t r = kb_definition_reload(running, s->inf ? 1 : 0, &ncfg->informers[0],
                                             ncfg->state_dir[0] != '\0', &keep, what, sizeof(what));
    static const char *const names[] = {"kept", "added", "rebuilt", "refused"};
    TRACE("SIGHUP: informer pods %s%s%s%s\n", names[r], what[0] ? " (" : "", what, what[0] ? " changed)" : "");
    kb_config_free(ncfg);
    return r;
}

/* SIGHUP removes the informer: its pipeline drains (past the deadline or not). */
static void ops_informer_remove(sim_t *s) {
    ops_settle(s);
    bool late = chance(&s->ops->r, 50);
    TRACE("SIGHUP: informer pods removed; its drain %s\n", late ? "passes the deadline" : "ends in time");
    if (late)
        ops_drain_past_deadline(s);
    else
        clean_stop(s);
    for (int i = 0; i < MAX_NS; i++) { /* its reflectors ended with it */
        refl_reset(&s->refl[i]);
        s->refl[i].st = R_WATCH_OPEN;
    }
    s->ops->gone = true;
    s->ops->hup_removed++;
}

/* SIGHUP puts the informer back (the file's definition, or another): when
 * the decision starts one, it opens its directory again. */
static void ops_informer_add(sim_t *s) {
    def_t want = s->ops->file_def;
    if (chance(&s->ops->r, 40))
        want = pick_definition(s, &s->ops->r);
    s->ops->file_def = want;
    s->ops->file_edited = true;
    kb_def_reload_t r = ops_reload_decision(s, &want);
    if (r != KB_DEF_RELOAD_ADD && r != KB_DEF_RELOAD_REBUILD)
        return; /* nothing started: the file waits for a start */
    def_t run = def_get(s);
    s->ops->added_redefined += !def_same(&run, &want);
    s->ops->hup_added++;
    s->ops->gone = false;
    ops_file_applies(s);
    kb_open(s);
}

/* SIGHUP after the informer's definition was edited in the file. */
static void ops_hup_change(sim_t *s) {
    def_t want = pick_definition(s, &s->ops->r);
    s->ops->file_def = want;
    s->ops->file_edited = true; /* the file says so now, whatever the reload does */
    switch (ops_reload_decision(s, &want)) {
    case KB_DEF_RELOAD_REFUSE: /* nothing changes: the running informer goes on */
        s->ops->hup_refused++;
        break;
    case KB_DEF_RELOAD_KEEP: /* the running informer goes on as the file's (only keys applied live differ) */
        s->ops->hup_kept++;
        def_set(s, &want);
        break;
    case KB_DEF_RELOAD_ADD:
    case KB_DEF_RELOAD_REBUILD: /* a new one in its place */
        ops_informer_remove(s);
        ops_informer_add(s);
        break;
    }
}

static void ops_hup_informer(sim_t *s) {
    if (s->ops->gone) {
        if (chance(&s->ops->r, 30))
            ops_informer_add(s);
    } else if (chance(&s->ops->r, 60)) {
        ops_hup_change(s);
    } else {
        ops_informer_remove(s);
    }
}

/* A step of the history while no informer runs: the server goes on. */
static void ops_gone_step(sim_t *s) {
    s->steps++;
    s->clock++;
    if (s->restores && chance(&s->r, 4))
        srv_backup_or_restore(s);
    else if (chance(&s->r, 10) && s->srv.rv > 2)
        s->srv.compacted = s->srv.rv - rnd(&s->r, 4);
    else if (chance(&s->r, 50))
        srv_op(&s->srv, &s->r);
}

/* The end of the history: an informer still removed comes back (a start
 * applies the file if no SIGHUP did). */
static void ops_finish(sim_t *s) {
    if (!s->ops || !s->ops->gone)
        return;
    ops_informer_add(s);
    if (!s->ops->gone)
        return;
    TRACE("START (the file puts the informer back)\n");
    s->ops->gone = false;
    ops_file_applies(s);
    kb_open(s);
}

static bool run_history(uint64_t seed, unsigned steps) {
    sim_t *s = calloc(1, sizeof(*s));
    s->r.s = seed * 0x9E3779B97F4A7C15ull + 1;
    failed = false;
    failure[0] = '\0';
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(s->dir, sizeof(s->dir), "%s/kbsim-%d-XXXXXX", base, (int)getpid());
    if (!mkdtemp(s->dir)) {
        fprintf(stderr, "kb_sim: cannot make a directory under %s\n", base);
        exit(2);
    }
    configure(s);
    ops_configure(s, seed);
    sb_configure(s, seed);
    kb_open(s);
    if (s->sb)
        sb_open(s);
    for (unsigned i = 0; i < steps && !failed; i++) {
        if (s->ops && chance(&s->ops->r, 8)) {
            ops_step(s);
            continue;
        }
        if (s->sb)
            sb_blind_poll(s); /* the new leader's renews read what its informer reported */
        if (s->ops && s->ops->gone) {
            ops_gone_step(s);
            continue;
        }
        if (s->sb && !s->sb->took && chance(&s->sb->r, 30)) {
            sb_step(s);
            continue;
        }
        unsigned w = rnd(&s->r, 100);
        s->steps++;
        s->clock++;
        if (w >= 97 && ops_pending(s))
            ops_settle(s); /* a stop or a crash: the reload in progress ended first */
        if (w < 25) {
            if (s->restores && chance(&s->r, 4))
                srv_backup_or_restore(s);
            else
                srv_op(&s->srv, &s->r);
        } else if (w < 27) {
            if (s->srv.rv > 2)
                s->srv.compacted = s->srv.rv - rnd(&s->r, 4);
        } else if (w < 57) {
            refl_step(s, (int)rnd(&s->r, (unsigned)s->n_refl), false);
        } else if (w < 75) {
            pop_shard(s, rnd(&s->r, (unsigned)kb_informer_shards(s->inf)));
        } else if (w < 92) {
            sink_acks(s, &s->sinks[rnd(&s->r, (unsigned)s->n_sinks)], false);
        } else if (w < 97) {
            checkpoint(s);
        } else if (s->memory) {
            continue; /* without state_dir a restart begins again from nothing */
        } else if (w < 99) {
            TRACE("CRASH\n");
            s->crashes++;
            kb_gone(s, true);
            if (s->redefines && chance(&s->r, 40))
                redefine(s);
            else
                ops_file_applies(s);
            kb_open(s);
        } else {
            TRACE("RESTART\n");
            s->restarts++;
            clean_stop(s);
            if (s->redefines && chance(&s->r, 40))
                redefine(s);
            else
                ops_file_applies(s);
            kb_open(s);
        }
    }
    if (!failed && s->sb && !s->sb->took)
        sb_takeover(s);
    if (!failed)
        ops_finish(s);
    if (!failed) {
        ops_settle(s);
        quiesce(s);
    }
    if (!failed)
        check_progress(s);
    for (int i = 0; i < s->n_sinks && !failed; i++)
        check_dead_letters(s, i);
    for (int i = 0; i < s->n_sinks && !failed; i++)
        if (!ops_partial(s, i))
            check_sink(s, i);
    if (s->inf)
        kb_informer_destroy(s->inf);
    for (int i = 0; i < MAX_NS; i++) {
        refl_reset(&s->refl[i]);
        kb_buf_fini(&s->refl[i].pending);
    }
    for (int i = 0; i < MAX_SINKS; i++) {
        free(s->sinks[i].v);
        free(s->sinks[i].log.v);
    }
    char opsline[512] = "";
    if (s->ops)
        snprintf(opsline, sizeof(opsline), "; operator: %u sink rebuilds (%u messages handed over), %u stops at a "
                 "deadline (%u messages left), %u dead letters, %u sink removals, %u informer removals; SIGHUP on this "
                 "informer: %u changes refused, %u kept, %u removals, %u added back (%u with another definition)",
                 s->ops->rebuilds, s->ops->handed, s->ops->terms, s->ops->left, s->ops->dead_letters,
                 s->ops->removals, s->ops->informers_removed, s->ops->hup_refused, s->ops->hup_kept,
                 s->ops->hup_removed, s->ops->hup_added, s->ops->added_redefined);
    if (s->sb)
        snprintf(opsline, sizeof(opsline), "; standby (%s): %u skipped, %u standby restarts, %u forged marks (%u "
                 "refused at the takeover), %u owed messages paid, %u events lost by the leader's watch, "
                 "%u blind takeovers, %u objects the new leader never knew (known gap; %u of them also lost by the old "
                 "leader's watch)",
                 s->sb->lossy ? "lossy leader" : "restarting", s->sb->skipped, s->sb->restarts, s->sb->forged,
                 s->sb->refused, s->sb->owed_paid, s->sb->lost, s->sb->blind_takeovers, s->sb->ghosts,
                 s->sb->lost_unknown);
    if (verbose || failed)
        printf("seed %llu: %s%s%s  (%s, %d reflector(s), %d sink(s), %u server changes, %u lists, %u 410s, "
               "%u crashes, %u restarts, %u redefinitions, %u restores, %u messages%s)\n",
               (unsigned long long)seed, failed ? "FAILED: " : "ok", failed ? failure : "", "",
               s->latest ? (s->window ? "latest+window" : "latest") : "none", s->n_refl, s->n_sinks, (unsigned)s->srv.n_hist, s->lists, s->gones,
               s->crashes, s->restarts, s->redefined, s->restored, s->msgs, s->memory ? ", no state_dir" : opsline);
    sb_free(s); /* before its state_dir goes */
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "kb_sim: could not remove %s\n", s->dir);
    free(s->srv.hist);
    kb_config_free(s->cfg);
    ops_free(s);
    bool ok = !failed;
    free(s);
    return ok;
}

int main(int argc, char **argv) {
    uint64_t first = 1, n = 200;
    double seconds = 0;
    unsigned steps = 300;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seeds") && i + 1 < argc)
            n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--first") && i + 1 < argc)
            first = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            first = strtoull(argv[++i], NULL, 10);
            n = 1;
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
            n = UINT64_MAX;
        } else if (!strcmp(argv[i], "-v"))
            verbose = true;
        else if (!strcmp(argv[i], "--redefine"))
            ; /* the default now; kept so that older command lines still run */
        else {
            fprintf(stderr, "usage: kb_sim [--seeds N] [--first S] [--seed S] [--steps N] [--seconds T] [--redefine] [-v]\n");
            return 2;
        }
    }
    kb_log_setup(verbose ? KB_LOG_INFO : KB_LOG_ERROR + 1, false);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0); /* only for the rate printed at the end */
    uint64_t ran = 0, bad = 0;
    for (uint64_t seed = first; ran < n; seed++) {
        if (!run_history(seed, steps)) {
            bad++;
            printf("replay with: kb_sim --seed %llu -v\n", (unsigned long long)seed);
            break;
        }
        ran++;
        if (seconds > 0) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if ((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9 >= seconds)
                break;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double el = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("kb_sim: %llu histories from seed %llu, %u steps each, in %.1f s (%.0f histories/s)\n",
           (unsigned long long)ran, (unsigned long long)first, steps, el, el > 0 ? (double)ran / el : 0.0);
    printf("%llu passed, %llu failed\n", (unsigned long long)ran, (unsigned long long)bad);
    return bad ? 1 : 0;
}
