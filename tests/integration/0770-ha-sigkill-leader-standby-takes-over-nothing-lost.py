#!/usr/bin/env python3
"""High availability on a real kube-apiserver: two replicas of one shard (ha.enabled, a Lease), each
with its own file sink and state_dir, and only the rights deploy/kubernetes/rbac-rules.sh prints
(configmaps; get/create/update leases in its namespace). Configmaps churn (creates, patches, deletes) all along. SIGKILL
the leader: the standby leads within lease_seconds + renew_seconds, and the union of both outputs,
read with the consumer rule (per key only a greater (RV, deleted)), converges to the server with every
delete. Then the killed replica comes back as the standby and the leader is killed again, as many
times as fit in about 60 s: the failover time (SIGKILL → the other replica's "leading" line) is
printed as p50/p99."""
import signal
import time

from kbtest import check, ControlPlane, run, wait_for
from kbha import Churn, check_converged, leads, lines, percentile, start_pair

LEASE, RENEW = 4, 1


def test():
    cp = ControlPlane()
    a, b, churn = start_pair(cp, "k", LEASE, RENEW)
    churn.start()
    time.sleep(3)
    check(lines(b) == [], "the standby delivered %d line(s)" % len(lines(b)))
    check(len(lines(a)) > 0, "the leader delivered nothing")

    # SIGKILL the leader in the middle of the churn.
    t_kill = time.monotonic()
    a.kill()
    wait_for(lambda: leads(b), LEASE + RENEW + 5, 0.05, "replica-b to take over")
    first = time.monotonic() - t_kill
    check(first <= LEASE + RENEW + 1, "takeover took %.1f s, over lease_seconds + renew_seconds" % first)
    log = b.logtext()
    check("watermarks taken over: {\"cms\":" in log, "the takeover names the watermark:\n" + log[-1500:])
    time.sleep(2)
    churn.stop()
    _, view = check_converged(cp, [a, b], churn.deleted)
    check(sum(d for _, d in view.values()) > 0, "no DELETED reached the consumer")
    deleted = set(churn.deleted)
    print("first takeover %.2f s; %d changes, %d deletes; lines: a=%d b=%d" % (
        first, churn.ops, len(churn.deleted), len(lines(a)), len(lines(b))))

    # Failover time: restart the dead replica (it stands by), kill the leader, over and over.
    times = [first]
    leader, dead = b, a
    churn = Churn(cp, "m").start()
    t_end = time.monotonic() + 60
    while time.monotonic() < t_end:
        n_leads = dead.logtext().count(": leading (lease") + 1
        dead.start()
        wait_for(lambda: "standby until leading" in dead.logtext()[dead.log_start:], 60, 0.1, "the restart")
        time.sleep(RENEW + 1.5)  # it has resumed its watch and read the Lease
        t_kill = time.monotonic()
        leader.kill()
        wait_for(lambda: leads(dead, n_leads), LEASE + RENEW + 5, 0.05, "the standby to take over")
        took = time.monotonic() - t_kill
        check(took <= LEASE + RENEW + 1, "takeover took %.1f s" % took)
        times.append(took)
        leader, dead = dead, leader
    churn.stop()
    check_converged(cp, [a, b], deleted | churn.deleted)
    check(leader.stop(signal.SIGTERM) == 0, "the leader's exit status on SIGTERM")
    print("failover (SIGKILL -> the standby leads), lease_seconds=%d renew_seconds=%d, %d takeovers: "
          "p50 %.3f s, p99 %.3f s, min %.3f s, max %.3f s" % (LEASE, RENEW, len(times), percentile(times, 50),
                                                             percentile(times, 99), min(times), max(times)))


run(test)
