"""With state_dir: the first start delivers the list as ADDED; a restart
resumes the watch from the checkpoint without listing and delivers only what
changed while the bridge was down; when the server's history no longer
reaches back that far (410), the relist is diffed against the persisted index
so deletes made while the bridge was down still arrive (finalStateUnknown)."""
import os
from kbtest import *


def lists(sim):
    return [r for r in sim.requests() if r["path"] == "/api/v1/pods" and r["query"].get("watch") not in ("true", "1")]


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%02d" % i for i in range(30)]))
    work = tempfile.mkdtemp(prefix="kbstate-")
    extra = 'state_dir = "%s/state";' % work
    b = Bridge(sim, extra=extra, workdir=work)
    b.wait_converged(sim)
    check([e["type"] for e in b.events()] == ["ADDED"] * 30, "first start: the list as 30 ADDED")
    check(b.stop() == 0, "SIGTERM exits 0")
    check(os.path.isdir(work + "/state/pods"), "state_dir/pods holds the informer's state")

    # Changes while down, within the server's history: a plain resume.
    n0 = len(b.events())
    sim.bulk(pod_ops("update", "ns1", ["p00", "p01"], labels={"v": "2"}) + pod_ops("delete", "ns1", ["p02"]) +
             pod_ops("create", "ns1", ["new1"]))
    sim.clear_requests()
    b.start()
    b.wait_converged(sim)
    check(not lists(sim), "the restart resumed the watch without a list: %s" % lists(sim))
    new = b.events()[n0:]
    got = sorted((e["type"], e["name"]) for e in new)
    check(got == [("ADDED", "new1"), ("DELETED", "p02"), ("MODIFIED", "p00"), ("MODIFIED", "p01")],
          "only the changes made while down: %s" % got)
    check("resuming from the checkpoint" in b.logtext(), "the resume is logged")
    check(b.stop() == 0, "SIGTERM exits 0")

    # Changes while down, and the history compacted: relist + diff against the persisted index.
    n0 = len(b.events())
    sim.bulk(pod_ops("delete", "ns1", ["p03", "p04"]) + pod_ops("update", "ns1", ["p05"], labels={"v": "3"}))
    sim.ctl("compact")
    b.start()
    b.wait_converged(sim)
    new = b.events()[n0:]
    got = sorted((e["type"], e["name"], bool(e.get("finalStateUnknown"))) for e in new)
    check(got == [("DELETED", "p03", True), ("DELETED", "p04", True), ("MODIFIED", "p05", False)],
          "deletes while down arrive after a 410: %s" % got)
    before = b.events()[:n0]
    for e in new:
        if e["type"] == "DELETED":
            last = [x for x in before if x["name"] == e["name"]][-1]
            check(e["object"] == last["object"] and e["uid"] == last["uid"],
                  "the inferred DELETED of %s carries the last object delivered for it" % e["name"])
    check(b.stop() == 0, "SIGTERM exits 0")
    assert_rv_monotonic_ignoring_repeats(b.events())
    sim.stop()


run(test)
