#!/usr/bin/env python3
"""High availability on a real kube-apiserver: two replicas of one shard (ha.enabled, a Lease), each
with its own file sink and state_dir, and only the rights deploy/kubernetes/rbac-rules.sh prints
(configmaps; get/create/update leases in its namespace). Configmaps churn (creates, patches, deletes) all along. SIGKILL
the leader: the standby takes over with the watermarks the leader published, and the union of both
outputs, read with the consumer rule (per key only a greater (RV, deleted)), converges to the server
with every delete. Then the killed replica comes back as the standby and the leader is killed again,
TAKEOVERS times: the failover time (SIGKILL → the other replica's "leading" line) is printed as
p50/p99, not judged (it is lease_seconds + renew_seconds at most on an idle machine; a loaded one only
takes longer)."""
import signal
import time

from kbtest import check, ControlPlane, percentile, run, wait_for
from kbha import Churn, check_converged, knows_holder, leads, lines, settled, start_pair

LEASE, RENEW = 4, 1
TAKEOVERS = 3  # after the first


def test():
    cp = ControlPlane()
    a, b, churn = start_pair(cp, "k", LEASE, RENEW)
    churn.start()
    churn.more(20)
    settled(cp, a)  # the leader delivered the churn so far
    settled(cp, b)  # the standby skipped it, as the leader's
    check(lines(b) == [], "the standby delivered %d line(s)" % len(lines(b)))
    check(len(lines(a)) > 0, "the leader delivered nothing")

    # SIGKILL the leader in the middle of the churn.
    t_kill = time.monotonic()
    a.kill()
    wait_for(lambda: leads(b), 120, 0.05, "replica-b to take over")
    first = time.monotonic() - t_kill
    log = b.logtext()
    check("watermarks taken over: {\"cms\":" in log, "the takeover names the watermark:\n" + log[-1500:])
    churn.more(20)  # changes after the takeover, for the new leader alone
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
    for _ in range(TAKEOVERS):
        n_leads = dead.logtext().count(": leading (lease") + 1
        dead.start()
        wait_for(lambda: "standby until leading" in dead.logtext()[dead.log_start:], 60, 0.1, "the restart")
        knows_holder(dead, "replica-a" if leader is a else "replica-b")
        settled(cp, dead)  # it has resumed its watch and follows the leader's watermarks
        t_kill = time.monotonic()
        leader.kill()
        wait_for(lambda: leads(dead, n_leads), 120, 0.05, "the standby to take over")
        times.append(time.monotonic() - t_kill)
        leader, dead = dead, leader
        churn.more(10)
    churn.stop()
    check_converged(cp, [a, b], deleted | churn.deleted)
    check(leader.stop(signal.SIGTERM) == 0, "the leader's exit status on SIGTERM")
    print("failover (SIGKILL -> the standby leads), lease_seconds=%d renew_seconds=%d, %d takeovers: "
          "p50 %.3f s, p99 %.3f s, min %.3f s, max %.3f s" % (LEASE, RENEW, len(times), percentile(times, 50),
                                                             percentile(times, 99), min(times), max(times)))


run(test)
