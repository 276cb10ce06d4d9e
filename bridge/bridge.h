/* bridge/bridge.h — the running bridge: informers, routers, sinks, workers.
 *
 * kb_bridge_new() builds everything from a loaded config without starting a
 * thread (so every error can still be a clean exit 2); kb_bridge_start()
 * starts sinks' delivery, shard workers and reflectors; kb_bridge_stop()
 * drains: reflectors stop reading, workers hand what is queued to the sinks,
 * sinks flush, all within timeout_ms; kb_bridge_destroy() frees.
 *
 * Threads: all four are called from the main thread only. The config must
 * outlive the bridge.
 */
#ifndef KB_BRIDGE_BRIDGE_H
#define KB_BRIDGE_BRIDGE_H

#include "common/err.h"
#include "config/config.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct kb_bridge kb_bridge_t;

/* Check what the loader cannot: sink settings and route/sink compatibility. */
kb_err_t kb_bridge_validate(const kb_config_t *cfg, char *errstr, size_t errstr_size);

kb_bridge_t *kb_bridge_new(const kb_config_t *cfg, char *errstr, size_t errstr_size);
kb_err_t kb_bridge_start(kb_bridge_t *b);
/* Drain and stop within timeout_ms. KB_ERR_TIMEDOUT if something was left
 * undelivered (it is logged). */
kb_err_t kb_bridge_stop(kb_bridge_t *b, int timeout_ms);
void kb_bridge_destroy(kb_bridge_t *b);
/* One log line per informer and sink with the counters. */
void kb_bridge_log_stats(kb_bridge_t *b);

/* The embedded default configuration of `kbridge --demo`, for a simulator on port. */
char *kb_demo_config_text(int port);

#endif
