"""keep_fields projects objects down to an allow-list (plus identity); an
update whose projected object is byte-identical to what the route last
delivered (status churn projected away) is not sent; a real change is.
A secrets informer with emit_secret_values = true logs a warning at start."""
import urllib.request
from kbtest import *


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a"], labels={"app": "web"}, extra={"spec": {"nodeName": "n1"}}))
    b = Bridge(sim, informers=[
        '{ name = "pods"; version = "v1"; resource = "pods"; keep_fields = [ "spec.nodeName" ]; }',
        '{ name = "secrets"; version = "v1"; resource = "secrets"; emit_secret_values = true; }'],
        routes=['{ name = "quiet"; informer = "pods"; sink = "out"; suppress_noop = true; }',
                '{ informer = "secrets"; sink = "out"; }'],
        http='listen = "127.0.0.1:0";')
    b.wait_converged(sim)
    obj = b.view()["ns1/a"]["object"]
    check(obj["spec"] == {"nodeName": "n1"}, "only the kept path survives in spec: %s" % obj.get("spec"))
    check(obj["metadata"]["labels"] == {"app": "web"} and obj["kind"] == "Pod", "identity metadata stays")
    check("status" not in obj, "status is projected away")
    # An annotation change: projected away, so the route says nothing.
    n0 = len(b.events())
    sim.bulk(pod_ops("update", "ns1", ["a"], labels={"app": "web"},
                     extra={"spec": {"nodeName": "n1"}, "metadata": {"annotations": {"x": "1"}}}))
    sim.bulk(pod_ops("update", "ns1", ["a"], labels={"app": "web", "v": "2"}, extra={"spec": {"nodeName": "n1"}}))
    wait_for(lambda: b.view()["ns1/a"]["object"]["metadata"]["labels"].get("v") == "2", 30, what="the label change")
    new = [e for e in b.events()[n0:] if e["name"] == "a"]
    check(len(new) == 1, "the no-op update is suppressed, the real one sent: %d envelope(s)" % len(new))
    check("Secret values are sent in clear" in b.logtext(), "the unredacted secrets warning is logged")
    with urllib.request.urlopen(b.http_url() + "/metrics", timeout=30) as r:
        text = r.read().decode()
    check('kbridge_noop_suppressed_total{informer="pods",route="quiet"} 1' in text,
          "the skipped no-op is counted in /metrics")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
