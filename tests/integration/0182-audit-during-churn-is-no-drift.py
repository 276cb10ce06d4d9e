"""The drift audit does not race the watch: while kubesim churns 200 pods (updates, deletes and
re-creates, thousands of changes), the watch is cut and held back for a few seconds now and then
(so audits list at RVs the watch has not reached), and an audit runs every second, no audit finds drift, nothing but
the server's own changes is delivered (no finalStateUnknown delete, no repeated RV), and the output
converges to the server's state."""
from kbtest import *


def test():
    sim = Sim("--bookmark-ms", "200")
    names = ["p%03d" % i for i in range(200)]
    sim.bulk(pod_ops("create", "ns1", names))
    b = Bridge(sim, http='listen = "127.0.0.1:0";', informers=[
        '{ name = "pods"; version = "v1"; resource = "pods"; page_size = 50; audit_seconds = 1; }'])
    b.wait_converged(sim)
    runs0 = b.informer_doc().get("audit", {}).get("runs", 0)
    sim.ctl("churn", {"resource": "pods", "count": 6000, "rate": 1000})
    for rnd in range(3):
        # The watch falls behind (cut, then refused for a few backoff steps) while the server
        # moves on: audits listing at a newer RV than the watch's must not call that drift.
        sim.fault(kind="status", verb="watch", resource="pods", code=503, count=1)
        sim.fault(kind="drop_watches")
        batch = names[rnd * 10:rnd * 10 + 10]
        old_uids = {k: v["uid"] for k, v in b.view().items()}
        sim.bulk(pod_ops("delete", "ns1", batch))
        sim.bulk(pod_ops("create", "ns1", batch))
        sim.bulk(pod_ops("delete", "ns1", names[100 + rnd * 5:105 + rnd * 5]))
        b.wait_audits(2)
        # The watch is back (the re-created pods arrived) before the next cut, so the
        # reflector's backoff starts from scratch each round.
        wait_for(lambda: all(b.view().get("ns1/" + n, {}).get("uid", old_uids["ns1/" + n]) != old_uids["ns1/" + n]
                             for n in batch), 120, 0.2, "round %d's re-created pods" % rnd)
    wait_for(lambda: not sim.ctl("churn", method="GET").get("running"), 60, what="the churn to finish")
    b.wait_audits(2)
    b.wait_converged(sim, timeout=120)
    runs = b.informer_doc()["audit"]["runs"] - runs0
    check(runs >= 4, "audits ran during the churn (%d)" % runs)
    for k in ("missing", "stale", "unknown"):
        check(b.metric("kbridge_audit_drift_total", informer="pods", kind=k) == 0, "no %s drift" % k)
    evs = b.events()
    check(not any(e.get("finalStateUnknown") for e in evs), "no synthesized delete")
    seen = set()
    for e in evs:
        k = (e["name"], e["uid"], e["resourceVersion"], e["type"])
        check(k not in seen, "delivered twice: %s" % (k,))
        seen.add(k)
    assert_rv_monotonic(evs)
    check("drift " not in b.logtext(), "no repair logged")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
