/* common/log.c — the logger (see log.h).
 *
 * Each line is formatted into one buffer and written with one write(2), so
 * lines from different threads never interleave.
 *
 * JSON fields come from the call site (kb_log_writef), never from the
 * message: an earlier version lifted key=value tokens out of the prose,
 * which cut values at the first blank, kept their punctuation and left msg
 * unreadable. msg is now the message as written, the same text the text
 * format prints. Values are always JSON strings, so a field has one type
 * whatever a given line put in it.
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

static bool kb_log_key_reserved(const char *key) {
    static const char *const reserved[] = {"ts", "level", "thread", "module", "msg"};
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (!strcmp(reserved[i], key))
            return true;
    return false;
}

/* Append ,"key":"value" for each usable field (see log.h for which are left out). */
static void kb_log_fields(kb_buf_t *out, const kb_log_field_t *fields) {
    for (size_t i = 0; fields && fields[i].key; i++) {
        const kb_log_field_t *f = &fields[i];
        bool repeated = false;
        for (size_t j = 0; j < i && !repeated; j++)
            repeated = !strcmp(fields[j].key, f->key);
        if (!f->val || repeated || kb_log_key_reserved(f->key))
            continue;
        kb_buf_append_char(out, ',');
        kb_buf_append_json_str(out, f->key, strlen(f->key));
        kb_buf_append_char(out, ':');
        kb_buf_append_json_str(out, f->val, strlen(f->val));
    }
}

char *kb_log_u64(char *buf, unsigned long long n) {
    snprintf(buf, 21, "%llu", n);
    return buf;
}

void kb_log_format(kb_buf_t *out, bool json, const char *ts, kb_log_level_t level, const char *thread,
                   const char *module, const kb_log_field_t *fields, const char *msg) {
    int li = level < KB_LOG_DEBUG || level > KB_LOG_ERROR ? KB_LOG_ERROR : (int)level;
    if (!json) {
        kb_buf_appendf(out, "%s %s %s %s: %s\n", ts, kb_level_text[li], thread, module, msg);
        return;
    }
    kb_buf_appendf(out, "{\"ts\":\"%s\",\"level\":\"%s\",\"thread\":", ts, kb_level_names[li]);
    kb_buf_append_json_str(out, thread, strlen(thread));
    kb_buf_append_str(out, ",\"module\":");
    kb_buf_append_json_str(out, module, strlen(module));
    kb_log_fields(out, fields);
    kb_buf_append_str(out, ",\"msg\":");
    kb_buf_append_json_str(out, msg, strlen(msg));
    kb_buf_append_str(out, "}\n");
}

static void kb_log_vwrite(kb_log_level_t level, const char *module, const kb_log_field_t *fields, const char *fmt,
                          va_list ap) __attribute__((format(printf, 4, 0)));

static void kb_log_vwrite(kb_log_level_t level, const char *module, const kb_log_field_t *fields, const char *fmt,
                          va_list ap) {
    char msg[2048];
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (n < 0)
        return;
    char ts[40];
    kb_format_rfc3339_us(kb_now_real_ns(), ts, sizeof(ts));
    kb_buf_t b = KB_BUF_INIT;
    kb_log_format(&b, atomic_load(&kb_log_json), ts, level, kb_thread_name(), module, fields, msg);
    ssize_t w = write(STDERR_FILENO, b.data, b.len);
    (void)w;
    kb_buf_fini(&b);
}

void kb_log_write(kb_log_level_t level, const char *module, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kb_log_vwrite(level, module, NULL, fmt, ap);
    va_end(ap);
}

void kb_log_writef(kb_log_level_t level, const char *module, const kb_log_field_t *fields, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kb_log_vwrite(level, module, fields, fmt, ap);
    va_end(ap);
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
