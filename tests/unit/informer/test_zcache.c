/* tests/unit/informer/test_zcache.c — the compressed cache: packed entries
 * expand to exactly the bytes they were made from, a retrain leaves older
 * entries readable, corrupt frames are refused, and the accounting adds up. */
#include "common/event.h"
#include "common/hash.h"
#include "informer/indexer.h"
#include "informer/state.h"
#include "informer/zcache.h"

#include <lmdb.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static kb_resource_t *res;
static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int setup(void **state) {
    (void)state;
    res = kb_resource_new("c1", "pods", "", "v1", "pods");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kb_resource_unref(res);
    return 0;
}

static void uuid(char *out) {
    uint64_t a = rnd(), b = rnd();
    snprintf(out, 37, "%08llx-%04llx-%04llx-%04llx-%012llx", (unsigned long long)(a >> 32),
             (unsigned long long)(a >> 16 & 0xffff), (unsigned long long)(a & 0xffff),
             (unsigned long long)(b >> 48), (unsigned long long)(b & 0xffffffffffffull));
}

/* A Pod-like object of about 3 KB (shape 0) or a ConfigMap-like one of a
 * quite different vocabulary (shape 1), with the parts that differ per
 * object random: names, uids, times, addresses, a hash. */
static kb_event_t *mk(unsigned i, int shape) {
    char ns[16], name[32], uid[37], owner[37], ts[32], obj[8192], rv[16];
    snprintf(ns, sizeof(ns), "ns-%u", i % 7);
    snprintf(name, sizeof(name), "%s-%06u-%04llx", shape ? "cfg" : "web", i, (unsigned long long)(rnd() & 0xffff));
    uuid(uid);
    uuid(owner);
    snprintf(ts, sizeof(ts), "2026-%02u-%02uT%02u:%02u:%02uZ", (unsigned)(rnd() % 12 + 1),
             (unsigned)(rnd() % 28 + 1), (unsigned)(rnd() % 24), (unsigned)(rnd() % 60), (unsigned)(rnd() % 60));
    snprintf(rv, sizeof(rv), "%u", 1000 + i);
    const char *app = (i % 3 == 0) ? "web" : (i % 3 == 1) ? "api" : "worker";
    int n;
    if (shape == 0)
        n = snprintf(obj, sizeof(obj),
            "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\",\"uid\":\"%s\","
            "\"resourceVersion\":\"%s\",\"creationTimestamp\":\"%s\",\"labels\":{\"app\":\"%s\",\"tier\":\"%s\"},"
            "\"annotations\":{\"prometheus.io/scrape\":\"true\",\"prometheus.io/port\":\"9090\"},"
            "\"ownerReferences\":[{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"%s-%llx\","
            "\"uid\":\"%s\",\"controller\":true,\"blockOwnerDeletion\":true}]},"
            "\"spec\":{\"volumes\":[{\"name\":\"config\",\"configMap\":{\"name\":\"%s-config\",\"defaultMode\":420}}],"
            "\"containers\":[{\"name\":\"app\",\"image\":\"registry.example.com/%s:1.%u.0\","
            "\"ports\":[{\"name\":\"http\",\"containerPort\":8080,\"protocol\":\"TCP\"}],"
            "\"env\":[{\"name\":\"APP_NAME\",\"value\":\"%s\"},{\"name\":\"LOG_LEVEL\",\"value\":\"info\"}],"
            "\"resources\":{\"limits\":{\"cpu\":\"500m\",\"memory\":\"256Mi\"},\"requests\":{\"cpu\":\"100m\"}},"
            "\"livenessProbe\":{\"httpGet\":{\"path\":\"/healthz\",\"port\":8080,\"scheme\":\"HTTP\"},"
            "\"initialDelaySeconds\":10,\"timeoutSeconds\":1,\"periodSeconds\":10,\"failureThreshold\":3},"
            "\"terminationMessagePath\":\"/dev/termination-log\",\"imagePullPolicy\":\"IfNotPresent\"}],"
            "\"restartPolicy\":\"Always\",\"terminationGracePeriodSeconds\":30,\"dnsPolicy\":\"ClusterFirst\","
            "\"serviceAccountName\":\"default\",\"nodeName\":\"node-%u\",\"schedulerName\":\"default-scheduler\"},"
            "\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\","
            "\"lastTransitionTime\":\"%s\"},{\"type\":\"PodScheduled\",\"status\":\"True\",\"lastTransitionTime\":\"%s\"}],"
            "\"hostIP\":\"10.0.%u.%u\",\"podIP\":\"10.244.%u.%u\",\"startTime\":\"%s\","
            "\"containerStatuses\":[{\"name\":\"app\",\"ready\":true,\"restartCount\":%u,"
            "\"containerID\":\"containerd://%s%s\",\"started\":true}],\"qosClass\":\"Burstable\"}}",
            name, ns, uid, rv, ts, app, (i & 1) ? "frontend" : "backend", app, (unsigned long long)(rnd() & 0xfffff),
            owner, app, app, (unsigned)(i % 7), app, (unsigned)(rnd() % 50), ts, ts, (unsigned)(rnd() % 250),
            (unsigned)(rnd() % 250), (unsigned)(rnd() % 250), (unsigned)(rnd() % 250), ts, (unsigned)(rnd() % 4),
            uid, owner);
    else
        n = snprintf(obj, sizeof(obj),
            "{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\","
            "\"uid\":\"%s\",\"resourceVersion\":\"%s\",\"labels\":{\"team\":\"t%u\"}},\"data\":{\"settings.ini\":"
            "\"[server]\\nlisten=0.0.0.0:%u\\nworkers=%u\\n[cache]\\nsize=%uMi\\nttl=%us\\n\",\"owner\":\"%s\","
            "\"checksum\":\"%s%s\",\"created\":\"%s\",\"motd\":\"Welcome to cluster zone %u, rack %u; maintenance "
            "windows are announced on the operations channel two days ahead.\"}}",
            name, ns, uid, rv, (unsigned)(i % 9), (unsigned)(rnd() % 60000), (unsigned)(rnd() % 64),
            (unsigned)(rnd() % 4096), (unsigned)(rnd() % 3600), owner, uid, owner, ts, (unsigned)(rnd() % 9),
            (unsigned)(rnd() % 40));
    assert_true(n > 0 && (size_t)n < sizeof(obj));
    const char *l = strstr(obj, "\"labels\":");
    const char *lo = l + strlen("\"labels\":");
    const char *le = strchr(lo, '}') + 1;
    kb_event_init_t in = {
        .type = KB_EV_ADDED,
        .res = res,
        .ns = ns, .ns_len = strlen(ns),
        .name = name, .name_len = strlen(name),
        .uid = uid, .uid_len = strlen(uid),
        .rv = rv, .rv_len = strlen(rv),
        .obj = obj, .obj_len = (size_t)n,
        .labels_off = (size_t)(lo - obj), .labels_len = (size_t)(le - lo),
    };
    kb_event_t *ev = kb_event_new(&in);
    ev->seq = i + 1;
    return ev;
}

/* Cache ev through zc (as the informer's put site does); keeps ev. */
static void cache(kb_zcache_t *zc, kb_indexer_t *idx, kb_event_t *ev) {
    kb_event_t *e = kb_zcache_pack(zc, ev);
    kb_indexer_put(idx, e, ev->labels_len ? ev->obj + ev->labels_off : NULL, ev->labels_len, NULL);
    kb_event_unref(e);
}

static kb_event_t *entry(kb_indexer_t *idx, const kb_event_t *ev) {
    return kb_indexer_get(idx, ev->key, ev->key_len, ev->key_hash);
}

/* The expanded entry equals the event it was made from, byte for byte. */
static void assert_same(const kb_event_t *full, const kb_event_t *orig) {
    assert_non_null(full);
    assert_null(full->zdict);
    assert_int_equal(full->obj_len, orig->obj_len);
    assert_memory_equal(full->obj, orig->obj, orig->obj_len);
    assert_int_equal(full->obj[full->obj_len], '\0');
    assert_int_equal(full->labels_off, orig->labels_off);
    assert_int_equal(full->labels_len, orig->labels_len);
    assert_string_equal(full->key, orig->key);
    assert_string_equal(full->uid, orig->uid);
    assert_string_equal(full->rv, orig->rv);
    assert_int_equal(full->seq, orig->seq);
    assert_int_equal(full->type, orig->type);
}

#define N_PODS 3000

/* Many varied Pods: after the first dictionary every entry is packed (the
 * samples too), each expands to its exact bytes, and the whole cache (entries,
 * table, dictionary) is under 1 KB per object. */
static void test_round_trip(void **state) {
    (void)state;
    kb_indexer_t *idx = kb_indexer_new(16, NULL, 0);
    kb_zcache_t *zc = kb_zcache_new(NULL, "pods", idx);
    kb_event_t **orig = calloc(N_PODS, sizeof(*orig));
    size_t raw = 0;
    for (unsigned i = 0; i < N_PODS; i++) {
        orig[i] = mk(i, 0);
        raw += kb_event_size(orig[i]);
        cache(zc, idx, orig[i]);
    }
    kb_zcache_stats_t st;
    kb_zcache_stats(zc, &st);
    assert_int_equal(st.trainings, 1);
    assert_int_equal(st.dicts, 1);
    assert_int_equal(st.packed, N_PODS);
    assert_true(st.packed_raw > 3 * st.packed_bytes);
    for (unsigned i = 0; i < N_PODS; i++) {
        kb_event_t *e = entry(idx, orig[i]);
        assert_non_null(e->zdict);
        assert_int_equal(e->obj_len, 0);
        assert_int_equal(e->labels_len, 0);
        assert_string_equal(e->obj, "");
        assert_string_equal(e->key, orig[i]->key); /* identity stays readable */
        assert_string_equal(e->rv, orig[i]->rv);
        kb_event_t *full = kb_zcache_unpack(e);
        assert_same(full, orig[i]);
        kb_event_unref(full);
        kb_event_unref(e);
    }
    size_t mem = kb_indexer_bytes(idx) + st.dict_bytes;
    printf("# %u pods: %zu B/object raw, %zu B/object cached (dictionary %zu B)\n", N_PODS, raw / N_PODS,
           mem / N_PODS, st.dict_bytes);
    assert_true(mem / N_PODS <= 1024);
    for (unsigned i = 0; i < N_PODS; i++)
        kb_event_unref(orig[i]);
    free(orig);
    kb_indexer_destroy(idx);
    kb_zcache_stats(zc, &st);
    assert_int_equal(st.packed, 0);
    assert_int_equal(st.packed_bytes, 0);
    assert_int_equal(st.packed_raw, 0);
    assert_int_equal(st.dicts, 1); /* the current one */
    kb_zcache_destroy(zc);
}

/* A change of shape drops the ratio: the zcache samples and trains again;
 * entries of the first dictionary stay readable, and the first dictionary
 * lives exactly as long as an entry uses it (even after the zcache). */
static void test_retrain_keeps_old_entries(void **state) {
    (void)state;
    kb_zcache_opts_t o;
    kb_zcache_opts_default(&o);
    o.sample_objects = 256;
    o.window = 128;
    kb_indexer_t *idx = kb_indexer_new(4, NULL, 0);
    kb_zcache_t *zc = kb_zcache_new(&o, "mixed", idx);
    enum { A = 600, B = 1200 };
    kb_event_t *orig[A + B];
    for (unsigned i = 0; i < A; i++) {
        orig[i] = mk(i, 0);
        cache(zc, idx, orig[i]);
    }
    kb_zcache_stats_t st;
    kb_zcache_stats(zc, &st);
    assert_int_equal(st.trainings, 1);
    kb_event_t *first = entry(idx, orig[0]);
    const kb_event_zdict_t *d1 = first->zdict;
    for (unsigned i = A; i < A + B; i++) {
        orig[i] = mk(i, 1);
        cache(zc, idx, orig[i]);
    }
    kb_zcache_stats(zc, &st);
    assert_int_equal(st.trainings, 2);
    assert_int_equal(st.dicts, 2);
    kb_event_t *last = entry(idx, orig[A + B - 1]);
    assert_non_null(last->zdict);
    assert_ptr_not_equal(last->zdict, d1);
    kb_event_unref(last);
    for (unsigned i = 0; i < A + B; i++) {
        kb_event_t *e = entry(idx, orig[i]);
        kb_event_t *full = kb_zcache_unpack(e);
        assert_same(full, orig[i]);
        kb_event_unref(full);
        kb_event_unref(e);
    }
    /* Drop the first dictionary's entries from the cache: one reference
     * (first) keeps it; the zcache may go meanwhile. */
    for (unsigned i = 0; i < A; i++)
        assert_true(kb_indexer_delete(idx, orig[i]->key, orig[i]->key_len, orig[i]->key_hash, NULL));
    kb_zcache_stats(zc, &st);
    assert_int_equal(st.dicts, 2);
    kb_zcache_destroy(zc);
    kb_event_t *full = kb_zcache_unpack(first);
    assert_same(full, orig[0]);
    kb_event_unref(full);
    kb_event_unref(first);
    kb_indexer_destroy(idx);
    for (unsigned i = 0; i < A + B; i++)
        kb_event_unref(orig[i]);
}

/* A frame that does not expand to what the entry says is refused. */
static void test_corrupt_frames_fail(void **state) {
    (void)state;
    kb_indexer_t *idx = kb_indexer_new(4, NULL, 0);
    kb_zcache_t *zc = kb_zcache_new(NULL, "pods", idx);
    kb_event_t *orig[1100];
    for (unsigned i = 0; i < 1100; i++) {
        orig[i] = mk(i, 0);
        cache(zc, idx, orig[i]);
    }
    kb_event_t *e = kb_zcache_pack(zc, orig[5]);
    assert_non_null(e->zdict);
    uint8_t *frame = (uint8_t *)kb_event_frame(e);
    uint8_t *saved = malloc(e->zlen);
    memcpy(saved, frame, e->zlen);
    uint32_t zlen = e->zlen, raw = e->zraw_len;

    e->zlen = zlen / 2; /* truncated */
    assert_null(kb_zcache_unpack(e));
    e->zlen = zlen;
    e->zraw_len = raw + 1; /* says more than the frame holds */
    assert_null(kb_zcache_unpack(e));
    e->zraw_len = raw - 1; /* says less */
    assert_null(kb_zcache_unpack(e));
    e->zraw_len = raw;
    memset(frame, 0xa5, zlen); /* garbage */
    assert_null(kb_zcache_unpack(e));
    memcpy(frame, saved, zlen);
    frame[0] ^= 0xff; /* a broken header */
    kb_event_t *bad = kb_zcache_unpack(e);
    if (bad) /* a header that still decodes must at least not pass for the object */
        assert_true(bad->obj_len != orig[5]->obj_len || memcmp(bad->obj, orig[5]->obj, bad->obj_len));
    kb_event_unref(bad);
    memcpy(frame, saved, zlen);
    kb_event_t *full = kb_zcache_unpack(e); /* repaired: fine again */
    assert_same(full, orig[5]);
    kb_event_unref(full);
    free(saved);
    kb_event_unref(e);
    for (unsigned i = 0; i < 1100; i++)
        kb_event_unref(orig[i]);
    kb_indexer_destroy(idx);
    kb_zcache_destroy(zc);
}

/* Before a dictionary exists (tiny objects: not enough sample bytes for a
 * useful one, however many), objects stay plain and readable as they are; events
 * without object or already packed pass through. */
static void test_plain_until_trained(void **state) {
    (void)state;
    kb_zcache_opts_t o;
    kb_zcache_opts_default(&o);
    o.sample_objects = 8;
    kb_indexer_t *idx = kb_indexer_new(4, NULL, 0);
    kb_zcache_t *zc = kb_zcache_new(&o, "tiny", idx);
    kb_event_t *evs[20];
    for (unsigned i = 0; i < 20; i++) {
        char name[16], obj[64];
        snprintf(name, sizeof(name), "n%u", i);
        int n = snprintf(obj, sizeof(obj), "{\"v\":%u}", i);
        kb_event_init_t in = {.type = KB_EV_ADDED, .res = res, .name = name, .name_len = strlen(name),
                              .uid = "u", .uid_len = 1, .rv = "1", .rv_len = 1, .obj = obj, .obj_len = (size_t)n};
        evs[i] = kb_event_new(&in);
        kb_event_t *e = kb_zcache_pack(zc, evs[i]);
        assert_ptr_equal(e, evs[i]); /* plain: the event itself */
        kb_event_t *same = kb_zcache_unpack(e);
        assert_ptr_equal(same, e);
        kb_event_unref(same);
        kb_event_unref(e);
    }
    kb_zcache_stats_t st;
    kb_zcache_stats(zc, &st);
    assert_int_equal(st.trainings, 0);
    assert_int_equal(st.packed, 0);
    kb_event_t *thin = kb_event_thin(evs[0]);
    kb_event_t *e = kb_zcache_pack(zc, thin);
    assert_ptr_equal(e, thin);
    kb_event_unref(e);
    kb_event_unref(thin);
    for (unsigned i = 0; i < 20; i++)
        kb_event_unref(evs[i]);
    kb_zcache_destroy(zc);
    kb_indexer_destroy(idx);
}

/* kb_event_size of a packed entry counts its frame, not the object. */
static void test_sizes(void **state) {
    (void)state;
    kb_zcache_t *zc = kb_zcache_new(NULL, "pods", NULL);
    kb_event_t *orig[1030];
    for (unsigned i = 0; i < 1030; i++)
        orig[i] = mk(i, 0);
    for (unsigned i = 0; i < 1030; i++) {
        kb_event_t *e = kb_zcache_pack(zc, orig[i]);
        if (e->zdict)
            assert_int_equal(kb_event_size(e), kb_event_size(orig[i]) - orig[i]->obj_len + e->zlen);
        kb_event_unref(e);
    }
    kb_zcache_stats_t st;
    kb_zcache_stats(zc, &st);
    assert_int_equal(st.trainings, 1);
    assert_int_equal(st.packed, 0); /* nothing kept them */
    for (unsigned i = 0; i < 1030; i++)
        kb_event_unref(orig[i]);
    kb_zcache_destroy(zc);
}

static kb_state_t *open_state(const char *dir) {
    char why[256];
    kb_state_opts_t so = {.dir = dir, .map_bytes = 256u << 20, .journal_max_bytes = 1u << 30,
                          .journal_max_age_s = 3600, .dictionaries = true};
    kb_state_t *st = kb_state_open(&so, why, sizeof(why));
    assert_non_null(st);
    return st;
}

/* Write orig[from, to) to st, 100 per transaction. */
static void write_state(kb_state_t *st, kb_event_t **orig, unsigned from, unsigned to) {
    for (unsigned i = from; i < to; i += 100) {
        assert_int_equal(kb_state_begin(st), KB_OK);
        for (unsigned j = i; j < to && j < i + 100; j++)
            assert_int_equal(kb_state_put_event(st, orig[j], ""), KB_OK);
        assert_int_equal(kb_state_commit(st), KB_OK);
    }
}

static void assert_state_has(kb_state_t *st, kb_event_t **orig, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        kb_event_t *got = kb_state_get(st, orig[i]->key, orig[i]->key_len, res);
        assert_non_null(got);
        assert_int_equal(got->obj_len, orig[i]->obj_len);
        assert_memory_equal(got->obj, orig[i]->obj, orig[i]->obj_len);
        assert_int_equal(got->labels_off, orig[i]->labels_off);
        assert_int_equal(got->labels_len, orig[i]->labels_len);
        kb_event_unref(got);
    }
}

/* The id of the dictionary state_dir names as its newest, 0 if none. */
static uint32_t state_dict(const char *dir) {
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta;
    uint32_t id = 0;
    assert_int_equal(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 4);
    assert_int_equal(mdb_env_open(env, dir, MDB_RDONLY | MDB_NOLOCK, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    MDB_val k = {13, (void *)"zdict_current"}, v;
    if (mdb_dbi_open(txn, "meta", 0, &meta) == 0 && mdb_get(txn, meta, &k, &v) == 0 && v.mv_size == 4)
        memcpy(&id, v.mv_data, 4);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return id;
}

/* state_dir records: the first objects without dictionary (as older kbridge
 * wrote them), then with the trained one, persisted; all read back the same
 * after a reopen, which continues with the same dictionary. */
static void test_state_dir_dictionary(void **state) {
    (void)state;
    enum { N = 1600, M = 1800 };
    char dir[] = "/tmp/kbzc-XXXXXX";
    assert_non_null(mkdtemp(dir));
    kb_event_t *orig[M];
    for (unsigned i = 0; i < M; i++)
        orig[i] = mk(i, 0);
    kb_state_t *st = open_state(dir);
    write_state(st, orig, 0, N);
    assert_state_has(st, orig, N); /* while open: from the writer's dictionary */
    kb_state_close(st);
    uint32_t id = state_dict(dir);
    assert_true(id != 0);

    st = open_state(dir);
    assert_state_has(st, orig, N);
    write_state(st, orig, N, M); /* after the reopen: the same dictionary */
    kb_state_close(st);
    assert_int_equal(state_dict(dir), id);
    st = open_state(dir);
    assert_state_has(st, orig, M);
    kb_state_close(st);

    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    for (unsigned i = 0; i < M; i++)
        kb_event_unref(orig[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_retrain_keeps_old_entries),
        cmocka_unit_test(test_corrupt_frames_fail),
        cmocka_unit_test(test_plain_until_trained),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_state_dir_dictionary),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
