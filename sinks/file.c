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
 * Stopping never waits on the reader: the descriptor is non-blocking (stdout
 * too when it is a pipe, its flags restored at the end; a terminal is left
 * blocking, the shutdown watchdog bounds it), so a pipe or FIFO whose reader stopped
 * reading makes write(2) say EAGAIN and the writer waits in poll(2), where
 * the stop flag reaches it. Once stopping, a batch that cannot progress is
 * given up (its messages acknowledged with KB_ERR_STOPPED, never as delivered
 * and never as a refusal: the bridge leaves them below the watermark, or hands
 * them to the instance that replaces this one), so shutdown ends within its
 * deadline whatever the reader does.
 *
 * The path is reopened between batches — never inside one, so each file
 * holds whole lines — on SIGHUP (kb_sink_ops_t.reopen) and when it no longer
 * names the open file: one stat(2) per batch compares device and inode with
 * the descriptor's, which catches logrotate's rename + create and an rm.
 * A symbolic link at the path is refused (O_NOFOLLOW) unless follow_symlinks
 * is set, so the torn-tail repair can never cut a file the link points at; a
 * file the sink creates gets file_mode exactly (fchmod, umask or not).
 *
 * An ack means write(2) accepted the bytes (they survive a crash of this
 * process; a power loss may still take the page cache with it).
 *
 * Locks: fs->mtx guards pending, acks and flags; it is never held while
 * writing or while calling an ack. fd, dev and ino belong to the writer
 * thread once it runs.
 */
#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/time.h"
#include "sinks/envelope.h"
#include "sinks/sink.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KB_FILE_MAX_PENDING (8u << 20) /* bytes of lines waiting for the writer */
#define KB_FILE_POLL_MS 100            /* how often a blocked writer looks at the stop flag */

typedef struct kb_file_ack {
    kb_ack_fn fn;
    void *opaque;
} kb_file_ack_t;

typedef struct kb_file_sink {
    char *path;
    bool is_stdout;            /* path "-" */
    bool follow;               /* follow_symlinks */
    unsigned mode;             /* file_mode_bits for a file we create */
    int fd;                    /* writer thread */
    dev_t dev;                 /* of fd; writer thread */
    ino_t ino;
    int saved_flags;           /* stdout's file status flags before O_NONBLOCK */
    pthread_t writer;
    pthread_mutex_t mtx;
    pthread_cond_t cond;       /* pending grew, space freed, writer idle, stop */
    kb_buf_t pending;          /* whole lines; mtx */
    kb_file_ack_t *acks;       /* one per line in pending; mtx */
    size_t n_acks, cap_acks;   /* mtx */
    bool writing;              /* the writer holds a batch; mtx */
    bool stopping;             /* mtx */
    _Atomic bool stop_now;     /* = stopping, readable without mtx by a writer waiting on the reader */
    _Atomic bool reopen;       /* SIGHUP asked for a reopen before the next batch */
    uint64_t produced, acked, failed, retries, reopens; /* mtx */
} kb_file_sink_t;

static kb_err_t kb_file_validate(const kb_config_sink_t *conf, const kb_config_t *cfg, char *errstr,
                                 size_t errstr_size) {
    if (!conf->path || !conf->path[0]) {
        snprintf(errstr, errstr_size, "%s:%d: sinks.%s.path: must not be empty (use \"-\" for stdout)", cfg->path,
                 conf->line, conf->name);
        return KB_ERR_CONFIG;
    }
    if (!strcmp(conf->path, "-"))
        return KB_OK;
    /* The file may not exist yet; its directory must (start-up would fail to create it). */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", conf->path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else
        slash[slash == dir ? 1 : 0] = '\0';
    struct stat st;
    bool exists = stat(dir, &st) == 0;
    if (!exists || !S_ISDIR(st.st_mode)) {
        snprintf(errstr, errstr_size, "%s:%d: sinks.%s.path: the directory \"%s\" of \"%s\" %s", cfg->path,
                 conf->line, conf->name, dir, conf->path, exists ? "is not a directory" : "does not exist");
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

/* Open (or create with exactly fs->mode) fs->path for appending, non-blocking,
 * its torn tail repaired. Returns the descriptor, or -1 with why in errstr. */
static int kb_file_open(const kb_file_sink_t *fs, char *errstr, size_t errstr_size) {
    /* read access only to look at the tail (kb_file_repair_tail); O_RDWR also
     * opens a FIFO without waiting for a reader */
    int flags = O_RDWR | O_APPEND | O_CLOEXEC | O_NONBLOCK | (fs->follow ? 0 : O_NOFOLLOW);
    int fd = -1;
    for (int attempt = 0; attempt < 3 && fd < 0; attempt++) {
        fd = open(fs->path, flags);
        if (fd >= 0 || errno != ENOENT)
            break;
        fd = open(fs->path, flags | O_CREAT | O_EXCL, (mode_t)fs->mode);
        if (fd >= 0 && fchmod(fd, (mode_t)fs->mode) != 0)
            KB_WARN("file", "path=%s cannot set mode %03o: %s", fs->path, fs->mode, strerror(errno));
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP && !fs->follow)
            snprintf(errstr, errstr_size, "\"%s\" is a symbolic link; it is not followed unless "
                     "follow_symlinks = true", fs->path);
        else
            snprintf(errstr, errstr_size, "cannot open \"%s\": %s", fs->path, strerror(e));
        return -1;
    }
    kb_file_repair_tail(fd, fs->path);
    return fd;
}

/* Remember which file fd is, for kb_file_path_moved. */
static void kb_file_note_identity(kb_file_sink_t *fs) {
    struct stat st;
    if (fstat(fs->fd, &st) == 0) {
        fs->dev = st.st_dev;
        fs->ino = st.st_ino;
    }
}

/* Does the path still name the open file? One stat(2). */
static bool kb_file_path_moved(const kb_file_sink_t *fs) {
    struct stat st;
    int rc = fs->follow ? stat(fs->path, &st) : lstat(fs->path, &st);
    return rc != 0 || st.st_dev != fs->dev || st.st_ino != fs->ino;
}

/* Before a batch: reopen the path when asked (SIGHUP) or when it names
 * another file or none. On failure the old descriptor stays in use. */
static void kb_file_maybe_reopen(kb_file_sink_t *fs) {
    if (fs->is_stdout)
        return;
    bool asked = atomic_exchange(&fs->reopen, false);
    if (!asked && !kb_file_path_moved(fs))
        return;
    char why[512];
    int fd = kb_file_open(fs, why, sizeof(why));
    if (fd < 0) {
        static kb_ratelimit_t rl;
        if (kb_ratelimit_allow(&rl, 10000, NULL))
            KB_ERROR("file", "path=%s cannot reopen (%s): %s; still writing to the file opened before", fs->path,
                     asked ? "SIGHUP" : "the path names another file", why);
        return;
    }
    KB_INFO("file", "path=%s reopened (%s)", fs->path, asked ? "SIGHUP" : "the path no longer names the open file");
    close(fs->fd);
    fs->fd = fd;
    kb_file_note_identity(fs);
    pthread_mutex_lock(&fs->mtx);
    fs->reopens++;
    pthread_mutex_unlock(&fs->mtx);
}

/* Write all of p[0..n), retrying errors with backoff. Returns false only once
 * the sink is stopping and the reader or the disk does not take the bytes. */
static bool kb_file_write_all(kb_file_sink_t *fs, const char *p, size_t n) {
    static kb_ratelimit_t rl;
    int64_t backoff_ms = 100;
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
        if (atomic_load(&fs->stop_now))
            return false;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* The reader is not reading: wait for room (backpressure) or stop. */
            struct pollfd pfd = {.fd = fs->fd, .events = POLLOUT};
            (void)poll(&pfd, 1, KB_FILE_POLL_MS);
            continue;
        }
        uint64_t suppressed = 0;
        if (kb_ratelimit_allow(&rl, 10000, &suppressed))
            KB_ERROR("file", "path=%s write failed: %s; retrying (suppressed=%llu)", fs->path,
                     w < 0 ? strerror(errno) : "no progress", (unsigned long long)suppressed);
        pthread_mutex_lock(&fs->mtx);
        fs->retries++;
        pthread_mutex_unlock(&fs->mtx);
        kb_sleep_ms_interruptible(backoff_ms, &fs->stop_now);
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

        kb_file_maybe_reopen(fs);
        bool ok = kb_file_write_all(fs, batch.data, batch.len);
        if (!ok)
            KB_ERROR("file", "path=%s stopping while the reader takes nothing: %zu line(s) not written", fs->path, n);
        kb_buf_reset(&batch);
        for (size_t i = 0; i < n; i++)
            acks[i].fn(acks[i].opaque, ok ? KB_OK : KB_ERR_STOPPED);

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
    fs->follow = conf->follow_symlinks;
    fs->mode = conf->file_mode_bits ? conf->file_mode_bits : 0600;
    if (!strcmp(conf->path, "-")) {
        fs->is_stdout = true;
        fs->fd = STDOUT_FILENO;
        /* Only a pipe or socket: a terminal's open file is shared with the
         * shell's stdin, which must never be left non-blocking. */
        struct stat st;
        bool piped = fstat(fs->fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
        fs->saved_flags = piped ? fcntl(fs->fd, F_GETFL) : -1;
        if (fs->saved_flags >= 0)
            (void)fcntl(fs->fd, F_SETFL, fs->saved_flags | O_NONBLOCK);
    } else {
        char why[512];
        fs->fd = kb_file_open(fs, why, sizeof(why));
        if (fs->fd < 0) {
            snprintf(errstr, errstr_size, "%s:%d: sinks.%s.path: %s", cfg->path, conf->line, conf->name, why);
            free(fs->path);
            free(fs);
            return KB_ERR_IO;
        }
        kb_file_note_identity(fs);
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

/* SIGHUP: reopen the path before the next batch. Thread: main. */
static void kb_file_reopen(void *state) {
    kb_file_sink_t *fs = state;
    atomic_store(&fs->reopen, true);
}

static void kb_file_destroy(void *state) {
    kb_file_sink_t *fs = state;
    if (!fs)
        return;
    pthread_mutex_lock(&fs->mtx);
    fs->stopping = true;
    atomic_store(&fs->stop_now, true);
    pthread_cond_broadcast(&fs->cond);
    pthread_mutex_unlock(&fs->mtx);
    pthread_join(fs->writer, NULL);
    if (!fs->is_stdout)
        close(fs->fd);
    else if (fs->saved_flags >= 0)
        (void)fcntl(fs->fd, F_SETFL, fs->saved_flags);
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
    .reopen = kb_file_reopen,
};
