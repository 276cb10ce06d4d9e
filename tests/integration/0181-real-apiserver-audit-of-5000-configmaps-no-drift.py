#!/usr/bin/env python3
"""Against a real kube-apiserver: the drift audit of 5,000 configmaps reads them as metadata only
(PartialObjectMetadataList, paged) and finds no drift, delivering nothing, audit after audit —
while changes keep arriving through the watch (they are not drift either)."""
import signal

from kbtest import check, ConfigBridge, ControlPlane, run

N = 5000


def test():
    cp = ControlPlane()
    cp.kubectl("create", "namespace", "bulk")
    cp.create_configmaps("bulk", N)
    b = ConfigBridge("""
cluster = { name = "real"; kubeconfig = "%s"; qps = 50.0; burst = 20; };
http = { listen = "127.0.0.1:0"; };
shutdown_timeout = 20;
log = { level = "debug"; };
informers = ( { name = "cms"; version = "v1"; resource = "configmaps"; namespaces = [ "bulk" ];
                page_size = 500; audit_seconds = 2; } );
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "cms"; sink = "out"; } );
""" % cp.kubeconfig)
    b.wait_view(cp.state("/api/v1/namespaces/bulk/configmaps"), "configmaps", 300)
    check(len(b.events()) == N, "%d events after the list" % len(b.events()))
    b.wait_audits(1)
    # A change during the audits comes through the watch, once.
    cp.kubectl("label", "configmap", "-n", "bulk", "cm-00100", "extra=yes")
    a = b.wait_audits(2)
    check(a["drift"] == {"missing": 0, "stale": 0, "unknown": 0}, "no drift: %s" % a)
    check(sum(b.metric("kbridge_audit_drift_total", informer="cms", kind=k)
              for k in ("missing", "stale", "unknown")) == 0, "no drift counted by any audit")
    evs = b.events()
    check(len(evs) == N + 1 and evs[-1]["name"] == "cm-00100" and evs[-1]["type"] == "MODIFIED",
          "only the watched change was delivered: %d events" % len(evs))
    log = b.logtext()
    check("answered as PartialObjectMetadataList (metadata only)" in log,
          "the audit list was metadata only:\n" + "\n".join(l for l in log.splitlines() if "audit" in l)[-2000:])
    check("drift" not in "\n".join(l for l in log.splitlines() if "WARN" in l), "no drift logged")
    check(b.stop(signal.SIGTERM) == 0, "exit status on SIGTERM")


run(test)
