"""`cmake --install` into a DESTDIR puts down what a package needs: the
binary (which runs), kbridge.1 (man -l renders it, with every option of
--help and every key of --help-config), the bash completion (which
completes kbridge's options and files after --config), LICENSE, CHANGELOG
and the docs."""
import shutil
import subprocess
from kbtest import *


def test():
    root = tempfile.mkdtemp(prefix="kbinstall-")
    env = dict(os.environ, DESTDIR=root)
    r = subprocess.run(["cmake", "--install", BUILD, "--prefix", "/usr"], capture_output=True, text=True,
                       timeout=300, env=env)
    check(r.returncode == 0, "cmake --install: %s %s" % (r.stdout[-2000:], r.stderr[-2000:]))
    usr = os.path.join(root, "usr")
    want = ["bin/kbridge", "share/man/man1/kbridge.1", "share/bash-completion/completions/kbridge",
            "share/doc/kbridge/LICENSE", "share/doc/kbridge/CHANGELOG.md", "share/doc/kbridge/README.md",
            "share/doc/kbridge/docs/configuration.md", "share/doc/kbridge/docs/envelope.md"]
    for rel in want:
        check(os.path.isfile(os.path.join(usr, rel)), "%s installed (%s)" % (rel, r.stdout[-1500:]))
    exe = os.path.join(usr, "bin/kbridge")
    check(os.access(exe, os.X_OK), "the binary is executable")
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    check(ver.returncode == 0 and ver.stdout.startswith("kbridge "), "installed kbridge runs: %r" % (ver,))

    page = os.path.join(usr, "share/man/man1/kbridge.1")
    m = subprocess.run(["man", "-l", page], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MANWIDTH="120", MANPAGER="cat", PAGER="cat"))
    check(m.returncode == 0 and not m.stderr.strip(), "man -l renders the page cleanly: %r" % m.stderr[:2000])
    text = m.stdout
    for section in ("NAME", "SYNOPSIS", "OPTIONS", "SIGNALS", "EXIT STATUS", "ENVIRONMENT", "CONFIGURATION"):
        check(re.search(r"^%s$" % section, text, re.M), "section %s in the page" % section)
    helptext = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30).stdout
    for opt in set(re.findall(r"--[a-z][a-z-]+", helptext)):
        check(opt in text, "option %s of --help is in the man page" % opt)
    keys = subprocess.run([exe, "--help-config"], capture_output=True, text=True, timeout=30).stdout
    for key in re.findall(r"^  (\S+)", keys, re.M):
        check(key in text, "config key %s is in the man page" % key)

    comp = os.path.join(usr, "share/bash-completion/completions/kbridge")
    def complete(*words):
        script = ('source "%s"; COMP_WORDS=(%s); COMP_CWORD=%d; _kbridge; printf "%%s\\n" "${COMPREPLY[@]}"'
                  % (comp, " ".join("'%s'" % w for w in words), len(words) - 1))
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, cwd=root)
        check(out.returncode == 0, "completion ran: %r" % out.stderr)
        return out.stdout.split()
    check(sorted(complete("kbridge", "--help")) == ["--help", "--help-bash-completion", "--help-config",
                                                      "--help-man"], "completes --help…: %r" % complete("kbridge", "--help"))
    check(complete("kbridge", "--config", "us") == ["usr"], "completes a file after --config")
    shutil.rmtree(root)


import re
run(test)
