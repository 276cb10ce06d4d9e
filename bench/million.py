#!/usr/bin/env python3
"""Benchmark (not a test): one million Pods into kbridge and into client-go, side by side.

Why one feed for all: the figures compare clients, so every client reads the
same bytes from the same server, and the server (bench/bench_feed, the Pods
and events pre-serialized in memory, written with writev) is measured alone
first to show it is not the bottleneck.

Each client runs alone (one at a time: the feed and a client-go cache of a
million Pods do not fit beside each other on a small box):
  kbridge              file sink to /dev/null, no state_dir
  kbridge+state_dir    the same with state_dir (on /var/tmp)
  client-go            a typed Pod SharedIndexInformer (tests/clientgo "bench")
  client-go+transform  the same with SetTransform dropping managedFields

Per client: time to synced (and the CPU it took); peak RSS (VmHWM) and steady RSS (VmRSS, after
the initial objects are handled) during the sync; RSS after the watch
events; bytes per cached object ((steady RSS - RSS of the same client with an
empty feed) / objects; for kbridge also its own cacheBytes / objects); watch
events/s and CPU us per event (utime+stime over the watch phase / events);
and a labelled query's latency (kbridge: GET /v1/snapshot/pods?labelSelector=
over HTTP; client-go: the lister's List(selector) timed in-process).

Usage:
  bench/million.py --kbridge build/kbridge [--feed build/bench/bench_feed]
                   [--clientgo PATH] [--pods 1000000] [--events 200000]
                   [--quick] [--paged] [--apiserver] [--only kbridge,kbridge+state_dir,client-go,client-go+transform]
                   [--perf DIR]
--quick is 20,000 Pods and 5,000 events. --pods takes a comma list
(100000,1000000): each size gets its own feed, one after the other, and its
own columns in one table, so the cost per change can be compared across
cache sizes from one run. --perf records each kbridge's watch phase with
perf record -g into DIR/perf-<client>-<pods>.data. --apiserver creates the feed's Pods
in a private kube-apiserver (tests/infra/controlplane.sh; etcd's 2 GB quota
holds a few hundred thousand of them) and compares the clients' sync from it (no
watch events). Before the feed and before each
client the free memory (MemAvailable) is checked against an estimate; a
client that would not fit is skipped and says so.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from pipeline import cpu_seconds, status_kb, wait
SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERY_APP = "cart-3"  # one of the feed's 100 app values (about 1 % of the Pods)
# Estimated resident bytes per Pod, to refuse a run that would not fit (client-go:
# its RSS grows by half during the watch events, as garbage of replaced objects).
EST_FEED = 4200  # the feed's own copy: ~4 KB per Pod or event
EST_CLIENT = {"kbridge": 5000, "kbridge+state_dir": 2000, "client-go": 18000, "client-go+transform": 16000}


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http(url, body=None, timeout=60):
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def tail(path, n=3000):
    with open(path, errors="replace") as f:
        return f.read()[-n:]


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ClientDied(Exception):
    pass


class Feed:
    """A bench_feed process: N Pods, M events, on a free loopback port."""
    kubeconfig = None

    def __init__(self, exe, pods, events):
        self.proc = subprocess.Popen([exe, "--pods", str(pods), "--events", str(events)], stdout=subprocess.PIPE,
                                     stderr=open(os.environ.get("KB_FEED_LOG", os.devnull), "a"), text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening "):
            raise SystemExit("bench_feed did not start: %r (exit %s)" % (line, self.proc.poll()))
        self.url = "http://" + line.split()[1]
        self.info = json.loads(http(self.url + "/_feed/stats"))

    def release(self, on):
        http(self.url + ("/_feed/release" if on else "/_feed/hold"), b"")

    def close(self):
        stop(self.proc)


class ApiServer:
    """A private kube-apiserver + etcd (tests/infra/controlplane.sh) holding the
    feed's Pods, created over a few keep-alive connections. No watch events:
    only the sync is compared."""

    def __init__(self, feed, threads=4):
        self.dir = tempfile.mkdtemp(prefix="kbbench-cp-")
        self.envs = dict(os.environ, KB_CONTROLPLANE_DIR=self.dir)
        r = subprocess.run([os.path.join(SOURCE, "tests", "infra", "controlplane.sh"), "start"], env=self.envs,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1800)
        if r.returncode:
            raise SystemExit("controlplane.sh start failed:\n" + r.stderr[-3000:])
        env = dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l)
        self.kubeconfig, self.ca, self.token = env["KB_K8S_KUBECONFIG"], env["KB_K8S_CA"], env["KB_K8S_ADMIN_TOKEN"]
        self.host, self.port = env["KB_K8S_SERVER"][len("https://"):].rsplit(":", 1)
        self.version = env.get("KB_K8S_VERSION", "?")
        t = time.monotonic()
        self.fill(feed, threads)
        self.fill_s = time.monotonic() - t
        self.info = {"pods": feed.info["pods"], "events": 0, "final": feed.info["pods"]}

    def _conn(self):
        import http.client
        import ssl
        return http.client.HTTPSConnection(self.host, int(self.port), timeout=120,
                                           context=ssl.create_default_context(cafile=self.ca))

    def _post(self, conn, path, obj):
        conn.request("POST", path, json.dumps(obj), {"Authorization": "Bearer " + self.token,
                                                     "Content-Type": "application/json"})
        r = conn.getresponse()
        body = r.read()
        if r.status not in (200, 201, 409):
            raise SystemExit("POST %s: HTTP %d %s" % (path, r.status, body[:300]))

    def fill(self, feed, threads):
        """Each Pod as the feed has it, less what the server sets (uid, resourceVersion, times,
        managedFields, status); one ServiceAccount per namespace."""
        import threading
        pods = json.loads(http(feed.url + "/api/v1/pods", timeout=600))["items"]
        conn = self._conn()
        for ns in sorted({p["metadata"]["namespace"] for p in pods}):
            self._post(conn, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            self._post(conn, "/api/v1/namespaces/%s/serviceaccounts" % ns,
                       {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
        for p in pods:
            md = p["metadata"]
            for k in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generateName"):
                md.pop(k, None)
            p.pop("status", None)
            p["spec"]["serviceAccountName"] = "default"
        errors = []

        def worker(i):
            try:
                c = self._conn()
                for p in pods[i::threads]:
                    self._post(c, "/api/v1/namespaces/%s/pods" % p["metadata"]["namespace"], p)
            except (OSError, SystemExit) as e:
                errors.append(str(e))

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise SystemExit("filling the API server: " + errors[0])

    def release(self, on):
        pass

    def close(self):
        subprocess.run([os.path.join(SOURCE, "tests", "infra", "controlplane.sh"), "clean"], env=self.envs,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        shutil.rmtree(self.dir, ignore_errors=True)


def measure_feed(feed):
    """The server alone, read by curl into /dev/null: a full list, and a
    streamed list with every event after it."""
    if not shutil.which("curl"):
        return "curl not installed: the feed's own rate is not measured"
    out = []
    for what, path, items, size in (
            ("list", "/api/v1/pods", feed.info["pods"], feed.info["podBytes"]),
            ("streamed list + events", "/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersionMatch="
             "NotOlderThan&allowWatchBookmarks=true&_end=1", feed.info["pods"] + feed.info["events"],
             feed.info["podBytes"] + feed.info["eventBytes"])):
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{size_download} %{time_total}", feed.url + path],
                           stdout=subprocess.PIPE, text=True, timeout=600)
        got, secs = r.stdout.split()
        secs = float(secs)
        out.append("%s %.0f MB in %.2f s = %.0f MB/s, %.0f objects/s" %
                   (what, int(got) / 1e6, secs, int(got) / 1e6 / secs, items / secs))
    return "feed alone (curl > /dev/null): " + "; ".join(out)


class Kbridge:
    def __init__(self, exe, source, work, state, paged):
        self.port = free_port()
        self.api = "http://127.0.0.1:%d" % self.port
        cfg = os.path.join(work, "kbridge.cfg")
        with open(cfg, "w") as f:
            if source.kubeconfig:
                f.write('cluster = { name = "bench"; kubeconfig = "%s"; };\n' % source.kubeconfig)
            else:
                f.write('cluster = { name = "bench"; server = "%s"; };\n' % source.url)
            f.write('http = { listen = "127.0.0.1:%d"; };\n' % self.port)
            # index_labels: the labelled query's key, as a user who runs such queries would configure it.
            f.write('informers = ( { name = "pods"; version = "v1"; resource = "pods"; list_mode = "%s"; '
                    'index_labels = ["app"]; } );\n' % ("paged" if paged else "auto"))
            f.write('sinks = ( { name = "out"; type = "file"; path = "/dev/null"; } );\n')
            f.write('routes = ( { informer = "pods"; sink = "out"; } );\n')
            if state:
                f.write('state_dir = "%s";\n' % state)
        self.log = open(os.path.join(work, "kbridge.log"), "w")
        self.proc = subprocess.Popen([exe, "--config", cfg], stdout=self.log, stderr=self.log)
        self.pid = self.proc.pid

    def status(self):
        try:
            return json.loads(http(self.api + "/v1/informers", timeout=30))["informers"][0]
        except (OSError, ValueError, KeyError, IndexError):
            return None

    def _delivered(self, s):
        return s and s.get("pendingDeltas", 0) == 0 and all(k["watermark"] >= s.get("seq", 0)
                                                             for k in s.get("sinks", []))

    def synced(self):
        s = self.status()
        return bool(s and s["synced"])

    def settled(self, expect_objects):
        s = self.status()
        return bool(s and s["synced"] and s["objects"] == expect_objects and self._delivered(s))

    def watch_done(self, last_rv, final_objects):
        s = self.status()
        return bool(s and s["resourceVersion"] == str(last_rv) and s["objects"] == final_objects and self._delivered(s))

    def cache(self):
        s = self.status() or {}
        return s.get("cacheBytes"), s.get("objects"), None

    def query(self, selector, repeat=5):
        times, n = [], 0
        for _ in range(repeat):
            t = time.monotonic()
            body = http(self.api + "/v1/snapshot/pods?labelSelector=" + selector, timeout=300)
            times.append((time.monotonic() - t) * 1000)
            n = len(json.loads(body)["items"])
        return statistics.median(times), n

    def close(self):
        stop(self.proc)
        self.log.close()


class ClientGo:
    def __init__(self, exe, source, work, transform, paged):
        kc = source.kubeconfig or os.path.join(work, "kubeconfig")
        if not source.kubeconfig:
            with open(kc, "w") as f:
                f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\n"
                        "contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n"
                        "users:\n- name: u\n  user: {}\n" % source.url)
        self.log = open(os.path.join(work, "clientgo.log"), "w")
        env = dict(os.environ, KUBE_FEATURE_WatchListClient="false" if paged else "true")
        self.proc = subprocess.Popen([exe, "bench", "--kubeconfig", kc] + (["--transform"] if transform else []),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
        self.pid = self.proc.pid

    def ask(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise ClientDied("kbclientgo exited (%s); its log:\n%s" % (self.proc.wait(), tail(self.log.name)))
        return json.loads(line)

    def synced(self):
        return self.ask("stats")["synced"]

    # Handler calls are counted (cheap to ask); the store's size is asked once
    # the counts say done, so polling costs client-go next to nothing.
    def settled(self, expect_objects):
        s = self.ask("stats")
        return s["synced"] and s["adds"] >= expect_objects and self.ask("objects")["objects"] == expect_objects

    def watch_done(self, last_rv, final_objects):
        s = self.ask("stats")
        return (s["adds"] + s["updates"] + s["deletes"] >= self.expect_handled and
                self.ask("objects")["objects"] == final_objects)

    def cache(self):
        o = self.ask("objects")
        return None, o["objects"], o["heapInuse"]

    def query(self, selector, repeat=5):
        r = self.ask("query %s %d" % (selector, repeat))
        return r["ms"], r["matched"]

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                stop(self.proc)
        self.log.close()


def start_client(name, a, source, work):
    if name.startswith("kbridge"):
        state = None
        if name == "kbridge+state_dir":
            state = tempfile.mkdtemp(prefix="kbbench-state-", dir=a.state_parent)
        c = Kbridge(a.kbridge, source, work, state, a.paged)
        c.state = state
        c.name = name
        return c
    c = ClientGo(a.clientgo, source, work, name == "client-go+transform", a.paged)
    c.state = None
    return c


def empty_rss(name, a, empty_feed):
    """VmRSS of the client synced on a feed of two Pods: its fixed cost."""
    work = tempfile.mkdtemp(prefix="kbbench-empty-")
    c = start_client(name, a, empty_feed, work)
    try:
        wait(lambda: c.synced(), 120, 0.1)
        time.sleep(a.settle)
        return status_kb(c.pid, "VmRSS") * 1024, status_kb(c.pid, "RssAnon") * 1024
    finally:
        c.close()
        if c.state:
            shutil.rmtree(c.state, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def run_client(name, a, feed, empty_feed):
    """One client's whole run: sync, settle, query, watch phase. A dict of figures."""
    n, m = feed.info["pods"], feed.info["events"]
    need = EST_CLIENT[name] * max(n, feed.info["final"]) + (1 << 30)
    if mem_available() < need:
        return {"skipped": "needs about %.1f GB free, MemAvailable is %.1f GB" % (need / 1e9, mem_available() / 1e9)}
    base, base_anon = empty_rss(name, a, empty_feed)
    feed.release(False)
    work = tempfile.mkdtemp(prefix="kbbench-")
    t0 = time.monotonic()
    c = start_client(name, a, feed, work)
    c.expect_handled = n + m
    r = {"empty_rss": base, "empty_anon": base_anon}
    try:
        return measure_client(c, r, a, feed, t0)
    except ClientDied as e:
        return {"skipped": str(e)}
    finally:
        try:
            feed.release(False)
        except OSError:
            pass  # the feed died: say nothing here, stop the client all the same
        c.close()
        if c.state:
            shutil.rmtree(c.state, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def switches(pid):
    """Context switches (voluntary and not) of all the threads of pid so far: what perf's cpu-clock
    samples in the scheduler stand for."""
    return sum(v + nv for v, nv in switches_by_thread(pid).values())


def switches_by_thread(pid):
    """{thread name: [voluntary, involuntary] switches so far}, threads of one name summed."""
    out = {}
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, t)) as f:
                st = dict(l.split(":", 1) for l in f if ":" in l)
        except OSError:
            continue  # the thread ended
        v = out.setdefault(st["Name"].strip(), [0, 0])
        v[0] += int(st["voluntary_ctxt_switches"])
        v[1] += int(st["nonvoluntary_ctxt_switches"])
    return out


def minflt(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def start_perf(a, c, n):
    """perf record -g on the client over its watch phase (--perf), or None."""
    if not a.perf or not isinstance(c, Kbridge):
        return None
    os.makedirs(a.perf, exist_ok=True)
    out = os.path.join(a.perf, "perf-%s-%d.data" % (c.name, n))
    p = subprocess.Popen(["perf", "record", "-q", "-g", "-F", "999", "-p", str(c.pid), "-o", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # perf attaches before the events flow
    return p


def measure_client(c, r, a, feed, t0):
    """Sync, settle, query, watch phase of the started client c: r filled in."""
    n, m, final = feed.info["pods"], feed.info["events"], feed.info["final"]
    if not wait(lambda: c.synced(), a.timeout, 0.05):
        return {"skipped": "not synced within %d s; its log:\n%s" % (a.timeout, tail(c.log.name))}
    r["synced_s"] = time.monotonic() - t0
    r["sync_cpu"] = cpu_seconds(c.pid)  # from the start: the sync's CPU, which a busy machine does not inflate much
    if not wait(lambda: c.settled(n), a.timeout, 0.05):
        return {"skipped": "initial objects not all handled within %d s" % a.timeout}
    r["settled_s"] = time.monotonic() - t0
    time.sleep(a.settle)
    r["rss_synced"] = status_kb(c.pid, "VmRSS") * 1024
    r["hwm_synced"] = status_kb(c.pid, "VmHWM") * 1024
    r["anon_synced"] = status_kb(c.pid, "RssAnon") * 1024
    r["per_obj"] = (r["rss_synced"] - r["empty_rss"]) / n
    r["anon_per_obj"] = (r["anon_synced"] - r["empty_anon"]) / n
    cb, objs, heap = c.cache()
    r["cache_per_obj"] = cb / objs if cb and objs else None
    r["heap_per_obj"] = heap / objs if heap and objs else None
    r["q_ms"], r["q_n"] = c.query("app=" + QUERY_APP)
    r["q0_ms"], r["q0_n"] = c.query("app=absent")
    if m == 0:
        return r
    perf = start_perf(a, c, n)
    sw0, flt0, swt0 = switches(c.pid), minflt(c.pid), switches_by_thread(c.pid)
    cpu0 = cpu_seconds(c.pid)
    t1 = time.monotonic()
    feed.release(True)
    ok = wait(lambda: c.watch_done(n + m, final), a.timeout, 0.05)
    r["watch_s"] = time.monotonic() - t1
    r["watch_cpu"] = cpu_seconds(c.pid) - cpu0
    r["watch_switches"] = switches(c.pid) - sw0
    r["watch_switches_by_thread"] = {k: [v[0] - swt0.get(k, [0, 0])[0], v[1] - swt0.get(k, [0, 0])[1]]
                                     for k, v in switches_by_thread(c.pid).items()}
    r["watch_minflt"] = minflt(c.pid) - flt0
    if perf:
        perf.send_signal(signal.SIGINT)
        perf.wait(120)
    r["watch_ok"] = ok
    time.sleep(a.settle)
    r["rss_after"] = status_kb(c.pid, "VmRSS") * 1024
    r["hwm_after"] = status_kb(c.pid, "VmHWM") * 1024
    return r


def fmt_table(results, sizes, m):
    """results: {(client, pods): figures}; one column each, one row per measure."""
    names = list(results)
    mib = lambda v: "%.0f MiB" % (v / 2**20)
    scale = max(sizes) / 1e6
    cg = {k[1]: results[k].get("per_obj") for k in names if k[0] == "client-go" and "per_obj" in results[k]}
    rows = [
        ("time to synced", lambda r: "%.1f s" % r["synced_s"],
         "≤ 30 s at 1M Pods (%.1f s pro rata)" % (30 * scale)),
        ("… all initial objects handled", lambda r: "%.1f s" % r["settled_s"], "—"),
        ("… CPU until synced (utime+stime)", lambda r: "%.1f s" % r["sync_cpu"], "—"),
        ("peak RSS during sync (VmHWM)", lambda r: mib(r["hwm_synced"]), "—"),
        ("steady RSS after sync (VmRSS)", lambda r: mib(r["rss_synced"]), "—"),
        ("peak ÷ steady", lambda r: "%.2f" % (r["hwm_synced"] / r["rss_synced"]), "≤ 1.2"),
        ("RSS of an empty run", lambda r: mib(r["empty_rss"]), "—"),
        ("bytes per cached object (RSS)", lambda r: "%.0f B" % r["per_obj"], "≤ 1 KB (kbridge, no state_dir)"),
        ("… ÷ client-go's (no transform)", lambda r: "%.3f" % (r["per_obj"] / cg[r["pods"]]) if cg.get(r["pods"])
         else "—", "≤ 0.1"),
        ("… anonymous RSS only (RssAnon)", lambda r: "%.0f B" % r["anon_per_obj"], "—"),
        ("kbridge cacheBytes ÷ objects", lambda r: "%.0f B" % r["cache_per_obj"] if r.get("cache_per_obj") else "—",
         "—"),
        ("Go heap in use ÷ objects", lambda r: "%.0f B" % r["heap_per_obj"] if r.get("heap_per_obj") else "—",
         "—"),
        ("RSS after the watch events", lambda r: mib(r["rss_after"]), "—"),
        ("peak RSS over the run", lambda r: mib(r["hwm_after"]), "—"),
        ("watch events/s", lambda r: "%.0f%s" % (m / r["watch_s"], "" if r["watch_ok"] else " (INCOMPLETE)"), "—"),
        ("CPU µs per event", lambda r: "%.1f" % (r["watch_cpu"] * 1e6 / m), "≤ 25 at 1M, within 15 % of 100k's"),
        ("… context switches per event", lambda r: "%.2f" % (r["watch_switches"] / m), "—"),
        ("… minor page faults per event", lambda r: "%.2f" % (r["watch_minflt"] / m), "—"),
        ("-l app=%s (%s)" % (QUERY_APP, "matched"), lambda r: "%.1f ms (%d)" % (r["q_ms"], r["q_n"]),
         "≤ 50 ms over 1M objects"),
        ("-l app=absent (nothing matches)", lambda r: "%.1f ms" % r["q0_ms"], "—"),
    ]
    head = [k[0] if len(sizes) == 1 else "%s, %s Pods" % (k[0], "{:,}".format(k[1])) for k in names]
    out = ["| measure (%s Pods, %d events) | %s | target |" % (" / ".join("{:,}".format(x) for x in sizes), m,
                                                             " | ".join(head)),
           "|---|%s---|" % ("---:|" * len(names))]
    for label, f, target in rows:
        cells = []
        for k in names:
            r = results[k]
            try:
                cells.append("skipped" if "skipped" in r else f(r))
            except (KeyError, TypeError, ZeroDivisionError):
                cells.append("—")
        out.append("| %s | %s | %s |" % (label, " | ".join(cells), target))
    for k in names:
        if "skipped" in results[k]:
            out.append("\n%s (%d Pods) skipped: %s" % (k[0], k[1], results[k]["skipped"]))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kbridge", default=os.path.join(SOURCE, "build", "kbridge"))
    ap.add_argument("--feed", help="bench_feed binary (default: bench/bench_feed beside --kbridge)")
    ap.add_argument("--clientgo", help="kbclientgo binary (default: built by tests/clientgo/build.sh)")
    ap.add_argument("--pods", default="1000000", help="Pods in the feed; a comma list runs each size in turn")
    ap.add_argument("--events", type=int, default=200000)
    ap.add_argument("--quick", action="store_true", help="20,000 Pods and 5,000 events")
    ap.add_argument("--only", default="kbridge,kbridge+state_dir,client-go,client-go+transform")
    ap.add_argument("--paged", action="store_true",
                    help="paged lists (kbridge list_mode = \"paged\", client-go WatchListClient off) instead of "
                         "streamed ones (both clients' default)")
    ap.add_argument("--apiserver", action="store_true",
                    help="the clients sync from a real kube-apiserver (tests/infra/controlplane.sh) holding the "
                         "feed's Pods instead of from the feed; no watch events")
    ap.add_argument("--no-feed-rate", action="store_true", help="skip reading the feed alone with curl")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds each phase (sync, watch) may take")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds a client is left alone before each memory reading (0 when no figure matters: "
                         "the harness's own test)")
    ap.add_argument("--json", help="also write the figures to this file (JSON)")
    ap.add_argument("--perf", help="record each kbridge's watch phase with perf record -g into this directory")
    ap.add_argument("--state-parent", default="/var/tmp", help="where state_dir is made (a real disk)")
    a = ap.parse_args()
    # SIGTERM unwinds like an exception, so the feed and the client are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("million.py: terminated"))
    sizes = [int(x) for x in a.pods.split(",") if x]
    if a.quick:
        sizes, a.events = [20000], 5000
    a.feed = a.feed or os.path.join(os.path.dirname(os.path.abspath(a.kbridge)), "bench", "bench_feed")
    names = [x for x in a.only.split(",") if x]
    for x in names:
        if x not in EST_CLIENT:
            raise SystemExit("--only: unknown client %r (known: %s)" % (x, ", ".join(EST_CLIENT)))
    for exe in (a.kbridge, a.feed):
        if not os.access(exe, os.X_OK):
            raise SystemExit("not executable: %s (build it: cmake --build build --target kbridge bench_feed)" % exe)
    if any(x.startswith("client-go") for x in names) and not a.clientgo:
        r = subprocess.run([os.path.join(SOURCE, "tests", "clientgo", "build.sh")], stdout=subprocess.PIPE, text=True)
        if r.returncode:
            raise SystemExit("tests/clientgo/build.sh failed")
        a.clientgo = r.stdout.strip()
    need = EST_FEED * (max(sizes) + a.events) + (1 << 30)
    if mem_available() < need:
        raise SystemExit("refusing: the feed of %d Pods + %d events needs about %.1f GB, MemAvailable is %.1f GB" %
                         (max(sizes), a.events, need / 1e9, mem_available() / 1e9))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("machine: %d cores, %s, MemAvailable %.1f GB, load %.1f" %
          (os.cpu_count(), cpu, mem_available() / 1e9, os.getloadavg()[0]))
    print("kbridge: %s; %s lists" % (a.kbridge, "paged" if a.paged else "streamed"))
    results, feeds = {}, {}
    empty = Feed(a.feed, 2, 0)
    try:
        for pods in sizes:
            feeds[pods] = run_size(a, names, pods, empty, results)
    finally:
        empty.close()
    print()
    print(fmt_table(results, sizes, 0 if a.apiserver else a.events))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"feeds": {str(k): v for k, v in feeds.items()},
                       "results": {"%s@%d" % k: v for k, v in results.items()}}, f, indent=1)


def run_size(a, names, pods, empty, results):
    """Every client on a feed of pods Pods; results[(client, pods)] filled in. The feed's info."""
    t = time.monotonic()
    feed = Feed(a.feed, pods, a.events)
    try:
        i = feed.info
        print("feed: %d Pods (%.0f B each, %.0f MB), %d events (%.0f MB), %d objects after; built in %.1f s" %
              (i["pods"], i["podBytes"] / i["pods"], i["podBytes"] / 1e6, i["events"], i["eventBytes"] / 1e6,
               i["final"], time.monotonic() - t))
        source = feed
        if a.apiserver:
            source = ApiServer(feed)
            print("kube-apiserver %s on 127.0.0.1:%s: %d Pods created in %.0f s" %
                  (source.version, source.port, pods, source.fill_s))
        elif not a.no_feed_rate:
            print(measure_feed(feed))
        sys.stdout.flush()
        try:
            for name in names:
                r = results[(name, pods)] = run_client(name, a, source, empty)
                r["pods"] = pods
                print("%s (%d Pods): %s" % (name, pods, r.get("skipped") or "synced %.1f s, %.0f B/object" %
                                            (r["synced_s"], r["per_obj"])))
                sys.stdout.flush()
        finally:
            if source is not feed:
                source.close()
        return feed.info
    finally:
        feed.close()

if __name__ == "__main__":
    sys.exit(main())
