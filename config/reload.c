/* config/reload.c — what a SIGHUP must do, derived from the key table.
 *
 * Design: the running and the new config are compared row by row over the
 * same table the loader fills from (config/table.c), each value by its
 * type, and each row's reload flag says what a difference costs: KB_CF_LIVE
 * applies in place, KB_CF_RESTART refuses the reload, no flag rebuilds the
 * informer or sink the key belongs to (and, outside those lists, needs a
 * restart — the safe side for a key nobody thought about). There is no
 * hand-written equality to forget a key in: that is how a changed
 * keep_fields used to be ignored by a reload.
 *
 * Values the loader derives from keys (file_mode_bits, the Secret protections
 * added to drop_fields and redact_fields)
 * and the lines where groups start are not keys, so they never count.
 */
#include "config/config_int.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static bool kb_str_same(const char *a, const char *b) {
    return !strcmp(a ? a : "", b ? b : "");
}

static bool kb_list_same(const kb_strlist_t *a, const kb_strlist_t *b) {
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (!kb_str_same(a->v[i], b->v[i]))
            return false;
    return true;
}

static bool kb_props_same(const kb_kv_t *a, size_t na, const kb_kv_t *b, size_t nb) {
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (!kb_str_same(a[i].key, b[i].key) || !kb_str_same(a[i].value, b[i].value))
            return false;
    return true;
}

/* Does row k hold the same value in a and b (both bases of its section)? */
static bool kb_value_same(const kb_ckey_t *k, const char *a, const char *b) {
    const void *x = a + k->off, *y = b + k->off;
    bool seen_same = !(k->flags & KB_CF_SEEN) || *(const bool *)(a + k->off2) == *(const bool *)(b + k->off2);
    switch (k->type) {
    case KB_CT_STRING:
    case KB_CT_CHOICE: return kb_str_same(*(char *const *)x, *(char *const *)y);
    case KB_CT_INT:
    case KB_CT_ENUM: return *(const int *)x == *(const int *)y;
    case KB_CT_INT64: return *(const int64_t *)x == *(const int64_t *)y;
    case KB_CT_FLOAT: return *(const double *)x == *(const double *)y;
    case KB_CT_BOOL: return *(const bool *)x == *(const bool *)y;
    case KB_CT_STRLIST: return seen_same && kb_list_same(x, y);
    case KB_CT_TYPES: return seen_same && *(const uint32_t *)x == *(const uint32_t *)y;
    case KB_CT_PROPS:
        return kb_props_same(*(kb_kv_t *const *)x, *(const size_t *)(a + k->off2), *(kb_kv_t *const *)y,
                             *(const size_t *)(b + k->off2));
    case KB_CT_GROUP:
    case KB_CT_LIST: break;
    }
    return true;
}

/* The cost of a change to row k: in_list for rows of informers[] / sinks[]. */
static kb_reload_t kb_row_cost(const kb_ckey_t *k, bool in_list) {
    if (k->flags & KB_CF_LIVE)
        return KB_RELOAD_IN_PLACE;
    if (k->flags & KB_CF_RESTART || !in_list)
        return KB_RELOAD_RESTART;
    return KB_RELOAD_REBUILD;
}

/* Walk sec's rows (groups recursively; lists are compared by the caller),
 * keeping the highest cost and the name of the first key that has it. */
static kb_reload_t kb_section_diff(const kb_csection_t *sec, const char *a, const char *b, bool in_list,
                                   const char *prefix, char *what, size_t what_size) {
    kb_reload_t worst = KB_RELOAD_SAME;
    for (size_t i = 0; i < sec->n_keys; i++) {
        const kb_ckey_t *k = &sec->keys[i];
        kb_reload_t cost = KB_RELOAD_SAME;
        char sub[128];
        if (k->type == KB_CT_LIST)
            continue;
        if (k->type == KB_CT_GROUP) {
            char group[128];
            snprintf(group, sizeof(group), "%s%s.", prefix, k->name);
            cost = kb_section_diff(k->sub, a + k->off, b + k->off, in_list, group, sub, sizeof(sub));
        } else if (!kb_value_same(k, a, b)) {
            cost = kb_row_cost(k, in_list);
            snprintf(sub, sizeof(sub), "%s%s", prefix, k->name);
        }
        if (cost > worst) {
            worst = cost;
            if (what)
                snprintf(what, what_size, "%s", sub);
        }
    }
    return worst;
}

kb_reload_t kb_config_diff_global(const kb_config_t *a, const kb_config_t *b, char *what, size_t what_size) {
    if (what && what_size)
        what[0] = '\0';
    return kb_section_diff(&kb_config__root, (const char *)a, (const char *)b, false, "", what, what_size);
}

kb_reload_t kb_config_diff_informer(const kb_config_informer_t *a, const kb_config_informer_t *b, char *what,
                                    size_t what_size) {
    if (what && what_size)
        what[0] = '\0';
    return kb_section_diff(&kb_config__sec_informer, (const char *)a, (const char *)b, true, "", what, what_size);
}

kb_reload_t kb_config_diff_sink(const kb_config_sink_t *a, const kb_config_sink_t *b, char *what, size_t what_size) {
    if (what && what_size)
        what[0] = '\0';
    return kb_section_diff(&kb_config__sec_sink, (const char *)a, (const char *)b, true, "", what, what_size);
}

const char *kb_reload_name(kb_reload_t r) {
    static const char *const names[] = {"unchanged", "changed in place", "rebuilt", "needs a restart"};
    return (unsigned)r < sizeof(names) / sizeof(names[0]) ? names[r] : "?";
}
