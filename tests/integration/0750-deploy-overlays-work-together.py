#!/usr/bin/env python3
"""Each kustomize overlay of deploy/kubernetes (single, sharded, ha) renders to objects that work together, and the real
API server accepts them: every namespaced object (the Deployment, the StatefulSet and its headless
Service included) is in namespace kbridge; every selector (workload, Services, PDB, NetworkPolicy) is a
subset of the pod labels; every ServiceAccount, ConfigMap and Secret the pods use is among the objects;
every file the shipped config names (the HTTP token, the scraper's metrics-only token, the TLS pair, the
broker password) is mounted from a Secret that has that key, and no Secret ships a default password
(`change-me`); the HTTP port takes a token and TLS, the probes use HTTPS, and a NetworkPolicy admits
only the scraper and named consumers, each from named namespaces only (consumers: kbridge's own). Then `kubectl apply --dry-run=server -k`
on the real API server, with no warnings. `rbac-rules.sh --help` prints its usage."""
import json
import os
import re
import subprocess

from deploycheck import cross_check, json_docs, pod_security
from kbtest import SOURCE, check, ControlPlane, run

DEPLOY = os.path.join(SOURCE, "deploy", "kubernetes")
NS = "kbridge"


def render(cp, overlay):
    """The overlay's objects as the API sees them before defaults (a list of dicts)."""
    r = subprocess.run(["kubectl", "kustomize", os.path.join(DEPLOY, overlay)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    check(r.returncode == 0, "kubectl kustomize %s: %s" % (overlay, r.stderr))
    # A client-side dry run converts the YAML stream to JSON documents without creating anything.
    return json_docs(cp.kubectl("create", "--dry-run=client", "-o", "json", "-f", "-", input=r.stdout))


def config_files(objs):
    """Every absolute file path the shipped kbridge.cfg names."""
    cm = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kbridge-config"]
    check(len(cm) == 1, "one ConfigMap kbridge-config, got %d" % len(cm))
    text = re.sub(r"#.*", "", cm[0]["data"]["kbridge.cfg"])
    return re.findall(r'"(/etc/[^"]+)"', text), text


def check_files_mounted(objs, overlay):
    """Each file the config names comes from a volume that provides it."""
    paths, text = config_files(objs)
    for key in ("token_file", "tls_cert_file", "tls_key_file"):
        check(re.search(r"\b%s\s*=" % key, text), "%s: the config has no http.%s" % (overlay, key))
    secrets = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Secret"}
    for w in (o for o in objs if o["kind"] in ("Deployment", "StatefulSet")):
        spec = w["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = spec["containers"][0]["volumeMounts"]
        for p in paths:
            if p.startswith("/etc/kbridge/") and p.count("/") == 3:
                continue  # /etc/kbridge/x is the ConfigMap itself
            m = max((m for m in mounts if p.startswith(m["mountPath"].rstrip("/") + "/")),
                    key=lambda m: len(m["mountPath"]), default=None)
            check(m is not None, "%s: %s is not under any volume mount" % (overlay, p))
            key = p[len(m["mountPath"].rstrip("/")) + 1:]
            v = vols[m["name"]]
            check("secret" in v, "%s: %s comes from volume %s, not a Secret" % (overlay, p, m["name"]))
            s = secrets[v["secret"]["secretName"]]
            data = dict(s.get("data", {}), **s.get("stringData", {}))
            check(key in data, "%s: Secret %s has no key %s (for %s)" % (overlay, s["metadata"]["name"], key, p))
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            got = spec["containers"][0][probe]["httpGet"].get("scheme", "HTTP")
            check(got == "HTTPS", "%s: %s is %s but kbridge serves TLS" % (overlay, probe, got))


def check_network_policy(objs, overlay):
    np = [o for o in objs if o["kind"] == "NetworkPolicy"]
    check(len(np) == 1, "%s: want one NetworkPolicy, got %d" % (overlay, len(np)))
    rules = np[0]["spec"]["ingress"]
    peers = [f for r in rules for f in r["from"]]
    check(all("podSelector" in f and f["podSelector"].get("matchLabels") for f in peers),
          "%s: every admitted peer must be named by pod labels: %s" % (overlay, peers))
    check(any(f["podSelector"]["matchLabels"].get("app.kubernetes.io/name") == "prometheus" for f in peers),
          "%s: the scraper is not admitted: %s" % (overlay, peers))
    # A pod label anyone who creates a pod can set: every peer must also be bounded by named namespaces.
    for f in peers:
        ns = f.get("namespaceSelector")
        named = ns and (ns.get("matchLabels", {}).get("kubernetes.io/metadata.name") or
                        any(e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "In" and e["values"]
                            for e in ns.get("matchExpressions", [])))
        check(named, "%s: peer %s is admitted from any namespace" % (overlay, f))
    consumers = [f for f in peers if f["podSelector"]["matchLabels"].get("kbridge.io/consumer")]
    check(consumers and all(e["values"] == [NS] for f in consumers for e in f["namespaceSelector"]["matchExpressions"]),
          "%s: consumers must default to kbridge's own namespace: %s" % (overlay, consumers))


def test():
    r = subprocess.run([os.path.join(DEPLOY, "rbac-rules.sh"), "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    check(r.returncode == 0 and "Usage" not in r.stderr, "rbac-rules.sh --help -> %d %s" % (r.returncode, r.stderr))
    check("rbac-rules.sh [--name NAME] RESOURCE" in r.stdout and "kind:" not in r.stdout,
          "rbac-rules.sh --help must print usage, printed:\n%s" % r.stdout)
    r = subprocess.run([os.path.join(DEPLOY, "rbac-rules.sh"), "--nmae", "x", "pods"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    check(r.returncode == 2 and r.stdout == "", "an unknown option must be refused, got %d:\n%s" % (r.returncode,
                                                                                                  r.stdout))

    cp = ControlPlane()
    for overlay in ("single", "sharded", "ha"):
        objs = render(cp, overlay)
        kinds = sorted({o["kind"] for o in objs})
        print("%s: %d objects: %s" % (overlay, len(objs), ", ".join(kinds)))
        bad = cross_check(objs, NS) + pod_security(objs)
        check(not bad, "%s does not work together:\n  %s" % (overlay, "\n  ".join(bad)))
        check_files_mounted(objs, overlay)
        check("change-me" not in json.dumps(objs), "%s: a default credential (change-me) is shipped" % overlay)
        _, text = config_files(objs)
        check(re.search(r"\bmetrics_token_file\s*=", text), "%s: no http.metrics_token_file for the scraper" % overlay)
        check_network_policy(objs, overlay)

    cp.kubectl("apply", "-f", os.path.join(DEPLOY, "base", "namespace.yaml"))
    for overlay in ("single", "sharded", "ha"):
        r = cp.kubectl("apply", "--dry-run=server", "-k", os.path.join(DEPLOY, overlay), check_rc=False)
        check(r.returncode == 0, "%s: kubectl apply --dry-run=server failed:\n%s" % (overlay, r.stderr))
        check("Warning" not in r.stderr, "%s: the API server warned:\n%s" % (overlay, r.stderr))
        for obj in ("networkpolicy.networking.k8s.io/kbridge", "secret/kbridge-http", "secret/kbridge-tls",
                    "service/kbridge", "poddisruptionbudget.policy/kbridge"):
            check(obj in r.stdout, "%s: %s missing from:\n%s" % (overlay, obj, r.stdout))


run(test)
