/* tests/kubesim/watch.c — WATCH streams.
 *
 * Design: a watch is a chunked libmicrohttpd response whose content
 * callback runs on the connection's own thread (thread-per-connection), so
 * it may block on sim->cond until there is something to send. Each call
 * fills the watcher's staging buffer, under sim->mtx, with whole event
 * lines copied from the stored object bytes ({"type":T,"object":<bytes>}\n;
 * nothing is serialized per watcher), then copies out as much as MHD asked
 * for without the lock. A watcher remembers a position (seq) in its
 * resource's history ring; if the ring overwrites that position the
 * watcher was too slow and its stream is ended (as the real server does).
 *
 * Selector watches apply the enter/leave rule per event: the previous
 * state of a MODIFIED event is kept in the ring, and the "leave" DELETED
 * object (previous state, new RV) is derived once per event and cached.
 *
 * While idle the callback wakes at least every 200 ms to notice a client
 * that hung up (poll POLLRDHUP on the socket), the deadline, and stop.
 */
#include "tests/kubesim/kubesim_int.h"

#include "common/alloc.h"
#include "common/hash.h"
#include "common/time.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDLE_CHECK_MS 200

typedef struct watcher {
    kb_sim_t *sim;
    kb_sim_res_t *res;
    char *ns;                 /* NULL = all namespaces */
    kb_sel_t lsel, fsel;
    kb_shardsel_t ssel;       /* uid and namespace never change: no enter/leave rule needed */
    bool filtered;            /* any selector: enter/leave rule applies */
    bool bookmarks;
    int fd;                   /* client socket, polled for hang-up while idle */
    uint64_t auth_hash;       /* kb_fnv1a64 of the Authorization header (0: none), for lose_events */
    uint64_t seq;             /* next history event to consider */
    kb_sim_obj_t **snap;      /* synthetic ADDED still to send */
    size_t nsnap, snap_pos;
    bool end_bookmark;        /* sendInitialEvents: initial-events-end bookmark after snap */
    uint64_t snap_rv;
    char *error_line;         /* an ERROR event to send, then end */
    uint64_t drop_gen, end_gen, err_gen, bm_gen;
    uint64_t cut_gen;         /* sim->cut_gen this watch has been checked against */
    int64_t deadline_ns, bm_due_ns, final_bm_ns;
    bool finished;            /* nothing more to stage; end after the buffer drains */
    bool abort;               /* end without the final chunk */
    kb_buf_t out;             /* staged bytes */
    size_t out_pos;           /* sent prefix of out */
} watcher_t;

static void stage_event(watcher_t *w, const char *type, const kb_sim_obj_t *obj) {
    kb_sim_t *sim = w->sim;
    size_t start = w->out.len;
    kb_buf_reserve(&w->out, obj->json_len + 40);
    kb_buf_append_str(&w->out, "{\"type\":\"");
    kb_buf_append_str(&w->out, type);
    kb_buf_append_str(&w->out, "\",\"object\":");
    kb_buf_append(&w->out, obj->json, obj->json_len);
    kb_buf_append_str(&w->out, "}\n");
    if (sim->malformed_left > 0) { /* a torn line instead of this event */
        sim->malformed_left--;
        w->out.len = start + (w->out.len - start) / 2;
        kb_buf_append_char(&w->out, '\n');
    }
}

static void stage_bookmark(watcher_t *w, uint64_t rv, bool initial_end) {
    kb_buf_appendf(&w->out,
                   "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"%s\",\"apiVersion\":\"%s\",\"metadata\":"
                   "{\"resourceVersion\":\"%llu\"%s}}}\n",
                   w->res->kind, w->res->api_version, (unsigned long long)rv,
                   initial_end ? ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}" : "");
}

static bool matches(const watcher_t *w, const kb_sim_obj_t *obj) {
    return (!w->ns || !strcmp(obj->ns, w->ns)) && kb_sim__labelsel_match(&w->lsel, obj->labels, obj->nlabels) &&
           kb_sim__fieldsel_match(&w->fsel, obj->ns, obj->name) && kb_sim__shardsel_match(&w->ssel, obj->ns, obj->uid);
}

static kb_sim_obj_t *prev_at_rv(kb_sim_event_t *ev) {
    kb_sim_obj_t *p = atomic_load(&ev->prev_at_rv);
    if (!p) { /* under sim->mtx: no race */
        p = kb_sim__obj_restamp(ev->prev, ev->rv, NULL);
        atomic_store(&ev->prev_at_rv, p);
    }
    return p;
}

/* Stage one history event if this watcher should see it. */
static void stage_history(watcher_t *w, kb_sim_event_t *ev) {
    if (ev->lost && (!ev->lost_for || ev->lost_for == w->auth_hash))
        return; /* the lose_events fault: silently never sent */
    if (!matches(w, ev->obj)) {
        if (w->filtered && ev->type == KB_SIM_MODIFIED && matches(w, ev->prev))
            stage_event(w, "DELETED", prev_at_rv(ev));
        return;
    }
    if (w->filtered && ev->type == KB_SIM_MODIFIED && !matches(w, ev->prev))
        stage_event(w, "ADDED", ev->obj);
    else
        stage_event(w, kb_sim__type_names[ev->type], ev->obj);
}

static bool client_gone(int fd) {
    if (fd < 0)
        return false;
    struct pollfd pfd = {.fd = fd, .events = POLLRDHUP};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Bookmarks are due every bookmark_ms and once more 2 s before the deadline
 * (at once if the whole watch is shorter than that). */
static void next_bookmark(watcher_t *w, int64_t now, bool first) {
    if (!first && now >= w->final_bm_ns) {
        w->bm_due_ns = INT64_MAX;
        return;
    }
    int64_t due = now + (int64_t)w->sim->opts.bookmark_ms * KB_NS_PER_MS;
    w->bm_due_ns = due < w->final_bm_ns ? due : w->final_bm_ns;
}

/* A cut_watches fault named this watch's namespace since it was last checked. */
static bool cut_locked(watcher_t *w) {
    kb_sim_t *sim = w->sim;
    if (sim->cut_gen == w->cut_gen)
        return false;
    kb_sim_cut_t *c = w->ns ? kb_sim__cut_find_locked(sim, w->ns) : NULL;
    if (c && c->gen > w->cut_gen)
        return true;
    w->cut_gen = sim->cut_gen;
    return false;
}

/* Stage what is available. Returns when out has bytes or the stream is over.
 * Locks: takes sim->mtx. */
static void fill(watcher_t *w, size_t want) {
    kb_sim_t *sim = w->sim;
    kb_sim_res_t *res = w->res;
    pthread_mutex_lock(&sim->mtx);
    for (;;) {
        if (atomic_load(&sim->stopping) || sim->end_gen != w->end_gen) {
            w->finished = true;
            break;
        }
        if (sim->drop_gen != w->drop_gen || cut_locked(w)) {
            w->finished = w->abort = true;
            break;
        }
        if (sim->watch_err_gen != w->err_gen && sim->watch_err_line) {
            kb_buf_append_str(&w->out, sim->watch_err_line);
            w->finished = true;
            break;
        }
        if (w->error_line) {
            kb_buf_append_str(&w->out, w->error_line);
            w->finished = true;
            break;
        }
        while (w->snap_pos < w->nsnap && w->out.len < want) {
            kb_sim_obj_t *obj = w->snap[w->snap_pos];
            w->snap[w->snap_pos++] = NULL;
            stage_event(w, "ADDED", obj);
            kb_sim__obj_unref(obj);
        }
        if (w->snap_pos == w->nsnap && w->end_bookmark && w->out.len < want) {
            stage_bookmark(w, w->snap_rv, true);
            w->end_bookmark = false;
        }
        if (w->seq < res->seq_next - res->ring_count) { /* overwritten: too slow */
            w->finished = true;
            break;
        }
        while (w->snap_pos == w->nsnap && w->seq < res->seq_next && w->out.len < want)
            stage_history(w, &res->ring[w->seq++ % res->ring_cap]);
        if (w->out.len)
            break;
        int64_t now = kb_now_mono_ns();
        if (w->bookmarks && (now >= w->bm_due_ns || sim->bookmark_gen != w->bm_gen)) {
            w->bm_gen = sim->bookmark_gen;
            stage_bookmark(w, sim->rv, false);
            next_bookmark(w, now, false);
            break;
        }
        if (now >= w->deadline_ns) {
            w->finished = true;
            break;
        }
        if (client_gone(w->fd)) {
            w->finished = w->abort = true;
            break;
        }
        int64_t wake = now + IDLE_CHECK_MS * KB_NS_PER_MS;
        if (w->bookmarks && w->bm_due_ns < wake)
            wake = w->bm_due_ns;
        if (w->deadline_ns < wake)
            wake = w->deadline_ns;
        struct timespec ts = {.tv_sec = wake / KB_NS_PER_SEC, .tv_nsec = wake % KB_NS_PER_SEC};
        pthread_cond_timedwait(&sim->cond, &sim->mtx, &ts);
    }
    pthread_mutex_unlock(&sim->mtx);
}

static ssize_t on_read(void *cls, uint64_t pos, char *buf, size_t max) {
    watcher_t *w = cls;
    KB_UNUSED(pos);
    if (w->out_pos == w->out.len) {
        kb_buf_reset(&w->out);
        w->out_pos = 0;
        if (w->finished)
            return w->abort ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
        fill(w, max);
        if (w->out.len == 0)
            return w->abort ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
        if (w->abort) /* drop mid-stream: whatever was staged is lost, as on a broken connection */
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = w->out.len - w->out_pos;
    if (n > max)
        n = max;
    memcpy(buf, w->out.data + w->out_pos, n);
    w->out_pos += n;
    return (ssize_t)n;
}

static void on_free(void *cls) {
    watcher_t *w = cls;
    kb_sim_t *sim = w->sim;
    pthread_mutex_lock(&sim->mtx);
    sim->open_watches--;
    pthread_mutex_unlock(&sim->mtx);
    for (size_t i = w->snap_pos; i < w->nsnap; i++)
        kb_sim__obj_unref(w->snap[i]);
    free(w->snap);
    free(w->ns);
    free(w->error_line);
    kb_sim__sel_fini(&w->lsel);
    kb_sim__sel_fini(&w->fsel);
    kb_buf_fini(&w->out);
    free(w);
}

/* A watch from an RV this server issued before a restore (POST /_sim/restore)
 * and has not reached again: the real API server waits a few seconds for it,
 * then sends this. */
static char *too_large_line(uint64_t req, uint64_t current) {
    char msg[128];
    snprintf(msg, sizeof(msg), "Timeout: Too large resource version: %llu, current: %llu", (unsigned long long)req,
             (unsigned long long)current);
    char *st = kb_sim__status_json(504, "Timeout", msg,
                                   "{\"causes\":[{\"reason\":\"ResourceVersionTooLarge\",\"message\":"
                                   "\"Too large resource version\"}],\"retryAfterSeconds\":1}", NULL);
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_appendf(&b, "{\"type\":\"ERROR\",\"object\":%s}\n", st);
    free(st);
    return kb_buf_steal(&b, NULL);
}

static char *too_old_line(uint64_t req, uint64_t oldest) {
    char msg[96];
    snprintf(msg, sizeof(msg), "too old resource version: %llu (%llu)", (unsigned long long)req,
             (unsigned long long)oldest);
    char *st = kb_sim__status_json(410, "Expired", msg, NULL, NULL);
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_appendf(&b, "{\"type\":\"ERROR\",\"object\":%s}\n", st);
    free(st);
    return kb_buf_steal(&b, NULL);
}

/* First history position with rv > after. */
static uint64_t seq_after_locked(const kb_sim_res_t *res, uint64_t after) {
    uint64_t lo = res->seq_next - res->ring_count, hi = res->seq_next;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (res->ring[mid % res->ring_cap].rv <= after)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void snapshot_locked(watcher_t *w) {
    kb_sim_res_t *res = w->res;
    kb_sim__ensure_sorted_locked(res);
    w->snap = kb_malloc((res->nsorted + 1) * sizeof(*w->snap));
    for (size_t i = 0; i < res->nsorted; i++)
        if (matches(w, res->sorted[i]))
            w->snap[w->nsnap++] = kb_sim__obj_ref(res->sorted[i]);
    w->snap_rv = w->sim->rv;
}

enum MHD_Result kb_sim__watch_start(kb_sim_t *sim, struct MHD_Connection *conn, kb_sim_watch_params_t *p) {
    watcher_t *w = kb_calloc(1, sizeof(*w));
    w->sim = sim;
    w->res = p->res;
    w->ns = kb_strdup(p->ns);
    w->lsel = p->lsel;
    w->fsel = p->fsel;
    w->ssel = p->ssel;
    w->filtered = w->lsel.nreqs || w->fsel.nreqs;
    w->bookmarks = p->bookmarks;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    w->auth_hash = auth ? kb_fnv1a64(auth, strlen(auth)) : 0;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    w->fd = ci ? ci->connect_fd : -1;
    int64_t now = kb_now_mono_ns();
    int64_t timeout_ns = p->timeout_s > 0 ? p->timeout_s * KB_NS_PER_SEC
                                          : (int64_t)((1800.0 + 1800.0 * kb_random_unit()) * 1e9);
    w->deadline_ns = now + timeout_ns;
    w->final_bm_ns = w->deadline_ns - 2 * KB_NS_PER_SEC;
    next_bookmark(w, now, true);
    uint64_t rv_req = p->rv ? strtoull(p->rv, NULL, 10) : 0;
    bool from_state = p->initial_events || rv_req == 0;

    pthread_mutex_lock(&sim->mtx);
    kb_sim_res_t *res = w->res;
    w->drop_gen = sim->drop_gen;
    w->end_gen = sim->end_gen;
    w->err_gen = sim->watch_err_gen;
    w->bm_gen = sim->bookmark_gen;
    w->cut_gen = sim->cut_gen;
    kb_sim_cut_t *cut = w->ns && !from_state ? kb_sim__cut_find_locked(sim, w->ns) : NULL;
    if (cut && cut->expire_next) {
        cut->expire_next = false;
        w->error_line = too_old_line(rv_req, sim->rv);
    } else if (sim->watch_err_next && sim->watch_err_line) {
        sim->watch_err_next = false;
        w->error_line = kb_strdup(sim->watch_err_line);
    } else if (!from_state && rv_req > sim->rv && rv_req <= sim->rv_high) {
        w->error_line = too_large_line(rv_req, sim->rv);
    } else if (!from_state && rv_req < res->expired_rv) {
        w->error_line = too_old_line(rv_req, res->expired_rv);
    } else if (from_state) {
        snapshot_locked(w);
        w->end_bookmark = p->initial_events;
        w->seq = res->seq_next;
    } else {
        w->seq = seq_after_locked(res, rv_req);
    }
    sim->open_watches++;
    pthread_mutex_unlock(&sim->mtx);

    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 256 * 1024, on_read, w, on_free);
    if (!resp) {
        on_free(w);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    MHD_add_response_header(resp, "Cache-Control", "no-cache, private");
    kb_sim__reqlog(sim, conn, "GET", p->url, 200);
    enum MHD_Result r = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    return r;
}
