/* common/log.c — the logger (see log.h).
 *
 * Each line is formatted into a stack buffer and written with one write(2),
 * so lines from different threads never interleave.
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
    int li = level < KB_LOG_DEBUG || level > KB_LOG_ERROR ? KB_LOG_ERROR : (int)level;

    char line[4096];
    kb_buf_t b = KB_BUF_INIT;
    const char *out;
    size_t out_len;
    if (atomic_load(&kb_log_json)) {
        kb_buf_appendf(&b, "{\"ts\":\"%s\",\"level\":\"%s\",\"thread\":", ts, kb_level_names[li]);
        kb_buf_append_json_str(&b, kb_thread_name(), strlen(kb_thread_name()));
        kb_buf_append_str(&b, ",\"module\":");
        kb_buf_append_json_str(&b, module, strlen(module));
        kb_buf_append_str(&b, ",\"msg\":");
        kb_buf_append_json_str(&b, msg, strlen(msg));
        kb_buf_append_str(&b, "}\n");
        out = b.data;
        out_len = b.len;
    } else {
        int m = snprintf(line, sizeof(line), "%s %s %s %s: %s\n", ts, kb_level_text[li], kb_thread_name(),
                         module, msg);
        if (m < 0)
            return;
        out = line;
        out_len = (size_t)m < sizeof(line) ? (size_t)m : sizeof(line) - 1;
        if ((size_t)m >= sizeof(line))
            line[sizeof(line) - 2] = '\n';
    }
    ssize_t w = write(STDERR_FILENO, out, out_len);
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
