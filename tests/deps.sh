#!/usr/bin/env bash
# Install what kbridge needs to build and test, on Debian 12, if it is missing.
# The packages are listed in tests/deps.list; tests/deps-check.sh checks that
# the suite uses nothing else. Safe to run again: it only calls apt-get when a
# package is absent.
set -euo pipefail
here=$(dirname "$0")
mapfile -t pkgs < <(sed -e 's/#.*//' -e '/^base /d' -e '/^[[:space:]]*$/d' "$here/deps.list")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The metrics test reads /metrics with the Prometheus project's own parser.
python3 -c 'import prometheus_client' 2>/dev/null ||
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore prometheus-client
# The Helm chart tests (0756, 0757) read helm template's YAML with PyYAML.
python3 -c 'import yaml' 2>/dev/null ||
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore pyyaml
