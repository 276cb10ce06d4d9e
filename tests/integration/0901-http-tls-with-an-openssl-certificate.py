"""HTTPS: with http.tls_cert_file and http.tls_key_file (an openssl-made
certificate for 127.0.0.1) the API serves TLS that verifies against that
certificate, still needs the bearer token on every endpoint but the probes,
and plain HTTP to the port gets no answer. Only one of the two keys set is
refused at load naming both; a key file that is not PEM fails start naming
the files. The running process has core dumps off (it holds the token)."""
import json
import ssl
import subprocess
import urllib.request
from kbtest import *


def https(url, ctx, token=None):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test():
    work = tempfile.mkdtemp(prefix="kb0901-")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", work + "/key.pem",
                    "-out", work + "/cert.pem"], check=True, capture_output=True, timeout=120)
    token = "tls-t0ken-0901"
    with open(work + "/token", "w") as f:
        f.write(token + "\n")
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p1", "p2"]))
    tls = 'tls_cert_file = "%s/cert.pem"; tls_key_file = "%s/key.pem";' % (work, work)
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0"; token_file = "%s/token"; %s' % (work, tls))
    port = b.http_url().rsplit(":", 1)[1]
    check("(https, bearer token required)" in b.logtext(), "the start line says https: %s" % b.logtext()[-2000:])
    url = "https://127.0.0.1:%s" % port
    ctx = ssl.create_default_context(cafile=work + "/cert.pem")
    code, body = https(url + "/healthz", ctx)
    check(code == 200 and body.strip() == b"ok", "healthz over https: %d %r" % (code, body))
    code, body = https(url + "/v1/informers", ctx)
    check(code == 401, "https still needs the token: %d" % code)
    b.wait_converged(sim)
    code, body = https(url + "/v1/snapshot/pods", ctx, token)
    check(code == 200 and len(json.loads(body)["items"]) == 2, "snapshot over https: %d %r" % (code, body[:200]))
    try:
        plain = http_request("http://127.0.0.1:%s/healthz" % port, timeout=10)
    except Exception as e:  # the TLS server drops a plain-text request
        plain = e
    check(not (isinstance(plain, tuple) and plain[0] == 200), "plain http is not served: %r" % (plain,))
    with open("/proc/%d/limits" % b.proc.pid) as f:
        core = [l for l in f if l.startswith("Max core file size")][0].split()
    check(core[4] == "0" and core[5] == "0", "core dumps off: %r" % core)
    check(b.stop() == 0, "clean stop")

    # One key without the other: refused at load naming both.
    for half in ('tls_cert_file = "%s/cert.pem";' % work, 'tls_key_file = "%s/key.pem";' % work):
        c = Bridge(sim, http='listen = "127.0.0.1:0"; %s' % half, start=False)
        p = subprocess.run([KBRIDGE, "--config", c.config, "--check"], capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and "http.tls_cert_file" in p.stderr and "http.tls_key_file" in p.stderr,
              "half a TLS config is refused: %d %r" % (p.returncode, p.stderr))
    # A key that is not PEM: start fails naming the files, exit 1.
    with open(work + "/bad.pem", "w") as f:
        f.write("not a key\n")
    c = Bridge(sim, http='listen = "127.0.0.1:0"; tls_cert_file = "%s/cert.pem"; tls_key_file = "%s/bad.pem";'
               % (work, work))
    c.proc.wait(60)
    check(c.proc.returncode == 1 and "http.tls_key_file" in c.logtext(), "bad key: exit 1 naming it: %d %s"
          % (c.proc.returncode, c.logtext()[-1500:]))
    c.logf.close()
    sim.stop()


run(test)
