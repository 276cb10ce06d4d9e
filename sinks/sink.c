/* sinks/sink.c — the sink registry and the thin wrappers around the ops table.
 *
 * The bridge never switches on a sink type: it asks for the ops table once
 * and calls through it. The ops tables are referenced strongly on purpose: a weak
 * one never pulls kafka.o / mqtt.o out of the static library, so those
 * sinks would silently be missing from kbridge.
 */
#include "sinks/sink.h"

#include "common/alloc.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>

const kb_sink_ops_t *kb_sink_ops_for(kb_sink_type_t type) {
    switch (type) {
    case KB_SINK_FILE: return &kb_sink_file_ops;
    case KB_SINK_KAFKA: return &kb_sink_kafka_ops;
    case KB_SINK_MQTT: return &kb_sink_mqtt_ops;
    }
    return NULL;
}

kb_err_t kb_sink_validate(const kb_config_sink_t *conf, const kb_config_t *cfg, char *errstr,
                          size_t errstr_size) {
    const kb_sink_ops_t *ops = kb_sink_ops_for(conf->type);
    if (!ops) {
        snprintf(errstr, errstr_size, "%s:%d: sinks.%s: type \"%s\" is not built into this kbridge", cfg->path,
                 conf->line, conf->name, kb_sink_type_name(conf->type));
        return KB_ERR_CONFIG;
    }
    return ops->validate ? ops->validate(conf, cfg, errstr, errstr_size) : KB_OK;
}

kb_sink_t *kb_sink_create(const kb_config_sink_t *conf, const kb_config_t *cfg, char *errstr,
                          size_t errstr_size) {
    if (kb_sink_validate(conf, cfg, errstr, errstr_size) != KB_OK)
        return NULL;
    const kb_sink_ops_t *ops = kb_sink_ops_for(conf->type);
    void *state = NULL;
    if (ops->create(conf, cfg, &state, errstr, errstr_size) != KB_OK)
        return NULL;
    kb_sink_t *sink = kb_calloc(1, sizeof(*sink));
    sink->ops = ops;
    sink->state = state;
    sink->name = kb_strdup(conf->name);
    sink->conf = conf;
    return sink;
}

kb_err_t kb_sink_stop(kb_sink_t *sink, int timeout_ms) {
    if (!sink)
        return KB_OK;
    kb_err_t err = sink->ops->flush ? sink->ops->flush(sink->state, timeout_ms) : KB_OK;
    if (err != KB_OK)
        KB_WARN("sink", "sink=%s flush incomplete at stop: %s", sink->name, kb_err_str(err));
    return err;
}

void kb_sink_destroy(kb_sink_t *sink) {
    if (!sink)
        return;
    sink->ops->destroy(sink->state);
    free(sink->name);
    free(sink);
}
