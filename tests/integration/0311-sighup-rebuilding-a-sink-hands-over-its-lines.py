"""A SIGHUP that rebuilds a sink hands what the old instance still held to the new one, and the
checkpoint keeps moving.

The pods informer (state_dir set) writes into a FIFO whose consumer stopped reading, so the file sink
holds unwritten lines. The operator points the sink at a file instead (path changed: the sink is
rebuilt) and sends SIGHUP. The old instance gives up at shutdown_timeout what it could not write; those
lines go to the new instance, in order. The consumer (what it read from the FIFO, then the new file)
converges to the server's state, also after more changes; the sink's watermark reaches the informer's
newest change; a clean stop says every message was acknowledged, and a restart delivers nothing twice.
Before the fix the old instance's lines were failed and the sink marked stopped, its ledger slot (shared
with the new instance) never moved again: the consumer missed those Pods, the checkpoint froze, and a
restart delivered many lines again."""
from kbtest import *

PAD = {"spec": {"padding": "x" * 4000}}


def config(sim, d, path):
    return ('cluster = { name = "t"; server = "%s"; };\nhttp = { listen = "127.0.0.1:0"; };\nshutdown_timeout = 2;\n'
            'state_dir = "%s/state";\n'
            'informers = ( { name = "pods"; version = "v1"; resource = "pods"; page_size = 50; } );\n'
            'sinks = ( { name = "out"; type = "file"; path = "%s"; } );\n'
            'routes = ( { informer = "pods"; sink = "out"; } );\n' % (sim.url, d, path))


def watermark_current(b):
    inf = b.informer_doc()
    marks = {s["name"]: s["watermark"] for s in inf["sinks"]}
    return marks.get("out") == inf["seq"]


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(200)], extra=PAD))
    d = tempfile.mkdtemp(prefix="kbtest-")
    fifo = StalledFifo(os.path.join(d, "out.fifo"))
    out2 = os.path.join(d, "out2.jsonl")
    b = ConfigBridge(config(sim, d, fifo.path), workdir=d)
    wait_for(lambda: "listed items=200" in b.logtext() and fifo.full(), 60, what="the list to fill the FIFO")

    with open(b.config, "w") as f:
        f.write(config(sim, d, out2))
    b.proc.send_signal(signal.SIGHUP)
    b.wait_log("reloaded ", 60)
    fifo.take(writer_gone=True)  # the old instance is closed: the consumer reads what the pipe holds
    sim.bulk(pod_ops("create", "ns2", ["q%02d" % i for i in range(10)]))

    want = {i["key"]: i["resourceVersion"] for i in sim.state()["items"]}

    def got():
        return {k: e["resourceVersion"] for k, e in view(fifo.lines() + read_jsonl(out2)).items()}
    try:
        wait_for(lambda: got() == want, 60, 0.1, "the consumer's view to converge")
    except Failure:
        g = got()
        raise Failure("the consumer lacks %d Pod(s) after the sink was rebuilt, e.g. %s\n%s" % (
            len(set(want) - set(g)), sorted(set(want) - set(g))[:3], b.logtext()[-2500:]))
    wait_for(lambda: watermark_current(b), 30, 0.1, "the sink's watermark to reach the newest change")
    check(b.stop() == 0, "clean stop")
    check("every message handed to a sink was acknowledged" in b.logtext()[-600:],
          "the stop says everything was acknowledged:\n%s" % b.logtext()[-800:])

    # A restart delivers nothing twice: only the one new Pod.
    n = len(read_jsonl(out2))
    b.start()
    sim.bulk(pod_ops("create", "ns3", ["r0"]))
    wait_for(lambda: any(e["name"] == "r0" for e in read_jsonl(out2)), 60, 0.1, "the new Pod")
    wait_for(lambda: watermark_current(b), 30, 0.1, "the watermark to be current")
    again = read_jsonl(out2)[n:]
    check(len(again) == 1, "a clean restart delivered %d line(s) again (first: %s)" % (
        len(again) - 1, [(e["name"], e["resourceVersion"]) for e in again[:3]]))
    check(b.stop() == 0, "clean stop")
    fifo.close()
    sim.stop()


run(test)
