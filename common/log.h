/* common/log.h — one line per event to stderr.
 *
 * Text:  2026-11-30T08:00:00.123456Z INFO  kb:refl/pods reflector: informer=pods watch opened rv=123
 * JSON:  {"ts":"…","level":"info","thread":"kb:refl/pods","module":"reflector","informer":"pods","rv":"123",
 *         "msg":"watch opened"}
 *
 * Messages carry key=value fields in the text. In JSON every such field —
 * a whitespace-separated token key=value with key [a-z][a-z0-9_]*, value up
 * to the next blank (or a "double-quoted" value), trailing , ; ) left in the
 * message — becomes a JSON string member and leaves msg; a key that would
 * repeat or shadow ts/level/thread/module/msg stays in msg. So call sites
 * keep writing one format string and both formats stay readable. The level check is a relaxed
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
/* The line kb_log_write writes (newline included) for an already formatted
 * message, appended to out; ts is the RFC 3339 time. Pure (tests use it). */
struct kb_buf;
void kb_log_format(struct kb_buf *out, bool json, const char *ts, kb_log_level_t level, const char *thread,
                   const char *module, const char *msg);

#define kb_log(level, module, ...)                                                        \
    do {                                                                                 \
        if ((int)(level) >= atomic_load_explicit(&kb_log_min_level, memory_order_relaxed)) \
            kb_log_write((level), (module), __VA_ARGS__);                               \
    } while (0)

#define KB_DEBUG(module, ...) kb_log(KB_LOG_DEBUG, module, __VA_ARGS__)
#define KB_INFO(module, ...) kb_log(KB_LOG_INFO, module, __VA_ARGS__)
#define KB_WARN(module, ...) kb_log(KB_LOG_WARN, module, __VA_ARGS__)
#define KB_ERROR(module, ...) kb_log(KB_LOG_ERROR, module, __VA_ARGS__)

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
