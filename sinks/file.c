/* sinks/file.c — JSON Lines to a file or stdout.
 *
 * Design: shard workers format their message outside any lock, then append
 * the finished line to a shared pending buffer; one writer thread swaps the
 * buffer out and writes it with write(2) on an O_APPEND descriptor, then
 * acknowledges every message of that batch. Batching makes the file sink
 * cost one syscall per batch, not per event.
 *
 * The writer is woken per batch, not per line: a producer signals it only
 * when it sleeps with nothing to write (the first line of a batch) or when it
 * lingers and the batch has grown to KB_FILE_BATCH_BYTES. Once woken, the
 * writer lingers up to KB_FILE_LINGER_US for more lines before it swaps the
 * buffer out (not while a flush() or the stop waits), so that a busy pipeline
 * costs two wake-ups (the signal, the linger's end) per batch instead of a
 * context switch per line. The price is that latency: a line reaches the file
 * at most that much later than it would have.
 *
 * Lines are whole or absent: the pending buffer only ever holds whole lines;
 * a short write is continued from where it stopped (an error such as ENOSPC
 * is retried with backoff, so a full disk stalls the pipeline — backpressure —
 * instead of losing changes); and at open, a torn last line left by a crash
 * of an earlier run (bytes after the last '\n') is cut off, so the next line
 * starts clean. Nothing before the last newline is ever touched.
 *
 * A FIFO is opened the way a writer should: write-only. Opened read-write the
 * sink would be a reader itself, and lines would go into a pipe nobody reads
 * and be acknowledged — lost at a crash. While no reader has it open (ENXIO at
 * open, EPIPE on write) nothing is written or acknowledged: the writer looks
 * again every KB_FILE_POLL_MS, the stats say "not connected: no reader", and
 * the pipeline backs up. A pipe cannot be cut back like a file, so each
 * write(2) into it holds whole lines that the pipe is sure to take whole (see
 * kb_pipe_room): a stop, or a crash in the middle of a write, never leaves
 * half a line for the next run's first line to be glued onto.
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
 * process; a power loss may still take the page cache with it). For a FIFO it
 * means the line is in the pipe, with a reader holding it open.
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
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define KB_FILE_MAX_PENDING (8u << 20) /* bytes of lines waiting for the writer */
#define KB_FILE_POLL_MS 100            /* how often a blocked writer looks at the stop flag (and for a reader) */
#define KB_PIPE_ROOM_MS 5              /* how often a writer waiting for room for a whole line looks again */
#define KB_FILE_LINGER_US 1000         /* how long a woken writer waits for more lines before writing */
#define KB_FILE_BATCH_BYTES (64u << 10) /* a batch this large is written without lingering further */

/* What the writer is doing, for a producer deciding whether to signal it. */
typedef enum kb_file_writer_state {
    KB_FILE_BUSY,      /* writing, or woken and about to look: no signal needed */
    KB_FILE_IDLE,      /* asleep with nothing to write: the next line wakes it */
    KB_FILE_LINGERING, /* woken, waiting for more lines: only a full batch wakes it early */
} kb_file_writer_state_t;

typedef struct kb_file_ack {
    kb_ack_fn fn;
    void *opaque;
} kb_file_ack_t;

/* One write(2) into a FIFO: where it ended in the stream and the pipe slots
 * (pages) it can have taken. */
typedef struct kb_pipe_write {
    uint64_t end;
    size_t pages;
} kb_pipe_write_t;

typedef struct kb_file_sink {
    char *path;
    bool is_stdout;            /* path "-" */
    bool fifo;                 /* path is a FIFO (writer thread once it runs) */
    _Atomic bool no_reader;    /* a FIFO no reader has open: nothing is written or acknowledged */
    size_t page;               /* the pipe's slot size (a page) */
    size_t slots;              /* the pipe's capacity in slots (F_GETPIPE_SZ / page); writer thread */
    uint64_t piped;            /* bytes written into the pipe since it was opened; writer thread */
    uint64_t piped_writes;     /* write(2)s that put them there; writer thread */
    kb_pipe_write_t *pw;       /* the latest writes into it, a ring of slots entries; writer thread */
    size_t pw_head, pw_len;
    bool follow;               /* follow_symlinks */
    unsigned mode;             /* file_mode_bits for a file we create */
    int fd;                    /* writer thread */
    dev_t dev;                 /* of fd; writer thread */
    ino_t ino;
    int saved_flags;           /* stdout's file status flags before O_NONBLOCK */
    pthread_t writer;
    pthread_mutex_t mtx;
    pthread_cond_t cond;       /* space freed, writer idle, stop (producers and flushers wait on it) */
    pthread_cond_t wake;       /* the writer's own: a batch to write, a flush or the stop */
    kb_file_writer_state_t state; /* mtx */
    unsigned flushers;         /* flush() calls waiting: the writer does not linger; mtx */
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

/* Open fs->path for appending, non-blocking: a FIFO write-only, anything
 * else read-write (read access only to look at the tail), created with exactly
 * fs->mode if missing. -1 with errno on failure. */
static int kb_file_open_as(const kb_file_sink_t *fs, bool fifo) {
    int flags = (fifo ? O_WRONLY : O_RDWR) | O_APPEND | O_CLOEXEC | O_NONBLOCK | (fs->follow ? 0 : O_NOFOLLOW);
    int fd = -1;
    for (int attempt = 0; attempt < 3 && fd < 0; attempt++) {
        fd = open(fs->path, flags);
        if (fd >= 0 || errno != ENOENT || fifo)
            break;
        fd = open(fs->path, flags | O_CREAT | O_EXCL, (mode_t)fs->mode);
        if (fd >= 0 && fchmod(fd, (mode_t)fs->mode) != 0)
            KB_WARN("file", "path=%s cannot set mode %03o: %s", fs->path, fs->mode, strerror(errno));
        if (fd < 0 && errno != EEXIST)
            break;
    }
    return fd;
}

/* Open fs->path (kb_file_open_as), a regular file's torn tail repaired.
 * *fifo says whether it is a FIFO. Returns the descriptor, or -1 with why in
 * errstr; *no_reader: it is a FIFO no reader has open yet (not an error). */
static int kb_file_open(const kb_file_sink_t *fs, bool *fifo, bool *no_reader, char *errstr, size_t errstr_size) {
    struct stat st;
    *fifo = (fs->follow ? stat(fs->path, &st) : lstat(fs->path, &st)) == 0 && S_ISFIFO(st.st_mode);
    *no_reader = false;
    int fd = kb_file_open_as(fs, *fifo);
    if (fd >= 0 && !*fifo && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) {
        close(fd); /* a FIFO took the path's place after the look: never be its reader */
        *fifo = true;
        fd = kb_file_open_as(fs, true);
    }
    if (fd < 0) {
        int e = errno;
        *no_reader = *fifo && e == ENXIO;
        if (*no_reader)
            snprintf(errstr, errstr_size, "\"%s\" is a FIFO no reader has open", fs->path);
        else if (e == ELOOP && !fs->follow)
            snprintf(errstr, errstr_size, "\"%s\" is a symbolic link; it is not followed unless "
                     "follow_symlinks = true", fs->path);
        else
            snprintf(errstr, errstr_size, "cannot open \"%s\": %s", fs->path, strerror(e));
        return -1;
    }
    kb_file_repair_tail(fd, fs->path);
    return fd;
}

/* ---- pipes: whole lines per write(2) --------------------------------------
 *
 * A pipe holds `slots` pages (F_GETPIPE_SZ), and a write(2) of n bytes takes
 * at most ceil(n / page) of them (fewer when its tail fits into the last one):
 * a write that many free slots can hold goes in whole — no stop can cut it,
 * and a crash cannot stop it half-way. The sink is the pipe's one writer, so
 * the bytes still unread (FIONREAD) are the end of what it wrote, and the
 * slots they hold are at most those the writes holding them took. */

/* The ring of the latest writes holds `slots` entries: each counts at least a
 * slot, so older ones never matter. */
static void kb_pipe_set_slots(kb_file_sink_t *fs, size_t slots) {
    kb_pipe_write_t *pw = kb_calloc(slots, sizeof(*pw));
    size_t keep = fs->pw_len < slots ? fs->pw_len : slots;
    for (size_t i = 0; i < keep; i++)
        pw[i] = fs->pw[(fs->pw_head + fs->pw_len - keep + i) % fs->slots];
    free(fs->pw);
    fs->pw = pw;
    fs->slots = slots;
    fs->pw_head = 0;
    fs->pw_len = keep;
}

/* A pipe was opened: its size; nothing in it is known to be ours. */
static void kb_pipe_reset(kb_file_sink_t *fs) {
    int cap = fcntl(fs->fd, F_GETPIPE_SZ);
    size_t slots = cap > 0 ? (size_t)cap / fs->page : 1;
    fs->pw_len = 0;
    fs->piped = 0;
    fs->piped_writes = 0;
    kb_pipe_set_slots(fs, slots ? slots : 1);
}

static void kb_pipe_wrote(kb_file_sink_t *fs, size_t n) {
    fs->piped += n;
    fs->piped_writes++;
    if (fs->pw_len == fs->slots) {
        fs->pw_head = (fs->pw_head + 1) % fs->slots;
        fs->pw_len--;
    }
    fs->pw[(fs->pw_head + fs->pw_len++) % fs->slots] = (kb_pipe_write_t){fs->piped, (n + fs->page - 1) / fs->page};
}

/* Bytes a write(2) into the pipe is sure to take whole now (0: none). Unread
 * bytes this sink did not write (or no longer remembers) count as a full pipe. */
static size_t kb_pipe_room(const kb_file_sink_t *fs) {
    int unread = 0;
    if (ioctl(fs->fd, FIONREAD, &unread) != 0 || unread < 0 || (uint64_t)unread > fs->piped)
        return 0;
    uint64_t first = fs->piped - (uint64_t)unread; /* the oldest unread byte */
    size_t used = 0;
    bool covered = unread == 0;
    for (size_t i = fs->pw_len; i-- > 0 && !covered;) {
        const kb_pipe_write_t *w = &fs->pw[(fs->pw_head + i) % fs->slots];
        covered = w->end <= first;
        if (!covered)
            used += w->pages;
    }
    if (!covered && fs->pw_len == fs->piped_writes)
        covered = true; /* every write since the open is remembered */
    return covered && used < fs->slots ? (fs->slots - used) * fs->page : 0;
}

/* A line longer than the pipe: make the pipe hold it, if allowed. */
static bool kb_pipe_grow(kb_file_sink_t *fs, size_t line) {
    size_t want = fs->page;
    while (want < line && want < (size_t)INT_MAX / 2)
        want *= 2;
    int got = fcntl(fs->fd, F_SETPIPE_SZ, (int)want);
    if (got < 0 || (size_t)got < line) {
        static kb_ratelimit_t rl;
        if (kb_ratelimit_allow(&rl, 60000, NULL))
            KB_WARN("file", "path=%s a line of %zu bytes is longer than the pipe (%zu bytes) and the pipe cannot "
                    "grow (%s; see /proc/sys/fs/pipe-max-size): it is written as the reader takes it, and a "
                    "stop meanwhile can cut it", fs->path, line, fs->slots * fs->page,
                    got < 0 ? strerror(errno) : "too small");
        return false;
    }
    kb_pipe_set_slots(fs, (size_t)got / fs->page);
    return true;
}

/* How much of p[0..n) (whole lines) to write now: the longest run of whole
 * lines the pipe takes whole; 0 = wait for the reader. */
static size_t kb_pipe_chunk(kb_file_sink_t *fs, const char *p, size_t n) {
    size_t room = kb_pipe_room(fs), take = 0;
    for (;;) {
        const char *nl = memchr(p + take, '\n', n - take);
        size_t end = nl ? (size_t)(nl - p) + 1 : n;
        if (end > room)
            break;
        take = end;
        if (take == n)
            return take;
    }
    if (take)
        return take;
    const char *nl = memchr(p, '\n', n);
    size_t line = nl ? (size_t)(nl - p) + 1 : n;
    if (line <= fs->slots * fs->page || kb_pipe_grow(fs, line))
        return 0; /* it fits once the reader has made room */
    return line;
}

/* The reader came or went (a FIFO or stdout's pipe); said once per change. */
static void kb_file_set_reader(kb_file_sink_t *fs, bool reader) {
    if (atomic_exchange(&fs->no_reader, !reader) == !reader)
        return;
    if (reader)
        KB_INFO("file", "path=%s a reader has the pipe open: writing", fs->path);
    else
        KB_WARN("file", "path=%s no reader has the pipe open: nothing is written or acknowledged until one opens "
                "it", fs->path);
}

/* ---- the file ---------------------------------------------------------------- */

/* Remember which file fd is, for kb_file_path_moved. */
static void kb_file_note_identity(kb_file_sink_t *fs) {
    struct stat st;
    if (fstat(fs->fd, &st) == 0) {
        fs->dev = st.st_dev;
        fs->ino = st.st_ino;
    }
}

/* fd, just opened, is the sink's file from now on. */
static void kb_file_adopt(kb_file_sink_t *fs, int fd, bool fifo) {
    if (fs->fd >= 0)
        close(fs->fd);
    fs->fd = fd;
    fs->fifo = fifo;
    kb_file_note_identity(fs);
    if (fifo)
        kb_pipe_reset(fs);
    kb_file_set_reader(fs, true);
}

/* Does the path still name the open file? One stat(2). */
static bool kb_file_path_moved(const kb_file_sink_t *fs) {
    struct stat st;
    int rc = fs->follow ? stat(fs->path, &st) : lstat(fs->path, &st);
    return rc != 0 || st.st_dev != fs->dev || st.st_ino != fs->ino;
}

/* Before a batch: open the path if nothing is open (a FIFO no reader had
 * open), reopen it when asked (SIGHUP) or when it names another file or none.
 * On failure an open descriptor stays in use. */
static void kb_file_maybe_reopen(kb_file_sink_t *fs) {
    if (fs->is_stdout)
        return;
    bool asked = atomic_exchange(&fs->reopen, false);
    if (fs->fd >= 0 && !asked && !kb_file_path_moved(fs))
        return;
    char why[512];
    bool fifo, no_reader;
    int fd = kb_file_open(fs, &fifo, &no_reader, why, sizeof(why));
    if (fd < 0) {
        static kb_ratelimit_t rl;
        if (fs->fd < 0 && no_reader)
            kb_file_set_reader(fs, false);
        else if (kb_ratelimit_allow(&rl, 10000, NULL))
            KB_ERROR("file", "path=%s cannot %s (%s): %s%s", fs->path, fs->fd < 0 ? "open" : "reopen",
                     asked ? "SIGHUP" : fs->fd < 0 ? "not open yet" : "the path names another file", why,
                     fs->fd < 0 ? "; trying again" : "; still writing to the file opened before");
        return;
    }
    if (fs->fd >= 0)
        KB_INFO("file", "path=%s reopened (%s)", fs->path, asked ? "SIGHUP" : "the path no longer names the open file");
    kb_file_adopt(fs, fd, fifo);
    pthread_mutex_lock(&fs->mtx);
    fs->reopens++;
    pthread_mutex_unlock(&fs->mtx);
}

/* Until the path is open: a FIFO waits for a reader. False once stopping. */
static bool kb_file_ready(kb_file_sink_t *fs) {
    kb_file_maybe_reopen(fs);
    while (fs->fd < 0) {
        if (atomic_load(&fs->stop_now))
            return false;
        kb_sleep_ms_interruptible(KB_FILE_POLL_MS, &fs->stop_now);
        kb_file_maybe_reopen(fs);
    }
    return true;
}

/* Wait for the pipe's reader to make room (or to come back), or for the stop. */
static void kb_file_wait_reader(kb_file_sink_t *fs) {
    struct pollfd pfd = {.fd = fs->fd, .events = POLLOUT};
    int rc = poll(&pfd, 1, KB_FILE_POLL_MS);
    if (rc > 0 && (pfd.revents & POLLERR)) {
        kb_file_set_reader(fs, false); /* no reader: POLLERR at once */
        kb_sleep_ms_interruptible(KB_FILE_POLL_MS, &fs->stop_now);
    } else if (rc > 0 && fs->fifo) {
        kb_sleep_ms_interruptible(KB_PIPE_ROOM_MS, &fs->stop_now); /* a slot, not yet the room for a line */
    }
}

/* Write p[0..n) (whole lines), retrying errors with backoff; into a pipe only
 * runs of whole lines it takes whole (kb_pipe_chunk). Returns the bytes
 * written: all of them, or fewer only once the sink is stopping and the reader
 * or the disk does not take the rest. */
static size_t kb_file_write_all(kb_file_sink_t *fs, const char *p, size_t n) {
    static kb_ratelimit_t rl;
    int64_t backoff_ms = 100;
    size_t done = 0;
    while (done < n) {
        size_t chunk = n - done;
        if (fs->fifo && (done == 0 || p[done - 1] == '\n')) {
            chunk = kb_pipe_chunk(fs, p + done, n - done);
        } else if (fs->fifo) { /* the rest of a line the pipe could not take whole */
            const char *nl = memchr(p + done, '\n', n - done);
            chunk = nl ? (size_t)(nl - p) + 1 - done : n - done;
        }
        ssize_t w = chunk ? write(fs->fd, p + done, chunk) : -1;
        if (w > 0) {
            if (fs->fifo) {
                kb_pipe_wrote(fs, (size_t)w);
                kb_file_set_reader(fs, true);
            }
            done += (size_t)w;
            backoff_ms = 100;
            continue;
        }
        if (w < 0 && chunk && errno == EINTR)
            continue;
        if (atomic_load(&fs->stop_now))
            return done;
        if (!chunk || (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EPIPE))) {
            /* The reader is not reading, or there is none: wait (backpressure) or stop. */
            kb_file_wait_reader(fs);
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
    return done;
}

static size_t kb_count_lines(const char *p, size_t n) {
    size_t lines = 0;
    for (const char *end = p + n; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++)
        lines++;
    return lines;
}

/* Under mtx: wait for lines, then linger for more (see the top of the file).
 * Returns with lines pending, or with none once stopping. */
static void kb_file_wait_batch(kb_file_sink_t *fs) {
    while (fs->pending.len == 0 && !fs->stopping) {
        fs->state = KB_FILE_IDLE;
        pthread_cond_wait(&fs->wake, &fs->mtx);
    }
    int64_t until_ns = kb_now_mono_ns() + KB_FILE_LINGER_US * 1000;
    struct timespec until = {(time_t)(until_ns / 1000000000), (long)(until_ns % 1000000000)};
    while (fs->pending.len < KB_FILE_BATCH_BYTES && !fs->stopping && !fs->flushers) {
        fs->state = KB_FILE_LINGERING;
        if (pthread_cond_timedwait(&fs->wake, &fs->mtx, &until) == ETIMEDOUT)
            break;
    }
    fs->state = KB_FILE_BUSY;
}

/* Under mtx: a line was added, a flush or the stop began; wake the writer if
 * it waits for that. */
static void kb_file_nudge(kb_file_sink_t *fs) {
    bool now = fs->pending.len >= KB_FILE_BATCH_BYTES || fs->flushers || fs->stopping;
    bool wanted = (fs->state == KB_FILE_IDLE && (fs->pending.len > 0 || fs->stopping)) ||
                  (fs->state == KB_FILE_LINGERING && now);
    if (!wanted)
        return;
    fs->state = KB_FILE_BUSY;
    pthread_cond_signal(&fs->wake);
}

static void *kb_file_writer(void *arg) {
    kb_file_sink_t *fs = arg;
    kb_thread_set_name("kb:sink/file");
    kb_buf_t batch = KB_BUF_INIT;
    kb_file_ack_t *acks = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&fs->mtx);
    for (;;) {
        kb_file_wait_batch(fs);
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

        size_t wrote = kb_file_ready(fs) ? kb_file_write_all(fs, batch.data, batch.len) : 0;
        size_t whole = kb_count_lines(batch.data, wrote); /* a line cut short (a stop) is not one */
        if (whole < n)
            KB_ERROR("file", "path=%s stopping while the reader takes nothing: %zu line(s) not written", fs->path,
                     n - whole);
        kb_buf_reset(&batch);
        for (size_t i = 0; i < n; i++)
            acks[i].fn(acks[i].opaque, i < whole ? KB_OK : KB_ERR_STOPPED);

        pthread_mutex_lock(&fs->mtx);
        fs->writing = false;
        fs->acked += whole;
        fs->failed += n - whole;
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
    long page = sysconf(_SC_PAGESIZE);
    fs->page = page > 0 ? (size_t)page : 4096;
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
        fs->fifo = S_ISFIFO(st.st_mode) && piped;
        if (fs->fifo)
            kb_pipe_reset(fs);
    } else {
        char why[512];
        bool fifo, no_reader;
        int fd = kb_file_open(fs, &fifo, &no_reader, why, sizeof(why));
        if (fd < 0 && !no_reader) {
            snprintf(errstr, errstr_size, "%s:%d: sinks.%s.path: %s", cfg->path, conf->line, conf->name, why);
            free(fs->path);
            free(fs);
            return KB_ERR_IO;
        }
        fs->fd = -1;
        if (fd >= 0)
            kb_file_adopt(fs, fd, fifo);
        else
            kb_file_set_reader(fs, false); /* the writer opens it once a reader has */
    }
    pthread_mutex_init(&fs->mtx, NULL);
    kb_cond_init_mono(&fs->cond);
    kb_cond_init_mono(&fs->wake);
    fs->state = KB_FILE_BUSY;
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
    kb_file_nudge(fs);
    pthread_mutex_unlock(&fs->mtx);
    kb_buf_fini(&line);
    return KB_OK;
}

static kb_err_t kb_file_flush(void *state, int timeout_ms) {
    kb_file_sink_t *fs = state;
    struct timespec deadline = kb_deadline_mono(timeout_ms < 0 ? 0 : timeout_ms);
    kb_err_t err = KB_OK;
    pthread_mutex_lock(&fs->mtx);
    fs->flushers++;
    kb_file_nudge(fs);
    while (fs->pending.len > 0 || fs->writing) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&fs->cond, &fs->mtx);
        } else if (pthread_cond_timedwait(&fs->cond, &fs->mtx, &deadline) != 0) {
            err = KB_ERR_TIMEDOUT;
            break;
        }
    }
    fs->flushers--;
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
    st->connected = !atomic_load(&fs->no_reader);
    st->why = st->connected ? NULL : "no reader has the pipe open";
    pthread_mutex_unlock(&fs->mtx);
}

/* SIGHUP: reopen the path before the next batch. Thread: the reload thread. */
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
    kb_file_nudge(fs);
    pthread_mutex_unlock(&fs->mtx);
    pthread_join(fs->writer, NULL);
    if (!fs->is_stdout && fs->fd >= 0)
        close(fs->fd);
    else if (fs->saved_flags >= 0)
        (void)fcntl(fs->fd, F_SETFL, fs->saved_flags);
    kb_buf_fini(&fs->pending);
    free(fs->acks);
    free(fs->pw);
    pthread_cond_destroy(&fs->cond);
    pthread_cond_destroy(&fs->wake);
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
