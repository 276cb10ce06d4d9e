"""A file sink on a FIFO is a writer, not a reader: with no reader nothing is acknowledged.

1. No reader: the changes are tracked but the checkpoint does not pass them, and /readyz says the
   sink has no reader. Before, the FIFO was opened read-write: kbridge was its own reader, the lines
   went into the pipe and were acknowledged (lost at a crash).
2. A reader opens the FIFO: it gets every change as whole lines, and the checkpoint reaches them.
3. The reader stops reading; the pipe fills with lines larger than a page; SIGTERM (state_dir: exit
   0), start again, and the reader — which kept the FIFO open all along — reads on: every line it
   gets is a whole envelope (before, the stop left half a line in the pipe and the next run's first
   line was glued onto it), and the view converges to the server's state."""
from kbtest import *

PAD = {"spec": {"padding": "x" * 5000}}


def readyz(b):
    st, _, body = http_request(b.http_url() + "/readyz")
    return st, body.decode()


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a%02d" % i for i in range(20)]))
    work = tempfile.mkdtemp(prefix="kbfifo-")
    fifo = os.path.join(work, "out.fifo")
    os.mkfifo(fifo)
    b = Bridge(sim, workdir=work, out=fifo, http='listen = "127.0.0.1:0";', extra='state_dir = "%s/state";' % work,
               start=False)
    set_shutdown_timeout(b, 2)  # the stop in 3. waits for the stalled reader until this deadline
    b.start()

    # 1. No reader: tracked, not acknowledged.
    wait_for(lambda: b.informer_doc()["seq"] >= 20, 30, 0.1, "the 20 changes to be tracked")
    st, body = wait_for(lambda: (lambda r: "no reader" in r[1] and r)(readyz(b)), 30, 0.1,
                        "/readyz to say the sink has no reader")
    check(st == 503, "/readyz answers 503 while the FIFO has no reader: %d %s" % (st, body))
    doc = b.informer_doc()
    check(doc["checkpoint"]["seq"] == 0,
          "nothing is acknowledged while no reader has the FIFO open: checkpoint %s of seq %s" %
          (doc["checkpoint"], doc["seq"]))

    # 2. A reader: whole lines, every change, and the checkpoint follows.
    r = StalledFifo(fifo, create=False)

    def converged():
        want = {i["key"]: i["resourceVersion"] for i in sim.state("pods")["items"]}
        got = {k: e["resourceVersion"] for k, e in view(r.lines()).items()}
        return want == got
    wait_for(converged, 30, 0.1, "the reader to get every change")
    wait_for(lambda: (lambda d: d["checkpoint"]["seq"] == d["seq"])(b.informer_doc()), 30, 0.1,
             "the checkpoint to reach the changes the reader has")
    wait_for(lambda: readyz(b)[0] == 200, 30, 0.1, "/readyz to be ready with a reader")

    # 3. The reader stops reading; lines larger than a page fill the pipe; stop and start again.
    sim.bulk(pod_ops("create", "ns2", ["b%03d" % i for i in range(60)], extra=PAD))
    wait_for(lambda: r.full() and b.informer_doc()["seq"] >= 80, 60, 0.1,
             "the pipe to fill while the reader does not read")
    check(b.stop() == 0, "SIGTERM with state_dir exits 0 (the unwritten changes come again)")
    b.start()
    sim.bulk(pod_ops("update", "ns1", ["a00"], labels={"after": "restart"}))
    try:
        wait_for(converged, 60, 0.1, "the reader to converge across the restart")
    except Failure:
        raise Failure("not converged after the restart\n%s" % b.logtext()[-3000:])
    check(b.stop() == 0, "second run exits 0")
    r.take()
    check(not r.data, "the stream ends with a whole line: %r" % r.data[-80:])
    r.close()
    sim.stop()


run(test)
