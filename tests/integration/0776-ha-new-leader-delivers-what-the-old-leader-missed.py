#!/usr/bin/env python3
"""High availability on kubesim: the new leader owes every change the old leader never delivered. The
leader's watch misses one change that the standby's watch sees (kubesim's lose_events fault for the
leader's token only); the leader's published watermark passes it (it saw a later change), so the
standby skips it as acknowledged. The leader is SIGKILLed before any audit could repair it: after the
takeover the union of the outputs, read with the consumer rule (per key only a greater (RV, deleted)),
equals kubesim's state, the missed change included."""
import json
import signal

from kbtest import Sim, check, run, wait_for
from kbha import SIM_LEASE, leads, lines, sim_check_converged, sim_put_cms, sim_start_pair

LEASE, RENEW = 3, 1


def published(sim):
    st, raw = sim.request("GET", SIM_LEASE)
    check(st == 200, "GET the Lease -> %d" % st)
    marks = json.loads(raw)["metadata"].get("annotations", {}).get("kbridge.io/watermarks", "{}")
    return int(json.loads(marks).get("cms", "0"))


def test():
    sim = Sim()
    a, b = sim_start_pair(sim, LEASE, RENEW, tokens=("token-a", "token-b"))
    sim_check_converged(sim, [a, b])

    sim.fault(kind="lose_events", count=1, token="token-a")
    missed = sim_put_cms(sim, [0], "missed-by-the-leader")
    seen = sim_put_cms(sim, [1], "seen-by-both")
    wait_for(lambda: published(sim) >= seen, 30, 0.1, "the leader to publish a watermark past the missed change")
    check(not any(int(e["resourceVersion"]) == missed for e in lines(a)), "the leader saw the change it should miss")

    a.kill()
    wait_for(lambda: leads(b), 30, 0.05, "replica-b to take over")
    sim_check_converged(sim, [a, b])
    check("key(s) whose latest change was skipped as a standby delivered again" in b.logtext(),
          "the new leader does not say what it delivered again:\n" + b.logtext()[-2000:])
    check(b.stop(signal.SIGTERM) == 0, "the new leader's exit status on SIGTERM:\n" + b.logtext()[-2000:])


run(test)
