"""A server (or proxy) that ignores sendInitialEvents and answers with a
plain watch: its ADDED events are taken as list items, but the first change
before any initial-events-end bookmark shows it is not a streamed list. With
list_mode auto the informer then uses paged lists from then on; nothing is
delivered twice and nothing is missed."""
from kbtest import *


def test():
    sim = Sim("--watch-list", "ignore")
    sim.bulk(pod_ops("create", "ns1", ["p%02d" % i for i in range(20)]))
    b = Bridge(sim)
    wait_for(lambda: len(b.events()) == 20, 60, 0.1, "the 20 initial ADDED events")
    check("listed items=" not in b.logtext(), "no list is complete without the bookmark")
    sim.bulk(pod_ops("update", "ns1", ["p05"], labels={"v": "2"}))
    b.wait_converged(sim)
    evs = [(e["type"], e["name"]) for e in b.events()]
    check(evs[20:] == [("MODIFIED", "p05")] and len(evs) == 21, "20 ADDED, then the change once: %s" % evs[20:])
    log = b.logtext()
    check("does not offer streamed lists (it sent a normal watch)" in log, "the fallback is logged:\n" + log[-3000:])
    check("listed items=20 pages=1" in log, "then a paged list")
    reqs = [r for r in sim.requests() if r["path"] == "/api/v1/pods"]
    check(len([r for r in reqs if r["query"].get("sendInitialEvents") == "true"]) == 1, "one streamed attempt")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
