"""With compaction = "latest" and coalesce_ms = 1000, a burst of 40 updates of
one pod within 0.3 s reaches the sink as at most one message per window the
burst spanned, ending at the latest resourceVersion; a lone change is held
for the window (how long it took is printed); a delete is not held behind
the window: sent in one batch after a change of another pod, it goes out
first; shutdown writes what a window still holds; a config with coalesce_ms
but without compaction = "latest" is refused at load naming the key.
Nothing depends on speed: a slow machine only stretches the spans."""
import subprocess

from kbtest import *


def wait_rv(b, name, rv, timeout=30):
    def ok():
        return [e for e in b.events() if e["name"] == name and e["resourceVersion"] == rv]
    return wait_for(ok, timeout, 0.02, "%s at rv %s" % (name, rv))


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["burst", "lone", "gone", "mark"], labels={"n": "0"}))
    # One worker (shards = 1): keys go out in the order their windows end or a delete made them ready.
    b = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; shards = 1; '
                               'compaction = "latest"; coalesce_ms = 1000; }'])
    b.wait_converged(sim)
    before = len(b.events())

    # 40 updates in 0.3 s.
    t0 = time.monotonic()
    for i in range(1, 41):
        sim.bulk(pod_ops("update", "ns1", ["burst"], labels={"n": str(i)}))
        time.sleep(max(0.0, t0 + i * 0.3 / 40 - time.monotonic()))
    burst_s = time.monotonic() - t0
    latest = {i["key"].split("/")[1]: i["resourceVersion"] for i in sim.state()["items"]}
    b.wait_converged(sim)
    # Each message ends a window of 1 s that began after the one before went out, so k messages took at
    # least k s from t0; one more for a timer that fires a little early.
    windows = 1 + int(time.monotonic() - t0)
    mine = [e for e in b.events()[before:] if e["name"] == "burst"]
    print("40 updates in %.2f s -> %d messages (at most %d: one per window spanned)" % (burst_s, len(mine), windows))
    check(1 <= len(mine) <= windows, "a burst of 40 updates is one message per window (%d, %d windows)"
          % (len(mine), windows))
    check(mine[-1]["resourceVersion"] == latest["burst"], "the last message is at the latest rv")
    assert_rv_monotonic(b.events())

    # A lone change: held for the window (a lower bound: a slow machine only adds to it).
    t0 = time.monotonic()
    sim.bulk(pod_ops("update", "ns1", ["lone"], labels={"n": "1"}))
    rv = {i["key"].split("/")[1]: i["resourceVersion"] for i in sim.state()["items"]}["lone"]
    wait_rv(b, "lone", rv)
    dt = time.monotonic() - t0
    print("a lone change arrived after %.2f s (window 1 s)" % dt)
    check(dt >= 0.9, "a lone change waits for the window (%.2f s)" % dt)

    # A delete goes at once, taking the update queued before it with it: one batch changes mark, then
    # updates and deletes gone; mark waits for its window, gone's delete is ready at once and goes first.
    n0 = len(b.events())
    t0 = time.monotonic()
    sim.bulk(pod_ops("update", "ns1", ["mark"], labels={"n": "1"}) + pod_ops("update", "ns1", ["gone"], labels={"n": "1"}) +
             pod_ops("delete", "ns1", ["gone"]))
    wait_for(lambda: [e for e in b.events() if e["name"] == "gone" and e["type"] == "DELETED"], 30, 0.02,
             "the delete")
    print("a delete arrived after %.2f s" % (time.monotonic() - t0))
    b.wait_converged(sim)
    new = [(e["type"], e["name"]) for e in b.events()[n0:]]
    check(new[-1] == ("MODIFIED", "mark") and ("DELETED", "gone") in new,
          "the delete went out before the change of mark that waited for its window: %s" % new)
    assert_no_repeats(b.events())
    check(b.stop() == 0, "SIGTERM exits 0")

    # Shutdown ends the window: with coalesce_ms = 60000 a change still waiting is written before exit.
    b2 = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; '
                                'compaction = "latest"; coalesce_ms = 60000; }'], http='listen = "127.0.0.1:0";')
    wait_for(lambda: "listed items=" in b2.logtext(), 30, 0.05, "the list")  # held by the window too
    sim.bulk(pod_ops("update", "ns1", ["lone"], labels={"n": "2"}))
    rv = {i["key"].split("/")[1]: i["resourceVersion"] for i in sim.state()["items"]}["lone"]
    # The informer has it (its resume point is the change's RV); the window holds it for a minute.
    wait_for(lambda: b2.informer_doc()["resourceVersion"] == rv, 30, 0.05, "the informer to receive the change")
    t0 = time.monotonic()
    check(b2.stop() == 0, "SIGTERM exits 0 with a change held by the window")
    print("SIGTERM with a change held by a 60 s window: exited after %.2f s" % (time.monotonic() - t0))
    check([e for e in b2.events() if e["name"] == "lone" and e["resourceVersion"] == rv],
          "the change held by the window is written at shutdown")
    want = {i["key"]: i["resourceVersion"] for i in sim.state()["items"]}
    got = {k: e["resourceVersion"] for k, e in b2.view().items()}
    check(got == want, "so is the initial list, which the window held as well: %r != %r" % (got, want))

    # Refused at load, naming the key.
    bad = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; coalesce_ms = 500; }'],
                 start=False)
    r = subprocess.run([KBRIDGE, "--config", bad.config, "--check"], capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "informers[0].coalesce_ms" in r.stderr and "latest" in r.stderr,
          "coalesce_ms without compaction = latest is refused naming the key: rc=%d %r" % (r.returncode, r.stderr))
    sim.stop()


run(test)
