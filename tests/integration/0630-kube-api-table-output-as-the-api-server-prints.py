"""kubectl pointed at kbridge prints the columns and cells the API server
would print (server-side Table output, meta.k8s.io/v1): `kubectl get` and
`-o wide` for pods (READY, STATUS reason logic — init containers, waiting,
terminated, Completed, Terminating —, RESTARTS with "(10d ago)", IP, NODE,
NOMINATED NODE, READINESS GATES), events (old and new style), nodes,
deployments, configmaps and secrets; AGE aside, the expected cells are written
here from the objects created. includeObject=None|Metadata|Object shapes each
row's object as the API server does, a get is a one-row Table whose
resourceVersion is the object's, a watch sends one-row Tables, and a kind
without a printer gets the default Name / Created At table."""
import datetime
import subprocess
from kbtest import *

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
INFORMERS = ['{ name = "%s"; group = "%s"; version = "v1"; resource = "%s"; }' % (r, g, r)
             for g, r in (("", "pods"), ("", "events"), ("", "nodes"), ("apps", "deployments"), ("", "configmaps"),
                          ("", "secrets"), ("", "namespaces"))] + [
    '{ name = "widgets"; group = "example.com"; version = "v1alpha1"; resource = "widgets"; }',
    '{ name = "clusterroles"; group = "rbac.authorization.k8s.io"; version = "v1"; resource = "clusterroles"; }']
NOW = datetime.datetime.now(datetime.timezone.utc)
TEN_DAYS = (NOW - datetime.timedelta(days=10, hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
TEN_DAYS_US = (NOW - datetime.timedelta(days=10, hours=1)).strftime("%Y-%m-%dT%H:%M:%S.123456Z")


def running(name, ready=True, restarts=0):
    cs = {"name": name, "ready": ready, "restartCount": restarts, "state": {"running": {"startedAt": TEN_DAYS}}}
    if restarts:
        cs["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": TEN_DAYS}}
    return cs


def spec(*names, **kw):
    s = {"containers": [{"name": n, "image": "img-" + n} for n in names]}
    s.update(kw)
    return s


# name → (spec, status, extra metadata, expected cells without AGE: READY STATUS RESTARTS | IP NODE NOMINATED GATES)
PODS = {
    "a-running": (spec("c1", "c2", nodeName="node-a"),
                  {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}], "podIP": "10.0.0.5",
                   "containerStatuses": [running("c1", restarts=2), running("c2", restarts=1)]}, {},
                  ["2/2", "Running", "3 (10d ago)"], ["10.0.0.5", "node-a", "<none>", "<none>"]),
    "b-crashloop": (spec("c1", "c2", nodeName="node-b"),
                    {"phase": "Running", "containerStatuses": [
                        {"name": "c1", "ready": False, "restartCount": 7,
                         "lastState": {"terminated": {"exitCode": 2, "finishedAt": TEN_DAYS}},
                         "state": {"waiting": {"reason": "CrashLoopBackOff"}}}, running("c2", ready=False)]}, {},
                    ["0/2", "CrashLoopBackOff", "7 (10d ago)"], ["<none>", "node-b", "<none>", "<none>"]),
    "c-pending": (spec("c1"), {"phase": "Pending"}, {}, ["0/1", "Pending", "0"],
                  ["<none>", "<none>", "<none>", "<none>"]),
    "d-init": (spec("c1", initContainers=[{"name": "i1", "image": "x"}, {"name": "i2", "image": "y"}]),
               {"phase": "Pending", "initContainerStatuses": [
                   {"name": "i1", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                   {"name": "i2", "restartCount": 0, "state": {"running": {}}}],
                "containerStatuses": [{"name": "c1", "ready": False, "restartCount": 0,
                                       "state": {"waiting": {"reason": "PodInitializing"}}}]}, {},
               ["0/1", "Init:1/2", "0"], ["<none>", "<none>", "<none>", "<none>"]),
    "e-done": (spec("c1"), {"phase": "Succeeded", "containerStatuses": [
        {"name": "c1", "ready": False, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]},
               {}, ["0/1", "Completed", "0"], ["<none>", "<none>", "<none>", "<none>"]),
    "f-killed": (spec("c1"), {"phase": "Failed", "containerStatuses": [
        {"name": "c1", "ready": False, "restartCount": 0, "state": {"terminated": {"exitCode": 137}}}]},
                 {}, ["0/1", "ExitCode:137", "0"], ["<none>", "<none>", "<none>", "<none>"]),
    "g-terminating": (spec("c1"), {"phase": "Running", "containerStatuses": [running("c1")]},
                      {"deletionTimestamp": TEN_DAYS, "deletionGracePeriodSeconds": 30},
                      ["1/1", "Terminating", "0"], ["<none>", "<none>", "<none>", "<none>"]),
    "h-gates": (spec("c1", readinessGates=[{"conditionType": "x/one"}, {"conditionType": "x/two"}]),
                {"phase": "Pending", "nominatedNodeName": "node-c",
                 "conditions": [{"type": "x/one", "status": "True"}, {"type": "x/two", "status": "False"}]}, {},
                ["0/1", "Pending", "0"], ["<none>", "<none>", "node-c", "1/2"]),
    "i-sidecar": (spec("c1", initContainers=[{"name": "side", "image": "s", "restartPolicy": "Always"}]),
                  {"phase": "Running", "conditions": [{"type": "Initialized", "status": "True"}],
                   "initContainerStatuses": [{"name": "side", "ready": True, "started": True, "restartCount": 4,
                                              "lastState": {"terminated": {"exitCode": 1, "finishedAt": TEN_DAYS}},
                                              "state": {"running": {}}}],
                   "containerStatuses": [running("c1")]}, {},
                  ["2/2", "Running", "4 (10d ago)"], ["<none>", "<none>", "<none>", "<none>"]),
}

EVENTS = [  # (name, object, expected: LAST SEEN TYPE REASON OBJECT | SUBOBJECT SOURCE MESSAGE FIRST SEEN COUNT NAME)
    ("ev-old", {"involvedObject": {"kind": "Pod", "name": "a-running", "namespace": "ns1",
                                   "fieldPath": "spec.containers{c1}"},
                "reason": "BackOff", "message": "  Back-off restarting failed container\n", "type": "Warning",
                "source": {"component": "kubelet", "host": "node-a"}, "count": 3,
                "firstTimestamp": TEN_DAYS, "lastTimestamp": TEN_DAYS},
     ["10d", "Warning", "BackOff", "pod/a-running"],
     ["spec.containers{c1}", "kubelet, node-a", "Back-off restarting failed container", "10d", "3", "ev-old"]),
    ("ev-new", {"involvedObject": {"kind": "Deployment", "name": "web"}, "reason": "ScalingReplicaSet",
                "message": "Scaled up", "type": "Normal", "eventTime": TEN_DAYS_US,
                "reportingComponent": "deployment-controller", "reportingInstance": "",
                "series": {"count": 5, "lastObservedTime": TEN_DAYS_US}},
     ["10d", "Normal", "ScalingReplicaSet", "deployment/web"],
     ["", "deployment-controller", "Scaled up", "10d", "5", "ev-new"]),
]
EVENTS.sort()  # the server's order: by namespace/name

NODES = [  # (name, data, expected STATUS ROLES VERSION | INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION CONTAINER-RUNTIME)
    ("node-a", {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/worker": "",
                                        "kubernetes.io/role": "edge"}},
                "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                           "addresses": [{"type": "Hostname", "address": "a"}, {"type": "InternalIP", "address": "10.0.0.1"},
                                         {"type": "ExternalIP", "address": "1.2.3.4"}],
                           "nodeInfo": {"kubeletVersion": "v1.36.3", "osImage": "Debian GNU/Linux 13",
                                        "kernelVersion": "6.12.0", "containerRuntimeVersion": "containerd://2.1"}}},
     ["Ready", "control-plane,edge,worker", "v1.36.3"],
     ["10.0.0.1", "1.2.3.4", "Debian GNU/Linux 13", "6.12.0", "containerd://2.1"]),
    ("node-b", {"spec": {"unschedulable": True}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
     ["NotReady,SchedulingDisabled", "<none>", ""], ["<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"]),
    ("node-c", {}, ["Unknown", "<none>", ""], ["<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"]),
]


def ops():
    out = []
    for name, (sp, st, md, _, _) in PODS.items():
        data = {"spec": sp, "status": st}
        if md:
            data["metadata"] = md
        out += pod_ops("create", "ns1", [name], extra=data)
    for name, obj, _, _ in EVENTS:
        out.append({"op": "create", "resource": "events", "version": "v1", "namespace": "ns1", "name": name, "data": obj})
    for name, data, _, _ in NODES:
        out.append({"op": "create", "resource": "nodes", "version": "v1", "name": name, "data": data})
    out.append({"op": "create", "resource": "deployments", "group": "apps", "version": "v1", "namespace": "ns1",
                "name": "web", "data": {
                    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [
                        {"key": "tier", "operator": "In", "values": ["b", "a"]}, {"key": "canary", "operator": "DoesNotExist"}]},
                        "template": {"spec": spec("c1", "c2")}},
                    "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}})
    out.append({"op": "create", "resource": "clusterroles", "group": "rbac.authorization.k8s.io", "version": "v1",
                "name": "view"})
    out.append({"op": "create", "resource": "widgets", "group": "example.com", "version": "v1alpha1", "name": "w1"})
    out.append({"op": "create", "resource": "configmaps", "version": "v1", "namespace": "ns1", "name": "cm",
                "data": {"data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}}})
    out.append({"op": "create", "resource": "secrets", "version": "v1", "namespace": "ns1", "name": "tls",
                "data": {"type": "kubernetes.io/tls", "data": {"tls.crt": "AA==", "tls.key": "AA=="}}})
    return out


def kubectl(kc, *args):
    r = subprocess.run(["kubectl", "--kubeconfig", kc, "--cache-dir", os.path.dirname(kc) + "/cache"] + list(args),
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "kubectl %s -> %d: %s" % (" ".join(args), r.returncode, r.stderr[-1500:]))
    return r.stdout


def table(out, headers):
    """kubectl's aligned output as rows of cells, cut at the header's column starts."""
    lines = [l for l in out.split("\n") if l.strip()]
    starts, pos = [], 0
    for h in headers:
        i = lines[0].find(h, pos)
        check(i >= 0, "header %r not in %r" % (h, lines[0]))
        starts.append(i)
        pos = i + len(h)
    check(lines[0].split() == " ".join(headers).split(), "headers: %r, want %r" % (lines[0], headers))
    ends = starts[1:] + [None]
    return [[l[s:e].strip() for s, e in zip(starts, ends)] for l in lines[1:]]


def drop(rows, col):
    return [r[:col] + r[col + 1:] for r in rows]


def compare(kc, what, headers, age_col, want, *extra):
    got = drop(table(kubectl(kc, "get", what, *extra), headers), age_col)
    check(got == want, "kubectl get %s %s:\n got  %s\n want %s" % (what, " ".join(extra), got, want))


def get(url, path, accept=TABLE):
    req = urllib.request.Request(url + path, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test():
    sim = Sim()
    sim.ctl("resources", {"group": "rbac.authorization.k8s.io", "version": "v1", "resource": "clusterroles",
                          "kind": "ClusterRole", "namespaced": False})
    sim.ctl("resources", {"group": "example.com", "version": "v1alpha1", "resource": "widgets", "kind": "Widget",
                          "namespaced": False})
    sim.bulk(ops())
    b = Bridge(sim, informers=INFORMERS, http='listen = "127.0.0.1:0";')
    url = b.http_url()
    for res, grp in (("pods", None), ("events", None), ("nodes", None), ("deployments", "apps"), ("configmaps", None),
                     ("secrets", None)):
        b.wait_converged(sim, resource=res, group=grp)
    kc = os.path.join(b.dir, "kubeconfig")
    with open(kc, "w") as f:
        f.write("apiVersion: v1\nkind: Config\nclusters: [{name: kb, cluster: {server: \"%s\"}}]\n"
                "contexts: [{name: kb, context: {cluster: kb, namespace: ns1}}]\ncurrent-context: kb\n"
                "users: []\n" % url)

    pods = sorted(PODS.items())
    compare(kc, "pods", ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], 4, [[n] + p[3] for n, p in pods])
    compare(kc, "pods", ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE",
                         "READINESS GATES"], 4, [[n] + p[3] + p[4] for n, p in pods], "-o", "wide")
    compare(kc, "events", ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], 99,
            [e[2] + [e[3][2]] for e in EVENTS])
    compare(kc, "events", ["LAST SEEN", "TYPE", "REASON", "OBJECT", "SUBOBJECT", "SOURCE", "MESSAGE", "FIRST SEEN",
                           "COUNT", "NAME"], 99, [e[2] + e[3] for e in EVENTS], "-o", "wide")
    compare(kc, "nodes", ["NAME", "STATUS", "ROLES", "AGE", "VERSION"], 3, [[n] + w for n, _, w, _ in NODES])
    compare(kc, "nodes", ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE",
                          "KERNEL-VERSION", "CONTAINER-RUNTIME"], 3, [[n] + w + x for n, _, w, x in NODES], "-o", "wide")
    compare(kc, "deployments", ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"], 4, [["web", "2/3", "3", "2"]])
    compare(kc, "deployments", ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"],
            4, [["web", "2/3", "3", "2", "c1,c2", "img-c1,img-c2", "app=web,!canary,tier in (a,b)"]], "-o", "wide")
    compare(kc, "configmaps", ["NAME", "DATA", "AGE"], 2, [["cm", "3"]])
    compare(kc, "secrets", ["NAME", "TYPE", "DATA", "AGE"], 3, [["tls", "kubernetes.io/tls", "2"]])
    # A CRD (no additionalPrinterColumns): Name and Age.
    check(drop(table(kubectl(kc, "get", "widgets"), ["NAME", "AGE"]), 1) == [["w1"]], "widgets")
    # A built-in kind without a printer: the API server's default columns, the creation time as RFC 3339.
    created = get(url, "/apis/rbac.authorization.k8s.io/v1/clusterroles/view", accept="application/json")[
        "metadata"]["creationTimestamp"]
    out = table(kubectl(kc, "get", "clusterroles"), ["NAME", "CREATED AT"])
    check(out == [["view", created]], "clusterroles: %s" % out)

    # includeObject: Metadata (the default), None, Object — per row, as the API server shapes it.
    plain = get(url, "/api/v1/namespaces/ns1/pods", accept="application/json")["items"]
    t = get(url, "/api/v1/namespaces/ns1/pods")
    check(t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1" and
          t["metadata"]["resourceVersion"] and len(t["rows"]) == len(PODS), "Table: %s" % str(t)[:500])
    check([c["name"] for c in t["columnDefinitions"]] ==
          ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"] and
          [c["priority"] for c in t["columnDefinitions"]] == [0, 0, 0, 0, 0, 1, 1, 1, 1], "columns")
    for row, obj in zip(t["rows"], plain):
        check(row["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                "metadata": obj["metadata"]}, "Metadata row object: %s" % row["object"])
    rows = {r["cells"][0]: r for r in t["rows"]}
    check(rows["e-done"].get("conditions") == [{"type": "Completed", "status": "True", "reason": "Succeeded",
                                                "message": "The pod has completed successfully."}] and
          "conditions" not in rows["a-running"], "row conditions: %s" % rows["e-done"])
    t = get(url, "/api/v1/namespaces/ns1/pods?includeObject=Object")
    check([r["object"] for r in t["rows"]] == plain, "includeObject=Object embeds the objects")
    t = get(url, "/api/v1/namespaces/ns1/pods?includeObject=None")
    check(all(r["object"] is None for r in t["rows"]), "includeObject=None")
    one = get(url, "/api/v1/namespaces/ns1/pods/a-running?includeObject=Object")
    check(one["kind"] == "Table" and len(one["rows"]) == 1 and one["rows"][0]["object"] == plain[0] and
          one["metadata"]["resourceVersion"] == plain[0]["metadata"]["resourceVersion"], "get: %s" % str(one)[:400])
    try:
        get(url, "/api/v1/namespaces/ns1/pods?includeObject=Everything")
        check(False, "an unknown includeObject is refused")
    except urllib.error.HTTPError as e:
        check(e.code == 400, "includeObject=Everything -> %d" % e.code)
    # Plain JSON still when Table is not asked for first.
    check(get(url, "/api/v1/nodes", accept="application/json, application/json;as=Table;v=v1;g=meta.k8s.io")["kind"]
          == "NodeList", "JSON first")
    # A watch sends one-row Tables, the columns in the first only (null after, as the API server does),
    # bookmarks too.
    req = urllib.request.Request(url + "/api/v1/namespaces/ns1/configmaps?watch=1&timeoutSeconds=3&"
                                 "allowWatchBookmarks=true", headers={"Accept": TABLE})
    with urllib.request.urlopen(req, timeout=30) as r:
        first = json.loads(r.readline())
        sim.bulk([{"op": "create", "resource": "configmaps", "version": "v1", "namespace": "ns1", "name": "cm2"}])
        events = [first] + [json.loads(l) for l in r]
    check(first["type"] == "ADDED" and first["object"]["kind"] == "Table" and
          first["object"]["rows"][0]["cells"][:2] == ["cm", 3] and len(first["object"]["columnDefinitions"]) == 3,
          "first watch event: %s" % str(first)[:400])
    second, last = events[1], events[-1]
    check(second["type"] == "ADDED" and second["object"]["columnDefinitions"] is None and
          second["object"]["rows"][0]["cells"][:2] == ["cm2", 0], "second watch event: %s" % str(second)[:400])
    check(last["type"] == "BOOKMARK" and last["object"]["kind"] == "Table" and
          last["object"]["metadata"]["resourceVersion"] and last["object"]["rows"][0]["cells"] == ["", 0, "<unknown>"],
          "bookmark: %s" % str(last)[:400])
    # limit + continue pages are Tables too.
    t = get(url, "/api/v1/namespaces/ns1/pods?limit=3")
    check(len(t["rows"]) == 3 and t["metadata"].get("continue") and t["metadata"].get("remainingItemCount") == 6,
          "paged Table: %s" % t["metadata"])
    check(b.stop() == 0, "kbridge exit code")
    sim.stop()


if __name__ == "__main__":
    run(test)
