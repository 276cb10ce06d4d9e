"""Chaos: an informer with namespaces = [8 namespaces] (one watch each) under
churn while the watches of four of them are cut again and again (kubesim's
cut_watches fault) — first resuming from their resourceVersion, then with a
410 on each resume so they must relist. The four untouched namespaces keep
flowing: their watches are never re-opened (their delivery lag is printed);
each cut namespace resumes (or relists) after every cut; the
consumer converges to the server's state with nothing lost and no
resourceVersion going back. Prints delivery lags and recovery times.

Each phase is CUTS cuts. A cut is made only once every cut namespace has
recovered from the one before (kubesim's request log shows its watch
re-opened — after a 410, a completed relist and then its watch — and a
change made after the cut reached the sink), so each cut lands on an open,
live watch however slow the machine is; nothing here depends on speed."""
import random
import re
import threading

from kbtest import *

NS = ["ns%d" % i for i in range(8)]
CUT, KEPT = NS[:4], NS[4:]
PODS = 20
CUTS = 6  # per phase
RECOVER_S = 120  # bound on one recovery (a hang), about 50 times the idle one


class Tail:
    """Reads the sink's file as it grows; the wall time each line was first seen."""

    def __init__(self, path):
        self.reader, self.seen = JsonlReader(path), []
        self.last_t = {}  # namespace -> the newest label t (time sent) seen in it
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def poll(self):
        lines = self.reader.new()
        now = time.time()
        for e in lines:
            self.seen.append((now, e))
            if e["type"] != "DELETED":
                t = float(e["object"]["metadata"].get("labels", {}).get("t", 0))
                self.last_t[e["namespace"]] = max(self.last_t.get(e["namespace"], 0.0), t)

    def run(self):
        while not self.stop.is_set():
            self.poll()
            time.sleep(0.02)

    def close(self):
        self.stop.set()
        self.thread.join(10)
        self.poll()


def churn(sim, stop, rnd):
    """Updates in every namespace (label t = the wall time sent), now and then a delete and re-create."""
    n = 0
    while not stop.is_set():
        t = "%.3f" % time.time()
        ops = []
        for ns in NS:
            ops += pod_ops("update", ns, ["p%02d" % rnd.randrange(PODS)], labels={"t": t})
        if n % 10 == 9:
            ns, name = rnd.choice(NS), "p%02d" % rnd.randrange(PODS)
            ops += pod_ops("delete", ns, [name]) + pod_ops("create", ns, [name], labels={"t": t})
        sim.bulk(ops)
        n += 1
        time.sleep(0.05)


def listed(log, ns):
    """How many lists of namespace ns the bridge has completed (its log's "listed" lines)."""
    return len(re.findall(r"namespace=%s listed " % ns, log))


def recovered(sim, b, tail, cut, expire):
    """None once every namespace of CUT recovered from cut; else what it still waits for."""
    reqs = [r for r in sim.requests() if r["t"] > cut["mono"]]
    log = b.logtext() if expire else ""
    for ns in CUT:
        if expire:  # the resume got its 410: a list completed after the cut, and its watch is the last request
            mine = [r for r in reqs if r["path"] == "/api/v1/namespaces/%s/pods" % ns]
            if not lists(mine, ns) or listed(log, ns) <= cut["listed"][ns]:
                return "%s to relist" % ns
            if mine[-1]["query"].get("watch") != "true":
                return "%s to watch after its relist" % ns
        elif not watches(reqs, ns):
            return "%s to re-open its watch" % ns
        if tail.last_t.get(ns, 0.0) <= cut["wall"]:
            return "%s to deliver a change made after the cut" % ns
    return None


def phase(sim, b, tail, expire, rnd):
    """CUTS cuts of the watches of CUT, each after the namespaces recovered from the one before (and a short
    random pause, so cuts land at varied points of the churn); waits for the recovery from the last one.
    Returns the cuts' wall times."""
    cuts = []
    for i in range(CUTS):
        time.sleep(rnd.uniform(0.0, 0.5))
        log = b.logtext()
        cut = {"wall": time.time(), "mono": time.monotonic(), "listed": {ns: listed(log, ns) for ns in CUT}}
        sim.fault(kind="cut_watches", namespaces=CUT, expire=expire)
        cuts.append(cut["wall"])
        why = []

        def done():
            why[:] = [recovered(sim, b, tail, cut, expire)]
            return why[0] is None
        try:
            wait_for(done, RECOVER_S, 0.1)
        except Failure:
            raise Failure("cut %d (%s): still waiting for %s after %d s\n--- log tail ---\n%s"
                          % (i, "expire" if expire else "resume", why[0], RECOVER_S, b.logtext()[-3000:]))
    return cuts


def report(name, tail, t_from, t_to, cuts):
    lag = {"kept": [], "cut": []}
    for seen, e in tail.seen:
        t = e["object"]["metadata"].get("labels", {}).get("t")
        if e["type"] == "DELETED" or not t or not t_from <= float(t) <= t_to:
            continue
        lag["kept" if e["namespace"] in KEPT else "cut"].append(seen - float(t))
    recov = []
    for i, tc in enumerate(cuts):
        t_next = cuts[i + 1] if i + 1 < len(cuts) else float("inf")
        per_ns = []
        for ns in CUT:  # phase() waited for this before the next cut: a change made after cut i, seen before cut i+1
            first = next((seen for seen, e in tail.seen if e["namespace"] == ns and e["type"] != "DELETED"
                          and float(e["object"]["metadata"].get("labels", {}).get("t", 0)) > tc), None)
            check(first is not None and first < t_next, "%s: namespace %s flows again after cut %d" % (name, ns, i))
            per_ns.append(first - tc)
        recov.append(max(per_ns))
    print("%s: %d cuts of %s; untouched %s delivery lag p50 %.3f s p99 %.3f s max %.3f s (%d changes); "
          "cut namespaces lag p50 %.3f s max %.3f s; recovery after a cut (all four flowing again) "
          "median %.2f s max %.2f s" % (name, len(cuts), ",".join(CUT), ",".join(KEPT), percentile(lag["kept"], 50),
                                        percentile(lag["kept"], 99), max(lag["kept"]), len(lag["kept"]),
                                        percentile(lag["cut"], 50), max(lag["cut"]), percentile(recov, 50), max(recov)))
    return lag, recov


def streamed(r):
    """A streamed list (list_mode auto: a watch with sendInitialEvents) is a list, not a resumed watch."""
    return r["query"].get("sendInitialEvents") == "true"


def watches(reqs, ns):
    return [r for r in reqs if r["path"] == "/api/v1/namespaces/%s/pods" % ns and r["query"].get("watch") == "true"
            and not streamed(r)]


def lists(reqs, ns):
    return [r for r in reqs if r["path"] == "/api/v1/namespaces/%s/pods" % ns and
            (r["query"].get("watch") != "true" or streamed(r))]


def test():
    rnd = random.Random(191)
    sim = Sim()
    for ns in NS:
        sim.bulk(pod_ops("create", ns, ["p%02d" % i for i in range(PODS)], labels={"t": "0"}))
    b = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; namespaces = [ %s ]; }'
                               % ", ".join('"%s"' % n for n in NS)])
    b.wait_converged(sim)
    # The first lists are streams that go on as the watches: cut only once each one is complete.
    wait_for(lambda: all(listed(b.logtext(), ns) for ns in NS), RECOVER_S, 0.1, "every namespace's first list to complete")
    sim.clear_requests()
    tail = Tail(b.out)
    stop = threading.Event()
    churner = threading.Thread(target=churn, args=(sim, stop, rnd), daemon=True)
    churner.start()
    try:
        t0 = time.time()
        cuts_resume = phase(sim, b, tail, False, rnd)
        t1 = time.time()
        cuts_relist = phase(sim, b, tail, True, rnd)
    finally:
        stop.set()
        churner.join(30)
    t_end = time.time()
    b.wait_converged(sim, timeout=60)
    converged = time.time() - t_end
    tail.close()
    reqs = sim.requests()
    check(len(reqs) < 1000, "the request log kept every request of the chaos (%d)" % len(reqs))
    lag1, recov1 = report("resume from rv", tail, t0, t1, cuts_resume)
    lag2, recov2 = report("410 on resume, relist", tail, t1, t_end, cuts_relist)
    print("churn stopped -> consumer converged in %.2f s" % converged)
    # The request log was cleared when the chaos began: an untouched namespace's
    # watch was never re-opened (nor relisted) — it never paused.
    for ns in KEPT:
        check(not watches(reqs, ns) and not lists(reqs, ns),
              "untouched namespace %s kept its one watch (re-opened %d, lists %d)" % (ns, len(watches(reqs, ns)),
                                                                                     len(lists(reqs, ns))))
        check(lag1["kept"] and lag2["kept"], "untouched namespace changes were delivered during the chaos")
    n_cuts = len(cuts_resume) + len(cuts_relist)
    for ns in CUT:
        check(len(watches(reqs, ns)) >= n_cuts, "cut namespace %s re-opened its watch after each cut (%d, %d cuts)"
              % (ns, len(watches(reqs, ns)), n_cuts))
        check(len(lists(reqs, ns)) >= len(cuts_relist),
              "cut namespace %s relisted after each 410 (%d lists, %d cuts)" % (ns, len(lists(reqs, ns)), len(cuts_relist)))
    evs = b.events()
    assert_rv_monotonic_ignoring_repeats(evs)
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
