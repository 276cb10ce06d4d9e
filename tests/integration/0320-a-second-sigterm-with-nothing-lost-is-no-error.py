"""A second SIGTERM while draining, with every message acknowledged, is not an ERROR and exits 0.

`timeout 8 kbridge --demo` is how many people first run kbridge: GNU timeout sends SIGTERM to the child
and then to its process group, so kbridge gets a second SIGTERM while it drains. The drain stops at
once; when the sinks had acknowledged everything nothing is lost, and the last line must say so at
INFO, with exit status 0 (the same as a drain that ended on its own). The test sends the two signals as
timeout does (child, then group), the second once the first was taken (its pending bit cleared), and
tries again when the drain ended before the second arrived (then the path was not exercised).
Before the fix the line was `ERROR … a second SIGTERM while draining: stopped at once: every message
handed to a sink was acknowledged`, exit status 1. (Messages left unacknowledged still end in a WARN
or ERROR saying what happens to them: 0300.)"""
import signal
import subprocess
import threading
from kbtest import *

SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def pending_sigterm(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("ShdPnd:"):
                    return int(line.split()[1], 16) & SIGTERM_BIT
    except OSError:
        return 0
    return 0


def run_once(d, attempt):
    log = os.path.join(d, "demo-%d.log" % attempt)
    with open(log, "w") as err:
        p = subprocess.Popen([KBRIDGE, "--demo"], stdout=subprocess.PIPE, stderr=err, text=True,
                             start_new_session=True)
    lines = []

    def reader():
        for line in p.stdout:
            lines.append(line)
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    wait_for(lambda: len(lines) >= 20, 30, what="20 envelopes on stdout")
    os.kill(p.pid, signal.SIGTERM)  # timeout(1): first the child...
    wait_for(lambda: not pending_sigterm(p.pid), 10, 0.0001, "kbridge to take the first SIGTERM")
    try:
        os.killpg(p.pid, signal.SIGTERM)  # ...then its process group
    except ProcessLookupError:
        pass
    rc = p.wait(30)
    t.join(5)
    with open(log) as f:
        return rc, f.read()


def test():
    d = tempfile.mkdtemp(prefix="kbtest-")
    for attempt in range(10):
        rc, text = run_once(d, attempt)
        if "second SIGTERM" in text:
            break
        print("attempt %d: the drain ended before the second SIGTERM (rc %d); again" % (attempt, rc))
    else:
        raise Failure("ten tries and the second SIGTERM never arrived while draining:\n%s" % text[-1500:])
    last = [l for l in text.splitlines() if " main: " in l][-1]
    errors = [l for l in text.splitlines() if " ERROR " in l]
    check(not errors, "nothing was lost, yet the stop logged an ERROR: %s" % errors)
    check("every message handed to a sink was acknowledged" in last and " INFO " in last,
          "the last line says, at INFO, that nothing was lost: %s" % last)
    check(rc == 0, "nothing lost: exit status 0 (rc %s)\n%s" % (rc, text[-1500:]))


run(test)
