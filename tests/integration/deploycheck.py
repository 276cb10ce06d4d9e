"""Checks that a set of rendered Kubernetes objects works together (used by the deploy tests).

Rendered manifests can each be valid and still not work: a Deployment with no namespace lands in
kubectl's current namespace, away from its ServiceAccount; a Service whose selector names a label the
pods lack routes nowhere; a PDB without a selector protects nothing. cross_check() finds those, given the
objects as JSON (kubectl ... -o json), and returns the list of problems (empty when they fit).

Beside it, what the deploy tests run: helm() / helm_template() on the chart (tests/infra/helm.sh, which
builds helm into ~/.cache/kbridge once), and kbridge_check() on a rendered config."""

import json
import os
import subprocess

from kbtest import KBRIDGE, SOURCE, check

CHART = os.path.join(SOURCE, "deploy", "helm", "kbridge")
HELM = os.path.join(SOURCE, "tests", "infra", "helm.sh")
HELM_NS = "kb-helm"  # the namespace the chart tests render into

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "PriorityClass", "StorageClass"}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet"}


def _pod_templates(objs):
    """[(workload object, pod template labels, pod spec)] for every workload."""
    return [(o, o["spec"]["template"]["metadata"].get("labels", {}), o["spec"]["template"]["spec"])
            for o in objs if o["kind"] in WORKLOADS]


def _matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _name(o):
    return "%s/%s" % (o["kind"], o["metadata"]["name"])


def _referenced(spec):
    """(kind, name) of every ServiceAccount, ConfigMap and Secret a pod spec names."""
    refs = [("ServiceAccount", spec.get("serviceAccountName", "default"))]
    for v in spec.get("volumes", []):
        if "configMap" in v:
            refs.append(("ConfigMap", v["configMap"]["name"]))
        if "secret" in v:
            refs.append(("Secret", v["secret"]["secretName"]))
        for src in v.get("projected", {}).get("sources", []):
            if "secret" in src:
                refs.append(("Secret", src["secret"]["name"]))
            if "configMap" in src:
                refs.append(("ConfigMap", src["configMap"]["name"]))
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        for e in c.get("envFrom", []):
            for kind, field in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
                if field in e:
                    refs.append((kind, e[field]["name"]))
        for e in c.get("env", []):
            vf = e.get("valueFrom", {})
            for kind, field in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
                if field in vf:
                    refs.append((kind, vf[field]["name"]))
    return refs


def cross_check(objs, namespace):
    """Problems with objs (a list of API objects as dicts) meant to run in `namespace`."""
    bad = []
    have = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs}
    for o in objs:
        ns = o["metadata"].get("namespace")
        if o["kind"] in CLUSTER_SCOPED:
            if ns:
                bad.append("%s is cluster-scoped but has namespace %s" % (_name(o), ns))
        elif ns != namespace:
            bad.append("%s: namespace %r, want %r" % (_name(o), ns, namespace))
    pods = _pod_templates(objs)
    if not pods:
        bad.append("no workload (Deployment/StatefulSet/DaemonSet)")
    for w, labels, spec in pods:
        sel = w["spec"].get("selector", {}).get("matchLabels", {})
        if not _matches(sel, labels):
            bad.append("%s: selector %s does not match its pod labels %s" % (_name(w), sel, labels))
        for kind, name in _referenced(spec):
            if (kind, namespace, name) not in have:
                bad.append("%s uses %s %s, not among the objects in %s" % (_name(w), kind, name, namespace))
        if w["kind"] == "StatefulSet":
            svc = w["spec"].get("serviceName")
            if ("Service", namespace, svc) not in have:
                bad.append("%s: serviceName %s is not a Service here" % (_name(w), svc))
        ports = {p["name"] for c in spec["containers"] for p in c.get("ports", []) if "name" in p}
        for o in objs:
            if o["kind"] == "Service":
                for p in o["spec"].get("ports", []):
                    t = p.get("targetPort")
                    if isinstance(t, str) and t not in ports:
                        bad.append("Service/%s: targetPort %s is not a port of %s" % (o["metadata"]["name"], t,
                                                                                    _name(w)))
    for o in objs:
        k = o["kind"]
        if k == "Service":
            sel = o["spec"].get("selector", {})
            if not any(_matches(sel, labels) for _, labels, _ in pods):
                bad.append("Service/%s: selector %s matches no pod template" % (o["metadata"]["name"], sel))
        elif k == "PodDisruptionBudget":
            sel = o["spec"].get("selector", {}).get("matchLabels", {})
            if not any(_matches(sel, labels) for _, labels, _ in pods):
                bad.append("PodDisruptionBudget/%s: selector %s matches no pod template" % (o["metadata"]["name"],
                                                                                           sel))
        elif k == "NetworkPolicy":
            sel = o["spec"].get("podSelector", {}).get("matchLabels", {})
            if not any(_matches(sel, labels) for _, labels, _ in pods):
                bad.append("NetworkPolicy/%s: podSelector %s matches no pod template" % (o["metadata"]["name"],
                                                                                        sel))
            if not o["spec"].get("ingress"):
                bad.append("NetworkPolicy/%s admits nothing" % o["metadata"]["name"])
            for rule in o["spec"].get("ingress", []):
                if not rule.get("from"):
                    bad.append("NetworkPolicy/%s: an ingress rule without `from` admits every pod" %
                               o["metadata"]["name"])
        elif k in ("ClusterRoleBinding", "RoleBinding"):
            for s in o.get("subjects", []):
                if s["kind"] == "ServiceAccount" and ("ServiceAccount", s.get("namespace"), s["name"]) not in have:
                    bad.append("%s binds ServiceAccount %s/%s, not among the objects" % (_name(o), s.get("namespace"),
                                                                                         s["name"]))
            ref = o["roleRef"]
            rns = None if ref["kind"] == "ClusterRole" else o["metadata"].get("namespace")
            if (ref["kind"], rns, ref["name"]) not in have:
                bad.append("%s refers to %s %s, not among the objects" % (_name(o), ref["kind"], ref["name"]))
    return bad


def pod_security(objs):
    """Problems with the pod specs against what the manifests promise: non-root, read-only root
    filesystem, no privilege escalation, every capability dropped."""
    bad = []
    for w, _, spec in _pod_templates(objs):
        if not spec.get("securityContext", {}).get("runAsNonRoot"):
            bad.append("%s: runAsNonRoot is not set" % _name(w))
        for c in spec["containers"]:
            sc = c.get("securityContext", {})
            if not sc.get("readOnlyRootFilesystem"):
                bad.append("%s/%s: root filesystem is writable" % (_name(w), c["name"]))
            if sc.get("allowPrivilegeEscalation", True):
                bad.append("%s/%s: privilege escalation allowed" % (_name(w), c["name"]))
            if "ALL" not in sc.get("capabilities", {}).get("drop", []):
                bad.append("%s/%s: capabilities not all dropped" % (_name(w), c["name"]))
    return bad


def json_docs(text):
    """The objects of kubectl's -o json output: one document per object, back to back (a List is opened)."""
    dec, i, out = json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return out
        doc, i = dec.raw_decode(text, i)
        out.extend(doc["items"] if doc.get("kind") == "List" else [doc])


def config_with_standins(kbridge, cfg):
    """A directory holding kbridge.cfg = cfg with /etc/kbridge/ and /var/lib/kbridge pointing into it, and
    stand-ins for the
    files the shipped configs name (broker password, HTTP and metrics tokens, a self-signed TLS pair). A kbridge
    without the http.tls_* keys (older than HTTPS) gets the config without them, said on stdout."""
    import tempfile
    d = tempfile.mkdtemp(prefix="kbtest-deploy-")
    for sub, name, text in (("secrets", "kafka-password", "pw\n"), ("http", "token", "t0ken\n"),
                            ("metrics", "token", "metrics-t0ken\n")):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
        with open(os.path.join(d, sub, name), "w") as f:
            f.write(text)
    os.makedirs(os.path.join(d, "tls"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=kb",
                    "-keyout", os.path.join(d, "tls", "tls.key"), "-out", os.path.join(d, "tls", "tls.crt")],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cfg = cfg.replace("/etc/kbridge/", d + "/")
    # The pod's volume for state_dir and file sinks: --check wants a sink's directory to exist.
    os.makedirs(os.path.join(d, "var-lib-kbridge"))
    cfg = cfg.replace('"/var/lib/kbridge', '"' + os.path.join(d, "var-lib-kbridge"))
    help_config = subprocess.run([kbridge, "--help-config"], stdout=subprocess.PIPE, text=True).stdout
    if "tls_cert_file" not in help_config:
        print("NOTE: this kbridge has no http.tls_* keys; checking the config without them")
        cfg = "\n".join(l for l in cfg.splitlines() if "tls_cert_file" not in l and "tls_key_file" not in l)
    with open(os.path.join(d, "kbridge.cfg"), "w") as f:
        f.write(cfg)
    return d


def helm(*args, check_rc=True):
    """`helm args...` (CompletedProcess, text); check_rc: a non-zero exit fails the test with its output. The
    first call may build helm (tests/infra/helm.sh): hence the long bound."""
    r = subprocess.run([HELM] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
    if check_rc:
        check(r.returncode == 0, "helm %s -> %d:\n%s%s" % (" ".join(args), r.returncode, r.stdout[-2000:],
                                                           r.stderr[-2000:]))
    return r


def helm_template(*args):
    """The chart rendered as release "rel" in HELM_NS for Kubernetes 1.36.3, with args (--set ..., -f ...)
    added: the manifests' text."""
    return helm("template", "rel", CHART, "--namespace", HELM_NS, "--kube-version", "1.36.3", *args).stdout


def kbridge_check(cfg_dir, host):
    """`kbridge --check` on cfg_dir/kbridge.cfg (a config_with_standins directory) as the pod named host
    ($HOSTNAME picks the shard): its summary; a non-zero exit fails the test."""
    cfg = os.path.join(cfg_dir, "kbridge.cfg")
    r = subprocess.run([KBRIDGE, "--config", cfg, "--check"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, env=dict(os.environ, HOSTNAME=host))
    if r.returncode != 0:
        with open(cfg) as f:
            text = f.read()
        check(False, "kbridge --check (HOSTNAME=%s) -> %d\n%s\n%s" % (host, r.returncode, r.stdout, text))
    return r.stdout
