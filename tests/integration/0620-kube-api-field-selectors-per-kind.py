"""Field selectors on kbridge's Kubernetes API are the API server's, per kind:
`kubectl get pods --field-selector spec.nodeName=node-1` (how a node agent
lists its own node's pods) and `status.phase=Running,spec.nodeName!=node-2`
print exactly the pods the server's field sets select (computed here from
kubesim's objects: a missing field is "", spec.hostNetwork "false",
status.podIP is the first of status.podIPs, status.podIPs is accepted but
never set); a paged list keeps the selector across continue (another one
with the token is a 400); events select
by involvedObject.*, type, reason and source (source.component, else
reportingComponent), secrets by type, nodes by spec.unschedulable; a label
the kind does not have is a 400 in the server's words (its conversion's
"field label not supported" for a kind with one, "is not a known field
selector" for the rest), and so is metadata.namespace on nodes."""
import urllib.parse
from kbtest import *

INFORMERS = [
    '{ name = "pods"; version = "v1"; resource = "pods"; }',
    '{ name = "nodes"; version = "v1"; resource = "nodes"; }',
    '{ name = "events"; version = "v1"; resource = "events"; }',
    '{ name = "secrets"; version = "v1"; resource = "secrets"; }',
    '{ name = "configmaps"; version = "v1"; resource = "configmaps"; }',
]


def pod_fields(o):
    spec, st = o.get("spec") or {}, o.get("status") or {}
    ips = st.get("podIPs") or []
    return {"spec.nodeName": spec.get("nodeName", ""), "spec.restartPolicy": spec.get("restartPolicy", ""),
            "spec.schedulerName": spec.get("schedulerName", ""),
            "spec.serviceAccountName": spec.get("serviceAccountName", ""),
            "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
            "status.phase": st.get("phase", ""), "status.podIP": ips[0]["ip"] if ips else st.get("podIP", ""),
            "status.nominatedNodeName": st.get("nominatedNodeName", "")}


def selected(items, fields_of, selector):
    """The (namespace, name) of items the selector picks, as the API server's fields.Set does."""
    out = set()
    for o in items:
        md = o["metadata"]
        f = dict(fields_of(o), **{"metadata.name": md["name"], "metadata.namespace": md.get("namespace", "")})
        ok = True
        for term in selector.split(","):
            neg = "!=" in term
            label, value = term.split("!=" if neg else ("==" if "==" in term else "="), 1)
            ok = ok and ((f.get(label, "") == value) != neg)
        if ok:
            out.add((md.get("namespace", ""), md["name"]))
    return out


def api(url, path):
    code, _, body = http_request(url + path)
    return code, json.loads(body)


def keys(items):
    return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in items}


def pod(ns, name, node, phase, **more):
    data = {"spec": {"nodeName": node} if node else {}, "status": {"phase": phase} if phase else {}}
    for k, v in more.items():
        data["spec" if k in ("hostNetwork", "restartPolicy") else "status"][k] = v
    return {"op": "create", "resource": "pods", "version": "v1", "namespace": ns, "name": name, "data": data}


def event(ns, name, about, **data):
    data["involvedObject"] = dict({"kind": "Pod", "apiVersion": "v1", "namespace": ns}, **about)
    return {"op": "create", "resource": "events", "version": "v1", "namespace": ns, "name": name, "data": data}


def test():
    sim = Sim()
    ops = [{"op": "create", "resource": "nodes", "version": "v1", "name": "node-%d" % i,
            "data": {"spec": {"unschedulable": True}} if i == 1 else {}} for i in range(3)]
    phases = ["Running", "Pending", "Running", "Succeeded", None]
    for i in range(15):
        ops.append(pod("ns1" if i % 3 else "ns2", "p%02d" % i, "node-%d" % (i % 4) if i % 4 < 3 else "",
                       phases[i % 5]))
    ops.append(pod("ns1", "hostnet", "node-1", "Running", hostNetwork=True, restartPolicy="Never",
                   podIP="10.0.0.5", podIPs=[{"ip": "10.0.0.5"}, {"ip": "fd00::5"}]))
    ops.append(pod("ns1", "oldip", "node-2", "Running", podIP="10.0.0.6"))
    ops += [event("ns1", "e1", {"name": "p01", "uid": "u1"}, reason="Scheduled", type="Normal",
                  source={"component": "default-scheduler"}),
            event("ns1", "e2", {"name": "p01", "uid": "u1"}, reason="BackOff", type="Warning",
                  reportingComponent="kubelet"),
            event("ns2", "e3", {"name": "p01", "uid": "u2"}, reason="BackOff", type="Warning",
                  source={"component": "kubelet"}),
            {"op": "create", "resource": "secrets", "version": "v1", "namespace": "ns1", "name": "tls",
             "data": {"type": "kubernetes.io/tls"}},
            {"op": "create", "resource": "secrets", "version": "v1", "namespace": "ns1", "name": "plain",
             "data": {"type": "Opaque"}},
            {"op": "create", "resource": "configmaps", "version": "v1", "namespace": "ns1", "name": "c1"}]
    sim.bulk(ops)
    b = Bridge(sim, informers=INFORMERS, http='listen = "127.0.0.1:0";')
    url = b.http_url()
    for res in ("pods", "nodes", "events", "secrets", "configmaps"):
        b.wait_converged(sim, resource=res)
    k = Kubectl(url, b.dir)
    _, raw = sim.request("GET", "/api/v1/pods")
    pods = json.loads(raw)["items"]

    # kubectl: exactly what the server's field sets select.
    for sel in ("spec.nodeName=node-1", "status.phase=Running,spec.nodeName!=node-2", "spec.nodeName=",
                "spec.hostNetwork=true", "spec.hostNetwork==false,metadata.namespace=ns1",
                "spec.restartPolicy=Never", "status.podIP=10.0.0.5", "status.podIP=10.0.0.6",
                "spec.host=node-1"):
        want = selected(pods, pod_fields, sel.replace("spec.host=", "spec.nodeName="))
        got = keys(json.loads(k.run("get", "pods", "-A", "--field-selector", sel, "-o", "json").stdout)["items"])
        check(got == want, "--field-selector %s: got %s, want %s" % (sel, sorted(got), sorted(want)))
        check(want, "selector %s selects nothing: the test proves nothing" % sel)
    # status.podIPs: accepted, but no value in the server's field set, so it reads "".
    got = keys(json.loads(k.run("get", "pods", "-A", "--field-selector", "status.podIPs=10.0.0.5",
                                "-o", "json").stdout)["items"])
    check(got == set(), "status.podIPs=10.0.0.5 selects %s (the server selects nothing)" % sorted(got))
    got = keys(json.loads(k.run("get", "pods", "-A", "--field-selector", "status.podIPs=",
                                "-o", "json").stdout)["items"])
    check(got == keys(pods), "status.podIPs= selects %d of %d pods" % (len(got), len(pods)))

    # A paged list keeps the selector on every page.
    want = selected(pods, pod_fields, "status.phase=Running")
    got, cont = set(), ""
    for _ in range(20):
        code, page = api(url, "/api/v1/pods?fieldSelector=status.phase%3DRunning&limit=2" +
                         ("&continue=" + cont if cont else ""))
        check(code == 200 and len(page["items"]) <= 2, "paged list -> %d %s" % (code, page))
        got |= keys(page["items"])
        cont = page["metadata"].get("continue", "")
        if not cont:
            break
    check(got == want, "paged status.phase=Running: got %s, want %s" % (sorted(got), sorted(want)))
    code, first = api(url, "/api/v1/pods?fieldSelector=status.phase%3DRunning&limit=2")
    code, st = api(url, "/api/v1/pods?fieldSelector=status.phase%3DPending&limit=2&continue=" +
                   urllib.parse.quote(first["metadata"]["continue"]))
    check(code == 400 and "fieldSelector differs" in st["message"], "continue, another fieldSelector -> %d %s"
          % (code, st))

    # Events, secrets, nodes.
    for sel, want in (("type=Warning", {("ns1", "e2"), ("ns2", "e3")}),
                      ("source=kubelet", {("ns1", "e2"), ("ns2", "e3")}),
                      ("source=default-scheduler", {("ns1", "e1")}),
                      ("reportingComponent=kubelet", {("ns1", "e2")}),
                      ("involvedObject.name=p01,involvedObject.namespace=ns1,involvedObject.uid=u1",
                       {("ns1", "e1"), ("ns1", "e2")}),
                      ("involvedObject.kind=Pod,reason!=BackOff", {("ns1", "e1")})):
        code, lst = api(url, "/api/v1/events?fieldSelector=" + urllib.parse.quote(sel))
        check(code == 200 and keys(lst["items"]) == want, "events %s -> %d %s" % (sel, code, lst))
    code, lst = api(url, "/api/v1/namespaces/ns1/secrets?fieldSelector=type%3Dkubernetes.io%2Ftls")
    check(code == 200 and keys(lst["items"]) == {("ns1", "tls")}, "secrets type -> %d %s" % (code, lst))
    names = k.run("get", "nodes", "--field-selector", "spec.unschedulable=true", "-o", "name").stdout.split()
    check(names == ["node/node-1"], "spec.unschedulable=true: %s" % names)
    names = k.run("get", "nodes", "--field-selector", "spec.unschedulable=false", "-o", "name").stdout.split()
    check(names == ["node/node-0", "node/node-2"], "spec.unschedulable=false (unset reads false): %s" % names)

    # A label the kind does not have: 400 in the server's words.
    for path, msg in (("/api/v1/pods?fieldSelector=spec.foo%3Dx", "field label not supported: spec.foo"),
                      ("/api/v1/nodes?fieldSelector=metadata.namespace%3Dx",
                       "field label not supported: metadata.namespace"),
                      ("/api/v1/events?fieldSelector=involvedObject.nam%3Dx",
                       "field label not supported: involvedObject.nam"),
                      ("/api/v1/configmaps?fieldSelector=data.x%3Dy",
                       '"data.x" is not a known field selector: only "metadata.name", "metadata.namespace"'),
                      ("/api/v1/pods?watch=true&fieldSelector=status.hostIP%3Dx",
                       "field label not supported: status.hostIP")):
        code, st = api(url, path)
        check(code == 400 and st.get("reason") == "BadRequest" and st.get("message") == msg,
              "%s -> %d %s (want 400 %s)" % (path, code, st, msg))
    r = k.run("get", "pods", "--field-selector", "status.hostIP=1.2.3.4", ok=False)
    check(r.returncode != 0 and "field label not supported: status.hostIP" in r.stderr, "kubectl: %s" % r.stderr)
    b.stop()
    sim.stop()


run(test)
