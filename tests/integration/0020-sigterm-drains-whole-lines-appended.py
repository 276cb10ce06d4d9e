"""SIGTERM drains and exits 0; the file sink's output is never torn (whole
lines only) and is appended to across restarts, never truncated. A torn last
line left by a crash of an earlier run is cut before new lines follow."""
import os
from kbtest import *


def test():
    sim = Sim()
    sim.ctl("generate", {"resource": "pods", "namespaces": 4, "count": 3000, "size": 5000})
    b = Bridge(sim)
    # Stop in the middle of the initial sync.
    wait_for(lambda: os.path.exists(b.out) and os.path.getsize(b.out) > 1 << 20, 30, 0.01,
             what="output to start flowing")
    check(b.stop() == 0, "SIGTERM mid-sync exits 0")
    first = b.events()  # raises on a torn line
    check(len(first) > 0, "something was written before the stop")
    check("draining" in b.logtext(), "the drain is logged")

    # A crash of some earlier writer left half a line behind.
    with open(b.out, "ab") as f:
        f.write(b'{"type":"ADDED","cluster":"te')
    b.start()
    b.wait_converged(sim, timeout=120)
    check(b.stop() == 0, "second run exits 0")
    evs = b.events()
    check(evs[:len(first)] == first, "the first run's lines are kept as they were (append, no truncation)")
    check("torn" in b.logtext(), "cutting the torn line is logged")
    check(len(view(evs)) == 3000, "all 3000 pods present")
    sim.stop()


run(test)
