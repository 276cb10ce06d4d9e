"""A watch that ends — cleanly (server timeout) or by a dropped connection —
resumes from the last RV at once: no relist, no change lost, none repeated."""
from kbtest import *


def steps_of(b, key):
    return [int(e["object"]["metadata"]["labels"]["step"]) for e in b.events()
            if key_of(e) == key and e["type"] == "MODIFIED"]


def watches(sim):
    return [r for r in sim.requests() if r["path"] == "/api/v1/pods" and r["query"].get("watch") in ("true", "1")]


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a", "b"], labels={"step": "0"}))
    b = Bridge(sim)
    b.wait_converged(sim)
    wait_for(lambda: "listed items=" in b.logtext(), 60, what="the streamed list's end")  # its stream is the watch
    sim.clear_requests()
    n = 0
    for round_ in range(6):
        for _ in range(10):
            n += 1
            sim.bulk(pod_ops("update", "ns1", ["a"], labels={"step": str(n)}))
        # The fault is for an open watch: the one re-opened after the previous fault (kubesim logs a
        # watch once it is registered, so a fault after that ends it).
        wait_for(lambda: len(watches(sim)) >= round_, 60, what="the watch re-opened after fault %d" % (round_ - 1))
        # alternate: a dropped connection, a clean end
        sim.fault(kind="drop_watches" if round_ % 2 == 0 else "end_watches")
        for _ in range(5):
            n += 1
            sim.bulk(pod_ops("update", "ns1", ["a"], labels={"step": str(n)}))
    b.wait_converged(sim)
    got = steps_of(b, "ns1/a")
    check(got == list(range(1, n + 1)), "every change once, in order: got %s" % got)
    reqs = [r for r in sim.requests() if r["path"] == "/api/v1/pods"]
    lists = [r for r in reqs if r["query"].get("watch") not in ("true", "1")]
    check(not lists, "no relist after watches ended: %s" % lists)
    check(len(watches(sim)) >= 6, "the watch was re-opened after each end (%d watches)" % len(watches(sim)))
    assert_no_repeats(b.events())
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
