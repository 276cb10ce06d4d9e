"""The read-replica configuration of docs/replica.md — informers, the kube
API, no sinks and no routes — is valid: `--check` passes and says each
informer is served by the kube API only, kbridge starts without warning that
the informers go nowhere, and `kubectl get pods` through it lists the
server's pods."""
import subprocess
from kbtest import *
from kbtest import _free_port

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "replica.md")


def doc_config():
    """The configuration block of docs/replica.md, exactly."""
    text = open(DOC).read()
    start = text.index("```\nhttp = {") + 4
    return text[start:text.index("```", start)]


def test():
    sim = Sim()
    sim.ctl("resources", {"group": "example.com", "version": "v1", "resource": "widgets", "kind": "Widget",
                          "namespaced": True})
    sim.bulk(pod_ops("create", "ns1", ["web%d" % i for i in range(3)], labels={"app": "web"}))
    work = tempfile.mkdtemp(prefix="kb0607-")
    token = "replica-t0ken-0607"
    self_signed_tls(work, key="tls.key", cert="tls.crt", token=token)
    port = _free_port()
    # The doc's block as written; only the machine's paths and port differ, and the cluster is the simulator.
    text = doc_config().replace("/var/run/kbridge/", work + "/").replace("0.0.0.0:9464", "127.0.0.1:%d" % port)
    config = 'cluster = { name = "sim"; server = "%s"; };\nlog = { level = "debug"; };\n%s' % (sim.url, text)
    b = ConfigBridge(config, workdir=work, start=False)
    r = subprocess.run([KBRIDGE, "--config", b.config, "--check"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "--check of the doc's replica config -> %d: %s" % (r.returncode, r.stderr))
    for name in ("pods", "widgets"):
        check("informers.%s: served by the kube API only" % name in r.stdout, "--check says nothing of %s:\n%s"
              % (name, r.stdout))
    b.start()
    b.wait_log("informer=pods listed", 60)
    kc = write_kubeconfig(work + "/kbridge.kubeconfig", "https://127.0.0.1:%d" % port,
                          "{token: %s}" % token)
    with open(kc) as f:
        kctext = f.read().replace('server: "https', 'certificate-authority: "%s/tls.crt", server: "https' % work)
    with open(kc, "w") as f:
        f.write(kctext)

    def names():
        r = subprocess.run(["kubectl", "--kubeconfig", kc, "--cache-dir", work + "/kcache", "get", "pods", "-n",
                            "ns1", "-o", "name"], capture_output=True, text=True, timeout=60)
        return r.returncode == 0 and sorted(r.stdout.split())
    got = wait_for(names, 60, 0.5, "kubectl get pods through the replica")
    check(got == ["pod/web0", "pod/web1", "pod/web2"], "kubectl get pods: %s" % got)
    check("goes nowhere" not in b.logtext() and "go nowhere" not in b.logtext(),
          "the replica's informers are warned about:\n" + b.logtext()[-2000:])
    check(b.stop() == 0, "kbridge exit code")
    sim.stop()


if __name__ == "__main__":
    run(test)
