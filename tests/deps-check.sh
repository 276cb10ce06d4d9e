#!/usr/bin/env bash
# tests/deps-check.sh — the guard that the test suite runs on what tests/deps.sh
# installs, and on nothing that was installed by hand.
#
# Design note. A suite can pass on a developer's machine and fail on a fresh
# one because a package was installed by hand once (the fuzz targets needed
# libclang-rt-14-dev, which clang only recommends). So this script probes every
# compiler runtime, library and command the suite uses — the runtimes by
# asking the compilers which files a sanitizer or libFuzzer link takes, and by
# linking one — and asks dpkg which package owns each file. That package must
# be in the dependency closure (Depends and Pre-Depends, no Recommends, as
# deps.sh installs) of tests/deps.list. A command that no package owns must be
# one of the list's `base` entries (the image's own Go and Python). Anything
# else fails the run, naming the file, its package and the fix.
#
# Usage: tests/deps-check.sh    exit 0 when every probe passes, 1 otherwise.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
list=$here/deps.list
fail=0
bad() { echo "deps-check: $*" >&2; fail=1; }

mapfile -t pkgs < <(sed -e 's/#.*//' -e '/^base /d' -e '/^[[:space:]]*$/d' "$list")
declare -A closure=() base=()
while read -r p; do closure[${p%%:*}]=1; done < <(
    apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts \
        --no-breaks --no-replaces --no-enhances "${pkgs[@]}" 2>/dev/null | grep -v '^[[:space:]]' | tr -d '<>')
while read -r _ cmd prefix; do base[$cmd]=$prefix; done < <(grep -E '^base ' "$list")
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        bad "package $p (tests/deps.list) is not installed: run tests/deps.sh"
done

owned() { # file what → checks that a package of the closure owns file
    local f=$1 what=$2 real owner
    real=$(readlink -f "$f")
    owner=$(dpkg -S "$real" 2>/dev/null | head -1 | cut -d: -f1)
    [ -n "$owner" ] || owner=$(dpkg -S "$f" 2>/dev/null | head -1 | cut -d: -f1)
    [ -n "$owner" ] || owner=$(dpkg -S "${real#/usr}" 2>/dev/null | head -1 | cut -d: -f1)  # usrmerge: /usr/bin/ps is /bin/ps
    if [ -z "$owner" ]; then
        bad "$what: $real belongs to no Debian package (add a 'base' line to tests/deps.list if the image ships it)"
    elif [ -z "${closure[$owner]:-}" ]; then
        bad "$what: $real comes from package $owner, which tests/deps.list does not bring in (installed by hand?): add $owner to tests/deps.list"
    fi
}

# Commands the build, the tests and the service scripts run.
for cmd in cc gcc clang cmake pkg-config make python3 openssl ps pgrep pkill \
           mosquitto mosquitto_pub mosquitto_sub kcat kubectl java mvn go man groff \
           prometheus promtool mmdebstrap umoci; do
    path=$(command -v "$cmd") || { bad "command $cmd not found: run tests/deps.sh"; continue; }
    if [ -n "${base[$cmd]:-}" ]; then
        case $(readlink -f "$path") in "${base[$cmd]}"*) continue ;; esac
        case $path in "${base[$cmd]}"*) continue ;; esac
    fi
    owned "$path" "command $cmd"
done

# Libraries, through the same pkg-config names CMakeLists.txt asks for.
for mod in libcurl libconfig jansson yajl yaml-0.1 lmdb libzstd libmicrohttpd rdkafka libmosquitto cmocka; do
    dir=$(pkg-config --variable=pcfiledir "$mod" 2>/dev/null) || { bad "pkg-config module $mod not found"; continue; }
    owned "$dir/$mod.pc" "pkg-config $mod"
done
paho=$(gcc -print-file-name=libpaho-mqtt3as.so)
[ -e "$paho" ] && owned "$paho" "library paho-mqtt3as" || bad "libpaho-mqtt3as.so not found"

# Compiler runtimes: link what the suite links (gcc with ASan+UBSan for the
# build, clang with libFuzzer+ASan+UBSan for the fuzz targets) and check the
# owner of every runtime archive or library the link names.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo 'int main(void){return 0;}' >"$tmp/m.c"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n){(void)d;(void)n;return 0;}' >"$tmp/f.c"
probe() { # name compiler flags... (last arg: source)
    local name=$1; shift
    if ! "$@" -o "$tmp/$name" >"$tmp/$name.log" 2>&1; then
        bad "cannot link the $name probe ($*): $(grep -m3 -E 'cannot find|error' "$tmp/$name.log" | tr '\n' ' ')"
        return
    fi
    local rt
    while read -r rt; do owned "$rt" "$name runtime"; done < <("$@" -### -o "$tmp/$name" 2>&1 | tr ' ' '\n' |
        tr -d '"' | grep -E '^/.*(clang_rt|asan|ubsan|lsan|fuzzer)[^/]*\.(a|so)$' | sort -u)
}
probe sanitizer gcc -fsanitize=address,undefined "$tmp/m.c"
for lib in asan ubsan; do
    f=$(gcc -print-file-name=lib$lib.so); [ -e "$f" ] && owned "$f" "gcc lib$lib" || bad "gcc has no lib$lib.so"
done
probe fuzzer clang -fsanitize=fuzzer,address,undefined "$tmp/f.c"
[ -x "$tmp/fuzzer" ] && ! "$tmp/fuzzer" -runs=1 >/dev/null 2>&1 && bad "the fuzzer probe links but does not run"

# Python modules the tests import that are not in the standard library.
python3 -c 'import prometheus_client' 2>/dev/null || bad "python module prometheus_client missing: run tests/deps.sh"
python3 -c 'import yaml' 2>/dev/null || bad "python module yaml (PyYAML) missing: run tests/deps.sh"

[ $fail -eq 0 ] && echo "deps-check: ${#pkgs[@]} packages, every tool, library and runtime the suite uses comes from tests/deps.list" >&2
exit $fail
