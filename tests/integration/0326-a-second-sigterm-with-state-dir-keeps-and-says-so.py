"""A second SIGTERM that cuts a drain short with state_dir set: a WARN saying state_dir keeps what was not
acknowledged, exit status 0, and the next start delivers it.

The pods informer (state_dir) writes into a FIFO whose reader stopped reading; shutdown_timeout is long
(600 s), so only the second SIGTERM ends the drain. docs/guarantees.md: with state_dir the unacknowledged
changes are delivered again at the next start and the exit status is 0 — however the stop ended. The last
line is a WARN (not INFO: something was left; not ERROR: nothing is lost) naming state_dir, and after the
reader drains the pipe and kbridge starts again, the consumer's view converges to the server's state.
Before the fix a second signal always exited 1 with an ERROR line, whatever state_dir kept."""
from kbtest import *

PAD = {"spec": {"padding": "x" * 4000}}


def config(sim, d, fifo):
    return ('cluster = { name = "t"; server = "%s"; };\nhttp = { listen = ""; };\nshutdown_timeout = 600;\n'
            'state_dir = "%s/state";\n'
            'informers = ( { name = "pods"; version = "v1"; resource = "pods"; page_size = 50; } );\n'
            'sinks = ( { name = "out"; type = "file"; path = "%s"; } );\n'
            'routes = ( { informer = "pods"; sink = "out"; } );\n' % (sim.url, d, fifo))


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(100)], extra=PAD))
    d = tempfile.mkdtemp(prefix="kbtest-")
    fifo = StalledFifo(os.path.join(d, "out.fifo"))
    b = ConfigBridge(config(sim, d, fifo.path), workdir=d)
    wait_for(lambda: "listed items=100" in b.logtext() and fifo.full(), 60, what="the list to fill the FIFO")
    b.proc.send_signal(signal.SIGTERM)
    b.wait_log("SIGTERM received: draining", 30)
    b.proc.send_signal(signal.SIGTERM)
    rc = b.proc.wait(30)
    last = [l for l in b.logtext().splitlines() if "second SIGTERM" in l]
    check(last, "the log says the second SIGTERM ended the drain:\n%s" % b.logtext()[-1500:])
    check(" WARN " in last[0] and "not acknowledged; state_dir" in last[0] and "delivers them again" in last[0],
          "a WARN saying state_dir keeps the unacknowledged changes: %s" % last[0])
    check(rc == 0, "with state_dir nothing is lost: exit 0 (rc %s): %s" % (rc, last[0]))

    fifo.take(writer_gone=True)
    b.start()
    want = {i["key"]: i["resourceVersion"] for i in sim.state()["items"]}
    wait_for(lambda: {k: e["resourceVersion"] for k, e in view(fifo.lines()).items()} == want, 60, 0.1,
             "the consumer's view to converge after the restart")
    check(b.stop() == 0, "clean stop")
    fifo.close()
    sim.stop()


run(test)
