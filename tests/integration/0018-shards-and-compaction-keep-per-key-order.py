"""Under a burst through several shards, per key the output never goes back
in resourceVersion, nothing is repeated, and the view converges — with
compaction "none" (every change delivered) and "latest" (pending changes of a
key merged, the final state still exact)."""
from kbtest import *


def burst(sim, rounds):
    names = ["p%02d" % i for i in range(40)]
    for r in range(rounds):
        ops = pod_ops("update", "ns1", names, labels={"round": str(r)})
        if r % 5 == 4:
            ops += pod_ops("delete", "ns1", names[r % 40:r % 40 + 3]) + pod_ops("create", "ns1", names[r % 40:r % 40 + 3])
        sim.bulk(ops)


def test():
    for compaction in ("none", "latest"):
        sim = Sim()
        sim.bulk(pod_ops("create", "ns1", ["p%02d" % i for i in range(40)], labels={"round": "-"}))
        b = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; shards = 8; '
                                   'compaction = "%s"; queue_bytes = 65536; }' % compaction])
        b.wait_converged(sim)
        burst(sim, 50)
        b.wait_converged(sim, timeout=120)
        evs = b.events()
        assert_rv_monotonic(evs)
        assert_no_repeats(evs)
        mods = sum(1 for e in evs if e["type"] == "MODIFIED")
        if compaction == "none":
            # every update is delivered: 50 rounds x 40 pods, less the deleted+recreated ones' rounds
            check(mods >= 50 * 40 - 10 * 3, "compaction none delivers every update (%d MODIFIED)" % mods)
        else:
            check(mods <= 50 * 40, "compaction latest never adds events (%d MODIFIED)" % mods)
        # deletes are never compacted into nothing once the object was delivered
        dels = [e for e in evs if e["type"] == "DELETED"]
        check(len(dels) >= 1, "deletes arrive")
        check(b.stop() == 0, "SIGTERM exits 0")
        sim.stop()


run(test)
