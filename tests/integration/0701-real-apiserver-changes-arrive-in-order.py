#!/usr/bin/env python3
"""Against a real kube-apiserver + etcd (tests/infra/controlplane.sh), through a kubeconfig with a
bearer token over TLS: pods, configmaps and a CRD are created, patched, labelled out of a selector
and back, and deleted with kubectl; every change arrives, per object in the order it happened,
with the envelope a user expects (cluster, group/version/resource, kind, namespace, name, uid,
resourceVersion, object with kind and apiVersion, managedFields dropped)."""
import signal

from kbtest import Failure, check, ConfigBridge, ControlPlane, key_of, run, wait_for, widgets_crd

CRD = widgets_crd()


def pod(name, app):
    return """
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: e2e, labels: {app: %s}}
spec:
  automountServiceAccountToken: false
  containers: [{name: c, image: registry.invalid/none:1}]
""" % (name, app)


def test():
    cp = ControlPlane()
    k = cp.kubectl
    k("create", "namespace", "e2e")
    k("create", "serviceaccount", "default", "-n", "e2e")  # no controller-manager here to make it
    k("apply", "-f", "-", input=CRD)
    k("wait", "--for", "condition=established", "--timeout=120s", "crd/widgets.example.com")
    k("apply", "-f", "-", input=pod("seed", "web"))

    b = ConfigBridge("""
cluster = { name = "real"; kubeconfig = "%s"; };
http = { listen = ""; };
shutdown_timeout = 20;
log = { level = "info"; };
informers = (
  { name = "pods"; version = "v1"; resource = "pods"; namespaces = [ "e2e" ]; label_selector = "app=web";
    page_size = 50; },
  { name = "cms"; version = "v1"; resource = "configmaps"; namespaces = [ "e2e" ]; },
  { name = "widgets"; group = "example.com"; version = "v1"; resource = "widgets"; }
);
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "pods"; sink = "out"; }, { informer = "cms"; sink = "out"; },
           { informer = "widgets"; sink = "out"; } );
""" % cp.kubeconfig)
    for inf in ("pods", "cms", "widgets"):
        b.wait_log("informer=%s" % inf + (" namespace=e2e" if inf != "widgets" else "") + " listed", 120)

    want = {}  # key -> [(type, rv or None for "greater than the last")]

    def step(key, typ, rv=None):
        want.setdefault(key, []).append((typ, rv))

    step("e2e/seed", "ADDED", cp.rv("-n", "e2e", "pod", "seed"))
    # A pod: create, annotate, label out of the selector (DELETED), back in (ADDED), delete.
    k("apply", "-f", "-", input=pod("web-1", "web"))
    step("e2e/web-1", "ADDED", cp.rv("-n", "e2e", "pod", "web-1"))
    uid = k("get", "-n", "e2e", "pod", "web-1", "-o", "jsonpath={.metadata.uid}")
    k("annotate", "-n", "e2e", "pod", "web-1", "note=one")
    step("e2e/web-1", "MODIFIED", cp.rv("-n", "e2e", "pod", "web-1"))
    k("label", "-n", "e2e", "pod", "web-1", "app=other", "--overwrite")
    step("e2e/web-1", "DELETED", cp.rv("-n", "e2e", "pod", "web-1"))
    k("annotate", "-n", "e2e", "pod", "web-1", "note=unseen", "--overwrite")  # outside the selector
    unseen_rv = cp.rv("-n", "e2e", "pod", "web-1")
    k("label", "-n", "e2e", "pod", "web-1", "app=web", "--overwrite")
    step("e2e/web-1", "ADDED", cp.rv("-n", "e2e", "pod", "web-1"))
    k("delete", "-n", "e2e", "pod", "web-1", "--wait=true", "--timeout=60s")
    step("e2e/web-1", "DELETED")
    # A configmap: create, patch twice, delete.
    k("create", "configmap", "-n", "e2e", "c1", "--from-literal=a=1")
    step("e2e/c1", "ADDED", cp.rv("-n", "e2e", "configmap", "c1"))
    for v in ("2", "3"):
        k("patch", "-n", "e2e", "configmap", "c1", "-p", '{"data":{"a":"%s"}}' % v)
        step("e2e/c1", "MODIFIED", cp.rv("-n", "e2e", "configmap", "c1"))
    k("delete", "-n", "e2e", "configmap", "c1")
    step("e2e/c1", "DELETED")
    # A custom resource.
    k("apply", "-f", "-", input="apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: e2e}\n"
                                "spec: {size: 1}\n")
    step("e2e/w1", "ADDED", cp.rv("-n", "e2e", "widget", "w1"))
    k("patch", "-n", "e2e", "widget", "w1", "--type=merge", "-p", '{"spec":{"size":2}}')
    step("e2e/w1", "MODIFIED", cp.rv("-n", "e2e", "widget", "w1"))
    k("delete", "-n", "e2e", "widget", "w1")
    step("e2e/w1", "DELETED")

    def per_key():
        # A graceful delete may first set deletionTimestamp (a MODIFIED) before the DELETED: such
        # MODIFIEDs are checked (they must come right before a DELETED) and left out of the comparison.
        out = {}
        for e in b.events():
            out.setdefault(key_of(e), []).append(e)
        for key, evs in out.items():
            kept = []
            for i, e in enumerate(evs):
                if e["type"] == "MODIFIED" and e["object"]["metadata"].get("deletionTimestamp"):
                    nxt = evs[i + 1]["type"] if i + 1 < len(evs) else None
                    check(nxt in (None, "MODIFIED", "DELETED"), "%s: deleting, then %s" % (key, nxt))
                    continue
                kept.append(e)
            out[key] = kept
        return out

    def done():
        got = per_key()
        return all(len(got.get(key, [])) >= len(steps) for key, steps in want.items()) and got

    try:
        got = wait_for(done, 180, 0.2, "every change to arrive")
    except Failure:
        raise Failure("missing changes: %s\n--- log tail ---\n%s" % (
            {key: [e["type"] for e in per_key().get(key, [])] for key in want}, b.logtext()[-3000:]))
    for key, steps in want.items():
        evs = got[key]
        check([e["type"] for e in evs] == [t for t, _ in steps],
              "%s: types %s, want %s" % (key, [e["type"] for e in evs], [t for t, _ in steps]))
        last = 0
        for e, (typ, rv) in zip(evs, steps):
            if rv is not None:
                check(e["resourceVersion"] == rv, "%s %s: rv %s, kubectl said %s" % (key, typ, e["resourceVersion"], rv))
            else:
                check(int(e["resourceVersion"]) > last, "%s %s: rv %s not after %d" % (key, typ, e["resourceVersion"], last))
            last = int(e["resourceVersion"])
            check(e["cluster"] == "real" and e["namespace"] == "e2e" and e["name"] == key.split("/")[1],
                  "envelope identity: %s" % {f: e[f] for f in ("cluster", "namespace", "name")})
            obj = e["object"]
            check(obj["metadata"]["resourceVersion"] == e["resourceVersion"], "object rv != envelope rv")
            check(obj["metadata"]["uid"] == e["uid"], "object uid != envelope uid")
            check("managedFields" not in obj["metadata"], "managedFields not dropped: %s" % key)
            check(e.get("finalStateUnknown") is not True, "%s: finalStateUnknown on a watched change" % key)

    def ident(key):
        e = got[key][0]
        return (e["group"], e["version"], e["resource"], e["kind"], e["object"]["kind"], e["object"]["apiVersion"])

    check(ident("e2e/seed") == ("", "v1", "pods", "Pod", "Pod", "v1"), "pod envelope %s" % (ident("e2e/seed"),))
    check(ident("e2e/c1") == ("", "v1", "configmaps", "ConfigMap", "ConfigMap", "v1"), "cm %s" % (ident("e2e/c1"),))
    check(ident("e2e/w1") == ("example.com", "v1", "widgets", "Widget", "Widget", "example.com/v1"),
          "widget envelope %s" % (ident("e2e/w1"),))
    check(got["e2e/web-1"][0]["uid"] == uid, "uid of web-1")
    # The API server sends a selector-leave as DELETED with the last matching content at the new RV.
    check(got["e2e/web-1"][2]["object"]["metadata"]["labels"]["app"] == "web",
          "the selector-leave DELETED carries the last content that matched")
    check(got["e2e/c1"][2]["object"]["data"] == {"a": "3"}, "the last patch's data")
    check(not any(e["resourceVersion"] == unseen_rv for e in b.events()), "a change outside the selector arrived")
    check(b.stop(signal.SIGTERM) == 0, "kbridge exit status on SIGTERM")
    check(b.logtext().count(" listed items=") == 3, "one list per informer, no relist:\n" + b.logtext()[-2000:])
    print("kubernetes %s: %d changes checked" % (cp.version, sum(len(s) for s in want.values())))


run(test)
