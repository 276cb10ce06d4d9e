#!/usr/bin/env bash
# deploy/image/build.sh — build kbridge's OCI image without a container daemon.
#
#   deploy/image/build.sh [--kbridge PATH] [--out DIR] [--tag TAG]
#
# Writes an OCI image layout to DIR (default build-image/oci) with the image
# kbridge:TAG (default: the binary's --version). Load it where you need it, e.g.
#   skopeo copy oci:build-image/oci:0.1.0 docker://registry.example/kbridge:0.1.0
#   podman load -i <(tar -C build-image/oci -c .)   # or: podman pull oci:build-image/oci:0.1.0
# Without --kbridge it builds a Release kbridge in build-image/build first.
#
# Design: the root filesystem is Debian bookworm made by mmdebstrap with
# --variant=extract: the packages that own the libraries the kbridge binary
# links (found with ldd and dpkg -S on this Debian 12 host, so the image has
# exactly the runtime libraries, no compilers, no shell, no apt) plus
# ca-certificates, and their dependencies, unpacked without running any
# maintainer script (so no chroot and no privileges beyond writing files).
# What those scripts would have done and kbridge needs is done here: the CA
# bundle, the loader cache (ldconfig -r), the user 65532 in /etc/passwd and
# /etc/group, /var/lib/kbridge owned by it. The root is cached under
# ${KB_CACHE_DIR:-$HOME/.cache/kbridge}/image-root/ keyed on the package list
# and the mirrors, so a rebuild with the same libraries only repacks.
# umoci then makes the image: one layer, user 65532:65532, entrypoint
# kbridge --config /etc/kbridge/kbridge.cfg, state_dir a volume. Nothing in it
# needs to be written at run time: it runs with a read-only root filesystem
# (mount state_dir and /tmp).
#
# Needs mmdebstrap and umoci (Debian packages) and the Debian mirror that apt
# uses (KB_IMAGE_MIRROR, default http://deb.debian.org). Exit 0 ok, 1 failed, 2 usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
export HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
CACHE_DIR=${KB_CACHE_DIR:-$HOME/.cache/kbridge}/image-root
MIRROR=${KB_IMAGE_MIRROR:-http://deb.debian.org}
SUITE=bookworm
UID_GID=65532
kbridge="" out=$src/build-image/oci tag=""
say() { echo "build.sh: $*" >&2; }
usage() { sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
    case $1 in
    --kbridge) kbridge=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) say "unknown argument \"$1\" (try --help)"; exit 2 ;;
    esac
done
for cmd in mmdebstrap umoci ldd dpkg ldconfig; do
    command -v "$cmd" >/dev/null || { say "$cmd not found (apt-get install mmdebstrap umoci)"; exit 1; }
done

if [[ -z $kbridge ]]; then
    cmake -S "$src" -B "$src/build-image/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    nice cmake --build "$src/build-image/build" --target kbridge -j2 >/dev/null
    kbridge=$src/build-image/build/kbridge
fi
[[ -x $kbridge ]] || { say "$kbridge is not an executable"; exit 1; }
[[ -n $tag ]] || tag=$("$kbridge" --version | awk '{print $NF}')

# The packages owning every library the binary loads (dpkg knows the /lib and
# the /usr/lib spelling of a merged-/usr path under one of the two).
packages() {
    local lib real owner
    ldd "$kbridge" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | while read -r lib; do
        real=$(readlink -f "$lib")
        owner=$(dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || dpkg -S "$lib" 2>/dev/null) ||
            { say "no Debian package owns $lib (linked by $kbridge)"; return 1; }
        echo "${owner%%:*}"
    done
    echo ca-certificates
}
pkgs=$(packages | sort -u | paste -sd, -)
sources=("deb $MIRROR/debian $SUITE main" "deb $MIRROR/debian $SUITE-updates main"
         "deb $MIRROR/debian-security $SUITE-security main")
key=$(printf '%s\n' "$pkgs" "${sources[@]}" | sha256sum | cut -c1-16)
root_tar=$CACHE_DIR/$key.tar
mkdir -p "$CACHE_DIR"
if [[ ! -f $root_tar ]]; then
    say "root filesystem for $pkgs (first build with this list; cache: $root_tar)"
    nice mmdebstrap --quiet --variant=extract --include="$pkgs" "$SUITE" "$CACHE_DIR/$key.partial.tar" "${sources[@]}" \
        >"$CACHE_DIR/$key.log" 2>&1 || { tail -20 "$CACHE_DIR/$key.log" >&2; rm -f "$CACHE_DIR/$key.partial.tar"; exit 1; }
    mv "$CACHE_DIR/$key.partial.tar" "$root_tar"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"
mkdir -p "$(dirname "$out")"
umoci init --layout "$out"
umoci new --image "$out:$tag"
umoci unpack --image "$out:$tag" "$work/bundle" >/dev/null
root=$work/bundle/rootfs
tar -xf "$root_tar" -C "$root" --exclude=./dev/*

# What the maintainer scripts would have done, as far as kbridge needs it.
cat "$root"/usr/share/ca-certificates/mozilla/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"
ldconfig -r "$root"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nkbridge:x:%d:%d:kbridge:/nonexistent:/usr/sbin/nologin\n' \
    $UID_GID $UID_GID >"$root/etc/passwd"
printf 'root:x:0:\nkbridge:x:%d:\n' $UID_GID >"$root/etc/group"
install -d -m 0755 "$root/etc/kbridge" "$root/usr/local/bin" "$root/tmp" "$root/proc" "$root/sys" "$root/dev"
chmod 1777 "$root/tmp"
install -d -m 0750 -o $UID_GID -g $UID_GID "$root/var/lib/kbridge"
install -m 0755 "$kbridge" "$root/usr/local/bin/kbridge"
rm -rf "$root/var/cache/apt" "$root/var/lib/apt" "$root/usr/share/doc" "$root/usr/share/man"

umoci repack --image "$out:$tag" "$work/bundle"
umoci config --image "$out:$tag" --config.user "$UID_GID:$UID_GID" \
    --config.entrypoint /usr/local/bin/kbridge --config.cmd --config --config.cmd /etc/kbridge/kbridge.cfg \
    --config.exposedports 9464/tcp --config.volume /var/lib/kbridge --config.workingdir / \
    --config.label org.opencontainers.image.title=kbridge --config.label "org.opencontainers.image.version=$tag" \
    --config.env PATH=/usr/local/bin:/usr/bin:/bin
umoci gc --layout "$out"
say "image $out:$tag ($(du -sh "$out" | cut -f1)), packages: $pkgs"
echo "$out:$tag"
