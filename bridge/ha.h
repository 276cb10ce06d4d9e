/* bridge/ha.h — high availability: one leader per shard index by a
 * coordination.k8s.io/v1 Lease, a warm standby that takes over.
 *
 * Both replicas of a shard run everything (informers, journal, index); only
 * the leader hands messages to sinks. Every worker asks kb_ha_admit() before
 * each event it would deliver: the leader delivers; a standby treats a change
 * the leader has published as acknowledged (its resourceVersion is not above
 * the leader's watermark for that informer) and holds the first one that is
 * not, until the leader publishes further or it becomes the leader itself.
 *
 * The rule at a takeover — the new leader owes what the old one did not
 * deliver. The leader's watermark is an RV over what *its* watch saw; a change
 * its watch missed and the standby saw lies below it and was skipped. So the
 * standby remembers every key whose latest change it skipped (a DELETED
 * itself, else just the key), and when it takes the lead it hands the sinks
 * once more, outside the ledger, the state it holds for each: the cached
 * object, or the DELETED. Where the old leader had delivered that state it is
 * an exact repeat, harmless under the consumer rule (docs/guarantees.md);
 * where it had not, it is the missing change. As the leader it skips only up
 * to a sink's committed checkpoint (exactly-once), never up to the old
 * leader's watermark. Cost per takeover: up to one message per key changed
 * while standing by (at most the cached objects plus the keys deleted
 * meanwhile); memory: one table entry per such key. Exactly-once informers
 * are not re-delivered (a repeat there is a duplicate).
 *
 * A published mark counts only up to what this replica has seen itself; one
 * above that for a lease period, or at a takeover, is refused (logged,
 * counted in kb_ha_status_t.marks_refused, ignored).
 *
 * What a standby queues may be at a sink already (the leader's): its
 * informers mark it as a possible repeat (kb_ha_shared_rv). The one loss left
 * — an object created and deleted while the new leader's watch was down, above
 * the mark it takes over — is logged by the informer as each such window
 * completes, and the takeover counted (kb_ha_status_t.blind_takeovers;
 * docs/cluster.md, section 9); the Lease keeps the takeover (annotation
 * kbridge.io/takeover) so a restarted leader goes on weighing.
 *
 * Ownership: the bridge owns the kb_ha_t (kb_bridge_new creates it when
 * ha.enabled). The api client and the marks callback are borrowed and outlive it.
 * Threads: one "kb:ha" thread talks to the API server; kb_admit/kb_ha_status
 * from any thread. Locks: ha->mtx, a leaf (nothing is called under it, the
 * marks callback and HTTP run outside it).
 */
#ifndef KB_BRIDGE_HA_H
#define KB_BRIDGE_HA_H

#include "common/event.h"
#include "config/config.h"
#include "informer/apiclient.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct kb_ha kb_ha_t;

#define KB_HA_MAX_MARKS 64
typedef struct kb_ha_mark {
    char informer[128];
    uint64_t rv; /* every change of the informer up to this resourceVersion is acknowledged by every sink */
} kb_ha_mark_t;
/* The leader's own watermarks, one per informer; returns how many. Called on
 * the ha thread with no ha lock held. */
typedef size_t (*kb_ha_marks_fn)(void *opaque, kb_ha_mark_t *out, size_t max);

/* Since this replica took over: an informer's windows of RVs it listed but did
 * not watch that reach into what the old leader may have delivered unpublished
 * (kb_informer_blind): how many, and their hull (lo, hi]. */
typedef struct kb_ha_window {
    char informer[128];
    uint64_t n, lo, hi;
} kb_ha_window_t;

/* This replica is about to lead (called before it delivers anything as the
 * leader): make the sinks ready — a transactional sink fences the previous
 * leader's producer — and give, per informer, the resourceVersion up to which
 * a sink has committed everything (its exactly-once checkpoint); changes up
 * to it are not delivered again. Returns how many; may block (it reads the
 * sink). Called on the ha thread with no ha lock held. */
typedef size_t (*kb_ha_prepare_fn)(void *opaque, kb_ha_mark_t *out, size_t max);

/* What ha asks of the bridge; every function is called on the ha thread with
 * no ha lock held, opaque is passed to each. */
typedef struct kb_ha_hooks {
    kb_ha_marks_fn marks;     /* the leader's own watermarks, to publish */
    kb_ha_prepare_fn prepare; /* about to lead (NULL: nothing to prepare) */
    kb_ha_marks_fn seen;      /* per informer, the newest RV this replica has seen itself (kb_ledger_tracked_rv) */
    /* took over at took_rv: per informer, the old leader's mark as trusted (kb_informer_ha_took; now
     * false: re-armed after a restart, from the Lease; NULL: none) */
    void (*took)(void *opaque, const kb_ha_mark_t *trusted, size_t n, uint64_t took_rv, bool now);
    /* per informer, its blind windows since the takeover (kb_ha_window_t); returns how many (NULL: none) */
    size_t (*blind)(void *opaque, kb_ha_window_t *out, size_t max);
    /* Just took the lead: hand the sinks again, outside the ledger, the state
     * this replica holds for key — deleted (a reference, borrowed) when the
     * change skipped was its deletion, else NULL (the cached state). True if
     * a sink took it. */
    bool (*redeliver)(void *opaque, const char *informer, const char *key, size_t key_len, kb_event_t *deleted);
    void *opaque;
} kb_ha_hooks_t;

kb_ha_t *kb_ha_new(const kb_config_t *cfg, kb_apiclient_t *api, const kb_ha_hooks_t *hooks);
void kb_ha_start(kb_ha_t *ha);
/* Shutdown begins: a standby's workers stop waiting (kb_ha_admit → DROP). */
void kb_ha_begin_stop(kb_ha_t *ha);
/* After the drain: stop the thread; a leader publishes its last watermarks and
 * releases the Lease (holderIdentity ""), so the standby takes over at once. */
void kb_ha_stop(kb_ha_t *ha);
void kb_ha_destroy(kb_ha_t *ha); /* NULL is a no-op */

typedef enum {
    KB_HA_DELIVER = 0, /* hand it to the sinks */
    KB_HA_SKIP,        /* the leader acknowledged it: acknowledge it to nothing */
    KB_HA_DROP,        /* shutting down as a standby: neither (it stays in the journal) */
} kb_ha_admit_t;
/* Before each event a worker delivers; blocks while this replica is a standby
 * and the leader has not published ev's RV yet. tracked_rv: the informer's
 * kb_ledger_tracked_rv (what this replica has seen: a published mark above it
 * is not trusted yet; and a relist's DELETED). abandon: the calling
 * pipeline's own flag (its drain ran past its deadline): DROP once it is set,
 * as after kb_ha_begin_stop. Never a flag shared by pipelines. */
kb_ha_admit_t kb_ha_admit(kb_ha_t *ha, const char *informer, const kb_event_t *ev, uint64_t tracked_rv,
                          const _Atomic bool *abandon);

/* Changes at or below this RV may have been delivered by the other replica:
 * UINT64_MAX while this one stands by, the Lease's RV of its takeover once it
 * leads (every change the old leader delivered was made before: one etcd
 * holds both). Read by the informers at each change (kb_informer_ha_shared);
 * valid for ha's life. Thread: any (atomic). */
const _Atomic uint64_t *kb_ha_shared_rv(kb_ha_t *ha);

/* This replica leads and its lease has not run out: it may hand messages to sinks. Thread: any (atomics). */
bool kb_ha_leads(kb_ha_t *ha);

typedef struct kb_ha_status {
    bool leader;               /* this replica may deliver now */
    char holder[128];          /* the Lease's holderIdentity as last read or written */
    char identity[128];
    char lease[400];           /* "namespace/name" */
    uint64_t transitions;      /* this process's leadership changes */
    uint64_t marks_refused;    /* published watermarks refused: above anything this replica saw */
    uint64_t blind_takeovers;  /* takeovers with an informer's blind window above the mark taken over */
} kb_ha_status_t;
void kb_ha_status(kb_ha_t *ha, kb_ha_status_t *st);
int kb_ha_shard(const kb_ha_t *ha);

#endif
