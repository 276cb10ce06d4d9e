"""A sink rebuilt by SIGHUP waits only for its own old instance, never for another sink's close.

Two file sinks: "a" writes a file, "b" a FIFO whose consumer stopped reading (so "b" holds unwritten
lines, and closing it waits up to shutdown_timeout, 30 s here). One SIGHUP points "a" at another file
(rebuilt: its new instance is held until its old one handed over what it held) and removes "b". A Pod
created then must reach "a"'s new file while the reload still waits for "b" to close. Before the fix
every rebuilt sink's new instance was let go only after every dropped sink was closed: "a" took
nothing until "b" gave up, and the Pod came only after the reload ended."""
from kbtest import *

PAD = {"spec": {"padding": "x" * 4000}}


def config(sim, d, a_path, b_path):
    b_sink = ',\n  { name = "b"; type = "file"; path = "%s"; }' % b_path if b_path else ""
    b_route = ',\n  { informer = "pods"; sink = "b"; }' if b_path else ""
    return ('cluster = { name = "t"; server = "%s"; };\nhttp = { listen = "127.0.0.1:0"; };\nshutdown_timeout = 30;\n'
            'state_dir = "%s/state";\n'
            'informers = ( { name = "pods"; version = "v1"; resource = "pods"; page_size = 50; } );\n'
            'sinks = ( { name = "a"; type = "file"; path = "%s"; }%s );\n'
            'routes = ( { informer = "pods"; sink = "a"; }%s );\n' % (sim.url, d, a_path, b_sink, b_route))


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(200)], extra=PAD))
    d = tempfile.mkdtemp(prefix="kbtest-")
    fifo = StalledFifo(os.path.join(d, "b.fifo"))
    a1, a2 = os.path.join(d, "a1.jsonl"), os.path.join(d, "a2.jsonl")
    b = ConfigBridge(config(sim, d, a1, fifo.path), workdir=d)
    try:
        wait_for(lambda: len(read_jsonl(a1)) >= 200 and fifo.full(), 60, what="sink a to get the list and b's FIFO to fill")
    except Failure as e:
        raise Failure("%s: a has %d line(s), b's pipe full: %s\n%s" % (e, len(read_jsonl(a1)), fifo.full(),
                                                                     b.logtext()[-2000:]))

    with open(b.config, "w") as f:
        f.write(config(sim, d, a2, None))
    b.proc.send_signal(signal.SIGHUP)
    b.wait_log("reload: sink=a is rebuilt", 60)
    sim.bulk(pod_ops("create", "ns2", ["late"]))
    wait_for(lambda: any(e["name"] == "late" for e in read_jsonl(a2)), 90, 0.1, "the new Pod in a's new file")
    check("reloaded " not in b.logtext(),
          "the new Pod reached sink a only once the reload had closed sink b:\n%s" % b.logtext()[-2500:])

    # The consumer of b reads again: b's old instance closes, the reload ends.
    wait_for(lambda: fifo.take() is not None and "reloaded " in b.logtext(), 60, 0.1, "the reload to end")
    check(b.stop() == 0, "clean stop")
    fifo.close()
    sim.stop()


run(test)
