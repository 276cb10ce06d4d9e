#!/usr/bin/env bash
# Install what kbridge needs to build and test, on Debian 12, if it is missing.
# Safe to run again: it only calls apt-get when a package is absent.
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang python3 openssl procps
      libcurl4-openssl-dev libconfig-dev libjansson-dev libyajl-dev liblmdb-dev
      libmicrohttpd-dev libyaml-dev libzstd-dev libcmocka-dev librdkafka-dev
      libpaho-mqtt-dev mosquitto mosquitto-clients kcat kubectl)
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
python3 -c 'import prometheus_client' 2>/dev/null || python3 -m pip install -q prometheus-client
