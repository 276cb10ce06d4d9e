"""SIGKILL, 24 times: once at a known point (inside the first checkpoint write, after the list's changes
reached the sink and before the checkpoint that acknowledges them is committed: the next start must
deliver that tail again), then at random points of a churn loop, with deletes and creates while the
bridge is down and the server's history compacted every third time: after every restart the consumer's
view converges to the server's state, no key ever goes back in resourceVersion (exact repeats of
unacknowledged changes aside), and every delete arrives."""
import random
import re
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
    b = Bridge(sim, extra='state_dir = "%s/state";' % work, workdir=work, start=False,
               informers=['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 25; shards = 3; }'])
    b.start(env={"KB_TEST_KILL_IN_CHECKPOINT": "1"})
    b.wait_killed("inside the first checkpoint write")
    b.start()
    # The state it opens says how many journal entries lie past the committed checkpoint.
    again = wait_for(lambda: re.search(r"(\d+) change\(s\) to deliver again", b.logtext()[b.log_start:]), 60,
                     what="the restart to open its state_dir")
    check(int(again.group(1)) > 0, "the start after a kill inside a checkpoint write delivers the journal's "
          "unacknowledged tail again:\n%s" % b.logtext()[b.log_start:][-2000:])
    b.wait_converged(sim)
    live = set(names)
    deleted = set()
    counter = 0
    for cycle in range(23):
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
    sim.stop()


run(test)
