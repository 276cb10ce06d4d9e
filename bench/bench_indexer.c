/* bench/bench_indexer.c — how long does `-l app=x` take over a million cached objects?
 *
 * The evidence behind the label indexes (docs/informer.md, "Indexes"): an
 * indexer with index_labels = ["app"] is filled with N entries (default
 * 1,000,000) in 16 namespaces, ~100 distinct app values and four other
 * labels each, as Pods carry them. Then the same query is answered
 *   - through the index: kb_indexer_select with app=app-42 (the candidates
 *     are exactly the matches: no object is read),
 *   - by a full scan: every entry listed and the selector matched on its
 *     labels, which is what a cache without the index must do,
 * and also with a namespace (-n ns-2 -l app=app-42). Each is run R times
 * (default 5) and the median and the best are printed in milliseconds, with
 * the matches found. Taking references is all either way: the object
 * bytes are never copied. Single thread.
 *
 * Usage: bench_indexer [entries (default 1000000)] [repeats (default 5)]
 */
#include "common/buf.h"
#include "common/hash.h"
#include "common/selector.h"
#include "informer/indexer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double kb_bench_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int kb_bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One Pod-like entry: identity and a labels object, as the cache holds it. */
static void kb_bench_put(kb_indexer_t *idx, kb_resource_t *res, unsigned i, kb_buf_t *obj) {
    char ns[16], name[32], rv[16], uid[40];
    snprintf(ns, sizeof(ns), "ns-%u", i % 16);
    snprintf(name, sizeof(name), "web-7d4b9c6f5-%07u", i);
    snprintf(rv, sizeof(rv), "%u", 100000 + i);
    snprintf(uid, sizeof(uid), "3f6a1c2e-%04x-4b7d-9a51-0c8e2f7b%04x", i & 0xffff, (i * 7919u) & 0xffff);
    kb_buf_reset(obj);
    kb_buf_appendf(obj, "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\",\"labels\":", name, ns);
    size_t labels_off = obj->len;
    kb_buf_appendf(obj,
                   "{\"app\":\"app-%u\",\"pod-template-hash\":\"7d4b9c6f5\",\"tier\":\"frontend\","
                   "\"version\":\"v2.14.1\",\"team\":\"team-%u\"}",
                   (i * 2654435761u) % 100, i % 7);
    size_t labels_len = obj->len - labels_off;
    kb_buf_append_str(obj, "}}");
    kb_event_init_t in = {.type = KB_EV_ADDED, .res = res, .ns = ns, .ns_len = strlen(ns), .name = name,
                          .name_len = strlen(name), .uid = uid, .uid_len = strlen(uid), .rv = rv,
                          .rv_len = strlen(rv), .obj = obj->data, .obj_len = obj->len,
                          .labels_off = labels_off, .labels_len = labels_len};
    kb_event_t *ev = kb_event_new(&in);
    kb_indexer_put(idx, ev, ev->obj + ev->labels_off, ev->labels_len, NULL);
    kb_event_unref(ev);
}

/* The answer through the index: the candidates, checked only when not exact. */
static size_t kb_bench_indexed(kb_indexer_t *idx, const char *ns, const kb_selector_t *sel) {
    kb_event_list_t l;
    kb_event_list_init(&l);
    bool exact = false;
    kb_indexer_select(idx, ns, sel, &l, &exact);
    size_t n = 0;
    for (size_t i = 0; i < l.n; i++)
        n += exact || kb_selector_match_json(sel, l.ev[i]->obj + l.ev[i]->labels_off, l.ev[i]->labels_len);
    kb_event_list_fini(&l);
    return n;
}

/* The answer without it: every entry (of ns) listed, the selector matched on each. */
static size_t kb_bench_scan(kb_indexer_t *idx, const char *ns, const kb_selector_t *sel) {
    kb_event_list_t l;
    kb_event_list_init(&l);
    kb_indexer_list(idx, ns, &l);
    size_t n = 0;
    for (size_t i = 0; i < l.n; i++)
        n += kb_selector_match_json(sel, l.ev[i]->obj + l.ev[i]->labels_off, l.ev[i]->labels_len);
    kb_event_list_fini(&l);
    return n;
}

static void kb_bench_run(const char *what, size_t (*fn)(kb_indexer_t *, const char *, const kb_selector_t *),
                         kb_indexer_t *idx, const char *ns, const kb_selector_t *sel, int repeats) {
    double t[64];
    size_t found = 0;
    for (int r = 0; r < repeats; r++) {
        double t0 = kb_bench_ms();
        found = fn(idx, ns, sel);
        t[r] = kb_bench_ms() - t0;
    }
    qsort(t, (size_t)repeats, sizeof(t[0]), kb_bench_cmp);
    printf("  %-44s %9.2f ms median %9.2f ms best   %zu matches\n", what, t[repeats / 2], t[0], found);
}

int main(int argc, char **argv) {
    unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 1000000u;
    int repeats = argc > 2 ? atoi(argv[2]) : 5;
    if (repeats < 1 || repeats > 64)
        repeats = 5;
    static const char *const keys[] = {"app"};
    kb_resource_t *res = kb_resource_new("c1", "pods", "", "v1", "pods");
    kb_indexer_t *idx = kb_indexer_new(16, keys, 1);
    kb_buf_t obj = KB_BUF_INIT;
    double t0 = kb_bench_ms();
    for (unsigned i = 0; i < n; i++)
        kb_bench_put(idx, res, i, &obj);
    double fill = kb_bench_ms() - t0;
    kb_buf_fini(&obj);
    printf("bench_indexer: %u entries, index_labels = [\"app\"] (100 values), 16 namespaces; filled in %.0f ms; "
           "%.0f MB in the cache (%.0f B per entry)\n",
           n, fill, (double)kb_indexer_bytes(idx) / 1e6, (double)kb_indexer_bytes(idx) / (n ? n : 1));
    kb_selector_t *sel = kb_selector_parse("app=app-42", NULL, 0);
    kb_selector_t *sel2 = kb_selector_parse("app=app-42,tier=frontend", NULL, 0);
    kb_selector_t *neg = kb_selector_parse("team=team-3", NULL, 0);
    printf("-l app=app-42 (target: <= 50 ms over 1M objects)\n");
    kb_bench_run("through the index (kb_indexer_select)", kb_bench_indexed, idx, NULL, sel, repeats);
    kb_bench_run("full scan (list + kb_selector_match_json)", kb_bench_scan, idx, NULL, sel, repeats);
    printf("-l app=app-42,tier=frontend (index, then the second term checked)\n");
    kb_bench_run("through the index", kb_bench_indexed, idx, NULL, sel2, repeats);
    kb_bench_run("full scan", kb_bench_scan, idx, NULL, sel2, repeats);
    printf("-n ns-2 -l app=app-42\n");
    kb_bench_run("through the index", kb_bench_indexed, idx, "ns-2", sel, repeats);
    kb_bench_run("namespace index + match", kb_bench_scan, idx, "ns-2", sel, repeats);
    printf("-l team=team-3 (not an indexed key: a scan either way)\n");
    kb_bench_run("kb_indexer_select", kb_bench_indexed, idx, NULL, neg, repeats);
    kb_selector_free(sel);
    kb_selector_free(sel2);
    kb_selector_free(neg);
    kb_indexer_destroy(idx);
    kb_resource_unref(res);
    return 0;
}
