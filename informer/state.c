/* informer/state.c — the LMDB store behind an informer (see state.h).
 *
 * Design note. Three named databases in one environment:
 *   "index"   key bytes → record
 *   "journal" 8-byte big-endian seq → record (+ key and resume RV)
 *   "meta"    "ack_seq" (8 bytes BE), "ack_rv", "trimmed_rv" (string),
 *             "zdict/<id>" (a dictionary), "zdict_current" (4-byte id, LE),
 *             "definition" (the informer's, informer/definition.h; absent in
 *             a state_dir older than it), "definition_pending" (one a start
 *             began to converge to: present from before its first delivery
 *             until the commit that stores it as "definition")
 * A record is a fixed little header followed by the strings and the object;
 * objects of 512 bytes and more are stored as a zstd frame (level 1: a 5 KB
 * Pod becomes ~1.5 KB, so it fits a leaf page instead of two overflow pages,
 * and the object is compressed once for both journal and index). Big-endian seqs sort
 * in numeric order under LMDB's default byte comparison.
 *
 * Dictionaries: once the informer has written enough objects, a dictionary
 * is trained from them (informer/zcache.h, the same as the in-memory cache's)
 * and later objects are stored as frames made with it: a record with
 * KB_REC_ZDICT holds the dictionary's id (zstd's, from its content), the
 * object's length and the frame. The dictionary is written to "meta" in the
 * same transaction as the first record that uses it, so no committed record
 * names a dictionary that is not there; it is never deleted (a few tens of
 * KB each). Records without the flag (plain, or KB_REC_ZSTD without
 * dictionary, as older kbridge wrote them) read as before. A reopened
 * state_dir continues with its newest dictionary ("zdict_current").
 *
 * Durability: MDB_NOMETASYNC makes every commit flush its data pages while
 * the meta page is flushed lazily; a crash can undo the last commit but never
 * corrupt. The informer commits once per watch chunk or list page, so one
 * fdatasync (~0.4 ms here) covers many events under load.
 *
 * Journal bounds: only acknowledged entries are ever trimmed (the tail past
 * the checkpoint is what a restart must deliver again); beyond that the
 * journal keeps at most journal_max_bytes and journal_max_age_s, for replay.
 */
#include "informer/state.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/time.h"
#include "informer/zcache.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <zstd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define KB_STATE_FORMAT 1
#define KB_REC_MARK 0xff /* journal entry type of a resume-point marker */
#define KB_REC_ZSTD 0x01 /* flags: the object is a zstd frame */
#define KB_REC_ZDICT 0x02 /* flags: dictionary id (4, LE), object length (4, LE), frame made with it */
#define KB_ZSTD_MIN 512  /* objects shorter than this are stored as they are */
#define KB_RESUME_MAX (KB_RV_MAX + 320) /* a resume point's text, "namespace/rv", and its '\0' */

typedef struct kb_rec_hdr {
    uint8_t format;
    uint8_t type;        /* kb_event_type_t, or KB_REC_MARK */
    uint8_t fsu;
    uint8_t flags;       /* KB_REC_ZSTD, KB_REC_ZDICT */
    uint32_t key_len, uid_len, rv_len, rv_after_len, obj_len;
    uint32_t labels_off, labels_len;
    int64_t observed_ns;
} kb_rec_hdr_t;

struct kb_state {
    char *dir;
    MDB_env *env;
    MDB_dbi index, journal, meta;
    MDB_txn *txn;                 /* the open write txn (writer thread) */
    ZSTD_CCtx *zc;                /* writer thread */
    kb_buf_t zbuf;                /* the compressed object of the event being written */
    kb_zcache_t *zcache;          /* writer thread: trains and applies the dictionaries; NULL: none */
    uint32_t txn_dict;            /* writer thread: the dictionary known to be in the open txn (0: none) */
    pthread_mutex_t dict_mtx;     /* guards dicts (readers: any thread) */
    struct kb_st_dict { uint32_t id; kb_event_zdict_t *zd; } *dicts;
    size_t n_dicts;
    uint64_t journal_max_bytes;
    int64_t journal_max_age_s;
    pthread_mutex_t err_mtx;
    char err[256];                /* err_mtx */
    _Atomic uint64_t commits, commit_errors;
};

static kb_err_t kb_st_fail(kb_state_t *st, const char *what, int rc) {
    /* LMDB reports a short write as EIO: tell a full disk apart, it is the usual cause. */
    struct statvfs vfs;
    bool full = rc == ENOSPC || ((rc == EIO) && statvfs(st->dir, &vfs) == 0 &&
                                 (uint64_t)vfs.f_bavail * vfs.f_frsize < (UINT64_C(1) << 20));
    pthread_mutex_lock(&st->err_mtx);
    if (full)
        snprintf(st->err, sizeof(st->err), "%s: No space left on device (state_dir %s is full)", what, st->dir);
    else
        snprintf(st->err, sizeof(st->err), "%s: %s", what, mdb_strerror(rc));
    pthread_mutex_unlock(&st->err_mtx);
    return rc == MDB_MAP_FULL || full ? KB_ERR_FULL : KB_ERR_IO;
}

const char *kb_state_error(const kb_state_t *st) {
    return st->err;
}

const char *kb_state_dir(const kb_state_t *st) {
    return st->dir;
}

static void kb_be64(uint64_t v, unsigned char out[8]) {
    for (int i = 7; i >= 0; i--) {
        out[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

static uint64_t kb_from_be64(const void *p) {
    const unsigned char *b = p;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | b[i];
    return v;
}

/* mkdir -p with 0700: state holds Secret-derived data. A directory that
 * exists keeps its mode, except the last one (the informer's own), which is
 * made 0700 whatever the umask or an earlier version left. */
static int kb_mkdirs(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(tmp, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return (st.st_mode & 0777) != 0700 ? chmod(tmp, 0700) : 0;
}

/* LMDB's file format (lmdb.h's MDB_page + MDB_meta, 64-bit builds): pages 0
 * and 1 are meta pages; in each, after a 16-byte page header, the magic
 * (u32), version (u32), address, map size, two 48-byte MDB_db records (the
 * first's leading u32 is the page size), the last used page and the txn id.
 * LMDB maps the file and reads the pages the newer meta names without
 * checking the file is that long, so a truncated data.mdb kills the process
 * with SIGBUS. Check the size against that meta before LMDB sees the file. */
#define KB_LMDB_MAGIC 0xBEEFC0DEu
#define KB_LMDB_META_MAGIC 16
#define KB_LMDB_META_PSIZE 40
#define KB_LMDB_META_LAST_PG 136
#define KB_LMDB_META_TXNID 144

static bool kb_lmdb_meta(int fd, off_t at, uint32_t *psize, uint64_t *last_pg, uint64_t *txnid) {
    unsigned char m[KB_LMDB_META_TXNID + 8];
    if (pread(fd, m, sizeof(m), at) != (ssize_t)sizeof(m))
        return false;
    uint32_t magic;
    memcpy(&magic, m + KB_LMDB_META_MAGIC, 4);
    memcpy(psize, m + KB_LMDB_META_PSIZE, 4);
    memcpy(last_pg, m + KB_LMDB_META_LAST_PG, 8);
    memcpy(txnid, m + KB_LMDB_META_TXNID, 8);
    return magic == KB_LMDB_MAGIC && *psize >= 512 && (*psize & (*psize - 1)) == 0;
}

static bool kb_state_check_file(const char *dir, char *errstr, size_t errstr_size) {
    if (sizeof(size_t) != 8)
        return true; /* the offsets above are for 64-bit builds */
    char path[4200];
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return true; /* none yet: LMDB creates it */
    struct stat st;
    bool ok = fstat(fd, &st) == 0;
    const char *fix = "restore it from a backup, or remove the directory to start this informer afresh (it "
                      "relists; deletes that happened while kbridge was down are then not reported)";
    if (ok && st.st_size > 0) {
        uint32_t ps0 = 0, ps1 = 0;
        uint64_t last0 = 0, last1 = 0, txn0 = 0, txn1 = 0;
        bool m0 = kb_lmdb_meta(fd, 0, &ps0, &last0, &txn0);
        bool m1 = m0 && kb_lmdb_meta(fd, (off_t)ps0, &ps1, &last1, &txn1) && ps1 == ps0;
        uint64_t last = m1 && txn1 > txn0 ? last1 : last0;
        uint64_t need = (last + 1) * (uint64_t)ps0;
        if (!m0) {
            snprintf(errstr, errstr_size, "state_dir file %s is not a readable LMDB file (%lld bytes, no valid meta "
                     "page); %s", path, (long long)st.st_size, fix);
            ok = false;
        } else if ((uint64_t)st.st_size < need || (uint64_t)st.st_size < 2u * ps0) {
            snprintf(errstr, errstr_size, "state_dir file %s is truncated: %lld bytes, but its meta page says "
                     "%llu pages of %u bytes (%llu bytes); %s", path, (long long)st.st_size,
                     (unsigned long long)(last + 1), ps0, (unsigned long long)need, fix);
            ok = false;
        }
    }
    close(fd);
    return ok;
}

/* data.mdb and lock.mdb 0600 whatever the umask or an earlier version left. */
static void kb_state_private_files(const char *dir) {
    static const char *const names[] = {"data.mdb", "lock.mdb"};
    for (size_t i = 0; i < KB_ARRAY_LEN(names); i++) {
        char path[4200];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (stat(path, &st) == 0 && (st.st_mode & 0777) != 0600 && chmod(path, 0600) != 0)
            KB_WARN("state", "cannot make %s private (0600): %s", path, strerror(errno));
    }
}

/* ---- dictionaries ------------------------------------------------------- */

static void kb_st_dict_key(uint32_t id, char key[16]) {
    snprintf(key, 16, "zdict/%08x", id);
}

/* Continue with the newest dictionary of a reopened state_dir. */
static void kb_st_adopt_dict(kb_state_t *st, MDB_txn *txn) {
    MDB_val k = {13, (void *)"zdict_current"}, v;
    if (!st->zcache || mdb_get(txn, st->meta, &k, &v) || v.mv_size != 4)
        return;
    uint32_t id;
    memcpy(&id, v.mv_data, 4);
    char key[16];
    kb_st_dict_key(id, key);
    k = (MDB_val){strlen(key), key};
    if (mdb_get(txn, st->meta, &k, &v) || !kb_zcache_adopt(st->zcache, v.mv_data, v.mv_size))
        KB_WARN("state", "dir=%s dictionary %08x unreadable: a new one will be trained", st->dir, id);
}

/* Make sure zd is in the open write txn (written with the first record that
 * uses it). KB_ERR_IO: not stored (the caller keeps the object without it). */
static kb_err_t kb_st_dict_persist(kb_state_t *st, kb_event_zdict_t *zd) {
    uint32_t id = kb_zcache_dict_id(zd);
    if (id == st->txn_dict)
        return KB_OK;
    size_t len;
    const void *content = kb_zcache_dict_content(zd, &len);
    char key[16];
    kb_st_dict_key(id, key);
    MDB_val k = {strlen(key), key}, v;
    int rc = mdb_get(st->txn, st->meta, &k, &v);
    if (rc == MDB_NOTFOUND) {
        v = (MDB_val){len, (void *)content};
        rc = mdb_put(st->txn, st->meta, &k, &v, 0);
        MDB_val ck = {13, (void *)"zdict_current"}, cv = {4, &id};
        if (!rc)
            rc = mdb_put(st->txn, st->meta, &ck, &cv, 0);
    } else if (!rc && (v.mv_size != len || memcmp(v.mv_data, content, len))) {
        rc = MDB_KEYEXIST; /* another dictionary with the same id: do without */
    }
    if (rc)
        return KB_ERR_IO;
    st->txn_dict = id;
    return KB_OK;
}

/* The dictionary id names, read from txn the first time (a reference), or NULL. */
static kb_event_zdict_t *kb_st_dict(kb_state_t *st, MDB_txn *txn, uint32_t id) {
    kb_event_zdict_t *zd = NULL;
    pthread_mutex_lock(&st->dict_mtx);
    for (size_t i = 0; i < st->n_dicts && !zd; i++)
        if (st->dicts[i].id == id)
            zd = kb_zcache_dict_ref(st->dicts[i].zd);
    pthread_mutex_unlock(&st->dict_mtx);
    if (zd)
        return zd;
    char key[16];
    kb_st_dict_key(id, key);
    MDB_val k = {strlen(key), key}, v;
    if (mdb_get(txn, st->meta, &k, &v) || !(zd = kb_zcache_dict_open(v.mv_data, v.mv_size)))
        return NULL;
    pthread_mutex_lock(&st->dict_mtx);
    st->dicts = kb_realloc(st->dicts, (st->n_dicts + 1) * sizeof(*st->dicts));
    st->dicts[st->n_dicts++] = (struct kb_st_dict){id, kb_zcache_dict_ref(zd)};
    pthread_mutex_unlock(&st->dict_mtx);
    return zd;
}

/* The object of a KB_REC_ZDICT record (p, n bytes), expanded into a new allocation. */
static char *kb_st_expand(kb_state_t *st, MDB_txn *txn, const char *p, size_t n, size_t *len) {
    if (n <= 8)
        return NULL;
    uint32_t id, raw;
    memcpy(&id, p, 4);
    memcpy(&raw, p + 4, 4);
    if (raw > (64u << 20))
        return NULL;
    kb_event_zdict_t *zd = kb_st_dict(st, txn, id);
    if (!zd)
        return NULL;
    char *plain = kb_malloc((size_t)raw + 1);
    bool ok = kb_zcache_expand(zd, p + 8, n - 8, plain, raw);
    kb_zcache_dict_unref(zd);
    if (!ok) {
        free(plain);
        return NULL;
    }
    *len = raw;
    return plain;
}

kb_state_t *kb_state_open(const kb_state_opts_t *opts, char *errstr, size_t errstr_size) {
    if (kb_mkdirs(opts->dir) != 0) {
        snprintf(errstr, errstr_size, "state_dir: cannot create \"%s\": %s", opts->dir, strerror(errno));
        return NULL;
    }
    if (!kb_state_check_file(opts->dir, errstr, errstr_size))
        return NULL;
    kb_state_t *st = kb_calloc(1, sizeof(*st));
    st->dir = kb_strdup(opts->dir);
    st->journal_max_bytes = opts->journal_max_bytes;
    st->journal_max_age_s = opts->journal_max_age_s;
    pthread_mutex_init(&st->err_mtx, NULL);
    pthread_mutex_init(&st->dict_mtx, NULL);
    st->zcache = opts->dictionaries ? kb_zcache_new(NULL, opts->dir, NULL) : NULL;
    int rc = mdb_env_create(&st->env);
    if (!rc)
        rc = mdb_env_set_maxdbs(st->env, 4);
    if (!rc)
        rc = mdb_env_set_mapsize(st->env, (size_t)opts->map_bytes);
    if (!rc)
        rc = mdb_env_open(st->env, opts->dir, MDB_NOMETASYNC | MDB_NOTLS, 0600);
    if (!rc)
        kb_state_private_files(opts->dir);
    MDB_txn *txn = NULL;
    if (!rc)
        rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (!rc)
        rc = mdb_dbi_open(txn, "index", MDB_CREATE, &st->index);
    if (!rc)
        rc = mdb_dbi_open(txn, "journal", MDB_CREATE, &st->journal);
    if (!rc)
        rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &st->meta);
    if (!rc) {
        MDB_val k = {6, (void *)"format"}, v;
        rc = mdb_get(txn, st->meta, &k, &v);
        if (rc == MDB_NOTFOUND) {
            unsigned char f = KB_STATE_FORMAT;
            v.mv_size = 1;
            v.mv_data = &f;
            rc = mdb_put(txn, st->meta, &k, &v, 0);
        } else if (!rc && (v.mv_size != 1 || *(unsigned char *)v.mv_data != KB_STATE_FORMAT)) {
            mdb_txn_abort(txn);
            snprintf(errstr, errstr_size, "state_dir \"%s\": written by another kbridge state format", opts->dir);
            goto fail;
        }
    }
    if (!rc)
        kb_st_adopt_dict(st, txn);
    if (!rc)
        rc = mdb_txn_commit(txn);
    else if (txn)
        mdb_txn_abort(txn);
    if (rc) {
        snprintf(errstr, errstr_size, "state_dir \"%s\": %s", opts->dir, mdb_strerror(rc));
        goto fail;
    }
    return st;
fail:
    kb_state_close(st);
    return NULL;
}

void kb_state_close(kb_state_t *st) {
    if (!st)
        return;
    if (st->txn)
        mdb_txn_abort(st->txn);
    if (st->env) {
        mdb_env_sync(st->env, 1);
        mdb_env_close(st->env);
    }
    pthread_mutex_destroy(&st->err_mtx);
    for (size_t i = 0; i < st->n_dicts; i++)
        kb_zcache_dict_unref(st->dicts[i].zd);
    free(st->dicts);
    pthread_mutex_destroy(&st->dict_mtx);
    kb_zcache_destroy(st->zcache);
    ZSTD_freeCCtx(st->zc);
    kb_buf_fini(&st->zbuf);
    free(st->dir);
    free(st);
}

/* ---- records ---------------------------------------------------------- */

/* obj/obj_len: the object bytes to store (the event's, or their zstd form as flags say). */
static void kb_rec_encode(kb_buf_t *b, const kb_event_t *ev, uint8_t type, const char *rv_after, bool with_key,
                          const char *obj, size_t obj_len, uint8_t flags) {
    size_t rva = rv_after ? strlen(rv_after) : 0;
    kb_rec_hdr_t h = {
        .format = KB_STATE_FORMAT,
        .type = type,
        .fsu = ev && ev->final_state_unknown,
        .key_len = (uint32_t)(ev && with_key ? ev->key_len : 0),
        .uid_len = (uint32_t)(ev ? ev->uid_len : 0),
        .rv_len = (uint32_t)(ev ? ev->rv_len : 0),
        .rv_after_len = (uint32_t)rva,
        .obj_len = (uint32_t)(ev ? obj_len : 0),
        .flags = flags,
        .labels_off = (uint32_t)(ev ? ev->labels_off : 0),
        .labels_len = (uint32_t)(ev ? ev->labels_len : 0),
        .observed_ns = ev ? ev->observed_ns : kb_now_real_ns(),
    };
    kb_buf_reset(b);
    kb_buf_append(b, &h, sizeof(h));
    if (ev) {
        if (with_key)
            kb_buf_append(b, ev->key, ev->key_len);
        kb_buf_append(b, ev->uid, ev->uid_len);
        kb_buf_append(b, ev->rv, ev->rv_len);
    }
    if (rva)
        kb_buf_append(b, rv_after, rva);
    if (ev)
        kb_buf_append(b, obj, obj_len);
}

/* Decode a record; key comes from the record (journal) or from the caller (index). */
static kb_event_t *kb_rec_decode(kb_state_t *st, MDB_txn *txn, const MDB_val *v, const char *key, size_t key_len,
                                 kb_resource_t *res, char *rv_after, size_t rv_after_size, bool *is_mark,
                                 bool identity_only) {
    kb_rec_hdr_t h;
    if (v->mv_size < sizeof(h))
        return NULL;
    memcpy(&h, v->mv_data, sizeof(h));
    size_t need = sizeof(h) + (size_t)h.key_len + h.uid_len + h.rv_len + h.rv_after_len + h.obj_len;
    if (h.format != KB_STATE_FORMAT || need != v->mv_size)
        return NULL;
    const char *p = (const char *)v->mv_data + sizeof(h);
    if (h.key_len) {
        key = p;
        key_len = h.key_len;
        p += h.key_len;
    }
    const char *uid = p;
    p += h.uid_len;
    const char *rv = p;
    p += h.rv_len;
    size_t n = h.rv_after_len < rv_after_size ? h.rv_after_len : rv_after_size - 1;
    memcpy(rv_after, p, n);
    rv_after[n] = '\0';
    p += h.rv_after_len;
    *is_mark = h.type == KB_REC_MARK;
    if (*is_mark)
        return NULL;
    const char *obj = p;
    size_t obj_len = h.obj_len;
    char *plain = NULL;
    if (identity_only) {
        obj = "";
        obj_len = 0;
    } else if (h.flags & KB_REC_ZDICT) {
        if (!(plain = kb_st_expand(st, txn, p, h.obj_len, &obj_len)))
            return NULL;
        obj = plain;
    } else if (h.flags & KB_REC_ZSTD) {
        unsigned long long size = ZSTD_getFrameContentSize(p, h.obj_len);
        if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN || size > (64u << 20))
            return NULL;
        plain = kb_malloc((size_t)size + 1);
        size_t got = ZSTD_decompress(plain, (size_t)size, p, h.obj_len);
        if (ZSTD_isError(got) || got != size) {
            free(plain);
            return NULL;
        }
        obj = plain;
        obj_len = (size_t)size;
    }
    const char *slash = memchr(key, '/', key_len);
    kb_event_init_t in = {
        .type = (kb_event_type_t)h.type,
        .final_state_unknown = h.fsu != 0,
        .res = res,
        .ns = slash ? key : "", .ns_len = slash ? (size_t)(slash - key) : 0,
        .name = slash ? slash + 1 : key, .name_len = slash ? key_len - (size_t)(slash - key) - 1 : key_len,
        .uid = uid, .uid_len = h.uid_len,
        .rv = rv, .rv_len = h.rv_len,
        .obj = obj, .obj_len = obj_len,
        .labels_off = identity_only ? 0 : h.labels_off, .labels_len = identity_only ? 0 : h.labels_len,
        .observed_ns = h.observed_ns,
        .read_mono_ns = kb_now_mono_ns(),
    };
    kb_event_t *ev = kb_event_new(&in);
    free(plain);
    return ev;
}

/* The resume point a journal record completes ("namespace/rv", or "rv"),
 * into out (KB_RESUME_MAX bytes hold any); false (out untouched) for a list's
 * object, which completes none, or a record shorter than its header says. */
static bool kb_rec_resume_point(const MDB_val *v, char *out, size_t out_size) {
    kb_rec_hdr_t h;
    if (v->mv_size < sizeof(h))
        return false;
    memcpy(&h, v->mv_data, sizeof(h));
    size_t at = sizeof(h) + (size_t)h.key_len + h.uid_len + h.rv_len;
    if (!h.rv_after_len || h.rv_after_len >= out_size || at + h.rv_after_len > v->mv_size)
        return false;
    memcpy(out, (const char *)v->mv_data + at, h.rv_after_len);
    out[h.rv_after_len] = '\0';
    return true;
}

/* The RV of a resume point ("namespace/rv" or "rv", n bytes): the number
 * after the last '/'. */
static uint64_t kb_resume_rv(const char *point, size_t n) {
    size_t i = n;
    while (i && point[i - 1] != '/')
        i--;
    return kb_rv_parse(point + i, n - i);
}

/* ---- reads ------------------------------------------------------------ */

static int kb_meta_get(MDB_txn *txn, kb_state_t *st, const char *name, MDB_val *v) {
    MDB_val k = {strlen(name), (void *)name};
    return mdb_get(txn, st->meta, &k, v);
}

static int kb_meta_put(MDB_txn *txn, kb_state_t *st, const char *name, const void *data, size_t len) {
    MDB_val k = {strlen(name), (void *)name}, v = {len, (void *)data};
    return mdb_put(txn, st->meta, &k, &v, 0);
}

void kb_state_checkpoint_fini(kb_state_checkpoint_t *cp) {
    free(cp->rv);
    cp->rv = NULL;
}

kb_err_t kb_state_read_checkpoint(kb_state_t *st, kb_state_checkpoint_t *cp) {
    memset(cp, 0, sizeof(*cp));
    cp->rv = kb_strdup("");
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
    if (rc)
        return kb_st_fail(st, "read checkpoint", rc);
    MDB_val v;
    if (!kb_meta_get(txn, st, "ack_seq", &v) && v.mv_size == 8)
        cp->seq = kb_from_be64(v.mv_data);
    if (!kb_meta_get(txn, st, "ack_rv", &v)) { /* every namespace's resume point: no fixed bound */
        free(cp->rv);
        cp->rv = kb_strndup(v.mv_data, v.mv_size);
    }
    MDB_cursor *cur;
    if (!mdb_cursor_open(txn, st->journal, &cur)) {
        MDB_val k;
        if (!mdb_cursor_get(cur, &k, &v, MDB_LAST) && k.mv_size == 8)
            cp->last_seq = kb_from_be64(k.mv_data);
        mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    if (cp->last_seq < cp->seq)
        cp->last_seq = cp->seq;
    return KB_OK;
}

kb_err_t kb_state_load_index(kb_state_t *st, kb_resource_t *res, bool identity_only, kb_state_fn fn,
                             void *opaque) {
    MDB_txn *txn;
    MDB_cursor *cur;
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
    if (rc)
        return kb_st_fail(st, "load index", rc);
    rc = mdb_cursor_open(txn, st->index, &cur);
    if (rc) {
        mdb_txn_abort(txn);
        return kb_st_fail(st, "load index", rc);
    }
    MDB_val k, v;
    char rv_after[KB_RESUME_MAX];
    size_t bad = 0;
    bool first = true;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        bool mark;
        /* The first entry whole: the caller may learn the kind from it. */
        kb_event_t *ev = kb_rec_decode(st, txn, &v, k.mv_data, k.mv_size, res, rv_after, sizeof(rv_after), &mark,
                                       identity_only && !first);
        first = false;
        if (!ev) {
            bad++;
            continue;
        }
        fn(opaque, 0, ev, rv_after);
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    if (bad)
        KB_WARN("state", "dir=%s %zu index record(s) unreadable and ignored", st->dir, bad);
    return KB_OK;
}

kb_event_t *kb_state_get(kb_state_t *st, const char *key, size_t key_len, kb_resource_t *res) {
    MDB_txn *txn = st->txn, *own = NULL;
    if (!txn && mdb_txn_begin(st->env, NULL, MDB_RDONLY, &own) != 0)
        return NULL;
    MDB_val k = {key_len, (void *)key}, v;
    kb_event_t *ev = NULL;
    char rv_after[8];
    bool mark;
    if (mdb_get(txn ? txn : own, st->index, &k, &v) == 0)
        ev = kb_rec_decode(st, txn ? txn : own, &v, key, key_len, res, rv_after, sizeof(rv_after), &mark, false);
    if (own)
        mdb_txn_abort(own);
    return ev;
}

kb_err_t kb_state_load_journal(kb_state_t *st, uint64_t after_seq, size_t limit, kb_resource_t *res, kb_state_fn fn,
                               void *opaque) {
    MDB_txn *txn;
    MDB_cursor *cur;
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
    if (rc)
        return kb_st_fail(st, "load journal", rc);
    rc = mdb_cursor_open(txn, st->journal, &cur);
    if (rc) {
        mdb_txn_abort(txn);
        return kb_st_fail(st, "load journal", rc);
    }
    unsigned char kb[8];
    kb_be64(after_seq + 1, kb);
    MDB_val k = {8, kb}, v;
    char rv_after[KB_RESUME_MAX];
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); !rc; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 8)
            continue;
        bool mark = false;
        kb_event_t *ev = kb_rec_decode(st, txn, &v, NULL, 0, res, rv_after, sizeof(rv_after), &mark, false);
        uint64_t seq = kb_from_be64(k.mv_data);
        if (ev)
            ev->seq = seq;
        if (ev || mark)
            fn(opaque, seq, ev, rv_after);
        if (limit && !--limit)
            break;
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    return KB_OK;
}

kb_err_t kb_state_journal_seek(kb_state_t *st, uint64_t rv, uint64_t *seq) {
    MDB_txn *txn;
    MDB_cursor *cur;
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
    if (rc)
        return kb_st_fail(st, "journal seek", rc);
    kb_err_t err = KB_OK;
    MDB_val k, v;
    uint64_t trimmed = 0;
    bool vouched = false; /* a resume point at or below rv: trimmed, or in the journal */
    if (!kb_meta_get(txn, st, "trimmed_rv", &v)) {
        trimmed = kb_resume_rv(v.mv_data, v.mv_size);
        if (rv < trimmed)
            err = KB_ERR_GONE;
        vouched = rv >= trimmed;
    }
    /* Replay starts after the last entry whose resume point is <= rv: every
     * entry after it happened after a cut taken at rv (resume points only
     * move forward in seq order). */
    *seq = 1;
    if (err == KB_OK && !mdb_cursor_open(txn, st->journal, &cur)) {
        bool first = true;
        char point[KB_RESUME_MAX];
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            if (k.mv_size != 8 || v.mv_size < sizeof(kb_rec_hdr_t))
                continue;
            uint64_t s = kb_from_be64(k.mv_data);
            if (first) {
                *seq = s;
                first = false;
            }
            if (!kb_rec_resume_point(&v, point, sizeof(point)))
                continue;
            if (kb_resume_rv(point, strlen(point)) > rv)
                break;
            *seq = s + 1;
            vouched = true;
        }
        mdb_cursor_close(cur);
        /* Before the first resume point (the first list's objects, which are
         * no changes after rv) the journal cannot say what came after rv. */
        if (!vouched)
            err = KB_ERR_GONE;
    }
    mdb_txn_abort(txn);
    return err;
}

/* ---- writes ----------------------------------------------------------- */

kb_err_t kb_state_begin(kb_state_t *st) {
    KB_ASSERT(!st->txn);
    int rc = mdb_txn_begin(st->env, NULL, 0, &st->txn);
    st->txn_dict = 0;
    if (rc) {
        st->txn = NULL;
        return kb_st_fail(st, "begin", rc);
    }
    return KB_OK;
}

static kb_err_t kb_state_journal_put(kb_state_t *st, uint64_t seq, kb_buf_t *rec) {
    unsigned char kb[8];
    kb_be64(seq, kb);
    MDB_val k = {8, kb}, v = {rec->len, rec->data};
    int rc = mdb_put(st->txn, st->journal, &k, &v, MDB_APPEND);
    if (rc == MDB_KEYEXIST) /* a seq re-used after an undone commit: overwrite */
        rc = mdb_put(st->txn, st->journal, &k, &v, 0);
    return rc ? kb_st_fail(st, "journal put", rc) : KB_OK;
}

/* The stored form of an object of KB_ZSTD_MIN bytes or more into st->zbuf:
 * a frame made with the current dictionary (KB_REC_ZDICT), or without one
 * (KB_REC_ZSTD); 0 when neither is smaller than the object. */
static uint8_t kb_st_compress(kb_state_t *st, const char *obj, size_t len) {
    const void *frame = NULL;
    kb_event_zdict_t *zd = NULL;
    size_t n = st->zcache ? kb_zcache_compress(st->zcache, obj, len, &frame, &zd) : 0;
    kb_buf_reset(&st->zbuf);
    if (n && n + 8 < len && kb_st_dict_persist(st, zd) == KB_OK) {
        uint32_t id = kb_zcache_dict_id(zd), raw = (uint32_t)len;
        kb_buf_append(&st->zbuf, &id, 4);
        kb_buf_append(&st->zbuf, &raw, 4);
        kb_buf_append(&st->zbuf, frame, n);
        return KB_REC_ZDICT;
    }
    if (!st->zc)
        st->zc = ZSTD_createCCtx();
    size_t bound = ZSTD_compressBound(len);
    kb_buf_reserve(&st->zbuf, bound);
    n = ZSTD_compressCCtx(st->zc, st->zbuf.data, bound, obj, len, 1);
    if (ZSTD_isError(n) || n >= len)
        return 0;
    st->zbuf.len = n;
    return KB_REC_ZSTD;
}

kb_err_t kb_state_put_event(kb_state_t *st, const kb_event_t *ev, const char *rv_after) {
    kb_buf_t rec = KB_BUF_INIT;
    const char *obj = ev->obj;
    size_t obj_len = ev->obj_len;
    uint8_t zstd = obj_len >= KB_ZSTD_MIN && obj_len <= UINT32_MAX ? kb_st_compress(st, obj, obj_len) : 0;
    if (zstd) {
        obj = st->zbuf.data;
        obj_len = st->zbuf.len;
    }
    kb_rec_encode(&rec, ev, (uint8_t)ev->type, rv_after, true, obj, obj_len, zstd);
    kb_err_t err = kb_state_journal_put(st, ev->seq, &rec);
    if (err == KB_OK && ev->type != KB_EV_SYNC && ev->type != KB_EV_SNAPSHOT) {
        MDB_val k = {ev->key_len, (void *)ev->key};
        int rc;
        if (ev->type == KB_EV_DELETED) {
            rc = mdb_del(st->txn, st->index, &k, NULL);
            if (rc == MDB_NOTFOUND)
                rc = 0;
        } else {
            kb_rec_encode(&rec, ev, (uint8_t)ev->type, NULL, false, obj, obj_len, zstd);
            MDB_val v = {rec.len, rec.data};
            rc = mdb_put(st->txn, st->index, &k, &v, 0);
        }
        if (rc)
            err = kb_st_fail(st, "index put", rc);
    }
    kb_buf_fini(&rec);
    return err;
}

kb_err_t kb_state_put_mark(kb_state_t *st, uint64_t seq, const char *rv_after) {
    kb_buf_t rec = KB_BUF_INIT;
    kb_rec_encode(&rec, NULL, KB_REC_MARK, rv_after, false, NULL, 0, 0);
    kb_err_t err = kb_state_journal_put(st, seq, &rec);
    kb_buf_fini(&rec);
    return err;
}

kb_err_t kb_state_commit(kb_state_t *st) {
    KB_ASSERT(st->txn);
    int rc = mdb_txn_commit(st->txn);
    st->txn = NULL;
    if (rc) {
        atomic_fetch_add(&st->commit_errors, 1);
        return kb_st_fail(st, "commit", rc);
    }
    atomic_fetch_add(&st->commits, 1);
    return KB_OK;
}

void kb_state_abort(kb_state_t *st) {
    if (st->txn)
        mdb_txn_abort(st->txn);
    st->txn = NULL;
}

/* Trim acknowledged journal entries over the size or age bound. The
 * "trimmed_rv" recorded is the resume point after which the journal still
 * holds every change (kb_state_journal_seek). */
static int kb_state_trim(kb_state_t *st, MDB_txn *txn, uint64_t ack_seq) {
    MDB_stat ms;
    int rc = mdb_stat(txn, st->journal, &ms);
    if (rc)
        return rc;
    uint64_t bytes = (uint64_t)(ms.ms_branch_pages + ms.ms_leaf_pages + ms.ms_overflow_pages) * ms.ms_psize;
    int64_t oldest_ok = kb_now_real_ns() - st->journal_max_age_s * KB_NS_PER_SEC;
    MDB_cursor *cur;
    rc = mdb_cursor_open(txn, st->journal, &cur);
    if (rc)
        return rc;
    MDB_val k, v;
    char last_rv[KB_RESUME_MAX] = "";
    size_t trimmed = 0;
    bool inside = false; /* the last entry trimmed is no resume point */
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        kb_rec_hdr_t h;
        if (k.mv_size != 8 || v.mv_size < sizeof(h) || kb_from_be64(k.mv_data) > ack_seq)
            break;
        memcpy(&h, v.mv_data, sizeof(h));
        if (bytes <= st->journal_max_bytes && h.observed_ns >= oldest_ok)
            break;
        inside = !kb_rec_resume_point(&v, last_rv, sizeof(last_rv)); /* a list's object, not a change */
        bytes = bytes > v.mv_size ? bytes - v.mv_size : 0;
        if ((rc = mdb_cursor_del(cur, 0)) != 0)
            break;
        trimmed++;
    }
    /* Trimmed inside a list: the journal vouches again only from the resume
     * point that ends it (none yet: from nothing). */
    if (inside && trimmed && (!rc || rc == MDB_NOTFOUND)) {
        snprintf(last_rv, sizeof(last_rv), "%llu", (unsigned long long)UINT64_MAX);
        int r2 = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        while (!r2 && !kb_rec_resume_point(&v, last_rv, sizeof(last_rv)))
            r2 = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close(cur);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    if (trimmed && last_rv[0])
        return kb_meta_put(txn, st, "trimmed_rv", last_rv, strlen(last_rv));
    return 0;
}

/* Fault injection for tests: KB_TEST_KILL_IN_CHECKPOINT=N kills the process
 * with SIGKILL in the middle of the N-th checkpoint transaction (written, not
 * committed), as a crash or power loss there would. Never set in production. */
static void kb_state_fault_point(kb_state_t *st) {
    static _Atomic int writes;
    const char *env = getenv("KB_TEST_KILL_IN_CHECKPOINT");
    if (env && atoi(env) > 0 && atomic_fetch_add(&writes, 1) + 1 == atoi(env)) {
        KB_WARN("state", "dir=%s KB_TEST_KILL_IN_CHECKPOINT: killing the process inside a checkpoint write", st->dir);
        raise(SIGKILL);
    }
}

/* The meta key of a sink's watermark. */
static void kb_sink_key(const char *sink, char *out, size_t size) {
    snprintf(out, size, "sink_seq/%s", sink);
}

kb_err_t kb_state_read_sink_seq(kb_state_t *st, const char *sink, uint64_t *seq) {
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
    if (rc)
        return kb_st_fail(st, "read sink watermark", rc);
    char key[320];
    kb_sink_key(sink, key, sizeof(key));
    MDB_val v;
    kb_err_t err = KB_ERR_NOTFOUND;
    if (!kb_meta_get(txn, st, key, &v) && v.mv_size == 8) {
        *seq = kb_from_be64(v.mv_data);
        err = KB_OK;
    }
    mdb_txn_abort(txn);
    return err;
}

kb_err_t kb_state_set_checkpoint(kb_state_t *st, uint64_t seq, const char *rv, const kb_state_sink_seq_t *sinks,
                                 size_t n_sinks) {
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (rc)
        return kb_st_fail(st, "checkpoint", rc);
    unsigned char kb[8];
    kb_be64(seq, kb);
    rc = kb_meta_put(txn, st, "ack_seq", kb, 8);
    if (!rc)
        rc = kb_meta_put(txn, st, "ack_rv", rv, strlen(rv));
    for (size_t i = 0; i < n_sinks && !rc; i++) {
        char key[320];
        kb_sink_key(sinks[i].sink, key, sizeof(key));
        kb_be64(sinks[i].seq, kb);
        rc = kb_meta_put(txn, st, key, kb, 8);
    }
    if (!rc)
        rc = kb_state_trim(st, txn, seq);
    if (rc) {
        mdb_txn_abort(txn);
        return kb_st_fail(st, "checkpoint", rc);
    }
    kb_state_fault_point(st);
    rc = mdb_txn_commit(txn);
    return rc ? kb_st_fail(st, "checkpoint commit", rc) : KB_OK;
}

kb_err_t kb_state_read_definition(kb_state_t *st, char **def, char **pending) {
    *def = *pending = NULL;
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
    if (rc)
        return kb_st_fail(st, "read definition", rc);
    MDB_val v;
    if (!kb_meta_get(txn, st, "definition", &v))
        *def = kb_strndup(v.mv_data, v.mv_size);
    if (!kb_meta_get(txn, st, "definition_pending", &v))
        *pending = kb_strndup(v.mv_data, v.mv_size);
    mdb_txn_abort(txn);
    return KB_OK;
}

/* The puts of kb_state_put_definition, in txn. */
static int kb_def_write(MDB_txn *txn, kb_state_t *st, const char *def, const char *pending) {
    int rc = def ? kb_meta_put(txn, st, "definition", def, strlen(def)) : 0;
    if (!rc && pending)
        rc = kb_meta_put(txn, st, "definition_pending", pending, strlen(pending));
    if (!rc && !pending) {
        MDB_val k = {18, (void *)"definition_pending"};
        rc = mdb_del(txn, st->meta, &k, NULL);
        if (rc == MDB_NOTFOUND)
            rc = 0;
    }
    return rc;
}

kb_err_t kb_state_put_definition(kb_state_t *st, const char *def, const char *pending) {
    if (st->txn) {
        int rc = kb_def_write(st->txn, st, def, pending);
        return rc ? kb_st_fail(st, "definition put", rc) : KB_OK;
    }
    MDB_txn *txn = NULL;
    int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (!rc)
        rc = kb_def_write(txn, st, def, pending);
    if (rc) {
        if (txn)
            mdb_txn_abort(txn);
        return kb_st_fail(st, "definition", rc);
    }
    rc = mdb_txn_commit(txn);
    return rc ? kb_st_fail(st, "definition commit", rc) : KB_OK;
}

kb_err_t kb_state_reset(kb_state_t *st) {
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (!rc)
        rc = mdb_drop(txn, st->index, 0);
    if (!rc)
        rc = mdb_drop(txn, st->journal, 0);
    if (!rc) {
        MDB_val k = {6, (void *)"ack_rv"};
        rc = mdb_del(txn, st->meta, &k, NULL);
        if (rc == MDB_NOTFOUND)
            rc = 0;
    }
    if (rc) {
        mdb_txn_abort(txn);
        return kb_st_fail(st, "reset", rc);
    }
    rc = mdb_txn_commit(txn);
    return rc ? kb_st_fail(st, "reset commit", rc) : KB_OK;
}

void kb_state_stats(kb_state_t *st, kb_state_stats_t *out) {
    memset(out, 0, sizeof(*out));
    out->commits = atomic_load(&st->commits);
    out->commit_errors = atomic_load(&st->commit_errors);
    MDB_txn *txn;
    if (mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn))
        return;
    MDB_stat ms;
    if (!mdb_stat(txn, st->index, &ms))
        out->index_entries = ms.ms_entries;
    if (!mdb_stat(txn, st->journal, &ms))
        out->journal_entries = ms.ms_entries;
    mdb_txn_abort(txn);
    char path[4096];
    snprintf(path, sizeof(path), "%s/data.mdb", st->dir);
    struct stat sb;
    if (stat(path, &sb) == 0)
        out->file_bytes = (uint64_t)sb.st_blocks * 512;
}
