/* bridge/ktable_kinds.c — the columns and cells the API server prints for
 * each kind (the facts of its table printers, written here afresh).
 *
 * DESIGN. One table row per kind: group, resource, columns, printer. A
 * printer writes every column's cell, wide ones included, in column order;
 * a field the object lacks reads as the zero value, as the server's typed
 * decoding would make it. Kinds not listed get the server's default table.
 */
#include "bridge/ktable_int.h"

#include "common/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_COL(n, t, p, d) {n, t, NULL, p, d}
#define KB_COL_NAME {"Name", "string", "name", 0, "The object's name (metadata.name)."}
#define KB_COL_AGE KB_COL("Age", "string", 0, "Time since metadata.creationTimestamp.")
#define KB_COL_CONTAINERS KB_COL("Containers", "string", 1, "Names of each container in the template.")
#define KB_COL_IMAGES KB_COL("Images", "string", 1, "Images referenced by each container in the template.")
#define KB_COL_SELECTOR KB_COL("Selector", "string", 1, "The label selector of the pods.")
#define KB_N(a) (sizeof(a) / sizeof((a)[0]))

#define S(o, p) kb_ktable__s(o, p)
#define I(o, p) kb_ktable__i(o, p)
#define AT(o, p) kb_ktable__at(o, p)

/* ---- shared cell formats ------------------------------------------------------- */

/* Append s to b with sep before it unless b is empty. */
static void kb_tk_join(kb_buf_t *b, const char *sep, const char *s) {
    if (b->len)
        kb_buf_append_str(b, sep);
    kb_buf_append_str(b, s);
}

static void kb_tk_cell_buf(kb_ktable_cells_t *c, kb_buf_t *b, const char *if_empty) {
    kb_ktable__str(c, b->len ? b->data : if_empty);
    kb_buf_fini(b);
}

typedef struct kb_tk_req {
    const char *key;
    char *text;
} kb_tk_req_t;

static int kb_tk_req_cmp(const void *a, const void *b) {
    return strcmp(((const kb_tk_req_t *)a)->key, ((const kb_tk_req_t *)b)->key);
}

static int kb_tk_str_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* One matchExpressions entry as a selector requirement ("k in (a,b)", "!k"). */
static char *kb_tk_expr(json_t *e) {
    const char *key = S(e, "key"), *op = S(e, "operator");
    json_t *vals = AT(e, "values");
    kb_buf_t b = KB_BUF_INIT;
    if (!strcmp(op, "Exists") || !strcmp(op, "DoesNotExist")) {
        kb_buf_appendf(&b, "%s%s", *op == 'D' ? "!" : "", key);
        return kb_buf_steal(&b, NULL);
    }
    size_t n = json_array_size(vals);
    const char **v = kb_calloc(n ? n : 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = json_string_value(json_array_get(vals, i)) ? json_string_value(json_array_get(vals, i)) : "";
    qsort(v, n, sizeof(*v), kb_tk_str_cmp);
    kb_buf_appendf(&b, "%s %s (", key, !strcmp(op, "In") ? "in" : "notin");
    for (size_t i = 0; i < n; i++)
        kb_buf_appendf(&b, "%s%s", i ? "," : "", v[i]);
    kb_buf_append_char(&b, ')');
    free(v);
    return kb_buf_steal(&b, NULL);
}

/* A LabelSelector as the server prints it: requirements sorted by key;
 * none at all is "<none>", an empty one (everything) "". */
static void kb_tk_selector(kb_ktable_cells_t *c, json_t *sel) {
    if (!json_is_object(sel)) {
        kb_ktable__str(c, "<none>");
        return;
    }
    json_t *ml = AT(sel, "matchLabels"), *me = AT(sel, "matchExpressions");
    size_t n = json_object_size(ml) + json_array_size(me), i = 0;
    kb_tk_req_t *r = kb_calloc(n ? n : 1, sizeof(*r));
    const char *k;
    json_t *v;
    json_object_foreach(ml, k, v) {
        kb_buf_t b = KB_BUF_INIT;
        kb_buf_appendf(&b, "%s=%s", k, json_string_value(v) ? json_string_value(v) : "");
        r[i].key = k;
        r[i++].text = kb_buf_steal(&b, NULL);
    }
    for (size_t j = 0; j < json_array_size(me); j++) {
        r[i].key = S(json_array_get(me, j), "key");
        r[i++].text = kb_tk_expr(json_array_get(me, j));
    }
    qsort(r, n, sizeof(*r), kb_tk_req_cmp);
    kb_buf_t b = KB_BUF_INIT;
    for (i = 0; i < n; i++) {
        kb_tk_join(&b, ",", r[i].text);
        free(r[i].text);
    }
    free(r);
    kb_tk_cell_buf(c, &b, "");
}

/* A string map as "k=v,…" sorted by key, "<none>" when empty (labels.FormatLabels). */
static void kb_tk_labels(kb_ktable_cells_t *c, json_t *m) {
    size_t n, i;
    const char **keys = kb_ktable__sorted_keys(m, &n);
    kb_buf_t b = KB_BUF_INIT;
    for (i = 0; i < n; i++) {
        const char *val = json_string_value(json_object_get(m, keys[i]));
        if (b.len)
            kb_buf_append_char(&b, ',');
        kb_buf_appendf(&b, "%s=%s", keys[i], val ? val : "");
    }
    free(keys);
    kb_tk_cell_buf(c, &b, "<none>");
}

/* The template's container names and images, each joined by ",". */
static void kb_tk_containers(kb_ktable_cells_t *c, json_t *pod_spec) {
    json_t *cs = AT(pod_spec, "containers");
    kb_buf_t names = KB_BUF_INIT, images = KB_BUF_INIT;
    for (size_t i = 0; i < json_array_size(cs); i++) {
        if (i) {
            kb_buf_append_char(&names, ',');
            kb_buf_append_char(&images, ',');
        }
        kb_buf_append_str(&names, S(json_array_get(cs, i), "name"));
        kb_buf_append_str(&images, S(json_array_get(cs, i), "image"));
    }
    kb_tk_cell_buf(c, &names, "");
    kb_tk_cell_buf(c, &images, "");
}

/* Up to 3 strings then " + N more...", "<unset>" when none (EndpointSlice). */
typedef struct kb_tk_list {
    kb_buf_t b;
    size_t shown, count;
} kb_tk_list_t;

static void kb_tk_list_add(kb_tk_list_t *l, const char *s) {
    if (l->shown < 3) {
        kb_tk_join(&l->b, ",", s);
        l->shown++;
    }
    l->count++;
}

static void kb_tk_list_cell(kb_ktable_cells_t *c, kb_tk_list_t *l) {
    if (l->count > 3)
        kb_buf_appendf(&l->b, " + %zu more...", l->count - 3);
    kb_tk_cell_buf(c, &l->b, "<unset>");
}

static bool kb_tk_true_cond(json_t *o, const char *path, const char *type) {
    json_t *conds = AT(o, path);
    for (size_t i = 0; i < json_array_size(conds); i++) {
        json_t *cd = json_array_get(conds, i);
        if (!strcmp(S(cd, "type"), type))
            return !strcmp(S(cd, "status"), "True");
    }
    return false;
}

/* ---- Pod ----------------------------------------------------------------------- */

static const kb_ktable_col_t kb_tk_pod_cols[] = {
    KB_COL_NAME,
    KB_COL("Ready", "string", 0, "Ready containers of all containers."),
    KB_COL("Status", "string", 0, "The pod's aggregate status."),
    KB_COL("Restarts", "string", 0, "Container restarts, with the time since the last one."),
    KB_COL_AGE,
    KB_COL("IP", "string", 1, "The pod's first IP (status.podIPs)."),
    KB_COL("Node", "string", 1, "The node the pod runs on (spec.nodeName)."),
    KB_COL("Nominated Node", "string", 1, "status.nominatedNodeName."),
    KB_COL("Readiness Gates", "string", 1, "True readiness gates of all."),
};

typedef struct kb_tk_pod {
    char reason[128];
    long long restarts, ready, total;
    int64_t last_restart;           /* newest lastState.terminated.finishedAt (s) */
    long long sidecar_restarts;     /* of restartable init containers */
    int64_t sidecar_last;
} kb_tk_pod_t;

static bool kb_tk_sidecar(json_t *spec, const char *name) {
    json_t *ics = AT(spec, "initContainers");
    for (size_t i = 0; i < json_array_size(ics); i++) {
        json_t *ic = json_array_get(ics, i);
        if (!strcmp(S(ic, "name"), name))
            return !strcmp(S(ic, "restartPolicy"), "Always");
    }
    return false;
}

static int64_t kb_tk_finished(json_t *cs) {
    return kb_ktable__time(S(cs, "lastState.terminated.finishedAt"));
}

/* A terminated state's reason, else "<prefix>Signal:N" / "<prefix>ExitCode:N". */
static void kb_tk_terminated(json_t *term, const char *prefix, char *out, size_t size) {
    if (*S(term, "reason"))
        snprintf(out, size, "%s%s", prefix, S(term, "reason"));
    else if (I(term, "signal"))
        snprintf(out, size, "%sSignal:%lld", prefix, I(term, "signal"));
    else
        snprintf(out, size, "%sExitCode:%lld", prefix, I(term, "exitCode"));
}

/* Init containers: restarts, and whether the pod is still initializing (reason set). */
static bool kb_tk_pod_init(kb_tk_pod_t *p, json_t *o) {
    json_t *st = AT(o, "status.initContainerStatuses"), *spec = AT(o, "spec");
    size_t n_init = json_array_size(AT(spec, "initContainers"));
    for (size_t i = 0; i < json_array_size(st); i++) {
        json_t *cs = json_array_get(st, i);
        bool sidecar = kb_tk_sidecar(spec, S(cs, "name"));
        p->restarts += I(cs, "restartCount");
        if (kb_tk_finished(cs) > p->last_restart)
            p->last_restart = kb_tk_finished(cs);
        if (sidecar) {
            p->sidecar_restarts += I(cs, "restartCount");
            if (kb_tk_finished(cs) > p->sidecar_last)
                p->sidecar_last = kb_tk_finished(cs);
        }
        json_t *term = AT(cs, "state.terminated");
        const char *waiting = S(cs, "state.waiting.reason");
        if (term && I(term, "exitCode") == 0)
            continue;
        if (sidecar && json_is_true(AT(cs, "started"))) {
            p->ready += json_is_true(AT(cs, "ready"));
            continue;
        }
        if (term)
            kb_tk_terminated(term, "Init:", p->reason, sizeof(p->reason));
        else if (*waiting && strcmp(waiting, "PodInitializing"))
            snprintf(p->reason, sizeof(p->reason), "Init:%s", waiting);
        else
            snprintf(p->reason, sizeof(p->reason), "Init:%zu/%zu", i, n_init);
        return true;
    }
    return false;
}

static void kb_tk_pod_containers(kb_tk_pod_t *p, json_t *o) {
    json_t *st = AT(o, "status.containerStatuses");
    bool running = false;
    p->restarts = p->sidecar_restarts;
    p->last_restart = p->sidecar_last;
    for (size_t j = json_array_size(st); j-- > 0;) {
        json_t *cs = json_array_get(st, j);
        p->restarts += I(cs, "restartCount");
        if (kb_tk_finished(cs) > p->last_restart)
            p->last_restart = kb_tk_finished(cs);
        json_t *term = AT(cs, "state.terminated");
        if (*S(cs, "state.waiting.reason")) {
            snprintf(p->reason, sizeof(p->reason), "%s", S(cs, "state.waiting.reason"));
        } else if (term) {
            kb_tk_terminated(term, "", p->reason, sizeof(p->reason));
        } else if (json_is_true(AT(cs, "ready")) && AT(cs, "state.running")) {
            running = true;
            p->ready++;
        }
    }
    if (!strcmp(p->reason, "Completed") && running)
        snprintf(p->reason, sizeof(p->reason), "%s",
                 kb_tk_true_cond(o, "status.conditions", "Ready") ? "Running" : "NotReady");
}

static void kb_tk_pod_status(kb_tk_pod_t *p, json_t *o) {
    json_t *spec = AT(o, "spec"), *conds = AT(o, "status.conditions");
    const char *phase = S(o, "status.phase");
    snprintf(p->reason, sizeof(p->reason), "%s", *S(o, "status.reason") ? S(o, "status.reason") : phase);
    for (size_t i = 0; i < json_array_size(conds); i++) {
        json_t *cd = json_array_get(conds, i);
        if (!strcmp(S(cd, "type"), "PodScheduled") && !strcmp(S(cd, "reason"), "SchedulingGated"))
            snprintf(p->reason, sizeof(p->reason), "SchedulingGated");
    }
    p->total = (long long)json_array_size(AT(spec, "containers"));
    json_t *ics = AT(spec, "initContainers");
    for (size_t i = 0; i < json_array_size(ics); i++)
        p->total += !strcmp(S(json_array_get(ics, i), "restartPolicy"), "Always");
    bool initializing = kb_tk_pod_init(p, o);
    if (!initializing || kb_tk_true_cond(o, "status.conditions", "Initialized"))
        kb_tk_pod_containers(p, o);
    bool deleting = AT(o, "metadata.deletionTimestamp") != NULL;
    if (deleting && !strcmp(S(o, "status.reason"), "NodeLost"))
        snprintf(p->reason, sizeof(p->reason), "Unknown");
    else if (deleting && strcmp(phase, "Succeeded") && strcmp(phase, "Failed"))
        snprintf(p->reason, sizeof(p->reason), "Terminating");
}

static void kb_tk_pod_gates(kb_ktable_cells_t *c, json_t *o) {
    json_t *gates = AT(o, "spec.readinessGates");
    size_t n = json_array_size(gates), yes = 0;
    if (!n) {
        kb_ktable__str(c, "<none>");
        return;
    }
    for (size_t i = 0; i < n; i++)
        yes += kb_tk_true_cond(o, "status.conditions", S(json_array_get(gates, i), "conditionType"));
    char v[48];
    snprintf(v, sizeof(v), "%zu/%zu", yes, n);
    kb_ktable__str(c, v);
}

static void kb_tk_pod(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_pod_t p;
    memset(&p, 0, sizeof(p));
    kb_tk_pod_status(&p, o);
    const char *phase = S(o, "status.phase");
    if (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")) {
        c->completed = *phase == 'S' ? "Succeeded" : "Failed";
        c->completed_msg = *phase == 'S' ? "The pod has completed successfully." : "The pod failed.";
    }
    char ready[48], restarts[64];
    snprintf(ready, sizeof(ready), "%lld/%lld", p.ready, p.total);
    if (p.restarts && p.last_restart) {
        char ago[32];
        kb_ktable_duration(c->now_s - p.last_restart, ago, sizeof(ago));
        snprintf(restarts, sizeof(restarts), "%lld (%s ago)", p.restarts, ago);
    } else {
        snprintf(restarts, sizeof(restarts), "%lld", p.restarts);
    }
    kb_ktable__str(c, S(o, "metadata.name"));
    kb_ktable__str(c, ready);
    kb_ktable__str(c, p.reason);
    kb_ktable__str(c, restarts);
    kb_ktable__age(c, S(o, "metadata.creationTimestamp"));
    const char *ip = S(json_array_get(AT(o, "status.podIPs"), 0), "ip");
    kb_ktable__str(c, *ip ? ip : "<none>");
    kb_ktable__str(c, *S(o, "spec.nodeName") ? S(o, "spec.nodeName") : "<none>");
    kb_ktable__str(c, *S(o, "status.nominatedNodeName") ? S(o, "status.nominatedNodeName") : "<none>");
    kb_tk_pod_gates(c, o);
}

/* ---- Event --------------------------------------------------------------------- */

static const kb_ktable_col_t kb_tk_event_cols[] = {
    KB_COL("Last Seen", "string", 0, "Time since the event was last seen."),
    KB_COL("Type", "string", 0, "Normal or Warning."),
    KB_COL("Reason", "string", 0, "Why the event happened."),
    KB_COL("Object", "string", 0, "The object the event is about (kind/name)."),
    KB_COL("Subobject", "string", 1, "involvedObject.fieldPath."),
    KB_COL("Source", "string", 1, "The component (and host) that reported it."),
    KB_COL("Message", "string", 0, "The event's message."),
    KB_COL("First Seen", "string", 1, "Time since the event was first seen."),
    KB_COL("Count", "string", 1, "How often it happened."),
    {"Name", "string", "name", 1, "The event's name."},
};

static void kb_tk_event_source(kb_ktable_cells_t *c, json_t *o) {
    const char *comp = *S(o, "source.component") ? S(o, "source.component") : S(o, "reportingComponent");
    const char *inst = *S(o, "source.host") ? S(o, "source.host") : S(o, "reportingInstance");
    kb_buf_t b = KB_BUF_INIT;
    if (*comp)
        kb_buf_appendf(&b, *inst ? "%s, %s" : "%s", comp, inst);
    kb_tk_cell_buf(c, &b, "");
}

static void kb_tk_event(kb_ktable_cells_t *c, json_t *o) {
    char first[32], last[32], target[600];
    kb_ktable__since(c, *S(o, "firstTimestamp") ? S(o, "firstTimestamp") : S(o, "eventTime"), first, sizeof(first));
    if (*S(o, "lastTimestamp"))
        kb_ktable__since(c, S(o, "lastTimestamp"), last, sizeof(last));
    else
        snprintf(last, sizeof(last), "%s", first);
    long long count = I(o, "count");
    if (AT(o, "series")) {
        kb_ktable__since(c, S(o, "series.lastObservedTime"), last, sizeof(last));
        count = I(o, "series.count");
    } else if (!count) {
        count = 1;
    }
    char kind[256];
    snprintf(kind, sizeof(kind), "%s", S(o, "involvedObject.kind"));
    for (char *p = kind; *p; p++)
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    const char *name = S(o, "involvedObject.name");
    snprintf(target, sizeof(target), *name ? "%s/%s" : "%s", kind, name);
    const char *msg = S(o, "message");
    size_t len = strlen(msg);
    while (len && strchr(" \t\n\r\v\f", msg[len - 1]))
        len--;
    while (len && strchr(" \t\n\r\v\f", *msg))
        msg++, len--;
    char *trimmed = kb_strndup(msg, len);
    kb_ktable__str(c, last);
    kb_ktable__str(c, S(o, "type"));
    kb_ktable__str(c, S(o, "reason"));
    kb_ktable__str(c, target);
    kb_ktable__str(c, S(o, "involvedObject.fieldPath"));
    kb_tk_event_source(c, o);
    kb_ktable__str(c, trimmed);
    kb_ktable__str(c, first);
    kb_ktable__int(c, count);
    kb_ktable__str(c, S(o, "metadata.name"));
    free(trimmed);
}

/* ---- Node ---------------------------------------------------------------------- */

static const kb_ktable_col_t kb_tk_node_cols[] = {
    KB_COL_NAME,
    KB_COL("Status", "string", 0, "Ready, NotReady or Unknown (and SchedulingDisabled)."),
    KB_COL("Roles", "string", 0, "The node-role.kubernetes.io/ roles."),
    KB_COL_AGE,
    KB_COL("Version", "string", 0, "The kubelet's version."),
    KB_COL("Internal-IP", "string", 1, "The first InternalIP address."),
    KB_COL("External-IP", "string", 1, "The first ExternalIP address."),
    KB_COL("OS-Image", "string", 1, "nodeInfo.osImage."),
    KB_COL("Kernel-Version", "string", 1, "nodeInfo.kernelVersion."),
    KB_COL("Container-Runtime", "string", 1, "nodeInfo.containerRuntimeVersion."),
};

static void kb_tk_node_roles(kb_ktable_cells_t *c, json_t *o) {
    json_t *labels = AT(o, "metadata.labels");
    size_t n = json_object_size(labels), i = 0;
    const char **roles = kb_calloc(n ? n : 1, sizeof(*roles));
    const char *k;
    json_t *v;
    json_object_foreach(labels, k, v) {
        const char *role = !strncmp(k, "node-role.kubernetes.io/", 24) ? k + 24
                           : !strcmp(k, "kubernetes.io/role")          ? json_string_value(v)
                                                                       : NULL;
        bool dup = false;
        for (size_t j = 0; role && j < i; j++)
            dup |= !strcmp(roles[j], role);
        if (role && *role && !dup)
            roles[i++] = role;
    }
    qsort(roles, i, sizeof(*roles), kb_tk_str_cmp);
    kb_buf_t b = KB_BUF_INIT;
    for (size_t j = 0; j < i; j++)
        kb_tk_join(&b, ",", roles[j]);
    free(roles);
    kb_tk_cell_buf(c, &b, "<none>");
}

static void kb_tk_node_addr(kb_ktable_cells_t *c, json_t *o, const char *type) {
    json_t *addrs = AT(o, "status.addresses");
    for (size_t i = 0; i < json_array_size(addrs); i++)
        if (!strcmp(S(json_array_get(addrs, i), "type"), type)) {
            kb_ktable__str(c, S(json_array_get(addrs, i), "address"));
            return;
        }
    kb_ktable__str(c, "<none>");
}

static void kb_tk_or(kb_ktable_cells_t *c, const char *s, const char *if_empty) {
    kb_ktable__str(c, *s ? s : if_empty);
}

/* The kernel version and, when the node reports it, its architecture: "6.12.0 (amd64)". */
static void kb_tk_node_kernel(kb_ktable_cells_t *c, json_t *o) {
    const char *kernel = S(o, "status.nodeInfo.kernelVersion"), *arch = S(o, "status.nodeInfo.architecture");
    char v[512];
    snprintf(v, sizeof(v), *arch ? "%s (%s)" : "%s", *kernel ? kernel : "<unknown>", arch);
    kb_ktable__str(c, v);
}

static void kb_tk_node(kb_ktable_cells_t *c, json_t *o) {
    kb_buf_t st = KB_BUF_INIT;
    json_t *conds = AT(o, "status.conditions");
    for (size_t i = 0; i < json_array_size(conds); i++) {
        json_t *cd = json_array_get(conds, i);
        if (!strcmp(S(cd, "type"), "Ready"))
            kb_buf_append_str(&st, !strcmp(S(cd, "status"), "True") ? "Ready" : "NotReady");
    }
    if (!st.len)
        kb_buf_append_str(&st, "Unknown");
    if (json_is_true(AT(o, "spec.unschedulable")))
        kb_buf_append_str(&st, ",SchedulingDisabled");
    kb_ktable__str(c, S(o, "metadata.name"));
    kb_tk_cell_buf(c, &st, "");
    kb_tk_node_roles(c, o);
    kb_ktable__age(c, S(o, "metadata.creationTimestamp"));
    kb_ktable__str(c, S(o, "status.nodeInfo.kubeletVersion"));
    kb_tk_node_addr(c, o, "InternalIP");
    kb_tk_node_addr(c, o, "ExternalIP");
    kb_tk_or(c, S(o, "status.nodeInfo.osImage"), "<unknown>");
    kb_tk_node_kernel(c, o);
    kb_tk_or(c, S(o, "status.nodeInfo.containerRuntimeVersion"), "<unknown>");
}

/* ---- small kinds --------------------------------------------------------------- */

static void kb_tk_name(kb_ktable_cells_t *c, json_t *o) {
    kb_ktable__str(c, S(o, "metadata.name"));
}

static void kb_tk_age(kb_ktable_cells_t *c, json_t *o) {
    kb_ktable__age(c, S(o, "metadata.creationTimestamp"));
}

static const kb_ktable_col_t kb_tk_ns_cols[] = {
    KB_COL_NAME, KB_COL("Status", "string", 0, "status.phase."), KB_COL_AGE};

static void kb_tk_ns(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_name(c, o);
    kb_ktable__str(c, S(o, "status.phase"));
    kb_tk_age(c, o);
}

static const kb_ktable_col_t kb_tk_cm_cols[] = {
    KB_COL_NAME, KB_COL("Data", "string", 0, "Number of data and binaryData keys."), KB_COL_AGE};

static void kb_tk_cm(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_name(c, o);
    kb_ktable__int(c, (long long)(json_object_size(AT(o, "data")) + json_object_size(AT(o, "binaryData"))));
    kb_tk_age(c, o);
}

static const kb_ktable_col_t kb_tk_secret_cols[] = {
    KB_COL_NAME, KB_COL("Type", "string", 0, "The secret's type."),
    KB_COL("Data", "string", 0, "Number of data keys."), KB_COL_AGE};

static void kb_tk_secret(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_name(c, o);
    kb_ktable__str(c, S(o, "type"));
    kb_ktable__int(c, (long long)json_object_size(AT(o, "data")));
    kb_tk_age(c, o);
}

static const kb_ktable_col_t kb_tk_sa_cols[] = {KB_COL_NAME, KB_COL_AGE};

static void kb_tk_sa(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_name(c, o);
    kb_tk_age(c, o);
}

static const kb_ktable_col_t kb_tk_lease_cols[] = {
    KB_COL_NAME, KB_COL("Holder", "string", 0, "spec.holderIdentity."), KB_COL_AGE};

static void kb_tk_lease(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_name(c, o);
    kb_ktable__str(c, S(o, "spec.holderIdentity"));
    kb_tk_age(c, o);
}

static const kb_ktable_col_t kb_tk_default_cols[] = {
    KB_COL_NAME, {"Created At", "date", NULL, 0, "metadata.creationTimestamp."}};

static void kb_tk_default(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_name(c, o);
    kb_tk_or(c, S(o, "metadata.creationTimestamp"), "0001-01-01T00:00:00Z");
}

/* ---- Service ------------------------------------------------------------------- */

static const kb_ktable_col_t kb_tk_svc_cols[] = {
    KB_COL_NAME,
    KB_COL("Type", "string", 0, "spec.type."),
    KB_COL("Cluster-IP", "string", 0, "The first spec.clusterIPs."),
    KB_COL("External-IP", "string", 0, "External IPs, load balancer ingress or externalName."),
    KB_COL("Port(s)", "string", 0, "port[:nodePort]/protocol of each port."),
    KB_COL_AGE,
    KB_COL("Selector", "string", 1, "spec.selector."),
};

/* Load balancer ingress IPs or hostnames joined by "," (the server prints wide, untruncated). */
static void kb_tk_lb(kb_buf_t *b, json_t *ingress) {
    for (size_t i = 0; i < json_array_size(ingress); i++) {
        json_t *in = json_array_get(ingress, i);
        const char *v = *S(in, "ip") ? S(in, "ip") : S(in, "hostname");
        if (*v)
            kb_tk_join(b, ",", v);
    }
}

static void kb_tk_svc_external(kb_ktable_cells_t *c, json_t *o) {
    const char *type = S(o, "spec.type");
    json_t *ext = AT(o, "spec.externalIPs");
    kb_buf_t b = KB_BUF_INIT;
    if (!strcmp(type, "ExternalName")) {
        kb_ktable__str(c, S(o, "spec.externalName"));
        return;
    }
    if (!strcmp(type, "LoadBalancer"))
        kb_tk_lb(&b, AT(o, "status.loadBalancer.ingress"));
    for (size_t i = 0; i < json_array_size(ext); i++)
        kb_tk_join(&b, ",", json_string_value(json_array_get(ext, i)) ? json_string_value(json_array_get(ext, i)) : "");
    bool known = !strcmp(type, "ClusterIP") || !strcmp(type, "NodePort") || !strcmp(type, "LoadBalancer");
    kb_tk_cell_buf(c, &b, !known ? "<unknown>" : !strcmp(type, "LoadBalancer") ? "<pending>" : "<none>");
}

static void kb_tk_svc(kb_ktable_cells_t *c, json_t *o) {
    json_t *ports = AT(o, "spec.ports");
    kb_buf_t b = KB_BUF_INIT;
    for (size_t i = 0; i < json_array_size(ports); i++) {
        json_t *p = json_array_get(ports, i);
        if (b.len)
            kb_buf_append_char(&b, ',');
        if (I(p, "nodePort") > 0)
            kb_buf_appendf(&b, "%lld:%lld/%s", I(p, "port"), I(p, "nodePort"), S(p, "protocol"));
        else
            kb_buf_appendf(&b, "%lld/%s", I(p, "port"), S(p, "protocol"));
    }
    kb_tk_name(c, o);
    kb_ktable__str(c, S(o, "spec.type"));
    kb_tk_or(c, S(json_array_get(AT(o, "spec.clusterIPs"), 0), ""), "<none>");
    kb_tk_svc_external(c, o);
    kb_tk_cell_buf(c, &b, "<none>");
    kb_tk_age(c, o);
    kb_tk_labels(c, AT(o, "spec.selector"));
}

/* ---- workloads ----------------------------------------------------------------- */

/* One integer cell per field path (NULL ends). */
static void kb_tk_ints(kb_ktable_cells_t *c, json_t *o, const char *const *paths) {
    for (; *paths; paths++)
        kb_ktable__int(c, I(o, *paths));
}

static void kb_tk_ratio(kb_ktable_cells_t *c, long long a, long long b) {
    char v[64];
    snprintf(v, sizeof(v), "%lld/%lld", a, b);
    kb_ktable__str(c, v);
}

/* Containers, Images, Selector (the wide columns of most workloads). */
static void kb_tk_template_wide(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_containers(c, AT(o, "spec.template.spec"));
    kb_tk_selector(c, AT(o, "spec.selector"));
}

static const kb_ktable_col_t kb_tk_deploy_cols[] = {
    KB_COL_NAME,
    KB_COL("Ready", "string", 0, "Ready replicas of the desired."),
    KB_COL("Up-to-date", "string", 0, "status.updatedReplicas."),
    KB_COL("Available", "string", 0, "status.availableReplicas."),
    KB_COL_AGE, KB_COL_CONTAINERS, KB_COL_IMAGES, KB_COL_SELECTOR,
};

static void kb_tk_deploy(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_name(c, o);
    kb_tk_ratio(c, I(o, "status.readyReplicas"), I(o, "spec.replicas"));
    static const char *const ints[] = {"status.updatedReplicas", "status.availableReplicas", NULL};
    kb_tk_ints(c, o, ints);
    kb_tk_age(c, o);
    kb_tk_template_wide(c, o);
}

static const kb_ktable_col_t kb_tk_rs_cols[] = {
    KB_COL_NAME,
    KB_COL("Desired", "integer", 0, "spec.replicas."),
    KB_COL("Current", "integer", 0, "status.replicas."),
    KB_COL("Ready", "integer", 0, "status.readyReplicas."),
    KB_COL_AGE, KB_COL_CONTAINERS, KB_COL_IMAGES, KB_COL_SELECTOR,
};

static void kb_tk_rs(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_name(c, o);
    static const char *const ints[] = {"spec.replicas", "status.replicas", "status.readyReplicas", NULL};
    kb_tk_ints(c, o, ints);
    kb_tk_age(c, o);
    kb_tk_template_wide(c, o);
}

static const kb_ktable_col_t kb_tk_sts_cols[] = {
    KB_COL_NAME, KB_COL("Ready", "string", 0, "Ready replicas of the desired."), KB_COL_AGE, KB_COL_CONTAINERS,
    KB_COL_IMAGES};

static void kb_tk_sts(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_name(c, o);
    kb_tk_ratio(c, I(o, "status.readyReplicas"), I(o, "spec.replicas"));
    kb_tk_age(c, o);
    kb_tk_containers(c, AT(o, "spec.template.spec"));
}

static const kb_ktable_col_t kb_tk_ds_cols[] = {
    KB_COL_NAME,
    KB_COL("Desired", "integer", 0, "status.desiredNumberScheduled."),
    KB_COL("Current", "integer", 0, "status.currentNumberScheduled."),
    KB_COL("Ready", "integer", 0, "status.numberReady."),
    KB_COL("Up-to-date", "integer", 0, "status.updatedNumberScheduled."),
    KB_COL("Available", "integer", 0, "status.numberAvailable."),
    KB_COL("Node Selector", "string", 0, "The template's nodeSelector."),
    KB_COL_AGE, KB_COL_CONTAINERS, KB_COL_IMAGES, KB_COL_SELECTOR,
};

static void kb_tk_ds(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_name(c, o);
    static const char *const ints[] = {"status.desiredNumberScheduled", "status.currentNumberScheduled",
                                       "status.numberReady", "status.updatedNumberScheduled",
                                       "status.numberAvailable", NULL};
    kb_tk_ints(c, o, ints);
    kb_tk_labels(c, AT(o, "spec.template.spec.nodeSelector"));
    kb_tk_age(c, o);
    kb_tk_template_wide(c, o);
}

static const kb_ktable_col_t kb_tk_job_cols[] = {
    KB_COL_NAME,
    KB_COL("Status", "string", 0, "Complete, Failed, Terminating, Suspended or Running."),
    KB_COL("Completions", "string", 0, "Succeeded pods of the completions wanted."),
    KB_COL("Duration", "string", 0, "From the start to completion (or now)."),
    KB_COL_AGE, KB_COL_CONTAINERS, KB_COL_IMAGES, KB_COL_SELECTOR,
};

static const char *kb_tk_job_status(json_t *o) {
    static const char *const order[] = {"Complete", "Failed", NULL, "Suspended", "FailureTarget",
                                        "SuccessCriteriaMet"};
    for (size_t i = 0; i < KB_N(order); i++) {
        if (!order[i] && AT(o, "metadata.deletionTimestamp"))
            return "Terminating";
        if (order[i] && kb_tk_true_cond(o, "status.conditions", order[i]))
            return order[i];
    }
    return "Running";
}

static void kb_tk_job(kb_ktable_cells_t *c, json_t *o) {
    char comp[96], dur[32] = "";
    long long ok = I(o, "status.succeeded"), par = AT(o, "spec.parallelism") ? I(o, "spec.parallelism") : 0;
    if (AT(o, "spec.completions"))
        snprintf(comp, sizeof(comp), "%lld/%lld", ok, I(o, "spec.completions"));
    else
        snprintf(comp, sizeof(comp), par > 1 ? "%lld/1 of %lld" : "%lld/1", ok, par);
    int64_t start = kb_ktable__time(S(o, "status.startTime")), end = kb_ktable__time(S(o, "status.completionTime"));
    if (start)
        kb_ktable_duration((end ? end : c->now_s) - start, dur, sizeof(dur));
    kb_tk_name(c, o);
    kb_ktable__str(c, kb_tk_job_status(o));
    kb_ktable__str(c, comp);
    kb_ktable__str(c, dur);
    kb_tk_age(c, o);
    kb_tk_template_wide(c, o);
}

static const kb_ktable_col_t kb_tk_cron_cols[] = {
    KB_COL_NAME,
    KB_COL("Schedule", "string", 0, "spec.schedule."),
    KB_COL("Timezone", "string", 0, "spec.timeZone."),
    KB_COL("Suspend", "boolean", 0, "spec.suspend."),
    KB_COL("Active", "integer", 0, "Running jobs."),
    KB_COL("Last Schedule", "string", 0, "Time since the job was last scheduled."),
    KB_COL_AGE, KB_COL_CONTAINERS, KB_COL_IMAGES, KB_COL_SELECTOR,
};

static void kb_tk_cron(kb_ktable_cells_t *c, json_t *o) {
    json_t *susp = AT(o, "spec.suspend");
    char last[32] = "<none>";
    if (*S(o, "status.lastScheduleTime"))
        kb_ktable__since(c, S(o, "status.lastScheduleTime"), last, sizeof(last));
    kb_tk_name(c, o);
    kb_ktable__str(c, S(o, "spec.schedule"));
    kb_tk_or(c, S(o, "spec.timeZone"), "<none>");
    kb_ktable__str(c, !susp ? "<unset>" : json_is_true(susp) ? "True" : "False");
    kb_ktable__int(c, (long long)json_array_size(AT(o, "status.active")));
    kb_ktable__str(c, last);
    kb_tk_age(c, o);
    kb_tk_containers(c, AT(o, "spec.jobTemplate.spec.template.spec"));
    kb_tk_selector(c, AT(o, "spec.jobTemplate.spec.selector"));
}

/* ---- storage, network ---------------------------------------------------------- */

/* Access modes as RWO,ROX,RWX,RWOP in that order. */
static void kb_tk_modes(kb_ktable_cells_t *c, json_t *modes) {
    static const char *const names[][2] = {{"ReadWriteOnce", "RWO"}, {"ReadOnlyMany", "ROX"},
                                           {"ReadWriteMany", "RWX"}, {"ReadWriteOncePod", "RWOP"}};
    kb_buf_t b = KB_BUF_INIT;
    for (size_t i = 0; i < KB_N(names); i++)
        for (size_t j = 0; j < json_array_size(modes); j++)
            if (!strcmp(S(json_array_get(modes, j), ""), names[i][0])) {
                kb_tk_join(&b, ",", names[i][1]);
                break;
            }
    kb_tk_cell_buf(c, &b, "");
}

static const char *kb_tk_class(json_t *o) {
    json_t *ann = AT(o, "metadata.annotations");
    const char *a = json_string_value(json_object_get(ann, "volume.beta.kubernetes.io/storage-class"));
    return a ? a : S(o, "spec.storageClassName");
}

static const kb_ktable_col_t kb_tk_pvc_cols[] = {
    KB_COL_NAME,
    KB_COL("Status", "string", 0, "status.phase (Terminating when deleted)."),
    KB_COL("Volume", "string", 0, "spec.volumeName."),
    KB_COL("Capacity", "string", 0, "status.capacity.storage once bound."),
    KB_COL("Access Modes", "string", 0, "status.accessModes once bound."),
    KB_COL("StorageClass", "string", 0, "The storage class."),
    KB_COL("VolumeAttributesClass", "string", 0, "spec.volumeAttributesClassName."),
    KB_COL_AGE,
    KB_COL("VolumeMode", "string", 1, "spec.volumeMode."),
};

static void kb_tk_pvc(kb_ktable_cells_t *c, json_t *o) {
    bool bound = *S(o, "spec.volumeName");
    kb_tk_name(c, o);
    kb_ktable__str(c, AT(o, "metadata.deletionTimestamp") ? "Terminating" : S(o, "status.phase"));
    kb_ktable__str(c, S(o, "spec.volumeName"));
    kb_ktable__str(c, bound ? (*S(o, "status.capacity.storage") ? S(o, "status.capacity.storage") : "0") : "");
    if (bound)
        kb_tk_modes(c, AT(o, "status.accessModes"));
    else
        kb_ktable__str(c, "");
    kb_ktable__str(c, kb_tk_class(o));
    kb_tk_or(c, S(o, "spec.volumeAttributesClassName"), "<unset>");
    kb_tk_age(c, o);
    kb_tk_or(c, S(o, "spec.volumeMode"), "<unset>");
}

static const kb_ktable_col_t kb_tk_pv_cols[] = {
    KB_COL_NAME,
    KB_COL("Capacity", "string", 0, "spec.capacity.storage."),
    KB_COL("Access Modes", "string", 0, "spec.accessModes."),
    KB_COL("Reclaim Policy", "string", 0, "spec.persistentVolumeReclaimPolicy."),
    KB_COL("Status", "string", 0, "status.phase (Terminating when deleted)."),
    KB_COL("Claim", "string", 0, "The bound claim (namespace/name)."),
    KB_COL("StorageClass", "string", 0, "The storage class."),
    KB_COL("VolumeAttributesClass", "string", 0, "spec.volumeAttributesClassName."),
    KB_COL("Reason", "string", 0, "status.reason."),
    KB_COL_AGE,
    KB_COL("VolumeMode", "string", 1, "spec.volumeMode."),
};

static void kb_tk_pv(kb_ktable_cells_t *c, json_t *o) {
    char claim[520] = "";
    if (AT(o, "spec.claimRef"))
        snprintf(claim, sizeof(claim), "%s/%s", S(o, "spec.claimRef.namespace"), S(o, "spec.claimRef.name"));
    kb_tk_name(c, o);
    kb_tk_or(c, S(o, "spec.capacity.storage"), "0");
    kb_tk_modes(c, AT(o, "spec.accessModes"));
    kb_ktable__str(c, S(o, "spec.persistentVolumeReclaimPolicy"));
    kb_ktable__str(c, AT(o, "metadata.deletionTimestamp") ? "Terminating" : S(o, "status.phase"));
    kb_ktable__str(c, claim);
    kb_ktable__str(c, kb_tk_class(o));
    kb_tk_or(c, S(o, "spec.volumeAttributesClassName"), "<unset>");
    kb_ktable__str(c, S(o, "status.reason"));
    kb_tk_age(c, o);
    kb_tk_or(c, S(o, "spec.volumeMode"), "<unset>");
}

static const kb_ktable_col_t kb_tk_ing_cols[] = {
    KB_COL_NAME,
    KB_COL("Class", "string", 0, "spec.ingressClassName."),
    KB_COL("Hosts", "string", 0, "The rules' hosts."),
    KB_COL("Address", "string", 0, "The load balancer's addresses."),
    KB_COL("Ports", "string", 0, "80, and 443 with TLS."),
    KB_COL_AGE,
};

static void kb_tk_ing(kb_ktable_cells_t *c, json_t *o) {
    json_t *rules = AT(o, "spec.rules");
    size_t n = json_array_size(rules), shown = 0;
    kb_buf_t hosts = KB_BUF_INIT, addr = KB_BUF_INIT;
    for (size_t i = 0; i < n && shown < 3; i++)
        if (*S(json_array_get(rules, i), "host")) {
            kb_tk_join(&hosts, ",", S(json_array_get(rules, i), "host"));
            shown++;
        }
    if (!hosts.len)
        kb_buf_append_str(&hosts, "*");
    if (shown == 3 && n > 3)
        kb_buf_appendf(&hosts, " + %zu more...", n - 3);
    kb_tk_lb(&addr, AT(o, "status.loadBalancer.ingress"));
    kb_tk_name(c, o);
    kb_tk_or(c, S(o, "spec.ingressClassName"), "<none>");
    kb_tk_cell_buf(c, &hosts, "*");
    kb_tk_cell_buf(c, &addr, "");
    kb_ktable__str(c, json_array_size(AT(o, "spec.tls")) ? "80, 443" : "80");
    kb_tk_age(c, o);
}

static const kb_ktable_col_t kb_tk_eps_cols[] = {
    KB_COL_NAME,
    KB_COL("AddressType", "string", 0, "IPv4, IPv6 or FQDN."),
    KB_COL("Ports", "string", 0, "The first ports."),
    KB_COL("Endpoints", "string", 0, "The first addresses."),
    KB_COL_AGE,
};

static void kb_tk_eps(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_list_t ports = {KB_BUF_INIT, 0, 0}, addrs = {KB_BUF_INIT, 0, 0};
    json_t *ps = AT(o, "ports"), *eps = AT(o, "endpoints");
    for (size_t i = 0; i < json_array_size(ps); i++) {
        json_t *p = json_array_get(ps, i);
        char v[32];
        snprintf(v, sizeof(v), "%lld", I(p, "port"));
        kb_tk_list_add(&ports, AT(p, "port") ? v : AT(p, "name") ? S(p, "name") : "<unset>");
    }
    for (size_t i = 0; i < json_array_size(eps); i++) {
        json_t *a = AT(json_array_get(eps, i), "addresses");
        for (size_t j = 0; j < json_array_size(a); j++)
            kb_tk_list_add(&addrs, S(json_array_get(a, j), ""));
    }
    kb_tk_name(c, o);
    kb_ktable__str(c, S(o, "addressType"));
    kb_tk_list_cell(c, &ports);
    kb_tk_list_cell(c, &addrs);
    kb_tk_age(c, o);
}

/* ---- the kinds ----------------------------------------------------------------- */

#define KB_KIND(g, r, cols, fn) {g, r, cols, KB_N(cols), fn, NULL}

static const kb_ktable_kind_t kb_tk_kinds[] = {
    KB_KIND("", "pods", kb_tk_pod_cols, kb_tk_pod),
    KB_KIND("", "events", kb_tk_event_cols, kb_tk_event),
    KB_KIND("", "nodes", kb_tk_node_cols, kb_tk_node),
    KB_KIND("", "namespaces", kb_tk_ns_cols, kb_tk_ns),
    KB_KIND("", "services", kb_tk_svc_cols, kb_tk_svc),
    KB_KIND("", "configmaps", kb_tk_cm_cols, kb_tk_cm),
    KB_KIND("", "secrets", kb_tk_secret_cols, kb_tk_secret),
    KB_KIND("apps", "deployments", kb_tk_deploy_cols, kb_tk_deploy),
    KB_KIND("apps", "replicasets", kb_tk_rs_cols, kb_tk_rs),
    KB_KIND("apps", "statefulsets", kb_tk_sts_cols, kb_tk_sts),
    KB_KIND("apps", "daemonsets", kb_tk_ds_cols, kb_tk_ds),
    KB_KIND("batch", "jobs", kb_tk_job_cols, kb_tk_job),
    KB_KIND("batch", "cronjobs", kb_tk_cron_cols, kb_tk_cron),
    KB_KIND("", "persistentvolumeclaims", kb_tk_pvc_cols, kb_tk_pvc),
    KB_KIND("", "persistentvolumes", kb_tk_pv_cols, kb_tk_pv),
    KB_KIND("networking.k8s.io", "ingresses", kb_tk_ing_cols, kb_tk_ing),
    KB_KIND("", "serviceaccounts", kb_tk_sa_cols, kb_tk_sa),
    KB_KIND("coordination.k8s.io", "leases", kb_tk_lease_cols, kb_tk_lease),
    KB_KIND("discovery.k8s.io", "endpointslices", kb_tk_eps_cols, kb_tk_eps),
};

static const kb_ktable_kind_t kb_tk_default_kind = KB_KIND("", "", kb_tk_default_cols, kb_tk_default);

/* A custom resource without additionalPrinterColumns: Name and Age (a
 * "date" column whose cell is already the duration). */
static const kb_ktable_col_t kb_tk_crd_cols[] = {KB_COL_NAME, KB_COL("Age", "date", 0, "Time since metadata.creationTimestamp.")};

static void kb_tk_crd(kb_ktable_cells_t *c, json_t *o) {
    kb_tk_name(c, o);
    kb_tk_age(c, o);
}

static const kb_ktable_kind_t kb_tk_crd_kind = KB_KIND("", "", kb_tk_crd_cols, kb_tk_crd);

/* The API groups kube-apiserver serves itself; any other group is a CRD's
 * (an aggregated API server's kinds would print their own columns). */
static const char *const kb_tk_builtin_groups[] = {
    "", "apps", "batch", "autoscaling", "policy", "extensions", "networking.k8s.io", "rbac.authorization.k8s.io",
    "storage.k8s.io", "coordination.k8s.io", "discovery.k8s.io", "events.k8s.io", "certificates.k8s.io",
    "scheduling.k8s.io", "node.k8s.io", "apiextensions.k8s.io", "apiregistration.k8s.io",
    "admissionregistration.k8s.io", "flowcontrol.apiserver.k8s.io", "authentication.k8s.io",
    "authorization.k8s.io", "resource.k8s.io", "internal.apiserver.k8s.io", "storagemigration.k8s.io",
};

bool kb_ktable_group_is_builtin(const char *group) {
    for (size_t i = 0; i < KB_N(kb_tk_builtin_groups); i++)
        if (!strcmp(kb_tk_builtin_groups[i], group))
            return true;
    return false;
}

const kb_ktable_kind_t *kb_ktable__kind(const char *group, const char *resource) {
    for (size_t i = 0; i < KB_N(kb_tk_kinds); i++)
        if (!strcmp(kb_tk_kinds[i].group, group) && !strcmp(kb_tk_kinds[i].resource, resource))
            return &kb_tk_kinds[i];
    if (kb_ktable_group_is_builtin(group))
        return &kb_tk_default_kind;
    const kb_ktable_kind_t *learned = kb_ktable__learned(group, resource);
    return learned ? learned : &kb_tk_crd_kind; /* a CRD not read (yet): Name and Age */
}
