"""http.tls_cert_file/tls_key_file rotate without a restart: when a Secret
volume (as cert-manager's) swaps ..data to a new certificate and key, new
connections are served the new certificate, verified against it, with an
INFO line naming the files; a connection opened before keeps working. A
new pair whose key does not match its certificate is not taken: the last
good pair is still served and a WARN names the files."""
import hashlib
import socket
import ssl
import subprocess
from kbtest import *


def make_pair(work, name):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", "%s/%s.key" % (work, name),
                    "-out", "%s/%s.crt" % (work, name)], check=True, capture_output=True, timeout=120)
    return open("%s/%s.crt" % (work, name)).read(), open("%s/%s.key" % (work, name)).read()


def fingerprint_pem(pem):
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


def served_fingerprint(port):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        with ctx.wrap_socket(s) as t:
            return hashlib.sha256(t.getpeercert(binary_form=True)).hexdigest()


def test():
    work = tempfile.mkdtemp(prefix="kb0917-")
    cert1, key1 = make_pair(work, "one")
    cert2, key2 = make_pair(work, "two")
    cert3, key3 = make_pair(work, "three")
    vol = work + "/tls"
    secret_volume(vol, {"tls.crt": cert1, "tls.key": key1}, "gen1")
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p1"]))
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0"; tls_cert_file = "%s/tls.crt"; '
               'tls_key_file = "%s/tls.key";' % (vol, vol))
    port = int(b.http_url().rsplit(":", 1)[1])
    check(served_fingerprint(port) == fingerprint_pem(cert1), "the first certificate is served")
    # a connection kept alive across the swap
    kept = http.client.HTTPSConnection("127.0.0.1", port, timeout=30,
                                       context=ssl.create_default_context(cadata=cert1))
    kept.request("GET", "/healthz")
    check(kept.getresponse().read().strip() == b"ok", "healthz on the kept connection")

    secret_volume(vol, {"tls.crt": cert2, "tls.key": key2}, "gen2")
    wait_for(lambda: served_fingerprint(port) == fingerprint_pem(cert2), 60, 0.2,
             "new connections to be served the new certificate")
    check(served_fingerprint(port) != fingerprint_pem(cert1), "the old certificate is no longer served")
    ctx2 = ssl.create_default_context(cadata=cert2)  # verified against the new certificate, end to end
    with urllib.request.urlopen("https://127.0.0.1:%d/healthz" % port, timeout=30, context=ctx2) as r:
        check(r.status == 200, "a client that trusts only the new certificate gets in")
    log = b.logtext()
    check(any("INFO" in l and vol + "/tls.crt" in l for l in log.splitlines()),
          "an INFO line names the certificate file: %s" % log[-1500:])
    kept.request("GET", "/healthz")
    check(kept.getresponse().read().strip() == b"ok", "the connection opened before still works")
    kept.close()

    # A key that does not belong to the certificate: the last good pair stays.
    secret_volume(vol, {"tls.crt": cert3, "tls.key": key1}, "gen3")
    wait_for(lambda: any("WARN" in l and vol + "/tls.crt" in l for l in b.logtext().splitlines()), 60, 0.2,
             "a WARN about the mismatched pair")
    check(served_fingerprint(port) == fingerprint_pem(cert2), "the last good certificate is still served")
    check("PRIVATE KEY" not in b.logtext(), "no key material is logged")
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
