"""simulator -> kbridge -> real Mosquitto -> a new mosquitto_sub: mode = "state".

After churn (creates, updates, deletes, a delete and re-create under a new
uid), a subscriber arriving later to k8s/<cluster>/pods/# receives, as
retained messages, exactly the simulator's current state: one message per
live pod whose uid and resourceVersion (MQTT 5 user properties and envelope)
equal /_sim/state; deleted pods have no retained message (the zero-length
retained delete removed it). The bridge's status topic holds "online".

Mosquitto comes from tests/infra/mosquitto.sh (private port, stopped by pid)."""
from kbtest import *


def retained_state(broker):
    """{key: (uid, rv)} of what a new subscriber to the pods topics receives, checking each message."""
    got = {}
    for topic, m in broker.retained("k8s/test/pods/#").items():
        check(m["retained"], "%s is retained" % topic)
        env = json.loads(m["payload"])
        key = key_of(env)
        check(topic == "k8s/test/pods/" + key, "topic %s is k8s/test/pods/{namespace}/{name}" % topic)
        check(env["type"] in ("ADDED", "MODIFIED") and env["object"]["metadata"]["uid"] == env["uid"],
              "a retained message is a live object: %s" % m["payload"][:200])
        p = m["props"]
        check(p.get("k8s-uid") == env["uid"] and p.get("k8s-resource-version") == env["resourceVersion"]
              and p.get("k8s-type") == env["type"], "user properties match the envelope: %s" % p)
        got[key] = (env["uid"], env["resourceVersion"])
    return got


def server_state(sim):
    return {i["key"]: (i["uid"], i["resourceVersion"]) for i in sim.state()["items"]}


def wait_state(broker, sim, b, timeout=120):
    try:
        return wait_for(lambda: retained_state(broker) == server_state(sim), timeout, 0.5,
                        "the retained messages to equal the server's state")
    except Failure:
        want, got = server_state(sim), retained_state(broker)
        raise Failure("retained state differs: missing=%s extra=%s differ=%s\n--- kbridge log tail ---\n%s"
                      % (sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5],
                         [(k, want[k], got[k]) for k in want if k in got and want[k] != got[k]][:5],
                         b.logtext()[-3000:]))


def test():
    broker = Mosquitto()
    sim = Sim()
    sim.bulk(pod_ops("create", "team-a", ["web-%02d" % i for i in range(30)], labels={"app": "web"}))
    b = Bridge(sim, sinks=['{ name = "mqtt"; type = "mqtt"; uri = "%s"; client_id = "kbtest-0201"; qos = 1; }'
                           % broker.uri],
               routes=['{ informer = "pods"; sink = "mqtt"; mode = "state"; }'])
    wait_state(broker, sim, b)
    status = broker.retained("k8s/test/_bridge/status")
    check(status.get("k8s/test/_bridge/status", {}).get("payload") == "online", "status is online: %s" % status)

    # churn through the watch: creates, updates (several rounds), deletes, a delete + re-create (new uid)
    sim.bulk(pod_ops("create", "team-b", ["api-%02d" % i for i in range(20)]))
    for r in range(3):
        sim.bulk(pod_ops("update", "team-a", ["web-%02d" % i for i in range(0, 30, 2)], extra={"spec": {"r": r}}))
    deleted = ["web-%02d" % i for i in range(20, 30)] + ["api-%02d" % i for i in range(10)]
    sim.bulk(pod_ops("delete", "team-a", deleted[:10]) + pod_ops("delete", "team-b", deleted[10:]))
    old_uid = server_state(sim)["team-a/web-05"][0]
    sim.bulk(pod_ops("delete", "team-a", ["web-05"]) + pod_ops("create", "team-a", ["web-05"]))
    sim.ctl("churn", {"resource": "pods", "count": 200, "rate": 0})
    wait_for(lambda: not sim.ctl("churn", method="GET")["running"], 60, 0.1, "the simulator's churn to finish")

    wait_state(broker, sim, b)
    want, got = server_state(sim), retained_state(broker)
    check(len(want) == 30 and len(got) == 30, "30 live pods (50 created, 20 deleted), 30 retained messages")
    for k in ["team-a/" + n for n in deleted[:10]] + ["team-b/" + n for n in deleted[10:]]:
        check(k not in got, "deleted pod %s has no retained message" % k)
    check(got["team-a/web-05"][0] != old_uid, "a re-created pod's retained message carries the new uid")
    check(b.stop() == 0, "kbridge exits 0 on SIGTERM")
    sim.stop()


run(test)
