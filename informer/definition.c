/* informer/definition.c — an informer's definition as canonical text (see
 * definition.h).
 *
 * Design note. The definition is text, not a hash: the stored form says what
 * the informer was, and a change is reported key by key (old -> new) from
 * the two texts alone, without the old config. Each value is a JSON literal,
 * so no selector or field path can break a line or fake a key. A key missing
 * from one side (a definition written by another kbridge version) counts as
 * changed: relisting once is cheap, resuming under a wrong definition is not —
 * except the server, which kbridge did not always store: a text without it is
 * taken to be of the server configured now (kb_definition_adopt), so an
 * upgrade does not relist every informer.
 */
#include "informer/definition.h"

#include "common/alloc.h"
#include "informer/decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The keys that shape an object's bytes rather than choose objects. */
static const char *const kb_def_reshaping[] = {"drop_fields", "redact_fields", "keep_fields", "redact_base64",
                                                "resend"};

static void kb_def_str(kb_buf_t *b, const char *key, const char *v) {
    kb_buf_appendf(b, "%s=", key);
    kb_buf_append_json_str(b, v ? v : "", v ? strlen(v) : 0);
    kb_buf_append_char(b, '\n');
}

static int kb_def_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* strs[0..n) as a JSON array; sorted when its order means nothing. */
static void kb_def_strs(kb_buf_t *b, const char *key, const char *const *strs, size_t n, bool sorted) {
    const char **v = kb_calloc(n ? n : 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = strs[i];
    if (sorted)
        qsort(v, n, sizeof(*v), kb_def_cmp);
    kb_buf_appendf(b, "%s=[", key);
    for (size_t i = 0; i < n; i++) {
        if (i)
            kb_buf_append_char(b, ',');
        kb_buf_append_json_str(b, v[i], strlen(v[i]));
    }
    kb_buf_append_str(b, "]\n");
    free(v);
}

static void kb_def_list(kb_buf_t *b, const char *key, const kb_strlist_t *l, bool sorted) {
    kb_def_strs(b, key, (const char *const *)l->v, l->n, sorted);
}

/* The base64 fields a redaction writes base64 into (informer/decode.h), only
 * where one can: a state_dir written before redactions kept types lacks the
 * key, so the Secrets it holds with "<redacted>" in data are sent again. */
static void kb_def_redact_base64(kb_buf_t *b, const kb_config_informer_t *conf) {
    size_t n;
    const char *const *paths = kb_transform_base64_fields(conf->group, conf->resource, &n);
    if (!n || !conf->redact_fields.n)
        return;
    kb_def_strs(b, "redact_base64", paths, n, false);
}

char *kb_definition_text(const kb_config_informer_t *conf, const char *server) {
    kb_buf_t b = KB_BUF_INIT;
    kb_def_str(&b, "server", server); /* first: kb_definition_adopt puts it before a text that lacks it */
    kb_def_str(&b, "group", conf->group);
    kb_def_str(&b, "version", conf->version);
    kb_def_str(&b, "resource", conf->resource);
    kb_def_list(&b, "namespaces", &conf->namespaces, true);
    kb_def_str(&b, "label_selector", conf->label_selector);
    kb_def_str(&b, "field_selector", conf->field_selector);
    kb_def_list(&b, "drop_fields", &conf->drop_fields, true);
    kb_def_list(&b, "redact_fields", &conf->redact_fields, true);
    kb_def_list(&b, "keep_fields", &conf->keep_fields, true);
    kb_def_redact_base64(&b, conf);
    kb_def_str(&b, "compaction", conf->compaction == KB_COMPACTION_LATEST ? "latest" : "none");
    return kb_buf_steal(&b, NULL);
}

/* The value of key in a definition text (*len bytes), or NULL if absent. */
static const char *kb_def_value(const char *text, const char *key, size_t key_len, size_t *len) {
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n > key_len && p[key_len] == '=' && !memcmp(p, key, key_len)) {
            *len = n - key_len - 1;
            return p + key_len + 1;
        }
        p = nl ? nl + 1 : NULL;
    }
    return NULL;
}

static bool kb_def_reshapes(const char *key, size_t key_len) {
    for (size_t i = 0; i < KB_ARRAY_LEN(kb_def_reshaping); i++)
        if (strlen(kb_def_reshaping[i]) == key_len && !memcmp(kb_def_reshaping[i], key, key_len))
            return true;
    return false;
}

/* Compare key's values in old and now; a difference is appended to what. */
static unsigned kb_def_key(const char *key, size_t key_len, const char *old, const char *now, kb_buf_t *what) {
    size_t ol = 0, nl = 0;
    const char *ov = kb_def_value(old, key, key_len, &ol), *nv = kb_def_value(now, key, key_len, &nl);
    if (ov && nv && ol == nl && !memcmp(ov, nv, ol))
        return 0;
    if (what->len)
        kb_buf_append_str(what, "; ");
    kb_buf_appendf(what, "%.*s %.*s -> %.*s", (int)key_len, key, ov ? (int)ol : 6, ov ? ov : "(none)",
                   nv ? (int)nl : 6, nv ? nv : "(none)");
    bool server = key_len == 6 && !memcmp(key, "server", 6);
    return KB_DEF_CHANGED | (kb_def_reshapes(key, key_len) ? KB_DEF_RESHAPED : 0) | (server ? KB_DEF_SERVER : 0);
}

char *kb_definition_adopt(const char *stored, const char *now) {
    static const char key[] = "server";
    size_t len;
    const char *v = kb_def_value(now, key, sizeof(key) - 1, &len);
    if (!v || kb_def_value(stored, key, sizeof(key) - 1, &len))
        return NULL;
    kb_buf_t b = KB_BUF_INIT;
    kb_buf_appendf(&b, "%s=%.*s\n%s", key, (int)len, v, stored);
    return kb_buf_steal(&b, NULL);
}

unsigned kb_definition_diff(const char *old, const char *now, kb_buf_t *what) {
    if (!strcmp(old, now))
        return 0;
    unsigned flags = 0;
    size_t start = what->len;
    /* Every key of now, then the keys only old has. */
    for (int side = 0; side < 2; side++) {
        const char *text = side ? old : now;
        for (const char *p = text; p && *p;) {
            const char *nl = strchr(p, '\n'), *eq = strchr(p, '=');
            size_t n = nl ? (size_t)(nl - p) : strlen(p);
            size_t key_len = eq && eq < p + n ? (size_t)(eq - p) : n;
            size_t dummy;
            if (!side || !kb_def_value(now, p, key_len, &dummy))
                flags |= kb_def_key(p, key_len, old, now, what);
            p = nl ? nl + 1 : NULL;
        }
    }
    /* Texts that differ only in how they are laid out still differ. */
    if (!flags) {
        kb_buf_append_str(what, what->len > start ? "; " : "");
        kb_buf_append_str(what, "definition text differs");
        flags = KB_DEF_CHANGED;
    }
    return flags;
}

/* Design: a changed informer of the same name would open its state_dir
 * directory while the running one still holds it (LMDB, the journal), so with
 * state_dir the change waits for a restart, which converges as above; an
 * informer of a new name — or one a reload removed, coming back — opens its
 * own directory, which says where it resumes. */
kb_def_reload_t kb_definition_reload(const kb_config_informer_t *const *running, size_t n,
                                     const kb_config_informer_t *nc, bool state_dir, size_t *keep, char *what,
                                     size_t what_size) {
    bool same_name = false;
    for (size_t j = 0; j < n; j++) {
        char why[128];
        if (kb_config_diff_informer(running[j], nc, why, sizeof(why)) <= KB_RELOAD_IN_PLACE) {
            *keep = j;
            return KB_DEF_RELOAD_KEEP;
        }
        if (!strcmp(running[j]->name, nc->name)) {
            same_name = true;
            if (what && what_size)
                snprintf(what, what_size, "%s", why);
        }
    }
    if (!same_name)
        return KB_DEF_RELOAD_ADD;
    return state_dir ? KB_DEF_RELOAD_REFUSE : KB_DEF_RELOAD_REBUILD;
}
