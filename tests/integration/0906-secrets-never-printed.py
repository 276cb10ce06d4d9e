"""Secrets never printed: `kbridge --check` shows secret-like Kafka
properties (sasl.password, ssl.key.password, ssl.key.pem,
sasl.oauthbearer.config, …) as *** while other properties and
file names stay readable; a malformed watch frame of an informer with
redact_fields logs no byte of the object; and a request whose path is not
valid UTF-8 gets an error Status that is valid UTF-8 JSON (the bad bytes
replaced, nothing echoed raw)."""
import json
import subprocess
import urllib.parse
from kbtest import *

SECRETS = {"sasl.password": "hunter2-0906", "ssl.key.password": "keypass-0906",
           "sasl.oauthbearer.config": "principal=oauth-0906", "ssl.key.pem": "-----BEGIN PRIVATE KEY----- pem-0906",
           "ssl.keystore.password": "store-0906"}
PLAIN = {"sasl.username": "alice-0906", "ssl.key.location": "/etc/kb/key-0906.pem", "compression.type": "lz4"}


def test():
    props = " ".join('"%s" = "%s";' % kv for kv in list(SECRETS.items()) + list(PLAIN.items()))
    b = ConfigBridge("""cluster = { name = "dev"; server = "http://127.0.0.1:1"; };
http = { listen = ""; };
informers = ( { name = "pods"; version = "v1"; resource = "pods"; } );
sinks = ( { name = "k"; type = "kafka"; brokers = "127.0.0.1:1"; properties = { %s }; } );
routes = ( { informer = "pods"; sink = "k"; } );
""" % props, start=False)
    p = subprocess.run([KBRIDGE, "--config", b.config, "--check"], capture_output=True, text=True, timeout=30)
    check(p.returncode == 0, "--check valid: %s" % p.stderr)
    for v in SECRETS.values():
        check(v not in p.stdout + p.stderr, "--check does not print %r: %s" % (v, p.stdout))
    for k in SECRETS:
        check("%s=***" % k in p.stdout, "%s shown masked: %s" % (k, p.stdout))
    for k, v in PLAIN.items():
        check("%s=%s" % (k, v) in p.stdout, "%s stays readable: %s" % (k, p.stdout))

    # A malformed watch frame of a redacted informer: no object bytes in the log.
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a"], labels={"step": "0"}))
    work = tempfile.mkdtemp(prefix="kb0906-")
    with open(work + "/token", "w") as f:
        f.write("t0ken-0906\n")
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0"; token_file = "%s/token";' % work,
               informers=['{ name = "pods"; version = "v1"; resource = "pods"; redact_fields = [ "metadata.labels" ]; }'])
    b.wait_converged(sim)
    sim.fault(kind="malformed", count=1)
    sim.bulk(pod_ops("update", "ns1", ["a"], labels={"step": "secret-label-0906"}))
    log = wait_for(lambda: "malformed watch frame" in b.logtext() and b.logtext(), 60, 0.1, "the malformed-frame line")
    line = [l for l in log.splitlines() if "malformed watch frame" in l][0]
    check('"type"' not in line and '"kind"' not in line and "metadata" not in line and "0906" not in line,
          "no object bytes in the malformed-frame line: %s" % line)
    b.wait_converged(sim)

    # Invalid UTF-8 in the path: the Status is valid UTF-8 JSON.
    port = int(b.http_url().rsplit(":", 1)[1])
    for path in ("/v1/snapshot/%ff%fe", "/v1/snapshot/ab%c3", "/v1/replay/%ed%a0%80?resourceVersion=1",
                 "/n%e9pe", "/v1/snapshot/%f0%9f%98%80"):
        code, st = get_utf8_json(port, path, token="t0ken-0906")
        check(code == 404 and st["kind"] == "Status", "%s: 404 Status: %d %r" % (path, code, st))
        check_echo_cleaned(path, st["message"])
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
