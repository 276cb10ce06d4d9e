"""A watch on kbridge's Kubernetes API from resourceVersion N carries exactly
the changes after N, or is one ERROR event with a 410 Expired Status: never
an event at or below N. A version older than kbridge's first list (before it
knew anything) is 410 with or without state_dir — the journal begins with
that list's objects, which are not changes after N — and so is
/v1/replay from it; after a restart with state_dir a version older than the
journal's first resume point is 410 too, and one inside the journal resumes
exactly."""
import socket
from kbtest import *


def expect_410(url, rv, what):
    conn, t, lines = kapi_watch_lines(url, "resourceVersion=%s" % rv)
    t.join(30)
    conn.close()
    check(len(lines) == 1 and lines[0]["type"] == "ERROR" and lines[0]["object"]["code"] == 410 and
          lines[0]["object"]["reason"] == "Expired",
          "%s: a watch from resourceVersion=%s must be one ERROR 410 Expired, got %d lines: %s"
          % (what, rv, len(lines), [(l["type"], l["object"].get("metadata", {}).get("resourceVersion"))
                                    for l in lines[:8]]))


MARKS = []


def expect_exact(sim, url, rv, what):
    """A watch from rv gets exactly the server's changes after rv, none at or below it."""
    want = watch_history(sim, rv)
    conn, t, lines = kapi_watch_lines(url, "resourceVersion=%s" % rv)
    # The watch is judged once a marker made after those changes has come through it: an extra or
    # repeated event before the marker shows, however slowly it arrives.
    MARKS.append(len(MARKS))
    mark = "ns1/mark-%d" % MARKS[-1]
    sim.bulk(pod_ops("create", "ns1", [mark.split("/")[1]]))
    wait_for(lambda: any(c[0] == mark for c in kapi_changes(lines)), 60, what="%s: the marker %s" % (what, mark))
    got = kapi_changes(lines)
    got = got[:[c[0] for c in got].index(mark)]
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    check(all(c[2] > int(rv) for c in got), "%s: events at or below %s: %s" % (what, rv, got))
    check(got == want, "%s: watch from %s:\n%s\nserver:\n%s" % (what, rv, got, want))


def run_case(sim, state):
    work = tempfile.mkdtemp(prefix="kb0606-")
    extra = 'kube_api = { watch_history = 100; };'
    if state:
        extra += '\nstate_dir = "%s/state";' % work
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0";', extra=extra)
    url = b.http_url()
    b.wait_converged(sim)
    what = "with state_dir" if state else "without state_dir"
    rv0 = json.loads(http_request(url + "/api/v1/pods")[2])["metadata"]["resourceVersion"]
    expect_410(url, 1, what)
    if state:
        code, _, body = http_request(url + "/v1/replay/pods?resourceVersion=1")
        check(code == 410, "%s: /v1/replay from 1 -> %d %r" % (what, code, body[:200]))
    sim.bulk(pod_ops("update", "ns1", ["p%d" % (i % 5) for i in range(6)], labels={"app": "web", "n": "2"}))
    b.wait_converged(sim)
    expect_exact(sim, url, rv0, what)
    if not state:
        check(b.stop() == 0, "kbridge exit code")
        return
    # Restarted on the same state_dir: it resumes (no new list); the journal
    # still begins with the first run's list.
    check(b.stop() == 0, "kbridge exit code")
    b.start()
    url = b.http_url()
    b.wait_converged(sim)
    sim.bulk(pod_ops("update", "ns1", ["p1", "p2"], labels={"app": "web", "n": "3"}))
    b.wait_converged(sim)
    expect_410(url, 1, what + ", restarted")
    expect_exact(sim, url, rv0, what + ", restarted")
    check(b.stop() == 0, "kbridge exit code")


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%d" % i for i in range(5)], labels={"app": "web"}))
    run_case(sim, False)
    run_case(sim, True)
    sim.stop()


if __name__ == "__main__":
    run(test)
