"""A stop at the shutdown deadline is not a refusal: what a stalled file sink still holds is delivered
at the next start, and nothing goes to its dead-letter sink.

The pods informer (state_dir set) writes into a FIFO whose consumer stopped reading; the sink has
on_refused = "dead_letter". SIGTERM with shutdown_timeout = 2: the sink gives its unwritten lines up at
the deadline. They were never refused by anyone, so they must stay below the sink's watermark: the dead-
letter file stays empty, and after the consumer reads the pipe and kbridge starts again on the same
state_dir, the consumer's view (every line it read, over both runs) converges to the server's state.
Before the fix the lines given up at the stop were dead-lettered, the watermark passed them, and the next
start delivered none of them: the consumer was left without those Pods."""
from kbtest import *

PAD = {"spec": {"padding": "x" * 4000}}


def config(sim, d, fifo):
    return ('cluster = { name = "t"; server = "%s"; };\nhttp = { listen = ""; };\nshutdown_timeout = 2;\n'
            'state_dir = "%s/state";\n'
            'informers = ( { name = "pods"; version = "v1"; resource = "pods"; page_size = 50; } );\n'
            'sinks = ( { name = "out"; type = "file"; path = "%s"; on_refused = "dead_letter"; dead_letter = "dl"; },\n'
            '          { name = "dl"; type = "file"; path = "%s/dl.jsonl"; } );\n'
            'routes = ( { informer = "pods"; sink = "out"; } );\n' % (sim.url, d, fifo, d))


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(200)], extra=PAD))
    d = tempfile.mkdtemp(prefix="kbtest-")
    fifo = StalledFifo(os.path.join(d, "out.fifo"))
    b = ConfigBridge(config(sim, d, fifo.path), workdir=d)
    wait_for(lambda: "listed items=200" in b.logtext() and fifo.full(), 60, what="the list to fill the FIFO")

    rc = b.stop()
    check(rc == 0, "with state_dir a stop at the deadline exits 0 (rc %s)\n%s" % (rc, b.logtext()[-2000:]))
    check("delivers them again" in b.logtext(), "the last line says the next start delivers them:\n%s"
          % b.logtext()[-1500:])
    dead = read_jsonl(os.path.join(d, "dl.jsonl"))
    check(not dead, "a stop is not a refusal, yet the dead-letter sink got %d change(s), e.g. %s (%s)"
          % (len(dead), dead[0]["name"] if dead else "", dead[0].get("deadLetter") if dead else ""))

    # The consumer reads what the pipe holds, then kbridge starts again and it keeps reading.
    fifo.take(writer_gone=True)
    b.start()
    want = {i["key"]: i["resourceVersion"] for i in sim.state()["items"]}

    def converged():
        got = {k: e["resourceVersion"] for k, e in view(fifo.lines()).items()}
        return got == want
    try:
        wait_for(converged, 60, 0.1, "the consumer's view to converge to the server's state")
    except Failure:
        got = {k: e["resourceVersion"] for k, e in view(fifo.lines()).items()}
        raise Failure("after the restart the consumer lacks %d Pod(s), e.g. %s\n%s" % (
            len(set(want) - set(got)), sorted(set(want) - set(got))[:3], b.logtext()[-2000:]))
    check(b.stop() == 0, "clean stop")
    fifo.close()
    sim.stop()


run(test)
