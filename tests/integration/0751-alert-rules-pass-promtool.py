#!/usr/bin/env python3
"""deploy/prometheus/kbridge-rules.yaml is a valid Prometheus rule file (`promtool check rules`), has
the alerts an operator needs (not synced, checkpoint lag growing, sink disconnected, sink refusing —
one refusal is enough —, sink stopped by on_refused = "stop", dead letters arriving, drift found by the
audit, no HA leader for a shard, scrape target down, relist storm, watch errors, queue near its bound),
each alert has a unit test that fires it with the expected labels and annotations and one that does not
(`promtool test rules`), and every metric a rule reads is one kbridge exports (checked against a live
bridge's /metrics, and one with ha.enabled for the HA metrics)."""
import os
import re
import subprocess

from kbtest import SOURCE, Bridge, Sim, check, http_request, pod_ops, run

RULES = os.path.join(SOURCE, "deploy", "prometheus", "kbridge-rules.yaml")
TESTS = os.path.join(SOURCE, "deploy", "prometheus", "kbridge-rules.test.yaml")
ALERTS = ["KbridgeInformerNotSynced", "KbridgeCheckpointLagGrowing", "KbridgeSinkDisconnected",
          "KbridgeSinkRefusing", "KbridgeSinkStopped", "KbridgeDeadLetters", "KbridgeAuditDrift",
          "KbridgeNoHALeader", "KbridgeTargetDown", "KbridgeRelistStorm", "KbridgeWatchErrors",
          "KbridgeQueueNearBound"]


def promtool(*args):
    r = subprocess.run(["promtool"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120)
    print(r.stdout.strip())
    return r


def test():
    r = promtool("check", "rules", RULES)
    check(r.returncode == 0, "promtool check rules failed:\n%s" % r.stdout)
    with open(RULES) as f:
        rules = f.read()
    with open(TESTS) as f:
        tests = f.read()
    for a in ALERTS:
        check(re.search(r"- alert: %s\n" % a, rules), "no alert %s in %s" % (a, RULES))
        fired = re.search(r"alertname: %s\n\s+eval_time: \S+\n\s+exp_alerts:\n\s+- exp_labels" % a, tests)
        quiet = re.search(r"alertname: %s, eval_time: \S+, exp_alerts: \[\]" % a, tests)
        check(fired, "no unit test fires %s" % a)
        check(quiet, "no unit test keeps %s quiet" % a)
    r = promtool("test", "rules", TESTS)
    check(r.returncode == 0 and "SUCCESS" in r.stdout, "promtool test rules failed:\n%s" % r.stdout)

    # Every kbridge_* name a rule reads is on /metrics (so no rule watches a metric that never exists).
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p0", "p1"]))
    b = Bridge(sim, http='listen = "127.0.0.1:0";')
    b.wait_converged(sim)
    # The HA metrics exist only with ha.enabled (the Lease need not be won for them to be exported).
    ha = Bridge(sim, http='listen = "127.0.0.1:0";', extra='ha = { enabled = true; identity = "a"; };')
    exported = set()
    for bridge in (b, ha):
        code, _, body = http_request(bridge.http_url() + "/metrics")
        check(code == 200, "/metrics -> %d" % code)
        exported |= set(re.findall(r"^# TYPE (\S+) ", body.decode(), re.M))
    used = set(re.findall(r"\b(kbridge_[a-z_]+)", "\n".join(l for l in rules.splitlines()
                                                            if l.strip().startswith("expr:"))))
    check(used, "the rules read no kbridge metric")
    missing = sorted(u for u in used if u not in exported)
    check(not missing, "rules read metrics kbridge does not export: %s" % missing)


run(test)
