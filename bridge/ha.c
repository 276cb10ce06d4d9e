/* bridge/ha.c — a leader and a warm standby per shard, by a Lease.
 *
 * Why a Lease: it is what kube-controller-manager and client-go's leader
 * election use; the API server gives optimistic concurrency (an update names
 * the resourceVersion it read; a concurrent writer gets 409), so at most one
 * replica wins a take-over. One Lease per shard index: N shards, N leaders.
 *
 * Expiry without trusting clocks across machines: as client-go does, a
 * standby does not compare renewTime with its own wall clock. It remembers
 * when (its monotonic clock) it first saw the Lease's current resourceVersion;
 * when that version has stood for leaseDurationSeconds, it tries to take the
 * Lease (an update naming that version). A released Lease (holderIdentity "")
 * is taken at once.
 *
 * Fencing: the leader may deliver until (monotonic start of its last
 * successful renew) + lease_seconds − KB_HA_MARGIN. The standby's count starts
 * when it reads the renewed Lease, which is after that request started, so the
 * old leader's deadline passes before any standby can have taken over, given
 * the two clocks run at the same rate within KB_HA_MARGIN per lease period.
 * The check is made before each event is handed to the sinks; what a sink
 * already holds (its buffer, a produce in flight) is not recalled.
 *
 * What a takeover delivers — the crux. The two replicas' journals number the
 * same change with different seqs, so seqs cannot be published. RVs can: they
 * are etcd revisions, the same for a change on both replicas. The leader
 * publishes, per informer, the RV every change up to its watermark is known
 * by (kb_ledger_acked_rv: the lowest resume point of its scopes at the
 * watermark of all its sinks), as the annotation KB_HA_ANNOTATION
 * {"informer":"rv",…}, on every renew. The standby's workers pop, journal and
 * index like the leader's, and before delivering each change:
 *   - a change whose RV is not above the published one: the leader has it
 *     acknowledged (or a newer state of the key) — acknowledged to nothing
 *     here (KB_HA_SKIP: the ledger moves, the journal is pruned as usual);
 *   - a DELETED made up by a relist carries the list's RV (the object's
 *     last RV under a changed definition): it counts as known once the
 *     published RV reaches the newest resume point this replica had tracked
 *     when it saw it (at least the list's);
 *   - anything else: the worker waits (for a newer publication, for
 *     leadership, or for shutdown). So the standby is never further behind
 *     than one renew period plus the leader's own acknowledgement lag, and
 *     its reflectors keep reading (its window bound is only reached when the
 *     leader's is).
 * A published mark is trusted only up to what this replica has seen itself
 * (its informer's newest resume point, kb_ledger_tracked_rv): the leader
 * cannot have acknowledged a change that was never made, so a mark above
 * everything seen here is either a moment ahead of our watch (it is trusted
 * as soon as our watch gets there) or written by someone else. The standby
 * skips only up to the trusted part; a mark still above after a whole lease
 * period, or at all when taking over, is refused: a WARN naming the informer
 * and both RVs, kbridge_ha_marks_refused_total, and it is ignored.
 * What a standby queues may be at a sink already — the leader delivers the
 * same changes — so its informers queue it marked as a redelivery
 * (kb_ha_shared_rv, informer.h's kb_informer_ha_shared): with "latest"
 * compaction an ADDED never vanishes with its DELETED there; after a
 * takeover, up to the RV of the Lease write that took it (every change the
 * old leader delivered was made before that write, in the same etcd).
 * On takeover the waiting workers deliver from where they wait: every change
 * after the last published watermark. Repeats are what the leader
 * acknowledged after its last publication (up to renew_seconds of changes) —
 * at-least-once; a consumer applying only a greater (RV, deleted) per key
 * converges.
 *
 * But a watermark is an RV over what the old leader's watch saw: a change it
 * missed (a watch can lose an event; the drift audit exists for that) and the
 * standby saw is below it, and was skipped. So every skip is remembered per
 * key (kb_ha_owe: the DELETED itself, or only the key), and the new leader
 * pays the table as soon as it leads (kb_ha_pay, on this thread, half a
 * renew period per round so the Lease is renewed on time; the workers go on
 * meanwhile: under the consumer rule the order does not matter): each
 * key's state as held here, through the redeliver hook, outside the ledger
 * (the ledger counts the change as done already; a repeat a sink refuses is
 * logged, not retried). Why not relist or audit
 * at a takeover instead: both compare the server with this replica's cache,
 * which is right; what is wrong is the old leader's output, which no replica
 * can read back from a file, MQTT or plain Kafka. The latest state per key is
 * the cheapest thing that makes every consumer right again. After the
 * takeover only a sink's committed checkpoint is skipped up to.
 *
 * Exactly-once across a takeover (a transactional Kafka sink, the same
 * transactional.id on both replicas): a standby must not initialise
 * transactions — that fences the leader's producer — so the sink waits for
 * the prepare callback, which runs after the Lease is ours and before the
 * first delivery: the sink initialises transactions (the broker fences the
 * old producer and aborts its open transaction), then the committed
 * checkpoint is read back and its resume point (an RV, like the published
 * marks) raises the marks. The workers test the marks before leadership, so
 * what the old leader committed after its last publication is skipped, not
 * delivered twice. Exact with one shard and one scope per informer: the
 * checkpoint's RV is the end of a prefix; what several shards committed past
 * a gap in that prefix is named by the old leader's seqs, so it is repeated.
 *
 * What is skipped, trusted and owed is decided in informer/hatable.h (no
 * threads, clocks or I/O: the simulation in tests/sim steps the same code);
 * this file holds it under ha->mtx and adds the Lease, the clock and the waits.
 *
 * Threads: the kb:ha thread does every request; workers call kb_ha_admit.
 */
#include "bridge/ha.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/strmap.h"
#include "common/time.h"
#include "informer/hatable.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_HA_MARGIN_NS (1 * KB_NS_PER_SEC)
#define KB_HA_ANNOTATION "kbridge.io/watermarks"
#define KB_HA_TOOK "kbridge.io/takeover" /* {"rv":"…","trusted":{"informer":"rv",…}}: kb_ha_took */
#define KB_HA_MAX_BODY (1u << 20)

/* One informer's published watermark as this replica holds it. */
typedef struct kb_ha_pub {
    char informer[128];
    kb_hamark_t m;     /* the mark, how far it is trusted, what a sink committed (informer/hatable.h) */
    int64_t above_ns;  /* monotonic: since when rv has been above what this replica saw (0: it is not) */
    bool warned;       /* rv was refused (logged and counted) */
    kb_owed_t owed;    /* keys whose latest change this replica skipped as a standby: paid at the next lead */
} kb_ha_pub_t;

struct kb_ha {
    kb_apiclient_t *api;
    kb_ha_hooks_t hooks;
    char ns[128], name[256], identity[128];
    int lease_s, renew_s, shard;
    pthread_t thread;
    bool started;
    _Atomic bool stop_thread;   /* the thread ends */
    _Atomic bool stopping;      /* shutdown began: a standby drops what it would wait for */
    _Atomic bool leader;
    _Atomic int64_t deadline_ns; /* CLOCK_MONOTONIC: deliver only before it */

    pthread_mutex_t mtx;        /* leaf: guards what follows */
    pthread_cond_t cv;          /* publication or leadership changed */
    kb_ha_pub_t pub[KB_HA_MAX_MARKS]; /* the leader's last published marks */
    size_t n_pub;
    uint64_t marks_refused;     /* published marks refused as above anything seen here */
    uint64_t blind_takeovers;   /* takeovers an informer's blind window reached above the trusted mark */
    bool blind_counted;         /* this takeover is counted in blind_takeovers */
    _Atomic uint64_t shared_rv; /* kb_ha_shared_rv */
    char holder[128];
    uint64_t transitions;

    /* the ha thread only */
    char seen_rv[64];           /* the Lease's resourceVersion last seen … */
    int64_t seen_ns;            /* … and when first seen (monotonic) */
    char acquire[40];           /* acquireTime of our own leadership */
    bool took_over;             /* leading since a takeover (this process's, or the one KB_HA_TOOK records) */
    char took_json[4096];       /* the KB_HA_TOOK annotation this leader writes ("" none): a restart re-arms it */
};

typedef struct kb_lease {
    char rv[64], holder[128], acquire[40];
    int duration;
    long transitions;
    char marks[4096];           /* the annotation's JSON, "" if none */
    char took[4096];            /* the KB_HA_TOOK annotation, "" if none */
} kb_lease_t;

static void kb_ha_expand_name(kb_ha_t *ha, const kb_config_t *cfg) {
    kb_buf_t b = KB_BUF_INIT;
    for (const char *p = cfg->ha_lease_name; *p;) {
        if (!strncmp(p, "{cluster}", 9)) {
            kb_buf_append_str(&b, cfg->cluster.name);
            p += 9;
        } else if (!strncmp(p, "{shard}", 7)) {
            kb_buf_appendf(&b, "%d", cfg->sharding_index);
            p += 7;
        } else {
            kb_buf_append(&b, p++, 1);
        }
    }
    snprintf(ha->name, sizeof(ha->name), "%s", b.len ? b.data : "");
    kb_buf_fini(&b);
}

static void kb_ha_namespace(kb_ha_t *ha, const kb_config_t *cfg) {
    snprintf(ha->ns, sizeof(ha->ns), "%s", "default");
    if (cfg->ha_lease_namespace[0]) {
        snprintf(ha->ns, sizeof(ha->ns), "%s", cfg->ha_lease_namespace);
        return;
    }
    const char *dir = getenv("KB_SA_DIR");
    char path[512];
    snprintf(path, sizeof(path), "%s/namespace", dir ? dir : "/var/run/secrets/kubernetes.io/serviceaccount");
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[128];
    if (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0])
            snprintf(ha->ns, sizeof(ha->ns), "%s", line);
    }
    fclose(f);
}

kb_ha_t *kb_ha_new(const kb_config_t *cfg, kb_apiclient_t *api, const kb_ha_hooks_t *hooks) {
    kb_ha_t *ha = kb_calloc(1, sizeof(*ha));
    ha->api = api;
    ha->hooks = *hooks;
    ha->lease_s = cfg->ha_lease_seconds;
    ha->renew_s = cfg->ha_renew_seconds;
    ha->shard = cfg->sharding_index;
    atomic_store(&ha->shared_rv, UINT64_MAX); /* a standby until the Lease is ours */
    snprintf(ha->identity, sizeof(ha->identity), "%s", cfg->ha_identity);
    kb_ha_expand_name(ha, cfg);
    kb_ha_namespace(ha, cfg);
    pthread_mutex_init(&ha->mtx, NULL);
    kb_cond_init_mono(&ha->cv);
    return ha;
}

/* ---- the Lease object -------------------------------------------------- */

static void kb_ha_path(const kb_ha_t *ha, bool named, kb_buf_t *out) {
    kb_buf_appendf(out, "/apis/coordination.k8s.io/v1/namespaces/%s/leases%s%s", ha->ns, named ? "/" : "",
                  named ? ha->name : "");
}

static void kb_lease_parse_marks(const char *text, kb_ha_mark_t *out, size_t *n) {
    *n = 0;
    json_t *o = json_loads(text, 0, NULL);
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (*n == KB_HA_MAX_MARKS || !json_is_string(v))
            continue;
        snprintf(out[*n].informer, sizeof(out[*n].informer), "%s", k);
        out[*n].rv = kb_rv_parse(json_string_value(v), strlen(json_string_value(v)));
        (*n)++;
    }
    json_decref(o);
}

static bool kb_lease_parse(const char *body, kb_lease_t *l) {
    memset(l, 0, sizeof(*l));
    json_t *o = json_loads(body, 0, NULL);
    if (!o)
        return false;
    const char *rv = json_string_value(json_object_get(json_object_get(o, "metadata"), "resourceVersion"));
    json_t *spec = json_object_get(o, "spec");
    const char *holder = json_string_value(json_object_get(spec, "holderIdentity"));
    const char *acquire = json_string_value(json_object_get(spec, "acquireTime"));
    json_t *ann = json_object_get(json_object_get(o, "metadata"), "annotations");
    const char *marks = json_string_value(json_object_get(ann, KB_HA_ANNOTATION));
    const char *took = json_string_value(json_object_get(ann, KB_HA_TOOK));
    snprintf(l->took, sizeof(l->took), "%s", took ? took : "");
    snprintf(l->rv, sizeof(l->rv), "%s", rv ? rv : "");
    snprintf(l->holder, sizeof(l->holder), "%s", holder ? holder : "");
    snprintf(l->acquire, sizeof(l->acquire), "%s", acquire ? acquire : "");
    snprintf(l->marks, sizeof(l->marks), "%s", marks ? marks : "");
    l->duration = (int)json_integer_value(json_object_get(spec, "leaseDurationSeconds"));
    l->transitions = (long)json_integer_value(json_object_get(spec, "leaseTransitions"));
    json_decref(o);
    return rv != NULL;
}

/* Our own watermarks as the annotation's JSON. */
static char *kb_ha_marks_json(kb_ha_t *ha) {
    kb_ha_mark_t m[KB_HA_MAX_MARKS];
    size_t n = ha->hooks.marks(ha->hooks.opaque, m, KB_HA_MAX_MARKS);
    json_t *o = json_object();
    for (size_t i = 0; i < n; i++) {
        char rv[24];
        snprintf(rv, sizeof(rv), "%llu", (unsigned long long)m[i].rv);
        json_object_set_new(o, m[i].informer, json_string(rv));
    }
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return s;
}

/* The Lease as we write it: holder (may be ""), the given marks, rv NULL to create. */
static char *kb_ha_lease_json(kb_ha_t *ha, const char *rv, const char *holder, const char *acquire,
                              long transitions, int duration, const char *marks) {
    char now[40];
    kb_format_rfc3339_us(kb_now_real_ns(), now, sizeof(now));
    json_t *meta = json_pack("{s:s, s:s, s:{s:s}}", "name", ha->name, "namespace", ha->ns, "annotations",
                             KB_HA_ANNOTATION, marks ? marks : "{}");
    if (ha->took_json[0])
        json_object_set_new(json_object_get(meta, "annotations"), KB_HA_TOOK, json_string(ha->took_json));
    if (rv)
        json_object_set_new(meta, "resourceVersion", json_string(rv));
    json_t *spec = json_pack("{s:s, s:i, s:s, s:s, s:I}", "holderIdentity", holder, "leaseDurationSeconds",
                             duration, "acquireTime", acquire[0] ? acquire : now, "renewTime", now,
                             "leaseTransitions", (json_int_t)transitions);
    json_t *o = json_pack("{s:s, s:s, s:o, s:o}", "apiVersion", "coordination.k8s.io/v1", "kind", "Lease",
                          "metadata", meta, "spec", spec);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* GET the Lease: 200 (parsed into *l), 404, or another status / 0 for a transport error. */
static long kb_ha_get(kb_ha_t *ha, kb_lease_t *l) {
    kb_buf_t path = KB_BUF_INIT, body = KB_BUF_INIT;
    kb_ha_path(ha, true, &path);
    kb_api_response_t resp;
    kb_apiclient_get(ha->api, path.data, NULL, NULL, &body, KB_HA_MAX_BODY, ha->renew_s, &ha->stop_thread, &resp);
    long status = resp.err == KB_OK ? resp.status : 0;
    if (status == 200 && !kb_lease_parse(body.len ? body.data : "", l))
        status = 0;
    if (status != 200 && status != 404)
        KB_WARN("ha", "lease %s/%s: GET failed (%s%ld %s)", ha->ns, ha->name, resp.err == KB_OK ? "HTTP " : "",
                resp.err == KB_OK ? resp.status : 0L, resp.err == KB_OK ? "" : resp.errmsg);
    kb_buf_fini(&path);
    kb_buf_fini(&body);
    return status;
}

/* Create (rv NULL) or update the Lease; the new resourceVersion into seen_rv. True on success. */
static bool kb_ha_write(kb_ha_t *ha, const char *rv, const char *holder, long transitions, int duration,
                        const char *marks) {
    char *json = kb_ha_lease_json(ha, rv, holder, ha->acquire, transitions, duration, marks);
    kb_buf_t path = KB_BUF_INIT, body = KB_BUF_INIT;
    kb_ha_path(ha, rv != NULL, &path);
    kb_api_response_t resp;
    kb_apiclient_send(ha->api, rv ? "PUT" : "POST", path.data, json, strlen(json), &body, KB_HA_MAX_BODY,
                      ha->renew_s, NULL, &resp);
    bool ok = resp.err == KB_OK && (resp.status == 200 || resp.status == 201);
    kb_lease_t l;
    if (ok && kb_lease_parse(body.data, &l)) {
        snprintf(ha->seen_rv, sizeof(ha->seen_rv), "%s", l.rv);
        if (!ha->acquire[0])
            snprintf(ha->acquire, sizeof(ha->acquire), "%s", l.acquire);
    }
    else if (resp.err != KB_OK || resp.status != 409)
        KB_WARN("ha", "lease %s/%s: %s failed (%s%ld %s)", ha->ns, ha->name, rv ? "update" : "create",
                resp.err == KB_OK ? "HTTP " : "", resp.err == KB_OK ? resp.status : 0L,
                resp.err == KB_OK ? "" : resp.errmsg);
    free(json);
    kb_buf_fini(&path);
    kb_buf_fini(&body);
    return ok;
}

/* ---- leadership -------------------------------------------------------- */

/* informer's entry, or NULL. ha->mtx held. */
static kb_ha_pub_t *kb_ha_pub_find(kb_ha_t *ha, const char *informer) {
    for (size_t i = 0; i < ha->n_pub; i++)
        if (!strcmp(ha->pub[i].informer, informer))
            return &ha->pub[i];
    return NULL;
}

/* informer's entry (created; NULL when the table is full). ha->mtx held. */
static kb_ha_pub_t *kb_ha_pub_get(kb_ha_t *ha, const char *informer) {
    kb_ha_pub_t *found = kb_ha_pub_find(ha, informer);
    if (found)
        return found;
    if (ha->n_pub == KB_HA_MAX_MARKS)
        return NULL;
    kb_ha_pub_t *p = &ha->pub[ha->n_pub++];
    memset(p, 0, sizeof(*p));
    snprintf(p->informer, sizeof(p->informer), "%s", informer);
    return p;
}

static void kb_ha_set_holder(kb_ha_t *ha, const char *holder, const char *marks) {
    kb_ha_mark_t m[KB_HA_MAX_MARKS];
    size_t n = 0;
    if (marks)
        kb_lease_parse_marks(marks, m, &n);
    pthread_mutex_lock(&ha->mtx);
    snprintf(ha->holder, sizeof(ha->holder), "%s", holder);
    for (size_t i = 0; i < n; i++) {
        kb_ha_pub_t *p = kb_ha_pub_get(ha, m[i].informer);
        if (p && p->m.rv != m[i].rv) {
            p->m.rv = m[i].rv;
            p->warned = false;
        }
    }
    pthread_cond_broadcast(&ha->cv);
    pthread_mutex_unlock(&ha->mtx);
}

/* Published marks against what this replica has seen (the seen hook): a mark
 * it has reached is trusted; one still above it after a whole lease period
 * (the leader's watch cannot be that far ahead of ours; a Lease written by
 * someone else can), or at all when taking over, is refused — logged, counted,
 * and never skipped up to. */
static void kb_ha_vet(kb_ha_t *ha, bool takeover) {
    kb_ha_mark_t seen[KB_HA_MAX_MARKS], bad[KB_HA_MAX_MARKS];
    size_t n_seen = ha->hooks.seen ? ha->hooks.seen(ha->hooks.opaque, seen, KB_HA_MAX_MARKS) : 0, n_bad = 0;
    uint64_t bad_seen[KB_HA_MAX_MARKS];
    int64_t now = kb_now_mono_ns();
    pthread_mutex_lock(&ha->mtx);
    for (size_t i = 0; i < ha->n_pub; i++) {
        kb_ha_pub_t *p = &ha->pub[i];
        uint64_t s = 0;
        for (size_t j = 0; j < n_seen; j++)
            if (!strcmp(seen[j].informer, p->informer))
                s = seen[j].rv;
        if (!kb_hamark_above(&p->m, s)) {
            p->above_ns = 0;
            continue;
        }
        if (!p->above_ns)
            p->above_ns = now;
        uint64_t rv = p->m.rv;
        if (takeover)
            kb_hamark_takeover(&p->m, s); /* refused: ignored from now on */
        if (p->warned || (!takeover && now - p->above_ns < ha->lease_s * KB_NS_PER_SEC))
            continue;
        p->warned = true;
        ha->marks_refused++;
        bad[n_bad] = (kb_ha_mark_t){.rv = rv};
        snprintf(bad[n_bad].informer, sizeof(bad[n_bad].informer), "%s", p->informer);
        bad_seen[n_bad++] = s;
    }
    pthread_cond_broadcast(&ha->cv);
    pthread_mutex_unlock(&ha->mtx);
    for (size_t i = 0; i < n_bad; i++)
        KB_WARN("ha", "shard %d: lease %s/%s: informer=%s published watermark %llu refused: above resourceVersion "
                "%llu, the newest this replica has seen; not trusted (changes above %llu are delivered, not skipped)",
                ha->shard, ha->ns, ha->name, bad[i].informer, (unsigned long long)bad[i].rv,
                (unsigned long long)bad_seen[i], (unsigned long long)bad_seen[i]);
}

/* About to lead: what the sinks committed raises the published marks (the
 * workers skip up to them, as the leader's acknowledgements) — trusted: it is
 * the sink's own record. */
static void kb_ha_prepare(kb_ha_t *ha) {
    kb_ha_mark_t m[KB_HA_MAX_MARKS];
    size_t n = ha->hooks.prepare ? ha->hooks.prepare(ha->hooks.opaque, m, KB_HA_MAX_MARKS) : 0;
    pthread_mutex_lock(&ha->mtx);
    for (size_t i = 0; i < n; i++) {
        kb_ha_pub_t *p = kb_ha_pub_get(ha, m[i].informer);
        if (p)
            kb_hamark_commit(&p->m, m[i].rv);
    }
    pthread_mutex_unlock(&ha->mtx);
}

static void kb_ha_pay(kb_ha_t *ha, int64_t t0);

/* Taking over: each informer learns the mark it trusts from the old leader
 * (kb_informer_ha_took), and from then on weighs every window of RVs it
 * lists without watching — the newest before the takeover, each after it —
 * against what the old leader may have delivered without publishing it. An
 * object created and deleted in such a window that the old leader delivered
 * gets no DELETED: no server state remains and no replica knew it. Nothing
 * here can close that; the informer logs each such window as it completes,
 * and the takeover is counted once (at the renew after it), exactly when it
 * can have happened (docs/cluster.md, section 9). Thread: ha, no lock held
 * while calling out. */
static void kb_ha_took(kb_ha_t *ha, uint64_t took_rv, const kb_ha_mark_t *m, size_t n, bool now) {
    json_t *trusted = json_object();
    for (size_t i = 0; i < n; i++) {
        char rv[24];
        snprintf(rv, sizeof(rv), "%llu", (unsigned long long)m[i].rv);
        json_object_set_new(trusted, m[i].informer, json_string(rv));
    }
    char rv[24];
    snprintf(rv, sizeof(rv), "%llu", (unsigned long long)took_rv);
    json_t *o = json_pack("{s:s, s:o}", "rv", rv, "trusted", trusted);
    char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    snprintf(ha->took_json, sizeof(ha->took_json), "%s", text && strlen(text) < sizeof(ha->took_json) ? text : "");
    free(text);
    pthread_mutex_lock(&ha->mtx);
    ha->took_over = true;
    ha->blind_counted = false;
    pthread_mutex_unlock(&ha->mtx);
    if (ha->hooks.took)
        ha->hooks.took(ha->hooks.opaque, m, n, took_rv, now);
}

/* Taking over now: the marks as trusted, at our write's RV. */
static void kb_ha_take(kb_ha_t *ha, uint64_t took_rv) {
    kb_ha_mark_t m[KB_HA_MAX_MARKS];
    size_t n = 0;
    pthread_mutex_lock(&ha->mtx);
    for (size_t i = 0; i < ha->n_pub && n < KB_HA_MAX_MARKS; i++, n++) {
        snprintf(m[n].informer, sizeof(m[n].informer), "%s", ha->pub[i].informer);
        m[n].rv = ha->pub[i].m.trusted;
    }
    pthread_mutex_unlock(&ha->mtx);
    kb_ha_took(ha, took_rv, m, n, true);
}

/* Leading again after a restart: the takeover the Lease records (KB_HA_TOOK,
 * written by our previous process) is re-armed, so what this process lists
 * unwatched is weighed against it too. */
static void kb_ha_rearm(kb_ha_t *ha, const char *took) {
    json_t *o = json_loads(took, 0, NULL);
    const char *rv = json_string_value(json_object_get(o, "rv"));
    json_t *trusted = json_object_get(o, "trusted");
    kb_ha_mark_t m[KB_HA_MAX_MARKS];
    size_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(trusted, key, v) {
        if (n == KB_HA_MAX_MARKS || !json_string_value(v))
            break;
        snprintf(m[n].informer, sizeof(m[n].informer), "%s", key);
        m[n].rv = kb_rv_parse(json_string_value(v), strlen(json_string_value(v)));
        n++;
    }
    uint64_t took_rv = rv ? kb_rv_parse(rv, strlen(rv)) : 0;
    json_decref(o);
    if (took_rv)
        kb_ha_took(ha, took_rv, m, n, false);
}

/* Counts the takeover once an informer reports a blind window (it logs each
 * one itself, as it completes: kb_informer_ha_took). Thread: ha. */
static void kb_ha_blind_check(kb_ha_t *ha) {
    kb_ha_window_t w[KB_HA_MAX_MARKS];
    size_t n = ha->hooks.blind ? ha->hooks.blind(ha->hooks.opaque, w, KB_HA_MAX_MARKS) : 0;
    pthread_mutex_lock(&ha->mtx);
    if (n && !ha->blind_counted)
        ha->blind_takeovers++;
    ha->blind_counted = ha->blind_counted || n;
    pthread_mutex_unlock(&ha->mtx);
}

/* A write that started at t0 succeeded: deliver until its deadline. taken: the
 * marks taken over from the previous leader (NULL: renewed our own); rearm:
 * the takeover our own Lease records, as read before the write (NULL: none). */
static void kb_ha_lead(kb_ha_t *ha, int64_t t0, const char *taken, const char *rearm) {
    if (!atomic_load(&ha->leader)) {
        kb_ha_vet(ha, true);
        kb_ha_prepare(ha);
        uint64_t rv = kb_rv_parse(ha->seen_rv, strlen(ha->seen_rv)); /* our write's: kb_ha_write */
        atomic_store(&ha->shared_rv, rv ? rv : UINT64_MAX);
        if (taken)
            kb_ha_take(ha, rv ? rv : UINT64_MAX);
        else if (rearm && rearm[0])
            kb_ha_rearm(ha, rearm);
    }
    if (ha->took_over)
        kb_ha_blind_check(ha);
    atomic_store(&ha->deadline_ns, t0 + ha->lease_s * KB_NS_PER_SEC - KB_HA_MARGIN_NS);
    if (!atomic_exchange(&ha->leader, true)) {
        pthread_mutex_lock(&ha->mtx);
        ha->transitions++;
        pthread_mutex_unlock(&ha->mtx);
        KB_INFO("ha", "shard %d: leading (lease %s/%s, identity %s); watermarks taken over: %s", ha->shard, ha->ns,
                ha->name, ha->identity, taken && taken[0] ? taken : "(none: our own journal)");
    }
    kb_ha_set_holder(ha, ha->identity, NULL);
    kb_ha_pay(ha, t0);
}

static void kb_ha_follow(kb_ha_t *ha, const kb_lease_t *l) {
    if (atomic_exchange(&ha->leader, false)) {
        atomic_store(&ha->shared_rv, UINT64_MAX);
        ha->took_over = false;
        ha->took_json[0] = '\0';
        pthread_mutex_lock(&ha->mtx);
        ha->transitions++;
        pthread_mutex_unlock(&ha->mtx);
        KB_WARN("ha", "shard %d: no longer leading (lease %s/%s now held by \"%s\"); delivering nothing", ha->shard,
                ha->ns, ha->name, l->holder);
    }
    kb_ha_set_holder(ha, l->holder, l->marks[0] ? l->marks : NULL);
    kb_ha_vet(ha, false);
}

/* One round; returns when to run the next (monotonic ns). */
static int64_t kb_ha_round(kb_ha_t *ha) {
    int64_t t0 = kb_now_mono_ns(), next = t0 + ha->renew_s * KB_NS_PER_SEC;
    kb_lease_t l;
    long st = kb_ha_get(ha, &l);
    if (st == 404) {
        ha->acquire[0] = '\0';
        char *marks = kb_ha_marks_json(ha);
        if (kb_ha_write(ha, NULL, ha->identity, 0, ha->lease_s, marks))
            kb_ha_lead(ha, t0, NULL, NULL);
        free(marks);
        return next;
    }
    if (st != 200)
        return t0 + KB_NS_PER_SEC; /* the deadline fences us meanwhile */
    if (!strcmp(l.holder, ha->identity)) {
        bool rearm = !atomic_load(&ha->leader) && l.took[0] && !ha->took_json[0];
        if (!atomic_load(&ha->leader))
            snprintf(ha->acquire, sizeof(ha->acquire), "%s", l.acquire);
        if (rearm) /* our previous process took over: keep the record (kb_ha_rearm) */
            snprintf(ha->took_json, sizeof(ha->took_json), "%s", l.took);
        char *marks = kb_ha_marks_json(ha);
        if (kb_ha_write(ha, l.rv, ha->identity, l.transitions, ha->lease_s, marks))
            kb_ha_lead(ha, t0, NULL, rearm ? l.took : NULL);
        free(marks);
        return next;
    }
    kb_ha_follow(ha, &l);
    if (strcmp(l.rv, ha->seen_rv) != 0) {
        snprintf(ha->seen_rv, sizeof(ha->seen_rv), "%s", l.rv);
        ha->seen_ns = t0;
    }
    int64_t expiry = ha->seen_ns + (int64_t)(l.duration > 0 ? l.duration : ha->lease_s) * KB_NS_PER_SEC;
    if (l.holder[0] && t0 < expiry)
        return expiry < next ? expiry + 10 * KB_NS_PER_MS : next;
    /* Released, or not renewed for its whole duration: take it, keeping the
     * old leader's published watermarks until ours replace them. */
    ha->acquire[0] = '\0';
    if (kb_ha_write(ha, l.rv, ha->identity, l.transitions + 1, ha->lease_s, l.marks[0] ? l.marks : "{}"))
        kb_ha_lead(ha, t0, l.marks, NULL);
    return t0 + 200 * KB_NS_PER_MS; /* publish our own marks soon */
}

static void *kb_ha_main(void *arg) {
    kb_ha_t *ha = arg;
    kb_thread_set_name("kb:ha");
    while (!atomic_load(&ha->stop_thread)) {
        int64_t next = kb_ha_round(ha);
        int64_t wait = (next - kb_now_mono_ns()) / KB_NS_PER_MS;
        kb_sleep_ms_interruptible(wait > 0 ? wait : 0, &ha->stop_thread);
    }
    return NULL;
}

void kb_ha_start(kb_ha_t *ha) {
    KB_INFO("ha", "shard %d: standby until leading lease %s/%s (identity %s, lease %d s, renew %d s)", ha->shard,
            ha->ns, ha->name, ha->identity, ha->lease_s, ha->renew_s);
    if (pthread_create(&ha->thread, NULL, kb_ha_main, ha) == 0)
        ha->started = true;
    else
        KB_ERROR("ha", "cannot start the lease thread: this replica stays a standby");
}

void kb_ha_begin_stop(kb_ha_t *ha) {
    atomic_store(&ha->stopping, true);
    pthread_mutex_lock(&ha->mtx);
    pthread_cond_broadcast(&ha->cv);
    pthread_mutex_unlock(&ha->mtx);
}

void kb_ha_stop(kb_ha_t *ha) {
    kb_ha_begin_stop(ha);
    atomic_store(&ha->stop_thread, true);
    if (ha->started)
        pthread_join(ha->thread, NULL);
    ha->started = false;
    if (!atomic_exchange(&ha->leader, false))
        return;
    /* Release: the last watermarks, no holder, so the standby need not wait out the lease. */
    kb_lease_t l;
    atomic_store(&ha->stop_thread, false);
    if (kb_ha_get(ha, &l) == 200 && !strcmp(l.holder, ha->identity)) {
        char *marks = kb_ha_marks_json(ha);
        if (kb_ha_write(ha, l.rv, "", l.transitions, 1, marks))
            KB_INFO("ha", "shard %d: lease %s/%s released with watermarks %s", ha->shard, ha->ns, ha->name, marks);
        free(marks);
    }
    atomic_store(&ha->stop_thread, true);
}

void kb_ha_destroy(kb_ha_t *ha) {
    if (!ha)
        return;
    KB_ASSERT(!ha->started);
    for (size_t i = 0; i < ha->n_pub; i++)
        kb_owed_fini(&ha->pub[i].owed);
    pthread_mutex_destroy(&ha->mtx);
    pthread_cond_destroy(&ha->cv);
    free(ha);
}

/* ---- the gate ---------------------------------------------------------- */

bool kb_ha_leads(kb_ha_t *ha) {
    return atomic_load_explicit(&ha->leader, memory_order_acquire) &&
           kb_now_mono_ns() < atomic_load_explicit(&ha->deadline_ns, memory_order_acquire);
}

/* Deliver again the keys of one owed table (and free it) until until_ns
 * (monotonic) or leadership ends; what is left is returned (empty: all
 * paid). *sent counts what a sink took. Thread: ha, no lock held. */
static kb_owed_t kb_ha_pay_one(kb_ha_t *ha, const char *informer, kb_owed_t *owed, int64_t until_ns,
                               size_t *sent) {
    kb_owed_t rest = {NULL, 0};
    size_t pos = 0, len;
    const char *key;
    kb_event_t *deleted;
    bool stop = false;
    while (kb_owed_next(owed, &pos, &key, &len, &deleted)) {
        stop = stop || kb_now_mono_ns() >= until_ns || !kb_ha_leads(ha);
        if (stop)
            kb_owed_put(&rest, key, len, deleted, true);
        else if (ha->hooks.redeliver && ha->hooks.redeliver(ha->hooks.opaque, informer, key, len, deleted))
            (*sent)++;
        kb_event_unref(deleted);
    }
    kb_owed_fini(owed);
    return rest;
}

/* Put back what was not paid (a key owed again meanwhile keeps its newer entry). ha->mtx held. */
static void kb_ha_owed_restore(kb_ha_pub_t *p, kb_owed_t *rest) {
    size_t pos = 0, len;
    const char *key;
    kb_event_t *deleted;
    while (kb_owed_next(rest, &pos, &key, &len, &deleted)) {
        kb_owed_put(&p->owed, key, len, deleted, false);
        kb_event_unref(deleted);
    }
    kb_owed_fini(rest);
}

/* Leading: the old leader's watermark covers what its own watch saw, not
 * what it missed, so every key whose latest change this replica skipped is
 * delivered again in the state held here (an exact repeat where the old
 * leader had it) — for up to half a renew period per round, so the Lease is
 * renewed on time however much is owed. Thread: ha; no lock held while
 * delivering. */
static void kb_ha_pay(kb_ha_t *ha, int64_t t0) {
    int64_t until = t0 + ha->renew_s * KB_NS_PER_SEC / 2;
    pthread_mutex_lock(&ha->mtx);
    for (size_t i = 0; i < ha->n_pub; i++) {
        kb_ha_pub_t *p = &ha->pub[i];
        if (!p->owed.keys && !p->owed.dropped)
            continue;
        char informer[sizeof(p->informer)];
        snprintf(informer, sizeof(informer), "%s", p->informer);
        kb_owed_t owed = kb_owed_take(&p->owed);
        size_t n = kb_owed_count(&owed), sent = 0;
        uint64_t dropped = owed.dropped;
        pthread_mutex_unlock(&ha->mtx);
        kb_owed_t rest = kb_ha_pay_one(ha, informer, &owed, until, &sent);
        size_t left = kb_owed_count(&rest);
        KB_INFO("ha", "shard %d: informer=%s: %zu key(s) whose latest change was skipped as a standby "
                "delivered again in their latest state (%zu owed, %zu left for the next round, %llu not "
                "remembered: the table was full)", ha->shard, informer, sent, n, left,
                (unsigned long long)dropped);
        pthread_mutex_lock(&ha->mtx);
        kb_ha_owed_restore(&ha->pub[i], &rest); /* entries are never removed: i is still informer's */
    }
    pthread_mutex_unlock(&ha->mtx);
}

kb_ha_admit_t kb_ha_admit(kb_ha_t *ha, const char *informer, const kb_event_t *ev, uint64_t tracked_rv,
                          const _Atomic bool *abandon) {
    /* What the leader must have acknowledged for this change to be known. */
    uint64_t need = kb_hatable_need(ev, tracked_rv);
    kb_ha_admit_t r = KB_HA_DROP;
    pthread_mutex_lock(&ha->mtx);
    for (;;) {
        /* Known first, even to a new leader: what the old one published or
         * a sink committed is not delivered again. */
        bool leads = kb_ha_leads(ha);
        kb_ha_pub_t *p = kb_ha_pub_find(ha, informer);
        if (p && kb_hamark_skips(&p->m, need, tracked_rv, leads)) {
            if (!leads)
                kb_owed_add(&p->owed, (kb_event_t *)ev);
            r = KB_HA_SKIP;
            break;
        }
        if (leads) {
            r = KB_HA_DELIVER;
            break;
        }
        if (atomic_load(&ha->stopping) || atomic_load(abandon))
            break;
        struct timespec until = kb_deadline_mono(100);
        pthread_cond_timedwait(&ha->cv, &ha->mtx, &until);
    }
    pthread_mutex_unlock(&ha->mtx);
    return r;
}

void kb_ha_status(kb_ha_t *ha, kb_ha_status_t *st) {
    memset(st, 0, sizeof(*st));
    st->leader = kb_ha_leads(ha);
    pthread_mutex_lock(&ha->mtx);
    snprintf(st->holder, sizeof(st->holder), "%s", ha->holder);
    st->transitions = ha->transitions;
    st->marks_refused = ha->marks_refused;
    st->blind_takeovers = ha->blind_takeovers;
    pthread_mutex_unlock(&ha->mtx);
    snprintf(st->identity, sizeof(st->identity), "%s", ha->identity);
    snprintf(st->lease, sizeof(st->lease), "%s/%s", ha->ns, ha->name);
}

const _Atomic uint64_t *kb_ha_shared_rv(kb_ha_t *ha) {
    return &ha->shared_rv;
}

int kb_ha_shard(const kb_ha_t *ha) {
    return ha->shard;
}
