/* bridge/http_int.h — private to bridge/http.c and bridge/metrics.c. */
#ifndef KB_BRIDGE_HTTP_INT_H
#define KB_BRIDGE_HTTP_INT_H

#include "bridge/bridge.h"
#include "common/buf.h"

#include <stdint.h>

/* Append the Prometheus text exposition (format 0.0.4) of everything the
 * bridge counts to out. since_real_ns is when serving started (the origin of
 * the checkpoint lag before the first acknowledgement). Thread: any. */
void kb_http__metrics(kb_bridge_t *b, int64_t since_real_ns, kb_buf_t *out);

#endif
