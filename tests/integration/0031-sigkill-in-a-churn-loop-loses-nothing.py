"""SIGKILL at random points of a churn loop, 24 times, with deletes and
creates while the bridge is down and the server's history compacted every
third time: after every restart the consumer's view converges to the
server's state, no key ever goes back in resourceVersion (exact repeats of
unacknowledged changes aside), and every delete arrives."""
import random
import signal
from kbtest import *


def test():
    seed = int(os.environ.get("KB_TEST_SEED", str(int(time.time()))))
    rnd = random.Random(seed)
    print("seed", seed)
    sim = Sim()
    names = ["p%03d" % i for i in range(60)]
    sim.bulk(pod_ops("create", "ns1", names))
    work = tempfile.mkdtemp(prefix="kbkill-")
    b = Bridge(sim, extra='state_dir = "%s/state";' % work, workdir=work,
               informers=['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 25; shards = 3; }'])
    b.wait_converged(sim)
    live = set(names)
    deleted = set()
    counter = 0
    for cycle in range(24):
        sim.ctl("churn", {"resource": "pods", "count": 150, "rate": 400})
        time.sleep(rnd.uniform(0.05, 0.5))
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait()
        b.logf.close()
        # while down: deletes and creates, sometimes the history is compacted
        gone = rnd.sample(sorted(live), 3)
        fresh = ["n%04d" % (counter + i) for i in range(2)]
        counter += 2
        wait_for(lambda: not sim.ctl("churn", method="GET").get("running"), 30, what="the churn to finish")
        sim.bulk(pod_ops("delete", "ns1", gone) + pod_ops("create", "ns1", fresh))
        live -= set(gone)
        live |= set(fresh)
        deleted |= set("ns1/" + g for g in gone)
        if cycle % 3 == 2:
            sim.ctl("compact")
        b.start()
        b.wait_converged(sim, timeout=120)
    evs = b.events()
    check(b.stop() == 0, "the last SIGTERM exits 0")
    assert_rv_monotonic_ignoring_repeats(evs)
    last = {}
    for e in evs:
        last[key_of(e)] = e["type"]
    missing = sorted(k for k in deleted if last.get(k) != "DELETED")
    check(not missing, "every delete arrived as the key's last event: missing %s" % missing[:5])
    log = b.logtext()
    check("delivering" in log and "again" in log, "some restart re-delivered an unacknowledged tail")
    sim.stop()


run(test)
