"""state_dir is created 0700 and data.mdb 0600 under umask 022; a truncated data.mdb is named, not a crash.

A data.mdb cut short (a full disk during a copy, a bad restore) used to kill kbridge with SIGBUS at
start (exit 135, nothing printed). Now it exits 2 naming the file, its size, what its meta page
expects and what to do."""
import os
import stat
import subprocess
from kbtest import *


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test():
    os.umask(0o022)
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(300)], extra={"spec": {"pad": "y" * 2000}}))
    d = tempfile.mkdtemp(prefix="kbtest-")
    state = os.path.join(d, "state")
    b = Bridge(sim, workdir=d, extra='state_dir = "%s";' % state)
    b.wait_converged(sim)
    check(b.stop() == 0, "clean stop")
    mdb = os.path.join(state, "pods", "data.mdb")
    check(mode(state) == 0o700, "state_dir created 0700 (is %03o)" % mode(state))
    check(mode(os.path.join(state, "pods")) == 0o700, "the informer's directory is 0700")
    check(mode(mdb) == 0o600, "data.mdb is 0600 (is %03o)" % mode(mdb))

    size = os.path.getsize(mdb)
    check(size > 64 * 1024, "data.mdb holds the objects (%d bytes)" % size)
    os.truncate(mdb, 16384)
    p = subprocess.run([KBRIDGE, "--config", b.config], capture_output=True, text=True, timeout=120)
    check(p.returncode == 2, "a truncated data.mdb exits 2, not a crash (rc %d): %s" % (p.returncode, p.stderr[-2000:]))
    check(mdb in p.stderr and "truncated" in p.stderr and "16384 bytes" in p.stderr,
          "the error names the file and its size: %s" % p.stderr[-2000:])
    check("remove the directory" in p.stderr or "backup" in p.stderr, "and says what to do: %s" % p.stderr)
    sim.stop()


run(test)
