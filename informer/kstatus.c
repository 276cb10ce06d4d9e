/* informer/kstatus.c — the classification table (see kstatus.h).
 *
 * Design: one row per kind of answer, matched top to bottom; the first row
 * whose code range, reason and cause all match wins, so the specific rows
 * (a 504 whose cause is ResourceVersionTooLarge) come before the general
 * ones (any 5xx). It used to live in four places that disagreed: a 401 in a
 * watch ERROR event was a generic HTTP error while the same 401 as a status
 * was an auth error, and ResourceVersionTooLarge was taken from any code.
 *
 * Facts from the API server: an expired RV is 410 (reason Expired or Gone);
 * a watch from an RV the server has not reached yet is 504 reason Timeout
 * with cause ResourceVersionTooLarge ("Too large resource version") — a
 * restored etcd, which the relist handles; 429 TooManyRequests and 5xx carry
 * Retry-After when the server knows how long to wait.
 */
#include "informer/kstatus.h"

#include "common/alloc.h"

#include <string.h>

typedef struct kb_krow {
    long lo, hi;          /* HTTP status code range, inclusive */
    const char *reason;   /* Status reason, NULL = any */
    const char *cause;    /* details.causes[0].reason, NULL = any */
    kb_kclass_t cls;
} kb_krow_t;

static const kb_krow_t kb_krows[] = {
    {200, 299, NULL, NULL, {KB_OK, KB_WATCH_ERR_HTTP, KB_KACT_RETRY, false}},
    {410, 410, NULL, NULL, {KB_ERR_GONE, KB_WATCH_ERR_GONE, KB_KACT_RELIST, false}},
    {504, 504, NULL, "ResourceVersionTooLarge", {KB_ERR_TOO_LARGE_RV, KB_WATCH_ERR_SERVER, KB_KACT_RELIST, false}},
    {429, 429, NULL, NULL, {KB_ERR_THROTTLED, KB_WATCH_ERR_THROTTLED, KB_KACT_RETRY, true}},
    {401, 401, NULL, NULL, {KB_ERR_UNAUTHORIZED, KB_WATCH_ERR_HTTP, KB_KACT_RELIST, false}},
    {403, 403, NULL, NULL, {KB_ERR_FORBIDDEN, KB_WATCH_ERR_HTTP, KB_KACT_RELIST, false}},
    {404, 404, NULL, NULL, {KB_ERR_NOTFOUND, KB_WATCH_ERR_HTTP, KB_KACT_RELIST, false}},
    {500, 599, NULL, NULL, {KB_ERR_UNAVAILABLE, KB_WATCH_ERR_SERVER, KB_KACT_RETRY, true}},
    {0, 999, NULL, NULL, {KB_ERR_HTTP, KB_WATCH_ERR_HTTP, KB_KACT_RELIST, false}},
};

static bool kb_kmatch(const char *want, const char *have) {
    return !want || (have && !strcmp(want, have));
}

kb_kclass_t kb_kstatus_classify(long code, const char *reason, const char *cause) {
    for (size_t i = 0; i < KB_ARRAY_LEN(kb_krows); i++) {
        const kb_krow_t *row = &kb_krows[i];
        if (code >= row->lo && code <= row->hi && kb_kmatch(row->reason, reason) && kb_kmatch(row->cause, cause))
            return row->cls;
    }
    return kb_krows[KB_ARRAY_LEN(kb_krows) - 1].cls;
}

bool kb_kstatus_honour_retry_after(const kb_kclass_t *c, int retry_after_s, int honoured_in_row) {
    return c->retry_after && retry_after_s > 0 && honoured_in_row < KB_KSTATUS_RETRY_AFTER_BUDGET;
}
