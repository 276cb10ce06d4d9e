"""Any group/version/resource: a cluster-scoped kind, a CRD, and a
per-namespace informer run at once; envelopes carry the right group,
version, kind and an empty namespace for cluster-scoped objects."""
from kbtest import *


def test():
    sim = Sim()
    sim.ctl("resources", {"group": "example.com", "version": "v1alpha1", "resource": "widgets",
                          "kind": "Widget", "namespaced": True})
    sim.bulk([{"op": "create", "resource": "nodes", "version": "v1", "name": "node-%d" % i} for i in range(3)] +
             [{"op": "create", "resource": "widgets", "group": "example.com", "version": "v1alpha1",
               "namespace": "ns%d" % (i % 2), "name": "w%d" % i, "data": {"spec": {"size": i}}} for i in range(6)] +
             pod_ops("create", "ns1", ["a", "b"]) + pod_ops("create", "ns2", ["c"]) + pod_ops("create", "ns3", ["d"]))
    b = Bridge(sim, informers=[
        '{ name = "nodes"; version = "v1"; resource = "nodes"; }',
        '{ name = "widgets"; group = "example.com"; version = "v1alpha1"; resource = "widgets"; shards = 2; }',
        '{ name = "pods"; version = "v1"; resource = "pods"; namespaces = [ "ns1", "ns2" ]; }',
    ])
    b.wait_converged(sim, "nodes")
    b.wait_converged(sim, "widgets", "example.com")
    wait_for(lambda: {k for k, e in b.view().items() if e["resource"] == "pods"} == {"ns1/a", "ns1/b", "ns2/c"}, 30,
             what="pods of ns1 and ns2 only")
    evs = b.events()
    node = next(e for e in evs if e["resource"] == "nodes")
    check(node["namespace"] == "" and node["kind"] == "Node" and node["object"]["kind"] == "Node",
          "cluster-scoped: empty namespace, kind Node: %s" % {k: node[k] for k in ("namespace", "kind")})
    w = next(e for e in evs if e["resource"] == "widgets")
    check(w["group"] == "example.com" and w["version"] == "v1alpha1" and w["kind"] == "Widget" and
          w["object"]["apiVersion"] == "example.com/v1alpha1", "CRD identity: %s" % w["object"]["apiVersion"])
    paths = {r["path"] for r in sim.requests()}
    check({"/api/v1/namespaces/ns1/pods", "/api/v1/namespaces/ns2/pods"} <= paths,
          "one watch per listed namespace: %s" % sorted(paths))
    # a change to a node and a widget flows too
    sim.bulk([{"op": "delete", "resource": "nodes", "version": "v1", "name": "node-0"},
              {"op": "update", "resource": "widgets", "group": "example.com", "version": "v1alpha1",
               "namespace": "ns0", "name": "w0", "data": {"spec": {"size": 99}}}])
    b.wait_converged(sim, "nodes")
    b.wait_converged(sim, "widgets", "example.com")
    check(b.view()["ns0/w0"]["object"]["spec"]["size"] == 99, "the CRD's new spec arrived")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
