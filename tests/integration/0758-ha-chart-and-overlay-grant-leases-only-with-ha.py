#!/usr/bin/env python3
"""High availability is in the deploy kit, and the Lease rights come only with it. The Helm chart with
ha.enabled runs two pods per shard (single: a Deployment of two; sharded: two StatefulSets <name>-a and
<name>-b whose pods <name>-a-i and <name>-b-i both take sharding.index i), renders the config's `ha`
section (kbridge --check accepts it) and a Role with get/create/update on leases; without ha.enabled no
Role or ClusterRole names leases. The kustomize base grants no lease rights; the `ha` overlay adds them
and runs two replicas. Everything is applied with `kubectl apply --dry-run=server` on the real API
server, with no warnings."""
import os
import subprocess

from deploycheck import (HELM_NS as NS, config_with_standins, cross_check, helm_template, json_docs,
                         kbridge_check, pod_security)
from kbtest import KBRIDGE, SOURCE, check, ControlPlane, run

DEPLOY = os.path.join(SOURCE, "deploy", "kubernetes")


def lease_rules(objs):
    return [(o["kind"], r["verbs"]) for o in objs if o["kind"] in ("Role", "ClusterRole")
            for r in o.get("rules", []) if "leases" in r.get("resources", [])]


def apply_dry_run(cp, what, *args, **kw):
    r = cp.kubectl("apply", "--dry-run=server", *args, check_rc=False, **kw)
    check(r.returncode == 0, "%s: kubectl apply --dry-run=server failed:\n%s" % (what, r.stderr))
    check("Warning" not in r.stderr, "%s: the API server warned:\n%s" % (what, r.stderr))


def helm_objs(cp, *args):
    text = helm_template(*args)
    return text, json_docs(cp.kubectl("create", "--dry-run=client", "-o", "json", "-f", "-", input=text))


def kustomize_objs(cp, overlay):
    r = subprocess.run(["kubectl", "kustomize", os.path.join(DEPLOY, overlay)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    check(r.returncode == 0, "kubectl kustomize %s: %s" % (overlay, r.stderr))
    return json_docs(cp.kubectl("create", "--dry-run=client", "-o", "json", "-f", "-", input=r.stdout))


def test():
    cp = ControlPlane()
    cp.kubectl("create", "namespace", NS)
    cp.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted",
               "pod-security.kubernetes.io/warn=restricted")
    for mode, hosts, want in (("single", ["rel-kbridge-7d9f-abcde"], "replica 0 of 1"),
                              ("sharded", ["rel-kbridge-a-2", "rel-kbridge-b-2"], "replica 2 of 3")):
        _, plain = helm_objs(cp, "--set", "mode=" + mode)
        check(not lease_rules(plain), "%s without ha: lease rights granted: %s" % (mode, lease_rules(plain)))
        text, objs = helm_objs(cp, "--set", "mode=" + mode, "--set", "shards=3", "--set", "ha.enabled=true")
        workloads = [(o["kind"], o["metadata"]["name"], o["spec"]["replicas"]) for o in objs
                     if o["kind"] in ("Deployment", "StatefulSet")]
        print("%s ha: %s; leases %s" % (mode, workloads, lease_rules(objs)))
        shards = 3 if mode == "sharded" else 1
        check(sum(n for _, _, n in workloads) == 2 * shards, "%s ha: want 2 pods per shard: %s" % (mode, workloads))
        if mode == "sharded":
            check(sorted(w[1] for w in workloads) == ["rel-kbridge-a", "rel-kbridge-b"] and
                  all(n == 3 for _, _, n in workloads), "sharded ha: want StatefulSets -a and -b of 3: %s" % workloads)
        check(lease_rules(objs) == [("Role", ["get", "create", "update"])],
              "%s ha: want one Role with leases get/create/update: %s" % (mode, lease_rules(objs)))
        bad = cross_check(objs, NS) + pod_security(objs)
        check(not bad, "%s ha does not work together:\n  %s" % (mode, "\n  ".join(bad)))
        cfg = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "rel-kbridge")
        cfg = cfg["data"]["kbridge.cfg"]
        check("ha = {" in cfg and "enabled = true;" in cfg, "%s ha: no ha section:\n%s" % (mode, cfg))
        d = config_with_standins(KBRIDGE, cfg)
        for host in hosts:
            summary = kbridge_check(d, host)
            check(want in summary, "%s ha, %s: want %r in:\n%s" % (mode, host, want, summary))
        apply_dry_run(cp, "helm %s ha" % mode, "-f", "-", input=text)

    base = kustomize_objs(cp, "base")
    check(not lease_rules(base), "the kustomize base grants lease rights: %s" % lease_rules(base))
    objs = kustomize_objs(cp, "ha")
    check(lease_rules(objs) == [("Role", ["get", "create", "update"])], "ha overlay: leases %s" % lease_rules(objs))
    w = [o for o in objs if o["kind"] in ("Deployment", "StatefulSet")]
    check(len(w) == 1 and w[0]["spec"]["replicas"] == 2, "ha overlay: want one workload of two replicas")
    bad = cross_check(objs, "kbridge") + pod_security(objs)
    check(not bad, "ha overlay does not work together:\n  %s" % "\n  ".join(bad))
    cm = next(o for o in objs if o["kind"] == "ConfigMap")["data"]
    d = config_with_standins(KBRIDGE, cm["kbridge.cfg"])
    for name in ("sharding.cfg", "ha.cfg"):
        with open(os.path.join(d, name), "w") as f:
            f.write(cm[name])
    kbridge_check(d, "kbridge-5c8d-xyz12")
    cp.kubectl("apply", "-f", os.path.join(DEPLOY, "base", "namespace.yaml"))
    apply_dry_run(cp, "overlay ha", "-k", os.path.join(DEPLOY, "ha"))


run(test)
