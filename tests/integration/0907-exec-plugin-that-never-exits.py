"""An exec credential plugin that closes its stdout but keeps running
cannot hang kbridge: after cluster.exec_timeout it is killed with its
process group, /readyz names the informer and says the plugin did not
exit, kbridge retries; and SIGTERM stops kbridge promptly even while such
a plugin is being waited for (the plugin is killed too)."""
import os
from kbtest import *

TAIL = """informers = ( { name = "pods"; version = "v1"; resource = "pods"; } );
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "pods"; sink = "out"; } );
http = { listen = "127.0.0.1:0"; };
"""


def pid_running(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p1"]))
    work = tempfile.mkdtemp(prefix="kb0907-")
    plugin = work + "/plugin.sh"
    with open(plugin, "w") as f:
        f.write("#!/bin/sh\necho $$ >> %s/pids\nexec >&-\nexec sleep 600\n" % work)
    os.chmod(plugin, 0o700)
    kc = write_kubeconfig(work + "/kubeconfig", sim.url,
                          '{exec: {apiVersion: client.authentication.k8s.io/v1, command: "%s"}}' % plugin)

    b = ConfigBridge('cluster = { kubeconfig = "%s"; exec_timeout = 2; };\n%s' % (kc, TAIL))
    url = b.http_url()

    def reason():
        code, _, body = http_request(url + "/readyz", timeout=10)
        return code == 503 and b"informer pods" in body and b"did not exit" in body and body
    body = wait_for(reason, 90, 0.2, "/readyz to name the plugin that did not exit")
    print("readyz: %s" % body.decode().strip())
    pids = [int(l) for l in open(work + "/pids")]
    wait_for(lambda: not pid_running(pids[0]), 90, 0.1, "the first plugin run to be killed")
    check(b.alive(), "kbridge keeps running and retrying")
    check(b.stop(timeout=90) == 0, "SIGTERM exits 0")

    # SIGTERM while a plugin is being waited for (a long exec_timeout).
    os.unlink(work + "/pids")
    b = ConfigBridge('cluster = { kubeconfig = "%s"; exec_timeout = 600; };\n%s' % (kc, TAIL))
    wait_for(lambda: os.path.exists(work + "/pids") and open(work + "/pids").read().strip(), 60, 0.1,
             "the plugin to run")
    pid = int(open(work + "/pids").read().split()[0])
    check(b.stop(timeout=90) == 0, "SIGTERM stops kbridge while the plugin runs (exec_timeout is 600 s)")
    wait_for(lambda: not pid_running(pid), 90, 0.1, "the plugin to be killed on stop")
    sim.stop()


run(test)
