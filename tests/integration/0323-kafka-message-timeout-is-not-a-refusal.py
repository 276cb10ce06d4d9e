"""Kafka's message.timeout.ms through the bridge is not a refusal: the change stays below the watermark,
nothing is dead-lettered, and after the broker is back and a SIGHUP the consumer has everything.

The sink sets message.timeout.ms = 3000 (librdkafka passthrough) and on_refused = "dead_letter"; the
pods informer has state_dir. The consumer (kcat, topic t0323) has the first 20 Pods; then the broker is
frozen (SIGSTOP) and Pods are updated, created and deleted. librdkafka gives those records up (a
message timeout: no verdict from the broker), so the sink stops ("could not deliver … not a refusal"),
the dead-letter file stays empty and the sink's watermark stays below the informer's newest change.
The broker is thawed (SIGCONT) and kbridge gets SIGHUP: the sink's informer reopens on state_dir and
delivers again from the journal. The consumer, following docs/guarantees.md's rule (per key, apply a
message only if its (resourceVersion, DELETED) is greater), converges to the server's state."""
from kbtest import *

TOPIC = "t0323"


def config(sim, d, brokers):
    return ('cluster = { name = "t"; server = "%s"; };\nhttp = { listen = "127.0.0.1:0"; };\nshutdown_timeout = 5;\n'
            'state_dir = "%s/state";\n'
            'informers = ( { name = "pods"; version = "v1"; resource = "pods"; } );\n'
            'sinks = ( { name = "k"; type = "kafka"; brokers = "%s"; on_refused = "dead_letter"; dead_letter = "dl";\n'
            '            properties = { "message.timeout.ms" = "3000"; }; },\n'
            '          { name = "dl"; type = "file"; path = "%s/dl.jsonl"; } );\n'
            'routes = ( { informer = "pods"; sink = "k"; topic = "%s"; } );\n' % (sim.url, d, brokers, d, TOPIC))


def consumer_view(brokers):
    """docs/guarantees.md's rule over every record of the topic, in partition order."""
    return rule_view(json.loads(value) for _, _, _, _, value in kafka_records(brokers, TOPIC))


def watermarks(b):
    inf = b.informer_doc()
    return inf["seq"], {s["name"]: s["watermark"] for s in inf["sinks"]}


def settled(b):
    """The sink has nothing in flight: every message it took was acknowledged or given up."""
    done = b.metric("kbridge_sink_messages_total", sink="k", result="acked") + \
        b.metric("kbridge_sink_messages_total", sink="k", result="failed")
    return b.metric("kbridge_sink_produced_total", sink="k") == done


def test():
    kafka = KafkaBroker()
    brokers = kafka.start()
    with open(os.path.join(kafka.dir, "kafka.pid")) as f:
        pid = int(f.read().strip())
    sim = Sim()
    names = ["web-%02d" % i for i in range(20)]
    sim.bulk(pod_ops("create", "ns1", names))
    d = tempfile.mkdtemp(prefix="kbtest-")
    b = ConfigBridge(config(sim, d, brokers), workdir=d)

    def server():
        return {i["key"]: i["resourceVersion"] for i in sim.state()["items"]}
    wait_for(lambda: consumer_view(brokers) == server(), 60, 0.5, "the consumer to have the first 20 Pods")

    os.kill(pid, signal.SIGSTOP)
    try:
        sim.bulk(pod_ops("update", "ns1", names[:10], extra={"spec": {"frozen": True}}) +
                 pod_ops("create", "ns2", ["new-%d" % i for i in range(5)]) + pod_ops("delete", "ns1", names[15:]))
        b.wait_log("sink=k stopped: it could not deliver", 60)
        stop_line = [l for l in b.logtext().splitlines() if "sink=k stopped" in l][0]
        check("not a refusal" in stop_line and "refused" not in stop_line.split("could not deliver")[0],
              "the stop says it is not a refusal: %s" % stop_line)
        seq, marks = watermarks(b)
        print("frozen: %s; watermark %d, newest %d" % (stop_line.split(" bridge: ")[-1][:200], marks["k"], seq))
        check(marks["k"] < seq, "the sink's watermark (%d) stays below the informer's newest change (%d)"
              % (marks["k"], seq))
        check(not read_jsonl(os.path.join(d, "dl.jsonl")), "a message timeout is not a refusal: nothing dead-lettered")
        # Every record the sink took has its verdict (librdkafka times queued ones out on a 1 s scan, after
        # the in-flight ones): the SIGHUP below retries a settled sink. 0327 sends it before that.
        wait_for(lambda: settled(b), 30, 0.1, "every record the sink took to be given up")
    finally:
        os.kill(pid, signal.SIGCONT)

    b.proc.send_signal(signal.SIGHUP)
    try:
        wait_for(lambda: consumer_view(brokers) == server(), 90, 0.5, "the consumer to converge after SIGHUP")
    except Failure:
        got, want = consumer_view(brokers), server()
        raise Failure("the consumer lacks %s, has extra %s, differs on %s\n%s" % (
            sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5],
            sorted(k for k in want if k in got and got[k] != want[k])[:5], b.logtext()[-3000:]))
    wait_for(lambda: (lambda s, m: m["k"] == s)(*watermarks(b)), 30, 0.2, "the watermark to reach the newest change")
    check(not read_jsonl(os.path.join(d, "dl.jsonl")), "still nothing dead-lettered")
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
