#!/usr/bin/env python3
"""Against a real kube-apiserver with RBAC: identities that may only list/watch configmaps in one
namespace. Four kbridges, one per way of authenticating, each with a cluster-wide informer and a
namespaced one:
  - a bearer token file (cluster.server + ca_file + token_file),
  - a kubeconfig with an inline client certificate and key (client-certificate-data, never on disk),
  - in-cluster style (KUBERNETES_SERVICE_HOST/PORT + a service-account mount given by KB_SA_DIR),
    whose token starts out wrong (401) and is replaced: the bridge re-reads it and recovers,
  - a kubeconfig whose user is an exec credential plugin.
Each logs a clear 403 for the cluster-wide informer, naming the user, and streams the namespace it
may see; /readyz answers 503 naming the informer and the 403."""
import base64
import os
import signal
import tempfile

from kbtest import check, ConfigBridge, ControlPlane, http_request, run

RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: cm-reader, namespace: allowed}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: cm-readers, namespace: allowed}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: kb-limited}
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: kb-client}
- {kind: ServiceAccount, name: kbridge, namespace: allowed}
"""

BODY = """
http = { listen = ""; };
shutdown_timeout = 20;
log = { level = "info"; };
informers = (
  { name = "everywhere"; version = "v1"; resource = "configmaps"; },
  { name = "mine"; version = "v1"; resource = "configmaps"; namespaces = [ "allowed" ]; }
);
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "everywhere"; sink = "out"; }, { informer = "mine"; sink = "out"; } );
"""


def b64(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def write(path, text, mode=0o600):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def test():
    cp = ControlPlane()
    k = cp.kubectl
    for ns in ("allowed", "other"):
        k("create", "namespace", ns)
    k("create", "serviceaccount", "kbridge", "-n", "allowed")
    k("apply", "-f", "-", input=RBAC)
    k("create", "configmap", "-n", "allowed", "before", "--from-literal=x=1")
    k("create", "configmap", "-n", "other", "hidden", "--from-literal=x=1")
    d = tempfile.mkdtemp(prefix="kbtest-auth-")
    env = cp.env

    # 1. Token file.
    token_file = write(os.path.join(d, "limited.token"), env["KB_K8S_LIMITED_TOKEN"] + "\n")
    token = ConfigBridge('cluster = { name = "tok"; server = "%s"; ca_file = "%s"; token_file = "%s"; };\n'
                         % (cp.server, cp.ca, token_file) + BODY.replace('listen = ""', 'listen = "127.0.0.1:0"'))

    # 2. Kubeconfig, client certificate inline.
    kc_cert = write(os.path.join(d, "cert.kubeconfig"), """apiVersion: v1
kind: Config
current-context: cert
clusters: [{name: c, cluster: {server: "%s", certificate-authority-data: %s}}]
contexts: [{name: cert, context: {cluster: c, user: u}}]
users: [{name: u, user: {client-certificate-data: %s, client-key-data: %s}}]
""" % (cp.server, b64(cp.ca), b64(env["KB_K8S_CLIENT_CERT"]), b64(env["KB_K8S_CLIENT_KEY"])))
    cert = ConfigBridge('cluster = { name = "cert"; kubeconfig = "%s"; };\n' % kc_cert + BODY)

    # 3. In-cluster style: the service account's mount, with a wrong token to begin with.
    sa_dir = os.path.join(d, "serviceaccount")
    os.makedirs(sa_dir)
    write(os.path.join(sa_dir, "ca.crt"), open(cp.ca).read(), 0o644)
    write(os.path.join(sa_dir, "token"), "not-a-valid-token\n")
    port = cp.server.rsplit(":", 1)[1]
    incluster = ConfigBridge('cluster = { name = "pod"; };\n' + BODY, env={
        "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port, "KB_SA_DIR": sa_dir})

    # 4. Kubeconfig with an exec credential plugin that hands out the limited token.
    plugin = write(os.path.join(d, "plugin.sh"), """#!/bin/sh
echo "ran" >> "%s/plugin.runs"
cat <<EOF
{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
 "status": {"token": "$(cat "$TOKEN_FILE")", "expirationTimestamp": "2099-01-01T00:00:00Z"}}
EOF
""" % d, 0o700)
    kc_exec = write(os.path.join(d, "exec.kubeconfig"), """apiVersion: v1
kind: Config
current-context: ex
clusters: [{name: c, cluster: {server: "%s", certificate-authority: "%s"}}]
contexts: [{name: ex, context: {cluster: c, user: u}}]
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./plugin.sh
      interactiveMode: Never
      env: [{name: TOKEN_FILE, value: "%s"}]
""" % (cp.server, cp.ca, token_file))
    execb = ConfigBridge('cluster = { name = "exec"; kubeconfig = "%s"; };\n' % kc_exec + BODY)

    bridges = {"kb-limited": token, "kb-client": cert, "system:serviceaccount:allowed:kbridge": incluster,
               "kb-limited (exec)": execb}
    # The in-cluster bridge is refused until its token is right; then it must pick the new one up.
    incluster.wait_log("HTTP 401", 120)
    write(os.path.join(sa_dir, "token"),
          k("create", "token", "kbridge", "-n", "allowed", "--duration=1h").strip() + "\n")

    for user, b in bridges.items():
        name = user.split(" ")[0]
        log = b.wait_log("is forbidden: User", 180)  # "cannot watch resource": the streamed list is a watch
        check("403" in log and name in log, "%s: the 403 does not name the user:\n%s" % (user, log[-2000:]))
        b.wait_log("informer=mine namespace=allowed listed", 180)

    # /readyz says why the bridge is not ready: the 403, for the informer that got it.
    status, _, text = http_request(token.http_url() + "/readyz")
    text = text.decode()
    check(status == 503 and "informer everywhere" in text and "403" in text and "informer mine" not in text,
          "/readyz: %d %s" % (status, text))

    k("create", "configmap", "-n", "allowed", "after", "--from-literal=y=2")
    want = cp.state("/api/v1/namespaces/allowed/configmaps")
    for user, b in bridges.items():
        b.wait_view(want, "configmaps", 180)
        check(not any(e["namespace"] == "other" for e in b.events()), "%s saw the other namespace" % user)
        check(b.alive(), "%s: kbridge died on a 403" % user)
    check(os.path.exists(os.path.join(d, "plugin.runs")), "the exec plugin never ran")
    with open(os.path.join(d, "plugin.runs")) as f:
        runs = len(f.read().split())
    check(runs <= 2, "the exec credential was not cached: the plugin ran %d times" % runs)
    for user, b in bridges.items():
        check(b.stop(signal.SIGTERM) == 0, "%s: exit status on SIGTERM" % user)
        check(env["KB_K8S_LIMITED_TOKEN"] not in b.logtext(), "%s: the token appears in the log" % user)


run(test)
