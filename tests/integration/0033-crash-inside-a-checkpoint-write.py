"""A crash in the middle of a checkpoint write (the process killed with the
LMDB transaction written but not committed) leaves a consistent state: the
next start reads the previous checkpoint, delivers the unacknowledged tail
again, and the consumer's view converges with nothing lost."""
from kbtest import *


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%02d" % i for i in range(20)]))
    work = tempfile.mkdtemp(prefix="kbckpt-")
    b = Bridge(sim, extra='state_dir = "%s/state";' % work, workdir=work, start=False)
    for n in (2, 1, 3):
        # The n-th checkpoint write of this run kills the process inside its transaction.
        b.start(env={"KB_TEST_KILL_IN_CHECKPOINT": str(n)})
        sim.ctl("churn", {"resource": "pods", "count": 900, "rate": 300})
        b.wait_killed("inside checkpoint write %d" % n)
        wait_for(lambda: not sim.ctl("churn", method="GET").get("running"), 30, what="the churn to end")
        sim.bulk(pod_ops("delete", "ns1", ["p%02d" % n]))
    check(b.logtext().count("killing the process inside a checkpoint write") == 3, "three crashes happened")
    b.start()
    b.wait_converged(sim, timeout=120)
    check("cannot" not in b.logtext().split("kbridge 0.1.0 starting")[-1], "the restart reads its state cleanly")
    check(b.stop() == 0, "SIGTERM exits 0")
    assert_rv_monotonic_ignoring_repeats(b.events())
    sim.stop()


run(test)
