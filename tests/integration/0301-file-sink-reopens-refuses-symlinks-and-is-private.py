"""The file sink reopens its path, refuses a symbolic link there, and creates its output 0600.

After logrotate's rename + create, or an rm, changes used to go on into the old (or deleted) inode
and were acknowledged: nobody ever saw them. Now the sink reopens the path when it no longer names
the open file, and on SIGHUP. A symlink at the path was followed and the torn-tail repair cut the
file it pointed at: it is refused unless follow_symlinks = true. Under umask 022 the output was
0644 (Secret-derived data readable by every user): it is created with file_mode, default 0600."""
import os
import signal
import stat
import subprocess
from kbtest import *


def names_in(path):
    try:
        return [json.loads(l)["name"] + "@" + json.loads(l)["resourceVersion"] for l in open(path) if l.strip()]
    except FileNotFoundError:
        return []


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def update(sim, name):
    rv = sim.bulk(pod_ops("update", "ns1", [name], labels={"n": str(time.monotonic_ns())}))["resourceVersion"]
    return "%s@%s" % (name, rv)


def test():
    os.umask(0o022)
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a", "b"]))
    b = Bridge(sim)
    b.wait_converged(sim)
    check(mode(b.out) == 0o600, "output created 0600 under umask 022 (is %03o)" % mode(b.out))

    # 1. logrotate: rename + create.
    os.rename(b.out, b.out + ".1")
    open(b.out, "w").close()
    want = update(sim, "a")
    wait_for(lambda: want in names_in(b.out), 30, what="the change in the new file after rename + create")
    check(want not in names_in(b.out + ".1"), "the change did not go to the renamed file")

    # 2. rm: the path is created again.
    os.unlink(b.out)
    want = update(sim, "b")
    wait_for(lambda: want in names_in(b.out), 30, what="the change in a new file after rm")
    check(mode(b.out) == 0o600, "the re-created output is 0600 (is %03o)" % mode(b.out))

    # 3. SIGHUP reopens.
    # The reload thread asks the sink to reopen before its next batch: the change is made once it has
    # (a change written before that would leave no next batch to reopen before).
    n_reloads = b.logtext().count("(and reopening file sinks)")
    b.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: b.logtext().count("(and reopening file sinks)") > n_reloads, 60, what="the SIGHUP's reload")
    want = update(sim, "a")
    wait_for(lambda: want in names_in(b.out), 30, what="the change after SIGHUP")
    wait_for(lambda: "reopened (SIGHUP)" in b.logtext(), 30, what="the reopen on SIGHUP in the log")
    check(b.stop() == 0, "clean stop")

    # 4. A symlink at the path is refused, and its target keeps its torn tail.
    d = tempfile.mkdtemp(prefix="kbtest-")
    target = os.path.join(d, "precious")
    with open(target, "w") as f:
        f.write("line one\nnot newline-terminated")
    link = os.path.join(d, "out.jsonl")
    os.symlink(target, link)
    b2 = Bridge(sim, workdir=d, out=link, start=False)
    p = subprocess.run([KBRIDGE, "--config", b2.config], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2, "a symlinked path is refused with exit 2 (rc %d): %s" % (p.returncode, p.stderr))
    check("symbolic link" in p.stderr and "follow_symlinks" in p.stderr, "the error says why: %s" % p.stderr)
    check(open(target).read() == "line one\nnot newline-terminated", "the link's target was not touched")

    # 5. follow_symlinks = true writes through it; file_mode is honoured; a bad file_mode is a config error.
    d3 = tempfile.mkdtemp(prefix="kbtest-")
    out3 = os.path.join(d3, "o.jsonl")
    b3 = Bridge(sim, workdir=d3, sinks=['{ name = "out"; type = "file"; path = "%s"; file_mode = "0640"; }' % out3,
                                        '{ name = "l"; type = "file"; path = "%s"; follow_symlinks = true; }' % link],
                routes=['{ informer = "pods"; sink = "out"; }', '{ informer = "pods"; sink = "l"; }'])
    b3.out = out3
    b3.wait_converged(sim)
    check(mode(out3) == 0o640, "file_mode = \"0640\" gives 0640 (is %03o)" % mode(out3))
    wait_for(lambda: '"name":"a"' in open(target).read(), 30,
             what="the change written through the followed link")
    check(b3.stop() == 0, "clean stop")
    d4 = tempfile.mkdtemp(prefix="kbtest-")
    b4 = Bridge(sim, workdir=d4, sinks=['{ name = "out"; type = "file"; path = "%s/x"; file_mode = "rw-"; }' % d4],
                start=False)
    p = subprocess.run([KBRIDGE, "--config", b4.config, "--check"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "file_mode" in p.stderr, "a bad file_mode fails --check: %d %s" % (p.returncode,
                                                                                                     p.stderr))
    sim.stop()


run(test)
