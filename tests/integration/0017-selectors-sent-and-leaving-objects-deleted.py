"""Label and field selectors are sent to the server; an object whose labels
stop matching arrives as DELETED (the server sends it so) and leaves the
view; one that starts matching arrives as ADDED."""
from kbtest import *


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a", "b"], labels={"app": "web"}) +
             pod_ops("create", "ns1", ["c"], labels={"app": "db"}) +
             pod_ops("create", "ns2", ["a"], labels={"app": "web"}))
    b = Bridge(sim, informers=['{ name = "web"; version = "v1"; resource = "pods"; '
                               'label_selector = "app in (web, api)"; field_selector = "metadata.namespace=ns1"; }'])
    wait_for(lambda: set(b.view()) == {"ns1/a", "ns1/b"}, 30, what="the selected pods")
    reqs = [r for r in sim.requests() if r["path"] == "/api/v1/pods"]
    check(reqs and all(r["query"].get("labelSelector") == "app in (web, api)" for r in reqs),
          "every request carries the label selector: %s" % [r["query"] for r in reqs])
    check(all(r["query"].get("fieldSelector") == "metadata.namespace=ns1" for r in reqs),
          "every request carries the field selector")
    sim.bulk(pod_ops("update", "ns1", ["b"], labels={"app": "db"}) +     # leaves
             pod_ops("update", "ns1", ["c"], labels={"app": "api"}))     # enters
    wait_for(lambda: set(b.view()) == {"ns1/a", "ns1/c"}, 30, what="b to leave and c to enter")
    evs = b.events()
    left = [e for e in evs if e["name"] == "b" and e["type"] == "DELETED"]
    check(len(left) == 1 and not left[0].get("finalStateUnknown"), "b arrives as a real DELETED")
    entered = [e for e in evs if e["name"] == "c"]
    check([e["type"] for e in entered] == ["ADDED"], "c arrives as ADDED: %s" % [e["type"] for e in entered])
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
