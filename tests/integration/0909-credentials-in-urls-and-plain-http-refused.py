"""A password never rides in a URL: cluster.server = "http://u:${PW}@host"
(libcurl would send it as Basic auth while the start line said auth=none,
and the URL is printed by --check, the log and /readyz) and an MQTT sink's
uri with user:password@ are refused at load and by --check, naming the key
and where credentials go instead, without printing the password; a
kubeconfig server with user:password@ is refused at start the same way.
A plain http:// API server beyond loopback is refused at load even without
a credential (what kbridge reads would cross the network unauthenticated)
unless cluster.allow_insecure_http = true. (Nothing here connects: the
addresses are not contacted by --check.)"""
import os
import subprocess
from kbtest import *

PW = "pa55-0909-secret"
TAIL = """informers = ( { name = "pods"; version = "v1"; resource = "pods"; } );
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "pods"; sink = "out"; } );
http = { listen = ""; };
"""


def check_cfg(text):
    b = ConfigBridge(text, start=False)
    env = dict(os.environ, PW=PW)
    env.pop("KUBECONFIG", None)
    p = subprocess.run([KBRIDGE, "--config", b.config, "--check"], capture_output=True, text=True, timeout=30,
                       env=env)
    return p.returncode, p.stdout + p.stderr


def test():
    work = tempfile.mkdtemp(prefix="kb0909-")
    for server in ("http://u:${PW}@127.0.0.1:1", "https://u:${PW}@10.1.2.3:6443", "http://${PW}@localhost:1/"):
        rc, out = check_cfg('cluster = { server = "%s"; };\n%s' % (server, TAIL))
        check(rc == 2 and "cluster.server" in out and "cluster.token_file" in out,
              "%s refused naming cluster.server and where credentials go: %d %r" % (server, rc, out))
        check(PW not in out, "%s: the password is not printed: %r" % (server, out))

    mqtt = TAIL.replace('{ name = "out"; type = "file"; path = "{out}"; }',
                        '{ name = "out"; type = "mqtt"; uri = "tcp://bridge:${PW}@127.0.0.1:1883"; }')
    rc, out = check_cfg('cluster = { server = "http://127.0.0.1:1"; };\n' + mqtt)
    check(rc == 2 and "uri" in out and "username" in out and "password_file" in out,
          "an MQTT uri with user:password@ is refused naming username/password_file: %d %r" % (rc, out))
    check(PW not in out, "mqtt: the password is not printed: %r" % out)

    # Plain http:// beyond loopback: refused with no credential at all, unless allowed explicitly.
    for server in ("http://10.1.2.3:6443", "http://kube.example/"):
        rc, out = check_cfg('cluster = { server = "%s"; };\n%s' % (server, TAIL))
        check(rc == 2 and "cluster.allow_insecure_http" in out and "cluster.server" in out,
              "%s without a token is refused naming cluster.allow_insecure_http: %d %r" % (server, rc, out))
        rc, out = check_cfg('cluster = { server = "%s"; allow_insecure_http = true; };\n%s' % (server, TAIL))
        check(rc == 0, "%s allowed with allow_insecure_http: %r" % (server, out))
    rc, out = check_cfg('cluster = { server = "http://127.0.0.1:1"; };\n' + TAIL)
    check(rc == 0, "loopback http:// stays valid: %r" % out)

    # From a kubeconfig: refused at start, exit 2, no password in the log.
    kc = write_kubeconfig(work + "/kubeconfig", "http://admin:%s@127.0.0.1:1" % PW, "{}")
    b = ConfigBridge('cluster = { kubeconfig = "%s"; };\n%s' % (kc, TAIL))
    b.proc.wait(60)
    log = b.logtext()
    b.logf.close()
    check(b.proc.returncode == 2 and "user:password@" in log, "kubeconfig server with userinfo refused at start: %d %s"
          % (b.proc.returncode, log[-1500:]))
    check(PW not in log, "the kubeconfig's password is not logged: %s" % log[-1500:])
    # A kubeconfig's plain http:// server beyond loopback, without a credential: refused at start too.
    kc = write_kubeconfig(work + "/kubeconfig2", "http://0.0.0.0:1", "{}")
    b = ConfigBridge('cluster = { kubeconfig = "%s"; };\n%s' % (kc, TAIL))
    b.proc.wait(60)
    log = b.logtext()
    b.logf.close()
    check(b.proc.returncode == 2 and "cluster.allow_insecure_http" in log,
          "kubeconfig http:// server beyond loopback refused at start: %d %s" % (b.proc.returncode, log[-1500:]))


run(test)
