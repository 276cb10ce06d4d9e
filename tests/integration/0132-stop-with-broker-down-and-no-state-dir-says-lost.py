#!/usr/bin/env python3
"""A stop while the sink's broker is unreachable and there is no state_dir says one true thing: the
messages not acknowledged are lost to that sink (exit 1). It used to log first that the sink
"refused for good" what it still held and that "its changes wait in the journal" — there is no journal
without state_dir — and then, on the last line, that they were lost.

A Kafka sink and an MQTT sink (each alone) point at a loopback port nobody listens on; pods are
listed and handed to the sink, which cannot deliver them; SIGTERM with a short shutdown_timeout."""
from kbtest import *
from kbtest import _free_port as free_port

SINKS = {
    "kafka": '{ name = "k"; type = "kafka"; brokers = "127.0.0.1:%d"; }',
    "mqtt": '{ name = "k"; type = "mqtt"; uri = "tcp://127.0.0.1:%d"; client_id = "kbtest-0132"; qos = 1; }',
}


def one(sim, kind):
    port = free_port()  # closed: nothing listens there
    b = Bridge(sim, sinks=[SINKS[kind] % port], routes=['{ informer = "pods"; sink = "k"; topic = "t"; }'],
               start=False)
    b.rewrite_config("shutdown_timeout = 20;", "shutdown_timeout = 2;")
    b.start()
    wait_for(lambda: "informer=pods listed items=20" in b.logtext(), 30, 0.1, "the informer's list (%s)" % kind)
    rc = b.stop(timeout=60)
    log = b.logtext()
    last = [l for l in log.splitlines() if " main " in l and ("stopped" in l)][-1:]
    print("%s: exit %d; %s" % (kind, rc, "\n".join(l for l in log.splitlines() if "sink=k stop" in l or l in last)))
    check(rc == 1, "%s: messages lost without state_dir: exit 1, got %d:\n%s" % (kind, rc, log[-3000:]))
    check("lost" in "".join(last), "%s: the last line says the messages are lost:\n%s" % (kind, last))
    for wrong in ("wait in the journal", "nothing is dropped"):
        check(wrong not in log, "%s: no state_dir, yet the log says %r:\n%s" % (
            kind, wrong, "\n".join(l for l in log.splitlines() if wrong in l)[:2000]))


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%02d" % i for i in range(20)]))
    for kind in ("kafka", "mqtt"):
        one(sim, kind)
    sim.stop()


run(test)
