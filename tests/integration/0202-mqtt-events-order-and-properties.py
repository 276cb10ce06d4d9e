"""simulator -> kbridge -> real Mosquitto -> mosquitto_sub: mode = "events" at QoS 1 and QoS 2.

Two MQTT sinks (QoS 1 and QoS 2, one client each) get every change of the
pods informer on a topic per object, and the QoS 2 sink also on one shared
topic k8s/<cluster>/events. A persistent QoS 1 subscriber (mosquitto_sub -V 5
-F with %P; its QoS 2 sessions break with "protocol error" under bursts in
Mosquitto 2.0.11's client, so it subscribes at QoS 1) receives, per topic and object, exactly the changes the file sink
wrote, in resourceVersion order; each message's MQTT 5 user properties
k8s-type, k8s-resource-version and k8s-uid equal its envelope; events-mode
messages are not retained.

Mosquitto comes from tests/infra/mosquitto.sh (private port, stopped by pid)."""
from kbtest import *


def reference(events, topic_of):
    """What the file sink saw, as mqtt_sequences() shows it when each change goes to topic_of(key)."""
    seq = {}
    for e in events:
        seq.setdefault((topic_of(key_of(e)), key_of(e)), []).append((e["type"], int(e["resourceVersion"])))
    return seq


def test():
    broker = Mosquitto(debug_log=True)
    sub = MqttSub(broker, ["q1/#", "q2/#", "k8s/test/events"], qos=1, client_id="kbtest-0202-sub", start=False)
    sub.subscribe()
    sub.start()
    sim = Sim()
    names = ["web-%02d" % i for i in range(12)]
    sim.bulk(pod_ops("create", "team-a", names[:6]))
    out = os.path.join(tempfile.mkdtemp(prefix="kbtest-"), "out.jsonl")
    b = Bridge(sim, out=out, sinks=[
        '{ name = "out"; type = "file"; path = "%s"; }' % out,
        '{ name = "q1"; type = "mqtt"; uri = "%s"; client_id = "kbtest-0202-q1"; qos = 1; }' % broker.uri,
        '{ name = "q2"; type = "mqtt"; uri = "%s"; client_id = "kbtest-0202-q2"; qos = 2; }' % broker.uri,
    ], routes=[
        '{ informer = "pods"; sink = "out"; }',
        '{ informer = "pods"; sink = "q1"; topic = "q1/{namespace}/{name}"; }',
        '{ informer = "pods"; sink = "q2"; topic = "q2/{namespace}/{name}"; }',
        '{ informer = "pods"; sink = "q2"; topic = "k8s/{cluster}/events"; }',
    ])
    wait_for(lambda: [r for r in sim.requests() if r["path"] == "/api/v1/pods"], 60, 0.05, "kbridge's first list")
    for ns in ("team-a", "team-b"):
        sim.bulk(pod_ops("create", ns, [n for n in names if ns == "team-b" or n not in names[:6]]))
    for r in range(4):
        sim.bulk(pod_ops("update", "team-a", names, extra={"spec": {"r": r}}) +
                 pod_ops("update", "team-b", names[::2], extra={"spec": {"r": r}}))
    sim.bulk(pod_ops("delete", "team-b", names[:4]) + pod_ops("create", "team-b", names[:2]))
    sim.ctl("churn", {"resource": "pods", "count": 300, "rate": 0})
    wait_for(lambda: not sim.ctl("churn", method="GET")["running"], 60, 0.1, "the simulator's churn to finish")
    b.wait_converged(sim, timeout=120)
    evs = b.events()
    want = reference(evs, lambda k: "q1/" + k)
    want.update(reference(evs, lambda k: "q2/" + k))
    want.update(reference(evs, lambda k: "k8s/test/events"))

    def arrived():
        return mqtt_sequences(sub.messages()) == want
    try:
        wait_for(arrived, 120, 0.5, "every change on every topic, in order")
    except Failure:
        got = mqtt_sequences(sub.messages())
        bad = [k for k in want if got.get(k) != want[k]][:3]
        raise Failure("topics differ from the file sink: %s (%d messages)\n--- broker log tail ---\n%s"
                      "\n--- kbridge log tail ---\n%s"
                      % ([(k, want[k][-4:], got.get(k, [])[-4:]) for k in bad], len(sub.messages()),
                         broker.logtext()[-2000:], b.logtext()[-2000:]))

    msgs = sub.messages()
    check(len(msgs) == 3 * len(evs), "each change once per route: %d messages for %d changes" % (len(msgs), len(evs)))
    for m in msgs:
        env = json.loads(m["payload"])
        p = m["props"]
        check(not m["retained"], "events mode is not retained: %s" % m["topic"])
        check(p.get("k8s-type") == env["type"] and p.get("k8s-resource-version") == env["resourceVersion"]
              and p.get("k8s-uid") == env["uid"], "user properties match the envelope: %s vs %s/%s/%s"
              % (p, env["type"], env["resourceVersion"], env["uid"]))
    for (topic, key), seq in mqtt_sequences(msgs).items():
        rvs = [rv for t, rv in seq]
        check(rvs == sorted(rvs) and len(set(rvs)) == len(rvs), "%s %s: rv order %s" % (topic, key, rvs))
    log = broker.logtext()
    check("Sending PUBACK to kbtest-0202-q1" in log and "Sending PUBCOMP to kbtest-0202-q2" in log
          and "Sending PUBCOMP to kbtest-0202-q1" not in log and "Sending PUBACK to kbtest-0202-q2" not in log,
          "the broker acknowledged the sinks' messages with PUBACK (QoS 1) and PUBCOMP (QoS 2)")
    check(b.stop() == 0, "kbridge exits 0 on SIGTERM")
    sub.stop()
    sim.stop()


run(test)
