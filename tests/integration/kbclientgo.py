"""client-go informers for the Kubernetes API tests (tests/clientgo, built and cached by its build.sh)."""
import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request

from kbtest import SOURCE, ConfigBridge, Failure, _free_port, _procs, check

BUILD_SH = os.path.join(SOURCE, "tests", "clientgo", "build.sh")


def binary():
    r = subprocess.run([BUILD_SH], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1200)
    if r.returncode != 0:
        raise Failure("tests/clientgo/build.sh failed (exit %d):\n%s" % (r.returncode, r.stderr[-3000:]))
    return r.stdout.strip()


def kubeconfig(path, server, ca=None, token=None, namespace="default"):
    """A kubeconfig for kubectl and client-go pointing at server (kbridge or the API server)."""
    with open(path, "w") as f:
        f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\n" % server)
        if ca:
            f.write("    certificate-authority: %s\n" % ca)
        f.write("contexts:\n- name: c\n  context: {cluster: c, user: u, namespace: %s}\ncurrent-context: c\n"
                "users:\n- name: u\n  user: {%s}\n" % (namespace, ("token: " + token) if token else ""))
    return path


def api(url, path, token=None, ca=None, accept=None, method="GET", body=None, ctype=None):
    """One request to kbridge or the API server (token: bearer, ca: its CA file); returns (status, JSON)."""
    req = urllib.request.Request(url + path, method=method, data=json.dumps(body).encode() if body else None)
    if accept:
        req.add_header("Accept", accept)
    if ctype:
        req.add_header("Content-Type", ctype)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    ctx = ssl.create_default_context(cafile=ca) if ca else None
    try:
        with urllib.request.urlopen(req, timeout=60, context=ctx) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def replica(cp, informers, workdir):
    """kbridge serving the Kubernetes API over plain HTTP on loopback as a replica of the control plane cp
    (informers: (name, group, version, resource) rows). Returns (bridge, kubeconfig for kubectl/client-go on
    it, its URL); the bridge has started listening."""
    port = _free_port()
    rows = ",\n  ".join('{ name = "%s"; group = "%s"; version = "%s"; resource = "%s"; }' % i for i in informers)
    b = ConfigBridge("""
cluster = { name = "real"; kubeconfig = "%s"; };
http = { listen = "127.0.0.1:%d"; };
shutdown_timeout = 20;
log = { level = "info"; };
informers = (
  %s
);
""" % (cp.kubeconfig, port, rows), workdir=workdir)
    url = "http://127.0.0.1:%d" % port
    b.wait_log("http: listening on", 120)
    return b, kubeconfig(workdir + "/kbridge.kubeconfig", url, namespace="e2e"), url


class ClientGo:
    """One kbclientgo process (mode "informer" or "watchers") driven over stdin/stdout."""

    def __init__(self, exe, mode, kubeconfig, *args, watch_list=None, log=None):
        env = dict(os.environ)
        if watch_list is not None:
            env["KUBE_FEATURE_WatchListClient"] = "true" if watch_list else "false"
        self.log = log
        self.proc = subprocess.Popen([exe, mode, "--kubeconfig", kubeconfig] + list(args), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=open(log, "a") if log else subprocess.DEVNULL,
                                     text=True, env=env)
        _procs.append(self.proc)

    def ask(self, cmd):
        check(self.proc.poll() is None, "kbclientgo exited %s" % self.proc.returncode)
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        check(line, "kbclientgo gave no answer to %s" % cmd)
        return json.loads(line)

    def store(self):
        d = self.ask("dump")
        return d["store"] if d["synced"] else None

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
