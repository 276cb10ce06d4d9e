#!/usr/bin/env python3
"""Against a real kube-apiserver: client-go's typed informers — a corev1.Secret informer and corev1.Pod
informers with `spec.nodeName=node-a` (a node agent's) and `status.phase=Running` — run on kbridge (with
client-go's default, and with its watch-list on and off) and on the API server end with the same view (name, uid, resourceVersion; a pod's node and phase; a secret's
type and data keys, its redacted values decoded by the typed client) through churn that moves pods
between nodes (delete and re-create on the other node, as a reschedule does), changes their phases
through the status subresource, and updates, deletes and re-creates secrets."""
import subprocess

from kbtest import *
from kbclientgo import ClientGo, binary, replica

POD = """apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: e2e}
spec:
  automountServiceAccountToken: false
  nodeName: %s
  containers: [{name: c, image: registry.invalid/none:1}]
"""

SECRET = """apiVersion: v1
kind: Secret
metadata: {name: %s, namespace: e2e}
type: %s
data: {%s}
"""


def test():
    exe = binary()
    cp = ControlPlane()
    k = cp.kubectl
    k("create", "namespace", "e2e")
    k("create", "serviceaccount", "default", "-n", "e2e")
    nodes = {"p0": "node-a", "p1": "node-a", "p2": "node-a", "p3": "node-b", "p4": "node-b"}
    k("create", "-f", "-", input="---\n".join(POD % (p, n) for p, n in nodes.items()))
    k("create", "-f", "-", input="---\n".join([
        SECRET % ("s1", "Opaque", "a: AAEC, b: aGVsbG8="),
        SECRET % ("s2", "kubernetes.io/tls", "tls.crt: AA==, tls.key: AA=="),
        SECRET % ("s3", "Opaque", "")]))

    work = tempfile.mkdtemp(prefix="kb0641-")
    b, kb_kc, _ = replica(cp, [("pods", "", "v1", "pods"), ("secrets", "", "v1", "secrets")], work)
    b.wait_log("informer=pods listed", 120)
    b.wait_log("informer=secrets listed", 120)

    views = {"secrets": ("--kind", "secrets"),
             "node-a": ("--kind", "pods", "--field-selector", "spec.nodeName=node-a"),
             "running": ("--kind", "pods", "--field-selector", "status.phase=Running")}
    sides = (("kb", kb_kc, None), ("kb-nowl", kb_kc, False), ("kb-wl", kb_kc, True), ("api", cp.kubeconfig, None))
    clients = {(side, v): ClientGo(exe, "typed", kc, *args, watch_list=wl,
                                   log="%s/clientgo-%s-%s.log" % (work, side, v))
               for v, args in views.items() for side, kc, wl in sides}

    def converged(what):
        def ok():
            s = {key: c.store() for key, c in clients.items()}
            if any(v is None for v in s.values()):
                return False
            return all(s[(side, v)] == s[("api", v)] for v in views for side, _, _ in sides) and s
        try:
            return wait_for(ok, 40, 0.3, what)
        except Failure:
            logs = "".join(open(c.log).read()[-1500:] for c in clients.values())
            raise Failure("%s: %s\n%s" % (what, {key: c.store() for key, c in clients.items()}, logs))

    s = converged("the first sync")
    check(sorted(s[("api", "node-a")]) == ["e2e/p0", "e2e/p1", "e2e/p2"], "node-a: %s" % s[("api", "node-a")])
    check(s[("api", "secrets")]["e2e/s1"].endswith(" Opaque a,b"), "secret view: %s" % s[("api", "secrets")])

    def phase(pod, value):
        k("patch", "-n", "e2e", "pod", pod, "--subresource=status", "--type=merge", "-p",
          '{"status":{"phase":"%s"}}' % value)

    def move(pod, node):  # a reschedule: the pod is deleted and made again, bound to the other node
        k("delete", "-n", "e2e", "pod", pod, "--grace-period=0", "--force", "--wait=true")
        k("create", "-f", "-", input=POD % (pod, node))

    phase("p1", "Running")
    phase("p3", "Running")
    move("p0", "node-b")
    move("p3", "node-a")
    phase("p3", "Running")
    phase("p1", "Succeeded")
    k("patch", "-n", "e2e", "secret", "s1", "--type=merge", "-p", '{"data":{"c":"Y2NjYw=="}}')
    k("delete", "-n", "e2e", "secret", "s2")
    k("create", "-f", "-", input=SECRET % ("s2", "Opaque", "x: eA=="))
    k("delete", "-n", "e2e", "secret", "s3")
    phase("p4", "Running")
    move("p4", "node-a")
    phase("p2", "Failed")
    s = converged("after the churn")
    check(sorted(s[("api", "node-a")]) == ["e2e/p1", "e2e/p2", "e2e/p3", "e2e/p4"],
          "node-a: %s" % s[("api", "node-a")])
    check(sorted(s[("api", "running")]) == ["e2e/p3"], "running: %s" % s[("api", "running")])
    check(sorted(x for x in s[("api", "secrets")] if x.startswith("e2e/")) == ["e2e/s1", "e2e/s2"] and s[("api", "secrets")]["e2e/s1"].endswith(" a,b,c"),
          "secrets: %s" % s[("api", "secrets")])
    for c in clients.values():
        c.stop()
    check(b.stop() == 0, "kbridge exit code")


if __name__ == "__main__":
    run(test)
