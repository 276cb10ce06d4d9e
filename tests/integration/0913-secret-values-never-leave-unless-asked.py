"""Secret values never leave unless the configuration asks for them: a
secrets informer whose own drop_fields (only metadata.managedFields) and
redact_fields (only metadata.labels) replace the defaults still has data and
stringData redacted and the last-applied-configuration annotation (which
holds the whole Secret as applied) removed, in the file sink and in the kube
API's list and get; `--check` says so. Only emit_secret_values = true lets
the values through, and then `--check` and the log warn."""
import base64
import subprocess
from kbtest import *

LAC = "kubectl.kubernetes.io/last-applied-configuration"
CLEAR = {"password": "hunter2-0913", "user": "admin-0913"}
TOKEN = "t0ps3cret-0913"


def secret_object():
    data = {k: base64.b64encode(v.encode()).decode() for k, v in CLEAR.items()}
    applied = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "default"},
               "data": data, "stringData": {"token": TOKEN}}
    return {"type": "Opaque", "data": data, "stringData": {"token": TOKEN},
            "metadata": {"annotations": {LAC: json.dumps(applied), "owner": "a"}}}


def leaks(text):
    """The secret values (clear and base64, any part of them) found in text."""
    words = list(CLEAR.values()) + [TOKEN]
    words += [base64.b64encode(v.encode()).decode()[:8] for v in CLEAR.values()]
    return [w for w in words if w in text]


def check_cmd(b):
    p = subprocess.run([KBRIDGE, "--config", b.config, "--check"], capture_output=True, text=True, timeout=30)
    check(p.returncode == 0, "--check valid: %s" % p.stderr)
    return p.stdout + p.stderr


def bridge(sim, keys):
    inf = '{ name = "secrets"; version = "v1"; resource = "secrets"; %s }' % keys
    return Bridge(sim, informers=[inf], http='listen = "127.0.0.1:0";', start=False)


def served(b):
    """The kube API's list of secrets and its get of default/db, as text."""
    texts = []
    for path in ("/api/v1/secrets", "/api/v1/namespaces/default/secrets/db"):
        st, _, body = http_request(b.http_url() + path)
        check(st == 200, "kube API %s: %d %s" % (path, st, body[:300]))
        texts.append(body.decode())
    return texts


def test():
    sim = Sim()
    sim.bulk([{"op": "create", "resource": "secrets", "namespace": "default", "name": "db",
               "labels": {"team": "a"}, "data": secret_object()}])

    # Own drop_fields and redact_fields: the Secret's protection still holds.
    b = bridge(sim, 'drop_fields = [ "metadata.managedFields" ]; redact_fields = [ "metadata.labels" ];')
    out = check_cmd(b)
    check("informers.secrets: data and stringData redacted, last-applied-configuration removed" in out,
          "--check says what the secrets informer emits:\n%s" % out)
    b.start()
    b.wait_converged(sim, resource="secrets")
    lst, one = served(b)
    raw = open(b.out).read()
    for where, text in (("file sink", raw), ("kube API list", lst), ("kube API get", one)):
        check(not leaks(text), "no Secret value in the %s: %s in %s" % (where, leaks(text), text[:2000]))
        check(LAC not in text, "no last-applied-configuration in the %s: %s" % (where, text[:2000]))
    o = b.events()[-1]["object"]
    check(sorted(o["data"]) == ["password", "user"] and sorted(o["stringData"]) == ["token"],
          "the keys of data and stringData stay: %s" % o)
    check(o["metadata"]["labels"] == {"team": "<redacted>"}, "the user's own redaction applies too: %s" % o["metadata"])
    check(o["metadata"]["annotations"] == {"owner": "a"}, "other annotations stay: %s" % o["metadata"])
    check("sent in clear" not in b.logtext(), "no warning without emit_secret_values")
    check(b.stop() == 0, "clean stop")

    # Only the key that names the risk lets the values through, and it is said.
    b = bridge(sim, 'drop_fields = [ "metadata.managedFields" ]; emit_secret_values = true;')
    out = check_cmd(b)
    check(re.search(r"WARNING informers\.secrets: emit_secret_values = true: Secret values .*in clear", out),
          "--check warns about emit_secret_values:\n%s" % out)
    b.start()
    b.wait_converged(sim, resource="secrets")
    raw = open(b.out).read()
    check(leaks(raw), "with emit_secret_values the values pass: %s" % raw[:2000])
    check(LAC in raw, "with emit_secret_values and own drop_fields the annotation passes")
    wait_for(lambda: "emit_secret_values = true: Secret values are sent in clear" in b.logtext(), 30, 0.1,
             "the start warning about emit_secret_values")
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
