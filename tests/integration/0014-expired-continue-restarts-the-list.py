"""An expired continue token (410 Expired on a later page) restarts the list
from the first page; the result is complete: every object arrives, none is
lost and none is reported twice."""
from kbtest import *


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(120)]))
    # The second page is refused as expired, twice in a row.
    sim.fault(kind="status", verb="continue", resource="pods", code=410, reason="Expired", count=2,
              message="The provided continue parameter is too old to display a consistent list result.")
    b = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 50; list_mode = "paged"; }'])
    b.wait_converged(sim)
    lists = [r for r in sim.requests() if r["path"] == "/api/v1/pods" and r["query"].get("watch") not in ("true", "1")]
    firsts = [r for r in lists if "continue" not in r["query"]]
    check(len(firsts) == 3, "the list restarted from page one after each expiry (%d first pages)" % len(firsts))
    expired = [r for r in lists if r["status"] == 410]
    check(len(expired) == 2 and all("continue" in r["query"] for r in expired), "the 410s were continue pages")
    evs = b.events()
    check(len(evs) == 120 and len({key_of(e) for e in evs}) == 120, "every object exactly once: %d events" % len(evs))
    check("restarting the list" in b.logtext(), "the restart is logged")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
