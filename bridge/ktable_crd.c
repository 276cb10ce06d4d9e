/* bridge/ktable_crd.c — a custom resource's Table: the columns of its CRD's
 * additionalPrinterColumns, each cell read by the column's JSONPath.
 *
 * DESIGN. The API server prints a custom resource with Name and then one
 * column per additionalPrinterColumns entry of the served version (Age on
 * metadata.creationTimestamp when there are none); a cell is the first
 * result of the column's JSONPath, or null when there is none. A "string"
 * column prints the value as its JSONPath printer does (a string as is, a
 * number or bool as Go's fmt prints it, a map or list as compact JSON with
 * sorted keys, null as "<no value>"); the other types keep the value when
 * it has the column's type ("integer" truncates a number, "date" is the
 * age of an RFC 3339 time) and are null otherwise.
 *
 * The JSONPaths a CRD may declare are parsed once, when the CRD is learned,
 * into steps: .field, ['field'], [n] (negative from the end), [*], [a:b]
 * is not taken, ..field (any depth) and the filter [?(@.path OP literal)]
 * with == or != on a string, number or bool. A path with anything else
 * reads nothing (a null cell) and is logged once at learn time.
 *
 * Learned printers live until exit (few: one per CRD informer read), in an
 * append-only array read without a lock, as common/fieldsel.c keeps the
 * CRD's selectable fields.
 */
#include "bridge/ktable_int.h"

#include "common/alloc.h"
#include "common/log.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { KB_JP_FIELD, KB_JP_INDEX, KB_JP_ALL, KB_JP_DESCEND, KB_JP_FILTER } kb_jp_op_t;

typedef struct kb_jp_step {
    kb_jp_op_t op;
    char *name;    /* FIELD, DESCEND: the member; FILTER: the dotted path after "@." ("" = the element) */
    long index;    /* INDEX */
    bool neg;      /* FILTER: != */
    json_t *value; /* FILTER: the literal (owned) */
} kb_jp_step_t;

struct kb_ktable_jp {
    kb_jp_step_t *steps;
    size_t n;
    bool bad; /* a form not taken: reads nothing */
};

/* The API server's descriptions of the two columns it adds itself. */
static const char kb_crd_name_desc[] =
    "Name must be unique within a namespace. Is required when creating resources, although some resources may "
    "allow a client to request the generation of an appropriate name automatically. Name is primarily intended "
    "for creation idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
static const char kb_crd_age_desc[] =
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
    "guaranteed to be set in happens-before order across separate operations. Clients may not set this value. "
    "It is represented in RFC3339 form and is in UTC. Populated by the system. Read-only. Null for lists. More "
    "info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/* ---- parsing ------------------------------------------------------------------------ */

static kb_jp_step_t *kb_jp_push(kb_ktable_jp_t *jp, kb_jp_op_t op) {
    jp->steps = kb_realloc(jp->steps, (jp->n + 1) * sizeof(*jp->steps));
    kb_jp_step_t *s = &jp->steps[jp->n++];
    memset(s, 0, sizeof(*s));
    s->op = op;
    return s;
}

/* A member name at p (letters, digits, '_', '-', '/'); its length. */
static size_t kb_jp_ident(const char *p) {
    size_t n = 0;
    while (p[n] && !strchr(".[]()@=!<> '\"", p[n]))
        n++;
    return n;
}

/* The filter "?(@.a.b == 'x')" between the brackets, in[0..n). */
static bool kb_jp_filter(kb_ktable_jp_t *jp, const char *in, size_t n) {
    char buf[256];
    if (n < 5 || n >= sizeof(buf) || in[0] != '?' || in[1] != '(' || in[n - 1] != ')')
        return false;
    memcpy(buf, in + 2, n - 3);
    buf[n - 3] = '\0';
    char *op = strstr(buf, "==");
    char *ne = strstr(buf, "!=");
    if (!op || (ne && ne < op))
        op = ne;
    if (!op || strncmp(buf, "@", 1))
        return false;
    kb_jp_step_t *s = kb_jp_push(jp, KB_JP_FILTER);
    s->neg = op[0] == '!';
    char *lhs_end = op;
    while (lhs_end > buf && lhs_end[-1] == ' ')
        lhs_end--;
    s->name = kb_strndup(buf + 1 + (buf[1] == '.'), (size_t)(lhs_end - buf) - 1 - (buf[1] == '.'));
    char *rhs = op + 2;
    while (*rhs == ' ')
        rhs++;
    size_t rl = strlen(rhs);
    while (rl && rhs[rl - 1] == ' ')
        rhs[--rl] = '\0';
    if (rl >= 2 && (rhs[0] == '"' || rhs[0] == '\'') && rhs[rl - 1] == rhs[0])
        s->value = json_stringn(rhs + 1, rl - 2);
    else if (!strcmp(rhs, "true") || !strcmp(rhs, "false"))
        s->value = json_boolean(rhs[0] == 't');
    else if (rl && strspn(rhs, "-0123456789") == rl)
        s->value = json_integer(strtoll(rhs, NULL, 10));
    else if (rl && strspn(rhs, "-+.eE0123456789") == rl)
        s->value = json_real(strtod(rhs, NULL));
    return s->value != NULL;
}

/* One bracket at p ("[…]"); its length, 0 when not taken. */
static size_t kb_jp_bracket(kb_ktable_jp_t *jp, const char *p) {
    const char *close = strchr(p, ']');
    if (!close)
        return 0;
    size_t n = (size_t)(close - p) - 1;
    const char *in = p + 1;
    if (n == 1 && in[0] == '*') {
        kb_jp_push(jp, KB_JP_ALL);
    } else if (n >= 2 && (in[0] == '\'' || in[0] == '"') && in[n - 1] == in[0]) {
        kb_jp_push(jp, KB_JP_FIELD)->name = kb_strndup(in + 1, n - 2);
    } else if (n && in[0] == '?') {
        if (!kb_jp_filter(jp, in, n))
            return 0;
    } else if (n && strspn(in, "-0123456789") == n) {
        kb_jp_push(jp, KB_JP_INDEX)->index = strtol(in, NULL, 10);
    } else {
        return 0;
    }
    return n + 2;
}

/* Parse a CRD column's jsonPath (".spec.replicas"); never NULL (bad set when not taken). */
static kb_ktable_jp_t *kb_jp_parse(const char *path) {
    kb_ktable_jp_t *jp = kb_calloc(1, sizeof(*jp));
    const char *p = path;
    if (*p == '{' && p[strlen(p) - 1] == '}') /* the server wraps it in {…}; a CRD may too */
        jp->bad = true;
    while (*p && !jp->bad) {
        if (p[0] == '.' && p[1] == '.') {
            size_t n = kb_jp_ident(p + 2);
            kb_jp_push(jp, KB_JP_DESCEND)->name = kb_strndup(p + 2, n);
            jp->bad = !n;
            p += 2 + n;
        } else if (p[0] == '.') {
            size_t n = kb_jp_ident(p + 1);
            if (n)
                kb_jp_push(jp, KB_JP_FIELD)->name = kb_strndup(p + 1, n);
            p += 1 + n; /* "." alone: the object itself */
        } else if (p[0] == '[') {
            size_t n = kb_jp_bracket(jp, p);
            jp->bad = !n;
            p += n;
        } else {
            jp->bad = true;
        }
    }
    return jp;
}

static void kb_jp_free(kb_ktable_jp_t *jp) {
    for (size_t i = 0; jp && i < jp->n; i++) {
        free(jp->steps[i].name);
        json_decref(jp->steps[i].value);
    }
    if (jp)
        free(jp->steps);
    free(jp);
}

/* ---- evaluation ---------------------------------------------------------------------- */

static json_t *kb_jp_first(json_t *v, const kb_jp_step_t *s, size_t n);

/* A dotted path ("" = v itself) under v, for a filter's left side. */
static json_t *kb_jp_dotted(json_t *v, const char *path) {
    return *path ? kb_ktable__at(v, path) : v;
}

static bool kb_jp_holds(json_t *el, const kb_jp_step_t *s) {
    json_t *left = kb_jp_dotted(el, s->name);
    if (!left)
        return false;
    bool numbers = json_is_number(left) && json_is_number(s->value);
    bool eq = numbers ? json_number_value(left) == json_number_value(s->value) : json_equal(left, s->value);
    return eq != s->neg;
}

/* The first result of steps s[0..n) at every depth under v (..name). */
static json_t *kb_jp_descend(json_t *v, const kb_jp_step_t *s, size_t n) {
    json_t *hit = json_is_object(v) ? json_object_get(v, s->name) : NULL;
    json_t *r = hit ? kb_jp_first(hit, s + 1, n - 1) : NULL;
    if (r)
        return r;
    if (json_is_object(v)) {
        const char *key;
        json_t *child;
        json_object_foreach(v, key, child) {
            if ((r = kb_jp_descend(child, s, n)))
                return r;
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v) && !r; i++)
            r = kb_jp_descend(json_array_get(v, i), s, n);
    }
    return r;
}

/* The first result of steps s[0..n) on v, in document order: NULL when
 * there is none; a JSON null is a result. */
static json_t *kb_jp_first(json_t *v, const kb_jp_step_t *s, size_t n) {
    if (!n)
        return v;
    json_t *r = NULL;
    switch (s->op) {
    case KB_JP_FIELD:
        return json_is_object(v) ? kb_jp_first(json_object_get(v, s->name), s + 1, n - 1) : NULL;
    case KB_JP_INDEX: {
        long len = (long)json_array_size(v), i = s->index < 0 ? len + s->index : s->index;
        return json_is_array(v) && i >= 0 && i < len ? kb_jp_first(json_array_get(v, (size_t)i), s + 1, n - 1)
                                                     : NULL;
    }
    case KB_JP_ALL:
        if (json_is_object(v)) {
            const char *key;
            json_t *child;
            json_object_foreach(v, key, child) {
                if ((r = kb_jp_first(child, s + 1, n - 1)))
                    return r;
            }
        }
        for (size_t i = 0; json_is_array(v) && i < json_array_size(v) && !r; i++)
            r = kb_jp_first(json_array_get(v, i), s + 1, n - 1);
        return r;
    case KB_JP_FILTER:
        for (size_t i = 0; json_is_array(v) && i < json_array_size(v) && !r; i++)
            if (kb_jp_holds(json_array_get(v, i), s))
                r = kb_jp_first(json_array_get(v, i), s + 1, n - 1);
        return r;
    case KB_JP_DESCEND:
        return kb_jp_descend(v, s, n);
    }
    return NULL;
}

/* ---- cells --------------------------------------------------------------------------- */

/* d in Go's shortest form: fmt's %v (go_json false: an exponent below -4 or
 * from 6 up) or encoding/json's (true: below 1e-6 or from 1e21 up, "e-7"). */
static void kb_crd_float(double d, bool go_json, char *out, size_t size) {
    char e[40];
    int p = 1;
    for (; p < 17; p++) { /* the fewest digits that read back as d */
        snprintf(e, sizeof(e), "%.*e", p - 1, d);
        if (strtod(e, NULL) == d)
            break;
    }
    snprintf(e, sizeof(e), "%.*e", p - 1, d);
    int exp = atoi(strchr(e, 'e') + 1);
    bool sci = go_json ? (d != 0 && (fabs(d) < 1e-6 || fabs(d) >= 1e21)) : (exp < -4 || exp >= 6);
    if (!sci) {
        snprintf(out, size, "%.*f", p - 1 - exp > 0 ? p - 1 - exp : 0, d);
        return;
    }
    char *x = strchr(e, 'e');
    if (go_json && x[2] == '0' && x[3]) /* json writes e-07 as e-7 */
        memmove(x + 2, x + 3, strlen(x + 3) + 1);
    snprintf(out, size, "%s", e);
}

/* v as Go's json.Marshal writes the decoded value: compact, keys sorted,
 * '<', '>', '&' and U+2028/9 escaped. */
static void kb_crd_go_json(kb_buf_t *o, json_t *v) {
    char num[48];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n;
        const char **keys = kb_ktable__sorted_keys(v, &n);
        kb_buf_append_char(o, '{');
        for (size_t i = 0; i < n; i++) {
            json_t *k = json_string(keys[i]);
            if (i)
                kb_buf_append_char(o, ',');
            kb_crd_go_json(o, k);
            kb_buf_append_char(o, ':');
            kb_crd_go_json(o, json_object_get(v, keys[i]));
            json_decref(k);
        }
        kb_buf_append_char(o, '}');
        free(keys);
        break;
    }
    case JSON_ARRAY:
        kb_buf_append_char(o, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                kb_buf_append_char(o, ',');
            kb_crd_go_json(o, json_array_get(v, i));
        }
        kb_buf_append_char(o, ']');
        break;
    case JSON_STRING: {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        kb_buf_append_char(o, '"');
        for (size_t i = 0; i < n; i++) {
            unsigned char ch = (unsigned char)s[i];
            if (ch == '"' || ch == '\\') {
                kb_buf_append_char(o, '\\');
                kb_buf_append_char(o, (char)ch);
            } else if (ch == '\n' || ch == '\r' || ch == '\t') {
                kb_buf_append_str(o, ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : "\\t");
            } else if (ch < 0x20 || ch == '<' || ch == '>' || ch == '&') {
                kb_buf_appendf(o, "\\u00%02x", ch);
            } else if (ch == 0xe2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
                       ((unsigned char)s[i + 2] == 0xa8 || (unsigned char)s[i + 2] == 0xa9)) {
                kb_buf_appendf(o, "\\u202%c", (unsigned char)s[i + 2] == 0xa8 ? '8' : '9');
                i += 2;
            } else {
                kb_buf_append_char(o, (char)ch);
            }
        }
        kb_buf_append_char(o, '"');
        break;
    }
    case JSON_INTEGER:
        kb_buf_appendf(o, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL:
        kb_crd_float(json_real_value(v), true, num, sizeof(num));
        kb_buf_append_str(o, num);
        break;
    case JSON_TRUE:
    case JSON_FALSE:
        kb_buf_append_str(o, json_is_true(v) ? "true" : "false");
        break;
    case JSON_NULL:
        kb_buf_append_str(o, "null");
        break;
    }
}

/* A "string" column's cell: the value as the JSONPath printer prints it. */
static void kb_crd_text_cell(kb_ktable_cells_t *c, json_t *v) {
    char num[48];
    kb_buf_t b = KB_BUF_INIT;
    if (json_is_string(v)) {
        kb_ktable__str(c, json_string_value(v));
    } else if (json_is_integer(v)) {
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        kb_ktable__str(c, num);
    } else if (json_is_real(v)) {
        kb_crd_float(json_real_value(v), false, num, sizeof(num));
        kb_ktable__str(c, num);
    } else if (json_is_boolean(v)) {
        kb_ktable__str(c, json_is_true(v) ? "true" : "false");
    } else if (json_is_null(v)) {
        kb_ktable__str(c, "<no value>");
    } else {
        kb_crd_go_json(&b, v);
        kb_buf_append_char(&b, '\0');
        kb_ktable__str(c, b.data);
    }
    kb_buf_fini(&b);
}

/* One column's cell for the value v (NULL: no result). */
static void kb_crd_cell(kb_ktable_cells_t *c, const kb_ktable_col_t *col, json_t *v) {
    char num[48];
    if (v && !strcmp(col->type, "string")) {
        kb_crd_text_cell(c, v);
    } else if (json_is_number(v) && !strcmp(col->type, "integer")) {
        kb_ktable__int(c, json_is_integer(v) ? (long long)json_integer_value(v) : (long long)json_real_value(v));
    } else if (json_is_number(v) && !strcmp(col->type, "number")) {
        kb_crd_float(json_number_value(v), true, num, sizeof(num));
        kb_ktable__raw(c, num);
    } else if (json_is_boolean(v) && !strcmp(col->type, "boolean")) {
        kb_ktable__raw(c, json_is_true(v) ? "true" : "false");
    } else if (json_is_string(v) && !strcmp(col->type, "date")) {
        const char *ts = json_string_value(v);
        if (*ts && !kb_ktable__time(ts))
            kb_ktable__str(c, "<invalid>");
        else
            kb_ktable__age(c, ts);
    } else {
        kb_ktable__raw(c, "null");
    }
}

static void kb_crd_print(kb_ktable_cells_t *c, json_t *o) {
    const kb_ktable_kind_t *kind = c->kind;
    kb_ktable__str(c, kb_ktable__s(o, "metadata.name"));
    for (size_t i = 1; i < kind->n_cols; i++) {
        const kb_ktable_jp_t *jp = kind->paths[i - 1];
        kb_crd_cell(c, &kind->cols[i], jp->bad ? NULL : kb_jp_first(o, jp->steps, jp->n));
    }
}

/* ---- learning -------------------------------------------------------------------------- */

#define KB_CRD_LEARNED_MAX 256
static kb_ktable_kind_t *kb_crd_learned[KB_CRD_LEARNED_MAX];
static atomic_size_t kb_crd_n_learned;  /* rows published: readers take no lock */
static pthread_mutex_t kb_crd_mtx = PTHREAD_MUTEX_INITIALIZER; /* serializes appends (leaf) */

const kb_ktable_kind_t *kb_ktable__learned(const char *group, const char *resource) {
    for (size_t i = atomic_load(&kb_crd_n_learned); i-- > 0;) /* the latest read wins */
        if (!strcmp(kb_crd_learned[i]->group, group) && !strcmp(kb_crd_learned[i]->resource, resource))
            return kb_crd_learned[i];
    return NULL;
}

void kb_ktable__crd_kind_free(kb_ktable_kind_t *kind) {
    if (!kind)
        return;
    kb_ktable_col_t *cols = (kb_ktable_col_t *)kind->cols;
    for (size_t i = 0; i < kind->n_cols; i++) {
        if (i) {
            free((char *)cols[i].name);
            free((char *)cols[i].type);
            free((char *)cols[i].format);
            free((char *)cols[i].description);
            kb_jp_free((kb_ktable_jp_t *)kind->paths[i - 1]);
        }
    }
    free(cols);
    free((void *)kind->paths);
    free((char *)kind->group);
    free((char *)kind->resource);
    free(kind);
}

/* Column i (≥ 1) of kind from one additionalPrinterColumns entry. */
static void kb_crd_column(kb_ktable_kind_t *kind, size_t i, json_t *col) {
    kb_ktable_col_t *cols = (kb_ktable_col_t *)kind->cols;
    const kb_ktable_jp_t **paths = (const kb_ktable_jp_t **)kind->paths;
    const char *path = json_string_value(json_object_get(col, "jsonPath"));
    const char *desc = json_string_value(json_object_get(col, "description"));
    const char *name = json_string_value(json_object_get(col, "name"));
    char text[1024];
    snprintf(text, sizeof(text), "Custom resource definition column (in JSONPath format): %s", path ? path : "");
    const char *type = json_string_value(json_object_get(col, "type"));
    const char *format = json_string_value(json_object_get(col, "format"));
    cols[i].name = kb_strdup(name ? name : "");
    cols[i].type = kb_strdup(type ? type : "string");
    cols[i].format = kb_strdup(format ? format : "");
    cols[i].priority = (int)json_integer_value(json_object_get(col, "priority"));
    cols[i].description = kb_strdup(desc && *desc ? desc : text);
    paths[i - 1] = kb_jp_parse(path ? path : "");
    if (paths[i - 1]->bad)
        KB_WARN("ktable", "%s.%s: column %s has a JSONPath kbridge does not read (%s): its cells are empty",
                kind->resource, kind->group, cols[i].name, path ? path : "");
}

kb_ktable_kind_t *kb_ktable__crd_kind_new(const char *group, const char *resource, json_t *columns) {
    size_t n = json_array_size(columns);
    kb_ktable_kind_t *kind = kb_calloc(1, sizeof(*kind));
    kind->group = kb_strdup(group);
    kind->resource = kb_strdup(resource);
    kind->n_cols = 1 + (n ? n : 1);
    kind->cols = kb_calloc(kind->n_cols, sizeof(kb_ktable_col_t));
    kind->paths = kb_calloc(kind->n_cols, sizeof(*kind->paths));
    kind->print = kb_crd_print;
    ((kb_ktable_col_t *)kind->cols)[0] = (kb_ktable_col_t){"Name", "string", "name", 0, kb_crd_name_desc};
    if (n) {
        for (size_t i = 0; i < n; i++)
            kb_crd_column(kind, i + 1, json_array_get(columns, i));
    } else { /* the server's default: Age */
        json_t *age = json_pack("{s:s,s:s,s:s,s:s}", "name", "Age", "type", "date", "description", kb_crd_age_desc,
                                "jsonPath", ".metadata.creationTimestamp");
        kb_crd_column(kind, 1, age);
        json_decref(age);
    }
    return kind;
}

void kb_ktable_learn_crd(const char *group, const char *resource, json_t *columns) {
    kb_ktable_kind_t *kind = kb_ktable__crd_kind_new(group, resource, columns);
    pthread_mutex_lock(&kb_crd_mtx);
    size_t at = atomic_load(&kb_crd_n_learned);
    if (at < KB_CRD_LEARNED_MAX) {
        kb_crd_learned[at] = kind;
        atomic_store(&kb_crd_n_learned, at + 1);
    }
    pthread_mutex_unlock(&kb_crd_mtx);
    if (at >= KB_CRD_LEARNED_MAX)
        kb_ktable__crd_kind_free(kind);
}
