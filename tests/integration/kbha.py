"""Helpers for the high-availability tests (0770-0779): two kbridge replicas of one shard on a real
kube-apiserver, configmap churn through the API, and the consumer rule of docs/guarantees.md over the
union of the replicas' outputs."""
import json
import os
import random
import threading
import time

from kbtest import Failure, SOURCE, check, ConfigBridge, http_request, wait_for

NS = "ha"
CMS = "/api/v1/namespaces/%s/configmaps" % NS


LEASE_NS = "kb"


def least_privilege_token(cp):
    """A service account kb/kbridge with only what deploy/kubernetes/rbac-rules.sh prints for the
    configmaps informer and --lease-namespace kb; returns the path of a file with its token."""
    import subprocess
    cp.kubectl("create", "namespace", LEASE_NS)
    cp.kubectl("create", "serviceaccount", "kbridge", "-n", LEASE_NS)
    rules = subprocess.run([os.path.join(SOURCE, "deploy", "kubernetes", "rbac-rules.sh"), "--name", "kbridge-ha",
                            "--lease-namespace", LEASE_NS, "configmaps"], stdout=subprocess.PIPE, text=True, check=True)
    cp.kubectl("apply", "-f", "-", input=rules.stdout)
    cp.kubectl("create", "clusterrolebinding", "kbridge-ha", "--clusterrole=kbridge-ha",
               "--serviceaccount=%s:kbridge" % LEASE_NS)
    cp.kubectl("create", "rolebinding", "kbridge-ha-lease", "-n", LEASE_NS, "--role=kbridge-ha-lease",
               "--serviceaccount=%s:kbridge" % LEASE_NS)
    path = os.path.join(cp.dir, "kbridge-ha.token")
    with open(path, "w") as f:
        f.write(cp.kubectl("create", "token", "kbridge", "-n", LEASE_NS, "--duration=1h").strip() + "\n")
    os.chmod(path, 0o600)
    return path


FILE_SINK = ('sinks = ( { name = "out"; type = "file"; path = "{out}"; } );\n'
             'routes = ( { informer = "cms"; sink = "out"; } );\n')


def replica(cp, identity, lease_seconds, renew_seconds, token_file, workdir=None, sinks=FILE_SINK, server=None,
            informer_opts="", env=None):
    """A kbridge replica leading or standing by for shard 0 (by default a file sink; own state_dir), with
    the least-privilege token; server: another address for the API server (a proxy); env: more variables."""
    text = """
cluster = { name = "real"; server = "%s"; ca_file = "%s"; token_file = "%s"; };
http = { listen = "127.0.0.1:0"; };
state_dir = "{dir}/state";
shutdown_timeout = 10;
log = { level = "info"; };
ha = { enabled = true; lease_namespace = "%s"; lease_seconds = %d; renew_seconds = %d; identity = "%s"; };
informers = ( { name = "cms"; version = "v1"; resource = "configmaps"; namespaces = [ "%s" ]; %s } );
%s""" % (server or cp.server, cp.ca, token_file, LEASE_NS, lease_seconds, renew_seconds, identity, NS, informer_opts,
       sinks)
    b = ConfigBridge(text, start=False, workdir=workdir, env=env)
    with open(b.config) as f:
        cfg = f.read().replace("{dir}", b.dir)
    with open(b.config, "w") as f:
        f.write(cfg)
    b.start()
    return b


def start_pair(cp, prefix, lease_seconds, renew_seconds, sinks=FILE_SINK, servers=(None, None), before=None,
               informer_opts="", env=None):
    """Namespace NS with 30 changes, replica-a leading, replica-b standing by with its list done.
    before(): called once the 30 changes are made, before any replica starts."""
    cp.kubectl("create", "namespace", NS)
    churn = Churn(cp, prefix)
    for _ in range(30):
        churn.step()
    if before:
        before()
    token = least_privilege_token(cp)
    a = replica(cp, "replica-a", lease_seconds, renew_seconds, token, sinks=sinks, server=servers[0],
                informer_opts=informer_opts, env=env)
    wait_for(lambda: leads(a), 120, 0.1, "replica-a to lead")
    b = replica(cp, "replica-b", lease_seconds, renew_seconds, token, sinks=sinks, server=servers[1],
                informer_opts=informer_opts, env=env)
    b.wait_log("standby until leading lease %s/kbridge-real-0" % LEASE_NS, 120)
    b.wait_log("informer=cms namespace=%s listed" % NS, 120)
    check(not leads(b), "the second replica leads too:\n" + b.logtext()[-2000:])
    return a, b, churn


def http_view(b):
    """(readyz status, kbridge_ha_leader value, /v1/informers "ha") of a running replica."""
    url = b.http_url()
    ready = http_request(url + "/readyz")[0]
    metrics = http_request(url + "/metrics")[2].decode()
    gauge = [l.split()[-1] for l in metrics.splitlines() if l.startswith('kbridge_ha_leader{shard="0"}')]
    return ready, gauge[0] if gauge else None, json.loads(http_request(url + "/v1/informers")[2])["ha"]


def leads(b, nth=1):
    return b.logtext().count(": leading (lease") >= nth


def lines(b):
    """Whole lines of b's output (a torn last line is left for later)."""
    try:
        with open(b.out, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return [json.loads(l) for l in data.split(b"\n")[:-1] if l]


def consumer_view(outputs):
    """Per key the greatest (RV, DELETED?1:0) of every output: what the consumer rule of
    docs/guarantees.md ends with when every message is a change (an equal one is the same change).
    Returns {key: (rv, deleted)}."""
    best = {}
    for evs in outputs:
        for e in evs:
            if e["type"] not in ("ADDED", "MODIFIED", "DELETED"):
                continue
            key = e["namespace"] + "/" + e["name"]
            v = (int(e["resourceVersion"]), 1 if e["type"] == "DELETED" else 0)
            if key not in best or v > best[key]:
                best[key] = v
    return best


class Churn:
    """Creates, patches and deletes configmaps in NS from a thread; remembers every key it deleted."""

    def __init__(self, cp, prefix, n_keys=40):
        self.cp, self.prefix, self.n_keys = cp, prefix, n_keys
        self.deleted = set()
        self.ops = 0
        self.stop_flag = False
        self.rng = random.Random(prefix)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def step(self):
        name = "%s-%d" % (self.prefix, self.rng.randrange(self.n_keys))
        r = self.rng.random()
        if r < 0.25:
            st, _ = self.cp.request("DELETE", CMS + "/" + name)
            if st == 200:
                self.deleted.add(NS + "/" + name)
        else:
            st, _ = self.cp.request("PUT", CMS + "/" + name, {"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": name, "namespace": NS}, "data": {"v": str(self.ops)}})
            if st == 404:
                self.cp.request("POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": name, "namespace": NS}, "data": {"v": str(self.ops)}})
        self.ops += 1

    def _run(self):
        while not self.stop_flag:
            self.step()
            time.sleep(0.02)

    def start(self):
        self.thread.start()
        return self

    def more(self, n=20, timeout=120):
        """Wait until the churn has made n more changes (whatever time that takes on this machine)."""
        target = self.ops + n
        wait_for(lambda: self.ops >= target, timeout, 0.05, "%d more changes of the churn" % n)

    def stop(self):
        self.stop_flag = True
        self.thread.join(60)


def newest_rv(cp):
    """The highest resourceVersion among NS's configmaps now (0 when there are none)."""
    return max([int(v) for v in cp.state(CMS).values()] or [0])


def checkpoint_rv(b):
    """The resourceVersion b's informer has settled (delivered and acknowledged, or skipped as the
    leader's) every change up to, from /v1/informers (0 before the first)."""
    return int(b.informer_doc()["checkpoint"].get("resourceVersion") or 0)


def settled(cp, b, timeout=180):
    """Wait until b has settled every change made to NS so far: a leader delivered and acknowledged them, a
    standby skipped them once the leader published them as acknowledged (so it had every chance to
    deliver them itself). Event-driven: nothing is assumed about how fast that is."""
    target = newest_rv(cp)
    wait_for(lambda: checkpoint_rv(b) >= target, timeout, 0.1,
             "%s to settle every change up to rv %d" % (os.path.basename(b.dir), target))


def caught_up(cp, b, timeout=180):
    """Wait until b's informer has read every change made to NS so far (its resourceVersion, from
    /v1/informers, reaches the newest configmap's): its watch runs and is not behind."""
    target = newest_rv(cp)
    wait_for(lambda: int(b.informer_doc().get("resourceVersion") or 0) >= target, timeout, 0.1,
             "%s to read every change up to rv %d" % (os.path.basename(b.dir), target))


def knows_holder(b, holder, timeout=120):
    """Wait until replica b has read the Lease and names holder as its holder (/v1/informers "ha")."""
    wait_for(lambda: http_view(b)[2].get("holder") == holder, timeout, 0.1, "the replica to read the Lease")


LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/%s/leases/kbridge-real-0" % LEASE_NS


def published_mark(cp):
    """The watermark of the informer cms that the Lease's holder last published (0 before any)."""
    st, lease = cp.request("GET", LEASE_PATH)
    check(st == 200, "GET the Lease -> %d" % st)
    marks = json.loads(lease["metadata"].get("annotations", {}).get("kbridge.io/watermarks") or "{}")
    return int(marks.get("cms") or 0)


def lease_renewals(cp, n, holder, timeout=300):
    """Wait until holder has renewed the Lease n times (n new resourceVersions, holder unchanged); fails
    if another replica takes it meanwhile. A span measured in the leader's renewals, not in seconds."""
    seen = []

    def renewed():
        st, lease = cp.request("GET", LEASE_PATH)
        check(st == 200, "GET the Lease -> %d" % st)
        check(lease["spec"].get("holderIdentity") == holder, "the Lease changed hands: %s" % lease["spec"])
        rv = lease["metadata"]["resourceVersion"]
        if not seen or seen[-1] != rv:
            seen.append(rv)
        return len(seen) > n
    wait_for(renewed, timeout, 0.2, "%d renewals of the Lease by %s" % (n, holder))


def check_converged(cp, replicas, deleted, timeout=120):
    """The union of the replicas' outputs, by the consumer rule, equals the server, every delete included."""
    def ok():
        server = {k: int(v) for k, v in cp.state(CMS).items()}
        view = consumer_view([lines(b) for b in replicas])
        live = {k: rv for k, (rv, d) in view.items() if not d}
        # A deleted key the consumer ever saw must end deleted (live == server says so); one created
        # and deleted before any replica listed was never seen, which is right too.
        gone = [k for k in deleted if k not in server and k in view and not view[k][1]]
        return (live == server and not gone) and (server, view)
    try:
        return wait_for(ok, timeout, 0.5, "the union of the outputs to converge to the API server")
    except Failure:
        server = {k: int(v) for k, v in cp.state(CMS).items()}
        view = consumer_view([lines(b) for b in replicas])
        live = {k: rv for k, (rv, d) in view.items() if not d}
        bad = sorted(k for k in set(server) | set(live) if server.get(k) != live.get(k))[:5]
        raise Failure("not converged: %s\n--- logs ---\n%s" % (
            [(k, server.get(k), view.get(k)) for k in bad],
            "\n".join(b.logtext()[-2500:] for b in replicas)))


class History:
    """The API server's own history of NS's configmaps: the list at start() (each object once, at its
    resourceVersion) and then every watch event, as (key, type, rv) — read by a watch of its own that
    resumes from its last event when the server ends it (bounded: at most 100 watches)."""

    def __init__(self, cp):
        self.cp = cp
        self.events = []
        self.stop_flag = False
        self.failed = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        st, body = self.cp.request("GET", CMS)
        check(st == 200, "list %s -> %d" % (CMS, st))
        for i in body["items"]:
            self.events.append((NS + "/" + i["metadata"]["name"], "ADDED", int(i["metadata"]["resourceVersion"])))
        self.rv = body["metadata"]["resourceVersion"]
        self.thread.start()
        return self

    def _run(self):
        import ssl
        ctx = ssl.create_default_context(cafile=self.cp.ca)
        for _ in range(100):
            if self.stop_flag:
                return
            try:
                self._watch(ctx)
            except OSError as e:  # the server ended the watch (or stopped at the end of the test)
                self.error = e
                time.sleep(0.2)

    def _watch(self, ctx):
        """One watch from self.rv, until the server ends it (timeoutSeconds=5)."""
        import urllib.request
        req = urllib.request.Request("%s%s?watch=1&resourceVersion=%s&timeoutSeconds=5" % (
            self.cp.server, CMS, self.rv))
        req.add_header("Authorization", "Bearer " + self.cp.env["KB_K8S_ADMIN_TOKEN"])
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            for line in r:
                ev = json.loads(line)
                if ev["type"] == "ERROR":
                    self.failed = "the test's own watch from %s: %s" % (self.rv, ev)
                    self.stop_flag = True
                    return
                md = ev["object"]["metadata"]
                self.rv = md["resourceVersion"]
                if ev["type"] != "BOOKMARK":
                    self.events.append((NS + "/" + md["name"], ev["type"], int(md["resourceVersion"])))

    def stop(self):
        """Ends once the server has shown every change made so far: it creates one configmap more
        (ha-end, a change like the others) and waits for the watch to show it."""
        st, body = self.cp.request("POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "ha-end", "namespace": NS}})
        check(st == 201, "creating the end marker -> %d" % st)
        wait_for(lambda: self.failed or any(k == NS + "/ha-end" for k, _, _ in self.events), 120, 0.1,
                 "the test's watch to show the end marker")
        check(not self.failed, self.failed)
        self.stop_flag = True
        self.thread.join(30)
        return self.events

    def per_key(self):
        """{key: [(rv, deleted?1:0), ...]} in the server's order."""
        out = {}
        for k, t, rv in self.events:
            out.setdefault(k, []).append((rv, 1 if t == "DELETED" else 0))
        return out


class Proxy:
    """A TCP proxy on 127.0.0.1 (a free port) in front of the API server, for one replica: TLS passes
    through untouched (the server's certificate names 127.0.0.1). cut() closes every connection it
    carries and closes each new one at once; restore() lets them through again. Stopped at exit
    (daemon threads; at most MAX_CONNS connections at a time)."""
    MAX_CONNS = 64

    def __init__(self, server):
        import socket
        host, port = server[len("https://"):].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.url = "https://127.0.0.1:%d" % self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = set()
        self.is_cut = False
        self.refused = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            with self.lock:
                if self.is_cut or len(self.conns) >= 2 * self.MAX_CONNS:
                    self.refused += 1
                    c.close()
                    continue
            try:
                u = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                c.close()
                continue
            with self.lock:
                late = self.is_cut  # cut while this one was connecting
                if not late:
                    self.conns.update((c, u))
            if late:
                c.close()
                u.close()
                continue
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src, dst):
        import socket
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self.lock:
            for s in (src, dst):
                if s in self.conns:
                    self.conns.discard(s)
                    s.close()

    def cut(self):
        import socket
        with self.lock:
            self.is_cut = True
            conns = list(self.conns)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def restore(self):
        with self.lock:
            self.is_cut = False


# ---- the same on kubesim (its Lease is a registered resource; faults such as lose_events) ----

SIM_LEASE = "/apis/coordination.k8s.io/v1/namespaces/%s/leases/kbridge-sim-0" % LEASE_NS


def sim_replica(sim, identity, lease_seconds, renew_seconds, token="", informer_opts=""):
    """A kbridge replica of shard 0 on kubesim (file sink, own state_dir); token: its bearer token,
    which kubesim does not check but a per-client fault can name."""
    text = """
cluster = { name = "sim"; server = "%s"; %s };
http = { listen = "127.0.0.1:0"; };
state_dir = "{dir}/state";
shutdown_timeout = 10;
log = { level = "info"; };
ha = { enabled = true; lease_namespace = "%s"; lease_seconds = %d; renew_seconds = %d; identity = "%s"; };
informers = ( { name = "cms"; version = "v1"; resource = "configmaps"; namespaces = [ "%s" ]; %s } );
%s""" % (sim.url, 'token_file = "{dir}/token";' if token else "", LEASE_NS, lease_seconds, renew_seconds, identity, NS,
       informer_opts, FILE_SINK)
    b = ConfigBridge(text, start=False)
    with open(b.config) as f:
        cfg = f.read().replace("{dir}", b.dir)
    with open(b.config, "w") as f:
        f.write(cfg)
    if token:
        with open(os.path.join(b.dir, "token"), "w") as f:
            f.write(token + "\n")
        os.chmod(os.path.join(b.dir, "token"), 0o600)
    b.start()
    return b


def sim_start_pair(sim, lease_seconds, renew_seconds, tokens=("", ""), n=10):
    """kubesim with Leases, n configmaps in NS, replica-a leading and replica-b standing by, listed."""
    sim.ctl("resources", {"group": "coordination.k8s.io", "version": "v1", "resource": "leases", "kind": "Lease",
                          "namespaced": True})
    sim_put_cms(sim, range(n), "0", "create")
    a = sim_replica(sim, "replica-a", lease_seconds, renew_seconds, tokens[0])
    wait_for(lambda: leads(a), 60, 0.1, "replica-a to lead")
    b = sim_replica(sim, "replica-b", lease_seconds, renew_seconds, tokens[1])
    b.wait_log("standby until leading lease %s/kbridge-sim-0" % LEASE_NS, 60)
    b.wait_log("informer=cms namespace=%s listed" % NS, 60)
    check(not leads(b), "the second replica leads too:\n" + b.logtext()[-2000:])
    return a, b


def sim_put_cms(sim, indexes, value, op="update"):
    """Create (op "create") or update configmaps cm-<i> in NS with data v=value; returns the RV after."""
    return int(sim.bulk([{"op": op, "resource": "configmaps", "namespace": NS, "name": "cm-%d" % i,
                          "data": {"data": {"v": value}}} for i in indexes])["resourceVersion"])


def sim_check_converged(sim, replicas, timeout=60):
    """The union of the replicas' outputs, by the consumer rule, equals kubesim's configmaps in NS."""
    def state():
        items = sim.state("configmaps")["items"]
        return {i["key"]: int(i["resourceVersion"]) for i in items if i["key"].startswith(NS + "/")}

    def ok():
        view = consumer_view([lines(b) for b in replicas])
        return {k: rv for k, (rv, d) in view.items() if not d} == state()
    try:
        wait_for(ok, timeout, 0.2, "the union of the outputs to converge to kubesim")
    except Failure:
        view = consumer_view([lines(b) for b in replicas])
        live = {k: rv for k, (rv, d) in view.items() if not d}
        server = state()
        bad = sorted(k for k in set(server) | set(live) if server.get(k) != live.get(k))[:5]
        raise Failure("not converged: %s\n--- logs ---\n%s" % (
            [(k, server.get(k), live.get(k)) for k in bad], "\n".join(b.logtext()[-2500:] for b in replicas)))
