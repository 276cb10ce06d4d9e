#!/usr/bin/env python3
"""High availability when one replica loses the API server and the other does not, on a real
kube-apiserver: each replica reaches it through its own TCP proxy (kbha.Proxy), which the test can
cut (existing connections closed, new ones closed at once) and restore. Configmaps churn all along.

1. The leader's access is cut. It cannot renew, so it stops handing changes to its sink before its
   lease can run out (its output does not grow after the standby leads, nor after its access
   returns); the standby takes over (the time from the cut is printed, not judged). When the old
   leader's access returns it logs that it no longer leads and stands by (/v1/informers says so).
2. The standby's access is cut for 3 lease periods of the leader's (12 renewals of the Lease): the
   leader keeps leading (no takeover, no step-down), and nothing is lost. When the standby's access returns it catches up; then the leader
   is SIGKILLed and the standby takes over — nothing is lost: the union of the outputs, read with the
   consumer rule (per key only a greater (RV, deleted)), equals the server, every delete included."""
import os
import signal
import time

from kbtest import check, ControlPlane, run, wait_for
from kbha import Proxy, check_converged, http_view, lease_renewals, leads, lines, settled, start_pair

LEASE, RENEW = 4, 1


def test():
    cp = ControlPlane()
    pa, pb = Proxy(cp.server), Proxy(cp.server)
    a, b, churn = start_pair(cp, "p", LEASE, RENEW, servers=(pa.url, pb.url))
    churn.start()
    churn.more(20)
    settled(cp, a)  # the leader delivered the churn so far
    settled(cp, b)  # the standby skipped it, as the leader's
    check(lines(b) == [] and lines(a), "before the cut: a delivers, b does not")

    # 1. The leader loses the API server.
    t_cut = time.monotonic()
    pa.cut()
    wait_for(lambda: leads(b), 120, 0.05, "replica-b to take over from the cut-off leader")
    took = time.monotonic() - t_cut
    size_at_takeover = os.path.getsize(a.out)
    churn.more(20)  # changes while the old leader is cut off
    pa.restore()
    wait_for(lambda: "no longer leading" in a.logtext(), 120, 0.1, "the old leader to step down")
    churn.more(20)  # changes while it is back
    settled(cp, a)  # it has had every change in hand: none of them may reach its sink
    check(os.path.getsize(a.out) == size_at_takeover, "the cut-off leader wrote %d byte(s) after the takeover:\n%s"
          % (os.path.getsize(a.out) - size_at_takeover, a.logtext()[-2000:]))
    ra, ga, ha_a = http_view(a)
    check((ra, ga, ha_a["leader"], ha_a["holder"]) == (200, "0", False, "replica-b"),
          "the old leader rejoined as a standby: %s" % ((ra, ga, ha_a),))
    check_converged(cp, [a, b], churn.deleted)

    # 2. The standby loses the API server for three lease periods; the leader goes on.
    b_leads = b.logtext().count(": leading (lease")
    pa.refused = 0
    pa.cut()
    lease_renewals(cp, 3 * LEASE // RENEW, "replica-b")
    wait_for(lambda: pa.refused > 0, 120, 0.1, "the cut standby to try the API server")
    check(not leads(a, 2) and "no longer leading" not in b.logtext(),
          "a takeover while only the standby was cut off:\n" + a.logtext()[-1500:] + b.logtext()[-1500:])
    check(b.logtext().count(": leading (lease") == b_leads, "the leader lost its Lease")
    pa.restore()
    settled(cp, a)  # it reconnects, resumes its watch, follows the watermarks the leader publishes
    t_kill = time.monotonic()
    b.kill()
    wait_for(lambda: leads(a, 2), 120, 0.05, "replica-a to take over after its access returned")
    took2 = time.monotonic() - t_kill
    churn.more(20)  # changes for the new leader
    churn.stop()
    _, view = check_converged(cp, [a, b], churn.deleted)
    check(sum(d for _, d in view.values()) > 0, "no DELETED reached the consumer")
    check(a.stop(signal.SIGTERM) == 0, "the leader's exit status on SIGTERM")
    print("leader cut off -> takeover in %.2f s, its output unchanged after; standby cut off for %d renewals -> "
          "no takeover; then SIGKILL -> takeover in %.2f s; %d changes, lines a=%d b=%d, %d connections refused" % (
              took, 3 * LEASE // RENEW, took2, churn.ops, len(lines(a)), len(lines(b)), pa.refused))


run(test)
