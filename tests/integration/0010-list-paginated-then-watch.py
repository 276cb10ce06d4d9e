"""Paginated list (limit=page_size, continue), then a watch from the list's RV;
list items lack kind/apiVersion on the wire and the envelope's object has them;
the consumer's view converges to the server's state across creates, updates
and deletes."""
from kbtest import *

PAGED = '{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; list_mode = "paged"; }'


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(150)], labels={"app": "web"}) +
             pod_ops("create", "ns2", ["q%03d" % i for i in range(100)]))
    b = Bridge(sim, informers=[PAGED])
    b.wait_converged(sim)
    reqs = [r for r in sim.requests() if r["path"] == "/api/v1/pods"]
    lists = [r for r in reqs if r["query"].get("watch") not in ("true", "1")]
    check(len(lists) == 3, "expected 3 list pages of 100 for 250 pods, saw %d" % len(lists))
    check(all(r["query"].get("limit") == "100" for r in lists), "every page sends limit=100")
    check("continue" not in lists[0]["query"] and all("continue" in r["query"] for r in lists[1:]),
          "pages 2 and 3 send continue")
    watches = [r for r in reqs if r["query"].get("watch") in ("true", "1")]
    check(watches, "a watch follows the list")
    w = watches[0]["query"]
    check(w.get("allowWatchBookmarks") == "true", "watch asks for bookmarks")
    check(300 <= int(w.get("timeoutSeconds", "0")) < 600, "timeoutSeconds in [300, 600)")
    list_rv = sim.state()["resourceVersion"]
    check(w.get("resourceVersion") == list_rv, "watch starts at the list's RV %s, got %s" % (list_rv, w))

    evs = b.events()
    check(len(evs) == 250 and all(e["type"] == "ADDED" for e in evs), "250 ADDED from the list")
    e = evs[0]
    for f in ("type", "cluster", "group", "version", "resource", "kind", "namespace", "name", "uid",
              "resourceVersion", "observedAt", "object"):
        check(f in e, "envelope has %s" % f)
    check(e["cluster"] == "test" and e["kind"] == "Pod" and e["version"] == "v1" and e["group"] == "",
          "envelope identity: %s" % {k: e[k] for k in ("cluster", "kind", "version", "group")})
    check(e["object"]["kind"] == "Pod" and e["object"]["apiVersion"] == "v1", "object has kind and apiVersion")
    check("managedFields" not in e["object"]["metadata"], "managedFields dropped by default")
    check("finalStateUnknown" not in e, "finalStateUnknown only on synthesized deletes")

    # live changes through the watch
    sim.bulk(pod_ops("update", "ns1", ["p%03d" % i for i in range(20)], labels={"app": "web", "v": "2"}) +
             pod_ops("delete", "ns2", ["q%03d" % i for i in range(10)]) +
             pod_ops("create", "ns3", ["r%03d" % i for i in range(5)]))
    b.wait_converged(sim)
    evs = b.events()
    types = [e["type"] for e in evs[250:]]
    check(types.count("MODIFIED") == 20 and types.count("DELETED") == 10 and types.count("ADDED") == 5,
          "watch delivered 20 MODIFIED, 10 DELETED, 5 ADDED: %s" % types)
    assert_rv_monotonic(evs)
    assert_no_repeats(evs)
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
