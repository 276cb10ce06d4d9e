/* tests/kubesim/kubesim.h — an in-process Kubernetes API-server simulator.
 *
 * Serves the list/watch wire protocol of kube-apiserver (JSON only) over
 * plain HTTP on 127.0.0.1: discovery, LIST with limit/continue, WATCH with
 * bookmarks and 410 on compacted history, writes (POST/PUT/PATCH/DELETE),
 * plus a control API under /_sim/ for scripted faults and workloads.
 * docs/kubesim.md is the reference for the wire and control API.
 *
 * Used by the integration tests (build/kubesim) and by `kbridge --demo`,
 * which links this library and runs the simulator in its own process.
 *
 * Threads: kb_sim_start() starts libmicrohttpd (one thread per connection)
 * and, if asked for, a demo churn thread. kb_sim_port() may be called from
 * any thread; kb_sim_stop() from one thread, once, after start returned.
 */
#ifndef KB_TESTS_KUBESIM_H
#define KB_TESTS_KUBESIM_H

#include <stdbool.h>
#include <stddef.h>

typedef struct kb_sim kb_sim_t;

typedef struct kb_sim_opts {
    const char *host;    /* listen address; NULL or "" = "127.0.0.1" */
    int port;            /* 0 = ephemeral (read it back with kb_sim_port) */
    int history;         /* events kept per resource for watch resume; <= 0 = 10000 */
    int bookmark_ms;     /* bookmark interval per watcher; <= 0 = 60000 */
    int demo_objects;    /* > 0: create this many pods over 3 namespaces at start */
    double demo_rate;    /* > 0: churn (update/delete/create) this many changes/s, forever */
    bool no_watch_list;  /* refuse sendInitialEvents (422), as a server with the WatchList feature off */
    bool ignore_watch_list; /* ignore sendInitialEvents: a plain watch, no initial-events-end bookmark */
    bool sharded_list;   /* honour shardSelector (feature gate ShardedListAndWatch on); else ignore it */
} kb_sim_opts_t;

/* Start listening. opts may be NULL (all defaults). Returns NULL with the
 * reason in errstr ("bind 127.0.0.1:80: Permission denied") on failure.
 * The caller owns the result and must pass it to kb_sim_stop(). */
kb_sim_t *kb_sim_start(const kb_sim_opts_t *opts, char *errstr, size_t errstr_size);

/* The TCP port actually bound. Thread: any. */
int kb_sim_port(const kb_sim_t *sim);

/* End every connection (watches end without a final chunk), join all
 * threads and free everything. NULL is a no-op. */
void kb_sim_stop(kb_sim_t *sim);

#endif
