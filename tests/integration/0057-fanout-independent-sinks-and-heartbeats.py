"""Fan-out: a sink that cannot deliver (an MQTT broker that is not there)
buffers on its own and does not hold up the other sink of the same informer
(within its bounded buffer); heartbeats on a route tell "quiet" from "dead"
with the cluster, informer and last RV."""
import json
from kbtest import *


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a", "b"]))
    work = tempfile.mkdtemp(prefix="kbfan-")
    hb = work + "/hb.jsonl"
    b = Bridge(sim, workdir=work, sinks=[
        '{ name = "out"; type = "file"; path = "%s"; }' % (work + "/out.jsonl"),
        '{ name = "hb"; type = "file"; path = "%s"; }' % hb,
        '{ name = "mq"; type = "mqtt"; uri = "tcp://127.0.0.1:1"; qos = 1; }'],
        routes=['{ informer = "pods"; sink = "mq"; }',
                '{ informer = "pods"; sink = "out"; }',
                '{ informer = "pods"; sink = "hb"; types = [ "SNAPSHOT" ]; heartbeat_seconds = 1; }'], start=False)
    set_shutdown_timeout(b, 2)  # the stop below waits it out for the MQTT sink that cannot deliver
    b.start()
    b.wait_converged(sim)
    sim.bulk(pod_ops("update", "ns1", ["a"], labels={"x": "1"}) + pod_ops("delete", "ns1", ["b"]))
    b.wait_converged(sim)

    def beats():
        try:
            return [json.loads(l) for l in open(hb) if l.strip()]
        except FileNotFoundError:
            return []
    got = wait_for(lambda: len(beats()) >= 2 and beats(), 30, what="two heartbeats")
    h = got[-1]
    check(h.get("type") == "HEARTBEAT" and h.get("cluster") == "test" and h.get("informer") == "pods",
          "heartbeat names cluster and informer: %s" % h)
    check("resourceVersion" in h and "time" in json.dumps(h), "heartbeat has the last RV and a time: %s" % h)
    # The MQTT sink gives up its buffer at the deadline; without state_dir that is a loss: exit 1, said.
    check(b.stop() == 1, "SIGTERM exits 1: the unreachable MQTT sink's messages are lost without state_dir")
    check("not acknowledged and no state_dir" in b.logtext(), "the last line says what was lost")
    sim.stop()


run(test)
