/* informer/audit.h — the drift audit: now and then, compare what the server
 * has with what the informer's cache says, and repair what a watch never
 * delivered (a lost delete leaves a "zombie" object behind for ever).
 *
 * Ownership: one audit thread per informer with informers[].audit_seconds > 0,
 * started by kb_informer_start and joined by kb_informer_stop; it owns nothing
 * but its own scratch. Locks: takes ingest_mtx (briefly, to compare and to
 * repair), rv_mtx and err_mtx inside it; no lock is held during a request.
 */
#ifndef KB_INFORMER_AUDIT_H
#define KB_INFORMER_AUDIT_H

#include "informer/informer.h"

typedef enum {
    KB_AUDIT_MISSING, /* cached, but the server no longer has it: DELETED finalStateUnknown */
    KB_AUDIT_STALE,   /* cached at an older resourceVersion (or another uid): read back */
    KB_AUDIT_UNKNOWN, /* the server has it, the cache does not: read back, ADDED */
    KB_AUDIT_KINDS
} kb_audit_kind_t;

/* "missing", "stale", "unknown" (metric labels, /v1/informers). */
const char *kb_audit_kind_name(kb_audit_kind_t k);

/* Start the audit thread if the informer asks for one (audit_seconds > 0); stop
 * joins it once inf->stop is set (kb_informer_stop). Thread: the main one. */
void kb_audit_start(kb_informer_t *inf);
void kb_audit_stop(kb_informer_t *inf);

#endif
