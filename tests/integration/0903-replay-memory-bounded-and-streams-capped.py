"""Replay cannot amplify memory: 60 clients that ask for a replay of a
several-MiB journal and never read keep the bridge's RSS bounded (each
replay holds one page of the journal decoded, not its own copy of the
tail), at most http.max_streams bodies are sent at once and the rest get
429 TooManyRequests with a Status body and Retry-After, counted in
kbridge_http_refused_total{reason="streams"}. Once the clients go, a
replay read to the end still has every change once, in order, across
many pages."""
import json
import re
import socket
from kbtest import *

TOKEN = "t0ken-0903"


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M).group(1))


def metrics(url):
    return http_request(url + "/metrics", token=TOKEN)[2].decode()


def gauge(text, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
    return int(m.group(1)) if m else -1


def test():
    # Under ASan, freed memory waits in a quarantine (256 MiB by default) that would count as RSS here;
    # a small one measures the bridge, not the sanitizer.
    os.environ["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=4:thread_local_quarantine_size_kb=64"
    sim = Sim()
    names = ["p%03d" % i for i in range(40)]
    sim.bulk(pod_ops("create", "ns1", names))
    work = tempfile.mkdtemp(prefix="kb0903-")
    with open(work + "/token", "w") as f:
        f.write(TOKEN + "\n")
    b = Bridge(sim, workdir=work, extra='state_dir = "%s/state";\njournal = { max_bytes = 268435456; };' % work,
               http='listen = "127.0.0.1:0"; token_file = "%s/token"; max_streams = 8; max_per_address = 100;' % work)
    url = b.http_url()
    b.wait_converged(sim)
    x = json.loads(http_request(url + "/v1/snapshot/pods", token=TOKEN)[2])["metadata"]["resourceVersion"]
    pad = {"metadata": {"annotations": {"pad": "p" * 8000}}}
    rounds = 20
    for r in range(rounds):
        sim.bulk(pod_ops("update", "ns1", names, labels={"round": str(r)}, extra=pad))
    b.wait_converged(sim, timeout=120)
    base = rss_kib(b.proc.pid)

    socks = []
    for _ in range(60):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", int(url.rsplit(":", 1)[1])))
        s.sendall(("GET /v1/replay/pods?resourceVersion=%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
                   % (x, TOKEN)).encode())
        socks.append(s)
    def all_in():
        m = metrics(url)
        return (gauge(m, 'kbridge_http_refused_total{reason="streams"}') >= 52 and
                gauge(m, "kbridge_http_streams") == 8 and m)
    m = wait_for(all_in, 60, 0.2, "8 replays streaming and 52 refused")
    peak = rss_kib(b.proc.pid)
    print("RSS %d KiB before, %d KiB with 60 non-reading replay clients (+%d KiB); streams=%d refused=%d"
          % (base, peak, peak - base, gauge(m, "kbridge_http_streams"),
             gauge(m, 'kbridge_http_refused_total{reason="streams"}')))
    check(gauge(m, "kbridge_http_streams") == 8, "8 streams sent at once: %d" % gauge(m, "kbridge_http_streams"))
    check(peak - base < 64 * 1024, "RSS grew by %d KiB (< 64 MiB)" % (peak - base))
    refused = 0
    for s in socks:
        s.settimeout(30)  # every client has its answer by now: the 8 streams their headers, the rest a 429
        try:
            head = s.recv(4096)
        except socket.timeout:
            continue
        if head.startswith(b"HTTP/1.1 429"):
            refused += 1
            check(b"Retry-After: 1" in head or b"Retry-After" in head, "429 carries Retry-After: %r" % head[:400])
            body = head.split(b"\r\n\r\n", 1)[1]
            if body:
                st = json.loads(body)
                check(st["kind"] == "Status" and st["code"] == 429 and st["reason"] == "TooManyRequests" and
                      "http.max_streams" in st["message"], "a Status body: %r" % st)
    check(refused >= 50, "the refused clients got 429: %d" % refused)
    for s in socks:
        s.close()
    wait_for(lambda: gauge(metrics(url), "kbridge_http_streams") == 0, 60, 0.2, "the streams to end")

    code, _, body = http_request(url + "/v1/replay/pods?resourceVersion=%s" % x, token=TOKEN, timeout=120)
    evs = [json.loads(l) for l in body.splitlines() if l]
    check(code == 200 and len(evs) == rounds * len(names), "a full replay across pages has %d events: %d"
          % (rounds * len(names), len(evs)))
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
    check(rvs == sorted(rvs) and len(set(rvs)) == len(rvs), "in order, each once")
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
