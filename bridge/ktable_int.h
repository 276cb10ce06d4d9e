/* bridge/ktable_int.h — between the Table writer (ktable.c) and the kinds'
 * printers (ktable_kinds.c). Not for other modules. */
#ifndef KB_BRIDGE_KTABLE_INT_H
#define KB_BRIDGE_KTABLE_INT_H

#include "bridge/ktable.h"

#include <jansson.h>

/* One column as the API server defines it (priority 1: shown by -o wide only). */
typedef struct kb_ktable_col {
    const char *name, *type, *format; /* format NULL: none */
    int priority;
    const char *description;
} kb_ktable_col_t;

typedef struct kb_ktable_jp kb_ktable_jp_t; /* a CRD column's parsed JSONPath (ktable_crd.c) */

/* The cells of one row being written. */
typedef struct kb_ktable_cells {
    const kb_ktable_kind_t *kind; /* the printer writing them */
    kb_buf_t *o;
    int64_t now_s;
    bool first;                /* no cell written yet */
    const char *completed;     /* set by a printer: the row's Completed condition reason (a pod's phase) */
    const char *completed_msg;
} kb_ktable_cells_t;

typedef void (*kb_ktable_print_fn)(kb_ktable_cells_t *c, json_t *obj);

struct kb_ktable_kind {
    const char *group, *resource;  /* resource NULL ends the table */
    const kb_ktable_col_t *cols;
    size_t n_cols;
    kb_ktable_print_fn print;
    const kb_ktable_jp_t *const *paths; /* a learned CRD's: the JSONPath of cols[i + 1]; NULL otherwise */
};

/* A printer for a CRD's additionalPrinterColumns (as kb_ktable_learn_crd
 * takes them), not learned: for tests and the fuzz target. Free with
 * kb_ktable__crd_kind_free (NULL is a no-op). */
kb_ktable_kind_t *kb_ktable__crd_kind_new(const char *group, const char *resource, json_t *columns);
void kb_ktable__crd_kind_free(kb_ktable_kind_t *kind);

/* The printer learned from group/resource's CRD (kb_ktable_learn_crd), or NULL. */
const kb_ktable_kind_t *kb_ktable__learned(const char *group, const char *resource);

/* The printer of group/resource, or the default (Name, Created At). */
const kb_ktable_kind_t *kb_ktable__kind(const char *group, const char *resource);

/* Cells and field reads (ktable.c). A missing field reads as "" or 0. */
void kb_ktable__str(kb_ktable_cells_t *c, const char *s);
void kb_ktable__int(kb_ktable_cells_t *c, long long v);
void kb_ktable__raw(kb_ktable_cells_t *c, const char *json); /* a JSON token as is: null, true, 1.5 */
void kb_ktable__age(kb_ktable_cells_t *c, const char *timestamp); /* "<unknown>" when unset */
void kb_ktable__since(const kb_ktable_cells_t *c, const char *timestamp, char *out, size_t size);
json_t *kb_ktable__at(json_t *o, const char *path); /* "spec.nodeName"; NULL when absent */
/* obj's keys sorted by byte order (valid while obj is; free the array), *n of them. */
const char **kb_ktable__sorted_keys(json_t *obj, size_t *n);
const char *kb_ktable__s(json_t *o, const char *path);
long long kb_ktable__i(json_t *o, const char *path);
int64_t kb_ktable__time(const char *timestamp);     /* RFC 3339 → seconds since the epoch; 0 if unset */

#endif
