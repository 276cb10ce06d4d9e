"""A restart with a changed informer definition converges the consumer to the new definition.

state_dir remembers what each informer was (resource, selectors, namespaces, field projection,
compaction). Restarting with another label_selector, other namespaces or other keep_fields on the
same state_dir used to resume at the checkpoint as if nothing had changed: objects that match now
never arrived, objects that no longer match stayed in the consumer's view for ever, and objects
kept their old shape. Now the restart says what changed and relists: what no longer matches
leaves as DELETED (finalStateUnknown), new matches arrive as ADDED, and with other keep_fields
every object is sent again in its new shape. An unchanged definition still resumes without a
list; a SIGHUP that changes the definition of a stored informer is refused, naming the key."""
import json
import signal
import urllib.parse
from kbtest import *


def matching(sim, path):
    """kubesim's own answer for the new definition: {key: resourceVersion}."""
    st, raw = sim.request("GET", path)
    check(st == 200, "GET %s -> %d" % (path, st))
    out = {}
    for o in json.loads(raw)["items"]:
        m = o["metadata"]
        out[m["namespace"] + "/" + m["name"]] = m["resourceVersion"]
    return out


def wait_view(b, want, what):
    def ok():
        got = {k: e["resourceVersion"] for k, e in b.view().items()}
        return got == want
    try:
        wait_for(ok, 30, 0.1, what)
    except Failure:
        got = {k: e["resourceVersion"] for k, e in b.view().items()}
        raise Failure("%s: the consumer's view %s is not kubesim's %s\n--- log tail ---\n%s" %
                      (what, sorted(got), sorted(want), b.logtext()[-2500:]))


def lists(sim):
    """kbridge's lists: paged (limit=) or streamed (sendInitialEvents); not the test's own GETs."""
    return [r for r in sim.requests() if "pods" in r["path"] and
            (r["query"].get("sendInitialEvents") == "true" or
             ("limit" in r["query"] and r["query"].get("watch") not in ("true", "1")))]


def start_with(b, old, new):
    b.stop()
    b.rewrite_config(old, new)
    b.start()


def label_selector():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a1", "a2"], labels={"app": "a"}) +
             pod_ops("create", "ns1", ["b1", "b2"], labels={"app": "b"}))
    work = tempfile.mkdtemp(prefix="kbdef-")
    inf = '{ name = "pods"; version = "v1"; resource = "pods"; label_selector = "app=a"; }'
    b = Bridge(sim, informers=[inf], workdir=work, extra='state_dir = "%s/state";' % work)
    wait_view(b, matching(sim, "/api/v1/pods?labelSelector=" + urllib.parse.quote("app=a")), "app=a at first")
    n0 = len(b.events())
    start_with(b, '"app=a"', '"app=b"')
    wait_view(b, matching(sim, "/api/v1/pods?labelSelector=" + urllib.parse.quote("app=b")),
              "after a restart with label_selector app=b")
    new = sorted((e["type"], e["name"], bool(e.get("finalStateUnknown"))) for e in b.events()[n0:])
    check(new == [("ADDED", "b1", False), ("ADDED", "b2", False), ("DELETED", "a1", True), ("DELETED", "a2", True)],
          "what left is DELETED finalStateUnknown, what entered is ADDED: %s" % new)
    check('label_selector "app=a" -> "app=b"' in b.logtext(), "the log says what changed:\n%s" % b.logtext()[-2000:])

    # The same definition again: a plain resume, no list.
    b.stop()
    sim.clear_requests()
    n1 = len(b.events())
    b.start()
    sim.bulk(pod_ops("update", "ns1", ["b1"], labels={"app": "b", "v": "2"}))
    wait_view(b, matching(sim, "/api/v1/pods?labelSelector=" + urllib.parse.quote("app=b")), "the resumed watch")
    check(not lists(sim), "an unchanged definition resumes without a list: %s" % lists(sim))
    check([(e["type"], e["name"]) for e in b.events()[n1:]] == [("MODIFIED", "b1")], "only the change arrives")

    # SIGHUP with a changed definition: refused, naming the informer and the key.
    b.rewrite_config('"app=b"', '"app=a"')
    b.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload refused" in b.logtext()[b.log_start:], 30, what="the reload to be refused")
    check("informers.pods: its definition changed (label_selector)" in b.logtext(),
          "the refusal names the informer and the key:\n%s" % b.logtext()[-1500:])
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


def namespaces():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["x", "y"]) + pod_ops("create", "ns2", ["x", "z"]) +
             pod_ops("create", "ns3", ["w"]))
    work = tempfile.mkdtemp(prefix="kbdef-")
    inf = '{ name = "pods"; version = "v1"; resource = "pods"; namespaces = [ "ns1", "ns3" ]; }'
    b = Bridge(sim, informers=[inf], workdir=work, extra='state_dir = "%s/state";' % work)
    want = matching(sim, "/api/v1/namespaces/ns1/pods")
    want.update(matching(sim, "/api/v1/namespaces/ns3/pods"))
    wait_view(b, want, "namespaces ns1 and ns3 at first")
    start_with(b, '[ "ns1", "ns3" ]', '[ "ns2", "ns3" ]')
    want = matching(sim, "/api/v1/namespaces/ns2/pods")
    want.update(matching(sim, "/api/v1/namespaces/ns3/pods"))
    wait_view(b, want, "after a restart with namespaces ns2 and ns3")
    check('namespaces ["ns1","ns3"] -> ["ns2","ns3"]' in b.logtext(), "the log says what changed:\n%s" %
          b.logtext()[-2000:])
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


def keep_fields():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["k1", "k2"], extra={"spec": {"keep": "yes", "drop": "me"}}))
    work = tempfile.mkdtemp(prefix="kbdef-")
    inf = '{ name = "pods"; version = "v1"; resource = "pods"; keep_fields = []; }'
    b = Bridge(sim, informers=[inf], workdir=work, extra='state_dir = "%s/state";' % work)
    b.wait_converged(sim)
    start_with(b, "keep_fields = [];", 'keep_fields = [ "spec.keep" ];')

    def reshaped():
        v = b.view()
        return len(v) == 2 and all(e["object"]["spec"] == {"keep": "yes"} for e in v.values())
    try:
        wait_for(reshaped, 30, 0.1, "every object in its new shape")
    except Failure:
        raise Failure("the objects keep their old shape: %s\n%s" %
                      ([e["object"].get("spec") for e in b.view().values()], b.logtext()[-2000:]))
    b.wait_converged(sim)
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


def test():
    label_selector()
    namespaces()
    keep_fields()


run(test)
