/* tests/kubesim/kubesim_int.h — private to tests/kubesim (and its unit tests).
 *
 * Ownership: kb_sim_obj_t is immutable after construction and
 * reference-counted (any thread may ref/unref). The current object of a key
 * is referenced by its resource's map; history events reference the objects
 * they carry. Everything else in kb_sim_t is guarded by sim->mtx, the only
 * lock (no lock order to get wrong); nothing that blocks or calls out to
 * libmicrohttpd runs while it is held.
 */
#ifndef KB_TESTS_KUBESIM_INT_H
#define KB_TESTS_KUBESIM_INT_H

#include "common/buf.h"
#include "common/strmap.h"
#include "tests/kubesim/kubesim.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- objects ---------------------------------------------------------- */

typedef struct kb_sim_label {
    char *key;
    char *val;
} kb_sim_label_t;

typedef struct kb_sim_obj {
    _Atomic unsigned refcnt;
    uint64_t rv;          /* metadata.resourceVersion */
    char *key;            /* "ns/name", or "name" when cluster-scoped */
    char *ns;             /* "" when cluster-scoped (points into key or a literal) */
    char *name;           /* points into key */
    char *uid;
    char *json;           /* compact JSON, "kind" and "apiVersion" first; NUL-terminated */
    size_t json_len;
    size_t item_off;      /* json+item_off is the text after `{"kind":..,"apiVersion":..,`: a list
                           * item is "{" + that (LIST items omit kind/apiVersion) */
    size_t rv_off, rv_len; /* the digits of metadata.resourceVersion in json */
    size_t churn_off;     /* the 20 digits of annotation kubesim.io/churn, 0 if absent */
    size_t nlabels;
    kb_sim_label_t *labels;
} kb_sim_obj_t;

#define KB_SIM_CHURN_DIGITS 20

kb_sim_obj_t *kb_sim__obj_ref(kb_sim_obj_t *obj);
void kb_sim__obj_unref(kb_sim_obj_t *obj); /* NULL is a no-op */
/* A copy with metadata.resourceVersion = rv and, if churn != NULL and the object
 * has a churn annotation, that counter set to *churn. Refcount 1. */
kb_sim_obj_t *kb_sim__obj_restamp(const kb_sim_obj_t *obj, uint64_t rv, const uint64_t *churn);

/* ---- resources and history ------------------------------------------- */

enum { KB_SIM_ADDED = 0, KB_SIM_MODIFIED = 1, KB_SIM_DELETED = 2 };
extern const char *const kb_sim__type_names[3];

typedef struct kb_sim_event {
    int type;                 /* KB_SIM_ADDED/MODIFIED/DELETED */
    uint64_t rv;
    kb_sim_obj_t *obj;        /* object as sent; DELETED: last state with the deletion's RV */
    kb_sim_obj_t *prev;       /* MODIFIED: the previous state (selector leave), else NULL */
    _Atomic(kb_sim_obj_t *) prev_at_rv; /* lazily: prev restamped with rv (set once, CAS) */
    bool lost;                /* lose_events fault: never sent to a watcher … */
    uint64_t lost_for;        /* … whose Authorization header hashes to this (0: any watcher) */
} kb_sim_event_t;

typedef struct kb_sim_res {
    char *group, *version, *resource, *kind;
    char *api_version;          /* "v1" or "apps/v1" */
    bool namespaced;
    kb_strmap_t *objs;          /* key -> kb_sim_obj_t * (one reference each) */
    kb_sim_obj_t **sorted;      /* the map's objects by key; valid only if sorted_valid */
    size_t nsorted, sorted_cap;
    bool sorted_valid;
    kb_sim_event_t *ring;       /* history: ring[seq % ring_cap] for seq in [seq_next-ring_count, seq_next) */
    size_t ring_cap, ring_count;
    uint64_t seq_next;          /* sequence number of the next event */
    uint64_t expired_rv;        /* a watch from N < expired_rv gets 410 */
} kb_sim_res_t;

/* ---- selectors (kb_sim_select.c) -------------------------------------- */

typedef enum { KB_SEL_EQ, KB_SEL_NE, KB_SEL_IN, KB_SEL_NOTIN, KB_SEL_EXISTS, KB_SEL_NOTEXISTS } kb_sel_op_t;

typedef struct kb_sel_req {
    kb_sel_op_t op;
    char *key;        /* label key; for field selectors "metadata.name" / "metadata.namespace" */
    char **vals;
    size_t nvals;
} kb_sel_req_t;

typedef struct kb_sel {
    kb_sel_req_t *reqs;
    size_t nreqs;
} kb_sel_t;

/* Parse a label selector ("a=b,c!=d,e in (x,y),f notin (z),g,!h"). NULL or "" is
 * the empty selector (matches everything). KB error text in errstr on failure. */
int kb_sim__labelsel_parse(const char *text, kb_sel_t *sel, char *errstr, size_t errstr_size);
/* Parse a field selector (metadata.name / metadata.namespace with =, ==, !=). */
int kb_sim__fieldsel_parse(const char *text, kb_sel_t *sel, char *errstr, size_t errstr_size);
void kb_sim__sel_fini(kb_sel_t *sel);
bool kb_sim__labelsel_match(const kb_sel_t *sel, const kb_sim_label_t *labels, size_t nlabels);
bool kb_sim__fieldsel_match(const kb_sel_t *sel, const char *ns, const char *name);

/* A shard selector (ShardedListAndWatch): shardRange(object.metadata.uid |
 * object.metadata.namespace, '0x<16 hex>', '0x<16 hex>' | '0x10000000000000000')
 * joined by ||, all on one field. An object matches when the FNV-1a 64 of the
 * field's bytes lies in one of the ranges [start, end). */
#define KB_SIM_SHARD_RANGES 16
typedef struct kb_shardsel {
    size_t n;           /* ranges; 0 = no selector (everything) */
    bool by_ns;         /* the field is metadata.namespace (else metadata.uid) */
    struct {
        uint64_t start, end;
        bool end_top;   /* end is 2^64 */
    } r[KB_SIM_SHARD_RANGES];
    char text[1536];    /* the server's own rendering, echoed in ListMeta.shardInfo.selector */
} kb_shardsel_t;
/* Parse shardSelector (NULL: no selector; "" is an error, as on the server). */
int kb_sim__shardsel_parse(const char *text, kb_shardsel_t *s, char *errstr, size_t errstr_size);
bool kb_sim__shardsel_match(const kb_shardsel_t *s, const char *ns, const char *uid);

/* ---- continue tokens (kb_sim_token.c) --------------------------------- */

/* base64url (no padding) of {"v":"meta.k8s.io/v1","rv":RV,"start":"<key>\u0000"}. */
void kb_sim__token_encode(int64_t rv, const char *last_key, kb_buf_t *out);
/* 0 and *rv / *start (malloc'd, the key after which to continue, without the NUL)
 * on success; -1 if the token is malformed. */
int kb_sim__token_decode(const char *token, int64_t *rv, char **start);

/* ---- the simulator ---------------------------------------------------- */

typedef struct kb_sim_fault {
    int verb;             /* KB_SIM_VERB_* mask */
    char *resource;       /* NULL = any resource */
    int code;
    int retry_after;      /* seconds; 0 = no header */
    int count;            /* requests left */
    char *body;           /* NULL = a Status JSON */
} kb_sim_fault_t;

/* CONTINUE: a list page that carries continue= (the first page is LIST only). */
enum { KB_SIM_VERB_LIST = 1, KB_SIM_VERB_WATCH = 2, KB_SIM_VERB_GET = 4, KB_SIM_VERB_WRITE = 8, KB_SIM_VERB_CONTINUE = 16 };

/* A namespace whose watches a cut_watches fault closed. */
typedef struct kb_sim_cut {
    char ns[64];
    uint64_t gen;         /* sim->cut_gen of the last cut of ns */
    bool expire_next;     /* the next watch of ns resuming from an rv gets a 410 ERROR */
} kb_sim_cut_t;

#define KB_SIM_MAX_CUTS 64
#define KB_SIM_REQLOG 1000
#define KB_SIM_MAX_FAULTS 64

/* POST /_sim/snapshot: the objects of every resource at one RV, for
 * POST /_sim/restore (an etcd backup and its restore). */
typedef struct kb_sim_snap {
    uint64_t rv;
    size_t n;                 /* resources, in sim->res order at the snapshot */
    kb_sim_res_t **res;
    kb_strmap_t **objs;       /* key -> kb_sim_obj_t * (one reference each) */
} kb_sim_snap_t;

struct kb_sim {
    kb_sim_opts_t opts;       /* defaults applied; host points at host_buf */
    char host_buf[64];
    int port;
    struct MHD_Daemon *mhd;
    pthread_mutex_t mtx;      /* guards everything below that is not atomic */
    pthread_cond_t cond;      /* CLOCK_MONOTONIC; broadcast on any change a watcher may want */
    atomic_bool stopping;
    uint64_t rv;              /* the global resourceVersion counter (last one issued) */
    uint64_t rv_high;         /* the highest RV issued before the last restore (0: none yet) */
    kb_sim_snap_t *snap;      /* POST /_sim/snapshot's copy of every resource's objects; NULL none */
    uint64_t uid_seq;         /* for uids */
    uint64_t gen_seq;         /* names for /_sim/generate */
    kb_sim_res_t **res;
    size_t nres;
    uint64_t continue_min_rv; /* continue tokens with rv below this are expired */
    kb_sim_fault_t faults[KB_SIM_MAX_FAULTS];
    size_t nfaults;
    int open_watches;
    uint64_t watch_err_gen;   /* bumped by a watch_error fault */
    char *watch_err_line;     /* the ERROR event line for the current watch_err_gen */
    bool watch_err_next;      /* no watch was open: the next one gets watch_err_line */
    uint64_t drop_gen, end_gen, bookmark_gen;
    uint64_t cut_gen;         /* bumped by each cut_watches fault */
    kb_sim_cut_t cuts[KB_SIM_MAX_CUTS]; /* one per namespace ever cut */
    size_t ncuts;
    int malformed_left;
    int lose_left;            /* lose_events fault: history events still to hide from watchers */
    uint64_t lose_for;        /* … from these only: kb_fnv1a64 of "Bearer <token>" (0: all) */
    char *reqlog[KB_SIM_REQLOG]; /* JSON lines, ring */
    size_t reqlog_next, reqlog_count;
    /* churn (POST /_sim/churn) */
    pthread_t churn_thr;
    bool churn_started;       /* a thread exists (to join) */
    atomic_bool churn_running;
    kb_sim_res_t *churn_res;
    uint64_t churn_count, churn_done_n;
    double churn_rate;
    /* demo */
    pthread_t demo_thr;
    bool demo_started;
};

/* Store (kb_sim_store.c). All "_locked" functions need sim->mtx held. */
kb_sim_res_t *kb_sim__res_add(kb_sim_t *sim, const char *group, const char *version,
                              const char *resource, const char *kind, bool namespaced);
void kb_sim__res_free(kb_sim_res_t *res);
/* Find by group+version+resource; version NULL = any; group NULL = any. */
kb_sim_res_t *kb_sim__res_find(kb_sim_t *sim, const char *group, const char *version, const char *resource);
/* Build an object from a parsed JSON object (jansson json_t *) with the server-set
 * metadata. Returns NULL with errstr if it is not an object. */
kb_sim_obj_t *kb_sim__obj_build(const kb_sim_res_t *res, const void *root, const char *ns,
                                const char *name, const char *uid, uint64_t rv, const char *created,
                                char *errstr, size_t errstr_size);
/* Make obj the current state of its key and append the event (the caller keeps its reference). */
void kb_sim__commit_locked(kb_sim_t *sim, kb_sim_res_t *res, int type, kb_sim_obj_t *obj);
/* Delete the key (must exist) with a fresh RV; returns the DELETED object (new ref). */
kb_sim_obj_t *kb_sim__delete_locked(kb_sim_t *sim, kb_sim_res_t *res, const char *key);
void kb_sim__ensure_sorted_locked(kb_sim_res_t *res);
/* First index in res->sorted whose key is > after (after NULL: 0) / >= from. */
size_t kb_sim__sorted_lower_locked(const kb_sim_res_t *res, const char *from, bool strictly_after);
void kb_sim__compact_locked(kb_sim_t *sim);
/* Take a snapshot of every resource's objects (replacing the last one). */
void kb_sim__snapshot_locked(kb_sim_t *sim);
/* Put the snapshot back as an etcd restore does: objects and the RV counter
 * go back to it, the history is gone, every watch is dropped. False: no snapshot. */
bool kb_sim__restore_locked(kb_sim_t *sim);
void kb_sim__snap_free(kb_sim_snap_t *snap); /* NULL is a no-op */
void kb_sim__new_uid_locked(kb_sim_t *sim, char out[37]);
void kb_sim__now_rfc3339(char out[32]);
/* Churn step: bump the churn annotation of the object at key (fast path if it has
 * one) with a new RV. Returns false if the key is gone. */
bool kb_sim__touch_locked(kb_sim_t *sim, kb_sim_res_t *res, const kb_sim_obj_t *cur, uint64_t counter);
/* Create one realistic generated pod in ns, padded to about size bytes. */
void kb_sim__gen_pod_locked(kb_sim_t *sim, kb_sim_res_t *res, const char *ns, size_t size);
/* Create namespace ns if absent. */
void kb_sim__ensure_ns_locked(kb_sim_t *sim, const char *ns);
void kb_sim__broadcast_locked(kb_sim_t *sim);

/* HTTP helpers (kb_sim_http.c). */
/* A Status JSON text (malloc'd). details_json may be NULL (a raw JSON object text). */
char *kb_sim__status_json(int code, const char *reason, const char *message, const char *details_json,
                          const char *continue_token);
const char *kb_sim__reason_for(int code);
/* Append to the request log (takes sim->mtx; call without it). */
void kb_sim__reqlog(kb_sim_t *sim, struct MHD_Connection *conn, const char *method, const char *url,
                    int status);

/* Watch (kb_sim_watch.c). */
typedef struct kb_sim_watch_params {
    kb_sim_res_t *res;
    const char *url;        /* for the request log */
    const char *ns;         /* NULL = all namespaces */
    const char *rv;         /* NULL/"" / "0" / decimal */
    bool bookmarks;
    bool initial_events;    /* sendInitialEvents=true */
    int64_t timeout_s;      /* <= 0: server default */
    kb_sel_t lsel, fsel;    /* consumed */
    kb_shardsel_t ssel;     /* shardSelector; n = 0 when none or the gate is off */
} kb_sim_watch_params_t;
/* Queue the watch response on conn. Returns the MHD result. */
enum MHD_Result kb_sim__watch_start(kb_sim_t *sim, struct MHD_Connection *conn, kb_sim_watch_params_t *p);

/* Control API (kb_sim_control.c): handle /_sim/...; returns the MHD result. */
enum MHD_Result kb_sim__control(kb_sim_t *sim, struct MHD_Connection *conn, const char *method, const char *url,
                    const char *body, size_t body_len);
void kb_sim__control_stop(kb_sim_t *sim);
void kb_sim__faults_clear_locked(kb_sim_t *sim);
/* The cut entry of namespace ns, or NULL. */
kb_sim_cut_t *kb_sim__cut_find_locked(kb_sim_t *sim, const char *ns);
/* Take a matching status fault (decrementing its count) or return NULL; the
 * caller answers with *code, *retry_after and the body (malloc'd) it returns. */
char *kb_sim__fault_take_locked(kb_sim_t *sim, int verb, const char *resource, int *code, int *retry_after);
/* RFC 7386 JSON merge patch of one jansson object into another, in place. */
void kb_sim__merge_patch(void *target, void *patch);
/* Respond with a buffer (takes ownership of body). */
enum MHD_Result kb_sim__respond(kb_sim_t *sim, struct MHD_Connection *conn, const char *method, const char *url,
                    int status, char *body, size_t len, int retry_after);
enum MHD_Result kb_sim__respond_status(kb_sim_t *sim, struct MHD_Connection *conn, const char *method, const char *url,
                           int code, const char *reason, const char *message);
/* Demo workload. */
void kb_sim__demo_start(kb_sim_t *sim);

#endif
