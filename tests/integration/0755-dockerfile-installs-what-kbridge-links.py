#!/usr/bin/env python3
"""deploy/Dockerfile installs what kbridge needs: its build stage's apt-get line names the Debian package
that owns every pkg-config file and library CMakeLists.txt requires (so `cmake` finds them), and its
runtime stage's apt-get line names the package that owns every shared library the kbridge binary links
directly (readelf NEEDED, resolved with ldd, owner from dpkg -S), unless debian:bookworm-slim already
carries it (the C library, which its own programs link). (The image cannot be built here: no registry is
reachable for the base image, so this compares the Dockerfile with this Debian 12 host, which is what
deploy/image/build.sh does for the image 0754 builds.)"""
import os
import re
import subprocess

from kbtest import KBRIDGE, SOURCE, check, run

DOCKERFILE = os.path.join(SOURCE, "deploy", "Dockerfile")
CMAKELISTS = os.path.join(SOURCE, "CMakeLists.txt")
IN_BASE_IMAGE = {"libc6", "libgcc-s1"}  # dependencies of bookworm-slim's essential packages
SANITIZER_RUNTIMES = re.compile(r"^lib(asan|ubsan|tsan|lsan)\.so")  # build flags, not dependencies


def sh(*args):
    return subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)


def stages():
    """The packages each FROM stage installs with apt-get install, in order."""
    with open(DOCKERFILE) as f:
        text = f.read().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        if line.startswith("FROM "):
            out.append(set())
        for m in re.finditer(r"apt-get install ([^&;]*)", line):
            out[-1].update(w for w in m.group(1).split() if not w.startswith("-"))
    return out


def owner(path):
    """The package owning path as named (a -dev package owns the unversioned .so symlink), else the file
    it resolves to; dpkg knows a merged-/usr path under its /lib or its /usr/lib spelling."""
    named, real = os.path.normpath(path), os.path.realpath(path)
    for p in (named, "/usr" + named, named[len("/usr"):], real, real[len("/usr"):]):
        r = sh("dpkg", "-S", p)
        if r.returncode == 0:
            return r.stdout.split(":")[0].strip()
    check(False, "no Debian package owns %s" % path)


def required_by_cmake():
    """Paths of the pkg-config files and libraries that CMakeLists.txt requires."""
    with open(CMAKELISTS) as f:
        text = f.read()
    paths = []
    for m in re.finditer(r"pkg_check_modules\(\w+ REQUIRED IMPORTED_TARGET ([\w.+-]+)\)", text):
        r = sh("pkg-config", "--variable=pcfiledir", m.group(1))
        check(r.returncode == 0, "pkg-config does not know %s" % m.group(1))
        paths.append(os.path.join(r.stdout.strip(), m.group(1) + ".pc"))
    for m in re.finditer(r"find_library\(\w+ ([\w.+-]+) REQUIRED\)", text):
        r = sh("cc", "-print-file-name=lib%s.so" % m.group(1))
        check(os.path.isabs(r.stdout.strip()), "no lib%s.so for cc" % m.group(1))
        paths.append(r.stdout.strip())
    check(len(paths) >= 10, "found only %d requirements in CMakeLists.txt" % len(paths))
    return paths


def linked_libraries():
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", sh("readelf", "-d", KBRIDGE).stdout)
    where = dict(re.findall(r"^\s*(\S+) => (/\S+)", sh("ldd", KBRIDGE).stdout, re.M))
    libs = [n for n in needed if not SANITIZER_RUNTIMES.match(n)]
    check(libs and all(n in where for n in libs), "ldd does not resolve %s" % libs)
    return [where[n] for n in libs]


def test():
    build, runtime = stages()[:2]
    missing = sorted({"%s (owns %s)" % (owner(p), p) for p in required_by_cmake() if owner(p) not in build})
    check(not missing, "the build stage does not install: %s" % ", ".join(missing))
    missing = sorted({"%s (owns %s)" % (owner(p), p) for p in linked_libraries()
                      if owner(p) not in runtime | IN_BASE_IMAGE})
    check(not missing, "the runtime stage does not install: %s" % ", ".join(missing))
    print("build stage: %s\nruntime stage: %s" % (" ".join(sorted(build)), " ".join(sorted(runtime))))


run(test)
