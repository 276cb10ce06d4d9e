#!/usr/bin/env python3
"""Against a real kube-apiserver: for every kind kbridge has a printer for (pods, events, nodes,
namespaces, services, configmaps, secrets, deployments, replicasets, statefulsets, daemonsets,
jobs, cronjobs, PVCs, PVs, ingresses, service accounts, leases, endpointslices), a kind with the
default table (clusterroles) and a CRD, objects with set statuses are created in the server,
kbridge informs from it, and the Table each returns has the same column definitions (name, type,
format, priority) and the same cells but AGE; `kubectl get` and `kubectl get -o wide` through
both print the same lines once the AGE column is cut out."""
import datetime
import re
import ssl
import subprocess

from kbtest import *
from kbtest import _free_port
from kbclientgo import kubeconfig

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
T0 = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=10, hours=1)
OLD = T0.strftime("%Y-%m-%dT%H:%M:%SZ")
OLD_US = T0.strftime("%Y-%m-%dT%H:%M:%S.000000Z")

KINDS = [  # (group, resource, namespaced)
    ("", "pods", True), ("", "events", True), ("", "nodes", False), ("", "namespaces", False),
    ("", "services", True), ("", "configmaps", True), ("", "secrets", True), ("apps", "deployments", True),
    ("apps", "replicasets", True), ("apps", "statefulsets", True), ("apps", "daemonsets", True),
    ("batch", "jobs", True), ("batch", "cronjobs", True), ("", "persistentvolumeclaims", True),
    ("", "persistentvolumes", False), ("networking.k8s.io", "ingresses", True), ("", "serviceaccounts", True),
    ("coordination.k8s.io", "leases", True), ("discovery.k8s.io", "endpointslices", True),
    ("rbac.authorization.k8s.io", "clusterroles", False), ("example.com", "widgets", True),
]
VERSION = {"": "v1", "apps": "v1", "batch": "v1", "networking.k8s.io": "v1", "coordination.k8s.io": "v1",
           "discovery.k8s.io": "v1", "rbac.authorization.k8s.io": "v1", "example.com": "v1"}
SHORT = {"persistentvolumeclaims": "pvc", "persistentvolumes": "pv"}

TEMPLATE = """
metadata: {labels: {app: %(app)s, tier: a}}
spec:
  automountServiceAccountToken: false
  restartPolicy: %(restart)s
  %(extra)s
  containers: [{name: c1, image: "img/one:1"}, {name: c2, image: "img/two:2"}]"""


def tpl(app, restart="Always", extra="", indent=4):
    text = TEMPLATE % {"app": app, "restart": restart, "extra": extra}
    return text.replace("\n", "\n" + " " * indent)


OBJECTS = """
apiVersion: v1
kind: Pod
metadata: {name: p-run, namespace: e2e}
spec:
  automountServiceAccountToken: false
  nodeName: node-a
  containers: [{name: c1, image: img}, {name: c2, image: img}]
---
apiVersion: v1
kind: Pod
metadata: {name: p-init, namespace: e2e}
spec:
  automountServiceAccountToken: false
  readinessGates: [{conditionType: "example.com/gate"}]
  initContainers: [{name: i1, image: img}, {name: i2, image: img}]
  containers: [{name: c1, image: img}]
---
apiVersion: v1
kind: Pod
metadata: {name: p-crash, namespace: e2e}
spec:
  automountServiceAccountToken: false
  containers: [{name: c1, image: img}]
---
apiVersion: v1
kind: Event
metadata: {name: ev-old, namespace: e2e}
involvedObject: {kind: Pod, name: p-run, namespace: e2e, fieldPath: "spec.containers{c1}"}
reason: BackOff
message: "  Back-off restarting failed container  "
type: Warning
source: {component: kubelet, host: node-a}
count: 3
firstTimestamp: "%(old)s"
lastTimestamp: "%(old)s"
---
apiVersion: v1
kind: Event
metadata: {name: ev-new, namespace: e2e}
involvedObject: {kind: Deployment, name: web, namespace: e2e}
reason: ScalingReplicaSet
message: Scaled up
type: Normal
action: Scale
eventTime: "%(old_us)s"
reportingComponent: deployment-controller
reportingInstance: cm-1
series: {count: 5, lastObservedTime: "%(old_us)s"}
---
apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {node-role.kubernetes.io/control-plane: "", node-role.kubernetes.io/worker: "", kubernetes.io/role: edge}
---
apiVersion: v1
kind: Node
metadata: {name: node-b}
spec: {unschedulable: true}
---
apiVersion: v1
kind: Service
metadata: {name: s-cluster, namespace: e2e}
spec: {selector: {app: web, tier: front}, externalIPs: [9.9.9.9], ports: [{name: a, port: 80}, {name: b, port: 53, protocol: UDP}]}
---
apiVersion: v1
kind: Service
metadata: {name: s-lb, namespace: e2e}
spec: {type: LoadBalancer, ports: [{port: 443, targetPort: 8443}]}
---
apiVersion: v1
kind: Service
metadata: {name: s-name, namespace: e2e}
spec: {type: ExternalName, externalName: db.example.com}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm, namespace: e2e}
data: {a: "1", b: "2"}
binaryData: {c: AA==}
---
apiVersion: v1
kind: Secret
metadata: {name: sec, namespace: e2e}
type: kubernetes.io/tls
data: {tls.crt: AA==, tls.key: AA==}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: e2e}
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
    matchExpressions: [{key: tier, operator: In, values: [b, a]}, {key: canary, operator: DoesNotExist}]
  template:%(web)s
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs, namespace: e2e}
spec:
  replicas: 2
  selector: {matchLabels: {app: rs}}
  template:%(rs)s
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: sts, namespace: e2e}
spec:
  replicas: 3
  serviceName: sts
  selector: {matchLabels: {app: sts}}
  template:%(sts)s
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, namespace: e2e}
spec:
  selector: {matchLabels: {app: ds}}
  template:%(ds)s
---
apiVersion: batch/v1
kind: Job
metadata: {name: job, namespace: e2e}
spec:
  parallelism: 3
  template:%(job)s
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: cron, namespace: e2e}
spec:
  schedule: "*/5 * * * *"
  timeZone: Etc/UTC
  suspend: true
  jobTemplate:
    spec:
      template:%(cron)s
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv1}
spec:
  capacity: {storage: 5Gi}
  accessModes: [ReadWriteMany, ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: slow
  claimRef: {namespace: e2e, name: claim}
  hostPath: {path: /tmp/pv1}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: claim, namespace: e2e}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
  storageClassName: slow
  volumeName: pv1
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: unbound, namespace: e2e}
spec:
  accessModes: [ReadWriteOnce]
  volumeMode: Block
  resources: {requests: {storage: 1Gi}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: ing, namespace: e2e}
spec:
  ingressClassName: nginx
  tls: [{hosts: [a.example.com]}]
  rules: [{host: a.example.com}, {host: b.example.com}, {}, {host: c.example.com}, {host: d.example.com}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: ing-plain, namespace: e2e}
spec:
  defaultBackend: {service: {name: s-cluster, port: {number: 80}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: robot, namespace: e2e}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: lease, namespace: e2e}
spec: {holderIdentity: me-1}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: eps, namespace: e2e}
addressType: IPv4
ports: [{name: http, port: 80, protocol: TCP}, {name: named, protocol: TCP}, {name: p81, port: 81}, {name: p82, port: 82}]
endpoints: [{addresses: [10.0.0.1, 10.0.0.2]}, {addresses: [10.0.0.3]}, {addresses: [10.0.0.4]}]
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: e2e}
spec: {size: 3}
""" % {"old": OLD, "old_us": OLD_US, "web": tpl("web"), "rs": tpl("rs"), "sts": tpl("sts"),
       "ds": tpl("ds", extra="nodeSelector: {disk: ssd, zone: a}"), "job": tpl("job", "Never"),
       "cron": tpl("cron", "OnFailure", indent=8)}


def running(name, restarts=0, ready=True):
    cs = {"name": name, "image": "img", "imageID": "", "ready": ready, "restartCount": restarts,
          "started": True, "state": {"running": {"startedAt": OLD}}}
    if restarts:
        cs["lastState"] = {"terminated": {"exitCode": 1, "startedAt": OLD, "finishedAt": OLD}}
    return cs


STATUS = [  # (path, status)
    ("/api/v1/namespaces/e2e/pods/p-run", {"phase": "Running", "podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}],
                                           "containerStatuses": [running("c1", 2), running("c2", 1)]}),
    ("/api/v1/namespaces/e2e/pods/p-init", {"phase": "Pending", "conditions": [
        {"type": "example.com/gate", "status": "True"}], "initContainerStatuses": [
        {"name": "i1", "image": "img", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": OLD, "finishedAt": OLD}}},
        {"name": "i2", "image": "img", "imageID": "", "ready": False, "restartCount": 0, "state": {"running": {"startedAt": OLD}}}],
        "containerStatuses": [{"name": "c1", "image": "img", "imageID": "", "ready": False, "restartCount": 0,
                               "state": {"waiting": {"reason": "PodInitializing"}}}]}),
    ("/api/v1/namespaces/e2e/pods/p-crash", {"phase": "Running", "containerStatuses": [
        {"name": "c1", "image": "img", "imageID": "", "ready": False, "restartCount": 7,
         "lastState": {"terminated": {"exitCode": 2, "startedAt": OLD, "finishedAt": OLD}},
         "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
    ("/api/v1/nodes/node-a", {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": OLD,
                                              "lastTransitionTime": OLD, "reason": "KubeletReady", "message": "ok"}],
                              "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                                            {"type": "ExternalIP", "address": "1.2.3.4"}],
                              "nodeInfo": {"kubeletVersion": "v1.36.3", "osImage": "Debian GNU/Linux 13",
                                           "kernelVersion": "6.12.0", "containerRuntimeVersion": "containerd://2.1",
                                           "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": "",
                                           "operatingSystem": "linux", "architecture": "amd64"}}),
    ("/api/v1/nodes/node-b", {"conditions": [{"type": "Ready", "status": "Unknown", "lastHeartbeatTime": OLD,
                                              "lastTransitionTime": OLD}]}),
    ("/api/v1/namespaces/e2e/services/s-lb", {"loadBalancer": {"ingress": [{"ip": "5.6.7.8"},
                                                                           {"hostname": "lb.example.com"}]}}),
    ("/apis/apps/v1/namespaces/e2e/deployments/web", {"replicas": 3, "updatedReplicas": 3, "readyReplicas": 2,
                                                      "availableReplicas": 2}),
    ("/apis/apps/v1/namespaces/e2e/replicasets/rs", {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1}),
    ("/apis/apps/v1/namespaces/e2e/statefulsets/sts", {"replicas": 3, "readyReplicas": 1, "availableReplicas": 1}),
    ("/apis/apps/v1/namespaces/e2e/daemonsets/ds", {"desiredNumberScheduled": 4, "currentNumberScheduled": 3,
                                                    "numberReady": 2, "updatedNumberScheduled": 3,
                                                    "numberAvailable": 2, "numberMisscheduled": 0}),
    ("/apis/batch/v1/namespaces/e2e/jobs/job", {"startTime": OLD, "active": 2, "succeeded": 1}),
    ("/apis/batch/v1/namespaces/e2e/cronjobs/cron", {"lastScheduleTime": OLD}),
    ("/api/v1/namespaces/e2e/persistentvolumeclaims/claim", {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                                                             "capacity": {"storage": "5Gi"}}),
    ("/api/v1/persistentvolumes/pv1", {"phase": "Bound"}),
    ("/apis/networking.k8s.io/v1/namespaces/e2e/ingresses/ing", {"loadBalancer": {"ingress": [{"ip": "7.7.7.7"}]}}),
]


def patch_status(cp, path, status):
    req = urllib.request.Request(cp.server + path + "/status", data=json.dumps({"status": status}).encode(),
                                 method="PATCH", headers={"Authorization": "Bearer " + cp.env["KB_K8S_ADMIN_TOKEN"],
                                                          "Content-Type": "application/merge-patch+json"})
    try:
        with urllib.request.urlopen(req, timeout=60, context=ssl.create_default_context(cafile=cp.ca)) as r:
            r.read()
    except urllib.error.HTTPError as e:
        raise Failure("PATCH %s/status -> %d %s" % (path, e.code, e.read()[:600]))


def table_of(url, path, token=None, ca=None):
    req = urllib.request.Request(url + path, headers={"Accept": TABLE})
    if token:
        req.add_header("Authorization", "Bearer " + token)
    ctx = ssl.create_default_context(cafile=ca) if ca else None
    with urllib.request.urlopen(req, timeout=60, context=ctx) as r:
        return json.loads(r.read())


def comparable(t):
    """Column definitions without descriptions; cells without the AGE column."""
    cols = [(c["name"], c["type"], c["format"], c["priority"]) for c in t["columnDefinitions"]]
    keep = [i for i, c in enumerate(cols) if c[0] != "Age"]
    return cols, [[r["cells"][i] for i in keep] for r in t["rows"]]


def without_age(out):
    """kubectl's lines with the AGE column cut out (at the header's column positions)."""
    lines = [l for l in out.split("\n") if l.strip()]
    if not lines:
        return []
    head = lines[0]
    m = re.search(r"(^| )AGE( |$)", head)
    if not m:
        return [l.rstrip() for l in lines]
    start = m.start() + (1 if m.group(1) else 0)
    nxt = re.search(r"\S", head[start + 3:])
    end = start + 3 + nxt.start() if nxt else None
    return [" ".join((l[:start] + (l[end:] if end is not None else "")).split()) for l in lines]


def test():
    cp = ControlPlane()
    k = cp.kubectl
    k("create", "namespace", "e2e")
    k("create", "serviceaccount", "default", "-n", "e2e")
    k("apply", "-f", "-", input=widgets_crd())
    k("wait", "--for", "condition=established", "--timeout=120s", "crd/widgets.example.com")
    k("create", "-f", "-", input=OBJECTS)
    for path, status in STATUS:
        patch_status(cp, path, status)

    work = tempfile.mkdtemp(prefix="kb0631-")
    port = _free_port()
    informers = ",\n  ".join('{ name = "%s"; group = "%s"; version = "%s"; resource = "%s"; }' % (r, g, VERSION[g], r)
                             for g, r, _ in KINDS)
    config = """
cluster = { name = "real"; kubeconfig = "%s"; };
http = { listen = "127.0.0.1:%d"; };
shutdown_timeout = 20;
log = { level = "info"; };
informers = (
  %s
);
""" % (cp.kubeconfig, port, informers)
    b = ConfigBridge(config, workdir=work)
    b.wait_log("http: listening on", 120)
    url = "http://127.0.0.1:%d" % port
    kb_kc = kubeconfig(work + "/kbridge.kubeconfig", url, namespace="e2e")
    token = cp.env["KB_K8S_ADMIN_TOKEN"]

    def kb(*args):
        r = subprocess.run(["kubectl", "--kubeconfig", kb_kc, "--cache-dir", work + "/kcache"] + list(args),
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, "kubectl (kbridge) %s -> %d: %s" % (" ".join(args), r.returncode, r.stderr))
        return r.stdout

    diffs = []
    for g, r, namespaced in KINDS:
        path = "/%s/%s%s/%s" % ("api" if not g else "apis/" + g, VERSION[g], "/namespaces/e2e" if namespaced else "", r)
        want = comparable(table_of(cp.server, path, token, cp.ca))

        def served():  # 429 until the informer's first list is done; every object was made before
            try:
                return table_of(url, path)
            except urllib.error.HTTPError as e:
                check(e.code == 429, "%s through kbridge -> %d" % (path, e.code))
                return None
        t = wait_for(served, 60, 0.3, "kbridge to serve %s" % r)
        check(t.get("kind") == "Table", "%s through kbridge is a %s, not a Table" % (path, t.get("kind")))
        if comparable(t) != want:
            diffs.append("%s:\n  server %s\n  kbridge %s" % (r, want, comparable(t)))
            continue
        name = SHORT.get(r, r) + ("." + g if g else "")
        for wide in ((), ("-o", "wide")):
            api, mine = without_age(k("get", name, "-n", "e2e", *wide)), without_age(kb("get", name, *wide))
            if api != mine:
                diffs.append("kubectl get %s %s:\n  server %s\n  kbridge %s" % (name, " ".join(wide), api, mine))
    check(not diffs, "\n".join(diffs))
    check(b.stop() == 0, "kbridge exit code")


if __name__ == "__main__":
    run(test)
