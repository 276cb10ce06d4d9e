#!/usr/bin/env python3
"""Benchmark (not a test): how long a takeover takes, and what a consumer sees again after it.

A real kube-apiserver (tests/infra/controlplane.sh), two kbridge replicas of shard 0 with ha.enabled
(file sinks, own state_dirs, lease_seconds / renew_seconds as given), configmaps churning all along
(about 30 changes a second: patches, deletes, names created again). The leader is SIGKILLed N times,
alternately replica-a and replica-b; after each takeover the killed one is restarted and given time
to become a warm standby again. Per takeover, from the SIGKILL:
  - lease: until the new leader's log line "leading" (its Lease write succeeded; log timestamp);
  - first delivery: until the new leader's output file first grows (polled every 10 ms);
  - repeats: lines the new leader delivered that the consumer had already (same key and
    resourceVersion in some replica's earlier output).
Printed: p50 / p99 / min / max of each, and the union of the outputs checked with the consumer rule
of docs/guarantees.md (per key only a greater (RV, DELETED?1:0)) against the server at the end.

--sink kafka-txn: instead of files, one transactional Kafka sink (a real Kafka 4.0, tests/infra/kafka.sh;
the same transactional.id on both replicas, shards = 1). "first delivery" is then when the new leader
is ready to deliver: its producer has fenced the old one and it has read the committed checkpoint
back (its log line "takes over from sink=kafka's committed checkpoint"); repeats are counted at the
end over the whole topic as a read_committed consumer sees it.

There is no reference tool in this run: the peers (kubernetes-event-exporter, the OpenTelemetry
Collector's k8sobjects receiver) have no standby that delivers a dead leader's backlog.

Usage: bench/ha_failover.py [--build build] [--takeovers 20] [--lease 4] [--renew 1] [--sink file|kafka-txn]
"""
import argparse
import datetime
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--takeovers", type=int, default=20)
    ap.add_argument("--lease", type=int, default=4)
    ap.add_argument("--renew", type=int, default=1)
    ap.add_argument("--sink", choices=("file", "kafka-txn"), default="file")
    return ap.parse_args()


ARGS = parse_args()
os.environ["KB_BUILD_DIR"] = os.path.abspath(ARGS.build)

import kbtest  # noqa: E402  (after KB_BUILD_DIR)
from benchutil import percentile  # noqa: E402
from kbha import FILE_SINK, check_converged, leads, lines, start_pair  # noqa: E402

TOPIC = "k8s.ha.cms"
READY = "takes over from sink=kafka's committed checkpoint"
ACTIVATED = "sink=kafka leading: initialising transactions"


def log_time(b, needle, since):
    """Wall-clock time (s) of the first line of b's log past offset since containing needle, or None."""
    for l in b.logtext()[since:].splitlines():
        if needle in l:
            stamp = l.split()[0].rstrip("Z")
            return datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc).timestamp()
    return None


def size(b):
    try:
        return os.path.getsize(b.out)
    except FileNotFoundError:
        return 0


def seen(replicas):
    return {(e["namespace"], e["name"], e["resourceVersion"]) for b in replicas for e in lines(b)
            if e["type"] in ("ADDED", "MODIFIED", "DELETED")}


def one_takeover(leader, standby, nth):
    """SIGKILL leader; returns (to the Lease, to the first delivery, repeats) of standby's takeover."""
    before = seen([leader, standby])
    n_before = len(lines(standby))
    s0 = size(standby)
    since = len(standby.logtext())
    t_kill = time.time()
    leader.kill()
    kbtest.wait_for(lambda: leads(standby, nth), ARGS.lease + ARGS.renew + 10, 0.01, "the standby to lead")
    if ARGS.sink == "kafka-txn":  # its Lease write is followed at once by the producer's activation
        kbtest.wait_for(lambda: log_time(standby, READY, since), 60, 0.01, "the new leader to be ready")
        return log_time(standby, ACTIVATED, since) - t_kill, log_time(standby, READY, since) - t_kill, 0
    t_lease = log_time(standby, ": leading (lease", since) - t_kill
    kbtest.wait_for(lambda: size(standby) > s0, 30, 0.01, "the new leader's first delivery")
    t_first = time.time() - t_kill
    time.sleep(ARGS.renew + 1.0)  # what it delivers from the journal, then live
    fresh = lines(standby)[n_before:]
    repeats = sum(1 for e in fresh if e["type"] in ("ADDED", "MODIFIED", "DELETED") and
                  (e["namespace"], e["name"], e["resourceVersion"]) in before)
    return t_lease, t_first, repeats


def show(name, xs, unit="s"):
    fmt = "%.2f" if unit == "s" else "%d"
    print("  %-36s p50 %s%s  p99 %s%s  min %s%s  max %s%s" % (
        name, fmt % percentile(xs, 50), unit, fmt % percentile(xs, 99), unit, fmt % min(xs), unit,
        fmt % max(xs), unit))


def kafka_repeats(brokers):
    import collections
    got = collections.Counter((k, h["k8s-resource-version"]) for p, o, k, h, v in kbtest.kafka_records(brokers, TOPIC)
                              if "k8s-resource-version" in h)
    return sum(n - 1 for n in got.values()), sum(got.values())


def main():
    signal.signal(signal.SIGTERM, kbtest._sigterm_exits)  # the servers and replicas are stopped at exit
    sinks, opts, brokers = FILE_SINK, "", None
    if ARGS.sink == "kafka-txn":
        brokers = kbtest.KafkaBroker().start()
        sinks = ('sinks = ( { name = "kafka"; type = "kafka"; brokers = "%s"; transactional = true; } );\n'
                 'routes = ( { informer = "cms"; sink = "kafka"; topic = "%s"; } );\n' % (brokers, TOPIC))
        opts = "shards = 1;"
    cp = kbtest.ControlPlane()
    a, b, churn = start_pair(cp, "f", ARGS.lease, ARGS.renew, sinks=sinks, informer_opts=opts)
    churn.start()
    time.sleep(3)
    leader, standby = a, b
    n_leads = {id(a): 1, id(b): 0}
    lease_t, first_t, reps = [], [], []
    for i in range(ARGS.takeovers):
        n_leads[id(standby)] += 1
        tl, tf, rp = one_takeover(leader, standby, n_leads[id(standby)])
        lease_t.append(tl)
        first_t.append(tf)
        reps.append(rp)
        print("takeover %2d: %s leads %.2f s after the SIGKILL, first delivery %.2f s, %d repeat(s)" % (
            i + 1, "replica-b" if standby is b else "replica-a", tl, tf, rp), flush=True)
        dead = leader
        leader, standby = standby, dead
        dead.start()
        kbtest.wait_for(lambda: "standby until leading" in dead.logtext()[dead.log_start:], 60, 0.1, "the restart")
        time.sleep(ARGS.renew + 1.5)  # it has resumed its watch and read the Lease
    churn.stop()
    if ARGS.sink == "file":
        check_converged(cp, [a, b], churn.deleted)
    leader.stop(signal.SIGTERM)
    standby.stop(signal.SIGTERM)
    print("kbridge ha failover, real kube-apiserver %s, %s sink, lease_seconds=%d renew_seconds=%d, %d takeovers "
          "(SIGKILL of the leader, alternately), %d changes:" % (cp.version, ARGS.sink, ARGS.lease, ARGS.renew,
                                                                  len(lease_t), churn.ops))
    show("SIGKILL -> Lease taken", lease_t)
    if ARGS.sink == "file":
        show("SIGKILL -> first delivery", first_t)
        show("repeats per takeover", reps, unit="")
        print("  the union of both outputs, by the consumer rule, equals the server (every delete included)")
        return
    show("SIGKILL -> ready (fenced, cut read)", first_t)
    time.sleep(3)
    dup, total = kafka_repeats(brokers)
    print("  read_committed: %d change records, %d repeated" % (total, dup))


if __name__ == "__main__":
    main()
