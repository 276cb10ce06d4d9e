/* informer/zcache.c — dictionary-compressed cache entries (see zcache.h).
 *
 * Why a dictionary: one Kubernetes object alone compresses poorly (a 3.5 KB
 * Pod to about a third with plain zstd: the frame has nothing earlier to
 * refer to), but the objects of one informer repeat each other's keys,
 * defaults and values. A dictionary trained from the informer's first
 * objects (zstd's ZDICT_trainFromBuffer) holds that shared text once, and a
 * frame is left with what is particular to its object (names, uids, times,
 * addresses): a few hundred bytes.
 *
 * Why train from the first objects and then watch the ratio: the initial
 * list is a fair sample of the collection, and training needs no second
 * pass. If the objects change character later (a rollout adds a sidecar to
 * every Pod), frames made with the old dictionary grow: each window of
 * `window` packed objects is compared with the first window after training
 * (raw bytes over frame bytes plus KB_ZC_SLACK per object), and once it is
 * worse by more than retrain_drop, the next objects are
 * sampled again and a new dictionary replaces the current one for new
 * entries. Entries keep a reference to the dictionary they were made with,
 * so old ones stay readable; a dictionary is freed with its last entry. A
 * dictionary serves at least 4 windows before a retrain, twice as many after
 * each retrain: objects no dictionary helps cannot keep the informer training.
 *
 * Why the entries before the first dictionary are packed in a sweep: they
 * are the samples (about 1,000 objects); leaving them plain would cost more
 * than the rest of a 20k-object cache. The sweep runs once, on the thread
 * that trained, under the caller's lock, right after training.
 *
 * Why the packed events come from a slab of their own (common/slab.h): a
 * change replaces its key's entry with one of nearly the same size, a
 * million times over a cache of a million entries. With glibc's malloc the
 * freed entries were sorted and merged among the other threads' frees over
 * the whole heap (docs/performance.md, the cost of one change at 1M); the
 * slab hands the freed block straight to the next entry of its size class,
 * without a header per entry. The slab lives with the shared counters, so
 * it outlives the last entry made in it.
 *
 * Contexts: compression uses one ZSTD_CCtx referencing the current CDict,
 * only on the (serialized) pack path. Decompression borrows a ZSTD_DCtx from
 * a small process-wide pool (a leaf mutex held only to take or give one
 * back), so any thread can expand any entry without an informer lock.
 * Frames carry neither dictionary id nor content size nor checksum: the
 * entry names its dictionary and its size, and a frame that does not expand
 * to exactly zraw_len bytes is refused as corrupt.
 */
#include "informer/zcache.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/slab.h"
#include "common/time.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zdict.h>
#include <zstd.h>

#define KB_ZC_POOL 8 /* idle decompression contexts kept */
/* Fewer sample bytes than this make no useful dictionary (tiny objects gain
 * nothing from one): sampling goes on until there are, or sample_bytes. */
#define KB_ZC_MIN_SAMPLES (64u << 10)
/* Bytes per object added to the frames when ratios are compared: at ratios
 * of 20 and more a frame a few bytes longer is noise (names, addresses),
 * worth no new dictionary; a change of shape costs hundreds. */
#define KB_ZC_SLACK 32
/* A dictionary of at most 1/25 of the sample bytes, and at least 32 KiB
 * (below dict_bytes): see kb_zc_dict_cap. */
#define KB_ZC_SAMPLES_PER_DICT 25
#define KB_ZC_DICT_FLOOR (32u << 10)

/* The largest packed event that comes from the slab (bigger ones: malloc). */
#define KB_ZC_SLAB_MAX 4096u

/* The counters a zcache and its dictionaries share: a dictionary may outlive
 * its zcache (held by entries still referenced), so these are refcounted.
 * So is the slab the zcache's packed events are made in: the last of them
 * goes back to it before its dictionary, and so these, are freed. */
typedef struct kb_zc_counters {
    _Atomic unsigned refcnt;
    _Atomic size_t packed, packed_bytes, packed_raw, dicts, dict_bytes;
    kb_slab_t *slab; /* NULL for a dictionary read back (it packs nothing) */
} kb_zc_counters_t;

typedef struct kb_zdict {
    kb_event_zdict_t base; /* first: packed events point at it */
    _Atomic unsigned refcnt;
    unsigned id;           /* 1, 2, … per zcache: the log's name for it */
    uint32_t zid;          /* zstd's dictionary id (from the content) */
    ZSTD_CDict *cdict;     /* NULL for a dictionary read back (kb_zcache_dict_open) */
    ZSTD_DDict *ddict;
    void *content;         /* the dictionary itself (state_dir persists it) */
    size_t content_len;
    size_t bytes;          /* ZSTD_sizeof of both, and the content */
    kb_zc_counters_t *cnt; /* reference held */
} kb_zdict_t;

struct kb_zcache {
    kb_zcache_opts_t o;
    char *name;
    kb_indexer_t *idx;     /* borrowed */
    kb_zc_counters_t *cnt; /* reference held */
    kb_zdict_t *cur;       /* reference held; NULL before the first training */
    ZSTD_CCtx *cctx;
    kb_buf_t frame;        /* scratch for one frame */
    /* Sampling (while sampling is true). */
    bool sampling;
    kb_buf_t samples;
    size_t *sizes, n_samples, cap_samples;
    /* Ratio windows since the current dictionary. */
    size_t win_n, win_raw, win_z;
    double baseline;       /* raw/frame of the first window; 0 until it is complete */
    size_t since_train;    /* objects compressed with the current dictionary */
    _Atomic uint64_t trainings, kept_plain;
};

/* ---- shared counters and dictionaries ---------------------------------- */

static kb_zc_counters_t *kb_zc_counters_ref(kb_zc_counters_t *c) {
    atomic_fetch_add(&c->refcnt, 1);
    return c;
}

static void kb_zc_counters_unref(kb_zc_counters_t *c) {
    if (!c || atomic_fetch_sub(&c->refcnt, 1) != 1)
        return;
    kb_slab_destroy(c->slab);
    free(c);
}

static kb_zdict_t *kb_zdict_ref(kb_zdict_t *d) {
    atomic_fetch_add_explicit(&d->refcnt, 1, memory_order_relaxed);
    return d;
}

static void kb_zdict_unref(kb_zdict_t *d) {
    if (!d || atomic_fetch_sub_explicit(&d->refcnt, 1, memory_order_acq_rel) != 1)
        return;
    atomic_fetch_sub(&d->cnt->dicts, 1);
    atomic_fetch_sub(&d->cnt->dict_bytes, d->bytes);
    kb_zc_counters_unref(d->cnt);
    ZSTD_freeCDict(d->cdict);
    ZSTD_freeDDict(d->ddict);
    free(d->content);
    free(d);
}

/* A packed event is being freed: its share of the accounting, its memory
 * (back to the slab it came from) and its reference, in that order. */
static void kb_zdict_drop(kb_event_zdict_t *zd, kb_event_t *ev) {
    kb_zdict_t *d = (kb_zdict_t *)zd;
    atomic_fetch_sub(&d->cnt->packed, 1);
    atomic_fetch_sub(&d->cnt->packed_bytes, ev->zlen);
    atomic_fetch_sub(&d->cnt->packed_raw, ev->zraw_len);
    kb_slab_free(d->cnt->slab, ev, kb_event_size(ev));
    kb_zdict_unref(d);
}

/* A dictionary from its content; zc NULL: decompression only, own counters. */
static kb_zdict_t *kb_zdict_new(kb_zcache_t *zc, const void *dict, size_t len) {
    ZSTD_CDict *cd = zc ? ZSTD_createCDict(dict, len, zc->o.level) : NULL;
    ZSTD_DDict *dd = ZSTD_createDDict(dict, len);
    if ((zc && !cd) || !dd || ZDICT_getDictID(dict, len) == 0) {
        ZSTD_freeCDict(cd);
        ZSTD_freeDDict(dd);
        return NULL;
    }
    kb_zdict_t *d = kb_calloc(1, sizeof(*d));
    d->base.drop = kb_zdict_drop;
    atomic_init(&d->refcnt, 1);
    d->id = zc ? (unsigned)atomic_load(&zc->trainings) + 1 : 0;
    d->zid = ZDICT_getDictID(dict, len);
    d->cdict = cd;
    d->ddict = dd;
    d->content = kb_memdup(dict, len);
    d->content_len = len;
    d->bytes = (cd ? ZSTD_sizeof_CDict(cd) : 0) + ZSTD_sizeof_DDict(dd) + len;
    if (zc) {
        d->cnt = kb_zc_counters_ref(zc->cnt);
    } else {
        d->cnt = kb_calloc(1, sizeof(*d->cnt));
        atomic_init(&d->cnt->refcnt, 1);
    }
    atomic_fetch_add(&d->cnt->dicts, 1);
    atomic_fetch_add(&d->cnt->dict_bytes, d->bytes);
    return d;
}

/* ---- the decompression context pool ------------------------------------ */

static pthread_mutex_t kb_zc_pool_mtx = PTHREAD_MUTEX_INITIALIZER;
static ZSTD_DCtx *kb_zc_pool[KB_ZC_POOL];
static size_t kb_zc_pool_n;

static ZSTD_DCtx *kb_zc_dctx_take(void) {
    ZSTD_DCtx *d = NULL;
    pthread_mutex_lock(&kb_zc_pool_mtx);
    if (kb_zc_pool_n)
        d = kb_zc_pool[--kb_zc_pool_n];
    pthread_mutex_unlock(&kb_zc_pool_mtx);
    return d ? d : ZSTD_createDCtx();
}

static void kb_zc_dctx_give(ZSTD_DCtx *d) {
    pthread_mutex_lock(&kb_zc_pool_mtx);
    if (kb_zc_pool_n < KB_ZC_POOL) {
        kb_zc_pool[kb_zc_pool_n++] = d;
        d = NULL;
    }
    pthread_mutex_unlock(&kb_zc_pool_mtx);
    ZSTD_freeDCtx(d);
}

/* ---- lifecycle ---------------------------------------------------------- */

void kb_zcache_opts_default(kb_zcache_opts_t *o) {
    *o = (kb_zcache_opts_t){.level = 1,
                            .sample_objects = 1024,
                            .sample_bytes = 4u << 20,
                            .dict_bytes = 110u << 10, /* zstd's own default for --train */
                            .window = 1024,
                            .retrain_drop = 0.25};
}

kb_zcache_t *kb_zcache_new(const kb_zcache_opts_t *opts, const char *name, kb_indexer_t *idx) {
    kb_zcache_t *zc = kb_calloc(1, sizeof(*zc));
    if (opts)
        zc->o = *opts;
    else
        kb_zcache_opts_default(&zc->o);
    KB_ASSERT(zc->o.sample_objects >= 8 && zc->o.dict_bytes >= 1024 && zc->o.window >= 1);
    zc->name = kb_strdup(name ? name : "");
    zc->idx = idx;
    zc->cnt = kb_calloc(1, sizeof(*zc->cnt));
    atomic_init(&zc->cnt->refcnt, 1);
    zc->cnt->slab = kb_slab_new(KB_ZC_SLAB_MAX);
    zc->cctx = ZSTD_createCCtx();
    KB_ASSERT(zc->cctx);
    /* The entry names its dictionary and its size: the frame need not. */
    ZSTD_CCtx_setParameter(zc->cctx, ZSTD_c_dictIDFlag, 0);
    ZSTD_CCtx_setParameter(zc->cctx, ZSTD_c_contentSizeFlag, 0);
    ZSTD_CCtx_setParameter(zc->cctx, ZSTD_c_checksumFlag, 0);
    zc->sampling = true;
    return zc;
}

static void kb_zc_samples_reset(kb_zcache_t *zc) {
    kb_buf_fini(&zc->samples);
    free(zc->sizes);
    zc->sizes = NULL;
    zc->n_samples = zc->cap_samples = 0;
}

void kb_zcache_destroy(kb_zcache_t *zc) {
    if (!zc)
        return;
    kb_zdict_unref(zc->cur);
    kb_zc_counters_unref(zc->cnt);
    ZSTD_freeCCtx(zc->cctx);
    kb_buf_fini(&zc->frame);
    kb_zc_samples_reset(zc);
    free(zc->name);
    free(zc);
}

static kb_event_t *kb_zc_pack(kb_zcache_t *zc, kb_event_t *ev, bool account);
/* ---- training ------------------------------------------------------------ */

/* Make d (a reference the zcache takes over) the dictionary of new frames. */
static void kb_zc_use(kb_zcache_t *zc, kb_zdict_t *d) {
    kb_zdict_unref(zc->cur);
    zc->cur = d;
    ZSTD_CCtx_refCDict(zc->cctx, d->cdict);
    zc->win_n = zc->win_raw = zc->win_z = 0;
    zc->baseline = 0;
    zc->since_train = 0;
}

/* Objects a dictionary serves at least before a retrain: 4 windows after the
 * first training, doubling with every retrain (up to 4,096 windows), so
 * objects that no dictionary helps cannot make the informer train forever. */
static size_t kb_zc_retrain_gap(const kb_zcache_t *zc) {
    uint64_t t = atomic_load(&((kb_zcache_t *)zc)->trainings);
    unsigned shift = t > 1 ? (unsigned)(t - 1 < 10 ? t - 1 : 10) : 0;
    return (zc->o.window * 4) << shift;
}

/* The dictionary's size for this many sample bytes: dict_bytes at most, and
 * no more than a KB_ZC_SAMPLES_PER_DICT-th of the samples (never under
 * KB_ZC_DICT_FLOOR). Measured on 20,000 feed Pods (bench_zcache, level 1):
 * frames of 318 B with a 32 KiB dictionary, 255 B with 110 KiB (trained from
 * 2.8 MB), so a large collection is worth a large dictionary; but a small
 * informer would pay for one (its compression and decompression forms cost
 * about four times its size) without having the objects to earn it back. */
static size_t kb_zc_dict_cap(const kb_zcache_t *zc, size_t sample_bytes) {
    size_t cap = sample_bytes / KB_ZC_SAMPLES_PER_DICT;
    if (cap < KB_ZC_DICT_FLOOR)
        cap = KB_ZC_DICT_FLOOR;
    return cap < zc->o.dict_bytes ? cap : zc->o.dict_bytes;
}

/* Train a dictionary from the samples and make it the current one. */
static void kb_zc_train(kb_zcache_t *zc) {
    int64_t t0 = kb_now_mono_ns();
    size_t cap = kb_zc_dict_cap(zc, zc->samples.len);
    void *dict = kb_malloc(cap);
    size_t n = ZDICT_trainFromBuffer(dict, cap, zc->samples.data, zc->sizes, (unsigned)zc->n_samples);
    kb_zdict_t *d = ZDICT_isError(n) ? NULL : kb_zdict_new(zc, dict, n);
    double ms = (double)(kb_now_mono_ns() - t0) / 1e6;
    if (!d) {
        KB_WARN("informer", "informer=%s cache: no dictionary from %zu object(s) (%zu bytes): %s; %s", zc->name,
                zc->n_samples, zc->samples.len, ZDICT_isError(n) ? ZDICT_getErrorName(n) : "out of memory",
                zc->cur ? "keeping the current one" : "objects stay uncompressed");
    } else {
        atomic_fetch_add(&zc->trainings, 1);
        KB_INFO("informer",
                "informer=%s cache: dictionary %u (%zu bytes) trained from %zu object(s) (%zu bytes) in %.0f ms",
                zc->name, d->id, n, zc->n_samples, zc->samples.len, ms);
    }
    free(dict);
    kb_zc_samples_reset(zc);
    zc->sampling = false;
    if (!d)
        return;
    bool first = zc->cur == NULL;
    kb_zc_use(zc, d);
    if (first && zc->idx) {
        /* The entries cached plain so far (the samples, mostly): pack them now. */
        kb_event_list_t all;
        kb_event_list_init(&all);
        kb_indexer_list(zc->idx, NULL, &all);
        for (size_t i = 0; i < all.n; i++) {
            kb_event_t *p = kb_zc_pack(zc, all.ev[i], false);
            if (p != all.ev[i])
                kb_indexer_swap(zc->idx, all.ev[i], p); /* filed as before */
            kb_event_unref(p);
        }
        kb_event_list_fini(&all);
    }
}

static void kb_zc_sample(kb_zcache_t *zc, const char *obj, size_t len) {
    if (zc->n_samples == zc->cap_samples) {
        zc->cap_samples = zc->cap_samples ? zc->cap_samples * 2 : 256;
        zc->sizes = kb_realloc(zc->sizes, zc->cap_samples * sizeof(*zc->sizes));
    }
    kb_buf_append(&zc->samples, obj, len);
    zc->sizes[zc->n_samples++] = len;
    if ((zc->n_samples >= zc->o.sample_objects && zc->samples.len >= KB_ZC_MIN_SAMPLES) ||
        zc->samples.len >= zc->o.sample_bytes)
        kb_zc_train(zc);
}

/* One more packed object in the ratio window; a complete window that is
 * worse than the first one by more than retrain_drop starts sampling again. */
static void kb_zc_account(kb_zcache_t *zc, size_t raw, size_t z) {
    zc->win_n++;
    zc->since_train++;
    zc->win_raw += raw;
    zc->win_z += z;
    if (zc->win_n < zc->o.window)
        return;
    double ratio = (double)zc->win_raw / (double)(zc->win_z + zc->win_n * KB_ZC_SLACK);
    if (zc->baseline == 0) {
        zc->baseline = ratio;
    } else if (!zc->sampling && ratio < zc->baseline * (1.0 - zc->o.retrain_drop) &&
               zc->since_train >= kb_zc_retrain_gap(zc)) {
        KB_INFO("informer", "informer=%s cache: ratio %.1f fell below %.1f (dictionary %u): sampling to retrain",
                zc->name, ratio, zc->baseline, zc->cur->id);
        zc->sampling = true;
    }
    zc->win_n = zc->win_raw = zc->win_z = 0;
}

/* ---- pack / unpack ---------------------------------------------------------- */

/* Compress obj with the current dictionary into zc->frame: its length, or
 * 0 to keep obj as it is. account: count it in the ratio window and sample
 * it (not the samples packed after training: the dictionary was made from
 * them, their ratio flatters it). */
static size_t kb_zc_compress(kb_zcache_t *zc, const char *obj, size_t len, bool account) {
    if (zc->sampling && account)
        kb_zc_sample(zc, obj, len);
    if (!zc->cur)
        return 0;
    size_t bound = ZSTD_compressBound(len);
    kb_buf_reset(&zc->frame);
    kb_buf_reserve(&zc->frame, bound);
    size_t n = ZSTD_compress2(zc->cctx, zc->frame.data, bound, obj, len);
    bool plain = ZSTD_isError(n) || n == 0 || n >= len;
    if (plain)
        atomic_fetch_add(&zc->kept_plain, 1);
    if (account)
        kb_zc_account(zc, len, plain ? len : n);
    return plain ? 0 : n;
}

static kb_event_t *kb_zc_pack(kb_zcache_t *zc, kb_event_t *ev, bool account) {
    if (ev->zdict || !ev->obj_len || ev->obj_len > UINT32_MAX)
        return kb_event_ref(ev);
    size_t n = kb_zc_compress(zc, ev->obj, ev->obj_len, account);
    if (!n)
        return kb_event_ref(ev);
    void *mem = kb_slab_alloc(zc->cnt->slab, kb_event_pack_bytes(ev, n));
    kb_event_t *p = kb_event_pack(mem, ev, &kb_zdict_ref(zc->cur)->base, zc->frame.data, n);
    atomic_fetch_add(&zc->cnt->packed, 1);
    atomic_fetch_add(&zc->cnt->packed_bytes, n);
    atomic_fetch_add(&zc->cnt->packed_raw, ev->obj_len);
    return p;
}

kb_event_t *kb_zcache_pack(kb_zcache_t *zc, kb_event_t *ev) {
    return kb_zc_pack(zc, ev, true);
}

size_t kb_zcache_compress(kb_zcache_t *zc, const char *obj, size_t len, const void **frame,
                          kb_event_zdict_t **zd) {
    size_t n = len && len <= UINT32_MAX ? kb_zc_compress(zc, obj, len, true) : 0;
    *frame = n ? zc->frame.data : NULL;
    *zd = n ? &zc->cur->base : NULL;
    return n;
}

bool kb_zcache_expand(const kb_event_zdict_t *zd, const void *frame, size_t zlen, void *out, size_t raw_len) {
    const kb_zdict_t *d = (const kb_zdict_t *)zd;
    ZSTD_DCtx *dctx = kb_zc_dctx_take();
    if (!dctx)
        return false;
    size_t got = ZSTD_decompress_usingDDict(dctx, out, raw_len, frame, zlen, d->ddict);
    kb_zc_dctx_give(dctx);
    return !ZSTD_isError(got) && got == raw_len;
}

kb_event_t *kb_zcache_unpack(const kb_event_t *packed) {
    if (!packed->zdict)
        return kb_event_ref((kb_event_t *)packed);
    kb_event_t *full = kb_event_unpack_shell(packed);
    if (!kb_zcache_expand(packed->zdict, kb_event_frame(packed), packed->zlen, (char *)full->obj, full->obj_len)) {
        kb_event_unref(full);
        return NULL;
    }
    return full;
}

uint32_t kb_zcache_dict_id(const kb_event_zdict_t *zd) {
    return ((const kb_zdict_t *)zd)->zid;
}

const void *kb_zcache_dict_content(const kb_event_zdict_t *zd, size_t *len) {
    const kb_zdict_t *d = (const kb_zdict_t *)zd;
    *len = d->content_len;
    return d->content;
}

kb_event_zdict_t *kb_zcache_dict_open(const void *content, size_t len) {
    kb_zdict_t *d = kb_zdict_new(NULL, content, len);
    return d ? &d->base : NULL;
}

kb_event_zdict_t *kb_zcache_dict_ref(kb_event_zdict_t *zd) {
    return &kb_zdict_ref((kb_zdict_t *)zd)->base;
}

void kb_zcache_dict_unref(kb_event_zdict_t *zd) {
    kb_zdict_unref((kb_zdict_t *)zd);
}

bool kb_zcache_adopt(kb_zcache_t *zc, const void *content, size_t len) {
    kb_zdict_t *d = kb_zdict_new(zc, content, len);
    if (!d)
        return false;
    kb_zc_use(zc, d);
    kb_zc_samples_reset(zc);
    zc->sampling = false;
    return true;
}

void kb_zcache_stats(const kb_zcache_t *zc, kb_zcache_stats_t *st) {
    memset(st, 0, sizeof(*st));
    if (!zc)
        return;
    st->packed = atomic_load(&zc->cnt->packed);
    st->packed_bytes = atomic_load(&zc->cnt->packed_bytes);
    st->packed_raw = atomic_load(&zc->cnt->packed_raw);
    st->dicts = atomic_load(&zc->cnt->dicts);
    st->dict_bytes = atomic_load(&zc->cnt->dict_bytes);
    st->trainings = atomic_load(&((kb_zcache_t *)zc)->trainings);
    st->kept_plain = atomic_load(&((kb_zcache_t *)zc)->kept_plain);
}
