#!/usr/bin/env python3
"""The Helm chart's ServiceMonitor scrapes every kbridge pod exactly once, in both modes (and with
ha.enabled): for each pod the workloads make, exactly one (Service, port) pair that the ServiceMonitor
selects — a Service in its namespaceSelector with its matchLabels, holding a port named as its
endpoint's — also selects that pod. Sharded, the Service and the headless per-shard Service both select
every shard; before, both carried the ServiceMonitor's labels and a port `http`, so each shard was
scraped twice and the dashboard's sums doubled. Only `helm template`: no cluster needed."""
import yaml

from deploycheck import helm_template
from kbtest import check, run


def render(*args):
    return [o for o in yaml.safe_load_all(helm_template("--set", "serviceMonitor.enabled=true", *args)) if o]


def subset(want, labels):
    return bool(want) and all(labels.get(k) == v for k, v in want.items())


def pods(objs):
    """(pod name, labels) of every pod the Deployments and StatefulSets make."""
    out = []
    for w in (o for o in objs if o["kind"] in ("Deployment", "StatefulSet")):
        labels = w["spec"]["template"]["metadata"]["labels"]
        for i in range(w["spec"].get("replicas", 1)):
            out.append(("%s-%s" % (w["metadata"]["name"], i if w["kind"] == "StatefulSet" else "x%d" % i), labels))
    return out


def scrapes(objs):
    """{pod: [(Service, port)] the ServiceMonitor scrapes it through}."""
    mons = [o for o in objs if o["kind"] == "ServiceMonitor"]
    check(len(mons) == 1, "want one ServiceMonitor, got %d" % len(mons))
    spec = mons[0]["spec"]
    check(set(spec["selector"]) == {"matchLabels"}, "the test reads matchLabels only: %s" % spec["selector"])
    namespaces = spec["namespaceSelector"]["matchNames"]
    ports = {e["port"] for e in spec["endpoints"]}
    got = {}
    for name, labels in pods(objs):
        got[name] = [(s["metadata"]["name"], p["name"]) for s in objs if s["kind"] == "Service"
                     and s["metadata"]["namespace"] in namespaces
                     and subset(spec["selector"]["matchLabels"], s["metadata"].get("labels", {}))
                     and subset(s["spec"].get("selector", {}), labels)
                     for p in s["spec"]["ports"] if p.get("name") in ports]
    return got


def test():
    for mode, ha, want_pods in (("single", "false", 1), ("sharded", "false", 3),
                                ("single", "true", 2), ("sharded", "true", 6)):
        objs = render("--set", "mode=" + mode, "--set", "shards=3", "--set", "ha.enabled=" + ha)
        got = scrapes(objs)
        print("%s ha=%s: %s" % (mode, ha, got))
        check(len(got) == want_pods, "%s ha=%s: want %d pods, got %s" % (mode, ha, want_pods, sorted(got)))
        for pod, pairs in got.items():
            check(len(pairs) == 1, "%s ha=%s: pod %s is scraped through %d (Service, port) pairs, want 1: %s"
                  % (mode, ha, pod, len(pairs), pairs))


run(test)
