/* informer/reflector.c — a reflector: the HTTP side of list and watch.
 *
 * Design note. One thread per watched scope (a namespace, or the whole
 * cluster) runs list → watch → watch …: it asks the API server (libcurl, with
 * no lock held), classifies what comes back (informer/kstatus.h) and hands
 * the bytes to the ingest steps in informer.c, which decide what they mean
 * for the cache, the journal and the queues. Keeping the network here and the
 * decisions there is what lets the deterministic simulation (tests/sim) drive
 * the real ingest without a server.
 *
 * Errors follow client-go's table with two deliberate differences, both in the
 * direction of not losing or re-sending: a watch that ends with nothing
 * received is re-opened after a backoff step rather than turned into a
 * relist, and a malformed frame re-opens the watch from the last good RV
 * instead of relisting. Paged lists are consistent reads (no resourceVersion)
 * with limit/continue and never hold more than one page; a page over the body
 * bound is asked for again with fewer objects.
 *
 * A streamed list (list_mode auto or stream) is a watch with
 * sendInitialEvents=true: the server sends every object as ADDED from its
 * watch cache, then a BOOKMARK annotated k8s.io/initial-events-end, then the
 * changes, on the one stream. It spares the server the memory of building
 * list pages (the reason the feature exists), and the ingest treats the
 * initial events exactly as list items, so the relist diff is the same.
 * Where the server refuses it (HTTP 400/422: the WatchList feature is off, or
 * the server is older) or answers with a normal watch instead, auto pages
 * from then on; stream reports the error and retries.
 *
 * With sharding.server_side auto or on (and replicas > 1), every list page,
 * streamed list and watch carries shardSelector for this replica's hash range
 * (informer/shard.h). Neither a watch event nor a bookmark says whether the
 * server applied it, so the evidence is what arrives: an object of another
 * replica means the server ignored it (kb_inf__ours counts it, drops it and,
 * for auto, stops asking). Ownership is the same either way.
 */
#include "informer/informer_int.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 0.8 s doubling to 30 s, each step jittered up to +100 %; after two quiet
 * minutes it starts again from 0.8 s (client-go ≤ v0.35 rule), and also after
 * a complete list or a watch that delivered something (the server is
 * healthy again; earlier trouble should not slow the next recovery). */
static int64_t kb_backoff_next(kb_backoff_t *b) {
    int64_t now = kb_now_mono_ns();
    if (b->base_ms == 0 || now - b->last_ns > KB_BACKOFF_RESET_MS * KB_NS_PER_MS)
        b->base_ms = KB_BACKOFF_INITIAL_MS;
    int64_t d = b->base_ms + (int64_t)(kb_random_unit() * (double)b->base_ms);
    b->base_ms = b->base_ms * 2 > KB_BACKOFF_CAP_MS ? KB_BACKOFF_CAP_MS : b->base_ms * 2;
    b->last_ns = now;
    return d;
}

/* ---- requests --------------------------------------------------------- */

void kb_inf__query_common(const kb_reflector_t *r, kb_buf_t *q) {
    const kb_config_informer_t *c = r->inf->conf;
    if (c->label_selector && c->label_selector[0])
        kb_api_query_add(q, "labelSelector", c->label_selector);
    if (c->field_selector && c->field_selector[0])
        kb_api_query_add(q, "fieldSelector", c->field_selector);
    if (kb_inf__shard_asks(r->inf)) {
        char sel[160];
        kb_shard_selector(&r->inf->shard, sel, sizeof(sel));
        kb_api_query_add(q, "shardSelector", sel);
    }
}

void kb_inf__list_path(const kb_reflector_t *r, int limit, const char *cont, kb_buf_t *q, kb_buf_t *path) {
    char lim[16];
    snprintf(lim, sizeof(lim), "%d", limit);
    kb_api_query_add(q, "limit", lim);
    if (cont && cont[0])
        kb_api_query_add(q, "continue", cont);
    kb_inf__query_common(r, q);
    kb_buf_append_str(path, r->path);
    kb_buf_append(path, q->data, q->len);
}

/* "GET https://host/path?query" of a request, for error texts. */
static void kb_refl_request_text(const kb_reflector_t *r, const char *path_and_query, char *out, size_t size) {
    snprintf(out, size, "GET %s%s", kb_apiclient_server(r->inf->api), path_and_query);
}

/* Turn a failed response into an error class (informer/kstatus.h), logging
 * what was asked and what came back: the server's Status when the body is
 * one, else the content type and the first bytes (a proxy's or another web
 * server's page says more than "HTTP 404"). */
static kb_err_t kb_refl_failed(kb_reflector_t *r, const char *what, const char *path_and_query,
                               const kb_api_response_t *resp, const kb_buf_t *body, kb_status_t *st) {
    kb_informer_t *inf = r->inf;
    char req[768];
    kb_refl_request_text(r, path_and_query, req, sizeof(req));
    memset(st, 0, sizeof(*st));
    if (resp->err != KB_OK) {
        kb_inf__error(inf, KB_WATCH_ERR_CONNECT, "%s %s: %s", what, req, resp->errmsg);
        static kb_ratelimit_t rl;
        uint64_t sup = 0;
        if (kb_ratelimit_allow(&rl, 5000, &sup))
            KB_WARNF("reflector", KB_FIELDS(KB_F("informer", inf->conf->name)),
                     "informer=%s %s: %s failed: %s (will retry; suppressed=%llu)", inf->conf->name,
                    what, req, resp->errmsg, (unsigned long long)sup);
        return resp->err == KB_ERR_STOPPED ? KB_ERR_STOPPED : KB_ERR_CONNECT;
    }
    bool is_status = body && body->len && kb_decode_status(body->data, body->len, st) == KB_OK &&
                     (st->code || st->reason[0] || st->message[0]);
    r->cls = kb_kstatus_classify(resp->status, st->reason, st->cause_reason);
    r->has_cls = true;
    char said[768];
    if (is_status) {
        snprintf(said, sizeof(said), "%s%s%s", st->reason, st->reason[0] ? ": " : "", st->message);
    } else {
        char first[160];
        kb_api_body_excerpt(body ? body->data : "", body ? body->len : 0, 120, first, sizeof(first));
        snprintf(said, sizeof(said), "not a Kubernetes Status (Content-Type \"%s\", %zu bytes%s%s%s) — is this "
                 "an API server?", resp->content_type, body ? body->len : 0, first[0] ? ": \"" : "", first,
                 first[0] ? "\"" : "");
    }
    kb_inf__error(inf, r->cls.kind, "%s %s: HTTP %ld %s", what, req, resp->status, said);
    if (r->cls.err == KB_ERR_GONE)
        KB_INFOF("reflector", KB_FIELDS(KB_F("informer", inf->conf->name)), "informer=%s %s: HTTP 410 %s",
                 inf->conf->name, what, said);
    else
        KB_WARNF("reflector", KB_FIELDS(KB_F("informer", inf->conf->name)), "informer=%s %s: %s: HTTP %ld %s%s",
                 inf->conf->name, what, req, resp->status, said,
                resp->retry_after >= 0 ? " (Retry-After given)" : "");
    return r->cls.err;
}

/* The most one list page may take: KB_LIST_MAX_BODY, or less under the test
 * suite's KB_TEST_LIST_MAX_BODY (bytes), so splitting can be tested without
 * half a GiB of objects. */
static size_t kb_refl_max_body(void) {
    const char *env = getenv("KB_TEST_LIST_MAX_BODY");
    unsigned long long v = env && *env ? strtoull(env, NULL, 10) : 0;
    return v >= 4096 && v < KB_LIST_MAX_BODY ? (size_t)v : KB_LIST_MAX_BODY;
}

/* A list page came back larger than max_body (page_size objects of ~1 MiB,
 * Helm release Secrets, make 500 MiB): ask for half as many per page from
 * now on. false when a single object is already too large. */
static bool kb_refl_split_page(kb_reflector_t *r, size_t max_body) {
    kb_informer_t *inf = r->inf;
    if (r->page_limit <= 1) {
        kb_inf__error(inf, KB_WATCH_ERR_HTTP, "one object is larger than a list page may be (%zu bytes)", max_body);
        KB_ERROR("reflector", "informer=%s a list page of one object is over %zu bytes; cannot list", inf->conf->name,
                 max_body);
        return false;
    }
    int was = r->page_limit;
    r->page_limit = (r->page_limit + 1) / 2;
    KB_WARN("reflector", "informer=%s list page of %d object(s) is over %zu bytes; asking for %d per page from now "
            "on (page_size = %d is too large for these objects)", inf->conf->name, was, max_body, r->page_limit,
            inf->conf->page_size);
    return true;
}

/* One complete paged list, diffed against the cache. */
static kb_err_t kb_refl_list(kb_reflector_t *r, int *retry_after) {
    kb_informer_t *inf = r->inf;
    const size_t max_body = kb_refl_max_body();
    if (r->page_limit <= 0)
        r->page_limit = inf->conf->page_size;
    kb_buf_t q = KB_BUF_INIT, body = KB_BUF_INIT, path = KB_BUF_INIT, cont = KB_BUF_INIT;
    kb_err_t err = KB_OK;
    int restarts = 0;
    *retry_after = -1;
restart:
    kb_inf__list_begin(r);
    kb_buf_reset(&cont);
    for (;;) {
        kb_buf_reset(&q);
        kb_buf_reset(&body);
        kb_buf_reset(&path);
        kb_inf__list_path(r, r->page_limit, cont.data, &q, &path);
        kb_api_response_t resp;
        r->has_cls = false;
        kb_apiclient_get(inf->api, path.data, NULL, NULL, &body, max_body, 120, &inf->stop, &resp);
        if (atomic_load(&inf->stop)) {
            err = KB_ERR_STOPPED;
            goto out;
        }
        if (resp.err == KB_ERR_TOOBIG) {
            if (kb_refl_split_page(r, max_body))
                continue; /* the same page (same continue token), fewer objects */
            err = KB_ERR_TOOBIG;
            goto out;
        }
        if (resp.err != KB_OK || resp.status != 200) {
            kb_status_t st;
            err = kb_refl_failed(r, cont.len ? "list (continue)" : "list", path.data, &resp, &body, &st);
            *retry_after = resp.retry_after >= 0 ? resp.retry_after : st.retry_after > 0 ? st.retry_after : -1;
            if (err == KB_ERR_GONE && cont.len && restarts++ < KB_LIST_RESTARTS) {
                KB_INFO("reflector", "informer=%s continue token expired after %zu page(s); restarting the list",
                        inf->conf->name, r->list_pages);
                err = KB_OK;
                goto restart;
            }
            goto out;
        }
        char src[1024], req[768];
        kb_refl_request_text(r, path.data, req, sizeof(req));
        snprintf(src, sizeof(src), "%s (HTTP %ld, Content-Type \"%s\")", req, resp.status, resp.content_type);
        err = kb_inf__list_page(r, src, body.data, body.len, &cont);
        if (err != KB_OK)
            goto out;
        if (!cont.len)
            break;
    }
    err = kb_inf__list_end(r);
out:
    kb_inf__list_done(r);
    kb_buf_fini(&q);
    kb_buf_fini(&body);
    kb_buf_fini(&path);
    kb_buf_fini(&cont);
    return err;
}

/* One watch request from r->rv, or with streamed (a streamed list) the
 * initial events first and then the changes. KB_OK when it ended normally;
 * *status is the HTTP status (0 without an answer). */
static kb_err_t kb_refl_watch(kb_reflector_t *r, bool streamed, int *retry_after, long *status) {
    kb_informer_t *inf = r->inf;
    kb_buf_t q = KB_BUF_INIT, path = KB_BUF_INIT, body = KB_BUF_INIT;
    char rv[KB_RV_MAX];
    pthread_mutex_lock(&r->rv_mtx);
    memcpy(rv, r->rv, sizeof(rv));
    pthread_mutex_unlock(&r->rv_mtx);
    int min_timeout = inf->conf->min_watch_timeout;
    int timeout = min_timeout + (int)(kb_random_unit() * (double)min_timeout);
    char ts[16];
    snprintf(ts, sizeof(ts), "%d", timeout);
    kb_api_query_add(&q, "watch", "true");
    if (streamed) {
        kb_api_query_add(&q, "sendInitialEvents", "true");
        kb_api_query_add(&q, "resourceVersionMatch", "NotOlderThan");
    } else {
        kb_api_query_add(&q, "resourceVersion", rv);
    }
    kb_api_query_add(&q, "allowWatchBookmarks", "true");
    kb_api_query_add(&q, "timeoutSeconds", ts);
    kb_inf__query_common(r, &q);
    kb_buf_append_str(&path, r->path);
    kb_buf_append(&path, q.data, q.len);

    kb_buf_reset(&r->stream);
    r->frames = 0;
    r->watch_err = KB_OK;
    r->watch_error_event = false;
    r->has_cls = false;
    memset(&r->status, 0, sizeof(r->status));
    atomic_fetch_add(&inf->st_watches, 1);
    r->stream_listed = r->stream_ignored = false;
    if (streamed)
        kb_inf__stream_begin(r);
    KB_DEBUGF("reflector", KB_FIELDS(KB_F("informer", inf->conf->name), KB_F("rv", rv)),
              "informer=%s watch rv=%s sendInitialEvents=%s timeout=%ds", inf->conf->name, rv,
             streamed ? "true" : "false", timeout);
    kb_api_response_t resp;
    kb_apiclient_get(inf->api, path.data, kb_inf__watch_bytes, r, &body, 1u << 20, timeout + 60, &inf->stop, &resp);
    *retry_after = resp.retry_after;
    *status = resp.status;
    if (streamed) /* ended before its initial-events-end BOOKMARK (or that chunk did not commit): no list */
        (void)kb_inf__stream_end(r);
    kb_err_t err = KB_OK;
    if (atomic_load(&inf->stop)) {
        err = KB_ERR_STOPPED;
    } else if (resp.aborted) {
        err = r->watch_err;
        if (r->watch_error_event) {
            kb_inf__error(inf, r->cls.kind, "watch ERROR event: %d %s %s", r->status.code, r->status.reason,
                         r->status.message);
            KB_INFO("reflector", "informer=%s watch ERROR event code=%d reason=%s: %s", inf->conf->name,
                    r->status.code, r->status.reason, r->status.message);
            if (r->status.retry_after > 0)
                *retry_after = r->status.retry_after;
        }
    } else if (streamed && inf->conf->list_mode == KB_LIST_AUTO && resp.err == KB_OK &&
               (resp.status == 400 || resp.status == 422)) {
        /* A refusal auto falls back from: said once at INFO, not an error. */
        if (body.len)
            kb_decode_status(body.data, body.len, &r->status);
        err = KB_ERR_UNSUPPORTED;
    } else if (r->stream_ignored) {
        err = KB_ERR_UNSUPPORTED; /* kb_refl_stream_failed says what */
    } else if (resp.err != KB_OK && resp.status == 200 && r->frames > 0) {
        /* A dropped connection mid-stream after progress: resume at once. */
        KB_INFOF("reflector", KB_FIELDS(KB_F("informer", inf->conf->name), KB_F("rv", r->rv)),
                 "informer=%s watch connection lost after %llu frame(s) (%s); resuming from rv=%s",
                inf->conf->name, (unsigned long long)r->frames, resp.errmsg, r->rv);
        err = KB_OK;
    } else if (resp.err != KB_OK || resp.status != 200) {
        kb_status_t st;
        err = kb_refl_failed(r, "watch", path.data, &resp, &body, &st);
        if (*retry_after < 0 && st.retry_after > 0)
            *retry_after = st.retry_after;
        if (err == KB_ERR_CONNECT && resp.status == 200)
            err = KB_ERR_IO; /* broke before any frame */
    } else if (r->frames == 0) {
        err = KB_ERR_TIMEDOUT; /* ended with nothing at all: do not spin */
    }
    kb_buf_fini(&q);
    kb_buf_fini(&path);
    kb_buf_fini(&body);
    return err;
}

static void kb_refl_sleep(kb_reflector_t *r, int64_t ms) {
    kb_sleep_ms_interruptible(ms, &r->inf->stop);
}

/* The delay before retrying after a failed request: the server's
 * Retry-After as given where the class honours it, within the budget of
 * informer/kstatus.h; else the next backoff step. */
static int64_t kb_refl_retry_delay(kb_reflector_t *r, int retry_after) {
    if (r->has_cls && kb_kstatus_honour_retry_after(&r->cls, retry_after, r->ra_in_row)) {
        r->ra_in_row++;
        KB_DEBUG("reflector", "informer=%s waiting %d s as the server asked (Retry-After %d of %d in a row)",
                 r->inf->conf->name, retry_after, r->ra_in_row, KB_KSTATUS_RETRY_AFTER_BUDGET);
        return (int64_t)retry_after * 1000;
    }
    return kb_backoff_next(&r->backoff);
}

/* The server answered in full: back off from scratch next time. */
static void kb_refl_healthy(kb_reflector_t *r) {
    r->backoff.base_ms = 0;
    r->ra_in_row = 0;
}

/* A streamed list that did not complete. Decides what the next list is:
 * true = page it (a refusal, remembered for list_mode auto; a 410, or a
 * stream that keeps ending early, this once), false = stream it again after
 * the delay in *sleep_ms. */
static bool kb_refl_stream_failed(kb_reflector_t *r, kb_err_t err, long status, int retry_after, int *unfinished,
                                  int64_t *sleep_ms) {
    kb_informer_t *inf = r->inf;
    bool auto_mode = inf->conf->list_mode == KB_LIST_AUTO;
    bool refused = r->stream_ignored || status == 400 || status == 422;
    *sleep_ms = 0;
    if (r->stream_ignored && !auto_mode)
        kb_inf__error(inf, KB_WATCH_ERR_HTTP, "streamed list: the server answered sendInitialEvents=true with a "
                      "normal watch (a change before the initial-events-end BOOKMARK)");
    if (refused && auto_mode) {
        r->paged_only = true;
        char why[600] = "it sent a normal watch";
        if (!r->stream_ignored)
            snprintf(why, sizeof(why), "HTTP %ld %s", status, r->status.message);
        KB_INFO("reflector", "informer=%s the server does not offer streamed lists (%s); using paged lists from now on",
                inf->conf->name, why);
        return true;
    }
    if (refused) {
        static kb_ratelimit_t rl;
        if (kb_ratelimit_allow(&rl, 10000, NULL))
            KB_ERROR("reflector", "informer=%s list_mode = \"stream\" but the server refuses streamed lists; "
                     "retrying (set list_mode = \"auto\" or \"paged\" for this server)", inf->conf->name);
        *sleep_ms = kb_backoff_next(&r->backoff);
        return false;
    }
    if (err == KB_ERR_GONE && auto_mode) {
        KB_INFO("reflector", "informer=%s streamed list: 410 Gone; paging this list", inf->conf->name);
        return true;
    }
    if (err == KB_OK || err == KB_ERR_TIMEDOUT || err == KB_ERR_IO || err == KB_ERR_PARSE)
        (*unfinished)++;
    if (*unfinished >= 3 && auto_mode) {
        KB_WARN("reflector", "informer=%s streamed list ended %d times before its initial-events-end BOOKMARK; "
                "paging this list", inf->conf->name, *unfinished);
        *unfinished = 0;
        return true;
    }
    *sleep_ms = r->has_cls ? kb_refl_retry_delay(r, retry_after) : kb_backoff_next(&r->backoff);
    return false;
}

void *kb_inf__reflector_main(void *arg) {
    kb_reflector_t *r = arg;
    kb_informer_t *inf = r->inf;
    char tname[32];
    snprintf(tname, sizeof(tname), "kb:refl/%s", inf->conf->name);
    kb_thread_set_name(tname);
    bool need_list = !r->rv[0]; /* a checkpoint to resume from: watch first */
    if (!need_list) {
        KB_INFO("reflector", "informer=%s%s%s resuming from the checkpoint at rv=%s", inf->conf->name,
                r->ns ? " namespace=" : "", r->ns ? r->ns : "", r->rv);
        r->listed = true;
        atomic_fetch_add(&inf->synced_refl, 1);
    }
    int malformed_in_row = 0, unfinished = 0;
    bool page_once = false; /* the next list is paged whatever list_mode says */
    while (!atomic_load(&inf->stop)) {
        int retry_after = -1;
        long status = 0;
        if (need_list)
            atomic_store(&r->relist_asked, false); /* this list is the one the audit asks for */
        bool streamed = need_list && !page_once && !r->paged_only && inf->conf->list_mode != KB_LIST_PAGED;
        if (need_list && !streamed) {
            kb_err_t err = kb_refl_list(r, &retry_after);
            if (err == KB_ERR_STOPPED)
                break;
            if (err != KB_OK) {
                kb_refl_sleep(r, kb_refl_retry_delay(r, retry_after));
                continue;
            }
            kb_refl_healthy(r);
            kb_inf__list_synced(r);
            need_list = page_once = false;
        }
        kb_err_t err = kb_refl_watch(r, streamed, &retry_after, &status);
        if (streamed && !r->stream_listed) {
            if (err == KB_ERR_STOPPED)
                break;
            int64_t sleep_ms;
            page_once = kb_refl_stream_failed(r, err, status, retry_after, &unfinished, &sleep_ms);
            kb_refl_sleep(r, sleep_ms);
            continue;
        }
        if (streamed) {
            need_list = false;
            unfinished = 0;
        }
        if (atomic_exchange(&r->relist_asked, false)) { /* the drift audit asked (informer/audit.c) */
            need_list = true;
            continue;
        }
        if (err != KB_ERR_PARSE)
            malformed_in_row = 0;
        if (r->frames > 0 && err != KB_ERR_PARSE)
            kb_refl_healthy(r); /* the watch made progress */
        switch (err) {
        case KB_OK:
            break; /* a normal end: resume at once from the last RV */
        case KB_ERR_STOPPED:
            break;
        case KB_ERR_PARSE:
            /* Re-watch from the last good RV; back off only if it keeps happening. */
            if (malformed_in_row++ > 0)
                kb_refl_sleep(r, kb_backoff_next(&r->backoff));
            break;
        default:
            if (!r->has_cls) { /* connection trouble or an empty watch: same RV after a backoff step */
                kb_refl_sleep(r, kb_backoff_next(&r->backoff));
                break;
            }
            if (r->cls.action == KB_KACT_RETRY) { /* the same watch, same RV */
                kb_refl_sleep(r, kb_refl_retry_delay(r, retry_after));
                break;
            }
            if (err == KB_ERR_GONE)
                KB_INFOF("reflector", KB_FIELDS(KB_F("informer", inf->conf->name), KB_F("rv", r->rv)),
                         "informer=%s history expired at rv=%s; relisting", inf->conf->name, r->rv);
            need_list = true;
            kb_refl_sleep(r, kb_backoff_next(&r->backoff));
            break;
        }
    }
    return NULL;
}

