#!/usr/bin/env python3
"""kbridge as a read replica of a real kube-apiserver (tests/infra/controlplane.sh), served over
HTTPS with a bearer token: kubectl through kbridge's kubeconfig lists what the server lists
(`get -A -o json` equals the server's items as kbridge shapes them), refuses delete, and the
client-go informers of tests/clientgo — on Pods with a label selector and on a CRD, with client-go's
watch-list on and off — end with stores equal to the same informers run against the API server,
RV for RV, through kubectl churn (creates, updates, label changes out of the selector and back,
deletes, re-creates). When kbridge restarts while the server keeps changing, the clients' next
watch is older than the new kbridge's window: 410, client-go lists again and converges."""
import signal
import subprocess

from kbtest import *
from kbtest import _free_port
from kbclientgo import ClientGo, binary, kubeconfig

CRD = widgets_crd(["wg"])

POD = """apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: e2e, labels: {app: %s}}
spec:
  automountServiceAccountToken: false
  containers: [{name: c, image: registry.invalid/none:1}]
"""


def shaped(obj):
    """The server's object as kbridge's default drop_fields leave it."""
    o = json.loads(json.dumps(obj))
    md = o["metadata"]
    md.pop("managedFields", None)
    ann = md.get("annotations", {})
    ann.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if "annotations" in md and not ann:
        md.pop("annotations")
    o.pop("kind", None)
    o.pop("apiVersion", None)
    return o


def keyed(items):
    return {i["metadata"]["namespace"] + "/" + i["metadata"]["name"]: shaped(i) for i in items}


def metric(url, ca, token, name):
    import ssl
    ctx = ssl.create_default_context(cafile=ca)
    req = urllib.request.Request(url + "/metrics", headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
        for l in r.read().decode().splitlines():
            if l.startswith(name + " ") or (name.endswith("}") and l.startswith(name)):
                return float(l.split()[1])
    return 0.0


def patch(cp, path, body):
    """A JSON merge patch as the admin, like kubectl annotate."""
    import ssl
    req = urllib.request.Request(cp.server + path, data=json.dumps(body).encode(), method="PATCH",
                                 headers={"Authorization": "Bearer " + cp.env["KB_K8S_ADMIN_TOKEN"],
                                          "Content-Type": "application/merge-patch+json"})
    with urllib.request.urlopen(req, timeout=60, context=ssl.create_default_context(cafile=cp.ca)) as r:
        check(r.status == 200, "PATCH %s -> %d" % (path, r.status))


def test():
    exe = binary()
    cp = ControlPlane()
    k = cp.kubectl
    k("create", "namespace", "e2e")
    k("create", "serviceaccount", "default", "-n", "e2e")
    k("apply", "-f", "-", input=CRD)
    k("wait", "--for", "condition=established", "--timeout=120s", "crd/widgets.example.com")
    for i in range(4):
        k("apply", "-f", "-", input=POD % ("web-%d" % i, "web"))
    k("apply", "-f", "-", input=POD % ("db-0", "db"))
    for i in range(3):
        k("apply", "-f", "-", input="apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w%d, namespace: e2e}"
                                    "\nspec: {size: %d}\n" % (i, i))

    work = tempfile.mkdtemp(prefix="kb0602-")
    token = "replica-t0ken-0602"
    self_signed_tls(work, token=token)
    port = _free_port()
    config = """
cluster = { name = "real"; kubeconfig = "%s"; };
http = { listen = "127.0.0.1:%d"; token_file = "%s/token"; tls_cert_file = "%s/cert.pem"; tls_key_file = "%s/key.pem"; };
kube_api = { watch_history = 20; };
shutdown_timeout = 20;
log = { level = "info"; };
informers = (
  { name = "pods"; version = "v1"; resource = "pods"; },
  { name = "widgets"; group = "example.com"; version = "v1"; resource = "widgets"; }
);
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "pods"; sink = "out"; }, { informer = "widgets"; sink = "out"; } );
""" % (cp.kubeconfig, port, work, work, work)
    b = ConfigBridge(config, workdir=work)
    b.wait_log("http: listening on", 120)
    b.wait_log("informer=widgets listed", 120)
    url = "https://127.0.0.1:%d" % port
    kb_kc = kubeconfig(work + "/kbridge.kubeconfig", url, ca=work + "/cert.pem", token=token, namespace="e2e")

    def kb(*args, ok=True):
        r = subprocess.run(["kubectl", "--kubeconfig", kb_kc, "--cache-dir", work + "/kcache"] + list(args),
                           capture_output=True, text=True, timeout=120)
        if ok:
            check(r.returncode == 0, "kubectl (kbridge) %s -> %d: %s" % (" ".join(args), r.returncode, r.stderr))
        return r

    # kubectl through kbridge: the same items as the server, shaped; short names from discovery; delete refused.
    def same_as_server():
        server = keyed(json.loads(k("get", "pods", "-A", "-o", "json"))["items"])
        mine = keyed(json.loads(kb("get", "pods", "-A", "-o", "json").stdout)["items"])
        return server == mine
    wait_for(same_as_server, 60, 0.5, "kubectl get pods -A through kbridge to equal the server")
    wg = kb("get", "wg", "-o", "name").stdout.split()
    check(wg == ["widget.example.com/w0", "widget.example.com/w1", "widget.example.com/w2"], "get wg: %s" % wg)
    r = kb("delete", "pod", "web-0", ok=False)
    check(r.returncode != 0 and "read-only replica" in r.stderr, "delete through kbridge: %s" % r.stderr)
    r = kb("get", "pod", "nope", ok=False)
    check(r.returncode != 0 and 'pods "nope" not found' in r.stderr, "NotFound: %s" % r.stderr)
    names = kb("get", "pods", "-l", "app=web", "--field-selector", "metadata.name!=web-1", "-o", "name").stdout.split()
    check(names == ["pod/web-0", "pod/web-2", "pod/web-3"], "selectors through kbridge: %s" % names)

    # client-go informers: on kbridge (watch-list on and off) and on the API server.
    clients = {}

    def kb_requests(verb):
        return sum(metric(url, work + "/cert.pem", token, 'kbridge_api_requests_total{verb="%s",resource="%s",code="200"}'
                          % (verb, r)) for r in ("pods", "widgets.example.com"))
    lists0, watches0 = kb_requests("list"), kb_requests("watch")
    for side, kc, wl in (("kb", kb_kc, True), ("kb", kb_kc, False), ("api", cp.kubeconfig, None)):
        tag = "%s-%s" % (side, {True: "wl", False: "nowl", None: "default"}[wl])
        clients["pods-" + tag] = ClientGo(exe, "informer", kc, "--resource", "v1/pods", "--selector", "app=web",
                                          watch_list=wl, log=work + "/clientgo-pods-%s.log" % tag)
        clients["widgets-" + tag] = ClientGo(exe, "informer", kc, "--resource", "example.com/v1/widgets",
                                             watch_list=wl, log=work + "/clientgo-widgets-%s.log" % tag)
        if wl is True:  # client-go's streaming list: watches only, no list
            wait_for(lambda: all(c.store() is not None for c in clients.values()), 120, 0.5, "the watch-list sync")
            check(kb_requests("list") == lists0 and kb_requests("watch") >= watches0 + 2,
                  "watch-list on: lists %s -> %s, watches %s -> %s" % (lists0, kb_requests("list"), watches0,
                                                                      kb_requests("watch")))
        if wl is False:  # list, then watch
            wait_for(lambda: all(c.store() is not None for c in clients.values()), 120, 0.5, "the list+watch sync")
            check(kb_requests("list") >= lists0 + 2, "watch-list off made no list")

    def converged(what):
        def ok():
            stores = {n: c.store() for n, c in clients.items()}
            if any(s is None for s in stores.values()):
                return False
            for res in ("pods", "widgets"):
                ref = stores[res + "-api-default"]
                if any(s != ref for n, s in stores.items() if n.startswith(res + "-")):
                    return False
            return stores
        try:
            return wait_for(ok, 180, 0.5, what)
        except Failure:
            stores = {n: c.store() for n, c in clients.items()}
            raise Failure("%s: stores differ:\n%s" % (what, json.dumps(stores, indent=1, sort_keys=True)[:6000]))

    stores = converged("the first sync")
    check(sorted(stores["pods-api-default"]) == ["e2e/web-%d" % i for i in range(4)], "pods: %s" % stores)

    def churn(tag):
        k("apply", "-f", "-", input=POD % ("new-" + tag, "web"))
        k("annotate", "-n", "e2e", "pod", "web-1", "note=" + tag, "--overwrite")
        k("label", "-n", "e2e", "pod", "web-2", "app=db", "--overwrite")            # leaves the selector
        k("label", "-n", "e2e", "pod", "db-0", "app=web", "--overwrite")            # enters it
        k("delete", "-n", "e2e", "pod", "web-3", "--wait=true", "--timeout=60s")
        k("apply", "-f", "-", input=POD % ("web-3", "web"))                         # re-created, new uid
        k("label", "-n", "e2e", "pod", "web-2", "app=web", "--overwrite")           # back in
        k("label", "-n", "e2e", "pod", "db-0", "app=db", "--overwrite")             # out again
        k("patch", "-n", "e2e", "widget", "w1", "--type=merge", "-p", '{"spec":{"size":"%s"}}' % tag)
        k("delete", "-n", "e2e", "widget", "w2")
        k("apply", "-f", "-", input="apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w2, namespace: e2e}\n"
                                    "spec: {size: 9}\n")

    churn("a")
    stores = converged("after the churn")
    want = cp.state("/api/v1/namespaces/e2e/pods?labelSelector=app%3Dweb")
    check(stores["pods-kb-wl"] == want, "pods store vs the server: %s vs %s" % (stores["pods-kb-wl"], want))
    check(stores["widgets-kb-nowl"] == cp.state("/apis/example.com/v1/namespaces/e2e/widgets"), "widgets vs server")

    # kbridge restarts while the server changes more than its window: 410, relist, converge.
    check(b.stop() == 0, "kbridge exit code")
    for i in range(25):  # more changes than kbridge's window (watch_history = 20), through the API (not 25 kubectl runs)
        patch(cp, "/api/v1/namespaces/e2e/pods/web-0", {"metadata": {"annotations": {"n": str(i)}}})
    churn("b")
    b = ConfigBridge(config, workdir=work)
    b.wait_log("http: listening on", 120)
    converged("after kbridge restarted")
    expired = metric(url, work + "/cert.pem", token, "kbridge_api_watches_expired_total")
    check(expired >= 1, "no watch was answered 410 after the restart (%s)" % expired)
    for c in clients.values():
        c.stop()
    check(b.stop() == 0, "kbridge exit code")


if __name__ == "__main__":
    run(test)
