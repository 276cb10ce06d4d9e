#!/usr/bin/env python3
"""Every query of the Grafana dashboard (deploy/grafana/kbridge-dashboard.json) returns data from a
real Prometheus (Debian's, on 127.0.0.1) scraping two kbridge shards (with the bearer token, as the
deployment does) while kubesim churns pods: each panel's expressions, with Grafana's variables filled
in, give at least one series with a number through Prometheus' HTTP API, and the `pod` variable lists
both shards. The same Prometheus loads the alert rules and evaluates every one without error.
A query whose metrics these shards do not export (the HA metrics exist only with ha.enabled) is listed
and must come back empty — never faked; once the metric is exported, it must return data."""
import atexit
import json
import math
import os
import re
import subprocess
import tempfile
import threading
import urllib.parse
import urllib.request

from kbtest import SOURCE, Bridge, Sim, check, http_request, pod_ops, run, wait_for

DASHBOARD = os.path.join(SOURCE, "deploy", "grafana", "kbridge-dashboard.json")
RULES = os.path.join(SOURCE, "deploy", "prometheus", "kbridge-rules.yaml")
PROMETHEUS_SH = os.path.join(SOURCE, "tests", "infra", "prometheus.sh")
# Metrics these shards do not export: the panel's query stays empty here.
PENDING = {"kbridge_ha_leader": "only with ha.enabled; these shards run without"}
TOKEN = "scrape-t0ken"


class Prometheus:
    def __init__(self, targets, token_file):
        self.dir = tempfile.mkdtemp(prefix="kbtest-prom-")
        cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
               "rule_files": [RULES],
               "scrape_configs": [{"job_name": "kbridge", "authorization": {"credentials_file": token_file},
                                   "static_configs": [{"targets": [t], "labels": {"pod": pod, "namespace": "kbridge"}}
                                                      for pod, t in targets]}]}
        path = os.path.join(self.dir, "prometheus.yml")
        with open(path, "w") as f:
            json.dump(cfg, f)  # JSON is YAML
        atexit.register(self.stop)
        r = subprocess.run([PROMETHEUS_SH, "start", self.dir, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=60)
        check(r.returncode == 0, "prometheus.sh start: %s" % r.stderr)
        self.url = "http://127.0.0.1:%s" % dict(l.split("=", 1) for l in r.stdout.split())["PORT"]

    def stop(self):
        subprocess.run([PROMETHEUS_SH, "stop", self.dir], timeout=30)

    def api(self, path, **params):
        url = self.url + path + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        check(body["status"] == "success", "%s: %s" % (path, body))
        return body["data"]

    def query(self, expr):
        return self.api("/api/v1/query", query=expr)["result"]


def grafana_expr(expr):
    """The query as Grafana sends it with pod = All and a rate interval of a few scrapes."""
    return expr.replace("$__rate_interval", "15s").replace('"$pod"', '".*"')


def numbers(result):
    return [float(s["value"][1]) for s in result if not math.isnan(float(s["value"][1]))]


def test():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    targets = [(p["title"], t["expr"]) for p in dash["panels"] if p["type"] != "row" for t in p["targets"]]
    check(len(targets) >= 15, "the dashboard has %d queries" % len(targets))
    titles = " | ".join(p["title"] for p in dash["panels"])
    for want in ("synced", "Events/s by type", "Queue depth per shard", "Checkpoint lag", "Sink delivery latency",
                 "dead letters", "Audit drift", "API-server requests", "Sinks stopped", "HA leader",
                 "Scrape targets up"):
        check(want in titles, "no panel %r in: %s" % (want, titles))
    check(any(p["type"] == "heatmap" and "shard" in p["title"] for p in dash["panels"]), "no per-shard heatmap")

    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(60)]))
    work = tempfile.mkdtemp(prefix="kbtest-dash-")
    token_file = os.path.join(work, "token")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")
    shards = []
    for i in range(2):
        d = os.path.join(work, "shard%d" % i)
        os.mkdir(d)
        # Paged lists: the API-server latency panel times lists and gets, and a streamed list is a watch.
        shards.append(Bridge(sim, workdir=d, http='listen = "127.0.0.1:0"; token_file = "%s";' % token_file,
                             informers=['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; '
                                        'list_mode = "paged"; }'],
                             extra='state_dir = "%s/state";\nsharding = { replicas = 2; index = %d; };' % (d, i)))
    urls = [b.http_url() for b in shards]
    code, _, body = http_request(urls[0] + "/metrics", token=TOKEN)
    check(code == 200, "/metrics with the token -> %d" % code)
    check(http_request(urls[0] + "/metrics")[0] == 401, "/metrics without the token must be refused")

    prom = Prometheus([("kbridge-%d" % i, u.split("//", 1)[1]) for i, u in enumerate(urls)], token_file)
    # Ready is not scraped: the churn starts once both shards have been scraped with the token.
    wait_for(lambda: [s["value"][1] for s in prom.query("up")] == ["1", "1"], 90, 0.2, "both shards scraped")

    # Churn: rounds of updates, creates and deletes while Prometheus scrapes, on until every query has been
    # asked (a rate over 15 s of a bridge gone quiet is no data); watches end now and then (new API
    # requests) and once with 410 Gone (a relist).
    done = threading.Event()
    rounds = [0]

    def churn():
        rnd = 0
        while not done.is_set():
            names = ["p%03d" % ((rnd * 7 + k) % 60) for k in range(10)]
            sim.bulk(pod_ops("update", "ns1", names, labels={"round": str(rnd)}) +
                     pod_ops("create", "ns2", ["c%05d" % rnd]) +
                     (pod_ops("delete", "ns2", ["c%05d" % (rnd - 3)]) if rnd >= 3 else []))
            if rnd % 5 == 4:
                sim.fault(kind="end_watches")  # as a server timeout does: new watch requests
            if rnd == 10:
                sim.fault(kind="watch_error", code=410)  # compaction: one relist per shard
            rnd += 1
            rounds[0] = rnd
            done.wait(0.25)
    churner = threading.Thread(target=churn, daemon=True)
    churner.start()
    try:
        check_queries(prom, targets, urls[0], rounds)
    finally:
        done.set()
        churner.join(60)
    for b in shards:
        b.stop()
    sim.stop()


def check_queries(prom, targets, url, rounds):
    wait_for(lambda: rounds[0] >= 20 and numbers(prom.query('rate(kbridge_watch_events_total{type="MODIFIED"}[15s])')),
             120, 0.5, "20 rounds of churn and their rate in Prometheus")
    print("churn: %d rounds so far" % rounds[0])

    # What the shard exports, read after the churn (a request counter has rows once a request ended; a
    # labelled counter has no series until it first counts: kbridge_sink_refused_total{sink,reason}).
    body = http_request(url + "/metrics", token=TOKEN)[2]
    exported = set(re.findall(r"^# TYPE (\S+) ", body.decode(), re.M))
    sampled = set(re.findall(r"^([a-z_]+?)(?:_bucket|_sum|_count)?[{ ]", body.decode(), re.M))

    pods = prom.api("/api/v1/label/pod/values", **{"match[]": "kbridge_info"})
    check(sorted(pods) == ["kbridge-0", "kbridge-1"], "the pod variable lists %s" % pods)

    pending, answered = [], 0
    for title, expr in targets:
        q = grafana_expr(expr)
        names = set(re.findall(r"\b((?:kbridge|process)_[a-z_]+?)(?:_bucket)?\b(?=\s*[{\[)])", q))
        missing = {n for n in names if n not in exported and n.replace("_bucket", "") not in exported}
        if missing:
            check(missing <= set(PENDING), "panel %r reads %s, which kbridge does not export" % (title, missing))
            res = prom.query(q)
            check(not res, "panel %r: %s is not exported yet the query answered %s" % (title, missing, res))
            pending.append("%s: %s" % (title, ", ".join("%s (%s)" % (m, PENDING[m]) for m in sorted(missing))))
            continue

        quiet = {n for n in names if n in exported and n not in sampled}
        if quiet and names <= quiet | {"up"}:
            check(not prom.query(q), "panel %r answered though %s has no series" % (title, quiet))
            print("quiet %-30s %s has no series until the first one counts" % (title[:30], ", ".join(sorted(quiet))))
            answered += 1
            continue

        def data():
            r = prom.query(q)
            return numbers(r) and r
        res = wait_for(data, 90, 0.5, "panel %r to return data: %s" % (title, q))
        answered += 1
        print("ok  %-32s %2d series  %s" % (title[:32], len(res), q[:90]))
    for p in pending:
        print("PENDING (metric not exported here) %s" % p)
    check(answered >= len(targets) - len(PENDING), "only %d of %d queries answered" % (answered, len(targets)))

    heat = prom.query(grafana_expr(next(e for t, e in targets if "shard" in t)))
    check(sorted(s["metric"]["pod"] for s in heat) == ["kbridge-0", "kbridge-1"], "heatmap rows: %s" % heat)

    with open(RULES) as f:
        n_rules = len(re.findall(r"^\s*- alert: ", f.read(), re.M))

    def rules_evaluated():
        groups = prom.api("/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return len(rules) == n_rules and all(r.get("lastEvaluation", "").startswith("2") and
                                       not r["lastEvaluation"].startswith("0001") for r in rules) and rules
    rules = wait_for(rules_evaluated, 90, 0.5, "Prometheus to evaluate the %d alert rules" % n_rules)
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    check(not bad, "rules that Prometheus cannot evaluate: %s" % bad)
    firing = [r["name"] for r in rules if r.get("state") == "firing"]
    check(not firing, "alerts firing on a healthy bridge: %s" % firing)


run(test)
