"""HTTPS speaks TLS 1.2 and 1.3 with forward-secret suites only: a
TLS 1.0 or 1.1 handshake is refused, TLS 1.2 with a static-RSA suite
(AES128-SHA, AES256-GCM-SHA384) is refused, TLS 1.2 with ECDHE and TLS 1.3
are accepted (openssl s_client as the client). A key file that group or
others can read is named in a warning at start; a 0600 one is not."""
import os
import subprocess
from kbtest import *


def handshake(port, *args):
    """(accepted, the protocol and cipher openssl reports) of one handshake."""
    p = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-servername", "127.0.0.1"]
                       + list(args), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    out = p.stdout + p.stderr
    cipher = [l.strip() for l in out.splitlines() if "Cipher is" in l or l.strip().startswith("Protocol")]
    return p.returncode == 0 and "Cipher is (NONE)" not in out and "New, " in out, cipher


def start(sim, work, key):
    tls = 'tls_cert_file = "%s/cert.pem"; tls_key_file = "%s";' % (work, key)
    b = Bridge(sim, workdir=tempfile.mkdtemp(prefix="kb0910-b-"),
               http='listen = "127.0.0.1:0"; token_file = "%s/token"; %s' % (work, tls))
    return b, int(b.http_url().rsplit(":", 1)[1])


def test():
    work = tempfile.mkdtemp(prefix="kb0910-")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", work + "/key.pem",
                    "-out", work + "/cert.pem"], check=True, capture_output=True, timeout=120)
    with open(work + "/token", "w") as f:
        f.write("tls-t0ken-0910\n")
    os.chmod(work + "/key.pem", 0o644)
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p1"]))
    b, port = start(sim, work, work + "/key.pem")

    refused = [("-tls1", "-cipher", "DEFAULT@SECLEVEL=0"), ("-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"),
               ("-tls1_2", "-cipher", "AES128-SHA@SECLEVEL=0"), ("-tls1_2", "-cipher", "AES256-GCM-SHA384")]
    for args in refused:
        ok, how = handshake(port, *args)
        check(not ok, "refused: %s (got %s)" % (" ".join(args), how))
    for args in (("-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"), ("-tls1_2",), ("-tls1_3",)):
        ok, how = handshake(port, *args)
        check(ok, "accepted: %s (got %s)" % (" ".join(args), how))
        print("%s: %s" % (" ".join(args), how))
    warn = [l for l in b.logtext().splitlines() if "http.tls_key_file" in l and "WARN" in l.upper()]
    check(warn and work + "/key.pem" in warn[0] and "0644" in warn[0],
          "a warning names the key file others can read: %s" % b.logtext()[-2000:])
    check(b.stop() == 0, "clean stop")

    os.chmod(work + "/key.pem", 0o600)
    b, port = start(sim, work, work + "/key.pem")
    check("http.tls_key_file" not in b.logtext(), "no warning for a 0600 key: %s" % b.logtext()[-1500:])
    ok, how = handshake(port, "-tls1_2")
    check(ok, "still serving TLS 1.2: %s" % how)
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
