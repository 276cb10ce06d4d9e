/* sinks/router.c — route matching and topic/key rendering (see router.h).
 *
 * Templates and selectors are compiled once here; per event the router only
 * tests a bit mask, a namespace list and (if set) a label selector and a
 * field selector (the kube API's, common/fieldsel.h: the object's field
 * record is read from its bytes only when a route's selector names a field
 * of the object's own, not metadata.name/namespace, and then once per event
 * for all its routes: kb_route_rec_t), and renders
 * two short strings. Routes keep config order, so fan-out is deterministic.
 */
#include "sinks/router.h"

#include "common/alloc.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kb_router_default_topic(kb_sink_type_t type) {
    switch (type) {
    case KB_SINK_KAFKA: return "k8s.{cluster}.{resource}";
    case KB_SINK_MQTT: return "k8s/{cluster}/{resource}/{namespace}/{name}";
    case KB_SINK_FILE: return "";
    }
    return "";
}

static kb_template_t *kb_router_compile(const kb_config_t *cfg, const kb_config_route_t *rc, const char *what,
                                        const char *text, char *errstr, size_t errstr_size) {
    char why[512];
    kb_template_t *t = kb_template_compile(text, why, sizeof(why));
    if (!t)
        snprintf(errstr, errstr_size, "%s:%d: routes.%s.%s: %s", cfg->path, rc->line, rc->name, what, why);
    return t;
}

kb_router_t *kb_router_new(const kb_config_t *cfg, const char *informer, kb_sink_t *const *sinks, char *errstr,
                           size_t errstr_size) {
    kb_router_t *router = kb_calloc(1, sizeof(*router));
    for (size_t i = 0; i < cfg->n_routes; i++) {
        const kb_config_route_t *rc = &cfg->routes[i];
        if (strcmp(rc->informer, informer) != 0)
            continue;
        size_t si = 0;
        while (si < cfg->n_sinks && strcmp(cfg->sinks[si].name, rc->sink) != 0)
            si++;
        KB_ASSERT(si < cfg->n_sinks); /* the config loader checked the reference */
        router->routes = kb_realloc(router->routes, (router->n + 1) * sizeof(kb_route_t));
        kb_route_t *route = &router->routes[router->n++];
        memset(route, 0, sizeof(*route));
        route->conf = rc;
        route->sink = sinks[si];
        route->sink_index = si;
        kb_sink_type_t type = cfg->sinks[si].type;
        const char *topic = rc->topic && rc->topic[0] ? rc->topic : kb_router_default_topic(type);
        route->render_flags = type == KB_SINK_MQTT ? KB_TEMPLATE_ESCAPE_MQTT : 0;
        route->topic = kb_router_compile(cfg, rc, "topic", topic, errstr, errstr_size);
        route->key = route->topic ? kb_router_compile(cfg, rc, "key", rc->key, errstr, errstr_size) : NULL;
        if (!route->key)
            goto fail;
        if (rc->label_selector && rc->label_selector[0]) {
            char why[512];
            route->selector = kb_selector_parse(rc->label_selector, why, sizeof(why));
            if (!route->selector) {
                snprintf(errstr, errstr_size, "%s:%d: routes.%s.label_selector: %s", cfg->path, rc->line, rc->name,
                         why);
                goto fail;
            }
        }
        if (rc->field_selector && rc->field_selector[0]) {
            const kb_config_informer_t *inf = kb_config_find_informer(cfg, informer);
            char why[1024];
            route->kind = kb_fields_kind(inf->group, inf->resource);
            if (!kb_fieldsel_parse(route->kind, rc->field_selector, &route->fields, why, sizeof(why))) {
                snprintf(errstr, errstr_size, "%s:%d: routes.%s.field_selector: %s", cfg->path, rc->line, rc->name,
                         why);
                goto fail;
            }
        }
    }
    return router;
fail:
    kb_router_destroy(router);
    return NULL;
}

void kb_router_destroy(kb_router_t *router) {
    if (!router)
        return;
    for (size_t i = 0; i < router->n; i++) {
        kb_template_free(router->routes[i].topic);
        kb_template_free(router->routes[i].key);
        kb_selector_free(router->routes[i].selector);
        kb_fieldsel_free(router->routes[i].fields);
    }
    free(router->routes);
    free(router);
}

void kb_route_rec_fini(kb_route_rec_t *rec) {
    kb_buf_fini(&rec->buf);
    rec->ev = NULL;
    rec->kind = NULL;
}

/* The route's field selector on ev; the record only when the selector reads one. */
static bool kb_route_fields_match(const kb_route_t *route, const kb_event_t *ev, kb_route_rec_t *rec) {
    if (!route->fields)
        return true;
    if (!kb_fieldsel_needs_record(route->fields))
        return kb_fieldsel_match(route->fields, ev->ns, ev->ns_len, ev->name, ev->name_len, NULL, 0);
    if (rec->ev != ev || rec->kind != route->kind) {
        kb_buf_reset(&rec->buf);
        kb_fields_extract(route->kind, ev->obj, ev->obj_len, &rec->buf);
        rec->ev = ev;
        rec->kind = route->kind;
    }
    return kb_fieldsel_match(route->fields, ev->ns, ev->ns_len, ev->name, ev->name_len, rec->buf.data, rec->buf.len);
}

bool kb_route_match(const kb_route_t *route, const kb_event_t *ev) {
    kb_route_rec_t rec = KB_ROUTE_REC_INIT;
    bool ok = kb_route_match_rec(route, ev, &rec);
    kb_route_rec_fini(&rec);
    return ok;
}

bool kb_route_match_rec(const kb_route_t *route, const kb_event_t *ev, kb_route_rec_t *rec) {
    const kb_config_route_t *rc = route->conf;
    if (!(rc->types & (1u << ev->type)))
        return false;
    if (rc->namespaces.n) {
        bool hit = false;
        for (size_t i = 0; i < rc->namespaces.n && !hit; i++)
            hit = fnmatch(rc->namespaces.v[i], ev->ns, 0) == 0;
        if (!hit)
            return false;
    }
    if (route->selector &&
        !kb_selector_match_json(route->selector, ev->labels_len ? ev->obj + ev->labels_off : NULL, ev->labels_len))
        return false;
    return kb_route_fields_match(route, ev, rec);
}

void kb_route_render(const kb_route_t *route, const kb_event_t *ev, kb_buf_t *topic, kb_buf_t *key) {
    kb_template_render(route->topic, ev, route->render_flags, topic);
    kb_template_render(route->key, ev, 0, key);
    /* Leave both NUL-terminated even when they rendered empty. */
    kb_buf_reserve(topic, 0);
    kb_buf_reserve(key, 0);
    topic->data[topic->len] = '\0';
    key->data[key->len] = '\0';
}
