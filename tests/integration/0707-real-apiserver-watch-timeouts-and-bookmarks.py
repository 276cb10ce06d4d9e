#!/usr/bin/env python3
"""Against a real kube-apiserver, for about eleven minutes: watches end by their timeoutSeconds
(300-600 s) and resume from the last resourceVersion, bookmarks arrive and advance it, and nothing
is relisted; a change made at the end still arrives exactly once.

Long by nature, so it runs only with KB_LONG_TESTS=1 (otherwise it says SKIP and passes)."""
import os
import re
import signal
import sys
import time

from kbtest import check, ConfigBridge, ControlPlane, assert_no_repeats, run

# kbridge asks for timeoutSeconds drawn from 300-600 s (client-go's rule), so only a run longer
# than 600 s is sure to see every watch end and resume (500 s failed once: all four draws were
# above it).
RUN_SECONDS = int(os.environ.get("KB_LONG_TEST_SECONDS", "620"))


def test():
    if os.environ.get("KB_LONG_TESTS") != "1":
        print("SKIP %s: takes ~9 minutes; run with KB_LONG_TESTS=1" % os.path.basename(sys.argv[0]))
        return
    cp = ControlPlane()
    k = cp.kubectl
    names = ["q%d" % i for i in range(4)]
    for ns in names:
        k("create", "namespace", ns)
        k("create", "configmap", "-n", ns, "c", "--from-literal=v=0")
    informers = ",\n  ".join('{ name = "%s"; version = "v1"; resource = "configmaps"; namespaces = [ "%s" ]; }'
                             % (n, n) for n in names)
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
    # Quiet watches; a little unrelated traffic keeps the resourceVersion moving, as in a real cluster.
    deadline = time.monotonic() + RUN_SECONDS
    i = 0
    while time.monotonic() < deadline:
        k("create", "configmap", "-n", "default", "noise-%d" % i, "--from-literal=v=1")
        i += 1
        time.sleep(20)
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
        check("relists=0" in s, "%s relisted: %s" % (n, s))
        watches += int(re.search(r"watches=(\d+)", s).group(1))
        bookmarks += int(re.search(r"bookmarks=(\d+)", s).group(1))
    check(watches > len(names), "no watch ended and resumed in %d s (watches=%d)" % (RUN_SECONDS, watches))
    check(bookmarks > 0, "no bookmark arrived in %d s" % RUN_SECONDS)
    check(log.count(" listed items=") == len(names), "a list after the first")
    assert_no_repeats(b.events())
    print("watches=%d bookmarks=%d over %d s" % (watches, bookmarks, RUN_SECONDS))


run(test)
