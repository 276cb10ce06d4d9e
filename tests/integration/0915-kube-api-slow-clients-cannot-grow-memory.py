"""Kube API clients that never read cannot make kbridge hold copies of the
objects. With state_dir (the cache keeps identities; each object is read
back from disk) and 3,000 pods of ~3 KB: 48 watches and 32 lists with a
labelSelector the label index cannot answer (`!nope`, every object read to
match it), sent and never read, grow kbridge's RSS by less than 64 MiB (a
cut holds references to the cache's entries, each object is read again as
it is written); lists and the initial events of watches count in
kbridge_http_streams and at most http.max_streams are sent at once (429
beyond). 18 paged lists (limit=1, same selector) grow RSS by less than
32 MiB: their kept cuts hold references too. Paged lists keep their cut for their continue token; 17 paged
lists from one address push out only that address's own oldest cut, never
the cut of a client that holds fewer (its continue still answers 200)."""
import http.client
import re
import socket
import urllib.parse
from kbtest import *

PODS = 3000
STREAMS = 8
WATCHES, LISTS, PAGED = 48, 32, 17
SEL = urllib.parse.quote("!nope")


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M).group(1))


def metrics(url):
    return http_request(url + "/metrics")[2].decode()


def gauge(text, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
    return int(m.group(1)) if m else -1


def answered(text):
    """Kube API lists and watches answered so far (any code)."""
    return sum(int(n) for n in re.findall(r'^kbridge_api_requests_total\{verb="(?:list|watch)",[^}]*\} (\d+)$',
                                          text, re.M))


def get_from(port, source, path):
    """GET path from a given loopback source address: (status, JSON body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=(source, 0))
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, json.loads(body) if body else None


def first_page(port, source):
    code, page = get_from(port, source, "/api/v1/pods?limit=1&labelSelector=" + SEL)
    check(code == 200 and len(page["items"]) == 1 and page["metadata"].get("continue"),
          "a paged list from %s: %d %r" % (source, code, str(page)[:300]))
    return page


def next_page(port, source, page):
    return get_from(port, source, "/api/v1/pods?limit=1&labelSelector=%s&continue=%s"
                    % (SEL, urllib.parse.quote(page["metadata"]["continue"])))


def test():
    # A small ASan quarantine: freed memory must not count as RSS here (see 0903).
    os.environ["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=4:thread_local_quarantine_size_kb=64"
    sim = Sim()
    pad = {"metadata": {"annotations": {"pad": "p" * 3000}}}
    names = ["p%04d" % i for i in range(PODS)]
    for at in range(0, PODS, 1000):
        sim.bulk(pod_ops("create", "ns1", names[at:at + 1000], labels={"app": "a"}, extra=pad))
    work = tempfile.mkdtemp(prefix="kb0915-")
    b = Bridge(sim, workdir=work, extra='state_dir = "%s/state";' % work,
               http='listen = "127.0.0.1:0"; max_streams = %d; max_per_address = 200;' % STREAMS)
    url = b.http_url()
    port = int(url.rsplit(":", 1)[1])
    b.wait_converged(sim, timeout=120)

    # Kept cuts: one client's, then another address's 17 paged lists.
    code, _ = get_from(port, "127.0.0.1", "/api/v1/pods?limit=1")  # the watch window exists before RSS is read
    check(code == 200, "a first list: %d" % code)
    start = rss_kib(b.proc.pid)
    victim = first_page(port, "127.0.0.2")
    pages = [first_page(port, "127.0.0.1") for _ in range(PAGED)]
    base = rss_kib(b.proc.pid)
    print("RSS %d KiB before, %d KiB with %d kept cuts of paged lists (+%d KiB)"
          % (start, base, PAGED + 1, base - start))
    check(base - start < 32 * 1024, "kept cuts grew RSS by %d KiB (< 32 MiB)" % (base - start))
    before = answered(metrics(url))

    socks = []
    for i in range(WATCHES + LISTS):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        q = "watch=true&" if i < WATCHES else ""
        s.sendall(("GET /api/v1/pods?%slabelSelector=%s HTTP/1.1\r\nHost: x\r\n\r\n" % (q, SEL)).encode())
        socks.append(s)
    m = wait_for(lambda: (lambda t: answered(t) >= before + WATCHES + LISTS and t)(metrics(url)), 120, 0.2,
                 "every list and watch answered")
    peak = rss_kib(b.proc.pid)
    streams = gauge(m, "kbridge_http_streams")
    refused = gauge(m, 'kbridge_http_refused_total{reason="streams"}')
    print("RSS %d KiB before, %d KiB with %d non-reading watches and %d non-reading lists (+%d KiB); "
          "streams=%d refused=%d" % (base, peak, WATCHES, LISTS, peak - base, streams, refused))
    check(peak - base < 64 * 1024, "RSS grew by %d KiB (< 64 MiB)" % (peak - base))
    check(streams == STREAMS, "kube API bodies count in kbridge_http_streams: %d (want %d)" % (streams, STREAMS))
    check(refused >= WATCHES + LISTS - STREAMS, "the rest were refused: %d" % refused)
    for s in socks:
        s.close()
    wait_for(lambda: gauge(metrics(url), "kbridge_http_streams") == 0, 60, 0.2, "the streams to end")

    # The client that held one cut still pages on; the other address lost its own oldest.
    code, page = next_page(port, "127.0.0.2", victim)
    check(code == 200 and len(page["items"]) == 1 and
          page["items"][0]["metadata"]["name"] > victim["items"][0]["metadata"]["name"],
          "another address's paged lists pushed out this client's cut: %d %r" % (code, str(page)[:300]))
    code, _ = next_page(port, "127.0.0.1", pages[0])
    check(code == 410, "the 17th cut of one address pushes out its own oldest: %d" % code)
    code, page = next_page(port, "127.0.0.1", pages[-1])
    check(code == 200 and len(page["items"]) == 1, "its newest cut pages on: %d" % code)
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
