"""After a 410 the relist is a streamed list too, and it is diffed against the
cache like a paged one: ADDED for new keys, MODIFIED for changed ones, nothing
for unchanged ones, DELETED with finalStateUnknown (carrying the old object)
for keys deleted while the bridge could not watch."""
from kbtest import *


def streamed(r):
    return r["path"] == "/api/v1/pods" and r["query"].get("sendInitialEvents") == "true"


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a", "b", "c", "e"]))
    b = Bridge(sim)
    b.wait_converged(sim)
    uid_b = b.view()["ns1/b"]["uid"]
    # An outage: no watch, changes, history compacted; the resumed watch meets 410.
    sim.fault(kind="status", verb="watch", resource="pods", code=503, count=100000)
    sim.fault(kind="drop_watches")
    before = len(b.events())
    sim.bulk(pod_ops("delete", "ns1", ["b", "c"]) + pod_ops("create", "ns1", ["d"]) +
             pod_ops("update", "ns1", ["a"], labels={"v": "2"}) + pod_ops("create", "ns1", ["b"]))
    sim.ctl("compact")
    # The resumed watch meets the compacted history: a 410 ERROR event. (Not a 410 status fault posted
    # after the clear: a retry landing between the two meets the compaction, relists, and the streamed
    # relist takes the 410 fault instead, which makes the next list paged.)
    sim.fault(kind="clear")
    b.wait_converged(sim)
    new = b.events()[before:]
    kinds = sorted((e["type"], e["name"], bool(e.get("finalStateUnknown"))) for e in new)
    want = sorted([("MODIFIED", "a", False), ("ADDED", "d", False), ("DELETED", "b", True), ("ADDED", "b", False),
                   ("DELETED", "c", True)])  # b: re-created (new uid); c: gone; e: unchanged
    check(kinds == want, "relist diff %s, want %s" % (kinds, want))
    dels = [e for e in new if e["type"] == "DELETED" and e["name"] == "b"]
    check(dels[0]["uid"] == uid_b, "the synthesized DELETED carries the old object (uid %s)" % uid_b)
    reqs = sim.requests()
    check(not [r for r in reqs if r["path"] == "/api/v1/pods" and r["query"].get("watch") not in ("true", "1")],
          "no paged list")
    ok = [r for r in reqs if streamed(r) and r["status"] == 200]
    check(len(ok) == 2, "the initial sync and the relist are streamed (%d streamed)" % len(ok))
    check("relist found 1 deleted object(s)" in b.logtext(), "the relist diff is logged")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
