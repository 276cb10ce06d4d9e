"""A query number kbridge cannot hold is refused, never read as 0: a
resourceVersion of 20 digits above 2^64-1 on a kube API list or watch
(with state_dir, where 0 would replay the whole journal), on a get, and on
/v1/replay is 400 with a Status naming resourceVersion; limit and
timeoutSeconds out of range or not decimal are 400 naming that parameter
(and not the other). Status messages of the kube API that echo request
bytes that are not UTF-8 are valid UTF-8 JSON (the bad bytes replaced by
U+FFFD), as the /v1 endpoints' are."""
import urllib.parse
from kbtest import *

HUGE = "99999999999999999999"  # 20 digits, above 18446744073709551615


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%d" % i for i in range(3)]))
    work = tempfile.mkdtemp(prefix="kb0911-")
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0";', extra='state_dir = "%s/state";' % work)
    port = int(b.http_url().rsplit(":", 1)[1])
    b.wait_converged(sim)
    sim.bulk(pod_ops("update", "ns1", ["p0", "p1"], labels={"n": "1"}))
    b.wait_converged(sim)

    for path in ("/api/v1/pods?resourceVersion=" + HUGE,
                 "/api/v1/pods?watch=true&resourceVersion=" + HUGE,
                 "/api/v1/pods?resourceVersion=" + HUGE + "&resourceVersionMatch=NotOlderThan",
                 "/api/v1/namespaces/ns1/pods/p0?resourceVersion=" + HUGE,
                 "/api/v1/pods?resourceVersion=12x",
                 "/v1/replay/pods?resourceVersion=" + HUGE):
        code, st = get_utf8_json(port, path)
        check(code == 400 and st.get("kind") == "Status" and "resourceVersion" in st.get("message", ""),
              "%s: 400 naming resourceVersion: %d %r" % (path, code, st))

    for name, other in (("limit", "timeoutSeconds"), ("timeoutSeconds", "limit")):
        for bad in ("abc", "-1", "1e3", "+5", HUGE, "%d" % (1 << 40)):
            path = "/api/v1/pods?%s=%s" % (name, urllib.parse.quote(bad))
            code, st = get_utf8_json(port, path)
            msg = st.get("message", "")
            check(code == 400 and name in msg and other not in msg,
                  "%s: 400 naming %s only: %d %r" % (path, name, code, st))
    code, st = get_utf8_json(port, "/api/v1/pods?limit=2&timeoutSeconds=5")
    check(code == 200 and len(st["items"]) == 2, "good numbers still work: %d" % code)

    # Request bytes echoed into a kube API Status: valid UTF-8 JSON.
    for path in ("/api/v1/pods?fieldSelector=%ff%fe%3Dx", "/api/v1/pods?labelSelector=a%3D%ed%a0%80",
                 "/api/v1/pods?resourceVersionMatch=%c3", "/api/v1/pods?fieldSelector=%f0%9f%98%80%3Dx"):
        code, st = get_utf8_json(port, path)
        check(code in (400, 422) and st.get("kind") == "Status", "%s: an error Status: %d %r" % (path, code, st))
        check_echo_cleaned(path, st["message"])
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
