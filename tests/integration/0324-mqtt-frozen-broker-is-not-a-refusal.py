"""An MQTT broker that stops acknowledging is not a refusal: the sink holds the changes unacknowledged
(below the watermark, never dead-lettered) and delivers them once the broker answers again.

The pods informer (state_dir) goes to an MQTT sink (QoS 1, keepalive 5 s, on_refused = "dead_letter")
in state mode: the consumer is what a new subscriber gets retained, compared by uid and resourceVersion
with the server. Mosquitto is frozen (SIGSTOP: the TCP connection stays open, nothing is acknowledged)
while Pods are updated, created and deleted; the client's keepalive runs out and the connection is
dropped ("connection lost"). Meanwhile: nothing is dead-lettered, the sink is not stopped, and its
watermark stays below the informer's newest change. Mosquitto is thawed (SIGCONT): without any SIGHUP
the sink reconnects and delivers; the retained tree converges to the server's state and the watermark
reaches the newest change.

What this cannot reach: the sink's retry limit (KB_MQTT_MAX_ATTEMPTS, KB_ERR_TIMEDOUT). At QoS 1/2 neither
client library hands an in-flight record back when the connection breaks (the persistent session
resends it), so a frozen or stopped broker never counts an attempt; the limit is proven in unit-mqtt
with a fake client, and the bridge's handling of a sink that gives a message up without a verdict is
proven end to end by 0323 (Kafka's message timeout)."""
from kbtest import *


def config(sim, d, uri):
    return with_mqtt_client(
        'cluster = { name = "t"; server = "%s"; };\nhttp = { listen = "127.0.0.1:0"; };\nshutdown_timeout = 5;\n'
        'state_dir = "%s/state";\n'
        'informers = ( { name = "pods"; version = "v1"; resource = "pods"; } );\n'
        'sinks = ( { name = "m"; type = "mqtt"; uri = "%s"; client_id = "kbtest-0324"; qos = 1; keepalive = 5;\n'
        '            on_refused = "dead_letter"; dead_letter = "dl"; },\n'
        '          { name = "dl"; type = "file"; path = "%s/dl.jsonl"; } );\n'
        'routes = ( { informer = "pods"; sink = "m"; topic = "st/{namespace}/{name}"; mode = "state"; } );\n'
        % (sim.url, d, uri, d))


def watermarks(b):
    inf = b.informer_doc()
    return inf["seq"], {s["name"]: s["watermark"] for s in inf["sinks"]}


def test():
    broker = Mosquitto()
    with open(os.path.join(broker.dir, "mosquitto.pid")) as f:
        pid = int(f.read().strip())
    sim = Sim()
    names = ["web-%02d" % i for i in range(20)]
    sim.bulk(pod_ops("create", "ns1", names))
    d = tempfile.mkdtemp(prefix="kbtest-")
    b = ConfigBridge(config(sim, d, broker.uri), workdir=d)

    def server():
        return {i["key"]: (i["uid"], i["resourceVersion"]) for i in sim.state()["items"]}

    def retained():
        return {t[len("st/"):]: (m["props"]["k8s-uid"], m["props"]["k8s-resource-version"])
                for t, m in broker.retained("st/#").items()}
    try:
        wait_for(lambda: retained() == server(), 60, 0.3, "the retained tree to have the first 20 Pods")
    except Failure:
        raise Failure("retained %s, server %s\n%s" % (sorted(retained().items())[:3], sorted(server().items())[:3],
                                                       b.logtext()[-2000:]))

    os.kill(pid, signal.SIGSTOP)
    try:
        sim.bulk(pod_ops("update", "ns1", names[:10], extra={"spec": {"frozen": True}}) +
                 pod_ops("create", "ns2", ["new-%d" % i for i in range(5)]) + pod_ops("delete", "ns1", names[15:]))
        b.wait_log("sink=m connection lost", 60)
        seq, marks = watermarks(b)
        print("frozen: watermark %d, newest %d" % (marks["m"], seq))
        check(marks["m"] < seq, "the sink's watermark (%d) stays below the informer's newest change (%d)"
              % (marks["m"], seq))
        check("sink=m stopped" not in b.logtext(), "a broker that does not answer does not stop the sink:\n%s"
              % b.logtext()[-2000:])
        check(not read_jsonl(os.path.join(d, "dl.jsonl")), "a broker that does not answer is not a refusal: "
              "nothing dead-lettered")
    finally:
        os.kill(pid, signal.SIGCONT)

    try:
        wait_for(lambda: retained() == server(), 60, 0.3, "the retained tree to converge after the thaw")
    except Failure:
        got, want = retained(), server()
        raise Failure("the consumer lacks %s, has extra %s, differs on %s\n%s" % (
            sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5],
            sorted(k for k in want if k in got and got[k] != want[k])[:5], b.logtext()[-3000:]))
    wait_for(lambda: (lambda s, m: m["m"] == s)(*watermarks(b)), 30, 0.2, "the watermark to reach the newest change")
    check(not read_jsonl(os.path.join(d, "dl.jsonl")), "still nothing dead-lettered")
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
