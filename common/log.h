/* common/log.h — one line per event to stderr.
 *
 * Text:  2026-11-30T08:00:00.123456Z INFO  kb:refl/pods reflector: informer=pods watch opened rv=123
 * JSON:  {"ts":"…","level":"info","thread":"kb:refl/pods","module":"reflector","informer":"pods","rv":"123",
 *         "msg":"informer=pods watch opened rv=123"}
 *
 * Messages are written once, as prose with key=value fields, and both
 * formats print them as written: in JSON the whole message is msg. The
 * logger never parses a message for fields — values keep whatever
 * punctuation the prose gives them. Fields a log pipeline filters on come
 * from the call site instead, through the KB_*F macros:
 *
 *     KB_INFOF("reflector", KB_FIELDS(KB_F("informer", name), KB_FU("seq", seq)),
 *              "informer=%s listed seq=%llu", name, seq);
 *
 * Each field becomes a JSON string member (one type whatever the line); the
 * text format prints only the message, so call sites keep key=value in the
 * prose for it. A field with a NULL value, a repeated key or one of
 * ts/level/thread/module/msg is left out. The level check is a relaxed
 * atomic load, so a disabled level costs one compare. Secrets are never
 * passed to the logger (callers' duty). kb_log_setup() may be called at any
 * time (a reload changes the level); every other function is thread-safe.
 */
#ifndef KB_COMMON_LOG_H
#define KB_COMMON_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum { KB_LOG_DEBUG = 0, KB_LOG_INFO = 1, KB_LOG_WARN = 2, KB_LOG_ERROR = 3 } kb_log_level_t;

extern _Atomic int kb_log_min_level;

void kb_log_setup(kb_log_level_t level, bool json);
/* "debug"/"info"/"warn"/"warning"/"error" → level; -1 if unknown. */
int kb_log_level_parse(const char *s);
void kb_log_write(kb_log_level_t level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One explicit field: key and value are borrowed for the call. */
typedef struct kb_log_field {
    const char *key;
    const char *val; /* NULL: the field is left out */
} kb_log_field_t;

/* fields: an array ended by {NULL, NULL} (KB_FIELDS builds one), or NULL. */
void kb_log_writef(kb_log_level_t level, const char *module, const kb_log_field_t *fields, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Writes n in decimal into buf (at least 21 bytes) and returns buf. */
char *kb_log_u64(char *buf, unsigned long long n);

#define KB_F(key, val) ((kb_log_field_t){(key), (val)})
/* An unsigned integer field; its digits live in a compound literal of the enclosing block. */
#define KB_FU(key, n) ((kb_log_field_t){(key), kb_log_u64((char[24]){0}, (unsigned long long)(n))})
#define KB_FIELDS(...) ((const kb_log_field_t[]){__VA_ARGS__, {NULL, NULL}})
/* The line kb_log_write writes (newline included) for an already formatted
 * message, appended to out; ts is the RFC 3339 time. Pure (tests use it). */
struct kb_buf;
void kb_log_format(struct kb_buf *out, bool json, const char *ts, kb_log_level_t level, const char *thread,
                   const char *module, const kb_log_field_t *fields, const char *msg);

#define kb_log(level, module, ...)                                                        \
    do {                                                                                 \
        if ((int)(level) >= atomic_load_explicit(&kb_log_min_level, memory_order_relaxed)) \
            kb_log_write((level), (module), __VA_ARGS__);                               \
    } while (0)

#define kb_logf(level, module, fields, ...)                                               \
    do {                                                                                 \
        if ((int)(level) >= atomic_load_explicit(&kb_log_min_level, memory_order_relaxed)) \
            kb_log_writef((level), (module), (fields), __VA_ARGS__);                    \
    } while (0)

#define KB_DEBUG(module, ...) kb_log(KB_LOG_DEBUG, module, __VA_ARGS__)
#define KB_INFO(module, ...) kb_log(KB_LOG_INFO, module, __VA_ARGS__)
#define KB_WARN(module, ...) kb_log(KB_LOG_WARN, module, __VA_ARGS__)
#define KB_ERROR(module, ...) kb_log(KB_LOG_ERROR, module, __VA_ARGS__)
#define KB_DEBUGF(module, fields, ...) kb_logf(KB_LOG_DEBUG, module, fields, __VA_ARGS__)
#define KB_INFOF(module, fields, ...) kb_logf(KB_LOG_INFO, module, fields, __VA_ARGS__)
#define KB_WARNF(module, fields, ...) kb_logf(KB_LOG_WARN, module, fields, __VA_ARGS__)
#define KB_ERRORF(module, fields, ...) kb_logf(KB_LOG_ERROR, module, fields, __VA_ARGS__)

/* Rate limiting for repeating warnings: at most one line per interval.
 * Zero-initialise; one limiter per call site. Thread-safe. */
typedef struct kb_ratelimit {
    _Atomic int64_t next_ns;      /* monotonic time of the next allowed line */
    _Atomic uint64_t suppressed;  /* lines swallowed since the last one */
} kb_ratelimit_t;

/* True if a line may be logged now; *suppressed gets how many were swallowed before it. */
bool kb_ratelimit_allow(kb_ratelimit_t *rl, int64_t interval_ms, uint64_t *suppressed);

/* Name the calling thread (shown in logs and in top -H; at most 15 bytes kept by the kernel). */
void kb_thread_set_name(const char *name);
const char *kb_thread_name(void);

#endif
