"""SIGTERM ends the process at shutdown_timeout whatever the file sink's reader does.

A FIFO whose reader stopped reading and stdout into a pipe nobody reads both make write(2) wait for
ever; kbridge used to join its writer thread there and never exit (a second signal did nothing).
Now: the drain gives up on the blocked reader at the deadline, the exit status is 1 (no state_dir:
what was not acknowledged is lost) and the last line says how many changes; with a long
shutdown_timeout a second SIGTERM ends it at once. With state_dir the unacknowledged changes are
delivered again at the next start: exit 0, and the line says so."""
import os
import signal
import subprocess
import time
from kbtest import *

PAD = {"spec": {"padding": "x" * 4000}}


def config(sim, path, timeout, extra=""):
    return ('cluster = { name = "t"; server = "%s"; };\nhttp = { listen = ""; };\nshutdown_timeout = %d;\n%s'
            'informers = ( { name = "pods"; version = "v1"; resource = "pods"; page_size = 50; } );\n'
            'sinks = ( { name = "out"; type = "file"; path = "%s"; } );\n'
            'routes = ( { informer = "pods"; sink = "out"; } );\n' % (sim.url, timeout, extra, path))


def start(cfg_text, workdir, stdout):
    cfg = os.path.join(workdir, "kbridge.cfg")
    with open(cfg, "w") as f:
        f.write(cfg_text)
    log = open(os.path.join(workdir, "kbridge.log"), "w")
    p = subprocess.Popen([KBRIDGE, "--config", cfg], stdout=stdout, stderr=log)
    import kbtest
    kbtest._procs.append(p)
    return p, os.path.join(workdir, "kbridge.log")


def logtext(path):
    with open(path) as f:
        return f.read()


# A bound against a hang only: far above the shutdown_timeout of 2 s the first cases use (a loaded machine
# is slower, never that slow), far below the 600 s of the second-SIGTERM case.
BOUND = 90


def stop_within(p, log, what, second=False):
    """Send SIGTERM (second: and once more when the drain has begun) and wait for the exit (up to BOUND s)."""
    p.send_signal(signal.SIGTERM)
    if second:  # sent before the first is taken, the two would merge into one pending signal
        wait_for(lambda: "SIGTERM received: draining" in logtext(log), BOUND, what="the drain to begin")
        p.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    try:
        rc = p.wait(BOUND)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise Failure("%s: kbridge still running %ds after SIGTERM\n%s" % (what, BOUND, logtext(log)[-3000:]))
    print("%s: exit %s %.1f s after the %s SIGTERM" % (what, rc, time.monotonic() - t0, "second" if second else "first"))
    return rc


def stalled(log, fd):
    """The informer listed everything (200 x ~4 KB, far more than a pipe holds) and the pipe has filled."""
    return "listed items=200" in logtext(log) and pipe_full(fd)


def start_on_fifo(sim, d, timeout, extra=""):
    """kbridge writing into a FIFO that a reader holds open and never reads, once the pipe is full."""
    fifo = StalledFifo(os.path.join(d, "out.fifo"))
    p, log = start(config(sim, fifo.path, timeout, extra), d, subprocess.DEVNULL)
    wait_for(lambda: stalled(log, fifo.fd), 60, what="the list to fill the pipe")
    return p, log, fifo


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(200)], extra=PAD))
    d = tempfile.mkdtemp(prefix="kbtest-")

    # 1. A FIFO whose reader opened it and never reads.
    p, log, fifo = start_on_fifo(sim, d, 2)
    rc = stop_within(p, log, "FIFO")
    text = logtext(log)
    check(rc == 1, "exit status 1: changes were not acknowledged and there is no state_dir (rc %s)\n%s" %
          (rc, text[-2000:]))
    check("not acknowledged" in text and "lost" in text, "the last line says what was lost:\n%s" % text[-2000:])
    fifo.close()

    # 2. stdout into a pipe nobody reads.
    d2 = tempfile.mkdtemp(prefix="kbtest-")
    r, w = os.pipe()
    p, log = start(config(sim, "-", 2), d2, w)
    os.close(w)
    wait_for(lambda: stalled(log, r), 60, what="the list to fill the pipe")
    rc = stop_within(p, log, "stdout pipe")
    check(rc == 1, "stdout pipe: exit status 1 (rc %s)\n%s" % (rc, logtext(log)[-2000:]))
    os.close(r)

    # 3. A long shutdown_timeout: the second SIGTERM ends the drain at once.
    p, log, fifo = start_on_fifo(sim, tempfile.mkdtemp(prefix="kbtest-"), 600)
    rc = stop_within(p, log, "second SIGTERM", second=True)
    text = logtext(log)
    check(rc == 1, "second SIGTERM: exit status 1 (rc %s)\n%s" % (rc, text[-2000:]))
    check("a second SIGTERM" in text, "the log says the second signal ended it:\n%s" % text[-2000:])
    fifo.close()

    # 4. With state_dir the same stop is not a loss: exit 0, and the line says they come again.
    d4 = tempfile.mkdtemp(prefix="kbtest-")
    p, log, fifo = start_on_fifo(sim, d4, 2, 'state_dir = "%s/state";\n' % d4)
    rc = stop_within(p, log, "state_dir")
    text = logtext(log)
    check(rc == 0, "with state_dir: exit 0 (rc %s)\n%s" % (rc, text[-2000:]))
    check("not acknowledged" in text and "delivers them again" in text, "the line says they come again:\n%s" %
          text[-2000:])
    fifo.close()
    sim.stop()


run(test)
