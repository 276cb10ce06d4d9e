"""simulator -> kbridge -> real Apache Kafka -> kcat: what a Kafka consumer of
kbridge relies on. One informer feeds four Kafka routes (JSON events, state
mode, CloudEvents binary, CloudEvents structured) and, as the reference, a
file sink. Checks: every change of a key lands in one partition, in
resourceVersion order, exactly as the file sink saw it (nothing lost, nothing
repeated); the k8s-* headers; state-mode DELETED + tombstone; the CloudEvents
Kafka binding in both modes. Then the broker is stopped mid-stream and
restarted: the changes made meanwhile arrive afterwards, in order, none lost.

Kafka comes from tests/infra/kafka.sh (its own instance, private ports); the
test skips only if that script says Kafka cannot be had here (exit 3)."""
import os
import shutil
import socket
import subprocess
import tempfile

from kbtest import *

INFRA = os.path.join(SOURCE, "tests", "infra", "kafka.sh")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Kafka:
    """A private broker for this test, stopped and deleted at exit."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kbkafka-")
        self.env = dict(os.environ, KB_KAFKA_DIR=self.dir, KB_KAFKA_PORT=str(free_port()),
                        KB_KAFKA_CONTROLLER_PORT=str(free_port()))
        self.brokers = None
        atexit.register(self.clean)

    def _run(self, cmd):
        return subprocess.run([INFRA, cmd], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=600)

    def start(self):
        r = self._run("start")
        if r.returncode == 3:
            print("SKIP %s: Kafka cannot be had on this machine: %s" % (os.path.basename(sys.argv[0]),
                                                                      r.stderr.strip()))
            sys.exit(0)
        check(r.returncode == 0, "kafka.sh start failed:\n%s" % r.stderr[-3000:])
        env = dict(l.split("=", 1) for l in r.stdout.split() if "=" in l)
        self.brokers = env["KB_KAFKA_BROKERS"]

    def stop(self):
        check(self._run("stop").returncode == 0, "kafka.sh stop failed")

    def clean(self):
        self._run("clean")
        shutil.rmtree(self.dir, ignore_errors=True)


def consume(brokers, topic):
    """Every record of topic: (partition, key, headers dict, value bytes or None)."""
    r = subprocess.run(["kcat", "-C", "-b", brokers, "-t", topic, "-o", "beginning", "-e", "-q",
                        "-f", "%p\t%k\t%h\t%S\t%s\n"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    if r.returncode != 0:
        return []  # topic not created yet
    out = []
    for line in r.stdout.decode().splitlines():
        p, k, h, n, v = line.split("\t", 4)
        hdrs = dict(kv.split("=", 1) for kv in h.split(",") if "=" in kv) if h else {}
        out.append((int(p), k, hdrs, None if n == "-1" else v))
    return out


def sequences(records):
    """Per key: the list of (type, rv) from the headers, in log order."""
    seq = {}
    for p, k, h, v in records:
        if v is None:
            continue  # tombstones are checked separately
        seq.setdefault(k, []).append((h["k8s-type"], int(h["k8s-resource-version"])))
    return seq


def file_sequences(events):
    seq = {}
    for e in events:
        seq.setdefault(key_of(e), []).append((e["type"], int(e["resourceVersion"])))
    return seq


def assert_partition_and_order(records, topic):
    part, last = {}, {}
    for p, k, h, v in records:
        check(part.setdefault(k, p) == p, "%s: key %s in partitions %d and %d" % (topic, k, part[k], p))
        rv = int(h["k8s-resource-version"])
        if v is not None:
            check(rv > last.get(k, 0), "%s: key %s went from rv %d to %d" % (topic, k, last.get(k, 0), rv))
            last[k] = rv


def churn(sim, names, rounds, start):
    for i in range(rounds):
        for ns in ("team-a", "team-b"):
            sim.bulk(pod_ops("update", ns, names, extra={"spec": {"round": start + i}}))


def test():
    kafka = Kafka()
    kafka.start()
    sim = Sim()
    names = ["web-%d" % i for i in range(10)]
    sim.bulk(pod_ops("create", "team-c", ["seed"]))  # so the first list is not empty
    work = tempfile.mkdtemp(prefix="kbtest-")
    out = os.path.join(work, "out.jsonl")
    b = Bridge(sim, workdir=work, out=out, sinks=[
        '{ name = "out"; type = "file"; path = "%s"; }' % out,
        '{ name = "kafka"; type = "kafka"; brokers = "%s"; properties = { "linger.ms" = "2"; }; }'
        % kafka.brokers,
    ], routes=[
        '{ informer = "pods"; sink = "out"; }',
        '{ informer = "pods"; sink = "kafka"; topic = "k8s.{cluster}.{resource}"; }',
        '{ informer = "pods"; sink = "kafka"; topic = "k8s.{cluster}.{resource}.state"; mode = "state"; }',
        '{ informer = "pods"; sink = "kafka"; topic = "ce.binary"; format = "cloudevents-binary"; }',
        '{ informer = "pods"; sink = "kafka"; topic = "ce.structured"; format = "cloudevents-structured"; }',
    ])

    # Changes made after kbridge's first list come through its watch, one by one.
    wait_for(lambda: [r for r in sim.requests() if r["path"] == "/api/v1/pods"], 60, 0.05, "kbridge's first list")
    for ns in ("team-a", "team-b"):
        sim.bulk(pod_ops("create", ns, names, labels={"app": "web"}))
    churn(sim, names, 3, 0)
    for ns in ("team-a", "team-b"):
        sim.bulk(pod_ops("delete", ns, names[:3]))
    b.wait_converged(sim, timeout=120)
    ref = file_sequences(b.events())

    events_topic = "k8s.test.pods"
    recs = wait_for(lambda: (lambda r: sequences(r) == ref and r)(consume(kafka.brokers, events_topic)), 120, 0.5,
                    "the events topic to hold exactly what the file sink wrote")
    assert_partition_and_order(recs, events_topic)
    partitions = {p for p, k, h, v in recs}
    check(len(partitions) > 1, "20 keys spread over more than one partition (got %s)" % partitions)
    for p, k, h, v in recs:
        env = json.loads(v)
        check(key_of(env) == k, "key is {namespace}/{name}: %s vs %s" % (k, key_of(env)))
        check(h["k8s-type"] == env["type"] and h["k8s-resource-version"] == env["resourceVersion"]
              and h["k8s-uid"] == env["uid"], "k8s-* headers match the envelope: %s" % h)
        check(h.get("content-type") == "application/json", "content-type header: %s" % h)

    # State mode: value = the object; every DELETED is followed by a tombstone.
    srecs = wait_for(lambda: (lambda r: len([x for x in r if x[3] is None]) == 6 and r)(
        consume(kafka.brokers, events_topic + ".state")), 60, 0.5, "6 tombstones in the state topic")
    assert_partition_and_order(srecs, "state")
    check(sequences(srecs) == ref, "state topic carries every change too")
    # Per key (docs/kafka.md): the DELETED record, then its tombstone. Other keys' records may come
    # between the two in the partition (another shard's worker), and kcat interleaves partitions.
    last = {}
    for p, k, h, v in srecs:
        if v is None:
            prev = last.get(k)
            check(prev is not None and prev[0] == p and prev[2]["k8s-type"] == "DELETED" and prev[3] is not None,
                  "a tombstone follows its key's DELETED record (key %s, before it %r)" % (k, prev))
            check(h["k8s-type"] == "DELETED" and h["k8s-resource-version"] == prev[2]["k8s-resource-version"],
                  "the tombstone carries the DELETED headers")
        else:
            obj = json.loads(v)
            check(obj["kind"] == "Pod" and "type" not in obj, "state value is the object itself")
        last[k] = (p, k, h, v)
    live = {}
    for p, k, h, v in srecs:
        live[k] = v
    live = {k: json.loads(v) for k, v in live.items() if v is not None}
    want = {i["key"]: i["resourceVersion"] for i in sim.state()["items"]}
    check({k: o["metadata"]["resourceVersion"] for k, o in live.items()} == want,
          "compacting the state topic leaves exactly the live objects")

    # CloudEvents, binary mode: attributes in ce_* headers, data = the object.
    crecs = wait_for(lambda: (lambda r: sequences(r) == ref and r)(consume(kafka.brokers, "ce.binary")), 60, 0.5,
                     "the CloudEvents binary topic")
    for p, k, h, v in crecs:
        obj = json.loads(v)
        rv = h["k8s-resource-version"]
        check(h["ce_specversion"] == "1.0" and h["ce_id"] == "%s/%s%s" % (h["k8s-uid"], rv, "/deleted" if h["k8s-type"] == "DELETED" else "")
              and h["ce_source"] == "/clusters/test/v1/pods"
              and h["ce_type"] == "io.k8s.pods." + h["k8s-type"].lower()
              and h["ce_subject"] == k and h["ce_resourceversion"] == rv and h["ce_partitionkey"] == k
              and h["ce_time"].endswith("Z") and h["content-type"] == "application/json",
              "binary-mode CloudEvents headers: %s" % h)
        check(obj["metadata"]["resourceVersion"] == rv, "binary-mode data is the object")

    # CloudEvents, structured mode.
    xrecs = wait_for(lambda: (lambda r: sequences(r) == ref and r)(consume(kafka.brokers, "ce.structured")), 60,
                     0.5, "the CloudEvents structured topic")
    for p, k, h, v in xrecs:
        ce = json.loads(v)
        check(h["content-type"] == "application/cloudevents+json", "structured content-type: %s" % h)
        check(ce["specversion"] == "1.0" and ce["subject"] == k and ce["partitionkey"] == k
              and ce["data"]["metadata"]["resourceVersion"] == ce["resourceversion"], "structured event: %s" % v[:200])

    # The broker goes away mid-stream and comes back: nothing lost, nothing reordered.
    churn(sim, names[3:], 2, 10)
    kafka.stop()
    churn(sim, names[3:], 3, 20)
    b.wait_converged(sim, timeout=60)  # the file sink keeps going meanwhile
    check(b.alive(), "kbridge rides out the broker outage")
    kafka.start()
    ref = file_sequences(b.events())
    try:
        recs = wait_for(lambda: (lambda r: sequences(r) == ref and r)(consume(kafka.brokers, events_topic)), 180,
                        0.5, "every change made while the broker was down to arrive")
    except Failure:
        got = sequences(consume(kafka.brokers, events_topic))
        bad = [k for k in ref if ref[k] != got.get(k)][:3]
        raise Failure("after restart: %s\n--- log tail ---\n%s"
                      % ([(k, ref[k][-3:], got.get(k, [])[-3:]) for k in bad], b.logtext()[-3000:]))
    assert_partition_and_order(recs, events_topic)
    check(b.stop() == 0, "kbridge exits 0 on SIGTERM")
    sim.stop()


run(test)
