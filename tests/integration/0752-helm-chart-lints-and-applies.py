#!/usr/bin/env python3
"""deploy/helm/kbridge passes `helm lint` and renders, for both modes (single: a Deployment of one;
sharded: a StatefulSet plus its headless Service), objects that work together (namespaces, selectors,
referenced ServiceAccount/ConfigMap/Secrets, pod security) and that the real API server accepts with
`--dry-run=server` — the ServiceMonitor and PrometheusRule included, against prometheus-operator's own
CRDs installed into the test API server first. The PrometheusRule's groups pass `promtool check rules`.
The generated kbridge.cfg passes `kbridge --check`, and a sharded pod <release>-kbridge-2 takes index 2.
RBAC follows the configured informers: a cluster-wide informer lands in the ClusterRole, one with
`namespaces` in a Role per namespace, a CRD informer adds get on its CRD (by name), and the API server's
authorizer agrees."""
import base64
import json
import os
import re
import subprocess
import tempfile

from deploycheck import (CHART, HELM_NS as NS, config_with_standins, cross_check, helm, helm_template as template,
                         json_docs, kbridge_check, pod_security)
from kbtest import KBRIDGE, SOURCE, check, ControlPlane, run

CRDS = os.path.join(SOURCE, "tests", "infra", "prometheus-operator-crds.sh")
MONITORING = ["--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
              "--set", "dashboard.enabled=true"]


def test():
    for mode in ("single", "sharded"):
        out = helm("lint", "--strict", CHART, "--set", "mode=" + mode, *MONITORING).stdout
        check("0 chart(s) failed" in out, "helm lint (%s):\n%s" % (mode, out))
    r = helm("template", "rel", CHART, "--kube-version", "1.36.3", "--set", "mode=both", check_rc=False)
    check(r.returncode != 0 and "mode must be single or sharded" in r.stderr, "mode=both accepted: %s" % r.stderr)

    cp = ControlPlane()
    crds = subprocess.run([CRDS], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    check(crds.returncode == 0, "prometheus-operator CRDs: %s" % crds.stderr)
    for f in crds.stdout.split():
        cp.kubectl("apply", "--server-side", "-f", f)
    for crd in ("servicemonitors", "prometheusrules"):
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/%s.monitoring.coreos.com" % crd)
    cp.kubectl("create", "namespace", NS)
    # Pods there must meet the "restricted" Pod Security Standard (the server warns on the dry run otherwise).
    cp.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted",
               "pod-security.kubernetes.io/warn=restricted")

    for mode, workload, host, want in (("single", "Deployment", "rel-kbridge-7d9f-abcde", "replica 0 of 1"),
                                       ("sharded", "StatefulSet", "rel-kbridge-2", "replica 2 of 3")):
        text = template("--set", "mode=" + mode, *MONITORING)
        objs = json_docs(cp.kubectl("create", "--dry-run=client", "-o", "json", "-f", "-", input=text))
        kinds = sorted(o["kind"] for o in objs)
        print("%s: %s" % (mode, ", ".join(kinds)))
        check(workload in kinds and "ServiceMonitor" in kinds and "PrometheusRule" in kinds and
              "NetworkPolicy" in kinds and "PodDisruptionBudget" in kinds, "%s: objects %s" % (mode, kinds))
        if mode == "sharded":
            check(kinds.count("Service") == 2, "sharded: want the Service and the headless one: %s" % kinds)
        bad = cross_check(objs, NS) + pod_security(objs)
        check(not bad, "%s does not work together:\n  %s" % (mode, "\n  ".join(bad)))
        dash = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "rel-kbridge-dashboard")
        with open(os.path.join(CHART, "files", "kbridge-dashboard.json")) as f:
            check(json.loads(dash["data"]["kbridge-dashboard.json"]) == json.load(f), "dashboard ConfigMap differs")
        secrets = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Secret"}
        check(secrets["rel-kbridge-http"]["data"]["token"], "%s: empty HTTP token" % mode)
        check(secrets["rel-kbridge-metrics"]["data"]["token"] not in ("", secrets["rel-kbridge-http"]["data"]["token"]),
              "%s: the scraper's metrics token is empty or the main one" % mode)
        check(secrets["rel-kbridge-tls"]["type"] == "kubernetes.io/tls", "%s: no TLS Secret" % mode)
        # Consumers: the pod label AND a named namespace (by default the release's only).
        peers = next(o for o in objs if o["kind"] == "NetworkPolicy")["spec"]["ingress"][0]["from"]
        consumers = [p for p in peers if p["podSelector"]["matchLabels"].get("kbridge.io/consumer")]
        check(consumers and all(p["namespaceSelector"].get("matchExpressions") == [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [NS]}] for p in consumers),
            "%s: consumers are admitted beyond the release's namespace: %s" % (mode, consumers))
        # The certificate names what clients dial: the ServiceMonitor's serverName, and each shard.
        crt = base64.b64decode(secrets["rel-kbridge-tls"]["data"]["tls.crt"])
        sans = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName"], input=crt,
                              stdout=subprocess.PIPE, check=True).stdout.decode()
        monitor = next(o for o in objs if o["kind"] == "ServiceMonitor")
        names = [monitor["spec"]["endpoints"][0]["tlsConfig"]["serverName"]]
        if mode == "sharded":
            names.append("*.rel-kbridge-shards.%s.svc" % NS)
        for n in names:
            check("DNS:%s" % n in sans, "%s: the certificate does not name %s: %s" % (mode, n, sans))

        r = cp.kubectl("apply", "--dry-run=server", "-f", "-", input=text, check_rc=False)
        check(r.returncode == 0, "%s: kubectl apply --dry-run=server failed:\n%s" % (mode, r.stderr))
        check("Warning" not in r.stderr, "%s: the API server warned:\n%s" % (mode, r.stderr))
        print(r.stdout.strip())

        cfg = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "rel-kbridge")
        summary = kbridge_check(config_with_standins(KBRIDGE, cfg["data"]["kbridge.cfg"]), host)
        check(want in summary, "%s: want %r in:\n%s" % (mode, want, summary))

        rule = next(o for o in objs if o["kind"] == "PrometheusRule")
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"groups": rule["spec"]["groups"]}, f)
        r = subprocess.run(["promtool", "check", "rules", f.name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        with open(os.path.join(SOURCE, "deploy", "prometheus", "kbridge-rules.yaml")) as f:
            n_rules = len(re.findall(r"^\s*- alert: ", f.read(), re.M))
        check(r.returncode == 0 and "%d rules found" % n_rules in r.stdout,
              "PrometheusRule: promtool (want %d rules): %s" % (n_rules, r.stdout))

    # RBAC from the configured informers, applied for real and asked of the authorizer.
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("""config:
  informers:
  - {name: pods, version: v1, resource: pods}
  - {name: deploys, group: apps, version: v1, resource: deployments, namespaces: [team-a, team-b]}
  - {name: widgets, group: example.com, version: v1, resource: widgets}
  sinks: [{name: out, type: file, path: /var/lib/kbridge/out.jsonl}]
  routes: [{informer: pods, sink: out}, {informer: deploys, sink: out}, {informer: widgets, sink: out}]
""")
        values = f.name
    text = template("-f", values)
    objs = json_docs(cp.kubectl("create", "--dry-run=client", "-o", "json", "-f", "-", input=text))
    roles = sorted((o["kind"], o["metadata"].get("namespace", "")) for o in objs if o["kind"] in ("Role", "ClusterRole"))
    check(roles == [("ClusterRole", ""), ("ClusterRole", ""), ("Role", "team-a"), ("Role", "team-b")],
          "roles: %s" % roles)
    for ns in ("team-a", "team-b"):
        cp.kubectl("create", "namespace", ns)
    rbac = [o for o in objs if o["kind"] in ("ServiceAccount", "Role", "ClusterRole", "RoleBinding",
                                             "ClusterRoleBinding")]
    cp.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac}))
    sa = "system:serviceaccount:%s:rel-kbridge" % NS
    for args, want in ((["list", "pods", "--all-namespaces"], "yes"), (["watch", "pods", "-n", "x"], "yes"),
                       (["list", "deployments.apps", "-n", "team-a"], "yes"),
                       (["watch", "deployments.apps", "-n", "team-b"], "yes"),
                       (["list", "deployments.apps", "-n", "team-c"], "no"),
                       (["list", "deployments.apps", "--all-namespaces"], "no"),
                       (["delete", "pods", "-n", "x"], "no"), (["list", "secrets", "-n", NS], "no"),
                       (["list", "configmaps", "-n", NS], "no"),
                       (["get", "customresourcedefinitions.apiextensions.k8s.io/widgets.example.com"], "yes"),
                       (["get", "customresourcedefinitions.apiextensions.k8s.io/gadgets.example.com"], "no"),
                       (["list", "customresourcedefinitions.apiextensions.k8s.io"], "no")):
        r = cp.kubectl("auth", "can-i", *args, "--as", sa, check_rc=False)
        check(r.stdout.strip() == want, "can-i %s: %r, want %s" % (" ".join(args), r.stdout.strip(), want))
    cfg = next(o for o in objs if o["kind"] == "ConfigMap")["data"]["kbridge.cfg"]
    check(re.search(r'namespaces = \[ "team-a", "team-b" \];', cfg), "namespaces not rendered:\n%s" % cfg)
    kbridge_check(config_with_standins(KBRIDGE, cfg), "rel-kbridge-abc")


run(test)
