"""429 and 5xx honour Retry-After and back off with jitter: the bridge never
hammers the server. A throttled or failing watch is re-opened from the same
RV (no relist); nothing is lost."""
from kbtest import *


def gaps(reqs):
    return [b["t"] - a["t"] for a, b in zip(reqs, reqs[1:])]


def is_watch(r):
    return r["query"].get("watch") in ("true", "1")


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a", "b"]))
    sim.fault(kind="status", verb="list", resource="pods", code=429, retry_after=2, count=2)
    b = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; list_mode = "paged"; }'])
    b.wait_converged(sim)
    lists = [r for r in sim.requests() if r["path"] == "/api/v1/pods" and not is_watch(r)]
    check([r["status"] for r in lists] == [429, 429, 200], "two throttled lists then one that succeeds: %s" %
          [r["status"] for r in lists])
    check(all(g >= 2.0 for g in gaps(lists)), "waited at least Retry-After (2 s) each time: %s" % gaps(lists))
    check("429" in b.logtext(), "the throttling is logged")

    # A failing watch with Retry-After: re-opened at the same RV, never a relist.
    sim.clear_requests()
    sim.fault(kind="status", verb="watch", resource="pods", code=503, retry_after=1, count=3)
    sim.fault(kind="drop_watches")
    sim.bulk(pod_ops("update", "ns1", ["a"], labels={"x": "1"}))
    b.wait_converged(sim)
    reqs = [r for r in sim.requests() if r["path"] == "/api/v1/pods"]
    check(not [r for r in reqs if not is_watch(r)], "no relist for a 503 on watch")
    ws = [r for r in reqs if is_watch(r)]
    check([r["status"] for r in ws[:4]] == [503, 503, 503, 200], "three refused watches then one: %s" %
          [r["status"] for r in ws])
    check(len({r["query"]["resourceVersion"] for r in ws[:4]}) == 1, "every retry at the same RV")
    check(all(g >= 1.0 for g in gaps(ws[:4])), "waited at least Retry-After (1 s): %s" % gaps(ws[:4]))

    # 500 without Retry-After: exponential backoff from 0.8 s, doubling, so a handful of tries, not a storm.
    # The gaps between the tries are lower bounds (a slow machine only makes them longer).
    sim.clear_requests()
    sim.fault(kind="status", verb="watch", resource="pods", code=500, count=100)
    sim.fault(kind="drop_watches")
    ws = wait_for(lambda: (lambda w: len(w) >= 3 and w)([r for r in sim.requests()
                                                           if r["path"] == "/api/v1/pods" and is_watch(r)]),
                  60, 0.1, "three tries of the watch")
    g = gaps(ws[:3])
    print("500 without Retry-After: tries %.2f s and %.2f s apart" % tuple(g))
    check(g[0] >= 0.8 and g[1] >= 1.6, "backoff from 0.8 s doubling: %s" % g)
    sim.fault(kind="clear")
    sim.bulk(pod_ops("update", "ns1", ["b"], labels={"x": "2"}))
    b.wait_converged(sim, timeout=90)
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
