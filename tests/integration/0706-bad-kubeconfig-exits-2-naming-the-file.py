#!/usr/bin/env python3
"""A kubeconfig that cannot be used stops kbridge before it starts anything: exit status 2 and one
line that names the kubeconfig file (and the line, for YAML that does not parse) and what is
wrong — a YAML error, a missing context, an unreadable file, $KUBECONFIG pointing nowhere, and
in_cluster outside a pod."""
import os
import subprocess
import tempfile

from kbtest import KBRIDGE, check, run

GOOD = """apiVersion: v1
kind: Config
current-context: a
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: a, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: t}}]
"""


def kbridge(d, cluster, env=None):
    cfg = os.path.join(d, "kbridge.cfg")
    with open(cfg, "w") as f:
        f.write('cluster = { %s };\nhttp = { listen = ""; };\n' % cluster)
        f.write('informers = ( { name = "pods"; resource = "pods"; } );\n')
        f.write('sinks = ( { name = "out"; type = "file"; path = "%s/out.jsonl"; } );\n' % d)
        f.write('routes = ( { informer = "pods"; sink = "out"; } );\n')
    e = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    e["HOME"] = d
    e.update(env or {})
    r = subprocess.run([KBRIDGE, "--config", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=e, timeout=60)
    return r.returncode, r.stderr


def write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def test():
    d = tempfile.mkdtemp(prefix="kbtest-kc-")
    good = write(os.path.join(d, "good.yaml"), GOOD)
    bad = write(os.path.join(d, "bad.yaml"), GOOD.replace("contexts: [{", "contexts: [{{"))
    cases = [
        ('kubeconfig = "%s";' % bad, None, [bad + ":5:", "YAML"]),
        ('kubeconfig = "%s"; context = "prod";' % good, None, [good, 'context "prod" not found']),
        ('kubeconfig = "%s/missing.yaml";' % d, None, [d + "/missing.yaml", "cannot read"]),
        ('', {"KUBECONFIG": d + "/nowhere.yaml"}, [d + "/nowhere.yaml", "cannot read"]),
        ('', None, [d + "/.kube/config", "cannot read"]),  # neither server nor kubeconfig: ~/.kube/config
        ('in_cluster = true;', None, ["KUBERNETES_SERVICE_HOST"]),
    ]
    if os.geteuid() != 0:  # root reads any file
        cases.append(('kubeconfig = "%s";' % write(os.path.join(d, "secret.yaml"), GOOD, 0),
                      None, ["secret.yaml", "Permission denied"]))
    for cluster, env, want in cases:
        rc, err = kbridge(d, cluster, env)
        check(rc == 2, "%r: exit %d, want 2; stderr:\n%s" % (cluster, rc, err))
        lines = [l for l in err.splitlines() if l.startswith("kbridge: ")]
        check(lines and all(w in lines[-1] for w in want), "%r: want %s in one error line:\n%s" % (cluster, want, err))
        check(not os.path.exists(os.path.join(d, "out.jsonl")), "something started")

run(test)
