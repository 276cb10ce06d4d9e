/* informer/informer_int.h — what informer.c (ingest, batches, lifecycle) and
 * reflector.c (the HTTP list and watch loops) share. Private to informer/.
 *
 * Ownership and locks are stated on the fields; the lock order is
 * ingest_mtx → (fifo, ledger, sub_mtx) → rv_mtx / err_mtx, and no lock is held
 * while calling out to curl.
 */
#ifndef KB_INFORMER_INFORMER_INT_H
#define KB_INFORMER_INFORMER_INT_H

#include "common/buf.h"
#include "common/strmap.h"
#include "informer/apiclient.h"
#include "informer/decode.h"
#include "informer/informer.h"
#include "informer/kstatus.h"
#include "informer/ledger.h"
#include "informer/shard.h"
#include "informer/state.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define KB_LIST_MAX_BODY (512u << 20) /* one list page */
#define KB_WATCH_MAX_FRAME (64u << 20)
#define KB_PACKER_MAX_BYTES (4u << 20) /* full objects cached and waiting to be compressed (packer.h) */
/* Changes tracked and not acknowledged by every sink, at most: beyond, the
 * reflectors stop reading until the sinks catch up (with state_dir, the bytes
 * of the journal's unacknowledged tail are bounded by journal.max_bytes too). */
#define KB_INF_MAX_WINDOW ((size_t)1 << 20)
#define KB_BACKOFF_INITIAL_MS 800
#define KB_BACKOFF_CAP_MS 30000
#define KB_BACKOFF_RESET_MS 120000
#define KB_LIST_RESTARTS 5 /* expired continue tokens in a row before backing off */

typedef struct kb_backoff {
    int64_t base_ms;       /* next delay before jitter */
    int64_t last_ns;       /* monotonic time of the last step */
} kb_backoff_t;

/* Where an object came from. AUDIT: read back by the drift audit (GET); it
 * passes the watch's gate but moves no resume point. */
typedef enum { KB_SRC_WATCH, KB_SRC_LIST, KB_SRC_AUDIT } kb_src_t;

typedef struct kb_inf_staged {
    kb_event_t *ev;        /* NULL for a resume-point marker */
    uint64_t seq;
    int refl;              /* reflector whose resume point rv_after is, -1 for none */
    char rv_after[KB_RV_MAX]; /* "" = the resume point does not move */
} kb_inf_staged_t;

typedef struct kb_inf_undo {
    const char *key;       /* borrowed from the staged event (inf->out holds it until the undo is done) */
    size_t key_len;
    uint64_t hash;
    kb_indexer_old_t old;  /* the entry before the batch (old.ev NULL = absent), as it was filed */
    uint64_t grave_before; /* the ledger's grave of key before the change */
} kb_inf_undo_t;

typedef struct kb_reflector {
    struct kb_informer *inf;
    char *ns;              /* NULL = cluster-wide */
    char *path;            /* "/api/v1/pods", "/apis/apps/v1/namespaces/x/deployments" */
    pthread_t thread;
    bool running;          /* thread started and not yet joined (main thread only) */
    char rv[KB_RV_MAX];    /* resume point: last list RV, event RV or bookmark RV */
    pthread_mutex_t rv_mtx;/* guards rv for readers on other threads */
    kb_backoff_t backoff;
    bool listed;           /* first list done */
    /* state of the watch in progress (reflector thread only) */
    kb_buf_t stream;       /* bytes not yet parsed */
    uint64_t frames;       /* frames received in this watch */
    kb_err_t watch_err;    /* why the stream was aborted from inside */
    bool watch_error_event;/* … by an ERROR event (status, cls) */
    kb_status_t status;    /* the ERROR event's Status */
    kb_strmap_t *seen;     /* during a list: keys listed; NULL when nothing of the scope was cached before
                              the first list (nothing to diff: kb_inf__list_begin) */
    bool list_open;        /* between kb_inf__list_begin and kb_inf__list_done */
    bool list_from_set;    /* list_from holds for the list in progress (cleared when one completes) */
    uint64_t list_from;    /* during a list: the resume point when it began (0: none), what it did not watch
                              from (a streamed list moves rv with its items: kb_inf_note_blind) */
    char list_rv[KB_RV_MAX]; /* during a list: the RV of its first page */
    bool list_back;        /* during a paged list: its RV is below the resume point (a new history, known
                              at its first page: kb_inf_list_back) */
    uint64_t seen_rv;      /* the newest RV of an object of this scope listed or watched in this epoch
                              (or cached in state_dir at start) */
    uint64_t list_floor;   /* during a list: the RV below which it is of a new history (kb_inf_list_back;
                              taken as it begins: a page of live state may hold objects above its RV) */
    size_t list_items, list_pages; /* during a list */
    int page_limit;        /* limit= of list pages: page_size, halved while pages exceed the body bound */
    /* A streamed list (a watch with sendInitialEvents): frames before the
     * initial-events-end BOOKMARK are list items (reflector thread only). */
    bool initial;          /* the watch in progress is still sending the initial events */
    bool stream_listed;    /* … and its initial-events-end BOOKMARK has been committed */
    bool stream_ignored;   /* … the server sent a normal watch instead (a change before the bookmark) */
    bool paged_only;       /* list_mode auto: the server refused streamed lists, page from now on */
    uint64_t list_bytes;   /* during a list: bytes of its pages or initial events */
    int64_t list_t0_ns, list_log_ns; /* during a list: when it began, when progress was last logged */
    kb_kclass_t cls;       /* class of the last failed answer (informer/kstatus.h), if has_cls */
    bool has_cls;          /* the last request failed with an answer from the server */
    int ra_in_row;         /* Retry-After waits honoured since the server last answered in full */
    _Atomic bool relist_asked; /* the audit found too much drift: relist at the next frame or watch */
    bool def_stale;        /* state_dir was written under another definition: list first, and until a
                            * list of this scope commits (set before start; then ingest_mtx) */
} kb_reflector_t;

struct kb_informer {
    const kb_config_t *cfg;
    const kb_config_informer_t *conf;
    kb_apiclient_t *api;           /* borrowed */
    kb_resource_t *res;
    kb_transform_t *tf;
    kb_indexer_t *idx;
    struct kb_zcache *zc;          /* compresses the cache's objects (zcache.h); NULL with state_dir or off */
    struct kb_packer *packer;      /* compresses them off the reflector thread while started (packer.h); with zc */
    kb_deltafifo_t **fifos;
    size_t n_shards;
    kb_reflector_t *refl;
    size_t n_refl;
    pthread_mutex_t ingest_mtx;    /* cache check + enqueue + cache update, as one step */
    kb_buf_t scratch;              /* decode output; ingest_mtx */
    kb_ledger_t *ledger;           /* seqs, gate, acknowledgements, checkpoint (informer/ledger.h) */
    pthread_t resync_thread;
    bool resync_running;
    _Atomic bool stop;
    _Atomic unsigned synced_refl;  /* reflectors done with their first list */
    _Atomic uint64_t st_events[KB_EV_TYPE_COUNT];
    _Atomic uint64_t st_errors[KB_WATCH_ERR_COUNT];
    _Atomic int64_t st_heard_ns; /* realtime of the newest list page or watch frame from the API server */
    _Atomic uint64_t st_frames, st_bookmarks, st_relists, st_lists, st_pages, st_gated, st_watches;
    _Atomic uint64_t st_rv_regressions;
    _Atomic uint64_t st_sync_objects;  /* objects received by reflectors still in their first list */
    kb_shard_t shard;              /* this replica's ownership (informer/shard.h); set at build */
    _Atomic bool shard_fallback;   /* server_side auto/on: the server ignored shardSelector; filtered here */
    _Atomic uint64_t st_shard_foreign; /* objects received that another replica owns */
    pthread_mutex_t err_mtx;
    char last_error[256];          /* err_mtx */

    /* The open ingestion batch (ingest_mtx): events decided, journalled and
     * applied to the cache, queued only after the batch commits. */
    kb_state_t *state;             /* NULL without state_dir */
    kb_inf_staged_t *out;          /* staged entries, in seq order */
    size_t n_out, cap_out;
    kb_inf_undo_t *undo;           /* cache entries to restore if the commit fails */
    size_t n_undo, cap_undo;
    uint64_t batch_seq0;           /* inf->seq when the batch began */
    bool batch_open, batch_failed;
    char batch_err[256];

    /* The definition (informer/definition.h) and its change since state_dir was written. */
    char *def;                     /* canonical text, owned; set at build */
    size_t def_stale;              /* reflectors with def_stale; ingest_mtx (0: the stored one is current) */
    bool def_reshape;              /* the change reshapes objects: the relists send unchanged ones again;
                                    * set before start */
    int def_closing;               /* ingest_mtx: the reflector whose list completes in the open batch
                                    * under the changed definition (-1: none) */
    bool def_new_server;           /* ingest_mtx: another API server than state_dir's: the first list to
                                    * complete starts a new epoch, whatever its RV */
    uint64_t prior_rv;             /* ingest_mtx: what a list of a scope with no resume point compares with
                                    * to notice a restore: state_dir's newest resume point at start
                                    * (kb_ledger_known_rv); 0 once a restore was noticed (a new epoch) */
    const _Atomic uint64_t *ha_shared; /* set before start (NULL: no HA): changes at or below this RV may
                                    * have been delivered by another replica (kb_informer_ha_shared) */
    /* The hull (lo, hi] of the windows of RVs this process did not watch,
     * only listed (kb_informer_blind); 0, 0: none. Written under ingest_mtx,
     * read without it: the ingest lock may be held across a full queue's
     * push, and an HA takeover (whose workers empty that queue) reads it. */
    _Atomic uint64_t blind_lo, blind_hi;
    _Atomic uint64_t blind_start;  /* state_dir's resume point at start: (0, it] was perhaps listed unwatched
                                    * by an earlier process (which lists came before cannot be told) */
    /* After an HA takeover (kb_informer_ha_took): the mark trusted then, and
     * the windows noted since that reach into what the old leader may have
     * delivered without publishing it (kb_hatable_blind): their hull and
     * how many. Written under ingest_mtx or by the HA thread; read anywhere. */
    _Atomic bool ha_took;
    _Atomic uint64_t ha_trusted, ha_took_rv, exposed_lo, exposed_hi, exposed_n;

    /* The checkpointer: writes the ledger's watermark every 200 ms. */
    pthread_t ckpt_thread;
    bool ckpt_running;
    _Atomic bool ckpt_stop;
    _Atomic bool paused;           /* a reflector waits for the sinks (the ledger's window is full) */
    bool crashed;                  /* kb_ingest_crash: close without a last checkpoint */
    /* Live subscribers (the HTTP replay API); sub_mtx, taken inside ingest_mtx. */
    pthread_mutex_t sub_mtx;
    struct { kb_informer_sub_fn fn; void *opaque; } subs[64];
    size_t n_subs;
    /* The drift audit (informer/audit.c): its thread and what it found (err_mtx for last_*). */
    pthread_t audit_thread;
    bool audit_running;
    _Atomic uint64_t st_audit_runs, st_audit_drift[3];
    int64_t audit_last_ns;         /* err_mtx */
    uint64_t audit_last_drift[3];  /* err_mtx */
    bool audit_last_relisted;      /* err_mtx */
};

/* Record a list/watch error for stats and /readyz (the last one wins). Thread: any. */
void kb_inf__error(kb_informer_t *inf, kb_watch_err_t kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A list, step by step (reflector.c's HTTP loop and informer/ingest.h): begin
 * forgets an earlier unfinished list; page ingests one List body as one batch
 * (src names the request for error texts; cont gets the continue token); end
 * stages the deletes of what the list did not contain and the resume point.
 * Thread: the reflector's (or the simulation's). Locks: takes ingest_mtx. */
void kb_inf__list_begin(kb_reflector_t *r);
kb_err_t kb_inf__list_page(kb_reflector_t *r, const char *src, const char *data, size_t len, kb_buf_t *cont);
kb_err_t kb_inf__list_end(kb_reflector_t *r);
/* The list is over (complete or not): its set of listed keys goes. */
void kb_inf__list_done(kb_reflector_t *r);
/* A list complete (paged, or a streamed list's bookmark committed): the
 * reflector counts as synced, or the list as a relist. Thread: the reflector's. */
void kb_inf__list_synced(kb_reflector_t *r);
/* A streamed list begins (the watch about to open sends the initial events
 * first) / its stream ended, for whatever reason: true if its
 * initial-events-end BOOKMARK was committed, i.e. the list is complete. */
void kb_inf__stream_begin(kb_reflector_t *r);
bool kb_inf__stream_end(kb_reflector_t *r);
/* Bytes of a watch body (the curl write callback): every complete line is a
 * frame; one call is one batch. False ends the watch (r->watch_err says why).
 * While r->initial (a streamed list, after kb_inf__list_begin), ADDED frames
 * are list items and the initial-events-end BOOKMARK ends the list as
 * kb_inf__list_end does, in the same batch as what follows it. */
bool kb_inf__watch_bytes(void *opaque, const char *data, size_t len);

/* For the drift audit (informer/audit.c). Thread: the audit's; locks: take ingest_mtx.
 * audit_ingest: an object read back by GET, through the watch's gate (no resume point moves).
 * audit_delete: key's cached entry, if still at rv, leaves as DELETED finalStateUnknown
 *   at the audit list's RV (audit_rv; informer.c, kb_inf_gone_event).
 * staged, done: whether a change was delivered (false: the cache had moved on). */
/* stale_grave: the grave of key (key_len bytes) the audit found contradicted by
 * its list — forgotten first if it is still there (0: none). */
kb_err_t kb_inf__audit_ingest(kb_reflector_t *r, const char *obj, size_t len, const char *key, size_t key_len,
                              uint64_t stale_grave, bool *staged);
kb_err_t kb_inf__audit_delete(kb_reflector_t *r, const char *key, size_t key_len, const char *rv, const char *audit_rv,
                              bool *done);
/* Whether this replica owns the object (sharding.*, kb_shard_owns): key_hash is
 * FNV-1a of its key, uid/ns its metadata. An object received that is not ours
 * while the server was asked to shard shows it ignored shardSelector: counted,
 * and server_side auto falls back to filtering here (said once). Thread: any. */
bool kb_inf__ours(kb_informer_t *inf, uint64_t key_hash, const char *uid, size_t uid_len, const char *ns,
                  size_t ns_len);
/* Whether list and watch requests carry shardSelector now. Thread: any. */
bool kb_inf__shard_asks(const kb_informer_t *inf);
/* The collection path of the informer's resource in ns (NULL: cluster-wide). Caller frees. */
char *kb_inf__path(const kb_config_informer_t *c, const char *ns);
/* labelSelector / fieldSelector of the informer, appended to q (reflector.c). */
void kb_inf__query_common(const kb_reflector_t *r, kb_buf_t *q);
/* The path of one list page of r's scope: limit, continue (NULL/"" for the
 * first page) and the selectors in q, the whole "path?query" in path. */
void kb_inf__list_path(const kb_reflector_t *r, int limit, const char *cont, kb_buf_t *q, kb_buf_t *path);

/* The reflector thread: list → watch → watch …, until inf->stop (reflector.c). */
void *kb_inf__reflector_main(void *arg);

#endif
