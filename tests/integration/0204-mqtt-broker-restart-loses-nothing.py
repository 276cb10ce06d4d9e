"""The broker restarts mid-stream: nothing lost, nothing reordered, at QoS 1 and QoS 2.

Two MQTT sinks (QoS 1 and QoS 2) each carry the pods informer twice: events
on a topic per object and state (retained). The simulator churns at a paced
rate while Mosquitto is stopped (SIGTERM, by pid), kept down while pods are
updated, created and deleted, started again, then restarted once more. In
the end every change the file sink wrote is on its events topic, per topic
in resourceVersion order (an exact repeat of an already delivered change is
allowed: at-least-once), and a new subscriber's retained state equals the
server's on both state trees. Deletes made while the broker was down are gone
from the retained state.

The persistent subscriber is QoS 1 (Mosquitto 2.0.11's mosquitto_sub drops
QoS 2 sessions with "protocol error" under bursts); the QoS 2 leg under test
is kbridge → broker. Mosquitto comes from tests/infra/mosquitto.sh."""
from kbtest import *


def dedup(seq):
    seen, out = set(), []
    for x in seq:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def churn_done(sim):
    return sim.ctl("churn", method="GET")["done"]


def test():
    broker = Mosquitto()
    sub = MqttSub(broker, ["ev1/#", "ev2/#"], qos=1, client_id="kbtest-0204-sub", start=False)
    sub.subscribe()
    sub.start()
    sim = Sim()
    names = ["web-%02d" % i for i in range(40)]
    sim.bulk(pod_ops("create", "team-a", names))
    out = os.path.join(tempfile.mkdtemp(prefix="kbtest-"), "out.jsonl")
    b = Bridge(sim, out=out, sinks=[
        '{ name = "out"; type = "file"; path = "%s"; }' % out,
        '{ name = "m1"; type = "mqtt"; uri = "%s"; client_id = "kbtest-0204-m1"; qos = 1; }' % broker.uri,
        '{ name = "m2"; type = "mqtt"; uri = "%s"; client_id = "kbtest-0204-m2"; qos = 2; }' % broker.uri,
    ], routes=[
        '{ informer = "pods"; sink = "out"; }',
        '{ informer = "pods"; sink = "m1"; topic = "ev1/{namespace}/{name}"; }',
        '{ informer = "pods"; sink = "m1"; topic = "st1/{namespace}/{name}"; mode = "state"; }',
        '{ informer = "pods"; sink = "m2"; topic = "ev2/{namespace}/{name}"; }',
        '{ informer = "pods"; sink = "m2"; topic = "st2/{namespace}/{name}"; mode = "state"; }',
    ])
    b.wait_converged(sim)

    total = 1500
    sim.ctl("churn", {"resource": "pods", "count": total, "rate": 300})
    wait_for(lambda: churn_done(sim) >= total // 4, 120, 0.05, "a quarter of the churn")
    broker.stop()
    sim.bulk(pod_ops("delete", "team-a", names[30:]) + pod_ops("create", "team-b", names[:10]))
    wait_for(lambda: churn_done(sim) >= total // 2, 120, 0.05, "half of the churn, broker down")
    broker.start()
    wait_for(lambda: churn_done(sim) >= 3 * total // 4, 120, 0.05, "three quarters of the churn")
    broker.restart()
    sim.bulk(pod_ops("update", "team-b", names[:10], extra={"spec": {"after": "restart"}}))
    wait_for(lambda: not sim.ctl("churn", method="GET")["running"], 120, 0.1, "the churn to finish")
    check(b.alive(), "kbridge rides out the broker restarts")
    b.wait_converged(sim, timeout=120)
    evs = b.events()
    assert_rv_monotonic(evs)
    want = {}
    for e in evs:
        for p in ("ev1/", "ev2/"):
            want.setdefault((p + key_of(e), key_of(e)), []).append((e["type"], int(e["resourceVersion"])))

    def arrived():
        got = mqtt_sequences(sub.messages())
        return {k: dedup(v) for k, v in got.items()} == want
    try:
        wait_for(arrived, 180, 0.5, "every change on its events topic")
    except Failure:
        got = {k: dedup(v) for k, v in mqtt_sequences(sub.messages()).items()}
        bad = [k for k in want if got.get(k) != want[k]][:3]
        raise Failure("events topics differ from the file sink: %s\n--- kbridge log tail ---\n%s"
                      % ([(k, len(want[k]), len(got.get(k, [])), [x for x in want[k] if x not in got.get(k, [])][:4])
                          for k in bad], b.logtext()[-3000:]))
    msgs = sub.messages()
    for (topic, key), seq in mqtt_sequences(msgs).items():
        rvs = [rv for t, rv in seq]
        seen = set()
        last = 0
        for rv in rvs:
            if rv in seen:
                continue  # an exact repeat (at-least-once)
            check(rv > last, "%s went back from rv %d to %d" % (topic, last, rv))
            seen.add(rv)
            last = rv
    n = sum(len(v) for v in want.values())
    print("%d changes per events topic tree, %d messages received (%d repeats)" % (n // 2, len(msgs), len(msgs) - n))

    server = {i["key"]: (i["uid"], i["resourceVersion"]) for i in sim.state()["items"]}
    for tree in ("st1", "st2"):
        def retained():
            got = {}
            for topic, m in broker.retained(tree + "/#").items():
                got[topic[len(tree) + 1:]] = (m["props"]["k8s-uid"], m["props"]["k8s-resource-version"])
            return got
        try:
            wait_for(lambda: retained() == server, 120, 0.5, "the retained %s tree to equal the server" % tree)
        except Failure:
            got = retained()
            raise Failure("%s: missing=%s extra=%s" % (tree, sorted(set(server) - set(got))[:5],
                                                       sorted(set(got) - set(server))[:5]))
    check(b.stop() == 0, "kbridge exits 0 on SIGTERM")
    sub.stop()
    sim.stop()


run(test)
