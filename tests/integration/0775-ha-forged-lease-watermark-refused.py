#!/usr/bin/env python3
"""High availability on kubesim: a watermark in the Lease that is above anything this replica has seen
is refused, loudly. The leader is SIGKILLed and {"cms":"999999999"} is written into the Lease's
watermark annotation (as a broken or hostile writer would); configmaps change before and after the
standby takes over. The new leader logs a WARN naming the informer and both resourceVersions, counts
the refusal (/v1/informers "ha".marks_refused and kbridge_ha_marks_refused_total), and delivers: the
union of the outputs, read with the consumer rule, equals kubesim's state."""
import json
import signal

from kbtest import Sim, check, http_request, run, wait_for
from kbha import SIM_LEASE, leads, sim_check_converged, sim_put_cms, sim_start_pair

LEASE, RENEW = 3, 1


def test():
    sim = Sim()
    a, b = sim_start_pair(sim, LEASE, RENEW)
    sim_check_converged(sim, [a, b])

    a.kill()
    st, raw = sim.request("GET", SIM_LEASE)
    check(st == 200, "GET the Lease -> %d" % st)
    lease = json.loads(raw)
    lease["metadata"]["annotations"]["kbridge.io/watermarks"] = json.dumps({"cms": "999999999"})
    st, raw = sim.request("PUT", SIM_LEASE, lease)
    check(st == 200, "forging the watermark -> %d %s" % (st, raw[:200]))

    sim_put_cms(sim, range(5), "before-takeover")
    wait_for(lambda: leads(b), 30, 0.05, "replica-b to take over")
    sim_put_cms(sim, range(3, 8), "after-takeover")
    sim_check_converged(sim, [a, b])

    log = b.logtext()
    check("informer=cms published watermark 999999999 refused: above resourceVersion" in log,
          "no refusal logged:\n" + log[-2500:])
    url = b.http_url()
    ha = json.loads(http_request(url + "/v1/informers")[2])["ha"]
    check(ha.get("marks_refused", 0) >= 1, "/v1/informers ha: %s" % ha)
    metrics = http_request(url + "/metrics")[2].decode()
    check('kbridge_ha_marks_refused_total{shard="0"}' in metrics, "no kbridge_ha_marks_refused_total")
    check(b.stop(signal.SIGTERM) == 0, "the new leader's exit status on SIGTERM:\n" + b.logtext()[-2000:])


run(test)
