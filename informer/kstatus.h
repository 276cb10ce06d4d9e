/* informer/kstatus.h — what a Kubernetes API answer means, in one table.
 *
 * Every failed answer the informer sees — an HTTP status with its Status
 * body on a list or watch request, or an ERROR event inside a 200 watch
 * stream — is classified here, and nowhere else: {HTTP status code, Status
 * reason, details.causes[0].reason} → {error, watch-error counter, action}.
 * The reflector acts on the action; the API client maps statuses with it.
 *
 * Retry-After: a 429 or 5xx that carries one is retried after exactly the
 * seconds given, up to KB_KSTATUS_RETRY_AFTER_BUDGET times in a row (the
 * budget client-go's REST client has); past the budget, or without the
 * header, the exponential backoff applies.
 *
 * Thread: any; the table is constant.
 */
#ifndef KB_INFORMER_KSTATUS_H
#define KB_INFORMER_KSTATUS_H

#include "common/err.h"
#include "informer/informer.h"

#include <stdbool.h>

/* What the reflector does next. */
typedef enum {
    KB_KACT_RETRY,  /* the same request again after a wait (Retry-After or backoff); a watch keeps its RV */
    KB_KACT_RELIST, /* list again (after a backoff step) and diff against the cache */
} kb_kaction_t;

typedef struct kb_kclass {
    kb_err_t err;          /* KB_ERR_GONE, KB_ERR_THROTTLED, KB_ERR_UNAUTHORIZED, … */
    kb_watch_err_t kind;   /* the kbridge_watch_errors_total{reason} it counts as */
    kb_kaction_t action;
    bool retry_after;      /* a Retry-After on this answer is honoured as given */
} kb_kclass_t;

#define KB_KSTATUS_RETRY_AFTER_BUDGET 10

/* Classify an answer: code is the HTTP status (or the Status "code" of an
 * ERROR event), reason and cause the Status's reason and first cause reason
 * ("" or NULL when absent). Never fails: an unknown answer is KB_ERR_HTTP
 * with a relist. code 2xx gives KB_OK. */
kb_kclass_t kb_kstatus_classify(long code, const char *reason, const char *cause);

/* Should the next wait be the server's Retry-After (retry_after_s > 0) as
 * given, when honoured_in_row such waits came just before? */
bool kb_kstatus_honour_retry_after(const kb_kclass_t *c, int retry_after_s, int honoured_in_row);

#endif
