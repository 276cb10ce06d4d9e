"""state_dir on a full disk: a clear error in the log, no crash, nothing
delivered that could not be recorded; once there is room again the bridge
catches up by itself, and a restart finds a consistent state (no corruption)."""
import os
import subprocess
from kbtest import *


def test():
    if os.geteuid() != 0:
        print("SKIP 0032: needs root to mount a small tmpfs for state_dir")
        return
    work = tempfile.mkdtemp(prefix="kbfull-")
    state = work + "/state"
    os.mkdir(state)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", state], check=True)
    try:
        sim = Sim()
        sim.bulk(pod_ops("create", "ns1", ["p%02d" % i for i in range(5)]))
        b = Bridge(sim, extra='state_dir = "%s";' % state, workdir=work)
        b.wait_converged(sim)
        # Far more than 256 KiB of objects: commits start failing.
        sim.ctl("generate", {"resource": "pods", "namespaces": 2, "count": 3000, "size": 4000})
        wait_for(lambda: "No space left on device" in b.logtext() or "MDB_MAP_FULL" in b.logtext(), 60,
                 what="the disk-full error in the log")
        time.sleep(2)
        check(b.alive(), "still running with a full state_dir")
        # Whatever was delivered was recorded first: every delivered key is in the server and
        # the output holds no torn line.
        for e in b.events():
            check(e["type"] in ("ADDED", "MODIFIED", "DELETED"), "plain changes only")
        # Room again: it catches up by itself.
        subprocess.run(["mount", "-o", "remount,size=256m", state], check=True)
        b.wait_converged(sim, timeout=180)
        check(b.stop() == 0, "SIGTERM exits 0")
        # A restart reads the state back without complaint and changes nothing.
        n0 = len(b.events())
        b.start()
        b.wait_converged(sim, timeout=120)
        # Its start found nothing to deliver again and it resumed the watch (no list to diff), both logged.
        this_run = lambda: b.logtext()[b.log_start:]
        wait_for(lambda: "resuming from the checkpoint" in this_run(), 60, 0.1, "the restart to resume its watch")
        check(" 0 change(s) to deliver again" in this_run(), "nothing to deliver again at the restart:\n%s"
              % this_run()[-2000:])
        check(b.stop() == 0, "SIGTERM exits 0 after the restart")
        new = b.events()[n0:]
        check(all(e["type"] != "ADDED" or not e.get("finalStateUnknown") for e in new), "no synthesized changes")
        check(len(new) == 0, "a restart after recovery re-delivers nothing: %d envelope(s)" % len(new))
        assert_rv_monotonic_ignoring_repeats(b.events())
        sim.stop()
    finally:
        subprocess.run(["umount", "-l", state])


run(test)
