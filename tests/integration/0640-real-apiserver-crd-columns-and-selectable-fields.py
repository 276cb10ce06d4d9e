#!/usr/bin/env python3
"""Against a real kube-apiserver: a CRD with additionalPrinterColumns (string, integer, number,
boolean and date columns; a map printed as JSON; a filter and an index in a JSONPath; a priority-1
column for -o wide; a path the object lacks) and selectableFields (a string, an integer, a boolean).
kbridge reads the CRD when it starts, so through it: the Table has the server's columns and cells,
`kubectl get` and `kubectl get -o wide` print the same lines, field selectors on the selectable
fields list what the server lists (an unknown label is the server's 400), and a client-go informer
with `spec.color=red` ends equal to the same informer on the server through patches that move
gadgets into the selector and out of it (the enter/leave rule). An informer a SIGHUP reload adds, on a
cluster-scoped CRD, has its CRD read too: its selectable field works and metadata.namespace is refused
as the server refuses it."""
import datetime
import signal
import subprocess

from kbtest import *
from kbclientgo import ClientGo, api, binary, replica

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
OLD = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=10, hours=1)).strftime(
    "%Y-%m-%dT%H:%M:%SZ")

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    selectableFields: [{jsonPath: .spec.color}, {jsonPath: .spec.size}, {jsonPath: .spec.on}]
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Ratio, type: number, jsonPath: .spec.ratio}
    - {name: "On", type: boolean, jsonPath: .spec.on}
    - {name: Tags, type: string, jsonPath: .spec.tags}
    - {name: Ready, type: string, jsonPath: ".status.conditions[?(@.type==\\"Ready\\")].status"}
    - {name: First, type: string, jsonPath: ".spec.parts[0].name"}
    - {name: Seen, type: date, jsonPath: .status.seen}
    - {name: Zone, type: string, jsonPath: .spec.zone, priority: 1, description: "Where it runs."}
    - {name: Size Text, type: string, jsonPath: .spec.size, priority: 1}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              color: {type: string}
              size: {type: integer}
              ratio: {type: number}
              "on": {type: boolean}
              zone: {type: string}
              tags: {type: object, additionalProperties: {type: string}}
              parts: {type: array, items: {type: object, properties: {name: {type: string}}}}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: racks.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {plural: racks, singular: rack, kind: Rack}
  versions:
  - name: v1
    served: true
    storage: true
    selectableFields: [{jsonPath: .spec.row}]
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {row: {type: string}}}
"""

GADGETS = """
apiVersion: example.com/v1
kind: Gadget
metadata: {name: g1, namespace: e2e}
spec: {color: red, size: 3, ratio: 1.5, "on": true, zone: a, tags: {b: "2", a: "<1>"}, parts: [{name: p0}, {name: p1}]}
---
apiVersion: example.com/v1
kind: Gadget
metadata: {name: g2, namespace: e2e}
spec: {color: blue, size: 10, ratio: 2, "on": false}
---
apiVersion: example.com/v1
kind: Gadget
metadata: {name: g3, namespace: e2e}
spec: {size: 3}
---
apiVersion: example.com/v1
kind: Rack
metadata: {name: r1}
spec: {row: "7"}
"""



def comparable(t):
    cols = [(c["name"], c["type"], c["format"], c["priority"], c["description"]) for c in t["columnDefinitions"]]
    return cols, [r["cells"] for r in t["rows"]]


def test():
    exe = binary()
    cp = ControlPlane()
    k = cp.kubectl
    token = cp.env["KB_K8S_ADMIN_TOKEN"]
    k("create", "namespace", "e2e")
    k("apply", "-f", "-", input=CRD)
    k("wait", "--for", "condition=established", "--timeout=120s", "crd/gadgets.example.com", "crd/racks.example.com")
    k("create", "-f", "-", input=GADGETS)
    st, body = api(cp.server, "/apis/example.com/v1/namespaces/e2e/gadgets/g1/status", token, cp.ca, method="PATCH",
                   body={"status": {"seen": OLD, "conditions": [{"type": "Other", "status": "No"},
                                                                {"type": "Ready", "status": "True"}]}},
                   ctype="application/merge-patch+json")
    check(st == 200, "status patch -> %d %s" % (st, body))

    work = tempfile.mkdtemp(prefix="kb0640-")
    b, kb_kc, url = replica(cp, [("gadgets", "example.com", "v1", "gadgets")], work)
    b.wait_log("informer=gadgets listed", 120)
    gpath = "/apis/example.com/v1/namespaces/e2e/gadgets"

    # Table: the same columns (descriptions too) and cells.
    def tables_equal():
        st, mine = api(url, gpath, accept=TABLE)
        return st == 200 and comparable(mine) == comparable(api(cp.server, gpath, token, cp.ca, accept=TABLE)[1])
    try:
        wait_for(tables_equal, 30, 0.3, "kbridge's gadgets Table to equal the server's")
    except Failure:
        raise Failure("Table:\n  server  %s\n  kbridge %s" % (comparable(api(cp.server, gpath, token, cp.ca,
                                                                                  accept=TABLE)[1]),
                                                               api(url, gpath, accept=TABLE)))

    def kb(*args):
        r = subprocess.run(["kubectl", "--kubeconfig", kb_kc, "--cache-dir", work + "/kcache"] + list(args),
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, "kubectl (kbridge) %s -> %d: %s" % (" ".join(args), r.returncode, r.stderr))
        return r.stdout
    for wide in ((), ("-o", "wide")):
        server, mine = k("get", "gadgets", "-n", "e2e", *wide), kb("get", "gadgets", *wide)
        check(server == mine, "kubectl get gadgets %s:\nserver:\n%s\nkbridge:\n%s" % (" ".join(wide), server, mine))

    # Field selectors on the selectable fields: the same items, the same 400.
    def names(base, path, tok=None, ca=None):
        st, body = api(base, path, tok, ca)
        return (st, sorted(i["metadata"]["name"] for i in body["items"])) if st == 200 else (st, body.get("message"))
    for sel in ("spec.color=red", "spec.color!=red", "spec.color=", "spec.size=3", "spec.on=true",
                "spec.on=false", "spec.size=3,spec.color!=red", "metadata.namespace=e2e", "spec.zone=a",
                "status.phase=x"):
        q = gpath + "?fieldSelector=" + urllib.parse.quote(sel)
        want, got = names(cp.server, q, token, cp.ca), names(url, q)
        check(want == got, "fieldSelector %s: server %s, kbridge %s" % (sel, want, got))

    # A client-go informer on spec.color=red: enter and leave through patches.
    clients = {side: ClientGo(exe, "informer", kc, "--resource", "example.com/v1/gadgets", "--field-selector",
                              "spec.color=red", log=work + "/clientgo-%s.log" % side)
               for side, kc in (("kb", kb_kc), ("api", cp.kubeconfig))}

    def converged(what):
        def ok():
            s = {n: c.store() for n, c in clients.items()}
            return s["kb"] is not None and s["kb"] == s["api"] and s
        try:
            return wait_for(ok, 30, 0.3, what)
        except Failure:
            raise Failure("%s: %s" % (what, {n: c.store() for n, c in clients.items()}))
    check(sorted(converged("the first sync")["api"]) == ["e2e/g1"], "first sync")
    for name, color in (("g2", "red"), ("g1", "green"), ("g3", "red"), ("g2", "blue"), ("g1", "red")):
        k("patch", "-n", "e2e", "gadget", name, "--type=merge", "-p", '{"spec":{"color":"%s"}}' % color)
    check(sorted(converged("after the patches")["api"]) == ["e2e/g1", "e2e/g3"], "after the patches")

    # An informer a reload adds: its CRD is read too (a cluster-scoped one: no metadata.namespace).
    gadgets = '{ name = "gadgets"; group = "example.com"; version = "v1"; resource = "gadgets"; }'
    b.rewrite_config(gadgets, gadgets + ',\n  { name = "racks"; group = "example.com"; version = "v1"; '
                                        'resource = "racks"; }')
    b.proc.send_signal(signal.SIGHUP)
    b.wait_log("informer=racks listed", 60)
    for sel in ("spec.row=7", "spec.row=8", "metadata.namespace=x", "metadata.name=r1"):
        q = "/apis/example.com/v1/racks?fieldSelector=" + urllib.parse.quote(sel)
        want = names(cp.server, q, token, cp.ca)
        try:
            wait_for(lambda: names(url, q) == want, 20, 0.3, "racks fieldSelector %s through kbridge" % sel)
        except Failure:
            raise Failure("racks fieldSelector %s: server %s, kbridge %s" % (sel, want, names(url, q)))
    for c in clients.values():
        c.stop()
    check(b.stop() == 0, "kbridge exit code")


if __name__ == "__main__":
    run(test)
