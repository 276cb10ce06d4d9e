/* bench/bench_zcache.c — the compressed cache's cost per object, by level.
 *
 * Benchmark, not a test. Reads objects (one compact JSON object per line,
 * e.g. a list's items as kbridge caches them) and, for zstd levels 1 to 3,
 * caches them all through a zcache into an indexer as the informer does:
 * prints the cache's memory per object (entries, table, dictionary) beside
 * the same cache uncompressed, the time to train, the pack cost per object
 * (the reflector thread pays it) and the expand cost per object (snapshots,
 * resync, kube API lists pay it).
 *
 * Usage: bench_zcache FILE.jsonl [repeat]
 *
 * With --churn N[,N…] [--changes M] it measures instead what one change of
 * one key costs the cache as the cache grows: N keys cached (the file's
 * objects in turn, filed under their "app" label), then M changes to
 * random keys, each as the informer's apply path makes it — a new event
 * (the object, about 4 KB), packed, put in place of the key's entry, the
 * replaced entry freed, the new event freed 256 changes later (a queue's
 * worth) — timed on the thread's CPU clock; and the process's RSS per key.
 * One thread: no wake-ups, no sink, no decoding (bench/million.py has all
 * of those), only the cache and the allocator under it.
 */
#include "common/event.h"
#include "common/fields.h"
#include "common/time.h"
#include "informer/indexer.h"
#include "informer/zcache.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static kb_event_t **kb_bz_read(const char *path, kb_resource_t *res, size_t *n_out) {
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t n = 0, cap = 0;
    kb_event_t **evs = NULL;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 1) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            evs = realloc(evs, cap * sizeof(*evs));
        }
        char name[32], rv[24];
        snprintf(name, sizeof(name), "obj-%zu", n);
        snprintf(rv, sizeof(rv), "%zu", n + 1);
        kb_event_init_t in = {.type = KB_EV_ADDED, .res = res, .ns = "ns", .ns_len = 2, .name = name,
                              .name_len = strlen(name), .uid = "0f0c2f3e-8d4b-4a4c-9c55-3a1f9e2b7d10",
                              .uid_len = 36, .rv = rv, .rv_len = strlen(rv), .obj = line,
                              .obj_len = (size_t)len - 1};
        evs[n++] = kb_event_new(&in);
    }
    free(line);
    fclose(f);
    *n_out = n;
    return evs;
}

static void kb_bz_level(kb_event_t **evs, size_t n, int level, size_t plain_bytes) {
    kb_zcache_opts_t o;
    kb_zcache_opts_default(&o);
    o.level = level;
    kb_indexer_t *idx = kb_indexer_new(16, NULL, 0);
    kb_zcache_t *zc = kb_zcache_new(&o, "bench", idx);
    kb_zcache_stats_t st;
    int64_t t0 = kb_now_mono_ns(), trained = 0, t_end;
    size_t after = 0; /* objects put after the training */
    for (size_t i = 0; i < n; i++) {
        kb_event_t *e = kb_zcache_pack(zc, evs[i]);
        kb_indexer_put(idx, e, NULL, 0, NULL);
        kb_event_unref(e);
        if (!trained) {
            kb_zcache_stats(zc, &st);
            if (st.trainings) {
                trained = kb_now_mono_ns();
                after = n - i - 1;
            }
        }
    }
    t_end = kb_now_mono_ns();
    double train_ms = trained ? (double)(trained - t0) / 1e6 : 0;
    double put_us = after ? (double)(t_end - trained) / 1e3 / (double)after : 0;
    kb_zcache_stats(zc, &st);
    kb_zcache_stats(zc, &st);
    size_t mem = kb_indexer_bytes(idx) + st.dict_bytes;
    kb_event_list_t all;
    kb_event_list_init(&all);
    kb_indexer_list(idx, NULL, &all);
    t0 = kb_now_mono_ns();
    size_t bad = 0;
    for (size_t i = 0; i < all.n; i++) {
        kb_event_t *full = kb_zcache_unpack(all.ev[i]);
        bad += full == NULL;
        kb_event_unref(full);
    }
    double get_s = (double)(kb_now_mono_ns() - t0) / 1e9;
    kb_event_list_fini(&all);
    printf("level %d: %5.0f B/object cached (uncompressed %5.0f B), frames %4.0f B, dictionary %zu B; first "
           "objects and training %.0f ms, then pack+put %.2f us/object; expand %.2f us/object%s\n",
           level, (double)mem / (double)n, (double)plain_bytes / (double)n,
           (double)st.packed_bytes / (double)(st.packed ? st.packed : 1), st.dict_bytes, train_ms, put_us,
           get_s * 1e6 / (double)n, bad ? " (SOME FAILED)" : "");
    kb_indexer_destroy(idx);
    kb_zcache_destroy(zc);
}

/* ---- --churn ---------------------------------------------------------- */

static int64_t kb_bz_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static size_t kb_bz_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %zu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

/* Key k's state made from src (rv: its resourceVersion), labels span set. */
static kb_event_t *kb_bz_make(const kb_event_t *src, size_t k, uint64_t rv, kb_resource_t *res) {
    char ns[16], name[32], rvs[24];
    snprintf(ns, sizeof(ns), "team-%zu", k % 50);
    snprintf(name, sizeof(name), "pod-%zu", k);
    snprintf(rvs, sizeof(rvs), "%llu", (unsigned long long)rv);
    const char *meta, *labels = NULL;
    size_t mlen, llen = 0;
    if (!kb_fields_member(src->obj, src->obj_len, "metadata", 8, &meta, &mlen) ||
        !kb_fields_member(meta, mlen, "labels", 6, &labels, &llen)) {
        labels = NULL;
        llen = 0;
    }
    kb_event_init_t in = {.type = KB_EV_MODIFIED, .res = res, .ns = ns, .ns_len = strlen(ns), .name = name,
                          .name_len = strlen(name), .uid = "0f0c2f3e-8d4b-4a4c-9c55-3a1f9e2b7d10", .uid_len = 36,
                          .rv = rvs, .rv_len = strlen(rvs), .obj = src->obj, .obj_len = src->obj_len,
                          .labels_off = labels ? (size_t)(labels - src->obj) : 0, .labels_len = llen};
    return kb_event_new(&in);
}

static void kb_bz_apply(kb_zcache_t *zc, kb_indexer_t *idx, kb_event_t *ev) {
    kb_event_t *e = kb_zcache_pack(zc, ev);
    kb_indexer_put(idx, e, ev->labels_len ? ev->obj + ev->labels_off : NULL, ev->labels_len, NULL);
    kb_event_unref(e);
}

#define KB_BZ_QUEUE 256

static void kb_bz_churn(kb_event_t **evs, size_t n_src, size_t n_keys, size_t changes, kb_resource_t *res) {
    size_t rss0 = kb_bz_rss();
    const char *app = "app";
    kb_indexer_t *idx = kb_indexer_new(16, &app, 1);
    kb_zcache_t *zc = kb_zcache_new(NULL, "bench", idx);
    uint64_t rv = 1;
    for (size_t k = 0; k < n_keys; k++) {
        kb_event_t *ev = kb_bz_make(evs[k % n_src], k, rv++, res);
        kb_bz_apply(zc, idx, ev);
        kb_event_unref(ev);
    }
    size_t rss1 = kb_bz_rss();
    kb_event_t *queue[KB_BZ_QUEUE] = {0};
    uint64_t x = 88172645463325252u;
    int64_t t0 = kb_bz_cpu_ns();
    for (size_t c = 0; c < changes; c++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t k = (size_t)(x % n_keys);
        kb_event_t *ev = kb_bz_make(evs[(k + c) % n_src], k, rv++, res); /* another object: another size */
        kb_bz_apply(zc, idx, ev);
        kb_event_unref(queue[c % KB_BZ_QUEUE]);
        queue[c % KB_BZ_QUEUE] = ev;
    }
    double ns = (double)(kb_bz_cpu_ns() - t0) / (double)changes;
    for (size_t i = 0; i < KB_BZ_QUEUE; i++)
        kb_event_unref(queue[i]);
    printf("%8zu keys: %6.0f ns per change (CPU), %4.0f B RSS per key after the first puts, %4.0f B after "
           "%zu changes\n",
           n_keys, ns, (double)(rss1 - rss0) / (double)n_keys, (double)(kb_bz_rss() - rss0) / (double)n_keys,
           changes);
    kb_indexer_destroy(idx);
    kb_zcache_destroy(zc);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE.jsonl [repeat] | FILE.jsonl --churn N[,N...] [--changes M]\n", argv[0]);
        return 2;
    }
    bool churn = argc > 3 && !strcmp(argv[2], "--churn");
    int repeat = argc > 2 && !churn ? atoi(argv[2]) : 1;
    kb_resource_t *res = kb_resource_new("bench", "bench", "", "v1", "pods");
    size_t n = 0;
    kb_event_t **evs = kb_bz_read(argv[1], res, &n);
    if (!evs || n == 0) {
        fprintf(stderr, "%s: no objects\n", argv[1]);
        return 1;
    }
    if (churn) {
        size_t changes = argc > 5 && !strcmp(argv[4], "--changes") ? strtoull(argv[5], NULL, 10) : 200000;
        for (char *p = argv[3]; *p;) {
            char *end;
            size_t keys = strtoull(p, &end, 10);
            if (keys)
                kb_bz_churn(evs, n, keys, changes, res);
            p = *end ? end + 1 : end;
        }
        repeat = 0;
    }
    kb_indexer_t *plain = kb_indexer_new(16, NULL, 0);
    size_t raw = 0;
    for (size_t i = 0; i < n; i++) {
        kb_indexer_put(plain, evs[i], NULL, 0, NULL);
        raw += evs[i]->obj_len;
    }
    if (repeat)
        printf("%zu objects, %.0f B each on average\n", n, (double)raw / (double)n);
    for (int r = 0; r < repeat; r++)
        for (int level = 1; level <= 3; level++)
            kb_bz_level(evs, n, level, kb_indexer_bytes(plain));
    kb_indexer_destroy(plain);
    for (size_t i = 0; i < n; i++)
        kb_event_unref(evs[i]);
    free(evs);
    kb_resource_unref(res);
    return 0;
}
