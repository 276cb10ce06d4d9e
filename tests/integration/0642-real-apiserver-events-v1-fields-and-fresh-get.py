#!/usr/bin/env python3
"""Against a real kube-apiserver, through kbridge as through the server: an events.k8s.io/v1 Event list
accepts that group's own field labels (regarding.*, reason, reportingController, type, metadata.*) with the
same items, and refuses the core Event's labels (involvedObject.*, source) with the same 400; a single-object
GET with resourceVersion=N (and resourceVersionMatch=NotOlderThan) answers the object at N or newer once
kbridge has it, and for a version kbridge never reaches answers 504 "Too large resource version" as the
server does, never an older object."""
import datetime

from kbtest import *
from kbclientgo import api, replica

NOW = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000000Z")


def event(name, kind, target, reason, typ, controller):
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name, "namespace": "e2e"},
            "eventTime": NOW, "reportingController": controller, "reportingInstance": controller + "-1",
            "action": "Act", "reason": reason, "type": typ, "note": "n",
            "regarding": {"kind": kind, "name": target, "namespace": "e2e", "apiVersion": "v1",
                          "fieldPath": "spec.containers{c}" if kind == "Pod" else ""}}


def answer(url, path, token=None, ca=None):
    st, body = api(url, path, token, ca)
    if st == 200 and "items" in body:
        return st, sorted(i["metadata"]["name"] for i in body["items"])
    if st == 200:
        return st, body["metadata"]["name"]
    return st, body.get("reason"), body.get("message"), (body.get("details") or {}).get("causes")



def test():
    cp = ControlPlane()
    k = cp.kubectl
    token = cp.env["KB_K8S_ADMIN_TOKEN"]
    k("create", "namespace", "e2e")
    for e in (event("e1", "Pod", "p1", "BackOff", "Warning", "kubelet"),
              event("e2", "Pod", "p2", "Pulled", "Normal", "kubelet"),
              event("e3", "Deployment", "web", "ScalingReplicaSet", "Normal", "deployment-controller")):
        st, body = cp.request("POST", "/apis/events.k8s.io/v1/namespaces/e2e/events", e)
        check(st == 201, "create %s -> %d %s" % (e["metadata"]["name"], st, body))
    k("create", "configmap", "cm", "-n", "e2e", "--from-literal=a=1")

    work = tempfile.mkdtemp(prefix="kb0642-")
    b, _, url = replica(cp, [("events", "events.k8s.io", "v1", "events"), ("configmaps", "", "v1", "configmaps")],
                        work)
    b.wait_log("informer=events listed", 120)
    b.wait_log("informer=configmaps listed", 120)

    epath = "/apis/events.k8s.io/v1/namespaces/e2e/events"
    diffs = []
    for sel in ("regarding.name=p1", "regarding.kind=Pod", "regarding.namespace=e2e", "regarding.apiVersion=v1",
                "regarding.fieldPath=spec.containers{c}", "regarding.uid=", "regarding.resourceVersion=",
                "reason=Pulled", "reportingController=deployment-controller", "type=Warning", "type!=Warning",
                "metadata.name=e2", "metadata.namespace=e2e", "involvedObject.name=p1", "source=kubelet",
                "reportingComponent=kubelet", "spec.x=y"):
        q = epath + "?fieldSelector=" + urllib.parse.quote(sel)
        want, got = answer(cp.server, q, token, cp.ca), answer(url, q)
        if want != got:
            diffs.append("fieldSelector %s: server %s, kbridge %s" % (sel, want, got))
    check(not diffs, "\n".join(diffs))

    # A GET from a version: the object at it or newer; one kbridge never reaches is the server's 504.
    cpath = "/api/v1/namespaces/e2e/configmaps/cm"
    k("patch", "-n", "e2e", "configmap", "cm", "--type=merge", "-p", '{"data":{"a":"2"}}')
    st, obj = cp.request("GET", cpath)
    rv = obj["metadata"]["resourceVersion"]
    for q in ("?resourceVersion=%s" % rv, "?resourceVersion=%s&resourceVersionMatch=NotOlderThan" % rv):
        st, got = api(url, cpath + q)
        check(st == 200 and int(got["metadata"]["resourceVersion"]) >= int(rv) and got["data"]["a"] == "2",
              "GET %s through kbridge -> %d %s" % (q, st, got))
    far = str(int(rv) + 100000)
    for q in ("?resourceVersion=%s" % far, "?resourceVersion=%s&resourceVersionMatch=NotOlderThan" % far):
        want, got = answer(cp.server, cpath + q, token, cp.ca), answer(url, cpath + q)
        check(want[:2] == got[:2] and want[3:] == got[3:],
              "GET %s: server %s, kbridge %s" % (q, want, got))
    check(b.stop() == 0, "kbridge exit code")


if __name__ == "__main__":
    run(test)
