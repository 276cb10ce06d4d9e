"""After the server's history goes back (etcd restored from a backup: its
resourceVersions restart below what kbridge has seen), the consumer's view
follows the restored state, and a name created again afterwards at an RV
below the one its old incarnation had is delivered — not taken for a replay
of the old history, neither by the per-key gate nor by the drift audit —
also after a restart from state_dir, and a restore while kbridge is down is
noticed by a start with a changed definition too."""
from kbtest import *

INF = '{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; audit_seconds = 2; audit_relist_ratio = 0.5; }'


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p1", "p2", "p3", "p4", "p5"]))
    workdir = tempfile.mkdtemp(prefix="kbtest-")
    b = Bridge(sim, informers=[INF], workdir=workdir,
               extra='state_dir = "%s";' % os.path.join(workdir, "state"))
    b.wait_converged(sim)

    snap_rv = int(sim.ctl("snapshot")["resourceVersion"])
    # After the backup: deletes, creates, an update — RVs well above the backup's.
    sim.bulk(pod_ops("delete", "ns1", ["p1", "p2"]) + pod_ops("create", "ns1", ["p6", "p7", "p8"]) +
             pod_ops("update", "ns1", ["p3"], labels={"v": "after-backup"}))
    b.wait_converged(sim)
    old_p6 = b.view()["ns1/p6"]
    check(int(old_p6["resourceVersion"]) > snap_rv + 2, "p6 was created well above the backup's RV")

    # The restore: the server's RV goes back to the backup's.
    check(int(sim.ctl("restore")["resourceVersion"]) == snap_rv, "kubesim restored its RV")
    b.wait_converged(sim)  # p1, p2 back, p3 as it was, p6..p8 gone
    check("resourceVersion went back" in b.logtext(), "the regression is logged")

    # New history on the restored server: p6 created again at an RV below the
    # old p6's, a new name, an update.
    sim.bulk(pod_ops("create", "ns1", ["p6", "p9"]) + pod_ops("update", "ns1", ["p4"], labels={"v": "new"}))
    st = {i["key"]: i for i in sim.state()["items"]}
    check(int(st["ns1/p6"]["resourceVersion"]) < int(old_p6["resourceVersion"]),
          "the new p6's RV (%s) is below the old one's (%s)" % (st["ns1/p6"]["resourceVersion"],
                                                               old_p6["resourceVersion"]))
    b.wait_converged(sim, timeout=30)
    check(b.view()["ns1/p6"]["uid"] == st["ns1/p6"]["uid"], "the consumer has the new p6")

    # A restart from state_dir: the old history's deletes must not come back as a gate.
    check(b.kill() == -9, "SIGKILL")
    sim.bulk(pod_ops("create", "ns1", ["p7"]))
    st = {i["key"]: i for i in sim.state()["items"]}
    b.start()
    b.wait_converged(sim, timeout=30)
    check(b.view()["ns1/p7"]["uid"] == st["ns1/p7"]["uid"], "the consumer has the new p7 after the restart")

    # A restore while kbridge is down, then a start with another definition: it lists every scope
    # with no resume point of its own, and still notices the RV going back (what state_dir held).
    sim.ctl("snapshot")
    sim.bulk(pod_ops("create", "ns1", ["p10", "p11"]) + pod_ops("delete", "ns1", ["p6"]))
    b.wait_converged(sim, timeout=30)
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.ctl("restore")
    b.rewrite_config('resource = "pods";', 'resource = "pods"; namespaces = [ "ns1" ];')
    b.start()
    b.wait_converged(sim, timeout=30)
    check("resourceVersion went back" in b.logtext()[b.log_start:],
          "the restore is noticed by a start with a changed definition:\n%s" % b.logtext()[b.log_start:][-2000:])
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
