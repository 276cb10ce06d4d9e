/* sinks/envelope.c — serialising events for the wire (see envelope.h).
 *
 * Design: the envelope is built by appending literal pieces and JSON-escaped
 * strings around the object bytes, which were made compact and shaped at
 * decode time; so a message costs one pass over ~100 bytes of header plus a
 * memcpy of the object. Nothing here allocates beyond the output buffer.
 */
#include "sinks/envelope.h"

#include "common/time.h"

#include <string.h>

static void kb_env_field(kb_buf_t *out, const char *name, const char *s, size_t n) {
    kb_buf_append_char(out, '"');
    kb_buf_append_str(out, name);
    kb_buf_append(out, "\":", 2);
    kb_buf_append_json_str(out, s, n);
    kb_buf_append_char(out, ',');
}

static void kb_env_cstr(kb_buf_t *out, const char *name, const char *s) {
    kb_env_field(out, name, s, strlen(s));
}

void kb_envelope_json(const kb_event_t *ev, kb_buf_t *out) {
    const kb_resource_t *res = ev->res;
    char ts[40];
    kb_format_rfc3339_us(ev->observed_ns, ts, sizeof(ts));
    kb_buf_reserve(out, ev->obj_len + 256 + ev->key_len + ev->uid_len + ev->rv_len);
    kb_buf_append_char(out, '{');
    kb_env_cstr(out, "type", kb_event_type_name(ev->type));
    kb_env_cstr(out, "cluster", res->cluster);
    kb_env_cstr(out, "group", res->group);
    kb_env_cstr(out, "version", res->version);
    kb_env_cstr(out, "resource", res->resource);
    kb_env_cstr(out, "kind", kb_resource_kind(res));
    kb_env_field(out, "namespace", ev->ns, ev->ns_len);
    kb_env_field(out, "name", ev->name, ev->name_len);
    kb_env_field(out, "uid", ev->uid, ev->uid_len);
    kb_env_field(out, "resourceVersion", ev->rv, ev->rv_len);
    kb_env_cstr(out, "observedAt", ts);
    if (ev->final_state_unknown)
        kb_buf_append_str(out, "\"finalStateUnknown\":true,");
    kb_buf_append_str(out, "\"object\":");
    kb_buf_append(out, ev->obj, ev->obj_len);
    kb_buf_append_char(out, '}');
}

/* CloudEvents attribute values, shared by both modes. */
static void kb_ce_source(const kb_event_t *ev, kb_buf_t *out) {
    const kb_resource_t *res = ev->res;
    kb_buf_appendf(out, "/clusters/%s/%s%s%s/%s", res->cluster, res->group, res->group[0] ? "/" : "",
                   res->version, res->resource);
}

/* The CloudEvents id: "{uid}/{resourceVersion}", and "{uid}/{resourceVersion}/deleted"
 * for a DELETED. A delete inferred by a relist (finalStateUnknown) carries the
 * last known object, so its RV is that of the ADDED/MODIFIED the consumer
 * already has: without the suffix a consumer that drops repeated ids would
 * drop the delete. An exact repeat after a crash keeps its id. */
static void kb_ce_id(const kb_event_t *ev, kb_buf_t *out) {
    kb_buf_append(out, ev->uid, ev->uid_len);
    kb_buf_append_char(out, '/');
    kb_buf_append(out, ev->rv, ev->rv_len);
    if (ev->type == KB_EV_DELETED)
        kb_buf_append_str(out, "/deleted");
}

static void kb_ce_type(const kb_event_t *ev, kb_buf_t *out) {
    kb_buf_appendf(out, "io.k8s.%s.%s", ev->res->resource, kb_event_type_lower(ev->type));
}

void kb_envelope_ce_structured(const kb_event_t *ev, const char *partition_key, size_t pk_len, kb_buf_t *out) {
    kb_buf_t tmp = KB_BUF_INIT;
    char ts[40];
    kb_format_rfc3339_us(ev->observed_ns, ts, sizeof(ts));
    kb_buf_reserve(out, ev->obj_len + 384);
    kb_buf_append_str(out, "{\"specversion\":\"1.0\",");
    kb_ce_id(ev, &tmp);
    kb_env_field(out, "id", tmp.data, tmp.len);
    kb_buf_reset(&tmp);
    kb_ce_source(ev, &tmp);
    kb_env_field(out, "source", tmp.data, tmp.len);
    kb_buf_reset(&tmp);
    kb_ce_type(ev, &tmp);
    kb_env_field(out, "type", tmp.data, tmp.len);
    kb_env_field(out, "subject", ev->key, ev->key_len);
    kb_env_cstr(out, "time", ts);
    kb_env_cstr(out, "datacontenttype", "application/json");
    kb_env_field(out, "resourceversion", ev->rv, ev->rv_len);
    kb_env_field(out, "partitionkey", partition_key, pk_len);
    if (ev->final_state_unknown)
        kb_buf_append_str(out, "\"finalstateunknown\":true,");
    kb_buf_append_str(out, "\"data\":");
    kb_buf_append(out, ev->obj, ev->obj_len);
    kb_buf_append_char(out, '}');
    kb_buf_fini(&tmp);
}

void kb_envelope_ce_attrs(const kb_event_t *ev, const char *partition_key, size_t pk_len,
                          kb_ce_attr_t attrs[KB_CE_ATTR_COUNT], kb_buf_t *storage) {
    /* Values are appended NUL-separated; offsets are turned into pointers at
     * the end because the buffer may move while it grows. */
    size_t off[KB_CE_ATTR_COUNT];
    static const char *const names[KB_CE_ATTR_COUNT] = {"specversion", "id", "source", "type", "subject",
                                                        "time", "datacontenttype", "resourceversion",
                                                        "partitionkey"};
    char ts[40];
    kb_format_rfc3339_us(ev->observed_ns, ts, sizeof(ts));
    kb_buf_reset(storage);
    int i = 0;
    off[i++] = storage->len;
    kb_buf_append(storage, "1.0", 4);
    off[i++] = storage->len;
    kb_ce_id(ev, storage);
    kb_buf_append_char(storage, '\0');
    off[i++] = storage->len;
    kb_ce_source(ev, storage);
    kb_buf_append_char(storage, '\0');
    off[i++] = storage->len;
    kb_ce_type(ev, storage);
    kb_buf_append_char(storage, '\0');
    off[i++] = storage->len;
    kb_buf_append(storage, ev->key, ev->key_len + 1);
    off[i++] = storage->len;
    kb_buf_append(storage, ts, strlen(ts) + 1);
    off[i++] = storage->len;
    kb_buf_append_str(storage, "application/json");
    kb_buf_append_char(storage, '\0');
    off[i++] = storage->len;
    kb_buf_append(storage, ev->rv, ev->rv_len + 1);
    off[i++] = storage->len;
    kb_buf_append(storage, partition_key, pk_len);
    kb_buf_append_char(storage, '\0');
    for (int j = 0; j < KB_CE_ATTR_COUNT; j++) {
        attrs[j].name = names[j];
        attrs[j].value = storage->data + off[j];
    }
}
