#!/usr/bin/env python3
"""High availability with every kind of sink, on a real kube-apiserver: both replicas route the
configmaps to a file, to a real Kafka 4.0 (not transactional: at-least-once) and to a real Mosquitto
(QoS 1), with the same config (default MQTT client_id, same topics). Configmaps churn all along
(patches, deletes, names created again). SIGKILL the leader, later SIGSTOP the new one past its lease
and SIGCONT it. Each consumer — the union of the two files, the Kafka topic (kcat), the MQTT
subscription (mosquitto_sub) — read with the consumer rule of docs/guarantees.md (per key apply only a
greater (resourceVersion, DELETED?1:0)) ends equal to the API server, every delete included; and what
a consumer got twice is bounded: what changed after the watermark the new leader took over (its log line
"watermarks taken over: {"cms":"W"}"), plus, per key, once per takeover the latest state the new leader
held for a key whose latest change it had skipped as a standby (the old leader's watch may have missed
it). So a change at or below W reaches a consumer at most once plus once per takeover."""
import collections
import json
import re
import signal

from kbtest import (check, ControlPlane, Failure, KafkaBroker, Mosquitto, MqttSub, kafka_records, key_of, run,
                    wait_for)
from kbha import NS, leads, lines, published_mark, settled, start_pair

LEASE, RENEW = 4, 1
TOPIC = "k8s.ha.cms"
MQTT_TOPIC = "k8s/ha/cms"


def sinks(brokers, mqtt_uri):
    return ('sinks = ( { name = "out"; type = "file"; path = "{out}"; },\n'
            '          { name = "kafka"; type = "kafka"; brokers = "%s"; properties = { "linger.ms" = "5"; }; },\n'
            '          { name = "q"; type = "mqtt"; uri = "%s"; qos = 1; } );\n'
            'routes = ( { informer = "cms"; sink = "out"; },\n'
            '           { informer = "cms"; sink = "kafka"; topic = "%s"; },\n'
            '           { informer = "cms"; sink = "q"; topic = "%s"; } );\n' % (brokers, mqtt_uri, TOPIC, MQTT_TOPIC))


def kafka_changes(brokers):
    """(key, rv, deleted) of every change record, in log order."""
    return [(k, int(h["k8s-resource-version"]), 1 if h.get("k8s-type") == "DELETED" else 0)
            for p, o, k, h, v in kafka_records(brokers, TOPIC, read_committed=False) if "k8s-resource-version" in h]


def mqtt_changes(sub):
    out = []
    for m in sub.messages():
        if m["payload"] and "k8s-resource-version" in m["props"]:
            out.append((key_of(json.loads(m["payload"])), int(m["props"]["k8s-resource-version"]),
                        1 if m["props"]["k8s-type"] == "DELETED" else 0))
    return out


def file_changes(replicas):
    return [(e["namespace"] + "/" + e["name"], int(e["resourceVersion"]), 1 if e["type"] == "DELETED" else 0)
            for b in replicas for e in lines(b) if e["type"] in ("ADDED", "MODIFIED", "DELETED")]


def view(changes):
    """The consumer rule over (key, rv, deleted): {key: rv} of the live keys, and the set of deleted keys."""
    best = {}
    for k, rv, d in changes:
        if k not in best or (rv, d) > best[k]:
            best[k] = (rv, d)
    return {k: rv for k, (rv, d) in best.items() if not d}, {k for k, (rv, d) in best.items() if d}


def taken_over(b):
    """The watermarks b logged on each takeover, as ints."""
    return [int(m) for m in re.findall(r'watermarks taken over: \{"cms":"(\d+)"\}', b.logtext())]


def test():
    kafka = KafkaBroker()
    brokers = kafka.start()
    broker = Mosquitto()
    sub = MqttSub(broker, [MQTT_TOPIC], qos=1)
    cp = ControlPlane()
    a, b, churn = start_pair(cp, "m", LEASE, RENEW, sinks=sinks(brokers, broker.uri))
    churn.start()
    churn.more(20)
    settled(cp, a)  # the leader delivered the churn so far to every sink
    settled(cp, b)  # the standby skipped it, as the leader's
    check(lines(b) == [], "the standby wrote to its file")
    # Both replicas have the same config: the standby's MQTT session must not take the leader's over.
    check("sink=q connection lost" not in a.logtext(),
          "the leader's MQTT connection was taken over:\n" + a.logtext()[-1500:])

    a.kill()
    wait_for(lambda: leads(b), 120, 0.05, "replica-b to take over")
    churn.more(20)  # changes the new leader delivers
    wait_for(lambda: published_mark(cp) > taken_over(b)[-1], 120, 0.1,
             "the new leader to publish a watermark of its own")
    b.proc.send_signal(signal.SIGSTOP)  # the new leader, partitioned; replica-a is gone: restart it
    a.start()
    wait_for(lambda: leads(a, 2), 120, 0.05, "the restarted replica-a to take over from the stopped one")
    churn.more(20)  # changes while the old leader is stopped
    mark = len(b.logtext())
    b.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: "no longer leading" in b.logtext()[mark:], 120, 0.1, "the old leader to step down")
    churn.more(20)  # changes while it runs again
    churn.stop()
    server = {k: int(v) for k, v in cp.state("/api/v1/namespaces/%s/configmaps" % NS).items()}
    gone = {k for k in churn.deleted if k not in server}

    consumers = {"file": lambda: file_changes([a, b]), "kafka": lambda: kafka_changes(brokers),
                 "mqtt": lambda: mqtt_changes(sub)}
    for name, changes in consumers.items():
        def ok():
            live, deleted = view(changes())
            return live == server and not (gone & set(live))
        try:
            wait_for(ok, 180, 0.5, "the %s consumer to converge to the server" % name)
        except Failure:
            live, deleted = view(changes())
            bad = sorted(k for k in set(server) | set(live) if server.get(k) != live.get(k))[:5]
            raise Failure("%s consumer not converged: %s\n--- a ---\n%s\n--- b ---\n%s" % (
                name, [(k, server.get(k), live.get(k)) for k in bad], a.logtext()[-2500:], b.logtext()[-2500:]))
        check(view(changes())[1], "the %s consumer saw no delete" % name)

    marks = sorted(taken_over(a) + taken_over(b))
    check(len(marks) == 2, "two takeovers, each naming its watermark: %s" % marks)
    counts = {}
    for name, changes in consumers.items():
        got = collections.Counter((k, rv) for k, rv, d in changes())
        repeats = sorted(rv for (k, rv), n in got.items() if n > 1)
        # A repeat belongs to one takeover: above the watermark it took over, below the next one's.
        bad = [(k, rv, n) for (k, rv), n in got.items() if rv <= marks[0] and n > 1 + len(marks)]
        check(not bad, "%s: %d change(s) at or below the first takeover's watermark %d delivered more than once "
              "plus once per takeover: %s" % (name, len(bad), marks[0], bad[:5]))
        counts[name] = (sum(got.values()), len(repeats))
    check(a.stop(signal.SIGTERM) == 0, "the leader's exit status on SIGTERM")
    b.stop(signal.SIGTERM)
    sub.stop()
    print("%d changes, watermarks taken over %s; (messages, repeated changes): %s" % (churn.ops, marks, counts))


run(test)
