"""A server that refuses sendInitialEvents (HTTP 422, as kube-apiserver does
with the WatchList feature off): with list_mode auto the informer says so once
and uses paged lists from then on — the initial sync, and the relist after a
410 without asking to stream again — and the relist diff still works."""
from kbtest import *


def pods(sim):
    return [r for r in sim.requests() if r["path"] == "/api/v1/pods"]


def test():
    sim = Sim("--watch-list", "off")
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(250)]))
    b = Bridge(sim)
    b.wait_converged(sim)
    reqs = pods(sim)
    tried = [r for r in reqs if r["query"].get("sendInitialEvents") == "true"]
    check(len(tried) == 1 and tried[0]["status"] == 422, "one streamed attempt, refused: %s" % tried)
    lists = [r for r in reqs if r["query"].get("watch") not in ("true", "1")]
    check(len(lists) == 3 and all(r["query"].get("limit") == "100" for r in lists), "3 pages after the refusal")
    log = b.logtext()
    check(log.count("does not offer streamed lists") == 1, "the fallback is logged once:\n" + log[-3000:])
    check(not [l for l in log.splitlines() if "sendInitialEvents" in l and (" WARN " in l or " ERROR " in l)],
          "the refusal is not a warning in auto")

    # A relist later (410): paged directly, the refusal is remembered.
    sim.fault(kind="status", verb="watch", resource="pods", code=503, count=100000)
    sim.fault(kind="drop_watches")
    before = len(b.events())
    sim.bulk(pod_ops("delete", "ns1", ["p000"]))
    sim.ctl("compact")
    # The resumed watch meets the compacted history: a 410 ERROR event. (Not a 410 status fault posted
    # after the clear: a retry landing between the two meets the compaction and relists, and the fault
    # then answers the next watch with another 410, a second relist.)
    sim.fault(kind="clear")
    b.wait_converged(sim)
    new = [(e["type"], e["name"], bool(e.get("finalStateUnknown"))) for e in b.events()[before:]]
    check(new == [("DELETED", "p000", True)], "relist diff after the fallback: %s" % new)
    reqs = pods(sim)
    check(len([r for r in reqs if r["query"].get("sendInitialEvents") == "true"]) == 1, "no second streamed attempt")
    check(len([r for r in reqs if r["query"].get("watch") not in ("true", "1")]) == 6, "the relist is paged")
    check(b.logtext().count("does not offer streamed lists") == 1, "logged once")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
