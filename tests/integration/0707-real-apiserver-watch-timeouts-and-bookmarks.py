#!/usr/bin/env python3
"""Against a real kube-apiserver: watches end by their timeoutSeconds and resume from the last
resourceVersion, bookmarks arrive and advance it, and nothing is relisted; a change made at the end
still arrives exactly once.

min_watch_timeout = 15 makes each watch ask for 15-30 s (the default, 300, gives client-go's
300-600 s), so the test runs until every informer's watch has ended and resumed twice, whatever
that takes on this machine; each timeoutSeconds asked for is in [15, 30), and each resumed watch
starts no earlier than its predecessor's timeout (it was not cut short)."""
import datetime
import re
import signal
import threading

from kbtest import check, wait_for, ConfigBridge, ControlPlane, assert_no_repeats, run

MIN_WATCH_TIMEOUT = 15
RESUMES = 2  # each informer's watch ends and resumes at least this often


def watch_lines(log, name):
    """[(start time s, rv, sendInitialEvents, timeout s)] of informer name's watches, in order."""
    out = []
    for m in re.finditer(r"^(\S+) .*informer=%s watch rv=(\S*) sendInitialEvents=(\S+) timeout=(\d+)s$"
                         % re.escape(name), log, re.M):
        t = datetime.datetime.fromisoformat(m.group(1).rstrip("Z")).timestamp()
        out.append((t, m.group(2), m.group(3) == "true", int(m.group(4))))
    return out


def test():
    cp = ControlPlane()
    k = cp.kubectl
    names = ["q%d" % i for i in range(4)]
    for ns in names:
        k("create", "namespace", ns)
        k("create", "configmap", "-n", ns, "c", "--from-literal=v=0")
    informers = ",\n  ".join('{ name = "%s"; version = "v1"; resource = "configmaps"; namespaces = [ "%s" ]; '
                             'min_watch_timeout = %d; }' % (n, n, MIN_WATCH_TIMEOUT) for n in names)
    b = ConfigBridge("""
cluster = { name = "real"; kubeconfig = "%s"; };
http = { listen = ""; };
shutdown_timeout = 20;
log = { level = "debug"; };
informers = (
  %s
);
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( %s );
""" % (cp.kubeconfig, informers, ", ".join('{ informer = "%s"; sink = "out"; }' % n for n in names)))
    for n in names:
        b.wait_log("informer=%s namespace=%s listed" % (n, n), 120)

    # Quiet watches; a little unrelated traffic keeps the resourceVersion moving, as in a real cluster, so
    # the bookmarks before each timeout carry a newer resourceVersion than the watch started from.
    done = threading.Event()

    def noise():
        i = 0
        while not done.wait(3):
            k("create", "configmap", "-n", "default", "noise-%d" % i, "--from-literal=v=1")
            i += 1
    t = threading.Thread(target=noise, daemon=True)
    t.start()
    try:
        # The first watch and RESUMES more started: RESUMES watches ended and were resumed. The bound only
        # stops a hang: each watch lasts under 2 * MIN_WATCH_TIMEOUT.
        wait_for(lambda: all(len(watch_lines(b.logtext(), n)) >= RESUMES + 1 for n in names),
                 2 * 2 * MIN_WATCH_TIMEOUT * RESUMES + 60, 0.5, "every watch to end and resume %d times" % RESUMES)
    finally:
        done.set()
        t.join(120)
    for n in names:
        k("patch", "configmap", "-n", n, "c", "-p", '{"data":{"v":"1"}}')
    want = {n: cp.rv("-n", n, "configmap", "c") for n in names}
    b.wait_view({"%s/c" % n: want[n] for n in names}, "configmaps", 120)
    check(b.stop(signal.SIGTERM) == 0, "exit status on SIGTERM")
    log = b.logtext()
    stats = {m.group(1): m.group(2) for m in re.finditer(r"informer=(\S+) (objects=.*)", log)}
    watches = bookmarks = 0
    for n in names:
        s = stats.get(n, "")
        for zero in ("relists=0", "server_errors=0", "connect_errors=0", "gone=0"):
            check(zero in s, "%s: %s expected: %s" % (n, zero, s))
        nb = int(re.search(r"bookmarks=(\d+)", s).group(1))
        ws = watch_lines(log, n)
        watches += len(ws)
        bookmarks += nb
        check(all(MIN_WATCH_TIMEOUT <= w[3] < 2 * MIN_WATCH_TIMEOUT for w in ws),
              "%s: every timeoutSeconds is in [%d, %d): %s" % (n, MIN_WATCH_TIMEOUT, 2 * MIN_WATCH_TIMEOUT,
                                                              [w[3] for w in ws]))
        check(ws[0][2] and not any(w[2] for w in ws[1:]), "%s: one streamed list, then plain watches" % n)
        # A watch ended by its timeout: the next one starts no earlier than the timeout after it began.
        for a, c in zip(ws, ws[1:]):
            check(c[0] - a[0] >= a[3] - 1, "%s: a watch asked for %d s ended after %.1f s" % (n, a[3], c[0] - a[0]))
        # Each resumed watch starts from the last resourceVersion: never lower than the one before, and
        # moved on by the bookmarks alone (nothing changed in the namespace while the watches ran).
        rvs = [int(w[1]) for w in ws[1:]]
        check(rvs == sorted(rvs) and rvs[-1] > rvs[0], "%s: the resume point advances by bookmarks: %s" % (n, rvs))
        check(nb >= RESUMES, "%s: a bookmark before each timeout (bookmarks=%d)" % (n, nb))
    check(log.count(" listed items=") == len(names), "a list after the first")
    assert_no_repeats(b.events())
    print("watches=%d bookmarks=%d" % (watches, bookmarks))


run(test)
