"""A SIGHUP that removes one informer never costs another informer a change.

Two informers: pods into a file, configmaps into a FIFO whose consumer stopped reading (more than the sink can hold, so removing the
configmaps informer drains past shutdown_timeout = 1). While Pods keep being created, the operator
removes the configmaps informer and its sink and sends SIGHUP; Pods go on being created for a while
after the reload. The pods consumer must end with every Pod the server has, and the clean stop exits 0.
Before the fix the drain's deadline set a bridge-wide flag for up to a second, and every other
informer's worker threw away what it popped meanwhile: Pods never delivered, nothing logged, exit 0
with "every message handed to a sink was acknowledged"."""
import threading
from kbtest import *

PAD = {"data": {"padding": "x" * 40000}}


def config(sim, d, fifo, with_cms):
    cms_inf = ', { name = "cms"; version = "v1"; resource = "configmaps"; page_size = 50; }' if with_cms else ""
    cms_sink = ', { name = "c"; type = "file"; path = "%s"; }' % fifo if with_cms else ""
    cms_route = ', { informer = "cms"; sink = "c"; }' if with_cms else ""
    return ('cluster = { name = "t"; server = "%s"; };\nhttp = { listen = ""; };\nshutdown_timeout = 1;\n'
            'informers = ( { name = "pods"; version = "v1"; resource = "pods"; page_size = 50; }%s );\n'
            'sinks = ( { name = "p"; type = "file"; path = "%s/pods.jsonl"; }%s );\n'
            'routes = ( { informer = "pods"; sink = "p"; }%s );\n' % (sim.url, cms_inf, d, cms_sink, cms_route))


def test():
    sim = Sim()
    sim.bulk([{"op": "create", "resource": "configmaps", "version": "v1", "namespace": "ns1", "name": "c%03d" % i,
               "data": PAD} for i in range(700)])
    d = tempfile.mkdtemp(prefix="kbtest-")
    fifo = StalledFifo(os.path.join(d, "c.fifo"))
    b = ConfigBridge(config(sim, d, fifo.path, True), workdir=d)
    # 700 Config Maps: more than the pipe and the sink's own 8 MB buffer hold, so the configmaps worker waits.
    wait_for(lambda: "informer=cms listed items=700" in b.logtext() and fifo.full() and
             "sink=c is full" in b.logtext(), 60, what="the configmaps to fill the FIFO and the sink")

    # Pods are created all along, before, during and after the reload.
    made = []
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            names = ["n%05d" % (i + k) for k in range(5)]
            sim.bulk(pod_ops("create", "ns1", names))
            made.extend(names)
            i += 5
            time.sleep(0.01)
    t = threading.Thread(target=churn)
    t.start()
    try:
        wait_for(lambda: len(made) >= 50, 60, what="Pods to be created")
        with open(b.config, "w") as f:
            f.write(config(sim, d, fifo.path, False))
        b.proc.send_signal(signal.SIGHUP)
        b.wait_log("reloaded ", 60)
        n = len(made)
        wait_for(lambda: len(made) >= n + 50, 60, what="more Pods after the reload")
    finally:
        stop.set()
        t.join()

    out = os.path.join(d, "pods.jsonl")
    want = {i["key"]: i["resourceVersion"] for i in sim.state()["items"]}

    def got():
        return {k: e["resourceVersion"] for k, e in view(read_jsonl(out)).items()}
    try:
        wait_for(lambda: got() == want, 60, 0.1, "the pods consumer to have every Pod")
    except Failure:
        g = got()
        raise Failure("the pods consumer lacks %d of %d Pod(s) after another informer was removed, e.g. %s\n%s" % (
            len(set(want) - set(g)), len(want), sorted(set(want) - set(g))[:3], b.logtext()[-2000:]))
    check(b.stop() == 0, "clean stop")
    fifo.close()
    sim.stop()


run(test)
