"""Birth and last will on k8s/<cluster>/_bridge/status, through the real binary.

After start a subscriber sees the retained "online". SIGKILL of kbridge: the
broker publishes the retained Last Will, so a subscriber arriving later
still sees "offline". A restart says "online" again; a clean SIGTERM stop
publishes "offline" itself (a clean disconnect suppresses the will).

Mosquitto comes from tests/infra/mosquitto.sh (private port, stopped by pid)."""
from kbtest import *

STATUS = "k8s/edge-1/_bridge/status"


def status(broker):
    m = broker.retained(STATUS).get(STATUS)
    return m and m["retained"] and m["payload"]


def test():
    broker = Mosquitto()
    sim = Sim()
    sim.bulk(pod_ops("create", "default", ["web-0"]))
    work = tempfile.mkdtemp(prefix="kbtest-")
    b = Bridge(sim, workdir=work, cluster_name="edge-1",
               sinks=['{ name = "mqtt"; type = "mqtt"; uri = "%s"; client_id = "kbtest-0203"; qos = 1; }'
                      % broker.uri],
               routes=['{ informer = "pods"; sink = "mqtt"; mode = "state"; }'])
    wait_for(lambda: status(broker) == "online", 60, 0.2, "a retained online after start")
    wait_for(lambda: "k8s/edge-1/pods/default/web-0" in broker.retained("k8s/edge-1/pods/#"), 60, 0.2,
             "the first pod's state")

    b.kill()
    try:
        wait_for(lambda: status(broker) == "offline", 60, 0.2, "the retained Last Will after SIGKILL")
    except Failure:
        raise Failure("status is %r after SIGKILL\n--- broker log tail ---\n%s" % (status(broker),
                                                                                  broker.logtext()[-2000:]))

    b2 = Bridge(sim, workdir=work, cluster_name="edge-1", sinks=[
        '{ name = "mqtt"; type = "mqtt"; uri = "%s"; client_id = "kbtest-0203"; qos = 1; version = 3; }'
        % broker.uri], routes=['{ informer = "pods"; sink = "mqtt"; mode = "state"; }'])
    wait_for(lambda: status(broker) == "online", 60, 0.2, "online again after a restart (MQTT 3.1.1)")
    check(b2.stop() == 0, "kbridge exits 0 on SIGTERM")
    check(status(broker) == "offline", "a clean stop leaves a retained offline: %r" % status(broker))
    sim.stop()


run(test)
