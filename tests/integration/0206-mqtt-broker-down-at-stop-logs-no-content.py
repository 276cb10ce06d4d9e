"""Stopping kbridge while the MQTT broker is down: a short, clean log, and never message content.

Pods carry a marker string in their data. kbridge streams them (QoS 1, events
on a topic per object) while the simulator churns; Mosquitto is stopped in
the middle of the stream, the churn goes on, and kbridge gets SIGTERM with
the broker still down. The log must hold no object data (the marker), no
heap dump of the client library ("Heap scan", "Heap element", "Content"), and
only a few lines from the library itself. kbridge exits (1 with messages not
acknowledged is fine: they are counted, not lost silently).

Mosquitto comes from tests/infra/mosquitto.sh (private port, stopped by pid)."""
from kbtest import *

MARKER = "kbtest-0206-private-value-7d1f"


def test():
    broker = Mosquitto()
    sim = Sim()
    names = ["db-%02d" % i for i in range(60)]
    sim.bulk(pod_ops("create", "team-a", names, extra={"spec": {"env": [{"name": "PW", "value": MARKER}]}}))
    b = Bridge(sim, sinks=['{ name = "m"; type = "mqtt"; uri = "%s"; client_id = "kbtest-0206"; qos = 1; }'
                           % broker.uri],
               routes=['{ informer = "pods"; sink = "m"; topic = "t/{namespace}/{name}"; }'], start=False)
    set_shutdown_timeout(b, 2)  # the stop waits it out for the MQTT sink whose broker is down
    b.start()
    wait_for(lambda: "sink=m connected" in b.logtext(), 60, 0.1, "kbridge's connection to Mosquitto")
    sim.ctl("churn", {"resource": "pods", "count": 6000, "rate": 2000})
    # The broker goes in the middle of the stream, and the churn goes on while it is down.
    wait_for(lambda: sim.ctl("churn", method="GET")["done"] >= 1500, 60, 0.05, "a quarter of the churn")
    broker.stop()
    wait_for(lambda: sim.ctl("churn", method="GET")["done"] >= 4500, 60, 0.05, "three quarters of the churn")
    b.stop(timeout=90)
    log = b.logtext()
    check(MARKER not in log, "no object data in the log:\n%s" % "\n".join(
        l for l in log.splitlines() if MARKER in l)[:2000])
    for bad in ("Heap scan", "Heap element", "Content "):
        check(bad not in log, "no heap dump of the client library (%r):\n%s" % (bad, log[-2000:]))
    lib = [l for l in log.splitlines() if " paho:" in l or "libmosquitto" in l]
    check(len(lib) <= 5, "at most a few lines from the client library, got %d:\n%s" % (len(lib), "\n".join(lib[:20])))
    check(len(log.splitlines()) < 400, "a short log at stop: %d lines" % len(log.splitlines()))
    check(b.proc.returncode in (0, 1), "kbridge exits 0 or 1 on SIGTERM, got %d" % b.proc.returncode)
    sim.stop()


run(test)
