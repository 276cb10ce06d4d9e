/* bench/bench_decode.c — how fast can one Pod be decoded?
 *
 * The evidence behind "raw bytes, not trees" (docs/performance.md): the same
 * generated Pod (about 5.2 KB, as the API server sends it: compact, with two
 * managedFields entries) is decoded over and over by
 *   - kb_decode_object() with drop_fields = metadata.managedFields
 *     (validate + extract identity + write the compact output form),
 *   - yajl_parse() with empty callbacks (an event parser doing nothing),
 *   - jansson json_loadb() + json_decref() (building and freeing a tree).
 * Each line prints objects/s, MB/s of input and µs per object. Single thread.
 *
 * Usage: bench_decode [seconds-per-decoder (default 2)] [--pretty] [--dump]
 * --pretty feeds the pretty-printed form (indent 2) instead; --dump prints
 * the first generated Pod and exits.
 */
#include "common/buf.h"
#include "informer/decode.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <yajl/yajl_parse.h>

/* A Pod as kube-apiserver serializes it: a Deployment's replica with two
 * containers, probes, env, volumes, status with conditions, and two
 * managedFields entries (kube-controller-manager and kubelet). */
static void kb_bench_pod(kb_buf_t *b, unsigned n) {
    kb_buf_appendf(
        b,
        "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"web-7d4b9c6f5-%05u\","
        "\"generateName\":\"web-7d4b9c6f5-\",\"namespace\":\"shop\","
        "\"uid\":\"3f6a1c2e-%04x-4b7d-9a51-0c8e2f7b%04x\",\"resourceVersion\":\"%u\","
        "\"creationTimestamp\":\"2024-05-14T08:21:43Z\",\"labels\":{\"app\":\"web\","
        "\"pod-template-hash\":\"7d4b9c6f5\",\"tier\":\"frontend\",\"version\":\"v2.14.1\"},"
        "\"annotations\":{\"prometheus.io/scrape\":\"true\"},"
        "\"ownerReferences\":[{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\","
        "\"name\":\"web-7d4b9c6f5\",\"uid\":\"9b2d7e44-51c3-4f0a-8d6e-2a7c1f9e3b80\","
        "\"controller\":true,\"blockOwnerDeletion\":true}],",
        n, n & 0xffff, (n * 7919u) & 0xffff, 100000 + n);
    kb_buf_append_str(
        b,
        "\"managedFields\":[{\"manager\":\"kube-controller-manager\",\"operation\":\"Update\","
        "\"apiVersion\":\"v1\",\"time\":\"2024-05-14T08:21:43Z\",\"fieldsType\":\"FieldsV1\","
        "\"fieldsV1\":{\"f:metadata\":{\"f:annotations\":{\".\":{},\"f:prometheus.io/scrape\":{}},"
        "\"f:generateName\":{},\"f:labels\":{\".\":{},\"f:app\":{},\"f:pod-template-hash\":{},"
        "\"f:tier\":{},\"f:version\":{}},\"f:ownerReferences\":{\".\":{},\"k:{\\\"uid\\\":\\\""
        "9b2d7e44-51c3-4f0a-8d6e-2a7c1f9e3b80\\\"}\":{}}},\"f:spec\":{\"f:containers\":{"
        "\"k:{\\\"name\\\":\\\"web\\\"}\":{\".\":{},\"f:env\":{\".\":{},\"k:{\\\"name\\\":\\\""
        "LOG_LEVEL\\\"}\":{\".\":{},\"f:name\":{},\"f:value\":{}}},\"f:image\":{},"
        "\"f:imagePullPolicy\":{},\"f:livenessProbe\":{\".\":{},\"f:httpGet\":{\".\":{},"
        "\"f:path\":{},\"f:port\":{}}},\"f:name\":{},\"f:ports\":{\".\":{},\"k:{\\\""
        "containerPort\\\":8080,\\\"protocol\\\":\\\"TCP\\\"}\":{\".\":{},\"f:containerPort\":{},"
        "\"f:protocol\":{}}},\"f:resources\":{\".\":{},\"f:limits\":{\".\":{},\"f:memory\":{}},"
        "\"f:requests\":{\".\":{},\"f:cpu\":{},\"f:memory\":{}}}}},\"f:dnsPolicy\":{},"
        "\"f:restartPolicy\":{},\"f:schedulerName\":{},\"f:terminationGracePeriodSeconds\":{}}}},"
        "{\"manager\":\"kubelet\",\"operation\":\"Update\",\"apiVersion\":\"v1\","
        "\"time\":\"2024-05-14T08:21:52Z\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{"
        "\"f:status\":{\"f:conditions\":{\"k:{\\\"type\\\":\\\"ContainersReady\\\"}\":{\".\":{},"
        "\"f:lastProbeTime\":{},\"f:lastTransitionTime\":{},\"f:status\":{},\"f:type\":{}},"
        "\"k:{\\\"type\\\":\\\"Ready\\\"}\":{\".\":{},\"f:lastProbeTime\":{},"
        "\"f:lastTransitionTime\":{},\"f:status\":{},\"f:type\":{}}},\"f:containerStatuses\":{},"
        "\"f:hostIP\":{},\"f:phase\":{},\"f:podIP\":{},\"f:podIPs\":{\".\":{},\"k:{\\\"ip\\\":"
        "\\\"10.244.1.17\\\"}\":{\".\":{},\"f:ip\":{}}},\"f:startTime\":{}}},"
        "\"subresource\":\"status\"}]},");
    kb_buf_append_str(
        b,
        "\"spec\":{\"volumes\":[{\"name\":\"config\",\"configMap\":{\"name\":\"web-config\","
        "\"defaultMode\":420}},{\"name\":\"kube-api-access-x7k2p\",\"projected\":{\"sources\":[{"
        "\"serviceAccountToken\":{\"expirationSeconds\":3607,\"path\":\"token\"}},{\"configMap\":{"
        "\"name\":\"kube-root-ca.crt\",\"items\":[{\"key\":\"ca.crt\",\"path\":\"ca.crt\"}]}}],\"defaultMode\":420}}],\"containers\":[{"
        "\"name\":\"web\",\"image\":\"registry.example.com/shop/web:2.14.1\",\"ports\":[{"
        "\"containerPort\":8080,\"protocol\":\"TCP\"}],\"env\":[{\"name\":\"LOG_LEVEL\","
        "\"value\":\"info\"},{\"name\":\"POD_IP\",\"valueFrom\":{\"fieldRef\":{\"apiVersion\":"
        "\"v1\",\"fieldPath\":\"status.podIP\"}}}],\"resources\":{\"limits\":{\"memory\":"
        "\"512Mi\"},\"requests\":{\"cpu\":\"250m\",\"memory\":\"256Mi\"}},\"volumeMounts\":[{"
        "\"name\":\"config\",\"readOnly\":true,\"mountPath\":\"/etc/web\"},{\"name\":"
        "\"kube-api-access-x7k2p\",\"readOnly\":true,\"mountPath\":"
        "\"/var/run/secrets/kubernetes.io/serviceaccount\"}],\"livenessProbe\":{\"httpGet\":{"
        "\"path\":\"/healthz\",\"port\":8080,\"scheme\":\"HTTP\"},\"initialDelaySeconds\":5,"
        "\"timeoutSeconds\":1,\"periodSeconds\":10,\"successThreshold\":1,\"failureThreshold\":3},"
        "\"terminationMessagePath\":\"/dev/termination-log\",\"terminationMessagePolicy\":\"File\","
        "\"imagePullPolicy\":\"IfNotPresent\"},{\"name\":\"metrics\",\"image\":"
        "\"registry.example.com/shop/metrics-sidecar:0.9.3\",\"ports\":[{\"containerPort\":9102,"
        "\"protocol\":\"TCP\"}],\"resources\":{\"limits\":{\"cpu\":\"100m\",\"memory\":\"64Mi\"}},"
        "\"terminationMessagePath\":\"/dev/termination-log\",\"terminationMessagePolicy\":\"File\","
        "\"imagePullPolicy\":\"IfNotPresent\"}],\"restartPolicy\":\"Always\","
        "\"terminationGracePeriodSeconds\":30,\"dnsPolicy\":\"ClusterFirst\","
        "\"serviceAccountName\":\"default\",\"serviceAccount\":\"default\",\"nodeName\":"
        "\"worker-3\",\"securityContext\":{},\"schedulerName\":\"default-scheduler\","
        "\"tolerations\":[{\"key\":\"node.kubernetes.io/not-ready\",\"operator\":\"Exists\","
        "\"effect\":\"NoExecute\",\"tolerationSeconds\":300},{\"key\":"
        "\"node.kubernetes.io/unreachable\",\"operator\":\"Exists\",\"effect\":\"NoExecute\","
        "\"tolerationSeconds\":300}],\"priority\":0},");
    kb_buf_appendf(
        b,
        "\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Initialized\",\"status\":"
        "\"True\",\"lastProbeTime\":null,\"lastTransitionTime\":\"2024-05-14T08:21:43Z\"},{"
        "\"type\":\"Ready\",\"status\":\"True\",\"lastProbeTime\":null,\"lastTransitionTime\":"
        "\"2024-05-14T08:21:52Z\"},{\"type\":\"ContainersReady\",\"status\":\"True\","
        "\"lastProbeTime\":null,\"lastTransitionTime\":\"2024-05-14T08:21:52Z\"},{\"type\":"
        "\"PodScheduled\",\"status\":\"True\",\"lastProbeTime\":null,\"lastTransitionTime\":"
        "\"2024-05-14T08:21:43Z\"}],\"hostIP\":\"172.18.0.4\",\"podIP\":\"10.244.1.%u\","
        "\"podIPs\":[{\"ip\":\"10.244.1.%u\"}],\"startTime\":\"2024-05-14T08:21:43Z\","
        "\"containerStatuses\":[{\"name\":\"metrics\",\"state\":{\"running\":{\"startedAt\":"
        "\"2024-05-14T08:21:47Z\"}},\"lastState\":{},\"ready\":true,\"restartCount\":0,\"image\":"
        "\"registry.example.com/shop/metrics-sidecar:0.9.3\",\"imageID\":"
        "\"registry.example.com/shop/metrics-sidecar@sha256:4c1e0b8f3a9d27e6b5f0c1d2e3f4a5b6c7d8e9"
        "f0a1b2c3d4e5f6a7b8c9d0e1f2\",\"containerID\":\"containerd://8e2f4a6c1b3d5e7f9a0b2c4d6e8f"
        "0a1b3c5d7e9f1a2b4c6d8e0f2a4b6c8d0e\",\"started\":true},{\"name\":\"web\",\"state\":{"
        "\"running\":{\"startedAt\":\"2024-05-14T08:21:46Z\"}},\"lastState\":{},\"ready\":true,"
        "\"restartCount\":0,\"image\":\"registry.example.com/shop/web:2.14.1\",\"imageID\":"
        "\"registry.example.com/shop/web@sha256:9f8e7d6c5b4a39281706f5e4d3c2b1a0f9e8d7c6b5a4938271"
        "60f5e4d3c2b1a0\",\"containerID\":\"containerd://1a3c5e7f9b2d4f6a8c0e2b4d6f8a1c3e5f7b9d1f"
        "3a5c7e9b2d4f6a8c0e2b4d\",\"started\":true}],\"qosClass\":\"Burstable\"}}",
        n % 250 + 2, n % 250 + 2);
}

/* Re-indent compact JSON (2 spaces), for the --pretty variant. */
static void kb_bench_pretty(const kb_buf_t *in, kb_buf_t *out) {
    json_t *root = json_loadb(in->data, in->len, 0, NULL);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    kb_buf_append_str(out, s);
    free(s);
    json_decref(root);
}

static double kb_bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct kb_bench_input {
    kb_buf_t *pods; /* NPODS pods with different names/uids/RVs */
    size_t n;
    size_t bytes; /* total input bytes */
} kb_bench_input_t;

typedef size_t (*kb_bench_fn)(const kb_buf_t *pod, void *ctx);

static void kb_bench_run(const char *name, kb_bench_fn fn, void *ctx, const kb_bench_input_t *in,
                         double seconds) {
    size_t objs = 0, bytes = 0, sink = 0;
    double t0 = kb_bench_now(), t;
    do {
        for (size_t k = 0; k < in->n; k++)
            sink += fn(&in->pods[k], ctx);
        objs += in->n;
        bytes += in->bytes;
        t = kb_bench_now() - t0;
    } while (t < seconds);
    printf("%-34s %10.0f objects/s %8.1f MB/s %8.2f us/object  (check %zu)\n", name,
           (double)objs / t, (double)bytes / t / 1e6, t * 1e6 / (double)objs, sink % 10);
}

typedef struct kb_bench_kb {
    kb_transform_t *tf;
    kb_buf_t out;
} kb_bench_kb_t;

static size_t kb_bench_kb(const kb_buf_t *pod, void *ctx) {
    kb_bench_kb_t *c = ctx;
    kb_objmeta_t meta;
    char err[128];
    kb_buf_reset(&c->out);
    if (kb_decode_object(c->tf, pod->data, pod->len, "Pod", "v1", &c->out, &meta, err,
                         sizeof(err)) != KB_OK) {
        fprintf(stderr, "kb_decode_object: %s\n", err);
        exit(1);
    }
    return meta.name.len + c->out.len;
}

static size_t kb_bench_scan(const kb_buf_t *pod, void *ctx) {
    size_t s, e;
    (void)ctx;
    if (kb_json_scan_value(pod->data, pod->len, &s, &e) != KB_JSON_OK)
        exit(1);
    return e;
}

static size_t kb_bench_yajl(const kb_buf_t *pod, void *ctx) {
    static const yajl_callbacks none; /* every callback NULL: parse only */
    yajl_handle h = yajl_alloc(&none, NULL, ctx);
    if (yajl_parse(h, (const unsigned char *)pod->data, pod->len) != yajl_status_ok ||
        yajl_complete_parse(h) != yajl_status_ok)
        exit(1);
    size_t n = yajl_get_bytes_consumed(h);
    yajl_free(h);
    return n;
}

static size_t kb_bench_jansson(const kb_buf_t *pod, void *ctx) {
    json_error_t err;
    (void)ctx;
    json_t *root = json_loadb(pod->data, pod->len, 0, &err);
    if (!root)
        exit(1);
    size_t n = json_object_size(root);
    json_decref(root);
    return n;
}

static void kb_bench_all(const kb_bench_input_t *in, double seconds, bool pretty) {
    const char *drop[] = {"metadata.managedFields"};
    char err[256];
    kb_bench_kb_t kb = {kb_transform_new(drop, 1, NULL, 0, err, sizeof(err)), KB_BUF_INIT};
    kb_bench_kb(&in->pods[0], &kb);
    printf("input: %zu Pods, %.0f bytes each (%s); output of kb_decode_object: %zu bytes\n",
           in->n, (double)in->bytes / (double)in->n, pretty ? "pretty-printed" : "compact",
           kb.out.len);
    kb_bench_run("kb_decode_object (drop managedFields)", kb_bench_kb, &kb, in, seconds);
    kb_bench_run("kb_json_scan_value (validate only)", kb_bench_scan, NULL, in, seconds);
    kb_bench_run("yajl_parse (empty callbacks)", kb_bench_yajl, NULL, in, seconds);
    kb_bench_run("jansson json_loadb + json_decref", kb_bench_jansson, NULL, in, seconds);
    kb_transform_free(kb.tf);
    kb_buf_fini(&kb.out);
}

#define KB_BENCH_NPODS 64

int main(int argc, char **argv) {
    double seconds = 2.0;
    bool pretty = false, dump = false;
    for (int k = 1; k < argc; k++) {
        if (strcmp(argv[k], "--pretty") == 0)
            pretty = true;
        else if (strcmp(argv[k], "--dump") == 0)
            dump = true;
        else
            seconds = atof(argv[k]);
    }
    kb_buf_t pods[KB_BENCH_NPODS];
    kb_bench_input_t in = {pods, KB_BENCH_NPODS, 0};
    for (unsigned k = 0; k < KB_BENCH_NPODS; k++) {
        kb_buf_t compact = KB_BUF_INIT;
        kb_buf_init(&pods[k]);
        kb_bench_pod(&compact, k);
        if (pretty) {
            kb_bench_pretty(&compact, &pods[k]);
            kb_buf_fini(&compact);
        } else {
            pods[k] = compact;
        }
        in.bytes += pods[k].len;
    }
    if (dump) {
        fwrite(pods[0].data, 1, pods[0].len, stdout);
        putchar('\n');
    } else {
        kb_bench_all(&in, seconds, pretty);
    }
    for (size_t k = 0; k < in.n; k++)
        kb_buf_fini(&pods[k]);
    return 0;
}
