"""Kube API requests that wait never hold up a reload or a stop.

A list from a resourceVersion the cache has not reached waits (up to 3 s) for it. Those requests
used to wait under the bridge's read lock, so twelve of them overlapping kept a reload's write lock
out for ever: a SIGHUP was not applied within 25 s, and SIGTERM after it did nothing (the main
thread waited for the lock). Now, with twelve such requests always in flight:
1. a SIGHUP that adds a sink is applied while they still wait;
2. SIGTERM stops kbridge (within a bound that is only against a hang)."""
import signal
import subprocess
import threading
from kbtest import *

CLIENTS = 12
FAR = "18446744073709551615"


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%d" % i for i in range(5)]))
    b = Bridge(sim, http='listen = "127.0.0.1:0";')
    url = b.http_url()
    b.wait_converged(sim)

    in_flight = [0]
    answered = []
    lock = threading.Lock()
    going = threading.Event()
    going.set()

    def client(i):
        time.sleep(i * 0.25)  # spread out, so that the waits overlap
        while going.is_set():
            with lock:
                in_flight[0] += 1
            try:
                st = http_request(url + "/api/v1/pods?resourceVersion=" + FAR, timeout=60)[0]
            except Exception as e:  # the stop may close the connection
                st = repr(e)
            with lock:
                in_flight[0] -= 1
                answered.append(st)
    clients = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CLIENTS)]
    for t in clients:
        t.start()
    wait_for(lambda: len(answered) >= CLIENTS, 60, what="every client to have waited once")
    check(504 in answered, "a list from a resourceVersion far ahead waits and answers 504: %s" % answered[:5])

    # 1. The reload is applied while they wait.
    b.add_file_sink("extra")
    b.proc.send_signal(signal.SIGHUP)
    seen = []

    def reloaded():
        if "reloaded" not in b.logtext():
            return False
        with lock:
            seen.append(in_flight[0])
        return True
    try:
        wait_for(reloaded, 20, what="the reload while %d kube API requests wait" % CLIENTS)
    except Failure as e:
        raise Failure("%s\n%s%s" % (e, b.logtext()[-2000:], b.stacks()))
    check(seen[0] > 0, "requests were still waiting when the reload was applied (in flight: %d)" % seen[0])
    check("routes=2;" in b.logtext(), "the new route is in:\n%s" % b.logtext()[-1500:])

    # 2. SIGTERM with the requests still waiting.
    b.proc.send_signal(signal.SIGTERM)
    try:
        rc = b.proc.wait(15)
    except subprocess.TimeoutExpired:
        raise Failure("still running 15 s after SIGTERM with %d kube API requests waiting\n%s%s" %
                      (CLIENTS, b.logtext()[-2000:], b.stacks()))
    check(rc == 0, "a clean stop (rc %s)\n%s" % (rc, b.logtext()[-1500:]))
    going.clear()
    for t in clients:
        t.join(60)
    sim.stop()


run(test)
