"""A changed projection (keep_fields) reaches every object even when two starts in a row are
interrupted before their lists complete.

A start with other keep_fields re-sends every object in the new shape. When that start was stopped
after it had re-sent some objects, and the next start — under yet another definition, here the old
projection with another set of namespaces — was stopped too before it re-sent anything, the third
start used to see only a namespace change since state_dir's definition: it listed without re-sending,
and the objects the first start had re-sent stayed in its shape for good. Now a pending definition
that re-sends says so in state_dir, and every later start re-sends until one completes."""
from kbtest import *

INF = '{ name = "pods"; version = "v1"; resource = "pods"; list_mode = "paged"; page_size = 2; %s }'
FULL = 'namespaces = [ "ns1" ]; keep_fields = [];'
KEEP = 'namespaces = [ "ns1" ]; keep_fields = [ "spec.keep" ];'
WIDER = 'namespaces = [ "ns1", "ns2" ]; keep_fields = [];'


def new_lists(sim, since):
    return [r for r in sim.requests()[since:] if "pods" in r["path"] and "limit" in r["query"]
            and r["query"].get("watch") not in ("true", "1")]


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["k1", "k2", "k3", "k4", "k5"], extra={"spec": {"keep": "yes", "drop": "me"}}) +
             pod_ops("create", "ns2", ["w1"], extra={"spec": {"keep": "yes", "drop": "me"}}))
    work = tempfile.mkdtemp(prefix="kbshape-")
    b = Bridge(sim, informers=[INF % FULL], workdir=work, extra='state_dir = "%s/state";' % work)
    wait_for(lambda: len(b.view()) == 5, 30, 0.1, "ns1 at first")
    check(b.stop() == 0, "SIGTERM exits 0")

    # Start 1: keep_fields changes; only the first page gets through (every continue fails), so
    # some objects are re-sent in the new shape and the list never completes.
    sim.fault(kind="status", verb="continue", resource="pods", code=500, count=100000)
    b.rewrite_config(FULL, KEEP)
    n0 = len(b.events())
    b.start()
    wait_for(lambda: any(e["object"].get("spec") == {"keep": "yes"} for e in b.events()[n0:]), 30, 0.1,
             "the first page re-sent in the new shape")
    check(b.stop() == 0, "SIGTERM exits 0 (start 1)")
    sim.fault(kind="clear")

    # Start 2: the old projection, another namespace set; no list gets through at all.
    sim.fault(kind="status", verb="list", resource="pods", code=500, count=100000)
    b.rewrite_config(KEEP, WIDER)
    r0 = len(sim.requests())
    b.start()
    wait_for(lambda: len(new_lists(sim, r0)) >= 1, 30, 0.1, "start 2 to try a list")
    check(b.stop() == 0, "SIGTERM exits 0 (start 2)")
    sim.fault(kind="clear")

    # Start 3: the same definition as start 2, nothing in the way.
    b.start()
    b.wait_converged(sim, timeout=30)

    def shaped():
        return all(e["object"].get("spec") == {"keep": "yes", "drop": "me"} for e in b.view().values())
    try:
        wait_for(shaped, 30, 0.1, "every object in the last definition's shape")
    except Failure:
        raise Failure("objects left in the shape of an interrupted start: %s\n%s" %
                      (sorted((k, e["object"].get("spec")) for k, e in b.view().items()), b.logtext()[-3000:]))
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
