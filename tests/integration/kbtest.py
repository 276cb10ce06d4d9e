"""Shared harness for kbridge's integration tests (python3, stdlib only).

Each test file NNNN-what-it-proves.py starts its own simulator (build/kubesim
on an ephemeral 127.0.0.1 port) and its own kbridge, drives changes through
the simulator's Kubernetes API and its /_sim/ control API (docs/kubesim.md),
and checks what a user would check in the file sink's output. Every wait is
bounded; every process is stopped by pid, also when a test fails.
"""
import atexit
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

BUILD = os.environ.get("KB_BUILD_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "build")
SOURCE = os.environ.get("KB_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
KBRIDGE = os.path.join(BUILD, "kbridge")
KUBESIM = os.path.join(BUILD, "kubesim")

# A percentile printed by a test means what the benchmarks' does (bench/benchutil.py: nearest rank).
sys.path.append(os.path.join(SOURCE, "bench"))
from benchutil import percentile  # noqa: E402,F401

_procs = []

# KB_MQTT_CLIENT=paho|mosquitto: every MQTT sink a test configures uses that client library (ctest runs the
# MQTT tests once per client); unset: the sink's default.
MQTT_CLIENT = os.environ.get("KB_MQTT_CLIENT", "")


def with_mqtt_client(text):
    """text with client = KB_MQTT_CLIENT added to each MQTT sink that does not name one."""
    if not MQTT_CLIENT:
        return text
    import re
    return re.sub(r'type\s*=\s*"mqtt"\s*;(?![^}]*\bclient\s*=)', 'type = "mqtt"; client = "%s";' % MQTT_CLIENT, text)


def _cleanup():
    for p in _procs:
        if p.poll() is None:
            p.kill()
            p.wait()


atexit.register(_cleanup)


class Failure(AssertionError):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def wait_for(cond, timeout=30.0, interval=0.05, what="condition"):
    """Poll cond() until it returns a truthy value or timeout seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise Failure("timed out after %.0fs waiting for %s" % (timeout, what))
        time.sleep(interval)


class Sim:
    """A kubesim process on an ephemeral port."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([KUBESIM, "--port", "0"] + list(args), stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        _procs.append(self.proc)
        line = self.proc.stdout.readline()
        check("listening on" in line, "kubesim did not start: %r" % line)
        self.port = int(line.strip().rsplit(":", 1)[1])
        self.url = "http://127.0.0.1:%d" % self.port

    def request(self, method, path, body=None, ctype="application/json", timeout=30):
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            if isinstance(data, str):
                data = data.encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                return r.status, raw
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def ctl(self, path, body=None, method="POST"):
        status, raw = self.request(method, "/_sim/" + path, body)
        check(200 <= status < 300, "sim %s %s -> %d %s" % (method, path, status, raw[:300]))
        try:
            return json.loads(raw) if raw.strip() else None
        except ValueError:
            return raw

    def bulk(self, ops):
        body = "\n".join(json.dumps(o) for o in ops) + "\n"
        status, raw = self.request("POST", "/_sim/bulk", body)
        check(status == 200, "bulk -> %d %s" % (status, raw[:300]))
        return json.loads(raw)

    def fault(self, **kw):
        return self.ctl("fault", kw)

    def state(self, resource="pods", group=None):
        q = "state?resource=" + resource + ("&group=" + group if group else "")
        return self.ctl(q, method="GET")

    def requests(self):
        status, raw = self.request("GET", "/_sim/requests")
        check(status == 200, "requests -> %d" % status)
        text = raw.decode()
        text = text.strip()
        if text.startswith("["):
            return json.loads(text)
        return [json.loads(l) for l in text.splitlines() if l.strip()]

    def clear_requests(self):
        self.request("DELETE", "/_sim/requests")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def pod_ops(op, ns, names, labels=None, extra=None):
    out = []
    for n in names:
        o = {"op": op, "resource": "pods", "version": "v1", "namespace": ns, "name": n}
        if labels is not None:
            o["labels"] = labels
        if extra is not None:
            o["data"] = extra
        out.append(o)
    return out


class Bridge:
    """A kbridge process with a generated config writing to a JSON Lines file."""

    def __init__(self, sim, informers=None, routes=None, extra="", out=None, workdir=None, sinks=None,
                 cluster_name="test", start=True, http=None):
        self.dir = workdir or tempfile.mkdtemp(prefix="kbtest-")
        self.out = out or os.path.join(self.dir, "out.jsonl")
        self.log = os.path.join(self.dir, "kbridge.log")
        if informers is None:
            informers = ['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; }']
        if sinks is None:
            sinks = ['{ name = "out"; type = "file"; path = "%s"; }' % self.out]
        if routes is None:
            routes = ['{ informer = "%s"; sink = "out"; }' % _name_of(i) for i in informers]
        self.config = os.path.join(self.dir, "kbridge.cfg")
        with open(self.config, "w") as f:
            f.write('cluster = { name = "%s"; server = "%s"; };\n' % (cluster_name, sim.url if sim else
                                                                     "http://127.0.0.1:1"))
            # http: the body of the http group (default: the API off), e.g. 'listen = "127.0.0.1:0";'.
            f.write('http = { %s };\nshutdown_timeout = 20;\nlog = { level = "debug"; };\n' % (http or 'listen = "";'))
            f.write(extra + "\n")
            f.write("informers = (\n  %s\n);\n" % ",\n  ".join(informers))
            f.write("sinks = (\n  %s\n);\n" % ",\n  ".join(with_mqtt_client(x) for x in sinks))
            f.write("routes = (\n  %s\n);\n" % ",\n  ".join(routes))
        self.proc = None
        if start:
            self.start()

    def start(self, env=None):
        """Start (again); env: variables added to this run's environment (e.g. a KB_TEST_ fault point)."""
        self.log_start = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        self.logf = open(self.log, "a")
        self.proc = subprocess.Popen([KBRIDGE, "--config", self.config], stdout=subprocess.DEVNULL,
                                     stderr=self.logf, env=dict(os.environ, **(env or {})))
        _procs.append(self.proc)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise Failure("kbridge did not stop within %ds after %s" % (timeout, sig))
        self.logf.close()
        return self.proc.returncode

    def kill(self):
        return self.stop(signal.SIGKILL)

    def wait_killed(self, where, timeout=60):
        """Wait for a run started with a KB_TEST_ kill point (env) to SIGKILL itself where it says."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise Failure("the kill point %s was never reached" % where)
        self.logf.close()
        check(rc == -signal.SIGKILL, "killed %s (rc %s)\n%s" % (where, rc, self.logtext()[-2000:]))

    def rewrite_config(self, old, new):
        """Replace old (which must be there) with new in the config file, for a SIGHUP or a restart."""
        with open(self.config) as f:
            text = f.read()
        check(old in text, "config holds %r" % old)
        with open(self.config, "w") as f:
            f.write(text.replace(old, new))

    def add_file_sink(self, name, informer="pods"):
        """A file sink name (name.jsonl in the work dir) and a route from informer to it, into the config file."""
        path = os.path.join(self.dir, name + ".jsonl")
        self.rewrite_config("sinks = (\n", 'sinks = (\n  { name = "%s"; type = "file"; path = "%s"; },\n' % (name, path))
        self.rewrite_config("routes = (\n", 'routes = (\n  { informer = "%s"; sink = "%s"; },\n' % (informer, name))
        return path

    def logtext(self):
        with open(self.log) as f:
            return f.read()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def events(self):
        """Every envelope written so far; a torn (unterminated) last line is an error."""
        try:
            with open(self.out, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        if not data:
            return []
        lines = data.split(b"\n")
        tail = lines.pop()
        # The writer may be mid-line only while running; a stopped bridge leaves whole lines.
        if tail and not self.alive():
            raise Failure("output ends with a torn line: %r" % tail[:200])
        return [json.loads(l) for l in lines if l]

    def view(self):
        """The consumer's view: the last envelope per key, deletes removed."""
        return view(self.events())

    def wait_converged(self, sim, resource="pods", group=None, timeout=60, informer_filter=None):
        def ok():
            st = sim.state(resource, group)
            want = {i["key"]: i["resourceVersion"] for i in st["items"]}
            evs = [e for e in self.events() if e["resource"] == resource]
            got = {k: e["resourceVersion"] for k, e in view(evs).items()}
            return want == got and (want, got)
        try:
            return wait_for(ok, timeout, 0.1, "the output to converge to the server's state")
        except Failure:
            st = sim.state(resource, group)
            want = {i["key"]: i["resourceVersion"] for i in st["items"]}
            got = {k: e["resourceVersion"] for k, e in view(self.events()).items()}
            missing = sorted(set(want) - set(got))[:5]
            extra = sorted(set(got) - set(want))[:5]
            diff = [k for k in want if k in got and want[k] != got[k]][:5]
            raise Failure("not converged: missing=%s extra=%s differ=%s (want %d keys, have %d)\n--- log tail ---\n%s%s"
                          % (missing, extra, [(k, want[k], got[k]) for k in diff], len(want), len(got),
                             self.logtext()[-3000:], self.stacks()))

    def informer_doc(self, i=0):
        """/v1/informers' entry of the i-th informer (needs http listen)."""
        st, _, body = http_request(self.http_url() + "/v1/informers")
        check(st == 200, "/v1/informers: %d" % st)
        return json.loads(body)["informers"][i]

    def wait_audits(self, n, timeout=120):
        """Until n more drift audits than now have completed (so at least n-1 began after this call)."""
        start = self.informer_doc().get("audit", {}).get("runs", 0)
        wait_for(lambda: self.informer_doc().get("audit", {}).get("runs", 0) >= start + n, timeout, 0.1,
                 "%d more audit(s)" % n)
        return self.informer_doc()["audit"]

    def metric(self, name, **labels):
        """The value of one series of /metrics, by its exact label set."""
        _, _, body = http_request(self.http_url() + "/metrics")
        want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
        for line in body.decode().splitlines():
            m = re.match(r'^(\w+)\{(.*)\} (\S+)$', line)
            if m and m.group(1) == name and ",".join(sorted(m.group(2).split(","))) == want:
                return float(m.group(3))
        raise Failure("no %s{%s} in /metrics" % (name, want))

    def http_url(self, timeout=30):
        """http://127.0.0.1:PORT of the HTTP API (started with http='listen = "127.0.0.1:0";'), from its log line."""
        def port():  # this start's line: a restarted bridge appends to the same log
            for l in self.logtext()[getattr(self, "log_start", 0):].splitlines():
                if "http: listening on " in l:
                    return l.split("http: listening on ", 1)[1].split()[0].rsplit(":", 1)[1]
            return None
        return "http://127.0.0.1:%s" % wait_for(port, timeout, 0.05, "the HTTP API to listen")

    def stacks(self):
        """Every thread's stack of a running bridge (gdb), to see where it waits."""
        if not self.alive() or not shutil.which("gdb"):
            return ""
        p = subprocess.run(["gdb", "-p", str(self.proc.pid), "-batch", "-ex", "thread apply all bt"],
                           capture_output=True, text=True, timeout=60)
        return "\n--- threads ---\n" + "\n".join(l for l in p.stdout.splitlines() if l.startswith(("#", "Thread")))


def pipe_full(fd):
    """The pipe (or FIFO) read through fd holds at least half of its 64 KB: its writer is waiting for
    the reader."""
    import array, fcntl, termios
    n = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, n)
    return n[0] >= 32768


def bridge_on_fifo(sim, shutdown_timeout):
    """A Bridge, not started, whose file sink writes into a FIFO that a reader holds open and does
    not read, and that reader (a StalledFifo: take() lets the sink go on)."""
    d = tempfile.mkdtemp(prefix="kbtest-")
    fifo = StalledFifo(os.path.join(d, "out.fifo"))
    b = Bridge(sim, workdir=d, out=fifo.path, start=False)
    b.rewrite_config("shutdown_timeout = 20;", "shutdown_timeout = %d;" % shutdown_timeout)
    return b, fifo


class StalledFifo:
    """A FIFO whose consumer holds it open and does not read until told to: a file sink writing into it
    fills the pipe and then holds its unwritten lines. take() reads what the pipe holds now (a stop may
    have cut a batch mid-line: a consumer keeps whole lines only, and drops a torn tail once the writer is
    gone); lines() is every whole line taken so far, parsed; a whole line that is not JSON fails the test.
    create=False opens a FIFO made earlier (a sink that had no reader until now)."""

    def __init__(self, path, create=True):
        self.path = path
        if create:
            os.mkfifo(path)
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.data = b""  # the torn tail of what was read: bytes of a line not yet whole
        self._lines = []

    def full(self):
        """The pipe holds at least half of its 64 KB: the writer is waiting for the reader."""
        return pipe_full(self.fd)

    def take(self, writer_gone=False):
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.data += chunk
        *whole, self.data = self.data.split(b"\n")
        for line in filter(None, whole):
            try:
                self._lines.append(json.loads(line))
            except ValueError:
                raise Failure("the FIFO's reader got a line that is not a whole envelope: %r" % line[:120])
        if writer_gone:
            self.data = b""
        return self._lines

    def lines(self):
        return self.take()

    def close(self):
        os.close(self.fd)


def http_request(url, method="GET", token=None, body=None, timeout=30):
    """(status, headers, body bytes) of one request; HTTP errors are answers, not exceptions."""
    req = urllib.request.Request(url, data=body, method=method)
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def get_utf8_json(port, path, token=None):
    """(status, decoded JSON) of GET path sent raw (percent-escapes kept as written); a body that is not
    UTF-8 JSON fails the test."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path, headers={"Authorization": "Bearer " + token} if token else {})
    r = c.getresponse()
    raw = r.read()
    c.close()
    try:
        return r.status, json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Failure("%s: the body is not UTF-8 JSON (%s): %r" % (path, e, raw[:300]))


def check_echo_cleaned(path, message):
    """A Status message echoing path's bytes: U+1F600 (%f0%9f%98%80) kept, invalid UTF-8 as U+FFFD."""
    if "%f0%9f%98%80" in path:
        check("\U0001F600" in message, "valid UTF-8 is kept: %r" % message)
    else:
        check("\ufffd" in message, "invalid bytes replaced by U+FFFD: %r" % message)


def read_jsonl(path):
    """Every whole JSON line of a file so far ([] when it does not exist yet). A last line without its
    newline is a write still under way (the file sink writes a batch of lines at once; a reader can
    see part of it) and is left for the next read."""
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.endswith("\n") and l.strip()]
    except FileNotFoundError:
        return []


class Kubectl:
    """kubectl pointed at url (kbridge's Kubernetes API), default namespace ns1."""

    def __init__(self, url, workdir):
        self.kc = os.path.join(workdir, "kubeconfig")
        with open(self.kc, "w") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters: [{name: kb, cluster: {server: \"%s\"}}]\n"
                    "contexts: [{name: kb, context: {cluster: kb, namespace: ns1}}]\ncurrent-context: kb\n"
                    "users: []\n" % url)

    def run(self, *args, ok=True):
        r = subprocess.run(["kubectl", "--kubeconfig", self.kc, "--cache-dir", os.path.dirname(self.kc) + "/cache"]
                           + list(args), capture_output=True, text=True, timeout=120)
        if ok:
            check(r.returncode == 0, "kubectl %s -> %d: %s" % (" ".join(args), r.returncode, r.stderr[-1500:]))
        return r


def write_kubeconfig(path, server, user):
    """A kubeconfig with one context: the cluster at server, the user a YAML flow mapping ('{token: x}')."""
    with open(path, "w") as f:
        f.write("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                "clusters: [{name: k, cluster: {server: \"%s\"}}]\nusers: [{name: u, user: %s}]\n" % (server, user))
    return path


def secret_volume(path, files, gen):
    """Write files ({name: text}) as a Kubernetes Secret volume does: into a new directory
    path/..<gen>, then point path/..data at it with one rename (atomic), path/<name> being
    symlinks to ..data/<name>; the previous generation's directory is removed."""
    os.makedirs(path, exist_ok=True)
    d = os.path.join(path, "..%s" % gen)
    os.mkdir(d)
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    old = os.readlink(os.path.join(path, "..data")) if os.path.islink(os.path.join(path, "..data")) else None
    os.symlink("..%s" % gen, os.path.join(path, "..data_tmp"))
    os.rename(os.path.join(path, "..data_tmp"), os.path.join(path, "..data"))
    for name in files:
        if not os.path.islink(os.path.join(path, name)):
            os.symlink(os.path.join("..data", name), os.path.join(path, name))
    if old:
        shutil.rmtree(os.path.join(path, old))


def _name_of(informer_text):
    return informer_text.split('name = "', 1)[1].split('"', 1)[0]


def fnv1a64(s):
    """64-bit FNV-1a of s's UTF-8 bytes: kbridge's shard hash and the API server's shardSelector's."""
    h = 0xcbf29ce484222325
    for b in s.encode():
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def range_shard(value, replicas):
    """The replica owning an object under sharding.server_side, by the FNV-1a 64 of value (its uid, or its
    namespace): range i of [0, 2^64) cut into replicas equal parts."""
    h = fnv1a64(value)
    return next(i for i in range(replicas) if (i << 64) // replicas <= h < ((i + 1) << 64) // replicas)


def shard_selector(i, replicas, field="uid"):
    """kube-apiserver's shardSelector for replica i of replicas, as kbridge sends it."""
    end = "0x10000000000000000" if i == replicas - 1 else "0x%016x" % (((i + 1) << 64) // replicas)
    return "shardRange(object.metadata.%s, '0x%016x', '%s')" % (field, (i << 64) // replicas, end)


def key_of(e):
    return e["namespace"] + "/" + e["name"] if e["namespace"] else e["name"]


def rule_view(events):
    """The consumer rule of docs/guarantees.md, literally, over envelopes in delivery order: per key,
    apply a message whose (resourceVersion, DELETED?1:0) is greater than or equal to the last applied
    one's, or an ADDED at the resourceVersion of a finalStateUnknown DELETED applied last; skip the
    rest. Returns {key: resourceVersion} of the objects the consumer holds."""
    last, live = {}, {}
    for e in events:
        if e["type"] not in ("ADDED", "MODIFIED", "DELETED"):
            continue
        key = key_of(e)
        mark = (int(e["resourceVersion"]), 1 if e["type"] == "DELETED" else 0)
        back_in = e["type"] == "ADDED" and last.get(key) == (mark[0], 1, True)
        if key in last and mark < last[key][:2] and not back_in:
            continue
        last[key] = mark + (bool(e.get("finalStateUnknown")),)
        if e["type"] == "DELETED":
            live.pop(key, None)
        else:
            live[key] = e["resourceVersion"]
    return live


def view(events):
    v = {}
    for e in events:
        k = key_of(e)
        if e["type"] == "DELETED":
            v.pop(k, None)
        else:
            v[k] = e
    return v


def assert_rv_monotonic(events):
    """Per key, resourceVersions in the output never go down."""
    last = {}
    for e in events:
        k = key_of(e)
        rv = int(e["resourceVersion"])
        if k in last:
            check(rv >= last[k], "key %s went back from rv %d to %d" % (k, last[k], rv))
        last[k] = rv


def assert_rv_monotonic_ignoring_repeats(events):
    """Per key, RVs never go back, once exact repeats of something already
    delivered are ignored (at-least-once: a redelivery after a crash repeats
    a change, it never makes a key older)."""
    seen = set()
    last = {}
    for e in events:
        k = key_of(e)
        t = (k, e["resourceVersion"], e["type"])
        if t in seen:
            continue
        seen.add(t)
        rv = int(e["resourceVersion"])
        if k in last:
            check(rv >= last[k], "key %s went back from rv %d to %d" % (k, last[k], rv))
        last[k] = rv


def assert_no_repeats(events):
    """No change is delivered twice: (key, rv, type) is unique."""
    seen = set()
    for e in events:
        t = (key_of(e), e["resourceVersion"], e["type"])
        check(t not in seen, "change delivered twice: %s" % (t,))
        seen.add(t)


def run(test):
    """Run test(), print a verdict, exit non-zero on failure."""
    name = os.path.basename(sys.argv[0])
    try:
        test()
    except Failure as e:
        print("FAIL %s: %s" % (name, e))
        sys.exit(1)
    print("PASS %s" % name)


# ---- A real control plane (tests/infra/controlplane.sh) -------------------------------------------------------

CONTROLPLANE_SH = os.path.join(SOURCE, "tests", "infra", "controlplane.sh")


class ControlPlane:
    """A private kube-apiserver + etcd for one test (tests/infra/controlplane.sh), stopped at exit.

    The first run on a machine builds the binaries (cached under ~/.cache/kbridge); tests/run.sh
    builds them before ctest so no test pays for it inside its own timeout."""

    def __init__(self, timeout=900):
        self.dir = tempfile.mkdtemp(prefix="kbtest-cp-")
        self.envs = dict(os.environ, KB_CONTROLPLANE_DIR=self.dir)
        atexit.register(self.stop)
        # The ports are picked free just before etcd binds them: a test running beside this one can take
        # one first, and etcd then exits at start ("etcd exited during start-up"). Two more tries, on
        # other ports, as KafkaBroker.start does.
        for attempt in range(3):
            r = subprocess.run([CONTROLPLANE_SH, "start"], env=self.envs, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=timeout)
            if r.returncode == 0 or "exited during start-up" not in r.stderr or attempt == 2:
                break
            print("controlplane.sh start: %s; trying again on other ports" % r.stderr.strip().splitlines()[-1])
            self.stop()
        if r.returncode != 0:
            raise Failure("controlplane.sh start failed (exit %d):\n%s" % (r.returncode, r.stderr[-4000:]))
        self.env = dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l)
        self.server = self.env["KB_K8S_SERVER"]
        self.ca = self.env["KB_K8S_CA"]
        self.kubeconfig = self.env["KB_K8S_KUBECONFIG"]
        self.version = self.env["KB_K8S_VERSION"]
        print("control plane %s at %s" % (self.version, self.server))

    def stop(self):
        """Stop both servers and remove their directory (etcd data, certificates, logs: ~60 MB)."""
        subprocess.run([CONTROLPLANE_SH, "clean"], env=self.envs, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)

    def create_configmaps(self, ns, n, threads=4):
        """POST n configmaps cm-00000… (data i, a 200-byte pad, label batch = i % 10) over a few
        keep-alive connections (kubectl would take minutes)."""
        host, port = self.server[len("https://"):].rsplit(":", 1)
        ctx = ssl.create_default_context(cafile=self.ca)
        errors = []

        def worker(idx):
            conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)
            hdr = {"Authorization": "Bearer " + self.env["KB_K8S_ADMIN_TOKEN"], "Content-Type": "application/json"}
            for i in range(idx, n, threads):
                body = {"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "cm-%05d" % i, "labels": {"batch": str(i % 10)}},
                        "data": {"i": str(i), "pad": "x" * 200}}
                conn.request("POST", "/api/v1/namespaces/%s/configmaps" % ns, json.dumps(body), hdr)
                r = conn.getresponse()
                r.read()
                if r.status != 201:
                    errors.append((i, r.status))
                    return
            conn.close()

        ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(600)
        check(not errors, "creating configmaps failed: %s" % errors[:5])

    def kubectl(self, *args, input=None, check_rc=True, timeout=120):
        """Run kubectl as the admin; returns stdout (raises Failure on a non-zero exit when check_rc)."""
        r = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig] + list(args), input=input,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
        if check_rc and r.returncode != 0:
            raise Failure("kubectl %s -> %d: %s" % (" ".join(args), r.returncode, r.stderr.strip()[-2000:]))
        return r.stdout if check_rc else r

    def rv(self, *what):
        """The resourceVersion of one object, e.g. rv("-n", "ns", "pod", "web")."""
        return self.kubectl("get", *what, "-o", "jsonpath={.metadata.resourceVersion}").strip()

    def etcdctl(self, *args):
        r = subprocess.run([self.env["KB_ETCDCTL"], "--endpoints", self.env["KB_ETCD_ENDPOINT"]] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        check(r.returncode == 0, "etcdctl %s -> %d: %s" % (" ".join(args), r.returncode, r.stdout[-2000:]))
        return r.stdout

    def request(self, method, path, body=None, token=None, timeout=60):
        """A raw API request with a bearer token (admin by default); returns (status, parsed JSON or bytes)."""
        import ssl
        ctx = ssl.create_default_context(cafile=self.ca)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + (token or self.env["KB_K8S_ADMIN_TOKEN"]))
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
                raw = r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw

    def state(self, path):
        """{key: resourceVersion} of a list path such as /api/v1/namespaces/x/configmaps."""
        status, body = self.request("GET", path)
        check(status == 200, "GET %s -> %d %s" % (path, status, str(body)[:300]))
        out = {}
        for i in body["items"]:
            m = i["metadata"]
            out[(m.get("namespace", "") + "/" + m["name"]) if m.get("namespace") else m["name"]] = m["resourceVersion"]
        return out


def widgets_crd(short_names=()):
    """The manifest of a namespaced CRD widgets.example.com (v1, any fields), for kubectl apply."""
    return """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget%s}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
""" % (", shortNames: [%s]" % ", ".join(short_names) if short_names else "")


class ConfigBridge(Bridge):
    """A kbridge process run on a full config text; cluster keys are the caller's (kubeconfig, in-cluster, …).

    "{out}" in the text is replaced by the JSON Lines output path; env adds environment variables."""

    def __init__(self, text, env=None, start=True, workdir=None):
        self.dir = workdir or tempfile.mkdtemp(prefix="kbtest-")
        self.out = os.path.join(self.dir, "out.jsonl")
        self.log = os.path.join(self.dir, "kbridge.log")
        self.config = os.path.join(self.dir, "kbridge.cfg")
        self.extra_env = env or {}
        with open(self.config, "w") as f:
            f.write(with_mqtt_client(text.replace("{out}", self.out)))
        self.proc = None
        if start:
            self.start()

    def start(self):
        self.log_start = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        self.logf = open(self.log, "a")
        env = dict(os.environ)
        for k in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KB_SA_DIR"):
            env.pop(k, None)
        env.update(self.extra_env)
        self.proc = subprocess.Popen([KBRIDGE, "--config", self.config], stdout=subprocess.DEVNULL,
                                     stderr=self.logf, env=env)
        _procs.append(self.proc)

    def wait_log(self, text, timeout=120):
        """Wait until the log contains text; returns the log."""
        return wait_for(lambda: text in self.logtext() and self.logtext(), timeout, 0.2,
                        "%r in the kbridge log" % text)

    def wait_view(self, want, resource, timeout=180):
        """Wait until the consumer's view of resource equals want ({key: rv})."""
        def ok():
            got = {k: e["resourceVersion"] for k, e in view([e for e in self.events()
                                                             if e["resource"] == resource]).items()}
            return got == want
        try:
            wait_for(ok, timeout, 0.2, "the %s output to converge to the API server's state" % resource)
        except Failure:
            got = {k: e["resourceVersion"] for k, e in view([e for e in self.events()
                                                             if e["resource"] == resource]).items()}
            raise Failure("not converged: missing=%s extra=%s (want %d, have %d)\n--- log tail ---\n%s"
                          % (sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5], len(want),
                             len(got), self.logtext()[-3000:]))


# ---- A real Mosquitto (tests/infra/mosquitto.sh) and mosquitto_sub consumers ----------------------------------

MOSQUITTO_SH = os.path.join(SOURCE, "tests", "infra", "mosquitto.sh")
# One line per message: retained flag, QoS, topic, MQTT 5 user properties ("name:value" separated by
# spaces), payload length, payload (kbridge's payloads are single-line JSON or empty).
MQTT_SUB_FORMAT = "%r\t%q\t%t\t%P\t%l\t%p"


def _sigterm_exits(signum, frame):
    sys.exit("terminated by signal %d" % signum)


class Mosquitto:
    """A private broker for one test (tests/infra/mosquitto.sh start plain|tls|auth), stopped by pid and
    deleted at exit, also when the test fails or is sent SIGTERM. Persistent: stop() + start() or
    restart() keep the port, sessions and retained messages. debug_log: the broker logs every packet."""

    def __init__(self, variant="plain", debug_log=False):
        self.variant = variant
        self.dir = tempfile.mkdtemp(prefix="kbtest-mqtt-")
        self.envs = dict(os.environ, KB_MQTT_DIR=self.dir)
        if debug_log:  # the broker logs every packet it sends and receives
            self.envs["KB_MQTT_LOG_DEBUG"] = "1"
        atexit.register(self.clean)
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _sigterm_exits)
        self.start()

    def _run(self, *args):
        r = subprocess.run([MOSQUITTO_SH] + list(args), env=self.envs, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=300)
        check(r.returncode == 0, "mosquitto.sh %s failed (exit %d):\n%s" % (" ".join(args), r.returncode,
                                                                           r.stderr[-3000:]))
        return r.stdout

    def start(self):
        self.env = dict(l.split("=", 1) for l in self._run("start", self.variant).splitlines() if "=" in l)
        self.uri = self.env["KB_MQTT_URI"]
        self.client_args = self.env["KB_MQTT_CLIENT_ARGS"].split()

    def stop(self):
        self._run("stop")

    def restart(self):
        self._run("restart")

    def clean(self):
        if os.path.isdir(self.dir):
            subprocess.run([MOSQUITTO_SH, "stop"], env=self.envs, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
            shutil.rmtree(self.dir, ignore_errors=True)

    def logtext(self):
        try:
            with open(os.path.join(self.dir, "mosquitto.log"), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def publish(self, topic, payload=None, retain=False, qos=1):
        """mosquitto_pub one message (payload None: zero-length)."""
        args = ["mosquitto_pub"] + self.client_args + ["-V", "5", "-q", str(qos), "-t", topic]
        args += ["-n"] if payload is None else ["-m", payload]
        if retain:
            args.append("-r")
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        check(r.returncode == 0, "mosquitto_pub %s -> %d: %s" % (topic, r.returncode, r.stdout))

    def retained(self, topic_filter, timeout=60):
        """What a new subscriber to topic_filter receives at once: {topic: message} (parse_mqtt_line) of
        the retained messages. The end is a retained marker subscribed after the filter: Mosquitto
        sends the retained messages of a SUBSCRIBE's filters in their order."""
        marker = "kbtest/end/%d-%d" % (os.getpid(), time.monotonic_ns())
        self.publish(marker, "end", retain=True)
        p = subprocess.Popen(["mosquitto_sub"] + self.client_args +
                             ["-V", "5", "-q", "1", "-F", MQTT_SUB_FORMAT, "-t", topic_filter, "-t", marker],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _procs.append(p)
        out, buf, deadline = {}, b"", time.monotonic() + timeout
        try:
            import select
            while True:
                left = deadline - time.monotonic()
                check(left > 0, "no end marker from mosquitto_sub within %ds (%d messages so far)"
                      % (timeout, len(out)))
                ready, _, _ = select.select([p.stdout], [], [], min(left, 1.0))
                if not ready:
                    check(p.poll() is None, "mosquitto_sub exited %s: %s" % (p.returncode, p.stderr.read()[-500:]))
                    continue
                chunk = os.read(p.stdout.fileno(), 1 << 16)
                if not chunk:
                    p.wait(10)
                    raise Failure("mosquitto_sub exited %s: %s" % (p.returncode, p.stderr.read()[-500:]))
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    m = parse_mqtt_line(line)
                    if m["topic"] == marker:
                        return out
                    out[m["topic"]] = m
        finally:
            p.kill()
            p.wait()
            self.publish(marker, None, retain=True)


def parse_mqtt_line(line):
    """One MQTT_SUB_FORMAT line → {retained, qos, topic, props, payload (str)}."""
    if isinstance(line, bytes):
        line = line.decode()
    r, q, topic, props, n, payload = line.split("\t", 5)
    check(len(payload.encode()) == int(n), "payload of %s is %s bytes, line has %d" % (topic, n,
                                                                                     len(payload.encode())))
    return {"retained": r == "1", "qos": int(q), "topic": topic, "payload": payload,
            "props": dict(kv.split(":", 1) for kv in props.split(" ") if kv)}


class MqttSub:
    """A long-running mosquitto_sub (MQTT 5) writing every message to a file; stopped by pid.

    With client_id the session is persistent (-c): subscribe() first registers it (mosquitto_sub -E),
    so nothing published afterwards is missed, even while this process or the broker is down."""

    def __init__(self, broker, topics, qos=2, client_id=None, start=True):
        self.broker, self.topics, self.qos, self.client_id = broker, list(topics), qos, client_id
        self.path = os.path.join(tempfile.mkdtemp(prefix="kbtest-sub-"), "messages.txt")
        self.proc = None
        if start:
            self.start()

    def _args(self):
        args = ["mosquitto_sub"] + self.broker.client_args + ["-V", "5", "-q", str(self.qos), "-F", MQTT_SUB_FORMAT]
        if self.client_id:
            args += ["-c", "-i", self.client_id]
        for t in self.topics:
            args += ["-t", t]
        return args

    def subscribe(self):
        """Register the persistent session and its subscriptions, then exit."""
        r = subprocess.run(self._args() + ["-E"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        check(r.returncode == 0, "mosquitto_sub -E -> %d: %s" % (r.returncode, r.stdout))

    def start(self):
        self.out = open(self.path, "ab")
        self.proc = subprocess.Popen(self._args(), stdout=self.out, stderr=subprocess.STDOUT)
        _procs.append(self.proc)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.out.close()

    def messages(self):
        """Every whole line received so far, parsed (a line still being written is left out)."""
        with open(self.path, "rb") as f:
            data = f.read()
        return [parse_mqtt_line(l) for l in data.split(b"\n")[:-1] if l and not l.startswith(b"Error")]


def mqtt_sequences(messages):
    """Per topic and key: [(k8s-type, rv)] in arrival order, from the MQTT 5 user properties and payload."""
    seq = {}
    for m in messages:
        if not m["payload"]:
            continue
        env = json.loads(m["payload"])
        seq.setdefault((m["topic"], key_of(env)), []).append((m["props"]["k8s-type"],
                                                              int(m["props"]["k8s-resource-version"])))
    return seq


# ---- A real Kafka broker (tests/infra/kafka.sh) ---------------------------------------------------------------

KAFKA_SH = os.path.join(SOURCE, "tests", "infra", "kafka.sh")


def wait_replica_share(b, i, share, timeout=90, interval=0.2):
    """Wait until replica b (sharding index i) holds exactly share() — {key: resourceVersion}, recomputed
    each time — and fail naming what is missing and extra, with b's log."""
    def got():
        return {k: e["resourceVersion"] for k, e in b.view().items()}
    try:
        wait_for(lambda: got() == share(), timeout, interval, "replica %d to converge to its share" % i)
    except Failure:
        want, have = share(), got()
        raise Failure("replica %d not converged: missing=%s extra=%s (want %d, have %d)\n%s"
                      % (i, sorted(set(want) - set(have))[:5], sorted(set(have) - set(want))[:5], len(want),
                         len(have), b.logtext()[-3000:]))


def check_replicas_cover(bridges, keys):
    """Together the replicas' views hold exactly keys."""
    views = set()
    for b in bridges:
        views |= set(b.view())
    check(views == set(keys), "together the replicas hold every object: missing=%s extra=%s"
          % (sorted(set(keys) - views)[:5], sorted(views - set(keys))[:5]))


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KafkaBroker:
    """A private single-node Kafka for one test (tests/infra/kafka.sh, own directory and ports), deleted at
    exit. start() exits the test with SKIP only when the script says Kafka cannot be had here (exit 3)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kbkafka-")
        self.env = dict(os.environ, KB_KAFKA_DIR=self.dir, KB_KAFKA_PORT=str(_free_port()),
                        KB_KAFKA_CONTROLLER_PORT=str(_free_port()))
        self.brokers = None
        atexit.register(self.clean)

    def script(self, cmd):
        return subprocess.run([KAFKA_SH, cmd], env=self.env, capture_output=True, text=True, timeout=600)

    def start(self):
        r = self.script("start")
        if r.returncode not in (0, 3):
            # Another test may have bound a port between _free_port() and Kafka's bind: once more, on new ports.
            print("kafka.sh start failed (exit %d), trying again on other ports:\n%s" % (r.returncode, r.stderr[-1500:]))
            self.script("clean")
            self.env.update(KB_KAFKA_PORT=str(_free_port()), KB_KAFKA_CONTROLLER_PORT=str(_free_port()))
            r = self.script("start")
        if r.returncode == 3:
            print("SKIP %s: Kafka cannot be had here: %s" % (os.path.basename(sys.argv[0]), r.stderr.strip()))
            sys.exit(0)
        check(r.returncode == 0, "kafka.sh start failed:\n%s" % r.stderr[-3000:])
        self.brokers = dict(l.split("=", 1) for l in r.stdout.split() if "=" in l)["KB_KAFKA_BROKERS"]
        return self.brokers

    def clean(self):
        self.script("clean")
        shutil.rmtree(self.dir, ignore_errors=True)


def kafka_records(brokers, topic, read_committed=True):
    """Every record of topic as (partition, offset, key, headers dict, value str or None), read with kcat
    (isolation.level=read_committed unless told otherwise); [] while the topic does not exist."""
    r = subprocess.run(["kcat", "-C", "-b", brokers, "-t", topic, "-o", "beginning", "-e", "-q",
                        "-X", "isolation.level=" + ("read_committed" if read_committed else "read_uncommitted"),
                        "-f", "%p\t%o\t%k\t%h\t%S\t%s\n"], capture_output=True, timeout=120)
    if r.returncode != 0:
        return []
    out = []
    for line in r.stdout.decode().splitlines():
        p, o, k, h, n, v = line.split("\t", 5)
        hdrs = dict(kv.split("=", 1) for kv in h.split(",") if "=" in kv) if h else {}
        out.append((int(p), int(o), k, hdrs, None if n == "-1" else v))
    return out


def watch_history(sim, since_rv, resource_path="/api/v1/pods"):
    """Every change the simulator made after since_rv, as (key, type, rv) in order (a watch from since_rv
    that ends after 2 s; the changes must be done and within the simulator's --history)."""
    url = "%s%s?watch=1&resourceVersion=%s&timeoutSeconds=2" % (sim.url, resource_path, since_rv)
    out = []
    with urllib.request.urlopen(url, timeout=30) as r:
        for line in r:
            ev = json.loads(line)
            check(ev["type"] != "ERROR", "watch from %s: %s" % (since_rv, ev))
            md = ev["object"]["metadata"]
            key = "%s/%s" % (md["namespace"], md["name"]) if md.get("namespace") else md["name"]
            out.append((key, ev["type"], int(md["resourceVersion"])))
    return out


def kapi_watch_lines(url, query, path="/api/v1/pods", timeout=60):
    """A watch on kbridge's Kubernetes API read on a thread: (connection, thread, the events so far)."""
    host, port = url[len("http://"):].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    conn.request("GET", path + "?watch=true&" + query)
    resp = conn.getresponse()
    check(resp.status == 200, "watch %s -> %d" % (query, resp.status))
    lines = []

    def read():
        try:
            while True:
                line = resp.readline()
                if not line:
                    return
                lines.append(json.loads(line))
        except Exception:
            return
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return conn, t, lines


def kapi_changes(lines):
    """The (key, type, rv) of a watch's events, bookmarks left out."""
    return [(e["object"]["metadata"]["namespace"] + "/" + e["object"]["metadata"]["name"], e["type"],
             int(e["object"]["metadata"]["resourceVersion"])) for e in lines if e["type"] != "BOOKMARK"]


def self_signed_tls(work, key="key.pem", cert="cert.pem", token=None, token_file="token"):
    """A self-signed certificate for 127.0.0.1 (work/key, work/cert) and, with token, work/token_file holding it."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", os.path.join(work, key), "-out",
                    os.path.join(work, cert)], check=True, capture_output=True, timeout=120)
    if token:
        with open(os.path.join(work, token_file), "w") as f:
            f.write(token + "\n")
class JsonlReader:
    """Reads a growing JSON Lines file (a sink's output) incrementally: each new() parses only the whole
    lines appended since the one before, so polling a file of many megabytes stays cheap."""

    def __init__(self, path):
        self.path, self.pos = path, 0

    def new(self):
        """The lines completed since the last call, parsed ([] while the file does not exist)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return []
        data = data[:data.rfind(b"\n") + 1]
        self.pos += len(data)
        return [json.loads(l) for l in data.splitlines() if l.strip()]


def set_shutdown_timeout(b, seconds):
    """Rewrite the shutdown_timeout of a Bridge made with start=False (the harness writes 20 s) before
    b.start(): a stop that must wait out a sink that cannot deliver then takes seconds, not 20."""
    with open(b.config) as f:
        text = f.read()
    text, n = re.subn(r"shutdown_timeout = \d+;", "shutdown_timeout = %d;" % seconds, text)
    check(n == 1, "the config sets shutdown_timeout once: %s" % text)
    with open(b.config, "w") as f:
        f.write(text)
