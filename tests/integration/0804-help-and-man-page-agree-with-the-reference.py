#!/usr/bin/env python3
"""--help and the man page agree with the configuration reference: the settings they say need a restart
are exactly those docs/configuration.md marks "a change needs a restart" (a group stands for all of its
keys); the man page's SYNOPSIS names every option of --help; and the man page, rendered 80 columns wide,
has no line longer than 80 in its CONFIGURATION section (nor anywhere else)."""
import re
import subprocess

from kbtest import KBRIDGE, SOURCE, check, os, run


def out(*args, **kw):
    r = subprocess.run([KBRIDGE] + list(args), capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"), **kw)
    check(r.returncode == 0, "kbridge %s -> %d: %s" % (" ".join(args), r.returncode, r.stderr))
    return r.stdout


def restart_keys():
    with open(os.path.join(SOURCE, "docs", "configuration.md")) as f:
        text = f.read()
    keys = re.findall(r"^### `([^`]+)`\n\n[^\n]*a change needs a restart", text, re.M)
    check(len(keys) > 20, "configuration.md marks only %d keys restart-only" % len(keys))
    return set(keys)


def covered(named, keys):
    """The keys that the names (keys or groups) stand for."""
    return {k for k in keys if k in named or k.split(".")[0] in named}


def restart_names(text, where):
    m = re.search(r"\(an invalid one is refused and the running one kept; (.*?) need(?:s)? a restart\)", text, re.S)
    check(m, "%s does not say which settings need a restart:\n%s" % (where, text[:3000]))
    words = re.sub(r"\s+", " ", m.group(1)).replace(" and ", ", ").replace("changes to ", "").replace(" changes", "")
    return {w.strip().strip("`") for w in words.split(",") if w.strip()}


def test():
    keys = restart_keys()
    helptext = out("--help")
    roff = out("--help-man")
    rendered = subprocess.run(["man", "-l", "-"], input=roff, capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, MANWIDTH="80", MANPAGER="cat", PAGER="cat")).stdout
    for where, text in (("--help", re.sub(r"\s+", " ", helptext)), ("the man page", re.sub(r"\s+", " ", rendered))):
        named = restart_names(text, where)
        missing = sorted(keys - covered(named, keys))
        check(not missing, "%s leaves out restart-only settings: %s (it names %s)" % (where, missing, sorted(named)))
        extra = sorted(n for n in named if not covered({n}, keys))
        check(not extra, "%s names settings that apply on SIGHUP: %s" % (where, extra))

    synopsis = rendered.split("SYNOPSIS", 1)[1].split("DESCRIPTION", 1)[0]
    opts = re.findall(r"--([a-z][a-z-]+)", helptext.split("\n\n", 2)[2])
    check(len(opts) >= 8, "--help lists %s" % opts)
    absent = [o for o in opts if "--" + o not in synopsis]
    check(not absent, "SYNOPSIS leaves out %s:\n%s" % (absent, synopsis))

    config = rendered.split("\nCONFIGURATION", 1)
    check(len(config) == 2, "no CONFIGURATION section")
    long_lines = [l for l in rendered.splitlines() if len(l) > 80]
    check(not long_lines, "%d man page lines over 80 columns, e.g.:\n%s" % (len(long_lines), "\n".join(long_lines[:5])))
    print("restart-only: %d keys; SYNOPSIS: %d options; %d lines rendered" % (len(keys), len(opts),
                                                                             len(rendered.splitlines())))


run(test)
