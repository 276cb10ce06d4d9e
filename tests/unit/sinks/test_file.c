/* tests/unit/sinks/test_file.c — the file sink writes whole lines only: a torn
 * last line of a regular file is cut at open; a FIFO is opened as a writer
 * (nothing is acknowledged while no reader has it open, and the stats say it is
 * not connected); a stop while the FIFO's reader takes nothing leaves whole
 * lines in the pipe, and exactly the lines written are acknowledged. */
#include "config/config.h"
#include "sinks/sink.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct acks {
    _Atomic int ok, failed;
} acks_t;

static void on_ack(void *opaque, kb_err_t err) {
    acks_t *a = opaque;
    atomic_fetch_add(err == KB_OK ? &a->ok : &a->failed, 1);
}

static char dir[256];

static void make_dir(void) {
    snprintf(dir, sizeof(dir), "/tmp/kbfile-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

/* A FIFO in a new directory. */
static void make_fifo(char *path, size_t size) {
    make_dir();
    snprintf(path, size, "%s/out.fifo", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
}

static void remove_dir(const char *path) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static kb_config_t *load(const char *path) {
    char text[1024], err[512];
    snprintf(text, sizeof(text),
             "cluster = { name = \"c\"; server = \"http://127.0.0.1:1\"; };\n"
             "informers = ( { name = \"pods\"; resource = \"pods\"; } );\n"
             "sinks = ( { name = \"f\"; type = \"file\"; path = \"%s\"; } );\n"
             "routes = ( { informer = \"pods\"; sink = \"f\"; } );\n",
             path);
    kb_config_t *cfg = kb_config_load_string(text, "t.cfg", err, sizeof(err));
    if (!cfg)
        fail_msg("config: %s", err);
    return cfg;
}

static kb_sink_t *create(kb_config_t *cfg) {
    char err[512];
    kb_sink_t *sink = kb_sink_create(&cfg->sinks[0], cfg, err, sizeof(err));
    if (!sink)
        fail_msg("create: %s", err);
    return sink;
}

/* A raw JSON line of about len bytes, numbered i. */
static void produce(kb_sink_t *sink, int i, size_t len, acks_t *a) {
    char *rec = malloc(len + 64);
    int head = snprintf(rec, len + 64, "{\"n\":%d,\"pad\":\"", i);
    size_t n = (size_t)head;
    while (n < len)
        rec[n++] = 'x';
    memcpy(rec + n, "\"}", 3);
    kb_msg_t msg = {.raw = rec, .raw_len = n + 2, .topic = "", .key = "", .format = KB_FORMAT_JSON,
                    .mode = KB_MODE_EVENTS, .route = "r", .ack = on_ack, .ack_opaque = a};
    assert_int_equal(kb_sink_produce(sink, &msg, 10000), KB_OK);
    free(rec);
}

/* Every line of data[0..n) is a whole {"n":…} record; returns how many. */
static int whole_lines(const char *data, size_t n, int first) {
    int lines = 0;
    for (size_t at = 0; at < n;) {
        const char *nl = memchr(data + at, '\n', n - at);
        if (!nl)
            fail_msg("a torn last line: %zu bytes without a newline: %.40s", n - at, data + at);
        char want[32];
        int wl = snprintf(want, sizeof(want), "{\"n\":%d,", first + lines);
        if (strncmp(data + at, want, (size_t)wl) || nl[-1] != '}')
            fail_msg("line %d is not a whole record: %.40s", lines, data + at);
        at = (size_t)(nl - data) + 1;
        lines++;
    }
    return lines;
}

static size_t read_all(int fd, char **out) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n == cap)
            buf = realloc(buf, cap *= 2);
        ssize_t r = read(fd, buf + n, cap - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    *out = buf;
    return n;
}

/* Issue (checked by 0020 end to end): a crash left half a line; the next
 * line must not be glued onto it. The lines before it stay as they were. */
static void test_regular_file_torn_tail_is_cut(void **state) {
    (void)state;
    make_dir();
    char path[300];
    snprintf(path, sizeof(path), "%s/out.jsonl", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"n\":0,\"pad\":\"x\"}\n{\"n\":1,\"pad\":\"x\"}\n{\"n\":2,\"pa", f);
    fclose(f);
    kb_config_t *cfg = load(path);
    kb_sink_t *sink = create(cfg);
    acks_t a = {0};
    produce(sink, 2, 100, &a);
    produce(sink, 3, 5000, &a);
    assert_int_equal(kb_sink_stop(sink, 10000), KB_OK);
    kb_sink_destroy(sink);
    assert_int_equal(atomic_load(&a.ok), 2);
    int fd = open(path, O_RDONLY);
    char *data;
    size_t n = read_all(fd, &data);
    close(fd);
    assert_int_equal(whole_lines(data, n, 0), 4);
    free(data);
    kb_config_free(cfg);
    remove_dir(dir);
}

/* Issue: a FIFO opened read-write made the sink its own reader: lines went
 * into the pipe and were acknowledged with nobody reading (lost at a crash). */
static void test_fifo_without_reader_acknowledges_nothing(void **state) {
    (void)state;
    char path[300];
    make_fifo(path, sizeof(path));
    kb_config_t *cfg = load(path);
    kb_sink_t *sink = create(cfg);
    acks_t a = {0};
    for (int i = 0; i < 3; i++)
        produce(sink, i, 100, &a);
    assert_int_equal(kb_sink_stop(sink, 300), KB_ERR_TIMEDOUT); /* waits for a reader */
    assert_int_equal(atomic_load(&a.ok) + atomic_load(&a.failed), 0);
    kb_sink_stats_t st = {0};
    sink->ops->stats(sink->state, &st);
    assert_false(st.connected);
    assert_non_null(st.why);
    assert_non_null(strstr(st.why, "no reader"));

    int reader = open(path, O_RDONLY | O_NONBLOCK);
    assert_true(reader >= 0);
    assert_int_equal(kb_sink_stop(sink, 10000), KB_OK);
    assert_int_equal(atomic_load(&a.ok), 3);
    sink->ops->stats(sink->state, &st);
    assert_true(st.connected);
    kb_sink_destroy(sink);
    char *data;
    size_t n = read_all(reader, &data);
    assert_int_equal(whole_lines(data, n, 0), 3);
    free(data);
    close(reader);
    kb_config_free(cfg);
    remove_dir(dir);
}

/* Issue: a stop while the reader took nothing left half a line in the pipe,
 * and the next run's first line was glued onto it. Lines larger than a page,
 * many more than the pipe holds: what the pipe holds at the stop is whole
 * lines, and exactly those were acknowledged. */
/* Wait (up to 60 s) until the pipe holds bytes: the writer thread has run,
 * however busy the machine. */
static void wait_pipe_holds_bytes(int fd) {
    for (int i = 0; i < 6000; i++) {
        int n = 0;
        if (ioctl(fd, FIONREAD, &n) == 0 && n > 0)
            return;
        usleep(10000);
    }
    fail_msg("the writer put nothing into the pipe in 60 s");
}

static void test_fifo_stop_while_stalled_leaves_whole_lines(void **state) {
    (void)state;
    char path[300];
    make_fifo(path, sizeof(path));
    int reader = open(path, O_RDONLY | O_NONBLOCK);
    assert_true(reader >= 0);
    kb_config_t *cfg = load(path);
    kb_sink_t *sink = create(cfg);
    acks_t a = {0};
    enum { LINES = 60 };
    for (int i = 0; i < LINES; i++)
        produce(sink, i, 5000 + (size_t)i * 37, &a); /* 300 KB: the pipe holds 64 KB */
    wait_pipe_holds_bytes(reader);
    assert_int_equal(kb_sink_stop(sink, 300), KB_ERR_TIMEDOUT);
    kb_sink_destroy(sink);
    assert_int_equal(atomic_load(&a.ok) + atomic_load(&a.failed), LINES);
    char *data;
    size_t n = read_all(reader, &data);
    assert_true(n > 0);
    assert_int_equal(whole_lines(data, n, 0), atomic_load(&a.ok));
    free(data);
    close(reader);
    kb_config_free(cfg);
    remove_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regular_file_torn_tail_is_cut),
        cmocka_unit_test(test_fifo_without_reader_acknowledges_nothing),
        cmocka_unit_test(test_fifo_stop_while_stalled_leaves_whole_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
