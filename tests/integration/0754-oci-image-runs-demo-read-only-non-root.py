#!/usr/bin/env python3
"""deploy/image/build.sh builds an OCI image without a container daemon (mmdebstrap + umoci, Debian's
packages): its config runs /usr/local/bin/kbridge as user 65532 (not root); the root holds the runtime
libraries and CA bundle but no shell, no package manager, no compiler; and the image's kbridge runs
--demo from the unpacked root (chroot in a private mount namespace: the root bind-mounted read-only,
/proc and a tmpfs /tmp mounted as a runtime does), streaming envelopes and exiting 0 on SIGINT.
(Not `podman run`: in this project's CI sandbox podman 4.3 pulls the image from the OCI layout but
crun fails with "setrlimit `RLIMIT_NPROC`: Operation not permitted"; chroot needs only util-linux.)
The root filesystem is cached keyed on the package list: a second build repacks without mmdebstrap."""
import atexit
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading

from kbtest import KBRIDGE, SOURCE, check, run, wait_for

BUILD = os.path.join(SOURCE, "deploy", "image", "build.sh")


def build(out):
    r = subprocess.run([BUILD, "--kbridge", KBRIDGE, "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=900)
    check(r.returncode == 0, "build.sh -> %d:\n%s" % (r.returncode, r.stderr[-3000:]))
    return r.stdout.strip().splitlines()[-1], r.stderr


def test():
    work = tempfile.mkdtemp(prefix="kbtest-image-")
    atexit.register(shutil.rmtree, work, True)  # two copies of the image: ~60 MB
    out = os.path.join(work, "oci")
    ref, log = build(out)
    print(log.strip()[-600:])
    # Built again with the same libraries: from the cached root, no mmdebstrap run.
    ref, log = build(out)
    check("root filesystem for" not in log, "the second build ran mmdebstrap again:\n%s" % log)
    with open(os.path.join(out, "index.json")) as f:
        index = json.load(f)
    check(index["manifests"], "no manifest in the OCI layout")

    bundle = os.path.join(work, "bundle")
    subprocess.run(["umoci", "unpack", "--image", ref, bundle], check=True, stdout=subprocess.DEVNULL, timeout=300)
    with open(os.path.join(bundle, "config.json")) as f:
        proc = json.load(f)["process"]
    user = proc["user"]
    check(user["uid"] == 65532 and user["gid"] == 65532, "the image runs as %s, want 65532:65532" % user)
    check(proc["args"][0] == "/usr/local/bin/kbridge", "entrypoint %s" % proc["args"])
    root = os.path.join(bundle, "rootfs")
    for absent in ("bin/sh", "usr/bin/apt", "usr/bin/dpkg", "usr/bin/gcc", "usr/bin/cc"):
        check(not os.path.lexists(os.path.join(root, absent)), "the image carries /%s" % absent)
    for present in ("etc/ssl/certs/ca-certificates.crt", "etc/ld.so.cache", "var/lib/kbridge", "etc/passwd"):
        check(os.path.exists(os.path.join(root, present)), "the image lacks /%s" % present)
    check(os.stat(os.path.join(root, "var/lib/kbridge")).st_uid == 65532, "state_dir not owned by 65532")

    # As a runtime would: the entrypoint with the arguments given to `run` (--demo), as the image's
    # user, on a read-only root. unshare without --fork execs, so the pid is kbridge's in the end.
    args = " ".join("'%s'" % a for a in [proc["args"][0], "--demo"])
    mount, chroot = shutil.which("mount"), shutil.which("chroot")
    script = ('set -e; r="$1"; {m} --bind "$r" "$r"; {m} -o remount,bind,ro "$r"; '
              '{m} -t proc proc "$r/proc"; {m} -t tmpfs -o size=16m,mode=1777 tmpfs "$r/tmp"; '
              'exec {c} --userspec={u}:{g} "$r" {a}').format(m=mount, c=chroot, u=user["uid"], g=user["gid"], a=args)
    env = dict(p.split("=", 1) for p in proc["env"])
    env["ASAN_OPTIONS"] = "detect_leaks=0"  # a sanitizer build in CI; LeakSanitizer needs ptrace
    p = subprocess.Popen([shutil.which("unshare"), "--mount", "--propagation", "private", shutil.which("sh"), "-c",
                          script, "sh", root],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines, err = [], []
    t = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)
    t.start()
    threading.Thread(target=lambda: err.extend(p.stderr), daemon=True).start()
    try:
        wait_for(lambda: len(lines) >= 20 or p.poll() is not None, 60, what="20 envelopes from the image's kbridge")
        check(len(lines) >= 20, "the image's kbridge exited %s:\n%s" % (p.poll(), "".join(err)[-3000:]))
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
        rc = p.wait(30)
    t.join(5)
    check(rc == 0, "SIGINT: exit %d\n%s" % (rc, "".join(err)[-2000:]))
    evs = [json.loads(l) for l in lines]
    check(all(e["cluster"] == "demo" and e["kind"] == "Pod" for e in evs), "demo envelopes are pods")
    print("%d envelopes from the image's kbridge (uid %d, read-only root)" % (len(evs), user["uid"]))


run(test)
