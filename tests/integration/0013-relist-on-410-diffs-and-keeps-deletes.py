"""410 Gone — as an ERROR event in a 200 stream and as an HTTP status — leads
to a relist that is diffed against the cache: ADDED for new keys, MODIFIED for
changed RVs, nothing for unchanged keys, DELETED with finalStateUnknown for
keys that vanished while the bridge could not watch. Deletes are never lost."""
from kbtest import *

PAGED = '{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; list_mode = "paged"; }'


def outage(sim, b, form):
    """Keep the bridge from watching, change things, compact history, let it back."""
    sim.fault(kind="status", verb="watch", resource="pods", code=503, count=100000)
    sim.fault(kind="drop_watches")
    before = len(b.events())
    sim.bulk(pod_ops("delete", "ns1", ["b"]) +
             pod_ops("create", "ns1", ["d"]) +
             pod_ops("update", "ns1", ["a"], labels={"v": form}) +
             pod_ops("create", "ns1", ["b"]))          # same name, new uid
    sim.ctl("compact")
    sim.fault(kind="clear")
    if form == "http-status":
        sim.fault(kind="status", verb="watch", resource="pods", code=410, count=1)
    # else: the resumed watch meets the compacted history and gets an ERROR 410 event
    return before


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a", "b", "c"]))
    b = Bridge(sim, informers=[PAGED])
    b.wait_converged(sim)
    uid_b = b.view()["ns1/b"]["uid"]
    for form in ("error-event", "http-status"):
        before = outage(sim, b, form)
        b.wait_converged(sim)
        new = b.events()[before:]
        kinds = sorted((e["type"], e["name"], bool(e.get("finalStateUnknown"))) for e in new)
        want = sorted([("MODIFIED", "a", False), ("ADDED", "d", False), ("DELETED", "b", True),
                       ("ADDED", "b", False)])
        check(kinds == want, "%s: relist diff %s, want %s" % (form, kinds, want))
        dels = [e for e in new if e["type"] == "DELETED"]
        check(dels[0]["uid"] == uid_b and dels[0]["object"]["metadata"]["name"] == "b",
              "the synthesized DELETED carries the old object (uid %s)" % uid_b)
        check(not any(e["name"] == "c" for e in new), "unchanged c produced nothing")
        uid_b = b.view()["ns1/b"]["uid"]
        # reset for the next round: d goes away through the watch
        sim.bulk(pod_ops("delete", "ns1", ["d"]))
        b.wait_converged(sim)
    reqs = [r for r in sim.requests() if r["path"] == "/api/v1/pods" and r["query"].get("watch") not in ("true", "1")]
    check(len(reqs) >= 3, "initial list plus one relist per 410 (%d lists)" % len(reqs))
    check("relisting" in b.logtext(), "the relist is logged")
    assert_rv_monotonic([e for e in b.events() if not e.get("finalStateUnknown")])
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
