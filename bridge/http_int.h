/* bridge/http_int.h — private to bridge/ (http.c, metrics.c, kapi.c). */
#ifndef KB_BRIDGE_HTTP_INT_H
#define KB_BRIDGE_HTTP_INT_H

#include "bridge/bridge.h"
#include "common/buf.h"

#include <microhttpd.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_http kb_http_t;

/* Append the Prometheus text exposition (format 0.0.4) of everything the
 * bridge counts to out. since_real_ns is when serving started (the origin of
 * the checkpoint lag before the first acknowledgement). Thread: any. */
void kb_http__metrics(kb_bridge_t *b, int64_t since_real_ns, kb_buf_t *out);

/* ---- parking: a connection that waits holds no thread -------------------
 *
 * The server's few threads serve every connection (bridge/http.c, DESIGN);
 * a stream with nothing to write, or a request waiting for a
 * resourceVersion, parks its connection (libmicrohttpd suspends it: no
 * thread, no polling) until kb_http_unpark — something to write — or until
 * its due time, whichever comes first. Parking refuses (false) when an
 * unpark came since the last park (look again) or the server stops (end
 * now): the caller then goes on, so it never returns "nothing" without a
 * park behind it (libmicrohttpd would call it again at once: a busy loop). */
typedef struct kb_http_park {
    kb_http_t *h;
    struct MHD_Connection *c;
    bool suspended;   /* under h's park mutex */
    bool kicked;      /* unparked while not suspended: the next park refuses once */
    int64_t due_ms;   /* monotonic ms: resumed then at the latest */
    size_t heap_i;    /* 1 + index in h's timer heap; 0: not in it */
} kb_http_park_t;

void kb_http_park_init(kb_http_park_t *p, kb_http_t *h, struct MHD_Connection *c);
/* Suspend p's connection until kb_http_unpark or due_ms (monotonic ms).
 * Only from c's libmicrohttpd callbacks (its access handler or content
 * reader), which must then return without writing anything (a content
 * reader returns 0; an access handler MHD_YES without a response). False,
 * and nothing suspended, when kicked since the last park or stopping. */
bool kb_http_park(kb_http_park_t *p, int64_t due_ms);
/* Resume p's connection now if parked, else make its next park refuse.
 * Thread: any; takes the park mutex (a leaf but for libmicrohttpd's own). */
void kb_http_unpark(kb_http_park_t *p);
/* Before p's memory goes (its connection is not suspended then). */
void kb_http_park_fini(kb_http_park_t *p);

/* One request's state across the calls of its access handler: a request
 * waiting for a resourceVersion is parked and handled again from the start
 * when resumed (bridge/kapi.c). */
typedef struct kb_http_req {
    kb_http_park_t park;
    int64_t wait_until_ms; /* the wait's deadline, set by its first call; 0: not waiting */
    bool parked;           /* this call parked the request: return MHD_YES, no answer yet */
} kb_http_req_t;

#endif
