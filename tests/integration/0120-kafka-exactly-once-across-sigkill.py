"""Exactly-once into Kafka across SIGKILL: simulator -> kbridge (state_dir,
one informer whose only route goes to a transactional Kafka sink) -> a real
Apache Kafka broker -> kcat with isolation.level=read_committed. The bridge
is killed with SIGKILL at random points of a churn 5 to 8 times and
restarted each time; meanwhile pods are deleted and created. At the end the
read_committed consumer holds every change the server made (the first list
as ADDED, then every watch event) exactly once: each (key, resourceVersion)
once, none missing, none invented, each key in one partition with its
resourceVersions increasing. The restarts resume from the checkpoint read
back from the checkpoint topic, which commits in the same transaction as
the changes it passes.

Kafka comes from tests/infra/kafka.sh (own instance, private ports); the
test skips only if that script says Kafka cannot be had here (exit 3)."""
import collections
import random
from kbtest import *

TOPIC = "k8s.test.pods"


def key_rvs(records):
    """(key, rv) of every data record (heartbeats aside), in log order."""
    return [(k, int(h["k8s-resource-version"])) for p, o, k, h, v in records
            if not k.startswith("_heartbeat") and "k8s-resource-version" in h]


def test():
    seed = int(os.environ.get("KB_TEST_SEED", str(int(time.time()))))
    rnd = random.Random(seed)
    print("seed", seed)
    kafka = KafkaBroker()
    brokers = kafka.start()
    sim = Sim()
    names = ["p%03d" % i for i in range(40)]
    rv0 = sim.bulk(pod_ops("create", "ns1", names))["resourceVersion"]
    first = {i["key"]: int(i["resourceVersion"]) for i in sim.state()["items"]}
    work = tempfile.mkdtemp(prefix="kbeos-")
    b = Bridge(sim, extra='state_dir = "%s/state";' % work, workdir=work, sinks=[
        '{ name = "kafka"; type = "kafka"; brokers = "%s"; transactional = true; '
        'properties = { "linger.ms" = "5"; }; }' % brokers,
    ], routes=['{ informer = "pods"; sink = "kafka"; topic = "%s"; }' % TOPIC],
        informers=['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 25; shards = 3; }'])

    # The first list is committed with a checkpoint before the first kill: without one, a restart can only
    # relist, and a relist cannot show the changes made meanwhile one by one.
    wait_for(lambda: kafka_records(brokers, "__kbridge_checkpoints"), 120, 0.2, "the first checkpoint")
    live, counter = set(names), 0
    kills = rnd.randint(5, 8)
    for cycle in range(kills):
        started = cycle + 1
        wait_for(lambda: b.logtext().count(" starting: ") >= started, 120, 0.05, "kbridge to start")
        sim.ctl("churn", {"resource": "pods", "count": 200, "rate": 500})
        time.sleep(rnd.uniform(0.05, 1.0))
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait()
        b.logf.close()
        wait_for(lambda: not sim.ctl("churn", method="GET").get("running"), 30, what="the churn to finish")
        gone = rnd.sample(sorted(live), 2)
        fresh = ["n%03d" % (counter + i) for i in range(2)]
        counter += 2
        sim.bulk(pod_ops("delete", "ns1", gone) + pod_ops("create", "ns1", fresh))
        live = (live - set(gone)) | set(fresh)
        b.start()
    sim.ctl("churn", {"resource": "pods", "count": 100, "rate": 500})
    wait_for(lambda: not sim.ctl("churn", method="GET").get("running"), 30, what="the last churn to finish")

    history = watch_history(sim, rv0)
    expected = set(first.items()) | {(k, rv) for k, t, rv in history}
    types = {(k, rv): t for k, t, rv in history}
    try:
        wait_for(lambda: expected <= set(key_rvs(kafka_records(brokers, TOPIC))), 90, 0.5,
                 "the read_committed consumer to hold every change")
    except Failure:
        got = set(key_rvs(kafka_records(brokers, TOPIC)))
        raise Failure("%d of %d changes missing, e.g. %s\n--- log tail ---\n%s%s"
                      % (len(expected - got), len(expected), sorted(expected - got)[:5], b.logtext()[-4000:], b.stacks()))
    check(b.stop() == 0, "kbridge exits 0 on SIGTERM")

    records = kafka_records(brokers, TOPIC)
    got = key_rvs(records)
    dups = [kr for kr, n in collections.Counter(got).items() if n > 1]
    check(not dups, "%d changes delivered more than once to a read_committed consumer, e.g. %s"
          % (len(dups), sorted(dups)[:5]))
    extra = set(got) - expected
    check(not extra, "records the server never made: %s" % sorted(extra)[:5])
    part, last = {}, {}
    for p, o, k, h, v in records:
        if k.startswith("_heartbeat"):
            continue
        rv = int(h["k8s-resource-version"])
        check(part.setdefault(k, p) == p, "key %s in partitions %d and %d" % (k, part[k], p))
        check(rv > last.get(k, 0), "key %s went from rv %d to %d" % (k, last.get(k, 0), rv))
        last[k] = rv
        if (k, rv) in types:
            check(h.get("k8s-type") == types[(k, rv)], "%s@%d: type %s, the server's was %s"
                  % (k, rv, h.get("k8s-type"), types[(k, rv)]))
    log = b.logtext()
    check(log.count("checkpoint read: {") >= 1, "some restart read its checkpoint back from Kafka")
    uncommitted = len(key_rvs(kafka_records(brokers, TOPIC, read_committed=False))) - len(got)
    print("%d kills, %d changes exactly once; %d records of aborted transactions hidden from read_committed"
          % (kills, len(got), uncommitted))
    sim.stop()


run(test)
