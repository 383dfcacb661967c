#!/usr/bin/env bash
# Installs the Debian packages inflight needs to build and test, when missing.
# As root it runs apt-get; otherwise it prints the exact command and stops.
set -eu
pkgs=(gcc make pkg-config libpcre2-dev libicu-dev xz-utils libjansson-dev libmicrohttpd-dev libpng-dev libturbojpeg0-dev libcurl4-openssl-dev nodejs npm curl python3-jsonschema clang-format python3-dev python3-pytest python3-venv openmpi-bin libopenmpi-dev haproxy)
# the playground's browser test (tests/test_playground.sh): headless chromium
pkgs+=(chromium chromium-driver)
missing=()
for p in "${pkgs[@]}"; do
    # node may come from elsewhere (nodesource bundles npm): a working command is enough
    case "$p" in nodejs) command -v node >/dev/null && continue ;; npm | curl) command -v "$p" >/dev/null && continue ;; esac
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "inflight needs these Debian packages; as root run:" >&2
    echo "  apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
