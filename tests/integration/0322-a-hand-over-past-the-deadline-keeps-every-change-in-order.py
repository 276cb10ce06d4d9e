"""A sink rebuilt by SIGHUP while its reader is stalled hands every change it still holds to its successor,
per key in order, none skipped.

0311 proves the hand-over with one change per object; here each object changes several times while the
file sink's reader (a FIFO) is stalled, so the retired instance holds older and newer changes of the
same keys when shutdown_timeout (2 s) passes. The operator points the sink at a file (path changed: the
sink is rebuilt) and sends SIGHUP; the old instance misses its deadline, and what it still holds goes to
the new path. The consumer reads the FIFO, then the new file: per key, every change the server made is
there, and resourceVersions never go back (an exact repeat of a line torn at the deadline is allowed:
at-least-once). Changes made after the reload come after the handed-over ones. Nothing is dead-lettered
(the dead-letter sink stays empty: a deadline is not a refusal)."""
from kbtest import *

PAD = {"spec": {"padding": "x" * 4000}}
NAMES = ["p%02d" % i for i in range(40)]


def config(sim, d, path):
    return ('cluster = { name = "t"; server = "%s"; };\nhttp = { listen = "127.0.0.1:0"; };\nshutdown_timeout = 2;\n'
            'state_dir = "%s/state";\n'
            'informers = ( { name = "pods"; version = "v1"; resource = "pods"; page_size = 50; } );\n'
            'sinks = ( { name = "out"; type = "file"; path = "%s"; on_refused = "dead_letter"; dead_letter = "dl"; },\n'
            '          { name = "dl"; type = "file"; path = "%s/dl.jsonl"; } );\n'
            'routes = ( { informer = "pods"; sink = "out"; } );\n' % (sim.url, d, path, d))


def update_all(sim, round_):
    sim.bulk(pod_ops("update", "ns1", NAMES, extra={"spec": {"padding": "y" * 4000, "round": round_}}))


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", NAMES, extra=PAD))
    created = {i["key"]: int(i["resourceVersion"]) for i in sim.state()["items"]}
    rv0 = max(created.values())
    d = tempfile.mkdtemp(prefix="kbtest-")
    fifo = StalledFifo(os.path.join(d, "out.fifo"))
    out2 = os.path.join(d, "out2.jsonl")
    b = ConfigBridge(config(sim, d, fifo.path), workdir=d)
    wait_for(lambda: "listed items=40" in b.logtext() and fifo.full(), 60, what="the list to fill the FIFO")
    for r in range(3):
        update_all(sim, r)
    wait_for(lambda: b.informer_doc()["seq"] >= 4 * len(NAMES), 60, 0.1,
             "kbridge to accept the updates (the sink holds them)")

    with open(b.config, "w") as f:
        f.write(config(sim, d, out2))
    b.proc.send_signal(signal.SIGHUP)
    b.wait_log("reloaded ", 60)
    fifo.take(writer_gone=True)  # the old instance is closed: the consumer reads what the pipe holds
    update_all(sim, 3)

    history = watch_history(sim, rv0)
    want = {k: [rv] for k, rv in created.items()}
    for key, typ, rv in history:
        want.setdefault(key, []).append(rv)

    def consumer():
        return fifo.lines() + read_jsonl(out2)

    def complete():
        got = {}
        for e in consumer():
            got.setdefault(key_of(e), set()).add(int(e["resourceVersion"]))
        return all(set(rvs) <= got.get(k, set()) for k, rvs in want.items())
    try:
        wait_for(complete, 60, 0.1, "every change of every Pod in the FIFO or the new file")
    except Failure:
        got = {}
        for e in consumer():
            got.setdefault(key_of(e), set()).add(int(e["resourceVersion"]))
        missing = {k: sorted(set(v) - got.get(k, set())) for k, v in want.items() if set(v) - got.get(k, set())}
        raise Failure("%d Pod(s) lack changes after the hand-over, e.g. %s\n%s" % (
            len(missing), sorted(missing.items())[:3], b.logtext()[-2500:]))
    events = consumer()
    assert_rv_monotonic_ignoring_repeats(events)
    check(len(history) == 4 * len(NAMES) and len(want) == len(NAMES),
          "the server made 4 updates per Pod (%d)" % len(history))
    check(not read_jsonl(os.path.join(d, "dl.jsonl")), "a deadline is not a refusal: nothing dead-lettered")
    handed = [e for e in read_jsonl(out2) if int(e["resourceVersion"]) <= rv0 + 3 * 40]
    print("%d line(s) in the FIFO, %d in the new file (%d handed over from before the reload)"
          % (len(fifo.lines()), len(read_jsonl(out2)), len(handed)))
    check(b.stop() == 0, "clean stop")
    fifo.close()
    sim.stop()


run(test)
