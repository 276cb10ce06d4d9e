"""A bearer token is never sent over plain http:// off loopback by
accident: cluster.server = "http://<not loopback>" with cluster.token_file
is refused at load (--check too) naming cluster.allow_insecure_http; the
same from a kubeconfig is refused at start (exit 2) before any request;
with cluster.allow_insecure_http = true it is allowed with a warning. To a
loopback server it runs and warns that the token travels unencrypted, and
the start line no longer claims tls_verify=on for plain http. (0.0.0.0 is
"not loopback" by name but connects locally: nothing leaves the machine.)"""
import subprocess
from kbtest import *

TAIL = """informers = ( { name = "pods"; version = "v1"; resource = "pods"; } );
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "pods"; sink = "out"; } );
http = { listen = ""; };
"""


def check_cfg(cluster):
    b = ConfigBridge("cluster = { %s };\n%s" % (cluster, TAIL), start=False)
    p = subprocess.run([KBRIDGE, "--config", b.config, "--check"], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stderr


def test():
    work = tempfile.mkdtemp(prefix="kb0905-")
    tok = work + "/token"
    with open(tok, "w") as f:
        f.write("t0ken-0905\n")
    for server in ("http://10.1.2.3:6443", "http://kube.example:80/", "http://[fd00::1]:6443"):
        rc, err = check_cfg('server = "%s"; token_file = "%s";' % (server, tok))
        check(rc == 2 and "cluster.allow_insecure_http" in err and server in err,
              "%s + token_file refused naming the key: %d %r" % (server, rc, err))
        rc, err = check_cfg('server = "%s"; token_file = "%s"; allow_insecure_http = true;' % (server, tok))
        check(rc == 0, "%s allowed with allow_insecure_http: %r" % (server, err))
    for server in ("https://10.1.2.3:6443", "http://127.0.0.1:6443", "http://localhost:1", "http://[::1]:1"):
        rc, err = check_cfg('server = "%s"; token_file = "%s";' % (server, tok))
        check(rc == 0, "%s + token_file is valid: %r" % (server, err))

    # From a kubeconfig: refused at start, before any request.
    kc = write_kubeconfig(work + "/kubeconfig", "http://0.0.0.0:1", '{token: "kc-t0ken-0905"}')
    b = ConfigBridge('cluster = { kubeconfig = "%s"; };\n%s' % (kc, TAIL))
    b.proc.wait(60)
    log = b.logtext()
    b.logf.close()
    check(b.proc.returncode == 2 and "cluster.allow_insecure_http" in log and "http://0.0.0.0:1" in log,
          "kubeconfig http:// server refused at start: %d %s" % (b.proc.returncode, log[-1500:]))
    check("kc-t0ken-0905" not in log, "the token is not logged")

    # Loopback: runs, warns, and says no TLS.
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p1"]))
    b = ConfigBridge('cluster = { server = "%s"; token_file = "%s"; };\n%s' % (sim.url, tok, TAIL))
    log = b.wait_log("travels unencrypted")
    check("tls_verify=on" not in log and "plain http" in log, "no tls_verify=on for http://: %s" % log[-1500:])
    b.wait_converged(sim)
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
