"""kbridge speaks the Kubernetes API for reading: kubectl, pointed at kbridge
instead of the server, finds exactly the served resources (core namespaced,
cluster-scoped, a CRD), `get -A -o json` equals the server's items, -l and
--field-selector filter as on the server, one object is shown, a missing one
is NotFound, delete is refused as a read-only replica; limit+continue pages
all come from one cut even while the server changes; resourceVersion and
resourceVersionMatch behave as on the API server (0 ignores limit, Exact,
NotOlderThan waits then 504, invalid combinations 422); protobuf requests
get JSON, Table requests a Table (0630 has the details); a second informer of the same resource is not served."""
import subprocess
from kbtest import *

INFORMERS = [
    '{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; }',
    '{ name = "nodes"; version = "v1"; resource = "nodes"; }',
    '{ name = "widgets"; group = "example.com"; version = "v1alpha1"; resource = "widgets"; }',
    '{ name = "pods-again"; version = "v1"; resource = "pods"; namespaces = [ "ns2" ]; }',
]


def strip(o):
    o = dict(o)
    o.pop("kind", None)
    o.pop("apiVersion", None)
    return o


def keyed(items):
    return {(i["metadata"].get("namespace", ""), i["metadata"]["name"]): strip(i) for i in items}


def get(url, path, accept=None):
    req = urllib.request.Request(url + path)
    if accept:
        req.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Type"), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), json.loads(e.read())


def test():
    sim = Sim()
    sim.ctl("resources", {"group": "example.com", "version": "v1alpha1", "resource": "widgets", "kind": "Widget",
                          "namespaced": False})
    sim.bulk(pod_ops("create", "ns1", ["web%02d" % i for i in range(12)], labels={"app": "web"}) +
             pod_ops("create", "ns1", ["db%02d" % i for i in range(4)], labels={"app": "db", "tier": "back"}) +
             pod_ops("create", "ns2", ["web%02d" % i for i in range(3)], labels={"app": "web"}) +
             [{"op": "create", "resource": "nodes", "version": "v1", "name": "node-%d" % i} for i in range(3)] +
             [{"op": "create", "resource": "widgets", "group": "example.com", "name": "w%d" % i,
               "labels": {"size": "s" if i % 2 else "l"}} for i in range(4)])
    b = Bridge(sim, informers=INFORMERS, http='listen = "127.0.0.1:0";')
    url = b.http_url()
    b.wait_converged(sim)
    b.wait_converged(sim, resource="widgets", group="example.com")
    check("informer pods-again watches v1/pods like an earlier informer" in b.logtext(),
          "no warning about the second pods informer:\n" + b.logtext()[-2000:])
    k = Kubectl(url, b.dir)

    # Discovery: exactly the served resources, with the server's kinds and scopes.
    out = k.run("api-resources", "--no-headers").stdout.split("\n")
    rows = sorted(" ".join(l.split()) for l in out if l.strip())
    check(rows == ["nodes v1 false Node", "pods v1 true Pod", "widgets example.com/v1alpha1 false Widget"],
          "api-resources: %s" % rows)
    code, _, ver = get(url, "/version")
    check(code == 200 and ver.get("major"), "/version -> %d %s" % (code, ver))
    code, _, res = get(url, "/apis/example.com/v1alpha1")
    verbs = res["resources"][0]["verbs"]
    check(code == 200 and sorted(verbs) == ["get", "list", "watch"], "verbs: %s" % verbs)
    check(get(url, "/apis/apps/v1")[0] == 404, "an unserved group is not found")

    # get -A -o json equals the server's items (kbridge adds kind/apiVersion to list items).
    _, raw = sim.request("GET", "/api/v1/pods")
    want = keyed(json.loads(raw)["items"])
    got = json.loads(k.run("get", "pods", "-A", "-o", "json").stdout)
    check(keyed(got["items"]) == want, "kubectl get pods -A differs from the server:\n%s\n%s"
          % (sorted(keyed(got["items"]))[:5], sorted(want)[:5]))
    _, raw = sim.request("GET", "/apis/example.com/v1alpha1/widgets")
    got = json.loads(k.run("get", "widgets", "-o", "json").stdout)
    check(keyed(got["items"]) == keyed(json.loads(raw)["items"]), "widgets differ")
    names = k.run("get", "nodes", "-o", "name").stdout.split()
    check(names == ["node/node-0", "node/node-1", "node/node-2"], "nodes: %s" % names)

    # Selectors.
    names = k.run("get", "pods", "-l", "app=db", "-o", "name").stdout.split()
    check(names == ["pod/db%02d" % i for i in range(4)], "-l app=db: %s" % names)
    names = k.run("get", "pods", "-A", "-l", "app=web,tier!=back", "-o", "name").stdout.split()
    check(len(names) == 15, "-l app=web,tier!=back: %s" % names)
    names = k.run("get", "pods", "-A", "--field-selector", "metadata.name=web01", "-o", "name").stdout.split()
    check(names == ["pod/web01", "pod/web01"], "--field-selector metadata.name=web01: %s" % names)
    names = k.run("get", "pods", "-A", "--field-selector", "metadata.namespace==ns2,metadata.name!=web00",
                  "-o", "name").stdout.split()
    check(names == ["pod/web01", "pod/web02"], "--field-selector ns2 and not web00: %s" % names)
    r = k.run("get", "pods", "--field-selector", "spec.nodeNames=x", ok=False)
    check(r.returncode != 0 and "field label not supported: spec.nodeNames" in r.stderr,
          "unsupported field: %s" % r.stderr)

    # One object, NotFound, delete refused.
    one = json.loads(k.run("get", "pod", "db02", "-o", "json").stdout)
    check(strip(one) == want[("ns1", "db02")] and one["kind"] == "Pod", "one pod: %s" % one)
    r = k.run("get", "pod", "nope", ok=False)
    check(r.returncode != 0 and 'pods "nope" not found' in r.stderr, "NotFound: %s" % r.stderr)
    r = k.run("get", "widget", "nope", ok=False)
    check(r.returncode != 0 and 'widgets.example.com "nope" not found' in r.stderr, "CRD NotFound: %s" % r.stderr)
    r = k.run("delete", "pod", "db01", ok=False)
    check(r.returncode != 0 and "read-only replica" in r.stderr, "delete: %s" % r.stderr)
    check(sim.state("pods")["items"] and any(i["key"] == "ns1/db01" for i in sim.state("pods")["items"]),
          "the pod must still exist on the server")
    code, _, st = get(url, "/api/v1/namespaces/ns1/pods/db01/status")
    check(code == 404 and st["kind"] == "Status", "subresource -> %d" % code)

    # limit + continue: every page from the first page's cut, while the server changes.
    code, _, p1 = get(url, "/api/v1/pods?limit=5")
    check(code == 200 and len(p1["items"]) == 5 and p1["metadata"].get("continue"), "page 1: %s" % p1["metadata"])
    check(p1["metadata"].get("remainingItemCount") == 14, "remainingItemCount: %s" % p1["metadata"])
    cut = {(i["metadata"]["namespace"], i["metadata"]["name"]): i["metadata"]["resourceVersion"]
           for i in json.loads(sim.request("GET", "/api/v1/pods")[1])["items"]}
    sim.bulk(pod_ops("create", "ns1", ["zz%d" % i for i in range(3)]) + pod_ops("delete", "ns2", ["web02"]) +
             pod_ops("update", "ns1", ["web11"], labels={"app": "web", "v": "2"}))
    b.wait_converged(sim)
    pages, cont = [p1], p1["metadata"]["continue"]
    while cont:
        code, _, pg = get(url, "/api/v1/pods?limit=5&continue=" + urllib.parse.quote(cont))
        check(code == 200, "continue -> %d %s" % (code, pg))
        pages.append(pg)
        cont = pg["metadata"].get("continue")
    check(len(pages) == 4 and all(p["metadata"]["resourceVersion"] == p1["metadata"]["resourceVersion"]
                                  for p in pages), "pages: %s" % [p["metadata"] for p in pages])
    paged = {(i["metadata"]["namespace"], i["metadata"]["name"]): i["metadata"]["resourceVersion"]
             for p in pages for i in p["items"]}
    check(paged == cut, "the pages are not the first page's cut")
    code, _, st = get(url, "/api/v1/pods?limit=5&continue=99:6e73")
    check(code == 410 and st["reason"] == "Expired", "unknown continue -> %d %s" % (code, st))

    # resourceVersion / resourceVersionMatch.
    code, _, lst = get(url, "/api/v1/pods?limit=2&resourceVersion=0")
    check(code == 200 and len(lst["items"]) == 21 and "continue" not in lst["metadata"], "RV=0 ignores limit")
    cur = get(url, "/api/v1/pods")[2]["metadata"]["resourceVersion"]
    code, _, lst = get(url, "/api/v1/pods?resourceVersion=%s&resourceVersionMatch=Exact" % cur)
    check(code == 200 and lst["metadata"]["resourceVersion"] == cur, "Exact current -> %d" % code)
    code, _, st = get(url, "/api/v1/pods?resourceVersion=2&resourceVersionMatch=Exact")
    check(code == 410 and st["reason"] == "Expired", "Exact old -> %d %s" % (code, st))
    code, _, lst = get(url, "/api/v1/pods?resourceVersion=2&resourceVersionMatch=NotOlderThan")
    check(code == 200 and lst["metadata"]["resourceVersion"] == cur, "NotOlderThan old -> %d" % code)
    t0 = time.monotonic()
    code, _, st = get(url, "/api/v1/pods?resourceVersion=%d&resourceVersionMatch=NotOlderThan" % (int(cur) + 1000))
    check(code == 504 and st["reason"] == "Timeout" and st["details"]["causes"][0]["reason"] ==
          "ResourceVersionTooLarge" and time.monotonic() - t0 >= 2.5, "too large -> %d %s" % (code, st))
    for q, want_code in (("resourceVersionMatch=NotOlderThan", 422), ("resourceVersion=0&resourceVersionMatch=Exact",
                                                                      422),
                         ("resourceVersion=5&continue=1:61", 400), ("resourceVersion=abc", 400),
                         ("labelSelector=a%20in", 400)):
        code, _, st = get(url, "/api/v1/pods?" + q)
        check(code == want_code and st["kind"] == "Status", "%s -> %d (want %d)" % (q, code, want_code))

    # Protobuf requests get JSON; Table requests a Table.
    code, ctype, lst = get(url, "/api/v1/namespaces/ns2/pods", accept="application/vnd.kubernetes.protobuf")
    check(code == 200 and ctype == "application/json" and lst["kind"] == "PodList" and len(lst["items"]) == 2,
          "protobuf accept -> %d %s" % (code, ctype))
    code, ctype, lst = get(url, "/api/v1/nodes", accept="application/json;as=Table;v=v1;g=meta.k8s.io")
    check(code == 200 and lst["kind"] == "Table" and len(lst["rows"]) == 3, "Table accept -> %d" % code)

    # The second pods informer (ns2 only) is not what serves pods: ns1 is there.
    check(len(get(url, "/api/v1/namespaces/ns1/pods")[2]["items"]) == 19, "pods come from the first informer")
    m = http_request(url + "/metrics")[2].decode()
    check('kbridge_api_requests_total{verb="list",resource="pods",code="200"}' in m and
          'kbridge_api_requests_total{verb="delete",resource="pods",code="405"} 1' in m and
          'kbridge_api_requests_total{verb="list",resource="pods",code="504"} 1' in m, "metrics:\n" + m[-3000:])

    # A reload (SIGHUP) that adds an informer: its resource is discovered and served.
    sim.bulk([{"op": "create", "resource": "configmaps", "version": "v1", "namespace": "ns1", "name": "cm1"}])
    with open(b.config) as f:
        text = f.read()
    text = text.replace(INFORMERS[0] + ",", INFORMERS[0] + ',\n  { name = "cms"; version = "v1"; resource = "configmaps"; },')
    text = text.replace('{ informer = "pods"; sink = "out"; }', '{ informer = "pods"; sink = "out"; }, '
                        '{ informer = "cms"; sink = "out"; }', 1)
    with open(b.config, "w") as f:
        f.write(text)
    import signal
    b.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reloaded" in b.logtext(), 30, what="the reload")
    wait_for(lambda: "configmaps v1 true ConfigMap" in
             " ".join(k.run("api-resources", "--no-headers", "--cached=false").stdout.split()), 30,
             what="configmaps in discovery after the reload")
    names = k.run("get", "configmaps", "-o", "name").stdout.split()
    check(names == ["configmap/cm1"], "configmaps after the reload: %s" % names)
    # kube_api settings apply at start only: a reload that changes them is refused.
    with open(b.config, "a") as f:
        f.write("kube_api = { watch_history = 7; };\n")
    b.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "kube_api.watch_history changed; it applies only on restart" in b.logtext(), 30,
             what="the refused reload")
    check(b.stop() == 0, "kbridge exit code")
    sim.stop()


if __name__ == "__main__":
    import urllib.parse
    run(test)
