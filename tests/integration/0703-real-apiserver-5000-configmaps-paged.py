#!/usr/bin/env python3
"""Against a real kube-apiserver: 5,000 configmaps listed with page_size = 100 (50 pages, one
consistent snapshot), then changes made after the list arrive through the watch — no relist."""
import signal

from kbtest import check, ConfigBridge, ControlPlane, run

N = 5000


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
                page_size = 100; list_mode = "paged"; } );
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "cms"; sink = "out"; } );
""" % cp.kubeconfig)
    log = b.wait_log("informer=cms namespace=bulk listed", 300)
    check("listed items=%d pages=%d" % (N, N // 100) in log,
          "want one list of %d items in %d pages:\n%s" % (N, N // 100, log[-2000:]))
    b.wait_view(want, "configmaps", 300)
    evs = b.events()
    check(len(evs) == N and all(e["type"] == "ADDED" for e in evs), "%d events after the list" % len(evs))

    # Changes after the list come through the watch.
    cp.kubectl("delete", "configmap", "-n", "bulk", "cm-00007", "cm-04999")
    cp.kubectl("label", "configmap", "-n", "bulk", "cm-00100", "extra=yes")
    want = cp.state("/api/v1/namespaces/bulk/configmaps")
    b.wait_view(want, "configmaps", 180)
    check(b.logtext().count(" listed items=") == 1, "a relist happened:\n" + b.logtext()[-2000:])
    check(b.stop(signal.SIGTERM) == 0, "exit status on SIGTERM")


run(test)
