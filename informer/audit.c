/* informer/audit.c — the drift audit (zombie guard).
 *
 * Design note. A watch can miss an event without anyone noticing: a proxy
 * drops a chunk, a server or client bug skips one. The only defence is to
 * compare. Every informers[].audit_seconds this thread lists the resource
 * again — metadata only (PartialObjectMetadataList: a few hundred bytes an
 * object), paged, a consistent read — and compares uid and resourceVersion
 * per key with the cache. Servers that ignore the metadata form answer with
 * full objects; the items are read the same way, so that fallback costs bytes,
 * not correctness (kubesim is such a server).
 *
 * Why a thread of its own and not the reflector between watches: a watch
 * lasts five to ten minutes and must not be cut for an audit (cutting it is
 * what loses events in the first place), and an audit of a large resource
 * takes seconds the watch must keep flowing through. The audit only reads
 * the cache under ingest_mtx and repairs through the same ingest steps, the
 * same gate and the same batches as the watch, so order per key holds.
 *
 * The race rule. The audit list is the server's state at its RV A; the cache
 * is exactly the state at the watch's resume point W (the reflector moves W
 * and the cache together under ingest_mtx, which the comparison holds). The
 * watch keeps running, so W moves during the audit. The audit first waits
 * (a few seconds) for W ≥ A, then, under ingest_mtx:
 *   - a listed key at RV s > W: the watch has not got there yet — not drift;
 *   - a listed key the cache has at RV c: c ≥ s (same uid) agrees or is newer
 *     (a change after A, told by the watch) — not drift; c < s ≤ W means the
 *     watch went past s without telling the change — stale;
 *   - a listed key the cache lacks, s ≤ W: drift (unknown) unless the ledger
 *     remembers a delete after A (a grave g > A: the watch deleted it after
 *     the list). A grave s ≤ g ≤ A cannot be in one history — the object the
 *     list shows at s would have been gone by A — so it is a delete of a
 *     history the server went back from (etcd restored): the repair forgets
 *     it (if it is still there) before the read-back meets the gate, which
 *     would refuse the object again;
 *   - a cached key the list lacks (only when W ≥ A): at c > A it was created
 *     after the list — not drift; at c ≤ A it did not exist at A though the
 *     cache, exact up to W ≥ A, says it did — missing (a lost delete).
 * Only where the cache is older than the audit is anything done. Repairs
 * read the object back (GET) and pass it through the watch's gate, so a
 * change the watch delivers meanwhile wins; a delete is staged only if the
 * cached entry is still the one compared. If more than audit_relist_ratio of
 * the objects drifted, the reflector is asked to relist instead (its next
 * frame ends the watch; the relist diffs everything as after a 410).
 *
 * Cost: one metadata list per period per watched scope, plus a GET per
 * stale or unknown key.
 */
#include "informer/audit.h"

#include "common/alloc.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/time.h"
#include "informer/indexer.h"
#include "informer/informer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_AUDIT_ACCEPT "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
/* At most, for the watch to reach the list's RV: a quiet watch moves only by
 * bookmarks, which a kube-apiserver sends about once a minute. */
#define KB_AUDIT_WAIT_MS 90000

static const char *const kb_audit_kind_names[KB_AUDIT_KINDS] = {"missing", "stale", "unknown"};
_Static_assert(sizeof(((kb_informer_stats_t *)0)->audit_drift) == KB_AUDIT_KINDS * sizeof(uint64_t),
               "kb_informer_stats_t.audit_drift has one slot per kb_audit_kind_t");

const char *kb_audit_kind_name(kb_audit_kind_t k) {
    KB_ASSERT(k < KB_AUDIT_KINDS);
    return kb_audit_kind_names[k];
}

/* What the audit list said of one key. */
typedef struct kb_audit_item {
    char *ns, *name, *uid;
    char rv[KB_RV_MAX];
} kb_audit_item_t;

/* One drift found, to repair with no lock held. */
typedef struct kb_audit_fix {
    kb_audit_kind_t kind;
    char *key;
    const kb_audit_item_t *item; /* NULL for missing */
    char cached_rv[KB_RV_MAX];   /* "" for unknown */
    uint64_t stale_grave;        /* unknown: the grave the list contradicts, forgotten by the repair (0: none) */
} kb_audit_fix_t;

typedef struct kb_audit_run {
    kb_strmap_t *items;          /* key → kb_audit_item_t */
    char list_rv[KB_RV_MAX];
    kb_audit_fix_t *fixes;
    size_t n_fixes, cap_fixes;
    size_t cached;               /* cache entries of the scope */
} kb_audit_run_t;

static void kb_audit_run_fini(kb_audit_run_t *a) {
    size_t pos = 0;
    void *v;
    while (a->items && kb_strmap_next(a->items, &pos, NULL, NULL, &v)) {
        kb_audit_item_t *it = v;
        free(it->ns);
        free(it->name);
        free(it->uid);
        free(it);
    }
    kb_strmap_destroy(a->items);
    for (size_t i = 0; i < a->n_fixes; i++)
        free(a->fixes[i].key);
    free(a->fixes);
    memset(a, 0, sizeof(*a));
}

/* Remember one listed object (a full one or its metadata). */
static void kb_audit_add_item(kb_reflector_t *r, kb_audit_run_t *a, const char *obj, size_t len, kb_buf_t *scratch) {
    kb_informer_t *inf = r->inf;
    kb_objmeta_t m;
    char why[256];
    kb_buf_reset(scratch);
    if (kb_decode_object(inf->tf, obj, len, NULL, NULL, scratch, &m, why, sizeof(why)) != KB_OK ||
        m.rv.len >= KB_RV_MAX)
        return; /* the watch and the list count and log such objects */
    const char *d = scratch->data;
    char key[512];
    int n = m.ns.len ? snprintf(key, sizeof(key), "%.*s/%.*s", (int)m.ns.len, d + m.ns.off, (int)m.name.len,
                                d + m.name.off)
                     : snprintf(key, sizeof(key), "%.*s", (int)m.name.len, d + m.name.off);
    if (n <= 0 || (size_t)n >= sizeof(key))
        return;
    uint64_t hash = kb_fnv1a64(key, (size_t)n);
    if (!kb_inf__ours(inf, hash, d + m.uid.off, m.uid.len, d + m.ns.off, m.ns.len) || kb_strmap_get(a->items, key, (size_t)n, hash))
        return;
    kb_audit_item_t *it = kb_calloc(1, sizeof(*it));
    it->ns = kb_strndup(d + m.ns.off, m.ns.len);
    it->name = kb_strndup(d + m.name.off, m.name.len);
    it->uid = kb_strndup(d + m.uid.off, m.uid.len);
    memcpy(it->rv, d + m.rv.off, m.rv.len);
    it->rv[m.rv.len] = '\0';
    kb_strmap_put(a->items, key, (size_t)n, hash, it);
}

/* The audit list: every page, metadata only where the server can. */
static kb_err_t kb_audit_list(kb_reflector_t *r, kb_audit_run_t *a) {
    kb_informer_t *inf = r->inf;
    kb_buf_t q = KB_BUF_INIT, path = KB_BUF_INIT, body = KB_BUF_INIT, cont = KB_BUF_INIT, scratch = KB_BUF_INIT;
    kb_err_t err = KB_OK;
    a->items = kb_strmap_new(1024);
    for (size_t pages = 0;; pages++) {
        kb_buf_reset(&q);
        kb_buf_reset(&path);
        kb_buf_reset(&body);
        kb_inf__list_path(r, inf->conf->page_size, cont.data, &q, &path);
        kb_api_response_t resp;
        kb_apiclient_get_as(inf->api, KB_AUDIT_ACCEPT, path.data, NULL, NULL, &body, KB_LIST_MAX_BODY, 120,
                            &inf->stop, &resp);
        if (atomic_load(&inf->stop)) {
            err = KB_ERR_STOPPED;
            goto out;
        }
        if (resp.err != KB_OK || resp.status != 200) {
            KB_WARN("audit", "informer=%s audit list %s: %s HTTP %ld; trying again next period", inf->conf->name,
                    path.data, resp.err != KB_OK ? resp.errmsg : "", resp.status);
            err = resp.err != KB_OK ? resp.err : kb_api_status_err(resp.status);
            goto out;
        }
        kb_list_page_t page;
        memset(&page, 0, sizeof(page));
        char why[256];
        if (kb_decode_list(body.data, body.len, &page, why, sizeof(why)) != KB_OK || page.rv.len >= KB_RV_MAX) {
            KB_WARN("audit", "informer=%s audit list %s does not parse: %s", inf->conf->name, path.data, why);
            kb_list_page_fini(&page);
            err = KB_ERR_PARSE;
            goto out;
        }
        if (pages == 0) {
            snprintf(a->list_rv, sizeof(a->list_rv), "%.*s", (int)page.rv.len, body.data + page.rv.off);
            KB_DEBUG("audit", "informer=%s audit list at rv=%s answered as %.*s%s", inf->conf->name, a->list_rv,
                     (int)page.kind.len, body.data + page.kind.off,
                     page.kind.len == 25 && !memcmp(body.data + page.kind.off, "PartialObjectMetadataList", 25)
                         ? " (metadata only)" : " (full objects: the server ignores the metadata form)");
        }
        for (size_t i = 0; i < page.n_items; i++)
            kb_audit_add_item(r, a, body.data + page.items[i].off, page.items[i].len, &scratch);
        kb_buf_reset(&cont);
        if (page.cont.len)
            kb_buf_append(&cont, body.data + page.cont.off, page.cont.len);
        kb_list_page_fini(&page);
        if (!cont.len)
            break;
    }
out:
    kb_buf_fini(&q);
    kb_buf_fini(&path);
    kb_buf_fini(&body);
    kb_buf_fini(&cont);
    kb_buf_fini(&scratch);
    return err;
}

static uint64_t kb_audit_refl_rv(kb_reflector_t *r) {
    pthread_mutex_lock(&r->rv_mtx);
    uint64_t v = kb_rv_parse(r->rv, strlen(r->rv));
    pthread_mutex_unlock(&r->rv_mtx);
    return v;
}

/* Let the watch reach the list's RV (a bookmark or an event moves it), for
 * at most half the period (and KB_AUDIT_WAIT_MS). If it does not, this round
 * compares only what the rules allow below the watch's RV (no missing keys). */
static void kb_audit_wait_watch(kb_reflector_t *r, uint64_t list_rv) {
    int64_t bound = (int64_t)r->inf->conf->audit_seconds * 500;
    bound = bound > KB_AUDIT_WAIT_MS ? KB_AUDIT_WAIT_MS : bound < 1000 ? 1000 : bound;
    for (int64_t waited = 0; waited < bound && !atomic_load(&r->inf->stop); waited += 100) {
        if (kb_audit_refl_rv(r) >= list_rv)
            return;
        kb_sleep_ms_interruptible(100, &r->inf->stop);
    }
    KB_INFO("audit", "informer=%s the watch is still below the audit list's rv=%llu; deletes are checked next "
            "period", r->inf->conf->name, (unsigned long long)list_rv);
}

static kb_audit_fix_t *kb_audit_add_fix(kb_audit_run_t *a, kb_audit_kind_t kind, const char *key, size_t key_len,
                                        const kb_audit_item_t *item, const char *cached_rv, size_t cached_rv_len) {
    if (a->n_fixes == a->cap_fixes) {
        a->cap_fixes = a->cap_fixes ? a->cap_fixes * 2 : 16;
        a->fixes = kb_realloc(a->fixes, a->cap_fixes * sizeof(*a->fixes));
    }
    kb_audit_fix_t *f = &a->fixes[a->n_fixes++];
    f->kind = kind;
    f->key = kb_strndup(key, key_len);
    f->item = item;
    snprintf(f->cached_rv, sizeof(f->cached_rv), "%.*s", (int)cached_rv_len, cached_rv ? cached_rv : "");
    f->stale_grave = 0;
    return f;
}

/* A listed key against the cache (the rules of the design note); audit_rv:
 * the audit list's RV (0: not decimal). */
static void kb_audit_check_item(kb_informer_t *inf, kb_audit_run_t *a, const char *key, size_t key_len,
                                const kb_audit_item_t *it, uint64_t w, uint64_t audit_rv) {
    uint64_t s = kb_rv_parse(it->rv, strlen(it->rv)), hash = kb_fnv1a64(key, key_len);
    if (!s || s > w)
        return; /* not reached by the watch yet (or an RV we cannot order) */
    kb_event_t *c = kb_indexer_get(inf->idx, key, key_len, hash);
    if (!c) {
        uint64_t grave = kb_ledger_grave(inf->ledger, key, key_len, hash);
        if (grave >= s && (!audit_rv || grave > audit_rv))
            return; /* deleted after the audit list: the watch told it */
        kb_audit_add_fix(a, KB_AUDIT_UNKNOWN, key, key_len, it, NULL, 0)->stale_grave = grave >= s ? grave : 0;
        return;
    }
    bool same_uid = c->uid_len == strlen(it->uid) && !memcmp(c->uid, it->uid, c->uid_len);
    uint64_t cv = kb_rv_parse(c->rv, c->rv_len);
    if (cv < s || (!same_uid && cv == s))
        kb_audit_add_fix(a, KB_AUDIT_STALE, key, key_len, it, c->rv, c->rv_len);
    kb_event_unref(c);
}

/* Compare under ingest_mtx, so the cache and the watch's RV are one cut. */
static void kb_audit_compare(kb_reflector_t *r, kb_audit_run_t *a) {
    kb_informer_t *inf = r->inf;
    uint64_t audit_rv = kb_rv_parse(a->list_rv, strlen(a->list_rv));
    pthread_mutex_lock(&inf->ingest_mtx);
    uint64_t w = kb_audit_refl_rv(r);
    size_t pos = 0, key_len;
    const char *key;
    void *v;
    while (kb_strmap_next(a->items, &pos, &key, &key_len, &v))
        kb_audit_check_item(inf, a, key, key_len, v, w, audit_rv);
    kb_event_list_t cached;
    kb_event_list_init(&cached);
    kb_indexer_list(inf->idx, r->ns, &cached);
    a->cached = cached.n;
    for (size_t i = 0; audit_rv && w >= audit_rv && i < cached.n; i++) {
        kb_event_t *c = cached.ev[i];
        if (kb_strmap_get(a->items, c->key, c->key_len, c->key_hash))
            continue;
        uint64_t cv = kb_rv_parse(c->rv, c->rv_len);
        if (cv && cv <= audit_rv)
            kb_audit_add_fix(a, KB_AUDIT_MISSING, c->key, c->key_len, NULL, c->rv, c->rv_len);
    }
    kb_event_list_fini(&cached);
    pthread_mutex_unlock(&inf->ingest_mtx);
}

/* Read one drifted object back and ingest it through the gate; *staged says
 * whether that changed anything (a 404 or a newer change from the watch: no). */
static kb_err_t kb_audit_read_back(kb_reflector_t *r, const kb_audit_fix_t *f, bool *staged) {
    kb_informer_t *inf = r->inf;
    char *coll = kb_inf__path(inf->conf, f->item->ns[0] ? f->item->ns : NULL);
    kb_buf_t path = KB_BUF_INIT, body = KB_BUF_INIT;
    kb_buf_appendf(&path, "%s/%s", coll, f->item->name);
    free(coll);
    kb_api_response_t resp;
    kb_apiclient_get(inf->api, path.data, NULL, NULL, &body, KB_LIST_MAX_BODY, 60, &inf->stop, &resp);
    kb_err_t err = KB_OK;
    *staged = false;
    if (resp.err == KB_OK && resp.status == 200)
        err = kb_inf__audit_ingest(r, body.data, body.len, f->key, strlen(f->key), f->stale_grave, staged);
    else if (resp.err != KB_OK || resp.status != 404) /* 404: gone since the list; the watch tells it */
        KB_WARN("audit", "informer=%s key=%s: GET %s: %s HTTP %ld; repaired next period if still drifted",
                inf->conf->name, f->key, path.data, resp.errmsg, resp.status);
    kb_buf_fini(&path);
    kb_buf_fini(&body);
    return err;
}

/* Repair each candidate; counts[] gets those that were drift indeed (the
 * repair changed the cache: not a 404, not overtaken by the watch). */
static kb_err_t kb_audit_repair(kb_reflector_t *r, const kb_audit_run_t *a, uint64_t counts[KB_AUDIT_KINDS]) {
    kb_informer_t *inf = r->inf;
    for (size_t i = 0; i < a->n_fixes && !atomic_load(&inf->stop); i++) {
        const kb_audit_fix_t *f = &a->fixes[i];
        bool staged;
        kb_err_t err = f->kind == KB_AUDIT_MISSING
                           ? kb_inf__audit_delete(r, f->key, strlen(f->key), f->cached_rv, a->list_rv, &staged)
                           : kb_audit_read_back(r, f, &staged);
        if (err != KB_OK)
            return err;
        if (!staged) {
            KB_DEBUG("audit", "informer=%s key=%s moved on since the audit list: not drift", inf->conf->name, f->key);
            continue;
        }
        counts[f->kind]++;
        KB_WARN("audit", "informer=%s drift %s key=%s cachedRV=%s serverRV=%s auditRV=%s: repaired",
                inf->conf->name, kb_audit_kind_name(f->kind), f->key, f->cached_rv[0] ? f->cached_rv : "-",
                f->item ? f->item->rv : "-", a->list_rv);
    }
    return KB_OK;
}

/* One audit of one reflector's scope; counts[] gets the drift by kind. */
static kb_err_t kb_audit_scope(kb_reflector_t *r, uint64_t counts[KB_AUDIT_KINDS], bool *relisted) {
    kb_informer_t *inf = r->inf;
    kb_audit_run_t a;
    memset(&a, 0, sizeof(a));
    kb_err_t err = kb_audit_list(r, &a);
    if (err != KB_OK)
        goto out;
    kb_audit_wait_watch(r, kb_rv_parse(a.list_rv, strlen(a.list_rv)));
    kb_audit_compare(r, &a);
    size_t objects = kb_strmap_count(a.items) > a.cached ? kb_strmap_count(a.items) : a.cached;
    if (a.n_fixes && (double)a.n_fixes > inf->conf->audit_relist_ratio * (double)objects) {
        KB_WARN("audit", "informer=%s%s%s audit at rv=%s: %zu of %zu object(s) drifted (over audit_relist_ratio "
                "%.3f); relisting in full", inf->conf->name, r->ns ? " namespace=" : "", r->ns ? r->ns : "",
                a.list_rv, a.n_fixes, objects, inf->conf->audit_relist_ratio);
        for (size_t i = 0; i < a.n_fixes; i++)
            counts[a.fixes[i].kind]++;
        atomic_store(&r->relist_asked, true);
        *relisted = true;
        goto out;
    }
    err = kb_audit_repair(r, &a, counts);
out:
    kb_audit_run_fini(&a);
    return err;
}

static void kb_audit_once(kb_informer_t *inf) {
    uint64_t counts[KB_AUDIT_KINDS] = {0};
    bool relisted = false;
    for (size_t i = 0; i < inf->n_refl && !atomic_load(&inf->stop); i++)
        if (kb_audit_scope(&inf->refl[i], counts, &relisted) != KB_OK)
            return; /* not a complete audit: not counted */
    atomic_fetch_add(&inf->st_audit_runs, 1);
    for (int k = 0; k < KB_AUDIT_KINDS; k++)
        atomic_fetch_add(&inf->st_audit_drift[k], counts[k]);
    pthread_mutex_lock(&inf->err_mtx);
    inf->audit_last_ns = kb_now_real_ns();
    memcpy(inf->audit_last_drift, counts, sizeof(counts));
    inf->audit_last_relisted = relisted;
    pthread_mutex_unlock(&inf->err_mtx);
    uint64_t total = counts[0] + counts[1] + counts[2];
    if (total)
        KB_WARN("audit", "informer=%s audit found drift: missing=%llu stale=%llu unknown=%llu%s", inf->conf->name,
                (unsigned long long)counts[0], (unsigned long long)counts[1], (unsigned long long)counts[2],
                relisted ? " (relisting)" : " (repaired)");
    else
        KB_INFO("audit", "informer=%s audit found no drift", inf->conf->name);
}

static void *kb_audit_main(void *arg) {
    kb_informer_t *inf = arg;
    char tname[32];
    snprintf(tname, sizeof(tname), "kb:audit/%s", inf->conf->name);
    kb_thread_set_name(tname);
    while (!atomic_load(&inf->stop)) {
        kb_sleep_ms_interruptible((int64_t)inf->conf->audit_seconds * 1000, &inf->stop);
        if (!atomic_load(&inf->stop) && kb_informer_synced(inf))
            kb_audit_once(inf);
    }
    return NULL;
}

void kb_audit_start(kb_informer_t *inf) {
    if (inf->conf->audit_seconds <= 0)
        return;
    if (pthread_create(&inf->audit_thread, NULL, kb_audit_main, inf) != 0)
        KB_FATAL("cannot start the audit thread");
    inf->audit_running = true;
}

void kb_audit_stop(kb_informer_t *inf) {
    if (inf->audit_running)
        pthread_join(inf->audit_thread, NULL);
    inf->audit_running = false;
}
