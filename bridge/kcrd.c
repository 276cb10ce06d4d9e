/* bridge/kcrd.c — read a CRD and learn its columns and selectable fields
 * (kcrd.h).
 *
 * DESIGN. Why read the CRD and not discovery: discovery names a kind and its
 * scope but not its printer columns or selectable fields; only the CRD holds
 * them, per version. It is read once when the Kubernetes API surface first
 * serves the resource (bridge/kapi.c's discoverer, in the background, so
 * start is not delayed; again for an informer a reload adds), not watched: a
 * CRD's columns change rarely, and a restart reads it again. Until it is
 * read, and when it cannot be, the resource has the defaults — which is what
 * a client saw before kbridge knew about CRDs, never an error.
 */
#include "bridge/kcrd.h"

#include "bridge/ktable.h"
#include "common/fieldsel.h"
#include "common/log.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define KB_KCRD_TIMEOUT_S 10
#define KB_KCRD_MAX_BODY (8u << 20)

/* The entry of spec.versions named version, or NULL. */
static json_t *kb_kcrd_version(json_t *crd, const char *version) {
    json_t *versions = json_object_get(json_object_get(crd, "spec"), "versions");
    for (size_t i = 0; i < json_array_size(versions); i++) {
        json_t *v = json_array_get(versions, i);
        const char *name = json_string_value(json_object_get(v, "name"));
        if (name && !strcmp(name, version))
            return v;
    }
    return NULL;
}

/* Learn the version's columns and selectable fields from the parsed CRD. */
static bool kb_kcrd_apply(json_t *crd, const char *group, const char *version, const char *resource) {
    json_t *v = kb_kcrd_version(crd, version);
    if (!v)
        return false;
    const char *scope = json_string_value(json_object_get(json_object_get(crd, "spec"), "scope"));
    json_t *cols = json_object_get(v, "additionalPrinterColumns");
    json_t *sel = json_object_get(v, "selectableFields");
    const char *paths[KB_FIELDS_LEARN_MAX_PATHS];
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(sel) && n < KB_FIELDS_LEARN_MAX_PATHS; i++) {
        const char *p = json_string_value(json_object_get(json_array_get(sel, i), "jsonPath"));
        if (p && *p)
            paths[n++] = p;
    }
    kb_ktable_learn_crd(group, resource, cols);
    kb_fields_kind_learn(group, resource, !scope || strcmp(scope, "Cluster"), paths, n);
    KB_INFO("kcrd", "%s.%s/%s: read its CRD: %zu printer columns, %zu selectable fields", resource, group,
            version, json_array_size(cols), n);
    return true;
}

bool kb_kcrd_learn(kb_apiclient_t *api, const char *group, const char *version, const char *resource,
                   const atomic_bool *stop) {
    if (kb_ktable_group_is_builtin(group))
        return false;
    char path[600];
    snprintf(path, sizeof(path), "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/%s.%s", resource, group);
    kb_buf_t body = KB_BUF_INIT;
    kb_api_response_t resp;
    kb_apiclient_get(api, path, NULL, NULL, &body, KB_KCRD_MAX_BODY, KB_KCRD_TIMEOUT_S, stop, &resp);
    json_t *crd = resp.err == KB_OK && resp.status == 200 ? json_loadb(body.data, body.len, 0, NULL) : NULL;
    bool ok = crd && kb_kcrd_apply(crd, group, version, resource);
    if (!ok && !atomic_load(stop))
        KB_WARN("kcrd", "%s.%s: cannot read its CRD (GET %s: HTTP %ld%s%s%s); Table output has Name and Age only "
                "and field selectors take metadata.name and metadata.namespace only", resource, group, path,
                resp.status, resp.errmsg[0] ? ": " : "", resp.errmsg,
                resp.status == 403 ? ": grant get on customresourcedefinitions.apiextensions.k8s.io" :
                resp.status == 200 ? ": the CRD does not serve this version" : "");
    json_decref(crd);
    kb_buf_fini(&body);
    return ok;
}
