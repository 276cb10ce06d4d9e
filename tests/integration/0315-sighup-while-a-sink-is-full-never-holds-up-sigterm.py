"""A SIGHUP while a sink is full never holds up SIGTERM, and a second SIGHUP during the reload is not lost.

The file sink writes into a FIFO whose reader stopped reading, so its buffer fills and the worker
waits in produce() with the informer's routes held. A reload must swap those routes. It used to wait
for them on the main thread, the only thread that takes SIGTERM, so a SIGTERM after that SIGHUP did
nothing (still running 20 s later). Now:
1. SIGHUP (a config change), then SIGTERM: kbridge exits within shutdown_timeout (2 s) + 1 s + a
   margin; the bound is against a hang, not a speed claim.
2. SIGHUP, and a second SIGHUP with another change while the first reload waits: once the reader
   reads again, the last config is applied (coalesced, not lost) and the bridge stops cleanly."""
import signal
import subprocess
import threading
from kbtest import *

PODS = 1400  # x ~16 KB: more than the file sink's 8 MB pending + 8 MB being written + the pipe


def stalled_bridge(sim):
    """A bridge whose file sink is full: its FIFO's reader holds it open and does not read."""
    b, fifo = bridge_on_fifo(sim, 2)
    b.start()
    wait_for(lambda: "is full; holding the informer's queue" in b.logtext(), 120,
             what="the file sink to be full (backpressure)")
    return b, fifo


def sighup(b, n_before):
    b.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: b.logtext().count("SIGHUP received") > n_before, 30, what="SIGHUP number %d taken" %
             (n_before + 1))


def sigterm_during_reload(sim):
    b, fifo = stalled_bridge(sim)
    b.add_file_sink("extra")
    sighup(b, 0)
    b.proc.send_signal(signal.SIGTERM)
    try:
        rc = b.proc.wait(15)
    except subprocess.TimeoutExpired:
        raise Failure("SIGTERM during a reload: still running 15 s after it (shutdown_timeout = 2)\n%s%s" %
                      (b.logtext()[-2500:], b.stacks()))
    check(rc in (0, 1), "exit status 0 or 1 (rc %s)\n%s" % (rc, b.logtext()[-2000:]))
    fifo.close()


def second_sighup_is_coalesced(sim):
    b, fifo = stalled_bridge(sim)
    b.add_file_sink("extra")
    sighup(b, 0)
    # The first reload has read the file (2 routes) and waits for the full sink's route lock: only then
    # is the second sink written, so only a second reload can apply it.
    wait_for(lambda: "waits: informer=" in b.logtext(), 60, what="the first reload to wait for the route lock")
    b.add_file_sink("extra2")
    sighup(b, 1)
    check("SIGHUP received during a reload: coalesced" in b.logtext(), "the second SIGHUP is coalesced:\n%s"
          % b.logtext()[-2000:])
    # The reader reads again: the sink drains, the reload can swap, and the last config must be applied.
    reading = threading.Event()
    reading.set()

    def drain():
        while reading.is_set():
            try:
                if not os.read(fifo.fd, 1 << 20):
                    time.sleep(0.01)
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                return
    t = threading.Thread(target=drain, daemon=True)
    t.start()
    try:
        wait_for(lambda: "routes=3;" in b.logtext(), 120, what="the config of the second SIGHUP (3 routes) applied")
    except Failure as e:
        raise Failure("%s\n%s%s" % (e, b.logtext()[-2500:], b.stacks()))
    check(b.alive(), "still running")
    rc = b.stop(timeout=30)
    reading.clear()
    t.join()
    check(rc in (0, 1), "stopped (rc %s)" % rc)
    fifo.close()


def test():
    sim = Sim()
    for i in range(0, PODS, 200):
        sim.bulk(pod_ops("create", "ns1", ["p%04d" % j for j in range(i, min(i + 200, PODS))],
                         extra={"spec": {"pad": "x" * 16000}}))
    sigterm_during_reload(sim)
    second_sighup_is_coalesced(sim)
    sim.stop()


run(test)
