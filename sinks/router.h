/* sinks/router.h — which sinks, topics and keys a change goes to.
 *
 * A router is built once per informer from the config's routes; it is
 * immutable afterwards and pure (no I/O): given an event it yields the
 * matching routes, and a route renders the event's topic and key. Shard
 * workers call it concurrently without locks.
 *
 * Filters per route: types (bit mask), namespaces (exact names or fnmatch
 * globs such as "team-*"), label_selector (the Kubernetes selector grammar,
 * evaluated on the event's metadata.labels), field_selector (the kube API's
 * field selectors, read from the object's bytes).
 */
#ifndef KB_SINKS_ROUTER_H
#define KB_SINKS_ROUTER_H

#include "common/buf.h"
#include "common/event.h"
#include "common/fieldsel.h"
#include "common/template.h"
#include "config/config.h"
#include "common/selector.h"
#include "sinks/sink.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct kb_route {
    const kb_config_route_t *conf; /* borrowed from the config */
    kb_sink_t *sink;               /* borrowed; outlives the router */
    size_t sink_index;             /* index of the sink in cfg->sinks */
    kb_template_t *topic;          /* the route's topic or the sink type's default */
    kb_template_t *key;
    unsigned render_flags;         /* KB_TEMPLATE_ESCAPE_MQTT for MQTT topics */
    kb_selector_t *selector;       /* NULL = every object */
    kb_fieldsel_t *fields;         /* field_selector; NULL = every object */
    const kb_fields_kind_t *kind;  /* the informer's resource: how its field record is read */
} kb_route_t;

typedef struct kb_router {
    kb_route_t *routes;
    size_t n;
} kb_router_t;

/* Routes of informer `informer` in cfg; sinks[i] is the sink of cfg->sinks[i].
 * NULL with "FILE:LINE: …" in errstr on a bad template or selector. */
kb_router_t *kb_router_new(const kb_config_t *cfg, const char *informer, kb_sink_t *const *sinks, char *errstr,
                           size_t errstr_size);
void kb_router_destroy(kb_router_t *router);

/* Does the route take this event? */
bool kb_route_match(const kb_route_t *route, const kb_event_t *ev);

/* One event's field record, shared by the routes it is matched against: read
 * from the object (which costs a pass over its bytes) at the first route
 * whose field selector needs it, not once per route. Start each event with
 * KB_ROUTE_REC_INIT and end it with kb_route_rec_fini. */
typedef struct kb_route_rec {
    const kb_event_t *ev;         /* the event rec holds the record of (NULL: none yet) */
    const kb_fields_kind_t *kind; /* how it was read */
    kb_buf_t buf;
} kb_route_rec_t;
#define KB_ROUTE_REC_INIT {NULL, NULL, KB_BUF_INIT}
void kb_route_rec_fini(kb_route_rec_t *rec);

/* kb_route_match, the field record taken from (or read into) rec. */
bool kb_route_match_rec(const kb_route_t *route, const kb_event_t *ev, kb_route_rec_t *rec);
/* Append the rendered topic / key (NUL-terminated) to the buffers. */
void kb_route_render(const kb_route_t *route, const kb_event_t *ev, kb_buf_t *topic, kb_buf_t *key);

/* The default topic template of a sink type. */
const char *kb_router_default_topic(kb_sink_type_t type);

#endif
