#!/usr/bin/env python3
"""GitOps (Argo CD renders with `helm template`, where `lookup` finds nothing): with the HTTP token,
the scraper's metrics-only token, the TLS pair and the broker credentials named as existing Secrets
(http.existingTokenSecret, http.existingMetricsTokenSecret, http.tls.existingSecret,
brokerSecret.existingSecret), two renders of the chart are byte-identical, in
both modes, create no Secret and reference the given names (the pod's volumes, the ServiceMonitor's
bearer token and CA). Without them every render makes a new token and certificate (checked too: that
is the drift the values avoid). Only `helm template`: no cluster needed."""
import yaml

from deploycheck import helm_template
from kbtest import check, run

EXISTING = ["--set", "http.existingTokenSecret=gitops-token", "--set", "http.tls.existingSecret=gitops-tls",
            "--set", "brokerSecret.existingSecret=gitops-broker",
            "--set", "http.existingMetricsTokenSecret=gitops-metrics"]


def render(*args):
    return helm_template("--set", "serviceMonitor.enabled=true", *args)


def test():
    for mode in ("single", "sharded"):
        first, second = (render("--set", "mode=" + mode, *EXISTING) for _ in range(2))
        check(first == second, "%s: two renders with existing Secrets differ" % mode)
        objs = [o for o in yaml.safe_load_all(first) if o]
        secrets = [o["metadata"]["name"] for o in objs if o["kind"] == "Secret"]
        check(not secrets, "%s: the chart still creates Secrets %s" % (mode, secrets))
        w = next(o for o in objs if o["kind"] in ("Deployment", "StatefulSet"))
        vols = {v["name"]: v.get("secret", {}).get("secretName") for v in w["spec"]["template"]["spec"]["volumes"]}
        check(vols["http-token"] == "gitops-token" and vols["tls"] == "gitops-tls" and vols["broker"] == "gitops-broker"
              and vols["metrics-token"] == "gitops-metrics",
              "%s: the pod mounts %s" % (mode, vols))
        ep = next(o for o in objs if o["kind"] == "ServiceMonitor")["spec"]["endpoints"][0]
        # Prometheus holds the metrics-only token, never the one that reads every object.
        check(ep["authorization"]["credentials"]["name"] == "gitops-metrics" and
              ep["tlsConfig"]["ca"]["secret"]["name"] == "gitops-tls", "%s: the ServiceMonitor reads %s" % (mode, ep))
        print("%s: %d objects, identical, Secrets referenced: %s" % (mode, len(objs), vols))
    # Without them (and without a cluster to look up), each render generates anew.
    check(render() != render(), "renders without existing Secrets are identical: the test no longer shows drift")


run(test)
