"""A malformed line in the watch stream is logged and counted; the watch
restarts from the last good RV; nothing crashes and nothing is lost."""
from kbtest import *


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a"], labels={"step": "0"}))
    b = Bridge(sim)
    b.wait_converged(sim)
    sim.clear_requests()
    n = 0
    for _ in range(3):
        sim.fault(kind="malformed", count=1)
        for _ in range(5):
            n += 1
            sim.bulk(pod_ops("update", "ns1", ["a"], labels={"step": str(n)}))
    b.wait_converged(sim)
    steps = [int(e["object"]["metadata"]["labels"]["step"]) for e in b.events() if e["type"] == "MODIFIED"]
    check(steps == list(range(1, n + 1)), "every change once, in order, despite 3 bad lines: %s" % steps)
    check(b.alive(), "the bridge is still running")
    log = b.logtext()
    check(log.count("malformed watch") >= 3, "each bad line is logged")
    reqs = [r for r in sim.requests() if r["path"] == "/api/v1/pods"]
    check(not [r for r in reqs if r["query"].get("watch") not in ("true", "1")], "no relist")
    check(b.stop() == 0, "SIGTERM exits 0")
    check("malformed=3" in b.logtext(), "the final counters say malformed=3: %s" % b.logtext()[-600:])
    sim.stop()


run(test)
