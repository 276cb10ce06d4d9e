/* bridge/ktable.h — meta.k8s.io Table output for the Kubernetes API surface.
 *
 * kubectl asks for `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`
 * and prints the cells the server computes. kb_ktable_* writes those Tables
 * (the columns and cell formats the API server prints for the common kinds,
 * its default Name / Created At table for any other) into a kb_buf_t, head,
 * rows and tail apart so a list streams row by row.
 *
 * Thread: any; a kb_ktable_t belongs to one request. Locks: none.
 */
#ifndef KB_BRIDGE_KTABLE_H
#define KB_BRIDGE_KTABLE_H

#include "common/buf.h"

#include <jansson.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kb_ktable_include {
    KB_KTABLE_METADATA, /* row.object = a PartialObjectMetadata (the default) */
    KB_KTABLE_NONE,     /* row.object = null */
    KB_KTABLE_OBJECT    /* row.object = the object itself */
} kb_ktable_include_t;

typedef struct kb_ktable_kind kb_ktable_kind_t;

/* One request's Table settings (caller storage; nothing to free). */
typedef struct kb_ktable {
    const kb_ktable_kind_t *kind; /* the printer of the resource (the default one if none) */
    kb_ktable_include_t include;
    const char *api_version;      /* "meta.k8s.io/v1" or "meta.k8s.io/v1beta1" */
    int64_t now_s;                /* wall clock, seconds since the epoch: AGE is counted to it */
    bool any_row;                 /* a row was written (comma before the next) */
    bool columns_sent;            /* a Table with the columns was written (a watch's next ones carry null) */
} kb_ktable_t;

/* Does this Accept header ask for a Table before plain JSON? If so, set up t
 * for group/resource ("" for the core group) and includeObject (NULL = Metadata).
 * Returns false (t untouched) for JSON. *bad is set when includeObject holds
 * an unknown value (the caller answers 400). */
bool kb_ktable_wanted(const char *accept, const char *include, const char *group, const char *resource,
                      kb_ktable_t *t, bool *bad);

/* {"kind":"Table",…,"rows":[ — rv, cont (NULL or "" = none), remaining (< 0 = none). */
void kb_ktable_head(kb_ktable_t *t, kb_buf_t *o, const char *rv, const char *cont, long remaining);
/* One row for the object's JSON (a comma first if a row came before). */
void kb_ktable_row(kb_ktable_t *t, kb_buf_t *o, const char *obj, size_t obj_len);
/* ]} (no newline). */
void kb_ktable_tail(kb_buf_t *o);
/* A whole Table of one object (a get, or one watch event's object, a
 * bookmark's too); its resourceVersion is the object's. */
void kb_ktable_one(kb_ktable_t *t, kb_buf_t *o, const char *obj, size_t obj_len);

/* Print group/resource from now on as its CRD says: columns is the served
 * version's additionalPrinterColumns (NULL or empty: the server's default,
 * Age). The printer stays valid until exit; a later call replaces it for
 * new requests. Thread: any. Locks: a leaf mutex for the append. */
void kb_ktable_learn_crd(const char *group, const char *resource, json_t *columns);
/* Is group one kube-apiserver serves itself (not a CRD's)? */
bool kb_ktable_group_is_builtin(const char *group);

/* The API server's HumanDuration of d_s seconds ("45s", "5m10s", "3h20m", "2d4h", "3y12d"). */
void kb_ktable_duration(int64_t d_s, char *out, size_t size);

#endif
