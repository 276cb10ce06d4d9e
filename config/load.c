/* config/load.c — read a libconfig file into an immutable kb_config_t.
 *
 * Design: a generic walker over the key table (table.c). For each section it
 * first refuses names the table does not know (so a typo never silently
 * falls back to a default), then visits the rows in table order: present
 * keys are converted and checked, absent ones get the row's default, so
 * every string of a loaded config is non-NULL. A discriminating row (a
 * sink's type) comes before the rows it governs; a row for another variant
 * that is present is an error. Section hooks do the few checks that span
 * keys (route references, computed defaults, the $HOSTNAME ordinal).
 *
 * String values are expanded first (kb_expand): ${NAME} and ${NAME:-default}
 * from the environment, $$ for a literal $, so credentials and names can
 * come from a pod's environment without a templating step. An unset
 * variable without a default is an error naming the key's line, because a
 * silently empty server, topic or password is worse than not starting.
 *
 * The first error stops the load: the message is one line, "FILE:LINE: …",
 * and the partial struct is freed by kb_config_free(), which copes with any
 * field still NULL. libconfig 1.5 cannot read quoted setting names and
 * truncates large integers silently, so the text goes through
 * kb_config__prepare() (prepare.c) first.
 */
#include "config/config_int.h"

#include "common/alloc.h"
#include "common/event.h"
#include "common/secret.h"
#include "common/template.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(kb_compaction_t) == sizeof(int) && sizeof(kb_sink_type_t) == sizeof(int) &&
                   sizeof(kb_format_t) == sizeof(int) && sizeof(kb_mode_t) == sizeof(int),
               "ENUM rows store an int");

#define KB_PATH_MAX 256 /* key paths in messages ("informers[3].drop_fields[1]") */

/* "FILE:LINE: " (no LINE when 0) then the message. */
static void kb_vfail_at(kb_loader_t *ld, const char *file, unsigned line, const char *fmt, va_list ap) {
    /* libconfig names an included file as the @include wrote it. */
    bool in_dir = file != ld->path && file[0] != '/' && ld->include_dir && strcmp(ld->include_dir, ".") != 0;
    int n = snprintf(ld->errstr, ld->errstr_size, "%s%s%s:", in_dir ? ld->include_dir : "", in_dir ? "/" : "", file);
    if (n >= 0 && line && (size_t)n < ld->errstr_size)
        n += snprintf(ld->errstr + n, ld->errstr_size - (size_t)n, "%u:", line);
    if (n >= 0 && (size_t)n < ld->errstr_size)
        n += snprintf(ld->errstr + n, ld->errstr_size - (size_t)n, " ");
    if (n >= 0 && (size_t)n < ld->errstr_size)
        vsnprintf(ld->errstr + n, ld->errstr_size - (size_t)n, fmt, ap);
}

static void kb_fail_at(kb_loader_t *ld, const char *file, unsigned line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kb_vfail_at(ld, file, line, fmt, ap);
    va_end(ap);
}

bool kb_config__fail(kb_loader_t *ld, const config_setting_t *s, const char *fmt, ...) {
    const char *file = (s && config_setting_source_file(s)) ? config_setting_source_file(s) : ld->path;
    va_list ap;
    va_start(ap, fmt);
    kb_vfail_at(ld, file, s ? config_setting_source_line(s) : 0, fmt, ap);
    va_end(ap);
    return false;
}

static void *kb_at(void *base, size_t off) {
    return (char *)base + off;
}

/* ---- unknown keys ----------------------------------------------------- */

/* Edit distance, for "did you mean"; names are short, longer ones are not compared. */
static size_t kb_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 40 || lb > 40)
        return SIZE_MAX;
    size_t row[41];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const kb_ckey_t *kb_find_key(const kb_csection_t *sec, const char *name) {
    for (size_t i = 0; i < sec->n_keys; i++)
        if (strcmp(sec->keys[i].name, name) == 0)
            return &sec->keys[i];
    return NULL;
}

static bool kb_check_unknown(kb_loader_t *ld, const kb_csection_t *sec, const config_setting_t *grp,
                             const char *prefix) {
    int n = config_setting_length(grp);
    for (int i = 0; i < n; i++) {
        const config_setting_t *s = config_setting_get_elem(grp, (unsigned)i);
        char name[KB_PATH_MAX];
        kb_config__name_decode(config_setting_name(s), name, sizeof(name));
        if (kb_find_key(sec, name))
            continue;
        const char *near = NULL;
        for (size_t k = 0; k < sec->n_keys; k++)
            if (kb_edit_distance(name, sec->keys[k].name) <= 2)
                near = sec->keys[k].name;
        if (near)
            return kb_config__fail(ld, s, "unknown key %s%s (did you mean %s%s?)", prefix, name, prefix, near);
        return kb_config__fail(ld, s, "unknown key %s%s", prefix, name);
    }
    return true;
}

/* ---- values ------------------------------------------------------------- */

static int kb_value_index(const char *const *values, const char *s) {
    for (int i = 0; values[i]; i++)
        if (strcmp(values[i], s) == 0)
            return i;
    return -1;
}

static bool kb_fail_values(kb_loader_t *ld, const config_setting_t *s, const char *path, const char *value,
                           const char *const *values) {
    char list[256] = "";
    size_t used = 0;
    for (size_t i = 0; values[i] && used < sizeof(list); i++) {
        int n = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", values[i]);
        used += n > 0 ? (size_t)n : 0;
    }
    return kb_config__fail(ld, s, "%s: unknown value \"%s\" (expected one of: %s)", path, value, list);
}

static bool kb_is_name(const char *s) {
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '.' ||
              *s == '_' || *s == '-'))
            return false;
    return true;
}

static bool kb_listen_valid(const char *s) {
    if (!*s)
        return true;
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || !colon[1] || strlen(colon + 1) > 5)
        return false;
    for (const char *p = colon + 1; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return atoi(colon + 1) <= 65535;
}

/* ---- ${ENV} expansion ---------------------------------------------------- */

static bool kb_env_name_char(char c, bool first) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || (!first && c >= '0' && c <= '9');
}

/* v with ${NAME}, ${NAME:-default} and $$ expanded, into out (reset first).
 * A '$' before anything else stays as it is. Defaults are literal text up to
 * the first '}'. False (after kb_config__fail) on an unset variable without
 * a default, a bad name or a missing '}'. */
static bool kb_expand(kb_loader_t *ld, const config_setting_t *s, const char *path, const char *v, kb_buf_t *out) {
    kb_buf_reset(out);
    kb_buf_append_str(out, "");
    for (const char *p = v; *p;) {
        if (p[0] != '$' || (p[1] != '$' && p[1] != '{')) {
            kb_buf_append_char(out, *p++);
            continue;
        }
        if (p[1] == '$') {
            kb_buf_append_char(out, '$');
            p += 2;
            continue;
        }
        const char *name = p + 2, *e = name;
        while (kb_env_name_char(*e, e == name))
            e++;
        int n = (int)(e - name);
        const char *def = NULL, *end = e;
        if (e[0] == ':' && e[1] == '-') {
            def = e + 2;
            end = strchr(def, '}');
        }
        if (!n || !end || *end != '}')
            return kb_config__fail(ld, s, "%s: bad ${…} in \"%s\" (write ${NAME} or ${NAME:-default}; $$ is a $)",
                                   path, v);
        char var[256];
        snprintf(var, sizeof(var), "%.*s", n, name);
        const char *val = getenv(var);
        if (def && (!val || !*val))
            kb_buf_append(out, def, (size_t)(end - def));
        else if (val)
            kb_buf_append_str(out, val);
        else
            return kb_config__fail(ld, s, "%s: environment variable %s is not set (write ${%s:-default} for a default)",
                                   path, var, var);
        p = end + 1;
    }
    return true;
}

/* Checks on one string value of a row (also each element of a list). */
static bool kb_check_string(kb_loader_t *ld, const kb_ckey_t *k, const config_setting_t *s, const char *path,
                            const char *v) {
    char err[256];
    if ((k->flags & KB_CF_NONEMPTY) && !*v)
        return kb_config__fail(ld, s, "%s: must not be empty", path);
    if ((k->flags & KB_CF_NAME) && !kb_is_name(v))
        return kb_config__fail(ld, s, "%s: \"%s\" may contain only letters, digits, '.', '_' and '-'", path, v);
    if ((k->flags & KB_CF_LISTEN) && !kb_listen_valid(v))
        return kb_config__fail(ld, s, "%s: \"%s\" is not host:port (or \"\" to disable)", path, v);
    if (k->flags & KB_CF_PATH && !kb_config__path_valid(v, err, sizeof(err)))
        return kb_config__fail(ld, s, "%s: bad field path \"%s\": %s", path, v, err);
    if (k->flags & KB_CF_TEMPLATE) {
        kb_template_t *t = kb_template_compile(v, err, sizeof(err));
        if (!t)
            return kb_config__fail(ld, s, "%s: %s", path, err); /* err quotes the template */
        kb_template_free(t);
    }
    return true;
}

static bool kb_check_int(kb_loader_t *ld, const kb_ckey_t *k, const config_setting_t *s, const char *path,
                         long long v) {
    if (k->min < k->max && ((double)v < k->min || (double)v > k->max))
        return kb_config__fail(ld, s, "%s: %lld is out of range (%.15g to %.15g)", path, v, k->min, k->max);
    if (k->values) {
        char text[32];
        snprintf(text, sizeof(text), "%lld", v);
        if (kb_value_index(k->values, text) < 0)
            return kb_fail_values(ld, s, path, text, k->values);
    }
    return true;
}

static void kb_strlist_push(kb_strlist_t *l, const char *s, size_t n) {
    l->v = kb_realloc(l->v, (l->n + 1) * sizeof(*l->v));
    l->v[l->n++] = kb_strndup(s, n);
}

/* Apply a row's default (the table guarantees defaults are valid). */
static void kb_apply_default(const kb_ckey_t *k, void *p) {
    const char *def = k->def ? k->def : "";
    switch (k->type) {
    case KB_CT_STRING:
    case KB_CT_CHOICE:
        if (k->def) /* else computed by the section's hook */
            *(char **)p = kb_strdup(def);
        break;
    case KB_CT_INT:
        *(int *)p = atoi(def);
        break;
    case KB_CT_INT64:
        *(int64_t *)p = strtoll(def, NULL, 10);
        break;
    case KB_CT_FLOAT:
        *(double *)p = strtod(def, NULL);
        break;
    case KB_CT_BOOL:
        *(bool *)p = strcmp(def, "true") == 0;
        break;
    case KB_CT_ENUM:
        *(int *)p = k->def ? kb_value_index(k->values, def) : 0;
        KB_ASSERT(*(int *)p >= 0);
        break;
    case KB_CT_STRLIST:
        for (const char *q = def; *q;) {
            size_t n = strcspn(q, ",");
            kb_strlist_push(p, q, n);
            q += n + (q[n] == ',');
        }
        break;
    case KB_CT_TYPES:
        *(uint32_t *)p = KB_ROUTE_TYPES_ALL;
        break;
    case KB_CT_PROPS:
    case KB_CT_GROUP:
    case KB_CT_LIST:
        break; /* empty; groups are handled by the caller */
    }
}

static bool kb_load_section(kb_loader_t *ld, const kb_csection_t *sec, const config_setting_t *grp, void *base,
                            size_t index, const char *prefix);

static bool kb_load_strlist(kb_loader_t *ld, const kb_ckey_t *k, const config_setting_t *s, const char *path,
                            kb_strlist_t *l) {
    if (config_setting_type(s) != CONFIG_TYPE_ARRAY && config_setting_type(s) != CONFIG_TYPE_LIST)
        return kb_config__fail(ld, s, "%s: expected a list of strings [ \"…\", … ]", path);
    int n = config_setting_length(s);
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        char epath[KB_PATH_MAX + 16];
        snprintf(epath, sizeof(epath), "%s[%d]", path, i);
        const char *raw = config_setting_get_string(e);
        if (!raw)
            return kb_config__fail(ld, e, "%s: expected a string", epath);
        kb_buf_t v = KB_BUF_INIT;
        bool ok = kb_expand(ld, e, epath, raw, &v) && kb_check_string(ld, k, e, epath, v.data);
        if (ok)
            kb_strlist_push(l, v.data, v.len);
        kb_buf_fini(&v);
        if (!ok)
            return false;
    }
    return true;
}

static bool kb_load_types(kb_loader_t *ld, const kb_ckey_t *k, const config_setting_t *s, const char *path,
                          uint32_t *mask) {
    static const char *const names[] = {"ADDED", "MODIFIED", "DELETED", "SYNC", "SNAPSHOT", NULL};
    kb_strlist_t l = {0};
    bool ok = kb_load_strlist(ld, k, s, path, &l);
    if (ok && l.n == 0)
        ok = kb_config__fail(ld, s, "%s: must name at least one type", path);
    *mask = 0;
    for (size_t i = 0; ok && i < l.n; i++) {
        int t = kb_event_type_parse(l.v[i], strlen(l.v[i]));
        if (t >= 0 && t < KB_EV_TYPE_COUNT) {
            *mask |= 1u << t;
            continue;
        }
        char epath[KB_PATH_MAX + 16];
        snprintf(epath, sizeof(epath), "%s[%d]", path, (int)i);
        ok = kb_fail_values(ld, config_setting_get_elem(s, (unsigned)i), epath, l.v[i], names);
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.v[i]);
    free(l.v);
    return ok;
}

static bool kb_load_props(kb_loader_t *ld, const config_setting_t *s, const char *path, kb_kv_t **kv,
                          size_t *n_kv) {
    if (config_setting_type(s) != CONFIG_TYPE_GROUP)
        return kb_config__fail(ld, s, "%s: expected a group { name = value; … }", path);
    int n = config_setting_length(s);
    *kv = kb_calloc((size_t)n + 1, sizeof(**kv));
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        char name[KB_PATH_MAX], text[64];
        kb_config__name_decode(config_setting_name(e), name, sizeof(name));
        const char *v = text;
        kb_buf_t ex = KB_BUF_INIT;
        switch (config_setting_type(e)) {
        case CONFIG_TYPE_STRING: {
            char epath[KB_PATH_MAX * 2];
            snprintf(epath, sizeof(epath), "%s.%s", path, name);
            if (!kb_expand(ld, e, epath, config_setting_get_string(e), &ex)) {
                kb_buf_fini(&ex);
                return false;
            }
            v = ex.data;
            break;
        }
        case CONFIG_TYPE_INT:
        case CONFIG_TYPE_INT64:
            snprintf(text, sizeof(text), "%lld", config_setting_get_int64(e));
            break;
        case CONFIG_TYPE_FLOAT:
            snprintf(text, sizeof(text), "%.15g", config_setting_get_float(e));
            break;
        case CONFIG_TYPE_BOOL:
            v = config_setting_get_bool(e) ? "true" : "false";
            break;
        default:
            return kb_config__fail(ld, e, "%s.%s: expected a string, number or boolean", path, name);
        }
        if (!*name) {
            kb_buf_fini(&ex);
            return kb_config__fail(ld, e, "%s: empty property name", path);
        }
        (*kv)[*n_kv].key = kb_strdup(name);
        (*kv)[*n_kv].value = kb_strdup(v);
        kb_buf_fini(&ex);
        (*kv)[*n_kv].line = config_setting_source_line(e);
        (*n_kv)++;
    }
    return true;
}

static bool kb_load_list(kb_loader_t *ld, const kb_ckey_t *k, const config_setting_t *s, const char *path,
                         void *base) {
    const kb_csection_t *sec = k->sub;
    int type = config_setting_type(s);
    int n = config_setting_length(s);
    if (type != CONFIG_TYPE_LIST && !(type == CONFIG_TYPE_ARRAY && n == 0))
        return kb_config__fail(ld, s, "%s: expected a list of groups ( { … }, … )", path);
    char *elems = kb_calloc((size_t)n + 1, sec->size);
    *(void **)kb_at(base, k->off) = elems;
    size_t *count = kb_at(base, k->off2);
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        char epath[KB_PATH_MAX + 16];
        snprintf(epath, sizeof(epath), "%s[%d]", path, i);
        if (config_setting_type(e) != CONFIG_TYPE_GROUP)
            return kb_config__fail(ld, e, "%s: expected a group { … }", epath);
        (*count)++; /* counted before loading, so kb_config_free sees a partial element */
        if (!kb_load_section(ld, sec, e, elems + (size_t)i * sec->size, (size_t)i, epath))
            return false;
    }
    /* Names that must be unique within the list (after computed defaults). */
    for (size_t r = 0; r < sec->n_keys; r++) {
        const kb_ckey_t *u = &sec->keys[r];
        if (!(u->flags & KB_CF_UNIQUE))
            continue;
        for (int i = 1; i < n; i++) {
            const char *vi = *(char **)(elems + (size_t)i * sec->size + u->off);
            for (int j = 0; j < i; j++) {
                if (strcmp(vi, *(char **)(elems + (size_t)j * sec->size + u->off)) != 0)
                    continue;
                const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
                const config_setting_t *prev = config_setting_get_elem(s, (unsigned)j);
                const config_setting_t *at = config_setting_get_member(e, u->name);
                return kb_config__fail(ld, at ? at : e, "%s[%d].%s: duplicate %s \"%s\" (first at line %u)", path, i,
                                       u->name, u->name, vi, config_setting_source_line(prev));
            }
        }
    }
    return true;
}

/* A copy of v; for file names, "~/x" becomes "$HOME/x" as a shell would. */
static char *kb_file_name(const kb_loader_t *ld, const kb_ckey_t *k, const char *v) {
    if (!(k->flags & KB_CF_FILE) || strncmp(v, "~/", 2) != 0 || !ld->home || !*ld->home)
        return kb_strdup(v);
    size_t n = strlen(ld->home) + strlen(v);
    char *out = kb_malloc(n);
    snprintf(out, n, "%s%s", ld->home, v + 1);
    return out;
}

/* Convert a present setting for row k into p. */
static bool kb_load_value(kb_loader_t *ld, const kb_ckey_t *k, const config_setting_t *s, const char *path,
                          void *base) {
    void *p = kb_at(base, k->off);
    int type = config_setting_type(s);
    switch (k->type) {
    case KB_CT_STRING:
    case KB_CT_ENUM:
    case KB_CT_CHOICE: {
        const char *raw = config_setting_get_string(s);
        if (!raw)
            return kb_config__fail(ld, s, "%s: expected a string", path);
        kb_buf_t ex = KB_BUF_INIT;
        bool ok = kb_expand(ld, s, path, raw, &ex);
        const char *v = ex.data;
        if (ok && k->type == KB_CT_STRING) {
            *(char **)p = kb_file_name(ld, k, v);
            ok = kb_check_string(ld, k, s, path, v);
        } else if (ok) {
            int i = kb_value_index(k->values, v);
            if (i < 0)
                ok = kb_fail_values(ld, s, path, v, k->values);
            else if (k->type == KB_CT_ENUM)
                *(int *)p = i;
            else
                *(char **)p = kb_strdup(v);
        }
        kb_buf_fini(&ex);
        return ok;
    }
    case KB_CT_INT:
    case KB_CT_INT64: {
        if (type != CONFIG_TYPE_INT && type != CONFIG_TYPE_INT64)
            return kb_config__fail(ld, s, "%s: expected an integer", path);
        long long v = config_setting_get_int64(s);
        if (!kb_check_int(ld, k, s, path, v))
            return false;
        if (k->type == KB_CT_INT64) {
            *(int64_t *)p = v;
        } else {
            if (v < INT_MIN || v > INT_MAX)
                return kb_config__fail(ld, s, "%s: %lld is out of range", path, v);
            *(int *)p = (int)v;
        }
        return true;
    }
    case KB_CT_FLOAT: {
        if (type != CONFIG_TYPE_INT && type != CONFIG_TYPE_INT64 && type != CONFIG_TYPE_FLOAT)
            return kb_config__fail(ld, s, "%s: expected a number", path);
        double v = type == CONFIG_TYPE_FLOAT ? config_setting_get_float(s) : (double)config_setting_get_int64(s);
        if (!isfinite(v) || (k->min < k->max && (v < k->min || v > k->max)))
            return kb_config__fail(ld, s, "%s: %g is out of range (%.15g to %.15g)", path, v, k->min, k->max);
        *(double *)p = v;
        return true;
    }
    case KB_CT_BOOL:
        if (type != CONFIG_TYPE_BOOL)
            return kb_config__fail(ld, s, "%s: expected true or false", path);
        *(bool *)p = config_setting_get_bool(s) != 0;
        return true;
    case KB_CT_STRLIST:
        return kb_load_strlist(ld, k, s, path, p);
    case KB_CT_TYPES:
        return kb_load_types(ld, k, s, path, p);
    case KB_CT_PROPS:
        return kb_load_props(ld, s, path, p, kb_at(base, k->off2));
    case KB_CT_GROUP:
        if (type != CONFIG_TYPE_GROUP)
            return kb_config__fail(ld, s, "%s: expected a group { … }", path);
        return kb_load_section(ld, k->sub, s, p, 0, path);
    case KB_CT_LIST:
        return kb_load_list(ld, k, s, path, base);
    }
    return false;
}

static bool kb_load_section(kb_loader_t *ld, const kb_csection_t *sec, const config_setting_t *grp, void *base,
                            size_t index, const char *prefix) {
    char dotted[KB_PATH_MAX];
    snprintf(dotted, sizeof(dotted), "%s%s", prefix, *prefix ? "." : "");
    if (grp && !kb_check_unknown(ld, sec, grp, dotted))
        return false;
    if (sec->line_off != SIZE_MAX)
        *(int *)kb_at(base, sec->line_off) = grp ? config_setting_source_line(grp) : 0;
    unsigned variant = 0;
    for (size_t i = 0; i < sec->n_keys; i++) {
        const kb_ckey_t *k = &sec->keys[i];
        const config_setting_t *s = grp ? config_setting_get_member(grp, k->name) : NULL;
        char path[KB_PATH_MAX];
        snprintf(path, sizeof(path), "%s%s", dotted, k->name);
        bool applies = !k->only || (k->only & (1u << variant));
        if (s && !applies) {
            const kb_ckey_t *d = &sec->keys[sec->disc];
            return kb_config__fail(ld, s, "%s: not valid for %s = \"%s\"", path, d->name, d->values[variant]);
        }
        if (s) {
            if (!kb_load_value(ld, k, s, path, base))
                return false;
            if (k->flags & KB_CF_SEEN)
                *(bool *)kb_at(base, k->off2) = true;
        } else if ((k->flags & KB_CF_REQUIRED) && applies) {
            if (k->only)
                return kb_config__fail(ld, grp, "%s is required for %s = \"%s\"", path, sec->keys[sec->disc].name,
                                       sec->keys[sec->disc].values[variant]);
            return kb_config__fail(ld, grp, "%s is required", path);
        } else if (k->type == KB_CT_GROUP) {
            if (!kb_load_section(ld, k->sub, NULL, kb_at(base, k->off), 0, path))
                return false;
        } else {
            kb_apply_default(k, kb_at(base, k->off));
        }
        if ((int)i == sec->disc)
            variant = (unsigned)*(int *)kb_at(base, k->off);
    }
    return !sec->finish || sec->finish(ld, base, index, grp, prefix);
}

/* ---- hooks: checks that span keys ------------------------------------- */

bool kb_config__finish_sink(kb_loader_t *ld, void *base, size_t index, const config_setting_t *grp,
                            const char *prefix) {
    KB_UNUSED(index);
    kb_config_sink_t *sink = base;
    if (sink->type == KB_SINK_FILE) {
        char *end = NULL;
        long mode = strtol(sink->file_mode, &end, 8);
        if (!sink->file_mode[0] || *end || mode < 0 || mode > 0777)
            return kb_config__fail(ld, config_setting_get_member(grp, "file_mode"),
                                   "%s.file_mode: \"%s\" is not an octal permission mode such as \"0600\"", prefix,
                                   sink->file_mode);
        sink->file_mode_bits = (unsigned)mode;
    }
    if (sink->type == KB_SINK_MQTT && sink->uri && kb_url_has_userinfo(sink->uri))
        return kb_config__fail(ld, config_setting_get_member(grp, "uri"),
                               "%s.uri: a URI with user:password@ is refused (the password would be printed "
                               "wherever the URI is): write it as scheme://host:port and set username and "
                               "password_file", prefix);
    if (!sink->client_id) {
        size_t n = strlen(ld->cfg->cluster.name) + sizeof("kbridge-");
        sink->client_id = kb_malloc(n);
        snprintf(sink->client_id, n, "kbridge-%s", ld->cfg->cluster.name);
    }
    return true;
}

bool kb_config__finish_route(kb_loader_t *ld, void *base, size_t index, const config_setting_t *grp,
                             const char *prefix) {
    kb_config_route_t *route = base;
    if (!kb_config_find_informer(ld->cfg, route->informer))
        return kb_config__fail(ld, config_setting_get_member(grp, "informer"), "%s.informer: no informer named \"%s\"",
                               prefix, route->informer);
    if (!kb_config_find_sink(ld->cfg, route->sink))
        return kb_config__fail(ld, config_setting_get_member(grp, "sink"), "%s.sink: no sink named \"%s\"", prefix,
                               route->sink);
    if (!route->name) {
        int n = snprintf(NULL, 0, "%s-%s-%zu", route->informer, route->sink, index);
        route->name = kb_malloc((size_t)n + 1);
        snprintf(route->name, (size_t)n + 1, "%s-%s-%zu", route->informer, route->sink, index);
    }
    return true;
}

/* StatefulSet pods are named "<set>-<ordinal>". */
static bool kb_hostname_ordinal(const char *host, long *ordinal) {
    const char *dash = host ? strrchr(host, '-') : NULL;
    if (!dash || dash == host || !dash[1] || strlen(dash + 1) > 9)
        return false;
    for (const char *p = dash + 1; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    *ordinal = strtol(dash + 1, NULL, 10);
    return true;
}

/* The HTTP API: secure unless said otherwise. */
static bool kb_finish_http(kb_loader_t *ld, const kb_config_t *cfg, const config_setting_t *grp) {
    const config_setting_t *http = config_setting_get_member(grp, "http");
    const config_setting_t *at = http ? config_setting_get_member(http, "listen") : NULL;
    if (*cfg->http_listen && !*cfg->http_token_file && !cfg->http_allow_unauthenticated &&
        !kb_host_is_loopback(cfg->http_listen, (size_t)(strrchr(cfg->http_listen, ':') - cfg->http_listen)))
        return kb_config__fail(ld, at ? at : http,
                               "http.listen = \"%s\" serves the API beyond loopback without a token: set "
                               "http.token_file (recommended), or http.allow_unauthenticated = true to serve "
                               "snapshots and replays to anyone who can connect",
                               cfg->http_listen);
    if (*cfg->http_metrics_token_file && !*cfg->http_token_file)
        return kb_config__fail(ld, http, "http.metrics_token_file needs http.token_file: without a token every "
                                         "endpoint is open, and a metrics-only token would limit nothing");
    if (!*cfg->http_tls_cert_file != !*cfg->http_tls_key_file)
        return kb_config__fail(ld, http, "http.tls_cert_file and http.tls_key_file: set both (HTTPS) or neither");
    return true;
}

/* cluster.server carries no credential (libcurl would send user:password@
 * as Basic auth while the start line said auth=none, and the URL is printed
 * by --check, the log and /readyz), and plain http:// beyond loopback only
 * when said: what kbridge reads there, and any credential it sends, crosses
 * the network unencrypted and unauthenticated. The client refuses the same
 * for a server from a kubeconfig at start. */
static bool kb_finish_cluster(kb_loader_t *ld, const kb_config_t *cfg, const config_setting_t *grp) {
    const kb_config_cluster_t *c = &cfg->cluster;
    const config_setting_t *cl = config_setting_get_member(grp, "cluster");
    const config_setting_t *at = cl ? config_setting_get_member(cl, "server") : NULL;
    if (kb_url_has_userinfo(c->server))
        return kb_config__fail(ld, at ? at : cl,
                               "cluster.server: a URL with user:password@ is refused (the password would be sent "
                               "as Basic auth and printed wherever the URL is): write it as scheme://host:port and "
                               "put the credential in cluster.token_file, cluster.client_cert/client_key, or a "
                               "kubeconfig user (cluster.kubeconfig)");
    if (c->allow_insecure_http || !kb_url_plain_beyond_loopback(c->server))
        return true;
    return kb_config__fail(ld, at ? at : cl,
                           "cluster.server = \"%s\" is plain http:// beyond loopback: what kbridge reads%s would "
                           "cross the network unencrypted and unauthenticated; use https://, or set "
                           "cluster.allow_insecure_http = true",
                           c->server, *c->token_file ? " and cluster.token_file" : "");
}

/* Server-side sharding by uid may hand a re-created name's two incarnations
 * to two replicas; for a route in mode "state" (a Kafka tombstone, an MQTT
 * retained clear) the old one's delete may then land after the new one's
 * state and erase it. By namespace, or by name, one replica has both. */
static bool kb_check_shard_state_routes(kb_loader_t *ld, const kb_config_t *cfg, const config_setting_t *grp) {
    if (cfg->sharding_replicas <= 1 || cfg->sharding_server_side == KB_SHARD_SERVER_OFF ||
        cfg->sharding_server_field != KB_SHARD_FIELD_UID)
        return true;
    const config_setting_t *list = config_setting_get_member(grp, "routes");
    for (size_t i = 0; i < cfg->n_routes; i++) {
        if (cfg->routes[i].mode != KB_MODE_STATE)
            continue;
        const config_setting_t *at = list ? config_setting_get_elem(list, (unsigned)i) : NULL;
        return kb_config__fail(ld, at, "route %s: mode = \"state\" with sharding.server_side sharding by uid: a "
                               "re-created name may move to another replica, whose state could be erased by the old "
                               "one's delete; set sharding.server_field = \"namespace\" (or server_side = \"off\")",
                               cfg->routes[i].name);
    }
    return true;
}

/* on_refused = "dead_letter" names a sink that exists, is not the sink
 * itself, and does not lead back to it through other dead-letter sinks. */
static bool kb_check_dead_letters(kb_loader_t *ld, kb_config_t *cfg, const config_setting_t *grp) {
    const config_setting_t *list = config_setting_get_member(grp, "sinks");
    for (size_t i = 0; i < cfg->n_sinks; i++) {
        const kb_config_sink_t *s = &cfg->sinks[i];
        const config_setting_t *at = list ? config_setting_get_elem(list, (unsigned)i) : NULL;
        const config_setting_t *key = at ? config_setting_get_member(at, "dead_letter") : NULL;
        if (s->on_refused != KB_REFUSED_DEAD_LETTER) {
            if (s->dead_letter[0])
                return kb_config__fail(ld, key, "sinks.%s.dead_letter: used only with on_refused = \"dead_letter\"",
                                       s->name);
            continue;
        }
        if (!s->dead_letter[0])
            return kb_config__fail(ld, at, "sinks.%s: on_refused = \"dead_letter\" needs dead_letter = \"<sink>\"",
                                   s->name);
        const kb_config_sink_t *d = s;
        for (size_t hops = 0; d && d->on_refused == KB_REFUSED_DEAD_LETTER; hops++) {
            const kb_config_sink_t *next = kb_config_find_sink(cfg, d->dead_letter);
            if (!next)
                return kb_config__fail(ld, key, "sinks.%s.dead_letter: no sink named \"%s\"", d->name,
                                       d->dead_letter);
            if (next == s || hops > cfg->n_sinks)
                return kb_config__fail(ld, key, "sinks.%s.dead_letter: \"%s\" leads back to \"%s\" (a sink cannot "
                                       "dead-letter to itself, directly or through others)", s->name, s->dead_letter,
                                       s->name);
            d = next;
        }
    }
    return true;
}

static bool kb_finish_ha(kb_loader_t *ld, kb_config_t *cfg, const config_setting_t *grp) {
    const config_setting_t *ha = config_setting_get_member(grp, "ha");
    if (cfg->ha_renew_seconds >= cfg->ha_lease_seconds - 1)
        return kb_config__fail(ld, ha && config_setting_get_member(ha, "renew_seconds") ?
                                       config_setting_get_member(ha, "renew_seconds") : ha,
                               "ha.renew_seconds: %d is not below ha.lease_seconds - 1 = %d", cfg->ha_renew_seconds,
                               cfg->ha_lease_seconds - 1);
    if (!strcmp(cfg->ha_identity, "$HOSTNAME")) {
        free(cfg->ha_identity);
        cfg->ha_identity = kb_strdup(ld->hostname ? ld->hostname : "");
    }
    if (cfg->ha_enabled && !cfg->ha_identity[0])
        return kb_config__fail(ld, ha && config_setting_get_member(ha, "identity") ?
                                       config_setting_get_member(ha, "identity") : ha,
                               "ha.identity: empty (and $HOSTNAME is not set)");
    return true;
}

bool kb_config__finish_root(kb_loader_t *ld, void *base, size_t index, const config_setting_t *grp,
                            const char *prefix) {
    KB_UNUSED(index);
    KB_UNUSED(prefix);
    kb_config_t *cfg = base;
    if (!kb_check_dead_letters(ld, cfg, grp))
        return false;
    const config_setting_t *sharding = config_setting_get_member(grp, "sharding");
    const config_setting_t *at = sharding ? config_setting_get_member(sharding, "index") : NULL;
    if (cfg->sharding_index == -1) {
        long ordinal;
        if (!kb_hostname_ordinal(ld->hostname, &ordinal))
            return kb_config__fail(ld, at, "sharding.index = -1: $HOSTNAME \"%s\" has no StatefulSet ordinal "
                                   "(\"<name>-<N>\")", ld->hostname ? ld->hostname : "");
        if (ordinal >= cfg->sharding_replicas)
            return kb_config__fail(ld, at, "sharding.index = -1: ordinal %ld of $HOSTNAME \"%s\" is not below "
                                   "sharding.replicas = %d", ordinal, ld->hostname, cfg->sharding_replicas);
        cfg->sharding_index = (int)ordinal;
    } else if (cfg->sharding_index >= cfg->sharding_replicas) {
        return kb_config__fail(ld, at, "sharding.index: %d is not below sharding.replicas = %d",
                               cfg->sharding_index, cfg->sharding_replicas);
    }
    if (!kb_check_shard_state_routes(ld, cfg, grp))
        return false;
    if (!kb_finish_http(ld, cfg, grp) || !kb_finish_cluster(ld, cfg, grp) || !kb_finish_ha(ld, cfg, grp))
        return false;
    /* No routes: a read replica (informers for the kube API only), unless
     * sinks are configured, which then would go unused — a route forgotten. */
    if (cfg->n_routes == 0 && (cfg->n_sinks || !kb_config_kapi_served(cfg)))
        return kb_config__fail(ld, config_setting_get_member(grp, "routes"), "%s",
                               cfg->n_sinks ? "routes: at least one route is required (informer → sink)"
                                            : "routes: at least one route is required (informer → sink), unless "
                                              "the informers are served by the kube API (http.listen, "
                                              "kube_api.enabled)");
    return true;
}

/* ---- entry points ------------------------------------------------------- */

/* include_dir NULL: @include is refused (text from memory has no directory). */
static kb_config_t *kb_config_load_text(const char *text, const char *path, const char *include_dir,
                                        char *errstr, size_t errstr_size) {
    if (!strncmp(text, "\xEF\xBB\xBF", 3))
        text += 3; /* a UTF-8 byte order mark, as some Windows editors write */
    char *prepared = kb_config__prepare(text, path, include_dir != NULL, errstr, errstr_size);
    if (!prepared)
        return NULL;
    config_t lc;
    config_init(&lc);
    if (include_dir)
        config_set_include_dir(&lc, include_dir);
    kb_config_t *cfg = kb_calloc(1, sizeof(*cfg));
    cfg->path = kb_strdup(path);
    kb_loader_t ld = {.path = path, .errstr = errstr, .errstr_size = errstr_size, .cfg = cfg,
                      .hostname = getenv("HOSTNAME"), .home = getenv("HOME"), .include_dir = include_dir};
    bool ok;
    if (!config_read_string(&lc, prepared)) {
        const char *file = config_error_file(&lc) ? config_error_file(&lc) : path;
        kb_fail_at(&ld, file, (unsigned)config_error_line(&lc), "%s", config_error_text(&lc));
        ok = false;
    } else {
        ok = kb_load_section(&ld, &kb_config__root, config_root_setting(&lc), cfg, 0, "");
    }
    config_destroy(&lc);
    free(prepared);
    if (!ok) {
        kb_config_free(cfg);
        return NULL;
    }
    return cfg;
}

kb_config_t *kb_config_load_string(const char *text, const char *path, char *errstr, size_t errstr_size) {
    return kb_config_load_text(text, path ? path : "<string>", NULL, errstr, errstr_size);
}

kb_config_t *kb_config_load(const char *path, char *errstr, size_t errstr_size) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(errstr, errstr_size, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            text = kb_realloc(text, cap);
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    bool failed = ferror(f);
    fclose(f);
    if (failed) {
        snprintf(errstr, errstr_size, "%s: cannot read", path);
        free(text);
        return NULL;
    }
    text[len] = '\0';
    if (strlen(text) != len) {
        snprintf(errstr, errstr_size, "%s: contains a NUL byte", path);
        free(text);
        return NULL;
    }
    /* @include "x" is relative to the config file's directory. */
    const char *slash = strrchr(path, '/');
    char *dir = slash ? kb_strndup(path, (size_t)(slash - path) + (slash == path)) : kb_strdup(".");
    kb_config_t *cfg = kb_config_load_text(text, path, dir, errstr, errstr_size);
    free(dir);
    free(text);
    return cfg;
}
