/* config/config.c — freeing, lookups and the --check summary.
 *
 * kb_config_free() walks the same key table as the loader, so a key added
 * to the table is freed without touching this file; it copes with a struct
 * the loader left half-filled after an error.
 */
#include "config/config_int.h"

#include "common/event.h"
#include "common/secret.h"

#include <stdlib.h>
#include <string.h>

static void kb_strlist_fini(kb_strlist_t *l) {
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

static void kb_section_fini(const kb_csection_t *sec, char *base) {
    for (size_t i = 0; i < sec->n_keys; i++) {
        const kb_ckey_t *k = &sec->keys[i];
        void *p = base + k->off;
        switch (k->type) {
        case KB_CT_STRING:
        case KB_CT_CHOICE:
            free(*(char **)p);
            break;
        case KB_CT_STRLIST:
            kb_strlist_fini(p);
            break;
        case KB_CT_PROPS: {
            kb_kv_t *kv = *(kb_kv_t **)p;
            size_t n = *(size_t *)(base + k->off2);
            for (size_t j = 0; j < n; j++) {
                free(kv[j].key);
                free(kv[j].value);
            }
            free(kv);
            break;
        }
        case KB_CT_GROUP:
            kb_section_fini(k->sub, p);
            break;
        case KB_CT_LIST: {
            char *elems = *(char **)p;
            size_t n = *(size_t *)(base + k->off2);
            for (size_t j = 0; j < n; j++)
                kb_section_fini(k->sub, elems + j * k->sub->size);
            free(elems);
            break;
        }
        default:
            break;
        }
    }
}

void kb_config_free(kb_config_t *cfg) {
    if (!cfg)
        return;
    kb_section_fini(&kb_config__root, (char *)cfg);
    free(cfg->path);
    free(cfg);
}

const kb_config_informer_t *kb_config_find_informer(const kb_config_t *cfg, const char *name) {
    for (size_t i = 0; i < cfg->n_informers; i++)
        if (cfg->informers[i].name && strcmp(cfg->informers[i].name, name) == 0)
            return &cfg->informers[i];
    return NULL;
}

bool kb_config_kapi_served(const kb_config_t *cfg) {
    return cfg->kapi_enabled && cfg->http_listen && cfg->http_listen[0];
}

size_t kb_config_routes_of(const kb_config_t *cfg, const char *informer) {
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_routes; i++)
        n += cfg->routes[i].informer && strcmp(cfg->routes[i].informer, informer) == 0;
    return n;
}

const kb_config_sink_t *kb_config_find_sink(const kb_config_t *cfg, const char *name) {
    for (size_t i = 0; i < cfg->n_sinks; i++)
        if (cfg->sinks[i].name && strcmp(cfg->sinks[i].name, name) == 0)
            return &cfg->sinks[i];
    return NULL;
}

/* ---- summary -------------------------------------------------------------- */

static void kb_print_list(FILE *out, const kb_strlist_t *l, const char *empty) {
    if (l->n == 0) {
        fputs(empty, out);
        return;
    }
    for (size_t i = 0; i < l->n; i++)
        fprintf(out, "%s%s", i ? "," : "", l->v[i]);
}

static void kb_print_opt(FILE *out, const char *label, const char *v) {
    if (v && *v)
        fprintf(out, " %s=%s", label, v);
}

static void kb_summary_cluster(const kb_config_t *cfg, FILE *out) {
    const kb_config_cluster_t *c = &cfg->cluster;
    fprintf(out, "cluster %s:", c->name);
    if (*c->server)
        fprintf(out, " server %s", c->server);
    else if (c->in_cluster)
        fputs(" in-cluster service account", out);
    else if (*c->kubeconfig)
        fprintf(out, " kubeconfig %s context %s", c->kubeconfig, *c->context ? c->context : "(current)");
    else
        fputs(" no server (set server, kubeconfig or in_cluster)", out);
    fprintf(out, ", qps %g burst %d%s\n", c->qps, c->burst,
            c->insecure_skip_tls_verify ? ", TLS verification OFF" : "");
    static const char *const server_side[] = {"off", "auto", "on"}, *const field[] = {"uid", "namespace"};
    fprintf(out, "state_dir %s; shutdown_timeout %ds; log %s/%s; http %s; sharding: replica %d of %d",
            *cfg->state_dir ? cfg->state_dir : "(memory only)", cfg->shutdown_timeout, cfg->log_level,
            cfg->log_format, *cfg->http_listen ? cfg->http_listen : "(off)", cfg->sharding_index,
            cfg->sharding_replicas);
    if (cfg->sharding_replicas > 1 && cfg->sharding_server_side != KB_SHARD_SERVER_OFF)
        fprintf(out, ", server-side %s by %s", server_side[cfg->sharding_server_side],
                field[cfg->sharding_server_field]);
    fputc('\n', out);
    if (*cfg->http_listen)
        fprintf(out, "http: %s, %s%s, max_streams %d, max_per_address %d\n",
                *cfg->http_tls_cert_file ? "HTTPS" : "plain HTTP",
                *cfg->http_token_file ? "bearer token required" : "unauthenticated (no token_file)",
                *cfg->http_metrics_token_file ? " (a metrics-only token too)" : "",
                cfg->http_max_streams, cfg->http_max_per_address);
}

/* What a Secrets informer lets out, said plainly: --check is where a
 * reviewer looks before Secret values reach a topic. */
static void kb_summary_secrets(const kb_config_informer_t *inf, FILE *out) {
    if (!kb_config_informer_is_secrets(inf))
        return;
    if (inf->emit_secret_values)
        fprintf(out, "  WARNING informers.%s: emit_secret_values = true: Secret values (data, stringData, "
                     "the last-applied-configuration annotation) go out in clear unless drop_fields or "
                     "redact_fields remove them\n", inf->name);
    else
        fprintf(out, "  informers.%s: data and stringData redacted, last-applied-configuration removed\n", inf->name);
}

/* One line each for ha and kube_api: a reader of --check sees both turned on or off. */
static void kb_summary_ha_kapi(const kb_config_t *cfg, FILE *out) {
    if (cfg->ha_enabled)
        fprintf(out, "ha: lease %s namespace %s identity %s, lease %ds renew %ds\n", cfg->ha_lease_name,
                *cfg->ha_lease_namespace ? cfg->ha_lease_namespace : "(the pod's)", cfg->ha_identity,
                cfg->ha_lease_seconds, cfg->ha_renew_seconds);
    else
        fputs("ha: off (one replica per shard, no Lease)\n", out);
    if (!cfg->kapi_enabled)
        fputs("kube_api: off\n", out);
    else if (!*cfg->http_listen)
        fputs("kube_api: on, but not served (http is off)\n", out);
    else
        fprintf(out, "kube_api: on %s, watch_history %d, bookmarks every %ds, max_watches %d\n", cfg->http_listen,
                cfg->kapi_history, cfg->kapi_bookmark_seconds, cfg->kapi_max_watches);
}

static void kb_summary_informer(const kb_config_informer_t *inf, FILE *out) {
    fprintf(out, "  %s: %s/%s/%s namespaces=", inf->name, *inf->group ? inf->group : "core", inf->version,
            inf->resource);
    kb_print_list(out, &inf->namespaces, "(all)");
    kb_print_opt(out, "labels", inf->label_selector);
    kb_print_opt(out, "fields", inf->field_selector);
    fprintf(out, " shards=%d compaction=%s page_size=%d", inf->shards, kb_config__compaction_name(inf->compaction),
            inf->page_size);
    if (inf->resync_seconds)
        fprintf(out, " resync=%ds", inf->resync_seconds);
    fputs(" drop=", out);
    kb_print_list(out, &inf->drop_fields, "(none)");
    if (inf->redact_fields.n) {
        fputs(" redact=", out);
        kb_print_list(out, &inf->redact_fields, "");
    }
    fputc('\n', out);
    kb_summary_secrets(inf, out);
}

static void kb_summary_sink(const kb_config_sink_t *s, FILE *out) {
    fprintf(out, "  %s: %s", s->name, kb_sink_type_name(s->type));
    switch (s->type) {
    case KB_SINK_FILE:
        fprintf(out, " %s", strcmp(s->path, "-") == 0 ? "(stdout)" : s->path);
        break;
    case KB_SINK_KAFKA:
        fprintf(out, " brokers=%s%s", s->brokers, s->transactional ? " transactional" : "");
        for (size_t i = 0; i < s->n_properties; i++)
            fprintf(out, " %s=%s", s->properties[i].key,
                    kb_secret_key_like(s->properties[i].key) ? "***" : s->properties[i].value);
        break;
    case KB_SINK_MQTT:
        fprintf(out, " %s client_id=%s qos=%d v%d", s->uri, s->client_id, s->qos, s->version == 3 ? 3 : 5);
        kb_print_opt(out, "username", s->username);
        if (*s->username) /* MQTT's username-only login, or a password_file forgotten: say which */
            fprintf(out, *s->password_file ? " password_file=%s" : " (no password)", s->password_file);
        break;
    }
    fputc('\n', out);
}

static void kb_summary_route(const kb_config_route_t *r, FILE *out) {
    fprintf(out, "  %s: %s -> %s topic=%s key=%s types=", r->name, r->informer, r->sink,
            *r->topic ? r->topic : "(sink default)", r->key);
    if (r->types == KB_ROUTE_TYPES_ALL)
        fputs("all", out);
    for (int t = 0; t < KB_EV_TYPE_COUNT && r->types != KB_ROUTE_TYPES_ALL; t++)
        if (r->types & (1u << t))
            fprintf(out, "%s%s", (r->types & ((1u << t) - 1)) ? "," : "", kb_event_type_name((kb_event_type_t)t));
    fprintf(out, " format=%s mode=%s", kb_format_name(r->format), kb_mode_name(r->mode));
    if (r->namespaces.n) {
        fputs(" namespaces=", out);
        kb_print_list(out, &r->namespaces, "");
    }
    kb_print_opt(out, "labels", r->label_selector);
    kb_print_opt(out, "fields", r->field_selector);
    fputc('\n', out);
}

void kb_config_summary(const kb_config_t *cfg, FILE *out) {
    kb_summary_cluster(cfg, out);
    kb_summary_ha_kapi(cfg, out);
    fprintf(out, "informers (%zu):\n", cfg->n_informers);
    for (size_t i = 0; i < cfg->n_informers; i++)
        kb_summary_informer(&cfg->informers[i], out);
    fprintf(out, "sinks (%zu):\n", cfg->n_sinks);
    for (size_t i = 0; i < cfg->n_sinks; i++)
        kb_summary_sink(&cfg->sinks[i], out);
    fprintf(out, "routes (%zu):\n", cfg->n_routes);
    for (size_t i = 0; i < cfg->n_routes; i++)
        kb_summary_route(&cfg->routes[i], out);
    for (size_t i = 0; i < cfg->n_informers; i++)
        if (!kb_config_routes_of(cfg, cfg->informers[i].name))
            fprintf(out, "informers.%s: %s\n", cfg->informers[i].name,
                    kb_config_kapi_served(cfg) ? "served by the kube API only"
                                               : "no route and no kube API: its changes go nowhere");
}
