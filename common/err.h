/* common/err.h — one error type for the whole project.
 *
 * kb_err_t is 0 for success and a negative code otherwise. The codes come
 * from one X-macro table so the name, the message and the retriable flag
 * of each code sit on one row. Foreign codes (CURLcode, librdkafka, paho,
 * libconfig, LMDB) are mapped to these once, at the module edge.
 */
#ifndef KB_COMMON_ERR_H
#define KB_COMMON_ERR_H

#include <stdbool.h>

/*       name            code  retriable  message */
#define KB_ERRORS(X)                                                              \
    X(OK,                  0,  false, "success")                                 \
    X(INVAL,              -1,  false, "invalid argument")                        \
    X(NOMEM,              -2,  false, "out of memory")                           \
    X(IO,                 -3,  true,  "input/output error")                      \
    X(PARSE,              -4,  false, "malformed input")                         \
    X(TIMEDOUT,           -5,  true,  "timed out")                               \
    X(CLOSED,             -6,  false, "closed")                                  \
    X(FULL,               -7,  true,  "queue full")                              \
    X(NOTFOUND,           -8,  false, "not found")                               \
    X(EXISTS,             -9,  false, "already exists")                          \
    X(TOOBIG,            -10,  false, "too large")                               \
    X(CONNECT,           -11,  true,  "cannot connect")                          \
    X(HTTP,              -12,  false, "unexpected HTTP status")                  \
    X(GONE,              -13,  false, "resource version expired (410 Gone)")     \
    X(THROTTLED,         -14,  true,  "throttled (429)")                         \
    X(UNAVAILABLE,       -15,  true,  "server error (5xx)")                      \
    X(UNAUTHORIZED,      -16,  false, "unauthorized (401)")                      \
    X(FORBIDDEN,         -17,  false, "forbidden (403)")                         \
    X(STOPPED,           -18,  false, "stopped")                                 \
    X(CONFIG,            -19,  false, "configuration error")                     \
    X(TOO_LARGE_RV,      -20,  true,  "resource version too large")             \
    X(INTERNAL,          -21,  false, "internal error")                          \
    X(DELIVERY,          -22,  true,  "delivery failed")                         \
    X(UNSUPPORTED,       -23,  false, "not supported")

typedef enum {
#define KB__ERR_ENUM(name, code, retr, msg) KB_ERR_##name = (code),
    KB_ERRORS(KB__ERR_ENUM)
#undef KB__ERR_ENUM
} kb_err_t;

#define KB_OK KB_ERR_OK

/* A static, human-readable message; never NULL, also for unknown codes. */
const char *kb_err_str(kb_err_t err);
/* The symbolic name without prefix ("GONE"); never NULL. */
const char *kb_err_name(kb_err_t err);
/* True when trying the same thing again later may succeed. */
bool kb_err_is_retriable(kb_err_t err);

#endif
