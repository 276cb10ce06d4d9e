#!/usr/bin/env python3
"""High availability on kubesim: a takeover is called blind exactly when the new leader's informer
listed, without watching, resourceVersions above the watermark it takes over — then an object created
and deleted there that the old leader delivered gets no DELETED, since no replica knows it
(docs/cluster.md, section 9). First a takeover that is not blind: the standby listed, the leader then
published a watermark past that list and was SIGKILLed; the new leader logs no blind takeover and
kbridge_ha_blind_takeovers_total stays 0. Then one that is: that leader is SIGKILLed, configmaps change,
and a third replica starts with an empty state_dir — its first list is above the last watermark
published — and takes over: it logs a WARN naming the informer and the window and counts it
(/v1/informers "ha".blind_takeovers and kbridge_ha_blind_takeovers_total). Each time the union of the
outputs, read with the consumer rule, equals kubesim's state."""
import json
import signal

from kbtest import Sim, check, http_request, run, wait_for
from kbha import SIM_LEASE, leads, sim_check_converged, sim_put_cms, sim_replica, sim_start_pair

LEASE, RENEW = 3, 1


def published(sim):
    """The watermark of informer cms in the Lease (0: none yet)."""
    st, raw = sim.request("GET", SIM_LEASE)
    check(st == 200, "GET the Lease -> %d" % st)
    marks = json.loads(raw)["metadata"].get("annotations", {}).get("kbridge.io/watermarks", "{}")
    return int(json.loads(marks or "{}").get("cms", "0"))


def blind_count(b):
    url = b.http_url()
    ha = json.loads(http_request(url + "/v1/informers")[2])["ha"]
    metrics = http_request(url + "/metrics")[2].decode()
    line = [l for l in metrics.splitlines() if l.startswith('kbridge_ha_blind_takeovers_total{shard="0"}')]
    check(len(line) == 1, "kbridge_ha_blind_takeovers_total{shard=\"0\"} not in /metrics")
    check(int(line[0].split()[-1]) == ha.get("blind_takeovers"),
          "/metrics %s and /v1/informers %s disagree" % (line[0], ha))
    return ha["blind_takeovers"]


def test():
    sim = Sim()
    a, b = sim_start_pair(sim, LEASE, RENEW)
    rv = sim_put_cms(sim, range(3), "published")  # after replica-b's list
    wait_for(lambda: published(sim) >= rv, 30, 0.1, "replica-a to publish a watermark past replica-b's list")
    a.kill()
    wait_for(lambda: leads(b), 30, 0.05, "replica-b to take over")
    sim_check_converged(sim, [a, b])
    check("blind takeover" not in b.logtext(), "a blind takeover logged:\n" + b.logtext()[-2500:])
    check(blind_count(b) == 0, "replica-b counted a blind takeover")

    b.kill()
    sim_put_cms(sim, range(2, 6), "unwatched")  # above replica-b's last watermark
    c = sim_replica(sim, "replica-c", LEASE, RENEW)
    wait_for(lambda: leads(c), 30, 0.05, "replica-c to take over")
    sim_put_cms(sim, range(5, 8), "after-takeover")
    sim_check_converged(sim, [a, b, c])
    log = c.logtext()
    check("informer=cms blind takeover: resourceVersions (" in log, "no blind takeover logged:\n" + log[-2500:])
    check(blind_count(c) == 1, "replica-c's blind takeovers")
    check(c.stop(signal.SIGTERM) == 0, "the new leader's exit status on SIGTERM:\n" + c.logtext()[-2000:])


run(test)
