#!/usr/bin/env python3
"""Against a real kube-apiserver: 1,000 configmaps listed with page_size = 20 (50 pages, one
consistent snapshot), then changes made after the list arrive through the watch — no relist."""
import signal

from kbtest import check, ConfigBridge, ControlPlane, run

N = 1000
PAGE = 20


def test():
    cp = ControlPlane()
    cp.kubectl("create", "namespace", "bulk")
    cp.create_configmaps("bulk", N)
    want = cp.state("/api/v1/namespaces/bulk/configmaps")
    check(len(want) == N, "the server has %d configmaps, want %d" % (len(want), N))

    b = ConfigBridge("""
cluster = { name = "real"; kubeconfig = "%s"; qps = 20.0; burst = 10; };
http = { listen = ""; };
shutdown_timeout = 20;
log = { level = "info"; };
informers = ( { name = "cms"; version = "v1"; resource = "configmaps"; namespaces = [ "bulk" ];
                page_size = %d; list_mode = "paged"; } );
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "cms"; sink = "out"; } );
""" % (cp.kubeconfig, PAGE))
    log = b.wait_log("informer=cms namespace=bulk listed", 300)
    check("listed items=%d pages=%d" % (N, N // PAGE) in log,
          "want one list of %d items in %d pages:\n%s" % (N, N // PAGE, log[-2000:]))
    b.wait_view(want, "configmaps", 300)
    evs = b.events()
    check(len(evs) == N and all(e["type"] == "ADDED" for e in evs), "%d events after the list" % len(evs))

    # Changes after the list come through the watch.
    cp.kubectl("delete", "configmap", "-n", "bulk", "cm-00007", "cm-%05d" % (N - 1))
    cp.kubectl("label", "configmap", "-n", "bulk", "cm-00100", "extra=yes")
    want = cp.state("/api/v1/namespaces/bulk/configmaps")
    b.wait_view(want, "configmaps", 180)
    check(b.logtext().count(" listed items=") == 1, "a relist happened:\n" + b.logtext()[-2000:])
    check(b.stop(signal.SIGTERM) == 0, "exit status on SIGTERM")


run(test)
