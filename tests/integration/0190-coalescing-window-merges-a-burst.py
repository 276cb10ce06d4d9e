"""With compaction = "latest" and coalesce_ms = 1000, a burst of 40 updates of
one pod within 0.3 s reaches the sink as a handful of messages ending at the
latest resourceVersion; a lone change is held for the window and no longer
(it arrives within the window plus a second); a delete is not held behind
the window; shutdown writes what a window still holds; a config with coalesce_ms but without compaction = "latest" is
refused at load naming the key."""
import subprocess

from kbtest import *


def wait_rv(b, name, rv, timeout=30):
    def ok():
        return [e for e in b.events() if e["name"] == name and e["resourceVersion"] == rv]
    return wait_for(ok, timeout, 0.02, "%s at rv %s" % (name, rv))


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["burst", "lone", "gone"], labels={"n": "0"}))
    b = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; '
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
    mine = [e for e in b.events()[before:] if e["name"] == "burst"]
    print("40 updates in %.2f s -> %d messages" % (burst_s, len(mine)))
    check(1 <= len(mine) <= 5, "a burst of 40 updates is a handful of messages (%d)" % len(mine))
    check(mine[-1]["resourceVersion"] == latest["burst"], "the last message is at the latest rv")
    assert_rv_monotonic(b.events())

    # A lone change: held for the window, delivered within the window plus a second.
    t0 = time.monotonic()
    sim.bulk(pod_ops("update", "ns1", ["lone"], labels={"n": "1"}))
    rv = {i["key"].split("/")[1]: i["resourceVersion"] for i in sim.state()["items"]}["lone"]
    wait_rv(b, "lone", rv)
    dt = time.monotonic() - t0
    print("a lone change arrived after %.2f s (window 1 s)" % dt)
    check(dt >= 0.9, "a lone change waits for the window (%.2f s)" % dt)
    check(dt <= 2.0, "a lone change arrives within the window plus a second (%.2f s)" % dt)

    # A delete goes at once, taking the update queued before it with it.
    sim.bulk(pod_ops("update", "ns1", ["gone"], labels={"n": "1"}))
    t0 = time.monotonic()
    sim.bulk(pod_ops("delete", "ns1", ["gone"]))
    wait_for(lambda: [e for e in b.events() if e["name"] == "gone" and e["type"] == "DELETED"], 30, 0.02,
             "the delete")
    dt = time.monotonic() - t0
    print("a delete arrived after %.2f s" % dt)
    check(dt < 0.9, "a delete is not held behind the window (%.2f s)" % dt)
    b.wait_converged(sim)
    assert_no_repeats(b.events())
    check(b.stop() == 0, "SIGTERM exits 0")

    # Shutdown ends the window: with coalesce_ms = 60000 a change still waiting is written before exit.
    b2 = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; '
                                'compaction = "latest"; coalesce_ms = 60000; }'])
    wait_for(lambda: "listed items=" in b2.logtext(), 30, 0.05, "the list")  # held by the window too
    sim.bulk(pod_ops("update", "ns1", ["lone"], labels={"n": "2"}))
    rv = {i["key"].split("/")[1]: i["resourceVersion"] for i in sim.state()["items"]}["lone"]
    time.sleep(1.0)  # the watch hands it over within milliseconds; the window holds it for a minute
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
