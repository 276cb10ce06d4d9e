/* common/log.c — the logger (see log.h).
 *
 * Each line is formatted into one buffer and written with one write(2), so
 * lines from different threads never interleave.
 *
 * JSON fields: rather than a second, structured call form at every call site
 * (and the text and JSON views drifting apart), the formatted message is
 * scanned once for key=value tokens, which the text format already
 * requires. Each lifted token is cut out of msg together with the blank
 * before it; what remains is the prose. Values are always JSON strings, so a
 * field has one type whatever a given line put in it.
 */
#include "common/log.h"

#include "common/buf.h"
#include "common/time.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

_Atomic int kb_log_min_level = KB_LOG_INFO;
static _Atomic bool kb_log_json;
static _Thread_local char kb_thread_name_buf[32];

static const char *const kb_level_names[] = {"debug", "info", "warn", "error"};
static const char *const kb_level_text[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};

void kb_log_setup(kb_log_level_t level, bool json) {
    atomic_store(&kb_log_min_level, (int)level);
    atomic_store(&kb_log_json, json);
}

int kb_log_level_parse(const char *s) {
    if (!s)
        return -1;
    if (!strcasecmp(s, "warning"))
        return KB_LOG_WARN;
    for (int i = 0; i < 4; i++)
        if (!strcasecmp(s, kb_level_names[i]))
            return i;
    return -1;
}

void kb_thread_set_name(const char *name) {
    snprintf(kb_thread_name_buf, sizeof(kb_thread_name_buf), "%s", name);
    char short_name[16];
    snprintf(short_name, sizeof(short_name), "%s", name);
    pthread_setname_np(pthread_self(), short_name);
}

const char *kb_thread_name(void) {
    return kb_thread_name_buf[0] ? kb_thread_name_buf : "main";
}

#define KB_LOG_MAX_FIELDS 32

typedef struct kb_log_span {
    const char *p;
    size_t n;
} kb_log_span_t;

static bool kb_log_key_char(char c, bool first) {
    return (c >= 'a' && c <= 'z') || (!first && ((c >= '0' && c <= '9') || c == '_'));
}

/* A key=value token at t (the start of a blank-separated token): its key,
 * value and the length of the token (value quotes included, trailing
 * , ; ) excluded). False if t does not start one. */
static bool kb_log_token(const char *t, kb_log_span_t *key, kb_log_span_t *val, size_t *len) {
    size_t k = 0;
    while (kb_log_key_char(t[k], k == 0))
        k++;
    if (!k || t[k] != '=')
        return false;
    const char *v = t + k + 1;
    size_t n;
    if (*v == '"' && strchr(v + 1, '"')) {
        n = (size_t)(strchr(v + 1, '"') - v) + 1;
        *val = (kb_log_span_t){v + 1, n - 2};
    } else {
        n = strcspn(v, " \t\n");
        while (n && (v[n - 1] == ',' || v[n - 1] == ';' || v[n - 1] == ')'))
            n--;
        *val = (kb_log_span_t){v, n};
    }
    if (!n)
        return false;
    *key = (kb_log_span_t){t, k};
    *len = k + 1 + n;
    return true;
}

static bool kb_log_key_taken(kb_log_span_t key, const kb_log_span_t *keys, size_t n) {
    static const char *const reserved[] = {"ts", "level", "thread", "module", "msg"};
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (strlen(reserved[i]) == key.n && !memcmp(reserved[i], key.p, key.n))
            return true;
    for (size_t i = 0; i < n; i++)
        if (keys[i].n == key.n && !memcmp(keys[i].p, key.p, key.n))
            return true;
    return false;
}

/* Append ,"key":"value" for every field of msg to out and the remaining prose to rest. */
static void kb_log_lift(const char *msg, kb_buf_t *out, kb_buf_t *rest) {
    kb_log_span_t keys[KB_LOG_MAX_FIELDS];
    size_t n_keys = 0;
    const char *p = msg;
    while (*p) {
        bool at_token = p == msg || p[-1] == ' ' || p[-1] == '(';
        kb_log_span_t key, val;
        size_t len;
        if (at_token && n_keys < KB_LOG_MAX_FIELDS && kb_log_token(p, &key, &val, &len) &&
            !kb_log_key_taken(key, keys, n_keys)) {
            keys[n_keys++] = key;
            kb_buf_append_char(out, ',');
            kb_buf_append_json_str(out, key.p, key.n);
            kb_buf_append_char(out, ':');
            kb_buf_append_json_str(out, val.p, val.n);
            if (rest->len && rest->data[rest->len - 1] == ' ')
                rest->data[--rest->len] = '\0'; /* the blank before the token goes with it */
            p += len;
            if (*p == ' ' && !rest->len)
                p++;
            continue;
        }
        /* "(a=1 b=2)" lifted whole leaves "()": drop it with its blank. */
        if (*p == ')' && rest->len && rest->data[rest->len - 1] == '(') {
            rest->len--;
            if (rest->len && rest->data[rest->len - 1] == ' ')
                rest->len--;
            rest->data[rest->len] = '\0';
            p++;
            continue;
        }
        kb_buf_append_char(rest, *p++);
    }
}

void kb_log_format(kb_buf_t *out, bool json, const char *ts, kb_log_level_t level, const char *thread,
                   const char *module, const char *msg) {
    int li = level < KB_LOG_DEBUG || level > KB_LOG_ERROR ? KB_LOG_ERROR : (int)level;
    if (!json) {
        kb_buf_appendf(out, "%s %s %s %s: %s\n", ts, kb_level_text[li], thread, module, msg);
        return;
    }
    kb_buf_appendf(out, "{\"ts\":\"%s\",\"level\":\"%s\",\"thread\":", ts, kb_level_names[li]);
    kb_buf_append_json_str(out, thread, strlen(thread));
    kb_buf_append_str(out, ",\"module\":");
    kb_buf_append_json_str(out, module, strlen(module));
    kb_buf_t rest = KB_BUF_INIT;
    kb_buf_reserve(&rest, strlen(msg) + 1); /* data never NULL */
    kb_log_lift(msg, out, &rest);
    kb_buf_append_str(out, ",\"msg\":");
    kb_buf_append_json_str(out, rest.data, rest.len);
    kb_buf_append_str(out, "}\n");
    kb_buf_fini(&rest);
}

void kb_log_write(kb_log_level_t level, const char *module, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    char ts[40];
    kb_format_rfc3339_us(kb_now_real_ns(), ts, sizeof(ts));
    kb_buf_t b = KB_BUF_INIT;
    kb_log_format(&b, atomic_load(&kb_log_json), ts, level, kb_thread_name(), module, msg);
    ssize_t w = write(STDERR_FILENO, b.data, b.len);
    (void)w;
    kb_buf_fini(&b);
}

bool kb_ratelimit_allow(kb_ratelimit_t *rl, int64_t interval_ms, uint64_t *suppressed) {
    int64_t now = kb_now_mono_ns();
    int64_t next = atomic_load(&rl->next_ns);
    if (now >= next && atomic_compare_exchange_strong(&rl->next_ns, &next, now + interval_ms * KB_NS_PER_MS)) {
        uint64_t s = atomic_exchange(&rl->suppressed, 0);
        if (suppressed)
            *suppressed = s;
        return true;
    }
    atomic_fetch_add(&rl->suppressed, 1);
    return false;
}
