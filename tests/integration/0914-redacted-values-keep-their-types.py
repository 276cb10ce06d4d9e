"""A redacted value stays a valid value of its field: a Secret's data and a
ConfigMap's binaryData are base64 ([]byte), so each redacted value there is
the base64 of "<redacted>" ("PHJlZGFjdGVkPg==") and decodes strictly, in the
file sink and in the kube API's list (so `kubectl describe secret` and typed
clients work); string fields (stringData, a ConfigMap's data) stay
"<redacted>"."""
import base64
import binascii
import subprocess
from kbtest import *

REDACTED_B64 = "PHJlZGFjdGVkPg=="


def decodes(v):
    try:
        base64.b64decode(v, validate=True)
        return True
    except (binascii.Error, ValueError, TypeError):
        return False


def check_types(where, secrets, configmaps):
    check(len(secrets) == 2 and len(configmaps) == 1, "%s: two Secrets and one ConfigMap: %d %d"
          % (where, len(secrets), len(configmaps)))
    for o in secrets:
        for k, v in o["data"].items():
            check(decodes(v), "%s: Secret %s data[%s] is base64: %r" % (where, o["metadata"]["name"], k, v))
            check(v == REDACTED_B64, "%s: data[%s] is the documented redacted value: %r" % (where, k, v))
        check(all(v == "<redacted>" for v in o.get("stringData", {}).values()),
              "%s: stringData stays a string: %s" % (where, o.get("stringData")))
    cm = configmaps[0]
    check(cm["binaryData"] == {"blob": REDACTED_B64}, "%s: binaryData is base64: %s" % (where, cm["binaryData"]))
    check(cm["data"] == {"conf": "<redacted>"}, "%s: a ConfigMap's data is a string: %s" % (where, cm["data"]))


def listed(b, resource):
    st, _, body = http_request(b.http_url() + "/api/v1/" + resource)
    check(st == 200, "kube API list of %s: %d" % (resource, st))
    return json.loads(body)["items"]


def test():
    sim = Sim()
    sec = {"type": "Opaque", "data": {"password": "aHVudGVyMg==", "user": "YWRtaW4="},
           "stringData": {"token": "t0ps3cret"}}
    sim.bulk([{"op": "create", "resource": "secrets", "namespace": "default", "name": n, "data": sec}
              for n in ("db", "web")] +
             [{"op": "create", "resource": "configmaps", "namespace": "default", "name": "cfg",
               "data": {"data": {"conf": "x=1"}, "binaryData": {"blob": "AAEC"}}}])
    b = Bridge(sim, http='listen = "127.0.0.1:0";', informers=[
        '{ name = "secrets"; version = "v1"; resource = "secrets"; }',
        '{ name = "cms"; version = "v1"; resource = "configmaps"; redact_fields = [ "data", "binaryData" ]; }'])
    b.wait_converged(sim, resource="secrets")
    b.wait_converged(sim, resource="configmaps")
    evs = b.events()
    check_types("file sink", [e["object"] for e in evs if e["resource"] == "secrets"],
                [e["object"] for e in evs if e["resource"] == "configmaps"])
    check_types("kube API", listed(b, "secrets"), listed(b, "configmaps"))

    # kubectl decodes data as []byte: describe works on a redacted Secret.
    kc = os.path.join(b.dir, "kubeconfig")
    with open(kc, "w") as f:
        f.write("apiVersion: v1\nkind: Config\nclusters: [{name: kb, cluster: {server: \"%s\"}}]\n"
                "contexts: [{name: kb, context: {cluster: kb, namespace: default}}]\ncurrent-context: kb\n"
                "users: []\n" % b.http_url())
    r = subprocess.run(["kubectl", "--kubeconfig", kc, "--cache-dir", b.dir + "/cache", "describe", "secret", "db"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and "password" in r.stdout, "kubectl describe secret: %d %s %s"
          % (r.returncode, r.stdout, r.stderr[-1000:]))
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
