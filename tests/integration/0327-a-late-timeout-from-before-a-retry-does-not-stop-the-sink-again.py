"""A delivery report that times out after SIGHUP retried the sink, for a record taken before the retry, does
not stop the retried sink again.

SIGHUP retrying a stopped sink drains its informer (its workers), reopens it on state_dir and lets the sink
take messages again; the journal delivers everything from the watermark again. Records the old pipeline
had handed to the sink before the stop may still be in librdkafka then: their delivery reports come later
(librdkafka times queued records out on a 1 s scan, after the in-flight ones). Such a late give-up is the
old pipeline's, already redelivered from the journal: it must not stop the sink the operator just retried.

The Kafka sink sets message.timeout.ms = 10000; the broker is frozen (SIGSTOP); a first wave of changes,
3 s later a second one (so its records time out ~3 s after the first wave's). At the first "stopped" line
(the first wave's timeout) kbridge gets SIGHUP while the broker is still frozen; once the second wave's
late reports are in (the failed counter covers everything the sink took before the retry), the broker is
thawed and a third wave is made. The retried sink's own records (due 10 s after the retry) are delivered;
the sink must not be stopped (kbridge_sink_stopped 0) and the consumer (docs/guarantees.md's rule over
kcat) converges to the server's state, third wave included, without another SIGHUP.
Before the fix, the second wave's late reports stopped the retried sink ("sink=k stopped" after "trying
it again"), the third wave was never sent to it, and only another SIGHUP would have delivered it."""
import time
from kbtest import *

TOPIC = "t0327"


def config(sim, d, brokers):
    return ('cluster = { name = "t"; server = "%s"; };\nhttp = { listen = "127.0.0.1:0"; };\nshutdown_timeout = 5;\n'
            'state_dir = "%s/state";\n'
            'informers = ( { name = "pods"; version = "v1"; resource = "pods"; } );\n'
            'sinks = ( { name = "k"; type = "kafka"; brokers = "%s";\n'
            '            properties = { "message.timeout.ms" = "10000"; }; } );\n'
            'routes = ( { informer = "pods"; sink = "k"; topic = "%s"; } );\n' % (sim.url, d, brokers, TOPIC))


def consumer_view(brokers):
    """docs/guarantees.md's rule over every record of the topic, in partition order."""
    return rule_view(json.loads(value) for _, _, _, _, value in kafka_records(brokers, TOPIC))


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

    def metric(name, **kw):
        return b.metric(name, sink="k", **kw)

    os.kill(pid, signal.SIGSTOP)
    try:
        sim.bulk(pod_ops("update", "ns1", names, extra={"spec": {"wave": 1}}))
        wait_for(lambda: metric("kbridge_sink_produced_total") >= 40, 30, 0.1, "the sink to take the first wave")
        time.sleep(3)  # shapes the history (the second wave's records time out later); asserts nothing
        sim.bulk(pod_ops("update", "ns1", names, extra={"spec": {"wave": 2}}))
        wait_for(lambda: metric("kbridge_sink_produced_total") >= 60, 30, 0.1, "the sink to take the second wave")
        b.wait_log("sink=k stopped: it could not deliver", 60)
        taken = metric("kbridge_sink_produced_total")
        b.proc.send_signal(signal.SIGHUP)
        b.wait_log("sink=k: trying it again", 30)
        acked = metric("kbridge_sink_messages_total", result="acked")
        wait_for(lambda: metric("kbridge_sink_messages_total", result="failed") + acked >= taken, 30, 0.1,
                 "the late reports of everything the sink took before the retry")
    finally:
        os.kill(pid, signal.SIGCONT)
    sim.bulk(pod_ops("update", "ns1", names[:10], extra={"spec": {"wave": 3}}) +
             pod_ops("create", "ns2", ["new-%d" % i for i in range(5)]) + pod_ops("delete", "ns1", names[15:]))
    try:
        wait_for(lambda: consumer_view(brokers) == server(), 60, 0.5, "the consumer to converge, third wave too")
    except Failure:
        got, want = consumer_view(brokers), server()
        after = b.logtext().split("sink=k: trying it again", 1)[-1]
        raise Failure("the consumer lacks %s, has extra %s, differs on %s; after the retry: %s" % (
            sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5],
            sorted(k for k in want if k in got and got[k] != want[k])[:5],
            [l[:260] for l in after.splitlines() if "sink=k stopped" in l][:2]))
    check(metric("kbridge_sink_stopped") == 0, "the retried sink is not stopped")
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
