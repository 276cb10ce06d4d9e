#!/usr/bin/env python3
"""deploy/kubernetes is accepted by a real kube-apiserver: both overlays (single: a Deployment;
sharded: a StatefulSet) pass `kubectl apply --dry-run=server -k` in a namespace that enforces the
"restricted" Pod Security Standard, with no warnings; the RBAC gives the service account exactly
get/list/watch on the configured resources; rbac-rules.sh output is a valid ClusterRole; and the
shipped config passes `kbridge --check`, with a sharded pod named kbridge-2 taking index 2."""
import os
import shutil
import subprocess

from deploycheck import config_with_standins, kbridge_check
from kbtest import KBRIDGE, SOURCE, check, ControlPlane, run

DEPLOY = os.path.join(SOURCE, "deploy", "kubernetes")


def test():
    cp = ControlPlane()
    k = cp.kubectl
    # The namespace must exist for a server-side dry run of the objects in it.
    k("apply", "-f", os.path.join(DEPLOY, "base", "namespace.yaml"))
    for overlay, workload in (("single", "deployment.apps/kbridge"), ("sharded", "statefulset.apps/kbridge")):
        r = k("apply", "--dry-run=server", "-k", os.path.join(DEPLOY, overlay), check_rc=False)
        check(r.returncode == 0, "%s: kubectl apply --dry-run=server failed:\n%s" % (overlay, r.stderr))
        check("Warning" not in r.stderr, "%s: the API server warned:\n%s" % (overlay, r.stderr))
        for obj in (workload, "configmap/kbridge-config", "secret/kbridge-broker", "secret/kbridge-http",
                    "secret/kbridge-tls", "serviceaccount/kbridge",
                    "clusterrole.rbac.authorization.k8s.io/kbridge-reader", "poddisruptionbudget.policy/kbridge"):
            check(obj in r.stdout, "%s: %s missing from:\n%s" % (overlay, obj, r.stdout))

    # Least privilege, checked by the API server's own authorizer.
    k("apply", "-f", os.path.join(DEPLOY, "base", "serviceaccount.yaml"), "-n", "kbridge")
    k("apply", "-f", os.path.join(DEPLOY, "base", "rbac.yaml"))
    sa = "system:serviceaccount:kbridge:kbridge"
    for verb, res, want in (("list", "pods", "yes"), ("watch", "configmaps", "yes"), ("get", "pods", "yes"),
                            ("delete", "pods", "no"), ("list", "secrets", "no"), ("create", "configmaps", "no"),
                            ("list", "deployments.apps", "no")):
        r = k("auth", "can-i", verb, res, "--all-namespaces", "--as", sa, check_rc=False)
        check(r.stdout.strip() == want, "can-i %s %s as the service account: %r, want %s" % (verb, res,
                                                                                          r.stdout.strip(), want))

    gen = subprocess.run([os.path.join(DEPLOY, "rbac-rules.sh"), "--name", "kb-gen", "pods", "apps/deployments",
                          "example.com/widgets"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(gen.returncode == 0, "rbac-rules.sh: %s" % gen.stderr)
    r = k("apply", "--dry-run=server", "-f", "-", input=gen.stdout, check_rc=False)
    check(r.returncode == 0 and "kb-gen" in r.stdout, "generated ClusterRole refused: %s" % r.stderr)

    # The shipped config is valid; the sharded one resolves the ordinal from $HOSTNAME. Its secret
    # files (broker password, HTTP token, TLS pair) are stand-ins made here.
    with open(os.path.join(DEPLOY, "base", "kbridge.cfg")) as f:
        d = config_with_standins(KBRIDGE, f.read())
    for sharding, host, want in (("base", "kbridge-7d9f-abcde", "replica 0 of 1"),
                                 ("sharded", "kbridge-2", "replica 2 of 3")):
        shutil.copy(os.path.join(DEPLOY, sharding, "sharding.cfg"), d)
        shutil.copy(os.path.join(DEPLOY, "base", "ha.cfg"), d)
        summary = kbridge_check(d, host)
        check(want in summary, "%s config: want %r in the summary:\n%s" % (sharding, want, summary))


run(test)
