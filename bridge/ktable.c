/* bridge/ktable.c — meta.k8s.io Table output: content negotiation, the
 * Table envelope, rows and the small field/cell helpers the printers share.
 *
 * DESIGN. Why a tree here when the rest of the API surface copies bytes:
 * a Table is for a human's `kubectl get`, one request at a time, and its
 * cells read a dozen nested fields (a pod's container states, a node's
 * conditions); jansson per row is simple and costs nothing on the watch hot
 * path, which stays byte-for-byte. The object or its metadata is written
 * back from the same tree (compact, keys in the object's order).
 *
 * The columns are the API server's: each served kind has its printer
 * (ktable_kinds.c) and any other kind the server's default table (Name,
 * Created At). The server computes every column, priority-1 ("-o wide")
 * ones included, and kubectl chooses which to print; so do we. AGE and the
 * other durations count to the wall clock when the request is answered.
 */
#include "bridge/ktable_int.h"

#include "common/alloc.h"
#include "common/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- negotiation --------------------------------------------------------------- */

/* Is one media range of an Accept header a Table of meta.k8s.io? Sets *beta for v1beta1. */
static bool kb_ktable_range(const char *r, size_t n, bool *beta) {
    bool table = false, meta = false, v1 = false, v1beta1 = false;
    const char *end = r + n;
    const char *p = memchr(r, ';', n);
    if (!p)
        return false;
    while (p && p < end) {
        p++;
        while (p < end && *p == ' ')
            p++;
        const char *semi = memchr(p, ';', (size_t)(end - p));
        size_t len = (size_t)((semi ? semi : end) - p);
        while (len && p[len - 1] == ' ')
            len--;
        table |= len == 8 && !memcmp(p, "as=Table", 8);
        meta |= len == 13 && !memcmp(p, "g=meta.k8s.io", 13);
        v1 |= len == 4 && !memcmp(p, "v=v1", 4);
        v1beta1 |= len == 9 && !memcmp(p, "v=v1beta1", 9);
        p = semi;
    }
    *beta = v1beta1 && !v1;
    return table && meta && (v1 || v1beta1) && !strncmp(r, "application/json;", 17);
}

bool kb_ktable_wanted(const char *accept, const char *include, const char *group, const char *resource,
                      kb_ktable_t *t, bool *bad) {
    *bad = false;
    if (!accept)
        return false;
    bool beta = false, found = false;
    for (const char *r = accept; *r && !found;) {
        while (*r == ' ')
            r++;
        size_t n = strcspn(r, ",");
        found = kb_ktable_range(r, n, &beta);
        bool plain = (n >= 16 && !strncmp(r, "application/json", 16)) || (n >= 3 && !strncmp(r, "*/*", 3));
        if (!found && plain)
            return false; /* plain JSON (or anything) comes first: the API server answers JSON */
        r += n + (r[n] == ',');
    }
    if (!found)
        return false;
    memset(t, 0, sizeof(*t));
    t->kind = kb_ktable__kind(group, resource);
    t->api_version = beta ? "meta.k8s.io/v1beta1" : "meta.k8s.io/v1";
    t->now_s = kb_now_real_ns() / 1000000000;
    if (!include || !*include || !strcmp(include, "Metadata"))
        t->include = KB_KTABLE_METADATA;
    else if (!strcmp(include, "None"))
        t->include = KB_KTABLE_NONE;
    else if (!strcmp(include, "Object"))
        t->include = KB_KTABLE_OBJECT;
    else
        *bad = true;
    return true;
}

/* ---- the Table ----------------------------------------------------------------- */

/* The first Table of a request has the columns; the next ones (a watch's
 * later events) have null, as the API server sends them. */
static void kb_ktable_columns(kb_ktable_t *t, kb_buf_t *o) {
    if (t->columns_sent) {
        kb_buf_append_str(o, ",\"columnDefinitions\":null");
        return;
    }
    t->columns_sent = true;
    kb_buf_append_str(o, ",\"columnDefinitions\":[");
    for (size_t i = 0; i < t->kind->n_cols; i++) {
        const kb_ktable_col_t *col = &t->kind->cols[i];
        const char *format = col->format ? col->format : ""; /* a CRD's are any text: escaped */
        kb_buf_append_str(o, i ? ",{\"name\":" : "{\"name\":");
        kb_buf_append_json_str(o, col->name, strlen(col->name));
        kb_buf_append_str(o, ",\"type\":");
        kb_buf_append_json_str(o, col->type, strlen(col->type));
        kb_buf_append_str(o, ",\"format\":");
        kb_buf_append_json_str(o, format, strlen(format));
        kb_buf_append_str(o, ",\"description\":");
        kb_buf_append_json_str(o, col->description, strlen(col->description));
        kb_buf_appendf(o, ",\"priority\":%d}", col->priority);
    }
    kb_buf_append_char(o, ']');
}

void kb_ktable_head(kb_ktable_t *t, kb_buf_t *o, const char *rv, const char *cont, long remaining) {
    kb_buf_appendf(o, "{\"kind\":\"Table\",\"apiVersion\":\"%s\",\"metadata\":{", t->api_version);
    bool comma = false;
    if (rv && *rv) {
        kb_buf_append_str(o, "\"resourceVersion\":");
        kb_buf_append_json_str(o, rv, strlen(rv));
        comma = true;
    }
    if (cont && *cont) {
        kb_buf_append_str(o, comma ? ",\"continue\":" : "\"continue\":");
        kb_buf_append_json_str(o, cont, strlen(cont));
        comma = true;
    }
    if (remaining >= 0)
        kb_buf_appendf(o, "%s\"remainingItemCount\":%ld", comma ? "," : "", remaining);
    kb_buf_append_char(o, '}');
    kb_ktable_columns(t, o);
    kb_buf_append_str(o, ",\"rows\":[");
    t->any_row = false;
}

void kb_ktable_tail(kb_buf_t *o) {
    kb_buf_append_str(o, "]}");
}

static void kb_ktable_dump(kb_buf_t *o, json_t *v) {
    char *text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    kb_buf_append_str(o, text ? text : "null");
    free(text);
}

static void kb_ktable_object(const kb_ktable_t *t, kb_buf_t *o, json_t *obj, const char *raw, size_t raw_len) {
    kb_buf_append_str(o, ",\"object\":");
    if (t->include == KB_KTABLE_NONE || !obj) {
        kb_buf_append_str(o, "null");
    } else if (t->include == KB_KTABLE_OBJECT) {
        kb_buf_append(o, raw, raw_len);
    } else {
        kb_buf_appendf(o, "{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"%s\",\"metadata\":", t->api_version);
        json_t *md = json_object_get(obj, "metadata");
        if (md)
            kb_ktable_dump(o, md);
        else
            kb_buf_append_str(o, "{}");
        kb_buf_append_char(o, '}');
    }
}

/* One row of the object obj[0..obj_len), already parsed as root (NULL when it
 * does not parse). */
static void kb_ktable_row_tree(kb_ktable_t *t, kb_buf_t *o, json_t *root, const char *obj, size_t obj_len) {
    if (t->any_row)
        kb_buf_append_char(o, ',');
    t->any_row = true;
    kb_buf_append_str(o, "{\"cells\":[");
    kb_ktable_cells_t c = {.kind = t->kind, .o = o, .now_s = t->now_s, .first = true};
    t->kind->print(&c, json_is_object(root) ? root : NULL);
    kb_buf_append_char(o, ']');
    if (c.completed) {
        kb_buf_appendf(o, ",\"conditions\":[{\"type\":\"Completed\",\"status\":\"True\",\"reason\":\"%s\","
                          "\"message\":\"%s\"}]", c.completed, c.completed_msg);
    }
    kb_ktable_object(t, o, root, obj, obj_len);
    kb_buf_append_char(o, '}');
}

void kb_ktable_row(kb_ktable_t *t, kb_buf_t *o, const char *obj, size_t obj_len) {
    json_t *root = json_loadb(obj, obj_len, 0, NULL);
    kb_ktable_row_tree(t, o, root, obj, obj_len);
    json_decref(root);
}

void kb_ktable_one(kb_ktable_t *t, kb_buf_t *o, const char *obj, size_t obj_len) {
    json_t *root = json_loadb(obj, obj_len, 0, NULL);
    kb_ktable_head(t, o, kb_ktable__s(root, "metadata.resourceVersion"), NULL, -1);
    kb_ktable_row_tree(t, o, root, obj, obj_len);
    json_decref(root);
    kb_ktable_tail(o);
}

/* ---- cells and fields ---------------------------------------------------------- */

void kb_ktable__str(kb_ktable_cells_t *c, const char *s) {
    if (!c->first)
        kb_buf_append_char(c->o, ',');
    c->first = false;
    kb_buf_append_json_str(c->o, s ? s : "", s ? strlen(s) : 0);
}

void kb_ktable__int(kb_ktable_cells_t *c, long long v) {
    if (!c->first)
        kb_buf_append_char(c->o, ',');
    c->first = false;
    kb_buf_appendf(c->o, "%lld", v);
}

void kb_ktable__raw(kb_ktable_cells_t *c, const char *json) {
    if (!c->first)
        kb_buf_append_char(c->o, ',');
    c->first = false;
    kb_buf_append_str(c->o, json);
}

static int kb_ktable_key_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char **kb_ktable__sorted_keys(json_t *obj, size_t *n) {
    size_t i = 0;
    *n = json_object_size(obj);
    const char **keys = kb_calloc(*n ? *n : 1, sizeof(*keys));
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) keys[i++] = key;
    qsort(keys, *n, sizeof(*keys), kb_ktable_key_cmp);
    return keys;
}

json_t *kb_ktable__at(json_t *o, const char *path) {
    while (o && *path) {
        size_t n = strcspn(path, ".");
        char key[64];
        if (n >= sizeof(key))
            return NULL;
        memcpy(key, path, n);
        key[n] = '\0';
        o = json_is_object(o) ? json_object_get(o, key) : NULL;
        path += n + (path[n] == '.');
    }
    return o;
}

const char *kb_ktable__s(json_t *o, const char *path) {
    const char *s = json_string_value(kb_ktable__at(o, path));
    return s ? s : "";
}

long long kb_ktable__i(json_t *o, const char *path) {
    return (long long)json_integer_value(kb_ktable__at(o, path));
}

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar. */
static int64_t kb_ktable_days(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

int64_t kb_ktable__time(const char *ts) {
    int y, mo, d, h, mi, s;
    char sep;
    if (!ts || sscanf(ts, "%4d-%2d-%2d%c%2d:%2d:%2d", &y, &mo, &d, &sep, &h, &mi, &s) != 7)
        return 0;
    int64_t t = kb_ktable_days(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
    const char *z = ts + 19;
    while (*z == '.' || (*z >= '0' && *z <= '9'))
        z++;
    if ((*z == '+' || *z == '-') && strlen(z) >= 6) {
        int64_t off = (z[1] - '0') * 36000 + (z[2] - '0') * 3600 + (z[4] - '0') * 600 + (z[5] - '0') * 60;
        t += *z == '+' ? -off : off;
    }
    return t;
}

void kb_ktable_duration(int64_t d, char *out, size_t size) {
    if (d < -1) {
        snprintf(out, size, "<invalid>");
    } else if (d < 120) {
        snprintf(out, size, "%llds", (long long)(d < 0 ? 0 : d));
    } else if (d < 600) {
        if (d % 60)
            snprintf(out, size, "%lldm%llds", (long long)(d / 60), (long long)(d % 60));
        else
            snprintf(out, size, "%lldm", (long long)(d / 60));
    } else if (d < 3 * 3600) {
        snprintf(out, size, "%lldm", (long long)(d / 60));
    } else if (d < 8 * 3600) {
        long long h = d / 3600, m = (d / 60) % 60;
        snprintf(out, size, m ? "%lldh%lldm" : "%lldh", h, m);
    } else if (d < 48 * 3600) {
        snprintf(out, size, "%lldh", (long long)(d / 3600));
    } else if (d < 8 * 86400) {
        long long days = d / 86400, h = (d / 3600) % 24;
        snprintf(out, size, h ? "%lldd%lldh" : "%lldd", days, h);
    } else if (d < 2 * 365 * 86400LL) {
        snprintf(out, size, "%lldd", (long long)(d / 86400));
    } else if (d < 8 * 365 * 86400LL) {
        long long days = d / 86400, y = days / 365, dy = days % 365;
        snprintf(out, size, dy ? "%lldy%lldd" : "%lldy", y, dy);
    } else {
        snprintf(out, size, "%lldy", (long long)(d / 86400 / 365));
    }
}

void kb_ktable__since(const kb_ktable_cells_t *c, const char *ts, char *out, size_t size) {
    if (!ts || !*ts) {
        snprintf(out, size, "<unknown>");
        return;
    }
    kb_ktable_duration(c->now_s - kb_ktable__time(ts), out, size);
}

void kb_ktable__age(kb_ktable_cells_t *c, const char *ts) {
    char age[32];
    kb_ktable__since(c, ts, age, sizeof(age));
    kb_ktable__str(c, age);
}
