/* sinks/file.c — JSON Lines to a file or stdout.
 *
 * Design: shard workers format their message outside any lock, then append
 * the finished line to a shared pending buffer; one writer thread swaps the
 * buffer out and writes it with write(2) on an O_APPEND descriptor, then
 * acknowledges every message of that batch. Batching makes the file sink
 * cost one syscall per batch, not per event.
 *
 * Lines are whole or absent: the pending buffer only ever holds whole lines;
 * a short write is continued from where it stopped (an error such as ENOSPC
 * is retried with backoff, so a full disk stalls the pipeline — backpressure —
 * instead of losing changes); and at open, a torn last line left by a crash
 * of an earlier run (bytes after the last '\n') is cut off, so the next line
 * starts clean. Nothing before the last newline is ever touched.
 *
 * An ack means write(2) accepted the bytes (they survive a crash of this
 * process; a power loss may still take the page cache with it).
 *
 * Locks: fs->mtx guards pending, acks and flags; it is never held while
 * writing or while calling an ack.
 */
#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/time.h"
#include "sinks/envelope.h"
#include "sinks/sink.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KB_FILE_MAX_PENDING (8u << 20) /* bytes of lines waiting for the writer */

typedef struct kb_file_ack {
    kb_ack_fn fn;
    void *opaque;
} kb_file_ack_t;

typedef struct kb_file_sink {
    char *path;
    int fd;
    bool own_fd;               /* false for stdout */
    pthread_t writer;
    pthread_mutex_t mtx;
    pthread_cond_t cond;       /* pending grew, space freed, writer idle, stop */
    kb_buf_t pending;          /* whole lines; mtx */
    kb_file_ack_t *acks;       /* one per line in pending; mtx */
    size_t n_acks, cap_acks;   /* mtx */
    bool writing;              /* the writer holds a batch; mtx */
    bool stopping;             /* mtx */
    uint64_t produced, acked, failed, retries; /* mtx */
} kb_file_sink_t;

static kb_err_t kb_file_validate(const kb_config_sink_t *conf, const kb_config_t *cfg, char *errstr,
                                 size_t errstr_size) {
    if (!conf->path || !conf->path[0]) {
        snprintf(errstr, errstr_size, "%s:%d: sinks.%s.path: must not be empty (use \"-\" for stdout)", cfg->path,
                 conf->line, conf->name);
        return KB_ERR_CONFIG;
    }
    return KB_OK;
}

/* Cut a torn trailing line (no final '\n') left by an earlier crash. */
static void kb_file_repair_tail(int fd, const char *path) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
        return;
    char buf[4096];
    off_t end = st.st_size;
    while (end > 0) {
        off_t start = end > (off_t)sizeof(buf) ? end - (off_t)sizeof(buf) : 0;
        ssize_t n = pread(fd, buf, (size_t)(end - start), start);
        if (n <= 0)
            return;
        if (end == st.st_size && buf[n - 1] == '\n')
            return; /* clean */
        for (ssize_t i = n - 1; i >= 0; i--) {
            if (buf[i] == '\n') {
                off_t keep = start + i + 1;
                KB_WARN("file", "path=%s cutting %lld bytes of a torn last line left by an earlier run", path,
                        (long long)(st.st_size - keep));
                if (ftruncate(fd, keep) != 0)
                    KB_ERROR("file", "path=%s cannot cut torn line: %s", path, strerror(errno));
                return;
            }
        }
        end = start;
    }
    KB_WARN("file", "path=%s holds no complete line; cutting %lld bytes", path, (long long)st.st_size);
    if (ftruncate(fd, 0) != 0)
        KB_ERROR("file", "path=%s cannot cut torn line: %s", path, strerror(errno));
}

/* Write all of p[0..n), retrying errors with backoff until done or stopping
 * too long. Returns false only if the sink is stopping and the disk refuses. */
static bool kb_file_write_all(kb_file_sink_t *fs, const char *p, size_t n) {
    static kb_ratelimit_t rl;
    int64_t backoff_ms = 100;
    int stop_tries = 0;
    while (n > 0) {
        ssize_t w = write(fs->fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            backoff_ms = 100;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        uint64_t suppressed = 0;
        if (kb_ratelimit_allow(&rl, 10000, &suppressed))
            KB_ERROR("file", "path=%s write failed: %s; retrying (suppressed=%llu)", fs->path,
                     w < 0 ? strerror(errno) : "no progress", (unsigned long long)suppressed);
        pthread_mutex_lock(&fs->mtx);
        fs->retries++;
        bool stopping = fs->stopping;
        pthread_mutex_unlock(&fs->mtx);
        if (stopping && ++stop_tries > 20)
            return false;
        kb_sleep_ms_interruptible(backoff_ms, NULL);
        backoff_ms = backoff_ms * 2 > 5000 ? 5000 : backoff_ms * 2;
    }
    return true;
}

static void *kb_file_writer(void *arg) {
    kb_file_sink_t *fs = arg;
    kb_thread_set_name("kb:sink/file");
    kb_buf_t batch = KB_BUF_INIT;
    kb_file_ack_t *acks = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&fs->mtx);
    for (;;) {
        while (fs->pending.len == 0 && !fs->stopping)
            pthread_cond_wait(&fs->cond, &fs->mtx);
        if (fs->pending.len == 0 && fs->stopping)
            break;
        /* Swap the pending lines out; producers refill a fresh buffer. */
        kb_buf_t tmp = fs->pending;
        fs->pending = batch;
        batch = tmp;
        kb_file_ack_t *tacks = fs->acks;
        size_t tcap = fs->cap_acks, n = fs->n_acks;
        fs->acks = acks;
        fs->cap_acks = cap;
        fs->n_acks = 0;
        acks = tacks;
        cap = tcap;
        fs->writing = true;
        pthread_cond_broadcast(&fs->cond);
        pthread_mutex_unlock(&fs->mtx);

        bool ok = kb_file_write_all(fs, batch.data, batch.len);
        kb_buf_reset(&batch);
        for (size_t i = 0; i < n; i++)
            acks[i].fn(acks[i].opaque, ok ? KB_OK : KB_ERR_IO);

        pthread_mutex_lock(&fs->mtx);
        fs->writing = false;
        if (ok)
            fs->acked += n;
        else
            fs->failed += n;
        pthread_cond_broadcast(&fs->cond);
    }
    pthread_mutex_unlock(&fs->mtx);
    kb_buf_fini(&batch);
    free(acks);
    return NULL;
}

static kb_err_t kb_file_create(const kb_config_sink_t *conf, const kb_config_t *cfg, void **state, char *errstr,
                               size_t errstr_size) {
    kb_file_sink_t *fs = kb_calloc(1, sizeof(*fs));
    fs->path = kb_strdup(conf->path);
    if (!strcmp(conf->path, "-")) {
        fs->fd = STDOUT_FILENO;
    } else {
        /* read access only to look at the tail (kb_file_repair_tail) */
        fs->fd = open(conf->path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fs->fd < 0) {
            snprintf(errstr, errstr_size, "%s:%d: sinks.%s.path: cannot open \"%s\": %s", cfg->path, conf->line,
                     conf->name, conf->path, strerror(errno));
            free(fs->path);
            free(fs);
            return KB_ERR_IO;
        }
        fs->own_fd = true;
        kb_file_repair_tail(fs->fd, fs->path);
    }
    pthread_mutex_init(&fs->mtx, NULL);
    kb_cond_init_mono(&fs->cond);
    if (pthread_create(&fs->writer, NULL, kb_file_writer, fs) != 0)
        KB_FATAL("cannot start the file writer thread");
    *state = fs;
    return KB_OK;
}

static kb_err_t kb_file_produce(void *state, const kb_msg_t *msg, int timeout_ms) {
    kb_file_sink_t *fs = state;
    kb_buf_t line = KB_BUF_INIT;
    if (!msg->ev)
        kb_buf_append(&line, msg->raw, msg->raw_len);
    else if (msg->format == KB_FORMAT_JSON)
        kb_envelope_json(msg->ev, &line);
    else
        kb_envelope_ce_structured(msg->ev, msg->key, msg->key_len, &line);
    kb_buf_append_char(&line, '\n');

    struct timespec deadline = kb_deadline_mono(timeout_ms < 0 ? 0 : timeout_ms);
    pthread_mutex_lock(&fs->mtx);
    while (fs->pending.len > 0 && fs->pending.len + line.len > KB_FILE_MAX_PENDING && !fs->stopping) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&fs->cond, &fs->mtx);
        } else if (pthread_cond_timedwait(&fs->cond, &fs->mtx, &deadline) != 0) {
            pthread_mutex_unlock(&fs->mtx);
            kb_buf_fini(&line);
            return KB_ERR_FULL;
        }
    }
    if (fs->stopping) {
        pthread_mutex_unlock(&fs->mtx);
        kb_buf_fini(&line);
        return KB_ERR_STOPPED;
    }
    kb_buf_append(&fs->pending, line.data, line.len);
    if (fs->n_acks == fs->cap_acks) {
        fs->cap_acks = fs->cap_acks ? fs->cap_acks * 2 : 256;
        fs->acks = kb_realloc(fs->acks, fs->cap_acks * sizeof(*fs->acks));
    }
    fs->acks[fs->n_acks++] = (kb_file_ack_t){msg->ack, msg->ack_opaque};
    fs->produced++;
    pthread_cond_broadcast(&fs->cond);
    pthread_mutex_unlock(&fs->mtx);
    kb_buf_fini(&line);
    return KB_OK;
}

static kb_err_t kb_file_flush(void *state, int timeout_ms) {
    kb_file_sink_t *fs = state;
    struct timespec deadline = kb_deadline_mono(timeout_ms < 0 ? 0 : timeout_ms);
    kb_err_t err = KB_OK;
    pthread_mutex_lock(&fs->mtx);
    while (fs->pending.len > 0 || fs->writing) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&fs->cond, &fs->mtx);
        } else if (pthread_cond_timedwait(&fs->cond, &fs->mtx, &deadline) != 0) {
            err = KB_ERR_TIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&fs->mtx);
    return err;
}

static void kb_file_stats(void *state, kb_sink_stats_t *st) {
    kb_file_sink_t *fs = state;
    pthread_mutex_lock(&fs->mtx);
    st->produced = fs->produced;
    st->acked = fs->acked;
    st->failed = fs->failed;
    st->retries = fs->retries;
    st->queue_bytes = fs->pending.len;
    st->connected = true;
    pthread_mutex_unlock(&fs->mtx);
}

static void kb_file_destroy(void *state) {
    kb_file_sink_t *fs = state;
    if (!fs)
        return;
    pthread_mutex_lock(&fs->mtx);
    fs->stopping = true;
    pthread_cond_broadcast(&fs->cond);
    pthread_mutex_unlock(&fs->mtx);
    pthread_join(fs->writer, NULL);
    if (fs->own_fd)
        close(fs->fd);
    kb_buf_fini(&fs->pending);
    free(fs->acks);
    pthread_cond_destroy(&fs->cond);
    pthread_mutex_destroy(&fs->mtx);
    free(fs->path);
    free(fs);
}

const kb_sink_ops_t kb_sink_file_ops = {
    .type = "file",
    .validate = kb_file_validate,
    .create = kb_file_create,
    .produce = kb_file_produce,
    .flush = kb_file_flush,
    .stats = kb_file_stats,
    .destroy = kb_file_destroy,
};
