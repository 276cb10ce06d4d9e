"""allowWatchBookmarks=true: bookmarks advance the resume RV, so a quiet
informer whose own objects do not change survives history compaction
(caused by changes to other resources) without a relist."""
from kbtest import *


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a", "b"]))
    b = Bridge(sim, http='listen = "127.0.0.1:0";')
    b.wait_converged(sim)
    # Other resources move the global RV far ahead of the pods' list RV.
    sim.bulk([{"op": "create", "resource": "configmaps", "version": "v1", "namespace": "ns1",
               "name": "cm%d" % i} for i in range(50)])
    sim.clear_requests()
    sim.ctl("bookmark")
    latest = sim.state()["resourceVersion"]
    # The bookmark has reached the informer (its resume point) before the watch ends: an end
    # seen first by kubesim's watcher would close the stream with the bookmark still unsent.
    wait_for(lambda: b.informer_doc()["resourceVersion"] == latest, 60, 0.05, "the bookmark's RV %s" % latest)
    sim.ctl("compact")
    sim.fault(kind="end_watches")
    # the re-watch must start from the bookmark's RV and succeed
    def rewatched():
        ws = [r for r in sim.requests() if r["path"] == "/api/v1/pods" and r["query"].get("watch") in ("true", "1")]
        return ws and ws[-1]
    w = wait_for(rewatched, 30, what="the watch to be re-opened")
    check(w["query"]["resourceVersion"] == latest,
          "re-watch from the bookmark RV %s, not the old list RV (%s)" % (latest, w["query"]["resourceVersion"]))
    sim.bulk(pod_ops("update", "ns1", ["a"], labels={"after": "compaction"}))
    b.wait_converged(sim)
    lists = [r for r in sim.requests() if r["path"] == "/api/v1/pods" and r["query"].get("watch") not in ("true", "1")]
    check(not lists, "no relist: %s" % lists)
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
