#!/usr/bin/env python3
"""High availability, a partitioned leader: SIGSTOP the leader past its lease → the standby takes over
and delivers what changed meanwhile; SIGCONT → the old leader hands nothing more to its sink (its output
file does not grow after the takeover: its lease ran out, it checks before every event), logs that it
no longer leads, and the union of both outputs converges to the server with every delete. Before and
after: /readyz is 200 on both, kbridge_ha_leader{shard="0"} and /v1/informers "ha" name the leader.
Last, SIGTERM the leader: it releases the Lease with its last watermarks and the standby takes it with
those watermarks (at once: the time is printed, not judged)."""
import os
import re
import signal
import time

from kbtest import check, ControlPlane, run, wait_for
from kbha import check_converged, http_view, leads, lines, settled, start_pair

LEASE, RENEW = 4, 1


def test():
    cp = ControlPlane()
    a, b, churn = start_pair(cp, "s", LEASE, RENEW)
    check_converged(cp, [a], churn.deleted)  # the leader is quiet: nothing of its own is pending
    ra, ga, ha_a = http_view(a)
    rb, gb, ha_b = http_view(b)
    check((ra, ga, ha_a["leader"], rb, gb, ha_b["leader"]) == (200, "1", True, 200, "0", False),
          "readyz, kbridge_ha_leader and /v1/informers: leader %s, standby %s" % ((ra, ga, ha_a), (rb, gb, ha_b)))
    check(ha_b["holder"] == "replica-a" and ha_b["lease"] == "kb/kbridge-real-0", "standby's ha: %s" % ha_b)
    size = os.path.getsize(a.out)

    a.proc.send_signal(signal.SIGSTOP)
    t_stop = time.monotonic()
    churn.start()
    wait_for(lambda: leads(b), 120, 0.05, "replica-b to take over")
    took = time.monotonic() - t_stop
    churn.more(20)  # changes while the old leader is stopped
    mark = len(a.logtext())
    a.proc.send_signal(signal.SIGCONT)
    # The old leader runs again while changes keep coming: it notices, and reads (and skips) every change.
    wait_for(lambda: "no longer leading" in a.logtext()[mark:], 120, 0.1, "the old leader to step down")
    churn.more(20)
    churn.stop()
    check_converged(cp, [a, b], churn.deleted)
    settled(cp, a)  # it has had every change in hand: none of them may reach its sink
    check(os.path.getsize(a.out) == size, "the old leader wrote %d byte(s) after its lease ran out:\n%s" % (
        os.path.getsize(a.out) - size, a.logtext()[-2000:]))
    ra, ga, ha_a = http_view(a)
    rb, gb, ha_b = http_view(b)
    check((ra, ga, ha_a["leader"], ha_a["holder"], rb, gb, ha_b["leader"]) == (200, "0", False, "replica-b", 200, "1", True),
          "after the takeover: old leader %s, new %s" % ((ra, ga, ha_a), (rb, gb, ha_b)))
    log = a.logtext()
    check("no longer leading (lease kb/kbridge-real-0 now held by \"replica-b\")" in log,
          "the old leader does not say it stepped down:\n" + log[-2000:])
    # SIGTERM the leader: it releases the Lease with its last watermarks, the standby takes it with them.
    t_term = time.monotonic()
    check(b.stop(signal.SIGTERM) == 0, "the leader's exit status on SIGTERM")
    m = re.search(r'lease kb/kbridge-real-0 released with watermarks (\{"cms":"\d+"\})', b.logtext())
    check(m, "the leader did not release the Lease:\n" + b.logtext()[-1500:])
    wait_for(lambda: leads(a, 2), 120, 0.05, "replica-a to take the released Lease")
    released = time.monotonic() - t_term
    check("watermarks taken over: %s" % m.group(1) in a.logtext()[mark:],
          "replica-a did not take the released watermarks %s:\n%s" % (m.group(1), a.logtext()[-1500:]))
    check(a.stop(signal.SIGTERM) == 0, "exit status on SIGTERM")
    print("SIGSTOP -> takeover %.2f s; %d changes after; old leader's output unchanged (%d lines), new %d lines; "
          "SIGTERM -> released Lease taken in %.2f s" % (took, churn.ops, len(lines(a)), len(lines(b)), released))


run(test)
