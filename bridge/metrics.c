/* bridge/metrics.c — /metrics: the bridge's counters as Prometheus text.
 *
 * DESIGN. Nothing is kept here: every scrape reads the informers' and sinks'
 * own counters (kb_informer_stats, the sink's stats op, the bridge's
 * histograms) once into a small array, then writes one family after the
 * other — the text format wants every sample of a family together. The
 * plain per-informer numbers come from one table (name, type, help, where
 * the value sits), so adding a metric is adding a row. Labels: informer="…"
 * on everything an informer owns, sink="…" on what a sink owns; the replica
 * shard of a sharded deployment is a label of kbridge_info (one process is
 * one shard).
 *
 * The process_* families follow the Prometheus client libraries: read from
 * /proc/self at scrape time (stat for CPU, RSS, start time; the fd directory
 * for open descriptors; getrlimit for the limit), so they cost nothing
 * between scrapes and agree with what `ps` and `ls /proc/PID/fd` say.
 * API-server requests are counted where they are made (informer/apiclient.c)
 * and only read here.
 */
#include "bridge/http_int.h"
#include "bridge/ha.h"

#include "common/alloc.h"
#include "common/event.h"
#include "common/histogram.h"
#include "common/time.h"
#include "informer/apiclient.h"
#include "informer/audit.h"
#include "informer/informer.h"
#include "sinks/sink.h"

#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#ifndef KB_BUILD_TYPE
#define KB_BUILD_TYPE "unknown"
#endif

/* What one scrape knows about one informer. */
typedef struct kb_m_inf {
    const char *name;
    kb_informer_stats_t st;
    kb_pipeline_stats_t ps;
    double lag_seconds; /* checkpoint lag, see kb_m_lag */
    double last_change_seconds; /* unix time of the newest change routed, 0: none yet */
    double heard_seconds;       /* unix time the API server was last heard from, 0: never */
} kb_m_inf_t;

typedef enum { KB_MV_U64, KB_MV_SIZE, KB_MV_I64, KB_MV_BOOL, KB_MV_DOUBLE } kb_mv_kind_t;

typedef struct kb_m_row {
    const char *name, *type, *help;
    size_t off;        /* into kb_m_inf_t */
    kb_mv_kind_t kind;
} kb_m_row_t;

#define KB_M(field) offsetof(kb_m_inf_t, field)

static const kb_m_row_t kb_m_informer_rows[] = {
    {"kbridge_informer_objects", "gauge", "Objects in the informer's cache.", KB_M(st.objects), KB_MV_SIZE},
    {"kbridge_informer_synced", "gauge", "1 once every reflector of the informer finished its first list.",
     KB_M(st.synced), KB_MV_BOOL},
    {"kbridge_informer_sync_objects", "gauge",
     "While the informer is not synced: objects its first list received so far (paged or streamed); 0 once synced.",
     KB_M(st.sync_objects), KB_MV_U64},
    {"kbridge_informer_pending_deltas", "gauge", "Changes queued in the informer's shards, not yet handed to sinks.",
     KB_M(st.pending_deltas), KB_MV_SIZE},
    {"kbridge_informer_pending_bytes", "gauge", "Bytes of the queued changes.", KB_M(st.pending_bytes), KB_MV_SIZE},
    {"kbridge_informer_relists_total", "counter", "Lists after the first one (410 Gone, expired continue, errors).",
     KB_M(st.relists), KB_MV_U64},
    {"kbridge_informer_lists_total", "counter", "Completed lists.", KB_M(st.lists), KB_MV_U64},
    {"kbridge_audit_runs_total", "counter", "Drift audits completed (informers[].audit_seconds).",
     KB_M(st.audit_runs), KB_MV_U64},
    {"kbridge_informer_watches_total", "counter", "Watch requests opened.", KB_M(st.watches), KB_MV_U64},
    {"kbridge_watch_frames_total", "counter", "Watch frames received (every type, bookmarks included).",
     KB_M(st.watch_events), KB_MV_U64},
    {"kbridge_watch_bookmarks_total", "counter", "BOOKMARK frames received.", KB_M(st.bookmarks), KB_MV_U64},
    {"kbridge_watch_gated_total", "counter", "Watch events dropped as not newer than the cached object.",
     KB_M(st.gated), KB_MV_U64},
    {"kbridge_rv_regressions_total", "counter", "Lists whose resourceVersion was below the previous resume point.",
     KB_M(st.rv_regressions), KB_MV_U64},
    {"kbridge_cache_bytes", "gauge",
     "Memory held by the informer's cache: its entries (objects compressed or not), table and dictionaries.",
     KB_M(st.cache_bytes), KB_MV_SIZE},
    {"kbridge_cache_raw_bytes", "gauge", "What kbridge_cache_bytes would be with every cached object uncompressed.",
     KB_M(st.cache_raw_bytes), KB_MV_SIZE},
    {"kbridge_cache_dictionary_bytes", "gauge",
     "Memory of the informer's compression dictionaries (included in kbridge_cache_bytes).",
     KB_M(st.cache_dict_bytes), KB_MV_SIZE},
    {"kbridge_cache_dictionary_trainings_total", "counter", "Compression dictionaries trained for the cache.",
     KB_M(st.cache_dict_trainings), KB_MV_U64},
    {"kbridge_informer_seq", "gauge", "Sequence number of the newest change accepted.", KB_M(st.seq), KB_MV_U64},
    {"kbridge_checkpoint_seq", "gauge", "Every change up to this sequence number is acknowledged by every sink.",
     KB_M(st.ack_seq), KB_MV_U64},
    {"kbridge_checkpoint_lag_seconds", "gauge",
     "While changes wait for acknowledgement: seconds since the newest acknowledgement; 0 when nothing waits.",
     KB_M(lag_seconds), KB_MV_DOUBLE},
    {"kbridge_informer_last_change_timestamp_seconds", "gauge",
     "Unix time of the newest ADDED, MODIFIED or DELETED change the informer handed to routing; 0 before the first.",
     KB_M(last_change_seconds), KB_MV_DOUBLE},
    {"kbridge_informer_last_heard_timestamp_seconds", "gauge",
     "Unix time of the newest list page or watch frame (bookmarks included) from the API server; 0 before the first. "
     "time() minus it bounds how stale the cache can be while the watch is healthy.",
     KB_M(heard_seconds), KB_MV_DOUBLE},
    {"kbridge_events_routed_total", "counter", "Changes that matched at least one route.", KB_M(ps.routed),
     KB_MV_U64},
    {"kbridge_events_unrouted_total", "counter", "Changes that matched no route.", KB_M(ps.unrouted), KB_MV_U64},
    {"kbridge_events_delivered_total", "counter", "Changes acknowledged by every sink they were routed to.",
     KB_M(ps.delivered), KB_MV_U64},
    {"kbridge_events_failed_total", "counter", "Changes a sink gave up on.", KB_M(ps.failed), KB_MV_U64},
    {"kbridge_events_inflight", "gauge", "Changes handed to sinks and not yet acknowledged.", KB_M(ps.inflight),
     KB_MV_I64},
};

/* A label value with the text format's escapes (backslash, quote, newline). */
static void kb_m_label(kb_buf_t *o, const char *name, const char *v) {
    kb_buf_appendf(o, "%s=\"", name);
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            kb_buf_append_char(o, '\\');
        if (*v == '\n')
            kb_buf_append_str(o, "\\n");
        else
            kb_buf_append_char(o, *v);
    }
    kb_buf_append_char(o, '"');
}

static void kb_m_head(kb_buf_t *o, const char *name, const char *type, const char *help) {
    kb_buf_appendf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void kb_m_value(kb_buf_t *o, const kb_m_inf_t *x, const kb_m_row_t *row) {
    const char *p = (const char *)x + row->off;
    switch (row->kind) {
    case KB_MV_U64: { uint64_t v; memcpy(&v, p, sizeof(v)); kb_buf_appendf(o, "%llu", (unsigned long long)v); break; }
    case KB_MV_SIZE: { size_t v; memcpy(&v, p, sizeof(v)); kb_buf_appendf(o, "%zu", v); break; }
    case KB_MV_I64: { int64_t v; memcpy(&v, p, sizeof(v)); kb_buf_appendf(o, "%lld", (long long)v); break; }
    case KB_MV_BOOL: { bool v; memcpy(&v, p, sizeof(v)); kb_buf_append_char(o, v ? '1' : '0'); break; }
    case KB_MV_DOUBLE: { double v; memcpy(&v, p, sizeof(v)); kb_buf_appendf(o, "%.6f", v); break; }
    }
    kb_buf_append_char(o, '\n');
}

/* One histogram series: labels is the pre-rendered label list without braces. */
static void kb_m_histogram(kb_buf_t *o, const char *name, const char *labels, const kb_histogram_t *h) {
    kb_histogram_snap_t s;
    kb_histogram_read(h, &s);
    for (int i = 0; i < KB_HIST_BUCKETS; i++)
        kb_buf_appendf(o, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, kb_histogram_bounds[i],
                       (unsigned long long)s.cumulative[i]);
    unsigned long long total = (unsigned long long)s.cumulative[KB_HIST_BUCKETS];
    kb_buf_appendf(o, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, total);
    kb_buf_appendf(o, "%s_sum{%s} %.9f\n%s_count{%s} %llu\n", name, labels, s.sum_seconds, name, labels, total);
}

/* Seconds since the newest acknowledgement while something waits for one
 * (since serving started when nothing was ever acknowledged); 0 otherwise. */
static double kb_m_lag(const kb_informer_stats_t *st, int64_t now_ns, int64_t since_ns) {
    if (st->seq <= st->ack_seq)
        return 0;
    int64_t from = st->ack_time_ns ? st->ack_time_ns : since_ns;
    return now_ns > from ? (double)(now_ns - from) / 1e9 : 0;
}

static const char *kb_m_err_name(int e) {
    return kb_watch_err_name((kb_watch_err_t)e);
}

static const char *kb_m_audit_kind(int k) {
    return kb_audit_kind_name((kb_audit_kind_t)k);
}

/* A counter family by one label besides the informer: count values, from the
 * uint64_t array at off in each kb_m_inf_t, named by label_of. */
static void kb_m_by_label(kb_buf_t *o, const char *name, const char *help, const kb_m_inf_t *infs, size_t n,
                          const char *label, int count, const char *(*label_of)(int), size_t off) {
    kb_m_head(o, name, "counter", help);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < count; k++) {
            uint64_t v;
            memcpy(&v, (const char *)&infs[i] + off + (size_t)k * sizeof(v), sizeof(v));
            kb_buf_appendf(o, "%s{", name);
            kb_m_label(o, "informer", infs[i].name);
            kb_buf_append_char(o, ',');
            kb_m_label(o, label, label_of(k));
            kb_buf_appendf(o, "} %llu\n", (unsigned long long)v);
        }
}

static void kb_m_informers(kb_buf_t *o, kb_bridge_t *b, const kb_m_inf_t *infs, size_t n) {
    kb_buf_t lab = KB_BUF_INIT;
    for (size_t r = 0; r < KB_ARRAY_LEN(kb_m_informer_rows); r++) {
        const kb_m_row_t *row = &kb_m_informer_rows[r];
        kb_m_head(o, row->name, row->type, row->help);
        for (size_t i = 0; i < n; i++) {
            kb_buf_appendf(o, "%s{", row->name);
            kb_m_label(o, "informer", infs[i].name);
            kb_buf_append_str(o, "} ");
            kb_m_value(o, &infs[i], row);
        }
    }
    kb_m_head(o, "kbridge_watch_events_total", "counter", "Changes the informer queued, by event type.");
    for (size_t i = 0; i < n; i++)
        for (int t = 0; t < KB_EV_TYPE_COUNT; t++) {
            kb_buf_append_str(o, "kbridge_watch_events_total{");
            kb_m_label(o, "informer", infs[i].name);
            kb_buf_appendf(o, ",type=\"%s\"} %llu\n", kb_event_type_name((kb_event_type_t)t),
                           (unsigned long long)infs[i].st.events[t]);
        }
    kb_m_by_label(o, "kbridge_watch_errors_total", "Lists and watches that ended badly, by reason.", infs, n,
                  "reason", KB_WATCH_ERR_COUNT, kb_m_err_name, KB_M(st.errors));
    kb_m_by_label(o, "kbridge_audit_drift_total",
                  "Keys a drift audit found out of step with the server and repaired, by kind.", infs, n, "kind",
                  KB_AUDIT_KINDS, kb_m_audit_kind, KB_M(st.audit_drift));
    kb_m_head(o, "kbridge_handle_duration_seconds", "histogram",
              "Time a shard worker spends on one change (routing and handing it to the sinks), by event type.");
    for (size_t i = 0; i < n; i++)
        for (int t = 0; t < KB_EV_TYPE_COUNT; t++) {
            const kb_histogram_t *h = kb_bridge_handle_histogram(b, i, t);
            if (!h)
                continue;
            kb_buf_reset(&lab);
            kb_m_label(&lab, "informer", infs[i].name);
            kb_buf_appendf(&lab, ",type=\"%s\"", kb_event_type_name((kb_event_type_t)t));
            kb_m_histogram(o, "kbridge_handle_duration_seconds", lab.data, h);
        }
    kb_buf_fini(&lab);
}

static void kb_m_sinks(kb_buf_t *o, kb_bridge_t *b, const kb_config_t *cfg) {
    size_t n = cfg->n_sinks;
    kb_sink_stats_t *st = kb_calloc(n ? n : 1, sizeof(*st));
    for (size_t i = 0; i < n; i++) {
        kb_sink_t *sink = kb_bridge_sink(b, i);
        if (sink)
            sink->ops->stats(sink->state, &st[i]);
    }
    kb_m_head(o, "kbridge_sink_messages_total", "counter",
              "Messages the sink finished with, by result (acked: the destination confirmed; failed: given up).");
    for (size_t i = 0; i < n; i++) {
        kb_buf_append_str(o, "kbridge_sink_messages_total{");
        kb_m_label(o, "sink", cfg->sinks[i].name);
        kb_buf_appendf(o, ",result=\"acked\"} %llu\n", (unsigned long long)st[i].acked);
        kb_buf_append_str(o, "kbridge_sink_messages_total{");
        kb_m_label(o, "sink", cfg->sinks[i].name);
        kb_buf_appendf(o, ",result=\"failed\"} %llu\n", (unsigned long long)st[i].failed);
    }
    kb_sink_refusals_t *rf = kb_calloc(n ? n : 1, sizeof(*rf));
    for (size_t i = 0; i < n; i++)
        kb_bridge_sink_refusals(b, i, &rf[i]);
    kb_m_head(o, "kbridge_sink_refused_total", "counter",
              "Messages the sink refused for good (they follow its on_refused), by reason.");
    for (size_t i = 0; i < n; i++)
        for (size_t r = 0; r < rf[i].n; r++) {
            kb_buf_append_str(o, "kbridge_sink_refused_total{");
            kb_m_label(o, "sink", cfg->sinks[i].name);
            kb_buf_append_char(o, ',');
            kb_m_label(o, "reason", rf[i].reason[r]);
            kb_buf_appendf(o, "} %llu\n", (unsigned long long)rf[i].count[r]);
        }
    kb_m_head(o, "kbridge_dead_letters_total", "counter",
              "Refused messages the sink handed to its dead-letter sink (on_refused = \"dead_letter\").");
    for (size_t i = 0; i < n; i++) {
        kb_buf_append_str(o, "kbridge_dead_letters_total{");
        kb_m_label(o, "sink", cfg->sinks[i].name);
        kb_buf_appendf(o, "} %llu\n", (unsigned long long)rf[i].dead_letters);
    }
    kb_m_head(o, "kbridge_sink_stopped", "gauge",
              "1 while the sink is stopped after refusing a message (on_refused = \"stop\"): SIGHUP tries it again.");
    for (size_t i = 0; i < n; i++) {
        kb_buf_append_str(o, "kbridge_sink_stopped{");
        kb_m_label(o, "sink", cfg->sinks[i].name);
        kb_buf_appendf(o, "} %d\n", rf[i].stopped ? 1 : 0);
    }
    free(rf);
    static const struct {
        const char *name, *type, *help;
        size_t off;
        bool is_bool;
    } rows[] = {
        {"kbridge_sink_produced_total", "counter", "Messages the sink accepted.", offsetof(kb_sink_stats_t, produced),
         false},
        {"kbridge_sink_retries_total", "counter", "Re-sends after a transient failure.",
         offsetof(kb_sink_stats_t, retries), false},
        {"kbridge_sink_queue_bytes", "gauge", "Bytes waiting inside the sink for acknowledgement.",
         offsetof(kb_sink_stats_t, queue_bytes), false},
        {"kbridge_sink_connected", "gauge", "1 while the sink is connected to its destination.",
         offsetof(kb_sink_stats_t, connected), true},
    };
    for (size_t r = 0; r < KB_ARRAY_LEN(rows); r++) {
        kb_m_head(o, rows[r].name, rows[r].type, rows[r].help);
        for (size_t i = 0; i < n; i++) {
            const char *p = (const char *)&st[i] + rows[r].off;
            uint64_t v = 0;
            if (rows[r].is_bool)
                v = *(const bool *)p;
            else
                memcpy(&v, p, sizeof(v));
            kb_buf_appendf(o, "%s{", rows[r].name);
            kb_m_label(o, "sink", cfg->sinks[i].name);
            kb_buf_appendf(o, "} %llu\n", (unsigned long long)v);
        }
    }
    kb_m_head(o, "kbridge_sink_delivery_seconds", "histogram",
              "From reading a change off the watch to the sink's acknowledgement.");
    kb_buf_t lab = KB_BUF_INIT;
    for (size_t i = 0; i < n; i++) {
        const kb_histogram_t *h = kb_bridge_delivery_histogram(b, i);
        if (!h)
            continue;
        kb_buf_reset(&lab);
        kb_m_label(&lab, "sink", cfg->sinks[i].name);
        kb_m_histogram(o, "kbridge_sink_delivery_seconds", lab.data, h);
    }
    kb_buf_fini(&lab);
    free(st);
}

/* ---- process_* as the Prometheus client libraries export them ---------- */

typedef struct kb_m_proc {
    double cpu_seconds, start_time_seconds;
    double rss_bytes, vsize_bytes;
    long open_fds;        /* -1: unknown */
    double max_fds;       /* soft RLIMIT_NOFILE; -1: unknown */
    bool stat_ok;
} kb_m_proc_t;

/* Boot time (unix seconds) from /proc/stat's btime; 0 if unreadable. */
static long long kb_m_boot_time(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return 0;
    char line[256];
    long long bt = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "btime %lld", &bt) == 1)
            break;
    fclose(f);
    return bt;
}

/* /proc/self/stat: fields after the parenthesised command (which may hold spaces). */
static bool kb_m_read_stat(kb_m_proc_t *pr) {
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    if (!p)
        return false;
    unsigned long utime, stime, vsize;
    unsigned long long start;
    long rss;
    /* state(3) … utime(14) stime(15) … starttime(22) vsize(23) rss(24) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d %*d %*d %llu %lu %ld",
               &utime, &stime, &start, &vsize, &rss) != 5)
        return false;
    double tck = (double)sysconf(_SC_CLK_TCK);
    if (tck <= 0)
        return false;
    pr->cpu_seconds = (double)(utime + stime) / tck;
    pr->start_time_seconds = (double)kb_m_boot_time() + (double)start / tck;
    pr->vsize_bytes = (double)vsize;
    pr->rss_bytes = (double)rss * (double)sysconf(_SC_PAGESIZE);
    return true;
}

static long kb_m_open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static void kb_m_process(kb_buf_t *o) {
    kb_m_proc_t pr = {.open_fds = -1, .max_fds = -1};
    pr.stat_ok = kb_m_read_stat(&pr);
    pr.open_fds = kb_m_open_fds();
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        pr.max_fds = rl.rlim_cur == RLIM_INFINITY ? -1 : (double)rl.rlim_cur;
    static const struct {
        const char *name, *type, *help;
        size_t off;
        bool needs_stat;
    } rows[] = {
        {"process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
         offsetof(kb_m_proc_t, cpu_seconds), true},
        {"process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
         offsetof(kb_m_proc_t, rss_bytes), true},
        {"process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
         offsetof(kb_m_proc_t, vsize_bytes), true},
        {"process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
         offsetof(kb_m_proc_t, start_time_seconds), true},
        {"process_max_fds", "gauge", "Maximum number of open file descriptors.", offsetof(kb_m_proc_t, max_fds),
         false},
    };
    for (size_t r = 0; r < KB_ARRAY_LEN(rows); r++) {
        double v;
        memcpy(&v, (const char *)&pr + rows[r].off, sizeof(v));
        if ((rows[r].needs_stat && !pr.stat_ok) || v < 0)
            continue;
        kb_m_head(o, rows[r].name, rows[r].type, rows[r].help);
        kb_buf_appendf(o, "%s %.15g\n", rows[r].name, v);
    }
    if (pr.open_fds >= 0) {
        kb_m_head(o, "process_open_fds", "gauge", "Number of open file descriptors.");
        kb_buf_appendf(o, "process_open_fds %ld\n", pr.open_fds);
    }
}

/* ---- API-server requests (counted in informer/apiclient.c) -------------- */

static void kb_m_apiserver(kb_buf_t *o) {
    kb_api_request_stats_t rows[64];
    size_t n = kb_apiclient_request_stats(rows, KB_ARRAY_LEN(rows));
    if (n > KB_ARRAY_LEN(rows))
        n = KB_ARRAY_LEN(rows);
    kb_buf_t lab = KB_BUF_INIT;
    kb_m_head(o, "kbridge_apiserver_requests_total", "counter",
              "Requests sent to the Kubernetes API server, by verb, resource and HTTP status (code=\"error\": no response).");
    for (size_t i = 0; i < n; i++) {
        kb_buf_reset(&lab);
        kb_m_label(&lab, "verb", rows[i].verb);
        kb_buf_append_char(&lab, ',');
        kb_m_label(&lab, "resource", rows[i].resource);
        for (size_t c = 0; c < rows[i].n_codes; c++) {
            char code[16];
            int k = rows[i].code[c];
            snprintf(code, sizeof(code), "%d", k);
            kb_buf_appendf(o, "kbridge_apiserver_requests_total{%s,code=\"%s\"} %llu\n", lab.data,
                           k == 0 ? "error" : k < 0 ? "other" : code, (unsigned long long)rows[i].count[c]);
        }
    }
    kb_m_head(o, "kbridge_apiserver_request_duration_seconds", "histogram",
              "Time of one request to the API server (lists and gets; watches last until the server ends them).");
    for (size_t i = 0; i < n; i++) {
        if (!rows[i].duration)
            continue;
        kb_buf_reset(&lab);
        kb_m_label(&lab, "verb", rows[i].verb);
        kb_buf_append_char(&lab, ',');
        kb_m_label(&lab, "resource", rows[i].resource);
        kb_m_histogram(o, "kbridge_apiserver_request_duration_seconds", lab.data, rows[i].duration);
    }
    kb_buf_fini(&lab);
}

static void kb_m_build_info(kb_buf_t *o, const kb_config_t *cfg) {
    kb_m_head(o, "kbridge_build_info", "gauge", "Always 1; labels: version, build type and compiler of this binary.");
    kb_buf_append_str(o, "kbridge_build_info{");
    kb_m_label(o, "version", KB_VERSION);
    kb_buf_append_char(o, ',');
    kb_m_label(o, "build_type", KB_BUILD_TYPE);
    kb_buf_append_char(o, ',');
#if defined(__clang__)
    kb_m_label(o, "compiler", "clang " __clang_version__);
#elif defined(__GNUC__)
    kb_m_label(o, "compiler", "gcc " __VERSION__);
#else
    kb_m_label(o, "compiler", "unknown");
#endif
    kb_buf_append_str(o, "} 1\n");
    kb_m_head(o, "kbridge_info", "gauge", "Always 1; labels: version, cluster, replica shard (index/replicas).");
    kb_buf_append_str(o, "kbridge_info{version=\"" KB_VERSION "\",");
    kb_m_label(o, "cluster", cfg->cluster.name ? cfg->cluster.name : "");
    kb_buf_appendf(o, ",shard=\"%d/%d\"} 1\n", cfg->sharding_index, cfg->sharding_replicas);
}

static void kb_m_ha(kb_buf_t *o, kb_bridge_t *b) {
    kb_ha_t *ha = kb_bridge_ha(b);
    if (!ha)
        return;
    kb_ha_status_t st;
    kb_ha_status(ha, &st);
    kb_m_head(o, "kbridge_ha_leader", "gauge", "1 while this replica leads its shard's Lease and may deliver, else 0.");
    kb_buf_appendf(o, "kbridge_ha_leader{shard=\"%d\"} %d\n", kb_ha_shard(ha), st.leader ? 1 : 0);
    kb_m_head(o, "kbridge_ha_transitions_total", "counter", "Times this process started or stopped leading.");
    kb_buf_appendf(o, "kbridge_ha_transitions_total{shard=\"%d\"} %llu\n", kb_ha_shard(ha),
                   (unsigned long long)st.transitions);
    kb_m_head(o, "kbridge_ha_marks_refused_total", "counter",
              "Watermarks read from the Lease that were refused: above anything this replica has seen.");
    kb_buf_appendf(o, "kbridge_ha_marks_refused_total{shard=\"%d\"} %llu\n", kb_ha_shard(ha),
                   (unsigned long long)st.marks_refused);
    kb_m_head(o, "kbridge_ha_blind_takeovers_total", "counter",
              "Takeovers where an informer's relist had not watched resourceVersions above the watermark taken "
              "over: an object created and deleted there that the old leader delivered gets no DELETED.");
    kb_buf_appendf(o, "kbridge_ha_blind_takeovers_total{shard=\"%d\"} %llu\n", kb_ha_shard(ha),
                   (unsigned long long)st.blind_takeovers);
}

/* Called under kb_bridge_rdlock (bridge/http.c holds it for every answer). */
void kb_http__metrics(kb_bridge_t *b, int64_t since_real_ns, kb_buf_t *out) {
    const kb_config_t *cfg = kb_bridge_config(b);
    size_t n = kb_bridge_informer_count(b);
    kb_m_inf_t *infs = kb_calloc(n ? n : 1, sizeof(*infs));
    int64_t now = kb_now_real_ns();
    for (size_t i = 0; i < n; i++) {
        kb_informer_t *inf = kb_bridge_informer(b, i);
        infs[i].name = kb_informer_conf(inf)->name;
        kb_informer_stats(inf, &infs[i].st);
        kb_bridge_pipeline_stats(b, i, &infs[i].ps);
        infs[i].lag_seconds = kb_m_lag(&infs[i].st, now, since_real_ns);
        infs[i].last_change_seconds = (double)infs[i].ps.last_change_real_ns / 1e9;
        infs[i].heard_seconds = (double)infs[i].st.heard_ns / 1e9;
    }
    kb_m_process(out);
    kb_m_build_info(out, cfg);
    kb_m_apiserver(out);
    kb_m_informers(out, b, infs, n);
    kb_m_head(out, "kbridge_noop_suppressed_total", "counter",
              "Changes a route with suppress_noop skipped as identical to what it last delivered for the key.");
    size_t max_routes = cfg->n_routes ? cfg->n_routes : 1; /* an informer's routes are some of cfg's */
    const char **routes = kb_malloc(max_routes * sizeof(*routes));
    uint64_t *counts = kb_malloc(max_routes * sizeof(*counts));
    for (size_t i = 0; i < n; i++) {
        size_t k = kb_bridge_noop_counts(b, i, routes, counts, max_routes);
        for (size_t j = 0; j < k; j++) {
            kb_buf_append_str(out, "kbridge_noop_suppressed_total{");
            kb_m_label(out, "informer", infs[i].name);
            kb_buf_append_char(out, ',');
            kb_m_label(out, "route", routes[j]);
            kb_buf_appendf(out, "} %llu\n", (unsigned long long)counts[j]);
        }
    }
    free(routes);
    free(counts);
    kb_m_sinks(out, b, cfg);
    kb_m_ha(out, b);
    free(infs);
}
