/* bridge/kcrd.h — what a custom resource's CRD says about serving it.
 *
 * kube-apiserver prints a custom resource with the columns of its CRD's
 * additionalPrinterColumns and selects it by the CRD's selectableFields;
 * kbridge learns both by reading the CRD (apiextensions.k8s.io/v1
 * customresourcedefinitions/<plural>.<group>, the "get" verb) and hands them
 * to the Table writer (bridge/ktable.h) and the field selectors
 * (common/fieldsel.h). Thread: any (a blocking request). Locks: none held.
 */
#ifndef KB_BRIDGE_KCRD_H
#define KB_BRIDGE_KCRD_H

#include "informer/apiclient.h"

#include <stdatomic.h>
#include <stdbool.h>

/* Read group/resource's CRD and learn the served version's columns and
 * selectable fields. A group kube-apiserver serves itself is skipped. When
 * the CRD cannot be read (no CRD: an aggregated API; 403: no RBAC; a
 * transport error) one WARN says so and the kind keeps the defaults: Name
 * and Age, metadata.name and metadata.namespace. Returns true once learned. */
bool kb_kcrd_learn(kb_apiclient_t *api, const char *group, const char *version, const char *resource,
                   const atomic_bool *stop);

#endif
