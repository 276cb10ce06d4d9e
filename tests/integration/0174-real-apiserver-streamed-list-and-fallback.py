#!/usr/bin/env python3
"""Against a real kube-apiserver: with the WatchList feature on (the default)
the initial sync of 300 configmaps is one streamed list that equals the
server's state, and later changes come on the same stream; with
--feature-gates=WatchList=false the server refuses sendInitialEvents and the
informer (list_mode auto) falls back to paged lists, with the same result."""
import json
import os
import signal

from kbtest import check, ConfigBridge, ControlPlane, run

N = 300


def sync_and_follow(gate_off):
    if gate_off:
        os.environ["KB_APISERVER_EXTRA_ARGS"] = "--feature-gates=WatchList=false"
    else:
        os.environ.pop("KB_APISERVER_EXTRA_ARGS", None)
    cp = ControlPlane()
    try:
        cp.kubectl("create", "namespace", "bulk")
        items = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-%04d" % i, "namespace": "bulk"},
                  "data": {"i": str(i), "pad": "x" * 200}} for i in range(N)]
        cp.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        want = cp.state("/api/v1/namespaces/bulk/configmaps")
        check(len(want) == N, "the server has %d configmaps, want %d" % (len(want), N))
        b = ConfigBridge("""
cluster = { name = "real"; kubeconfig = "%s"; };
http = { listen = ""; };
shutdown_timeout = 20;
log = { level = "info"; };
informers = ( { name = "cms"; version = "v1"; resource = "configmaps"; namespaces = [ "bulk" ]; page_size = 100; } );
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "cms"; sink = "out"; } );
""" % cp.kubeconfig)
        log = b.wait_log("informer=cms namespace=bulk listed", 300)
        how = "pages=3" if gate_off else "streamed"
        check("listed items=%d %s" % (N, how) in log, "want a list of %d items, %s:\n%s" % (N, how, log[-3000:]))
        fell_back = "does not offer streamed lists" in log
        check(fell_back == gate_off, "fallback logged: %s, gate off: %s:\n%s" % (fell_back, gate_off, log[-3000:]))
        b.wait_view(want, "configmaps", 180)
        evs = b.events()
        check(len(evs) == N and all(e["type"] == "ADDED" for e in evs), "%d events after the sync" % len(evs))

        cp.kubectl("delete", "configmap", "-n", "bulk", "cm-0007", "cm-0299")
        cp.kubectl("label", "configmap", "-n", "bulk", "cm-0100", "extra=yes")
        want = cp.state("/api/v1/namespaces/bulk/configmaps")
        b.wait_view(want, "configmaps", 180)
        check(b.logtext().count(" listed items=") == 1, "a relist happened:\n" + b.logtext()[-2000:])
        check(b.stop(signal.SIGTERM) == 0, "exit status on SIGTERM")
        print("gate %s: %s" % ("off" if gate_off else "on", [l for l in b.logtext().splitlines() if "listed" in l]))
    finally:
        cp.stop()


def test():
    sync_and_follow(gate_off=False)
    sync_and_follow(gate_off=True)


run(test)
